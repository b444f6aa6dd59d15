//! The spilling state backend of TopN and deduplication: partitions beyond the memory budget in files per key group.
//!
//! Memory holds the partitions the latest batches touched. When their rows
//! pass a quarter of the subtask's budget (measured when a guess says they
//! may, [`weir_state::memory_guess`]), every partition is written to a file
//! of its key group ([`weir_state::entry_files`], one entry per partition:
//! its partition key, and when it was last written and its kept rows in
//! rank order as the value, see [`Entries::encode`]) and memory starts
//! empty again. From then on a row of a key group with files waits there
//! ([`crate::waiting`]) until enough rows wait to read the key group's
//! files, a second has passed, or a barrier comes; then the files'
//! partitions come back to memory whole (the files go) and the waiting
//! batches are ranked one after another, so every partition's rank changes
//! are the heap's. A window TopN that fires a window first ranks every
//! waiting row, then reads the key groups of the window's partitions.
//!
//! Checkpoints stay state files: a snapshot writes memory to the files,
//! then the frozen files as one run, read by the snapshot's writer; an
//! incremental one the partitions changed since the last snapshot, read
//! back from the frozen files. A restore of more than memory holds writes
//! the checkpoint's rows to files, a partition per entry. A state TTL
//! rewrites the next key groups' files without their expired partitions,
//! a slice per tick.

use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch, UInt32Array};
use arrow::datatypes::UInt32Type;

use crate::rank::entries::{Entries, encode_row};
use crate::rank::{Partition, TopNOperator};
use crate::waiting::{ReadsWaiting, Waiting, hold_rows, part_width, parts_of, parts_with_files};
use crate::{Error, Result};
use weir_common::changelog;
use weir_runtime::Output;
use weir_runtime::operator::SpillSettings;
use weir_state::deferred::{Deferred, deleted_entries};
use weir_state::entry_files::{
    Rewrite, Unread, entries_run, files_delta, store_key, sweep_entries, write_entries,
};
use weir_state::incremental::{ReplacedPart, replacement_rows};
use weir_state::key_group_files::KeyGroupFiles;
use weir_state::memory_guess;
use weir_state::snapshot::key_groups;
use weir_state::spilled::{SpillCore, SpillSlot, Spilled};
use weir_state::store::{Entry, WRITE_CHUNK};

/// The least a row is guessed to add to memory: a kept row's place and
/// bytes (a row that does not rank adds nothing, but the guess only decides
/// when memory is measured).
const LEAST_PER_ROW: usize = 48;

/// A TopN subtask's own spilled state (beside its [`SpillCore`], whose
/// flushed keys are store keys: key group, then partition key).
pub(super) struct TopNSpill {
    /// The spilled partitions, opened at the first spill (or restore).
    files: Option<KeyGroupFiles>,
    /// Rows (with their op column) waiting for their part's read, and the
    /// entries of each part's files.
    waiting: Waiting,
    /// Key groups per part ([`part_width`]).
    width: u32,
    /// The part the last TTL sweep rewrote.
    swept: Option<u32>,
    /// Partitions read back and not decoded yet.
    unread: Unread,
}

impl TopNSpill {
    pub(super) fn new(settings: SpillSettings, incremental: bool, max_parallelism: usize) -> Spilled<Self> {
        let own = TopNSpill {
            files: None,
            waiting: Waiting::default(),
            width: part_width(max_parallelism),
            swept: None,
            unread: Unread::default(),
        };
        Spilled::new(SpillCore::new(settings, incremental, LEAST_PER_ROW), own)
    }
}

/// Whether restored state `rows` may not fit the memory the state is
/// given (half of it: the rows and the partitions built from them are in
/// memory at once): they are restored into files then, else into memory.
pub(super) fn holds_more_than_memory(spill: &Spilled<TopNSpill>, rows: &RecordBatch) -> bool {
    spill.own.files.is_some()
        || rows.get_array_memory_size() > memory_guess::spill_threshold(spill.core.settings.budget) / 2
}

fn cut_short() -> Error {
    Error::State("a spilled TopN partition's rows are cut short".into())
}

