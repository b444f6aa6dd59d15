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

use super::message::{CheckpointBarrier, CheckpointId, MAX_WATERMARK, MIN_WATERMARK, Message, Timestamp};
use crate::checkpoint::CheckpointingMode;
use crate::{Error, Result};

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
    /// Every channel has ended.
    End,
    /// Nothing arrived within the timeout.
    Idle,
    /// Barrier `n` has arrived on every open channel: snapshot now.
    Barrier(CheckpointBarrier),
    /// A newer barrier overtook the alignment of checkpoint `n` (an upstream
    /// task dropped it): the task declines `n`.
    AbortCheckpoint(CheckpointId),
}

/// One input channel of a task.
pub struct InputChannel {
    /// The receiving end.
    pub receiver: Receiver<Message>,
    /// The logical input it feeds.
    pub input: usize,
    watermark: Timestamp,
    ended: bool,
    /// Barrier of the current alignment received.
    barrier_received: bool,
    /// Not read until the alignment completes (exactly-once only).
    blocked: bool,
}

impl InputChannel {
    /// A channel feeding logical input `input`.
    pub fn new(receiver: Receiver<Message>, input: usize) -> Self {
        InputChannel {
            receiver,
            input,
            watermark: MIN_WATERMARK,
            ended: false,
            barrier_received: false,
            blocked: false,
        }
    }
}

/// The error a task gets when an upstream task stopped without finishing; the
/// upstream task's own error is the root cause.
pub fn upstream_gone() -> Error {
    Error::Execution("an upstream task stopped".into())
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
        InputGate {
            channels,
            watermark: MIN_WATERMARK,
            open,
            aligning: None,
            ready: VecDeque::new(),
            mode,
            alignment_started: None,
            last_alignment: Duration::ZERO,
        }
    }

    /// How long the last barrier took to arrive on every channel after it
    /// arrived on the first (Flink's alignment duration).
    pub fn last_alignment(&self) -> Duration {
        self.last_alignment
    }

    /// The task's current watermark.
    pub fn watermark(&self) -> Timestamp {
        self.watermark
    }

    /// Blocks for the next event.
    pub fn next_event(&mut self) -> Result<InputEvent> {
        self.next_event_timeout(None)
    }

    /// Waits at most `timeout` (or forever) for the next event.
    pub fn next_event_timeout(&mut self, timeout: Option<Duration>) -> Result<InputEvent> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Ok(event);
            }
            if self.open == 0 {
                return Ok(InputEvent::End);
            }
            let Some((index, message)) = self.receive(timeout)? else {
                return Ok(InputEvent::Idle);
            };
            match message {
                Message::Batch(batch) => {
                    return Ok(InputEvent::Batch {
                        input: self.channels[index].input,
                        batch,
                    });
                }
                Message::Watermark(wm) => {
                    let channel = &mut self.channels[index];
                    channel.watermark = channel.watermark.max(wm);
                    if let Some(wm) = self.advance() {
                        return Ok(InputEvent::Watermark(wm));
                    }
                }
                Message::EndOfStream => {
                    let channel = &mut self.channels[index];
                    channel.ended = true;
                    channel.barrier_received = false;
                    channel.blocked = false;
                    channel.watermark = MAX_WATERMARK;
                    self.open -= 1;
                    if self.open > 0
                        && let Some(wm) = self.advance()
                    {
                        self.ready.push_back(InputEvent::Watermark(wm));
                    }
                    // An ended channel counts as aligned.
                    self.complete_alignment_if_done();
                }
                Message::Barrier(barrier) => self.on_barrier(index, barrier),
            }
        }
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

    /// Recomputes the minimum watermark; returns it when it advanced.
    fn advance(&mut self) -> Option<Timestamp> {
        let min = self
            .channels
            .iter()
            .filter(|c| !c.ended)
            .map(|c| c.watermark)
            .min()
            .unwrap_or(MAX_WATERMARK);
        (min > self.watermark).then(|| {
            self.watermark = min;
            min
        })
    }

    /// Receives from any open channel; `None` when the timeout passed first.
    fn receive(&mut self, timeout: Option<Duration>) -> Result<Option<(usize, Message)>> {
        let open: Vec<usize> = (0..self.channels.len())
            .filter(|i| !self.channels[*i].ended && !self.channels[*i].blocked)
            .collect();
        if open.len() == 1 {
            let i = open[0];
            let receiver = &self.channels[i].receiver;
            return match timeout {
                None => receiver.recv().map(|m| Some((i, m))).map_err(|_| upstream_gone()),
                Some(t) => match receiver.recv_timeout(t) {
                    Ok(m) => Ok(Some((i, m))),
                    Err(RecvTimeoutError::Timeout) => Ok(None),
                    Err(RecvTimeoutError::Disconnected) => Err(upstream_gone()),
                },
            };
        }
        let mut select = Select::new();
        for i in &open {
            select.recv(&self.channels[*i].receiver);
        }
        let operation = match timeout {
            None => select.select(),
            Some(t) => match select.select_timeout(t) {
                Ok(operation) => operation,
                Err(_) => return Ok(None),
            },
        };
        let i = open[operation.index()];
        operation
            .recv(&self.channels[i].receiver)
            .map(|m| Some((i, m)))
            .map_err(|_| upstream_gone())
    }
}

#[cfg(test)]
mod tests {
    use arrow::record_batch::RecordBatch;
    use crossbeam_channel::bounded;

    use super::*;

    fn events(gate: &mut InputGate) -> Vec<String> {
        let mut out = vec![];
        loop {
            match gate.next_event().unwrap() {
                InputEvent::Batch { .. } => out.push("batch".to_string()),
                InputEvent::Watermark(wm) => out.push(format!("wm {wm}")),
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
            kind: super::super::message::BarrierKind::Checkpoint,
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
}
