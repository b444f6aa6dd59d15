//! Non-windowed aggregation (`GROUP BY` keys without a window, or a global
//! aggregate): an updating result, as Flink's `GroupAggregate`.
//!
//! Each input batch updates the groups it touches (a row of kind `-U`/`-D`
//! is taken away from its group), then for each touched group one change
//! is emitted: `+I` for a new group, `-U old` and `+U new` for a changed one,
//! `-D old` when its last row was taken away, and nothing when its result
//! did not change. This is Flink's mini-batch, one batch at a time.
//!
//! ```text
//!  batch ──► keys → groups ──► rows counted, accumulators updated ──► changes of touched groups
//!            (before: evaluate touched)                 (after: evaluate touched, compare)
//! ```
//!
//! A retraction for a group that has no rows (its state expired, or it was
//! never seen) is ignored, as Flink ignores it.
//!
//! With parallelism, and when every aggregate's partial states merge
//! (COUNT, SUM, AVG; MIN and MAX of insert-only input), it runs in two
//! phases as Flink's local/global aggregation: a local phase before the
//! hash exchange folds each input batch into one row per group (keys, rows
//! added minus rows taken away, partial states), and the global phase after
//! it merges those into its state and emits the changes.
//!
//! ```text
//!  Single:  rows ══HASH══► GroupAggregate ──► changes
//!  Two:     rows ──► LocalGroupAggregate ══HASH══► GlobalGroupAggregate ──► changes
//!                    (per batch: keys, _delta, partial states)
//! ```

mod spill;

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;

use crate::groups::Groups;
use crate::key_store::KeyStore;
use crate::waiting::ReadsWaiting;
use crate::{Error, Result};
use weir_common::changelog::{self, RowKind};
use weir_common::ids::CheckpointId;
use weir_common::time::Timestamp;
use weir_common::time::wall_clock_millis;
use weir_functions::accumulator::{RetractAccumulator, accumulator_for, state_fields};
use weir_plan::window::Phase;
use weir_runtime::operator::OperatorSnapshot;
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};
use weir_state::incremental::{DeltaKind, upsert_delta};
use weir_state::memory_guess::SpillsWhenFull;
use weir_state::snapshot::{KEY_GROUP_COLUMN, key_groups, schema_signature, sorted_state_rows};
use weir_state::spilled::SpillSlot;

/// The plan of a non-windowed aggregation.
#[derive(Debug)]
pub struct GroupAggregate {
    /// Single, or the local or global phase of two.
    pub phase: Phase,
    /// Grouping keys, over the input (for Global: the key columns).
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// Their columns (the first columns of the output).
    pub key_schema: SchemaRef,
    /// The input's schema (with its op column when it updates).
    pub aggregate_input: SchemaRef,
    /// Aggregate calls.
    pub aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// `FILTER (WHERE ...)` of each (Single and Local).
    pub filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    /// Output: keys, aggregates, op column (Local: keys, `_delta`, partial
    /// states).
    pub output_schema: SchemaRef,
    /// `table.exec.state.ttl`: a group not updated for this long (by the
    /// wall clock) is forgotten without a change being emitted, as Flink's
    /// state TTL does; when its key comes again it starts afresh (`+I`).
    pub state_ttl: Option<std::time::Duration>,
    /// Its name in the plan (EXPLAIN's), for errors and logs.
    pub name: String,
}

impl GroupAggregate {
    /// Whether the input carries row kinds (so aggregates must retract).
    fn retracting(&self) -> bool {
        changelog::has_op(&self.aggregate_input)
    }

    /// The accumulators of its aggregates, new.
    pub fn accumulators(&self) -> Result<Vec<Box<dyn RetractAccumulator>>> {
        self.aggregates
            .iter()
            .map(|a| accumulator_for(a, &self.aggregate_input, self.retracting()))
            .collect()
    }

