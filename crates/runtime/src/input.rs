//! The input gate: a task's input channels merged into one sequence of events.
//!
//! The gate owns what is per channel: the channel's watermark and whether it has
//! ended. The task's watermark is the minimum over channels that have not ended
//! (an ended channel counts as +infinity), and it only ever advances.
//!
//! ```text
//!  channel 0 ──► wm 12, batch, wm 15 ─┐
//!  channel 1 ──► wm 11, batch, eos ───┼─► Batch, Watermark(11), Batch, Watermark(12)... End
//!  channel 2 ──► ...                 ─┘
//! ```
//!
//! Barrier alignment (exactly-once) lives here too, and only here. When
//! barrier `n` arrives on a channel, the gate stops reading that channel (its
//! later data belongs after the checkpoint; the bounded channel holds it and
//! backpressures the sender) and keeps reading the others until each has
//! delivered barrier `n` or ended. Then it hands the task one
//! [`InputEvent::Barrier`] and reads every channel again.
//!
//! ```text
//!  channel 0 ──► a, b, |n|, c ...      (blocked after |n|: c waits)
//!  channel 1 ──► d, e, f, |n| ...      ─► a, d, b, e, f, Barrier(n), c, ...
//! ```
//!
//! In at-least-once mode ([`CheckpointingMode::AtLeastOnce`]) the gate does
//! not block: data behind an early barrier is handed out at once (so the
//! snapshot may include it, and a restore replays it: duplicates), and the
//! barrier is handed out once every open channel has delivered it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Select};

use arrow::record_batch::RecordBatch;

use crate::exchange::PriorityBarrier;
use crate::message::{CheckpointBarrier, Message, WatermarkStatus};
use crate::{Error, Result};
use weir_common::config::checkpoint::CheckpointingMode;
use weir_common::ids::{BarrierKind, CheckpointId};
use weir_common::time::{MAX_WATERMARK, MIN_WATERMARK, Timestamp};

/// What the gate hands the task next.
#[derive(Debug)]
pub enum InputEvent {
    /// A batch for logical input `input`.
    Batch {
        /// Which logical input (0 for single-input operators).
        input: usize,
        /// The rows.
        batch: arrow::record_batch::RecordBatch,
    },
    /// The task's watermark advanced.
    Watermark(Timestamp),
    /// Every open channel turned idle (the task's output is idle), or one
    /// turned active again.
    WatermarkStatus(WatermarkStatus),
    /// Every channel of logical input `n` has ended (others may go on).
    EndOfInput(usize),
    /// Every channel has ended.
    End,
    /// Nothing arrived within the timeout.
    Idle,
    /// Barrier `n` has arrived on every open channel: snapshot now.
    Barrier(CheckpointBarrier),
    /// A newer barrier overtook the alignment of checkpoint `n` (an upstream
    /// task dropped it): the task declines `n`.
    AbortCheckpoint(CheckpointId),
    /// Unaligned: every channel has delivered what precedes checkpoint
    /// `id`'s barrier; `records` arrived after the snapshot but belong before
    /// it (by logical input), and are saved as the task's channel state.
    ChannelState {
        /// The checkpoint.
        id: CheckpointId,
        /// The in-flight records.
        records: Vec<(usize, arrow::record_batch::RecordBatch)>,
    },
}

/// One input channel of a task.
pub struct InputChannel {
    /// The receiving end.
    pub receiver: Receiver<Message>,
    /// The logical input it feeds.
    pub input: usize,
    /// Unaligned checkpoints: barriers that overtake the channel's data.
    lane: Option<Receiver<PriorityBarrier>>,
    watermark: Timestamp,
    ended: bool,
    /// Idle: its watermark is left out of the minimum.
    idle: bool,
    /// Active again but behind the task's watermark: left out until it
    /// catches up (as Flink's watermark valve does), so that it holds back
    /// nothing.
    catching_up: bool,
    /// Barrier of the current alignment received.
    barrier_received: bool,
    /// Not read until the alignment completes (exactly-once only).
    blocked: bool,
    /// Messages received so far (the sender numbers them the same way).
    received: u64,
    /// Unaligned: the current checkpoint's barrier follows this many messages.
    barrier_after: Option<u64>,
    /// Unaligned, while aligning: a message from after the barrier, held
    /// until the snapshot.
    held: Option<Message>,
    /// Unaligned: messages taken off the channel ahead of processing (with
    /// their numbers), because they precede a barrier and belong in the
    /// channel state at once; handed out before the channel is read again.
    buffer: VecDeque<(u64, Message)>,
}

impl InputChannel {
    /// A channel feeding logical input `input`.
    pub fn new(receiver: Receiver<Message>, input: usize) -> Self {
        InputChannel {
            receiver,
            input,
            lane: None,
            watermark: MIN_WATERMARK,
            ended: false,
            idle: false,
            catching_up: false,
            barrier_received: false,
            blocked: false,
            received: 0,
            barrier_after: None,
            held: None,
            buffer: VecDeque::new(),
        }
    }

    /// With a barrier lane beside the channel (unaligned checkpoints).
    pub fn with_priority_lane(mut self, lane: Receiver<PriorityBarrier>) -> Self {
        self.lane = Some(lane);
        self
    }

    /// Unaligned: every message before the current barrier has been received.
    fn caught_up(&self) -> bool {
        self.ended || self.barrier_after.is_some_and(|after| self.received >= after)
    }
}

/// The error a task gets when an upstream task stopped without finishing; the
/// upstream task's own error is the root cause.
pub fn upstream_gone() -> Error {
    Error::Execution("an upstream task stopped".into())
}

/// Message `m` received on channel `i`; a broken channel's notice fails
/// the task with its cause.
fn data(i: usize, m: Message) -> Result<Received> {
    match m {
        Message::Broken(cause) => Err(Error::Execution(cause)),
        m => Ok(Received::Data(i, m)),
    }
}

