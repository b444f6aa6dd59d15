//! Sources: what a source task polls for batches.

use std::time::Duration;

use arrow::record_batch::RecordBatch;

use crate::operator::TaskContext;
use crate::{Error, Result};
use weir_common::ids::CheckpointId;

/// The outcome of one poll of a source reader.
#[derive(Debug)]
pub enum SourcePoll {
    /// Rows.
    Batch(RecordBatch),
    /// Rows of one split: watermarks are then generated per split, as
    /// Flink's per-split watermarks (a Kafka partition's).
    SplitBatch(SplitId, RecordBatch),
    /// The splits the reader now reads (its first poll, and whenever the set
    /// changes, as when a split ends): each one holds the watermark back
    /// until it has data or is idle.
    Splits(Vec<SplitId>),
    /// Nothing now; poll again after at most this long.
    Idle(Duration),
    /// The bounded input is done.
    End,
}

/// A split of a source, as its reader numbers it.
pub type SplitId = u32;

/// Reads one subtask's share of a source (its splits).
pub trait SourceReader: Send {
    /// The next batch, or idle, or the end.
    fn poll_next(&mut self) -> Result<SourcePoll>;

    /// The position after the last batch returned, for checkpoint `checkpoint`.
    fn snapshot_position(&mut self, _checkpoint: CheckpointId) -> Result<serde_json::Value> {
        Err(Error::State("this source cannot checkpoint its position".into()))
    }

    /// Checkpoint `checkpoint` is complete (a Kafka source commits the
    /// offsets it saved in it to its consumer group, for monitoring).
    fn notify_checkpoint_complete(&mut self, _checkpoint: CheckpointId) -> Result<()> {
        Ok(())
    }

    /// Continues from a position [`SourceReader::snapshot_position`] returned.
    fn restore_position(&mut self, _position: &serde_json::Value) -> Result<()> {
        Err(Error::State("this source cannot restore a position".into()))
    }
}

/// A split whose position is a count of rows emitted: split `index` of
/// `count` (the number fixed when the job was created). Datagen and nexmark
/// positions are lists of these (`{"splits": [{"index", "count", "emitted"}]}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountedSplit {
    /// Which split.
    pub index: u64,
    /// How many splits the source has.
    pub count: u64,
    /// Rows emitted from it.
    pub emitted: u64,
}

impl CountedSplit {
    /// The global number of the split's next row: rows `index, index +
    /// count, ...` belong to it.
    pub fn next(&self) -> u64 {
        self.index + self.emitted * self.count
    }

    /// A position of these splits.
    pub fn position(splits: impl IntoIterator<Item = CountedSplit>) -> serde_json::Value {
        let splits: Vec<serde_json::Value> = splits
            .into_iter()
            .map(|s| serde_json::json!({ "index": s.index, "count": s.count, "emitted": s.emitted }))
            .collect();
        serde_json::json!({ "splits": splits })
    }

    /// The splits of a position [`CountedSplit::position`] wrote; `source`
    /// names the source in the error.
    pub fn parse(position: &serde_json::Value, source: &str) -> Result<Vec<CountedSplit>> {
        let bad = || {
            Error::State(format!(
                "{source} position {position} is not one this source wrote"
            ))
        };
        let saved = position["splits"].as_array().ok_or_else(bad)?;
        saved
            .iter()
            .map(|split| {
                let field = |name: &str| split[name].as_u64().ok_or_else(bad);
                let split = CountedSplit {
                    index: field("index")?,
                    count: field("count")?,
                    emitted: field("emitted")?,
                };
                if split.count == 0 || split.index >= split.count {
                    return Err(bad());
                }
                Ok(split)
            })
            .collect()
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

    /// Whether a restore reads it again from its start ([`Replayed`]), so
    /// that its in-flight records in a checkpoint are not to be replayed.
    fn is_replayed(&self) -> bool {
        false
    }

    /// Roughly how many bytes it reads in all, when it is bounded and that
    /// is known when planning (whether a join broadcasts it).
    fn estimated_bytes(&self) -> Option<u64> {
        None
    }

    /// Whether its readers checkpoint their positions; a job reading a source
    /// that cannot is refused when checkpoints are on.
    fn supports_checkpoints(&self) -> bool {
        false
    }

    /// How long its subtasks wait without data before they turn idle, when
    /// the table says (`scan.watermark.idle-timeout`); otherwise the session's
    /// `table.exec.source.idle-timeout` applies.
    fn idle_timeout(&self) -> Option<Duration> {
        None
    }

    /// For an upsert source (`upsert-kafka`), the key's columns: its batches
    /// carry the op column, `+U` for a key's new row and `-D` for its delete.
    fn upsert_key(&self) -> Option<Vec<usize>> {
        None
    }

    /// Whether it may run on more subtasks than it has splits (the extra
    /// ones read nothing): bounded sources, and Kafka, whose partitions can
    /// be fewer than its subtasks as in Flink.
    fn allows_idle_subtasks(&self) -> bool {
        self.is_bounded()
    }
}

/// A bounded source read again from its start after every restore: the
/// table side of a lookup or broadcast join, which the join holds in memory only (it is
/// the same on every subtask, so a checkpoint need not carry it).
#[derive(Debug)]
pub struct Replayed(pub std::sync::Arc<dyn SourceFactory>);

struct ReplayedReader(Box<dyn SourceReader>);

impl SourceReader for ReplayedReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        self.0.poll_next()
    }

    /// No splits to hand on: a restore reads the source from its start.
    fn snapshot_position(&mut self, _checkpoint: CheckpointId) -> Result<serde_json::Value> {
        Ok(serde_json::json!({ "splits": [], "replayed": true }))
    }

    fn restore_position(&mut self, _position: &serde_json::Value) -> Result<()> {
        Ok(())
    }
}

impl SourceFactory for Replayed {
    fn describe(&self) -> String {
        self.0.describe()
    }

    fn is_bounded(&self) -> bool {
        self.0.is_bounded()
    }

    fn estimated_bytes(&self) -> Option<u64> {
        self.0.estimated_bytes()
    }

    fn is_replayed(&self) -> bool {
        true
    }

    fn create_reader(&self, ctx: &TaskContext) -> Result<Box<dyn SourceReader>> {
        Ok(Box::new(ReplayedReader(self.0.create_reader(ctx)?)))
    }

    fn supports_checkpoints(&self) -> bool {
        true
    }
}
