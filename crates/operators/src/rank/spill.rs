//! The spilling state backend of TopN and deduplication: partitions beyond the memory budget in the key-value store.
//!
//! Memory holds the partitions the latest batches touched. When their rows
//! pass a quarter of the subtask's budget (measured when a guess says they
//! may, [`weir_state::memory_guess`]), every partition is written to the store
//! ([`weir_state::store`], one entry per partition: its key group and
//! partition key as the key; when it was last written and its kept rows in
//! rank order as the value, see [`Entries::encode`]) and memory starts
//! empty again. A batch's partitions
//! that memory does not hold are read from the store first, so every rank
//! change is emitted as on the heap; a window TopN reads the partitions of
//! the windows it fires.
//!
//! Checkpoints stay state files: a snapshot writes every partition to the
//! store, then the store in key order as one run (the checkpoint links it);
//! an incremental one holds the partitions changed in memory and those
//! written to the store since the last snapshot, read back from it.
//! A restore writes the checkpoint's rows to the store, a partition per
//! entry, not to memory. A state TTL removes the store's expired partitions
//! a slice per tick.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch, UInt32Array};
use arrow::datatypes::UInt32Type;

use crate::rank::entries::{Entries, encode_row};
use crate::rank::{Partition, TopNOperator};
use crate::{Error, Result};
use weir_runtime::operator::SpillSettings;
use weir_state::deferred::{Deferred, keyed_delta, store_run};
use weir_state::incremental::{ReplacedPart, replacement_rows};
use weir_state::memory_guess;
use weir_state::snapshot::{RUN_ROW_GROUP_ROWS, key_groups};
use weir_state::spilled::{SpillCore, SpillSlot, Spilled};
use weir_state::store::{Entry, SWEEP, WRITE_CHUNK};

/// The least a row is guessed to add to memory: a kept row's place and
/// bytes (a row that does not rank adds nothing, but the guess only decides
/// when memory is measured).
const LEAST_PER_ROW: usize = 48;

/// A TopN subtask's own spilled state (beside its [`SpillCore`]).
#[derive(Default)]
pub(super) struct TopNSpill {
    /// The partitions read from the store (or first looked for there) since
    /// the last spill, whose rows memory now holds; `true` where the store
    /// has an entry for them.
    resident: HashMap<Box<[u8]>, bool, foldhash::fast::FixedState>,
    /// Where the next TTL sweep of the store starts.
    sweep_from: Vec<u8>,
}

impl TopNSpill {
    pub(super) fn new(settings: SpillSettings, incremental: bool) -> Spilled<Self> {
        Spilled::new(
            SpillCore::new(settings, incremental, LEAST_PER_ROW),
            TopNSpill::default(),
        )
    }
}

/// Whether restored state `rows` may not fit the memory the state is
/// given (half of it: the rows and the partitions built from them are in
/// memory at once): they are restored into the store then, else into memory.
pub(super) fn holds_more_than_memory(core: &SpillCore, rows: &RecordBatch) -> bool {
    core.store.is_some()
        || rows.get_array_memory_size() > memory_guess::spill_threshold(core.settings.budget) / 2
}

/// A store key: the key group (big-endian, so the store is in key-group
/// order), then the partition key.
fn store_key(group: u32, partition: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(4 + partition.len());
    bytes.extend_from_slice(&group.to_be_bytes());
    bytes.extend_from_slice(partition);
    bytes
}

fn cut_short() -> Error {
    Error::State("a spilled TopN partition's rows are cut short".into())
}

/// A store value: when the partition was last written, then its rows.
fn encode(partition: &Partition) -> Vec<u8> {
    let mut value = partition.written.to_le_bytes().to_vec();
    partition.rows.encode(&mut value);
    value
}