/// An unaligned checkpoint in progress at this task.
struct UnalignedCheckpoint {
    barrier: CheckpointBarrier,
    started: Instant,
    /// Align until then; `None`: never switch (savepoints are aligned).
    deadline: Option<Instant>,
    /// The snapshot was taken: records from before a channel's barrier that
    /// arrive now are not in it, and are saved as channel state.
    snapshot_taken: bool,
    recorded: Vec<(usize, RecordBatch)>,
}

/// Merges the input channels of one subtask.
pub struct InputGate {
    channels: Vec<InputChannel>,
    watermark: Timestamp,
    open: usize,
    /// The barrier being aligned.
    aligning: Option<CheckpointBarrier>,
    /// Events decided but not yet handed out.
    ready: VecDeque<InputEvent>,
    mode: CheckpointingMode,
    /// When the first barrier of the current alignment arrived.
    alignment_started: Option<Instant>,
    /// From the first to the last barrier of the last completed alignment.
    last_alignment: Duration,
    /// Barriers come on lanes of their own (unaligned checkpoints).
    lanes: bool,
    /// Unaligned: align this long before switching.
    aligned_timeout: Duration,
    unaligned: Option<UnalignedCheckpoint>,
    /// A received message is not classified yet: a checkpoint cannot be
    /// completed before it is (it may belong in the channel state).
    in_hand: bool,
    /// Where in the channel state the message in hand goes if it is
    /// recorded: before the later messages of its channel that a snapshot
    /// took off the channel while it was in hand (a restore replays the
    /// records in their order).
    in_hand_at: Option<usize>,
    /// The channel of the message in hand.
    in_hand_of: Option<usize>,
    /// Every open channel is idle, and the task said so downstream.
    idle: bool,
}

impl InputGate {
    /// A gate over `channels` aligning barriers exactly once; with no
    /// channels, it ends at once.
    pub fn new(channels: Vec<InputChannel>) -> Self {
        Self::with_mode(channels, CheckpointingMode::ExactlyOnce)
    }

    /// A gate over `channels` handling barriers as `mode` says.
    pub fn with_mode(channels: Vec<InputChannel>, mode: CheckpointingMode) -> Self {
        let open = channels.len();
        let lanes = channels.iter().any(|c| c.lane.is_some());
        InputGate {
            channels,
            watermark: MIN_WATERMARK,
            open,
            aligning: None,
            ready: VecDeque::new(),
            mode,
            alignment_started: None,
            last_alignment: Duration::ZERO,
            lanes,
            aligned_timeout: Duration::ZERO,
            unaligned: None,
            in_hand: false,
            in_hand_at: None,
            in_hand_of: None,
            idle: false,
        }
    }

    /// Unaligned checkpoints (the channels have barrier lanes): align for at
    /// most `aligned_timeout`, then take the snapshot and save the records
    /// still before their barriers as channel state.
    pub fn with_aligned_timeout(mut self, aligned_timeout: Duration) -> Self {
        self.aligned_timeout = aligned_timeout;
        self
    }

    /// How long the last barrier took to arrive on every channel after it
    /// arrived on the first (Flink's alignment duration); unaligned, until
    /// the snapshot was taken.
    pub fn last_alignment(&self) -> Duration {
        self.last_alignment
    }

    /// The task's current watermark.
    pub fn watermark(&self) -> Timestamp {
        self.watermark
    }

    /// Whether barriers come on lanes of their own (unaligned checkpoints).
    pub fn has_lanes(&self) -> bool {
        self.lanes
    }

    /// The barrier lanes, for a task waiting on its outputs to wake up when
    /// a barrier arrives.
    pub fn lanes(&self) -> impl Iterator<Item = &Receiver<PriorityBarrier>> {
        self.channels.iter().filter_map(|c| c.lane.as_ref())
    }

    /// Takes what arrived on the barrier lanes without reading data; returns
    /// the events that must be handled now (a snapshot to take, a checkpoint
    /// to abort), leaving data events queued.
    pub fn poll_barriers(&mut self) -> Vec<InputEvent> {
        if !self.lanes {
            return Vec::new();
        }
        self.poll_lanes();
        self.check_deadline();
        let mut urgent = Vec::new();
        // Only events before the first data event may be handed out early.
        while matches!(
            self.ready.front(),
            Some(InputEvent::Barrier(_) | InputEvent::AbortCheckpoint(_) | InputEvent::ChannelState { .. })
        ) {
            urgent.extend(self.ready.pop_front());
        }
        urgent
    }

    /// Blocks for the next event.
    pub fn next_event(&mut self) -> Result<InputEvent> {
        self.next_event_timeout(None)
    }

    /// Waits at most `timeout` (or forever) for the next event.
    pub fn next_event_timeout(&mut self, timeout: Option<Duration>) -> Result<InputEvent> {
        loop {
            if self.lanes {
                self.poll_lanes();
                self.check_deadline();
            }
            if let Some(event) = self.ready.pop_front() {
                return Ok(event);
            }
            if self.open == 0 {
                return Ok(InputEvent::End);
            }
            // Wake up for an alignment deadline too.
            let deadline = self
                .unaligned
                .as_ref()
                .filter(|u| !u.snapshot_taken)
                .and_then(|u| u.deadline);
            let wait = match (timeout, deadline) {
                (t, None) => t,
                (None, Some(d)) => Some(d.saturating_duration_since(Instant::now())),
                (Some(t), Some(d)) => Some(t.min(d.saturating_duration_since(Instant::now()))),
            };
            match self.receive(wait)? {
                Received::Data(index, message) => {
                    if self.lanes {
                        self.on_received(index, message);
                    } else {
                        self.deliver(index, message);
                    }
                }
                Received::Buffered(index, message) => self.deliver(index, message),
                Received::Lane => {}
                Received::Timeout => {
                    self.check_deadline();
                    if self.ready.is_empty() && timeout.is_some() {
                        return Ok(InputEvent::Idle);
                    }
                }
            }
        }
    }