    /// What a local phase emits per group: keys, `_delta` (rows added minus
    /// rows taken away), then each aggregate's partial state columns.
    pub fn partial_schema(&self) -> Result<SchemaRef> {
        let mut fields: Vec<Field> = self
            .key_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("_delta", DataType::Int64, false));
        fields.extend(state_fields(&self.accumulators()?));
        Ok(Arc::new(Schema::new(fields)))
    }

    /// The columns of its state rows: `_key_group`, keys, `_count`,
    /// `_written` with a state TTL, then each aggregate's state columns
    /// prefixed by its position.
    fn state_schema(&self, accumulators: &[Box<dyn RetractAccumulator>]) -> SchemaRef {
        let mut fields = vec![Field::new(KEY_GROUP_COLUMN, DataType::UInt32, false)];
        fields.extend(self.key_schema.fields().iter().map(|f| f.as_ref().clone()));
        fields.push(Field::new("_count", DataType::Int64, false));
        if self.state_ttl.is_some() {
            // When each group was last written (ms, processing time), so its
            // TTL goes on counting across a restore, as Flink's TTL state does.
            fields.push(Field::new(WRITTEN_COLUMN, DataType::Int64, false));
        }
        fields.extend(state_fields(accumulators));
        Arc::new(Schema::new(fields))
    }
}

/// The state column of when a group was last written, with a state TTL.
const WRITTEN_COLUMN: &str = "_written";

/// The operator factory of a non-windowed aggregation.
#[derive(Debug, Clone)]
pub struct GroupAggregateFactory(pub Arc<GroupAggregate>);

impl OperatorFactory for GroupAggregateFactory {
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let spec = self.0.clone();
        Ok(Box::new(GroupAggregateOperator {
            accumulators: spec.accumulators()?,
            groups: Groups::new(&spec.key_schema)?,
            counts: Vec::new(),
            stamps: Vec::new(),
            stamp: 0,
            written: Vec::new(),
            sweep: 0,
            max_parallelism: ctx.max_parallelism,
            group_indices: Vec::new(),
            changed: (ctx.incremental && spec.phase != Phase::Local).then(Changed::default),
            spill: match &ctx.spill {
                Some(settings) if spec.phase != Phase::Local => Some(spill::Spill::new(
                    settings.clone(),
                    &spec.state_schema(&spec.accumulators()?),
                    spec.key_schema.fields().len(),
                    ctx.incremental,
                    ctx.max_parallelism,
                )?),
                _ => None,
            },
            spec,
        }))
    }

    fn can_spill(&self) -> bool {
        self.0.phase != Phase::Local
    }
}

struct GroupAggregateOperator {
    spec: Arc<GroupAggregate>,
    groups: Groups,
    accumulators: Vec<Box<dyn RetractAccumulator>>,
    /// Rows in each group (a group with none has no result).
    counts: Vec<i64>,
    /// The batch that last touched each group (to list touched groups once).
    stamps: Vec<u32>,
    stamp: u32,
    /// With a state TTL: when each group was last updated (wall clock, ms).
    written: Vec<i64>,
    /// Where the next incremental TTL sweep starts.
    sweep: usize,
    max_parallelism: usize,
    group_indices: Vec<usize>,
    /// Incremental checkpoints: the groups changed since the last snapshot.
    changed: Option<Changed>,
    /// The spilling state backend: groups beyond the budget in files per key group.
    spill: Option<weir_state::spilled::Spilled<spill::Spill>>,
}

/// The groups changed since the last snapshot, and every group's keys (to
/// write the changed ones).
#[derive(Default)]
struct Changed {
    keys: KeyStore,
    flags: Vec<bool>,
    groups: Vec<usize>,
}

impl Changed {
    fn mark(&mut self, groups: impl IntoIterator<Item = usize>) {
        for g in groups {
            if g >= self.flags.len() {
                self.flags.resize(g + 1, false);
            }
            if !self.flags[g] {
                self.flags[g] = true;
                self.groups.push(g);
            }
        }
    }

    /// The groups changed since the last call, sorted; counting starts afresh.
    fn take(&mut self) -> Vec<usize> {
        let mut groups = std::mem::take(&mut self.groups);
        groups.iter().for_each(|g| self.flags[*g] = false);
        groups.sort_unstable();
        groups
    }
}

/// The groups one batch touched: each once, with the first row it had.
struct Touched {
    groups: Vec<usize>,
    first_rows: Vec<u32>,
    counts_before: Vec<i64>,
}

impl GroupAggregateOperator {
    fn total(&self) -> usize {
        self.counts.len()
    }

    /// Makes room in every per-group vector for groups interned since.
    fn grow(&mut self) {
        let total = self.groups.len().max(1);
        self.counts.resize(total, 0);
        self.stamps.resize(total, 0);
        self.accumulators.iter_mut().for_each(|a| a.resize(total));
        if self.spec.state_ttl.is_some() {
            self.written.resize(total, wall_clock_millis());
        }
    }

