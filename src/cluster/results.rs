//! A query's rows read from a cluster: the shell reads its collect sink's channel from the TaskManager that runs it, holds each checkpoint's rows until the checkpoint completes, and across a restart keeps exactly the rows of the checkpoint restored, so every row is shown once (Flink's checkpointed collect buffer).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::record_batch::RecordBatch;
use crossbeam_channel::RecvTimeoutError;
use weir_connectors::collect::END_CONFIRMED;
use weir_flight::{ChannelKey, FlightNode};
use weir_runtime::message::Message;
use weir_runtime::transport::ReceiveEnd;

use super::client::Client;
use super::protocol::{JobReport, JobState};
use crate::{Error, Result};

/// Rows received and not yet shown, by the checkpoint barrier after them.
#[derive(Debug, Default)]
pub struct ResultBuffer {
    /// Without checkpoints rows are shown as they come: a restart then
    /// cannot keep them exactly once.
    checkpointed: bool,
    /// Rows after the last barrier received.
    open: Vec<RecordBatch>,
    /// Rows before each barrier received (and after the one before), oldest first.
    closed: VecDeque<(u64, Vec<RecordBatch>)>,
    /// Rows shown so far.
    shown: usize,
}

impl ResultBuffer {
    /// A buffer for a job that takes checkpoints (`checkpointed`) or not.
    pub fn new(checkpointed: bool) -> Self {
        ResultBuffer {
            checkpointed,
            ..ResultBuffer::default()
        }
    }

    /// A batch arrived; what can be shown now.
    pub fn batch(&mut self, batch: RecordBatch) -> Vec<RecordBatch> {
        if self.checkpointed {
            self.open.push(batch);
            return Vec::new();
        }
        self.show(vec![batch])
    }

    /// The barrier of `checkpoint` arrived: the rows before it are its.
    pub fn barrier(&mut self, checkpoint: u64) {
        let rows = std::mem::take(&mut self.open);
        self.closed.push_back((checkpoint, rows));
    }

    /// Checkpoint `checkpoint` completed: its rows and those before can be shown.
    pub fn completed(&mut self, checkpoint: u64) -> Vec<RecordBatch> {
        let mut released = Vec::new();
        while self.closed.front().is_some_and(|(id, _)| *id <= checkpoint) {
            released.extend(self.closed.pop_front().map(|(_, rows)| rows).unwrap_or_default());
        }
        self.show(released)
    }

    /// The job finished: every row received is final.
    pub fn finished(&mut self) -> Vec<RecordBatch> {
        let mut released: Vec<RecordBatch> = self.closed.drain(..).flat_map(|(_, rows)| rows).collect();
        released.append(&mut self.open);
        self.show(released)
    }

    /// The job restarted from checkpoint `restored` (`None`: from the
    /// start): the rows up to it are final, the later ones come again.
    pub fn restarted(&mut self, restored: Option<u64>) -> Result<Vec<RecordBatch>> {
        if !self.checkpointed && self.shown > 0 {
            return Err(Error::Execution(
                "the query's job restarted after its rows were shown, and without checkpoints \
                 ('execution.checkpointing.interval') they cannot be shown exactly once"
                    .into(),
            ));
        }
        let released = restored.map(|id| self.completed(id)).unwrap_or_default();
        self.closed.clear();
        self.open.clear();
        Ok(released)
    }

    fn show(&mut self, batches: Vec<RecordBatch>) -> Vec<RecordBatch> {
        self.shown += batches.iter().map(|b| b.num_rows()).sum::<usize>();
        batches
    }
}

/// How often the JobManager is asked about the job.
const POLL: Duration = Duration::from_millis(100);

/// The channel of one attempt being read.
struct Reading {
    attempt: u32,
    host: String,
    key: ChannelKey,
    end: ReceiveEnd,
    /// Its end-of-stream arrived.
    ended: bool,
}

