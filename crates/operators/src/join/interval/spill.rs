//! The spilling state backend of interval joins: kept rows beyond the memory budget in the key-value store, expired through a time index.
//!
//! Memory keeps the rows that came since the last spill. When they pass a
//! quarter of the subtask's budget
//! ([`weir_state::memory_guess::spill_threshold`]), every kept row goes
//! to the store ([`weir_state::store`]) as two entries, and memory starts
//! empty again:
//!
//! ```text
//!  row:   key group | side | key length | join key | time | seq  ->  joined | row
//!  index: FF FF FF FF | side | time | seq                        ->  the row's store key
//! ```
//!
//! Times are big-endian with the sign bit flipped, so that a row's entries
//! are in `(time, seq)` order under its key: a batch's rows read the other
//! side's rows of their key and window with one range scan each, merged
//! with memory's in the order one map would hold them. The index entries
//! come after every key group (no key group is `u32::MAX`), in time order:
//! a watermark expires the store's rows by scanning the index up to the
//! time nothing can join any more, as Flink's RocksDB backend keeps its
//! cleanup timers in state, not by a scan of every row. An outer side's
//! expired rows that never joined are emitted padded, a scan's chunk at a
//! time.
//!
//! Checkpoints stay state files: a snapshot writes memory to the store and
//! the store, frozen, as one run of the state rows the heap writes (index
//! entries left out), read by the snapshot's writer
//! ([`weir_state::deferred`]). A restore adds rows to memory a chunk at a
//! time and spills when it is full.

use arrow::row::Rows;

use crate::join::interval::{IntervalJoin, IntervalJoinOperator, SideRows, side_columns};
use arrow::array::BinaryBuilder;
use weir_runtime::operator::{OperatorSnapshot, SpillSettings};

use crate::{Error, Result};
use weir_state::deferred::{prefixed_delta, whole_store};
use weir_state::incremental::ReplacedPart;
use weir_state::snapshot::{concat_by_key_group, state_rows};
use weir_state::spilled::{SpillCore, SpillSlot, Spilled};
use weir_state::store::{Entry, SWEEP, WRITE_CHUNK, ordered};

/// The first four bytes of an index entry's key, after every key group.
const INDEX: [u8; 4] = [0xFF; 4];

/// An interval join subtask's own spilled state (beside its [`SpillCore`],
/// whose flushed keys are the prefixes ([`key_prefix`]) of the keys whose
/// stored rows changed since the last snapshot).
pub(super) struct IntervalSpill {
    /// Each side's latest time whose rows left the store: the next expiry
    /// scans the index from there (every row kept since is later; what is
    /// before is removed entries, which a scan from the start would walk).
    expired_through: [i64; 2],
}

impl IntervalSpill {
    /// The spill of an interval join subtask with these settings, noting
    /// what its `incremental` snapshots read back.
    pub(super) fn new(settings: SpillSettings, incremental: bool) -> Spilled<Self> {
        // Read by ranges of keys.
        let core = SpillCore::new(settings, incremental, super::ROW_OVERHEAD).for_ranges();
        Spilled::new(
            core,
            IntervalSpill {
                expired_through: [i64::MIN; 2],
            },
        )
    }
}

/// Notes that the rows of the key of a row entry `row_key` changed.
fn note(core: &mut SpillCore, row_key: &[u8]) -> Result<()> {
    let prefix = row_key.len().checked_sub(16).ok_or_else(cut_short)?;
    core.note(&row_key[..prefix]);
    Ok(())
}

fn cut_short() -> Error {
    Error::State("a spilled interval join state entry is cut short".into())
}

/// The store key of one key's rows of one side, before their times.
fn key_prefix(group: u32, side: usize, key: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(25 + key.len());
    bytes.extend_from_slice(&group.to_be_bytes());
    bytes.push(side as u8);
    bytes.extend_from_slice(&(key.len() as u32).to_be_bytes());
    bytes.extend_from_slice(key);
    bytes
}

/// The store key of a row at `(time, seq)`, after `prefix` ([`key_prefix`]).
fn at_key(mut prefix: Vec<u8>, (time, seq): (i64, u64)) -> Vec<u8> {
    prefix.extend_from_slice(&ordered(time));
    prefix.extend_from_slice(&seq.to_be_bytes());
    prefix
}

/// The index key of a row of `side` at `(time, seq)`.
fn index_key(side: usize, at: (i64, u64)) -> Vec<u8> {
    let mut bytes = INDEX.to_vec();
    bytes.push(side as u8);
    at_key(bytes, at)
}

