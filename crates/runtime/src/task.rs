//! The task loop: one thread runs one subtask's chain of operators.
//!
//! ```text
//!   source reader ─┐                         ┌─► ExchangeWriter ─► channels
//!   or InputGate ──┴─► op 0 ─► op 1 ─► ... ──┤
//!                     (chained: plain calls) └─► ExchangeWriter ─► ...
//! ```
//!
//! Batches and watermarks an operator emits go straight into the next operator of
//! the chain; what the last one emits goes to the task's exchange writers. At the
//! end of input every operator sees a final watermark of +infinity, then `finish`,
//! and end-of-stream is sent downstream.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;

use crate::control::{TaskCheckpointing, TaskControl, TaskReport, failpoint};
use crate::exchange::ExchangeWriter;
use crate::incremental::{ChainWrite, StateChain};
use crate::input::{InputEvent, InputGate};
use crate::message::{CheckpointBarrier, Message, WatermarkStatus};
use crate::operator::{Emitted, Operator, OperatorSnapshot, Output, TaskMetrics};
use crate::source::{SourcePoll, SourceReader};
use crate::{Error, Result};
use weir_common::ids::{BarrierKind, CheckpointId};
use weir_common::time::wall_clock_millis;
use weir_common::time::{MAX_WATERMARK, Timestamp};
use weir_state::checkpoint::metadata::{ChannelSide, ChannelStateFile, OperatorState, StateFile, TaskState};
use weir_state::checkpoint::remote;
use weir_state::incremental::{DeltaKind, Step};
use weir_state::runs::Run;
use weir_state::snapshot::{write_batches, write_state_file};

/// One operator's snapshot, as a task takes it.
struct Taken {
    operator_id: String,
    signature: Option<String>,
    snapshot: OperatorSnapshot,
    /// Incremental checkpoints: where the rows go in the operator's chain.
    chain: Option<ChainWrite>,
}

/// The error of a snapshot writer whose checkpoint (or attempt) is over.
fn no_longer_live() -> Error {
    Error::Execution("the checkpoint was aborted while its state was written".into())
}

/// Writes the keyed rows of each snapshot as a Parquet file under `dir`,
/// while `live` says the checkpoint goes on.
fn write_snapshots(
    dir: &std::path::Path,
    subtask: usize,
    taken: Vec<Taken>,
    live: &dyn Fn() -> bool,
) -> Result<Vec<OperatorState>> {
    taken
        .into_iter()
        .map(
            |Taken {
                 operator_id,
                 signature,
                 snapshot,
                 chain,
             }| {
                // A chain's file is written even for an aborted checkpoint:
                // later ones of the chain refer to it.
                let always = || true;
                let snapshot = snapshot.written(if chain.is_some() { &always } else { live })?;
                if let Some(chain) = chain {
                    let delta_kind = Some(chain.kind);
                    let (file, deltas) = chain.write(snapshot.rows.as_ref(), &snapshot.runs)?;
                    return Ok(OperatorState {
                        operator_id,
                        signature,
                        meta: snapshot.meta,
                        file,
                        deltas,
                        delta_kind,
                    });
                }
                let file = match snapshot.rows {
                    Some(rows) if rows.num_rows() > 0 => {
                        if !live() {
                            return Err(no_longer_live());
                        }
                        let relative = format!("{operator_id}/{subtask}.parquet");
                        Some(write_state_file(&dir.join(&relative), &relative, &rows)?)
                    }
                    _ => None,
                };
                let deltas = link_runs(dir, &operator_id, subtask, &snapshot.runs)?;
                let delta_kind = (!deltas.is_empty()).then_some(DeltaKind::Merge);
                Ok(OperatorState {
                    operator_id,
                    signature,
                    meta: snapshot.meta,
                    file,
                    deltas,
                    delta_kind,
                })
            },
        )
        .collect()
}

/// Puts the spilled runs of a snapshot into the checkpoint directory as
/// `<operator>/<subtask>-run-<k>.parquet` ([`Run::link`]). They are the
/// deltas of the operator's state, merging with its rows.
fn link_runs(
    dir: &std::path::Path,
    operator_id: &str,
    subtask: usize,
    runs: &[Run],
) -> Result<Vec<StateFile>> {
    runs.iter()
        .enumerate()
        .map(|(k, run)| {
            let relative = format!("{operator_id}/{subtask}-run-{k}.parquet");
            run.link(&dir.join(&relative), &relative)
        })
        .collect()
}

/// How long a task waits for input before it looks at coordinator messages.
const CONTROL_POLL: Duration = Duration::from_millis(20);

