//! The spilling state backend of regular joins: keys' rows beyond the memory budget in the key-value store.
//!
//! Memory holds both sides' rows of the keys the latest batches touched.
//! When they pass a quarter of the subtask's budget
//! ([`weir_state::memory_guess::spill_threshold`]), every key's rows are
//! written to the store ([`weir_state::store`], one entry per key and
//! side: key group, side and join key as the key, the side's [`Bucket`] of
//! rows as the value) and memory starts empty again. A batch's keys that
//! memory does not hold are read from the store, both sides, before the
//! batch matches and updates them, so every change is emitted as on the heap.
//!
//! Checkpoints stay state files, as the aggregation's spill makes them: a
//! full snapshot writes every key to the store, then the store in key order
//! as one run (the checkpoint links it); an incremental one holds the keys
//! changed in memory and those written to the store since the last
//! snapshot, read back from it. A restore reads the checkpoint's rows a
//! chunk at a time, each chunk's keys read from the store first, and writes
//! memory to the store whenever it is full. A state TTL expires the store's
//! entries a slice per tick.

use std::collections::HashSet;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::row::Rows;

use crate::join::state::{Bucket, ByKey, Key};
use crate::join::{JoinOperator, Part, replacement_rows};
use crate::{Error, Result};
use weir_runtime::operator::SpillSettings;
use weir_state::deferred::{Deferred, DeltaOf, store_delta, store_run};
use weir_state::memory_guess::SpillsWhenFull;
use weir_state::snapshot::{RUN_ROW_GROUP_ROWS, concat_by_key_group, state_rows};
use weir_state::spilled::{SpillCore, SpillSlot, Spilled};
use weir_state::store::{Entry, Frozen, SWEEP, WRITE_CHUNK, in_chunks};

/// A join subtask's own spilled state (beside its [`SpillCore`]).
#[derive(Default)]
pub(super) struct JoinSpill {
    /// The keys whose rows memory holds for both sides since the last spill,
    /// each with the sides the store had rows of then (bit `1 << side`).
    resident: ByKey<u8>,
    /// Where the next TTL sweep of the store starts.
    sweep_from: Vec<u8>,
}

impl JoinSpill {
    /// The spill of a join subtask with these settings.
    pub(super) fn new(settings: SpillSettings, incremental: bool) -> Spilled<Self> {
        // At least a new key's slots on both sides.
        let least = 2 * (std::mem::size_of::<Key>() + std::mem::size_of::<Bucket>() + 8);
        Spilled::new(SpillCore::new(settings, incremental, least), JoinSpill::default())
    }
}

/// A store key: the key group (big-endian, so the store is in key-group
/// order), then the state key (side and join key, see [`super::state_key`]).
fn store_key(group: u32, side: usize, key: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(5 + key.len());
    bytes.extend_from_slice(&group.to_be_bytes());
    bytes.push(side as u8);
    bytes.extend_from_slice(key);
    bytes
}

/// The side and join key of a store key.
fn split_store_key(key: &[u8]) -> Result<(usize, &[u8])> {
    match key.get(4) {
        Some(side @ 0..=1) => Ok((*side as usize, &key[5..])),
        _ => Err(Error::State(format!(
            "a spilled join state key without its key group and side ({} bytes)",
            key.len()
        ))),
    }
}

fn cut_short() -> Error {
    Error::State("a spilled join state value is cut short".into())
}

spills_when_full!(JoinOperator);

impl JoinOperator {
    /// The key group of each of `keys` (join keys' bytes).
    fn key_groups_of(&self, keys: &[&[u8]]) -> Result<UInt32Array> {
        weir_state::snapshot::key_groups_of_bytes(&self.codec.keys_of, keys, self.max_parallelism)
    }

    /// Reads both sides' rows of the keys of `keys` that memory does not
    /// hold from the store, where it has them.
    pub(super) fn load_spilled(
        &mut self,
        keys: &Rows,
        null_keys: Option<&arrow::buffer::NullBuffer>,
    ) -> Result<()> {
        let Some(spill) = self.spill.as_ref().filter(|s| s.core.store.is_some()) else {
            return Ok(());
        };
        let mut new: Vec<&[u8]> = Vec::new();
        let mut seen = HashSet::new();
        for i in 0..keys.num_rows() {
            let key = keys.row(i).data();
            if !null_keys.is_some_and(|n| n.is_null(i))
                && !spill.own.resident.contains_key(key)
                && seen.insert(key)
            {
                new.push(key);
            }
        }
        if new.is_empty() {
            return Ok(());
        }
        let groups = self.key_groups_of(&new)?;
        let spill = self.spill.as_mut().expect("filtered above");
        let store = spill.core.store.as_ref().expect("filtered above");
        for (i, key) in new.iter().enumerate() {
            let mut found = 0;
            for (side, state) in self.sides.iter_mut().enumerate() {
                if let Some(value) = store.get(&store_key(groups.value(i), side, key))? {
                    let bucket = Bucket::decode(&value, state.width).ok_or_else(cut_short)?;
                    state.buckets.insert(Key::from_slice(key), bucket);
                    found |= 1 << side;
                }
            }
            spill.own.resident.insert(Key::from_slice(key), found);
        }
        Ok(())
    }