/// The key group and state key (the side, then the join key's bytes, as
/// the heap's deltas key a side's rows) of a row entry's key or its prefix.
fn state_key_of(key: &[u8]) -> Result<(u32, Vec<u8>)> {
    let group: [u8; 4] = key.get(..4).ok_or_else(cut_short)?.try_into().expect("4 bytes");
    let side = *key.get(4).ok_or_else(cut_short)?;
    let length: [u8; 4] = key.get(5..9).ok_or_else(cut_short)?.try_into().expect("4 bytes");
    let join_key = key
        .get(9..9 + u32::from_be_bytes(length) as usize)
        .ok_or_else(cut_short)?;
    let mut state_key = Vec::with_capacity(1 + join_key.len());
    state_key.push(side);
    state_key.extend_from_slice(join_key);
    Ok((u32::from_be_bytes(group), state_key))
}

/// A row entry's key group, side and `(time, seq)` (`None`: an index entry).
fn split_row_key(key: &[u8]) -> Result<Option<(u32, usize, super::At)>> {
    let group: [u8; 4] = key.get(..4).ok_or_else(cut_short)?.try_into().expect("4 bytes");
    if group == INDEX {
        return Ok(None);
    }
    let side = match key.get(4) {
        Some(side @ 0..=1) => *side as usize,
        _ => return Err(cut_short()),
    };
    Ok(Some((u32::from_be_bytes(group), side, row_time(key)?)))
}

/// The `(time, seq)` that ends a row's or an index entry's key.
pub(super) fn row_time(key: &[u8]) -> Result<(i64, u64)> {
    let tail = key.len().checked_sub(16).ok_or_else(cut_short)?;
    let time = u64::from_be_bytes(key[tail..tail + 8].try_into().expect("8 bytes"));
    let seq = u64::from_be_bytes(key[tail + 8..].try_into().expect("8 bytes"));
    Ok(((time ^ (1 << 63)) as i64, seq))
}

/// A row entry's value: whether the row joined, then its bytes.
fn row_value(joined: bool, row: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(1 + row.len());
    value.push(joined as u8);
    value.extend_from_slice(row);
    value
}

/// The row's bytes of a row entry's value.
pub(super) fn row_bytes(value: &[u8]) -> Result<&[u8]> {
    value.get(1..).ok_or_else(cut_short)
}

spills_when_full!(IntervalJoinOperator);

impl IntervalJoinOperator {
    /// Bytes both sides' rows take in memory.
    fn memory_size(&self) -> usize {
        self.sides.iter().map(|s| s.bytes).sum()
    }
}

impl IntervalJoinOperator {
    /// The store's rows of the other side each input row of `side` may
    /// join (its key's, within its window), by input row; none for rows
    /// `skip` says join nothing, and none at all (an empty list) before
    /// anything was spilled.
    pub(super) fn stored_candidates(
        &self,
        side: usize,
        keys: &Rows,
        times: &[i64],
        skip: &[bool],
    ) -> Result<Vec<Vec<Entry>>> {
        let Some(store) = self.spill.store() else {
            return Ok(Vec::new());
        };
        let mut stored = vec![Vec::new(); times.len()];
        let wanted: Vec<usize> = (0..times.len()).filter(|i| !skip[*i]).collect();
        let key_bytes: Vec<&[u8]> = wanted.iter().map(|i| keys.row(*i).data()).collect();
        let groups =
            weir_state::snapshot::key_groups_of_bytes(&self.keys_of, &key_bytes, self.max_parallelism)?;
        for (n, i) in wanted.into_iter().enumerate() {
            let prefix = key_prefix(groups.value(n), 1 - side, key_bytes[n]);
            let (from, to) = self.spec.window(side, times[i]);
            let first = at_key(prefix.clone(), (from, 0));
            stored[i] = store.range(&first, &at_key(prefix, (to, u64::MAX)), usize::MAX)?;
        }
        Ok(stored)
    }

    /// Marks stored rows as joined (an outer side's rows are padded at
    /// expiry only if they never joined).
    pub(super) fn mark_stored_joined(&mut self, entries: &[&Entry]) -> Result<()> {
        let Some(spill) = self.spill.as_mut().filter(|s| s.core.store.is_some()) else {
            return Ok(());
        };
        let mut puts = Vec::new();
        for (key, value) in entries {
            if value.first() == Some(&0) {
                note(&mut spill.core, key)?;
                puts.push((key, row_value(true, row_bytes(value)?)));
            }
        }
        let store = spill.core.store.as_ref().expect("filtered above");
        store.write(puts.iter().map(|(k, v)| (&k[..], &v[..])), [])
    }

