//! The collect sink: hands a query's result batches to whoever submitted it, in this process (the embedded API, the shell) or in another (the shell of a cluster, over a result channel with checkpoint barriers).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arrow::record_batch::RecordBatch;
use crossbeam_channel::Sender;

use crate::Result;
use crate::{SinkFactory, SinkWriter};
use weir_common::ids::{BarrierKind, CheckpointId};
use weir_runtime::TaskContext;
use weir_runtime::message::{CheckpointBarrier, Message};
use weir_runtime::operator::send_or_cancel;
use weir_runtime::task::cancelled;
use weir_runtime::transport::Delivered;

/// What a remote reader confirms when the end of the result arrived.
pub const END_CONFIRMED: u64 = u64::MAX;

/// Where a query's rows go.
#[derive(Debug, Clone)]
pub enum ResultSender {
    /// Batches to a receiver in this process.
    Batches(Sender<RecordBatch>),
    /// A channel read from another process: batches, each checkpoint's
    /// barrier, and the end; a checkpoint waits until the reader confirms
    /// its barrier ([`Delivered`]).
    Checkpointed {
        /// The channel's sending end.
        messages: Sender<Message>,
        /// What the reader confirmed.
        delivered: Arc<Delivered>,
    },
}

/// Sends every batch to the receiver of a query result.
#[derive(Debug)]
pub struct CollectSinkFactory {
    sender: ResultSender,
}

impl CollectSinkFactory {
    /// A sink feeding `sender`.
    pub fn new(sender: ResultSender) -> Self {
        CollectSinkFactory { sender }
    }
}

impl SinkFactory for CollectSinkFactory {
    fn describe(&self) -> String {
        "Sink: collect".to_string()
    }

    fn accepts_updates(&self) -> bool {
        true
    }

    fn create_writer(&self, ctx: &TaskContext) -> Result<Box<dyn SinkWriter>> {
        Ok(Box::new(CollectWriter {
            sender: self.sender.clone(),
            cancel: ctx.cancel.clone(),
        }))
    }
}

struct CollectWriter {
    sender: ResultSender,
    cancel: Arc<AtomicBool>,
}

impl CollectWriter {
    fn send(&self, message: Message) -> Result<()> {
        // The receiver is gone only when the caller dropped the result: a cancel.
        let sent = match (&self.sender, message) {
            (ResultSender::Batches(to), Message::Batch(batch)) => send_or_cancel(to, batch, &self.cancel),
            (ResultSender::Batches(_), _) => return Ok(()),
            (ResultSender::Checkpointed { messages, .. }, message) => {
                send_or_cancel(messages, message, &self.cancel)
            }
        };
        sent.map(drop).map_err(|_| cancelled())
    }
}

impl SinkWriter for CollectWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.send(Message::Batch(batch.clone()))
    }

    /// A remote reader gets the end, and the task waits until it
    /// confirms it: the rows are then all with the reader, and the part
    /// may end (which withdraws the channel).
    fn finish(&mut self) -> Result<()> {
        self.send(Message::EndOfStream)?;
        self.wait_confirmed(END_CONFIRMED)
    }

    /// A remote reader gets the barrier after the checkpoint's rows, and
    /// the checkpoint waits until the reader confirms it holds them.
    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<serde_json::Value> {
        if let ResultSender::Batches(_) = &self.sender {
            return Ok(serde_json::Value::Null);
        }
        let barrier = CheckpointBarrier {
            id: checkpoint,
            kind: BarrierKind::Checkpoint,
            timestamp: 0,
        };
        self.send(Message::Barrier(barrier))?;
        self.wait_confirmed(checkpoint)?;
        Ok(serde_json::Value::Null)
    }
}

impl CollectWriter {
    /// Waits until a remote reader confirms `confirmation`, or the task
    /// is cancelled. A reader that stops reading holds the sink as a full
    /// channel would (backpressure): the checkpoint then expires at the
    /// coordinator and is declined, and the job goes on.
    fn wait_confirmed(&self, confirmation: u64) -> Result<()> {
        let ResultSender::Checkpointed { delivered, .. } = &self.sender else {
            return Ok(());
        };
        while !delivered.wait_for(confirmation, Duration::from_millis(50)) {
            if self.cancel.load(Ordering::SeqCst) {
                return Err(cancelled());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;

    fn batch(v: i64) -> RecordBatch {
        RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from(vec![v])) as _)]).unwrap()
    }

    #[test]
    fn a_remote_reader_gets_each_checkpoints_barrier_after_its_rows_and_the_checkpoint_waits_for_its_confirmation()
     {
        let (messages, read) = crossbeam_channel::unbounded();
        let delivered = Arc::new(Delivered::default());
        let cancel = Arc::new(AtomicBool::new(false));
        let mut writer = CollectWriter {
            sender: ResultSender::Checkpointed {
                messages,
                delivered: delivered.clone(),
            },
            cancel: cancel.clone(),
        };
        writer.write(&batch(1)).unwrap();
        let reader = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for message in read.iter() {
                match message {
                    Message::Batch(_) => seen.push("batch".to_string()),
                    Message::Barrier(b) => {
                        seen.push(format!("barrier {}", b.id));
                        delivered.confirm(b.id);
                    }
                    Message::EndOfStream => {
                        seen.push("end".into());
                        delivered.confirm(END_CONFIRMED);
                        break;
                    }
                    other => panic!("{other:?}"),
                }
            }
            seen
        });
        writer.pre_commit(4).unwrap();
        writer.write(&batch(2)).unwrap();
        writer.finish().unwrap();
        assert_eq!(reader.join().unwrap(), ["batch", "barrier 4", "batch", "end"]);
    }

    #[test]
    fn a_checkpoint_whose_reader_never_confirms_stops_when_the_job_is_cancelled() {
        let (messages, _read) = crossbeam_channel::unbounded();
        let cancel = Arc::new(AtomicBool::new(true));
        let mut writer = CollectWriter {
            sender: ResultSender::Checkpointed {
                messages,
                delivered: Arc::new(Delivered::default()),
            },
            cancel,
        };
        assert!(writer.pre_commit(1).is_err());
    }
}
