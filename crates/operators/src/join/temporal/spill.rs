//! The spilling state backend of temporal joins: versions and waiting stream rows beyond the memory budget in the key-value store.
//!
//! Memory keeps the keys whose versions changed or were read for a change
//! since the last spill, and the stream rows that came since. When they
//! pass a quarter of the subtask's budget
//! ([`weir_state::memory_guess::spill_threshold`]) they go to the store
//! ([`weir_state::store`]) and memory starts empty again:
//!
//! ```text
//!  versions:   key group | 1 | key                 ->  the key's versions
//!  stream row: key group | 0 | time | seq          ->  key length | key | row
//!  index:      FF FF FF FF | 0 | time | seq        ->  the stream row's store key
//! ```
//!
//! A key's versions are one value: after the watermark drops the old ones a
//! key has one or a few. A batch of the versioned side reads the versions
//! of its keys that memory does not hold first, and a firing stream row
//! reads its key's, so every join sees the versions the heap would keep;
//! versions read from the store are dropped as the heap drops them at each
//! watermark ([`super::compact_versions`], with the last watermark), so a
//! key the stream never asks for keeps its old versions in the store
//! until it is read, and none of them is ever joined or saved. Stream rows
//! wait under their key group (a snapshot's run is in key-group order)
//! and in a time index after every key group: a watermark fires them by
//! scanning the index, a chunk at a time, as Flink's RocksDB backend keeps
//! its timers in state. Times are big-endian with the sign bit flipped, so
//! the index is in `(time, seq)` order.
//!
//! Checkpoints stay state files: a snapshot writes memory to the store and
//! the store, frozen, as one run of the state rows the heap writes, read by
//! the snapshot's writer ([`weir_state::deferred`]). A restore adds rows
//! to memory a chunk at a time and spills when it is full.

use std::collections::HashSet;

use arrow::record_batch::RecordBatch;
use arrow::row::RowConverter;

use crate::join::state::{ByKey, Key};
use crate::join::temporal::{
    Due, Keyed, SideState, TemporalJoin, TemporalJoinOperator, Versions, compact_versions,
    key_groups_of_rows, side_columns,
};
use arrow::array::BinaryBuilder;
use weir_common::time::Timestamp;
use weir_runtime::operator::{OperatorSnapshot, SpillSettings};

use crate::{Error, Result};
use weir_state::deferred::whole_store;
use weir_state::incremental::ReplacedPart;
use weir_state::snapshot::{concat_by_key_group, state_rows};
use weir_state::spilled::{SpillCore, SpillSlot, Spilled};
use weir_state::store::{Entry, SWEEP, WRITE_CHUNK, ordered};

/// The first four bytes of an index entry's key, after every key group.
const INDEX: [u8; 4] = [0xFF; 4];

/// Bytes of a stream row's store key before its sequence number: key
/// group, `0`, time.
pub(super) const STREAM_PREFIX: usize = 13;

/// A temporal join subtask's own spilled state (beside its [`SpillCore`],
/// whose flushed keys say what changed in the store since the last
/// snapshot: [`super::spilled_delta`]).
pub(super) struct TemporalSpill {
    /// The time the next scan of the index starts at: rows before it have
    /// fired (a late row spilled later moves it back).
    scan_from: i64,
    /// Stream rows written to the store, to order those of one time.
    seq: u64,
}

impl TemporalSpill {
    /// The spill of a temporal join subtask with these settings, noting
    /// what its `incremental` snapshots read back.
    pub(super) fn new(settings: SpillSettings, incremental: bool) -> Spilled<Self> {
        let own = TemporalSpill {
            scan_from: i64::MIN,
            seq: 0,
        };
        // At least a stream row's entry and its share of a time's.
        Spilled::new(SpillCore::new(settings, incremental, 64), own)
    }
}

fn cut_short() -> Error {
    Error::State("a spilled temporal join state entry is cut short".into())
}

/// The time of [`ordered`] bytes at the start of `bytes`.
pub(super) fn time_of(bytes: &[u8]) -> Result<i64> {
    weir_state::store::time_of(bytes).ok_or_else(cut_short)
}

/// The store key of a key's versions.
pub(super) fn versions_key(group: u32, key: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(5 + key.len());
    bytes.extend_from_slice(&group.to_be_bytes());
    bytes.push(1);
    bytes.extend_from_slice(key);
    bytes
}

