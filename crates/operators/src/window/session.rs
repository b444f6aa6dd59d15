//! Session windows: per key, rows closer than `gap` to each other form one window.
//!
//! A row at `t` opens the window `[t, t + gap)`; windows of the same key that
//! overlap are merged (their accumulator states are merged with DataFusion's
//! `Accumulator::state` / `merge_batch`). A session fires when the watermark
//! reaches its end - 1 ms. A row whose window, after merging, has already
//! fired is late: dropped and counted.
//!
//! ```text
//!  key a:  x  x    x           x  x         gap = 3
//!          [--------)          [------)     two sessions
//! ```
//!
//! Sessions are not sliced, so there is no local pre-aggregation: rows are
//! hashed by key to the operator, as Flink does for session windows.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Int64Type, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion_common::ScalarValue;
use datafusion_expr::Accumulator;
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;

use crate::window::accumulate::{Arguments, StateColumns, restored_accumulators};
use crate::{Error, Result};
use weir_common::ids::CheckpointId;
use weir_common::time::MIN_WATERMARK;
use weir_common::time::Timestamp;
use weir_common::time::to_epoch_millis;
use weir_plan::window::TimeShift;
use weir_plan::window::{GroupColumn, WindowProperty};
use weir_runtime::operator::{OperatorSnapshot, TaskMetrics};
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};
use weir_state::memory_guess::SpillsWhenFull;
use weir_state::snapshot::{key_groups, schema_signature, sorted_state_rows, window_state_schema};
use weir_state::spilled::SpillSlot;
use weir_state::store::in_chunks;

mod delta;
mod spill;
#[cfg(test)]
mod tests;

/// The plan of a session window aggregation.
#[derive(Debug)]
pub struct SessionAggregate {
    /// Inactivity gap in milliseconds.
    pub gap: i64,
    /// Local time for `TIMESTAMP_LTZ` sessions.
    pub shift: TimeShift,
    /// Name of the time attribute, for EXPLAIN.
    pub time_name: String,
    /// Input column of the time attribute.
    pub time_index: usize,
    /// Sessions on processing time: a row's time is the wall clock when it
    /// is processed, and the clock fires sessions.
    pub processing_time: bool,
    /// The keys sessions are kept per (evaluated on the input).
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// Schema of the key columns.
    pub key_schema: SchemaRef,
    /// What the aggregates' arguments are over (the input rows).
    pub aggregate_input: SchemaRef,
    /// Aggregate functions.
    pub aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// `FILTER (WHERE ...)` of each aggregate.
    pub filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    /// Grouping columns of the output, in GROUP BY order.
    pub group_columns: Vec<GroupColumn>,
    /// Output schema.
    pub output_schema: SchemaRef,
    /// Its name in the plan (EXPLAIN's), for errors and logs.
    pub name: String,
}

impl SessionAggregate {
    /// The schema of the state rows: `_key_group`, `_start`, `_end`, keys, states.
    fn state_schema(&self) -> Result<SchemaRef> {
        window_state_schema(&["_start", "_end"], &self.key_schema, &self.aggregates)
    }
}

/// The operator factory of a session window aggregation.
#[derive(Debug, Clone)]
pub struct SessionAggregateFactory(pub Arc<SessionAggregate>);

impl OperatorFactory for SessionAggregateFactory {
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let fields = self
            .0
            .key_schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(Box::new(SessionOperator {
            spec: self.0.clone(),
            converter: RowConverter::new(fields)?,
            sessions: Vec::new(),
            free: Vec::new(),
            merged_away: Vec::new(),
            by_key: HashMap::new(),
            by_end: BTreeSet::new(),
            watermark: MIN_WATERMARK,
            metrics: ctx.metrics.clone(),
            batch_size: ctx.batch_size,
            max_parallelism: ctx.max_parallelism,
            spill: (ctx.spill.clone())
                .map(|settings| spill::SessionSpill::new(settings, &self.0, ctx.incremental))
                .transpose()?,
            changed: ctx.incremental.then(HashSet::new),
        }))
    }

    fn can_spill(&self) -> bool {
        true
    }
}

struct Session {
    key: Box<[u8]>,
    start: i64,
    end: i64,
    accumulators: Vec<Box<dyn Accumulator>>,
}

