//! State a snapshot writes after its task went on: a frozen store, read on the snapshot writer's thread.
//!
//! A full snapshot of spilled state is the whole store (possibly many times
//! the memory budget), and an incremental one reads back every key written
//! to the store since the last snapshot. The task freezes the store at the
//! barrier (a fjall snapshot, no copy); the snapshot writer then reads the
//! frozen store into one run (the whole state, or the delta), which the
//! checkpoint links, while the task goes on with its input, as Flink's
//! RocksDB backend uploads its files asynchronously.
//!
//! ```text
//!  task:   barrier ─► memory to the store ─► freeze ─► next batch ...
//!  writer:                                   frozen store ─► decode ─► run ─► link
//! ```

use std::path::PathBuf;

use arrow::array::{AsArray, BinaryArray, RecordBatch};
use arrow::datatypes::{SchemaRef, UInt32Type};

use crate::entry::split_entry_key;
use crate::flushed::FlushedKeys;
use crate::incremental::{ReplacedPart, deleted_part, replacement_rows};
use crate::runs::{Run, RunWriter};
use crate::snapshot::{concat_by_key_group, sorted_by_key_group};
use crate::spilled::SpillCore;
use crate::store::{Entry, Frozen, WRITE_CHUNK};
use crate::{Error, Result};

/// Reads the frozen state, or finds there is nothing in it; told whether
/// the checkpoint is still going on.
type Write = Box<dyn FnOnce(&dyn Fn() -> bool) -> Result<Option<Run>> + Send>;

/// Part of a snapshot its writer reads ([`crate::operator::OperatorSnapshot::deferred`]).
pub struct Deferred(Write);

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Deferred")
    }
}

impl Deferred {
    /// A part whose writer is `write`.
    pub fn new(write: impl FnOnce(&dyn Fn() -> bool) -> Result<Option<Run>> + Send + 'static) -> Self {
        Deferred(Box::new(write))
    }

    /// Reads it into a run while `live` says the checkpoint goes on
    /// (`None`: no rows).
    pub fn write(self, live: &dyn Fn() -> bool) -> Result<Option<Run>> {
        (self.0)(live)
    }
}

/// The checkpoint went away while its spilled state was read.
pub fn aborted() -> Error {
    Error::Execution("the checkpoint was aborted while its spilled state was read".into())
}

/// The run of every entry of `frozen` at `path`, `chunk` entries at a time,
/// each chunk turned into state rows by `decode` (sorted by key group as
/// the store is; `None`: no rows of it, e.g. all expired), written when the
/// result is.
pub fn store_run<D>(frozen: Frozen, path: PathBuf, chunk: usize, mut decode: D) -> Deferred
where
    D: FnMut(&[Entry]) -> Result<Option<RecordBatch>> + Send + 'static,
{
    Deferred(Box::new(move |live| {
        let mut writer: Option<RunWriter> = None;
        for entries in frozen.chunks(chunk) {
            if !live() {
                return Err(aborted());
            }
            let Some(rows) = decode(&entries?)? else {
                continue;
            };
            if writer.is_none() {
                writer = Some(RunWriter::create(path.clone(), rows.schema())?);
            }
            writer.as_mut().expect("made above").write(&rows)?;
        }
        writer.map(RunWriter::finish).transpose()
    }))
}

/// A full snapshot of a spilled store as the next of its snapshot runs
/// (counted up): the store frozen now, read by the snapshot's writer
/// ([`store_run`], a run's row group of entries at a time); nothing when
/// the store is empty.
pub fn whole_store<D>(core: &mut SpillCore, decode: D) -> Result<Vec<Deferred>>
where
    D: FnMut(&[Entry]) -> Result<Option<RecordBatch>> + Send + 'static,
{
    core.runs += 1;
    let n = core.runs;
    let store = core.open_store()?;
    if store.is_empty()? {
        return Ok(Vec::new());
    }
    let path = store.snapshot_run_path(n)?;
    let rows = crate::snapshot::RUN_ROW_GROUP_ROWS;
    Ok(vec![store_run(store.frozen(), path, rows, decode)])
}

