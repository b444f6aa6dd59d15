//! Event-time temporal joins: `JOIN versioned FOR SYSTEM_TIME AS OF
//! s.rowtime ON s.k = versioned.pk`, as Flink's
//! `TemporalRowTimeJoinOperator`. The versioned table (input 1, keyed by
//! its primary key, with a rowtime) keeps each key's versions by time; a
//! stream row (input 0) waits until the watermark passes its time, then
//! joins the version of its key that was current at that time (`INNER`,
//! or `LEFT` padded when there is none or it was deleted). Versions older
//! than the one current at the watermark are dropped. Insert-only. Under the
//! spilling backend, rows and versions beyond the memory budget go to a
//! store (`temporal/spill.rs`).
//!
//! ```text
//!  stream    ──HASH[k]──►┐  rows wait by time     watermark w: rows at <= w join
//!                        TemporalJoin             the version current at their time
//!  versioned ──HASH[pk]─►┘  versions by key, time
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, UInt32Array, new_null_array};
use arrow::compute::take;
use arrow::datatypes::{
    DataType, Field, Int8Type, Int64Type, Schema, SchemaRef, TimeUnit, TimestampMillisecondType,
};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use datafusion_physical_expr::PhysicalExpr;

use crate::Result;
use crate::join::state::{ByKey, Key};
use crate::join::{key_rows, pair_matches};
use weir_common::changelog;
use weir_common::ids::CheckpointId;
use weir_common::time::Timestamp;
use weir_plan::join::JoinKind;
use weir_runtime::operator::OperatorSnapshot;
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};
use weir_state::memory_guess::SpillsWhenFull;
use weir_state::snapshot::{schema_signature, sorted_state_rows};
use weir_state::spilled::SpillSlot;
use weir_state::store::in_chunks;

mod delta;
mod spill;
mod spilled_delta;

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
    /// Its name in the plan (EXPLAIN's), for errors and logs.
    pub name: String,
}

impl TemporalJoin {
    fn key_types(&self) -> Result<Vec<DataType>> {
        super::key_types(&self.keys, &self.inputs[0])
    }

    /// `_key_group`, `_side`, stream columns, table columns, `_time`,
    /// `_deleting` (a version that removes its key; not `_deleted`, which
    /// an incremental delta's rows use).
    fn state_schema(&self) -> SchemaRef {
        let mut fields = super::two_sided_fields(&self.inputs);
        fields.push(Field::new("_time", DataType::Int64, false));
        fields.push(Field::new("_deleting", DataType::Boolean, false));
        Arc::new(Schema::new(fields))
    }
}

impl OperatorFactory for TemporalJoin {
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(TemporalJoinOperator {
            rows_of: super::row_converters(&self.inputs)?,
            keys_of: RowConverter::new(self.key_types()?.into_iter().map(SortField::new).collect())?,
            waiting: BTreeMap::new(),
            versions: ByKey::default(),
            watermark: Timestamp::MIN,
            compacted: Timestamp::MIN,
            changes: BTreeMap::new(),
            changed: ctx.incremental.then(delta::Changed::default),
            max_parallelism: ctx.max_parallelism,
            spill: (ctx.spill.clone()).map(|s| spill::TemporalSpill::new(s, ctx.incremental)),
            spec: Arc::new(self.clone()),
        }))
    }

    fn can_spill(&self) -> bool {
        true
    }
}

/// A row's bytes and its key's.
type Keyed = (Box<[u8]>, Box<[u8]>);

/// Stream rows with their times, in the order they fire.
type Due = Vec<(i64, Keyed)>;

/// A version's row, and whether it deleted its key.
type Version = (Box<[u8]>, bool);

/// A key's versions in time order, one a time: a sorted vector whose first
/// is inline, since after the watermark drops the old ones a key has one
/// or a few (a map took 456 bytes a key for its first node).
#[derive(Debug, Default, Clone, PartialEq)]
struct Versions(smallvec::SmallVec<[(i64, Version); 1]>);

impl Versions {
    fn new() -> Self {
        Versions::default()
    }

    /// Sets the version at `time` (replacing one there).
    fn insert(&mut self, time: i64, version: Version) {
        match self.0.binary_search_by_key(&time, |(t, _)| *t) {
            Ok(i) => self.0[i].1 = version,
            Err(i) => self.0.insert(i, (time, version)),
        }
    }