    /// Handles a message as its channel's next: batches, watermarks,
    /// end-of-stream and (aligned) barriers.
    fn deliver(&mut self, index: usize, message: Message) {
        match message {
            Message::Batch(batch) => {
                if self.channels[index].idle {
                    self.set_status(index, WatermarkStatus::Active);
                }
                self.ready.push_back(InputEvent::Batch {
                    input: self.channels[index].input,
                    batch,
                })
            }
            Message::Watermark(wm) => {
                let channel = &mut self.channels[index];
                channel.watermark = channel.watermark.max(wm);
                if let Some(wm) = self.advance() {
                    self.ready.push_back(InputEvent::Watermark(wm));
                }
            }
            Message::WatermarkStatus(status) => self.set_status(index, status),
            Message::EndOfStream => {
                let channel = &mut self.channels[index];
                channel.ended = true;
                channel.barrier_received = false;
                channel.blocked = false;
                channel.watermark = MAX_WATERMARK;
                let input = channel.input;
                self.open -= 1;
                if self.channels.iter().filter(|c| c.input == input).all(|c| c.ended) {
                    self.ready.push_back(InputEvent::EndOfInput(input));
                }
                if self.open > 0
                    && let Some(wm) = self.advance()
                {
                    self.ready.push_back(InputEvent::Watermark(wm));
                }
                // An ended channel counts as aligned.
                self.complete_alignment_if_done();
                self.complete_unaligned_if_done();
            }
            Message::Barrier(barrier) => self.on_barrier(index, barrier),
            // Never delivered: receiving it failed the task ([`data`]).
            Message::Broken(_) => {}
        }
    }

    /// Takes the barriers that arrived on the lanes.
    fn poll_lanes(&mut self) {
        for index in 0..self.channels.len() {
            while let Some(Ok(barrier)) = self.channels[index].lane.as_ref().map(|l| l.try_recv()) {
                self.on_priority_barrier(index, barrier);
            }
        }
    }

    /// Unaligned: barrier `priority` overtook the data of channel `index`.
    fn on_priority_barrier(&mut self, index: usize, priority: PriorityBarrier) {
        let barrier = priority.barrier;
        match &self.unaligned {
            Some(current) if barrier.id < current.barrier.id => return, // stale: aborted
            Some(current) if barrier.id > current.barrier.id => {
                // Channel `index` never sent the current barrier: that checkpoint is dead.
                let dead = current.barrier.id;
                self.ready.push_back(InputEvent::AbortCheckpoint(dead));
                self.unaligned = None;
                self.in_hand_at = None;
                for i in 0..self.channels.len() {
                    self.channels[i].barrier_after = None;
                    self.channels[i].blocked = false;
                    if let Some(held) = self.channels[i].held.take() {
                        self.deliver(i, held);
                    }
                }
            }
            _ => {}
        }
        if self.unaligned.is_none() {
            let now = Instant::now();
            // Savepoints are always aligned, as in Flink.
            let deadline = match barrier.kind {
                BarrierKind::Savepoint => None,
                BarrierKind::Checkpoint => Some(now + self.aligned_timeout),
            };
            self.unaligned = Some(UnalignedCheckpoint {
                barrier,
                started: now,
                deadline,
                snapshot_taken: false,
                recorded: Vec::new(),
            });
        }
        let channel = &mut self.channels[index];
        channel.barrier_after = Some(priority.sequence);
        let snapshot_taken = self.unaligned.as_ref().is_some_and(|u| u.snapshot_taken);
        if channel.caught_up() && !snapshot_taken {
            channel.blocked = true;
        }
        if snapshot_taken {
            self.take_in_flight(index);
        }
        self.check_deadline();
        self.complete_unaligned_if_done();
    }

    /// Unaligned: message `message` came off channel `index`. It is
    /// numbered before the lanes are read (a snapshot may take later
    /// messages off the channel meanwhile), then handled knowing whether
    /// its barrier overtook it.
    fn on_received(&mut self, index: usize, message: Message) {
        self.channels[index].received += 1;
        let number = self.channels[index].received;
        self.in_hand = true;
        (self.in_hand_at, self.in_hand_of) = (None, Some(index));
        self.poll_lanes();
        self.in_hand = false;
        self.in_hand_of = None;
        self.on_sequenced(index, number, message);
    }

    /// Unaligned, after the snapshot: takes the messages that precede
    /// channel `index`'s barrier off the channel now (they are already in it),
    /// recording their rows as channel state; they are processed later. So
    /// the checkpoint does not wait for the backpressured data to be processed.
    fn take_in_flight(&mut self, index: usize) {
        let Some(checkpoint) = &mut self.unaligned else {
            return;
        };
        let channel = &mut self.channels[index];
        let Some(after) = channel.barrier_after else {
            return;
        };
        if self.in_hand_of == Some(index) && self.in_hand_at.is_none() && channel.received < after {
            // The message in hand precedes those taken now.
            self.in_hand_at = Some(checkpoint.recorded.len());
        }
        while channel.received < after && !channel.ended {
            let Ok(message) = channel.receiver.try_recv() else {
                break;
            };
            channel.received += 1;
            if let Message::Batch(batch) = &message {
                checkpoint.recorded.push((channel.input, batch.clone()));
            }
            channel.buffer.push_back((channel.received, message));
        }
    }

    /// Unaligned: message `message`, the channel's `number`-th, was received
    /// on channel `index`, its barrier (if known) already taken from the lane.
    fn on_sequenced(&mut self, index: usize, number: u64, message: Message) {
        let at = self.in_hand_at.take();
        let Some(checkpoint) = &mut self.unaligned else {
            return self.deliver(index, message);
        };
        let channel = &mut self.channels[index];
        let before_barrier = channel.barrier_after.is_none_or(|after| number <= after);
        if checkpoint.snapshot_taken {
            if before_barrier && let Message::Batch(batch) = &message {
                let record = (channel.input, batch.clone());
                match at {
                    Some(at) => checkpoint.recorded.insert(at, record),
                    None => checkpoint.recorded.push(record),
                }
            }
            self.deliver(index, message);
            self.complete_unaligned_if_done();
            return;
        }
        // Aligning: what follows the barrier waits for the snapshot.
        if !before_barrier {
            channel.held = Some(message);
            channel.blocked = true;
        } else {
            if channel.caught_up() {
                channel.blocked = true;
            }
            self.deliver(index, message);
        }
        self.complete_unaligned_if_done();
    }

