//! Sources: what a source task polls for batches.

use std::time::Duration;

use arrow::record_batch::RecordBatch;

use super::operator::TaskContext;
use crate::{Error, Result};

/// The outcome of one poll of a source reader.
#[derive(Debug)]
pub enum SourcePoll {
    /// Rows.
    Batch(RecordBatch),
    /// Nothing now; poll again after at most this long.
    Idle(Duration),
    /// The bounded input is done.
    End,
}

/// Reads one subtask's share of a source (its splits).
pub trait SourceReader: Send {
    /// The next batch, or idle, or the end.
    fn poll_next(&mut self) -> Result<SourcePoll>;

    /// The position after the last batch returned, for a checkpoint.
    fn snapshot_position(&mut self) -> Result<serde_json::Value> {
        Err(Error::State("this source cannot checkpoint its position".into()))
    }

    /// Continues from a position [`SourceReader::snapshot_position`] returned.
    fn restore_position(&mut self, _position: &serde_json::Value) -> Result<()> {
        Err(Error::State("this source cannot restore a position".into()))
    }
}

/// Creates the reader of each source subtask; implemented by connectors.
pub trait SourceFactory: Send + Sync + std::fmt::Debug {
    /// A one-line description for EXPLAIN.
    fn describe(&self) -> String;

    /// True when the source ends by itself.
    fn is_bounded(&self) -> bool;

    /// The reader for one subtask.
    fn create_reader(&self, ctx: &TaskContext) -> Result<Box<dyn SourceReader>>;

    /// Whether its readers checkpoint their positions; a job reading a source
    /// that cannot is refused when checkpoints are on.
    fn supports_checkpoints(&self) -> bool {
        false
    }
}
