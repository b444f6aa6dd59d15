//! Sorted runs: keyed state spilled to local Parquet files, read back key group range by range.
//!
//! The spilling state backend's local store. A run is what an operator's
//! in-memory state held when it outgrew its budget: state rows sorted by
//! `_key_group`, written as a Parquet state file (the checkpoint format, so
//! a checkpoint takes a run by linking the file). Runs are immutable; the
//! same key may be in several, as partial states that merge. A reader walks
//! every run of a slice with one [`RunCursor`] each, one key-group range at a
//! time, so that only one range's rows are in memory at once.
//!
//! ```text
//!   run 1: kg 0 0 1 3 3 5 7 ...      bucket [0, 4): kg 0..3 of every run
//!   run 2: kg 0 2 3 4 6 6 7 ...  ──► bucket [4, 8): kg 4..7 of every run ──► merge, emit
//! ```

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::UInt32Type;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use crate::checkpoint::metadata::StateFile;
use crate::snapshot::{KEY_GROUP_COLUMN, RUN_ROW_GROUP_ROWS, StateFileWriter};
use crate::{Error, Result};

/// Rows per batch a cursor reads.
const READ_BATCH_ROWS: usize = 8192;

/// A run's file, deleted when the last holder (the operator, or a
/// checkpoint still linking it) lets go.
#[derive(Debug)]
pub(crate) struct RunFile(pub(crate) PathBuf);

impl Drop for RunFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        if let Some(dir) = self.0.parent() {
            // Gone with its last run (fails while others are in it).
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// One sorted run on local disk.
#[derive(Debug, Clone)]
pub struct Run {
    file: Arc<RunFile>,
    /// Rows, bytes and key-group range (its `path` is the local path).
    pub info: StateFile,
}

impl Run {
    /// Writes `rows` (sorted by `_key_group`) as a run at `path`.
    pub fn write(path: PathBuf, rows: &RecordBatch) -> Result<Run> {
        let mut writer = RunWriter::create(path, rows.schema())?;
        writer.write(rows)?;
        writer.finish()
    }

    /// Where the run is.
    pub fn path(&self) -> &Path {
        &self.file.0
    }

    /// Puts the run at `target` (named `relative` in a checkpoint's
    /// metadata), synced: a hard link (a run never changes), or a copy where
    /// the file system has none across.
    pub fn link(&self, target: &Path, relative: &str) -> Result<StateFile> {
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        if std::fs::hard_link(self.path(), target).is_err() {
            std::fs::copy(self.path(), target).map_err(|e| Error::io(target, e))?;
        }
        File::open(target)
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io(target, e))?;
        Ok(StateFile {
            path: relative.to_string(),
            ..self.info.clone()
        })
    }

    /// A cursor at the run's first row.
    pub fn cursor(&self) -> Result<RunCursor> {
        let path = self.path();
        let failed = |e: &dyn std::fmt::Display| {
            Error::State(format!("cannot read spilled state {}: {e}", path.display()))
        };
        let file = File::open(path).map_err(|e| failed(&e))?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|e| failed(&e))?
            .with_batch_size(READ_BATCH_ROWS)
            .build()
            .map_err(|e| failed(&e))?;
        Ok(RunCursor {
            reader,
            pending: None,
            path: path.to_path_buf(),
        })
    }
}

/// Writes a run batch by batch (a merge of runs, range by range).
pub struct RunWriter {
    writer: StateFileWriter,
    path: PathBuf,
}

impl RunWriter {
    /// A run of `schema` at `path`; not synced (a checkpoint that links it
    /// syncs it).
    pub fn create(path: PathBuf, schema: arrow::datatypes::SchemaRef) -> Result<Self> {
        let relative = path.display().to_string();
        Ok(RunWriter {
            writer: StateFileWriter::create(&path, &relative, schema, RUN_ROW_GROUP_ROWS)?,
            path,
        })
    }

    /// Appends rows, their key groups at or after those written so far.
    pub fn write(&mut self, rows: &RecordBatch) -> Result<()> {
        self.writer.write(rows)
    }

    /// The run written.
    pub fn finish(self) -> Result<Run> {
        let info = self.writer.finish(false)?;
        Ok(Run {
            file: Arc::new(RunFile(self.path)),
            info,
        })
    }
}

/// Reads a run in key-group order.
pub struct RunCursor {
    reader: ParquetRecordBatchReader,
    /// Rows read but not yet taken.
    pending: Option<RecordBatch>,
    path: PathBuf,
}

