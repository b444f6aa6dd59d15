//! The spilling state backend of non-windowed aggregation: groups beyond the memory budget in the key-value store.
//!
//! Memory holds the groups the latest batches touched. When their state
//! passes a quarter of the subtask's budget (measured when a guess says it
//! may, [`weir_state::memory_guess`]), every group is written to the store
//! ([`weir_state::store`], one entry per group: its key group and keys as
//! the key, `_count`, `_written` and the accumulators' states as the value,
//! both in Arrow's row format) and memory starts empty again. From then on
//! a row whose group is not in memory waits in its key group
//! ([`super::waiting`]) until enough rows wait there to read the key
//! group's stored groups in one scan (or a lookup each, for a few), a
//! second has passed, or a barrier comes; then its rows are aggregated as
//! one mini-batch. Each key's changes are the heap's, some intermediate
//! ones left out, as a larger mini-batch leaves them out.
//!
//! Checkpoints stay state files: a full snapshot writes every group to the
//! store, then the store in key order as one run (the checkpoint links it);
//! an incremental one writes the groups changed in memory and those written
//! to the store since the last snapshot, read back from it. A restore
//! writes the checkpoint's rows to the store, not to memory. A state TTL
//! expires the store's entries a slice at a time, as the heap's sweep does.
//!
//! A keyless aggregate (no GROUP BY keys) has one group, kept in the store
//! under key group 0.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::compute::take_arrays;
use arrow::datatypes::{Int64Type, SchemaRef};
use arrow::row::{Row, RowConverter, SortField};

use super::waiting::{Waiting, by_scan};
use crate::group::GroupAggregateOperator;
use crate::groups::Groups;
use crate::{Error, Result};
use weir_common::time::wall_clock_millis;
use weir_runtime::Output;
use weir_runtime::operator::SpillSettings;
use weir_state::deferred::{Deferred, DeltaOf, store_delta, whole_store};
use weir_state::incremental::upsert_delta;
use weir_state::memory_guess::SpillsWhenFull;
use weir_state::snapshot::{concat_by_key_group, key_groups};
use weir_state::spilled::{SpillCore, SpillSlot, Spilled};
use weir_state::store::{Entry, Frozen, SWEEP, Store, WRITE_CHUNK};

/// The least a row is guessed to add to memory: a new group's key slot,
/// count, stamps and a state or two.
const LEAST_PER_ROW: usize = 64;

/// A non-windowed aggregation subtask's own spilled state (beside its
/// [`SpillCore`], whose flushed keys are the store keys of groups).
pub(super) struct Spill {
    /// State rows to store entries and back.
    codec: Codec,
    /// Where the next TTL sweep of the store starts.
    sweep_from: Vec<u8>,
    /// Rows waiting for their key group's read, and the store's entries
    /// per key group.
    pub(super) waiting: Waiting,
    /// Per group in memory: whether its state is still to be read (its
    /// rows wait).
    unread: Vec<bool>,
    /// Per group in memory: whether the store held an entry of it when it
    /// was read.
    in_store: Vec<bool>,
}

impl Spill {
    /// The spill of an aggregation whose state rows are `state_schema`
    /// (`_key_group`, `key_count` keys, then the rest).
    pub(super) fn new(
        settings: SpillSettings,
        state_schema: &SchemaRef,
        key_count: usize,
        incremental: bool,
    ) -> Result<Spilled<Self>> {
        let own = Spill {
            codec: Codec::new(state_schema, key_count)?,
            sweep_from: Vec::new(),
            waiting: Waiting::default(),
            unread: Vec::new(),
            in_store: Vec::new(),
        };
        Ok(Spilled::new(
            SpillCore::new(settings, incremental, LEAST_PER_ROW),
            own,
        ))
    }

    /// The store key of each of `rows` groups with these keys: key group
    /// (big-endian, so the store is in key-group order), then the keys' row.
    fn store_keys(&self, keys: &[ArrayRef], rows: usize, max_parallelism: usize) -> Result<Vec<Vec<u8>>> {
        if rows == 0 {
            // No columns either where none were recorded (a key store of no group).
            return Ok(Vec::new());
        }
        self.keyed(&key_groups(keys, rows, max_parallelism)?, keys)
    }

