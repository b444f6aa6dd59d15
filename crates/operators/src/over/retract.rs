//! OVER aggregation of an updating input (Flink cannot: FLINK-19059, which
//! is why Nexmark's q6 does not run there). The result is kept equal to the
//! OVER aggregation of the input's current rows: each row with its
//! aggregates, ordered by time, ties by the row's values (so the order does
//! not depend on arrival).
//!
//! A partition keeps all its rows. A row entering or leaving changes the
//! frames of the rows after it that reach back to it (the next `n` of a
//! `ROWS n PRECEDING` frame, those of the next interval of a `RANGE` frame).
//! Per batch (a mini-batch), the results of the rows its changes reached
//! are compared before and after it ([`changes`], a plain function), and
//! what changed is emitted as `-U`/`+U`, a row that came or went as
//! `+I`/`-D`; a row that came and went within the batch is not emitted. Unbounded frames are refused for updating input: every later
//! row would change.

mod delta;
mod spill;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{ArrayRef, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};

use crate::over::{OverAggregate, converter, evaluate};
use crate::waiting::ReadsWaiting;
use crate::{Error, Result};
use weir_common::changelog::{self, RowKind};
use weir_common::ids::CheckpointId;
use weir_common::time::Timestamp;
use weir_common::time::wall_clock_millis;
use weir_functions::accumulator::RetractAccumulator;
use weir_plan::frame::Frame;
use weir_runtime::operator::{OperatorSnapshot, SpillSettings};
use weir_runtime::{Operator, Output};
use weir_state::memory_guess::SpillsWhenFull;
use weir_state::snapshot::{KEY_GROUP_COLUMN, key_groups, schema_signature, sorted_state_rows};

/// A row's place in its partition: time, its bytes, which copy.
type Place = (Timestamp, Arc<[u8]>, u32);

/// What a change emits, from each affected row's result before and after
/// (`None`: the row is not there), as (row index, kind, from `after`).
pub fn changes<V: PartialEq>(before: &[Option<V>], after: &[Option<V>]) -> Vec<(usize, RowKind, bool)> {
    let mut out = Vec::new();
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        match (b, a) {
            (Some(b), Some(a)) if b == a => {}
            (Some(_), Some(_)) => {
                out.push((i, RowKind::UpdateBefore, false));
                out.push((i, RowKind::UpdateAfter, true));
            }
            (Some(_), None) => out.push((i, RowKind::Delete, false)),
            (None, Some(_)) => out.push((i, RowKind::Insert, true)),
            (None, None) => {}
        }
    }
    out
}

pub(super) struct RetractOverOperator {
    pub(super) spec: Arc<OverAggregate>,
    pub(super) keys_of: RowConverter,
    pub(super) rows_of: RowConverter,
    pub(super) accumulators: Vec<Box<dyn RetractAccumulator>>,
    pub(super) partitions: HashMap<Box<[u8]>, BTreeMap<Place, ()>, foldhash::fast::FixedState>,
    pub(super) max_parallelism: usize,
    /// The spilling backend: partitions beyond the budget in a store.
    spill: Option<weir_state::spilled::Spilled<spill::RetractSpill>>,
    /// Incremental checkpoints: the partitions changed since the last
    /// snapshot (spilled: since the last spill).
    changed: Option<std::collections::HashSet<Box<[u8]>>>,
}

impl RetractOverOperator {
    pub(super) fn new(
        spec: Arc<OverAggregate>,
        max_parallelism: usize,
        spill: Option<SpillSettings>,
        incremental: bool,
    ) -> Result<Self> {
        let rows = spec
            .input
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        let mut op = RetractOverOperator {
            keys_of: converter(&spec.partition, &spec.input)?,
            rows_of: RowConverter::new(rows)?,
            accumulators: spec.accumulators()?,
            partitions: HashMap::default(),
            max_parallelism,
            changed: incremental.then(Default::default),
            spec,
            spill: None,
        };
        op.spill = spill.map(|s| spill::RetractSpill::new(s, &op)).transpose()?;
        Ok(op)
    }

