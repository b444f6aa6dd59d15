//! The spilling backend's store for state read by key: an embedded LSM (fjall) in a local directory.
//!
//! Operators whose state is read and written key by key (a non-windowed
//! aggregation reads a group's state for every row of it) keep the keys
//! that do not fit in memory here, each key's newest state as one value.
//! The store is a local cache of state, never a checkpoint: nothing is
//! synced, and it is deleted when the operator goes (a restore fills a new
//! one from the checkpoint's Parquet files). Keys start with their key
//! group (4 bytes, big-endian), so a scan reads state in key-group order,
//! as a state file holds it.

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Error, Result};

/// Stores made by this process, numbered (each gets a directory of its own).
static STORES: AtomicU64 = AtomicU64::new(0);

/// Entries a write batch holds before it is committed.
const BATCH_ENTRIES: usize = 16_384;

/// Keys an operator writes to its store (or state rows it restores) at a
/// time: their values are in memory until they are.
pub const WRITE_CHUNK: usize = 16_384;

/// `rows` [`WRITE_CHUNK`] at a time, as a restore adds them (then writes
/// memory to the store if it is full).
pub fn in_chunks(
    rows: &arrow::record_batch::RecordBatch,
) -> impl Iterator<Item = arrow::record_batch::RecordBatch> + '_ {
    let n = rows.num_rows();
    (0..n)
        .step_by(WRITE_CHUNK)
        .map(move |start| rows.slice(start, (n - start).min(WRITE_CHUNK)))
}

/// A time as bytes in its order (big-endian, the sign bit flipped), for
/// store keys ordered by time.
pub fn ordered(time: i64) -> [u8; 8] {
    ((time as u64) ^ (1 << 63)).to_be_bytes()
}

/// The time of [`ordered`] bytes at the start of `bytes` (`None`: too few).
pub fn time_of(bytes: &[u8]) -> Option<i64> {
    let bytes: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
    Some((u64::from_be_bytes(bytes) ^ (1 << 63)) as i64)
}

/// Store entries a TTL sweep reads at a time.
pub const SWEEP: usize = 4096;

/// A key and its value, as the store gives them.
pub type Entry = (fjall::Slice, fjall::Slice);

/// One operator subtask's key-value store.
pub struct Store {
    // Dropped in this order: the partition before its keyspace, whose drop
    // deletes the directory.
    partition: fjall::PartitionHandle,
    keyspace: fjall::Keyspace,
    dir: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("dir", &self.dir).finish()
    }
}

/// A failure of the store, with its directory.
fn failed(dir: &Path, e: impl std::fmt::Display) -> Error {
    Error::State(format!("spilled state in {}: {e}", dir.display()))
}

impl Store {
    /// A new, empty store in a directory of its own under `parent`, in
    /// about `memory` bytes (at least 16 MB): memtables of an eighth of it
    /// (4 to 64 MB; smaller ones make many small files to compact, 1.7x
    /// slower at 1 MB than at 8 MB), write buffers of twice that, a block
    /// cache of a quarter, and the rest for its bloom filters and indexes.
    /// fjall counts a memtable and a cached block by their bytes of keys
    /// and values; in memory they took 1.6x and 1.9x that (heaptrack, 5M
    /// keys), which the shares allow for.
    pub fn open(parent: &Path, memory: usize) -> Result<Store> {
        Store::open_with(parent, memory, true)
    }

