//! Event-time temporal joins: `JOIN versioned FOR SYSTEM_TIME AS OF
//! s.rowtime ON s.k = versioned.pk`, as Flink's
//! `TemporalRowTimeJoinOperator`. The versioned table (input 1, keyed by
//! its primary key, with a rowtime) keeps each key's versions by time; a
//! stream row (input 0) waits until the watermark passes its time, then
//! joins the version of its key that was current at that time (`INNER`,
//! or `LEFT` padded when there is none or it was deleted). Versions older
//! than the one current at the watermark are dropped. Insert-only.
//!
//! ```text
//!  stream    ──HASH[k]──►┐  rows wait by time     watermark w: rows at <= w join
//!                        TemporalJoin             the version current at their time
//!  versioned ──HASH[pk]─►┘  versions by key, time
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int8Array, Int64Array, UInt32Array, new_null_array,
};
use arrow::compute::take;
use arrow::datatypes::{
    DataType, Field, Int8Type, Int64Type, Schema, SchemaRef, TimeUnit, TimestampMillisecondType,
};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use datafusion_physical_expr::PhysicalExpr;

use super::state::ByKey;
use super::{JoinKind, key_rows, pair_matches};
use crate::Result;
use crate::changelog;
use crate::plan::changelog::ChangelogRole;
use crate::runtime::message::CheckpointId;
use crate::runtime::operator::OperatorSnapshot;
use crate::runtime::{Operator, OperatorFactory, Output, TaskContext, Timestamp};
use crate::state::snapshot::{key_groups, schema_signature, sorted_state_rows};

/// An event-time temporal join.
#[derive(Debug, Clone)]
pub struct TemporalJoin {
    /// `Inner` or `Left`.
    pub kind: JoinKind,
    /// Each side's key expressions (the versioned side's cover its primary key).
    pub keys: [Vec<Arc<dyn PhysicalExpr>>; 2],
    /// The rest of the condition.
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// The stream's columns and the versioned table's (without op columns).
    pub inputs: [SchemaRef; 2],
    /// Each side's rowtime (position).
    pub times: [usize; 2],
    /// Stream columns then table columns.
    pub schema: SchemaRef,
}

impl TemporalJoin {
    /// The text EXPLAIN shows.
    pub fn describe(&self) -> String {
        let conditions = super::condition_text(&self.keys, self.filter.as_ref());
        format!(
            "TemporalJoin(joinType=[{}], where=[{}], leftTimeIndex={}, rightTimeIndex={})",
            self.kind.flink_name(),
            conditions,
            self.times[0],
            self.times[1]
        )
    }

    fn key_types(&self) -> Result<Vec<DataType>> {
        super::key_types(&self.keys, &self.inputs[0])
    }

    /// `_key_group`, `_side`, stream columns, table columns, `_time`,
    /// `_deleted` (a version that removes its key).
    fn state_schema(&self) -> SchemaRef {
        let mut fields = super::two_sided_fields(&self.inputs);
        fields.push(Field::new("_time", DataType::Int64, false));
        fields.push(Field::new("_deleted", DataType::Boolean, false));
        Arc::new(Schema::new(fields))
    }
}

impl OperatorFactory for TemporalJoin {
    fn describe(&self) -> String {
        TemporalJoin::describe(self)
    }

    /// Takes the versioned side's updates (they make versions), emits inserts.
    fn changelog_role(&self) -> ChangelogRole {
        ChangelogRole::Partial
    }

