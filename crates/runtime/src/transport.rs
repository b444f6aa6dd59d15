//! Transports: how the channel between two subtasks is made.
//!
//! Tasks always see crossbeam ends: an [`ExchangeWriter`](crate::exchange::ExchangeWriter)
//! sends on a bounded `Sender<Message>` and an
//! [`InputChannel`](crate::input::InputChannel) reads a `Receiver<Message>`,
//! each with a priority lane beside it under unaligned checkpoints. A
//! [`Transport`] decides what lies between the two ends. In one process
//! ([`Local`]) it is one crossbeam channel. A transport whose channels leave
//! the process bridges each end to the network with the frames of
//! [`wire`](crate::wire): the sender's end is drained into a stream, and the
//! stream fills the receiver's end in the other process, so alignment,
//! unaligned checkpoints and backpressure (a full bounded end) work unchanged.
//! [`WireLoopback`] is that bridge within one process: every message goes
//! through bytes and back, which tests the wire encoding under real jobs.

use std::fmt;
use std::thread;

use crossbeam_channel::{Receiver, Select, Sender, bounded, unbounded};

use crate::exchange::PriorityBarrier;
use crate::message::Message;
use crate::wire::{Decoded, Decoder, Encoder, Frame};
use crate::{Error, Result};

/// One channel of a job: from subtask `from` of an edge's upstream vertex to
/// subtask `to` of its downstream vertex.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChannelId {
    /// The edge's index in the job graph.
    pub edge: usize,
    /// The upstream subtask.
    pub from: usize,
    /// The downstream subtask.
    pub to: usize,
}

/// The sending end of a channel, owned by the upstream task.
pub struct SendEnd {
    /// Data, watermarks, barriers in order; bounded.
    pub data: Sender<Message>,
    /// Barriers that overtake the data (unaligned checkpoints only).
    pub lane: Option<Sender<PriorityBarrier>>,
}

/// The receiving end of a channel, owned by the downstream task.
pub struct ReceiveEnd {
    /// Data, watermarks, barriers in order.
    pub data: Receiver<Message>,
    /// Barriers that overtake the data (unaligned checkpoints only).
    pub lane: Option<Receiver<PriorityBarrier>>,
}

/// What the reader of a query's result channel in another process has
/// confirmed holding: the id of the last checkpoint barrier it received.
/// A checkpointed collect sink waits for it before acknowledging a
/// checkpoint, so that a completed checkpoint's rows are with the reader
/// even if this process dies next (they are then never replayed).
#[derive(Debug, Default)]
pub struct Delivered {
    checkpoint: std::sync::Mutex<u64>,
    changed: std::sync::Condvar,
}

impl Delivered {
    /// The reader holds everything up to barrier `checkpoint`.
    pub fn confirm(&self, checkpoint: u64) {
        let mut held = self.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
        *held = (*held).max(checkpoint);
        self.changed.notify_all();
    }

    /// Waits up to `timeout` for the reader to confirm `checkpoint`;
    /// whether it did.
    pub fn wait_for(&self, checkpoint: u64, timeout: std::time::Duration) -> bool {
        let held = self.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
        let (held, _) = self
            .changed
            .wait_timeout_while(held, timeout, |held| *held < checkpoint)
            .unwrap_or_else(|e| e.into_inner());
        *held >= checkpoint
    }
}

/// Makes the channels of a job.
pub trait Transport: Send + Sync {
    /// The two ends of channel `id`, holding up to `capacity` messages, with
    /// a priority lane when `lane` (unaligned checkpoints).
    fn channel(&self, id: ChannelId, capacity: usize, lane: bool) -> Result<(SendEnd, ReceiveEnd)>;

    /// The sending end of channel `id` whose receiver runs in another
    /// process, which fetches the other end from this one.
    fn send_end(&self, id: ChannelId, capacity: usize, lane: bool) -> Result<SendEnd> {
        let _ = (capacity, lane);
        Err(one_process(self.name(), id))
    }

