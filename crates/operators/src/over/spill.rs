//! The spilling state backend of OVER aggregations: partitions beyond the memory budget in the key-value store.
//!
//! Memory keeps the partitions that had rows since the last spill. When
//! they pass a quarter of the subtask's budget
//! ([`weir_state::memory_guess::spill_threshold`]) every partition goes
//! to the store ([`weir_state::entry`]) and memory starts empty again:
//!
//! ```text
//!  key group | partition key          ->  last released time, accumulator states,
//!                                          a bounded frame's rows, rows waiting for the watermark
//!  FF FF FF FF | time | key group | key ->  (nothing): the partition's first waiting row's time
//! ```
//!
//! A batch's partitions that memory lacks are read from the store first,
//! so a row is late, enters and leaves the frame as on the heap. Their
//! entries stay in the store, stale, until the next spill writes over
//! them: a partition leaves memory only by a spill, and memory is looked at
//! first (removing them cost a write each, 15% of the job below in
//! docs/state.md). Their index entries are removed, so a watermark never
//! reads a partition memory holds.
//! A watermark reads the index up to its time, a chunk at a time, reads
//! those partitions into memory and releases memory's waiting rows up to
//! the chunk's last time: rows enter in order of time, as on the heap.
//! A partition's frame and waiting rows are one entry, so one partition
//! must fit in memory; many partitions need not.
//!
//! Checkpoints stay state files: a snapshot writes memory to the store and
//! the store, frozen, as one run of the state rows the heap writes, read by
//! the snapshot's writer ([`weir_state::deferred`]); with incremental
//! checkpoints, a delta of the partitions changed in memory and of those
//! written to the store since the last snapshot, read back from it.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Schema};
use arrow::row::{RowConverter, SortField};

use crate::over::state::{
    ACCUMULATORS, FRAME_ROW, KeyedPart, Part, WAITING_ROW, cast_all, replaced_parts, rows_of_parts,
};
use crate::over::{OverAggregate, OverOperator, converter};
use crate::{Error, Result};
use weir_runtime::operator::{OperatorSnapshot, SpillSettings};
use weir_state::deferred::{keyed_base, keyed_delta, whole_store};
use weir_state::entry::{
    ValueReader, ValueWriter, entry_key, index_key, index_range, is_index, read_back, split_entry_key,
    split_index_key,
};
use weir_state::incremental::ReplacedPart;
use weir_state::keyed_rows::columns_of;
use weir_state::snapshot::key_groups_of_bytes;
use weir_state::spilled::{SpillCore, SpillSlot, Spilled};
use weir_state::store::{Entry, SWEEP, WRITE_CHUNK};

/// An OVER aggregation subtask's own spilled state (beside its
/// [`SpillCore`], whose flushed keys are the entries of the partitions
/// changed in memory and written to the store since the last snapshot).
pub(super) struct OverSpill {
    codec: Codec,
    /// The time the next scan of the index starts at: every stored row
    /// before it was released (a partition stored later with an earlier
    /// waiting row moves it back). Without it each scan would walk the
    /// removed index entries of every partition read back so far.
    scan_from: i64,
}

impl OverSpill {
    /// The spill of an OVER subtask of `spec` (an error if its states
    /// have no row format).
    pub(super) fn new(
        settings: SpillSettings,
        spec: &Arc<OverAggregate>,
        max_parallelism: usize,
        incremental: bool,
    ) -> Result<Spilled<Self>> {
        let own = OverSpill {
            codec: Codec::new(spec, max_parallelism)?,
            scan_from: i64::MIN,
        };
        // At least a row waiting: its bytes and the map's slot.
        Ok(Spilled::new(SpillCore::new(settings, incremental, 64), own))
    }
}

