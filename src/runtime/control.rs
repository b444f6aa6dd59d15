//! Messages between the checkpoint coordinator and tasks, and a task's
//! checkpoint wiring.

use std::path::PathBuf;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::message::{BarrierKind, CheckpointBarrier, CheckpointId};
use crate::checkpoint::TaskState;
use crate::checkpoint::storage::{checkpoint_dir, savepoint_dir};

/// From the coordinator to a task.
#[derive(Debug, Clone)]
pub enum TaskControl {
    /// Sources only: inject this barrier now.
    Trigger(CheckpointBarrier),
    /// Sources only: inject this savepoint barrier now, then emit nothing
    /// more (stop-with-savepoint: nothing may follow the savepoint).
    TriggerStop(CheckpointBarrier),
    /// The stop-with-savepoint `id` is complete: commit up to it and end
    /// without end-of-input processing (windows stay open in the savepoint).
    Stop(CheckpointId),
    /// Sources only: the stop-with-savepoint failed; emit again.
    Resume,
    /// The checkpoint is complete: commit.
    Complete(CheckpointId),
    /// Every task has finished and the final checkpoint (this id) is written:
    /// commit everything and end.
    JobFinished(CheckpointId),
}

/// From a task to the coordinator.
#[derive(Debug)]
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
    /// A source task reached the end of its input: no more checkpoints can complete.
    SourceFinished {
        /// The task.
        task: usize,
    },
    /// The task processed all its input and committed its output; this is its
    /// final state (sources at their end). When every task has finished, the
    /// coordinator writes it as a final checkpoint, so restoring the finished
    /// job replays nothing.
    Finished {
        /// The task.
        task: usize,
        /// Its final state.
        state: TaskState,
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
    /// The job's checkpoint directory.
    pub job_dir: PathBuf,
    /// Where savepoints go.
    pub savepoint_root: PathBuf,
    /// The job's name (savepoint directories carry it).
    pub job_name: String,
    /// Messages from the coordinator.
    pub control: Receiver<TaskControl>,
    /// Reports to the coordinator.
    pub reports: Sender<TaskReport>,
}

impl TaskCheckpointing {
    /// Where this task writes its state for `barrier`.
    pub fn snapshot_dir(&self, barrier: &CheckpointBarrier) -> PathBuf {
        match barrier.kind {
            BarrierKind::Checkpoint => checkpoint_dir(&self.job_dir, barrier.id),
            BarrierKind::Savepoint => savepoint_dir(&self.savepoint_root, &self.job_name, barrier.id),
        }
    }
}