    /// The receiving end of channel `id` whose sender runs in the process at
    /// `upstream` (its data-plane address).
    fn receive_end(&self, id: ChannelId, upstream: &str, capacity: usize, lane: bool) -> Result<ReceiveEnd> {
        let _ = (upstream, capacity, lane);
        Err(one_process(self.name(), id))
    }

    /// A name for logs and `Debug`.
    fn name(&self) -> &'static str;
}

fn one_process(transport: &str, id: ChannelId) -> Error {
    Error::Execution(format!(
        "channel {id:?} joins two processes, but the {transport} transport keeps channels in one"
    ))
}

impl fmt::Debug for dyn Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Channels within one process: a bounded crossbeam channel, and an
/// unbounded one for the lane (barriers are few).
#[derive(Debug, Clone, Copy, Default)]
pub struct Local;

impl Transport for Local {
    fn channel(&self, _id: ChannelId, capacity: usize, lane: bool) -> Result<(SendEnd, ReceiveEnd)> {
        Ok(local(capacity, lane))
    }

    fn name(&self) -> &'static str {
        "local"
    }
}

/// The two ends of one channel within this process: `capacity` messages of
/// data, and an unbounded lane when `lane`. Transports that leave the
/// process bridge such ends to the network.
pub fn local(capacity: usize, lane: bool) -> (SendEnd, ReceiveEnd) {
    let (data_tx, data_rx) = bounded(capacity);
    let (lane_tx, lane_rx) = match lane {
        true => {
            let (tx, rx) = unbounded();
            (Some(tx), Some(rx))
        }
        false => (None, None),
    };
    (
        SendEnd {
            data: data_tx,
            lane: lane_tx,
        },
        ReceiveEnd {
            data: data_rx,
            lane: lane_rx,
        },
    )
}

/// Channels whose every message is encoded to bytes and decoded again by a
/// thread between the two ends, as a network transport does; each end is
/// bounded to the channel's capacity.
#[derive(Debug, Clone, Copy, Default)]
pub struct WireLoopback;

impl Transport for WireLoopback {
    fn channel(&self, id: ChannelId, capacity: usize, lane: bool) -> Result<(SendEnd, ReceiveEnd)> {
        let (send, upstream) = local(capacity, lane);
        let (downstream, receive) = local(capacity, lane);
        thread::Builder::new()
            .name(format!("wire-{}-{}-{}", id.edge, id.from, id.to))
            .spawn(move || {
                if let Err(e) = pump(upstream, downstream) {
                    // The receiving task then sees its upstream gone and fails.
                    eprintln!("weir: channel {id:?} stopped: {e}");
                }
            })
            .map_err(|e| Error::Execution(format!("cannot start the thread of channel {id:?}: {e}")))?;
        Ok((send, receive))
    }

    fn name(&self) -> &'static str {
        "wire-loopback"
    }
}

/// Moves messages from `from` to `to` through frames and bytes until either
/// side is gone. A message waiting for room at `to` does not hold back the
/// lane: a priority barrier still overtakes it.
fn pump(from: ReceiveEnd, to: SendEnd) -> Result<()> {
    let mut hop = Hop::default();
    let never = crossbeam_channel::never();
    let mut lane_open = from.lane.is_some();
    let mut held: Option<Message> = None;
    loop {
        let lane = match (&from.lane, lane_open) {
            (Some(lane), true) => lane,
            _ => &never,
        };
        let mut select = Select::new();
        let data = match held {
            Some(_) => select.send(&to.data),
            None => select.recv(&from.data),
        };
        let priority = select.recv(lane);
        let operation = select.select();
        if operation.index() == priority {
            match operation.recv(lane) {
                Ok(barrier) => {
                    let barrier = hop.priority(&barrier)?;
                    if to.lane.as_ref().is_none_or(|l| l.send(barrier).is_err()) {
                        return Ok(());
                    }
                }
                // The data may still hold messages: read them to the end.
                Err(_) => lane_open = false,
            }
            continue;
        }
        debug_assert_eq!(operation.index(), data);
        match held.take() {
            Some(message) => {
                if operation.send(&to.data, message).is_err() {
                    return Ok(());
                }
            }
            None => match operation.recv(&from.data) {
                Ok(message) => held = Some(hop.message(&message)?),
                Err(_) => return Ok(()),
            },
        }
    }
}