    /// Removes the next chunk of the store's rows of `side` up to `time`
    /// and returns those that never joined; `None` when none is left.
    pub(super) fn expire_stored(&mut self, side: usize, time: i64) -> Result<Option<Vec<Vec<u8>>>> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok(None);
        };
        let (Some(store), through) = (&spill.core.store, &mut spill.own.expired_through[side]) else {
            return Ok(None);
        };
        if *through >= time {
            return Ok(None);
        }
        let from = index_key(side, (*through, 0));
        let entries = store.range(&from, &index_key(side, (time, u64::MAX)), SWEEP)?;
        let Some((last, _)) = entries.last() else {
            *through = time;
            return Ok(None);
        };
        *through = match entries.len() < SWEEP {
            true => time,
            false => row_time(last)?.0,
        };
        let (mut unjoined, mut removes) = (Vec::new(), Vec::new());
        if let Some(flushed) = spill.core.flushed.as_mut() {
            for (_, row_key) in &entries {
                let prefix = row_key.len().checked_sub(16).ok_or_else(cut_short)?;
                flushed.push(&row_key[..prefix]);
            }
        }
        for (index, row_key) in &entries {
            if self.spec.kind.outer(side)
                && let Some(value) = store.get(row_key)?
                && value.first() == Some(&0)
            {
                unjoined.push(row_bytes(&value)?.to_vec());
            }
            removes.push(index);
            removes.push(row_key);
        }
        store.write([], removes.iter().map(|k| &k[..]))?;
        Ok(Some(unjoined))
    }

    /// Writes every row memory keeps to the store (an entry and an index
    /// entry each) and empties memory.
    pub(super) fn spill_all(&mut self) -> Result<()> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        spill.core.open_store()?;
        for side in 0..2 {
            let memory = std::mem::take(&mut self.sides[side]);
            self.sides[side].seq = memory.seq;
            self.sides[side].changed = memory.changed.as_ref().map(|_| Default::default());
            self.note_changed(side, memory.changed.as_ref())?;
            let by_key: Vec<&super::KeyRows> = memory.keys.values().collect();
            for chunk in by_key.chunks(WRITE_CHUNK) {
                let keys: Vec<&[u8]> = chunk.iter().map(|k| &k.key[..]).collect();
                let groups =
                    weir_state::snapshot::key_groups_of_bytes(&self.keys_of, &keys, self.max_parallelism)?;
                let mut puts = Vec::new();
                for (n, key) in chunk.iter().enumerate() {
                    let prefix = key_prefix(groups.value(n), side, &key.key);
                    for (at, kept) in key.iter() {
                        let row_key = at_key(prefix.clone(), *at);
                        puts.push((index_key(side, *at), row_key.clone()));
                        puts.push((row_key, row_value(kept.joined, &kept.row)));
                    }
                }
                let store = self.spill.store().expect("opened above");
                store.write(puts.iter().map(|(k, v)| (&k[..], &v[..])), [])?;
            }
        }
        if let Some(core) = self.spill.core_mut() {
            core.emptied();
        }
        weir_common::alloc::give_back_freed_memory();
        Ok(())
    }

    /// Notes the keys of `side` changed in memory (written to the store
    /// now, or gone from it) for the next incremental snapshot.
    fn note_changed(&mut self, side: usize, changed: Option<&super::ChangedKeys>) -> Result<()> {
        let (Some(changed), Some(flushed)) =
            (changed, self.spill.as_mut().and_then(|s| s.core.flushed.as_mut()))
        else {
            return Ok(());
        };
        let keys: Vec<&[u8]> = changed.iter().map(|k| &k[..]).collect();
        for chunk in keys.chunks(WRITE_CHUNK) {
            let groups =
                weir_state::snapshot::key_groups_of_bytes(&self.keys_of, chunk, self.max_parallelism)?;
            (chunk.iter().zip(groups.values())).for_each(|(k, g)| flushed.push(&key_prefix(*g, side, k)));
        }
        Ok(())
    }

    /// An incremental snapshot of spilled state, and the watermark: memory
    /// to the store, then a base (`full`: the store, frozen now, as one run
    /// keyed by side and key) or a replacing delta of the keys whose rows
    /// changed since the last snapshot, read from the store frozen now
    /// (a key without rows there is deleted); both read by the snapshot's
    /// writer.
    pub(super) fn spilled_delta(&mut self, full: bool) -> Result<OperatorSnapshot> {
        self.spill_all()?;
        let mut snapshot = OperatorSnapshot::with_watermark(self.watermark, None);
        let spec = self.spec.clone();
        let converters = crate::join::row_converters(&spec.inputs)?;
        let schema = spec.state_schema();
        let decode = move |entries: &[Entry]| stored_parts(&spec, &converters, entries);
        let core = self.spill.core_mut().expect("has spilled");
        if full {
            snapshot.deferred = weir_state::deferred::keyed_base(core, schema, decode)?;
            return Ok(snapshot);
        }
        let delta = prefixed_delta(core, schema, |prefix: &[u8]| state_key_of(prefix), decode)?;
        snapshot.deferred = delta.into_iter().collect();
        Ok(snapshot)
    }

    /// A snapshot of spilled state: memory to the store, then the store,
    /// frozen now, as one run of state rows in key-group order, written by
    /// the snapshot's writer; and the watermark.
    pub(super) fn spilled_snapshot(&mut self) -> Result<OperatorSnapshot> {
        self.spill_all()?;
        let mut snapshot = OperatorSnapshot::with_watermark(self.watermark, None);
        let spill = self.spill.as_mut().expect("has spilled");
        let spec = self.spec.clone();
        let converters = crate::join::row_converters(&spec.inputs)?;
        let decode = move |entries: &[Entry]| stored_rows(&spec, &converters, entries);
        snapshot.deferred = whole_store(&mut spill.core, decode)?;
        Ok(snapshot)
    }
}

