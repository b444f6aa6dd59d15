//! TopN (Flink's `Rank` node): per partition, the rows ranked `start..=end`
//! by the ORDER BY of `ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...)`
//! filtered on the rank, over insert-only input (Flink's
//! `AppendOnlyTopNFunction`).
//!
//! A partition keeps at most `end` rows: a row ranked after them can never
//! come back up, as nothing leaves an insert-only input. A row that enters
//! shifts the rows after it down one rank; with the rank number in the output
//! each shifted rank is an update (`-U` old row, `+U` new row), a rank newly
//! filled an insert (`+I`). Rows with equal order keys rank in arrival order.
//!
//! ```text
//!  input ──HASH[partition]──► Rank(rankType=[ROW_NUMBER], rankRange=[rankStart=1, rankEnd=3], ...)
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, UInt32Array, UInt64Array};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt32Type};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use datafusion_physical_expr::PhysicalExpr;

use crate::changelog::{self, RowKind};
use crate::plan::changelog::ChangelogRole;
use crate::runtime::message::CheckpointId;
use crate::runtime::operator::OperatorSnapshot;
use crate::runtime::{Operator, OperatorFactory, Output, TaskContext};
use crate::state::snapshot::{KEY_GROUP_COLUMN, key_groups, schema_signature, sorted_state_rows};
use crate::{Error, Result};

/// A TopN: which rows, by what order, which ranks.
#[derive(Debug, Clone)]
pub struct TopN {
    /// `PARTITION BY` expressions over the input.
    pub partition: Vec<Arc<dyn PhysicalExpr>>,
    /// `ORDER BY` expressions over the input, each with its direction.
    pub order: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
    /// The first rank kept (1-based).
    pub start: u64,
    /// The last rank kept.
    pub end: u64,
    /// Ordered by processing time (a `PROCTIME()` attribute, Flink's
    /// deduplication): by arrival, not by value; `Some(false)` keeps the
    /// first rows (ascending: insert-only, as nothing can overtake them),
    /// `Some(true)` the last.
    pub arrival: Option<bool>,
    /// Whether the rank number is output (Flink's `outputRankNumber`).
    /// Without it, a row entering the ranks is `+I` and one leaving `-D`:
    /// no updates of the rows whose rank shifted.
    pub rank_output: bool,
    /// The input's columns (insert-only).
    pub input: SchemaRef,
    /// The input's columns, the rank (`UInt64`) when output, and the op column.
    pub schema: SchemaRef,
}

impl TopN {
    /// Whether it emits inserts only: the first rows by arrival.
    pub fn insert_only(&self) -> bool {
        self.arrival == Some(false)
    }

    /// The text EXPLAIN shows.
    pub fn describe(&self) -> String {
        if let (Some(last), (1, 1)) = (self.arrival, (self.start, self.end)) {
            let key: Vec<String> = self.partition.iter().map(|e| e.to_string()).collect();
            return format!(
                "Deduplicate(keep=[{}], key=[{}], order=[PROCTIME])",
                if last { "LastRow" } else { "FirstRow" },
                key.join(", ")
            );
        }
        let names = |exprs: Vec<String>| exprs.join(", ");
        let order = self
            .order
            .iter()
            .map(|(e, o)| format!("{e} {}", if o.descending { "DESC" } else { "ASC" }))
            .collect();
        format!(
            "Rank(strategy=[AppendFastStrategy], rankType=[ROW_NUMBER], rankRange=[rankStart={}, rankEnd={}], \
             partitionBy=[{}], orderBy=[{}], select=[*{}])",
            self.start,
            self.end,
            names(self.partition.iter().map(|e| e.to_string()).collect()),
            names(order),
            if self.rank_output { ", w0$o0" } else { "" }
        )
    }

    /// `_key_group`, the input's columns, `_position` (0-based rank).
    fn state_schema(&self) -> SchemaRef {
        let mut fields = vec![Field::new(KEY_GROUP_COLUMN, DataType::UInt32, false)];
        fields.extend(self.input.fields().iter().map(|f| f.as_ref().clone()));
        fields.push(Field::new("_position", DataType::UInt32, false));
        Arc::new(Schema::new(fields))
    }

