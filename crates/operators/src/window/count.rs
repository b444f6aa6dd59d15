//! Row-count windows: per key, windows of `size` rows starting every `slide` rows, in the order the rows arrive; a window fires with its last row.
//!
//! ```text
//!  a key's rows:   0  1  2  3  4  5  6  7     size 4, slide 2
//!  window 0:       [----------]               fires with row 3
//!  window 1:             [----------]         fires with row 5
//!  window 2:                   [----------]   fires with row 7
//! ```
//!
//! A key's row number `c` belongs to the windows `k` with
//! `k * slide <= c < k * slide + size`: a window opens at its first row and
//! fires at its last. These are the Table API's count windows (Flink's
//! `Tumble.over(rowInterval(n))`), on processing time: arrival order. At
//! the end of bounded input a window short of its rows never fires, as in
//! Flink. A key without an open window has counted a whole number of
//! slides (`slide <= size`), so it is forgotten: counting it afresh gives
//! the same windows.
//!
//! State: a row per open window (`_key_group`, `_window`, `_count` of its
//! key, keys, accumulator states). With incremental checkpoints a snapshot
//! is a replacing delta of the keys that had rows since the last one (a
//! key left without windows deletes its rows).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch, UInt32Array};
use arrow::datatypes::{Int64Type, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion_common::ScalarValue;
use datafusion_expr::Accumulator;
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;

use crate::window::accumulate::{Arguments, StateColumns, restored_accumulators};
use crate::{Error, Result};
use weir_common::ids::CheckpointId;
use weir_common::time::Timestamp;
use weir_runtime::operator::OperatorSnapshot;
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};
use weir_state::incremental::{deleted_part, replacement_rows};
use weir_state::snapshot::{
    key_groups, key_groups_of_bytes, schema_signature, sorted_state_rows, state_rows, window_state_schema,
};
use weir_state::store::in_chunks;

#[cfg(test)]
mod tests;

/// A batch's rows grouped by key: the keys in the order they first came
/// (by their first rows), and each key's rows, in the order they came, at
/// `order[starts[k]..starts[k + 1]]`.
struct GroupedRows {
    firsts: Vec<usize>,
    starts: Vec<usize>,
    order: Vec<u32>,
}

impl GroupedRows {
    fn of<'a>(rows: usize, key_of: impl Fn(usize) -> &'a [u8]) -> Self {
        let mut ordinals: HashMap<&[u8], usize> = HashMap::new();
        let mut firsts = Vec::new();
        let of_row: Vec<usize> = (0..rows)
            .map(|row| {
                *ordinals.entry(key_of(row)).or_insert_with(|| {
                    firsts.push(row);
                    firsts.len() - 1
                })
            })
            .collect();
        let mut starts = vec![0; firsts.len() + 1];
        for &k in &of_row {
            starts[k + 1] += 1;
        }
        for k in 0..firsts.len() {
            starts[k + 1] += starts[k];
        }
        let mut next = starts.clone();
        let mut order = vec![0; rows];
        for (row, &k) in of_row.iter().enumerate() {
            order[next[k]] = row as u32;
            next[k] += 1;
        }
        GroupedRows {
            firsts,
            starts,
            order,
        }
    }

    /// Whether grouping left the rows where they were.
    fn in_order(&self) -> bool {
        self.order.iter().enumerate().all(|(i, &row)| i == row as usize)
    }
}

/// The plan of a row-count window aggregation.
#[derive(Debug)]
pub struct CountWindowAggregate {
    /// Rows a window holds.
    pub size: u64,
    /// Rows from one window's start to the next's.
    pub slide: u64,
    /// The processing-time attribute, for EXPLAIN.
    pub time_name: String,
    /// The keys windows are counted per (evaluated on the input).
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// Schema of the key columns.
    pub key_schema: SchemaRef,
    /// What the aggregates' arguments are over (the input rows).
    pub aggregate_input: SchemaRef,
    /// Aggregate functions.
    pub aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// `FILTER (WHERE ...)` of each aggregate.
    pub filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    /// Output: the keys, then the aggregates.
    pub output_schema: SchemaRef,
    /// Its name in the plan (EXPLAIN's), for errors and logs.
    pub name: String,
}