/// One channel's encoder and decoder, with bytes between them.
#[derive(Default)]
struct Hop {
    encoder: Encoder,
    decoder: Decoder,
}

impl Hop {
    fn message(&mut self, message: &Message) -> Result<Message> {
        let mut out = None;
        for frame in self.encoder.encode(message)? {
            match self.decoder.decode(&Frame::from_bytes(&frame.to_bytes())?)? {
                Decoded::Message(message) => out = Some(message),
                Decoded::Setup => {}
                Decoded::Priority(_) => {
                    return Err(Error::Internal("a priority barrier among the data".into()));
                }
            }
        }
        out.ok_or_else(|| Error::Internal("a message encoded to no frame".into()))
    }

    fn priority(&mut self, barrier: &PriorityBarrier) -> Result<PriorityBarrier> {
        let frame = self.encoder.encode_priority(barrier);
        match self.decoder.decode(&Frame::from_bytes(&frame.to_bytes())?)? {
            Decoded::Priority(barrier) => Ok(barrier),
            other => Err(Error::Internal(format!(
                "a priority barrier decoded as {other:?}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::Int64Array;
    use arrow::record_batch::RecordBatch;

    use super::*;
    use crate::message::CheckpointBarrier;
    use weir_common::ids::BarrierKind;

    fn batch(values: &[i64]) -> Message {
        let column = Arc::new(Int64Array::from(values.to_vec()));
        Message::Batch(RecordBatch::try_from_iter([("v", column as _)]).unwrap())
    }

    fn id() -> ChannelId {
        ChannelId {
            edge: 0,
            from: 1,
            to: 2,
        }
    }

    #[test]
    fn a_loopback_channel_delivers_messages_in_order_and_closes_when_the_sender_goes() {
        let (send, receive) = WireLoopback.channel(id(), 2, false).unwrap();
        let sender = thread::spawn(move || {
            for i in 0..100 {
                send.data.send(batch(&[i, i + 1])).unwrap();
                send.data.send(Message::Watermark(i)).unwrap();
            }
            send.data.send(Message::EndOfStream).unwrap();
        });
        let received: Vec<Message> = receive.data.iter().collect();
        sender.join().unwrap();
        assert_eq!(received.len(), 201);
        for (i, pair) in received.chunks(2).take(100).enumerate() {
            let i = i as i64;
            match pair {
                [Message::Batch(b), Message::Watermark(w)] => {
                    let values = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                    assert_eq!(values.values().as_ref(), &[i, i + 1]);
                    assert_eq!(*w, i);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(matches!(received[200], Message::EndOfStream));
    }

    #[test]
    fn a_priority_barrier_overtakes_data_waiting_for_room() {
        let (send, receive) = WireLoopback.channel(id(), 1, true).unwrap();
        // One batch in the receiver's end, one held by the pump, one in the
        // sender's end: the data is stuck until the receiver reads.
        for i in 0..3 {
            send.data.send(batch(&[i])).unwrap();
        }
        let barrier = PriorityBarrier {
            barrier: CheckpointBarrier {
                id: 3,
                kind: BarrierKind::Checkpoint,
                timestamp: 0,
            },
            sequence: 3,
        };
        send.lane.as_ref().unwrap().send(barrier).unwrap();
        let lane = receive.lane.unwrap();
        assert_eq!(lane.recv_timeout(std::time::Duration::from_secs(10)), Ok(barrier));
        drop(send);
        assert_eq!(receive.data.iter().count(), 3, "the data follows, none lost");
    }

    #[test]
    fn a_channel_whose_receiver_is_gone_refuses_the_sender() {
        let (send, receive) = WireLoopback.channel(id(), 1, false).unwrap();
        drop(receive);
        let mut refused = false;
        for i in 0..10 {
            if send.data.send(batch(&[i])).is_err() {
                refused = true;
                break;
            }
        }
        assert!(refused, "the pump stops once its receiver is gone");
    }
}
