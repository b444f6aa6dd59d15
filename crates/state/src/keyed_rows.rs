//! Each key's rows, in memory and, under the spilling backend, beyond the budget in the store: for operators that read and write a key's rows whole at each change (a sink's materializer, changelog normalization).
//!
//! Memory holds the keys that changed since the last spill. When they pass
//! a quarter of the subtask's budget
//! ([`crate::memory_guess::spill_threshold`]) every key goes to the
//! store ([`crate::entry`]: key group and key bytes as the store
//! key, the rows as length-prefixed row bytes) and memory starts empty
//! again. A batch's keys that memory lacks are read from the store first;
//! their entries stay there, stale, until the next spill writes over them
//! (memory is looked at first). A key whose rows all went stays in memory
//! with none, and the spill removes its entry.
//!
//! A snapshot of spilled rows writes memory to the store, then the store,
//! frozen, as one run of state rows made by the operator's `decode`
//! ([`crate::deferred`]). With incremental checkpoints a snapshot
//! is a [`DeltaKind::Replace`](crate::incremental::DeltaKind) delta:
//! the rows of the keys changed since the last one, each with its key as
//! the state key, and a deleting row for each key whose rows all went;
//! spilled, the keys changed in memory and those written to the store since
//! the last one, read back from the store frozen at the barrier.

use std::collections::{HashMap, HashSet};

use arrow::array::{ArrayRef, BinaryArray, BinaryBuilder, RecordBatch};
use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};

use crate::Result;
use crate::deferred::{Deferred, keyed_base, keyed_delta, whole_store};
use crate::entry::{ValueReader, ValueWriter, entry_key, read_back, split_entry_key};
use crate::incremental::{ReplacedPart, deleted_part, replacement_rows};
use crate::memory_guess::SpillsWhenFull;
use crate::operator::SpillSettings;
use crate::snapshot::{key_groups, key_groups_of_bytes, state_rows};
use crate::spilled::{SpillCore, SpillSlot, Spilled};
use crate::store::{Entry, WRITE_CHUNK};

/// A key's rows (row bytes), oldest first.
pub type Rows = Vec<Box<[u8]>>;

/// The rows of each key of an operator subtask.
pub struct KeyedRows {
    memory: HashMap<Box<[u8]>, Rows, foldhash::fast::FixedState>,
    /// Key bytes to key columns (for their key groups).
    keys_of: RowConverter,
    max_parallelism: usize,
    /// Incremental checkpoints note the entries of the keys changed in
    /// memory and written to (or removed from) the store since the last
    /// snapshot.
    spill: Option<Spilled<()>>,
    /// Incremental checkpoints: the keys changed since the last snapshot
    /// (spilled: since the last spill).
    changed: Option<HashSet<Box<[u8]>>>,
}

fn decode_rows(bytes: &[u8]) -> Result<Vec<&[u8]>> {
    let (mut value, mut rows) = (ValueReader(bytes), Vec::new());
    while !value.is_done() {
        rows.push(value.bytes()?);
    }
    Ok(rows)
}

/// A converter of every column of `schema` to row bytes and back.
pub fn row_converter(schema: &Schema) -> Result<RowConverter> {
    Ok(RowConverter::new(
        schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect(),
    )?)
}

/// Columns of `converter` from row bytes.
pub fn columns_of<'a>(
    converter: &RowConverter,
    rows: impl Iterator<Item = &'a [u8]>,
) -> Result<Vec<ArrayRef>> {
    let parser = converter.parser();
    Ok(converter.convert_rows(rows.map(|r| parser.parse(r)))?)
}