    /// [`Store::open`], with bloom filters or without (`blooms`).
    pub fn open_with(parent: &Path, memory: usize, blooms: bool) -> Result<Store> {
        let n = STORES.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("weir-store-{}-{n}", std::process::id()));
        let memory = memory.max(16 << 20) as u64;
        let memtable = (memory / 8).clamp(4 << 20, 64 << 20);
        let cache = (memory / 4).max(1 << 20);
        // The store's threads free memory as they flush and compact, which
        // the allocator would keep for a second: 60 MB of the resident set
        // at 2M keys and a 16 MB share.
        weir_common::alloc::return_freed_memory_at_once();
        let keyspace = fjall::Config::new(&dir)
            .temporary(true)
            .manual_journal_persist(true)
            .fsync_ms(None)
            .flush_workers(1)
            .compaction_workers(1)
            .cache_size(cache)
            .max_write_buffer_size(2 * memtable)
            // fjall's least; the journal is never read (nothing is recovered).
            .max_journaling_size(24 << 20)
            .open()
            .map_err(|e| failed(&dir, e))?;
        // A compaction holds two hashes (16 bytes) of every key of the
        // segment it writes until the segment is done: 34 MB of a 16 MB
        // store's resident set at fjall's 64 MB segments and 2M keys.
        let segments = fjall::compaction::Leveled {
            target_size: (memory / 8).clamp(4 << 20, 64 << 20) as u32,
            ..Default::default()
        };
        let memtable = memtable as u32;
        let options = fjall::PartitionCreateOptions::default()
            .manual_journal_persist(true)
            .bloom_filter_bits(blooms.then_some(10))
            .max_memtable_size(memtable)
            .compaction_strategy(fjall::compaction::Strategy::Leveled(segments));
        let partition = keyspace
            .open_partition("state", options)
            .map_err(|e| failed(&dir, e))?;
        Ok(Store {
            partition,
            keyspace,
            dir,
        })
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<fjall::Slice>> {
        self.partition.get(key).map_err(|e| failed(&self.dir, e))
    }

    /// Sets each key of `puts` to its value and removes each key of `removes`.
    pub fn write<'a>(
        &self,
        puts: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        removes: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<()> {
        let mut batch = self.keyspace.batch().durability(None);
        for (key, value) in puts {
            batch.insert(&self.partition, key, value);
            if batch.len() >= BATCH_ENTRIES {
                self.commit(std::mem::replace(
                    &mut batch,
                    self.keyspace.batch().durability(None),
                ))?;
            }
        }
        for key in removes {
            batch.remove(&self.partition, key);
            if batch.len() >= BATCH_ENTRIES {
                self.commit(std::mem::replace(
                    &mut batch,
                    self.keyspace.batch().durability(None),
                ))?;
            }
        }
        self.commit(batch)
    }

    fn commit(&self, batch: fjall::Batch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        batch.commit().map_err(|e| failed(&self.dir, e))
    }

    /// Up to `limit` entries in key order, from the first key at or after
    /// `from`.
    pub fn scan(&self, from: &[u8], limit: usize) -> Result<Vec<(fjall::Slice, fjall::Slice)>> {
        self.entries((Bound::Included(from), Bound::Unbounded), limit)
    }

    /// Up to `limit` entries within `bounds`, in key order.
    fn entries(&self, bounds: (Bound<&[u8]>, Bound<&[u8]>), limit: usize) -> Result<Vec<Entry>> {
        self.partition
            .range::<&[u8], _>(bounds)
            .take(limit)
            .map(|entry| entry.map_err(|e| failed(&self.dir, e)))
            .collect()
    }

    /// Up to `limit` entries in key order with keys from `from` to `to`,
    /// both included (a range scan: one key's entries of a time range).
    pub fn range(&self, from: &[u8], to: &[u8], limit: usize) -> Result<Vec<Entry>> {
        self.entries((Bound::Included(from), Bound::Included(to)), limit)
    }

    /// Gives each entry with a key from `from` to `to` (both included), in
    /// key order, to `visit`, until it returns false: one scan, where a
    /// lookup each of many keys in the range would read ~16 times longer.
    pub fn visit_range(&self, from: &[u8], to: &[u8], mut visit: impl FnMut(Entry) -> bool) -> Result<()> {
        for entry in self
            .partition
            .range::<&[u8], _>((Bound::Included(from), Bound::Included(to)))
        {
            if !visit(entry.map_err(|e| failed(&self.dir, e))?) {
                break;
            }
        }
        Ok(())
    }