/// A query running on a cluster, its rows read as they become final.
pub struct RemoteQuery {
    client: Client,
    node: Arc<FlightNode>,
    job_id: String,
    channel: u64,
    buffer: ResultBuffer,
    reading: Option<Reading>,
    /// The attempt whose rows the buffer holds.
    attempt: u32,
    completed: Option<u64>,
    ready: VecDeque<RecordBatch>,
    last_poll: Option<Instant>,
    done: bool,
}

impl RemoteQuery {
    /// Reads the rows of collect sink `channel` of job `job_id`, submitted
    /// through `client`; `checkpointed`: the job takes checkpoints.
    pub fn new(client: Client, job_id: String, channel: u64, checkpointed: bool) -> Result<RemoteQuery> {
        Ok(RemoteQuery {
            client,
            node: FlightNode::start("127.0.0.1:0")?,
            job_id,
            channel,
            buffer: ResultBuffer::new(checkpointed),
            reading: None,
            attempt: 0,
            completed: None,
            ready: VecDeque::new(),
            last_poll: None,
            done: false,
        })
    }

    /// The job's id.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// Cancels the job.
    pub fn cancel(&mut self) -> Result<()> {
        self.done = true;
        self.client.cancel(&self.job_id)
    }

    /// The next rows to show, waiting at most about `timeout`:
    /// `Some(Ok(None))` when none came in time, `None` when the query has
    /// ended.
    pub fn next_timeout(&mut self, timeout: Duration) -> Option<Result<Option<RecordBatch>>> {
        match self.step(timeout) {
            Ok(()) => {}
            Err(e) => {
                self.done = true;
                return Some(Err(e));
            }
        }
        match self.ready.pop_front() {
            Some(batch) => Some(Ok(Some(batch))),
            None if self.done => None,
            None => Some(Ok(None)),
        }
    }

    fn step(&mut self, timeout: Duration) -> Result<()> {
        if !self.ready.is_empty() || self.done {
            return Ok(());
        }
        if self.last_poll.is_none_or(|t| t.elapsed() >= POLL) {
            self.last_poll = Some(Instant::now());
            let report = self.client.job(&self.job_id)?;
            self.follow(&report)?;
            if self.done || !self.ready.is_empty() {
                return Ok(());
            }
        }
        self.read(timeout)
    }

    /// Acts on the JobManager's account of the job.
    fn follow(&mut self, report: &JobReport) -> Result<()> {
        // A restart, once the next attempt is deployed (and so what it
        // restored is known): the old attempt's stream is over.
        if report.attempt != self.attempt && report.result_host.is_some() {
            self.reading = None;
            self.ready.extend(self.buffer.restarted(report.restored)?);
            self.attempt = report.attempt;
        }
        if let Some(completed) = report.completed.filter(|c| Some(*c) > self.completed) {
            self.completed = Some(completed);
            self.ready.extend(self.buffer.completed(completed));
        }
        match report.state {
            JobState::Finished if self.reading.as_ref().is_none_or(|r| r.ended) => {
                self.ready.extend(self.buffer.finished());
                self.done = true;
            }
            JobState::Failed => {
                return Err(Error::Execution(format!(
                    "the query failed: {}",
                    report.error.as_deref().unwrap_or("no reason given")
                )));
            }
            JobState::Canceled => return Err(Error::Execution("the query was cancelled".into())),
            _ => {}
        }
        if self.reading.is_none()
            && report.state == JobState::Running
            && let Some(host) = &report.result_host
        {
            let key = ChannelKey::result(&self.job_id, report.attempt, self.channel);
            let end = self.node.fetch(host, &key, 16, false)?;
            self.reading = Some(Reading {
                attempt: report.attempt,
                host: host.clone(),
                key,
                end,
                ended: false,
            });
        }
        Ok(())
    }

