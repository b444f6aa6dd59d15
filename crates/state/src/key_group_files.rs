//! Spilled state as files per key group (Arrow IPC), each written whole and read whole.
//!
//! A spilled non-windowed aggregation reads a key group's stored state at
//! once, when enough of its rows wait ([`crate::store`]'s LSM rewrote every
//! entry at each of its compactions: 32 s of 51 on 20M rows over 5M keys).
//! Here a spill writes each key group's state rows as one file, and a read
//! takes the key group's files whole: its state moves back to memory and
//! the files go, so a key's state is in memory or in its key group's files,
//! never both. Files never change: a snapshot freezes them by holding them
//! ([`KeyGroupFiles::frozen`]) while the task goes on, and its writer reads
//! them into one state run.
//!
//! ```text
//!   spill:  memory ──► kg 0: file   kg 1: file   kg 5: file ...
//!   read:   kg 1's files ──► memory (the files go)
//! ```

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::ipc::reader::FileReader;
use arrow::ipc::writer::FileWriter;
use arrow::record_batch::RecordBatch;

use crate::deferred::Deferred;
use crate::runs::{RunFile, RunWriter};
use crate::{Error, Result};

/// Directories made by this process, numbered.
static DIRS: AtomicU64 = AtomicU64::new(0);

/// Items `0..groups.len()`, each as `item(i)`, per key group (`groups[i]`),
/// in key-group order and within one in their order: a bucket each (a
/// stable sort took 6% of a spilled run).
pub fn by_key_group(groups: &[u32], item: impl Fn(usize) -> u32) -> Vec<(u32, Vec<u32>)> {
    let slots = groups.iter().max().map_or(0, |g| *g as usize + 1);
    let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); slots];
    for (i, group) in groups.iter().enumerate() {
        buckets[*group as usize].push(item(i));
    }
    (0u32..)
        .zip(buckets)
        .filter(|(_, items)| !items.is_empty())
        .collect()
}

/// One file of a key group: where, and its rows.
#[derive(Debug, Clone)]
struct KeyGroupFile {
    file: Arc<RunFile>,
    rows: usize,
}

/// Files read that a write may take again, at most.
const FREE_FILES: usize = 1024;

/// An operator subtask's spilled state, per key group.
#[derive(Debug)]
pub struct KeyGroupFiles {
    dir: PathBuf,
    /// Files made (names the next).
    written: u64,
    files: BTreeMap<u32, Vec<KeyGroupFile>>,
    /// Files read and held by nothing else (no snapshot), for the next
    /// writes to write over: a file made where thousands had just been
    /// deleted made ext4 search its recently deleted inodes, 40% of a
    /// spilled OVER aggregation's time. Deleted with the rest; until then
    /// they hold what they held.
    free: Vec<RunFile>,
}

/// A failure of a spilled file, with its path.
fn failed(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::State(format!("spilled state in {}: {e}", path.display()))
}