/// The store key of a stream row at `(time, seq)`, after `head` (its key
/// group, or [`INDEX`]).
pub(super) fn stream_key(head: [u8; 4], time: i64, seq: u64) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(21);
    bytes.extend_from_slice(&head);
    bytes.push(0);
    bytes.extend_from_slice(&ordered(time));
    bytes.extend_from_slice(&seq.to_be_bytes());
    bytes
}

/// A key's versions as a store value: per version its time, whether it
/// deletes, its row's length and bytes.
fn encode_versions(versions: &Versions) -> Vec<u8> {
    let mut bytes = Vec::new();
    for (time, (row, deleted)) in versions.iter() {
        bytes.extend_from_slice(&time.to_be_bytes());
        bytes.push(*deleted as u8);
        bytes.extend_from_slice(&(row.len() as u32).to_be_bytes());
        bytes.extend_from_slice(row);
    }
    bytes
}

/// The versions of an [`encode_versions`] value.
fn decode_versions(mut bytes: &[u8]) -> Result<Versions> {
    let mut versions = Versions::new();
    while !bytes.is_empty() {
        let time = i64::from_be_bytes(bytes.get(..8).ok_or_else(cut_short)?.try_into().expect("8"));
        let deleted = *bytes.get(8).ok_or_else(cut_short)? == 1;
        let len = u32::from_be_bytes(bytes.get(9..13).ok_or_else(cut_short)?.try_into().expect("4"));
        let row = bytes.get(13..13 + len as usize).ok_or_else(cut_short)?;
        versions.insert(time, (row.into(), deleted));
        bytes = &bytes[13 + len as usize..];
    }
    Ok(versions)
}

/// A stream row's store value: its key's length and bytes, then its row's.
fn stream_value(key: &[u8], row: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(4 + key.len() + row.len());
    bytes.extend_from_slice(&(key.len() as u32).to_be_bytes());
    bytes.extend_from_slice(key);
    bytes.extend_from_slice(row);
    bytes
}

/// The key and row of a [`stream_value`].
pub(super) fn split_stream_value(bytes: &[u8]) -> Result<(&[u8], &[u8])> {
    let len = u32::from_be_bytes(bytes.get(..4).ok_or_else(cut_short)?.try_into().expect("4"));
    let end = 4 + len as usize;
    Ok((bytes.get(4..end).ok_or_else(cut_short)?, &bytes[end..]))
}

spills_when_full!(TemporalJoinOperator);