/// An entry's value: when the partition was last written, then its rows.
fn encode(partition: &Partition, value: &mut Vec<u8>) {
    value.extend_from_slice(&partition.written.to_le_bytes());
    partition.rows.encode(value);
}

/// When an entry's partition was last written.
fn written_of(value: &[u8]) -> Result<i64> {
    let written = value.get(..8).ok_or_else(cut_short)?;
    Ok(i64::from_le_bytes(written.try_into().expect("8 bytes")))
}

/// The partition of an entry's value; ties as [`Entries::decode`] makes them.
fn decode(value: &[u8], no_tie: Option<&Arc<[u8]>>) -> Result<Partition> {
    Ok(Partition {
        written: written_of(value)?,
        rows: Entries::decode(&value[8..], no_tie).ok_or_else(cut_short)?,
    })
}

/// The state rows of store entries (in store order, so by key group), each
/// keyed by its partition: one part, or none for no rows.
fn stored_parts(
    spec: &super::TopN,
    rows_of: &arrow::row::RowConverter,
    max_parallelism: usize,
    no_tie: Option<&Arc<[u8]>>,
    entries: &[Entry],
) -> Result<Vec<ReplacedPart>> {
    let partitions = (entries.iter())
        .map(|(key, value)| Ok((key.get(4..).ok_or_else(cut_short)?, decode(value, no_tie)?)))
        .collect::<Result<Vec<_>>>()?;
    let mut state_keys = arrow::array::BinaryBuilder::new();
    let mut kept: Vec<(usize, &Arc<[u8]>, i64)> = Vec::new();
    for (key, p) in &partitions {
        for (i, (_, row)) in p.rows.rows().enumerate() {
            kept.push((i, row, p.written));
            state_keys.append_value(key);
        }
    }
    let rows = super::state_batch(spec, rows_of, max_parallelism, &kept, false)?;
    Ok(rows
        .map(|rows| (rows, state_keys.finish(), false))
        .into_iter()
        .collect())
}

impl ReadsWaiting for TopNOperator {
    type Rows = RecordBatch;

    fn waiting(&self) -> Option<(&Waiting, usize)> {
        (self.spill.as_ref()).map(|s| (&s.own.waiting, s.core.settings.budget))
    }

    fn waiting_mut(&mut self) -> Option<&mut Waiting> {
        self.spill.as_mut().map(|s| &mut s.own.waiting)
    }

    fn load_part(&mut self, part: u32) -> Result<usize> {
        self.load(part)
    }

    /// Ranks a part's waiting batches one after another.
    fn take_waiting(&mut self, rows: Vec<RecordBatch>, out: &mut Output) -> Result<usize> {
        let mut taken = 0;
        for batch in &rows {
            self.process(batch, out)?;
            taken += batch.num_rows();
        }
        Ok(taken)
    }

    fn operator_name(&self) -> &str {
        &self.spec.name
    }
}

spills_when_full!(TopNOperator);

impl TopNOperator {
    /// The key group of each partition key.
    pub(super) fn key_groups_of(&self, partitions: &[&[u8]]) -> Result<UInt32Array> {
        if self.spec.partition.is_empty() || partitions.is_empty() {
            return Ok(UInt32Array::from(vec![0; partitions.len()]));
        }
        let parser = self.partitions_of.parser();
        let columns = self
            .partitions_of
            .convert_rows(partitions.iter().map(|k| parser.parse(k)))?;
        key_groups(&columns, partitions.len(), self.max_parallelism)
    }

    /// The tie every row ordered by arrival shares (none: the number
    /// decides); `None` when rows tie by their bytes.
    fn shared_tie(&self) -> Option<&Arc<[u8]>> {
        self.spec.arrival.is_some().then_some(&self.no_tie)
    }

    /// Whether partitions went to files: rows of key groups with files then
    /// wait for their read, and snapshots read the files.
    pub(super) fn spilled_to_files(&self) -> bool {
        self.spill.as_ref().is_some_and(|s| s.own.files.is_some())
    }

