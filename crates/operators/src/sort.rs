//! Streaming `ORDER BY` on an ascending time attribute (Flink's
//! `TemporalSort`): on event time rows wait until the watermark passes
//! them and leave in time order, then by the other `ORDER BY` keys (then by
//! their values, so the order never depends on arrival); a row no later
//! than the last row released is late, dropped and counted, as in Flink.
//! On processing time rows leave as they arrive, each batch sorted by the
//! other keys (its rows arrived together). One subtask: the order is global.
//!
//! ```text
//!  input ──SINGLE──► TemporalSort(orderBy=[ts ASC, price DESC]) ──► rows in order
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, UInt32Array};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use datafusion_physical_expr::PhysicalExpr;

use crate::{Error, Result};
use weir_common::ids::CheckpointId;
use weir_common::time::Timestamp;
use weir_runtime::operator::{OperatorSnapshot, TaskMetrics};
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};
use weir_state::snapshot::{KEY_GROUP_COLUMN, schema_signature};

/// A streaming sort by a time attribute, then other keys.
#[derive(Debug, Clone)]
pub struct TemporalSort {
    /// The event-time column; `None`: processing time (arrival order).
    pub time: Option<usize>,
    /// The `ORDER BY` keys after the time attribute.
    pub then: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
    /// The input's (and output's) columns.
    pub schema: SchemaRef,
    /// Its name in the plan (EXPLAIN's), for errors and logs.
    pub name: String,
}

impl TemporalSort {
    /// `_key_group` (0: one subtask), `_time`, the input's columns.
    fn state_schema(&self) -> SchemaRef {
        let mut fields = vec![
            Field::new(KEY_GROUP_COLUMN, DataType::UInt32, false),
            Field::new("_time", DataType::Int64, false),
        ];
        fields.extend(self.schema.fields().iter().map(|f| f.as_ref().clone()));
        Arc::new(Schema::new(fields))
    }
}

impl OperatorFactory for TemporalSort {
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let keys = self
            .then
            .iter()
            .map(|(e, o)| Ok(SortField::new_with_options(e.data_type(&self.schema)?, *o)))
            .collect::<Result<Vec<_>>>()?;
        let rows = self
            .schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(Box::new(SortOperator {
            keys_of: RowConverter::new(keys)?,
            rows_of: RowConverter::new(rows)?,
            pending: BTreeMap::new(),
            last: Timestamp::MIN,
            seq: 0,
            metrics: ctx.metrics.clone(),
            spec: Arc::new(self.clone()),
        }))
    }
}

/// A waiting row's place: time, the other keys, its bytes, its arrival.
type Place = (Timestamp, Box<[u8]>, Box<[u8]>, u64);

struct SortOperator {
    spec: Arc<TemporalSort>,
    keys_of: RowConverter,
    rows_of: RowConverter,
    pending: BTreeMap<Place, ()>,
    /// The time of the last row released.
    last: Timestamp,
    seq: u64,
    metrics: Arc<TaskMetrics>,
}