    /// Unaligned, aligning: past the deadline, take the snapshot now.
    fn check_deadline(&mut self) {
        let due = self
            .unaligned
            .as_ref()
            .is_some_and(|u| !u.snapshot_taken && u.deadline.is_some_and(|d| Instant::now() >= d));
        if due {
            self.take_unaligned_snapshot(true);
            self.complete_unaligned_if_done();
        }
    }

    /// Hands out the barrier (snapshot now), reads every channel again, and
    /// releases the held messages (after the barrier: not recorded). With
    /// `overtake` (unaligned), the barrier goes ahead of the events not yet
    /// handed out and of the messages taken off the channels, whose rows are
    /// recorded as channel state; then what precedes each known barrier is
    /// taken off its channel. Without (the alignment completed), nothing is
    /// in flight.
    fn take_unaligned_snapshot(&mut self, overtake: bool) {
        let Some(checkpoint) = &mut self.unaligned else {
            return;
        };
        checkpoint.snapshot_taken = true;
        self.last_alignment = checkpoint.started.elapsed();
        if overtake {
            for event in &self.ready {
                if let InputEvent::Batch { input, batch } = event {
                    checkpoint.recorded.push((*input, batch.clone()));
                }
            }
            for channel in &self.channels {
                for (number, message) in &channel.buffer {
                    let before = channel.barrier_after.is_none_or(|after| *number <= after);
                    if let (true, Message::Batch(batch)) = (before, message) {
                        checkpoint.recorded.push((channel.input, batch.clone()));
                    }
                }
            }
            self.ready.push_front(InputEvent::Barrier(checkpoint.barrier));
        } else {
            self.ready.push_back(InputEvent::Barrier(checkpoint.barrier));
        }
        for i in 0..self.channels.len() {
            self.channels[i].blocked = false;
            if let Some(held) = self.channels[i].held.take() {
                self.deliver(i, held);
            }
        }
        if overtake {
            for i in 0..self.channels.len() {
                self.take_in_flight(i);
            }
        }
    }

    /// Unaligned: once every channel has delivered what precedes its barrier,
    /// the snapshot is taken (if aligning) and the channel state is complete.
    fn complete_unaligned_if_done(&mut self) {
        if self.in_hand {
            return;
        }
        let Some(checkpoint) = &self.unaligned else { return };
        let all = self.channels.iter().all(|c| c.caught_up());
        if !checkpoint.snapshot_taken && all {
            self.take_unaligned_snapshot(false);
        }
        if !all {
            return;
        }
        let Some(checkpoint) = self.unaligned.take() else {
            return;
        };
        for channel in &mut self.channels {
            channel.barrier_after = None;
            channel.blocked = false;
        }
        self.ready.push_back(InputEvent::ChannelState {
            id: checkpoint.barrier.id,
            records: checkpoint.recorded,
        });
    }

    fn on_barrier(&mut self, index: usize, barrier: CheckpointBarrier) {
        match self.aligning {
            Some(current) if barrier.id < current.id => return, // stale: already aborted
            Some(current) if barrier.id > current.id => {
                // Channel `index` never sent barrier `current`: that checkpoint is dead.
                self.ready.push_back(InputEvent::AbortCheckpoint(current.id));
                for channel in &mut self.channels {
                    channel.barrier_received = false;
                    channel.blocked = false;
                }
                self.aligning = Some(barrier);
                self.alignment_started = Some(Instant::now());
            }
            Some(_) => {}
            None => {
                self.aligning = Some(barrier);
                self.alignment_started = Some(Instant::now());
            }
        }
        let channel = &mut self.channels[index];
        channel.barrier_received = true;
        channel.blocked = self.mode == CheckpointingMode::ExactlyOnce;
        self.complete_alignment_if_done();
    }

    /// Hands out the barrier once every open channel has delivered it.
    fn complete_alignment_if_done(&mut self) {
        let Some(barrier) = self.aligning else { return };
        if self.channels.iter().all(|c| c.ended || c.barrier_received) {
            for channel in &mut self.channels {
                channel.barrier_received = false;
                channel.blocked = false;
            }
            self.aligning = None;
            self.last_alignment = self
                .alignment_started
                .take()
                .map_or(Duration::ZERO, |s| s.elapsed());
            self.ready.push_back(InputEvent::Barrier(barrier));
        }
    }

    /// Channel `index` turned idle or active: the watermark may advance
    /// without it, and the task's own status may change.
    fn set_status(&mut self, index: usize, status: WatermarkStatus) {
        let task_watermark = self.watermark;
        let channel = &mut self.channels[index];
        channel.idle = status == WatermarkStatus::Idle;
        channel.catching_up = !channel.idle && channel.watermark < task_watermark;
        if let Some(wm) = self.advance() {
            self.ready.push_back(InputEvent::Watermark(wm));
        }
        let all_idle = self.channels.iter().filter(|c| !c.ended).all(|c| c.idle);
        if all_idle != self.idle && self.open > 0 {
            self.idle = all_idle;
            self.ready.push_back(InputEvent::WatermarkStatus(if all_idle {
                WatermarkStatus::Idle
            } else {
                WatermarkStatus::Active
            }));
        }
    }

    /// Recomputes the minimum watermark over the channels that count (open,
    /// active, caught up); returns it when it advanced.
    fn advance(&mut self) -> Option<Timestamp> {
        let current = self.watermark;
        for channel in &mut self.channels {
            channel.catching_up &= channel.watermark < current;
        }
        let counted = self
            .channels
            .iter()
            .filter(|c| !c.ended && !c.idle && !c.catching_up);
        let min = match counted.map(|c| c.watermark).min() {
            Some(min) => min,
            // Every open channel idle: the watermark stays where it is.
            None if self.channels.iter().any(|c| !c.ended) => return None,
            None => MAX_WATERMARK,
        };
        (min > self.watermark).then(|| {
            self.watermark = min;
            min
        })
    }

