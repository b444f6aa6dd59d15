//! The spilling state backend of window joins: waiting rows beyond the memory budget in the key-value store, a window joined a key group at a time.
//!
//! Memory keeps the rows that came since the last spill. When they pass a
//! quarter of the subtask's budget
//! ([`weir_state::memory_guess::spill_threshold`]) every row goes to the
//! store ([`weir_state::store`]) and memory starts empty again:
//!
//! ```text
//!  key group | window end | key length | join key | side | seq  ->  row
//! ```
//!
//! The window end is big-endian with its sign bit flipped. Memory notes
//! which key groups have rows of each window in the store (a few bytes per
//! window and group). When the watermark passes a window's end and the
//! store has rows of it, memory's rows of that window are written there
//! too, and the window is joined one key group at a time: a range scan
//! gives the group's rows of the window key by key, which are joined as the
//! heap joins a window and removed. Only one key group's rows of one window
//! are in memory at once, as Flink's RocksDB backend reads a window's state
//! key by key.
//!
//! Checkpoints stay state files: a snapshot writes memory to the store and
//! the store, frozen, as one run of the state rows the heap writes, read by
//! the snapshot's writer ([`weir_state::deferred`]). A restore adds rows
//! to memory a chunk at a time and spills when it is full.

use std::collections::{BTreeMap, BTreeSet};

use arrow::record_batch::RecordBatch;
use arrow::row::RowConverter;

use crate::join::window::{Waiting, WindowJoin, WindowJoinOperator, side_columns};
use crate::{Error, Result};
use weir_runtime::operator::{OperatorSnapshot, SpillSettings};
use weir_state::deferred::{DeltaOf, store_delta, whole_store};
use weir_state::snapshot::{concat_by_key_group, state_rows};
use weir_state::spilled::{SpillCore, SpillSlot, Spilled};
use weir_state::store::{Entry, Frozen, WRITE_CHUNK, ordered};

/// A window join subtask's own spilled state (beside its [`SpillCore`],
/// whose flushed keys are the store keys of the rows written since the
/// last snapshot that no snapshot holds yet).
#[derive(Default)]
pub(super) struct WindowSpill {
    /// The key groups with rows in the store, by window end.
    stored: BTreeMap<i64, BTreeSet<u32>>,
    /// Rows written to the store (a row's entry is unique by it).
    seq: u64,
}

impl WindowSpill {
    /// The spill of a window join subtask with these settings, noting the
    /// rows its `incremental` snapshots read back.
    pub(super) fn new(settings: SpillSettings, incremental: bool) -> Spilled<Self> {
        // At least a row's entry in its window; read by ranges of keys.
        let core = SpillCore::new(settings, incremental, 64).for_ranges();
        Spilled::new(core, WindowSpill::default())
    }
}

fn cut_short() -> Error {
    Error::State("a spilled window join state entry is cut short".into())
}

/// The store key of a key group's rows of the window ending at `end`.
fn window_prefix(group: u32, end: i64) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(64);
    bytes.extend_from_slice(&group.to_be_bytes());
    bytes.extend_from_slice(&ordered(end));
    bytes
}

/// The store key of a row, after its [`window_prefix`].
fn row_key(mut prefix: Vec<u8>, key: &[u8], side: usize, seq: u64) -> Vec<u8> {
    prefix.extend_from_slice(&(key.len() as u32).to_be_bytes());
    prefix.extend_from_slice(key);
    prefix.push(side as u8);
    prefix.extend_from_slice(&seq.to_be_bytes());
    prefix
}

/// The join key and side of a row's store key.
fn split_row_key(bytes: &[u8]) -> Result<(&[u8], usize)> {
    let len = u32::from_be_bytes(bytes.get(12..16).ok_or_else(cut_short)?.try_into().expect("4"));
    let key = bytes.get(16..16 + len as usize).ok_or_else(cut_short)?;
    match bytes.get(16 + len as usize) {
        Some(side @ 0..=1) if bytes.len() == 25 + len as usize => Ok((key, *side as usize)),
        _ => Err(cut_short()),
    }
}

/// The last key of a [`window_prefix`]'s rows: no key is `u32::MAX` bytes long.
fn window_last(mut prefix: Vec<u8>) -> Vec<u8> {
    prefix.extend_from_slice(&[0xFF; 5]);
    prefix
}

