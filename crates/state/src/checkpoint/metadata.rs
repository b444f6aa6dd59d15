//! The `_metadata` file of a checkpoint: what every task saved, as JSON.

use serde::{Deserialize, Serialize};

use crate::incremental::DeltaKind;
use weir_common::ids::{BarrierKind, CheckpointId};

/// The version of the layout below; a reader refuses other versions.
/// 2: operator ids from the plan (`<kind>-<n>`), sources named.
pub const FORMAT_VERSION: u32 = 2;

/// A complete checkpoint: written last, atomically, so its presence means
/// every file it names was written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    /// [`FORMAT_VERSION`].
    pub format: u32,
    /// The job's name.
    pub job: String,
    /// The id of the run that took it (absent in checkpoints of weir before
    /// job ids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// The checkpoint's id.
    pub checkpoint_id: CheckpointId,
    /// Checkpoint or savepoint.
    pub kind: BarrierKind,
    /// When it was triggered (ms since the epoch).
    pub trigger_time: i64,
    /// When it completed (ms since the epoch).
    pub completion_time: i64,
    /// Number of key groups of the job.
    pub max_parallelism: usize,
    /// What each subtask saved.
    pub tasks: Vec<TaskState>,
}

/// What one subtask saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskState {
    /// Index of the vertex (chain) in the job graph.
    pub vertex: usize,
    /// The subtask.
    pub subtask: usize,
    /// The vertex's parallelism.
    pub parallelism: usize,
    /// The source's stable id, for a source subtask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_id: Option<String>,
    /// The source reader's position, for a source subtask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<serde_json::Value>,
    /// The state of each chained operator that has some.
    #[serde(default)]
    pub operators: Vec<OperatorState>,
    /// Unaligned checkpoints: records in flight at the snapshot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channel_state: Vec<ChannelStateFile>,
}

/// In-flight records of one subtask at an unaligned checkpoint, as Parquet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelStateFile {
    /// `input`: records received after the snapshot that precede the
    /// barrier (processed first on restore); `output`: records the task had
    /// queued for an exchange (sent first on restore).
    pub side: ChannelSide,
    /// The logical input, or the output exchange, by index.
    pub index: usize,
    /// The path, relative to the checkpoint directory.
    pub path: String,
    /// Rows.
    pub rows: u64,
    /// Size in bytes, checked on restore.
    pub bytes: u64,
}

/// Which side of a task channel state belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelSide {
    /// Input channels.
    Input,
    /// Output queues.
    Output,
}

/// The state of one operator of one subtask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorState {
    /// The operator's stable id (from the plan).
    pub operator_id: String,
    /// What the operator's state is made of (its columns and their types),
    /// checked on restore so that a changed query is refused, not misread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Small state: watermark, pending sink files, ...
    #[serde(default)]
    pub meta: serde_json::Value,
    /// Keyed state rows, if any: with incremental checkpoints, the base of
    /// the chain (a shared file, perhaps of an earlier checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<StateFile>,
    /// Incremental checkpoints: the deltas after the base, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deltas: Vec<StateFile>,
    /// Incremental checkpoints: how the deltas combine with the base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_kind: Option<DeltaKind>,
}

impl OperatorState {
    /// Every state file this operator's state is read from: the base, then
    /// the deltas.
    pub fn files(&self) -> impl Iterator<Item = &StateFile> {
        self.file.iter().chain(&self.deltas)
    }
}

/// A Parquet file of keyed state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateFile {
    /// The path, relative to the checkpoint directory.
    pub path: String,
    /// Rows.
    pub rows: u64,
    /// Size in bytes, checked on restore.
    pub bytes: u64,
    /// The key groups of the rows, first and last.
    pub key_groups: (usize, usize),
}