    /// The store key of each row of `keys`, whose key groups are `groups`.
    fn keyed(&self, groups: &UInt32Array, keys: &[ArrayRef]) -> Result<Vec<Vec<u8>>> {
        let rows = groups.len();
        let encoded = match &self.codec.keys {
            Some(converter) => Some(converter.convert_columns(keys)?),
            None => None,
        };
        Ok((0..rows)
            .map(|i| {
                let mut key = groups.value(i).to_be_bytes().to_vec();
                if let Some(rows) = &encoded {
                    key.extend_from_slice(rows.row(i).as_ref());
                }
                key
            })
            .collect())
    }

    /// Rows `rows` of `batch` (whose keys are `keys`) wait, from `now`,
    /// each in its key group, in arrival order.
    fn hold(
        &mut self,
        batch: &RecordBatch,
        keys: &[ArrayRef],
        rows: Vec<u32>,
        max_parallelism: usize,
        now: i64,
    ) -> Result<()> {
        let rows = UInt32Array::from(rows);
        let keys = take_arrays(keys, &rows, None)?;
        let groups = key_groups(&keys, rows.len(), max_parallelism)?;
        // A stable sort: a key's rows stay in arrival order.
        let mut order: Vec<u32> = (0..rows.len() as u32).collect();
        order.sort_by_key(|i| groups.value(*i as usize));
        let picks = UInt32Array::from_iter_values(order.iter().map(|i| rows.value(*i as usize)));
        let held = arrow::compute::take_record_batch(batch, &picks)?;
        let per_row = held.get_array_memory_size() / held.num_rows().max(1);
        let mut start = 0;
        while start < order.len() {
            let group = groups.value(order[start] as usize);
            let end = start
                + order[start..]
                    .iter()
                    .take_while(|i| groups.value(**i as usize) == group)
                    .count();
            let len = end - start;
            self.waiting
                .hold(group, held.slice(start, len), per_row * len, now);
            start = end;
        }
        Ok(())
    }

    /// Row bytes of the state columns after the keys (cast to their types).
    fn encode_values(
        &self,
        columns: &[ArrayRef],
        schema: &SchemaRef,
        key_count: usize,
    ) -> Result<arrow::row::Rows> {
        let columns = columns
            .iter()
            .zip(&schema.fields()[1 + key_count..])
            .map(|(c, f)| Ok(arrow::compute::cast(c, f.data_type())?))
            .collect::<Result<Vec<_>>>()?;
        Ok(self.codec.values.convert_columns(&columns)?)
    }
}

/// The values of those of `keys` the store holds (all keys of one key
/// group), by one scan from the least of them to the greatest: (index in
/// `keys`, value).
fn scan_for(store: &Store, keys: &[Vec<u8>]) -> Result<Vec<(usize, fjall::Slice)>> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_unstable_by(|a, b| keys[*a].cmp(&keys[*b]));
    let (Some(first), Some(last)) = (order.first(), order.last()) else {
        return Ok(Vec::new());
    };
    let (mut next, mut found) = (0, Vec::new());
    store.visit_range(&keys[*first], &keys[*last], |(key, value)| {
        while next < order.len() && keys[order[next]][..] < key[..] {
            next += 1;
        }
        if next < order.len() && keys[order[next]][..] == key[..] {
            found.push((order[next], value));
            next += 1;
        }
        next < order.len()
    })?;
    Ok(found)
}

/// The values of those of `keys` the store holds, a lookup each: (index in
/// `keys`, value).
fn look_up(store: &Store, keys: &[Vec<u8>]) -> Result<Vec<(usize, fjall::Slice)>> {
    let mut found = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        if let Some(value) = store.get(key)? {
            found.push((i, value));
        }
    }
    Ok(found)
}

/// Store entries to state rows and back: the keys' and the state columns'
/// row converters.
struct Codec {
    /// Keys to row bytes and back (`None`: keyless).
    keys: Option<RowConverter>,
    /// The state columns after the keys, to row bytes and back.
    values: RowConverter,
}

