//! Window aggregation: GROUP BY keys within TUMBLE, HOP and CUMULATE windows.
//!
//! Rows are aggregated into *slices* (see [`weir_plan::window`]): each row updates the
//! DataFusion accumulators of exactly one slice, whatever the number of windows
//! it belongs to. A window fires when the watermark reaches its end - 1 ms: a
//! window of one slice is evaluated directly; otherwise the states of its slices
//! are merged (`GroupsAccumulator::state` / `merge_batch`), so a row is never
//! copied into size/slide windows.
//!
//! ```text
//!            Single                     Local ═══ HASH(keys) ═══► Global
//!  rows ──► slices ──► fire      rows ──► slices ──► partial states ──► slices ──► fire
//!                                  (emitted when a slice is complete)
//! ```
//!
//! A row whose last window has fired is late: it is dropped and counted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, TimestampMillisecondArray, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::{DataType, Int64Type, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion_expr::{EmitTo, GroupsAccumulator};
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;

use crate::groups::{ChangedGroups, Groups};
use crate::{Error, Result};
use weir_common::ids::CheckpointId;
use weir_common::time::Timestamp;
use weir_common::time::to_epoch_millis;
use weir_common::time::wall_clock_millis;
use weir_common::time::{MAX_WATERMARK, MIN_WATERMARK};
use weir_plan::window::{GroupColumn, Phase, TimeShift, WindowProperty, WindowSpec};
use weir_runtime::operator::{LaterRows, OperatorSnapshot, TaskMetrics};
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};
use weir_state::incremental::{DeltaKind, upsert_delta};
use weir_state::snapshot::{
    concat_by_key_group, key_groups, schema_signature, state_rows, window_state_schema,
};

mod spill;
use spill::Spill;

/// The plan of a window aggregation; creates one operator per subtask.
#[derive(Debug)]
pub struct WindowAggregate {
    /// Phase.
    pub phase: Phase,
    /// Windows.
    pub window: WindowSpec,
    /// Local time for `TIMESTAMP_LTZ` windows.
    pub shift: TimeShift,
    /// Name of the time attribute, for EXPLAIN.
    pub time_name: String,
    /// Input column of the time attribute (Single and Local).
    pub time_index: usize,
    /// Windows over a processing-time attribute: rows go to the window of the
    /// operator's wall clock, and windows fire by it (never two-phase).
    pub processing_time: bool,
    /// Grouping keys, evaluated on the input (for Global: the key columns).
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// Schema of the key columns.
    pub key_schema: SchemaRef,
    /// What the aggregates' arguments are over: the raw rows (the global
    /// phase's input is the partial states).
    pub aggregate_input: SchemaRef,
    /// Aggregate functions.
    pub aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// `FILTER (WHERE ...)` of each aggregate (Single and Local).
    pub filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    /// Grouping columns of the output (Single and Global).
    pub group_columns: Vec<GroupColumn>,
    /// Output schema.
    pub output_schema: SchemaRef,
    /// Its name in the plan (EXPLAIN's), for errors and logs.
    pub name: String,
}

impl WindowAggregate {
    fn new_accumulators(&self) -> Result<Vec<Box<dyn GroupsAccumulator>>> {
        crate::window::accumulate::groups_accumulators(&self.aggregates)
    }

    fn new_state(&self) -> Result<LiveState> {
        Ok(LiveState {
            groups: Groups::new(&self.key_schema)?,
            accumulators: self.new_accumulators()?,
            keys: Vec::new(),
        })
    }

    /// Number of state columns of each aggregate.
    pub fn state_widths(&self) -> Result<Vec<usize>> {
        self.aggregates
            .iter()
            .map(|a| Ok(a.state_fields()?.len()))
            .collect()
    }
}

/// The operator factory of a window aggregation.
#[derive(Debug, Clone)]
pub struct WindowAggregateFactory(pub Arc<WindowAggregate>);