    /// Forgets the groups whose state outlived the TTL at `now`; nothing is
    /// emitted for them (Flink's state TTL).
    fn expire(&mut self, groups: impl Iterator<Item = usize>, now: i64) {
        let Some(ttl) = self.spec.state_ttl else {
            return;
        };
        let ttl = ttl.as_millis() as i64;
        let expired: Vec<usize> = groups
            .filter(|g| self.counts[*g] > 0 && now - self.written[*g] >= ttl)
            .collect();
        for g in &expired {
            self.counts[*g] = 0;
        }
        if let Some(changed) = &mut self.changed {
            changed.mark(expired.iter().copied());
        }
        self.accumulators.iter_mut().for_each(|a| a.clear(&expired));
    }

    /// Interns the keys of `batch`; returns each row's group and the key columns.
    fn intern(&mut self, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        let rows = batch.num_rows();
        let keys = self
            .spec
            .keys
            .iter()
            .map(|k| Ok(k.evaluate(batch)?.into_array(rows)?))
            .collect::<Result<Vec<_>>>()?;
        let mut indices = std::mem::take(&mut self.group_indices);
        self.groups.intern(&keys, rows, &mut indices)?;
        if let Some(changed) = &mut self.changed {
            changed.keys.append_new(&keys, &indices, self.groups.len())?;
        }
        self.group_indices = indices;
        self.grow();
        Ok(keys)
    }

    /// The groups of the interned batch, each once, with their first row and
    /// row count before the batch.
    fn touch(&mut self) -> Touched {
        if self.stamp == u32::MAX {
            self.stamps.fill(0);
            self.stamp = 0;
        }
        self.stamp += 1;
        let mut touched = Touched {
            groups: Vec::new(),
            first_rows: Vec::new(),
            counts_before: Vec::new(),
        };
        for (row, &g) in self.group_indices.iter().enumerate() {
            if self.stamps[g] != self.stamp {
                self.stamps[g] = self.stamp;
                touched.groups.push(g);
                touched.first_rows.push(row as u32);
                touched.counts_before.push(self.counts[g]);
            }
        }
        touched
    }