struct SessionOperator {
    spec: Arc<SessionAggregate>,
    converter: RowConverter,
    /// Sessions by id (`None` for free ids).
    sessions: Vec<Option<Session>>,
    free: Vec<usize>,
    /// Ids merged away during the current batch, free once it is done.
    merged_away: Vec<usize>,
    /// Open sessions of each key (by its row-format bytes).
    by_key: HashMap<Box<[u8]>, Vec<usize>>,
    /// Open sessions by end, to fire them in order.
    by_end: BTreeSet<(i64, usize)>,
    watermark: Timestamp,
    metrics: Arc<TaskMetrics>,
    batch_size: usize,
    max_parallelism: usize,
    /// The spilling backend: sessions beyond the budget in a store.
    spill: Option<weir_state::spilled::Spilled<spill::SessionSpill>>,
    /// Incremental checkpoints: the keys whose sessions changed since the
    /// last snapshot (spilled: since the last spill).
    changed: Option<HashSet<Box<[u8]>>>,
}

/// The key bytes of each of `rows` rows (`None`: no keys, one session key).
fn row_keys(key_rows: Option<&arrow::row::Rows>, rows: usize) -> Vec<&[u8]> {
    match key_rows {
        Some(keys) => keys.iter().map(|r| r.data()).collect(),
        None => vec![&[]; rows.min(1)],
    }
}

impl SessionOperator {
    fn new_accumulators(&self) -> Result<Vec<Box<dyn Accumulator>>> {
        self.spec
            .aggregates
            .iter()
            .map(|a| Ok(a.create_accumulator()?))
            .collect()
    }

    /// Opens `session` under a free id (or a new one), which it gives.
    fn open(&mut self, session: Session) -> usize {
        let (key, end) = (session.key.clone(), session.end);
        let id = match self.free.pop() {
            Some(id) => {
                self.sessions[id] = Some(session);
                id
            }
            None => {
                self.sessions.push(Some(session));
                self.sessions.len() - 1
            }
        };
        self.by_key.entry(key).or_default().push(id);
        self.by_end.insert((end, id));
        id
    }

    fn session(&mut self, id: usize) -> &mut Session {
        self.sessions[id].as_mut().expect("open session")
    }

    fn fired(&self, end: i64) -> bool {
        self.spec.shift.to_utc(end) - 1 <= self.watermark
    }

    /// The session of a row at `t` of `key`, creating or merging sessions;
    /// `None` when the row is late.
    fn assign(
        &mut self,
        key: &[u8],
        t: i64,
        merged_into: &mut HashMap<usize, usize>,
    ) -> Result<Option<usize>> {
        let gap = self.spec.gap;
        let (mut start, mut end) = (t, t + gap);
        let overlapping: Vec<usize> = self
            .by_key
            .get(key)
            .map(|ids| {
                ids.iter()
                    .copied()
                    .filter(|id| {
                        let s = self.sessions[*id].as_ref().expect("open session");
                        s.start < end && t < s.end
                    })
                    .collect()
            })
            .unwrap_or_default();
        for id in &overlapping {
            let s = self.sessions[*id].as_ref().expect("open session");
            start = start.min(s.start);
            end = end.max(s.end);
        }
        if self.fired(end) {
            return Ok(None);
        }
        self.mark_changed(key);
        let Some((&target, others)) = overlapping.split_first() else {
            let session = Session {
                key: key.into(),
                start,
                end,
                accumulators: self.new_accumulators()?,
            };
            return Ok(Some(self.open(session)));
        };
        for &other in others {
            let mut gone = self.sessions[other].take().expect("open session");
            // Freed only after the batch: rows of this batch may still name it.
            self.merged_away.push(other);
            self.by_end.remove(&(gone.end, other));
            let target_session = self.session(target);
            for (into, from) in target_session
                .accumulators
                .iter_mut()
                .zip(gone.accumulators.iter_mut())
            {
                let state = from
                    .state()?
                    .into_iter()
                    .map(|v| v.to_array())
                    .collect::<datafusion_common::Result<Vec<ArrayRef>>>()?;
                into.merge_batch(&state)?;
            }
            if let Some(ids) = self.by_key.get_mut(key) {
                ids.retain(|id| *id != other);
            }
            merged_into.insert(other, target);
        }
        let old_end = self.session(target).end;
        self.by_end.remove(&(old_end, target));
        let session = self.session(target);
        session.start = start;
        session.end = end;
        self.by_end.insert((end, target));
        Ok(Some(target))
    }