    /// Of a batch: the rows of parts with files wait for their part's read.
    /// Returns the other rows, to rank now (`None` when all wait).
    pub(super) fn hold_unread(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let data = changelog::data(batch);
        let partitions = self.partition_keys(&data)?;
        let keys: Vec<&[u8]> = (0..data.num_rows())
            .map(|i| partitions.as_ref().map_or(&[][..], |p| p.row(i).data()))
            .collect();
        let groups = self.key_groups_of(&keys)?;
        let own = &mut self.spill.as_mut().expect("rows wait only when spilled").own;
        let files = own.files.as_ref().expect("rows wait only when spilled");
        let parts = parts_with_files(files, own.width, self.max_parallelism, &groups);
        hold_rows(&mut own.waiting, batch, &parts, |rows| rows)
    }

    /// Brings the partitions of `part`'s files to memory; the files go.
    /// Returns the entries read.
    fn load(&mut self, part: u32) -> Result<usize> {
        let spill = self.spill.as_mut().expect("spilled");
        let Some(files) = spill.own.files.as_mut() else {
            return Ok(0);
        };
        let stored = files.rows_in(part);
        let batches = files.take(part)?;
        spill.own.waiting.stored_changed(part, -(stored as i64));
        batches.into_iter().for_each(|rows| {
            spill.own.unread.add(rows);
        });
        Ok(stored)
    }

    /// Decodes the partitions of `partitions` read back and not decoded yet.
    pub(super) fn decode_read(&mut self, partitions: &[&[u8]]) -> Result<()> {
        let no_tie = self.shared_tie().cloned();
        let Some(unread) = (self.spill.as_mut().map(|s| &mut s.own.unread)).filter(|u| !u.is_empty()) else {
            return Ok(());
        };
        for partition in partitions {
            if let Some(value) = unread.take(partition) {
                let decoded = decode(value, no_tie.as_ref())?;
                self.partitions.insert((*partition).into(), decoded);
            }
        }
        Ok(())
    }

    /// Forgets the partitions read back and not decoded yet that were not
    /// written for `ttl` ms at `now`, as memory's sweep forgets decoded ones.
    pub(super) fn expire_read(&mut self, now: i64, ttl: i64) -> Result<()> {
        let Some(unread) = self.spill.as_mut().map(|s| &mut s.own.unread) else {
            return Ok(());
        };
        for key in unread.keys_where(|_, value| Ok(now - written_of(value)? >= ttl))? {
            unread.take(&key);
            if let Some(changed) = &mut self.changed {
                changed.insert(key);
            }
        }
        Ok(())
    }

    /// Brings the parts of `partitions` that have files to memory (a
    /// window TopN's partitions of the windows it fires).
    pub(super) fn load_parts_of(&mut self, partitions: &[&[u8]]) -> Result<()> {
        let Some(spill) = self.spill.as_ref().filter(|s| s.own.files.is_some()) else {
            return Ok(());
        };
        let width = spill.own.width;
        for part in parts_of(self.key_groups_of(partitions)?.values(), width) {
            self.load(part)?;
        }
        Ok(())
    }

    /// Bytes the kept rows, their partitions and windows, and the waiting
    /// rows take in memory.
    fn memory_size(&self) -> usize {
        let slot = std::mem::size_of::<Box<[u8]>>();
        let partitions = self.partitions.capacity() * (slot + std::mem::size_of::<Partition>() + 1)
            + self
                .partitions
                .iter()
                .map(|(k, p)| k.len() + p.rows.memory_size())
                .sum::<usize>();
        let waiting = (self.spill.as_ref()).map_or(0, |s| s.own.waiting.bytes() + s.own.unread.size());
        let windows: usize = self
            .windows
            .values()
            .map(|w| 48 + w.capacity() * slot + w.iter().map(|k| k.len()).sum::<usize>())
            .sum();
        partitions + waiting + windows
    }