    /// Reads the current attempt's channel for up to `timeout`.
    fn read(&mut self, timeout: Duration) -> Result<()> {
        let Some(reading) = self.reading.as_mut().filter(|r| !r.ended) else {
            std::thread::sleep(timeout.min(POLL));
            return Ok(());
        };
        let deadline = Instant::now() + timeout.min(POLL);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match reading.end.data.recv_timeout(left) {
                Ok(Message::Batch(batch)) => self.ready.extend(self.buffer.batch(batch)),
                Ok(Message::Barrier(barrier)) => {
                    self.buffer.barrier(barrier.id);
                    // The sink's checkpoint waits for this confirmation.
                    let confirmed = self.node.confirm(&reading.host, &reading.key, barrier.id);
                    if let Err(e) = confirmed {
                        eprintln!("[WARN] {e} (attempt {})", reading.attempt);
                    }
                }
                Ok(Message::EndOfStream) => {
                    reading.ended = true;
                    // The sink's part ends once the reader holds everything.
                    self.node.confirm(&reading.host, &reading.key, END_CONFIRMED)?;
                    return Ok(());
                }
                Ok(_) => {}
                // The stream broke: the JobManager will say what follows.
                Err(RecvTimeoutError::Disconnected) => {
                    reading.ended = true;
                    return Ok(());
                }
                Err(RecvTimeoutError::Timeout) => return Ok(()),
            }
            if !self.ready.is_empty() {
                return Ok(());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;

    fn rows(values: &[i64]) -> RecordBatch {
        RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from(values.to_vec())) as _)]).unwrap()
    }

    fn values(batches: Vec<RecordBatch>) -> Vec<i64> {
        let column = |b: &RecordBatch| b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().clone();
        batches.iter().flat_map(|b| column(b).values().to_vec()).collect()
    }

    #[test]
    fn rows_are_shown_when_the_checkpoint_after_them_completes() {
        let mut buffer = ResultBuffer::new(true);
        assert!(buffer.batch(rows(&[1, 2])).is_empty());
        buffer.barrier(1);
        assert!(buffer.batch(rows(&[3])).is_empty());
        buffer.barrier(2);
        assert!(buffer.batch(rows(&[4])).is_empty());
        assert_eq!(values(buffer.completed(1)), [1, 2]);
        assert_eq!(values(buffer.completed(2)), [3]);
        assert_eq!(values(buffer.finished()), [4]);
    }

    #[test]
    fn a_restart_keeps_the_rows_of_the_checkpoint_restored_and_drops_the_later_ones_which_come_again() {
        let mut buffer = ResultBuffer::new(true);
        buffer.batch(rows(&[1]));
        buffer.barrier(1);
        buffer.batch(rows(&[2]));
        buffer.barrier(2);
        buffer.batch(rows(&[3]));
        assert_eq!(values(buffer.completed(1)), [1]);
        // Checkpoint 2 completed, but the sink's TaskManager died before the
        // JobManager said so: the restart restores it, so its rows stand.
        assert_eq!(values(buffer.restarted(Some(2)).unwrap()), [2]);
        buffer.batch(rows(&[3]));
        assert_eq!(values(buffer.finished()), [3], "row 3 once, from the new attempt");
    }

    #[test]
    fn a_restart_from_the_start_drops_every_row_not_yet_shown() {
        let mut buffer = ResultBuffer::new(true);
        buffer.batch(rows(&[1]));
        buffer.barrier(1);
        assert!(buffer.restarted(None).unwrap().is_empty());
        assert!(buffer.finished().is_empty());
    }

    #[test]
    fn without_checkpoints_rows_show_at_once_and_a_restart_after_them_is_an_error() {
        let mut buffer = ResultBuffer::new(false);
        assert!(
            buffer.restarted(None).unwrap().is_empty(),
            "nothing shown yet: fine"
        );
        assert_eq!(values(buffer.batch(rows(&[1]))), [1]);
        let error = buffer.restarted(None).unwrap_err().to_string();
        assert!(error.contains("cannot be shown exactly once"), "{error}");
    }
}
