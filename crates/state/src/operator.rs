//! What an operator saves in a checkpoint ([`OperatorSnapshot`]), and what
//! the spilling state backend gives each operator subtask.

use arrow::record_batch::RecordBatch;

use crate::{Error, Result};
use weir_common::time::Timestamp;

/// What an operator saves in a checkpoint.
#[derive(Debug, Default)]
pub struct OperatorSnapshot {
    /// Small state (watermark, pending sink files, ...), as JSON.
    pub meta: serde_json::Value,
    /// Keyed state: rows with a first column `_key_group` (UInt32), sorted by
    /// it; written as one Parquet file.
    pub rows: Option<RecordBatch>,
    /// The spilling backend: runs on local disk that also hold keyed state
    /// (partial states, merged with `rows` on restore); a checkpoint links
    /// them.
    pub runs: Vec<crate::runs::Run>,
    /// State its snapshot writer reads after the task went on (the spilled
    /// store, frozen at the barrier), as runs that join `runs`.
    pub deferred: Vec<crate::deferred::Deferred>,
    /// Keyed rows its snapshot writer builds after the task went on (they
    /// become `rows`): the task only reads its state out, and the writer
    /// turns that into rows sorted by key group, which for a million groups
    /// took most of the time the task was blocked.
    pub rows_later: Option<LaterRows>,
}

/// Builds a snapshot's keyed rows ([`OperatorSnapshot::rows_later`]).
pub struct LaterRows(Box<dyn FnOnce() -> Result<Option<RecordBatch>> + Send>);

impl LaterRows {
    /// Rows `build` makes when the writer calls it.
    pub fn new(build: impl FnOnce() -> Result<Option<RecordBatch>> + Send + 'static) -> Self {
        LaterRows(Box::new(build))
    }
}

impl std::fmt::Debug for LaterRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LaterRows")
    }
}

impl OperatorSnapshot {
    /// The snapshot with its later rows built and its deferred runs
    /// written (while `live` says the checkpoint goes on), as a checkpoint
    /// holds it.
    pub fn written(mut self, live: &dyn Fn() -> bool) -> Result<Self> {
        if let Some(later) = self.rows_later.take() {
            if self.rows.is_some() {
                return Err(Error::Internal("a snapshot with rows and rows to build".into()));
            }
            self.rows = (later.0)()?;
        }
        for deferred in std::mem::take(&mut self.deferred) {
            self.runs.extend(deferred.write(live)?);
        }
        Ok(self)
    }

    /// Whether it holds keyed state (rows, or runs written or to write).
    pub fn has_rows(&self) -> bool {
        self.rows.as_ref().is_some_and(|r| r.num_rows() > 0)
            || !self.runs.is_empty()
            || !self.deferred.is_empty()
            || self.rows_later.is_some()
    }

    /// A snapshot of an operator whose small state is its watermark.
    pub fn with_watermark(watermark: Timestamp, rows: Option<RecordBatch>) -> Self {
        OperatorSnapshot {
            meta: serde_json::json!({ "watermark": watermark }),
            rows,
            runs: Vec::new(),
            deferred: Vec::new(),
            rows_later: None,
        }
    }

    /// The watermark [`OperatorSnapshot::with_watermark`] saved; `operator` names
    /// the operator in the error.
    pub fn watermark(&self, operator: &str) -> Result<Timestamp> {
        self.meta["watermark"]
            .as_i64()
            .ok_or_else(|| Error::State(format!("state of {operator} without a watermark: {}", self.meta)))
    }

    /// One snapshot from the snapshots of several subtasks, for an operator
    /// whose small state is its watermark (rescaling): the lowest watermark,
    /// so that no window fires early, and every row. Column mismatches are
    /// left to the operator's own check.
    pub fn merge_by_watermark(snapshots: Vec<OperatorSnapshot>, operator: &str) -> Result<Option<Self>> {
        let mut watermark: Option<Timestamp> = None;
        let mut rows = Vec::new();
        for snapshot in snapshots {
            let w = snapshot.watermark(operator)?;
            watermark = Some(watermark.map_or(w, |m| m.min(w)));
            rows.extend(snapshot.rows);
        }
        let Some(watermark) = watermark else {
            return Ok(None);
        };
        let rows = match rows.first() {
            None => None,
            Some(first) if rows.len() == 1 => Some(first.clone()),
            Some(first) => {
                let schema = first.schema();
                if rows.iter().any(|r| r.schema() != schema) {
                    return Err(Error::State(format!(
                        "the checkpoint's state files of {operator} have different columns"
                    )));
                }
                Some(arrow::compute::concat_batches(&schema, &rows)?)
            }
        };
        Ok(Some(OperatorSnapshot::with_watermark(watermark, rows)))
    }

    /// Checks that the keyed rows have the columns (names and types) the
    /// operator expects; the error names both.
    pub fn check_columns(
        rows: &RecordBatch,
        expected: &arrow::datatypes::Schema,
        operator: &str,
    ) -> Result<()> {
        let found = rows.schema();
        let same = found.fields().len() == expected.fields().len()
            && found
                .fields()
                .iter()
                .zip(expected.fields())
                .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
        if same {
            return Ok(());
        }
        let names =
            |s: &arrow::datatypes::Schema| s.fields().iter().map(|f| f.name().clone()).collect::<Vec<_>>();
        Err(Error::State(format!(
            "the checkpoint's state of {operator} has columns {:?}, the query's are {:?}",
            names(&found),
            names(expected)
        )))
    }
}

/// What an operator subtask of the spilling state backend gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillSettings {
    /// Bytes of state it may keep in memory.
    pub budget: usize,
    /// The directory its runs go under (a directory of its own is made there).
    pub dir: std::path::PathBuf,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{RecordBatch, UInt32Array};

    use super::*;

    fn rows(n: u32) -> RecordBatch {
        RecordBatch::try_from_iter([("_key_group", Arc::new(UInt32Array::from_iter_values(0..n)) as _)])
            .unwrap()
    }

    #[test]
    fn a_written_snapshot_holds_the_rows_its_writer_built_later() {
        let mut snapshot = OperatorSnapshot::with_watermark(5, None);
        snapshot.rows_later = Some(LaterRows::new(|| Ok(Some(rows(3)))));
        assert!(snapshot.has_rows());
        let written = snapshot.written(&|| true).unwrap();
        assert_eq!(written.rows.map(|r| r.num_rows()), Some(3));
        assert!(written.rows_later.is_none());
    }

    #[test]
    fn a_snapshot_with_rows_and_rows_to_build_is_refused() {
        let mut snapshot = OperatorSnapshot::with_watermark(5, Some(rows(1)));
        snapshot.rows_later = Some(LaterRows::new(|| Ok(Some(rows(3)))));
        assert!(snapshot.written(&|| true).is_err());
    }
}