    fn spec(&self, _inputs: &[SchemaRef]) -> Result<crate::plan::spec::NodeSpec> {
        use crate::plan::codec::{encode_expr, encode_exprs};
        let joined = super::joined_schema(&self.inputs);
        Ok(crate::plan::spec::NodeSpec::TemporalJoin(Box::new(
            crate::plan::spec::IntervalJoinData {
                join: crate::plan::spec::JoinData {
                    kind: self.kind,
                    left_keys: encode_exprs(&self.keys[0], &self.inputs[0])?,
                    right_keys: encode_exprs(&self.keys[1], &self.inputs[1])?,
                    filter: self
                        .filter
                        .as_ref()
                        .map(|f| encode_expr(f, &joined))
                        .transpose()?,
                    null_equal: false,
                    unique_keys: [None, None],
                    state_ttl_ms: None,
                },
                times: self.times,
                lower: 0,
                upper: 0,
                proctime: false,
            },
        )))
    }

    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(TemporalJoinOperator {
            rows_of: super::row_converters(&self.inputs)?,
            keys_of: RowConverter::new(self.key_types()?.into_iter().map(SortField::new).collect())?,
            waiting: BTreeMap::new(),
            versions: ByKey::default(),
            watermark: Timestamp::MIN,
            max_parallelism: ctx.max_parallelism,
            spec: Arc::new(self.clone()),
        }))
    }
}

/// A row's bytes and its key's.
type Keyed = (Box<[u8]>, Box<[u8]>);

/// A key's versions by time: the row, and whether the key was deleted then.
type Versions = BTreeMap<i64, (Box<[u8]>, bool)>;

struct TemporalJoinOperator {
    spec: Arc<TemporalJoin>,
    rows_of: [RowConverter; 2],
    keys_of: RowConverter,
    /// Stream rows by time, waiting for the watermark.
    waiting: BTreeMap<i64, Vec<Keyed>>,
    /// Each key's versions by time: the row, and whether it was deleted then.
    versions: ByKey<Versions>,
    watermark: Timestamp,
    max_parallelism: usize,
}