/// The state rows of store entries (index entries left out), sorted by key
/// group; `None` without rows.
fn stored_rows(
    spec: &IntervalJoin,
    converters: &[arrow::row::RowConverter; 2],
    entries: &[Entry],
) -> Result<Option<arrow::record_batch::RecordBatch>> {
    let parts = stored_parts(spec, converters, entries)?;
    concat_by_key_group(parts.into_iter().map(|(rows, _, _)| rows).collect())
}

/// The state rows of store entries (index entries left out) as a replacing
/// file's parts, a side's each, every row keyed by its side and join key.
fn stored_parts(
    spec: &IntervalJoin,
    converters: &[arrow::row::RowConverter; 2],
    entries: &[Entry],
) -> Result<Vec<ReplacedPart>> {
    let parsers = [converters[0].parser(), converters[1].parser()];
    let mut groups: [Vec<u32>; 2] = Default::default();
    let mut keys: [BinaryBuilder; 2] = Default::default();
    let mut kept: [SideRows; 2] = Default::default();
    for (key, value) in entries {
        let Some((group, side, (time, _))) = split_row_key(key)? else {
            continue;
        };
        groups[side].push(group);
        keys[side].append_value(state_key_of(key)?.1);
        kept[side].rows.push(parsers[side].parse(row_bytes(value)?));
        kept[side].times.push(time);
        kept[side].joined.push(value.first() == Some(&1));
    }
    let schema = spec.state_schema();
    let mut parts = Vec::new();
    for (side, ((groups, kept), mut keys)) in groups.into_iter().zip(kept).zip(keys).enumerate() {
        if !groups.is_empty() {
            let groups = arrow::array::UInt32Array::from(groups);
            let columns = side_columns(spec, &converters[side], side, groups, kept)?;
            parts.push((state_rows(&schema, columns)?, keys.finish(), false));
        }
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_keys_order_a_keys_rows_by_time_and_split_back() {
        let prefix = key_prefix(7, 1, b"k");
        let keys: Vec<Vec<u8>> = [(-5, 2), (-5, 3), (0, 1), (9, 0)]
            .iter()
            .map(|at| at_key(prefix.clone(), *at))
            .collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "in (time, seq) order");
        assert_eq!(split_row_key(&keys[0]).unwrap(), Some((7, 1, (-5, 2))));
        assert_eq!(split_row_key(&index_key(0, (3, 4))).unwrap(), None);
        assert_eq!(row_time(&index_key(0, (3, 4))).unwrap(), (3, 4));
        assert!(split_row_key(&keys[0][..3]).is_err());
    }

    #[test]
    fn a_key_that_starts_another_key_holds_none_of_its_rows() {
        // Lengths come before keys: "k" and "k\0..." never share a prefix.
        let short = at_key(key_prefix(1, 0, b"k"), (i64::MAX, u64::MAX));
        let long = at_key(key_prefix(1, 0, b"k\x00\x00"), (i64::MIN, 0));
        let first_of_short = at_key(key_prefix(1, 0, b"k"), (i64::MIN, 0));
        assert!(!(first_of_short..=short).contains(&long));
    }

    #[test]
    fn index_entries_come_after_every_key_group_in_time_order() {
        let row = at_key(key_prefix(u32::MAX - 1, 1, b"zzz"), (i64::MAX, 0));
        assert!(index_key(0, (i64::MIN, 0)) > row);
        assert!(index_key(0, (-1, 9)) < index_key(0, (1, 0)));
        assert!(index_key(0, (i64::MAX, 0)) < index_key(1, (i64::MIN, 0)));
    }
}
