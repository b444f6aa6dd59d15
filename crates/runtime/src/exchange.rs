//! Exchanges: how the batches of one operator reach the subtasks of the next.
//!
//! ```text
//!  upstream subtask                    downstream subtasks
//!  ┌──────────────┐  Forward   ────►   [i]            (same parallelism)
//!  │ ExchangeWriter│ Hash(keys) ────►  [kg * p / maxp] (rows split by key group)
//!  └──────────────┘  Rebalance ────►   [round robin]  (whole batches)
//!                    Broadcast ────►   [all]
//!                    Single    ────►   [0]            (downstream parallelism 1)
//! ```
//!
//! Watermarks, barriers and end-of-stream go to every channel of the writer.
//! Every channel is bounded: a full channel holds the sender's task back
//! (backpressure), and the time spent waiting is counted. With unaligned
//! checkpoints each channel has a barrier lane beside it, so that a barrier
//! overtakes the data in front of it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use arrow::array::{ArrayRef, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::record_batch::RecordBatch;
use crossbeam_channel::{Sender, TrySendError};
use datafusion_physical_expr::PhysicalExpr;

use crate::message::{CheckpointBarrier, Message};
use crate::operator::{SendFailure, TaskContext, TaskMetrics, send_tracked};
use crate::task::cancelled;
use crate::{Error, Result};
use weir_common::key_group::{hash_rows, key_group, subtask_for_key_group};

/// How rows are distributed between two operators.
#[derive(Debug, Clone)]
pub enum Exchange {
    /// One-to-one, same parallelism on both sides; lets operators chain.
    Forward,
    /// Rows go to the subtask owning their key group.
    Hash(Vec<Arc<dyn PhysicalExpr>>),
    /// Whole batches round-robin.
    Rebalance,
    /// Every batch to every subtask.
    Broadcast,
    /// Everything to the single downstream subtask.
    Single,
}

impl Exchange {
    /// A short name for EXPLAIN.
    pub fn describe(&self) -> String {
        match self {
            Exchange::Forward => "FORWARD".into(),
            Exchange::Hash(keys) => format!(
                "HASH[{}]",
                keys.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(", ")
            ),
            Exchange::Rebalance => "REBALANCE".into(),
            Exchange::Broadcast => "BROADCAST".into(),
            Exchange::Single => "SINGLE".into(),
        }
    }
}

/// A barrier sent ahead of the data (unaligned checkpoints), with the number
/// of messages the sender had put on the data channel before it: those are
/// before the checkpoint, later ones after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorityBarrier {
    /// The barrier.
    pub barrier: CheckpointBarrier,
    /// Messages sent on the channel before the barrier.
    pub sequence: u64,
}

/// The sending side of one exchange, owned by one upstream subtask.
///
/// Messages are queued first and put on the channels by [`ExchangeWriter::flush`]:
/// processing an input never blocks half-way, so a task whose outputs are
/// full can still take a checkpoint (the queued messages are then saved as
/// its output channel state).
pub struct ExchangeWriter {
    exchange: Exchange,
    senders: Vec<Sender<Message>>,
    /// Unaligned checkpoints: one barrier lane next to each channel.
    priority: Vec<Sender<PriorityBarrier>>,
    /// Messages queued, not yet on their channel, in order.
    pending: VecDeque<(usize, Message)>,
    /// Messages put on each channel so far.
    sent: Vec<u64>,
    /// For forward exchanges: this subtask's index, which picks the one channel used.
    next_rebalance: usize,
    max_parallelism: usize,
    metrics: Arc<TaskMetrics>,
    cancel: Arc<AtomicBool>,
    hashes: Vec<u64>,
}

/// The error a task gets when the subtask it sends to is gone; it means that task
/// failed (or the job was cancelled), so it is never the root cause.
pub fn downstream_gone() -> Error {
    Error::Execution("a downstream task stopped".into())
}

impl ExchangeWriter {
    /// A writer over `senders`, one per downstream subtask (one for Forward
    /// and Single), with a barrier lane next to each for unaligned checkpoints
    /// (`priority`: empty otherwise).
    pub fn new(
        exchange: Exchange,
        senders: Vec<Sender<Message>>,
        priority: Vec<Sender<PriorityBarrier>>,
        ctx: &TaskContext,
    ) -> Self {
        ExchangeWriter {
            exchange,
            next_rebalance: ctx.subtask % senders.len().max(1),
            sent: vec![0; senders.len()],
            senders,
            priority,
            pending: VecDeque::new(),
            max_parallelism: ctx.max_parallelism,
            metrics: ctx.metrics.clone(),
            cancel: ctx.cancel.clone(),
            hashes: Vec::new(),
        }
    }

    fn send(&mut self, channel: usize, message: Message) -> Result<()> {
        self.pending.push_back((channel, message));
        Ok(())
    }

    /// Puts queued messages on their channels until one is full; true when
    /// none is left.
    pub fn flush(&mut self) -> Result<bool> {
        while let Some((channel, message)) = self.pending.pop_front() {
            match self.senders[channel].try_send(message) {
                Ok(()) => self.sent[channel] += 1,
                Err(TrySendError::Full(message)) => {
                    self.pending.push_front((channel, message));
                    return Ok(false);
                }
                Err(TrySendError::Disconnected(_)) => return Err(downstream_gone()),
            }
        }
        Ok(true)
    }

    /// Puts every queued message on its channel, waiting for room (the
    /// time blocked counts as backpressure).
    pub fn flush_blocking(&mut self) -> Result<()> {
        while !self.flush()? {
            let (channel, message) = self.pending.pop_front().expect("not flushed");
            match send_tracked(&self.senders[channel], message, &self.cancel, Some(&self.metrics)) {
                Ok(_) => self.sent[channel] += 1,
                Err(SendFailure::Disconnected) => return Err(downstream_gone()),
                Err(SendFailure::Cancelled) => return Err(cancelled()),
            }
        }
        Ok(())
    }