    /// Global phase: adds each partial row's `_delta` to its group's count
    /// (never below none).
    fn count_deltas(&mut self, batch: &RecordBatch) -> Result<Touched> {
        let touched = self.touch();
        let deltas = batch
            .column(self.spec.keys.len())
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| Error::Internal("partial aggregate rows without _delta".into()))?;
        for (row, &g) in self.group_indices.iter().enumerate() {
            self.counts[g] = (self.counts[g] + deltas.value(row)).max(0);
        }
        Ok(touched)
    }

    /// Global phase: merges each partial row's states into its group.
    fn merge(&mut self, batch: &RecordBatch) -> Result<()> {
        let total = self.total();
        let mut offset = self.spec.keys.len() + 1;
        for acc in &mut self.accumulators {
            let width = acc.state_fields().len();
            acc.merge(
                &batch.columns()[offset..offset + width],
                &self.group_indices,
                total,
            )?;
            offset += width;
        }
        Ok(())
    }

    /// Local phase: folds the batch into one row per group — keys, rows added
    /// minus rows taken away, partial states — and keeps nothing.
    fn pre_aggregate(
        &mut self,
        batch: &RecordBatch,
        retract: Option<&[bool]>,
        out: &mut Output,
    ) -> Result<()> {
        self.intern(batch)?;
        let total = self.total();
        let mut deltas = vec![0i64; total];
        for (row, &g) in self.group_indices.iter().enumerate() {
            deltas[g] += if retract.is_some_and(|r| r[row]) { -1 } else { 1 };
        }
        self.accumulate(batch, retract, None)?;
        let groups: Vec<usize> = (0..self.groups.len().max(1)).collect();
        // DataFusion's multi-column group values are not reusable after an
        // emit of all: new ones for the next batch.
        let mut columns = std::mem::replace(&mut self.groups, Groups::new(&self.spec.key_schema)?).emit()?;
        columns.push(Arc::new(Int64Array::from(deltas)));
        for acc in &self.accumulators {
            columns.extend(acc.state(&groups)?);
        }
        self.accumulators = self.spec.accumulators()?;
        self.counts.clear();
        self.stamps.clear();
        out.batch(RecordBatch::try_new(self.spec.output_schema.clone(), columns)?);
        Ok(())
    }

    /// Lists the touched groups, and counts rows in and out of them. A
    /// retraction of a group without rows is dropped: returns which rows count.
    fn count_rows(&mut self, retract: Option<&[bool]>) -> (Touched, Option<BooleanArray>) {
        let touched = self.touch();
        let mut dropped: Option<Vec<bool>> = None;
        for (row, &g) in self.group_indices.iter().enumerate() {
            let taken = retract.is_some_and(|r| r[row]);
            if taken && self.counts[g] == 0 {
                dropped.get_or_insert_with(|| vec![false; self.group_indices.len()])[row] = true;
                continue;
            }
            self.counts[g] += if taken { -1 } else { 1 };
        }
        let keep = dropped.map(|d| d.iter().map(|x| Some(!x)).collect());
        (touched, keep)
    }

    /// Updates every accumulator with the rows of `batch` that count (`keep`).
    fn accumulate(
        &mut self,
        batch: &RecordBatch,
        retract: Option<&[bool]>,
        keep: Option<&BooleanArray>,
    ) -> Result<()> {
        let rows = batch.num_rows();
        let total = self.total();
        for (i, acc) in self.accumulators.iter_mut().enumerate() {
            let aggregate = &self.spec.aggregates[i];
            let args = aggregate
                .expressions()
                .iter()
                .filter(|_| acc.needs_arguments())
                .map(|e| Ok(e.evaluate(batch)?.into_array(rows)?))
                .collect::<Result<Vec<_>>>()?;
            let mut mask = keep.cloned();
            if let Some(filter) = &self.spec.filters[i] {
                let passed = filter.evaluate(batch)?.into_array(rows)?;
                let passed = match passed.as_boolean() {
                    b if b.null_count() > 0 => arrow::compute::prep_null_mask_filter(b),
                    b => b.clone(),
                };
                mask = Some(match mask {
                    Some(m) => arrow::compute::and(&m, &passed)?,
                    None => passed,
                });
            }
            match mask {
                None => acc.update(&args, &self.group_indices, retract, total)?,
                Some(mask) => {
                    let indices: Vec<usize> = (0..rows).filter(|r| mask.value(*r)).collect();
                    let take_indices = UInt32Array::from_iter_values(indices.iter().map(|r| *r as u32));
                    let args = args
                        .iter()
                        .map(|a| Ok(take(a, &take_indices, None)?))
                        .collect::<Result<Vec<_>>>()?;
                    let groups: Vec<usize> = indices.iter().map(|r| self.group_indices[*r]).collect();
                    let retract: Option<Vec<bool>> = retract.map(|r| indices.iter().map(|i| r[*i]).collect());
                    acc.update(&args, &groups, retract.as_deref(), total)?;
                }
            }
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[usize]) -> Result<Vec<ArrayRef>> {
        self.accumulators.iter().map(|a| a.evaluate(groups)).collect()
    }

    fn process(&mut self, batch: &RecordBatch, out: &mut Output) -> Result<()> {
        if self.spec.phase == Phase::Local {
            return self.pre_aggregate(batch, retractions(batch).as_deref(), out);
        }
        let keys = self.intern(batch)?;
        if self.spilled_to_files() {
            if let Some((now, keys)) = self.hold_unread(batch, &keys)? {
                self.aggregate(&now, &keys, out)?;
            }
            self.read_due(wall_clock_millis(), out)?;
        } else {
            self.aggregate(batch, &keys, out)?;
        }
        self.spill_if_full(batch.num_rows())
    }

    /// Aggregates the rows of `batch`, interned (`group_indices`), whose
    /// groups' state is in memory, and emits the changes.
    fn aggregate(&mut self, batch: &RecordBatch, keys: &[ArrayRef], out: &mut Output) -> Result<()> {
        let retract = retractions(batch);
        let now = wall_clock_millis();
        if self.spec.state_ttl.is_some() {
            let groups = std::mem::take(&mut self.group_indices);
            self.expire(groups.iter().copied(), now);
            self.group_indices = groups;
        }
        let global = self.spec.phase == Phase::Global;
        let (touched, keep) = match global {
            true => (self.count_deltas(batch)?, None),
            false => self.count_rows(retract.as_deref()),
        };
        let before = self.evaluate(&touched.groups)?;
        match global {
            true => self.merge(batch)?,
            false => self.accumulate(batch, retract.as_deref(), keep.as_ref())?,
        }
        let after = self.evaluate(&touched.groups)?;
        let changes = changes(&touched, &self.counts, &before, &after)?;
        let emptied: Vec<usize> = touched
            .groups
            .iter()
            .copied()
            .filter(|g| self.counts[*g] == 0)
            .collect();
        self.accumulators.iter_mut().for_each(|a| a.clear(&emptied));
        if self.spec.state_ttl.is_some() {
            touched.groups.iter().for_each(|g| self.written[*g] = now);
        }
        if let Some(changed) = &mut self.changed {
            changed.mark(touched.groups.iter().copied());
        }
        if !changes.is_empty() {
            out.batch(self.output(keys, &touched, &before, &after, &changes)?);
        }
        Ok(())
    }

    /// The change rows: keys of each change's group, then its old or new values.
    fn output(
        &self,
        keys: &[ArrayRef],
        touched: &Touched,
        before: &[ArrayRef],
        after: &[ArrayRef],
        changes: &[Change],
    ) -> Result<RecordBatch> {
        let rows = UInt32Array::from_iter_values(changes.iter().map(|c| touched.first_rows[c.touched]));
        let mut columns = keys
            .iter()
            .map(|k| Ok(take(k, &rows, None)?))
            .collect::<Result<Vec<_>>>()?;
        // Old values are rows 0..n of [before; after], new ones n..2n.
        let n = touched.groups.len();
        let picks = UInt32Array::from_iter_values(changes.iter().map(|c| {
            let offset = if c.kind.is_retraction() { 0 } else { n };
            (offset + c.touched) as u32
        }));
        for (old, new) in before.iter().zip(after) {
            let both = arrow::compute::concat(&[old.as_ref(), new.as_ref()])?;
            columns.push(take(&both, &picks, None)?);
        }
        let kinds: Vec<RowKind> = changes.iter().map(|c| c.kind).collect();
        let schema = changelog::without_op(&self.spec.output_schema);
        let columns = columns
            .into_iter()
            .zip(schema.fields())
            .map(|(c, f)| {
                if c.data_type() == f.data_type() {
                    Ok(c)
                } else {
                    Ok(arrow::compute::cast(&c, f.data_type())?)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        changelog::with_kinds(&schema, columns, &kinds)
    }
}

/// Which rows of `batch` are taken away (`-U`, `-D`); `None` for an
/// insert-only batch.
fn retractions(batch: &RecordBatch) -> Option<Vec<bool>> {
    changelog::ops(batch).map(|ops| {
        ops.values()
            .iter()
            .map(|c| RowKind::from_code(*c).is_some_and(RowKind::is_retraction))
            .collect()
    })
}

/// One output row: the kind, and which touched group (old values for `-U`
/// and `-D`, new ones otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Change {
    kind: RowKind,
    touched: usize,
}

/// What changed in each touched group, from its row counts and results
/// before and after the batch.
fn changes(
    touched: &Touched,
    counts: &[i64],
    before: &[ArrayRef],
    after: &[ArrayRef],
) -> Result<Vec<Change>> {
    let mut differs = arrow::buffer::BooleanBuffer::new_unset(touched.groups.len());
    for (old, new) in before.iter().zip(after) {
        let distinct = arrow::compute::kernels::cmp::distinct(old, new)?;
        differs = &differs | distinct.values();
    }
    let mut changes = Vec::new();
    for (i, g) in touched.groups.iter().enumerate() {
        let (was, is) = (touched.counts_before[i] > 0, counts[*g] > 0);
        let change = |kind| Change { kind, touched: i };
        match (was, is) {
            (false, true) => changes.push(change(RowKind::Insert)),
            (true, false) => changes.push(change(RowKind::Delete)),
            (true, true) if differs.value(i) => {
                changes.push(change(RowKind::UpdateBefore));
                changes.push(change(RowKind::UpdateAfter));
            }
            _ => {}
        }
    }
    Ok(changes)
}

impl GroupAggregateOperator {
    /// Every group with rows as state rows, sorted by key group.
    fn state_rows(&mut self) -> Result<Option<RecordBatch>> {
        let total = self.groups.len();
        if total == 0 {
            return Ok(None);
        }
        // Expired state is not saved (the snapshot reads every group anyway).
        self.expire(0..self.counts.len(), wall_clock_millis());
        let live: Vec<usize> = (0..total).filter(|g| self.counts[*g] > 0).collect();
        if let Some(changed) = &self.changed {
            let keys = changed.keys.keys(&live)?;
            return self.rows_of(&live, keys);
        }
        // Group values give their keys only by emitting them: take them and
        // intern them again, in order, which gives every group its index back.
        let keys = std::mem::replace(&mut self.groups, Groups::new(&self.spec.key_schema)?).emit()?;
        let mut indices = Vec::new();
        self.groups.intern(&keys, total, &mut indices)?;
        let rows = UInt32Array::from_iter_values(live.iter().map(|g| *g as u32));
        let keys = keys
            .iter()
            .map(|k| Ok(take(k, &rows, None)?))
            .collect::<Result<Vec<_>>>()?;
        self.rows_of(&live, keys)
    }

    /// The state rows of `groups` (all with rows), whose keys are `keys`.
    fn rows_of(&self, groups: &[usize], keys: Vec<ArrayRef>) -> Result<Option<RecordBatch>> {
        if groups.is_empty() {
            return Ok(None);
        }
        let schema = self.spec.state_schema(&self.accumulators);
        let mut columns: Vec<ArrayRef> =
            vec![Arc::new(key_groups(&keys, groups.len(), self.max_parallelism)?)];
        columns.extend(keys);
        columns.extend(self.state_columns(groups)?);
        Ok(Some(sorted_state_rows(&schema, columns)?))
    }

    /// The state columns after the keys of `groups`: `_count`, `_written`
    /// with a TTL, the accumulators' states.
    fn state_columns(&self, groups: &[usize]) -> Result<Vec<ArrayRef>> {
        let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from_iter_values(
            groups.iter().map(|g| self.counts[*g]),
        ))];
        if self.spec.state_ttl.is_some() {
            columns.push(Arc::new(Int64Array::from_iter_values(
                groups.iter().map(|g| self.written[*g]),
            )));
        }
        for acc in &self.accumulators {
            columns.extend(acc.state(groups)?);
        }
        Ok(columns)
    }

    /// The groups changed since the last snapshot: rows of those that have
    /// rows, keys of those that have none any more.
    fn changed_rows(&mut self) -> Result<Option<RecordBatch>> {
        let Some(changed) = self.changed.as_mut() else {
            return Err(Error::Internal("a delta snapshot without change tracking".into()));
        };
        let groups = changed.take();
        let (live, gone): (Vec<usize>, Vec<usize>) = groups.into_iter().partition(|g| self.counts[*g] > 0);
        let changed = self.changed.as_ref().expect("checked above");
        let (live_keys, gone_keys) = (changed.keys.keys(&live)?, changed.keys.keys(&gone)?);
        let rows = self.rows_of(&live, live_keys)?;
        let deleted = (!gone.is_empty())
            .then(|| -> Result<Vec<ArrayRef>> {
                let mut columns: Vec<ArrayRef> = vec![Arc::new(key_groups(
                    &gone_keys,
                    gone.len(),
                    self.max_parallelism,
                )?)];
                columns.extend(gone_keys);
                Ok(columns)
            })
            .transpose()?;
        let schema = self.spec.state_schema(&self.accumulators);
        let key_columns = self.spec.key_schema.fields().len();
        upsert_delta(&schema, rows, deleted, key_columns)
    }

    /// Interns the keys of state `rows` and sets their groups' state;
    /// returns the groups.
    fn restore_rows(&mut self, rows: &RecordBatch) -> Result<Vec<usize>> {
        let key_count = self.spec.key_schema.fields().len();
        let keys = rows.columns()[1..1 + key_count].to_vec();
        let mut indices = Vec::new();
        self.groups.intern(&keys, rows.num_rows(), &mut indices)?;
        if let Some(changed) = &mut self.changed {
            changed.keys.append_new(&keys, &indices, self.groups.len())?;
        }
        self.grow();
        self.restore_groups(&rows.columns()[1 + key_count..], &indices)?;
        Ok(indices)
    }

    /// Sets the state of `groups` (interned) from state columns after the
    /// keys: `_count`, `_written` with a TTL, then the accumulators'.
    fn restore_groups(&mut self, states: &[ArrayRef], groups: &[usize]) -> Result<()> {
        let total = self.total();
        let counts = states[0].as_primitive::<Int64Type>();
        for (i, g) in groups.iter().enumerate() {
            self.counts[*g] = counts.value(i);
        }
        let mut offset = 1;
        if self.spec.state_ttl.is_some() {
            let written = states[offset].as_primitive::<Int64Type>();
            for (i, g) in groups.iter().enumerate() {
                self.written[*g] = written.value(i);
            }
            offset += 1;
        }
        for acc in &mut self.accumulators {
            let width = acc.state_fields().len();
            acc.restore(&states[offset..offset + width], groups, total)?;
            offset += width;
        }
        Ok(())
    }
}