/// The state rows of `schema` of `rows` (each with its place among its
/// key's rows) of an operator whose rows `rows_of` converts and whose key
/// is their columns `key`: `_key_group`, the rows' columns, then the place
/// as `_position` when `positions`; in their order (a replacing delta's
/// state keys go with them), `None` without rows.
pub fn state_rows_of(
    schema: &SchemaRef,
    (rows_of, key): (&RowConverter, &[usize]),
    rows: &[(usize, &[u8])],
    max_parallelism: usize,
    positions: bool,
) -> Result<Option<RecordBatch>> {
    if rows.is_empty() {
        return Ok(None);
    }
    let data = columns_of(rows_of, rows.iter().map(|(_, r)| *r))?;
    let keys: Vec<ArrayRef> = key.iter().map(|k| data[*k].clone()).collect();
    let groups = key_groups(&keys, rows.len(), max_parallelism)?;
    let mut columns: Vec<ArrayRef> = vec![std::sync::Arc::new(groups)];
    columns.extend(data);
    if positions {
        let places = rows.iter().map(|(p, _)| *p as i64);
        columns.push(std::sync::Arc::new(arrow::array::Int64Array::from_iter_values(
            places,
        )));
    }
    Ok(Some(state_rows(schema, columns)?))
}

/// The state rows of `schema` of store entries (`_key_group`, the rows'
/// columns by `rows_of`, then each row's place among its key's as
/// `_position` when `positions`), in their order, and each row's key bytes;
/// `None` without rows.
pub fn decode_state_rows(
    schema: &SchemaRef,
    rows_of: &RowConverter,
    entries: &[Entry],
    positions: bool,
) -> Result<Option<(RecordBatch, BinaryArray)>> {
    let (mut groups, mut rows, mut places) = (Vec::new(), Vec::new(), Vec::new());
    let mut keys = BinaryBuilder::new();
    for (entry, value) in entries {
        let (group, key) = split_entry_key(entry)?;
        let kept = decode_rows(value)?;
        groups.extend(std::iter::repeat_n(group, kept.len()));
        places.extend(0..kept.len() as i64);
        kept.iter().for_each(|_| keys.append_value(key));
        rows.extend(kept);
    }
    if rows.is_empty() {
        return Ok(None);
    }
    let mut columns: Vec<ArrayRef> = vec![std::sync::Arc::new(arrow::array::UInt32Array::from(groups))];
    columns.extend(columns_of(rows_of, rows.into_iter())?);
    if positions {
        columns.push(std::sync::Arc::new(arrow::array::Int64Array::from(places)));
    }
    Ok(Some((state_rows(schema, columns)?, keys.finish())))
}

/// An operator snapshot of keyed state rows alone.
pub fn rows_snapshot(rows: Option<RecordBatch>) -> crate::operator::OperatorSnapshot {
    crate::operator::OperatorSnapshot {
        runs: Vec::new(),
        deferred: Vec::new(),
        rows_later: None,
        meta: serde_json::Value::Null,
        rows,
    }
}

fn encode_rows(rows: &Rows) -> Vec<u8> {
    let mut value = ValueWriter::default();
    rows.iter().for_each(|row| {
        value.bytes(row);
    });
    value.0
}

impl KeyedRows {
    /// Rows keyed by keys of `key_types` in key groups of `max_parallelism`,
    /// spilled with `spill` (the spilling backend's settings), tracking
    /// changes when checkpoints are `incremental`.
    pub fn new(
        key_types: &[DataType],
        max_parallelism: usize,
        spill: Option<SpillSettings>,
        incremental: bool,
    ) -> Result<Self> {
        let fields = key_types.iter().map(|t| SortField::new(t.clone())).collect();
        Ok(KeyedRows {
            memory: HashMap::default(),
            keys_of: RowConverter::new(fields)?,
            max_parallelism,
            // At least a key and a row.
            spill: spill.map(|settings| Spilled::new(SpillCore::new(settings, incremental, 64), ())),
            changed: incremental.then(HashSet::new),
        })
    }

    /// Whether snapshots are deltas ([`KeyedRows::delta`]).
    pub fn is_incremental(&self) -> bool {
        self.changed.is_some()
    }