impl OperatorFactory for WindowAggregateFactory {
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let spec = self.0.clone();
        let state_widths = spec.state_widths()?;
        Ok(Box::new(WindowAggregateOperator {
            spec,
            state_widths,
            slices: BTreeMap::new(),
            pending_ends: BTreeSet::new(),
            watermark: MIN_WATERMARK,
            metrics: ctx.metrics.clone(),
            batch_size: ctx.batch_size,
            max_parallelism: ctx.max_parallelism,
            group_indices: Vec::new(),
            // The spilling backend takes full snapshots: they link its
            // runs, and write only what is in memory.
            incremental: ctx.incremental && self.0.phase != Phase::Local && ctx.spill.is_none(),
            spill: ctx.spill.clone().map(Spill::new),
        }))
    }

    fn can_spill(&self) -> bool {
        true
    }
}

/// State read out of slices: each slice's `[keys..., states...]` chunks.
type SliceChunks = Vec<(i64, Vec<ArrayRef>)>;

/// Groups and accumulators being updated, and the key columns of the
/// groups in group order (a chunk for each batch that added groups), which
/// a snapshot reads without emptying the hash table.
struct LiveState {
    groups: Groups,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    keys: Vec<Vec<ArrayRef>>,
}

impl LiveState {
    /// Its groups as `[keys..., states...]`, the tables dropped.
    fn into_chunk(mut self) -> Result<Vec<ArrayRef>> {
        let mut chunk = self.groups.emit()?;
        for acc in &mut self.accumulators {
            chunk.extend(acc.state(EmitTo::All)?);
        }
        Ok(chunk)
    }

    /// Bytes it takes in memory.
    fn size(&self) -> usize {
        let keys: usize = (self.keys.iter().flatten())
            .map(|k| k.get_array_memory_size())
            .sum();
        self.groups.size() + keys + self.accumulators.iter().map(|a| a.size()).sum::<usize>()
    }

    /// The group of each of `rows` rows of `keys`, into `group_indices`;
    /// the keys of groups it adds are logged.
    fn intern(&mut self, keys: &[ArrayRef], rows: usize, group_indices: &mut Vec<usize>) -> Result<()> {
        let known = self.groups.len();
        self.groups.intern(keys, rows, group_indices)?;
        let added = self.groups.len() - known;
        if added == 0 || keys.is_empty() {
            return Ok(());
        }
        if added == rows {
            // Every row a new group, in order.
            return self.log_keys(keys.to_vec());
        }
        let mut firsts = Vec::with_capacity(added);
        for (row, &g) in group_indices.iter().enumerate() {
            if g == known + firsts.len() {
                firsts.push(row as u32);
            }
        }
        let firsts = UInt32Array::from(firsts);
        self.log_keys(take_all(keys, &Some(firsts))?)
    }

    /// Appends key columns to the log, as the types of those before them
    /// (rows restored and rows read could differ, e.g. in string layout).
    fn log_keys(&mut self, keys: Vec<ArrayRef>) -> Result<()> {
        let keys = match self.keys.first() {
            None => keys,
            Some(first) => (keys.into_iter().zip(first))
                .map(|(k, f)| match k.data_type() == f.data_type() {
                    true => Ok(k),
                    false => Ok(arrow::compute::cast(&k, f.data_type())?),
                })
                .collect::<Result<Vec<_>>>()?,
        };
        self.keys.push(keys);
        Ok(())
    }

    /// Its groups as `[keys..., states...]`, leaving it as it was: the keys
    /// from the log (one chunk from then on), the states read out of the
    /// accumulators and merged straight back (group `i` into group `i`).
    /// The hash table is not touched, so this costs two passes over the
    /// states, where emptying and refilling the table cost a hash lookup
    /// per group.
    fn read(&mut self, widths: &[usize], group_indices: &mut Vec<usize>) -> Result<Vec<ArrayRef>> {
        if self.keys.len() > 1 {
            let width = self.keys[0].len();
            let joined = (0..width)
                .map(|c| {
                    let parts: Vec<&dyn Array> = self.keys.iter().map(|k| k[c].as_ref()).collect();
                    Ok(arrow::compute::concat(&parts)?)
                })
                .collect::<Result<Vec<ArrayRef>>>()?;
            self.keys = vec![joined];
        }
        let rows = self.groups.len();
        let mut chunk = self.keys.first().cloned().unwrap_or_default();
        group_indices.clear();
        group_indices.extend(0..rows);
        for (acc, width) in self.accumulators.iter_mut().zip(widths) {
            let states = acc.state(EmitTo::All)?;
            debug_assert_eq!(states.len(), *width);
            acc.merge_batch(&states, group_indices, rows)?;
            chunk.extend(states);
        }
        Ok(chunk)
    }

