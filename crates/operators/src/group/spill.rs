//! The spilling state backend of non-windowed aggregation: groups beyond the memory budget in files per key group.
//!
//! Memory holds the groups the latest batches touched. When their state
//! passes a quarter of the subtask's budget (measured when a guess says it
//! may, [`weir_state::memory_guess`]), every group is written to a file of
//! its key group ([`weir_state::key_group_files`]: state rows, as a
//! snapshot has them) and memory starts empty again. From then on a row of
//! a key group with files waits there ([`crate::waiting`]) until enough
//! rows wait to read the key group's files, a second has passed, or a
//! barrier comes; then the files' state comes back to memory whole (the
//! files go, so a group is in memory or in a file, never both) and the
//! rows are aggregated as one mini-batch. Each key's changes are the
//! heap's, some intermediate ones left out, as a larger mini-batch leaves
//! them out.
//!
//! Checkpoints stay state files. A snapshot first writes memory to the
//! files; a full one then reads every file into one run, on the snapshot's
//! writer thread (the files are immutable: the task goes on); an
//! incremental one the groups written since the last snapshot, found in
//! their key groups' files (deleted when gone). A restore writes the
//! checkpoint's rows to files, not to memory. A state TTL rewrites one key
//! group's files per processing-time tick without the expired groups, as
//! the heap's sweep goes round memory.
//!
//! Under more than 128 key groups, files and waiting rows are per part of
//! consecutive key groups instead ([`part_width`]), so that they keep their
//! size.
//!
//! A keyless aggregate (no GROUP BY keys) has one group, in key group 0.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::compute::{take_arrays, take_record_batch};
use arrow::datatypes::{Int64Type, SchemaRef, UInt32Type};
use arrow::row::{Row, RowConverter, SortField};

use crate::group::GroupAggregateOperator;
use crate::groups::Groups;
use crate::waiting::{ReadsWaiting, Waiting, part_width};
use crate::{Error, Result};
use weir_common::time::wall_clock_millis;
use weir_runtime::Output;
use weir_runtime::operator::SpillSettings;
use weir_state::deferred::{Deferred, DeltaOf, store_delta};
use weir_state::incremental::upsert_delta;
use weir_state::key_group_files::{FrozenFiles, KeyGroupFiles, by_key_group};
use weir_state::snapshot::{concat_by_key_group, key_groups, sorted_by_key_group, state_rows};
use weir_state::spilled::{SpillCore, SpillSlot, Spilled};
use weir_state::store::WRITE_CHUNK;

/// The least a row is guessed to add to memory: a new group's key slot,
/// count, stamps and a state or two.
const LEAST_PER_ROW: usize = 64;

/// A non-windowed aggregation subtask's own spilled state (beside its
/// [`SpillCore`], whose flushed keys are the [`Codec`] keys of groups).
pub(super) struct Spill {
    /// Groups' keys to bytes (for the next delta) and back.
    codec: Codec,
    /// The spilled groups, opened at the first spill (or restore).
    files: Option<KeyGroupFiles>,
    /// The key group the last TTL sweep rewrote.
    swept: Option<u32>,
    /// Rows waiting for their key group's read, and the rows of each key
    /// group's files.
    pub(super) waiting: Waiting,
    /// Per group in memory: whether its state is still to be read (its
    /// part has files; its rows wait).
    unread: Vec<bool>,
    /// Key groups per part ([`part_width`]).
    width: u32,
}

impl Spill {
    /// The spill of an aggregation whose state rows are `state_schema`
    /// (`_key_group`, `key_count` keys, then the rest).
    pub(super) fn new(
        settings: SpillSettings,
        state_schema: &SchemaRef,
        key_count: usize,
        incremental: bool,
        max_parallelism: usize,
    ) -> Result<Spilled<Self>> {
        let own = Spill {
            codec: Codec::new(state_schema, key_count)?,
            files: None,
            swept: None,
            waiting: Waiting::default(),
            unread: Vec::new(),
            width: part_width(max_parallelism),
        };
        Ok(Spilled::new(
            SpillCore::new(settings, incremental, LEAST_PER_ROW),
            own,
        ))
    }

    /// The files, opened in the spill directory if not yet.
    fn files(&mut self, core: &SpillCore) -> Result<&mut KeyGroupFiles> {
        if self.files.is_none() {
            self.files = Some(KeyGroupFiles::open(&core.settings.dir)?);
        }
        Ok(self.files.as_mut().expect("opened above"))
    }