    /// An incremental snapshot (a [`replacement_rows`] file): the rows of
    /// every key (`full`) or of the keys changed since the last one, made
    /// state rows of `schema` by `state_rows` (each row with its place among
    /// its key's rows), and a deleting row for each changed key without rows.
    pub fn delta(
        &mut self,
        full: bool,
        schema: &SchemaRef,
        state_rows: impl Fn(&[(usize, &[u8])]) -> Result<Option<RecordBatch>>,
    ) -> Result<Option<RecordBatch>> {
        let changed = self.changed.as_mut().map(std::mem::take).unwrap_or_default();
        let keys: Vec<&[u8]> = match full {
            true => self.iter().map(|(k, _)| k).collect(),
            false => changed.iter().map(|k| &k[..]).collect(),
        };
        let parts = self.key_parts(keys, schema, state_rows)?;
        replacement_rows(schema, parts, full)
    }

    /// The parts of a replacing file for `keys`: the rows of those memory
    /// holds rows of, made state rows of `schema` by `state_rows`, each
    /// keyed by its key, and a deleting part for the others.
    fn key_parts(
        &self,
        keys: Vec<&[u8]>,
        schema: &SchemaRef,
        state_rows: impl Fn(&[(usize, &[u8])]) -> Result<Option<RecordBatch>>,
    ) -> Result<Vec<ReplacedPart>> {
        let (present, gone): (Vec<&[u8]>, Vec<&[u8]>) = keys.into_iter().partition(|k| self.get(k).is_some());
        let (mut rows, mut state_keys) = (Vec::new(), BinaryBuilder::new());
        for key in &present {
            for (i, row) in self.memory[*key].iter().enumerate() {
                rows.push((i, &row[..]));
                state_keys.append_value(key);
            }
        }
        let mut parts = Vec::new();
        if let Some(batch) = state_rows(&rows)? {
            parts.push((batch, state_keys.finish(), false));
        }
        if !gone.is_empty() {
            let groups = key_groups_of_bytes(&self.keys_of, &gone, self.max_parallelism)?;
            parts.push(deleted_part(
                schema,
                groups,
                BinaryArray::from_iter_values(gone.iter()),
            )?);
        }
        Ok(parts)
    }

    /// An incremental snapshot (see [`KeyedRows::delta`] and
    /// [`KeyedRows::spilled_delta`]) of an operator whose rows `rows_of`
    /// converts and whose key is their columns `key`, as state rows of
    /// `schema`, with each row's place among its key's (`positions`).
    pub fn snapshot_delta(
        &mut self,
        full: bool,
        schema: &SchemaRef,
        (rows_of, key): (&RowConverter, &[usize]),
        positions: bool,
    ) -> Result<crate::operator::OperatorSnapshot> {
        let max_parallelism = self.max_parallelism;
        let state_rows =
            |rows: &[(usize, &[u8])]| state_rows_of(schema, (rows_of, key), rows, max_parallelism, positions);
        if !self.has_spilled() {
            return Ok(rows_snapshot(self.delta(full, schema, state_rows)?));
        }
        // The rows' columns: after `_key_group`, before `_position`.
        let columns = &schema.fields()[1..schema.fields().len() - positions as usize];
        let (stored, converter) = (schema.clone(), row_converter(&Schema::new(columns.to_vec()))?);
        let decode = move |entries: &[Entry]| -> Result<Vec<ReplacedPart>> {
            let part = decode_state_rows(&stored, &converter, entries, positions)?;
            Ok(part.map(|(rows, keys)| (rows, keys, false)).into_iter().collect())
        };
        Ok(crate::operator::OperatorSnapshot {
            deferred: self.spilled_delta(full, schema, state_rows, decode)?,
            rows_later: None,
            ..Default::default()
        })
    }