    /// The channel the next queued message waits for, if any.
    pub fn waiting_on(&self) -> Option<&Sender<Message>> {
        self.pending.front().map(|(channel, _)| &self.senders[*channel])
    }

    /// Whether messages are queued.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The batches queued and not yet sent: at an unaligned checkpoint, the
    /// task's output channel state.
    pub fn pending_batches(&self) -> Vec<RecordBatch> {
        self.pending
            .iter()
            .filter_map(|(_, m)| match m {
                Message::Batch(b) => Some(b.clone()),
                _ => None,
            })
            .collect()
    }

    /// Sends `barrier` on every barrier lane, ahead of the queued messages
    /// and of what the channels hold.
    pub fn send_priority_barrier(&mut self, barrier: CheckpointBarrier) -> Result<()> {
        for (channel, lane) in self.priority.iter().enumerate() {
            let sequence = self.sent[channel];
            lane.send(PriorityBarrier { barrier, sequence })
                .map_err(|_| downstream_gone())?;
        }
        Ok(())
    }

    /// Whether barriers go on lanes of their own (unaligned checkpoints).
    pub fn has_priority_lanes(&self) -> bool {
        !self.priority.is_empty()
    }

    /// Sends a batch according to the exchange.
    pub fn send_batch(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        TaskMetrics::add(&self.metrics.records_out, batch.num_rows() as u64);
        match &self.exchange {
            Exchange::Forward | Exchange::Single => self.send(0, Message::Batch(batch)),
            Exchange::Rebalance => {
                let channel = self.next_rebalance;
                self.next_rebalance = (channel + 1) % self.senders.len();
                self.send(channel, Message::Batch(batch))
            }
            Exchange::Broadcast => {
                for channel in 0..self.senders.len() {
                    self.send(channel, Message::Batch(batch.clone()))?;
                }
                Ok(())
            }
            Exchange::Hash(keys) => {
                if self.senders.len() == 1 {
                    return self.send(0, Message::Batch(batch));
                }
                let columns = keys
                    .iter()
                    .map(|k| k.evaluate(&batch)?.into_array(batch.num_rows()))
                    .collect::<datafusion_common::Result<Vec<ArrayRef>>>()?;
                let parts = partition_by_hash(
                    &batch,
                    &columns,
                    self.senders.len(),
                    self.max_parallelism,
                    &mut self.hashes,
                )?;
                for (channel, part) in parts.into_iter().enumerate() {
                    if let Some(part) = part {
                        self.send(channel, Message::Batch(part))?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Sends a control message (watermark, barrier, end-of-stream) on every channel.
    pub fn broadcast(&mut self, message: Message) -> Result<()> {
        for channel in 0..self.senders.len() {
            self.send(channel, message.clone())?;
        }
        Ok(())
    }
}

/// Splits `batch` by the key group of `key_columns`, one part per target subtask.
pub fn partition_by_hash(
    batch: &RecordBatch,
    key_columns: &[ArrayRef],
    parallelism: usize,
    max_parallelism: usize,
    hashes: &mut Vec<u64>,
) -> Result<Vec<Option<RecordBatch>>> {
    hash_rows(key_columns, hashes)?;
    let targets: Vec<u32> = hashes
        .iter()
        .map(|h| subtask_for_key_group(key_group(*h, max_parallelism), parallelism, max_parallelism) as u32)
        .collect();
    // Counting sort of row indices by target, then one `take` and zero-copy slices.
    let mut counts = vec![0usize; parallelism + 1];
    for t in &targets {
        counts[*t as usize + 1] += 1;
    }
    for i in 1..counts.len() {
        counts[i] += counts[i - 1];
    }
    let mut offsets = counts.clone();
    let mut indices = vec![0u32; targets.len()];
    for (row, t) in targets.iter().enumerate() {
        indices[offsets[*t as usize]] = row as u32;
        offsets[*t as usize] += 1;
    }
    let sorted = take_record_batch(batch, &UInt32Array::from(indices))?;
    Ok((0..parallelism)
        .map(|t| {
            let (start, end) = (counts[t], counts[t + 1]);
            (end > start).then(|| sorted.slice(start, end - start))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use weir_common::key_group::key_group_range;

    #[test]
    fn hash_partition_sends_each_row_to_the_owner_of_its_key_group() {
        let keys: Vec<i64> = (0..1000).map(|i| i % 37).collect();
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let column: ArrayRef = Arc::new(Int64Array::from(keys));
        let batch = RecordBatch::try_new(schema, vec![column.clone()]).unwrap();
        let mut hashes = Vec::new();
        let parts = partition_by_hash(&batch, &[column], 4, 128, &mut hashes).unwrap();
        let mut total = 0;
        for (subtask, part) in parts.iter().enumerate() {
            let Some(part) = part else { continue };
            total += part.num_rows();
            let mut h = Vec::new();
            hash_rows(&[part.column(0).clone()], &mut h).unwrap();
            let range = key_group_range(subtask, 4, 128);
            for hash in h {
                assert!(range.contains(&key_group(hash, 128)));
            }
            // The same key never lands in two subtasks.
            for k in part
                .column(0)
                .as_primitive::<arrow::datatypes::Int64Type>()
                .values()
            {
                for (other, p) in parts.iter().enumerate() {
                    if other != subtask
                        && let Some(p) = p
                    {
                        let vals = p.column(0).as_primitive::<arrow::datatypes::Int64Type>();
                        assert!(!vals.values().contains(k));
                    }
                }
            }
        }
        assert_eq!(total, 1000);
    }
}