    /// The next up to `limit` entries from `cursor` on, which moves past
    /// them; none when the cursor is at the end, which starts it again at
    /// the first key (a scan of the whole store, or a sweep going round it
    /// a slice at a time).
    pub fn scan_on(&self, cursor: &mut Vec<u8>, limit: usize) -> Result<Vec<(fjall::Slice, fjall::Slice)>> {
        let entries = self.scan(cursor, limit)?;
        match entries.last() {
            Some((last, _)) => *cursor = key_after(last),
            None => cursor.clear(),
        }
        Ok(entries)
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> Result<bool> {
        self.partition.is_empty().map_err(|e| failed(&self.dir, e))
    }

    /// Where the run of snapshot `n` read from it goes: beside the store,
    /// in a directory made here.
    pub fn snapshot_run_path(&self, n: u64) -> Result<PathBuf> {
        let dir = self.dir.with_extension("runs");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        Ok(dir.join(format!("snapshot-{n}.parquet")))
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes it takes on disk.
    pub fn disk_space(&self) -> u64 {
        self.keyspace.disk_space()
    }

    /// Its entries as they are now, to read on another thread while this
    /// one goes on writing (fjall keeps the versions a snapshot sees).
    pub fn frozen(&self) -> Frozen {
        Frozen {
            snapshot: self.partition.snapshot(),
            dir: self.dir.clone(),
        }
    }
}

/// A read-only view of a store at one moment ([`Store::frozen`]).
pub struct Frozen {
    snapshot: fjall::Snapshot,
    dir: PathBuf,
}

impl Frozen {
    /// The entries of those of `keys` it holds, and the keys it does not hold.
    pub fn get_each<'k>(&self, keys: &[&'k [u8]]) -> Result<(Vec<Entry>, Vec<&'k [u8]>)> {
        let (mut found, mut missing) = (Vec::new(), Vec::new());
        for &key in keys {
            match self.snapshot.get(key).map_err(|e| failed(&self.dir, e))? {
                Some(value) => found.push((fjall::Slice::from(key), value)),
                None => missing.push(key),
            }
        }
        Ok((found, missing))
    }

    /// Every entry whose key starts with `prefix`, in key order.
    pub fn prefixed(&self, prefix: &[u8]) -> Result<Vec<Entry>> {
        (self.snapshot.prefix(prefix))
            .map(|entry| entry.map_err(|e| failed(&self.dir, e)))
            .collect()
    }

    /// Every entry in key order, `chunk` at a time (the last may be
    /// shorter; none after the end).
    pub fn chunks(&self, chunk: usize) -> impl Iterator<Item = Result<Vec<Entry>>> + 'static {
        let dir = self.dir.clone();
        let mut entries = self.snapshot.range::<&[u8], _>(..);
        std::iter::from_fn(move || {
            let mut read = Vec::new();
            for entry in entries.by_ref() {
                match entry {
                    Ok(entry) => read.push(entry),
                    Err(e) => return Some(Err(failed(&dir, e))),
                }
                if read.len() == chunk {
                    break;
                }
            }
            (!read.is_empty()).then_some(Ok(read))
        })
    }
}

