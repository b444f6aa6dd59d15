//! The spilling state backend of non-windowed aggregation: groups beyond the memory budget in the key-value store.
//!
//! Memory holds the groups the latest batches touched. When their state
//! passes a quarter of the subtask's budget (measured when a guess says it
//! may, [`weir_state::memory_guess`]), every group is written to the store
//! ([`weir_state::store`], one entry per group: its key group and keys as
//! the key, `_count`, `_written` and the accumulators' states as the value,
//! both in Arrow's row format) and memory starts empty again. A batch's keys
//! that are new in memory are looked up in the store first, and their state
//! is read back before the batch updates it, so every change is emitted as
//! on the heap.
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
use arrow::compute::take;
use arrow::datatypes::{Int64Type, SchemaRef};
use arrow::row::{Row, RowConverter, SortField};

use crate::group::GroupAggregateOperator;
use crate::groups::Groups;
use crate::{Error, Result};
use weir_runtime::operator::SpillSettings;
use weir_state::deferred::{Deferred, DeltaOf, store_delta, whole_store};
use weir_state::incremental::upsert_delta;
use weir_state::snapshot::{concat_by_key_group, key_groups};
use weir_state::spilled::{SpillCore, SpillSlot, Spilled};
use weir_state::store::{Entry, Frozen, SWEEP, WRITE_CHUNK};

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
        self.groups.size() + vectors + changed + accumulators
    }

    /// Reads the state of the groups the last intern made (from
    /// `first_new`) from the store, where it has them.
    pub(super) fn load_spilled(&mut self, first_new: usize, keys: &[ArrayRef]) -> Result<()> {
        let Some(spill) = self.spill.as_ref().filter(|s| s.core.store.is_some()) else {
            return Ok(());
        };
        let total = self.groups.len();
        if total <= first_new {
            return Ok(());
        }
        let mut rows = Vec::with_capacity(total - first_new);
        for (row, &g) in self.group_indices.iter().enumerate() {
            if g == first_new + rows.len() {
                rows.push(row as u32);
            }
        }
        let rows = UInt32Array::from(rows);
        let new_keys = keys
            .iter()
            .map(|k| Ok(take(k, &rows, None)?))
            .collect::<Result<Vec<_>>>()?;
        let store_keys = spill
            .own
            .store_keys(&new_keys, rows.len(), self.max_parallelism)?;
        let store = spill.core.store.as_ref().expect("filtered above");
        let (mut groups, mut values) = (Vec::new(), Vec::new());
        for (i, key) in store_keys.iter().enumerate() {
            if let Some(value) = store.get(key)? {
                groups.push(first_new + i);
                values.push(value);
            }
        }
        if groups.is_empty() {
            return Ok(());
        }
        let values: Vec<&[u8]> = values.iter().map(|v| &v[..]).collect();
        let states = spill.own.codec.decode_values(&values)?;
        self.restore_groups(&states, &groups)
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
        for start in (0..total).step_by(WRITE_CHUNK) {
            let end = (start + WRITE_CHUNK).min(total);
            let chunk: Vec<ArrayRef> = keys.iter().map(|k| k.slice(start, end - start)).collect();
            let store_keys = spill.own.store_keys(&chunk, end - start, self.max_parallelism)?;
            let (live, gone): (Vec<usize>, Vec<usize>) = (start..end).partition(|g| self.counts[*g] > 0);
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
        let spill = self.spill.as_ref().expect("spilling");
        for chunk in weir_state::store::in_chunks(rows) {
            let key_groups = chunk.column(0).as_primitive::<arrow::datatypes::UInt32Type>();
            let store_keys = spill.own.keyed(key_groups, &chunk.columns()[1..1 + key_count])?;
            let values = spill
                .own
                .encode_values(&chunk.columns()[1 + key_count..], &schema, key_count)?;
            let puts = (0..chunk.num_rows()).map(|i| (&store_keys[i][..], values.row(i).data()));
            spill.core.store.as_ref().expect("opened above").write(puts, [])?;
        }
        Ok(())
    }

    /// Removes the store's entries not written for the TTL at `now`, a slice
    /// of the store per call (from where the last one stopped).
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