impl TemporalJoinOperator {
    /// The store's versions of those of `keys` that memory does not hold,
    /// dropped as at the last watermark; nothing before anything spilled.
    pub(super) fn stored_versions<'k>(
        &self,
        keys: impl Iterator<Item = &'k [u8]>,
    ) -> Result<ByKey<Versions>> {
        let mut found = ByKey::default();
        let Some(store) = self.spill.store() else {
            return Ok(found);
        };
        let mut seen = HashSet::new();
        // A null key (no bytes: any key's row format has some) has no
        // versions.
        let wanted: Vec<&[u8]> = keys
            .filter(|k| !k.is_empty() && !self.versions.contains_key(*k) && seen.insert(*k))
            .collect();
        for chunk in wanted.chunks(WRITE_CHUNK) {
            let groups =
                weir_state::snapshot::key_groups_of_bytes(&self.keys_of, chunk, self.max_parallelism)?;
            for (key, group) in chunk.iter().zip(groups.values()) {
                if let Some(value) = store.get(&versions_key(*group, key))? {
                    let mut versions = decode_versions(&value)?;
                    compact_versions(&mut versions, self.compacted);
                    found.insert(Key::from_slice(key), versions);
                }
            }
        }
        Ok(found)
    }

    /// Reads the store's versions of `keys` into memory, where memory does
    /// not hold them: before versions of them are added.
    pub(super) fn load_stored<'k>(&mut self, keys: impl Iterator<Item = &'k [u8]>) -> Result<()> {
        let stored = self.stored_versions(keys)?;
        for (key, versions) in stored {
            if let Some(at) = super::next_change(&versions, self.compacted) {
                self.changes.entry(at).or_default().push(key.clone());
            }
            self.versions.insert(key, versions);
        }
        Ok(())
    }

    /// The next chunk of the store's stream rows at or before `w`, in
    /// `(time, seq)` order, taken out of the store; and, when the chunk is
    /// full, its last time (more rows up to `w` may follow).
    pub(super) fn stored_due(&mut self, w: Timestamp) -> Result<(Due, Option<i64>)> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok((Vec::new(), None));
        };
        let Some(store) = &spill.core.store else {
            return Ok((Vec::new(), None));
        };
        let from = stream_key(INDEX, spill.own.scan_from, 0);
        let entries = store.range(&from, &stream_key(INDEX, w, u64::MAX), SWEEP)?;
        let (mut due, mut removes) = (Vec::with_capacity(entries.len()), Vec::new());
        for (index, row_key) in &entries {
            let time = time_of(&index[5..])?;
            let value = store.get(row_key)?.ok_or_else(|| {
                Error::State("a temporal join's time index names a stream row the store lacks".into())
            })?;
            let (key, row) = split_stream_value(&value)?;
            due.push((time, (key.into(), row.into())));
            removes.push(index);
            removes.push(row_key);
        }
        store.write([], removes.iter().map(|k| &k[..]))?;
        let more = match (entries.len() == SWEEP, due.last()) {
            (true, Some((time, _))) => Some(*time),
            _ => None,
        };
        spill.own.scan_from = more.unwrap_or(w);
        Ok((due, more))
    }

    /// Writes memory's versions and stream rows to the store and empties it.
    pub(super) fn spill_all(&mut self) -> Result<()> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        // Bloom filters: a stream row's key may have no versions.
        spill.core.open_store()?;
        self.note_changed()?;
        let versions = std::mem::take(&mut self.versions);
        let keys: Vec<(&Key, &Versions)> = versions.iter().collect();
        for chunk in keys.chunks(WRITE_CHUNK) {
            let bytes: Vec<&[u8]> = chunk.iter().map(|(k, _)| &k[..]).collect();
            let groups =
                weir_state::snapshot::key_groups_of_bytes(&self.keys_of, &bytes, self.max_parallelism)?;
            let (mut puts, mut removes) = (Vec::new(), Vec::new());
            for ((key, versions), group) in chunk.iter().zip(groups.values()) {
                match versions.is_empty() {
                    true => removes.push(versions_key(*group, key)),
                    false => puts.push((versions_key(*group, key), encode_versions(versions))),
                }
            }
            let store = self.spill.store().expect("opened above");
            store.write(
                puts.iter().map(|(k, v)| (&k[..], &v[..])),
                removes.iter().map(|k| &k[..]),
            )?;
        }
        drop(versions);
        // The store's versions are dropped when they are read.
        self.changes.clear();
        let waiting = std::mem::take(&mut self.waiting);
        let rows: Vec<(i64, &Keyed)> = (waiting.iter())
            .flat_map(|(time, rows)| rows.iter().map(|row| (*time, row)))
            .collect();
        for chunk in rows.chunks(WRITE_CHUNK) {
            self.spill_stream_rows(chunk)?;
        }
        if let Some(core) = self.spill.core_mut() {
            core.emptied();
        }
        weir_common::alloc::give_back_freed_memory();
        Ok(())
    }

    /// Writes stream rows (in time and arrival order) to the store, each
    /// under its key group and in the time index.
    fn spill_stream_rows(&mut self, rows: &[(i64, &Keyed)]) -> Result<()> {
        let parser = self.rows_of[0].parser();
        let data = self.rows_of[0].convert_rows(rows.iter().map(|(_, (_, row))| parser.parse(row)))?;
        let groups = key_groups_of_rows(&self.spec, 0, &data, self.max_parallelism)?;
        let spill = self.spill.as_mut().expect("spilling");
        let mut puts = Vec::with_capacity(2 * rows.len());
        for ((time, (key, row)), group) in rows.iter().zip(groups.values()) {
            spill.own.seq += 1;
            spill.own.scan_from = spill.own.scan_from.min(*time);
            let row_key = stream_key(group.to_be_bytes(), *time, spill.own.seq);
            if let Some(flushed) = spill.core.flushed.as_mut() {
                flushed.push(&row_key[..STREAM_PREFIX]);
            }
            puts.push((stream_key(INDEX, *time, spill.own.seq), row_key.clone()));
            puts.push((row_key, stream_value(key, row)));
        }
        let store = spill.core.store.as_ref().expect("opened");
        store.write(puts.iter().map(|(k, v)| (&k[..], &v[..])), [])
    }

    /// A snapshot of spilled state: memory to the store, then the store,
    /// frozen now, as one run of state rows in key-group order, written by
    /// the snapshot's writer; and the watermark.
    pub(super) fn spilled_snapshot(&mut self) -> Result<OperatorSnapshot> {
        self.spill_all()?;
        let mut snapshot = OperatorSnapshot::with_watermark(self.watermark, None);
        let (compacted, max_parallelism) = (self.compacted, self.max_parallelism);
        let spill = self.spill.as_mut().expect("has spilled");
        let spec = self.spec.clone();
        let converters = crate::join::row_converters(&spec.inputs)?;
        let decode =
            move |entries: &[Entry]| stored_rows(&spec, &converters, max_parallelism, compacted, entries);
        snapshot.deferred = whole_store(&mut spill.core, decode)?;
        Ok(snapshot)
    }
}