impl KeyGroupFiles {
    /// None yet, in a new directory of their own under `parent`.
    pub fn open(parent: &Path) -> Result<Self> {
        let n = DIRS.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("weir-groups-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        Ok(KeyGroupFiles {
            dir,
            written: 0,
            files: BTreeMap::new(),
            free: Vec::new(),
        })
    }

    /// Adds `rows` (all of `key_group`) as a file of it; nothing without rows.
    pub fn write(&mut self, key_group: u32, rows: &RecordBatch) -> Result<()> {
        if rows.num_rows() == 0 {
            return Ok(());
        }
        let file_ref = match self.free.pop() {
            Some(free) => free,
            None => {
                self.written += 1;
                // The directory went with its last file, if all were read.
                std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
                RunFile(self.dir.join(format!("{}.arrow", self.written)))
            }
        };
        let path = file_ref.0.clone();
        // A free file is written over, not truncated first: ext4 frees and
        // allocates no blocks then, and flushes nothing at its close (as it
        // does for a file truncated to nothing and written again).
        let file = (File::options().write(true).create(true).truncate(false))
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        // Its holder deletes it, from here on even if writing fails.
        let file_ref = Arc::new(file_ref);
        let mut writer =
            FileWriter::try_new(BufWriter::new(file), &rows.schema()).map_err(|e| failed(&path, e))?;
        writer.write(rows).map_err(|e| failed(&path, e))?;
        writer.finish().map_err(|e| failed(&path, e))?;
        let mut file = writer.into_inner().map_err(|e| failed(&path, e))?;
        // What an earlier write left beyond this one goes.
        let end = std::io::Seek::stream_position(&mut file).map_err(|e| Error::io(&path, e))?;
        let file = file.into_inner().map_err(|e| Error::io(&path, e.into_error()))?;
        file.set_len(end).map_err(|e| Error::io(&path, e))?;
        self.files.entry(key_group).or_default().push(KeyGroupFile {
            file: file_ref,
            rows: rows.num_rows(),
        });
        Ok(())
    }

    /// The rows of `key_group`'s files, which go (none when it has none).
    pub fn take(&mut self, key_group: u32) -> Result<Vec<RecordBatch>> {
        let files = self.files.remove(&key_group).unwrap_or_default();
        let rows = read_all(&files)?;
        for file in files {
            let Ok(file) = Arc::try_unwrap(file.file) else {
                continue; // a snapshot holds it
            };
            if self.free.len() < FREE_FILES {
                self.free.push(file);
            }
        }
        Ok(rows)
    }

    /// The rows of `key_group`'s files, which stay.
    pub fn read(&self, key_group: u32) -> Result<Vec<RecordBatch>> {
        self.files.get(&key_group).map_or(Ok(Vec::new()), |f| read_all(f))
    }

    /// Whether `key_group` has files.
    pub fn holds(&self, key_group: u32) -> bool {
        self.files.contains_key(&key_group)
    }

    /// Whether each of key groups `0..count` has files: a table to look
    /// rows up in per batch (a lookup a row took 3% of a spilled GROUP BY).
    pub fn holding(&self, count: u32) -> Vec<bool> {
        (0..count).map(|kg| self.holds(kg)).collect()
    }

    /// Rows in `key_group`'s files.
    pub fn rows_in(&self, key_group: u32) -> usize {
        self.files
            .get(&key_group)
            .map_or(0, |f| f.iter().map(|f| f.rows).sum())
    }

    /// Whether no key group has files.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// How many key groups have files.
    pub fn key_groups(&self) -> usize {
        self.files.len()
    }

    /// The key groups a sweep reads next: from the first after `after`
    /// round the files, until they hold `rows` rows or each came once.
    pub fn to_sweep(&self, after: Option<u32>, rows: usize) -> Vec<u32> {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let (later, earlier) = match after {
            Some(kg) => (
                self.files.range((Excluded(kg), Unbounded)),
                self.files.range((Unbounded, Included(kg))),
            ),
            None => (self.files.range(..), self.files.range(..0)),
        };
        let (mut read, mut next) = (0, Vec::new());
        for (key_group, files) in later.chain(earlier) {
            if read >= rows {
                break;
            }
            next.push(*key_group);
            read += files.iter().map(|f| f.rows).sum::<usize>();
        }
        next
    }

    /// The files as they are now, to read on another thread while these
    /// change (a file is deleted once neither holds it).
    pub fn frozen(&self) -> FrozenFiles {
        FrozenFiles {
            files: self.files.clone(),
        }
    }

    /// Where the run of snapshot `n` goes: beside the files, in a directory
    /// made here.
    pub fn snapshot_run_path(&self, n: u64) -> Result<PathBuf> {
        let dir = self.dir.with_extension("runs");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        Ok(dir.join(format!("snapshot-{n}.parquet")))
    }
}