impl Operator for GroupAggregateOperator {
    fn name(&self) -> String {
        self.spec.name.clone()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        self.process(&batch, out)
    }

    /// With a state TTL (to sweep), and with spilled state (rows waiting for
    /// their key group's read wait at most [`crate::waiting::LONGEST_WAIT_MS`]).
    fn uses_processing_time(&self) -> bool {
        self.spec.state_ttl.is_some() || self.spill.is_some()
    }

    /// Reads the key groups whose rows waited long enough; sweeps part of
    /// the groups for expired state, so memory is given back without a
    /// full scan at any one time.
    fn on_processing_time(&mut self, now: Timestamp, out: &mut Output) -> Result<()> {
        const SWEEP: usize = 4096;
        self.read_due(now, out)?;
        if self.spec.state_ttl.is_none() {
            return Ok(());
        }
        self.sweep_files(now)?;
        let total = self.counts.len();
        if total == 0 {
            return Ok(());
        }
        let start = self.sweep % total;
        let end = (start + SWEEP).min(total);
        self.expire(start..end, now);
        self.sweep = end;
        Ok(())
    }

    /// Rows waiting for spilled state are aggregated before the barrier:
    /// the snapshot holds their groups' state, and their changes precede it.
    fn prepare_snapshot(&mut self, out: &mut Output) -> Result<()> {
        self.read_all_waiting(out)
    }