    /// How many are at or before `w`.
    fn at_or_before(&self, w: Timestamp) -> usize {
        self.0.partition_point(|(t, _)| *t <= w)
    }

    /// The version current at `time`: the last at or before it.
    fn current_at(&self, time: i64) -> Option<&Version> {
        let n = self.at_or_before(time);
        n.checked_sub(1).map(|i| &self.0[i].1)
    }

    fn iter(&self) -> std::slice::Iter<'_, (i64, Version)> {
        self.0.iter()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'a> IntoIterator for &'a Versions {
    type Item = &'a (i64, Version);
    type IntoIter = std::slice::Iter<'a, (i64, Version)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

struct TemporalJoinOperator {
    spec: Arc<TemporalJoin>,
    rows_of: [RowConverter; 2],
    keys_of: RowConverter,
    /// Stream rows by time, waiting for the watermark.
    waiting: BTreeMap<i64, Vec<Keyed>>,
    /// Each key's versions by time: the row, and whether it was deleted then.
    /// Under the spilling backend, the keys memory holds since the last
    /// spill (a key without versions kept, to leave the store at the next).
    versions: ByKey<Versions>,
    watermark: Timestamp,
    /// The watermark versions were last dropped at (see [`compact_versions`]).
    compacted: Timestamp,
    /// Keys by the watermark at which some of their versions are dropped
    /// ([`next_change`]): a watermark visits those, not every key.
    changes: BTreeMap<i64, Vec<Key>>,
    /// Incremental checkpoints on the heap: what changed since the last
    /// snapshot.
    changed: Option<delta::Changed>,
    max_parallelism: usize,
    /// The spilling backend: rows and versions beyond the budget in a store.
    spill: Option<weir_state::spilled::Spilled<spill::TemporalSpill>>,
}

/// Drops the versions of a key no row can join once the watermark is `w`:
/// all but the last at or before it, and that one too when it deleted the
/// key and nothing comes after. A plain function: the store's versions are
/// dropped by it when they are read, as memory's are at each watermark.
fn compact_versions(versions: &mut Versions, w: Timestamp) {
    let before = versions.at_or_before(w);
    if before > 0 {
        versions.0.drain(..before - 1);
        if versions.len() == 1 && versions.0[0].1.1 {
            versions.0.clear();
        }
    }
}

/// The first watermark at or after `w` at which [`compact_versions`]
/// changes `versions` (`None`: never, as for a key's one version): `w`
/// itself when two versions are at or before it, or a lone deletion; else
/// when a later version becomes current with an older one before it.
fn next_change(versions: &Versions, w: Timestamp) -> Option<i64> {
    let (before, all) = (versions.at_or_before(w), &versions.0);
    let time = |i: usize| all.get(i).map(|(t, _)| *t);
    match before {
        0 if all.len() == 1 => all[0].1.1.then_some(all[0].0),
        0 => time(1),
        1 if all.len() == 1 && all[0].1.1 => Some(w),
        1 => time(1),
        _ => Some(w),
    }
}

/// Stream rows due at a watermark in the order they fire: the store's (in
/// time order, each time's in arrival order) and memory's, by time, the
/// store's first at the same time (they came before memory's).
fn merge_due(stored: Due, memory: BTreeMap<i64, Vec<Keyed>>) -> Due {
    let mut due = Vec::with_capacity(stored.len() + memory.values().map(Vec::len).sum::<usize>());
    let mut stored = stored.into_iter().peekable();
    for (time, rows) in memory {
        while let Some(row) = stored.next_if(|(t, _)| *t <= time) {
            due.push(row);
        }
        due.extend(rows.into_iter().map(|row| (time, row)));
    }
    due.extend(stored);
    due
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
        if side == 1 {
            let wanted = (0..keys.num_rows()).filter(|i| !nulls.as_ref().is_some_and(|n| n.is_null(*i)));
            self.load_stored(wanted.map(|i| keys.row(i).data()))?;
        }
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
                if let Some(changed) = &mut self.changed {
                    changed.times.insert(time);
                }
                self.waiting
                    .entry(time)
                    .or_default()
                    .push((key, row.as_ref().into()));
            } else if !null_key {
                let version = (row.as_ref().into(), kinds[i].is_retraction());
                self.add_version(key.as_ref(), time, version);
            }
        }
        self.spill_if_full(batch.num_rows())
    }

    /// Joins the waiting rows at or before `w` with their versions: under
    /// the spilling backend, the store's a chunk at a time, merged with
    /// memory's in time order.
    fn fire(&mut self, w: Timestamp, out: &mut Output) -> Result<()> {
        loop {
            // `more`: the chunk's last time, when rows up to `w` may follow.
            let (stored, more) = self.stored_due(w)?;
            let upto = more.unwrap_or(w.saturating_add(1));
            let later = self.waiting.split_off(&upto);
            let memory = std::mem::replace(&mut self.waiting, later);
            self.join_due(merge_due(stored, memory), out)?;
            if more.is_none() {
                return Ok(());
            }
        }
    }

    /// Joins stream rows with the version of their key current at their time.
    fn join_due(&mut self, due: Due, out: &mut Output) -> Result<()> {
        if due.is_empty() {
            return Ok(());
        }
        self.mark_fired(&due)?;
        let stored = self.stored_versions(due.iter().map(|(_, (key, _))| &key[..]))?;
        let (left_parser, right_parser) = (self.rows_of[0].parser(), self.rows_of[1].parser());
        let (mut left, mut right, mut pairs) = (Vec::new(), Vec::new(), Vec::new());
        for (time, (key, row)) in &due {
            let version = (self.versions.get(&key[..]))
                .or_else(|| stored.get(&key[..]))
                .and_then(|v| v.current_at(*time))
                .and_then(|(row, deleted)| (!deleted).then_some(row));
            left.push(left_parser.parse(row));
            pairs.push(version.map(|v| {
                right.push(right_parser.parse(v));
                (right.len() - 1) as u32
            }));
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

    /// Adds a version of `key` at `time`, noting when the watermark will
    /// drop some of its versions.
    fn add_version(&mut self, key: &[u8], time: i64, version: (Box<[u8]>, bool)) {
        let versions = match self.versions.get_mut(key) {
            Some(v) => v,
            None => self.versions.entry(key.into()).or_default(),
        };
        versions.insert(time, version);
        if let Some(changed) = &mut self.changed {
            changed.keys.insert(key.into());
        }
        if let Some(at) = next_change(versions, self.compacted) {
            self.changes.entry(at).or_default().push(key.into());
        }
    }

    /// Drops versions no row can join any more ([`compact_versions`]) of
    /// the keys [`next_change`] named up to `w`, not of every key; a key
    /// left without any is forgotten, unless the store may hold it.
    fn compact(&mut self, w: Timestamp) {
        let keep_empty = self.spill.has_spilled();
        let later = self.changes.split_off(&w.saturating_add(1));
        for key in std::mem::replace(&mut self.changes, later)
            .into_values()
            .flatten()
        {
            // Not in memory: spilled, dropped when read from the store.
            let Some(versions) = self.versions.get_mut(&key[..]) else {
                continue;
            };
            compact_versions(versions, w);
            if let Some(changed) = &mut self.changed {
                changed.keys.insert(key[..].into());
            }
            match next_change(versions, w) {
                Some(at) => self.changes.entry(at).or_default().push(key),
                None if versions.is_empty() && !keep_empty => {
                    self.versions.remove(&key[..]);
                }
                None => {}
            }
        }
        self.compacted = w;
    }

    /// Bytes its rows and versions take in memory, about (the spilling
    /// backend's measure: a walk of them).
    fn memory_size(&self) -> usize {
        const ENTRY: usize = 48;
        let waiting: usize = (self.waiting.values())
            .map(|rows| ENTRY + rows.iter().map(|(k, r)| ENTRY + k.len() + r.len()).sum::<usize>())
            .sum();
        // The table's slots, then what they point to: rows, and keys and
        // versions that do not fit their slot.
        let slots = self.versions.capacity() * (std::mem::size_of::<(Key, Versions)>() + 1);
        let pointed: usize = (self.versions.iter())
            .map(|(k, v)| {
                let key = if k.spilled() { k.capacity() } else { 0 };
                let outside = if v.0.spilled() {
                    v.0.capacity() * std::mem::size_of::<(i64, Version)>()
                } else {
                    0
                };
                key + outside + v.iter().map(|(_, (r, _))| 16 + r.len()).sum::<usize>()
            })
            .sum();
        let versions = slots + pointed;
        let changes: usize = (self.changes.values())
            .map(|keys| ENTRY + keys.len() * std::mem::size_of::<Key>())
            .sum();
        waiting + versions + changes
    }

    /// One side's rows as state columns (see [`TemporalJoin::state_schema`]).
    fn side_state(&self, side: usize) -> Result<Option<Vec<ArrayRef>>> {
        match side {
            0 => self.waiting_state(self.waiting.iter()),
            _ => self.versions_state(self.versions.values()),
        }
    }

    /// The waiting rows of `times` as state columns.
    fn waiting_state<'a>(
        &self,
        times: impl Iterator<Item = (&'a i64, &'a Vec<Keyed>)>,
    ) -> Result<Option<Vec<ArrayRef>>> {
        let parser = self.rows_of[0].parser();
        let mut state = SideState::default();
        for (time, waiting) in times {
            for (_, row) in waiting {
                state.rows.push(parser.parse(row));
                state.times.push(*time);
                state.deleted.push(false);
            }
        }
        side_columns(&self.spec, &self.rows_of[0], self.max_parallelism, 0, state)
    }

    /// The versions of `keys` as state columns.
    fn versions_state<'a>(&self, keys: impl Iterator<Item = &'a Versions>) -> Result<Option<Vec<ArrayRef>>> {
        let parser = self.rows_of[1].parser();
        let mut state = SideState::default();
        for versions in keys {
            for (time, (row, gone)) in versions.iter() {
                state.rows.push(parser.parse(row));
                state.times.push(*time);
                state.deleted.push(*gone);
            }
        }
        side_columns(&self.spec, &self.rows_of[1], self.max_parallelism, 1, state)
    }

    /// Adds one side's rows of state rows to memory (a key's versions read
    /// from the store first, if it has them: they may be in several chunks).
    fn restore_side(&mut self, side: usize, rows: &RecordBatch) -> Result<()> {
        let widths = [
            self.spec.inputs[0].fields().len(),
            self.spec.inputs[1].fields().len(),
        ];
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
        let null_key = |i: usize| nulls.as_ref().is_some_and(|n| n.is_null(i));
        if side == 1 {
            self.load_stored(
                (0..keys.num_rows())
                    .filter(|i| !null_key(*i))
                    .map(|i| keys.row(i).data()),
            )?;
        }
        let converted = self.rows_of[side].convert_columns(data.columns())?;
        for i in 0..rows.num_rows() {
            let key: Box<[u8]> = match null_key(i) {
                true => Box::new([]),
                false => keys.row(i).as_ref().into(),
            };
            let row: Box<[u8]> = converted.row(i).as_ref().into();
            match side {
                0 => self.waiting.entry(times.value(i)).or_default().push((key, row)),
                _ => self.add_version(&key, times.value(i), (row, deleted.value(i))),
            }
        }
        Ok(())
    }
}

