//! The operator trait: what a task calls for each batch, watermark and end of input.
//!
//! Operators see batches and watermarks; they never see channels or barriers.
//! The task loop (see [`super::task`]) owns those and drives a chain of operators.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::record_batch::RecordBatch;

use crate::{Error, Result};
use weir_common::ids::CheckpointId;
use weir_common::time::Timestamp;
use weir_state::incremental::DeltaKind;
pub use weir_state::operator::{LaterRows, OperatorSnapshot, SpillSettings};

/// What an operator emits while handling one input: batches and watermarks, in order.
#[derive(Debug, Default)]
pub struct Output {
    items: Vec<Emitted>,
}

/// One emitted item.
#[derive(Debug)]
pub enum Emitted {
    /// A batch of rows.
    Batch(RecordBatch),
    /// A watermark.
    Watermark(Timestamp),
}

impl Output {
    /// Emits a batch; empty batches are dropped here so no channel ever carries one.
    pub fn batch(&mut self, batch: RecordBatch) {
        if batch.num_rows() > 0 {
            self.items.push(Emitted::Batch(batch));
        }
    }

    /// Emits a watermark.
    pub fn watermark(&mut self, watermark: Timestamp) {
        self.items.push(Emitted::Watermark(watermark));
    }

    /// Takes what was emitted, leaving the output empty.
    pub fn take(&mut self) -> Vec<Emitted> {
        std::mem::take(&mut self.items)
    }

    /// True when nothing was emitted.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// A streaming operator.
///
/// The default `process_watermark` forwards the watermark unchanged; an operator
/// holding event-time state (a window) emits what the watermark completes first.
pub trait Operator: Send {
    /// A short name for logs and errors.
    fn name(&self) -> String;

    /// Handles one batch from input `input` (0 for single-input operators).
    fn process_batch(&mut self, input: usize, batch: RecordBatch, out: &mut Output) -> Result<()>;

    /// Handles a batch of source split `split` (a source task's chain, when
    /// its reader reads splits): the watermark assigner keeps a watermark
    /// per split; other operators see a batch.
    fn process_split_batch(
        &mut self,
        _split: super::SplitId,
        batch: RecordBatch,
        out: &mut Output,
    ) -> Result<()> {
        self.process_batch(0, batch, out)
    }

    /// The source's reader now reads these splits (see
    /// [`Operator::process_split_batch`]).
    fn set_splits(&mut self, _splits: &[super::SplitId], _out: &mut Output) -> Result<()> {
        Ok(())
    }

    /// Emits the next part of output it held back, to be sent on before
    /// the next part is made (a window firing from spilled state emits one
    /// key-group range at a time); true while more is to come. The task
    /// calls it after every other call until it returns false, before any
    /// new input.
    fn emit_more(&mut self, _out: &mut Output) -> Result<bool> {
        Ok(false)
    }

    /// Handles a watermark: the operator's event time has reached `watermark`.
    fn process_watermark(&mut self, watermark: Timestamp, out: &mut Output) -> Result<()> {
        out.watermark(watermark);
        Ok(())
    }

    /// Every channel of input `input` has ended, while others may go on
    /// (Flink's `BoundedMultiInput.endInput`): a lookup join's table is
    /// complete.
    fn end_input(&mut self, _input: usize, _out: &mut Output) -> Result<()> {
        Ok(())
    }

    /// All input is done (after a final watermark of +infinity); flush and close.
    fn finish(&mut self, _out: &mut Output) -> Result<()> {
        Ok(())
    }

    /// True for operators driven by the wall clock (processing-time windows):
    /// the task then calls [`Operator::on_processing_time`] regularly, also
    /// while no input arrives.
    fn uses_processing_time(&self) -> bool {
        false
    }

    /// The wall clock reached `now` (ms since the epoch).
    fn on_processing_time(&mut self, _now: Timestamp, _out: &mut Output) -> Result<()> {
        Ok(())
    }

    /// A checkpoint barrier is about to pass: emit what must precede it (a
    /// local pre-aggregation sends its partial states, so it holds no state).
    fn prepare_snapshot(&mut self, _out: &mut Output) -> Result<()> {
        Ok(())
    }

    /// The operator's state at the barrier of `checkpoint`; `None` when it has none.
    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        Ok(None)
    }

    /// Incremental checkpoints: how this operator's deltas combine with its
    /// earlier state; `None` (the default) when it writes a full snapshot
    /// every time.
    fn delta_kind(&self) -> Option<DeltaKind> {
        None
    }