/// The smallest key after `key` (for the next scan to start past it).
fn key_after(key: &[u8]) -> Vec<u8> {
    let mut next = Vec::with_capacity(key.len() + 1);
    next.extend_from_slice(key);
    next.push(0);
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &Path) -> Store {
        Store::open(dir, 8 << 20).expect("a store")
    }

    #[test]
    fn written_values_are_read_back_and_removed_keys_are_gone() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        assert!(s.is_empty().unwrap());
        s.write([(&b"a"[..], &b"1"[..]), (b"b", b"2")], []).unwrap();
        s.write([(&b"a"[..], &b"3"[..])], [&b"b"[..]]).unwrap();
        assert_eq!(s.get(b"a").unwrap().as_deref(), Some(&b"3"[..]));
        assert_eq!(s.get(b"b").unwrap(), None);
    }

    #[test]
    fn a_scan_goes_on_in_key_order_after_the_last_key_it_read() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let keys: Vec<[u8; 4]> = [7u32, 1, 300, 2].map(u32::to_be_bytes).to_vec();
        s.write(keys.iter().map(|k| (&k[..], &b""[..])), []).unwrap();
        let first = s.scan(&[], 2).unwrap();
        let read: Vec<&[u8]> = first.iter().map(|(k, _)| &k[..]).collect();
        assert_eq!(read, [&1u32.to_be_bytes()[..], &2u32.to_be_bytes()[..]]);
        let rest = s.scan(&key_after(&first[1].0), 10).unwrap();
        let read: Vec<&[u8]> = rest.iter().map(|(k, _)| &k[..]).collect();
        assert_eq!(read, [&7u32.to_be_bytes()[..], &300u32.to_be_bytes()[..]]);
    }

    #[test]
    fn a_range_reads_the_keys_between_its_bounds_both_included_up_to_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let keys: Vec<[u8; 4]> = (0u32..10).map(u32::to_be_bytes).collect();
        s.write(keys.iter().map(|k| (&k[..], &b""[..])), []).unwrap();
        let read = |entries: Vec<Entry>| entries.iter().map(|(k, _)| k.to_vec()).collect::<Vec<_>>();
        let all = read(s.range(&keys[2], &keys[5], 100).unwrap());
        assert_eq!(all, keys[2..=5].iter().map(|k| k.to_vec()).collect::<Vec<_>>());
        assert_eq!(read(s.range(&keys[2], &keys[5], 2).unwrap()).len(), 2);
        assert!(s.range(&keys[5], &keys[2], 100).unwrap().is_empty());
    }

    #[test]
    fn a_visit_reads_the_range_in_key_order_until_told_to_stop() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let keys: Vec<[u8; 4]> = (0u32..10).map(u32::to_be_bytes).collect();
        s.write(keys.iter().map(|k| (&k[..], &b""[..])), []).unwrap();
        let mut seen = Vec::new();
        s.visit_range(&keys[2], &keys[8], |(k, _)| {
            seen.push(k.to_vec());
            seen.len() < 4
        })
        .unwrap();
        assert_eq!(seen, keys[2..6].iter().map(|k| k.to_vec()).collect::<Vec<_>>());
    }

    #[test]
    fn a_frozen_store_reads_its_entries_as_they_were_while_the_store_changes() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let keys: Vec<[u8; 4]> = (0u32..5).map(u32::to_be_bytes).collect();
        s.write(keys.iter().map(|k| (&k[..], &b"old"[..])), []).unwrap();
        let frozen = s.frozen();
        s.write([(&keys[0][..], &b"new"[..])], [&keys[1][..]]).unwrap();
        let chunks: Vec<Vec<Entry>> = frozen.chunks(2).collect::<Result<_>>().unwrap();
        let sizes: Vec<usize> = chunks.iter().map(Vec::len).collect();
        assert_eq!(sizes, [2, 2, 1]);
        let read: Vec<(&[u8], &[u8])> = chunks.iter().flatten().map(|(k, v)| (&k[..], &v[..])).collect();
        let expected: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"old"[..])).collect();
        assert_eq!(read, expected);
        assert_eq!(s.get(&keys[0]).unwrap().as_deref(), Some(&b"new"[..]));
    }

    #[test]
    fn the_store_directory_goes_with_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        s.write([(&b"k"[..], &b"v"[..])], []).unwrap();
        let made = s.dir.clone();
        assert!(made.exists());
        drop(s);
        assert!(!made.exists());
    }
}