/// How long a task whose upstream ended without finishing waits for a
/// stop-with-savepoint to reach it before it reports the upstream's end as a failure.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Whether the task goes on after the coordinator's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    /// Stopped with a savepoint: end now, without end-of-input processing.
    Stop,
}

/// Where a task's input comes from.
pub enum TaskInput {
    /// The task runs a source reader.
    Source(Box<dyn SourceReader>),
    /// The task reads channels from upstream tasks.
    Channels(Box<InputGate>),
}

/// One subtask, ready to run.
pub struct Task {
    /// `Vertex name (subtask/parallelism)`, for errors.
    pub name: String,
    /// Its input.
    pub input: Option<TaskInput>,
    /// Chained operators, first to last.
    pub chain: Vec<Box<dyn Operator>>,
    /// One writer per outgoing edge.
    pub outputs: Vec<ExchangeWriter>,
    /// Counters.
    pub metrics: Arc<TaskMetrics>,
    /// Set when the job is cancelled or failed elsewhere.
    pub cancel: Arc<AtomicBool>,
    /// The task's checkpoint wiring, when checkpoints are on.
    pub checkpointing: Option<TaskCheckpointing>,
    /// A source that injected a stop-with-savepoint barrier emits nothing more.
    pub paused: bool,
    /// Channel state of an unaligned checkpoint to replay before anything else.
    pub replay: Vec<Replay>,
    /// Unaligned: snapshots taken, each waiting for its input channel state.
    pub pending_snapshots: Vec<PendingSnapshot>,
    /// The last checkpoint the task snapshotted (a finished task ignores
    /// triggers for it and older ones).
    pub last_snapshot: Option<CheckpointId>,
    /// Incremental checkpoints: the state chain of each chained operator
    /// that writes deltas (by chain index).
    pub chains: Vec<Option<StateChain>>,
    /// Sources: whether the output is idle (`table.exec.source.idle-timeout`).
    pub idleness: Idleness,
}

/// A source task's output status: idle after the timeout without data;
/// active again with data, or with a watermark (a split's idleness let it
/// advance: a watermark of an idle channel would not count downstream).
#[derive(Debug)]
pub struct Idleness {
    timeout: Option<Duration>,
    idle: bool,
    last_active: Instant,
}

impl Idleness {
    /// Active; idle after `timeout` without data (never when `None`).
    pub fn new(timeout: Option<Duration>) -> Self {
        Idleness {
            timeout,
            idle: false,
            last_active: Instant::now(),
        }
    }

    /// Data or a watermark goes out at `now`: true when the output was idle
    /// (and must say it is active first).
    fn activate(&mut self, now: Instant) -> bool {
        self.last_active = now;
        std::mem::replace(&mut self.idle, false)
    }

    /// Nothing to read at `now`: true when the output turns idle now;
    /// otherwise how long until it would, if it can.
    fn check(&mut self, now: Instant) -> (bool, Option<Duration>) {
        let Some(timeout) = self.timeout.filter(|_| !self.idle) else {
            return (false, None);
        };
        match timeout.checked_sub(now.duration_since(self.last_active)) {
            Some(left) if !left.is_zero() => (false, Some(left)),
            _ => {
                self.idle = true;
                (true, None)
            }
        }
    }
}

/// In-flight data restored from an unaligned checkpoint.
#[derive(Debug)]
pub enum Replay {
    /// Records the task had queued for output exchange `writer`.
    Output {
        /// The exchange, by index.
        writer: usize,
        /// The records.
        batch: RecordBatch,
    },
    /// Records that had reached logical input `input` but were not in the snapshot.
    Input {
        /// The logical input.
        input: usize,
        /// The records.
        batch: RecordBatch,
    },
}

/// The synchronous part of a checkpoint, until it is written.
pub struct PendingSnapshot {
    barrier: CheckpointBarrier,
    source: Option<serde_json::Value>,
    taken: Result<Vec<Taken>>,
    /// Unaligned: batches queued per output exchange.
    outputs: Vec<(usize, Vec<RecordBatch>)>,
    blocked: Duration,
    alignment: Duration,
}

/// Writes the channel state of an unaligned checkpoint: one Parquet file per
/// logical input and per output exchange that had records in flight.
/// Uploads a snapshot's files when its directory is on S3 (nothing to do
/// elsewhere), before the task acknowledges, and drops the local copies;
/// shared files of incremental chains stay, as later checkpoints of this
/// task compact them.
fn upload_snapshot(
    dir: &std::path::Path,
    operators: &[OperatorState],
    channels: &[ChannelStateFile],
) -> Result<()> {
    if weir_common::config::checkpoint::s3_location(dir).is_none() {
        return Ok(());
    }
    let files = operators.iter().flat_map(|o| o.files()).map(|f| &f.path);
    for path in files.chain(channels.iter().map(|c| &c.path)) {
        let local = dir.join(path);
        if path.starts_with("../") {
            remote::upload_shared(&local)?;
        } else {
            remote::upload(&local)?;
            let _ = std::fs::remove_file(&local);
        }
    }
    Ok(())
}