fn millis(column: &ArrayRef) -> Result<Vec<Option<i64>>> {
    let column = arrow::compute::cast(column, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
    let column = column.as_primitive::<TimestampMillisecondType>();
    Ok((0..column.len())
        .map(|i| column.is_valid(i).then(|| column.value(i)))
        .collect())
}

impl TemporalJoinOperator {
    fn process(&mut self, side: usize, batch: &RecordBatch) -> Result<()> {
        let kinds = changelog::row_kinds(batch)?;
        let data = changelog::data(batch);
        let times = millis(data.column(self.spec.times[side]))?;
        let (keys, nulls) = key_rows(
            &self.spec.keys[side],
            &self.spec.key_types()?,
            &self.keys_of,
            &data,
            false,
        )?;
        let rows = self.rows_of[side].convert_columns(data.columns())?;
        for (i, time) in times.iter().enumerate() {
            let null_key = nulls.as_ref().is_some_and(|n| n.is_null(i));
            let (Some(time), key, row) = (*time, keys.row(i), rows.row(i)) else {
                continue;
            };
            if side == 0 {
                // A NULL key joins nothing, but a LEFT join still pads it.
                let key: Box<[u8]> = if null_key {
                    Box::new([])
                } else {
                    key.as_ref().into()
                };
                self.waiting
                    .entry(time)
                    .or_default()
                    .push((key, row.as_ref().into()));
            } else if !null_key {
                let version = (row.as_ref().into(), kinds[i].is_retraction());
                let versions = match self.versions.get_mut(key.as_ref()) {
                    Some(v) => v,
                    None => self.versions.entry(key.as_ref().into()).or_default(),
                };
                versions.insert(time, version);
            }
        }
        Ok(())
    }

    /// Joins the waiting rows at or before `w` with their versions.
    fn fire(&mut self, w: Timestamp, out: &mut Output) -> Result<()> {
        let later = self.waiting.split_off(&w.saturating_add(1));
        let due = std::mem::replace(&mut self.waiting, later);
        if due.is_empty() {
            return Ok(());
        }
        let (left_parser, right_parser) = (self.rows_of[0].parser(), self.rows_of[1].parser());
        let (mut left, mut right, mut pairs) = (Vec::new(), Vec::new(), Vec::new());
        for (time, rows) in &due {
            for (key, row) in rows {
                let version = self
                    .versions
                    .get(&key[..])
                    .and_then(|v| v.range(..=time).next_back())
                    .and_then(|(_, (row, deleted))| (!deleted).then_some(row));
                left.push(left_parser.parse(row));
                pairs.push(version.map(|v| {
                    right.push(right_parser.parse(v));
                    (right.len() - 1) as u32
                }));
            }
        }
        let left_columns = self.rows_of[0].convert_rows(left)?;
        let right_columns = match right.is_empty() {
            true => self.spec.inputs[1]
                .fields()
                .iter()
                .map(|f| new_null_array(f.data_type(), 0))
                .collect(),
            false => self.rows_of[1].convert_rows(right)?,
        };
        let (with, versions): (Vec<u32>, Vec<u32>) = pairs
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (i as u32, v)))
            .unzip();
        let left_data = RecordBatch::try_new(self.spec.inputs[0].clone(), left_columns.clone())?;
        let taken: Vec<ArrayRef> = right_columns
            .iter()
            .map(|c| Ok(take(c, &UInt32Array::from(versions.clone()), None)?))
            .collect::<Result<_>>()?;
        let matched = pair_matches(
            self.spec.filter.as_ref(),
            &self.spec.inputs,
            0,
            &left_data,
            &UInt32Array::from(with.clone()),
            &taken,
        )?;
        let mut joined: Vec<Option<u32>> = vec![None; pairs.len()];
        for ((i, v), ok) in with.iter().zip(&versions).zip(&matched) {
            if *ok {
                joined[*i as usize] = Some(*v);
            }
        }
        let (left_rows, right_rows): (Vec<u32>, Vec<Option<u32>>) = joined
            .into_iter()
            .enumerate()
            .filter(|(_, v)| v.is_some() || self.spec.kind == JoinKind::Left)
            .map(|(i, v)| (i as u32, v))
            .unzip();
        if left_rows.is_empty() {
            return Ok(());
        }
        let mut columns: Vec<ArrayRef> = Vec::new();
        for c in &left_columns {
            columns.push(take(c, &UInt32Array::from(left_rows.clone()), None)?);
        }
        for c in &right_columns {
            columns.push(match c.is_empty() {
                true => new_null_array(c.data_type(), left_rows.len()),
                false => take(c, &UInt32Array::from(right_rows.clone()), None)?,
            });
        }
        out.batch(RecordBatch::try_new(self.spec.schema.clone(), columns)?);
        Ok(())
    }

    /// Drops versions no row can join any more: all but the last at or
    /// before the watermark (a deleted key with nothing after is dropped).
    fn compact(&mut self, w: Timestamp) {
        self.versions.retain(|_, versions| {
            let current = versions.range(..=w).next_back().map(|(t, _)| *t);
            if let Some(current) = current {
                *versions = versions.split_off(&current);
                if versions.len() == 1 && versions.values().next().is_some_and(|(_, deleted)| *deleted) {
                    versions.clear();
                }
            }
            !versions.is_empty()
        });
    }

    /// One side's rows as state columns (see [`TemporalJoin::state_schema`]).
    fn side_state(&self, side: usize) -> Result<Option<Vec<ArrayRef>>> {
        let parser = self.rows_of[side].parser();
        let (mut rows, mut times, mut deleted) = (Vec::new(), Vec::new(), Vec::new());
        if side == 0 {
            for (time, waiting) in &self.waiting {
                for (_, row) in waiting {
                    rows.push(parser.parse(row));
                    times.push(*time);
                    deleted.push(false);
                }
            }
        } else {
            for versions in self.versions.values() {
                for (time, (row, gone)) in versions {
                    rows.push(parser.parse(row));
                    times.push(*time);
                    deleted.push(*gone);
                }
            }
        }
        if rows.is_empty() {
            return Ok(None);
        }
        let n = rows.len();
        let data = self.rows_of[side].convert_rows(rows)?;
        let batch = RecordBatch::try_new(self.spec.inputs[side].clone(), data.clone())?;
        // Key groups from the key columns as the exchange hashed them.
        let keys: Vec<ArrayRef> = self.spec.keys[side]
            .iter()
            .map(|k| Ok(k.evaluate(&batch)?.into_array(n)?))
            .collect::<Result<_>>()?;
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(key_groups(&keys, n, self.max_parallelism)?),
            Arc::new(Int8Array::from(vec![side as i8; n])),
        ];
        for s in 0..2 {
            match s == side {
                true => columns.extend(data.iter().cloned()),
                false => columns.extend(
                    self.spec.inputs[s]
                        .fields()
                        .iter()
                        .map(|f| new_null_array(f.data_type(), n)),
                ),
            }
        }
        columns.push(Arc::new(Int64Array::from(times)));
        columns.push(Arc::new(BooleanArray::from(deleted)));
        Ok(Some(columns))
    }
}