    /// Rows `rows` of `batch`, of key groups `groups`, wait from `now`,
    /// each in its key group, in arrival order.
    fn hold(&mut self, batch: &RecordBatch, rows: &[u32], groups: &[u32], now: i64) -> Result<()> {
        let by_group = by_key_group(groups, |i| rows[i]);
        let picks = UInt32Array::from_iter_values(by_group.iter().flat_map(|(_, rows)| rows.iter().copied()));
        let held = take_record_batch(batch, &picks)?;
        let per_row = held.get_array_memory_size() / held.num_rows().max(1);
        let mut start = 0;
        for (group, rows) in by_group {
            let len = rows.len();
            self.waiting
                .hold(group, held.slice(start, len), len, per_row * len, now);
            start += len;
        }
        Ok(())
    }
}

/// Groups' keys to bytes and back: the key group (big-endian, so that
/// bytes sort in key-group order), then the keys in Arrow's row format.
struct Codec {
    /// Keys to row bytes and back (`None`: keyless).
    keys: Option<RowConverter>,
}

/// The key group at the start of `key` (a [`Codec`] key).
fn key_group_of(key: &[u8]) -> Result<u32> {
    key.get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| Error::State("a spilled state key without its key group".into()))
}

impl Codec {
    /// The codec of state rows of `state_schema` (`_key_group`, `key_count`
    /// keys, then the rest).
    fn new(state_schema: &SchemaRef, key_count: usize) -> Result<Codec> {
        let keys = match key_count {
            0 => None,
            n => Some(RowConverter::new(
                state_schema.fields()[1..1 + n]
                    .iter()
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect(),
            )?),
        };
        Ok(Codec { keys })
    }

    /// The bytes of each row of `keys`, whose key groups are `groups`.
    fn keyed(&self, groups: &UInt32Array, keys: &[ArrayRef]) -> Result<Vec<Vec<u8>>> {
        let encoded = match &self.keys {
            Some(converter) => Some(converter.convert_columns(keys)?),
            None => None,
        };
        Ok((0..groups.len())
            .map(|i| {
                let mut key = groups.value(i).to_be_bytes().to_vec();
                if let Some(rows) = &encoded {
                    key.extend_from_slice(rows.row(i).as_ref());
                }
                key
            })
            .collect())
    }

    /// `_key_group` and the key columns, from bytes.
    fn decode_keys(&self, keys: &[&[u8]]) -> Result<Vec<ArrayRef>> {
        let groups = keys.iter().map(|k| key_group_of(k)).collect::<Result<Vec<_>>>()?;
        let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(groups))];
        if let Some(converter) = &self.keys {
            let parser = converter.parser();
            let rows: Vec<Row<'_>> = keys.iter().map(|k| parser.parse(&k[4..])).collect();
            columns.extend(converter.convert_rows(rows)?);
        }
        Ok(columns)
    }

    /// The bytes of each of state `rows`.
    fn keys_of(&self, rows: &RecordBatch, key_count: usize) -> Result<Vec<Vec<u8>>> {
        let groups = rows.column(0).as_primitive::<UInt32Type>();
        self.keyed(groups, &rows.columns()[1..1 + key_count])
    }
}

/// One part's frozen state rows, and the row of each key's bytes.
struct Indexed {
    part: u32,
    rows: RecordBatch,
    index: HashMap<Vec<u8>, u32>,
}

/// Reads an incremental snapshot's changed groups back from frozen files.
struct ReadBack {
    codec: Codec,
    schema: SchemaRef,
    key_count: usize,
    /// Key groups per part.
    width: u32,
    /// The part read last (the keys come in key-group order, a chunk at a
    /// time, so a part's keys may span chunks).
    last: Option<Indexed>,
}