    /// An incremental snapshot of spilled rows, read by the snapshot's
    /// writer: a base (`full`: memory to the store, then the store, frozen
    /// now, as one run keyed by key), or a replacing delta of the keys
    /// changed in memory and of those written to the store since the last
    /// snapshot, read back from the store frozen now
    /// ([`crate::deferred::keyed_delta`]). `state_rows` makes
    /// memory's rows state rows of `schema`, `decode` the store's entries.
    fn spilled_delta<D>(
        &mut self,
        full: bool,
        schema: &SchemaRef,
        state_rows: impl Fn(&[(usize, &[u8])]) -> Result<Option<RecordBatch>>,
        decode: D,
    ) -> Result<Vec<Deferred>>
    where
        D: FnMut(&[Entry]) -> Result<Vec<ReplacedPart>> + Send + 'static,
    {
        if full {
            self.spill_all()?;
            let core = self.spill.core_mut().expect("has spilled");
            return keyed_base(core, schema.clone(), decode);
        }
        let changed = self.changed.as_mut().map(std::mem::take).unwrap_or_default();
        let parts = self.key_parts(changed.iter().map(|k| &k[..]).collect(), schema, state_rows)?;
        let in_memory = move |key: &[u8]| changed.contains(key);
        let core = self.spill.core_mut().expect("has spilled");
        let delta = keyed_delta(core, (parts, in_memory), schema.clone(), decode)?;
        Ok(delta.into_iter().collect())
    }

    /// Whether rows went to the store (snapshots then read it from there).
    pub fn has_spilled(&self) -> bool {
        self.spill.has_spilled()
    }

    /// A key's rows (`None`: it has none).
    pub fn get(&self, key: &[u8]) -> Option<&Rows> {
        self.memory.get(key).filter(|rows| !rows.is_empty())
    }

    /// A key's rows to change (none yet: empty). Call [`KeyedRows::settle`]
    /// after.
    pub fn rows_mut(&mut self, key: &[u8]) -> &mut Rows {
        if let Some(changed) = self.changed.as_mut()
            && !changed.contains(key)
        {
            changed.insert(key.into());
        }
        if !self.memory.contains_key(key) {
            self.memory.insert(key.into(), Vec::new());
        }
        self.memory.get_mut(key).expect("inserted above")
    }

    /// After a change of `key`: a key left without rows is forgotten on the
    /// heap; with a store it stays, so that the next spill removes its entry.
    pub fn settle(&mut self, key: &[u8]) {
        if self.spill.is_none() && self.memory.get(key).is_some_and(|r| r.is_empty()) {
            self.memory.remove(key);
        }
    }