/// The state rows of store entries (index entries left out; versions
/// dropped as at watermark `w`), sorted by key group; `None` without rows.
fn stored_rows(
    spec: &TemporalJoin,
    converters: &[RowConverter; 2],
    max_parallelism: usize,
    w: Timestamp,
    entries: &[Entry],
) -> Result<Option<RecordBatch>> {
    let parts = stored_parts(spec, converters, max_parallelism, w, entries)?;
    concat_by_key_group(parts.into_iter().map(|(rows, _, _)| rows).collect())
}

/// [`stored_rows`] as a replacing file's parts, a side's each: stream rows
/// keyed by time, key group and join key, versions by key (as the heap's
/// deltas key them).
pub(super) fn stored_parts(
    spec: &TemporalJoin,
    converters: &[RowConverter; 2],
    max_parallelism: usize,
    w: Timestamp,
    entries: &[Entry],
) -> Result<Vec<ReplacedPart>> {
    let parsers = [converters[0].parser(), converters[1].parser()];
    let mut versions = Vec::new();
    let mut sides: [SideState; 2] = Default::default();
    let mut keys: [BinaryBuilder; 2] = Default::default();
    for (key, value) in entries {
        let group: [u8; 4] = key.get(..4).ok_or_else(cut_short)?.try_into().expect("4 bytes");
        if group == INDEX {
            continue;
        }
        match key.get(4) {
            Some(0) => {
                let (join_key, row) = split_stream_value(value)?;
                let time = time_of(key.get(5..).ok_or_else(cut_short)?)?;
                sides[0].rows.push(parsers[0].parse(row));
                sides[0].times.push(time);
                sides[0].deleted.push(false);
                keys[0].append_value(super::delta::waiting_key(
                    time,
                    u32::from_be_bytes(group),
                    join_key,
                ));
            }
            Some(1) => {
                let mut kept = decode_versions(value)?;
                compact_versions(&mut kept, w);
                let state_key = super::delta::versions_key(&key[5..]);
                kept.iter().for_each(|_| keys[1].append_value(&state_key));
                versions.push(kept);
            }
            _ => return Err(cut_short()),
        }
    }
    for (time, (row, deleted)) in versions.iter().flatten() {
        sides[1].rows.push(parsers[1].parse(row));
        sides[1].times.push(*time);
        sides[1].deleted.push(*deleted);
    }
    let schema = spec.state_schema();
    let mut parts = Vec::new();
    for (side, (state, mut keys)) in sides.into_iter().zip(keys).enumerate() {
        if let Some(columns) = side_columns(spec, &converters[side], max_parallelism, side, state)? {
            parts.push((state_rows(&schema, columns)?, keys.finish(), false));
        }
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_rows_are_in_time_order_within_a_key_group_and_the_index_after_every_key_group() {
        let keys: Vec<Vec<u8>> = [(-5, 2), (-5, 3), (0, 1), (9, 0)]
            .iter()
            .map(|(t, s)| stream_key(7u32.to_be_bytes(), *t, *s))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "in (time, seq) order");
        assert!(keys[3] < versions_key(7, b""), "before the group's versions");
        assert!(stream_key(INDEX, i64::MIN, 0) > versions_key(u32::MAX - 1, b"\xff\xff"));
        assert_eq!(time_of(&stream_key(INDEX, -5, 2)[5..]).unwrap(), -5);
    }

    #[test]
    fn versions_and_stream_rows_come_back_from_their_values() {
        let mut versions = Versions::new();
        versions.insert(8, (Box::default(), true));
        versions.insert(-3, (b"a".to_vec().into(), false));
        assert_eq!(decode_versions(&encode_versions(&versions)).unwrap(), versions);
        assert_eq!(decode_versions(&[]).unwrap(), Versions::new());
        assert!(decode_versions(&encode_versions(&versions)[..5]).is_err());
        let value = stream_value(b"key", b"row");
        assert_eq!(split_stream_value(&value).unwrap(), (&b"key"[..], &b"row"[..]));
        assert_eq!(
            split_stream_value(&stream_value(b"", b"r")).unwrap(),
            (&b""[..], &b"r"[..])
        );
        assert!(split_stream_value(&value[..5]).is_err());
    }
}