/// One side's rows of state, with their times and whether they delete.
#[derive(Default)]
struct SideState<'a> {
    rows: Vec<arrow::row::Row<'a>>,
    times: Vec<i64>,
    deleted: Vec<bool>,
}

/// The key group of each row of `side` in `data` (see [`super::row_key_groups`]).
fn key_groups_of_rows(
    spec: &TemporalJoin,
    side: usize,
    data: &[ArrayRef],
    max_parallelism: usize,
) -> Result<UInt32Array> {
    super::row_key_groups(&spec.keys[side], &spec.inputs[side], data, max_parallelism)
}

/// One side's rows as state columns (see [`TemporalJoin::state_schema`]);
/// `None` without rows.
fn side_columns(
    spec: &TemporalJoin,
    converter: &RowConverter,
    max_parallelism: usize,
    side: usize,
    state: SideState,
) -> Result<Option<Vec<ArrayRef>>> {
    if state.rows.is_empty() {
        return Ok(None);
    }
    let data = converter.convert_rows(state.rows)?;
    let groups = key_groups_of_rows(spec, side, &data, max_parallelism)?;
    let mut columns = super::one_side_columns(&spec.inputs, side, groups, &data);
    columns.push(Arc::new(Int64Array::from(state.times)));
    columns.push(Arc::new(BooleanArray::from(state.deleted)));
    Ok(Some(columns))
}