impl CountWindowAggregate {
    /// `_key_group`, `_window`, `_count`, keys, states.
    fn state_schema(&self) -> Result<SchemaRef> {
        window_state_schema(&["_window", "_count"], &self.key_schema, &self.aggregates)
    }
}

/// The operator factory of a row-count window aggregation.
#[derive(Debug, Clone)]
pub struct CountWindowAggregateFactory(pub Arc<CountWindowAggregate>);

impl OperatorFactory for CountWindowAggregateFactory {
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let fields = (self.0.key_schema.fields().iter())
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(Box::new(CountWindowOperator {
            spec: self.0.clone(),
            converter: RowConverter::new(fields)?,
            keys: HashMap::new(),
            max_parallelism: ctx.max_parallelism,
            changed: ctx.incremental.then(HashSet::new),
        }))
    }
}

/// An open window: its number and its accumulators.
struct Window {
    id: u64,
    accumulators: Vec<Box<dyn Accumulator>>,
}

/// A key's rows counted so far and its open windows, oldest first.
#[derive(Default)]
struct KeyWindows {
    count: u64,
    windows: VecDeque<Window>,
}

struct CountWindowOperator {
    spec: Arc<CountWindowAggregate>,
    converter: RowConverter,
    keys: HashMap<Box<[u8]>, KeyWindows>,
    max_parallelism: usize,
    /// Incremental checkpoints: the keys that had rows since the last
    /// snapshot.
    changed: Option<HashSet<Box<[u8]>>>,
}

impl CountWindowOperator {
    /// Counts a batch's rows into their keys' windows; gives the windows
    /// that fired, with their keys, in the order their last rows came.
    /// The batch's rows are grouped by key first, so each window takes a
    /// slice of its key's rows at once.
    fn process(&mut self, batch: &RecordBatch) -> Result<Vec<(Box<[u8]>, Window)>> {
        let rows = batch.num_rows();
        let keys = (self.spec.keys.iter())
            .map(|k| k.evaluate(batch)?.into_array(rows))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        let key_rows = (!keys.is_empty())
            .then(|| self.converter.convert_columns(&keys))
            .transpose()?;
        let key_of = |row: usize| -> &[u8] { key_rows.as_ref().map_or(&[], |r| r.row(row).data()) };
        let grouped = GroupedRows::of(rows, key_of);
        let mut arguments = Arguments::of(&self.spec.aggregates, &self.spec.filters, batch)?;
        if !grouped.in_order() {
            arguments = arguments.taken(&UInt32Array::from(grouped.order.clone()))?;
        }
        let mut fired = Vec::new();
        for (ordinal, &first) in grouped.firsts.iter().enumerate() {
            let key = key_of(first);
            let (offset, n) = (
                grouped.starts[ordinal],
                grouped.starts[ordinal + 1] - grouped.starts[ordinal],
            );
            for (last, window) in self.count_rows(key, &arguments, offset, n as u64)? {
                fired.push((
                    grouped.order[offset + last] as usize,
                    Box::<[u8]>::from(key),
                    window,
                ));
            }
            if let Some(changed) = self.changed.as_mut() {
                changed.insert(key.into());
            }
        }
        fired.sort_by_key(|(row, _, _)| *row);
        Ok(fired.into_iter().map(|(_, key, window)| (key, window)).collect())
    }

