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

use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Select};

use super::message::{MAX_WATERMARK, MIN_WATERMARK, Message, Timestamp};
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
}

/// One input channel of a task.
pub struct InputChannel {
    /// The receiving end.
    pub receiver: Receiver<Message>,
    /// The logical input it feeds.
    pub input: usize,
    watermark: Timestamp,
    ended: bool,
}

impl InputChannel {
    /// A channel feeding logical input `input`.
    pub fn new(receiver: Receiver<Message>, input: usize) -> Self {
        InputChannel {
            receiver,
            input,
            watermark: MIN_WATERMARK,
            ended: false,
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
}

impl InputGate {
    /// A gate over `channels`; with none, it ends at once.
    pub fn new(channels: Vec<InputChannel>) -> Self {
        let open = channels.len();
        InputGate {
            channels,
            watermark: MIN_WATERMARK,
            open,
        }
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
                    channel.watermark = MAX_WATERMARK;
                    self.open -= 1;
                    if self.open > 0
                        && let Some(wm) = self.advance()
                    {
                        return Ok(InputEvent::Watermark(wm));
                    }
                }
                Message::Barrier(_) => {
                    return Err(Error::Internal(
                        "checkpoint barriers are not handled by this task".into(),
                    ));
                }
            }
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
            .filter(|i| !self.channels[*i].ended)
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
                InputEvent::Idle => {}
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
    fn a_vanished_upstream_is_an_error_not_a_hang() {
        let (tx, rx) = bounded::<Message>(1);
        drop(tx);
        let mut gate = InputGate::new(vec![InputChannel::new(rx, 0)]);
        assert!(gate.next_event().is_err());
    }
}