    /// The rows whose frame reaches back to `place` (it included), in order.
    fn reaching(&self, rows: &BTreeMap<Place, ()>, place: &Place) -> Vec<Place> {
        let from = rows.range(place..).map(|(p, _)| p.clone());
        match self.spec.frame {
            Frame::Rows(n) => from.take(n.unwrap_or(u64::MAX) as usize + 1).collect(),
            Frame::Range(ms) => {
                let until = place.0.saturating_add(ms.unwrap_or(i64::MAX));
                // Peers before `place` have it in their frame too.
                let peers = rows
                    .range(..place)
                    .rev()
                    .take_while(|(p, _)| p.0 == place.0)
                    .map(|(p, _)| p.clone());
                let mut all: Vec<Place> = peers.collect();
                all.reverse();
                all.extend(from.take_while(|p| p.0 <= until));
                all
            }
        }
    }

    /// The rows of the frame of the row at `place`.
    fn frame_of<'a>(&self, rows: &'a BTreeMap<Place, ()>, place: &Place) -> Vec<&'a Arc<[u8]>> {
        match self.spec.frame {
            Frame::Rows(n) => {
                let mut frame: Vec<&Arc<[u8]>> = rows
                    .range(..=place)
                    .rev()
                    .take(n.unwrap_or(u64::MAX) as usize + 1)
                    .map(|(p, _)| &p.1)
                    .collect();
                frame.reverse();
                frame
            }
            Frame::Range(ms) => {
                let from = place.0.saturating_sub(ms.unwrap_or(i64::MAX));
                let start: Place = (from, Arc::from(&[][..]), 0);
                rows.range(start..)
                    .take_while(|(p, _)| p.0 <= place.0)
                    .map(|(p, _)| &p.1)
                    .collect()
            }
        }
    }

    /// Each frame's results (`frames[i]` the rows of frame `i`): one
    /// accumulator pass, frame `i` as group `i`.
    fn results(&mut self, frames: &[Vec<Arc<[u8]>>]) -> Result<Vec<ArrayRef>> {
        let total = frames.len();
        let groups: Vec<usize> = frames
            .iter()
            .enumerate()
            .flat_map(|(g, f)| std::iter::repeat_n(g, f.len()))
            .collect();
        let parser = self.rows_of.parser();
        let columns = self
            .rows_of
            .convert_rows(frames.iter().flatten().map(|r| parser.parse(r)))?;
        let data = RecordBatch::try_new(self.spec.input.clone(), columns)?;
        let all: Vec<usize> = (0..total).collect();
        let mut results = Vec::new();
        for (acc, aggregate) in self.accumulators.iter_mut().zip(&self.spec.aggregates) {
            acc.resize(total);
            acc.update(&evaluate(&aggregate.expressions(), &data)?, &groups, None, total)?;
            results.push(acc.evaluate(&all)?);
            acc.clear(&all);
        }
        Ok(results)
    }

    /// Applies one row (added or taken away) to its partition, noting
    /// each row whose frame it is in that `touched` has not noted yet, with
    /// its frame before (an index into `frames`; `None`: not there).
    fn change(
        &mut self,
        partition: &[u8],
        (time, row): (Timestamp, Arc<[u8]>),
        add: bool,
        touched: &mut Touched,
        frames: &mut Vec<Vec<Arc<[u8]>>>,
    ) {
        if let Some(changed) = &mut self.changed
            && !changed.contains(partition)
        {
            changed.insert(partition.into());
        }
        let rows = self.partitions.entry(partition.into()).or_default();
        let copies = rows
            .range((time, row.clone(), 0)..=(time, row.clone(), u32::MAX))
            .count() as u32;
        let place: Place = match (add, copies) {
            (true, n) => (time, row, n),
            (false, 0) => return,
            (false, n) => (time, row, n - 1),
        };
        rows.insert(place.clone(), ());
        let rows = &self.partitions[partition];
        let reaching = self.reaching(rows, &place);
        if add {
            // Before the change the row was not there.
            self.partitions
                .get_mut(partition)
                .expect("the partition")
                .remove(&place);
        }
        let rows = &self.partitions[partition];
        for p in reaching {
            let key = (Box::<[u8]>::from(partition), p);
            if touched.before.contains_key(&key) {
                continue;
            }
            let before = match add && key.1 == place {
                true => None,
                false => {
                    frames.push(self.frame_of(rows, &key.1).into_iter().cloned().collect());
                    Some(frames.len() - 1)
                }
            };
            touched.order.push(key.clone());
            touched.before.insert(key, before);
        }
        let rows = self.partitions.get_mut(partition).expect("the partition");
        match add {
            true => {
                rows.insert(place, ());
            }
            false => {
                rows.remove(&place);
            }
        }
    }

    /// The rows a batch touched, with their frames before the batch and
    /// after it.
    fn settle(&self, touched: Touched, frames: &mut Vec<Vec<Arc<[u8]>>>) -> Vec<Affected> {
        let mut affected = Vec::with_capacity(touched.order.len());
        for key in touched.order {
            let before = touched.before[&key];
            let (partition, place) = key;
            let after = match self.partitions.get(&partition) {
                Some(rows) if rows.contains_key(&place) => {
                    frames.push(self.frame_of(rows, &place).into_iter().cloned().collect());
                    Some(frames.len() - 1)
                }
                _ => None,
            };
            affected.push(Affected {
                row: place.1,
                before,
                after,
            });
        }
        affected
    }
}