    /// Receives from any open channel, or wakes when a barrier lane has
    /// something, or when the timeout passes.
    fn receive(&mut self, timeout: Option<Duration>) -> Result<Received> {
        let readable = |c: &InputChannel| !c.ended && !c.blocked;
        if let Some(i) = (0..self.channels.len())
            .find(|i| readable(&self.channels[*i]) && !self.channels[*i].buffer.is_empty())
        {
            let (_, message) = self.channels[i].buffer.pop_front().expect("not empty");
            return Ok(Received::Buffered(i, message));
        }
        let open: Vec<usize> = (0..self.channels.len())
            .filter(|i| readable(&self.channels[*i]))
            .collect();
        let lanes: Vec<usize> = (0..self.channels.len())
            .filter(|i| !self.channels[*i].ended && self.channels[*i].lane.is_some())
            .collect();
        if open.len() == 1 && lanes.is_empty() {
            let i = open[0];
            let receiver = &self.channels[i].receiver;
            return match timeout {
                None => receiver
                    .recv()
                    .map_err(|_| upstream_gone())
                    .and_then(|m| data(i, m)),
                Some(t) => match receiver.recv_timeout(t) {
                    Ok(m) => data(i, m),
                    Err(RecvTimeoutError::Timeout) => Ok(Received::Timeout),
                    Err(RecvTimeoutError::Disconnected) => Err(upstream_gone()),
                },
            };
        }
        let mut select = Select::new();
        for i in &open {
            select.recv(&self.channels[*i].receiver);
        }
        for i in &lanes {
            select.recv(self.channels[*i].lane.as_ref().expect("filtered"));
        }
        let index = match timeout {
            None => select.ready(),
            Some(t) => match select.ready_timeout(t) {
                Ok(index) => index,
                Err(_) => return Ok(Received::Timeout),
            },
        };
        if index >= open.len() {
            return Ok(Received::Lane);
        }
        let i = open[index];
        match self.channels[i].receiver.try_recv() {
            Ok(m) => data(i, m),
            Err(crossbeam_channel::TryRecvError::Empty) => Ok(Received::Lane),
            Err(crossbeam_channel::TryRecvError::Disconnected) => Err(upstream_gone()),
        }
    }
}

/// What [`InputGate::receive`] got.
enum Received {
    /// A message from channel `.0`.
    Data(usize, Message),
    /// A message of channel `.0` taken off it earlier (already numbered and recorded).
    Buffered(usize, Message),
    /// A barrier lane has something (or a wake-up without data).
    Lane,
    /// Nothing within the timeout.
    Timeout,
}

#[cfg(test)]
mod tests {
    use crossbeam_channel::bounded;

    use super::*;

    fn events(gate: &mut InputGate) -> Vec<String> {
        let mut out = vec![];
        loop {
            match gate.next_event().unwrap() {
                InputEvent::Batch { .. } => out.push("batch".to_string()),
                InputEvent::Watermark(wm) => out.push(format!("wm {wm}")),
                InputEvent::WatermarkStatus(status) => out.push(format!("{status:?}").to_lowercase()),
                InputEvent::End => {
                    out.push("end".to_string());
                    return out;
                }
                _ => {}
            }
        }
    }

    #[test]
    fn watermark_is_the_minimum_over_channels_and_ended_channels_count_as_infinite() {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        tx0.send(Message::Watermark(10)).unwrap();
        tx1.send(Message::Watermark(5)).unwrap();
        tx1.send(Message::Watermark(20)).unwrap();
        tx1.send(Message::EndOfStream).unwrap();
        tx0.send(Message::Watermark(30)).unwrap();
        tx0.send(Message::EndOfStream).unwrap();
        // Receive channel 0 fully first, then channel 1, by closing the order: the gate
        // may interleave, but the watermark it reports must be monotone and end at 30.
        let mut gate = InputGate::new(vec![InputChannel::new(rx0, 0), InputChannel::new(rx1, 0)]);
        let out = events(&mut gate);
        let wms: Vec<i64> = out
            .iter()
            .filter_map(|e| e.strip_prefix("wm ").map(|w| w.parse().unwrap()))
            .collect();
        assert!(wms.windows(2).all(|w| w[0] < w[1]), "{out:?}");
        assert_eq!(*wms.last().unwrap(), 30);
        assert!(wms.iter().all(|w| *w <= 30));
        assert_eq!(out.last().unwrap(), "end");
    }

    #[test]
    fn an_idle_channel_holds_back_nothing_until_it_is_active_and_caught_up() {
        let (tx0, rx0) = bounded(32);
        let (tx1, rx1) = bounded(32);
        let mut gate = InputGate::new(vec![InputChannel::new(rx0, 0), InputChannel::new(rx1, 0)]);
        let mut step = |sends: Vec<(usize, Message)>| {
            for (channel, message) in sends {
                [&tx0, &tx1][channel].send(message).unwrap();
            }
            let mut out = vec![];
            while let Ok(event) = gate.next_event_timeout(Some(std::time::Duration::from_millis(20))) {
                match event {
                    InputEvent::Idle => break,
                    InputEvent::Watermark(wm) => out.push(format!("wm {wm}")),
                    InputEvent::WatermarkStatus(status) => out.push(format!("{status:?}").to_lowercase()),
                    InputEvent::Batch { .. } => out.push("batch".into()),
                    _ => {}
                }
            }
            out
        };
        assert_eq!(
            step(vec![(0, Message::Watermark(10)), (1, Message::Watermark(5))]),
            ["wm 5"]
        );
        // Channel 1 turns idle: channel 0 alone decides.
        assert_eq!(
            step(vec![(1, Message::WatermarkStatus(WatermarkStatus::Idle))]),
            ["wm 10"]
        );
        assert_eq!(step(vec![(0, Message::Watermark(20))]), ["wm 20"]);
        // Both idle: the task is idle, and its watermark stays.
        assert_eq!(
            step(vec![(0, Message::WatermarkStatus(WatermarkStatus::Idle))]),
            ["idle"]
        );
        // Channel 1 comes back behind (at 7): active, but it holds back nothing...
        assert_eq!(
            step(vec![
                (1, Message::WatermarkStatus(WatermarkStatus::Active)),
                (1, Message::Watermark(7))
            ]),
            ["active"]
        );
        assert_eq!(step(vec![(1, Message::Watermark(30))]), ["wm 30"]);
        // ...and once caught up it counts: channel 0 (idle) no longer does.
        assert_eq!(step(vec![(1, Message::Watermark(25))]), Vec::<String>::new());
        assert_eq!(step(vec![(1, Message::Watermark(40))]), ["wm 40"]);
        // Rows on an idle channel make it active.
        assert_eq!(step(vec![(0, batch(&[1]))]), ["batch"]);
        assert_eq!(step(vec![(0, Message::Watermark(50))]), Vec::<String>::new());
        assert_eq!(step(vec![(1, Message::Watermark(60))]), ["wm 50"]);
    }

