//! Row-count windows: per key, windows of `size` rows starting every `slide` rows, in the order the rows arrive; a window fires with its last row.
//!
//! ```text
//!  a key's rows:   0  1  2  3  4  5  6  7     size 4, slide 2
//!  panes:          [----][----][----][----]   of gcd(4, 2) = 2 rows
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
//! A key's rows are counted into panes of `gcd(size, slide)` rows, which
//! its windows share: a row updates one pane, and a window that fires
//! merges its panes. A batch is aggregated at once over all its keys: its
//! rows go to the batch's panes (a key's pane continued from an earlier
//! batch starts from its state) in one vectorized `GroupsAccumulator`,
//! whose states are appended to the pane log ([`panes`]); the windows that
//! fired merge their panes' states in another and are evaluated together.
//!
//! State: a row per live pane (`_key_group`, `_pane`, `_count` of its key,
//! keys, accumulator states). With incremental checkpoints a snapshot is a
//! replacing delta of the keys that had rows since the last one (a key left
//! without panes deletes its rows).

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::{Int64Type, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion_expr::{EmitTo, GroupsAccumulator};
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;

use crate::groups::{ChangedGroups, Groups};
use crate::window::accumulate::{Arguments, groups_accumulators};
use crate::{Error, Result};
use panes::{At, PaneLog};
use weir_common::ids::CheckpointId;
use weir_common::time::Timestamp;
use weir_runtime::operator::OperatorSnapshot;
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};
use weir_state::incremental::{deleted_part, replacement_rows};
use weir_state::snapshot::{
    key_groups, schema_signature, sorted_state_rows, state_rows, window_state_schema,
};
use weir_state::store::in_chunks;

mod panes;
#[cfg(test)]
mod tests;

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
    /// `_key_group`, `_pane`, `_count`, keys, states.
    fn state_schema(&self) -> Result<SchemaRef> {
        window_state_schema(&["_pane", "_count"], &self.key_schema, &self.aggregates)
    }
}

/// The operator factory of a row-count window aggregation.
#[derive(Debug, Clone)]
pub struct CountWindowAggregateFactory(pub Arc<CountWindowAggregate>);

impl OperatorFactory for CountWindowAggregateFactory {
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let spec = self.0.clone();
        let fields = (spec.key_schema.fields().iter())
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        let widths = (spec.aggregates.iter())
            .map(|a| Ok(a.state_fields()?.len()))
            .collect::<Result<Vec<_>>>()?;
        Ok(Box::new(CountWindowOperator {
            shape: Shape::of(spec.size, spec.slide)?,
            groups: Groups::new(&spec.key_schema)?,
            spec,
            converter: RowConverter::new(fields)?,
            keys: Keys::default(),
            log: PaneLog::default(),
            widths,
            max_parallelism: ctx.max_parallelism,
            changed: ctx.incremental.then(ChangedGroups::default),
            scratch: Scratch::default(),
        }))
    }
}

/// Window size and slide, and the panes they share.
#[derive(Debug, Clone, Copy)]
struct Shape {
    size: u64,
    slide: u64,
    /// Rows per pane: the greatest common divisor of size and slide.
    pane: u64,
}

impl Shape {
    fn of(size: u64, slide: u64) -> Result<Shape> {
        if size == 0 || slide == 0 || slide > size {
            return Err(Error::Plan(format!(
                "a row-count window of {size} rows every {slide}: both must be positive, the slide at most the size"
            )));
        }
        let (mut a, mut b) = (size, slide);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        Ok(Shape { size, slide, pane: a })
    }

    /// The window that row number `c` of a key is the last row of.
    fn fired_by(&self, c: u64) -> Option<u64> {
        let end = c + 1;
        (end >= self.size && (end - self.size).is_multiple_of(self.slide))
            .then(|| (end - self.size) / self.slide)
    }

    /// The panes of window `w`.
    fn panes_of(&self, w: u64) -> std::ops::Range<u64> {
        let first = w * self.slide / self.pane;
        first..first + self.size / self.pane
    }

    /// The first pane a window still open after `count` rows needs (every
    /// pane before it is done with).
    fn first_needed(&self, count: u64) -> u64 {
        let next = match count < self.size {
            true => 0,
            false => (count - self.size) / self.slide + 1,
        };
        next * self.slide / self.pane
    }
}