    /// Incremental checkpoints (with [`Operator::delta_kind`]): the state at
    /// the barrier of `checkpoint` as the rows changed since the previous call,
    /// or every row when `full` (a new base); changes are counted afresh
    /// from here. Small state (`meta`) is always whole. [`Operator::snapshot`]
    /// (savepoints) leaves the count of changes alone.
    fn snapshot_delta(&mut self, checkpoint: CheckpointId, _full: bool) -> Result<Option<OperatorSnapshot>> {
        self.snapshot(checkpoint)
    }

    /// Restores the state of a snapshot (keyed rows: only this subtask's key groups).
    fn restore(&mut self, _snapshot: OperatorSnapshot) -> Result<()> {
        Err(Error::State(format!(
            "operator {} has no state, but the checkpoint holds some for it",
            self.name()
        )))
    }

    /// What its state is made of (columns and types of its state rows), saved
    /// with every snapshot and compared on restore: a query whose state does
    /// not match a checkpoint's (other keys or aggregates) is refused.
    fn state_signature(&self) -> Result<Option<String>> {
        Ok(None)
    }

    /// Whether its state is keyed (rows by key group, moved by key group when
    /// the job is rescaled) rather than per subtask (moved round robin).
    fn is_keyed(&self) -> bool {
        false
    }

    /// Restores the snapshots of the subtasks of the checkpoint whose state
    /// this subtask takes over: one at the same parallelism, any number when
    /// rescaled. By default, each in turn.
    fn restore_rescaled(&mut self, snapshots: Vec<OperatorSnapshot>) -> Result<()> {
        for snapshot in snapshots {
            self.restore(snapshot)?;
        }
        Ok(())
    }

    /// Checkpoint `checkpoint` is complete: transactional sinks commit now.
    fn notify_checkpoint_complete(&mut self, _checkpoint: CheckpointId) -> Result<()> {
        Ok(())
    }

    /// Whether this operator's state can be checkpointed; a job with one that
    /// cannot is refused when checkpoints are on.
    fn supports_checkpoints(&self) -> bool {
        true
    }
}

/// Counters a task and its operators update; read by the job handle.
#[derive(Debug)]
pub struct TaskMetrics {
    /// Rows received by the task's first operator.
    pub records_in: AtomicU64,
    /// Rows sent to the task's output channels.
    pub records_out: AtomicU64,
    /// Rows handed to a sink connector.
    pub records_written: AtomicU64,
    /// Rows dropped because their window had already fired.
    pub late_records_dropped: AtomicU64,
    /// Input rows skipped because they could not be parsed (with `ignore-parse-errors`).
    pub parse_errors_skipped: AtomicU64,
    /// Nanoseconds spent blocked on full output channels (backpressure),
    /// counted when a blocked send completes.
    pub blocked_on_output_nanos: AtomicU64,
    /// While a send is blocked: when it started ([`monotonic_nanos`]); 0 otherwise.
    pub blocked_since: AtomicU64,
    /// The most advanced watermark that reached an operator of the task.
    pub watermark: std::sync::atomic::AtomicI64,
}

impl Default for TaskMetrics {
    fn default() -> Self {
        TaskMetrics {
            records_in: AtomicU64::new(0),
            records_out: AtomicU64::new(0),
            records_written: AtomicU64::new(0),
            late_records_dropped: AtomicU64::new(0),
            parse_errors_skipped: AtomicU64::new(0),
            blocked_on_output_nanos: AtomicU64::new(0),
            blocked_since: AtomicU64::new(0),
            watermark: std::sync::atomic::AtomicI64::new(weir_common::time::MIN_WATERMARK),
        }
    }
}

/// Nanoseconds on a monotonic clock shared by the process (never 0).
pub fn monotonic_nanos() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64 + 1
}

impl TaskMetrics {
    /// Time blocked on output so far, including a send blocked right now.
    pub fn blocked_nanos_now(&self) -> u64 {
        let done = self.blocked_on_output_nanos.load(Ordering::Relaxed);
        match self.blocked_since.load(Ordering::Relaxed) {
            0 => done,
            since => done + monotonic_nanos().saturating_sub(since),
        }
    }

    /// The task starts waiting on a full output: shown as blocked from now.
    /// Returns the start, for [`TaskMetrics::unblocked`].
    pub fn blocked(&self) -> u64 {
        let since = monotonic_nanos();
        self.blocked_since.store(since, Ordering::Relaxed);
        since
    }

