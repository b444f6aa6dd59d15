//! OVER aggregation (Flink's `OverAggregate`): each row with aggregates over
//! the rows of its partition before it, `ROWS` or `RANGE`, bounded or
//! unbounded, ordered by a time attribute.
//!
//! On event time a row waits until the watermark passes its time; then the
//! rows the watermark released enter in time order,
//! so the output is final and insert-only; rows of equal time enter by their
//! values, so that the results do not depend on arrival order. A row no later than the last row
//! its partition has released is late, as in Flink (whose timer of the last
//! fired time is per key): dropped and counted (`lateRecordsDropped`). On
//! processing time rows enter as they arrive, a batch's rows all at the
//! current time.
//!
//! Each partition is a group of retractable accumulators (those of the
//! non-windowed aggregation): a row entering is added; for a bounded frame
//! the rows that fall out of it are taken away ([`Frame::leaving`]),
//! which is why the rows of a bounded frame are kept. Rows enter in steps,
//! at most one unit (a row, or a RANGE's peers) per partition per step, so
//! each accumulator call covers many partitions.
//!
//! ```text
//!  input ──HASH[partition]──► OverAggregate(... window=[ROWS BETWEEN 10 PRECEDING AND CURRENT ROW]) ──► row + aggregates
//! ```

pub mod retract;
mod spill;
mod state;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use arrow::array::{ArrayRef, UInt32Array};
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;

use crate::Result;
use crate::waiting::ReadsWaiting;
use weir_common::ids::CheckpointId;
use weir_common::time::Timestamp;
use weir_common::time::wall_clock_millis;
use weir_functions::accumulator::RetractAccumulator;
use weir_plan::frame::Frame;
use weir_runtime::operator::{OperatorSnapshot, TaskMetrics};
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};
use weir_state::memory_guess::SpillsWhenFull;

/// An OVER aggregation: partition, order, frame, aggregates.
#[derive(Debug, Clone)]
pub struct OverAggregate {
    /// `PARTITION BY` expressions over the input.
    pub partition: Vec<Arc<dyn PhysicalExpr>>,
    /// The event-time input column it is ordered by; `None`: processing time.
    pub time: Option<usize>,
    /// The frame every aggregate shares.
    pub frame: Frame,
    /// The aggregates, over the input's columns.
    pub aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// Whether the input updates ([`retract`]): every row is kept and
    /// results change as rows come and go.
    pub retract: bool,
    /// The input's columns.
    pub input: SchemaRef,
    /// The input's columns, then one per aggregate (and the op column when
    /// the input updates).
    pub schema: SchemaRef,
    /// Its name in the plan (EXPLAIN's), for errors and logs.
    pub name: String,
}

impl OverAggregate {
    /// Every aggregate's arguments, one after another.
    fn arguments(&self) -> Vec<Arc<dyn PhysicalExpr>> {
        self.aggregates.iter().flat_map(|a| a.expressions()).collect()
    }

    fn accumulators(&self) -> Result<Vec<Box<dyn RetractAccumulator>>> {
        self.aggregates
            .iter()
            .map(|a| weir_functions::accumulator::accumulator_for(a, &self.input, self.frame.bounded()))
            .collect()
    }
}

fn evaluate(exprs: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| Ok(e.evaluate(batch)?.into_array(batch.num_rows())?))
        .collect()
}

fn converter(exprs: &[Arc<dyn PhysicalExpr>], schema: &Schema) -> Result<RowConverter> {
    let fields = exprs
        .iter()
        .map(|e| Ok(SortField::new(e.data_type(schema)?)))
        .collect::<Result<Vec<_>>>()?;
    Ok(RowConverter::new(fields)?)
}

