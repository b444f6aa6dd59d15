//! The control plane's messages: what TaskManagers, clients and the JobManager say to each other.

use serde::{Deserialize, Serialize};
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