    fn evaluate(exprs: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        exprs
            .iter()
            .map(|e| Ok(e.evaluate(batch)?.into_array(batch.num_rows())?))
            .collect()
    }
}

impl OperatorFactory for TopN {
    fn describe(&self) -> String {
        TopN::describe(self)
    }

    fn changelog_role(&self) -> ChangelogRole {
        match self.insert_only() {
            true => ChangelogRole::InsertOnly,
            false => ChangelogRole::Retracting,
        }
    }

    fn spec(&self, _inputs: &[SchemaRef]) -> Result<crate::plan::spec::NodeSpec> {
        use crate::plan::codec::{encode_expr, encode_exprs};
        Ok(crate::plan::spec::NodeSpec::TopN {
            partition: encode_exprs(&self.partition, &self.input)?,
            order: self
                .order
                .iter()
                .map(|(e, o)| Ok((encode_expr(e, &self.input)?, o.descending, o.nulls_first)))
                .collect::<Result<Vec<_>>>()?,
            start: self.start,
            end: self.end,
            rank_output: self.rank_output,
            arrival: self.arrival,
        })
    }

    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let sort_fields =
            |exprs: &[Arc<dyn PhysicalExpr>], options: Vec<SortOptions>| -> Result<RowConverter> {
                let fields = exprs
                    .iter()
                    .zip(options)
                    .map(|(e, o)| Ok(SortField::new_with_options(e.data_type(&self.input)?, o)))
                    .collect::<Result<Vec<_>>>()?;
                Ok(RowConverter::new(fields)?)
            };
        let order: Vec<Arc<dyn PhysicalExpr>> = self.order.iter().map(|(e, _)| e.clone()).collect();
        Ok(Box::new(TopNOperator {
            partitions_of: sort_fields(
                &self.partition,
                vec![SortOptions::default(); self.partition.len()],
            )?,
            order_of: sort_fields(&order, self.order.iter().map(|(_, o)| *o).collect())?,
            rows_of: sort_fields(
                &(0..self.input.fields().len())
                    .map(|i| {
                        Arc::new(datafusion_physical_expr::expressions::Column::new(
                            self.input.field(i).name(),
                            i,
                        )) as Arc<dyn PhysicalExpr>
                    })
                    .collect::<Vec<_>>(),
                vec![SortOptions::default(); self.input.fields().len()],
            )?,
            partitions: HashMap::default(),
            seq: 0,
            max_parallelism: ctx.max_parallelism,
            spec: Arc::new(self.clone()),
        }))
    }
}

/// A kept row: its order key, its arrival number (ties rank in arrival
/// order), and its bytes.
#[derive(Debug, Clone)]
struct Ranked {
    order: Box<[u8]>,
    seq: u64,
    row: Box<[u8]>,
}

/// What a row entering at `at` (0-based) of a partition holding `held` rows,
/// keeping at most `end`, changes among ranks `start..=end`: for each rank
/// whose row changes, the rank and whether a row held it before (an update)
/// or not (an insert). The entering row takes rank `at + 1`; each row after
/// it moves down one. A plain function.
pub fn shifted_ranks(at: usize, held: usize, start: u64, end: u64) -> Vec<(u64, bool)> {
    let filled = (held + 1).min(end as usize);
    (at..filled)
        .map(|i| (i as u64 + 1, i < held))
        .filter(|(rank, _)| *rank >= start)
        .collect()
}

struct TopNOperator {
    spec: Arc<TopN>,
    partitions_of: RowConverter,
    order_of: RowConverter,
    rows_of: RowConverter,
    /// Each partition's kept rows, best first.
    partitions: HashMap<Box<[u8]>, Vec<Ranked>, foldhash::fast::FixedState>,
    seq: u64,
    max_parallelism: usize,
}