    fn batch(values: &[i64]) -> Message {
        use std::sync::Arc;
        let array = arrow::array::Int64Array::from(values.to_vec());
        Message::Batch(
            arrow::record_batch::RecordBatch::try_from_iter([(
                "v",
                Arc::new(array) as arrow::array::ArrayRef,
            )])
            .unwrap(),
        )
    }

    fn barrier(id: CheckpointId) -> Message {
        Message::Barrier(CheckpointBarrier {
            id,
            kind: weir_common::ids::BarrierKind::Checkpoint,
            timestamp: 0,
        })
    }

    /// Sums the rows the gate hands out; returns the sum at each barrier and at the end.
    fn sums_at_barriers(gate: &mut InputGate) -> (Vec<i64>, i64) {
        use arrow::array::AsArray;
        let (mut sum, mut snapshots) = (0, vec![]);
        loop {
            match gate.next_event().unwrap() {
                InputEvent::Batch { batch, .. } => {
                    sum += batch
                        .column(0)
                        .as_primitive::<arrow::datatypes::Int64Type>()
                        .values()
                        .iter()
                        .sum::<i64>()
                }
                InputEvent::Barrier(_) => snapshots.push(sum),
                InputEvent::End => return (snapshots, sum),
                _ => {}
            }
        }
    }

    #[test]
    fn data_behind_an_early_barrier_waits_and_pre_barrier_data_of_other_channels_is_in_the_snapshot() {
        // The seed's example: source 1 sends 2, its barrier, then 4; source 2
        // sends 1 and 3 before its barrier. The snapshot holds 2 + 1 + 3, not 4,
        // however the gate interleaves the channels.
        for _ in 0..50 {
            let (tx0, rx0) = bounded(16);
            let (tx1, rx1) = bounded(16);
            for m in [batch(&[2]), barrier(1), batch(&[4]), Message::EndOfStream] {
                tx0.send(m).unwrap();
            }
            for m in [batch(&[1]), batch(&[3]), barrier(1), Message::EndOfStream] {
                tx1.send(m).unwrap();
            }
            let mut gate = InputGate::new(vec![InputChannel::new(rx0, 0), InputChannel::new(rx1, 0)]);
            assert_eq!(sums_at_barriers(&mut gate), (vec![6], 10));
        }
    }

    fn sum_of(batch: &RecordBatch) -> i64 {
        use arrow::array::AsArray;
        batch
            .column(0)
            .as_primitive::<arrow::datatypes::Int64Type>()
            .values()
            .iter()
            .sum()
    }

    /// The seed's sum_even example through a gate in `mode`. Source 1 emits
    /// 2, then checkpoint 1's barrier (its position: 1 record), then 4;
    /// source 2 emits 1 and 3, and its barrier (position: 2 records) only
    /// after 4 is within the gate's reach. The sum task snapshots at the
    /// barrier; then the job crashes, restarts from the snapshot, and the
    /// sources replay from their positions. Returns (snapshot, final sum).
    fn sum_even(mode: CheckpointingMode) -> (i64, i64) {
        let source_1 = [2, 4];
        let source_2 = [1, 3];
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        for m in [batch(&[source_1[0]]), barrier(1), batch(&[source_1[1]])] {
            tx0.send(m).unwrap();
        }
        for value in source_2 {
            tx1.send(batch(&[value])).unwrap();
        }
        let mut gate = InputGate::with_mode(vec![InputChannel::new(rx0, 0), InputChannel::new(rx1, 0)], mode);
        let mut sum = 0;
        // Everything the gate hands out before source 2's barrier is sent.
        while let InputEvent::Batch { batch, .. } =
            gate.next_event_timeout(Some(Duration::from_millis(30))).unwrap()
        {
            sum += sum_of(&batch);
        }
        tx1.send(barrier(1)).unwrap();
        let snapshot = loop {
            match gate.next_event().unwrap() {
                InputEvent::Batch { batch, .. } => sum += sum_of(&batch),
                InputEvent::Barrier(_) => break sum,
                other => panic!("unexpected {other:?}"),
            }
        };
        // Crash: everything after the snapshot is lost. Restore the sum and
        // replay each source from its checkpointed position.
        let (position_1, position_2) = (1, 2);
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        for value in &source_1[position_1..] {
            tx0.send(batch(&[*value])).unwrap();
        }
        for value in &source_2[position_2..] {
            tx1.send(batch(&[*value])).unwrap();
        }
        tx0.send(Message::EndOfStream).unwrap();
        tx1.send(Message::EndOfStream).unwrap();
        let mut gate = InputGate::with_mode(vec![InputChannel::new(rx0, 0), InputChannel::new(rx1, 0)], mode);
        let mut sum = snapshot;
        loop {
            match gate.next_event().unwrap() {
                InputEvent::Batch { batch, .. } => sum += sum_of(&batch),
                InputEvent::End => return (snapshot, sum),
                _ => {}
            }
        }
    }

    #[test]
    fn at_least_once_snapshots_data_behind_an_early_barrier_and_a_restore_counts_it_twice() {
        // 4 is in the snapshot (2+1+3+4) and replayed by source 1: 4 twice.
        assert_eq!(sum_even(CheckpointingMode::AtLeastOnce), (10, 14));
    }