impl OperatorFactory for OverAggregate {
    fn can_spill(&self) -> bool {
        true
    }

    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let spec = Arc::new(self.clone());
        if self.retract {
            return Ok(Box::new(retract::RetractOverOperator::new(
                spec,
                ctx.max_parallelism,
                ctx.spill.clone(),
                ctx.incremental,
            )?));
        }
        let rows = self
            .input
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(Box::new(OverOperator {
            keys_of: converter(&self.partition, &self.input)?,
            args_of: converter(&self.arguments(), &self.input)?,
            rows_of: RowConverter::new(rows)?,
            accumulators: self.accumulators()?,
            groups: HashMap::default(),
            keys: Vec::new(),
            frames: Vec::new(),
            last: Vec::new(),
            pending: BTreeMap::new(),
            watermark: Timestamp::MIN,
            seq: 0,
            max_parallelism: ctx.max_parallelism,
            metrics: ctx.metrics.clone(),
            spill: (ctx.spill.clone())
                .map(|settings| spill::OverSpill::new(settings, &spec, ctx.max_parallelism, ctx.incremental))
                .transpose()?,
            changed: ctx.incremental.then(HashSet::new),
            spec,
        }))
    }
}

/// A row of a bounded frame: its time and its aggregates' arguments.
type FrameRow = (Timestamp, Box<[u8]>);

/// A row waiting for the watermark: its time and arrival. (Rows of one
/// time enter by their values, so that results do not depend on arrival
/// order: sorted when released, not compared at every insert, which took
/// 15% of a spilled job whose rows of a second share one time.)
type Waiting = (Timestamp, u64);

struct OverOperator {
    spec: Arc<OverAggregate>,
    keys_of: RowConverter,
    args_of: RowConverter,
    rows_of: RowConverter,
    accumulators: Vec<Box<dyn RetractAccumulator>>,
    /// Each partition key's group (its accumulators' index).
    groups: HashMap<Box<[u8]>, usize, foldhash::fast::FixedState>,
    /// Each group's partition key.
    keys: Vec<Box<[u8]>>,
    /// A bounded frame's rows of each group (time, arguments), oldest first.
    frames: Vec<VecDeque<FrameRow>>,
    /// Each group's time of the last rows it released (event time).
    last: Vec<Timestamp>,
    /// Event-time rows waiting for the watermark, in order of time, with
    /// their bytes and group.
    pending: BTreeMap<Waiting, (Box<[u8]>, usize)>,
    watermark: Timestamp,
    seq: u64,
    max_parallelism: usize,
    metrics: Arc<TaskMetrics>,
    /// The spilling backend: partitions beyond the budget in a store.
    spill: Option<weir_state::spilled::Spilled<spill::OverSpill>>,
    /// Incremental checkpoints: the groups changed since the last snapshot
    /// (spilled: since the last spill).
    changed: Option<HashSet<usize>>,
}

/// The rows of one step and each aggregate's result for them.
type StepResult = (Vec<u32>, Vec<ArrayRef>);

impl OverOperator {
    /// Each row's group, new partitions added (with the spilling backend,
    /// read from the store first where it has them).
    fn groups_of(&mut self, data: &RecordBatch) -> Result<Vec<usize>> {
        if self.spec.partition.is_empty() {
            if self.keys.is_empty() {
                self.decode_read(&[&[]])?;
            }
            if self.keys.is_empty() {
                self.add_group(&[]);
            }
            return Ok(vec![0; data.num_rows()]);
        }
        let keys = self
            .keys_of
            .convert_columns(&evaluate(&self.spec.partition, data)?)?;
        if self.spilled_to_files() {
            let list: Vec<&[u8]> = (0..data.num_rows()).map(|i| keys.row(i).data()).collect();
            self.decode_read(&list)?;
        }
        Ok((0..data.num_rows())
            .map(|i| {
                let key = keys.row(i);
                match self.groups.get(key.as_ref()) {
                    Some(g) => *g,
                    None => self.add_group(key.as_ref()),
                }
            })
            .collect())
    }

    fn add_group(&mut self, key: &[u8]) -> usize {
        let group = self.keys.len();
        self.groups.insert(key.into(), group);
        self.keys.push(key.into());
        self.frames.push(VecDeque::new());
        self.last.push(Timestamp::MIN);
        self.accumulators.iter_mut().for_each(|a| a.resize(group + 1));
        group
    }

    /// Each aggregate's arguments among `args` (all aggregates' in a row).
    fn split_arguments(&self, args: &[ArrayRef]) -> Vec<Vec<ArrayRef>> {
        let mut offset = 0;
        self.spec
            .aggregates
            .iter()
            .map(|a| {
                let n = a.expressions().len();
                offset += n;
                args[offset - n..offset].to_vec()
            })
            .collect()
    }