impl Codec {
    /// The upsert delta of store `keys` read from `frozen`: their state,
    /// and a deleting row for each it has none of.
    fn read_back(
        &self,
        frozen: &Frozen,
        keys: &[&[u8]],
        schema: &SchemaRef,
        key_count: usize,
    ) -> Result<Option<RecordBatch>> {
        let (live, gone) = frozen.get_each(keys)?;
        let rows = (!live.is_empty())
            .then(|| self.decode(&live, schema))
            .transpose()?;
        let deleted = (!gone.is_empty()).then(|| self.decode_keys(&gone)).transpose()?;
        upsert_delta(schema, rows, deleted, key_count)
    }

    /// The converters of state rows of `state_schema` (`_key_group`,
    /// `key_count` keys, then the rest).
    fn new(state_schema: &SchemaRef, key_count: usize) -> Result<Codec> {
        let fields = state_schema.fields();
        let sort = |range: std::ops::Range<usize>| -> Vec<SortField> {
            fields[range]
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect()
        };
        let keys = match key_count {
            0 => None,
            n => Some(RowConverter::new(sort(1..1 + n))?),
        };
        let values = RowConverter::new(sort(1 + key_count..fields.len()))?;
        Ok(Codec { keys, values })
    }

    /// The state columns after the keys, from row bytes.
    fn decode_values(&self, values: &[&[u8]]) -> Result<Vec<ArrayRef>> {
        let parser = self.values.parser();
        let rows: Vec<Row<'_>> = values.iter().map(|v| parser.parse(v)).collect();
        Ok(self.values.convert_rows(rows)?)
    }