    fn process(&mut self, batch: &RecordBatch) -> Result<()> {
        let rows = batch.num_rows();
        let millis = match self.spec.processing_time {
            // Never a session the clock has fired already.
            true => {
                let now = weir_common::time::wall_clock_millis().max(self.watermark.saturating_add(1));
                Int64Array::from(vec![now; rows])
            }
            false => {
                let time = batch.column(self.spec.time_index);
                if time.null_count() > 0 {
                    return Err(Error::Execution(format!(
                        "the window time attribute '{}' is NULL",
                        self.spec.time_name
                    )));
                }
                to_epoch_millis(time.as_ref())?
            }
        };
        let keys = self
            .spec
            .keys
            .iter()
            .map(|k| k.evaluate(batch)?.into_array(rows))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        let key_rows = if keys.is_empty() {
            None
        } else {
            Some(self.converter.convert_columns(&keys)?)
        };
        if self.spill.has_spilled() {
            self.load_stored(&row_keys(key_rows.as_ref(), rows))?;
        }
        let mut merged_into = HashMap::new();
        let mut assigned: Vec<(usize, u32)> = Vec::with_capacity(rows);
        for (row, t) in millis.values().iter().enumerate() {
            let t = self.spec.shift.to_local(*t);
            let key: &[u8] = key_rows.as_ref().map_or(&[], |r| r.row(row).data());
            match self.assign(key, t, &mut merged_into)? {
                Some(id) => assigned.push((id, row as u32)),
                None => TaskMetrics::add(&self.metrics.late_records_dropped, 1),
            }
        }
        // Rows assigned to a session that a later row merged away go to the survivor.
        for (id, _) in &mut assigned {
            while let Some(next) = merged_into.get(id) {
                *id = *next;
            }
        }
        assigned.sort_unstable();
        let arguments = Arguments::of(&self.spec.aggregates, &self.spec.filters, batch)?;
        let mut start = 0;
        while start < assigned.len() {
            let id = assigned[start].0;
            let end = assigned[start..]
                .iter()
                .position(|(s, _)| *s != id)
                .map_or(assigned.len(), |p| start + p);
            let run: Vec<u32> = assigned[start..end].iter().map(|(_, r)| *r).collect();
            arguments.accumulate(&mut self.session(id).accumulators, &run)?;
            start = end;
        }
        self.free.append(&mut self.merged_away);
        Ok(())
    }

    /// Emits every session the watermark has closed, in order of end; with
    /// the spilling backend, those of the store's keys a chunk at a time.
    /// Gives how many sessions came from the store.
    fn fire(&mut self, out: &mut Output) -> Result<usize> {
        let mut loaded = 0;
        loop {
            let (read, more) = self.load_due()?;
            loaded += read;
            self.fire_memory(out, more)?;
            if more.is_none() {
                return Ok(loaded);
            }
        }
    }

    /// Emits memory's sessions the watermark has closed, ending at or
    /// before `until` if given.
    fn fire_memory(&mut self, out: &mut Output, until: Option<i64>) -> Result<()> {
        let mut closed = Vec::new();
        while let Some(&(end, id)) = self.by_end.first() {
            if !self.fired(end) || until.is_some_and(|u| end > u) {
                break;
            }
            self.by_end.pop_first();
            let session = self.sessions[id].take().expect("open session");
            self.mark_changed(&session.key);
            self.free.push(id);
            if let Some(ids) = self.by_key.get_mut(&session.key) {
                ids.retain(|s| *s != id);
                if ids.is_empty() {
                    self.by_key.remove(&session.key);
                }
            }
            closed.push(session);
            if closed.len() == self.batch_size {
                out.batch(self.output(std::mem::take(&mut closed))?);
            }
        }
        if !closed.is_empty() {
            out.batch(self.output(closed)?);
        }
        Ok(())
    }

