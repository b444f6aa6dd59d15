//! The control plane's messages: what TaskManagers, clients and the JobManager say to each other.

use serde::{Deserialize, Serialize};
use weir_job::metrics::TaskMetricsSnapshot;
use weir_runtime::control::{TaskControl, TaskReport};

/// A TaskManager offers its slots (TaskManager to JobManager).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegisterTaskManager {
    /// Its id, unique per process start.
    pub id: String,
    /// Where its TaskManager service listens (`host:port`).
    pub control: String,
    /// Where its Flight node listens (`host:port`).
    pub data: String,
    /// Slots it offers.
    pub slots: usize,
    /// Its machine's cores.
    #[serde(default)]
    pub cpu_cores: usize,
}

/// How often to send heartbeats, and when silence means loss.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Registered {
    /// Milliseconds between heartbeats.
    pub heartbeat_interval_ms: u64,
    /// Milliseconds of silence after which the other side is lost.
    pub heartbeat_timeout_ms: u64,
}

/// A TaskManager is alive.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The TaskManager's id.
    pub id: String,
}

/// Whether the JobManager knows the TaskManager (`false`: register again).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeartbeatAck {
    /// Known to the JobManager.
    pub known: bool,
}

/// A job to run (client to JobManager).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubmitJob {
    /// The job's name.
    pub name: String,
    /// The plan, as `PlanSpec` JSON.
    pub plan: String,
    /// The session's settings the job runs with (`SET` keys and values).
    pub config: Vec<(String, String)>,
}

/// A submitted job's id.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Submitted {
    /// The job's id.
    pub job_id: String,
}

/// Asks for a job's state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobQuery {
    /// The job's id.
    pub job_id: String,
}

/// A job's state, as Flink names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Waiting for slots.
    Created,
    /// Its parts run.
    Running,
    /// An attempt failed; the next starts after the restart delay.
    Restarting,
    /// Every part finished.
    Finished,
    /// A part failed, or a TaskManager running one was lost.
    Failed,
    /// Cancelled.
    Canceled,
}

impl JobState {
    /// Flink's name of the state, as its REST API spells it.
    pub fn flink_name(self) -> &'static str {
        match self {
            JobState::Created => "CREATED",
            JobState::Running => "RUNNING",
            JobState::Restarting => "RESTARTING",
            JobState::Finished => "FINISHED",
            JobState::Failed => "FAILED",
            JobState::Canceled => "CANCELED",
        }
    }

    /// Whether the job is over.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Finished | JobState::Failed | JobState::Canceled)
    }
}

/// A job's state and, when it failed, why.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobReport {
    /// The job's id.
    pub job_id: String,
    /// The job's name.
    pub name: String,
    /// Its state.
    pub state: JobState,
    /// Why it failed.
    pub error: Option<String>,
    /// Restarts after failures.
    #[serde(default)]
    pub restarts: u32,
    /// Checkpoints and savepoints completed.
    #[serde(default)]
    pub checkpoints: usize,
    /// The current attempt (0 first; each restart the next).
    #[serde(default)]
    pub attempt: u32,
    /// The checkpoint the current attempt restored, if any.
    #[serde(default)]
    pub restored: Option<u64>,
    /// The newest checkpoint completed, of any attempt.
    #[serde(default)]
    pub completed: Option<u64>,
    /// A query's: the data-plane address of the TaskManager that runs its
    /// collect sink in the current attempt, once deployed.
    #[serde(default)]
    pub result_host: Option<String>,
    /// Whether the job takes checkpoints.
    #[serde(default)]
    pub checkpointed: bool,
}

/// Asks for every job the JobManager knows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JobsQuery {}

/// Every job the JobManager knows, in the order they were submitted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobList {
    /// The jobs.
    pub jobs: Vec<JobReport>,
}

/// Take a savepoint of a job (client to JobManager).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavepointRequest {
    /// The job's id.
    pub job_id: String,
    /// Then stop the job (stop-with-savepoint).
    pub stop: bool,
}

/// A savepoint is complete (and, when asked, its job has ended).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavepointDone {
    /// The savepoint's directory.
    pub location: String,
}

/// Asks a TaskManager for the figures of its subtasks of a job's attempt.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MetricsQuery {
    /// The job's id.
    pub job_id: String,
    /// The attempt.
    pub attempt: u32,
}

/// The figures of a TaskManager's subtasks, by job-wide task index.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskFigures {
    /// Task index and figures.
    pub tasks: Vec<(usize, TaskMetricsSnapshot)>,
}

/// A TaskManager's part of a job ended (TaskManager to JobManager).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartEnded {
    /// The job's id.
    pub job_id: String,
    /// The attempt.
    pub attempt: u32,
    /// The TaskManager's id.
    pub task_manager: String,
    /// Why it failed; `None` when every subtask finished.
    pub error: Option<String>,
}

/// Nothing to answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Done {}

/// Run the subtasks of a job placed here (JobManager to TaskManager).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeployPart {
    /// The job's id.
    pub job_id: String,
    /// The job's name.
    pub name: String,
    /// The attempt.
    pub attempt: u32,
    /// The plan, as `PlanSpec` JSON.
    pub plan: String,
    /// The session's settings.
    pub config: Vec<(String, String)>,
    /// By vertex, by subtask: the Flight address of the TaskManager that runs it.
    pub hosts: Vec<Vec<String>>,
}

/// Stop a job's part (JobManager to TaskManager).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CancelPart {
    /// The job's id.
    pub job_id: String,
    /// The attempt.
    pub attempt: u32,
}

/// A task's report to the checkpoint coordinator (TaskManager to JobManager).
#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    /// The job's id.
    pub job_id: String,
    /// The attempt.
    pub attempt: u32,
    /// The report (its task index is job-wide).
    pub report: TaskReport,
}

/// The checkpoint coordinator's message to one task (JobManager to TaskManager).
#[derive(Debug, Serialize, Deserialize)]
pub struct Control {
    /// The job's id.
    pub job_id: String,
    /// The attempt.
    pub attempt: u32,
    /// The job-wide task index.
    pub task: usize,
    /// The message.
    pub control: TaskControl,
}

/// The coordinator gave up a checkpoint: its writers stop (JobManager to TaskManager).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AbortCheckpoint {
    /// The job's id.
    pub job_id: String,
    /// The attempt.
    pub attempt: u32,
    /// The checkpoint.
    pub checkpoint: u64,
}