    #[test]
    fn exactly_once_keeps_data_behind_an_early_barrier_out_of_the_snapshot_and_counts_it_once() {
        assert_eq!(sum_even(CheckpointingMode::ExactlyOnce), (6, 10));
    }

    #[test]
    fn an_ended_channel_counts_as_aligned() {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        for m in [batch(&[5]), barrier(1), batch(&[7]), Message::EndOfStream] {
            tx0.send(m).unwrap();
        }
        for m in [batch(&[1]), Message::EndOfStream] {
            tx1.send(m).unwrap();
        }
        let mut gate = InputGate::new(vec![InputChannel::new(rx0, 0), InputChannel::new(rx1, 0)]);
        assert_eq!(sums_at_barriers(&mut gate), (vec![6], 13));
    }

    #[test]
    fn a_newer_barrier_aborts_the_alignment_it_overtakes() {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        tx0.send(barrier(1)).unwrap();
        let mut gate = InputGate::new(vec![InputChannel::new(rx0, 0), InputChannel::new(rx1, 0)]);
        // Channel 0's barrier 1 is read and blocks it; channel 1 has nothing yet.
        assert!(matches!(
            gate.next_event_timeout(Some(Duration::from_millis(20))).unwrap(),
            InputEvent::Idle
        ));
        // Channel 1 skips checkpoint 1 (its upstream dropped it) and sends barrier 2.
        for m in [barrier(2), Message::EndOfStream] {
            tx1.send(m).unwrap();
        }
        for m in [barrier(2), Message::EndOfStream] {
            tx0.send(m).unwrap();
        }
        let mut events = vec![];
        loop {
            match gate.next_event().unwrap() {
                InputEvent::AbortCheckpoint(id) => events.push(format!("abort {id}")),
                InputEvent::Barrier(b) => events.push(format!("barrier {}", b.id)),
                InputEvent::End => break,
                _ => {}
            }
        }
        assert_eq!(events, vec!["abort 1", "barrier 2"]);
    }

    #[test]
    fn a_vanished_upstream_is_an_error_not_a_hang() {
        let (tx, rx) = bounded::<Message>(1);
        drop(tx);
        let mut gate = InputGate::new(vec![InputChannel::new(rx, 0)]);
        assert!(gate.next_event().is_err());
    }

    #[test]
    fn a_broken_channel_fails_the_task_with_its_cause_whichever_way_it_is_received() {
        for channels in [1, 2] {
            let (tx, rx) = bounded::<Message>(4);
            let (_other, rx1) = bounded::<Message>(4);
            tx.send(Message::Watermark(1)).unwrap();
            tx.send(Message::Broken("lost the connection to the node at h:1".into()))
                .unwrap();
            let mut inputs = vec![InputChannel::new(rx, 0)];
            if channels == 2 {
                inputs.push(InputChannel::new(rx1, 0));
            }
            let mut gate = InputGate::new(inputs);
            let error = loop {
                match gate.next_event_timeout(Some(Duration::from_secs(5))) {
                    Ok(_) => {}
                    Err(e) => break e,
                }
            };
            assert_eq!(
                error.to_string(),
                "Execution error: lost the connection to the node at h:1"
            );
        }
    }

    fn lane_barrier(id: CheckpointId, kind: BarrierKind, sequence: u64) -> PriorityBarrier {
        PriorityBarrier {
            barrier: CheckpointBarrier {
                id,
                kind,
                timestamp: 0,
            },
            sequence,
        }
    }

    /// Two channels with barrier lanes: channel 0 holds 2, 4 (its barrier
    /// after 1 message), channel 1 holds 1, 3, 5 (its barrier after 2). The
    /// events as text, and the records saved as channel state.
    fn unaligned_run(kind: BarrierKind, aligned_timeout: Duration) -> (Vec<String>, Vec<i64>) {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (lane0_tx, lane0) = crossbeam_channel::unbounded();
        let (lane1_tx, lane1) = crossbeam_channel::unbounded();
        for m in [batch(&[2]), batch(&[4]), Message::EndOfStream] {
            tx0.send(m).unwrap();
        }
        for m in [batch(&[1]), batch(&[3]), batch(&[5]), Message::EndOfStream] {
            tx1.send(m).unwrap();
        }
        // The barriers overtake everything queued.
        lane0_tx.send(lane_barrier(1, kind, 1)).unwrap();
        lane1_tx.send(lane_barrier(1, kind, 2)).unwrap();
        let mut gate = InputGate::with_mode(
            vec![
                InputChannel::new(rx0, 0).with_priority_lane(lane0),
                InputChannel::new(rx1, 0).with_priority_lane(lane1),
            ],
            CheckpointingMode::ExactlyOnce,
        )
        .with_aligned_timeout(aligned_timeout);
        let (mut events, mut recorded) = (vec![], vec![]);
        loop {
            match gate.next_event().unwrap() {
                InputEvent::Batch { batch, .. } => events.push(format!("{}", sum_of(&batch))),
                InputEvent::Barrier(b) => events.push(format!("barrier {}", b.id)),
                InputEvent::ChannelState { id, records } => {
                    events.push(format!("state {id}"));
                    recorded.extend(records.iter().map(|(_, b)| sum_of(b)));
                }
                InputEvent::End => return (events, recorded),
                _ => {}
            }
        }
    }

    #[test]
    fn unaligned_snapshots_at_the_first_barrier_and_saves_the_records_it_overtook() {
        let (events, mut recorded) = unaligned_run(BarrierKind::Checkpoint, Duration::ZERO);
        // The snapshot comes before any record: 2 (channel 0) and 1, 3
        // (channel 1) precede their barriers, so they are the channel state.
        assert_eq!(events[0], "barrier 1", "{events:?}");
        recorded.sort();
        assert_eq!(recorded, vec![1, 2, 3]);
        // The records in flight were taken off the channels at once: the
        // channel state is complete before any of them is processed.
        assert_eq!(events[1], "state 1", "{events:?}");
        // Everything is still processed, each record once.
        let mut all: Vec<&String> = events.iter().filter(|e| e.parse::<i64>().is_ok()).collect();
        all.sort();
        assert_eq!(all, vec!["1", "2", "3", "4", "5"], "{events:?}");
    }

