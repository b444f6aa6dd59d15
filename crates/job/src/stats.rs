//! Figures of one completed checkpoint, as the coordinator measured them, and of a checkpoint a job restored.

use std::path::{Path, PathBuf};
use std::time::Duration;

use weir_common::ids::{BarrierKind, CheckpointId};

/// Figures of one completed checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointStats {
    /// Its id.
    pub id: CheckpointId,
    /// The attempt of the job that took it (0 first; a restart after a
    /// failure is the next).
    pub attempt: u32,
    /// A periodic checkpoint or a savepoint.
    pub kind: BarrierKind,
    /// Its directory.
    pub dir: PathBuf,
    /// When it was triggered (ms since the epoch).
    pub trigger_time: i64,
    /// From trigger to completion.
    pub duration: Duration,
    /// Bytes of state files written for it (keyed state and channel
    /// state): with incremental checkpoints, only the new files.
    pub state_bytes: u64,
    /// Bytes of every state file it refers to (equal to `state_bytes`
    /// unless incremental).
    pub full_state_bytes: u64,
    /// Of those, bytes of in-flight records (unaligned checkpoints).
    pub channel_state_bytes: u64,
    /// The longest time a task's processing stopped for its snapshot.
    pub max_blocked: Duration,
    /// The longest barrier alignment of a task.
    pub max_alignment: Duration,
    /// Per task (by index in `JobHandle::tasks`): from the trigger to its
    /// acknowledgement.
    pub ack_delays: Vec<(usize, Duration)>,
}

/// A checkpoint or savepoint an attempt of a job started from (Flink's
/// `latest.restored` checkpoint statistics).
#[derive(Debug, Clone, PartialEq)]
pub struct RestoreStats {
    /// Its id.
    pub id: CheckpointId,
    /// A periodic checkpoint or a savepoint.
    pub kind: BarrierKind,
    /// Its directory.
    pub dir: PathBuf,
    /// When the attempt restored it (ms since the epoch).
    pub restore_time: i64,
}

impl RestoreStats {
    /// Checkpoint `id` of `kind` in `dir`, restored now.
    pub fn now(id: CheckpointId, kind: BarrierKind, dir: &Path) -> Self {
        RestoreStats {
            id,
            kind,
            dir: dir.to_path_buf(),
            restore_time: weir_common::time::wall_clock_millis(),
        }
    }
}