impl ReadBack {
    /// The upsert delta of `keys` (in key-group order): each one's state
    /// rows in `frozen`, or a deleting row when it has none.
    fn delta(&mut self, frozen: &FrozenFiles, keys: &[&[u8]]) -> Result<Vec<RecordBatch>> {
        let (mut found, mut gone) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < keys.len() {
            let part = key_group_of(keys[i])? / self.width;
            let mut end = i + 1;
            while end < keys.len() && key_group_of(keys[end])? / self.width == part {
                end += 1;
            }
            let indexed = self.indexed(frozen, part)?;
            let mut picks = Vec::new();
            for key in &keys[i..end] {
                match indexed.index.get(*key) {
                    Some(row) => picks.push(*row),
                    None => gone.push(*key),
                }
            }
            if !picks.is_empty() {
                found.push(take_record_batch(&indexed.rows, &UInt32Array::from(picks))?);
            }
            i = end;
        }
        let rows = match found.is_empty() {
            true => None,
            false => Some(arrow::compute::concat_batches(&self.schema, &found)?),
        };
        let deleted = (!gone.is_empty())
            .then(|| self.codec.decode_keys(&gone))
            .transpose()?;
        Ok(upsert_delta(&self.schema, rows, deleted, self.key_count)?
            .into_iter()
            .collect())
    }

    /// `part`'s rows in `frozen`, indexed by their keys' bytes.
    fn indexed(&mut self, frozen: &FrozenFiles, part: u32) -> Result<&Indexed> {
        if self.last.as_ref().map(|l| l.part) != Some(part) {
            let batches = frozen.read(part)?;
            let rows = match batches.is_empty() {
                true => RecordBatch::new_empty(self.schema.clone()),
                false => {
                    let all = arrow::compute::concat_batches(&batches[0].schema(), &batches)?;
                    state_rows(&self.schema, all.columns().to_vec())?
                }
            };
            let keys = self.codec.keys_of(&rows, self.key_count)?;
            let index = keys.into_iter().zip(0u32..).collect();
            self.last = Some(Indexed { part, rows, index });
        }
        Ok(self.last.as_ref().expect("read above"))
    }
}

impl ReadsWaiting for GroupAggregateOperator {
    type Rows = RecordBatch;

    fn waiting(&self) -> Option<(&Waiting<RecordBatch>, usize)> {
        (self.spill.as_ref()).map(|s| (&s.own.waiting, s.core.settings.budget))
    }

    fn waiting_mut(&mut self) -> Option<&mut Waiting> {
        self.spill.as_mut().map(|s| &mut s.own.waiting)
    }

    fn load_part(&mut self, part: u32) -> Result<usize> {
        self.load(part)
    }

    /// Aggregates a key group's waiting rows as one mini-batch.
    fn take_waiting(&mut self, rows: Vec<RecordBatch>, out: &mut Output) -> Result<usize> {
        let Some(first) = rows.first() else {
            return Ok(0);
        };
        let rows = arrow::compute::concat_batches(&first.schema(), &rows)?;
        let keys = self.intern(&rows)?;
        let own = &mut self.spill.as_mut().expect("spilled").own;
        own.unread.resize(self.groups.len(), false);
        self.group_indices.iter().for_each(|g| own.unread[*g] = false);
        self.aggregate(&rows, &keys, out)?;
        Ok(rows.num_rows())
    }

    fn operator_name(&self) -> &str {
        &self.spec.name
    }
}

spills_when_full!(GroupAggregateOperator);

impl GroupAggregateOperator {
    /// Bytes the groups' state takes in memory.
    fn memory_size(&self) -> usize {
        let vectors = (self.counts.capacity() + self.written.capacity() + self.group_indices.capacity()) * 8
            + self.stamps.capacity() * 4;
        let changed = self.changed.as_ref().map_or(0, |c| {
            c.keys.size() + c.flags.capacity() + c.groups.capacity() * 8
        });
        let accumulators: usize = self.accumulators.iter().map(|a| a.size()).sum();
        let waiting = self
            .spill
            .as_ref()
            .map_or(0, |s| s.own.waiting.bytes() + s.own.unread.capacity());
        self.groups.size() + vectors + changed + accumulators + waiting
    }

    /// Whether groups went to files: rows of key groups with files then
    /// wait for their read, and snapshots read the files.
    pub(super) fn spilled_to_files(&self) -> bool {
        self.spill.as_ref().is_some_and(|s| s.own.files.is_some())
    }