    /// Counts `n` rows of `key`, at `offset` of the grouped `arguments`,
    /// into its windows; gives the windows that fired, each with the
    /// position of its last row among the `n`.
    fn count_rows(
        &mut self,
        key: &[u8],
        arguments: &Arguments,
        offset: usize,
        n: u64,
    ) -> Result<Vec<(usize, Window)>> {
        let (size, slide) = (self.spec.size, self.spec.slide);
        if !self.keys.contains_key(key) {
            self.keys.insert(key.into(), KeyWindows::default());
        }
        let state = self.keys.get_mut(key).expect("inserted above");
        let (from, to) = (state.count, state.count + n);
        let mut id = from.div_ceil(slide);
        while id * slide < to {
            let accumulators = (self.spec.aggregates.iter())
                .map(|a| Ok(a.create_accumulator()?))
                .collect::<Result<Vec<_>>>()?;
            state.windows.push_back(Window { id, accumulators });
            id += 1;
        }
        for window in &mut state.windows {
            let first = (window.id * slide).max(from);
            let last = (window.id * slide + size).min(to);
            if first < last {
                let at = offset + (first - from) as usize;
                arguments.accumulate_range(&mut window.accumulators, at, (last - first) as usize)?;
            }
        }
        let mut fired = Vec::new();
        while (state.windows.front()).is_some_and(|w| w.id * slide + size <= to) {
            let window = state.windows.pop_front().expect("the first");
            fired.push(((window.id * slide + size - 1 - from) as usize, window));
        }
        state.count = to;
        if state.windows.is_empty() {
            self.keys.remove(key);
        }
        Ok(fired)
    }

    /// The output rows of fired windows: keys, then each aggregate's value.
    fn output(&self, mut fired: Vec<(Box<[u8]>, Window)>) -> Result<RecordBatch> {
        let mut columns: Vec<ArrayRef> = match self.spec.key_schema.fields().is_empty() {
            true => Vec::new(),
            false => {
                let parser = self.converter.parser();
                (self.converter).convert_rows(fired.iter().map(|(k, _)| parser.parse(k)))?
            }
        };
        for i in 0..self.spec.aggregates.len() {
            let values = (fired.iter_mut())
                .map(|(_, w)| w.accumulators[i].evaluate())
                .collect::<datafusion_common::Result<Vec<ScalarValue>>>()?;
            let field = self.spec.output_schema.field(columns.len());
            let array = ScalarValue::iter_to_array(values)?;
            columns.push(match array.data_type() == field.data_type() {
                true => array,
                false => arrow::compute::cast(&array, field.data_type())?,
            });
        }
        Ok(RecordBatch::try_new(self.spec.output_schema.clone(), columns)?)
    }

    /// Every open window as a state row, sorted by key group.
    fn state_rows(&mut self) -> Result<Option<RecordBatch>> {
        let keys: Vec<Box<[u8]>> = self.keys.keys().cloned().collect();
        let columns = self.state_columns(&keys)?;
        columns
            .map(|c| sorted_state_rows(&self.spec.state_schema()?, c))
            .transpose()
    }

    /// One file of a replacing chain: every key's windows (`full`), or
    /// those of the keys changed since the last call and a deleting row
    /// for each changed key without windows; `None` without rows.
    fn delta(&mut self, full: bool) -> Result<Option<RecordBatch>> {
        let changed = self.changed.as_mut().map(std::mem::take).unwrap_or_default();
        let keys: Vec<Box<[u8]>> = match full {
            true => self.keys.keys().cloned().collect(),
            false => changed.into_iter().collect(),
        };
        let (present, gone): (Vec<_>, Vec<_>) = keys.into_iter().partition(|k| self.keys.contains_key(k));
        let schema = self.spec.state_schema()?;
        let mut parts = Vec::new();
        if let Some(columns) = self.state_columns(&present)? {
            let state_keys = (present.iter())
                .flat_map(|k| std::iter::repeat_n(&k[..], self.keys[k].windows.len()))
                .collect::<Vec<&[u8]>>();
            let state_keys = arrow::array::BinaryArray::from_iter_values(state_keys);
            parts.push((state_rows(&schema, columns)?, state_keys, false));
        }
        if !gone.is_empty() {
            let bytes: Vec<&[u8]> = gone.iter().map(|k| &k[..]).collect();
            let groups = match self.spec.key_schema.fields().is_empty() {
                true => UInt32Array::from(vec![0; bytes.len()]),
                false => key_groups_of_bytes(&self.converter, &bytes, self.max_parallelism)?,
            };
            let keys = arrow::array::BinaryArray::from_iter_values(bytes);
            parts.push(deleted_part(&schema, groups, keys)?);
        }
        replacement_rows(&schema, parts, full)
    }

