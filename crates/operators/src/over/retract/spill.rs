//! The spilling state backend of OVER aggregations of an updating input: partitions' kept rows beyond the memory budget in the key-value store.
//!
//! Memory keeps the partitions that changed since the last spill. When
//! they pass a quarter of the subtask's budget every partition goes to the
//! store, one entry each (`key group | partition key` -> its rows: time,
//! copy, row bytes), and memory starts empty again. A batch's partitions
//! that memory lacks are read from the store first (and removed from it),
//! so each change reaches the rows after it as on the heap. One partition
//! must fit in memory; many partitions need not.
//!
//! A snapshot writes memory to the store and the store, frozen, as one run
//! of the rows the heap writes, read by the snapshot's writer; with
//! incremental checkpoints, a delta of the partitions changed in memory and
//! of those written to the store since the last snapshot, read back from it.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, BinaryArray, BinaryBuilder, RecordBatch, UInt32Array};
use arrow::row::{Row, RowConverter, SortField};

use crate::Result;
use crate::over::retract::{Place, RetractOverOperator};
use weir_runtime::operator::{OperatorSnapshot, SpillSettings};
use weir_state::deferred::{keyed_base, keyed_delta, whole_store};
use weir_state::entry::{ValueReader, ValueWriter, entry_key, read_back, split_entry_key};
use weir_state::incremental::ReplacedPart;
use weir_state::snapshot::{key_groups_of_bytes, state_rows};
use weir_state::spilled::{SpillCore, SpillSlot, Spilled};
use weir_state::store::{Entry, WRITE_CHUNK};

/// A retracting OVER subtask's own spilled state (beside its
/// [`SpillCore`], whose flushed keys are the entries of the partitions
/// changed in memory and written to the store since the last snapshot).
pub(in crate::over) struct RetractSpill {
    codec: Codec,
}

impl RetractSpill {
    pub(in crate::over) fn new(settings: SpillSettings, op: &RetractOverOperator) -> Result<Spilled<Self>> {
        // At least a kept row: its bytes and the tree's slot.
        let core = SpillCore::new(settings, op.changed.is_some(), 64);
        Ok(Spilled::new(
            core,
            RetractSpill {
                codec: Codec::new(op)?,
            },
        ))
    }
}

/// A partition's rows as a store value: each one's time, copy and bytes.
fn encode_rows<'a>(rows: impl Iterator<Item = &'a Place>) -> Vec<u8> {
    let mut value = ValueWriter::default();
    for (time, row, copy) in rows {
        value.time(*time).count(*copy as usize).bytes(row);
    }
    value.0
}

/// The rows of an [`encode_rows`] value.
fn decode_rows(bytes: &[u8]) -> Result<Vec<(i64, u32, &[u8])>> {
    let (mut value, mut rows) = (ValueReader(bytes), Vec::new());
    while !value.is_done() {
        rows.push((value.time()?, value.count()? as u32, value.bytes()?));
    }
    Ok(rows)
}

/// Entries to the heap's state rows (`_key_group`, the input's columns).
struct Codec {
    schema: arrow::datatypes::SchemaRef,
    keyless: bool,
    keys: RowConverter,
    rows: RowConverter,
    max_parallelism: usize,
}

impl Codec {
    fn new(op: &RetractOverOperator) -> Result<Codec> {
        let input = op.spec.input.fields().iter();
        Ok(Codec {
            schema: op.state_schema(),
            keyless: op.spec.partition.is_empty(),
            keys: super::super::converter(&op.spec.partition, &op.spec.input)?,
            rows: RowConverter::new(input.map(|f| SortField::new(f.data_type().clone())).collect())?,
            max_parallelism: op.max_parallelism,
        })
    }

    /// Each partition key's key group.
    fn key_groups(&self, keys: &[&[u8]]) -> Result<Vec<u32>> {
        match self.keyless {
            true => Ok(vec![0; keys.len()]),
            false => Ok(key_groups_of_bytes(&self.keys, keys, self.max_parallelism)?
                .values()
                .to_vec()),
        }
    }