    /// Bytes both sides' rows and keys take in memory.
    fn memory_size(&self) -> usize {
        let resident = self.spill.as_ref().map_or(0, |s| {
            s.own.resident.capacity() * (std::mem::size_of::<Key>() + 9)
        });
        self.sides.iter().map(|s| s.memory_size()).sum::<usize>() + resident
    }

    /// Writes both sides' rows of every key memory holds to the store (a
    /// side without rows of a key it had there is removed from it) and
    /// empties memory.
    pub(super) fn spill_all(&mut self) -> Result<()> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        spill.core.open_store()?;
        let mut keys = std::mem::take(&mut spill.own.resident);
        for side in &self.sides {
            for key in side.buckets.keys() {
                if !keys.contains_key(key) {
                    keys.insert(key.clone(), 0);
                }
            }
        }
        let keys: Vec<(Key, u8)> = keys.into_iter().collect();
        for chunk in keys.chunks(WRITE_CHUNK) {
            let refs: Vec<&[u8]> = chunk.iter().map(|(k, _)| k.as_ref()).collect();
            let groups = self.key_groups_of(&refs)?;
            let (mut puts, mut removes) = (Vec::new(), Vec::new());
            for (i, (key, found)) in chunk.iter().enumerate() {
                for side in 0..2 {
                    let at = store_key(groups.value(i), side, key);
                    match self.sides[side].buckets.get(key.as_ref()) {
                        Some(bucket) if !bucket.is_empty() => {
                            let mut value = Vec::new();
                            bucket.encode(&mut value);
                            puts.push((at, value));
                        }
                        _ if found & (1 << side) != 0 => removes.push(at),
                        _ => {}
                    }
                }
            }
            let store = self.spill.store().expect("opened above");
            store.write(
                puts.iter().map(|(k, v)| (&k[..], &v[..])),
                removes.iter().map(|k| &k[..]),
            )?;
        }
        for side in 0..2 {
            let changed = self.sides[side].take_changed();
            for chunk in changed.chunks(WRITE_CHUNK) {
                let refs: Vec<&[u8]> = chunk.iter().map(|k| k.as_ref()).collect();
                let groups = self.key_groups_of(&refs)?;
                if let Some(flushed) = self.spill.as_mut().and_then(|s| s.core.flushed.as_mut()) {
                    refs.iter()
                        .enumerate()
                        .for_each(|(i, k)| flushed.push(&store_key(groups.value(i), side, k)));
                }
            }
            self.sides[side].buckets = Default::default();
        }
        if let Some(core) = self.spill.core_mut() {
            core.emptied();
        }
        weir_common::alloc::give_back_freed_memory();
        Ok(())
    }

    /// A full snapshot of spilled state: every key to the store, then the
    /// store, frozen now, as one run of state rows in key-group order, with
    /// their state keys when it is the `base` of an incremental chain,
    /// written by the snapshot's writer ([`weir_state::deferred`]).
    pub(super) fn spilled_snapshot(&mut self, base: bool) -> Result<Vec<Deferred>> {
        self.spill_all()?;
        let spill = self.spill.as_mut().expect("has spilled");
        spill.core.runs += 1;
        let runs = spill.core.runs;
        let store = self.spill.store().expect("has spilled");
        if store.is_empty()? {
            return Ok(Vec::new());
        }
        let path = store.snapshot_run_path(runs)?;
        let now = self.join.ttl_ms().map(|_| weir_common::time::wall_clock_millis());
        let schema = self.join.state_schema();
        let codec = super::Codec::new(&self.join, self.max_parallelism)?;
        let widths = [0, 1].map(|side| self.sides[side].width);
        let decode = move |entries: &[Entry]| {
            let parts = stored_parts(&codec, widths, entries, now)?;
            match base {
                true => replacement_rows(&schema, parts, true),
                false => sorted(parts),
            }
        };
        Ok(vec![store_run(store.frozen(), path, RUN_ROW_GROUP_ROWS, decode)])
    }

    /// An incremental snapshot of spilled state: the keys changed in memory,
    /// and those written to the store since the last snapshot (their rows
    /// read back from the store frozen now, by the snapshot's writer;
    /// deleted when the store has none). `None`: nothing changed.
    pub(super) fn spilled_delta(&mut self) -> Result<Option<Deferred>> {
        let mut parts = Vec::new();
        let mut in_memory = HashSet::new();
        for side in 0..2 {
            let changed = self.memory_parts(side, false, &mut parts)?;
            in_memory.extend(changed.iter().map(|k| super::state_key(side, k)));
        }
        let codec = super::Codec::new(&self.join, self.max_parallelism)?;
        let widths = [0, 1].map(|side| self.sides[side].width);
        let schema = self.join.state_schema();
        let in_memory = move |k: &[u8]| in_memory.contains(&k[4..]);
        let spill = self.spill.as_mut().expect("has spilled");
        let Some(of) = DeltaOf::take(&mut spill.core, parts, in_memory)? else {
            return Ok(None);
        };
        Ok(Some(store_delta(
            of,
            move |frozen: &Frozen, keys: &[&[u8]]| read_back(&codec, widths, frozen, keys),
            move |parts| replacement_rows(&schema, parts, false),
        )))
    }

    /// Restores state rows a chunk at a time: each chunk's keys read from
    /// the store, its rows added, memory written to the store when it holds
    /// more than its share ([`SpillsWhenFull`]).
    pub(super) fn restore_spilled(&mut self, rows: &RecordBatch) -> Result<()> {
        self.spill.core_mut().expect("spilling").open_store()?;
        for chunk in in_chunks(rows) {
            self.restore_side(0, &chunk)?;
            self.restore_side(1, &chunk)?;
            self.spill_if_over()?;
        }
        Ok(())
    }

    /// Removes the store's rows not written for the TTL at `now`, a slice of
    /// the store per call (from where the last one stopped). Keys memory
    /// holds are left to memory's sweep (their entries are older).
    pub(super) fn sweep_store(&mut self, now: i64) -> Result<()> {
        let (Some(ttl), Some(spill)) = (self.join.ttl_ms(), self.spill.as_mut()) else {
            return Ok(());
        };
        let Some(store) = &spill.core.store else {
            return Ok(());
        };
        let entries = store.scan_on(&mut spill.own.sweep_from, SWEEP)?;
        if entries.is_empty() {
            return Ok(());
        }
        let (mut puts, mut removes) = (Vec::new(), Vec::new());
        for (key, value) in &entries {
            let (side, join_key) = split_store_key(key)?;
            if spill.own.resident.contains_key(join_key) {
                continue;
            }
            let mut bucket = Bucket::decode(value, self.sides[side].width).ok_or_else(cut_short)?;
            if !bucket.expire(now, ttl) {
                continue;
            }
            if bucket.is_empty() {
                removes.push(&key[..]);
            } else {
                let mut bytes = Vec::new();
                bucket.encode(&mut bytes);
                puts.push((&key[..], bytes));
            }
        }
        store.write(puts.iter().map(|(k, v)| (*k, &v[..])), removes.iter().copied())?;
        if let Some(flushed) = &mut spill.core.flushed {
            puts.iter().for_each(|(k, _)| flushed.push(k));
            removes.iter().for_each(|k| flushed.push(k));
        }
        Ok(())
    }
}