/// One stored partition, as its entry holds it.
struct Stored<'a> {
    group: u32,
    key: &'a [u8],
    last: i64,
    states: &'a [u8],
    frame: Vec<(i64, &'a [u8])>,
    waiting: Vec<(i64, &'a [u8])>,
}

/// A partition's entry value: last time, states' row, frame rows, waiting rows.
fn encode_partition<'a>(
    last: i64,
    states: &[u8],
    frame: impl ExactSizeIterator<Item = (i64, &'a [u8])>,
    waiting: &[(i64, &[u8])],
) -> Vec<u8> {
    let mut value = ValueWriter::default();
    value.time(last).bytes(states).count(frame.len());
    for (t, row) in frame {
        value.time(t).bytes(row);
    }
    value.count(waiting.len());
    for (t, row) in waiting {
        value.time(*t).bytes(row);
    }
    value.0
}

/// The partition of an entry ([`encode_partition`]).
fn decode_partition<'a>(key: &'a [u8], value: &'a [u8]) -> Result<Stored<'a>> {
    let (group, key) = split_entry_key(key)?;
    let mut value = ValueReader(value);
    let (last, states) = (value.time()?, value.bytes()?);
    let timed = |value: &mut ValueReader<'a>| -> Result<Vec<(i64, &'a [u8])>> {
        (0..value.count()?)
            .map(|_| Ok((value.time()?, value.bytes()?)))
            .collect()
    };
    let frame = timed(&mut value)?;
    let waiting = timed(&mut value)?;
    Ok(Stored {
        group,
        key,
        last,
        states,
        frame,
        waiting,
    })
}

/// Partitions to entries and back: the operator's row formats, and one of
/// every accumulator's state fields.
struct Codec {
    spec: Arc<OverAggregate>,
    keys: RowConverter,
    args: RowConverter,
    rows: RowConverter,
    states: RowConverter,
    state_types: Vec<DataType>,
    max_parallelism: usize,
}

impl Codec {
    fn new(spec: &Arc<OverAggregate>, max_parallelism: usize) -> Result<Codec> {
        let state_types: Vec<DataType> = (spec.accumulators()?.iter())
            .flat_map(|a| a.state_fields())
            .map(|f| f.data_type().clone())
            .collect();
        let input = spec.input.fields().iter();
        Ok(Codec {
            keys: converter(&spec.partition, &spec.input)?,
            args: converter(&spec.arguments(), &spec.input)?,
            rows: RowConverter::new(input.map(|f| SortField::new(f.data_type().clone())).collect())?,
            states: RowConverter::new(state_types.iter().map(|t| SortField::new(t.clone())).collect())?,
            state_types,
            max_parallelism,
            spec: spec.clone(),
        })
    }

    /// Each partition key's key group.
    fn key_groups(&self, keys: &[&[u8]]) -> Result<Vec<u32>> {
        match self.spec.partition.is_empty() {
            true => Ok(vec![0; keys.len()]),
            false => Ok(key_groups_of_bytes(&self.keys, keys, self.max_parallelism)?
                .values()
                .to_vec()),
        }
    }

    /// The accumulators' states (all of them, one after another) as rows.
    fn state_rows(&self, states: Vec<ArrayRef>) -> Result<arrow::row::Rows> {
        let types = self
            .state_types
            .iter()
            .map(|t| arrow::datatypes::Field::new("", t.clone(), true));
        let states = cast_all(states, &Schema::new(types.collect::<Vec<_>>()))?;
        Ok(self.states.convert_columns(&states)?)
    }