impl Operator for TemporalJoinOperator {
    fn name(&self) -> String {
        self.spec.name.clone()
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
        if self.spill.has_spilled() {
            return self.spilled_snapshot().map(Some);
        }
        let columns = super::concat_sides([self.side_state(0)?, self.side_state(1)?])?;
        let rows = columns
            .map(|c| sorted_state_rows(&self.spec.state_schema(), c))
            .transpose()?;
        Ok(Some(OperatorSnapshot::with_watermark(self.watermark, rows)))
    }

    fn delta_kind(&self) -> Option<weir_state::incremental::DeltaKind> {
        (self.changed.is_some()).then_some(weir_state::incremental::DeltaKind::Replace)
    }

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
        // Saved versions were dropped at that watermark.
        self.compacted = self.watermark;
        let Some(rows) = &snapshot.rows else {
            return Ok(());
        };
        OperatorSnapshot::check_columns(rows, &self.spec.state_schema(), &self.spec.name)?;
        // A chunk at a time: with the spilling backend, memory goes to the
        // store whenever it holds more than its share.
        for chunk in in_chunks(rows) {
            self.restore_side(0, &chunk)?;
            self.restore_side(1, &chunk)?;
            self.spill_if_over()?;
        }
        // A key's versions from an older file of an incremental chain may
        // hold some the watermark has dropped since (a spilled delta notes
        // only the keys written): they go now, as they did before.
        self.compact(self.watermark);
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