impl TopNOperator {
    /// Each row's order key; `None` when ordered by arrival.
    fn order_keys(&self, data: &RecordBatch) -> Result<Option<arrow::row::Rows>> {
        if self.spec.arrival.is_some() {
            return Ok(None);
        }
        let order: Vec<Arc<dyn PhysicalExpr>> = self.spec.order.iter().map(|(e, _)| e.clone()).collect();
        Ok(Some(
            self.order_of.convert_columns(&TopN::evaluate(&order, data)?)?,
        ))
    }

    /// Each row's partition key; `None` without `PARTITION BY` (one
    /// partition, the empty key).
    fn partition_keys(&self, data: &RecordBatch) -> Result<Option<arrow::row::Rows>> {
        if self.spec.partition.is_empty() {
            return Ok(None);
        }
        let keys = TopN::evaluate(&self.spec.partition, data)?;
        Ok(Some(self.partitions_of.convert_columns(&keys)?))
    }

    /// Puts `row` into its partition; the changes it makes, as (row bytes,
    /// rank, kind), onto `out`.
    fn enter(&mut self, partition: &[u8], row: Ranked, out: &mut Vec<(Box<[u8]>, u64, RowKind)>) {
        let (start, end) = (self.spec.start, self.spec.end);
        let rows = match self.partitions.get_mut(partition) {
            Some(rows) => rows,
            None => self.partitions.entry(partition.into()).or_default(),
        };
        let at = match self.spec.arrival {
            Some(true) => 0,
            Some(false) => rows.len(),
            None => rows.partition_point(|r| (&r.order, r.seq) <= (&row.order, row.seq)),
        };
        if at as u64 >= end {
            return;
        }
        if !self.spec.rank_output {
            // The rows ranked start..=end before and after: what leaves is
            // deleted, what enters inserted.
            let window = |rows: &[Ranked]| -> Vec<(u64, Box<[u8]>)> {
                rows.iter()
                    .skip(start as usize - 1)
                    .take((end - start + 1) as usize)
                    .map(|r| (r.seq, r.row.clone()))
                    .collect()
            };
            let before = window(rows);
            rows.insert(at, row);
            rows.truncate(end as usize);
            let after = window(rows);
            for (seq, bytes) in &before {
                if !after.iter().any(|(s, _)| s == seq) {
                    out.push((bytes.clone(), 0, RowKind::Delete));
                }
            }
            for (seq, bytes) in after {
                if !before.iter().any(|(s, _)| *s == seq) {
                    out.push((bytes, 0, RowKind::Insert));
                }
            }
            return;
        }
        for (rank, held) in shifted_ranks(at, rows.len(), start, end) {
            let i = rank as usize - 1;
            let new = if i == at { &row.row } else { &rows[i - 1].row };
            if held {
                out.push((rows[i].row.clone(), rank, RowKind::UpdateBefore));
                out.push((new.clone(), rank, RowKind::UpdateAfter));
            } else {
                out.push((new.clone(), rank, RowKind::Insert));
            }
        }
        rows.insert(at, row);
        rows.truncate(end as usize);
    }
}