impl Operator for TemporalJoinOperator {
    fn name(&self) -> String {
        self.spec.describe()
    }

    fn process_batch(&mut self, input: usize, batch: RecordBatch, _out: &mut Output) -> Result<()> {
        self.process(input.min(1), &batch)
    }

    fn process_watermark(&mut self, watermark: Timestamp, out: &mut Output) -> Result<()> {
        self.watermark = self.watermark.max(watermark);
        self.fire(self.watermark, out)?;
        self.compact(self.watermark);
        out.watermark(watermark);
        Ok(())
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        let columns = super::concat_sides([self.side_state(0)?, self.side_state(1)?])?;
        let rows = columns
            .map(|c| sorted_state_rows(&self.spec.state_schema(), c))
            .transpose()?;
        Ok(Some(OperatorSnapshot::with_watermark(self.watermark, rows)))
    }

    fn restore_rescaled(&mut self, snapshots: Vec<OperatorSnapshot>) -> Result<()> {
        match OperatorSnapshot::merge_by_watermark(snapshots, &self.spec.describe())? {
            Some(merged) => self.restore(merged),
            None => Ok(()),
        }
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        self.watermark = snapshot.watermark(&self.spec.describe())?;
        let Some(rows) = &snapshot.rows else {
            return Ok(());
        };
        OperatorSnapshot::check_columns(rows, &self.spec.state_schema(), &self.spec.describe())?;
        let widths = [
            self.spec.inputs[0].fields().len(),
            self.spec.inputs[1].fields().len(),
        ];
        for side in 0..2 {
            let sides = rows.column(1).as_primitive::<Int8Type>();
            let mask: BooleanArray = sides.iter().map(|s| Some(s == Some(side as i8))).collect();
            let rows = arrow::compute::filter_record_batch(rows, &mask)?;
            let start = 2 + if side == 0 { 0 } else { widths[0] };
            let data = RecordBatch::try_new(
                self.spec.inputs[side].clone(),
                rows.columns()[start..start + widths[side]].to_vec(),
            )?;
            let times = rows.column(2 + widths[0] + widths[1]).as_primitive::<Int64Type>();
            let deleted = rows.column(3 + widths[0] + widths[1]).as_boolean();
            let (keys, nulls) = key_rows(
                &self.spec.keys[side],
                &self.spec.key_types()?,
                &self.keys_of,
                &data,
                false,
            )?;
            let converted = self.rows_of[side].convert_columns(data.columns())?;
            for i in 0..rows.num_rows() {
                let key: Box<[u8]> = match nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                    true => Box::new([]),
                    false => keys.row(i).as_ref().into(),
                };
                let row: Box<[u8]> = converted.row(i).as_ref().into();
                match side {
                    0 => self.waiting.entry(times.value(i)).or_default().push((key, row)),
                    _ => {
                        self.versions
                            .entry(key[..].into())
                            .or_default()
                            .insert(times.value(i), (row, deleted.value(i)));
                    }
                }
            }
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