    #[test]
    fn a_message_in_hand_when_its_barrier_overtakes_it_is_saved_before_the_later_ones_of_its_channel() {
        let (tx0, rx0) = bounded(16);
        let (_tx1, rx1) = bounded::<Message>(16);
        let (lane0_tx, lane0) = crossbeam_channel::unbounded();
        let (lane1_tx, lane1) = crossbeam_channel::unbounded();
        for m in [batch(&[1]), batch(&[2]), batch(&[3]), Message::EndOfStream] {
            tx0.send(m).unwrap();
        }
        let mut gate = InputGate::with_mode(
            vec![
                InputChannel::new(rx0, 0).with_priority_lane(lane0),
                InputChannel::new(rx1, 0).with_priority_lane(lane1),
            ],
            CheckpointingMode::ExactlyOnce,
        )
        .with_aligned_timeout(Duration::ZERO);
        // Channel 1's barrier comes first: the snapshot is taken at once.
        lane1_tx
            .send(lane_barrier(1, BarrierKind::Checkpoint, 0))
            .unwrap();
        gate.poll_lanes();
        // Record 1 comes off channel 0, and its barrier (after all three)
        // arrives on the lane before the gate has handled it.
        let first = gate.channels[0].receiver.try_recv().unwrap();
        lane0_tx
            .send(lane_barrier(1, BarrierKind::Checkpoint, 3))
            .unwrap();
        gate.on_received(0, first);
        let (mut processed, mut recorded) = (vec![], vec![]);
        loop {
            match gate.next_event_timeout(Some(Duration::from_millis(10))).unwrap() {
                InputEvent::Batch { batch, .. } => processed.push(sum_of(&batch)),
                InputEvent::ChannelState { records, .. } => {
                    recorded.extend(records.iter().map(|(_, b)| sum_of(b)))
                }
                InputEvent::Idle | InputEvent::EndOfInput(_) => break,
                _ => {}
            }
        }
        assert_eq!(
            recorded,
            vec![1, 2, 3],
            "in the channel's order, as a restore replays them"
        );
        assert_eq!(processed, vec![1, 2, 3]);
    }

    #[test]
    fn unaligned_with_an_alignment_timeout_aligns_first_and_saves_nothing_when_in_time() {
        let (events, recorded) = unaligned_run(BarrierKind::Checkpoint, Duration::from_secs(60));
        assert!(recorded.is_empty());
        let at = events.iter().position(|e| e == "barrier 1").unwrap();
        let mut before: Vec<&str> = events[..at].iter().map(String::as_str).collect();
        before.sort();
        // Exactly what precedes the barriers, then the rest.
        assert_eq!(before, vec!["1", "2", "3"], "{events:?}");
        assert_eq!(events[at + 1], "state 1");
    }

    #[test]
    fn a_savepoint_through_barrier_lanes_is_aligned() {
        let (events, recorded) = unaligned_run(BarrierKind::Savepoint, Duration::ZERO);
        assert!(recorded.is_empty());
        let at = events.iter().position(|e| e == "barrier 1").unwrap();
        assert_eq!(at, 3, "{events:?}");
    }

    #[test]
    fn the_alignment_timeout_switches_to_unaligned_and_saves_what_is_still_before_the_barrier() {
        let (tx0, rx0) = bounded(16);
        let (tx1, rx1) = bounded(16);
        let (lane0_tx, lane0) = crossbeam_channel::unbounded();
        let (_lane1_tx, lane1) = crossbeam_channel::unbounded();
        tx0.send(batch(&[2])).unwrap();
        tx0.send(batch(&[4])).unwrap();
        lane0_tx
            .send(lane_barrier(1, BarrierKind::Checkpoint, 1))
            .unwrap();
        let mut gate = InputGate::with_mode(
            vec![
                InputChannel::new(rx0, 0).with_priority_lane(lane0),
                InputChannel::new(rx1, 0).with_priority_lane(lane1),
            ],
            CheckpointingMode::ExactlyOnce,
        )
        .with_aligned_timeout(Duration::from_millis(50));
        let mut events = vec![];
        let started = Instant::now();
        // Channel 1 is silent: after 50 ms the gate stops waiting for it.
        while started.elapsed() < Duration::from_millis(500) {
            match gate.next_event_timeout(Some(Duration::from_millis(10))).unwrap() {
                InputEvent::Batch { batch, .. } => events.push(format!("{}", sum_of(&batch))),
                InputEvent::Barrier(_) => {
                    events.push("barrier".to_string());
                    break;
                }
                _ => {}
            }
        }
        assert_eq!(events, vec!["2", "barrier"]);
        assert!(gate.last_alignment() >= Duration::from_millis(50));
        // Channel 1's records before its barrier (after 1 message) are saved.
        tx1.send(batch(&[7])).unwrap();
        _lane1_tx
            .send(lane_barrier(1, BarrierKind::Checkpoint, 1))
            .unwrap();
        tx1.send(batch(&[9])).unwrap();
        let mut recorded = None;
        let mut seen = vec![];
        while recorded.is_none() {
            match gate.next_event().unwrap() {
                InputEvent::Batch { batch, .. } => seen.push(sum_of(&batch)),
                InputEvent::ChannelState { records, .. } => {
                    recorded = Some(records.iter().map(|(_, b)| sum_of(b)).collect::<Vec<_>>())
                }
                _ => {}
            }
        }
        assert_eq!(recorded.unwrap(), vec![7]);
        // The records taken off the channels are still processed, in order.
        tx0.send(Message::EndOfStream).unwrap();
        tx1.send(Message::EndOfStream).unwrap();
        loop {
            match gate.next_event().unwrap() {
                InputEvent::Batch { batch, .. } => seen.push(sum_of(&batch)),
                InputEvent::End => break,
                _ => {}
            }
        }
        seen.sort();
        assert_eq!(seen, vec![4, 7, 9]);
    }
}