    /// `_key_group` and the key columns, from store keys.
    fn decode_keys(&self, keys: &[&[u8]]) -> Result<Vec<ArrayRef>> {
        let groups = keys
            .iter()
            .map(|k| {
                k.get(..4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                    .ok_or_else(|| Error::State("a spilled state key without its key group".into()))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(groups))];
        if let Some(converter) = &self.keys {
            let parser = converter.parser();
            let rows: Vec<Row<'_>> = keys.iter().map(|k| parser.parse(&k[4..])).collect();
            columns.extend(converter.convert_rows(rows)?);
        }
        Ok(columns)
    }

    /// State rows of `schema` from store entries.
    fn decode(&self, entries: &[(fjall::Slice, fjall::Slice)], schema: &SchemaRef) -> Result<RecordBatch> {
        let keys: Vec<&[u8]> = entries.iter().map(|(k, _)| &k[..]).collect();
        let values: Vec<&[u8]> = entries.iter().map(|(_, v)| &v[..]).collect();
        let mut columns = self.decode_keys(&keys)?;
        columns.extend(self.decode_values(&values)?);
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
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
        let waiting = self.spill.as_ref().map_or(0, |s| {
            s.own.waiting.bytes() + s.own.unread.capacity() + s.own.in_store.capacity()
        });
        self.groups.size() + vectors + changed + accumulators + waiting
    }

    /// Whether rows of groups not in memory wait for their key group's
    /// read: the store holds groups.
    pub(super) fn rows_wait(&self) -> bool {
        self.spill.as_ref().is_some_and(|s| s.core.store.is_some())
    }

    /// Of a batch just interned: the rows of groups whose state is still
    /// to be read wait for their key group's read (a new group's too: the
    /// store may hold it). Returns the other rows, to aggregate now, with
    /// their keys (`group_indices` then are theirs); `None` when all wait.
    pub(super) fn hold_unread(
        &mut self,
        batch: &RecordBatch,
        keys: &[ArrayRef],
    ) -> Result<Option<(RecordBatch, Vec<ArrayRef>)>> {
        let total = self.groups.len();
        let own = &mut self.spill.as_mut().expect("rows wait only when spilled").own;
        own.unread.resize(total, true);
        own.in_store.resize(total, false);
        let (mut now, mut wait) = (Vec::new(), Vec::new());
        for (row, &g) in self.group_indices.iter().enumerate() {
            match own.unread[g] {
                true => wait.push(row as u32),
                false => now.push(row as u32),
            }
        }
        if wait.is_empty() {
            return Ok(Some((batch.clone(), keys.to_vec())));
        }
        own.hold(batch, keys, wait, self.max_parallelism, wall_clock_millis())?;
        if now.is_empty() {
            return Ok(None);
        }
        self.group_indices = now.iter().map(|r| self.group_indices[*r as usize]).collect();
        let now = UInt32Array::from(now);
        let keys = take_arrays(keys, &now, None)?;
        Ok(Some((arrow::compute::take_record_batch(batch, &now)?, keys)))
    }

    /// Reads the key groups whose waiting rows are due at `now`, or take
    /// more than an eighth of the budget.
    pub(super) fn read_due(&mut self, now: i64, out: &mut Output) -> Result<()> {
        let Some(spill) = &self.spill else {
            return Ok(());
        };
        let due = spill.own.waiting.due_at(now, spill.core.settings.budget / 8);
        self.read_key_groups(due, out)
    }

    /// Reads every key group with waiting rows (at a barrier, or at the end).
    pub(super) fn read_all_waiting(&mut self, out: &mut Output) -> Result<()> {
        let Some(spill) = &self.spill else {
            return Ok(());
        };
        let all = spill.own.waiting.key_groups();
        self.read_key_groups(all, out)
    }

    /// An error when rows wait for their key group's read: a snapshot
    /// follows [`Operator::prepare_snapshot`](weir_runtime::Operator::prepare_snapshot), which reads them all.
    pub(super) fn no_rows_wait(&self) -> Result<()> {
        match self.spill.as_ref().is_some_and(|s| !s.own.waiting.is_empty()) {
            true => Err(Error::Internal(format!(
                "{}: a snapshot while rows wait for spilled state (prepare_snapshot reads them first)",
                self.spec.name
            ))),
            false => Ok(()),
        }
    }

    /// For each of `key_groups`: reads its waiting groups' state from the
    /// store and aggregates its waiting rows, as one mini-batch, emitting
    /// their changes; memory is spilled in between when full.
    fn read_key_groups(&mut self, key_groups: Vec<u32>, out: &mut Output) -> Result<()> {
        for key_group in key_groups {
            let own = &mut self.spill.as_mut().expect("spilled").own;
            let batches = own.waiting.take(key_group);
            let Some(first) = batches.first() else {
                continue;
            };
            let rows = arrow::compute::concat_batches(&first.schema(), &batches)?;
            drop(batches);
            let keys = self.intern(&rows)?;
            self.read_unread(key_group, &keys)?;
            self.aggregate(&rows, &keys, out)?;
            self.spill_if_full(rows.num_rows())?;
        }
        Ok(())
    }

    /// Reads from the store the state of the interned rows' groups still to
    /// be read (all of `key_group`): by one scan of the key group, or a
    /// lookup each when they are few ([`by_scan`]); none when the store
    /// holds nothing of it.
    fn read_unread(&mut self, key_group: u32, keys: &[ArrayRef]) -> Result<()> {
        let total = self.groups.len();
        let spill = self.spill.as_mut().expect("spilled");
        let own = &mut spill.own;
        own.unread.resize(total, true);
        own.in_store.resize(total, false);
        let (mut groups, mut rows) = (Vec::new(), Vec::new());
        for (row, &g) in self.group_indices.iter().enumerate() {
            if own.unread[g] {
                own.unread[g] = false;
                groups.push(g);
                rows.push(row as u32);
            }
        }
        let stored = own.waiting.stored_in(key_group);
        if groups.is_empty() || stored == 0 {
            return Ok(());
        }
        let rows = UInt32Array::from(rows);
        let keys = take_arrays(keys, &rows, None)?;
        let store_keys = own.keyed(&UInt32Array::from(vec![key_group; groups.len()]), &keys)?;
        let store = spill.core.store.as_ref().expect("rows wait only when spilled");
        let found = match by_scan(groups.len(), stored) {
            true => scan_for(store, &store_keys)?,
            false => look_up(store, &store_keys)?,
        };
        if found.is_empty() {
            return Ok(());
        }
        let found_groups: Vec<usize> = found.iter().map(|(i, _)| groups[*i]).collect();
        found_groups.iter().for_each(|g| own.in_store[*g] = true);
        let values: Vec<&[u8]> = found.iter().map(|(_, v)| &v[..]).collect();
        let states = own.codec.decode_values(&values)?;
        self.restore_groups(&states, &found_groups)
    }

    /// Writes every group to the store (a group without rows is removed
    /// from it) and empties memory.
    pub(super) fn spill_all(&mut self) -> Result<()> {
        let total = self.groups.len();
        if total == 0 || self.spill.is_none() {
            return Ok(());
        }
        let schema = self.spec.state_schema(&self.accumulators);
        let key_count = self.spec.key_schema.fields().len();
        let keys = std::mem::replace(&mut self.groups, Groups::new(&self.spec.key_schema)?).emit()?;
        let changed = self.changed.take();
        let spill = self.spill.as_mut().expect("checked above");
        spill.core.open_store()?;
        let mut flushed = spill.core.flushed.take();
        let spill = self.spill.as_ref().expect("checked above");
        let mut stored = std::collections::BTreeMap::<u32, i64>::new();
        for start in (0..total).step_by(WRITE_CHUNK) {
            let end = (start + WRITE_CHUNK).min(total);
            let chunk: Vec<ArrayRef> = keys.iter().map(|k| k.slice(start, end - start)).collect();
            let store_keys = spill.own.store_keys(&chunk, end - start, self.max_parallelism)?;
            // A group still to be read has nothing to write; one the store
            // did not hold has nothing to remove.
            let own = &spill.own;
            let read = (start..end).filter(|g| !own.unread.get(*g).copied().unwrap_or(false));
            let (live, gone): (Vec<usize>, Vec<usize>) = read.partition(|g| self.counts[*g] > 0);
            let in_store = |g: &usize| own.in_store.get(*g).copied().unwrap_or(false);
            let gone: Vec<usize> = gone.into_iter().filter(in_store).collect();
            let key_group =
                |g: &usize| u32::from_be_bytes(store_keys[g - start][..4].try_into().expect("4 bytes"));
            live.iter()
                .filter(|g| !in_store(g))
                .for_each(|g| *stored.entry(key_group(g)).or_insert(0) += 1);
            gone.iter()
                .for_each(|g| *stored.entry(key_group(g)).or_insert(0) -= 1);
            let values = spill
                .own
                .encode_values(&self.state_columns(&live)?, &schema, key_count)?;
            let puts = live
                .iter()
                .enumerate()
                .map(|(i, g)| (&store_keys[g - start][..], values.row(i).data()));
            let removes = gone.iter().map(|g| &store_keys[g - start][..]);
            spill
                .core
                .store
                .as_ref()
                .expect("opened above")
                .write(puts, removes)?;
            if let (Some(changed), Some(flushed)) = (&changed, &mut flushed) {
                let was_changed = |g: &usize| changed.flags.get(*g).copied().unwrap_or(false);
                (start..end)
                    .filter(was_changed)
                    .for_each(|g| flushed.push(&store_keys[g - start]));
            }
        }
        if let Some(spill) = self.spill.as_mut() {
            spill.core.flushed = flushed;
            let own = &mut spill.own;
            stored
                .into_iter()
                .for_each(|(kg, n)| own.waiting.stored_changed(kg, n));
            (own.unread, own.in_store) = (Vec::new(), Vec::new());
        }
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
        weir_common::alloc::give_back_freed_memory();
        Ok(())
    }

    /// A full snapshot of spilled state: every group to the store, then the
    /// store, frozen now, as one run of state rows in key-group order,
    /// written by the snapshot's writer ([`weir_state::deferred`]).
    pub(super) fn spilled_snapshot(&mut self) -> Result<Vec<Deferred>> {
        self.spill_all()?;
        let schema = self.spec.state_schema(&self.accumulators);
        let codec = Codec::new(&schema, self.spec.key_schema.fields().len())?;
        let spill = self.spill.as_mut().expect("has spilled");
        let decode = move |entries: &[Entry]| codec.decode(entries, &schema).map(Some);
        whole_store(&mut spill.core, decode)
    }

    /// An incremental snapshot of spilled state: the upsert delta of the
    /// groups changed in memory, and of those written to the store since
    /// the last snapshot (their state read back from the store frozen now,
    /// by the snapshot's writer; gone when the store has none). `None`:
    /// nothing changed.
    pub(super) fn spilled_delta(&mut self) -> Result<Option<Deferred>> {
        let schema = self.spec.state_schema(&self.accumulators);
        let key_count = self.spec.key_schema.fields().len();
        // Memory is newer than the store for the groups it changed.
        let mut in_memory_keys = Vec::new();
        if let Some(changed) = &self.changed {
            let groups = changed.groups.clone();
            let keys = changed.keys.keys(&groups)?;
            let spill = self.spill.as_ref().expect("has spilled");
            in_memory_keys = spill.own.store_keys(&keys, groups.len(), self.max_parallelism)?;
            in_memory_keys.sort_unstable();
        }
        let parts: Vec<RecordBatch> = self.changed_rows()?.into_iter().collect();
        let codec = Codec::new(&schema, key_count)?;
        let in_memory = move |k: &[u8]| in_memory_keys.binary_search_by(|m| m[..].cmp(k)).is_ok();
        let spill = self.spill.as_mut().expect("has spilled");
        let Some(of) = DeltaOf::take(&mut spill.core, parts, in_memory)? else {
            return Ok(None);
        };
        let read_back = move |frozen: &Frozen, keys: &[&[u8]]| {
            Ok(codec
                .read_back(frozen, keys, &schema, key_count)?
                .into_iter()
                .collect())
        };
        Ok(Some(store_delta(of, read_back, concat_by_key_group)))
    }

    /// Restores state rows into the store (not memory).
    pub(super) fn restore_spilled(&mut self, rows: &RecordBatch) -> Result<()> {
        let schema = self.spec.state_schema(&self.accumulators);
        let key_count = self.spec.key_schema.fields().len();
        let spill = self.spill.as_mut().expect("spilling");
        spill.core.open_store()?;
        for chunk in weir_state::store::in_chunks(rows) {
            let key_groups = chunk.column(0).as_primitive::<arrow::datatypes::UInt32Type>();
            let own = &spill.own;
            let store_keys = own.keyed(key_groups, &chunk.columns()[1..1 + key_count])?;
            let values = own.encode_values(&chunk.columns()[1 + key_count..], &schema, key_count)?;
            let puts = (0..chunk.num_rows()).map(|i| (&store_keys[i][..], values.row(i).data()));
            spill.core.store.as_ref().expect("opened above").write(puts, [])?;
            (key_groups.values().iter()).for_each(|kg| spill.own.waiting.stored_changed(*kg, 1));
        }
        Ok(())
    }

    /// Removes the store's entries not written for the TTL at `now`, a slice
    /// of the store per call (from where the last one stopped). The count
    /// of entries per key group is left as it was: an upper bound is all a
    /// read needs (a key group counted empty is not read), and an entry
    /// swept while its group is in memory is written again.
    pub(super) fn sweep_store(&mut self, now: i64) -> Result<()> {
        let (Some(ttl), Some(spill)) = (self.spec.state_ttl, self.spill.as_mut()) else {
            return Ok(());
        };
        let Some(store) = &spill.core.store else {
            return Ok(());
        };
        let entries = store.scan_on(&mut spill.own.sweep_from, SWEEP)?;
        if entries.is_empty() {
            return Ok(());
        }
        let values: Vec<&[u8]> = entries.iter().map(|(_, v)| &v[..]).collect();
        let states = spill.own.codec.decode_values(&values)?;
        // `_count`, then `_written`.
        let written = states[1].as_primitive::<Int64Type>();
        let ttl = ttl.as_millis() as i64;
        let expired: Vec<&[u8]> = entries
            .iter()
            .enumerate()
            .filter(|(i, _)| now - written.value(*i) >= ttl)
            .map(|(_, (k, _))| &k[..])
            .collect();
        store.write([], expired.iter().copied())?;
        if let Some(flushed) = &mut spill.core.flushed {
            expired.iter().for_each(|k| flushed.push(k));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn store_keys_decode_to_their_key_group_and_keys() {
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
        let spill = Spill::new(settings, &schema, 1, false).unwrap();
        let keys: Vec<ArrayRef> = vec![Arc::new(arrow::array::StringArray::from(vec![Some("a"), None]))];
        let store_keys = spill.own.store_keys(&keys, 2, 128).unwrap();
        let refs: Vec<&[u8]> = store_keys.iter().map(|k| &k[..]).collect();
        let decoded = spill.own.codec.decode_keys(&refs).unwrap();
        let expected_groups = key_groups(&keys, 2, 128).unwrap();
        assert_eq!(
            decoded[0].as_primitive::<arrow::datatypes::UInt32Type>(),
            &expected_groups
        );
        assert_eq!(decoded[1].as_ref(), keys[0].as_ref());
    }
}