spills_when_full!(WindowJoinOperator);

impl WindowJoinOperator {
    /// Whether the store has rows of the window ending at `end`.
    pub(super) fn has_stored(&self, end: i64) -> bool {
        self.spill
            .as_ref()
            .is_some_and(|s| s.own.stored.contains_key(&end))
    }

    /// The end of the first window with rows in the store.
    pub(super) fn first_stored(&self) -> Option<i64> {
        self.spill
            .as_ref()
            .and_then(|s| s.own.stored.keys().next().copied())
    }

    /// The key groups with rows of the window ending at `end` in the store,
    /// forgotten here (the window fires).
    pub(super) fn take_stored_groups(&mut self, end: i64) -> BTreeSet<u32> {
        (self.spill.as_mut())
            .and_then(|s| s.own.stored.remove(&end))
            .unwrap_or_default()
    }

    /// Takes a key group's rows of the window ending at `end` out of the
    /// store, each side's in key order.
    pub(super) fn take_stored(&self, group: u32, end: i64) -> Result<[Vec<Waiting>; 2]> {
        let mut rows: [Vec<Waiting>; 2] = Default::default();
        let Some(store) = self.spill.store() else {
            return Ok(rows);
        };
        let prefix = window_prefix(group, end);
        let entries = store.range(&prefix, &window_last(prefix.clone()), usize::MAX)?;
        for (key, row) in &entries {
            let (join_key, side) = split_row_key(key)?;
            rows[side].push((join_key.into(), row.as_ref().into()));
        }
        store.write([], entries.iter().map(|(k, _)| &k[..]))?;
        Ok(rows)
    }

    /// Writes every waiting row to the store and empties memory.
    pub(super) fn spill_all(&mut self) -> Result<()> {
        if self.spill.is_none() {
            return Ok(());
        }
        for (end, rows) in std::mem::take(&mut self.windows) {
            self.spill_window(end, rows)?;
        }
        if let Some(core) = self.spill.core_mut() {
            core.emptied();
        }
        weir_common::alloc::give_back_freed_memory();
        Ok(())
    }

    /// Writes one window's rows to the store, noting their key groups.
    pub(super) fn spill_window(&mut self, end: i64, rows: [Vec<Waiting>; 2]) -> Result<()> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        spill.core.open_store()?;
        // Incremental checkpoints: the rows no snapshot holds yet, from
        // where the last one stopped; memory's rows of the window after
        // this are all new.
        let saved = (self.saved.as_mut())
            .and_then(|s| s.remove(&end))
            .unwrap_or_default();
        for (side, rows) in rows.iter().enumerate() {
            for (n, chunk) in rows.chunks(WRITE_CHUNK).enumerate() {
                let parser = self.rows_of[side].parser();
                let data = self.rows_of[side].convert_rows(chunk.iter().map(|(_, r)| parser.parse(r)))?;
                let groups = super::super::row_key_groups(
                    &self.spec.keys[side],
                    &self.spec.inputs[side],
                    &data,
                    self.max_parallelism,
                )?;
                let spill = self.spill.as_mut().expect("spilling");
                let mut puts = Vec::with_capacity(chunk.len());
                for ((key, row), group) in chunk.iter().zip(groups.values()) {
                    spill.own.seq += 1;
                    spill.own.stored.entry(end).or_default().insert(*group);
                    puts.push((row_key(window_prefix(*group, end), key, side, spill.own.seq), row));
                }
                if let Some(flushed) = spill.core.flushed.as_mut() {
                    let first_new = saved[side].saturating_sub(n * WRITE_CHUNK);
                    puts.iter().skip(first_new).for_each(|(key, _)| flushed.push(key));
                }
                let store = spill.core.store.as_ref().expect("opened above");
                store.write(puts.iter().map(|(k, v)| (&k[..], &v[..])), [])?;
            }
        }
        Ok(())
    }

    /// A snapshot of spilled state: memory to the store, then the store,
    /// frozen now, as one run of state rows in key-group order, written by
    /// the snapshot's writer; and the watermark.
    pub(super) fn spilled_snapshot(&mut self) -> Result<OperatorSnapshot> {
        self.spill_all()?;
        let mut snapshot = OperatorSnapshot::with_watermark(self.watermark, None);
        let max_parallelism = self.max_parallelism;
        let spill = self.spill.as_mut().expect("has spilled");
        let spec = self.spec.clone();
        let converters = crate::join::row_converters(&spec.inputs)?;
        let decode = move |entries: &[Entry]| stored_rows(&spec, &converters, max_parallelism, entries);
        snapshot.deferred = whole_store(&mut spill.core, decode)?;
        Ok(snapshot)
    }
}

