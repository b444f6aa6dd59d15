//! The spilling state backend of session windows: sessions beyond the memory budget in the key-value store.
//!
//! Memory keeps the sessions of the keys that had rows since the last
//! spill. When they pass a quarter of the subtask's budget
//! ([`weir_state::memory_guess::spill_threshold`]) every session goes to
//! the store ([`weir_state::store`]) and memory starts empty again:
//!
//! ```text
//!  key group | key                      ->  per session: its length, then start, end, states
//!  FF FF FF FF | end | key group | key  ->  (nothing): the index of ends a watermark fires by
//! ```
//!
//! A key's sessions are one entry, in Arrow's row format, so a key is in
//! memory or in the store, never in both: a batch's keys that memory lacks
//! are read from the store first (and removed from it), and rows merge into
//! their sessions as on the heap. A watermark reads the index up to the
//! ends it closes, a chunk at a time, reads those keys into memory and
//! fires memory's sessions up to the chunk's last end: sessions fire in
//! order of end, as on the heap.
//!
//! Checkpoints stay state files: a snapshot writes memory to the store and
//! the store, frozen, as one run of the state rows the heap writes, read by
//! the snapshot's writer ([`weir_state::deferred`]); with incremental
//! checkpoints, a delta of the keys changed in memory and of those written
//! to the store since the last snapshot (a key read back from the store
//! counts as changed: its entry is gone). A restore reads a key's stored
//! sessions before a chunk adds to them, and spills when full.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BinaryArray, BinaryBuilder, RecordBatch, UInt32Array};
use arrow::datatypes::{SchemaRef, UInt32Type};
use arrow::row::{RowConverter, SortField};

use crate::window::session::{SessionAggregate, SessionOperator};
use crate::{Error, Result};
use weir_plan::window::TimeShift;
use weir_runtime::operator::{OperatorSnapshot, SpillSettings};
use weir_state::deferred::{keyed_base, keyed_delta, whole_store};
use weir_state::entry::{
    ValueReader, ValueWriter, entry_key, index_key, index_range, is_index, read_back, split_entry_key,
    split_index_key,
};
use weir_state::incremental::ReplacedPart;
use weir_state::snapshot::{key_groups_of_bytes, state_rows};
use weir_state::spilled::{SpillCore, SpillSlot, Spilled};
use weir_state::store::{Entry, SWEEP, WRITE_CHUNK};

/// More than any zone's offset from UTC changes by, in milliseconds.
const DAY: i64 = 86_400_000;

/// A session window subtask's own spilled state (beside its
/// [`SpillCore`], whose flushed keys are the entries of the keys changed in
/// memory and written to the store since the last snapshot).
pub(super) struct SessionSpill {
    /// Its entries to state rows and back.
    codec: Codec,
    /// The end the next scan of the index starts at: every session ending
    /// before it fired (a session stored later with an earlier end moves it
    /// back). Without it each scan would walk the removed index entries of
    /// every session read back so far.
    scan_from: i64,
}

impl SessionSpill {
    /// The spill of a session window subtask of `spec` with these settings
    /// (an error if its states have no row format), noting what its
    /// `incremental` snapshots read back.
    pub(super) fn new(
        settings: SpillSettings,
        spec: &SessionAggregate,
        incremental: bool,
    ) -> Result<Spilled<Self>> {
        let own = SessionSpill {
            codec: Codec::new(spec)?,
            scan_from: i64::MIN,
        };
        // At least a new key's session: its key, bounds and a state.
        Ok(Spilled::new(SpillCore::new(settings, incremental, 96), own))
    }
}

/// A key's sessions as a store value: each one's row, after its length.
fn encode_sessions<'a>(rows: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut value = ValueWriter::default();
    rows.for_each(|row| {
        value.bytes(row);
    });
    value.0
}

/// The session rows of an [`encode_sessions`] value.
fn split_sessions(bytes: &[u8]) -> Result<Vec<&[u8]>> {
    let (mut value, mut rows) = (ValueReader(bytes), Vec::new());
    while !value.is_done() {
        rows.push(value.bytes()?);
    }
    Ok(rows)
}

/// Store entries to state rows (`_key_group`, `_start`, `_end`, keys,
/// states) and back: a key's bytes are the operator's, a session's row
/// holds the columns after `_key_group` but the keys.
struct Codec {
    schema: SchemaRef,
    key_count: usize,
    keys: RowConverter,
    sessions: RowConverter,
}

