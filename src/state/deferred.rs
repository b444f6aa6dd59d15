//! State a snapshot writes after its task went on: a frozen store, read on the snapshot writer's thread.
//!
//! A full snapshot of spilled state is the whole store (possibly many times
//! the memory budget), and an incremental one reads back every key written
//! to the store since the last snapshot. The task freezes the store at the
//! barrier (a fjall snapshot, no copy); the snapshot writer then reads the
//! frozen store, into one run that the checkpoint links, or into the
//! delta's rows, while the task goes on with its input, as Flink's RocksDB
//! backend uploads its files asynchronously.
//!
//! ```text
//!  task:   barrier ─► memory to the store ─► freeze ─► next batch ...
//!  writer:                                   frozen store ─► decode ─► run / rows ─► file
//! ```

use std::path::PathBuf;

use arrow::array::RecordBatch;

use crate::state::flushed::FlushedKeys;
use crate::state::runs::{Run, RunWriter};
use crate::state::store::{Entry, Frozen, WRITE_CHUNK};
use crate::{Error, Result};

/// What a deferred part of a snapshot comes to.
#[derive(Debug)]
pub enum Written {
    /// A run the checkpoint links.
    Run(Run),
    /// The snapshot's rows.
    Rows(RecordBatch),
}

/// Reads the frozen state, or finds there is nothing in it; told whether
/// the checkpoint is still going on.
type Write = Box<dyn FnOnce(&dyn Fn() -> bool) -> Result<Option<Written>> + Send>;

/// Part of a snapshot its writer reads ([`crate::runtime::OperatorSnapshot::deferred`]).
pub struct Deferred(Write);

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Deferred")
    }
}

impl Deferred {
    /// Reads it while `live` says the checkpoint goes on (`None`: no rows).
    pub fn write(self, live: &dyn Fn() -> bool) -> Result<Option<Written>> {
        (self.0)(live)
    }
}

/// The checkpoint went away while its spilled state was read.
fn aborted() -> Error {
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
        Ok(writer.map(RunWriter::finish).transpose()?.map(Written::Run))
    }))
}

/// The rows of an incremental snapshot of spilled state: the parts taken
/// from memory at the barrier (the keys it changed since the last
/// snapshot) and, read from `frozen` by `read_back` `WRITE_CHUNK` keys at a
/// time, the parts of the `flushed` keys (written to the store since) that
/// are not `in_memory` (memory is newer); `finish` makes them one batch
/// sorted by key group.
pub fn store_delta<P, M, R, F>(
    frozen: Frozen,
    mut parts: Vec<P>,
    in_memory: M,
    mut flushed: FlushedKeys,
    mut read_back: R,
    finish: F,
) -> Deferred
where
    P: Send + 'static,
    M: Fn(&[u8]) -> bool + Send + 'static,
    R: FnMut(&Frozen, &[&[u8]]) -> Result<Vec<P>> + Send + 'static,
    F: FnOnce(Vec<P>) -> Result<Option<RecordBatch>> + Send + 'static,
{
    Deferred(Box::new(move |live| {
        flushed.drain_sorted(WRITE_CHUNK, |keys| {
            if !live() {
                return Err(aborted());
            }
            let keys: Vec<&[u8]> = keys.iter().copied().filter(|k| !in_memory(k)).collect();
            if !keys.is_empty() {
                parts.extend(read_back(&frozen, &keys)?);
            }
            Ok(())
        })?;
        Ok(finish(parts)?.map(Written::Rows))
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{AsArray, UInt32Array};
    use arrow::datatypes::{DataType, Field, Schema, UInt32Type};

    use super::*;
    use crate::state::store::Store;

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
        let Some(Written::Run(run)) = run.write(&|| true).unwrap() else {
            panic!("a run")
        };
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
}