impl Drop for KeyGroupFiles {
    fn drop(&mut self) {
        // The files go with their last holder, and the directory with them
        // (now, when it has none).
        self.files.clear();
        self.free.clear();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The rows of `files`, in order.
fn read_all(files: &[KeyGroupFile]) -> Result<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    for f in files {
        let path = &f.file.0;
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let reader = FileReader::try_new(BufReader::new(file), None).map_err(|e| failed(path, e))?;
        for batch in reader {
            batches.push(batch.map_err(|e| failed(path, e))?);
        }
    }
    Ok(batches)
}

/// Key-group files at one moment ([`KeyGroupFiles::frozen`]).
#[derive(Debug, Clone)]
pub struct FrozenFiles {
    files: BTreeMap<u32, Vec<KeyGroupFile>>,
}

impl FrozenFiles {
    /// The rows of `key_group`'s files (none when it had none).
    pub fn read(&self, key_group: u32) -> Result<Vec<RecordBatch>> {
        self.files.get(&key_group).map_or(Ok(Vec::new()), |f| read_all(f))
    }

    /// The key groups with files, in order.
    pub fn key_groups(&self) -> Vec<u32> {
        self.files.keys().copied().collect()
    }

    /// Whether no key group had files.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// A full snapshot: every file's rows, key group by key group, as one
    /// run at `path`, read by the snapshot's writer; `None` without rows.
    pub fn into_run(self, path: PathBuf) -> Deferred {
        Deferred::new(move |live| {
            let mut writer: Option<RunWriter> = None;
            for key_group in self.key_groups() {
                if !live() {
                    return Err(crate::deferred::aborted());
                }
                // Files of one part each in key-group order, not together.
                let batches = self.read(key_group)?;
                let rows = match batches.len() {
                    1 => batches,
                    _ => crate::snapshot::concat_by_key_group(batches)?
                        .into_iter()
                        .collect(),
                };
                for rows in rows {
                    if writer.is_none() {
                        writer = Some(RunWriter::create(path.clone(), rows.schema())?);
                    }
                    writer.as_mut().expect("made above").write(&rows)?;
                }
            }
            writer.map(RunWriter::finish).transpose()
        })
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{AsArray, Int64Array, UInt32Array};
    use arrow::datatypes::{DataType, Field, Schema, UInt32Type};

    use super::*;

    fn rows(key_group: u32, values: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("_key_group", DataType::UInt32, false),
            Field::new("v", DataType::Int64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(UInt32Array::from(vec![key_group; values.len()])),
                Arc::new(Int64Array::from(values.to_vec())),
            ],
        )
        .unwrap()
    }