impl Codec {
    fn new(spec: &SessionAggregate) -> Result<Codec> {
        let schema = spec.state_schema()?;
        let key_count = spec.key_schema.fields().len();
        let sort = |i: usize| SortField::new(schema.field(i).data_type().clone());
        let keys = RowConverter::new((3..3 + key_count).map(sort).collect())?;
        let fields = [1, 2].into_iter().chain(3 + key_count..schema.fields().len());
        let sessions = RowConverter::new(fields.map(sort).collect())?;
        Ok(Codec {
            schema,
            key_count,
            keys,
            sessions,
        })
    }

    /// The session rows of state `columns` (cast to the state schema).
    fn session_rows(&self, columns: &[ArrayRef]) -> Result<arrow::row::Rows> {
        let picked: Vec<ArrayRef> = [1, 2]
            .into_iter()
            .chain(3 + self.key_count..columns.len())
            .map(|i| {
                Ok(arrow::compute::cast(
                    &columns[i],
                    self.schema.field(i).data_type(),
                )?)
            })
            .collect::<Result<_>>()?;
        Ok(self.sessions.convert_columns(&picked)?)
    }

    /// The state rows of store entries (index entries left out), in their
    /// order; `None` without sessions.
    fn decode(&self, entries: &[Entry]) -> Result<Option<RecordBatch>> {
        Ok(self.decode_keyed(entries)?.map(|(rows, _)| rows))
    }

    /// [`Codec::decode`] as a replacing file's part, each row keyed by its
    /// session key.
    fn decode_parts(&self, entries: &[Entry]) -> Result<Vec<ReplacedPart>> {
        let parts = self
            .decode_keyed(entries)?
            .map(|(rows, keys)| (rows, keys, false));
        Ok(parts.into_iter().collect())
    }

    /// [`Codec::decode`], and the key bytes of each row.
    fn decode_keyed(&self, entries: &[Entry]) -> Result<Option<(RecordBatch, BinaryArray)>> {
        let (mut groups, mut keys, mut sessions) = (Vec::new(), Vec::new(), Vec::new());
        let mut key_bytes = BinaryBuilder::new();
        let (key_parser, session_parser) = (self.keys.parser(), self.sessions.parser());
        for (key, value) in entries {
            if is_index(key) {
                continue;
            }
            let (group, key) = split_entry_key(key)?;
            for row in split_sessions(value)? {
                groups.push(group);
                keys.push(key_parser.parse(key));
                key_bytes.append_value(key);
                sessions.push(session_parser.parse(row));
            }
        }
        if groups.is_empty() {
            return Ok(None);
        }
        let mut stored = self.sessions.convert_rows(sessions)?.into_iter();
        let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(groups))];
        columns.extend(stored.by_ref().take(2));
        if self.key_count > 0 {
            columns.extend(self.keys.convert_rows(keys)?);
        }
        columns.extend(stored);
        Ok(Some((state_rows(&self.schema, columns)?, key_bytes.finish())))
    }
}

spills_when_full!(SessionOperator);

impl SessionOperator {
    /// Bytes its sessions take in memory, about.
    fn memory_size(&self) -> usize {
        let sessions: usize = (self.sessions.iter().flatten())
            .map(|s| s.key.len() + s.accumulators.iter().map(|a| a.size()).sum::<usize>())
            .sum();
        let keys: usize = (self.by_key.iter())
            .map(|(k, ids)| k.len() + 8 * ids.capacity() + 48)
            .sum();
        let slots = self.sessions.capacity() * std::mem::size_of::<Option<super::Session>>();
        sessions + keys + slots + 40 * self.by_end.len()
    }

    /// Reads the store's sessions of those of `keys` memory lacks into
    /// memory, removing them from the store: before rows are added to them.
    pub(super) fn load_stored(&mut self, keys: &[&[u8]]) -> Result<()> {
        let Some(store) = self.spill.store() else {
            return Ok(());
        };
        let in_memory = |k: &[u8]| self.by_key.contains_key(k);
        let groups = |chunk: &[&[u8]]| -> Result<Vec<u32>> {
            Ok(key_groups_of_bytes(&self.converter, chunk, self.max_parallelism)?
                .values()
                .to_vec())
        };
        let found = read_back(store, keys, in_memory, groups)?;
        let entries: Vec<Entry> = found.into_iter().map(|(_, k, v)| (k.into(), v)).collect();
        self.take_entries(&entries)
    }