    /// Partition key columns (none when keyless).
    fn key_columns<'a>(&self, keys: impl Iterator<Item = &'a [u8]>) -> Result<Vec<ArrayRef>> {
        match self.spec.partition.is_empty() {
            true => Ok(Vec::new()),
            false => columns_of(&self.keys, keys),
        }
    }

    /// The state rows (as the heap writes them) of store entries, index
    /// entries left out; `None` without partitions.
    fn decode(&self, entries: &[Entry]) -> Result<Option<RecordBatch>> {
        let stored = stored_of(entries)?;
        let parts = self.parts(&stored)?.into_iter().map(|(part, _)| part).collect();
        rows_of_parts(&self.spec, parts, self.max_parallelism)
    }

    /// [`Codec::decode`] as a replacing file's parts, each row keyed by its
    /// partition key.
    fn decode_parts(&self, entries: &[Entry]) -> Result<Vec<ReplacedPart>> {
        let stored = stored_of(entries)?;
        replaced_parts(&self.spec, self.parts(&stored)?, self.max_parallelism)
    }

    /// The state parts of stored partitions, with the partition key of each
    /// row; none without partitions.
    fn parts<'a>(&self, stored: &[Stored<'a>]) -> Result<Vec<KeyedPart<'a>>> {
        if stored.is_empty() {
            return Ok(Vec::new());
        }
        let mut parts = vec![(
            Part {
                role: ACCUMULATORS,
                times: stored
                    .iter()
                    .map(|s| (s.last != i64::MIN).then_some(s.last))
                    .collect(),
                keys: self.key_columns(stored.iter().map(|s| s.key))?,
                input: None,
                args: None,
                states: Some(columns_of(&self.states, stored.iter().map(|s| s.states))?),
            },
            stored.iter().map(|s| s.key).collect(),
        )];
        let framed: Vec<(&[u8], i64, &[u8])> = (stored.iter())
            .flat_map(|s| s.frame.iter().map(|(t, r)| (s.key, *t, *r)))
            .collect();
        let waiting: Vec<(&[u8], i64, &[u8])> = (stored.iter())
            .flat_map(|s| s.waiting.iter().map(|(t, r)| (s.key, *t, *r)))
            .collect();
        for (role, rows) in [(FRAME_ROW, framed), (WAITING_ROW, waiting)] {
            if rows.is_empty() {
                continue;
            }
            let values = match role {
                FRAME_ROW => &self.args,
                _ => &self.rows,
            };
            let values = columns_of(values, rows.iter().map(|(_, _, r)| *r))?;
            let (args, input) = match role {
                FRAME_ROW => (Some(values), None),
                _ => (None, Some(values)),
            };
            let part = Part {
                role,
                times: rows.iter().map(|(_, t, _)| Some(*t)).collect(),
                keys: self.key_columns(rows.iter().map(|(k, _, _)| *k))?,
                input,
                args,
                states: None,
            };
            parts.push((part, rows.iter().map(|(k, _, _)| *k).collect()));
        }
        Ok(parts)
    }
}

/// The partitions of store entries, index entries left out.
fn stored_of(entries: &[Entry]) -> Result<Vec<Stored<'_>>> {
    (entries.iter())
        .filter(|(k, _)| !is_index(k))
        .map(|(k, v)| decode_partition(k, v))
        .collect()
}

spills_when_full!(OverOperator);

impl OverOperator {
    /// Bytes its partitions take in memory, about.
    fn memory_size(&self) -> usize {
        let keys: usize = self.keys.iter().map(|k| 2 * k.len() + 72).sum();
        let frames: usize = (self.frames.iter())
            .map(|f| 24 * f.capacity() + f.iter().map(|(_, r)| r.len()).sum::<usize>())
            .sum();
        let waiting: usize = self.pending.keys().map(|(_, r, _)| r.len() + 64).sum();
        let accumulators: usize = self.accumulators.iter().map(|a| a.size()).sum();
        keys + frames + waiting + accumulators + 8 * self.last.capacity()
    }

    /// Reads the store's partitions of those of `keys` memory lacks into
    /// memory: before rows enter them.
    pub(super) fn load_stored(&mut self, keys: &[&[u8]]) -> Result<()> {
        let (Some(spill), Some(store)) = (self.spill.as_ref(), self.spill.store()) else {
            return Ok(());
        };
        let in_memory = |k: &[u8]| self.groups.contains_key(k);
        let found = read_back(store, keys, in_memory, |chunk| spill.own.codec.key_groups(chunk))?;
        let entries: Vec<Entry> = found.into_iter().map(|(_, k, v)| (k.into(), v)).collect();
        self.take_entries(&entries)
    }