    /// Of a batch just interned: the rows of groups whose state is still
    /// to be read (their key group has files) wait for their key group's
    /// read. Returns the other rows, to aggregate now, with their keys
    /// (`group_indices` then are theirs); `None` when all wait.
    pub(super) fn hold_unread(
        &mut self,
        batch: &RecordBatch,
        keys: &[ArrayRef],
    ) -> Result<Option<(RecordBatch, Vec<ArrayRef>)>> {
        let total = self.groups.len();
        let own = &mut self.spill.as_mut().expect("rows wait only when spilled").own;
        let known = own.unread.len();
        own.unread.resize(total, false);
        // New groups, and those still to be read: their key groups decide.
        let open: Vec<u32> = (self.group_indices.iter().enumerate())
            .filter(|(_, g)| **g >= known || own.unread[**g])
            .map(|(row, _)| row as u32)
            .collect();
        if open.is_empty() {
            return Ok(Some((batch.clone(), keys.to_vec())));
        }
        let open_keys = take_arrays(keys, &UInt32Array::from(open.clone()), None)?;
        let key_groups = key_groups(&open_keys, open.len(), self.max_parallelism)?;
        let files = own.files.as_ref().expect("rows wait only when spilled");
        // Per part (a lookup a row took 3% of a spilled run).
        let width = own.width;
        let holds = files.holding((self.max_parallelism as u32).div_ceil(width));
        let (mut wait, mut wait_groups) = (Vec::new(), Vec::new());
        for (i, row) in open.iter().enumerate() {
            let g = self.group_indices[*row as usize];
            let part = key_groups.value(i) / width;
            if g >= known && holds[part as usize] {
                own.unread[g] = true;
            }
            if own.unread[g] {
                wait.push(*row);
                wait_groups.push(part);
            }
        }
        if wait.is_empty() {
            return Ok(Some((batch.clone(), keys.to_vec())));
        }
        own.hold(batch, &wait, &wait_groups, wall_clock_millis())?;
        let mut waits = vec![false; batch.num_rows()];
        wait.iter().for_each(|r| waits[*r as usize] = true);
        let now: Vec<u32> = (0..batch.num_rows() as u32)
            .filter(|r| !waits[*r as usize])
            .collect();
        if now.is_empty() {
            return Ok(None);
        }
        self.group_indices = now.iter().map(|r| self.group_indices[*r as usize]).collect();
        let now = UInt32Array::from(now);
        let keys = take_arrays(keys, &now, None)?;
        Ok(Some((take_record_batch(batch, &now)?, keys)))
    }

    /// Brings the state of `key_group`'s files to memory; the files go.
    /// Returns the groups read.
    fn load(&mut self, key_group: u32) -> Result<usize> {
        let spill = self.spill.as_mut().expect("spilled");
        let files = spill.own.files.as_mut().expect("rows wait only when spilled");
        let stored = files.rows_in(key_group);
        let batches = files.take(key_group)?;
        spill.own.waiting.stored_changed(key_group, -(stored as i64));
        for rows in &batches {
            let groups = self.restore_rows(rows)?;
            let own = &mut self.spill.as_mut().expect("spilled").own;
            own.unread.resize(self.groups.len(), false);
            groups.iter().for_each(|g| own.unread[*g] = false);
        }
        Ok(stored)
    }

    /// Writes every group read to its key group's files (a group still to
    /// be read, and one without rows, is not written) and empties memory.
    pub(super) fn spill_all(&mut self) -> Result<()> {
        let total = self.groups.len();
        if total == 0 || self.spill.is_none() {
            return Ok(());
        }
        let keys = std::mem::replace(&mut self.groups, Groups::new(&self.spec.key_schema)?).emit()?;
        let key_groups = key_groups(&keys, total, self.max_parallelism)?;
        let changed = self.changed.take();
        let spill = self.spill.as_mut().expect("checked above");
        if let (Some(changed), Some(flushed)) = (&changed, spill.core.flushed.as_mut()) {
            let groups: Vec<u32> = (0..total as u32)
                .filter(|g| changed.flags.get(*g as usize).copied().unwrap_or(false))
                .collect();
            let groups = UInt32Array::from(groups);
            let keys = take_arrays(&keys, &groups, None)?;
            let of = arrow::compute::take(&key_groups, &groups, None)?;
            (spill.own.codec.keyed(of.as_primitive(), &keys)?)
                .iter()
                .for_each(|k| flushed.push(k));
        }
        let mut files = spill.own.files.take();
        let core = &spill.core;
        let files_now = match &mut files {
            Some(files) => files,
            None => files.insert(KeyGroupFiles::open(&core.settings.dir)?),
        };
        let written = self.write_groups(files_now, &keys, &key_groups);
        let spill = self.spill.as_mut().expect("checked above");
        spill.own.files = files;
        written?
            .into_iter()
            .for_each(|(kg, n)| spill.own.waiting.stored_changed(kg, n as i64));
        spill.own.unread = Vec::new();
        self.changed = changed.map(|_| super::Changed::default());
        self.accumulators = self.spec.accumulators()?;
        self.counts = Vec::new();
        self.stamps = Vec::new();
        self.written = Vec::new();
        self.group_indices = Vec::new();
        self.sweep = 0;
        if let Some(core) = self.spill.core_mut() {
            core.emptied();
        }
        Ok(())
    }