impl Operator for TopNOperator {
    fn name(&self) -> String {
        self.spec.describe()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        let data = changelog::data(&batch);
        let partitions = self.partition_keys(&data)?;
        let orders = self.order_keys(&data)?;
        let rows = self.rows_of.convert_columns(data.columns())?;
        let mut changes = Vec::new();
        for i in 0..data.num_rows() {
            self.seq += 1;
            let row = Ranked {
                order: orders.as_ref().map_or(&[][..], |o| o.row(i).data()).into(),
                seq: self.seq,
                row: rows.row(i).as_ref().into(),
            };
            let partition = partitions.as_ref().map_or(&[][..], |p| p.row(i).data());
            self.enter(partition, row, &mut changes);
        }
        if changes.is_empty() {
            return Ok(());
        }
        let parser = self.rows_of.parser();
        let mut columns = self
            .rows_of
            .convert_rows(changes.iter().map(|(r, _, _)| parser.parse(r)))?;
        if self.spec.rank_output {
            columns.push(Arc::new(UInt64Array::from_iter_values(
                changes.iter().map(|(_, rank, _)| *rank),
            )));
        }
        let kinds: Vec<RowKind> = changes.iter().map(|(_, _, k)| *k).collect();
        match self.spec.insert_only() {
            true => out.batch(RecordBatch::try_new(self.spec.schema.clone(), columns)?),
            false => out.batch(changelog::with_kinds(&self.spec.schema, columns, &kinds)?),
        }
        Ok(())
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        let kept: Vec<(usize, &Ranked)> = self
            .partitions
            .values()
            .flat_map(|rows| rows.iter().enumerate())
            .collect();
        if kept.is_empty() {
            return Ok(None);
        }
        let parser = self.rows_of.parser();
        let data = self
            .rows_of
            .convert_rows(kept.iter().map(|(_, r)| parser.parse(&r.row)))?;
        let batch = RecordBatch::try_new(self.spec.input.clone(), data.clone())?;
        let partition = TopN::evaluate(&self.spec.partition, &batch)?;
        let mut columns: Vec<ArrayRef> = vec![Arc::new(key_groups(
            &partition,
            kept.len(),
            self.max_parallelism,
        )?)];
        columns.extend(data);
        columns.push(Arc::new(UInt32Array::from_iter_values(
            kept.iter().map(|(p, _)| *p as u32),
        )));
        Ok(Some(OperatorSnapshot {
            meta: serde_json::Value::Null,
            rows: Some(sorted_state_rows(&self.spec.state_schema(), columns)?),
        }))
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        let Some(rows) = &snapshot.rows else {
            return Ok(());
        };
        OperatorSnapshot::check_columns(rows, &self.spec.state_schema(), &self.spec.describe())?;
        let width = rows.num_columns();
        let data = RecordBatch::try_new(self.spec.input.clone(), rows.columns()[1..width - 1].to_vec())
            .map_err(|e| Error::State(format!("{}: kept rows: {e}", self.spec.describe())))?;
        let positions = rows.column(width - 1).as_primitive::<UInt32Type>();
        let partitions = self.partition_keys(&data)?;
        let orders = self.order_keys(&data)?;
        let converted = self.rows_of.convert_columns(data.columns())?;
        let mut by_position: Vec<usize> = (0..data.num_rows()).collect();
        by_position.sort_by_key(|i| positions.value(*i));
        for i in by_position {
            self.seq += 1;
            let partition = partitions.as_ref().map_or(&[][..], |p| p.row(i).data());
            self.partitions.entry(partition.into()).or_default().push(Ranked {
                order: orders.as_ref().map_or(&[][..], |o| o.row(i).data()).into(),
                seq: self.seq,
                row: converted.row(i).as_ref().into(),
            });
        }
        Ok(())
    }

    fn state_signature(&self) -> Result<Option<String>> {
        Ok(Some(schema_signature(&self.spec.state_schema())))
    }