    /// The state rows of store entries; `None` without rows.
    fn decode(&self, entries: &[Entry]) -> Result<Option<RecordBatch>> {
        Ok(self.decode_keyed(entries)?.map(|(rows, _)| rows))
    }

    /// [`Codec::decode`] as a replacing file's part, each row keyed by its
    /// partition.
    fn decode_parts(&self, entries: &[Entry]) -> Result<Vec<ReplacedPart>> {
        let part = self
            .decode_keyed(entries)?
            .map(|(rows, keys)| (rows, keys, false));
        Ok(part.into_iter().collect())
    }

    /// [`Codec::decode`], and each row's partition key.
    fn decode_keyed(&self, entries: &[Entry]) -> Result<Option<(RecordBatch, BinaryArray)>> {
        let (mut groups, mut rows): (Vec<u32>, Vec<Row<'_>>) = (Vec::new(), Vec::new());
        let mut keys = BinaryBuilder::new();
        let parser = self.rows.parser();
        for (entry, value) in entries {
            let (group, key) = split_entry_key(entry)?;
            for (_, _, row) in decode_rows(value)? {
                groups.push(group);
                keys.append_value(key);
                rows.push(parser.parse(row));
            }
        }
        if groups.is_empty() {
            return Ok(None);
        }
        let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(groups))];
        columns.extend(self.rows.convert_rows(rows)?);
        Ok(Some((state_rows(&self.schema, columns)?, keys.finish())))
    }
}

spills_when_full!(RetractOverOperator);

impl RetractOverOperator {
    /// Bytes its kept rows take in memory, about.
    fn memory_size(&self) -> usize {
        let rows: usize = (self.partitions.iter())
            .map(|(k, rows)| k.len() + 64 + rows.keys().map(|p| p.1.len() + 80).sum::<usize>())
            .sum();
        rows + 16 * self.partitions.capacity()
    }

    /// Reads the store's rows of the partitions of `keys` memory lacks into
    /// memory, removing them from the store: before rows change them.
    pub(in crate::over) fn load_stored(&mut self, keys: &[&[u8]]) -> Result<()> {
        let (Some(spill), Some(store)) = (self.spill.as_ref(), self.spill.store()) else {
            return Ok(());
        };
        let in_memory = |k: &[u8]| self.partitions.contains_key(k);
        let found = read_back(store, keys, in_memory, |chunk| spill.own.codec.key_groups(chunk))?;
        let (mut removes, mut loaded) = (Vec::new(), Vec::new());
        for (key, entry, value) in found {
            let rows: BTreeMap<Place, ()> = (decode_rows(&value)?.into_iter())
                .map(|(t, copy, row)| ((t, Arc::from(row), copy), ()))
                .collect();
            loaded.push((Box::from(key), rows));
            removes.push(entry);
        }
        store.write([], removes.iter().map(|k| &k[..]))?;
        // Their entries are gone: a delta reads them from memory from now on.
        if let Some(changed) = self.changed.as_mut() {
            changed.extend(loaded.iter().map(|(key, _): &(Box<[u8]>, _)| key.clone()));
        }
        self.partitions.extend(loaded);
        Ok(())
    }