    /// Writes every partition with rows to its key group's files, a file
    /// per part, notes the partitions changed since the last snapshot, and
    /// empties memory.
    pub(super) fn spill_all(&mut self) -> Result<()> {
        let unread = self.spill.as_mut().map(|s| std::mem::take(&mut s.own.unread));
        let Some(unread) = unread.filter(|u| !self.partitions.is_empty() || !u.is_empty()) else {
            return Ok(());
        };
        self.note_flushed()?;
        let kept: Vec<(&Box<[u8]>, &Partition)> = (self.partitions.iter())
            .filter(|(_, p)| !p.rows.is_empty())
            .collect();
        let keys: Vec<&[u8]> = kept.iter().map(|(k, _)| &k[..]).collect();
        let mut groups = self.key_groups_of(&keys)?.values().to_vec();
        // Then the partitions read back and not decoded, as they were.
        let as_read: Vec<(u32, &[u8], &[u8])> = unread.entries().collect();
        groups.extend(as_read.iter().map(|e| e.0));
        let spill = self.spill.as_mut().expect("checked above");
        let width = spill.own.width;
        if spill.own.files.is_none() {
            spill.own.files = Some(KeyGroupFiles::open(&spill.core.settings.dir)?);
        }
        let files = spill.own.files.as_mut().expect("opened above");
        let mut value = Vec::new();
        let written = write_entries(files, width, &groups, |i, group, rows| match kept.get(i) {
            Some((key, partition)) => {
                value.clear();
                encode(partition, &mut value);
                rows.push(group, key, &value);
            }
            None => {
                let (_, key, value) = as_read[i - kept.len()];
                rows.push(group, key, value);
            }
        })?;
        for (part, n) in written {
            spill.own.waiting.stored_changed(part, n as i64);
        }
        self.partitions = Default::default();
        if let Some(core) = self.spill.core_mut() {
            core.emptied();
        }
        Ok(())
    }

    /// Notes the partitions changed in memory, about to be written to the
    /// files, for the next incremental snapshot to read back.
    fn note_flushed(&mut self) -> Result<()> {
        let Some(changed) = self.changed.as_mut().map(std::mem::take) else {
            return Ok(());
        };
        let changed: Vec<Box<[u8]>> = changed.into_iter().collect();
        for chunk in changed.chunks(WRITE_CHUNK) {
            let refs: Vec<&[u8]> = chunk.iter().map(|k| &k[..]).collect();
            let groups = self.key_groups_of(&refs)?;
            if let Some(flushed) = self.spill.as_mut().and_then(|s| s.core.flushed.as_mut()) {
                (refs.iter().enumerate()).for_each(|(i, k)| flushed.push(&store_key(groups.value(i), k)));
            }
        }
        Ok(())
    }

    /// A full snapshot of spilled state: every partition to the files, then
    /// the files, frozen now, as one run of state rows in key-group order,
    /// keyed by partition when it is the `base` of an incremental chain
    /// (which then leaves no change for the next delta), written by the
    /// snapshot's writer ([`weir_state::deferred`]).
    pub(super) fn spilled_snapshot(&mut self, base: bool) -> Result<Vec<Deferred>> {
        self.spill_all()?;
        let no_tie = self.shared_tie().cloned();
        if base {
            self.spill.forget_spilled_changes();
        }
        let (spec, rows_of) = (self.spec.clone(), self.spec.rows_converter()?);
        let max_parallelism = self.max_parallelism;
        let spill = self.spill.as_mut().expect("has spilled");
        spill.core.runs += 1;
        let runs = spill.core.runs;
        let files = spill.own.files.as_ref().expect("has spilled");
        if files.is_empty() {
            return Ok(Vec::new());
        }
        let decode = move |entries: &[Entry]| {
            let parts = stored_parts(&spec, &rows_of, max_parallelism, no_tie.as_ref(), entries)?;
            match base {
                true => replacement_rows(&spec.state_schema(), parts, true),
                false => Ok(parts.into_iter().next().map(|(rows, _, _)| rows)),
            }
        };
        let path = files.snapshot_run_path(runs)?;
        Ok(vec![entries_run(files.frozen(), path, decode)])
    }