    /// Merges `chunk` (`[keys..., states...]`) into the state.
    fn merge(&mut self, chunk: &[ArrayRef], widths: &[usize], group_indices: &mut Vec<usize>) -> Result<()> {
        let rows = chunk.first().map_or(0, |c| c.len());
        let key_count = chunk.len() - widths.iter().sum::<usize>();
        self.intern(&chunk[..key_count], rows, group_indices)?;
        let total = self.groups.len();
        let mut offset = key_count;
        for (acc, width) in self.accumulators.iter_mut().zip(widths) {
            acc.merge_batch(&chunk[offset..offset + width], group_indices, total)?;
            offset += width;
        }
        Ok(())
    }
}

/// The state of one slice: live accumulators, and states frozen when an earlier
/// window over the slice fired (each `[keys..., states...]`; never with
/// incremental checkpoints, whose deltas replace a key's row of a slice, so
/// it must be one). With incremental checkpoints, the live groups changed
/// since the last snapshot are marked: a delta holds their states.
#[derive(Default)]
struct Slice {
    live: Option<LiveState>,
    frozen: Vec<Vec<ArrayRef>>,
    changed: ChangedGroups,
}

impl Slice {
    /// Moves the live state into the frozen list.
    fn freeze(&mut self) -> Result<()> {
        let Some(live) = self.live.take() else {
            return Ok(());
        };
        if live.groups.is_empty() {
            return Ok(());
        }
        self.frozen.push(live.into_chunk()?);
        Ok(())
    }
}

struct WindowAggregateOperator {
    spec: Arc<WindowAggregate>,
    state_widths: Vec<usize>,
    slices: BTreeMap<i64, Slice>,
    /// Ends (on the window axis) of windows that hold data and have not fired.
    pending_ends: BTreeSet<i64>,
    watermark: Timestamp,
    metrics: Arc<TaskMetrics>,
    batch_size: usize,
    max_parallelism: usize,
    group_indices: Vec<usize>,
    /// Incremental checkpoints: each slice marks the groups rows changed.
    incremental: bool,
    /// The spilling state backend: runs of slices, and a firing in progress.
    spill: Option<Spill>,
}

/// Row indices of a batch grouped by slice; `None` when every row is in one slice.
fn rows_by_slice(slices: &[i64]) -> Vec<(i64, Option<UInt32Array>)> {
    let Some(&first) = slices.first() else {
        return vec![];
    };
    if slices.iter().all(|s| *s == first) {
        return vec![(first, None)];
    }
    let mut groups: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
    for (row, slice) in slices.iter().enumerate() {
        groups.entry(*slice).or_default().push(row as u32);
    }
    groups
        .into_iter()
        .map(|(slice, rows)| (slice, Some(UInt32Array::from(rows))))
        .collect()
}

fn take_all(columns: &[ArrayRef], indices: &Option<UInt32Array>) -> Result<Vec<ArrayRef>> {
    match indices {
        None => Ok(columns.to_vec()),
        Some(indices) => columns
            .iter()
            .map(|c| Ok(take(c.as_ref(), indices, None)?))
            .collect(),
    }
}

impl WindowAggregateOperator {
    fn is_late(&self, slice: i64) -> bool {
        let last_end = self.spec.window.last_window_end(slice);
        self.spec.shift.to_utc(last_end) - 1 <= self.watermark
    }

    fn fires(&self) -> bool {
        self.spec.phase != Phase::Local
    }

    /// The slice's state, created (and its windows registered) when new.
    fn slice_state(&mut self, slice: i64) -> Result<&mut LiveState> {
        if !self.slices.contains_key(&slice) && self.fires() {
            for end in self.spec.window.window_ends(slice) {
                if self.spec.shift.to_utc(end) - 1 > self.watermark {
                    self.pending_ends.insert(end);
                }
            }
        }
        let spec = self.spec.clone();
        let entry = self.slices.entry(slice).or_default();
        let state = &mut entry.live;
        if state.is_none() {
            *state = Some(spec.new_state()?);
        }
        Ok(state.as_mut().expect("created above"))
    }