impl SortOperator {
    /// The other keys of each row; `None` without other keys.
    fn keys(&self, data: &RecordBatch) -> Result<Option<arrow::row::Rows>> {
        if self.spec.then.is_empty() {
            return Ok(None);
        }
        let keys = self
            .spec
            .then
            .iter()
            .map(|(e, _)| Ok(e.evaluate(data)?.into_array(data.num_rows())?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        Ok(Some(self.keys_of.convert_columns(&keys)?))
    }

    /// Rows waiting, unless late.
    fn wait(&mut self, data: &RecordBatch, times: &[Timestamp]) -> Result<()> {
        let keys = self.keys(data)?;
        let rows = self.rows_of.convert_columns(data.columns())?;
        let mut late = 0;
        for (i, time) in times.iter().enumerate() {
            if *time == i64::MIN || *time <= self.last {
                late += 1;
                continue;
            }
            self.seq += 1;
            let key = keys.as_ref().map_or(&[][..], |k| k.row(i).data());
            self.pending
                .insert((*time, key.into(), rows.row(i).as_ref().into(), self.seq), ());
        }
        TaskMetrics::add(&self.metrics.late_records_dropped, late);
        Ok(())
    }
}

impl Operator for SortOperator {
    fn name(&self) -> String {
        self.spec.name.clone()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        let Some(column) = self.spec.time else {
            let Some(keys) = self.keys(&batch)? else {
                out.batch(batch);
                return Ok(());
            };
            let mut order: Vec<u32> = (0..batch.num_rows() as u32).collect();
            order.sort_by(|a, b| keys.row(*a as usize).cmp(&keys.row(*b as usize)));
            out.batch(arrow::compute::take_record_batch(
                &batch,
                &UInt32Array::from(order),
            )?);
            return Ok(());
        };
        let times = crate::join::window::millis(batch.column(column))?;
        self.wait(&batch, &times)
    }

    fn process_watermark(&mut self, watermark: Timestamp, out: &mut Output) -> Result<()> {
        let released = match watermark.checked_add(1) {
            Some(next) => {
                let waiting = self
                    .pending
                    .split_off(&(next, Box::from(&[][..]), Box::from(&[][..]), 0));
                std::mem::replace(&mut self.pending, waiting)
            }
            None => std::mem::take(&mut self.pending),
        };
        if let Some(((time, _, _, _), _)) = released.last_key_value() {
            self.last = self.last.max(*time);
            let parser = self.rows_of.parser();
            let columns = self
                .rows_of
                .convert_rows(released.keys().map(|(_, _, r, _)| parser.parse(r)))?;
            out.batch(RecordBatch::try_new(self.spec.schema.clone(), columns)?);
        }
        out.watermark(watermark);
        Ok(())
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        let rows = match self.pending.is_empty() {
            true => None,
            false => {
                let parser = self.rows_of.parser();
                let data = self
                    .rows_of
                    .convert_rows(self.pending.keys().map(|(_, _, r, _)| parser.parse(r)))?;
                let n = self.pending.len();
                let mut columns: Vec<ArrayRef> = vec![
                    Arc::new(UInt32Array::from(vec![0; n])),
                    Arc::new(arrow::array::Int64Array::from_iter_values(
                        self.pending.keys().map(|p| p.0),
                    )),
                ];
                columns.extend(data);
                Some(RecordBatch::try_new(self.spec.state_schema(), columns)?)
            }
        };
        Ok(Some(OperatorSnapshot::with_watermark(self.last, rows)))
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        self.last = self.last.max(snapshot.watermark(&self.spec.name)?);
        let Some(rows) = &snapshot.rows else {
            return Ok(());
        };
        OperatorSnapshot::check_columns(rows, &self.spec.state_schema(), &self.spec.name)?;
        let times = rows.column(1).as_primitive::<arrow::datatypes::Int64Type>();
        if times.null_count() > 0 {
            return Err(Error::State(format!(
                "{}: a waiting row without a time",
                self.spec.name.clone()
            )));
        }
        let data = RecordBatch::try_new(self.spec.schema.clone(), rows.columns()[2..].to_vec())?;
        let times: Vec<Timestamp> = times.values().to_vec();
        self.wait(&data, &times)
    }

    fn state_signature(&self) -> Result<Option<String>> {
        Ok(Some(schema_signature(&self.spec.state_schema())))
    }
}

#[cfg(test)]
mod tests {
    use crate::harness::Harness;

    fn sort() -> Harness {
        Harness::of(
            &[
                "CREATE TABLE bids (auction BIGINT, price BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) \
                 WITH ('connector' = 'datagen')",
                "CREATE TABLE out (auction BIGINT, price BIGINT, ts TIMESTAMP(3)) WITH ('connector' = 'blackhole')",
            ],
            "INSERT INTO out SELECT * FROM bids ORDER BY ts, price DESC",
            "TemporalSort",
            0,
        )
        .unwrap()
    }

    const T0: i64 = 1577836800000; // 2020-01-01T00:00:00

    #[test]
    fn rows_leave_in_time_order_then_by_the_other_keys_when_the_watermark_passes_them() {
        let mut h = sort();
        let rows = "1 10 2020-01-01T00:00:03\n2 20 2020-01-01T00:00:01\n3 30 2020-01-01T00:00:01\n4 40 2020-01-01T00:00:05";
        assert_eq!(h.push(rows).unwrap(), Vec::<String>::new());
        assert_eq!(
            h.watermark(T0 + 3000).unwrap(),
            vec![
                "+I 3 30 2020-01-01T00:00:01",
                "+I 2 20 2020-01-01T00:00:01",
                "+I 1 10 2020-01-01T00:00:03",
                &format!("wm {}", T0 + 3000),
            ]
        );
        assert_eq!(
            h.push("5 50 2020-01-01T00:00:02").unwrap(),
            Vec::<String>::new(),
            "late"
        );
        let snapshot = h.restart().unwrap().expect("state");
        assert_eq!(snapshot.rows.unwrap().num_rows(), 1, "the row of 00:00:05 waits");
        assert_eq!(
            h.push("6 60 2020-01-01T00:00:03").unwrap(),
            Vec::<String>::new(),
            "still late"
        );
        assert_eq!(
            h.watermark(T0 + 9000).unwrap(),
            vec!["+I 4 40 2020-01-01T00:00:05", &format!("wm {}", T0 + 9000)]
        );
    }
}