    /// An incremental snapshot of spilled state: every partition to the
    /// files, then those changed since the last snapshot, read back from
    /// the files frozen now by the snapshot's writer (deleted when they
    /// have no entry there). `None`: nothing changed.
    pub(super) fn spilled_delta(&mut self) -> Result<Option<Deferred>> {
        self.spill_all()?;
        let no_tie = self.shared_tie().cloned();
        let (spec, rows_of) = (self.spec.clone(), self.spec.rows_converter()?);
        let max_parallelism = self.max_parallelism;
        let schema = self.spec.state_schema();
        let read = move |found: &[Entry], missing: &[&[u8]]| {
            let mut parts = stored_parts(&spec, &rows_of, max_parallelism, no_tie.as_ref(), found)?;
            parts.extend(deleted_entries(&spec.state_schema(), missing)?);
            Ok(parts)
        };
        let spill = self.spill.as_mut().expect("has spilled");
        let files = spill.own.files.as_ref().expect("has spilled");
        files_delta(&mut spill.core, files, spill.own.width, schema, read)
    }

    /// Restores state rows into the files (not memory): each partition's
    /// rows in rank order as one entry, numbered as the heap's restore
    /// numbers them, a file per part.
    pub(super) fn restore_spilled(&mut self, rows: &RecordBatch) -> Result<()> {
        let restored = self.restored(rows)?;
        let groups = rows.column(0).as_primitive::<UInt32Type>();
        let partition = |i: usize| restored.partitions.as_ref().map_or(&[][..], |p| p.row(i).data());
        let mut order: Vec<usize> = (0..rows.num_rows()).collect();
        order.sort_by(|a, b| {
            let key = |i: usize| (groups.value(i), partition(i), restored.positions.value(i));
            key(*a).cmp(&key(*b))
        });
        let mut entries: Vec<(u32, usize, Vec<u8>)> = Vec::new();
        for same in
            order.chunk_by(|a, b| groups.value(*a) == groups.value(*b) && partition(*a) == partition(*b))
        {
            let first = same[0];
            let count = same.len() as u64;
            let base = self.seq;
            self.seq += count + 1;
            let written = restored.written.as_ref().map_or(0, |w| w.value(first));
            let mut value = written.to_le_bytes().to_vec();
            for (position, i) in same.iter().enumerate() {
                let number = match self.spec.newest_first() {
                    true => u64::MAX - self.seq + 1 + position as u64,
                    false => base + 1 + position as u64,
                };
                let order = restored.orders.as_ref().map_or(&[][..], |o| o.row(*i).data());
                encode_row(number, order, restored.converted.row(*i).data(), &mut value);
            }
            entries.push((groups.value(first), first, value));
            self.created(partition(first), restored.ends[first].unwrap_or(i64::MIN));
        }
        let spill = self.spill.as_mut().expect("spilling");
        if spill.own.files.is_none() {
            spill.own.files = Some(KeyGroupFiles::open(&spill.core.settings.dir)?);
        }
        let files = spill.own.files.as_mut().expect("opened above");
        let of: Vec<u32> = entries.iter().map(|e| e.0).collect();
        let written = write_entries(files, spill.own.width, &of, |i, group, rows| {
            rows.push(group, partition(entries[i].1), &entries[i].2);
        })?;
        for (part, n) in written {
            spill.own.waiting.stored_changed(part, n as i64);
        }
        Ok(())
    }

    /// Rewrites the files of the parts after the last one swept without
    /// the partitions not written for `ttl` ms at `now`: parts until
    /// [`SWEEP`] entries are read (or all once), round the files.
    pub(super) fn sweep_files(&mut self, now: i64, ttl: i64) -> Result<()> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        let own = &mut spill.own;
        let Some(files) = own.files.as_mut() else {
            return Ok(());
        };
        let (counts, changed) = sweep_entries(files, &mut own.swept, SWEEP, |_, value| {
            Ok(match now - written_of(value)? >= ttl {
                true => Rewrite::Gone,
                false => Rewrite::Same,
            })
        })?;
        counts
            .into_iter()
            .for_each(|(part, n)| own.waiting.stored_changed(part, n));
        if let Some(flushed) = &mut spill.core.flushed {
            changed.iter().for_each(|k| flushed.push(k));
        }
        Ok(())
    }
}

/// Entries a TTL sweep reads at a time.
const SWEEP: usize = 4096;