    /// Merges `[keys..., states...]` into the slice's live state.
    fn merge_into_live(&mut self, slice: i64, chunk: &[ArrayRef]) -> Result<()> {
        let rows = chunk.first().map_or(0, |c| c.len());
        if rows == 0 {
            return Ok(());
        }
        let spec = self.spec.clone();
        let entry = self.slices.entry(slice).or_default();
        if entry.live.is_none() {
            entry.live = Some(spec.new_state()?);
        }
        let live = entry.live.as_mut().expect("created above");
        let mut group_indices = std::mem::take(&mut self.group_indices);
        live.merge(chunk, &self.state_widths, &mut group_indices)?;
        self.group_indices = group_indices;
        Ok(())
    }

    /// The whole state of a slice that goes away as its last window fires.
    fn final_state(&mut self, slice: i64) -> Option<LiveState> {
        self.slices.remove(&slice).and_then(|entry| entry.live)
    }

    /// Incremental checkpoints: marks the groups `group_indices` of `slice`
    /// changed.
    fn mark_changed(&mut self, slice: i64, group_indices: &[usize]) {
        if let Some(entry) = self.slices.get_mut(&slice).filter(|_| self.incremental) {
            entry.changed.mark_all(group_indices);
        }
    }

    fn process_rows(&mut self, batch: &RecordBatch) -> Result<()> {
        let rows = batch.num_rows();
        let time = batch.column(self.spec.time_index);
        if time.null_count() > 0 {
            return Err(Error::Execution(format!(
                "the window time attribute '{}' is NULL in {} row(s)",
                self.spec.time_name,
                time.null_count()
            )));
        }
        let millis = to_epoch_millis(time.as_ref())?;
        let window = self.spec.window;
        let slices: Vec<i64> = if self.spec.processing_time {
            // Never a window the clock has already fired: a row processed in the
            // millisecond of a firing goes to the next window.
            let now = wall_clock_millis().max(self.watermark.saturating_add(1));
            vec![window.slice_start(self.spec.shift.to_local(now)); rows]
        } else if self.spec.shift.is_utc() {
            millis.values().iter().map(|t| window.slice_start(*t)).collect()
        } else {
            millis
                .values()
                .iter()
                .map(|t| window.slice_start(self.spec.shift.to_local(*t)))
                .collect()
        };
        let keys = self
            .spec
            .keys
            .iter()
            .map(|k| k.evaluate(batch)?.into_array(rows))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        let args = self
            .spec
            .aggregates
            .iter()
            .map(|a| {
                a.expressions()
                    .iter()
                    .map(|e| e.evaluate(batch)?.into_array(rows))
                    .collect::<datafusion_common::Result<Vec<_>>>()
            })
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        let filters = self
            .spec
            .filters
            .iter()
            .map(|f| match f {
                None => Ok(None),
                Some(f) => Ok(Some(f.evaluate(batch)?.into_array(rows)?)),
            })
            .collect::<Result<Vec<Option<ArrayRef>>>>()?;
        for (slice, indices) in rows_by_slice(&slices) {
            let count = indices.as_ref().map_or(rows, |i| i.len());
            if self.is_late(slice) {
                TaskMetrics::add(&self.metrics.late_records_dropped, count as u64);
                continue;
            }
            let keys = take_all(&keys, &indices)?;
            let args = args
                .iter()
                .map(|a| take_all(a, &indices))
                .collect::<Result<Vec<_>>>()?;
            let filters = filters
                .iter()
                .map(|f| match f {
                    None => Ok(None),
                    Some(f) => Ok(Some(take_all(std::slice::from_ref(f), &indices)?.remove(0))),
                })
                .collect::<Result<Vec<_>>>()?;
            let mut group_indices = std::mem::take(&mut self.group_indices);
            let state = self.slice_state(slice)?;
            state.intern(&keys, count, &mut group_indices)?;
            let total = state.groups.len();
            for ((acc, values), filter) in state.accumulators.iter_mut().zip(&args).zip(&filters) {
                let filter = filter.as_ref().map(|f| f.as_boolean().clone());
                acc.update_batch(values, &group_indices, filter.as_ref(), total)?;
            }
            self.mark_changed(slice, &group_indices);
            self.group_indices = group_indices;
        }
        Ok(())
    }

