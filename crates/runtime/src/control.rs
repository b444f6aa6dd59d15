//! Messages between the checkpoint coordinator and tasks, a task's
//! checkpoint wiring, and the fence that keeps an attempt's snapshot writers
//! from writing once their checkpoint or attempt is over.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::message::CheckpointBarrier;
use weir_common::ids::JobId;
use weir_common::ids::{BarrierKind, CheckpointId};
use weir_state::checkpoint::metadata::TaskState;
use weir_state::checkpoint::storage::{checkpoint_dir, savepoint_dir};

/// From the coordinator to a task.
#[derive(Debug, serde::Serialize, serde::Deserialize, Clone)]
pub enum TaskControl {
    /// Running sources and finished tasks (which get no barriers any more):
    /// snapshot now; a source injects the barrier.
    Trigger(CheckpointBarrier),
    /// Running sources: inject this savepoint barrier now, then emit nothing
    /// more (stop-with-savepoint: nothing may follow the savepoint).
    TriggerStop(CheckpointBarrier),
    /// The stop-with-savepoint `id` is complete: commit up to it and end
    /// without end-of-input processing (windows stay open in the savepoint).
    Stop(CheckpointId),
    /// Sources only: the stop-with-savepoint failed; emit again.
    Resume,
    /// The checkpoint is complete: commit.
    Complete(CheckpointId),
    /// Every task has finished and the final checkpoint (this id) is
    /// complete: commit up to it and end.
    JobFinished(CheckpointId),
}

/// From a task to the coordinator.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub enum TaskReport {
    /// The task saved its state for a checkpoint.
    Acknowledge {
        /// The checkpoint.
        checkpoint: CheckpointId,
        /// The task's index in the job.
        task: usize,
        /// What it saved.
        state: TaskState,
        /// How long its processing stopped for the snapshot.
        blocked: Duration,
        /// From the barrier's first arrival on an input channel to its last.
        alignment: Duration,
        /// Bytes of in-flight records saved with the snapshot (unaligned).
        channel_state_bytes: u64,
    },
    /// The task could not save its state: the checkpoint fails.
    Decline {
        /// The checkpoint.
        checkpoint: CheckpointId,
        /// The task.
        task: usize,
        /// Why.
        reason: String,
    },
    /// The task processed all its input and sent end-of-stream downstream.
    /// It gets no barriers from now on: the coordinator asks it directly
    /// ([`TaskControl::Trigger`]) and it acknowledges with its final state.
    Finished {
        /// The task.
        task: usize,
    },
}

/// A task's part in checkpointing.
#[derive(Debug)]
pub struct TaskCheckpointing {
    /// The task's index in the job.
    pub task: usize,
    /// Its vertex.
    pub vertex: usize,
    /// Its subtask.
    pub subtask: usize,
    /// The vertex's parallelism.
    pub parallelism: usize,
    /// Stable ids of the chained operators.
    pub operator_ids: Vec<String>,
    /// The stable id of the source at the head of the chain, if any.
    pub source_id: Option<String>,
    /// The run's checkpoint directory (`<dir>/<job name>/<job id>`).
    pub run_dir: PathBuf,
    /// Where savepoints go.
    pub savepoint_root: PathBuf,
    /// The job's name (savepoint directories carry it).
    pub job_name: String,
    /// The run's id (savepoint directories carry it).
    pub job_id: JobId,
    /// Stops snapshot writers of aborted checkpoints and ended attempts.
    pub fence: Arc<SnapshotFence>,
    /// Messages from the coordinator.
    pub control: Receiver<TaskControl>,
    /// Reports to the coordinator.
    pub reports: Sender<TaskReport>,
}

impl TaskCheckpointing {
    /// Where this task writes its state for `barrier`.
    pub fn snapshot_dir(&self, barrier: &CheckpointBarrier) -> PathBuf {
        match barrier.kind {
            BarrierKind::Checkpoint => checkpoint_dir(&self.run_dir, barrier.id),
            BarrierKind::Savepoint => {
                savepoint_dir(&self.savepoint_root, &self.job_name, &self.job_id, barrier.id)
            }
        }
    }
}

/// Whether snapshot writers may still write: not once their attempt has
/// ended (the next attempt may be restoring already), nor for a checkpoint
/// the coordinator aborted (it deleted, or is deleting, the directory).
pub struct SnapshotFence {
    attempt_over: Arc<AtomicBool>,
    aborted: Mutex<BTreeSet<CheckpointId>>,
    /// Told of every abort: the writers of a job whose tasks run in other
    /// processes are fenced there.
    on_abort: Option<Box<dyn Fn(CheckpointId) + Send + Sync>>,
}

impl std::fmt::Debug for SnapshotFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotFence")
            .field("attempt_over", &self.attempt_over)
            .field("aborted", &self.aborted)
            .finish_non_exhaustive()
    }
}

impl SnapshotFence {
    /// A fence for the attempt whose stop flag is `attempt_over`.
    pub fn new(attempt_over: Arc<AtomicBool>) -> Self {
        SnapshotFence {
            attempt_over,
            aborted: Mutex::new(BTreeSet::new()),
            on_abort: None,
        }
    }

    /// The same fence, telling `on_abort` of every checkpoint aborted.
    pub fn with_on_abort(mut self, on_abort: impl Fn(CheckpointId) + Send + Sync + 'static) -> Self {
        self.on_abort = Some(Box::new(on_abort));
        self
    }

    /// The coordinator gave up checkpoint `id`.
    pub fn abort(&self, id: CheckpointId) {
        let new = self.aborted.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
        if let (true, Some(on_abort)) = (new, &self.on_abort) {
            on_abort(id);
        }
    }

    /// Whether the attempt has ended (failed or cancelled).
    pub fn attempt_over(&self) -> bool {
        self.attempt_over.load(Ordering::SeqCst)
    }

    /// Whether a writer of checkpoint `id` may go on.
    pub fn is_live(&self, id: CheckpointId) -> bool {
        !self.attempt_over()
            && !self
                .aborted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&id)
    }
}

/// The name of failpoint `point` for job `job`: `<point>/<job>`.
/// Failpoints (the `fail` crate) are global to a process; named per job,
/// each test arms one for its own job alone. They are in the snapshot
/// writers (`snapshot-write`: `return` declines the checkpoint, `sleep(ms)`
/// delays the write), the coordinator's loop (`coordinator-loop`) and its
/// `_metadata` write (`checkpoint-persist`).
pub fn failpoint(point: &str, job: &str) -> String {
    format!("{point}/{job}")
}