/// What an incremental snapshot of spilled state reads ([`store_delta`]).
pub struct DeltaOf<P, M, Z = Frozen> {
    /// The store at the barrier (or the spilled files, [`crate::key_group_files`]).
    pub frozen: Z,
    /// Where the delta's run goes.
    pub path: PathBuf,
    /// Flushed keys read back at a time.
    pub chunk: usize,
    /// The parts taken from memory at the barrier: the keys it changed
    /// since the last snapshot.
    pub memory: Vec<P>,
    /// Whether a store key is one of those (memory is newer).
    pub in_memory: M,
    /// The keys written to the store since the last snapshot.
    pub flushed: FlushedKeys,
}

impl<P, M> DeltaOf<P, M> {
    /// The delta of a spilled operator at a barrier: memory's `parts` and
    /// the keys flushed to its store since the last snapshot (taken, leaving
    /// none), with the store frozen now and the next of its snapshot runs
    /// (counted up) as the path; `None` when neither has anything.
    pub fn take(core: &mut SpillCore, parts: Vec<P>, in_memory: M) -> Result<Option<Self>> {
        let flushed = std::mem::take(core.flushed.get_or_insert_with(FlushedKeys::default));
        if parts.is_empty() && flushed.is_empty() {
            return Ok(None);
        }
        core.runs += 1;
        let runs = core.runs;
        let store = core.open_store()?;
        Ok(Some(DeltaOf {
            frozen: store.frozen(),
            path: store.snapshot_run_path(runs)?,
            chunk: WRITE_CHUNK,
            memory: parts,
            in_memory,
            flushed,
        }))
    }
}

/// An incremental snapshot of spilled state, as a run sorted by key group:
/// the memory parts of `delta` and, read from its frozen store by
/// `read_back` a chunk of keys at a time, the parts of the flushed keys not
/// in memory; `finish` makes parts one batch sorted by key group. The
/// flushed keys come in store-key order, which is key-group order, so each
/// chunk is written with the memory rows of key groups up to its last, and
/// the writer holds one chunk at a time, not the whole delta.
pub fn store_delta<P, M, Z, R, F>(delta: DeltaOf<P, M, Z>, mut read_back: R, mut finish: F) -> Deferred
where
    P: Send + 'static,
    M: Fn(&[u8]) -> bool + Send + 'static,
    Z: Send + 'static,
    R: FnMut(&Z, &[&[u8]]) -> Result<Vec<P>> + Send + 'static,
    F: FnMut(Vec<P>) -> Result<Option<RecordBatch>> + Send + 'static,
{
    let DeltaOf {
        frozen,
        path,
        chunk,
        memory: parts,
        in_memory,
        mut flushed,
    } = delta;
    Deferred(Box::new(move |live| {
        let mut memory = MemoryRows::new(finish(parts)?)?;
        let mut writer: Option<RunWriter> = None;
        let mut write = |rows: Option<RecordBatch>| -> Result<()> {
            let Some(rows) = rows.filter(|r| r.num_rows() > 0) else {
                return Ok(());
            };
            if writer.is_none() {
                writer = Some(RunWriter::create(path.clone(), rows.schema())?);
            }
            writer.as_mut().expect("made above").write(&rows)
        };
        flushed.drain_sorted(chunk, |keys| {
            if !live() {
                return Err(aborted());
            }
            let keys: Vec<&[u8]> = keys.iter().copied().filter(|k| !in_memory(k)).collect();
            let Some(chunk) = finish(read_back(&frozen, &keys)?)? else {
                return Ok(());
            };
            let last = chunk
                .column(0)
                .as_primitive::<UInt32Type>()
                .values()
                .last()
                .copied();
            let mut both: Vec<RecordBatch> = memory.take_through(last).into_iter().collect();
            both.push(chunk);
            write(concat_by_key_group(both)?)
        })?;
        write(memory.take_through(Some(u32::MAX)))?;
        writer.map(RunWriter::finish).transpose()
    }))
}