impl WindowJoinOperator {
    /// An incremental snapshot of spilled state, and the watermark: a base
    /// (`full`: [`WindowJoinOperator::spilled_snapshot`]), or a merging
    /// delta of the rows that joined their windows since the last
    /// snapshot: memory's new rows, and those written to the store since,
    /// read from the store frozen now by the snapshot's writer (a row of a
    /// window that fired since is gone from it, as it is from the state).
    pub(super) fn spilled_delta(&mut self, full: bool) -> Result<OperatorSnapshot> {
        if full {
            let snapshot = self.spilled_snapshot()?;
            // Memory is empty: whatever comes next is new.
            self.saved = Some(Default::default());
            self.spill.forget_spilled_changes();
            return Ok(snapshot);
        }
        let mut snapshot = OperatorSnapshot::with_watermark(self.watermark, None);
        let memory: Vec<RecordBatch> = self.delta(false)?.into_iter().collect();
        let max_parallelism = self.max_parallelism;
        let spec = self.spec.clone();
        let converters = crate::join::row_converters(&spec.inputs)?;
        let spill = self.spill.as_mut().expect("has spilled");
        let Some(of) = DeltaOf::take(&mut spill.core, memory, |_: &[u8]| false)? else {
            return Ok(snapshot);
        };
        let read_back = move |frozen: &Frozen, keys: &[&[u8]]| {
            let (found, _fired) = frozen.get_each(keys)?;
            Ok(stored_rows(&spec, &converters, max_parallelism, &found)?
                .into_iter()
                .collect())
        };
        snapshot.deferred = vec![store_delta(of, read_back, concat_by_key_group)];
        Ok(snapshot)
    }
}

/// The state rows of store entries, sorted by key group; `None` without rows.
fn stored_rows(
    spec: &WindowJoin,
    converters: &[RowConverter; 2],
    max_parallelism: usize,
    entries: &[Entry],
) -> Result<Option<RecordBatch>> {
    let parsers = [converters[0].parser(), converters[1].parser()];
    let mut sides: [Vec<arrow::row::Row>; 2] = Default::default();
    for (key, row) in entries {
        let (_, side) = split_row_key(key)?;
        sides[side].push(parsers[side].parse(row));
    }
    let schema = spec.state_schema();
    let mut batches = Vec::new();
    for (side, rows) in sides.into_iter().enumerate() {
        if let Some(columns) = side_columns(spec, &converters[side], max_parallelism, side, rows)? {
            batches.push(state_rows(&schema, columns)?);
        }
    }
    concat_by_key_group(batches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_windows_rows_are_together_under_their_key_group_by_key_and_split_back() {
        let row = |group, end, key: &[u8], side, seq| row_key(window_prefix(group, end), key, side, seq);
        let keys = [
            row(3, -10, b"z", 0, 9),
            row(3, 5, b"a", 1, 2),
            row(3, 5, b"b", 0, 1),
            row(3, 5, b"b", 1, 0),
            row(3, 6, b"", 0, 3),
            row(4, -10, b"a", 0, 4),
        ];
        assert!(
            keys.windows(2).all(|w| w[0] < w[1]),
            "groups, windows, keys, sides"
        );
        let (first, last) = (window_prefix(3, 5), window_last(window_prefix(3, 5)));
        let inside: Vec<bool> = keys.iter().map(|k| (&first..=&last).contains(&k)).collect();
        assert_eq!(inside, [false, true, true, true, false, false]);
        assert_eq!(split_row_key(&keys[1]).unwrap(), (&b"a"[..], 1));
        assert_eq!(split_row_key(&keys[4]).unwrap(), (&b""[..], 0));
        assert!(split_row_key(&keys[1][..20]).is_err());
    }
}
