//! The spilling state backend of regular joins: keys' rows beyond the memory budget in files per key group.
//!
//! Memory holds both sides' rows of the keys the latest batches touched.
//! When they pass a quarter of the subtask's budget
//! ([`weir_state::memory_guess::spill_threshold`]), every key's rows are
//! written to a file of its key group ([`weir_state::key_group_files`]:
//! one row per key and side, the key group, the side and join key, and
//! the side's [`Bucket`] of rows as bytes) and memory starts empty again.
//! From then on a row of a key group with files waits there
//! ([`crate::waiting`]), with the other rows of its key group from either
//! side, until enough rows wait to read the key group's files, a second
//! has passed, or a barrier comes; then the files' rows come back to
//! memory whole (the files go, so a key is in memory or in a file, never
//! both) and the waiting rows are joined batch after batch, in arrival
//! order. Each key's changes are the heap's, in the heap's order; rows of
//! different keys may come out in another order.
//!
//! Checkpoints stay state files. A snapshot first writes memory to the
//! files; a full one then reads every file into one run of state rows, on
//! the snapshot's writer thread (the files are immutable: the task goes
//! on); an incremental one the keys changed since the last snapshot, found
//! in their key groups' files (deleted when gone). A restore writes the
//! checkpoint's rows to files, not to memory. A state TTL rewrites the
//! files of the next key groups per processing-time tick without their
//! expired rows, as the heap's sweep goes round memory.
//!
//! Under more than 128 key groups, files and waiting rows are per part of
//! consecutive key groups ([`part_width`]).

use arrow::array::{RecordBatch, UInt32Array};
use arrow::row::Rows;

use crate::join::state::{Bucket, Key};
use crate::join::{Codec, JoinOperator, Part, replacement_rows};
use crate::waiting::{ReadsWaiting, Waiting, hold_rows, part_width, parts_with_files};
use crate::{Error, Result};
use weir_common::changelog;
use weir_common::time::wall_clock_millis;
use weir_runtime::Output;
use weir_runtime::operator::SpillSettings;
use weir_state::deferred::Deferred;
use weir_state::entry_files::{
    Rewrite, Unread, entries_run, files_delta, store_key, sweep_entries, write_entries,
};
use weir_state::key_group_files::KeyGroupFiles;
use weir_state::snapshot::{concat_by_key_group, state_rows};
use weir_state::spilled::{SpillCore, SpillSlot, Spilled};
use weir_state::store::{Entry, WRITE_CHUNK, in_chunks};

/// A join subtask's own spilled state (beside its [`SpillCore`], whose
/// flushed keys are [`store_key`]s).
pub(super) struct JoinSpill {
    /// The spilled keys, opened at the first spill (or restore).
    files: Option<KeyGroupFiles>,
    /// Rows waiting for their part's read, as batches of one input side
    /// (with their op column), and the rows of each part's files.
    waiting: Waiting<(usize, RecordBatch)>,
    /// Key groups per part ([`part_width`]).
    width: u32,
    /// The part the last TTL sweep rewrote.
    swept: Option<u32>,
    /// Keys' rows read back and not decoded yet.
    unread: Unread,
}

impl JoinSpill {
    /// The spill of a join subtask with these settings.
    pub(super) fn new(settings: SpillSettings, incremental: bool, max_parallelism: usize) -> Spilled<Self> {
        // At least a new key's slots on both sides.
        let least = 2 * (std::mem::size_of::<Key>() + std::mem::size_of::<Bucket>() + 8);
        let own = JoinSpill {
            files: None,
            waiting: Waiting::default(),
            width: part_width(max_parallelism),
            swept: None,
            unread: Unread::default(),
        };
        Spilled::new(SpillCore::new(settings, incremental, least), own)
    }
}

/// A side key: the side, then the join key.
fn side_key(side: usize, key: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(1 + key.len());
    bytes.push(side as u8);
    bytes.extend_from_slice(key);
    bytes
}