fn write_channel_state(
    dir: &std::path::Path,
    vertex: usize,
    subtask: usize,
    inputs: Vec<(usize, RecordBatch)>,
    outputs: Vec<(usize, Vec<RecordBatch>)>,
    live: &dyn Fn() -> bool,
) -> Result<Vec<ChannelStateFile>> {
    let mut grouped: std::collections::BTreeMap<(usize, usize), Vec<RecordBatch>> = Default::default();
    for (input, batch) in inputs {
        grouped.entry((0, input)).or_default().push(batch);
    }
    for (writer, batches) in outputs {
        grouped.entry((1, writer)).or_default().extend(batches);
    }
    let mut files = Vec::new();
    for ((side, index), batches) in grouped {
        let (side, name) = match side {
            0 => (ChannelSide::Input, "input"),
            _ => (ChannelSide::Output, "output"),
        };
        if !live() {
            return Err(no_longer_live());
        }
        let relative = format!("channel-state/{vertex}-{subtask}-{name}-{index}.parquet");
        let (rows, bytes) = write_batches(&dir.join(&relative), &batches)?;
        files.push(ChannelStateFile {
            side,
            index,
            path: relative,
            rows,
            bytes,
        });
    }
    Ok(files)
}

/// When a chain has processing-time operators, how often to tell them the time.
struct ProcessingClock {
    interval: Option<Duration>,
    last: std::time::Instant,
}

impl ProcessingClock {
    const INTERVAL: Duration = Duration::from_millis(20);

    fn new(chain: &[Box<dyn Operator>]) -> Self {
        ProcessingClock {
            interval: chain
                .iter()
                .any(|op| op.uses_processing_time())
                .then_some(Self::INTERVAL),
            last: std::time::Instant::now(),
        }
    }

    fn interval(&self) -> Option<Duration> {
        self.interval
    }

    fn due(&mut self) -> bool {
        match self.interval {
            Some(interval) if self.last.elapsed() >= interval => {
                self.last = std::time::Instant::now();
                true
            }
            _ => false,
        }
    }
}

/// The error of a finished task whose coordinator ended before the final
/// checkpoint: its last output is not committed. A consequence (of the
/// coordinator's failure), never a job's root cause.
pub fn coordinator_gone() -> Error {
    Error::Execution(
        "the checkpoint coordinator ended before the final checkpoint: nothing more was committed".into(),
    )
}

/// The error of a task that stopped because the job was cancelled.
pub fn cancelled() -> Error {
    Error::Execution("the job was cancelled".into())
}

impl Task {
    /// Runs the task to the end of its input.
    pub fn run(mut self) -> Result<()> {
        match self.input.take() {
            Some(TaskInput::Source(reader)) => self.run_source(reader),
            Some(TaskInput::Channels(gate)) => self.run_channels(*gate),
            None => Err(Error::Internal(format!("task {} has no input", self.name))),
        }
    }

    fn run_source(&mut self, mut reader: Box<dyn SourceReader>) -> Result<()> {
        let mut clock = ProcessingClock::new(&self.chain);
        self.replay()?;
        self.idleness.activate(Instant::now());
        loop {
            if self.cancel.load(Ordering::Relaxed) {
                return Err(cancelled());
            }
            if self.drain(None, Some(reader.as_mut()))? == Flow::Stop
                || self.handle_control(Some(reader.as_mut()))? == Flow::Stop
            {
                return Ok(());
            }
            if self.paused {
                std::thread::sleep(CONTROL_POLL);
                continue;
            }
            match reader.poll_next()? {
                poll @ (SourcePoll::Batch(_) | SourcePoll::SplitBatch(..)) => {
                    if self.idleness.activate(Instant::now()) {
                        self.broadcast(Message::WatermarkStatus(WatermarkStatus::Active))?;
                    }
                    match poll {
                        SourcePoll::SplitBatch(split, batch) => {
                            TaskMetrics::add(&self.metrics.records_in, batch.num_rows() as u64);
                            self.push_split_batch(0, split, batch)?;
                        }
                        SourcePoll::Batch(batch) => {
                            TaskMetrics::add(&self.metrics.records_in, batch.num_rows() as u64);
                            self.push_batch(0, 0, batch)?;
                        }
                        _ => unreachable!("matched above"),
                    }
                }
                SourcePoll::Splits(splits) => self.set_splits(&splits)?,
                SourcePoll::Idle(wait) => {
                    let mut limit = clock.interval().unwrap_or(Duration::from_millis(50));
                    if self.checkpointing.is_some() {
                        limit = limit.min(CONTROL_POLL);
                    }
                    match self.idleness.check(Instant::now()) {
                        (true, _) => self.broadcast(Message::WatermarkStatus(WatermarkStatus::Idle))?,
                        (false, Some(left)) => limit = limit.min(left),
                        (false, None) => {}
                    }
                    std::thread::sleep(wait.min(limit))
                }
                SourcePoll::End => break,
            }
            if clock.due() {
                self.tick()?;
            }
        }
        self.end()?;
        self.finished(Some(reader))
    }