    /// Adds or takes away rows (their arguments) of `groups`.
    fn update(&mut self, args: &[ArrayRef], groups: &[usize], retract: bool) -> Result<()> {
        let total = self.keys.len();
        let taken = vec![true; groups.len()];
        let split = self.split_arguments(args);
        for (acc, args) in self.accumulators.iter_mut().zip(split) {
            acc.update(&args, groups, retract.then_some(&taken[..]), total)?;
        }
        Ok(())
    }

    /// Rows entering in order (`groups[i]`, `times[i]` each one's group and
    /// time): each with its aggregates, as output.
    fn enter(
        &mut self,
        data: &RecordBatch,
        groups: &[usize],
        times: &[Timestamp],
        out: &mut Output,
    ) -> Result<()> {
        if data.num_rows() == 0 {
            return Ok(());
        }
        for (g, t) in groups.iter().zip(times) {
            self.last[*g] = self.last[*g].max(*t);
        }
        if let Some(changed) = self.changed.as_mut() {
            changed.extend(groups.iter().copied());
        }
        let args = evaluate(&self.spec.arguments(), data)?;
        let arg_rows = match self.spec.frame.bounded() {
            true => Some(self.args_of.convert_columns(&args)?),
            false => None,
        };
        let steps = self.spec.frame.steps(groups, times);
        let mut by_step: Vec<Vec<u32>> = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            if by_step.len() <= *step {
                by_step.resize(step + 1, Vec::new());
            }
            by_step[*step].push(i as u32);
        }
        let mut results: Vec<StepResult> = Vec::with_capacity(by_step.len());
        for rows in by_step {
            let indices = UInt32Array::from(rows.clone());
            let step_groups: Vec<usize> = rows.iter().map(|i| groups[*i as usize]).collect();
            let step_args = args
                .iter()
                .map(|a| Ok(arrow::compute::take(a, &indices, None)?))
                .collect::<Result<Vec<_>>>()?;
            self.update(&step_args, &step_groups, false)?;
            if let Some(arg_rows) = &arg_rows {
                for i in &rows {
                    let i = *i as usize;
                    self.frames[groups[i]].push_back((times[i], arg_rows.row(i).as_ref().into()));
                }
                self.let_go(&rows, groups, times)?;
            }
            results.push((rows, self.evaluate(&step_groups)?));
        }
        self.emit(data, results, out)
    }

    /// Takes the rows that left the frames of the groups of a step away.
    fn let_go(&mut self, rows: &[u32], groups: &[usize], times: &[Timestamp]) -> Result<()> {
        let mut leaving: Vec<Box<[u8]>> = Vec::new();
        let mut leaving_groups = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for i in rows {
            let (g, time) = (groups[*i as usize], times[*i as usize]);
            if !seen.insert(g) {
                continue;
            }
            let frame = &mut self.frames[g];
            let n = self
                .spec
                .frame
                .leaving(frame.iter().map(|(t, _)| *t), frame.len(), time);
            for (_, row) in frame.drain(..n) {
                leaving.push(row);
                leaving_groups.push(g);
            }
        }
        if leaving.is_empty() {
            return Ok(());
        }
        let parser = self.args_of.parser();
        let args = self
            .args_of
            .convert_rows(leaving.iter().map(|r| parser.parse(r)))?;
        self.update(&args, &leaving_groups, true)
    }

    /// Each aggregate's result for each row of `groups`.
    fn evaluate(&self, groups: &[usize]) -> Result<Vec<ArrayRef>> {
        let mut unique: Vec<usize> = groups.to_vec();
        unique.sort_unstable();
        unique.dedup();
        let at: Vec<u32> = groups
            .iter()
            .map(|g| unique.binary_search(g).expect("a group of the step") as u32)
            .collect();
        let at = UInt32Array::from(at);
        self.accumulators
            .iter()
            .map(|a| Ok(arrow::compute::take(&a.evaluate(&unique)?, &at, None)?))
            .collect()
    }

    /// The rows of each step with their results, as one batch.
    fn emit(&self, data: &RecordBatch, results: Vec<StepResult>, out: &mut Output) -> Result<()> {
        let order = UInt32Array::from(
            results
                .iter()
                .flat_map(|(rows, _)| rows.iter().copied())
                .collect::<Vec<_>>(),
        );
        let mut columns = data
            .columns()
            .iter()
            .map(|c| Ok(arrow::compute::take(c, &order, None)?))
            .collect::<Result<Vec<_>>>()?;
        for a in 0..self.spec.aggregates.len() {
            let parts: Vec<&dyn arrow::array::Array> = results.iter().map(|(_, r)| r[a].as_ref()).collect();
            let values = arrow::compute::concat(&parts)?;
            let field: &Field = self.spec.schema.field(data.num_columns() + a);
            columns.push(weir_functions::accumulator::to_output(
                &values,
                field.data_type(),
            )?);
        }
        out.batch(RecordBatch::try_new(self.spec.schema.clone(), columns)?);
        Ok(())
    }
}