    /// Opens the sessions of store entries in memory and removes the
    /// entries and their index entries from the store.
    fn take_entries(&mut self, entries: &[Entry]) -> Result<()> {
        let Some(spill) = &self.spill else {
            return Ok(());
        };
        let Some(rows) = spill.own.codec.decode(entries)? else {
            return Ok(());
        };
        let ids = self.open_sessions(&rows)?;
        // Their entries go: a delta reads them from memory from now on.
        for (key, _) in entries.iter().filter(|(k, _)| !is_index(k)) {
            self.mark_changed(split_entry_key(key)?.1);
        }
        let groups = rows.column(0).as_primitive::<UInt32Type>();
        let mut removes: Vec<Vec<u8>> = entries.iter().map(|(k, _)| k.to_vec()).collect();
        for (id, group) in ids.iter().zip(groups.values()) {
            let session = self.sessions[*id].as_ref().expect("opened above");
            removes.push(index_key(session.end, &entry_key(*group, &session.key)));
        }
        let store = self.spill.store().expect("read above");
        store.write([], removes.iter().map(|k| &k[..]))
    }

    /// The latest (local) end a session the watermark closes may have: a
    /// zone's offset changes, by less than a day.
    fn latest_closed_end(&self) -> i64 {
        let w = self.watermark.saturating_add(1);
        match self.spec.shift {
            TimeShift::Zone(_) => self.spec.shift.to_local(w).saturating_add(DAY),
            _ => self.spec.shift.to_local(w),
        }
    }

    /// Reads into memory the stored keys of the next chunk of sessions the
    /// watermark closes, in order of end. Gives how many sessions it read
    /// and, when the chunk is full, its last end (more may follow).
    pub(super) fn load_due(&mut self) -> Result<(usize, Option<i64>)> {
        let (Some(spill), Some(store)) = (self.spill.as_ref(), self.spill.store()) else {
            return Ok((0, None));
        };
        let latest = self.latest_closed_end();
        let (from, to) = index_range(spill.own.scan_from, latest);
        let index = store.range(&from, &to, SWEEP)?;
        let (mut last, mut open) = (None, None);
        let mut wanted = Vec::new();
        for (key, _) in &index {
            let (end, entry) = split_index_key(key)?;
            if !self.fired(end) {
                open = Some(end);
                break;
            }
            last = Some(end);
            wanted.push(entry.to_vec());
        }
        let full = wanted.len() == SWEEP;
        // Every session before the first still open, or up to the latest
        // end, fired; a full chunk's last end may have more.
        let scan_from = match (full, open) {
            (true, _) => last.expect("a full chunk"),
            (false, Some(end)) => end,
            (false, None) => latest,
        };
        wanted.sort_unstable();
        wanted.dedup();
        let mut found = Vec::with_capacity(wanted.len());
        for entry in wanted {
            let value = store.get(&entry)?.ok_or_else(|| {
                Error::State("a session window's end index names a key the store lacks".into())
            })?;
            found.push((entry.into(), value));
        }
        self.spill.as_mut().expect("spilling").own.scan_from = scan_from;
        let before = self.by_end.len();
        self.take_entries(&found)?;
        Ok((self.by_end.len() - before, last.filter(|_| full)))
    }