/// A part that deletes the state keys of store keys `missing` (key group,
/// then state key, [`crate::entry`]); `None` for none.
pub fn deleted_entries(schema: &SchemaRef, missing: &[&[u8]]) -> Result<Option<ReplacedPart>> {
    if missing.is_empty() {
        return Ok(None);
    }
    let groups = (missing.iter())
        .map(|k| split_entry_key(k).map(|(group, _)| group))
        .collect::<Result<Vec<u32>>>()?;
    let keys = BinaryArray::from_iter_values(missing.iter().map(|k| &k[4..]));
    Ok(Some(deleted_part(schema, groups.into(), keys)?))
}

/// The incremental snapshot of a spilled operator whose store holds one
/// entry per state key (`key group | state key`, [`crate::entry`])
/// as a replacing delta ([`crate::incremental::DeltaKind::Replace`]):
/// memory's `parts`, those of the state keys `in_memory` says memory
/// changed since the last snapshot (taken at the barrier), and the entries
/// of the keys written to the store since then, read back from the store
/// frozen now by the snapshot's writer and made parts by `decode`; a key
/// the store no longer has is deleted. `None`: nothing changed.
pub fn keyed_delta<M, D>(
    core: &mut SpillCore,
    memory: (Vec<ReplacedPart>, M),
    schema: SchemaRef,
    mut decode: D,
) -> Result<Option<Deferred>>
where
    M: Fn(&[u8]) -> bool + Send + 'static,
    D: FnMut(&[Entry]) -> Result<Vec<ReplacedPart>> + Send + 'static,
{
    let (parts, in_memory) = memory;
    let in_memory = move |k: &[u8]| k.get(4..).is_some_and(&in_memory);
    let Some(of) = DeltaOf::take(core, parts, in_memory)? else {
        return Ok(None);
    };
    let finish_schema = schema.clone();
    Ok(Some(store_delta(
        of,
        move |frozen: &Frozen, keys: &[&[u8]]| {
            let (live, missing) = frozen.get_each(keys)?;
            let mut parts = decode(&live)?;
            parts.extend(deleted_entries(&schema, &missing)?);
            Ok(parts)
        },
        move |parts| replacement_rows(&finish_schema, parts, false),
    )))
}

/// The incremental snapshot of a spilled operator that wrote all its
/// memory to the store at the barrier and whose store holds each state
/// key's rows under entries sharing a prefix (`key group | ...`), as a
/// replacing delta: the entries under each prefix written to or removed
/// from the store since the last snapshot (`flushed`), read from the store
/// frozen now by the snapshot's writer and made parts by `decode`; a prefix
/// without entries deletes the state key `gone` gives for it (with its key
/// group). `None`: nothing changed.
pub fn prefixed_delta<G, D>(
    core: &mut SpillCore,
    schema: SchemaRef,
    gone: G,
    mut decode: D,
) -> Result<Option<Deferred>>
where
    G: Fn(&[u8]) -> Result<(u32, Vec<u8>)> + Send + 'static,
    D: FnMut(&[Entry]) -> Result<Vec<ReplacedPart>> + Send + 'static,
{
    let Some(of) = DeltaOf::take(core, Vec::new(), |_: &[u8]| false)? else {
        return Ok(None);
    };
    let finish_schema = schema.clone();
    Ok(Some(store_delta(
        of,
        move |frozen: &Frozen, prefixes: &[&[u8]]| {
            let (mut entries, mut groups, mut keys) = (Vec::new(), Vec::new(), Vec::new());
            for prefix in prefixes {
                let found = frozen.prefixed(prefix)?;
                if found.is_empty() {
                    let (group, key) = gone(prefix)?;
                    groups.push(group);
                    keys.push(key);
                }
                entries.extend(found);
            }
            let mut parts = decode(&entries)?;
            if !keys.is_empty() {
                let keys = BinaryArray::from_iter_values(keys);
                parts.push(deleted_part(&schema, groups.into(), keys)?);
            }
            Ok(parts)
        },
        move |parts| replacement_rows(&finish_schema, parts, false),
    )))
}