    fn finish(&mut self, out: &mut Output) -> Result<()> {
        self.read_all_waiting(out)
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        if self.spec.phase == Phase::Local {
            return Ok(None);
        }
        self.no_rows_wait()?;
        if self.spilled_to_files() {
            return Ok(Some(OperatorSnapshot {
                runs: Vec::new(),
                deferred: self.spilled_snapshot()?,
                rows_later: None,
                meta: serde_json::Value::Null,
                rows: None,
            }));
        }
        Ok(Some(OperatorSnapshot {
            runs: Vec::new(),
            deferred: Vec::new(),
            rows_later: None,
            meta: serde_json::Value::Null,
            rows: self.state_rows()?,
        }))
    }

    fn delta_kind(&self) -> Option<DeltaKind> {
        self.changed.as_ref().map(|_| DeltaKind::Upsert {
            key_columns: self.spec.key_schema.fields().len(),
        })
    }

    fn snapshot_delta(&mut self, checkpoint: CheckpointId, full: bool) -> Result<Option<OperatorSnapshot>> {
        self.no_rows_wait()?;
        if !full && self.spilled_to_files() {
            return Ok(Some(OperatorSnapshot {
                deferred: self.spilled_delta()?.into_iter().collect(),
                rows_later: None,
                ..OperatorSnapshot::default()
            }));
        }
        if !full {
            return Ok(Some(OperatorSnapshot {
                runs: Vec::new(),
                deferred: Vec::new(),
                rows_later: None,
                meta: serde_json::Value::Null,
                rows: self.changed_rows()?,
            }));
        }
        let snapshot = self.snapshot(checkpoint)?;
        if let Some(changed) = &mut self.changed {
            changed.take();
        }
        self.spill.forget_spilled_changes();
        Ok(snapshot)
    }

    fn state_signature(&self) -> Result<Option<String>> {
        if self.spec.phase == Phase::Local {
            return Ok(None);
        }
        Ok(Some(schema_signature(
            &self.spec.state_schema(&self.accumulators),
        )))
    }

    fn is_keyed(&self) -> bool {
        self.spec.phase != Phase::Local
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        if let Some(rows) = &snapshot.rows {
            let name = self.spec.name.clone();
            OperatorSnapshot::check_columns(rows, &self.spec.state_schema(&self.accumulators), &name)?;
            match self.spill.is_some() {
                true => self.restore_spilled(rows)?,
                false => {
                    self.restore_rows(rows)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