    /// Writes the groups read that have rows (of `keys`, in `key_groups`)
    /// to `files`, a file per part; returns each part's rows.
    fn write_groups(
        &self,
        files: &mut KeyGroupFiles,
        keys: &[ArrayRef],
        key_groups: &UInt32Array,
    ) -> Result<Vec<(u32, usize)>> {
        let schema = self.spec.state_schema(&self.accumulators);
        let unread = &self.spill.as_ref().expect("spilling").own.unread;
        let live: Vec<u32> = (0..self.counts.len() as u32)
            .filter(|g| !unread.get(*g as usize).copied().unwrap_or(false) && self.counts[*g as usize] > 0)
            .collect();
        let of_live: Vec<u32> = live.iter().map(|g| key_groups.value(*g as usize)).collect();
        let width = self.spill.as_ref().expect("spilling").own.width;
        let mut written = Vec::new();
        // By key group, then a file per part of the key groups' groups, in
        // key-group order (a snapshot's run reads the parts in order).
        let by_group = by_key_group(&of_live, |i| live[i]);
        for part in by_group.chunk_by(|a, b| a.0 / width == b.0 / width) {
            let groups: Vec<u32> = part.iter().flat_map(|(_, g)| g.iter().copied()).collect();
            let of: Vec<u32> = part
                .iter()
                .flat_map(|(kg, g)| std::iter::repeat_n(*kg, g.len()))
                .collect();
            let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(of))];
            columns.extend(take_arrays(keys, &UInt32Array::from(groups.clone()), None)?);
            let indices: Vec<usize> = groups.iter().map(|g| *g as usize).collect();
            columns.extend(self.state_columns(&indices)?);
            files.write(part[0].0 / width, &state_rows(&schema, columns)?)?;
            written.push((part[0].0 / width, groups.len()));
        }
        Ok(written)
    }

    /// A full snapshot of spilled state: every group to the files, then
    /// the files, frozen now, as one run of state rows in key-group order,
    /// written by the snapshot's writer ([`weir_state::deferred`]).
    pub(super) fn spilled_snapshot(&mut self) -> Result<Vec<Deferred>> {
        self.spill_all()?;
        let spill = self.spill.as_mut().expect("has spilled");
        spill.core.runs += 1;
        let files = spill.own.files(&spill.core)?;
        if files.is_empty() {
            return Ok(Vec::new());
        }
        let path = files.snapshot_run_path(spill.core.runs)?;
        Ok(vec![files.frozen().into_run(path)])
    }

    /// An incremental snapshot of spilled state: every group to the files,
    /// then the upsert delta of the groups changed since the last snapshot,
    /// read from the files frozen now by the snapshot's writer (deleted
    /// when gone). `None`: nothing changed.
    pub(super) fn spilled_delta(&mut self) -> Result<Option<Deferred>> {
        self.spill_all()?;
        let schema = self.spec.state_schema(&self.accumulators);
        let key_count = self.spec.key_schema.fields().len();
        let spill = self.spill.as_mut().expect("has spilled");
        let flushed = std::mem::take(spill.core.flushed.get_or_insert_with(Default::default));
        if flushed.is_empty() {
            return Ok(None);
        }
        spill.core.runs += 1;
        let files = spill.own.files(&spill.core)?;
        let of = DeltaOf {
            frozen: files.frozen(),
            path: files.snapshot_run_path(spill.core.runs)?,
            chunk: WRITE_CHUNK,
            memory: Vec::new(),
            in_memory: |_: &[u8]| false,
            flushed,
        };
        let mut read = ReadBack {
            codec: Codec::new(&schema, key_count)?,
            schema,
            key_count,
            width: spill.own.width,
            last: None,
        };
        let read_back = move |frozen: &FrozenFiles, keys: &[&[u8]]| read.delta(frozen, keys);
        Ok(Some(store_delta(of, read_back, concat_by_key_group)))
    }

    /// Restores state rows into the files (not memory), a file per part.
    pub(super) fn restore_spilled(&mut self, rows: &RecordBatch) -> Result<()> {
        let schema = self.spec.state_schema(&self.accumulators);
        let rows = sorted_by_key_group(state_rows(&schema, rows.columns().to_vec())?)?;
        let spill = self.spill.as_mut().expect("spilling");
        spill.own.files(&spill.core)?;
        let own = &mut spill.own;
        let files = own.files.as_mut().expect("opened above");
        let parts: Vec<u32> = (rows.column(0).as_primitive::<UInt32Type>().values().iter())
            .map(|kg| kg / own.width)
            .collect();
        let mut start = 0;
        for same in parts.chunk_by(|a, b| a == b) {
            files.write(same[0], &rows.slice(start, same.len()))?;
            own.waiting.stored_changed(same[0], same.len() as i64);
            start += same.len();
        }
        Ok(())
    }

    /// Rewrites the files of the key groups after the last one swept
    /// without the groups not written for the TTL at `now`: key groups
    /// until [`SWEEP`] rows are read (or all once), round the files
    /// ([`KeyGroupFiles::to_sweep`]).
    pub(super) fn sweep_files(&mut self, now: i64) -> Result<()> {
        let (Some(ttl), Some(spill)) = (self.spec.state_ttl, self.spill.as_mut()) else {
            return Ok(());
        };
        let key_count = self.spec.key_schema.fields().len();
        let own = &mut spill.own;
        let Some(files) = own.files.as_mut() else {
            return Ok(());
        };
        for key_group in files.to_sweep(own.swept, SWEEP) {
            own.swept = Some(key_group);
            let expired = expire_files(files, key_group, now - ttl.as_millis() as i64, key_count)?;
            let gone: usize = expired.iter().map(RecordBatch::num_rows).sum();
            own.waiting.stored_changed(key_group, -(gone as i64));
            if let Some(flushed) = &mut spill.core.flushed {
                for rows in &expired {
                    own.codec
                        .keys_of(rows, key_count)?
                        .iter()
                        .for_each(|k| flushed.push(k));
                }
            }
        }
        Ok(())
    }
}