/// A window that fired: the batch row that was its last, its key and number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fired {
    row: usize,
    key: usize,
    window: u64,
}

/// How a batch's rows fall into panes, and the windows they fire.
#[derive(Debug, Default, PartialEq, Eq)]
struct BatchPanes {
    /// The batch pane of each row.
    pane_of_row: Vec<usize>,
    /// Each batch pane: its key and pane number.
    panes: Vec<(usize, u64)>,
    /// The keys that had rows, in the order of their first.
    keys: Vec<usize>,
    /// The windows that fired, in the order of their last rows.
    fired: Vec<Fired>,
}

/// Per key, the batch pane it last had rows in (reset after each batch).
#[derive(Default)]
struct Scratch {
    pane_of_key: Vec<usize>,
}

/// Counts the rows of keys `key_of_row` on from `counts` (which it
/// advances): each row's pane, and the windows whose last rows they are.
fn assign(key_of_row: &[usize], counts: &mut [u64], shape: Shape, scratch: &mut Scratch) -> BatchPanes {
    scratch.pane_of_key.resize(counts.len(), usize::MAX);
    let mut out = BatchPanes {
        pane_of_row: Vec::with_capacity(key_of_row.len()),
        ..BatchPanes::default()
    };
    for (row, &key) in key_of_row.iter().enumerate() {
        let c = counts[key];
        counts[key] += 1;
        let pane = c / shape.pane;
        let local = scratch.pane_of_key[key];
        if local == usize::MAX {
            out.keys.push(key);
        }
        let local = match out.panes.get(local) {
            Some(&(_, p)) if p == pane => local,
            _ => {
                out.panes.push((key, pane));
                scratch.pane_of_key[key] = out.panes.len() - 1;
                out.panes.len() - 1
            }
        };
        out.pane_of_row.push(local);
        if let Some(window) = shape.fired_by(c) {
            out.fired.push(Fired { row, key, window });
        }
    }
    for &key in &out.keys {
        scratch.pane_of_key[key] = usize::MAX;
    }
    out
}

/// Per key (by its group index): its rows counted, its live panes in order
/// (number and where the state is), its keys' row bytes and key group.
#[derive(Default)]
struct Keys {
    counts: Vec<u64>,
    panes: Vec<VecDeque<(u64, At)>>,
    bytes: Vec<Box<[u8]>>,
    groups: Vec<u32>,
    /// Keys with live panes.
    live: usize,
}

/// Keys interned past twice the live ones before they are compacted (few
/// in unit tests, so they compact).
const KEY_SLACK: usize = if cfg!(test) { 16 } else { 64 * 1024 };

struct CountWindowOperator {
    spec: Arc<CountWindowAggregate>,
    shape: Shape,
    converter: RowConverter,
    groups: Groups,
    keys: Keys,
    log: PaneLog,
    /// State columns of each aggregate.
    widths: Vec<usize>,
    max_parallelism: usize,
    /// Incremental checkpoints: the keys that had rows since the last
    /// snapshot.
    changed: Option<ChangedGroups>,
    scratch: Scratch,
}

impl CountWindowOperator {
    /// Counts a batch's rows into their keys' panes; the output rows of the
    /// windows that fired, in the order their last rows came.
    fn process(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let rows = batch.num_rows();
        let keys = (self.spec.keys.iter())
            .map(|k| k.evaluate(batch)?.into_array(rows))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        let mut key_of_row = Vec::with_capacity(rows);
        let known = self.groups.len();
        self.groups.intern(&keys, rows, &mut key_of_row)?;
        self.add_keys(&keys, &key_of_row, known)?;
        let panes = assign(&key_of_row, &mut self.keys.counts, self.shape, &mut self.scratch);
        let arguments = Arguments::of(&self.spec.aggregates, &self.spec.filters, batch)?;
        let states = self.batch_pane_states(&panes, &arguments)?;
        let chunk = self.log.append(states);
        for (row, &(key, pane)) in panes.panes.iter().enumerate() {
            self.keep_pane(
                key,
                pane,
                At {
                    chunk,
                    row: row as u32,
                },
            );
        }
        let output = match panes.fired.is_empty() {
            true => None,
            false => Some(self.output(&panes.fired, &keys)?),
        };
        for &key in &panes.keys {
            self.drop_done_panes(key);
            if let Some(changed) = self.changed.as_mut() {
                changed.mark(key);
            }
        }
        self.compact()?;
        Ok(output)
    }

