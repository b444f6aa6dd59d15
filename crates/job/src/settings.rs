//! What a job is started with and what it is: its settings, the
//! checkpoint it restores, its status, and its tasks' names and counters.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use weir_common::config::checkpoint::{CheckpointConfig, RestartStrategy};
use weir_common::ids::JobId;
use weir_runtime::operator::TaskMetrics;
use weir_runtime::transport::Transport;
use weir_state::checkpoint::metadata::CheckpointMetadata;

/// Runtime settings of a job.
#[derive(Debug, Clone)]
pub struct JobSettings {
    /// The job's name.
    pub name: String,
    /// This run's id: its checkpoints go to `<checkpoint dir>/<name>/<id>/`.
    pub job_id: JobId,
    /// Number of key groups.
    pub max_parallelism: usize,
    /// Rows per batch sources aim for.
    pub batch_size: usize,
    /// Batches a channel holds.
    pub channel_capacity: usize,
    /// A source subtask without data for this long turns idle.
    pub source_idle_timeout: Option<Duration>,
    /// Checkpoint settings, when checkpoints are on.
    pub checkpoint: Option<CheckpointConfig>,
    /// The checkpoint to start from.
    pub restore: Option<RestoredCheckpoint>,
    /// What the user should know about how the job started (restore decisions).
    pub notes: Vec<String>,
    /// What happens when a task fails.
    pub restart: RestartStrategy,
    /// Where keyed state lives.
    pub state_backend: weir_common::config::StateBackend,
    /// How the channels between subtasks are made.
    pub transport: Arc<dyn Transport>,
}

/// A complete checkpoint a job starts from.
#[derive(Debug, Clone)]
pub struct RestoredCheckpoint {
    /// Its directory.
    pub dir: PathBuf,
    /// Its metadata.
    pub metadata: CheckpointMetadata,
}

/// The state of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobStatus {
    /// Tasks are running.
    Running,
    /// Every task reached the end of its input.
    Finished,
    /// The job was cancelled.
    Cancelled,
    /// A task failed.
    Failed,
}

/// Counters of one subtask, by name.
#[derive(Debug, Clone)]
pub struct TaskInfo {
    /// `Vertex (i/p)`.
    pub name: String,
    /// Its counters.
    pub metrics: Arc<TaskMetrics>,
    /// True for a source subtask (its `records_in` are rows read from outside).
    pub is_source: bool,
}