    /// Every key's rows in memory (on the heap: all of them).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Rows)> {
        (self.memory.iter())
            .filter(|(_, rows)| !rows.is_empty())
            .map(|(k, rows)| (&k[..], rows))
    }

    /// Reads the rows of those of `keys` memory lacks from the store: before
    /// they change.
    pub fn load(&mut self, keys: &[&[u8]]) -> Result<()> {
        let Some(store) = self.spill.store() else {
            return Ok(());
        };
        let in_memory = |k: &[u8]| self.memory.contains_key(k);
        let groups = |chunk: &[&[u8]]| -> Result<Vec<u32>> {
            Ok(key_groups_of_bytes(&self.keys_of, chunk, self.max_parallelism)?
                .values()
                .to_vec())
        };
        let mut loaded = Vec::new();
        for (key, _, value) in read_back(store, keys, in_memory, groups)? {
            let rows: Rows = decode_rows(&value)?.into_iter().map(Box::from).collect();
            loaded.push((Box::from(key), rows));
        }
        self.memory.extend(loaded);
        Ok(())
    }

    /// After a batch of `rows` rows: writes memory to the store when full.
    pub fn spill_if_full(&mut self, rows: usize) -> Result<()> {
        SpillsWhenFull::spill_if_full(self, rows)
    }

    /// Measures memory, and writes it to the store when full.
    pub fn spill_if_over(&mut self) -> Result<()> {
        SpillsWhenFull::spill_if_over(self)
    }

    /// Writes every key's rows to the store (a key without rows is removed
    /// from it) and empties memory.
    fn spill_all(&mut self) -> Result<()> {
        let Some(core) = self.spill.core_mut() else {
            return Ok(());
        };
        core.open_store()?;
        let keys: Vec<(Box<[u8]>, Rows)> = self.memory.drain().collect();
        for chunk in keys.chunks(WRITE_CHUNK) {
            let bytes: Vec<&[u8]> = chunk.iter().map(|(k, _)| &k[..]).collect();
            let groups = key_groups_of_bytes(&self.keys_of, &bytes, self.max_parallelism)?;
            let entries: Vec<Vec<u8>> = (bytes.iter().zip(groups.values()))
                .map(|(k, g)| entry_key(*g, k))
                .collect();
            let values: Vec<Vec<u8>> = chunk.iter().map(|(_, rows)| encode_rows(rows)).collect();
            // Incremental checkpoints: the changed keys' entries, for the
            // next delta to read back.
            if let (Some(changed), Some(flushed)) = (&self.changed, core.flushed.as_mut()) {
                (bytes.iter().zip(&entries))
                    .filter(|(k, _)| changed.contains(**k))
                    .for_each(|(_, entry)| flushed.push(entry));
            }
            let live = |i: &usize| !chunk[*i].1.is_empty();
            let puts = (0..chunk.len())
                .filter(live)
                .map(|i| (&entries[i][..], &values[i][..]));
            let removes = (0..chunk.len()).filter(|i| !live(i)).map(|i| &entries[i][..]);
            core.store.as_ref().expect("opened above").write(puts, removes)?;
        }
        drop(keys);
        self.changed.as_mut().map(HashSet::clear);
        self.memory.shrink_to_fit();
        core.emptied();
        weir_common::alloc::give_back_freed_memory();
        Ok(())
    }

    /// A snapshot of spilled rows: memory to the store, then the store,
    /// frozen now, as one run of the state rows `decode` makes of its
    /// entries (in key-group order), written by the snapshot's writer.
    pub fn spilled_snapshot<D>(&mut self, decode: D) -> Result<Vec<Deferred>>
    where
        D: FnMut(&[Entry]) -> Result<Option<RecordBatch>> + Send + 'static,
    {
        self.spill_all()?;
        whole_store(self.spill.core_mut().expect("has spilled"), decode)
    }
}

impl SpillsWhenFull for KeyedRows {
    fn spill_core(&mut self) -> Option<&mut SpillCore> {
        self.spill.core_mut()
    }

    fn measure(&self) -> usize {
        let rows: usize = (self.memory.iter())
            .map(|(k, rows)| {
                k.len() + 64 + 24 * rows.capacity() + rows.iter().map(|r| r.len()).sum::<usize>()
            })
            .sum();
        rows + 8 * self.memory.capacity()
    }

    fn spill(&mut self) -> Result<()> {
        self.spill_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_rows_come_back_from_the_store_and_a_key_without_rows_leaves_it() {
        let dir = tempfile::tempdir().unwrap();
        let settings = SpillSettings {
            budget: 1 << 20,
            dir: dir.path().to_path_buf(),
        };
        let mut rows = KeyedRows::new(&[DataType::Int64], 128, Some(settings), false).unwrap();
        let keys = RowConverter::new(vec![SortField::new(DataType::Int64)]).unwrap();
        let column: arrow::array::ArrayRef = std::sync::Arc::new(arrow::array::Int64Array::from(vec![1, 2]));
        let converted = keys.convert_columns(&[column]).unwrap();
        let (a, b) = (converted.row(0).data(), converted.row(1).data());
        rows.rows_mut(a)
            .extend([Box::from(&b"x"[..]), Box::from(&b"y"[..])]);
        rows.rows_mut(b).push(Box::from(&b"z"[..]));
        rows.spill_all().unwrap();
        assert!(rows.get(a).is_none() && rows.has_spilled(), "memory emptied");
        rows.load(&[a, b]).unwrap();
        assert_eq!(
            rows.get(a).unwrap(),
            &vec![Box::from(&b"x"[..]), Box::from(&b"y"[..])]
        );
        rows.rows_mut(b).clear();
        rows.settle(b);
        rows.spill_all().unwrap();
        rows.load(&[a, b]).unwrap();
        assert!(rows.get(b).is_none(), "b's entry was removed");
        assert_eq!(rows.get(a).unwrap().len(), 2);
    }
}