/// The side and join key of a side key (a store key without its key group).
fn split_side_key(key: &[u8]) -> Result<(usize, &[u8])> {
    match key.first() {
        Some(side @ 0..=1) => Ok((*side as usize, &key[1..])),
        _ => Err(short_key(key)),
    }
}

fn short_key(key: &[u8]) -> Error {
    Error::State(format!(
        "a spilled join state key without its key group and side ({} bytes)",
        key.len()
    ))
}

fn cut_short() -> Error {
    Error::State("a spilled join state value is cut short".into())
}

/// The side and bucket of a file row (`key`, `value`), whose sides' rows
/// are `widths` bytes wide.
fn decoded(key: &[u8], value: &[u8], widths: [u32; 2]) -> Result<(usize, Bucket)> {
    let (side, _) = split_side_key(key)?;
    Ok((side, Bucket::decode(value, widths[side]).ok_or_else(cut_short)?))
}

/// Each side's keys and buckets as parts of state rows.
fn parts_of(codec: &Codec, buckets: &[Vec<(&[u8], Bucket)>; 2]) -> Result<Vec<Part>> {
    let schema = codec.join.state_schema();
    let mut parts = Vec::new();
    for (side, buckets) in buckets.iter().enumerate() {
        let rows = buckets.iter().map(|(k, b)| (*k, b));
        if let Some((columns, keys)) = codec.bucket_rows(side, rows)? {
            parts.push((state_rows(&schema, columns)?, keys, false));
        }
    }
    Ok(parts)
}

/// The state rows of entries (store keys: key group, side, join key),
/// without the rows expired at `now` when given.
fn stored_parts(codec: &Codec, widths: [u32; 2], entries: &[Entry], now: Option<i64>) -> Result<Vec<Part>> {
    let mut buckets: [Vec<(&[u8], Bucket)>; 2] = [Vec::new(), Vec::new()];
    for (key, value) in entries {
        let side_key = key.get(4..).ok_or_else(|| short_key(key))?;
        let (side, mut bucket) = decoded(side_key, value, widths)?;
        if let (Some(now), Some(ttl)) = (now, codec.join.ttl_ms()) {
            bucket.expire(now, ttl);
        }
        if !bucket.is_empty() {
            buckets[side].push((&side_key[1..], bucket));
        }
    }
    parts_of(codec, &buckets)
}

impl ReadsWaiting for JoinOperator {
    type Rows = (usize, RecordBatch);

    fn waiting(&self) -> Option<(&Waiting<(usize, RecordBatch)>, usize)> {
        (self.spill.as_ref()).map(|s| (&s.own.waiting, s.core.settings.budget))
    }

    fn waiting_mut(&mut self) -> Option<&mut Waiting<(usize, RecordBatch)>> {
        self.spill.as_mut().map(|s| &mut s.own.waiting)
    }

    fn load_part(&mut self, part: u32) -> Result<usize> {
        self.load(part)
    }

    /// Joins a part's waiting batches one after another.
    fn take_waiting(&mut self, rows: Vec<(usize, RecordBatch)>, out: &mut Output) -> Result<usize> {
        let mut taken = 0;
        for (side, batch) in &rows {
            self.process(*side, batch, out)?;
            taken += batch.num_rows();
        }
        Ok(taken)
    }

    fn operator_name(&self) -> &str {
        &self.join.name
    }
}

spills_when_full!(JoinOperator);

impl JoinOperator {
    /// The key group of each of `keys` (join keys' bytes).
    fn key_groups_of(&self, keys: &[&[u8]]) -> Result<UInt32Array> {
        weir_state::snapshot::key_groups_of_bytes(&self.codec.keys_of, keys, self.max_parallelism)
    }

    /// Whether keys went to files: rows of key groups with files then wait
    /// for their read, and snapshots read the files.
    pub(super) fn spilled_to_files(&self) -> bool {
        self.spill.as_ref().is_some_and(|s| s.own.files.is_some())
    }

    /// Bytes both sides' rows and keys, and the waiting rows, take in memory.
    fn memory_size(&self) -> usize {
        let waiting = (self.spill.as_ref()).map_or(0, |s| s.own.waiting.bytes() + s.own.unread.size());
        self.sides.iter().map(|s| s.memory_size()).sum::<usize>() + waiting
    }