/// The rows a batch's changes reached, in the order first reached, with
/// their frames before the batch.
#[derive(Default)]
pub(super) struct Touched {
    order: Vec<(Box<[u8]>, Place)>,
    before: HashMap<(Box<[u8]>, Place), Option<usize>, foldhash::fast::FixedState>,
}

/// A row whose result a change may have changed: its frames before and
/// after (indices of the batch's frames; `None`: the row was not, or is no
/// longer, there).
pub(super) struct Affected {
    row: Arc<[u8]>,
    before: Option<usize>,
    after: Option<usize>,
}

impl RetractOverOperator {
    /// The output batch of the affected rows whose results changed.
    fn emit(&mut self, affected: &[Affected], frames: &[Vec<Arc<[u8]>>], out: &mut Output) -> Result<()> {
        let results = self.results(frames)?;
        let values_of = RowConverter::new(
            results
                .iter()
                .map(|r| SortField::new(r.data_type().clone()))
                .collect(),
        )?;
        let values = values_of.convert_columns(&results)?;
        let before: Vec<_> = affected.iter().map(|a| a.before.map(|i| values.row(i))).collect();
        let after: Vec<_> = affected.iter().map(|a| a.after.map(|i| values.row(i))).collect();
        let emitted: Vec<(usize, RowKind, bool)> = changes(&before, &after);
        if emitted.is_empty() {
            return Ok(());
        }
        let parser = self.rows_of.parser();
        let mut columns = self
            .rows_of
            .convert_rows(emitted.iter().map(|(i, _, _)| parser.parse(&affected[*i].row)))?;
        let frame = |(i, _, new): &(usize, RowKind, bool)| {
            let a = &affected[*i];
            if *new { a.after } else { a.before }.expect("a frame") as u32
        };
        let indices = UInt32Array::from_iter_values(emitted.iter().map(frame));
        let width = self.spec.input.fields().len();
        for (k, result) in results.iter().enumerate() {
            let taken = arrow::compute::take(result, &indices, None)?;
            let field: &Field = self.spec.schema.field(width + k);
            columns.push(weir_functions::accumulator::to_output(&taken, field.data_type())?);
        }
        let kinds: Vec<RowKind> = emitted.iter().map(|(_, k, _)| *k).collect();
        out.batch(changelog::with_kinds(&self.spec.schema, columns, &kinds)?);
        Ok(())
    }

    fn time_column(&self) -> Result<usize> {
        self.spec
            .time
            .ok_or_else(|| Error::Internal("an OVER aggregation of updating input without a rowtime".into()))
    }