/// A full snapshot of a spilled store (its operator's memory written to
/// it) as the base of a replacing chain: [`whole_store`], each chunk of
/// entries made parts (rows with their state keys) by `decode`. The keys
/// noted for the next delta are forgotten: the base holds them.
pub fn keyed_base<D>(core: &mut SpillCore, schema: SchemaRef, mut decode: D) -> Result<Vec<Deferred>>
where
    D: FnMut(&[Entry]) -> Result<Vec<ReplacedPart>> + Send + 'static,
{
    core.flushed.as_mut().map(FlushedKeys::clear);
    whole_store(core, move |entries| {
        replacement_rows(&schema, decode(entries)?, true)
    })
}

/// The memory part of a delta (sorted by key group), given out a key-group
/// range at a time.
struct MemoryRows {
    rows: Option<RecordBatch>,
    /// Rows before it are given out.
    from: usize,
}

impl MemoryRows {
    fn new(rows: Option<RecordBatch>) -> Result<Self> {
        let rows = rows.map(sorted_by_key_group).transpose()?;
        Ok(MemoryRows { rows, from: 0 })
    }

    /// The rows not given out yet of key groups up to `last` (none: no rows).
    fn take_through(&mut self, last: Option<u32>) -> Option<RecordBatch> {
        let (rows, last) = (self.rows.as_ref()?, last?);
        let groups = rows.column(0).as_primitive::<UInt32Type>().values();
        let end = self.from + groups[self.from..].partition_point(|g| *g <= last);
        let taken = (end > self.from).then(|| rows.slice(self.from, end - self.from));
        self.from = end;
        taken
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{AsArray, UInt32Array};
    use arrow::datatypes::{DataType, Field, Schema, UInt32Type};

    use super::*;
    use crate::store::Store;

    /// Rows of `_key_group` from store keys (4 bytes, big-endian).
    fn key_groups(entries: &[Entry]) -> Result<Option<RecordBatch>> {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "_key_group",
            DataType::UInt32,
            false,
        )]));
        let groups: Vec<u32> = (entries.iter())
            .map(|(k, _)| u32::from_be_bytes([k[0], k[1], k[2], k[3]]))
            .filter(|g| g % 2 == 0)
            .collect();
        let column = Arc::new(UInt32Array::from(groups));
        Ok(Some(RecordBatch::try_new(schema, vec![column])?))
    }

    #[test]
    fn a_deferred_run_holds_the_store_as_it_was_when_frozen() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 16 << 20).unwrap();
        let keys: Vec<[u8; 4]> = (0u32..10).map(u32::to_be_bytes).collect();
        store.write(keys.iter().map(|k| (&k[..], &b""[..])), []).unwrap();
        let run = store_run(store.frozen(), dir.path().join("run.parquet"), 3, key_groups);
        store.write([], keys.iter().map(|k| &k[..])).unwrap();
        assert!(store.is_empty().unwrap());
        let run = run.write(&|| true).unwrap().expect("rows");
        assert_eq!(run.info.rows, 5, "the even key groups of the ten keys frozen");
        let mut cursor = run.cursor().unwrap();
        let read = cursor.take_below(u32::MAX).unwrap();
        let groups: Vec<u32> = (read.iter())
            .flat_map(|b| b.column(0).as_primitive::<UInt32Type>().values().to_vec())
            .collect();
        assert_eq!(groups, [0, 2, 4, 6, 8]);
    }

    #[test]
    fn a_deferred_run_of_an_aborted_checkpoint_stops_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 16 << 20).unwrap();
        store.write([(&0u32.to_be_bytes()[..], &b""[..])], []).unwrap();
        let path = dir.path().join("run.parquet");
        let run = store_run(store.frozen(), path.clone(), 3, key_groups);
        assert!(run.write(&|| false).is_err());
        assert!(!path.exists());
    }

    #[test]
    fn a_deferred_run_without_rows_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 16 << 20).unwrap();
        store.write([(&1u32.to_be_bytes()[..], &b""[..])], []).unwrap();
        let run = store_run(store.frozen(), dir.path().join("run.parquet"), 3, |_| Ok(None));
        assert!(run.write(&|| true).unwrap().is_none());
    }

    /// Rows of `_key_group` and `from` of store keys (4 bytes, big-endian).
    fn rows_of(keys: &[&[u8]], from: &str) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("_key_group", DataType::UInt32, false),
            Field::new("from", DataType::Utf8, false),
        ]));
        let groups: Vec<u32> = keys
            .iter()
            .map(|k| u32::from_be_bytes([k[0], k[1], k[2], k[3]]))
            .collect();
        let from = arrow::array::StringArray::from(vec![from; keys.len()]);
        RecordBatch::try_new(schema, vec![Arc::new(UInt32Array::from(groups)), Arc::new(from)]).unwrap()
    }

    #[test]
    fn a_delta_interleaves_memory_rows_with_the_flushed_keys_read_back_in_key_group_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 16 << 20).unwrap();
        let stored: Vec<[u8; 4]> = [1u32, 3, 5, 7, 9].map(u32::to_be_bytes).to_vec();
        store
            .write(stored.iter().map(|k| (&k[..], &b""[..])), [])
            .unwrap();
        let mut flushed = FlushedKeys::default();
        stored.iter().rev().for_each(|k| flushed.push(k));
        let memory: Vec<[u8; 4]> = [8u32, 2, 3].map(u32::to_be_bytes).to_vec();
        let memory_refs: Vec<&[u8]> = memory.iter().map(|k| &k[..]).collect();
        let in_memory_keys: Vec<Vec<u8>> = memory.iter().map(|k| k.to_vec()).collect();
        let of = DeltaOf {
            frozen: store.frozen(),
            path: dir.path().join("delta.parquet"),
            chunk: 2,
            memory: vec![rows_of(&memory_refs, "memory")],
            in_memory: move |k: &[u8]| in_memory_keys.iter().any(|m| m[..] == *k),
            flushed,
        };
        let delta = store_delta(
            of,
            |frozen: &Frozen, keys: &[&[u8]]| {
                let (found, _) = frozen.get_each(keys)?;
                let found: Vec<&[u8]> = found.iter().map(|(k, _)| &k[..]).collect();
                Ok(vec![rows_of(&found, "store")])
            },
            concat_by_key_group,
        );
        // Changed after the barrier: not in the delta.
        store.write([], [&stored[0][..]]).unwrap();
        let run = delta.write(&|| true).unwrap().expect("rows");
        let read = run.cursor().unwrap().take_below(u32::MAX).unwrap();
        let rows: Vec<(u32, String)> = (read.iter())
            .flat_map(|b| {
                let groups = b.column(0).as_primitive::<UInt32Type>().values().to_vec();
                let from = b
                    .column(1)
                    .as_string::<i32>()
                    .iter()
                    .map(|s| s.unwrap().to_string())
                    .collect::<Vec<_>>();
                groups.into_iter().zip(from)
            })
            .collect();
        let expected = [
            (1, "store"),
            (2, "memory"),
            (3, "memory"),
            (5, "store"),
            (7, "store"),
            (8, "memory"),
            (9, "store"),
        ];
        let expected: Vec<(u32, String)> = expected.iter().map(|(g, f)| (*g, f.to_string())).collect();
        assert_eq!(
            rows, expected,
            "key 3 from memory, which is newer; in key-group order"
        );
    }
}