/// State rows a TTL sweep reads at a time.
const SWEEP: usize = 4096;

/// Rewrites `key_group`'s files without the groups last written before
/// `oldest`; returns those (their state rows).
fn expire_files(
    files: &mut KeyGroupFiles,
    key_group: u32,
    oldest: i64,
    key_count: usize,
) -> Result<Vec<RecordBatch>> {
    let (mut kept, mut expired) = (Vec::new(), Vec::new());
    for rows in files.read(key_group)? {
        // `_count`, then `_written`.
        let written = rows.column(2 + key_count).as_primitive::<Int64Type>();
        let live = arrow::array::BooleanArray::from_iter(written.values().iter().map(|w| Some(*w > oldest)));
        let dead = arrow::compute::not(&live)?;
        expired.push(arrow::compute::filter_record_batch(&rows, &dead)?);
        kept.push(arrow::compute::filter_record_batch(&rows, &live)?);
    }
    if expired.iter().all(|e| e.num_rows() == 0) {
        return Ok(Vec::new());
    }
    files.take(key_group)?;
    for rows in &kept {
        files.write(key_group, rows)?;
    }
    Ok(expired)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn group_key_bytes_decode_to_their_key_group_and_keys() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("_key_group", DataType::UInt32, false),
            Field::new("k", DataType::Utf8, true),
            Field::new("_count", DataType::Int64, false),
        ]));
        let dir = tempfile::tempdir().unwrap();
        let settings = SpillSettings {
            budget: 1 << 20,
            dir: dir.path().to_path_buf(),
        };
        let spill = Spill::new(settings, &schema, 1, false, 128).unwrap();
        let keys: Vec<ArrayRef> = vec![Arc::new(arrow::array::StringArray::from(vec![Some("a"), None]))];
        let expected_groups = key_groups(&keys, 2, 128).unwrap();
        let bytes = spill.own.codec.keyed(&expected_groups, &keys).unwrap();
        let refs: Vec<&[u8]> = bytes.iter().map(|k| &k[..]).collect();
        let decoded = spill.own.codec.decode_keys(&refs).unwrap();
        assert_eq!(
            decoded[0].as_primitive::<arrow::datatypes::UInt32Type>(),
            &expected_groups
        );
        assert_eq!(decoded[1].as_ref(), keys[0].as_ref());
    }
}