    /// Of a batch of side `side`: the rows of parts with files wait for
    /// their part's read. Returns the other rows, to join now (`None`
    /// when all wait). A row with a NULL key matches nothing and is kept
    /// nowhere: it never waits.
    pub(super) fn hold_unread(&mut self, side: usize, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let data = changelog::data(batch);
        let (keys, null_keys) = self.keys(side, &data)?;
        let refs: Vec<&[u8]> = (0..keys.num_rows()).map(|i| keys.row(i).data()).collect();
        let groups = self.key_groups_of(&refs)?;
        let own = &mut self.spill.as_mut().expect("rows wait only when spilled").own;
        let files = own.files.as_ref().expect("rows wait only when spilled");
        let mut parts = parts_with_files(files, own.width, self.max_parallelism, &groups);
        if let Some(null_keys) = &null_keys {
            (parts.iter_mut().enumerate())
                .filter(|(i, _)| null_keys.is_null(*i))
                .for_each(|(_, part)| *part = None);
        }
        hold_rows(&mut own.waiting, batch, &parts, |rows| (side, rows))
    }

    /// Brings the rows of `part`'s files to memory; the files go. Returns
    /// the file rows read.
    fn load(&mut self, part: u32) -> Result<usize> {
        let spill = self.spill.as_mut().expect("spilled");
        let files = spill.own.files.as_mut().expect("rows wait only when spilled");
        let stored = files.rows_in(part);
        let batches = files.take(part)?;
        spill.own.waiting.stored_changed(part, -(stored as i64));
        // A key is in one file: a restore writes a range of key groups at
        // once, and a spill all of memory.
        batches.into_iter().for_each(|rows| {
            spill.own.unread.add(rows);
        });
        Ok(stored)
    }

    /// Decodes both sides' rows, read back and not decoded yet, of the
    /// keys of `keys` (NULL keys have none).
    pub(super) fn decode_read(
        &mut self,
        keys: &Rows,
        null_keys: Option<&arrow::buffer::NullBuffer>,
    ) -> Result<()> {
        let widths = [self.sides[0].width, self.sides[1].width];
        let Some(unread) = (self.spill.as_mut().map(|s| &mut s.own.unread)).filter(|u| !u.is_empty()) else {
            return Ok(());
        };
        let mut at = Vec::new();
        for i in 0..keys.num_rows() {
            if null_keys.is_some_and(|n| n.is_null(i)) {
                continue;
            }
            for (side, state) in self.sides.iter_mut().enumerate() {
                at.clear();
                at.push(side as u8);
                at.extend_from_slice(keys.row(i).data());
                if let Some(value) = unread.take(&at) {
                    let (_, bucket) = decoded(&at, value, widths)?;
                    state.buckets.insert(Key::from_slice(&at[1..]), bucket);
                }
            }
        }
        Ok(())
    }

    /// Forgets the rows, read back and not decoded yet, not written for
    /// `ttl` ms at `now`, as memory's sweep forgets decoded ones: their
    /// keys are decoded, what is left of them stays in memory.
    pub(super) fn expire_read(&mut self, now: i64, ttl: i64) -> Result<()> {
        let widths = [self.sides[0].width, self.sides[1].width];
        let Some(unread) = self.spill.as_mut().map(|s| &mut s.own.unread) else {
            return Ok(());
        };
        let expired = unread.keys_where(|key, value| {
            let (_, bucket) = decoded(key, value, widths)?;
            Ok((0..bucket.len()).any(|j| now - bucket.written(j) >= ttl))
        })?;
        for key in expired {
            let value = unread.take(&key).expect("listed above");
            let (side, bucket) = decoded(&key, value, widths)?;
            let state = &mut self.sides[side];
            state.buckets.insert(Key::from_slice(&key[1..]), bucket);
            state.expire_key(&key[1..], now, ttl);
        }
        Ok(())
    }

