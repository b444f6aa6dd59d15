//! The unit of dataflow between tasks: batches, watermarks, barriers, end-of-stream.

use arrow::record_batch::RecordBatch;
use weir_common::ids::{BarrierKind, CheckpointId};
use weir_common::time::Timestamp;

/// A checkpoint barrier: separates the records before checkpoint `id` from those after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckpointBarrier {
    /// The checkpoint this barrier belongs to.
    pub id: CheckpointId,
    /// Checkpoint or savepoint.
    pub kind: BarrierKind,
    /// When the coordinator triggered it (ms since epoch, wall clock).
    pub timestamp: i64,
}

/// Whether a channel's watermark counts (Flink's `WatermarkStatus`): a source
/// that had no data for `table.exec.source.idle-timeout` turns idle, so that
/// it stops holding back the watermark downstream, and active again before
/// its next rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatermarkStatus {
    /// The channel's watermark is left out of the minimum.
    Idle,
    /// The channel's watermark counts again (once it has caught up).
    Active,
}

/// Everything that travels on a channel between two subtasks.
///
/// Order on a channel is never changed: a barrier never overtakes data, and
/// watermarks, barriers and end-of-stream are broadcast to every output channel.
#[derive(Debug, Clone)]
pub enum Message {
    /// Data; never empty.
    Batch(RecordBatch),
    /// Event time on this channel has reached this point.
    Watermark(Timestamp),
    /// The channel turned idle or active.
    WatermarkStatus(WatermarkStatus),
    /// A checkpoint barrier.
    Barrier(CheckpointBarrier),
    /// The bounded input of this channel is done.
    EndOfStream,
    /// The channel's transport failed (the process at its other end died,
    /// or the link was cut); the cause, naming the peer. Put in by a
    /// network bridge as its last message and never sent over a wire: the
    /// reading task fails with this cause rather than a bare "an upstream
    /// task stopped".
    Broken(String),
}