    /// Records the keys interned from `known` on: their row bytes and key
    /// groups (from their first rows), and no rows counted.
    fn add_keys(&mut self, keys: &[ArrayRef], key_of_row: &[usize], known: usize) -> Result<()> {
        let mut firsts = Vec::new();
        for (row, &key) in key_of_row.iter().enumerate() {
            if key == known + firsts.len() {
                firsts.push(row as u32);
            }
        }
        if firsts.is_empty() {
            return Ok(());
        }
        let firsts = UInt32Array::from(firsts);
        let taken = (keys.iter())
            .map(|k| Ok(take(k, &firsts, None)?))
            .collect::<Result<Vec<_>>>()?;
        let n = firsts.len();
        match taken.is_empty() {
            true => self.keys.bytes.extend(std::iter::repeat_n(Box::from([]), n)),
            false => {
                let rows = self.converter.convert_columns(&taken)?;
                self.keys.bytes.extend(rows.iter().map(|r| Box::from(r.data())));
            }
        }
        let groups = key_groups(&taken, n, self.max_parallelism)?;
        self.keys.groups.extend(groups.values().iter().copied());
        self.keys.counts.resize(known + n, 0);
        self.keys.panes.resize_with(known + n, VecDeque::new);
        Ok(())
    }

    /// The states of a batch's panes: each continued pane's state from
    /// before, then the batch's rows, aggregated over all panes at once.
    fn batch_pane_states(&self, panes: &BatchPanes, arguments: &Arguments) -> Result<Vec<ArrayRef>> {
        let total = panes.panes.len();
        let mut accumulators = groups_accumulators(&self.spec.aggregates)?;
        let (mut continued, mut at) = (Vec::new(), Vec::new());
        for (local, &(key, pane)) in panes.panes.iter().enumerate() {
            if let Some(&(last, position)) = self.keys.panes[key].back()
                && last == pane
            {
                continued.push(local);
                at.push(position);
            }
        }
        if !at.is_empty() {
            self.merge(&mut accumulators, &self.log.gather(&at)?, &continued, total)?;
        }
        arguments.update_groups(&mut accumulators, &panes.pane_of_row, total)?;
        let mut states = Vec::new();
        for accumulator in &mut accumulators {
            states.extend(accumulator.state(EmitTo::All)?);
        }
        Ok(states)
    }

    /// Merges pane `states` (each aggregate's state columns in turn) into
    /// the groups `groups` of `accumulators` (of `total` groups).
    fn merge(
        &self,
        accumulators: &mut [Box<dyn GroupsAccumulator>],
        states: &[ArrayRef],
        groups: &[usize],
        total: usize,
    ) -> Result<()> {
        let mut offset = 0;
        for (accumulator, width) in accumulators.iter_mut().zip(&self.widths) {
            accumulator.merge_batch(&states[offset..offset + width], groups, total)?;
            offset += width;
        }
        Ok(())
    }

    /// Points `key`'s pane `pane` at its new state, appending the pane
    /// when it is new.
    fn keep_pane(&mut self, key: usize, pane: u64, at: At) {
        let panes = &mut self.keys.panes[key];
        match panes.back_mut() {
            Some((last, position)) if *last == pane => {
                *position = at;
                self.log.release(1);
            }
            _ => {
                self.keys.live += panes.is_empty() as usize;
                panes.push_back((pane, at));
            }
        }
    }

    /// Lets go of the panes of `key` no open window needs; a key left
    /// without panes is counted afresh.
    fn drop_done_panes(&mut self, key: usize) {
        let first = self.shape.first_needed(self.keys.counts[key]);
        let panes = &mut self.keys.panes[key];
        let before = panes.len();
        while panes.front().is_some_and(|(pane, _)| *pane < first) {
            panes.pop_front();
        }
        self.log.release(before - panes.len());
        if panes.is_empty() {
            self.keys.counts[key] = 0;
            self.keys.live -= (before > 0) as usize;
        }
    }