    fn values(batches: &[RecordBatch]) -> Vec<i64> {
        (batches.iter())
            .flat_map(|b| {
                b.column(1)
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect()
    }

    #[test]
    fn items_come_per_key_group_in_key_group_order_and_in_their_order_within_one() {
        let groups = [5, 1, 5, 0, 1, 5];
        let items = by_key_group(&groups, |i| 10 * i as u32);
        assert_eq!(
            items,
            vec![(0, vec![30]), (1, vec![10, 40]), (5, vec![0, 20, 50])]
        );
        assert!(by_key_group(&[], |i| i as u32).is_empty());
    }

    #[test]
    fn a_sweep_goes_round_the_key_groups_until_it_has_read_enough_rows() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = KeyGroupFiles::open(dir.path()).unwrap();
        for kg in [2, 5, 7] {
            files.write(kg, &rows(kg, &[1, 2, 3])).unwrap();
        }
        assert_eq!(files.to_sweep(None, 4), [2, 5], "until 4 rows are read");
        assert_eq!(files.to_sweep(Some(5), 4), [7, 2], "after 5, round");
        assert_eq!(files.to_sweep(Some(6), 100), [7, 2, 5], "each once");
        assert!(files.to_sweep(Some(2), 0).is_empty());
    }

    /// The sizes of the files in `dir`, sorted.
    fn sizes(dir: &Path) -> Vec<u64> {
        let entries = std::fs::read_dir(dir).unwrap();
        let mut sizes: Vec<u64> = entries.map(|e| e.unwrap().metadata().unwrap().len()).collect();
        sizes.sort_unstable();
        sizes
    }

    #[test]
    fn a_key_groups_files_are_read_back_whole_and_then_written_over_by_the_next_writes() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = KeyGroupFiles::open(dir.path()).unwrap();
        files.write(3, &rows(3, &[1, 2])).unwrap();
        files.write(3, &rows(3, &[5])).unwrap();
        files.write(9, &rows(9, &[7])).unwrap();
        files.write(4, &rows(4, &[])).unwrap();
        assert!(files.holds(3) && !files.holds(4), "no file without rows");
        assert_eq!(files.holding(5), [false, false, false, true, false]);
        assert_eq!(files.rows_in(3), 3);
        assert_eq!(values(&files.take(3).unwrap()), [1, 2, 5]);
        assert!(!files.holds(3) && files.rows_in(3) == 0);
        assert!(files.take(3).unwrap().is_empty());
        assert_eq!(files.to_sweep(None, 10), [9]);
        assert_eq!(files.to_sweep(Some(9), 10), [9], "round the files");
        assert_eq!(
            sizes(&files.dir).len(),
            3,
            "the files read stay, for the next writes"
        );
        files.write(9, &rows(9, &[8])).unwrap();
        assert_eq!(sizes(&files.dir).len(), 3, "a write takes a file read");
        assert_eq!(values(&files.take(9).unwrap()), [7, 8]);
        let many: Vec<i64> = (0..1000).collect();
        files.write(7, &rows(7, &many)).unwrap();
        let large = *sizes(&files.dir).last().unwrap();
        assert_eq!(values(&files.take(7).unwrap()), many);
        files.write(7, &rows(7, &[3])).unwrap();
        assert!(
            *sizes(&files.dir).last().unwrap() < large,
            "written over, its tail cut"
        );
        assert_eq!(values(&files.take(7).unwrap()), [3]);
        files.write(4, &rows(4, &[6])).unwrap();
        let frozen = files.frozen();
        files.take(4).unwrap();
        assert_eq!(
            values(&frozen.read(4).unwrap()),
            [6],
            "a file a snapshot holds stays"
        );
        let own = files.dir.clone();
        drop((files, frozen));
        assert!(!own.exists(), "the directory goes with its files");
    }

    #[test]
    fn frozen_files_read_as_they_were_and_last_until_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = KeyGroupFiles::open(dir.path()).unwrap();
        files.write(1, &rows(1, &[10])).unwrap();
        files.write(0, &rows(0, &[20])).unwrap();
        let frozen = files.frozen();
        files.take(1).unwrap();
        files.write(1, &rows(1, &[11])).unwrap();
        assert_eq!(values(&frozen.read(1).unwrap()), [10]);
        let run = frozen.into_run(dir.path().join("run.parquet"));
        let run = run.write(&|| true).unwrap().expect("rows");
        let read = run.cursor().unwrap().take_below(u32::MAX).unwrap();
        let groups: Vec<u32> = (read.iter())
            .flat_map(|b| b.column(0).as_primitive::<UInt32Type>().values().to_vec())
            .collect();
        assert_eq!(groups, [0, 1], "in key-group order");
        assert_eq!(values(&read), [20, 10]);
        let own = files.dir.clone();
        drop(files);
        assert!(!own.exists(), "the directory goes with the last file");
    }

    #[test]
    fn a_frozen_run_of_an_aborted_checkpoint_stops_and_one_of_nothing_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = KeyGroupFiles::open(dir.path()).unwrap();
        let empty = files.frozen().into_run(dir.path().join("none.parquet"));
        assert!(empty.write(&|| true).unwrap().is_none());
        files.write(2, &rows(2, &[1])).unwrap();
        let path = dir.path().join("run.parquet");
        assert!(files.frozen().into_run(path.clone()).write(&|| false).is_err());
        assert!(!path.exists());
    }
}