    fn versions(of: &[(i64, bool)]) -> Versions {
        let mut versions = Versions::new();
        of.iter()
            .for_each(|(t, d)| versions.insert(*t, (Box::default(), *d)));
        versions
    }

    #[test]
    fn a_keys_versions_change_when_a_later_one_becomes_current_over_an_older_one() {
        assert_eq!(next_change(&versions(&[(5, false)]), 9), None, "one version");
        assert_eq!(next_change(&versions(&[(5, false)]), 1), None);
        assert_eq!(
            next_change(&versions(&[(5, true)]), 1),
            Some(5),
            "a lone deletion goes"
        );
        assert_eq!(next_change(&versions(&[(5, true)]), 7), Some(7));
        assert_eq!(next_change(&versions(&[(2, false), (5, false)]), 3), Some(5));
        assert_eq!(
            next_change(&versions(&[(2, false), (5, false)]), 6),
            Some(6),
            "two before"
        );
        assert_eq!(next_change(&versions(&[(5, false), (8, false)]), 1), Some(8));
        assert_eq!(next_change(&versions(&[(2, true), (5, false)]), 3), Some(5));
        assert_eq!(next_change(&Versions::new(), 3), None);
    }

    #[test]
    fn due_rows_fire_in_time_order_the_stores_first_at_one_time() {
        let row = |name: &str| -> Keyed { (Box::default(), name.as_bytes().into()) };
        let stored = vec![(1, row("s1")), (2, row("s2")), (2, row("s2'")), (5, row("s5"))];
        let memory = BTreeMap::from([
            (0, vec![row("m0")]),
            (2, vec![row("m2"), row("m2'")]),
            (3, vec![row("m3")]),
        ]);
        let order: Vec<String> = merge_due(stored, memory)
            .into_iter()
            .map(|(_, (_, r))| String::from_utf8(r.into()).unwrap())
            .collect();
        assert_eq!(order, ["m0", "s1", "s2", "s2'", "m2", "m2'", "m3", "s5"]);
    }

    /// Versions added and watermarks in a pseudo-random order: dropping at
    /// [`next_change`]'s times only keeps what dropping at every watermark
    /// keeps, after every watermark.
    #[test]
    fn dropping_versions_when_next_change_says_equals_dropping_them_at_every_watermark() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..200 {
            let (mut every, mut noted) = (Versions::new(), Versions::new());
            let (mut w, mut due): (i64, Option<i64>) = (0, None);
            for _ in 0..40 {
                if next(3) == 0 {
                    w += next(4) as i64;
                    compact_versions(&mut every, w);
                    if due.is_some_and(|at| at <= w) {
                        compact_versions(&mut noted, w);
                        due = next_change(&noted, w);
                    }
                    assert_eq!(noted, every, "at watermark {w}");
                } else {
                    let (time, deleted) = (w - 3 + next(10) as i64, next(4) == 0);
                    every.insert(time, (Box::default(), deleted));
                    noted.insert(time, (Box::default(), deleted));
                    let at = next_change(&noted, w);
                    due = match (due, at) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
            }
        }
    }
}