    fn run_channels(&mut self, mut gate: InputGate) -> Result<()> {
        let mut clock = ProcessingClock::new(&self.chain);
        let timeout = match (clock.interval(), self.checkpointing.is_some()) {
            (Some(interval), true) => Some(interval.min(CONTROL_POLL)),
            (None, true) => Some(CONTROL_POLL),
            (interval, false) => interval,
        };
        self.replay()?;
        let lanes = gate.has_lanes();
        loop {
            if self.drain(Some(&mut gate), None)? == Flow::Stop || self.handle_control(None)? == Flow::Stop {
                return Ok(());
            }
            let event = match gate.next_event_timeout(timeout) {
                Ok(event) => event,
                Err(e) => return self.await_stop(e),
            };
            match event {
                InputEvent::Batch { input, batch } => {
                    TaskMetrics::add(&self.metrics.records_in, batch.num_rows() as u64);
                    self.push_batch(0, input, batch)?;
                }
                InputEvent::Watermark(wm) => self.push_watermark(0, wm)?,
                InputEvent::EndOfInput(input) => {
                    let mut out = Output::default();
                    self.chain[0].end_input(input, &mut out)?;
                    self.forward(1, out)?;
                }
                InputEvent::WatermarkStatus(status) => self.broadcast(Message::WatermarkStatus(status))?,
                event @ (InputEvent::Barrier(_)
                | InputEvent::AbortCheckpoint(_)
                | InputEvent::ChannelState { .. }) => {
                    self.on_checkpoint_event(event, gate.last_alignment(), lanes)?
                }
                InputEvent::Idle => {}
                InputEvent::End => break,
            }
            if clock.due() {
                self.tick()?;
            }
        }
        self.end()?;
        self.finished(None)
    }

    /// After the end of input (FLIP-147): the task tells the coordinator it
    /// has finished and stays until the job's final checkpoint. It gets no
    /// barriers any more, so the coordinator asks it directly for each
    /// checkpoint; it snapshots its final state (a source its position at
    /// the end) and commits as checkpoints complete. It commits its last
    /// output only when a checkpoint that holds it is complete, never when the
    /// coordinator is gone.
    fn finished(&mut self, mut reader: Option<Box<dyn SourceReader>>) -> Result<()> {
        let Some(checkpointing) = &self.checkpointing else {
            return Ok(());
        };
        let _ = checkpointing.reports.send(TaskReport::Finished {
            task: checkpointing.task,
        });
        let control = checkpointing.control.clone();
        loop {
            if self.cancel.load(Ordering::Relaxed) {
                return Err(cancelled());
            }
            match control.recv_timeout(CONTROL_POLL) {
                Ok(TaskControl::Trigger(barrier) | TaskControl::TriggerStop(barrier)) => {
                    if self.last_snapshot.is_some_and(|last| barrier.id <= last) {
                        continue;
                    }
                    let position = match reader.as_deref_mut().map(|r| r.snapshot_position(barrier.id)) {
                        Some(Err(e)) => {
                            self.decline(barrier.id, e.to_string());
                            continue;
                        }
                        position => position.transpose()?,
                    };
                    self.last_snapshot = Some(barrier.id);
                    let snapshot = PendingSnapshot {
                        barrier,
                        source: position,
                        taken: self.take_snapshots(&barrier),
                        outputs: Vec::new(),
                        blocked: Duration::ZERO,
                        alignment: Duration::ZERO,
                    };
                    self.write_snapshot(snapshot, Vec::new())?;
                }
                Ok(TaskControl::Complete(id)) => self.commit_all(id, reader.as_deref_mut())?,
                Ok(TaskControl::JobFinished(id) | TaskControl::Stop(id)) => {
                    return self.commit_all(id, reader.as_deref_mut());
                }
                Ok(TaskControl::Resume) => {}
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return Err(coordinator_gone()),
            }
        }
    }