impl Operator for OverOperator {
    fn name(&self) -> String {
        self.spec.name.clone()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        let now = wall_clock_millis();
        if self.spilled_to_files() {
            if let Some(rows) = self.hold_unread(&batch, now)? {
                self.process_at(&rows, now, out)?;
            }
            self.read_due(now, out)?;
            self.forward(out);
        } else {
            self.process_at(&batch, now, out)?;
        }
        self.spill_if_full(batch.num_rows())
    }

    /// Memory's rows up to the watermark enter. Spilled, the watermark
    /// also waits for the parts with files it concerns, and is passed on
    /// as far as every part's rows were released.
    fn process_watermark(&mut self, watermark: Timestamp, out: &mut Output) -> Result<()> {
        let before = self.watermark;
        self.watermark = self.watermark.max(watermark);
        if self.spilled_to_files() {
            // On processing time too: rows that wait keep their event
            // times, which the watermark passed on must not pass.
            self.hold_watermark(before);
        }
        self.decode_due(self.watermark)?;
        self.release(self.watermark, out)?;
        if self.spill.is_none() {
            out.watermark(watermark);
            return Ok(());
        }
        if watermark == Timestamp::MAX {
            self.read_all_waiting(out)?;
        }
        self.forward(out);
        Ok(())
    }

    /// With spilled state: what waits for a part's read waits at most
    /// [`crate::waiting::LONGEST_WAIT_MS`].
    fn uses_processing_time(&self) -> bool {
        self.spill.is_some()
    }

    fn on_processing_time(&mut self, now: Timestamp, out: &mut Output) -> Result<()> {
        self.read_due(now, out)?;
        self.forward(out);
        Ok(())
    }

    /// What waits for spilled state is taken before the barrier: the
    /// snapshot holds its partitions, and its rows precede it.
    fn prepare_snapshot(&mut self, out: &mut Output) -> Result<()> {
        self.read_all_waiting(out)?;
        self.forward(out);
        Ok(())
    }

    fn finish(&mut self, out: &mut Output) -> Result<()> {
        self.read_all_waiting(out)?;
        self.forward(out);
        Ok(())
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        self.no_rows_wait()?;
        if self.spilled_to_files() {
            return self.spilled_snapshot(false).map(Some);
        }
        Ok(Some(OperatorSnapshot::with_watermark(
            self.watermark,
            state::rows(self)?,
        )))
    }

    fn delta_kind(&self) -> Option<weir_state::incremental::DeltaKind> {
        (self.changed.is_some()).then_some(weir_state::incremental::DeltaKind::Replace)
    }

    /// Every partition's state (`full`), or that of the partitions changed
    /// since the last snapshot (partitions never go); and the watermark.
    fn snapshot_delta(&mut self, checkpoint: CheckpointId, full: bool) -> Result<Option<OperatorSnapshot>> {
        self.no_rows_wait()?;
        if self.changed.is_some() && self.spilled_to_files() {
            return self.spilled_delta(full).map(Some);
        }
        let Some(changed) = self.changed.as_mut().map(std::mem::take) else {
            return self.snapshot(checkpoint);
        };
        let rows = state::delta(self, &changed, full)?;
        Ok(Some(OperatorSnapshot::with_watermark(self.watermark, rows)))
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        self.watermark = self.watermark.max(snapshot.watermark(&self.spec.name)?);
        match &snapshot.rows {
            Some(rows) => self.restore_rows(rows),
            None => Ok(()),
        }
    }