    fn process_partials(&mut self, batch: &RecordBatch) -> Result<()> {
        let key_count = self.spec.key_schema.fields().len();
        let slices = batch.column(0).as_primitive::<Int64Type>().values().to_vec();
        let columns = batch.columns().to_vec();
        for (slice, indices) in rows_by_slice(&slices) {
            let count = indices.as_ref().map_or(batch.num_rows(), |i| i.len());
            if self.is_late(slice) {
                TaskMetrics::add(&self.metrics.late_records_dropped, count as u64);
                continue;
            }
            let columns = take_all(&columns, &indices)?;
            let widths = self.state_widths.clone();
            let mut group_indices = std::mem::take(&mut self.group_indices);
            let state = self.slice_state(slice)?;
            state.intern(&columns[1..1 + key_count], count, &mut group_indices)?;
            let total = state.groups.len();
            let mut offset = 1 + key_count;
            for (acc, width) in state.accumulators.iter_mut().zip(widths) {
                acc.merge_batch(&columns[offset..offset + width], &group_indices, total)?;
                offset += width;
            }
            self.mark_changed(slice, &group_indices);
            self.group_indices = group_indices;
        }
        Ok(())
    }

    /// Local phase: emits the partial state of every slice the watermark completed.
    fn emit_complete_slices(&mut self, out: &mut Output) -> Result<()> {
        let size = self.spec.window.slice_size();
        let complete: Vec<i64> = self
            .slices
            .keys()
            .copied()
            .take_while(|s| self.spec.shift.to_utc(s + size) - 1 <= self.watermark)
            .collect();
        self.emit_slices(complete, out)
    }