    fn is_keyed(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::harness::Harness;

    #[test]
    fn a_row_entering_a_full_partition_shifts_the_ranks_after_it() {
        // Held 3 of 3, a row enters at rank 2: ranks 2 and 3 change.
        assert_eq!(shifted_ranks(1, 3, 1, 3), vec![(2, true), (3, true)]);
        // Held 1 of 3, a row enters first: rank 1 updates, rank 2 fills.
        assert_eq!(shifted_ranks(0, 1, 1, 3), vec![(1, true), (2, false)]);
        // Only ranks from `start` are output.
        assert_eq!(shifted_ranks(0, 2, 2, 3), vec![(2, true), (3, false)]);
    }

    const SETUP: &[&str] = &[
        "CREATE TABLE bids (auction BIGINT, price BIGINT) WITH ('connector' = 'datagen')",
        "CREATE TABLE out (auction BIGINT, price BIGINT, rn BIGINT) WITH ('connector' = 'blackhole')",
    ];

    fn top2() -> Harness {
        Harness::of(
            SETUP,
            "INSERT INTO out SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rn FROM bids) WHERE rn <= 2",
            "Rank",
            0,
        )
        .unwrap()
    }

    fn lines(expected: &[&str]) -> Vec<String> {
        expected.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_top_2_emits_rank_changes_as_higher_rows_arrive() {
        let mut h = top2();
        assert_eq!(h.push("1 10\n2 5").unwrap(), lines(&["+I 1 10 1", "+I 2 5 1"]));
        assert_eq!(
            h.push("1 30").unwrap(),
            lines(&["-U 1 10 1", "+U 1 30 1", "+I 1 10 2"])
        );
        assert_eq!(
            h.push("1 20").unwrap(),
            lines(&["-U 1 10 2", "+U 1 20 2"]),
            "the row at rank 2 is pushed out"
        );
        assert_eq!(
            h.push("1 5\n1 20").unwrap(),
            Vec::<String>::new(),
            "ties rank after"
        );
    }

    #[test]
    fn a_top_n_without_partition_by_ranks_all_rows_together() {
        let mut h = Harness::of(
            SETUP,
            "INSERT INTO out SELECT * FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY price ASC) AS rn FROM bids) WHERE rn = 1",
            "Rank",
            0,
        )
        .unwrap();
        assert_eq!(
            h.push("1 10\n2 5\n3 7").unwrap(),
            lines(&["+I 1 10 1", "-U 1 10 1", "+U 2 5 1"])
        );
    }

    #[test]
    fn without_the_rank_in_the_output_rows_enter_and_leave_without_updates() {
        let mut h = Harness::of(
            &[
                SETUP[0],
                "CREATE TABLE out2 (auction BIGINT, price BIGINT) WITH ('connector' = 'blackhole')",
            ],
            "INSERT INTO out2 SELECT auction, price FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rn FROM bids) WHERE rn <= 2",
            "Rank",
            0,
        )
        .unwrap();
        assert_eq!(h.push("1 10\n1 30").unwrap(), lines(&["+I 1 10", "+I 1 30"]));
        assert_eq!(h.push("1 20").unwrap(), lines(&["-D 1 10", "+I 1 20"]));
        assert_eq!(h.push("1 5").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn deduplication_on_processing_time_keeps_the_first_or_the_last_row_by_arrival() {
        let setup = [
            "CREATE TABLE bids (auction BIGINT, price BIGINT, p AS PROCTIME()) WITH ('connector' = 'datagen')",
            "CREATE TABLE out2 (auction BIGINT, price BIGINT) WITH ('connector' = 'blackhole')",
        ];
        let dedup = |order: &str| {
            Harness::of(
                &setup,
                &format!(
                    "INSERT INTO out2 SELECT auction, price FROM (SELECT *, ROW_NUMBER() OVER \
                     (PARTITION BY auction ORDER BY p {order}) AS rn FROM bids) WHERE rn = 1"
                ),
                "Deduplicate",
                0,
            )
            .unwrap()
        };
        let mut first = dedup("ASC");
        let rows = "1 10 2020-01-01T00:00:00Z\n1 30 2020-01-01T00:00:01Z\n2 5 2020-01-01T00:00:01Z";
        assert_eq!(
            first.push(rows).unwrap(),
            lines(&["+I 1 10 2020-01-01T00:00:00Z 1", "+I 2 5 2020-01-01T00:00:01Z 1"]),
            "the first row of each key, and nothing after"
        );
        let mut last = dedup("DESC");
        assert_eq!(
            last.push(rows).unwrap(),
            lines(&[
                "+I 1 10 2020-01-01T00:00:00Z 1",
                "-U 1 10 2020-01-01T00:00:00Z 1",
                "+U 1 30 2020-01-01T00:00:01Z 1",
                "+I 2 5 2020-01-01T00:00:01Z 1"
            ])
        );
    }

    #[test]
    fn a_top_2_restores_its_kept_rows_in_rank_order() {
        let mut h = top2();
        h.push("1 10\n1 30\n1 20").unwrap();
        let snapshot = h.restart().unwrap().expect("state");
        assert_eq!(snapshot.rows.unwrap().num_rows(), 2, "only the top 2 are kept");
        assert_eq!(h.push("1 25").unwrap(), lines(&["-U 1 20 2", "+U 1 25 2"]));
    }
}