    /// Adds the partitions of store entries to memory and removes their
    /// index entries from the store (the entries are written over at the
    /// next spill).
    fn take_entries(&mut self, entries: &[Entry]) -> Result<()> {
        let Some(spill) = &self.spill else {
            return Ok(());
        };
        let stored = (entries.iter())
            .map(|(k, v)| decode_partition(k, v))
            .collect::<Result<Vec<_>>>()?;
        if stored.is_empty() {
            return Ok(());
        }
        let states = columns_of(&spill.own.codec.states, stored.iter().map(|s| s.states))?;
        let mut removes: Vec<Vec<u8>> = Vec::new();
        let groups: Vec<usize> = stored.iter().map(|s| self.add_group(s.key)).collect();
        let (total, mut offset) = (self.keys.len(), 0);
        for acc in &mut self.accumulators {
            let n = acc.state_fields().len();
            acc.restore(&states[offset..offset + n], &groups, total)?;
            offset += n;
        }
        for (s, g) in stored.iter().zip(groups) {
            self.last[g] = s.last;
            self.frames[g].extend(s.frame.iter().map(|(t, r)| (*t, Box::from(*r))));
            for (t, row) in &s.waiting {
                self.seq += 1;
                self.pending.insert((*t, Box::from(*row), self.seq), g);
            }
            if let Some((first, _)) = s.waiting.first() {
                removes.push(index_key(*first, &entry_key(s.group, s.key)));
            }
        }
        let store = self.spill.store().expect("read above");
        store.write([], removes.iter().map(|k| &k[..]))
    }

    /// Reads into memory the stored partitions of the next chunk of the
    /// index up to the watermark. Gives how many it read and, when the
    /// chunk is full, its last time (more may follow).
    pub(super) fn load_due(&mut self) -> Result<(usize, Option<i64>)> {
        let (Some(spill), Some(store)) = (self.spill.as_ref(), self.spill.store()) else {
            return Ok((0, None));
        };
        let (from, to) = index_range(spill.own.scan_from, self.watermark);
        let index = store.range(&from, &to, SWEEP)?;
        let full = index.len() == SWEEP;
        let (mut last, mut wanted) = (None, Vec::with_capacity(index.len()));
        for (key, _) in &index {
            let (time, entry) = split_index_key(key)?;
            last = Some(time);
            wanted.push(entry.to_vec());
        }
        wanted.sort_unstable();
        wanted.dedup();
        let mut found = Vec::with_capacity(wanted.len());
        for entry in wanted {
            let value = store.get(&entry)?.ok_or_else(|| {
                Error::State("an OVER aggregation's index names a partition the store lacks".into())
            })?;
            found.push((entry.into(), value));
        }
        let scan_from = match full {
            true => last.expect("a full chunk"),
            false => self.watermark,
        };
        self.spill.as_mut().expect("spilling").own.scan_from = scan_from;
        self.take_entries(&found)?;
        Ok((found.len(), last.filter(|_| full)))
    }