/// The partition of a store value; ties as [`Entries::decode`] makes them.
fn decode(value: &[u8], no_tie: Option<&Arc<[u8]>>) -> Result<Partition> {
    let written = value.get(..8).ok_or_else(cut_short)?;
    Ok(Partition {
        written: i64::from_le_bytes(written.try_into().expect("8 bytes")),
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

    /// Reads the partitions of `partitions` that memory does not hold from
    /// the store, where it has them.
    pub(super) fn load_spilled(&mut self, partitions: &[&[u8]]) -> Result<()> {
        let Some(spill) = self.spill.as_ref().filter(|s| s.core.store.is_some()) else {
            return Ok(());
        };
        let mut new: Vec<&[u8]> = partitions
            .iter()
            .copied()
            .filter(|p| !self.partitions.contains_key(p) && !spill.own.resident.contains_key(*p))
            .collect();
        new.sort_unstable();
        new.dedup();
        if new.is_empty() {
            return Ok(());
        }
        let groups = self.key_groups_of(&new)?;
        let no_tie = self.shared_tie().cloned();
        let spill = self.spill.as_mut().expect("filtered above");
        let store = spill.core.store.as_ref().expect("filtered above");
        for (i, partition) in new.iter().enumerate() {
            let found = store.get(&store_key(groups.value(i), partition))?;
            if let Some(value) = &found {
                self.partitions
                    .insert((*partition).into(), decode(value, no_tie.as_ref())?);
            }
            spill.own.resident.insert((*partition).into(), found.is_some());
        }
        Ok(())
    }

    /// Bytes the kept rows, their partitions and windows take in memory.
    fn memory_size(&self) -> usize {
        let slot = std::mem::size_of::<Box<[u8]>>();
        let partitions = self.partitions.capacity() * (slot + std::mem::size_of::<Partition>() + 1)
            + self
                .partitions
                .iter()
                .map(|(k, p)| k.len() + p.rows.memory_size())
                .sum::<usize>();
        let resident = self.spill.as_ref().map_or(0, |s| {
            s.own.resident.capacity() * (slot + 2) + s.own.resident.keys().map(|k| k.len()).sum::<usize>()
        });
        let windows: usize = self
            .windows
            .values()
            .map(|w| 48 + w.capacity() * slot + w.iter().map(|k| k.len()).sum::<usize>())
            .sum();
        partitions + resident + windows
    }

    /// Writes every partition memory holds to the store (one emptied since
    /// it was read from there is removed from it) and empties memory.
    pub(super) fn spill_all(&mut self) -> Result<()> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        spill.core.open_store()?;
        let mut keys: Vec<(Box<[u8]>, bool)> = std::mem::take(&mut spill.own.resident).into_iter().collect();
        let resident: std::collections::HashSet<&[u8]> = keys.iter().map(|(k, _)| &k[..]).collect();
        let others: Vec<Box<[u8]>> = (self.partitions.keys())
            .filter(|k| !resident.contains(&k[..]))
            .cloned()
            .collect();
        keys.extend(others.into_iter().map(|k| (k, false)));
        for chunk in keys.chunks(WRITE_CHUNK) {
            let refs: Vec<&[u8]> = chunk.iter().map(|(k, _)| &k[..]).collect();
            let groups = self.key_groups_of(&refs)?;
            let (mut puts, mut removes) = (Vec::new(), Vec::new());
            for (i, (partition, found)) in chunk.iter().enumerate() {
                let at = store_key(groups.value(i), partition);
                match self.partitions.get(partition) {
                    Some(kept) if !kept.rows.is_empty() => puts.push((at, encode(kept))),
                    _ if *found => removes.push(at),
                    _ => {}
                }
            }
            let store = self.spill.store().expect("opened above");
            store.write(
                puts.iter().map(|(k, v)| (&k[..], &v[..])),
                removes.iter().map(|k| &k[..]),
            )?;
        }
        self.partitions = Default::default();
        self.note_flushed()?;
        if let Some(core) = self.spill.core_mut() {
            core.emptied();
        }
        weir_common::alloc::give_back_freed_memory();
        Ok(())
    }

    /// Notes the partitions changed in memory, now written to the store,
    /// for the next incremental snapshot to read back.
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

    /// A full snapshot of spilled state: every partition to the store, then
    /// the store, frozen now, as one run of state rows in key-group order,
    /// keyed by partition when it is the `base` of an incremental chain
    /// (which then leaves no change for the next delta), written by the
    /// snapshot's writer ([`weir_state::deferred`]).
    pub(super) fn spilled_snapshot(&mut self, base: bool) -> Result<Vec<Deferred>> {
        self.spill_all()?;
        let no_tie = self.shared_tie().cloned();
        if base {
            self.spill.forget_spilled_changes();
        }
        let spill = self.spill.as_mut().expect("has spilled");
        spill.core.runs += 1;
        let runs = spill.core.runs;
        let store = spill.core.store.as_ref().expect("has spilled");
        if store.is_empty()? {
            return Ok(Vec::new());
        }
        let (spec, rows_of) = (self.spec.clone(), self.spec.rows_converter()?);
        let max_parallelism = self.max_parallelism;
        let decode = move |entries: &[Entry]| {
            let parts = stored_parts(&spec, &rows_of, max_parallelism, no_tie.as_ref(), entries)?;
            match base {
                true => replacement_rows(&spec.state_schema(), parts, true),
                false => Ok(parts.into_iter().next().map(|(rows, _, _)| rows)),
            }
        };
        let path = store.snapshot_run_path(runs)?;
        Ok(vec![store_run(
            store.frozen(),
            path,
            RUN_ROW_GROUP_ROWS / 4,
            decode,
        )])
    }

    /// An incremental snapshot of spilled state: the partitions changed in
    /// memory, and those written to the store since the last snapshot
    /// (read back from the store frozen now, by the snapshot's writer;
    /// deleted when the store has none). `None`: nothing changed.
    pub(super) fn spilled_delta(&mut self) -> Result<Option<Deferred>> {
        let changed = self.changed.as_mut().map(std::mem::take).unwrap_or_default();
        let parts = self.partition_parts(changed.iter().map(|k| &k[..]).collect())?;
        let in_memory = move |p: &[u8]| changed.contains(p);
        let no_tie = self.shared_tie().cloned();
        let (spec, rows_of) = (self.spec.clone(), self.spec.rows_converter()?);
        let max_parallelism = self.max_parallelism;
        let schema = self.spec.state_schema();
        let spill = self.spill.as_mut().expect("has spilled");
        keyed_delta(
            &mut spill.core,
            (parts, in_memory),
            schema,
            move |live: &[Entry]| stored_parts(&spec, &rows_of, max_parallelism, no_tie.as_ref(), live),
        )
    }

    /// Restores state rows into the store (not memory): each partition's
    /// rows in rank order as one entry, numbered as the heap's restore
    /// numbers them.
    pub(super) fn restore_spilled(&mut self, rows: &RecordBatch) -> Result<()> {
        let spill = self.spill.as_mut().expect("spilling");
        spill.core.open_store()?;
        let restored = self.restored(rows)?;
        let groups = rows.column(0).as_primitive::<UInt32Type>();
        let partition = |i: usize| restored.partitions.as_ref().map_or(&[][..], |p| p.row(i).data());
        let mut order: Vec<usize> = (0..rows.num_rows()).collect();
        order.sort_by(|a, b| {
            let key = |i: usize| (groups.value(i), partition(i), restored.positions.value(i));
            key(*a).cmp(&key(*b))
        });
        let mut puts: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
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
            puts.push((store_key(groups.value(first), partition(first)), value));
            self.created(partition(first), restored.ends[first].unwrap_or(i64::MIN));
            if puts.len() >= WRITE_CHUNK {
                self.write_restored(std::mem::take(&mut puts))?;
            }
        }
        self.write_restored(puts)
    }

    /// Removes the store's partitions not written for `ttl` ms at `now`, a
    /// slice of the store per call (from where the last one stopped).
    /// Partitions memory holds are left to memory's sweep.
    pub(super) fn sweep_store(&mut self, now: i64, ttl: i64) -> Result<()> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        let Some(store) = &spill.core.store else {
            return Ok(());
        };
        let entries = store.scan_on(&mut spill.own.sweep_from, SWEEP)?;
        let mut removes = Vec::new();
        for (key, value) in &entries {
            let written = value.get(..8).ok_or_else(cut_short)?;
            let written = i64::from_le_bytes(written.try_into().expect("8 bytes"));
            if now - written >= ttl && !spill.own.resident.contains_key(&key[4..]) {
                removes.push(&key[..]);
            }
        }
        if let Some(flushed) = &mut spill.core.flushed {
            removes.iter().for_each(|k| flushed.push(k));
        }
        store.write(std::iter::empty(), removes)
    }

    fn write_restored(&self, puts: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        let store = self.spill.store().expect("opened");
        store.write(puts.iter().map(|(k, v)| (&k[..], &v[..])), [])
    }
}