impl RunCursor {
    /// The run's next rows whose key group is below `end`, in order (none
    /// once the cursor is past it).
    pub fn take_below(&mut self, end: u32) -> Result<Vec<RecordBatch>> {
        let mut taken = Vec::new();
        loop {
            let batch = match self.pending.take() {
                Some(batch) => batch,
                None => match self.reader.next() {
                    None => return Ok(taken),
                    Some(batch) => batch.map_err(|e| {
                        Error::State(format!("cannot read spilled state {}: {e}", self.path.display()))
                    })?,
                },
            };
            let groups = batch
                .column_by_name(KEY_GROUP_COLUMN)
                .and_then(|c| c.as_primitive_opt::<UInt32Type>())
                .ok_or_else(|| {
                    Error::State(format!(
                        "spilled state {} lacks {KEY_GROUP_COLUMN}",
                        self.path.display()
                    ))
                })?;
            let below = groups.values().partition_point(|g| *g < end);
            if below == batch.num_rows() {
                taken.push(batch);
                continue;
            }
            if below > 0 {
                taken.push(batch.slice(0, below));
            }
            self.pending = Some(batch.slice(below, batch.num_rows() - below));
            return Ok(taken);
        }
    }
}

/// The (exclusive) upper key-group bounds of the ranges a merge of `bytes`
/// of runs over key groups `first..=last` reads one at a time, so that each
/// holds about `budget` bytes: the key groups cut evenly, at most one range
/// per key group.
pub fn bucket_bounds(first: u32, last: u32, bytes: u64, budget: u64) -> Vec<u32> {
    let (first, last) = (first.min(last), first.max(last));
    let groups = u64::from(last - first) + 1;
    let buckets = bytes.div_ceil(budget.max(1)).clamp(1, groups);
    (1..=buckets)
        .map(|i| first + (groups * i / buckets) as u32)
        .collect()
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, UInt32Array};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn rows(groups: &[u32]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new(KEY_GROUP_COLUMN, DataType::UInt32, false),
            Field::new("v", DataType::Int64, false),
        ]));
        let values: Vec<i64> = groups.iter().map(|g| i64::from(*g) * 10).collect();
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(UInt32Array::from(groups.to_vec())),
                Arc::new(Int64Array::from(values)),
            ],
        )
        .unwrap()
    }

    fn groups_of(batches: &[RecordBatch]) -> Vec<u32> {
        batches
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<UInt32Type>().values().to_vec())
            .collect()
    }

    #[test]
    fn a_cursor_hands_out_each_row_once_in_key_group_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let groups: Vec<u32> = (0..20_000u32).map(|i| i / 200).collect();
        let run = Run::write(dir.path().join("0.parquet"), &rows(&groups)).unwrap();
        let mut cursor = run.cursor().unwrap();
        let mut seen = Vec::new();
        for end in bucket_bounds(0, 99, 1000, 300) {
            let taken = groups_of(&cursor.take_below(end).unwrap());
            assert!(taken.iter().all(|g| *g < end), "{end}: {taken:?}");
            seen.extend(taken);
        }
        assert_eq!(seen, groups);
        assert!(cursor.take_below(u32::MAX).unwrap().is_empty());
    }

    #[test]
    fn a_range_with_no_rows_of_a_run_takes_nothing_from_it() {
        let dir = tempfile::tempdir().unwrap();
        let run = Run::write(dir.path().join("0.parquet"), &rows(&[1, 1, 7, 9])).unwrap();
        let mut cursor = run.cursor().unwrap();
        assert!(cursor.take_below(1).unwrap().is_empty());
        assert_eq!(groups_of(&cursor.take_below(5).unwrap()), vec![1, 1]);
        assert!(cursor.take_below(7).unwrap().is_empty());
        assert_eq!(groups_of(&cursor.take_below(10).unwrap()), vec![7, 9]);
    }

    #[test]
    fn a_run_file_goes_when_its_last_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("spill");
        std::fs::create_dir_all(&sub).unwrap();
        let path = sub.join("0.parquet");
        let run = Run::write(path.clone(), &rows(&[0])).unwrap();
        let held = run.clone();
        drop(run);
        assert!(path.exists(), "a clone still holds it");
        drop(held);
        assert!(!path.exists());
        assert!(!sub.exists(), "the empty directory goes with it");
    }

    #[test]
    fn buckets_cut_the_key_groups_by_bytes_and_never_finer_than_a_key_group() {
        assert_eq!(bucket_bounds(0, 127, 100, 1000), vec![128]);
        assert_eq!(bucket_bounds(0, 127, 4000, 1000), vec![32, 64, 96, 128]);
        assert_eq!(bucket_bounds(10, 12, 1 << 40, 1), vec![11, 12, 13]);
        let bounds = bucket_bounds(0, 127, 3000, 1000);
        assert_eq!(bounds.len(), 3);
        assert_eq!(bounds.last(), Some(&128));
        assert!(bounds.windows(2).all(|w| w[0] < w[1]));
    }
}