    /// `_key_group`, then the input's columns: one row per kept row.
    fn state_schema(&self) -> SchemaRef {
        let mut fields = vec![Field::new(KEY_GROUP_COLUMN, DataType::UInt32, false)];
        fields.extend(self.spec.input.fields().iter().map(|f| f.as_ref().clone()));
        Arc::new(Schema::new(fields))
    }

    fn partition_keys(&self, data: &RecordBatch) -> Result<Option<arrow::row::Rows>> {
        match self.spec.partition.is_empty() {
            true => Ok(None),
            false => Ok(Some(
                self.keys_of
                    .convert_columns(&evaluate(&self.spec.partition, data)?)?,
            )),
        }
    }
}

impl RetractOverOperator {
    /// Applies a batch of changes (a mini-batch) and emits the results
    /// they changed.
    fn process(&mut self, batch: &RecordBatch, out: &mut Output) -> Result<()> {
        let kinds = changelog::row_kinds(batch)?;
        let data = changelog::data(batch);
        let keys = self.partition_keys(&data)?;
        let times = crate::join::window::millis(data.column(self.time_column()?))?;
        let rows = self.rows_of.convert_columns(data.columns())?;
        let partition = |i: usize| keys.as_ref().map_or(&[][..], |k| k.row(i).data());
        if self.spilled_to_files() {
            let list: Vec<&[u8]> = (0..data.num_rows()).map(partition).collect();
            self.decode_read(&list)?;
        }
        let (mut touched, mut frames) = (Touched::default(), Vec::new());
        for (i, kind) in kinds.iter().enumerate() {
            let add = matches!(kind, RowKind::Insert | RowKind::UpdateAfter);
            let row: Arc<[u8]> = rows.row(i).data().into();
            self.change(partition(i), (times[i], row), add, &mut touched, &mut frames);
        }
        self.partitions.retain(|_, rows| !rows.is_empty());
        let affected = self.settle(touched, &mut frames);
        if !affected.is_empty() {
            self.emit(&affected, &frames, out)?;
        }
        Ok(())
    }
}

impl Operator for RetractOverOperator {
    fn name(&self) -> String {
        self.spec.name.clone()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        if self.spilled_to_files() {
            if let Some(now) = self.hold_unread(&batch)? {
                self.process(&now, out)?;
            }
            self.read_due(wall_clock_millis(), out)?;
            self.forward_watermarks(out);
        } else {
            self.process(&batch, out)?;
        }
        self.spill_if_full(batch.num_rows())
    }

    /// Spilled, a watermark waits behind the changes that came before it.
    fn process_watermark(&mut self, watermark: Timestamp, out: &mut Output) -> Result<()> {
        self.hold_watermark(watermark, out);
        Ok(())
    }

    /// Spilled: changes waiting for their key group's read wait at most
    /// [`crate::waiting::LONGEST_WAIT_MS`].
    fn uses_processing_time(&self) -> bool {
        self.spill.is_some()
    }

    fn on_processing_time(&mut self, now: Timestamp, out: &mut Output) -> Result<()> {
        self.read_due(now, out)?;
        self.forward_watermarks(out);
        Ok(())
    }

    /// Changes waiting for spilled state are applied before the barrier:
    /// the snapshot holds their partitions, and what they emit precedes it.
    fn prepare_snapshot(&mut self, out: &mut Output) -> Result<()> {
        self.read_all_waiting(out)?;
        self.forward_watermarks(out);
        Ok(())
    }

    fn finish(&mut self, out: &mut Output) -> Result<()> {
        self.read_all_waiting(out)?;
        self.forward_watermarks(out);
        Ok(())
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        self.no_rows_wait()?;
        if self.spilled_to_files() {
            return Ok(Some(OperatorSnapshot {
                deferred: self.spilled_snapshot(false)?,
                ..OperatorSnapshot::default()
            }));
        }
        let kept: Vec<&Arc<[u8]>> = self
            .partitions
            .values()
            .flat_map(|rows| rows.keys().map(|p| &p.1))
            .collect();
        let Some(columns) = self.kept_columns(&kept)? else {
            return Ok(None);
        };
        Ok(Some(OperatorSnapshot {
            runs: Vec::new(),
            deferred: Vec::new(),
            rows_later: None,
            meta: serde_json::Value::Null,
            rows: Some(sorted_state_rows(&self.state_schema(), columns)?),
        }))
    }