    fn output(&self, mut sessions: Vec<Session>) -> Result<RecordBatch> {
        let n = sessions.len();
        let keys = if self.spec.key_schema.fields().is_empty() {
            vec![]
        } else {
            let parser = self.converter.parser();
            self.converter
                .convert_rows(sessions.iter().map(|s| parser.parse(&s.key)))?
        };
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
                    let zone = match field.data_type() {
                        DataType::Timestamp(_, zone) => zone.clone(),
                        _ => None,
                    };
                    let values = sessions.iter().map(|s| match property {
                        WindowProperty::Start => s.start,
                        WindowProperty::End => s.end,
                        WindowProperty::Time if zone.is_some() => self.spec.shift.to_utc(s.end) - 1,
                        WindowProperty::Time => s.end - 1,
                    });
                    Arc::new(TimestampMillisecondArray::from_iter_values(values).with_timezone_opt(zone))
                }
            };
            columns.push(array);
        }
        for i in 0..self.spec.aggregates.len() {
            let values = sessions
                .iter_mut()
                .map(|s| s.accumulators[i].evaluate())
                .collect::<datafusion_common::Result<Vec<ScalarValue>>>()?;
            let field = self.spec.output_schema.field(columns.len());
            let array = if values.is_empty() {
                arrow::array::new_empty_array(field.data_type())
            } else {
                ScalarValue::iter_to_array(values)?
            };
            let array = if array.data_type() == field.data_type() {
                array
            } else {
                arrow::compute::cast(&array, field.data_type())?
            };
            columns.push(array);
        }
        debug_assert!(columns.iter().all(|c| c.len() == n));
        Ok(RecordBatch::try_new(self.spec.output_schema.clone(), columns)?)
    }
}

impl SessionOperator {
    /// The schema of the state rows: `_key_group`, `_start`, `_end`, keys, states.
    fn state_schema(&self) -> Result<SchemaRef> {
        self.spec.state_schema()
    }

    /// Every open session as a row, sorted by key group.
    fn state_rows(&mut self) -> Result<Option<RecordBatch>> {
        let ids: Vec<usize> = self.by_end.iter().map(|(_, id)| *id).collect();
        if ids.is_empty() {
            return Ok(None);
        }
        let columns = self.state_columns(&ids, true)?;
        Ok(Some(sorted_state_rows(&self.state_schema()?, columns)?))
    }

    /// The state columns of sessions `ids`, in their order. Reading an
    /// accumulator's state may consume it, so each is rebuilt from its
    /// state when the session stays (`keep`).
    fn state_columns(&mut self, ids: &[usize], keep: bool) -> Result<Vec<ArrayRef>> {
        let mut starts = Vec::with_capacity(ids.len());
        let mut ends = Vec::with_capacity(ids.len());
        let mut states = StateColumns::default();
        let spec = self.spec.clone();
        for &id in ids {
            let session = self.sessions[id].as_mut().expect("open session");
            starts.push(session.start);
            ends.push(session.end);
            states.push(&mut session.accumulators, keep.then_some(&spec.aggregates[..]))?;
        }
        let keys = if self.spec.key_schema.fields().is_empty() {
            vec![]
        } else {
            let parser = self.converter.parser();
            let sessions = &self.sessions;
            self.converter.convert_rows(
                ids.iter()
                    .map(|id| parser.parse(&sessions[*id].as_ref().expect("open session").key)),
            )?
        };
        let groups = key_groups(&keys, ids.len(), self.max_parallelism)?;
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(groups),
            Arc::new(Int64Array::from(starts)),
            Arc::new(Int64Array::from(ends)),
        ];
        columns.extend(keys);
        columns.extend(states.into_arrays()?);
        Ok(columns)
    }

    /// Reopens the sessions of state rows (of the state schema), giving
    /// their ids in the rows' order.
    fn open_sessions(&mut self, rows: &RecordBatch) -> Result<Vec<usize>> {
        let key_count = self.spec.key_schema.fields().len();
        let starts = rows.column(1).as_primitive::<Int64Type>().values().to_vec();
        let ends = rows.column(2).as_primitive::<Int64Type>().values().to_vec();
        let keys = &rows.columns()[3..3 + key_count];
        let key_rows = if key_count == 0 {
            None
        } else {
            Some(self.converter.convert_columns(keys)?)
        };
        let mut ids = Vec::with_capacity(rows.num_rows());
        for row in 0..rows.num_rows() {
            let states = &rows.columns()[3 + key_count..];
            let accumulators = restored_accumulators(&self.spec.aggregates, states, row)?;
            let key: Box<[u8]> = key_rows
                .as_ref()
                .map_or(Box::from([]), |r| r.row(row).data().into());
            let session = Session {
                key,
                start: starts[row],
                end: ends[row],
                accumulators,
            };
            ids.push(self.open(session));
        }
        Ok(ids)
    }

    /// Reopens the sessions of a snapshot's state rows (this subtask's key
    /// groups), a chunk at a time: with the spilling backend, a key's
    /// stored sessions are read first, and memory goes to the store when
    /// it is full.
    fn restore_rows(&mut self, rows: &RecordBatch) -> Result<()> {
        OperatorSnapshot::check_columns(rows, self.state_schema()?.as_ref(), &self.spec.name)?;
        let key_count = self.spec.key_schema.fields().len();
        for chunk in in_chunks(rows) {
            if self.spill.has_spilled() {
                let key_rows = (key_count > 0)
                    .then(|| self.converter.convert_columns(&chunk.columns()[3..3 + key_count]))
                    .transpose()?;
                self.load_stored(&row_keys(key_rows.as_ref(), chunk.num_rows()))?;
            }
            self.open_sessions(&chunk)?;
            self.spill_if_over()?;
        }
        Ok(())
    }
}