/// Parts of state rows (without their state keys) as one batch in
/// key-group order.
/// The state rows of store entries of a join whose sides' rows are
/// `widths` bytes wide (parts of a chain file, each with its state keys),
/// without the rows expired at `now` when given.
fn stored_parts(
    codec: &super::Codec,
    widths: [u32; 2],
    entries: &[Entry],
    now: Option<i64>,
) -> Result<Vec<Part>> {
    let schema = codec.join.state_schema();
    let mut buckets: [Vec<(&[u8], Bucket)>; 2] = [Vec::new(), Vec::new()];
    for (key, value) in entries {
        let (side, join_key) = split_store_key(key)?;
        let mut bucket = Bucket::decode(value, widths[side]).ok_or_else(cut_short)?;
        if let (Some(now), Some(ttl)) = (now, codec.join.ttl_ms()) {
            bucket.expire(now, ttl);
        }
        if !bucket.is_empty() {
            buckets[side].push((join_key, bucket));
        }
    }
    let mut parts = Vec::new();
    for (side, buckets) in buckets.iter().enumerate() {
        let rows = buckets.iter().map(|(k, b)| (*k, b));
        if let Some((columns, keys)) = codec.bucket_rows(side, rows)? {
            parts.push((state_rows(&schema, columns)?, keys, false));
        }
    }
    Ok(parts)
}

/// The parts of store `keys` read from `frozen`: their rows, and a deleting
/// part for the keys of each side it has none of.
fn read_back(codec: &super::Codec, widths: [u32; 2], frozen: &Frozen, keys: &[&[u8]]) -> Result<Vec<Part>> {
    let (live, missing) = frozen.get_each(keys)?;
    let mut gone = [Vec::new(), Vec::new()];
    for key in missing {
        let (side, join_key) = split_store_key(key)?;
        gone[side].push(join_key);
    }
    let mut parts = stored_parts(codec, widths, &live, None)?;
    for (side, keys) in gone.iter().enumerate() {
        if !keys.is_empty() {
            parts.push(codec.deleted_keys(side, keys)?);
        }
    }
    Ok(parts)
}

fn sorted(parts: Vec<Part>) -> Result<Option<RecordBatch>> {
    concat_by_key_group(parts.into_iter().map(|part| part.0).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_key_splits_back_into_its_side_and_join_key() {
        let key = store_key(7, 1, b"abc");
        assert_eq!(&key[..4], &7u32.to_be_bytes());
        assert_eq!(split_store_key(&key).unwrap(), (1, &b"abc"[..]));
        assert!(split_store_key(&key[..3]).is_err());
        assert!(split_store_key(&store_key(7, 2, b"")).is_err());
    }
}