    fn delta_kind(&self) -> Option<weir_state::incremental::DeltaKind> {
        (self.changed.is_some()).then_some(weir_state::incremental::DeltaKind::Replace)
    }

    fn snapshot_delta(&mut self, checkpoint: CheckpointId, full: bool) -> Result<Option<OperatorSnapshot>> {
        if self.changed.is_none() {
            return self.snapshot(checkpoint);
        }
        self.no_rows_wait()?;
        if self.spilled_to_files() {
            let deferred = match full {
                true => self.spilled_snapshot(true)?,
                false => self.spilled_delta()?.into_iter().collect(),
            };
            return Ok(Some(OperatorSnapshot {
                deferred,
                ..OperatorSnapshot::default()
            }));
        }
        Ok(Some(OperatorSnapshot {
            rows: self.delta(full)?,
            ..OperatorSnapshot::default()
        }))
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        let Some(rows) = &snapshot.rows else {
            return Ok(());
        };
        OperatorSnapshot::check_columns(rows, &self.state_schema(), &self.spec.name)?;
        if self.restores_to_files(rows) {
            return self.restore_spilled(rows);
        }
        for chunk in weir_state::store::in_chunks(rows) {
            self.restore_chunk(&chunk)?;
        }
        // Between chunks a spill would leave a partition in two entries.
        self.spill_if_over()
    }

    fn state_signature(&self) -> Result<Option<String>> {
        Ok(Some(schema_signature(&self.state_schema())))
    }

    fn is_keyed(&self) -> bool {
        true
    }
}

impl RetractOverOperator {
    /// State columns (key group, then the row's) of `kept` rows; `None`
    /// without rows.
    fn kept_columns(&self, kept: &[&Arc<[u8]>]) -> Result<Option<Vec<ArrayRef>>> {
        if kept.is_empty() {
            return Ok(None);
        }
        let parser = self.rows_of.parser();
        let data = self.rows_of.convert_rows(kept.iter().map(|r| parser.parse(r)))?;
        let batch = RecordBatch::try_new(self.spec.input.clone(), data.clone())?;
        let keys = evaluate(&self.spec.partition, &batch)?;
        let mut columns: Vec<ArrayRef> = vec![Arc::new(key_groups(&keys, kept.len(), self.max_parallelism)?)];
        columns.extend(data);
        Ok(Some(columns))
    }

    /// Adds kept rows of a snapshot to their partitions in memory.
    fn restore_chunk(&mut self, rows: &RecordBatch) -> Result<()> {
        let data = RecordBatch::try_new(self.spec.input.clone(), rows.columns()[1..].to_vec())
            .map_err(|e| Error::State(format!("{}: kept rows: {e}", self.spec.name.clone())))?;
        let keys = self.partition_keys(&data)?;
        let times = crate::join::window::millis(data.column(self.time_column()?))?;
        let converted = self.rows_of.convert_columns(data.columns())?;
        for (i, time) in times.iter().enumerate() {
            let partition = keys.as_ref().map_or(&[][..], |k| k.row(i).data());
            let row: Arc<[u8]> = converted.row(i).data().into();
            let rows = self.partitions.entry(partition.into()).or_default();
            let copies = rows
                .range((*time, row.clone(), 0)..=(*time, row.clone(), u32::MAX))
                .count() as u32;
            rows.insert((*time, row, copies), ());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_that_changed_is_an_update_and_one_that_did_not_is_not_emitted() {
        let before = [None, Some(1), Some(2), Some(3)];
        let after = [Some(5), Some(1), Some(4), None];
        assert_eq!(
            changes(&before, &after),
            vec![
                (0, RowKind::Insert, true),
                (2, RowKind::UpdateBefore, false),
                (2, RowKind::UpdateAfter, true),
                (3, RowKind::Delete, false)
            ]
        );
    }
}