    /// The output rows of fired windows (the batch's `keys` at their last
    /// rows, then each aggregate's value over the window's panes).
    fn output(&self, fired: &[Fired], keys: &[ArrayRef]) -> Result<RecordBatch> {
        let (mut at, mut groups) = (Vec::new(), Vec::new());
        for (i, f) in fired.iter().enumerate() {
            let panes = self.shape.panes_of(f.window);
            for (_, position) in self.keys.panes[f.key].iter().filter(|(p, _)| panes.contains(p)) {
                at.push(*position);
                groups.push(i);
            }
        }
        let mut accumulators = groups_accumulators(&self.spec.aggregates)?;
        self.merge(&mut accumulators, &self.log.gather(&at)?, &groups, fired.len())?;
        let rows = UInt32Array::from_iter_values(fired.iter().map(|f| f.row as u32));
        let mut columns = (keys.iter())
            .map(|k| Ok(take(k, &rows, None)?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        for accumulator in &mut accumulators {
            let array = accumulator.evaluate(EmitTo::All)?;
            let field = self.spec.output_schema.field(columns.len());
            columns.push(match array.data_type() == field.data_type() {
                true => array,
                false => arrow::compute::cast(&array, field.data_type())?,
            });
        }
        Ok(RecordBatch::try_new(self.spec.output_schema.clone(), columns)?)
    }

    /// Gathers the live panes into one chunk when the log's garbage passes
    /// them, and forgets the keys without panes (unless changed since the
    /// last snapshot) when they pass those with.
    fn compact(&mut self) -> Result<()> {
        if self.log.wants_compaction() {
            let live = self.keys.panes.iter_mut().flatten().map(|(_, at)| at);
            self.log.compact(live)?;
        }
        let keyed = !self.spec.key_schema.fields().is_empty();
        if keyed && self.groups.len() > 2 * self.keys.live + KEY_SLACK {
            let kept: Vec<usize> = (0..self.groups.len())
                .filter(|k| {
                    !self.keys.panes[*k].is_empty() || self.changed.as_ref().is_some_and(|c| c.has(*k))
                })
                .collect();
            self.keep_keys(&kept)?;
        }
        Ok(())
    }

    /// Keeps only the keys `kept` (in order), interned afresh.
    fn keep_keys(&mut self, kept: &[usize]) -> Result<()> {
        let parser = self.converter.parser();
        let columns =
            (self.converter).convert_rows(kept.iter().map(|k| parser.parse(&self.keys.bytes[*k])))?;
        let mut groups = Groups::new(&self.spec.key_schema)?;
        let mut indices = Vec::new();
        groups.intern(&columns, kept.len(), &mut indices)?;
        if indices.iter().enumerate().any(|(i, g)| i != *g) {
            return Err(Error::State(format!(
                "{}: keys interned afresh out of order",
                self.spec.name
            )));
        }
        self.groups = groups;
        let old = std::mem::take(&mut self.keys);
        let mut panes = old.panes;
        self.keys = Keys {
            counts: kept.iter().map(|k| old.counts[*k]).collect(),
            panes: kept.iter().map(|k| std::mem::take(&mut panes[*k])).collect(),
            bytes: kept.iter().map(|k| old.bytes[*k].clone()).collect(),
            groups: kept.iter().map(|k| old.groups[*k]).collect(),
            live: old.live,
        };
        if let Some(changed) = self.changed.as_mut() {
            let mut renewed = ChangedGroups::default();
            (kept.iter().enumerate())
                .filter(|(_, k)| changed.has(**k))
                .for_each(|(new, _)| renewed.mark(new));
            *changed = renewed;
        }
        Ok(())
    }

    /// The keys with live panes.
    fn live_keys(&self) -> Vec<usize> {
        (0..self.keys.panes.len())
            .filter(|k| !self.keys.panes[*k].is_empty())
            .collect()
    }

    /// Every live pane as a state row, sorted by key group.
    fn state_rows(&mut self) -> Result<Option<RecordBatch>> {
        let columns = self.state_columns(&self.live_keys())?;
        columns
            .map(|c| sorted_state_rows(&self.spec.state_schema()?, c))
            .transpose()
    }

    /// One file of a replacing chain: every key's panes (`full`), or those
    /// of the keys changed since the last call and a deleting row for each
    /// changed key without panes; `None` without rows.
    fn delta(&mut self, full: bool) -> Result<Option<RecordBatch>> {
        let changed = self.changed.as_mut().map(ChangedGroups::take).unwrap_or_default();
        let keys = match full {
            true => self.live_keys(),
            false => changed,
        };
        let (present, gone): (Vec<usize>, Vec<usize>) =
            keys.into_iter().partition(|k| !self.keys.panes[*k].is_empty());
        let schema = self.spec.state_schema()?;
        let mut parts = Vec::new();
        if let Some(columns) = self.state_columns(&present)? {
            let state_keys = (present.iter())
                .flat_map(|k| std::iter::repeat_n(&self.keys.bytes[*k][..], self.keys.panes[*k].len()))
                .collect::<Vec<&[u8]>>();
            let state_keys = BinaryArray::from_iter_values(state_keys);
            parts.push((state_rows(&schema, columns)?, state_keys, false));
        }
        if !gone.is_empty() {
            let groups = UInt32Array::from_iter_values(gone.iter().map(|k| self.keys.groups[*k]));
            let keys = BinaryArray::from_iter_values(gone.iter().map(|k| &self.keys.bytes[*k][..]));
            parts.push(deleted_part(&schema, groups, keys)?);
        }
        replacement_rows(&schema, parts, full)
    }

    /// The state columns of the live panes of `keys`, each key's in order;
    /// `None` without panes.
    fn state_columns(&self, keys: &[usize]) -> Result<Option<Vec<ArrayRef>>> {
        let (mut of_key, mut ids, mut counts, mut at) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for &key in keys {
            for &(pane, position) in &self.keys.panes[key] {
                of_key.push(key);
                ids.push(pane as i64);
                counts.push(self.keys.counts[key] as i64);
                at.push(position);
            }
        }
        if ids.is_empty() {
            return Ok(None);
        }
        let groups = UInt32Array::from_iter_values(of_key.iter().map(|k| self.keys.groups[*k]));
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(groups),
            Arc::new(Int64Array::from(ids)),
            Arc::new(Int64Array::from(counts)),
        ];
        if !self.spec.key_schema.fields().is_empty() {
            let parser = self.converter.parser();
            let rows = of_key.iter().map(|k| parser.parse(&self.keys.bytes[*k]));
            columns.extend(self.converter.convert_rows(rows)?);
        }
        columns.extend(self.log.gather(&at)?);
        Ok(Some(columns))
    }

    /// Reopens the panes of state rows (this subtask's key groups).
    fn restore_rows(&mut self, rows: &RecordBatch) -> Result<()> {
        OperatorSnapshot::check_columns(rows, self.spec.state_schema()?.as_ref(), &self.spec.name)?;
        let key_count = self.spec.key_schema.fields().len();
        for chunk in in_chunks(rows) {
            let n = chunk.num_rows();
            let keys = &chunk.columns()[3..3 + key_count];
            let mut key_of_row = Vec::with_capacity(n);
            let known = self.groups.len();
            self.groups.intern(keys, n, &mut key_of_row)?;
            self.add_keys(keys, &key_of_row, known)?;
            let ids = chunk.column(1).as_primitive::<Int64Type>();
            let counts = chunk.column(2).as_primitive::<Int64Type>();
            let log_chunk = self.log.append(chunk.columns()[3 + key_count..].to_vec());
            for (row, &key) in key_of_row.iter().enumerate() {
                self.keys.counts[key] = counts.value(row) as u64;
                let pane = ids.value(row) as u64;
                let at = At {
                    chunk: log_chunk,
                    row: row as u32,
                };
                let panes = &mut self.keys.panes[key];
                self.keys.live += panes.is_empty() as usize;
                let position = panes.partition_point(|(p, _)| *p < pane);
                panes.insert(position, (pane, at));
            }
        }
        self.compact()
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
        if let Some(fired) = self.process(&batch)? {
            out.batch(fired);
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