impl Operator for SessionOperator {
    fn name(&self) -> String {
        self.spec.name.clone()
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        if self.spill.has_spilled() {
            return self.spilled_snapshot().map(Some);
        }
        Ok(Some(OperatorSnapshot::with_watermark(
            self.watermark,
            self.state_rows()?,
        )))
    }

    fn state_signature(&self) -> Result<Option<String>> {
        Ok(Some(schema_signature(self.state_schema()?.as_ref())))
    }

    fn is_keyed(&self) -> bool {
        true
    }

    fn delta_kind(&self) -> Option<weir_state::incremental::DeltaKind> {
        (self.changed.is_some()).then_some(weir_state::incremental::DeltaKind::Replace)
    }

    /// Every key's sessions (`full`), or those of the keys whose sessions
    /// changed since the last snapshot (a deleting row for a key without
    /// any left); and the watermark.
    fn snapshot_delta(&mut self, checkpoint: CheckpointId, full: bool) -> Result<Option<OperatorSnapshot>> {
        if self.changed.is_none() {
            return self.snapshot(checkpoint);
        }
        if self.spill.has_spilled() {
            return self.spilled_delta(full).map(Some);
        }
        let rows = self.delta(full)?;
        Ok(Some(OperatorSnapshot::with_watermark(self.watermark, rows)))
    }

    fn restore_rescaled(&mut self, snapshots: Vec<OperatorSnapshot>) -> Result<()> {
        match OperatorSnapshot::merge_by_watermark(snapshots, &self.spec.name)? {
            Some(merged) => self.restore(merged),
            None => Ok(()),
        }
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        self.watermark = snapshot.watermark(&self.spec.name)?;
        if let Some(rows) = &snapshot.rows {
            self.restore_rows(rows)?;
        }
        Ok(())
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, _out: &mut Output) -> Result<()> {
        self.process(&batch)?;
        self.spill_if_full(batch.num_rows())
    }

    fn process_watermark(&mut self, watermark: Timestamp, out: &mut Output) -> Result<()> {
        if self.spec.processing_time && watermark != weir_common::time::MAX_WATERMARK {
            // Event time passes through; the wall clock fires the sessions
            // (and the end of input, all of them).
            out.watermark(watermark);
            return Ok(());
        }
        if watermark <= self.watermark {
            return Ok(());
        }
        self.watermark = watermark;
        let loaded = self.fire(out)?;
        out.watermark(watermark);
        // The store's sessions read with those that fired stay in memory.
        self.spill_if_full(loaded)
    }

    fn uses_processing_time(&self) -> bool {
        self.spec.processing_time
    }

    /// On processing time the clock is the watermark sessions fire by.
    fn on_processing_time(&mut self, now: Timestamp, out: &mut Output) -> Result<()> {
        if !self.spec.processing_time || now <= self.watermark {
            return Ok(());
        }
        self.watermark = now;
        let loaded = self.fire(out)?;
        self.spill_if_full(loaded)
    }
}