    fn restore_rescaled(&mut self, snapshots: Vec<OperatorSnapshot>) -> Result<()> {
        match OperatorSnapshot::merge_by_watermark(snapshots, &self.spec.name)? {
            Some(merged) => {
                self.watermark = merged.watermark(&self.spec.name)?;
                match &merged.rows {
                    Some(rows) => self.restore_rows(rows),
                    None => Ok(()),
                }
            }
            None => Ok(()),
        }
    }

    fn state_signature(&self) -> Result<Option<String>> {
        Ok(Some(weir_state::snapshot::schema_signature(&*state::schema(
            &self.spec,
        )?)))
    }

    fn is_keyed(&self) -> bool {
        true
    }
}

impl OverOperator {
    /// A batch's rows: on event time waiting for the watermark (or late),
    /// on processing time entering at `now`.
    fn process_at(&mut self, batch: &RecordBatch, now: Timestamp, out: &mut Output) -> Result<()> {
        let groups = self.groups_of(batch)?;
        let Some(column) = self.spec.time else {
            return self.enter(batch, &groups, &vec![now; batch.num_rows()], out);
        };
        let times = crate::join::window::millis(batch.column(column))?;
        let rows = self.rows_of.convert_columns(batch.columns())?;
        let mut late = 0;
        for (i, (time, group)) in times.into_iter().zip(groups).enumerate() {
            if time == i64::MIN || time <= self.last[group] {
                late += 1;
                continue;
            }
            self.seq += 1;
            self.pending
                .insert((time, self.seq), (rows.row(i).as_ref().into(), group));
            if let Some(changed) = self.changed.as_mut() {
                changed.insert(group);
            }
        }
        TaskMetrics::add(&self.metrics.late_records_dropped, late);
        Ok(())
    }

    /// Memory's waiting rows up to `until` enter, in order.
    fn release(&mut self, until: Timestamp, out: &mut Output) -> Result<()> {
        let released = match until.checked_add(1) {
            Some(next) => {
                let waiting = self.pending.split_off(&(next, 0));
                std::mem::replace(&mut self.pending, waiting)
            }
            None => std::mem::take(&mut self.pending),
        };
        if released.is_empty() {
            return Ok(());
        }
        // In order of time, then of bytes, then of arrival (a stable sort
        // of rows in order of time and arrival).
        let mut released: Vec<(Timestamp, Box<[u8]>, usize)> = (released.into_iter())
            .map(|((t, _), (row, g))| (t, row, g))
            .collect();
        released.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let parser = self.rows_of.parser();
        let columns = self
            .rows_of
            .convert_rows(released.iter().map(|(_, r, _)| parser.parse(r)))?;
        let data = RecordBatch::try_new(self.spec.input.clone(), columns)?;
        let times: Vec<Timestamp> = released.iter().map(|(t, _, _)| *t).collect();
        let groups: Vec<usize> = released.iter().map(|(_, _, g)| *g).collect();
        for start in (0..data.num_rows()).step_by(RELEASE_BATCH) {
            let end = (start + RELEASE_BATCH).min(data.num_rows());
            let slice = data.slice(start, end - start);
            self.enter(&slice, &groups[start..end], &times[start..end], out)?;
        }
        Ok(())
    }

    /// Restores a snapshot's state rows (this subtask's key groups); with
    /// the spilling backend a chunk at a time, the parts of its partitions
    /// in files read first, and memory to the files when it is full.
    fn restore_rows(&mut self, rows: &RecordBatch) -> Result<()> {
        if self.spill.is_none() {
            return state::restore(self, rows);
        }
        let rows = state::in_restore_order(rows)?;
        let k = self.spec.partition.len();
        for chunk in weir_state::store::in_chunks(&rows) {
            if self.spilled_to_files() {
                let keys = match k {
                    0 => None,
                    _ => Some(self.keys_of.convert_columns(&chunk.columns()[4..4 + k])?),
                };
                let list: Vec<&[u8]> = (0..chunk.num_rows())
                    .map(|i| keys.as_ref().map_or(&[][..], |keys| keys.row(i).data()))
                    .collect();
                self.load_for_restore(&chunk, &list)?;
            }
            state::restore(self, &chunk)?;
            self.spill_if_over()?;
        }
        Ok(())
    }
}

/// Rows the watermark releases enter in batches of at most this many.
const RELEASE_BATCH: usize = 8192;