    /// Commits everything pre-committed up to `id`.
    fn commit_all(
        &mut self,
        id: CheckpointId,
        reader: Option<&mut (dyn SourceReader + 'static)>,
    ) -> Result<()> {
        if let Some(reader) = reader {
            reader.notify_checkpoint_complete(id)?;
        }
        for operator in &mut self.chain {
            operator.notify_checkpoint_complete(id)?;
        }
        Ok(())
    }

    /// An upstream task ended without finishing (`error`): when the job is
    /// being stopped with a savepoint, that is the upstream having stopped
    /// first, and this task's own stop message follows; otherwise, or if
    /// none comes, it is a failure.
    fn await_stop(&mut self, error: Error) -> Result<()> {
        let Some(checkpointing) = &self.checkpointing else {
            return Err(error);
        };
        let control = checkpointing.control.clone();
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline && !self.cancel.load(Ordering::Relaxed) {
            match control.recv_timeout(CONTROL_POLL) {
                Ok(TaskControl::Stop(id)) => return self.commit_all(id, None),
                Ok(TaskControl::Complete(id)) => self.commit_all(id, None)?,
                Ok(_) => {}
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            }
        }
        Err(error)
    }

    /// Handles what the coordinator sent: triggers (sources), completions,
    /// and the end of a stop-with-savepoint.
    fn handle_control(&mut self, mut reader: Option<&mut (dyn SourceReader + 'static)>) -> Result<Flow> {
        loop {
            let Some(checkpointing) = &self.checkpointing else {
                return Ok(Flow::Continue);
            };
            let Ok(message) = checkpointing.control.try_recv() else {
                return Ok(Flow::Continue);
            };
            match message {
                TaskControl::Trigger(barrier) | TaskControl::TriggerStop(barrier) => {
                    let stop = matches!(message, TaskControl::TriggerStop(_));
                    let position = match reader.as_deref_mut() {
                        Some(reader) => match reader.snapshot_position(barrier.id) {
                            Ok(position) => Some(position),
                            Err(e) => {
                                self.decline(barrier.id, e.to_string());
                                continue;
                            }
                        },
                        None => None,
                    };
                    self.checkpoint(barrier, position, Duration::ZERO, false)?;
                    self.paused |= stop;
                }
                TaskControl::Complete(id) | TaskControl::JobFinished(id) => {
                    self.commit_all(id, reader.as_deref_mut())?
                }
                TaskControl::Stop(id) => {
                    self.commit_all(id, reader.as_deref_mut())?;
                    return Ok(Flow::Stop);
                }
                TaskControl::Resume => self.paused = false,
            }
        }
    }

    /// Checkpoint `barrier` on this task: operators emit what precedes the
    /// barrier and hand over their state (the synchronous part, which is all
    /// the task is blocked for), the barrier goes downstream, and a helper
    /// thread writes the state files and reports to the coordinator (the
    /// asynchronous part). A failure to save declines the checkpoint; the task
    /// goes on.
    fn checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        source: Option<serde_json::Value>,
        alignment: Duration,
        defer: bool,
    ) -> Result<()> {
        let started = Instant::now();
        self.last_snapshot = Some(barrier.id);
        for index in 0..self.chain.len() {
            let mut out = Output::default();
            self.chain[index].prepare_snapshot(&mut out)?;
            self.forward(index + 1, out)?;
        }
        let taken = self.take_snapshots(&barrier);
        let mut outputs = Vec::new();
        for (index, output) in self.outputs.iter_mut().enumerate() {
            if !output.has_priority_lanes() {
                output.broadcast(Message::Barrier(barrier))?;
                continue;
            }
            if barrier.kind == BarrierKind::Savepoint {
                // Savepoints are aligned: what is queued goes out first.
                output.flush_blocking()?;
            } else {
                // Unaligned: the barrier overtakes what is queued, which is
                // saved with the snapshot and sent again after a restore.
                let pending = output.pending_batches();
                if !pending.is_empty() {
                    outputs.push((index, pending));
                }
            }
            output.send_priority_barrier(barrier)?;
        }
        let snapshot = PendingSnapshot {
            barrier,
            source,
            taken,
            outputs,
            blocked: started.elapsed(),
            alignment,
        };
        if defer {
            // Unaligned: acknowledged once the input channel state is complete.
            self.pending_snapshots.push(snapshot);
            return Ok(());
        }
        self.write_snapshot(snapshot, Vec::new())
    }

    /// Unaligned: the records that were in flight before checkpoint `id`'s
    /// barriers are all in; the snapshot can be written.
    fn channel_state_complete(&mut self, id: CheckpointId, records: Vec<(usize, RecordBatch)>) -> Result<()> {
        match self.pending_snapshots.iter().position(|s| s.barrier.id == id) {
            Some(index) => {
                let snapshot = self.pending_snapshots.remove(index);
                self.write_snapshot(snapshot, records)
            }
            None => Ok(()),
        }
    }

    /// Handles a checkpoint event of the input gate.
    fn on_checkpoint_event(&mut self, event: InputEvent, alignment: Duration, lanes: bool) -> Result<()> {
        match event {
            InputEvent::Barrier(barrier) => self.checkpoint(barrier, None, alignment, lanes),
            InputEvent::AbortCheckpoint(id) => {
                self.pending_snapshots.retain(|s| s.barrier.id != id);
                self.decline(id, "a newer barrier overtook it".into());
                Ok(())
            }
            InputEvent::ChannelState { id, records } => self.channel_state_complete(id, records),
            _ => Ok(()),
        }
    }

    /// The asynchronous part of a checkpoint: a helper thread writes the
    /// state files (keyed state, and channel state when unaligned) and
    /// reports to the coordinator.
    fn write_snapshot(&mut self, snapshot: PendingSnapshot, inputs: Vec<(usize, RecordBatch)>) -> Result<()> {
        let Some(checkpointing) = &self.checkpointing else {
            return Ok(());
        };
        let PendingSnapshot {
            barrier,
            source,
            taken,
            outputs,
            blocked,
            alignment,
        } = snapshot;
        let dir = checkpointing.snapshot_dir(&barrier);
        let reports = checkpointing.reports.clone();
        let (task, subtask, vertex) = (checkpointing.task, checkpointing.subtask, checkpointing.vertex);
        let mut state = TaskState {
            source_id: checkpointing.source_id.clone(),
            vertex,
            subtask,
            parallelism: checkpointing.parallelism,
            source,
            operators: Vec::new(),
            channel_state: Vec::new(),
        };
        let name = self.name.clone();
        let job_name = checkpointing.job_name.clone();
        let fence = checkpointing.fence.clone();
        let write = move || {
            let injected = (|| {
                fail::fail_point!(&failpoint("snapshot-write", &job_name), |_| Some(
                    Error::Execution("failpoint snapshot-write".into())
                ));
                None
            })();
            let written = taken.and_then(|taken| {
                if let Some(e) = injected {
                    return Err(e);
                }
                let live = || fence.is_live(barrier.id);
                let operators = write_snapshots(&dir, subtask, taken, &live)?;
                let channels = write_channel_state(&dir, vertex, subtask, inputs, outputs, &live)?;
                upload_snapshot(&dir, &operators, &channels)?;
                Ok((operators, channels))
            });
            if !fence.is_live(barrier.id) {
                // Aborted, or the attempt is over: what was written goes, and
                // nothing is reported (the next attempt may be restoring).
                if let Ok((operators, channels)) = &written {
                    // Shared files (`../shared/...`) stay: chains refer to them.
                    let files = operators
                        .iter()
                        .flat_map(|o| o.files())
                        .map(|f| &f.path)
                        .filter(|path| !path.starts_with("../"));
                    for path in files.chain(channels.iter().map(|c| &c.path)) {
                        let _ = std::fs::remove_file(dir.join(path));
                    }
                }
                return;
            }
            let report = match written {
                Ok((operators, channels)) => {
                    state.operators = operators;
                    let channel_state_bytes = channels.iter().map(|c| c.bytes).sum();
                    state.channel_state = channels;
                    TaskReport::Acknowledge {
                        checkpoint: barrier.id,
                        task,
                        state,
                        blocked,
                        alignment,
                        channel_state_bytes,
                    }
                }
                Err(e) => TaskReport::Decline {
                    checkpoint: barrier.id,
                    task,
                    reason: format!("task {name}: {e}"),
                },
            };
            // The coordinator is gone only when the job is ending.
            let _ = reports.send(report);
        };
        // The report channel stays open until this thread is done, so the
        // coordinator never misses an acknowledgement.
        if let Err(e) = std::thread::Builder::new()
            .name(format!("weir-snapshot-{task}"))
            .spawn(write)
        {
            return Err(Error::Execution(format!(
                "could not start a snapshot writer: {e}"
            )));
        }
        Ok(())
    }

    /// Puts the queued output on the channels. While a channel is full the
    /// task waits, but still takes coordinator messages and (unaligned)
    /// barriers that overtook its input, so a backpressured task checkpoints
    /// at once. The time waited counts as backpressure.
    fn drain(
        &mut self,
        mut gate: Option<&mut InputGate>,
        mut reader: Option<&mut (dyn SourceReader + 'static)>,
    ) -> Result<Flow> {
        let mut since = None;
        let result = 'drain: loop {
            let mut done = true;
            for output in &mut self.outputs {
                match output.flush() {
                    Ok(flushed) => done &= flushed,
                    Err(e) => break 'drain Err(e),
                }
            }
            if done {
                break Ok(Flow::Continue);
            }
            if self.cancel.load(Ordering::Relaxed) {
                break Err(cancelled());
            }
            since.get_or_insert_with(|| self.metrics.blocked());
            {
                let mut select = crossbeam_channel::Select::new();
                for output in &self.outputs {
                    if let Some(sender) = output.waiting_on() {
                        select.send(sender);
                    }
                }
                if let Some(checkpointing) = &self.checkpointing {
                    select.recv(&checkpointing.control);
                }
                if let Some(gate) = gate.as_deref() {
                    for lane in gate.lanes() {
                        select.recv(lane);
                    }
                }
                let _ = select.ready_timeout(CONTROL_POLL);
            }
            match self.handle_control(reader.as_deref_mut()) {
                Ok(Flow::Stop) => break Ok(Flow::Stop),
                Ok(Flow::Continue) => {}
                Err(e) => break Err(e),
            }
            if let Some(gate) = gate.as_deref_mut() {
                for event in gate.poll_barriers() {
                    if let Err(e) = self.on_checkpoint_event(event, gate.last_alignment(), true) {
                        break 'drain Err(e);
                    }
                }
            }
        };
        if let Some(since) = since {
            self.metrics.unblocked(since);
        }
        result
    }

    /// After a restore from an unaligned checkpoint: the output that was
    /// queued goes out first, then the input that was in flight is processed.
    fn replay(&mut self) -> Result<()> {
        for replay in std::mem::take(&mut self.replay) {
            match replay {
                Replay::Output { writer, batch } => match self.outputs.get_mut(writer) {
                    Some(output) => output.send_batch(batch)?,
                    None => {
                        return Err(Error::State(format!(
                            "task {}: channel state for output {writer}, which it does not have",
                            self.name
                        )));
                    }
                },
                Replay::Input { input, batch } => {
                    TaskMetrics::add(&self.metrics.records_in, batch.num_rows() as u64);
                    self.push_batch(0, input, batch)?;
                }
            }
        }
        Ok(())
    }

    /// The state every chained operator hands over at `barrier`: with
    /// incremental checkpoints, what changed (savepoints are always full).
    fn take_snapshots(&mut self, barrier: &CheckpointBarrier) -> Result<Vec<Taken>> {
        let checkpointing = self.checkpointing.as_ref().ok_or_else(|| {
            Error::Internal(format!("task {} got a barrier without checkpoints", self.name))
        })?;
        let id = barrier.id;
        let mut taken = Vec::new();
        let operators = self.chain.iter_mut().zip(&checkpointing.operator_ids);
        for (index, (operator, operator_id)) in operators.enumerate() {
            let chain = self.chains.get_mut(index).and_then(Option::as_mut);
            let (snapshot, chain) = match chain {
                Some(chain) if barrier.kind == BarrierKind::Checkpoint => {
                    let step = chain.prepare(id);
                    let snapshot = operator.snapshot_delta(id, step == Step::Full)?;
                    let has_rows = snapshot.as_ref().is_some_and(OperatorSnapshot::has_rows);
                    let write = chain.record(id, step, has_rows);
                    let meta = snapshot
                        .as_ref()
                        .map_or(serde_json::Value::Null, |s| s.meta.clone());
                    chain.maybe_compact(&meta)?;
                    let snapshot = snapshot.unwrap_or(OperatorSnapshot {
                        meta,
                        rows: None,
                        runs: Vec::new(),
                        deferred: Vec::new(),
                        rows_later: None,
                    });
                    (Some(snapshot), Some(write))
                }
                _ => (operator.snapshot(id)?, None),
            };
            if let Some(snapshot) = snapshot {
                taken.push(Taken {
                    operator_id: operator_id.clone(),
                    signature: operator.state_signature()?,
                    snapshot,
                    chain,
                });
            }
        }
        Ok(taken)
    }

    fn decline(&self, checkpoint: CheckpointId, reason: String) {
        if let Some(checkpointing) = &self.checkpointing {
            let _ = checkpointing.reports.send(TaskReport::Decline {
                checkpoint,
                task: checkpointing.task,
                reason: format!("task {}: {reason}", self.name),
            });
        }
    }

    /// Tells every operator the wall-clock time, in chain order.
    fn tick(&mut self) -> Result<()> {
        let now = wall_clock_millis();
        for index in 0..self.chain.len() {
            if self.chain[index].uses_processing_time() {
                let mut out = Output::default();
                self.chain[index].on_processing_time(now, &mut out)?;
                self.forward_from(index, out)?;
            }
        }
        Ok(())
    }

    /// End of input: a final watermark, `finish` on every operator in order, then
    /// end-of-stream downstream.
    fn end(&mut self) -> Result<()> {
        self.push_watermark(0, MAX_WATERMARK)?;
        for index in 0..self.chain.len() {
            let mut out = Output::default();
            self.chain[index].finish(&mut out)?;
            self.forward(index + 1, out)?;
        }
        for output in &mut self.outputs {
            output.broadcast(Message::EndOfStream)?;
            output.flush_blocking()?;
        }
        Ok(())
    }

    /// Sends `message` on every output channel, past the operators (a
    /// watermark status: operators see only watermarks).
    fn broadcast(&mut self, message: Message) -> Result<()> {
        for output in &mut self.outputs {
            output.broadcast(message.clone())?;
        }
        Ok(())
    }

    fn push_batch(&mut self, index: usize, input: usize, batch: RecordBatch) -> Result<()> {
        if index == self.chain.len() {
            let last = self.outputs.len().saturating_sub(1);
            for (i, output) in self.outputs.iter_mut().enumerate() {
                if i == last {
                    return output.send_batch(batch);
                }
                output.send_batch(batch.clone())?;
            }
            return Ok(());
        }
        let mut out = Output::default();
        self.chain[index].process_batch(input, batch, &mut out)?;
        self.forward_from(index, out)
    }

    /// Pushes a batch of source split `split` into operator `index` and on.
    fn push_split_batch(&mut self, index: usize, split: crate::SplitId, batch: RecordBatch) -> Result<()> {
        if index == self.chain.len() {
            return self.push_batch(index, 0, batch);
        }
        let mut out = Output::default();
        self.chain[index].process_split_batch(split, batch, &mut out)?;
        for item in out.take() {
            match item {
                Emitted::Batch(batch) => self.push_split_batch(index + 1, split, batch)?,
                Emitted::Watermark(wm) => self.push_watermark(index + 1, wm)?,
            }
        }
        self.forward_from(index, Output::default())
    }

    /// Tells the chain which splits the source reads now.
    fn set_splits(&mut self, splits: &[crate::SplitId]) -> Result<()> {
        for index in 0..self.chain.len() {
            let mut out = Output::default();
            self.chain[index].set_splits(splits, &mut out)?;
            self.forward(index + 1, out)?;
        }
        Ok(())
    }

    fn push_watermark(&mut self, index: usize, watermark: Timestamp) -> Result<()> {
        if watermark != MAX_WATERMARK {
            self.metrics.watermark.fetch_max(watermark, Ordering::Relaxed);
        }
        if index == self.chain.len() {
            if watermark != MAX_WATERMARK && self.idleness.activate(Instant::now()) {
                self.broadcast(Message::WatermarkStatus(WatermarkStatus::Active))?;
            }
            for output in &mut self.outputs {
                output.broadcast(Message::Watermark(watermark))?;
            }
            return Ok(());
        }
        let mut out = Output::default();
        self.chain[index].process_watermark(watermark, &mut out)?;
        self.forward_from(index, out)
    }

    /// Sends on what operator `index` emitted, then each part of the output
    /// it held back (see [`Operator::emit_more`]) as it is made.
    fn forward_from(&mut self, index: usize, out: Output) -> Result<()> {
        self.forward(index + 1, out)?;
        loop {
            let mut more = Output::default();
            let again = self.chain[index].emit_more(&mut more)?;
            self.forward(index + 1, more)?;
            if !again {
                return Ok(());
            }
        }
    }

    fn forward(&mut self, index: usize, mut out: Output) -> Result<()> {
        for item in out.take() {
            match item {
                Emitted::Batch(batch) => self.push_batch(index, 0, batch)?,
                Emitted::Watermark(wm) => self.push_watermark(index, wm)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_turns_idle_after_the_timeout_and_active_with_data_or_a_watermark() {
        let start = Instant::now();
        let mut idleness = Idleness::new(Some(Duration::from_millis(300)));
        idleness.activate(start);
        assert_eq!(
            idleness.check(start + Duration::from_millis(100)),
            (false, Some(Duration::from_millis(200)))
        );
        assert_eq!(idleness.check(start + Duration::from_millis(300)), (true, None));
        assert_eq!(
            idleness.check(start + Duration::from_millis(400)),
            (false, None),
            "idle already"
        );
        assert!(idleness.activate(start + Duration::from_millis(500)), "was idle");
        assert!(!idleness.activate(start + Duration::from_millis(600)));
        assert_eq!(
            idleness.check(start + Duration::from_millis(700)),
            (false, Some(Duration::from_millis(200)))
        );
    }

    #[test]
    fn without_a_timeout_an_output_never_turns_idle() {
        let mut idleness = Idleness::new(None);
        assert_eq!(
            idleness.check(Instant::now() + Duration::from_secs(3600)),
            (false, None)
        );
    }
}