    /// Writes every session to the store, a key's as one entry indexed by
    /// their ends, and empties memory.
    pub(super) fn spill_all(&mut self) -> Result<()> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        // Bloom filters: most keys of a batch are often in neither.
        spill.core.open_store()?;
        self.note_flushed()?;
        let by_key: Vec<(Box<[u8]>, Vec<usize>)> = self.by_key.drain().collect();
        let mut start = 0;
        while start < by_key.len() {
            let (mut end, mut sessions) = (start, 0);
            while end < by_key.len() && (sessions < WRITE_CHUNK || end == start) {
                sessions += by_key[end].1.len();
                end += 1;
            }
            self.spill_keys(&by_key[start..end])?;
            start = end;
        }
        self.sessions.clear();
        self.free.clear();
        self.by_end.clear();
        if let Some(core) = self.spill.core_mut() {
            core.emptied();
        }
        weir_common::alloc::give_back_freed_memory();
        Ok(())
    }

    /// Notes the keys changed in memory, about to be written to the store
    /// (or, without sessions, gone from it), for the next incremental
    /// snapshot to read back.
    fn note_flushed(&mut self) -> Result<()> {
        let Some(changed) = self.changed.as_mut().map(std::mem::take) else {
            return Ok(());
        };
        let changed: Vec<Box<[u8]>> = changed.into_iter().collect();
        for chunk in changed.chunks(WRITE_CHUNK) {
            let keys: Vec<&[u8]> = chunk.iter().map(|k| &k[..]).collect();
            let groups = self.key_groups_of(&keys)?;
            if let Some(flushed) = self.spill.as_mut().and_then(|s| s.core.flushed.as_mut()) {
                (keys.iter().zip(groups.values())).for_each(|(k, g)| flushed.push(&entry_key(*g, k)));
            }
        }
        Ok(())
    }

    /// Writes the sessions of `keys` to the store (their accumulators are
    /// read out: the sessions are dropped after).
    fn spill_keys(&mut self, keys: &[(Box<[u8]>, Vec<usize>)]) -> Result<()> {
        let ids: Vec<usize> = keys.iter().flat_map(|(_, ids)| ids.iter().copied()).collect();
        let columns = self.state_columns(&ids, false)?;
        let spill = self.spill.as_mut().expect("spilling");
        let rows = spill.own.codec.session_rows(&columns)?;
        let groups = columns[0].as_primitive::<UInt32Type>();
        let (mut puts, mut row) = (Vec::with_capacity(2 * ids.len()), 0);
        for (key, key_ids) in keys {
            let entry = entry_key(groups.value(row), key);
            for id in key_ids {
                let end = self.sessions[*id].as_ref().expect("open session").end;
                spill.own.scan_from = spill.own.scan_from.min(end);
                puts.push((index_key(end, &entry), Vec::new()));
            }
            let value = encode_sessions((row..row + key_ids.len()).map(|r| rows.row(r).data()));
            puts.push((entry, value));
            row += key_ids.len();
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
        let codec = Codec::new(&self.spec)?;
        let spill = self.spill.as_mut().expect("has spilled");
        let decode = move |entries: &[Entry]| codec.decode(entries);
        snapshot.deferred = whole_store(&mut spill.core, decode)?;
        Ok(snapshot)
    }

    /// An incremental snapshot of spilled state, and the watermark: a base
    /// (`full`: memory to the store, then the store, frozen now, as one
    /// run keyed by session key), or a replacing delta of the keys changed
    /// in memory and of those written to the store since the last
    /// snapshot, read back from the store frozen now (a key it no longer
    /// has is deleted), both read by the snapshot's writer.
    pub(super) fn spilled_delta(&mut self, full: bool) -> Result<OperatorSnapshot> {
        let mut snapshot = OperatorSnapshot::with_watermark(self.watermark, None);
        let (codec, schema) = (Codec::new(&self.spec)?, self.state_schema()?);
        let decode = move |entries: &[Entry]| codec.decode_parts(entries);
        if full {
            self.spill_all()?;
            let spill = self.spill.as_mut().expect("has spilled");
            snapshot.deferred = keyed_base(&mut spill.core, schema, decode)?;
            return Ok(snapshot);
        }
        let changed: Vec<Box<[u8]>> = (self.changed.as_mut())
            .map(std::mem::take)
            .unwrap_or_default()
            .into_iter()
            .collect();
        let parts = self.key_parts(&changed)?;
        let changed: HashSet<Box<[u8]>> = changed.into_iter().collect();
        let in_memory = move |key: &[u8]| changed.contains(key);
        let spill = self.spill.as_mut().expect("has spilled");
        let delta = keyed_delta(&mut spill.core, (parts, in_memory), schema, decode)?;
        snapshot.deferred = delta.into_iter().collect();
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_sessions_come_back_from_their_value() {
        let value = encode_sessions([&b"one"[..], b"", b"three"].into_iter());
        assert_eq!(split_sessions(&value).unwrap(), [&b"one"[..], b"", b"three"]);
        assert!(split_sessions(&value[..value.len() - 1]).is_err());
        assert!(split_sessions(&[]).unwrap().is_empty());
    }
}