    /// Writes every partition to the store, indexed by its first waiting
    /// row's time, and empties memory.
    pub(super) fn spill_all(&mut self) -> Result<()> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        spill.core.open_store()?;
        // Incremental checkpoints: the changed groups' entries, for the
        // next delta to read back (groups are numbered afresh after).
        let changed = self.changed.as_mut().map(std::mem::take).unwrap_or_default();
        let mut waiting: Vec<Vec<(i64, &[u8])>> = vec![Vec::new(); self.keys.len()];
        for ((t, row, _), g) in &self.pending {
            waiting[*g].push((*t, row));
        }
        for start in (0..self.keys.len()).step_by(WRITE_CHUNK) {
            let ids: Vec<usize> = (start..self.keys.len().min(start + WRITE_CHUNK)).collect();
            let mut states = Vec::new();
            for acc in &self.accumulators {
                states.extend(acc.state(&ids)?);
            }
            let states = spill.own.codec.state_rows(states)?;
            let keys: Vec<&[u8]> = ids.iter().map(|g| &self.keys[*g][..]).collect();
            let key_groups = spill.own.codec.key_groups(&keys)?;
            let mut puts = Vec::with_capacity(2 * ids.len());
            for (i, g) in ids.iter().enumerate() {
                let entry = entry_key(key_groups[i], keys[i]);
                if let (true, Some(flushed)) = (changed.contains(g), spill.core.flushed.as_mut()) {
                    flushed.push(&entry);
                }
                if let Some((first, _)) = waiting[*g].first() {
                    spill.own.scan_from = spill.own.scan_from.min(*first);
                    puts.push((index_key(*first, &entry), Vec::new()));
                }
                let frame = self.frames[*g].iter().map(|(t, r)| (*t, &r[..]));
                let value = encode_partition(self.last[*g], states.row(i).data(), frame, &waiting[*g]);
                puts.push((entry, value));
            }
            let store = spill.core.store.as_ref().expect("opened above");
            store.write(puts.iter().map(|(k, v)| (&k[..], &v[..])), [])?;
        }
        drop(waiting);
        self.groups.clear();
        self.keys.clear();
        self.frames.clear();
        self.last.clear();
        self.pending.clear();
        self.accumulators = self.spec.accumulators()?;
        if let Some(core) = self.spill.core_mut() {
            core.emptied();
        }
        weir_common::alloc::give_back_freed_memory();
        Ok(())
    }

    /// A snapshot of spilled state: memory to the store, then the store,
    /// frozen now, as one run of state rows in key-group order, written by
    /// the snapshot's writer; and the watermark.
    pub(super) fn spilled_snapshot(&mut self) -> Result<OperatorSnapshot> {
        self.spill_all()?;
        let mut snapshot = OperatorSnapshot::with_watermark(self.watermark, None);
        let codec = Codec::new(&self.spec, self.max_parallelism)?;
        let spill = self.spill.as_mut().expect("has spilled");
        let decode = move |entries: &[Entry]| codec.decode(entries);
        snapshot.deferred = whole_store(&mut spill.core, decode)?;
        Ok(snapshot)
    }

    /// An incremental snapshot of spilled state, and the watermark: a base
    /// (`full`: memory to the store, then the store, frozen now, as one run
    /// keyed by partition), or a replacing delta of the partitions changed
    /// in memory and of those written to the store since the last snapshot,
    /// read back from the store frozen now; both read by the snapshot's
    /// writer. Partitions never go, and a read-back one's entry stays in
    /// the store until a spill writes over it.
    pub(super) fn spilled_delta(&mut self, full: bool) -> Result<OperatorSnapshot> {
        let mut snapshot = OperatorSnapshot::with_watermark(self.watermark, None);
        let codec = Codec::new(&self.spec, self.max_parallelism)?;
        let decode = move |entries: &[Entry]| codec.decode_parts(entries);
        let schema = super::state::schema(&self.spec)?;
        if full {
            self.spill_all()?;
            let spill = self.spill.as_mut().expect("has spilled");
            snapshot.deferred = keyed_base(&mut spill.core, schema, decode)?;
            return Ok(snapshot);
        }
        let changed = self.changed.as_mut().map(std::mem::take).unwrap_or_default();
        let parts = super::state::delta_parts(self, &changed, false)?;
        let keys: HashSet<Box<[u8]>> = changed.iter().map(|g| self.keys[*g].clone()).collect();
        let in_memory = move |key: &[u8]| keys.contains(key);
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
    fn a_partitions_entry_gives_back_its_time_states_frame_and_waiting_rows() {
        let entry = entry_key(7, b"key");
        let frame = [(1, &b"f1"[..]), (2, b"")];
        let value = encode_partition(5, b"states", frame.into_iter(), &[(9, &b"w"[..])]);
        let stored = decode_partition(&entry, &value).unwrap();
        assert_eq!((stored.group, stored.key, stored.last), (7, &b"key"[..], 5));
        assert_eq!(stored.states, b"states");
        assert_eq!(stored.frame, frame);
        assert_eq!(stored.waiting, [(9, &b"w"[..])]);
        assert!(decode_partition(&entry, &value[..value.len() - 1]).is_err());
    }
}