    /// The wait that began at `since` ended: its time counts as blocked.
    pub fn unblocked(&self, since: u64) {
        // Added before the mark is cleared: a reading in between counts the
        // time twice at most, never loses it.
        Self::add(
            &self.blocked_on_output_nanos,
            monotonic_nanos().saturating_sub(since),
        );
        self.blocked_since.store(0, Ordering::Relaxed);
    }

    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Where an operator instance runs: its subtask and the job's settings.
#[derive(Debug, Clone)]
pub struct TaskContext {
    /// Index of this subtask, `0..parallelism`.
    pub subtask: usize,
    /// Parallelism of the operator.
    pub parallelism: usize,
    /// Number of key groups (Flink's max parallelism).
    pub max_parallelism: usize,
    /// Rows per batch that sources and operators aim for.
    pub batch_size: usize,
    /// Counters of this subtask.
    pub metrics: Arc<TaskMetrics>,
    /// Set when the job is cancelled or has failed: anything that blocks
    /// (a full channel) checks it so that no task waits forever.
    pub cancel: Arc<std::sync::atomic::AtomicBool>,
    /// True when the job takes checkpoints (sinks then commit at checkpoints).
    pub checkpointing: bool,
    /// The run's id (sinks name their in-progress files by it).
    pub job_id: weir_common::ids::JobId,
    /// The attempt, 0 first, counting restarts after failures.
    pub attempt: u32,
    /// Incremental checkpoints are on: operators that can write deltas
    /// track what changed between snapshots.
    pub incremental: bool,
    /// The spilling state backend: this operator subtask's share of the
    /// memory budget and where its runs go; `None` with state on the heap.
    pub spill: Option<SpillSettings>,
}

impl TaskContext {
    /// A context for running an operator outside a job (tests, benchmarks).
    pub fn standalone(batch_size: usize) -> Self {
        TaskContext {
            subtask: 0,
            parallelism: 1,
            max_parallelism: 128,
            batch_size,
            metrics: Arc::new(TaskMetrics::default()),
            cancel: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            checkpointing: false,
            job_id: weir_common::ids::JobId::new(),
            attempt: 0,
            incremental: false,
            spill: None,
        }
    }

    /// True once the job is cancelled or failed.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

/// Sends on a bounded channel, waiting while it is full but giving up when the
/// job is cancelled (so a failure elsewhere never leaves a task blocked).
/// Returns the time spent blocked.
pub fn send_or_cancel<T>(
    sender: &crossbeam_channel::Sender<T>,
    message: T,
    cancel: &std::sync::atomic::AtomicBool,
) -> std::result::Result<std::time::Duration, SendFailure> {
    send_tracked(sender, message, cancel, None)
}

/// [`send_or_cancel`] that shows a blocked send in `metrics` while it lasts
/// (so backpressure is visible even when a send never completes) and adds
/// the time to `blocked_on_output_nanos` when it does.
pub fn send_tracked<T>(
    sender: &crossbeam_channel::Sender<T>,
    message: T,
    cancel: &std::sync::atomic::AtomicBool,
    metrics: Option<&TaskMetrics>,
) -> std::result::Result<std::time::Duration, SendFailure> {
    use crossbeam_channel::{SendTimeoutError, TrySendError};
    let mut message = match sender.try_send(message) {
        Ok(()) => return Ok(std::time::Duration::ZERO),
        Err(TrySendError::Disconnected(_)) => return Err(SendFailure::Disconnected),
        Err(TrySendError::Full(message)) => message,
    };
    let started = std::time::Instant::now();
    let since = metrics.map(TaskMetrics::blocked);
    let result = loop {
        match sender.send_timeout(message, std::time::Duration::from_millis(50)) {
            Ok(()) => break Ok(started.elapsed()),
            Err(SendTimeoutError::Disconnected(_)) => break Err(SendFailure::Disconnected),
            Err(SendTimeoutError::Timeout(back)) => {
                if cancel.load(Ordering::Relaxed) {
                    break Err(SendFailure::Cancelled);
                }
                message = back;
            }
        }
    };
    if let (Some(metrics), Some(since)) = (metrics, since) {
        metrics.unblocked(since);
    }
    result
}

/// Why a send did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendFailure {
    /// The receiver is gone.
    Disconnected,
    /// The job was cancelled while the channel was full.
    Cancelled,
}

/// Creates one operator instance per subtask; built from a plan node's spec
/// (see `operators::build`).
pub trait OperatorFactory: Send + Sync + std::fmt::Debug {
    /// The operator for one subtask.
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>>;

    /// The inputs whose records are read again from their sources after a
    /// restore (the table of a lookup or broadcast join): their in-flight
    /// records in an unaligned checkpoint are not replayed, or they would
    /// arrive twice.
    fn replayed_inputs(&self) -> Vec<usize> {
        Vec::new()
    }

    /// Whether its operator keeps its state within a memory budget, spilling
    /// the rest to local disk, with the spilling state backend (window
    /// aggregations, session windows, non-windowed and OVER aggregations,
    /// regular, interval, temporal and window joins, TopN, a sink's
    /// materializer, changelog normalization: every keyed operator weir
    /// plans); a keyed operator that cannot is refused by that backend.
    fn can_spill(&self) -> bool {
        false
    }
}