    /// Writes both sides' rows of every key memory holds to its key group's
    /// files, a file per part, notes the keys changed since the last
    /// snapshot, and empties memory.
    pub(super) fn spill_all(&mut self) -> Result<()> {
        let unread = self.spill.as_ref().is_some_and(|s| !s.own.unread.is_empty());
        if self.spill.is_none() || (!unread && self.sides.iter().all(|s| s.buckets.is_empty())) {
            return Ok(());
        }
        self.note_changed()?;
        let spill = self.spill.as_mut().expect("checked above");
        let mut files = spill.own.files.take();
        let files_now = match &mut files {
            Some(files) => files,
            None => files.insert(KeyGroupFiles::open(&spill.core.settings.dir)?),
        };
        let unread = std::mem::take(&mut spill.own.unread);
        let written = self.write_keys(files_now, &unread);
        let spill = self.spill.as_mut().expect("checked above");
        spill.own.files = files;
        for (part, n) in written? {
            spill.own.waiting.stored_changed(part, n as i64);
        }
        for side in &mut self.sides {
            side.buckets = Default::default();
        }
        if let Some(core) = self.spill.core_mut() {
            core.emptied();
        }
        Ok(())
    }

    /// Incremental checkpoints: the keys memory changed since the last
    /// snapshot, as store keys for the next delta to read back.
    fn note_changed(&mut self) -> Result<()> {
        for side in 0..2 {
            let changed = self.sides[side].take_changed();
            for chunk in changed.chunks(WRITE_CHUNK) {
                let refs: Vec<&[u8]> = chunk.iter().map(|k| k.as_ref()).collect();
                let groups = self.key_groups_of(&refs)?;
                if let Some(flushed) = self.spill.as_mut().and_then(|s| s.core.flushed.as_mut()) {
                    for (i, key) in refs.iter().enumerate() {
                        flushed.push(&store_key(groups.value(i), &side_key(side, key)));
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes every key with rows to `files`, a file per part in key-group
    /// order; returns each part's file rows.
    fn write_keys(&self, files: &mut KeyGroupFiles, unread: &Unread) -> Result<Vec<(u32, usize)>> {
        let keys: Vec<(usize, &Key, &Bucket)> = (self.sides.iter().enumerate())
            .flat_map(|(side, s)| s.buckets.iter().map(move |(k, b)| (side, k, b)))
            .filter(|(_, _, b)| !b.is_empty())
            .collect();
        let refs: Vec<&[u8]> = keys.iter().map(|(_, k, _)| k.as_ref()).collect();
        let mut groups = self.key_groups_of(&refs)?.values().to_vec();
        // Then the keys read back and not decoded, as they were.
        let as_read: Vec<(u32, &[u8], &[u8])> = unread.entries().collect();
        groups.extend(as_read.iter().map(|e| e.0));
        let width = self.spill.as_ref().expect("spilling").own.width;
        let mut value = Vec::new();
        write_entries(files, width, &groups, |i, group, rows| match keys.get(i) {
            Some((side, key, bucket)) => {
                value.clear();
                bucket.encode(&mut value);
                rows.push(group, &side_key(*side, key), &value);
            }
            None => {
                let (_, key, value) = as_read[i - keys.len()];
                rows.push(group, key, value);
            }
        })
    }

    /// The files, opened if not yet.
    fn files(&mut self) -> Result<&mut KeyGroupFiles> {
        let spill = self.spill.as_mut().expect("spilling");
        if spill.own.files.is_none() {
            spill.own.files = Some(KeyGroupFiles::open(&spill.core.settings.dir)?);
        }
        Ok(spill.own.files.as_mut().expect("opened above"))
    }

    /// A full snapshot of spilled state: every key to the files, then the
    /// files, frozen now, as one run of state rows in key-group order, with
    /// their state keys when it is the `base` of an incremental chain,
    /// written by the snapshot's writer ([`weir_state::deferred`]).
    pub(super) fn spilled_snapshot(&mut self, base: bool) -> Result<Vec<Deferred>> {
        self.spill_all()?;
        let now = self.join.ttl_ms().map(|_| wall_clock_millis());
        let codec = Codec::new(&self.join, self.max_parallelism)?;
        let widths = [self.sides[0].width, self.sides[1].width];
        let schema = self.join.state_schema();
        let spill = self.spill.as_mut().expect("has spilled");
        spill.core.runs += 1;
        let runs = spill.core.runs;
        let files = self.files()?;
        if files.is_empty() {
            return Ok(Vec::new());
        }
        let path = files.snapshot_run_path(runs)?;
        let decode = move |entries: &[Entry]| {
            let parts = stored_parts(&codec, widths, entries, now)?;
            match base {
                true => replacement_rows(&schema, parts, true),
                false => concat_by_key_group(parts.into_iter().map(|p| p.0).collect()),
            }
        };
        Ok(vec![entries_run(files.frozen(), path, decode)])
    }

    /// An incremental snapshot of spilled state: every key to the files,
    /// then the keys changed since the last snapshot, read back from the
    /// files frozen now by the snapshot's writer (deleted when they have
    /// no rows there). `None`: nothing changed.
    pub(super) fn spilled_delta(&mut self) -> Result<Option<Deferred>> {
        self.spill_all()?;
        let codec = Codec::new(&self.join, self.max_parallelism)?;
        let widths = [self.sides[0].width, self.sides[1].width];
        let schema = self.join.state_schema();
        let read = move |found: &[Entry], missing: &[&[u8]]| {
            let mut parts = stored_parts(&codec, widths, found, None)?;
            let mut gone: [Vec<&[u8]>; 2] = [Vec::new(), Vec::new()];
            for key in missing {
                let (side, join_key) = split_side_key(key.get(4..).ok_or_else(|| short_key(key))?)?;
                gone[side].push(join_key);
            }
            for (side, keys) in gone.iter().enumerate() {
                if !keys.is_empty() {
                    parts.push(codec.deleted_keys(side, keys)?);
                }
            }
            Ok(parts)
        };
        let spill = self.spill.as_mut().expect("has spilled");
        let files = spill.own.files.as_ref().expect("written above");
        files_delta(&mut spill.core, files, spill.own.width, schema, read)
    }

    /// Restores state rows to memory a chunk at a time, then writes them
    /// to the files (a restore of spilled state comes a range of key
    /// groups at a time, so a key's rows come in one call).
    pub(super) fn restore_spilled(&mut self, rows: &RecordBatch) -> Result<()> {
        for chunk in in_chunks(rows) {
            self.restore_side(0, &chunk)?;
            self.restore_side(1, &chunk)?;
        }
        self.files()?;
        self.spill_all()
    }

    /// Rewrites the files of the parts after the last one swept without
    /// the rows not written for the TTL at `now`: parts until [`SWEEP`]
    /// file rows are read (or all once), round the files
    /// ([`KeyGroupFiles::to_sweep`]).
    pub(super) fn sweep_files(&mut self, now: i64) -> Result<()> {
        let (Some(ttl), Some(spill)) = (self.join.ttl_ms(), self.spill.as_mut()) else {
            return Ok(());
        };
        let widths = [self.sides[0].width, self.sides[1].width];
        let own = &mut spill.own;
        let Some(files) = own.files.as_mut() else {
            return Ok(());
        };
        let (counts, changed) = sweep_entries(files, &mut own.swept, SWEEP, |key, value| {
            let (_, mut bucket) = decoded(key.get(4..).ok_or_else(|| short_key(key))?, value, widths)?;
            Ok(match bucket.expire(now, ttl) {
                false => Rewrite::Same,
                true if bucket.is_empty() => Rewrite::Gone,
                true => {
                    let mut value = Vec::new();
                    bucket.encode(&mut value);
                    Rewrite::Value(value)
                }
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

/// File rows a TTL sweep reads at a time.
const SWEEP: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_side_key_splits_back_into_its_side_and_join_key() {
        let key = side_key(1, b"abc");
        assert_eq!(split_side_key(&key).unwrap(), (1, &b"abc"[..]));
        assert!(split_side_key(&side_key(2, b"")).is_err());
        assert!(split_side_key(&[]).is_err());
    }
}