    /// The state columns of the open windows of `keys`, each key's in
    /// order (accumulators rebuilt from the states read, which reading may
    /// consume); `None` without windows.
    fn state_columns(&mut self, keys: &[Box<[u8]>]) -> Result<Option<Vec<ArrayRef>>> {
        let (mut key_bytes, mut ids, mut counts) = (Vec::new(), Vec::new(), Vec::new());
        let mut states = StateColumns::default();
        let spec = self.spec.clone();
        for key in keys {
            let state = self.keys.get_mut(key).expect("a key of the operator");
            for window in &mut state.windows {
                states.push(&mut window.accumulators, Some(&spec.aggregates[..]))?;
                key_bytes.push(key.clone());
                ids.push(window.id as i64);
                counts.push(state.count as i64);
            }
        }
        if ids.is_empty() {
            return Ok(None);
        }
        let key_columns = match self.spec.key_schema.fields().is_empty() {
            true => Vec::new(),
            false => {
                let parser = self.converter.parser();
                (self.converter).convert_rows(key_bytes.iter().map(|k| parser.parse(k)))?
            }
        };
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(key_groups(&key_columns, ids.len(), self.max_parallelism)?),
            Arc::new(Int64Array::from(ids)),
            Arc::new(Int64Array::from(counts)),
        ];
        columns.extend(key_columns);
        columns.extend(states.into_arrays()?);
        Ok(Some(columns))
    }

    /// Reopens the windows of state rows (this subtask's key groups).
    fn restore_rows(&mut self, rows: &RecordBatch) -> Result<()> {
        OperatorSnapshot::check_columns(rows, self.spec.state_schema()?.as_ref(), &self.spec.name)?;
        let key_count = self.spec.key_schema.fields().len();
        for chunk in in_chunks(rows) {
            let ids = chunk.column(1).as_primitive::<Int64Type>().values().to_vec();
            let counts = chunk.column(2).as_primitive::<Int64Type>().values().to_vec();
            let key_rows = (key_count > 0)
                .then(|| self.converter.convert_columns(&chunk.columns()[3..3 + key_count]))
                .transpose()?;
            for row in 0..chunk.num_rows() {
                let states = &chunk.columns()[3 + key_count..];
                let accumulators = restored_accumulators(&self.spec.aggregates, states, row)?;
                let key: Box<[u8]> = key_rows
                    .as_ref()
                    .map_or(Box::from([]), |r| r.row(row).data().into());
                let state = self.keys.entry(key).or_default();
                state.count = counts[row] as u64;
                let window = Window {
                    id: ids[row] as u64,
                    accumulators,
                };
                let at = state.windows.partition_point(|w| w.id < window.id);
                state.windows.insert(at, window);
            }
        }
        Ok(())
    }
}

impl Operator for CountWindowOperator {
    fn name(&self) -> String {
        self.spec.name.clone()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        if weir_common::changelog::has_op(&batch.schema()) {
            return Err(Error::Execution(
                "a row-count window aggregation takes insert-only rows".into(),
            ));
        }
        let fired = self.process(&batch)?;
        if !fired.is_empty() {
            out.batch(self.output(fired)?);
        }
        Ok(())
    }

    fn process_watermark(&mut self, watermark: Timestamp, out: &mut Output) -> Result<()> {
        out.watermark(watermark);
        Ok(())
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        Ok(self.state_rows()?.map(|rows| OperatorSnapshot {
            rows: Some(rows),
            ..OperatorSnapshot::default()
        }))
    }

    fn delta_kind(&self) -> Option<weir_state::incremental::DeltaKind> {
        (self.changed.is_some()).then_some(weir_state::incremental::DeltaKind::Replace)
    }

    fn snapshot_delta(&mut self, checkpoint: CheckpointId, full: bool) -> Result<Option<OperatorSnapshot>> {
        if self.changed.is_none() {
            return self.snapshot(checkpoint);
        }
        Ok(Some(OperatorSnapshot {
            rows: self.delta(full)?,
            ..OperatorSnapshot::default()
        }))
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        match &snapshot.rows {
            Some(rows) => self.restore_rows(rows),
            None => Ok(()),
        }
    }

    fn state_signature(&self) -> Result<Option<String>> {
        Ok(Some(schema_signature(self.spec.state_schema()?.as_ref())))
    }

    fn is_keyed(&self) -> bool {
        true
    }
}