    /// Local phase: emits the partial states of `slices` and forgets them.
    fn emit_slices(&mut self, slices: Vec<i64>, out: &mut Output) -> Result<()> {
        for slice in slices {
            let mut state = self.slices.remove(&slice).expect("listed by the caller");
            let Some(mut live) = state.live.take() else {
                continue;
            };
            let rows = live.groups.len();
            if rows == 0 {
                continue;
            }
            let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from_value(slice, rows))];
            columns.extend(live.groups.emit()?);
            for acc in &mut live.accumulators {
                columns.extend(acc.state(EmitTo::All)?);
            }
            out.batch(RecordBatch::try_new(self.spec.output_schema.clone(), columns)?);
        }
        Ok(())
    }

    /// Single and Global phases: the state of one slice as `[keys...,
    /// states...]` chunks (what earlier firings froze, and the live state),
    /// leaving the slice as it was ([`LiveState::read`]: the hash tables are
    /// not touched).
    fn slice_chunks(&mut self, slice: i64) -> Result<Vec<Vec<ArrayRef>>> {
        let entry = self.slices.get_mut(&slice).expect("listed by the caller");
        let mut chunks = entry.frozen.clone();
        let mut group_indices = std::mem::take(&mut self.group_indices);
        if let Some(live) = entry.live.as_mut().filter(|l| !l.groups.is_empty()) {
            chunks.push(live.read(&self.state_widths, &mut group_indices)?);
        }
        self.group_indices = group_indices;
        Ok(chunks)
    }

    /// The schema of this operator's state rows.
    fn state_schema(&self) -> Result<SchemaRef> {
        window_state_schema(&["_slice"], &self.spec.key_schema, &self.spec.aggregates)
    }

    /// Every slice's state as `[keys..., states...]` chunks, read now.
    fn state_chunks(&mut self) -> Result<SliceChunks> {
        let slices: Vec<i64> = self.slices.keys().copied().collect();
        let mut chunks = Vec::new();
        for slice in slices {
            chunks.extend(self.slice_chunks(slice)?.into_iter().map(|c| (slice, c)));
        }
        Ok(chunks)
    }

    /// State rows `[_key_group, _slice, keys..., states...]` of chunks of
    /// slices, sorted by key group.
    fn chunks_to_rows(&self, chunks: SliceChunks) -> Result<Option<RecordBatch>> {
        (self.rows_of_chunks()?)(chunks)
    }

    /// What turns chunks of slices into state rows, owning all it needs
    /// (a snapshot's writer calls it after the task went on).
    fn rows_of_chunks(
        &self,
    ) -> Result<impl FnOnce(SliceChunks) -> Result<Option<RecordBatch>> + Send + 'static> {
        let schema = self.state_schema()?;
        let key_count = self.spec.key_schema.fields().len();
        let max_parallelism = self.max_parallelism;
        Ok(move |chunks: SliceChunks| {
            let mut batches = Vec::new();
            for (slice, chunk) in chunks {
                let rows = chunk.first().map_or(0, |c| c.len());
                if rows == 0 {
                    continue;
                }
                let groups = key_groups(&chunk[..key_count], rows, max_parallelism)?;
                let mut columns: Vec<ArrayRef> =
                    vec![Arc::new(groups), Arc::new(Int64Array::from_value(slice, rows))];
                columns.extend(chunk);
                batches.push(state_rows(&schema, columns)?);
            }
            concat_by_key_group(batches)
        })
    }

    /// A snapshot of chunks read now, whose rows its writer builds (as an
    /// upsert `delta`, or whole state rows).
    fn snapshot_of(&self, chunks: SliceChunks, delta: bool) -> Result<OperatorSnapshot> {
        let build = self.rows_of_chunks()?;
        let schema = self.state_schema()?;
        let key_columns = self.upsert_key_columns();
        let mut snapshot = OperatorSnapshot::with_watermark(self.watermark, None);
        if chunks.iter().all(|(_, c)| c.first().is_none_or(|a| a.is_empty())) {
            // Nothing to write: the chain records no delta.
            return Ok(snapshot);
        }
        snapshot.rows_later = Some(LaterRows::new(move || match delta {
            false => build(chunks),
            true => upsert_delta(&schema, build(chunks)?, None, key_columns),
        }));
        Ok(snapshot)
    }

    /// Columns after `_key_group` that name a state row: `_slice` and the keys.
    fn upsert_key_columns(&self) -> usize {
        1 + self.spec.key_schema.fields().len()
    }

    /// Incremental checkpoints: the states of the groups changed since the
    /// last snapshot (of slices with a window still to fire), or every
    /// slice's state when `full`.
    fn delta_chunks(&mut self, full: bool) -> Result<SliceChunks> {
        if full {
            self.slices.values_mut().for_each(|s| drop(s.changed.take()));
            return self.state_chunks();
        }
        let mut chunks = Vec::new();
        let mut group_indices = std::mem::take(&mut self.group_indices);
        for (&slice, entry) in self.slices.iter_mut().filter(|(_, e)| !e.changed.is_empty()) {
            let mut changed = entry.changed.take();
            let Some(live) = entry.live.as_mut() else {
                continue;
            };
            let whole = changed.len() == live.groups.len();
            let mut chunk = live.read(&self.state_widths, &mut group_indices)?;
            if !whole {
                changed.sort_unstable();
                let rows = UInt32Array::from_iter_values(changed.iter().map(|g| *g as u32));
                chunk = take_all(&chunk, &Some(rows))?;
            }
            chunks.push((slice, chunk));
        }
        self.group_indices = group_indices;
        Ok(chunks)
    }

    /// Restores slices from state rows (this subtask's key groups only).
    fn restore_rows(&mut self, rows: &RecordBatch) -> Result<()> {
        let slices = rows.column(1).as_primitive::<Int64Type>().values().to_vec();
        let columns = rows.columns()[2..].to_vec();
        for (slice, indices) in rows_by_slice(&slices) {
            if self.is_late(slice) {
                // Every window over it fired before the snapshot: a delta
                // written before that still carries it.
                continue;
            }
            let chunk = take_all(&columns, &indices)?;
            if self.fires() {
                for end in self.spec.window.window_ends(slice) {
                    if self.spec.shift.to_utc(end) - 1 > self.watermark {
                        self.pending_ends.insert(end);
                    }
                }
            }
            // Merged as it is read: several rows of one key (partial states
            // of a base and its deltas) become one.
            self.merge_into_live(slice, &chunk)?;
            self.spill_if_over_budget()?;
        }
        Ok(())
    }

    /// Single and Global phases: fires every window the watermark completed.
    /// A window over spilled slices starts a firing that
    /// [`Operator::emit_more`] goes on with, one key-group range at a time;
    /// later windows wait for it.
    fn fire_windows(&mut self, out: &mut Output) -> Result<()> {
        while let Some(&end) = self.pending_ends.first() {
            if self.spec.shift.to_utc(end) - 1 > self.watermark || self.is_firing() {
                break;
            }
            self.pending_ends.pop_first();
            if self.has_runs(self.spec.window.window_start(end), end) {
                return self.start_spilled_firing(end);
            }
            if let Some(batch) = self.evaluate_window(end)? {
                self.emit_sized(batch, out);
            }
            self.drop_fired_slices(end);
        }
        Ok(())
    }

    /// Emits `batch` in batches of at most the batch size.
    fn emit_sized(&self, batch: RecordBatch, out: &mut Output) {
        let rows = batch.num_rows();
        let mut offset = 0;
        while offset < rows {
            let len = self.batch_size.min(rows - offset);
            out.batch(batch.slice(offset, len));
            offset += len;
        }
    }

    /// Forgets the slices whose last window ends by `end` (and their runs).
    fn drop_fired_slices(&mut self, end: i64) {
        while let Some((&slice, _)) = self.slices.first_key_value() {
            if self.spec.window.last_window_end(slice) > end {
                break;
            }
            self.slices.remove(&slice);
            if let Some(spill) = &mut self.spill {
                spill.runs.remove(&slice);
            }
        }
    }

    fn evaluate_window(&mut self, end: i64) -> Result<Option<RecordBatch>> {
        let window = self.spec.window;
        let start = window.window_start(end);
        let members: Vec<i64> = self.slices.range(start..end).map(|(s, _)| *s).collect();
        if members.is_empty() {
            return Ok(None);
        }
        let only = members[0];
        let direct =
            members.len() == 1 && window.last_window_end(only) == end && self.slices[&only].frozen.is_empty();
        let state = if direct {
            match self.final_state(only) {
                Some(live) => live,
                None => return Ok(None),
            }
        } else {
            let mut merged = self.spec.new_state()?;
            let (mut group_indices, mut identity) = (std::mem::take(&mut self.group_indices), Vec::new());
            for member in members {
                let slice = self.slices.get_mut(&member).expect("listed above");
                if !self.incremental {
                    slice.freeze()?;
                }
                for columns in &slice.frozen {
                    merged.merge(columns, &self.state_widths, &mut group_indices)?;
                }
                // Incremental checkpoints: read, so the slice keeps one row per key.
                if let Some(live) = slice.live.as_mut().filter(|l| !l.groups.is_empty()) {
                    let columns = live.read(&self.state_widths, &mut identity)?;
                    merged.merge(&columns, &self.state_widths, &mut group_indices)?;
                }
            }
            self.group_indices = group_indices;
            merged
        };
        self.window_output(state, start, end)
    }

    /// The output rows of window `[start, end)` from its merged state.
    fn window_output(&self, mut state: LiveState, start: i64, end: i64) -> Result<Option<RecordBatch>> {
        let rows = state.groups.len();
        if rows == 0 {
            return Ok(None);
        }
        let keys = state.groups.emit()?;
        let mut columns = Vec::with_capacity(self.spec.output_schema.fields().len());
        for (column, field) in self
            .spec
            .group_columns
            .iter()
            .zip(self.spec.output_schema.fields())
        {
            let array: ArrayRef = match column {
                GroupColumn::Key(i) => keys[*i].clone(),
                GroupColumn::Window(property) => {
                    let value = match property {
                        WindowProperty::Start => start,
                        WindowProperty::End => end,
                        WindowProperty::Time => match field.data_type() {
                            DataType::Timestamp(_, Some(_)) => self.spec.shift.to_utc(end) - 1,
                            _ => end - 1,
                        },
                    };
                    let zone = match field.data_type() {
                        DataType::Timestamp(_, zone) => zone.clone(),
                        _ => None,
                    };
                    Arc::new(TimestampMillisecondArray::from_value(value, rows).with_timezone_opt(zone))
                }
            };
            columns.push(array);
        }
        for acc in &mut state.accumulators {
            columns.push(acc.evaluate(EmitTo::All)?);
        }
        // Aggregates may produce a different (but compatible) type than planned.
        let columns = columns
            .into_iter()
            .zip(self.spec.output_schema.fields())
            .map(|(c, f)| {
                if c.data_type() == f.data_type() {
                    Ok(c)
                } else {
                    Ok(arrow::compute::cast(&c, f.data_type())?)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(RecordBatch::try_new(
            self.spec.output_schema.clone(),
            columns,
        )?))
    }
}

impl WindowAggregateOperator {
    /// Moves the operator's time (watermark, or wall clock) to `time`.
    fn advance(&mut self, time: Timestamp, out: &mut Output) -> Result<()> {
        self.watermark = time;
        match self.spec.phase {
            Phase::Local => self.emit_complete_slices(out),
            Phase::Single | Phase::Global => self.fire_windows(out),
        }
    }
}

impl Operator for WindowAggregateOperator {
    fn name(&self) -> String {
        self.spec.name.clone()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        match self.spec.phase {
            Phase::Single | Phase::Local => self.process_rows(&batch)?,
            Phase::Global => self.process_partials(&batch)?,
        }
        self.check_budget(out)
    }

    fn emit_more(&mut self, out: &mut Output) -> Result<bool> {
        self.go_on_firing(out)
    }

    fn process_watermark(&mut self, watermark: Timestamp, out: &mut Output) -> Result<()> {
        if self.spec.processing_time && watermark != MAX_WATERMARK {
            // Event time passes through; the wall clock fires the windows.
            out.watermark(watermark);
            return Ok(());
        }
        if watermark <= self.watermark {
            return Ok(());
        }
        self.advance(watermark, out)?;
        self.watermark_after_firing(watermark, out);
        Ok(())
    }

    fn uses_processing_time(&self) -> bool {
        self.spec.processing_time
    }

    fn on_processing_time(&mut self, now: Timestamp, out: &mut Output) -> Result<()> {
        if now > self.watermark {
            self.advance(now, out)?;
        }
        Ok(())
    }

    fn prepare_snapshot(&mut self, out: &mut Output) -> Result<()> {
        // A local pre-aggregation sends what it holds ahead of the barrier, as
        // Flink's does: the global phase merges partial states, so early ones
        // are fine, and the local phase has nothing to save.
        if self.spec.phase == Phase::Local {
            let all: Vec<i64> = self.slices.keys().copied().collect();
            self.emit_slices(all, out)?;
        }
        Ok(())
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        if self.spec.phase == Phase::Local {
            return Ok(None);
        }
        let chunks = self.state_chunks()?;
        let mut snapshot = self.snapshot_of(chunks, false)?;
        snapshot.runs = self.all_runs();
        Ok(Some(snapshot))
    }

    fn delta_kind(&self) -> Option<DeltaKind> {
        (self.incremental).then(|| DeltaKind::Upsert {
            key_columns: self.upsert_key_columns(),
        })
    }

    fn snapshot_delta(&mut self, _checkpoint: CheckpointId, full: bool) -> Result<Option<OperatorSnapshot>> {
        let chunks = self.delta_chunks(full)?;
        Ok(Some(self.snapshot_of(chunks, !full)?))
    }

    fn state_signature(&self) -> Result<Option<String>> {
        if self.spec.phase == Phase::Local {
            return Ok(None);
        }
        Ok(Some(schema_signature(self.state_schema()?.as_ref())))
    }

    fn is_keyed(&self) -> bool {
        self.spec.phase != Phase::Local
    }

    fn restore_rescaled(&mut self, snapshots: Vec<OperatorSnapshot>) -> Result<()> {
        match OperatorSnapshot::merge_by_watermark(snapshots, &self.spec.name)? {
            Some(merged) => self.restore(merged),
            None => Ok(()),
        }
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        let name = self.spec.name.clone();
        self.watermark = snapshot.watermark(&name)?;
        if let Some(rows) = &snapshot.rows {
            OperatorSnapshot::check_columns(rows, self.state_schema()?.as_ref(), &name)?;
            self.restore_rows(rows)?;
        }
        Ok(())
    }
}