    /// Writes every partition to the store and empties memory.
    pub(in crate::over) fn spill_all(&mut self) -> Result<()> {
        let Some(spill) = self.spill.as_mut() else {
            return Ok(());
        };
        spill.core.open_store()?;
        // Incremental checkpoints: the changed partitions' entries (written
        // now, or gone with their rows) for the next delta to read back.
        if let (Some(changed), Some(flushed)) = (self.changed.as_mut(), spill.core.flushed.as_mut()) {
            let changed: Vec<Box<[u8]>> = std::mem::take(changed).into_iter().collect();
            for chunk in changed.chunks(WRITE_CHUNK) {
                let keys: Vec<&[u8]> = chunk.iter().map(|k| &k[..]).collect();
                let groups = spill.own.codec.key_groups(&keys)?;
                (keys.iter().zip(groups)).for_each(|(key, group)| flushed.push(&entry_key(group, key)));
            }
        }
        let partitions: Vec<_> = self.partitions.drain().collect();
        for chunk in partitions.chunks(WRITE_CHUNK) {
            let keys: Vec<&[u8]> = chunk.iter().map(|(k, _)| &k[..]).collect();
            let groups = spill.own.codec.key_groups(&keys)?;
            let puts: Vec<(Vec<u8>, Vec<u8>)> = (chunk.iter().zip(groups))
                .map(|((key, rows), group)| (entry_key(group, key), encode_rows(rows.keys())))
                .collect();
            let store = spill.core.store.as_ref().expect("opened above");
            store.write(puts.iter().map(|(k, v)| (&k[..], &v[..])), [])?;
        }
        drop(partitions);
        self.partitions.shrink_to_fit();
        spill.core.emptied();
        weir_common::alloc::give_back_freed_memory();
        Ok(())
    }

    /// A snapshot of spilled state: memory to the store, then the store,
    /// frozen now, as one run of state rows in key-group order, written by
    /// the snapshot's writer.
    pub(in crate::over) fn spilled_snapshot(&mut self) -> Result<OperatorSnapshot> {
        self.spill_all()?;
        let codec = Codec::new(self)?;
        let spill = self.spill.as_mut().expect("has spilled");
        let decode = move |entries: &[Entry]| codec.decode(entries);
        let deferred = whole_store(&mut spill.core, decode)?;
        Ok(OperatorSnapshot {
            runs: Vec::new(),
            deferred,
            rows_later: None,
            meta: serde_json::Value::Null,
            rows: None,
        })
    }

    /// An incremental snapshot of spilled state: a base (`full`: memory to
    /// the store, then the store, frozen now, as one run keyed by
    /// partition), or a replacing delta of the partitions changed in memory
    /// (a partition read back from the store counts as changed: its entry
    /// left the store) and of those written to the store since the last
    /// snapshot, read back from the store frozen now; both read by the
    /// snapshot's writer.
    pub(in crate::over) fn spilled_delta(&mut self, full: bool) -> Result<OperatorSnapshot> {
        let (codec, schema) = (Codec::new(self)?, self.state_schema());
        let decode = move |entries: &[Entry]| codec.decode_parts(entries);
        let deferred = if full {
            self.spill_all()?;
            let spill = self.spill.as_mut().expect("has spilled");
            keyed_base(&mut spill.core, schema, decode)?
        } else {
            let changed = self.changed.as_mut().map(std::mem::take).unwrap_or_default();
            let parts = self.partition_parts(changed.iter().cloned().collect())?;
            let in_memory = move |key: &[u8]| changed.contains(key);
            let spill = self.spill.as_mut().expect("has spilled");
            let memory = (parts, in_memory);
            let delta = keyed_delta(&mut spill.core, memory, schema, decode)?;
            delta.into_iter().collect()
        };
        Ok(OperatorSnapshot {
            deferred,
            rows_later: None,
            ..OperatorSnapshot::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partitions_rows_come_back_from_their_value_in_order() {
        let rows: Vec<Place> = vec![
            (-2, Arc::from(&b"a"[..]), 0),
            (-2, Arc::from(&b"a"[..]), 1),
            (5, Arc::from(&b""[..]), 0),
        ];
        let value = encode_rows(rows.iter());
        let back = decode_rows(&value).unwrap();
        assert_eq!(back, [(-2, 0, &b"a"[..]), (-2, 1, b"a"), (5, 0, b"")]);
        assert!(decode_rows(&value[..value.len() - 3]).is_err());
    }
}
