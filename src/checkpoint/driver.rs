//! The coordinator thread of a job: triggers checkpoints at the sources,
//! collects acknowledgements, writes `_metadata`, announces completion, and
//! cleans up; takes savepoints when the user asks ([`CoordinatorRequest`]).
//! Its decisions come from [`super::coordinator`]; this is the I/O.
//!
//! A savepoint is a checkpoint written under the savepoint directory and never
//! deleted by weir. Completing one does not commit sinks (as in Flink, so a
//! failover to an older checkpoint cannot duplicate output), except when it
//! stops the job: then sources emit nothing after its barrier, and once it is
//! complete every task commits and ends without end-of-input processing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::CheckpointConfig;
use super::coordinator::{AckOutcome, CoordinatorState, FailureVerdict, Timing};
use super::metadata::{CheckpointMetadata, FORMAT_VERSION, TaskState};
use super::storage::{checkpoint_dir, clean_up, savepoint_dir, write_metadata};
use crate::runtime::control::{TaskControl, TaskReport};
use crate::runtime::job::{AttemptShared, CheckpointStats};
use crate::runtime::message::{BarrierKind, CheckpointBarrier, CheckpointId};
use crate::runtime::operator::wall_clock_millis;
use crate::{Error, JobHandle, Result};

/// What the user asks of a running job's coordinator.
#[derive(Debug)]
pub enum CoordinatorRequest {
    /// Take a savepoint; with `stop`, end the job with it.
    Savepoint {
        /// Stop the job once the savepoint is complete.
        stop: bool,
        /// Gets the savepoint's directory, or why there is none.
        reply: Sender<Result<PathBuf>>,
    },
}

/// A savepoint in flight: whether it stops the job, and who waits for it.
struct PendingSavepoint {
    stop: bool,
    reply: Sender<Result<PathBuf>>,
}

/// The coordinator's line to one task.
#[derive(Debug)]
pub struct DriverTask {
    /// Where its control messages go.
    pub control: Sender<TaskControl>,
    /// True for source tasks, which inject barriers.
    pub is_source: bool,
}

/// Acknowledgement data kept per task until the checkpoint completes.
#[derive(Debug)]
struct Ack {
    task: usize,
    state: TaskState,
    blocked: Duration,
    alignment: Duration,
    channel_state_bytes: u64,
    received: Instant,
}

/// The coordinator of one running job.
pub struct CoordinatorDriver {
    /// Settings.
    pub config: CheckpointConfig,
    /// `<checkpoint dir>/<job name>`.
    pub job_dir: PathBuf,
    /// The job, to report to.
    pub job: JobHandle,
    /// The running attempt, to fail when checkpoints fail too often.
    pub attempt: Arc<AttemptShared>,
    /// Key groups of the job.
    pub max_parallelism: usize,
    /// Every task, by task index.
    pub tasks: Vec<DriverTask>,
    /// Reports from the tasks; disconnected when every task has ended.
    pub reports: Receiver<TaskReport>,
    /// Requests from the user (through the job handle).
    pub requests: Receiver<CoordinatorRequest>,
    /// The id of the first checkpoint.
    pub next_id: CheckpointId,
}

impl CoordinatorDriver {
    /// Runs until every task has ended.
    pub fn run(self) {
        let origin = Instant::now();
        let now = || origin.elapsed().as_millis() as u64;
        let millis = |d: Duration| d.as_millis() as u64;
        let mut state: CoordinatorState<Ack> = CoordinatorState::new(
            Timing {
                interval: self.config.interval.map(millis),
                timeout: millis(self.config.timeout),
                min_pause: millis(self.config.min_pause),
                max_concurrent: self.config.max_concurrent,
                tolerable_failures: self.config.tolerable_failures,
            },
            self.tasks.len(),
            self.next_id,
            now(),
        );
        let mut trigger_times: std::collections::BTreeMap<CheckpointId, (i64, Instant)> = Default::default();
        let mut finished: std::collections::BTreeMap<usize, TaskState> = Default::default();
        let mut savepoints: BTreeMap<CheckpointId, PendingSavepoint> = BTreeMap::new();
        loop {
            if let Some(id) = state.trigger_if_due(now()) {
                trigger_times.insert(id, (wall_clock_millis(), Instant::now()));
                self.job.checkpoint_triggered(id);
                self.trigger(id);
            }
            for id in state.expired(now()) {
                trigger_times.remove(&id);
                let reason = format!("checkpoint {id} expired before it completed");
                self.failed(&mut state, &mut savepoints, id, reason);
            }
            let wake = [state.next_trigger_at(), state.next_expiry_at()]
                .into_iter()
                .flatten()
                .min()
                .map_or(Duration::from_millis(100), |at| {
                    Duration::from_millis(at.saturating_sub(now()).max(1))
                });
            let received = crossbeam_channel::select! {
                recv(self.reports) -> report => report.map_err(|_| RecvTimeoutError::Disconnected),
                recv(self.requests) -> request => {
                    if let Ok(CoordinatorRequest::Savepoint { stop, reply }) = request {
                        let (id, aborted) = state.trigger_savepoint(now());
                        for old in aborted {
                            trigger_times.remove(&old);
                            let _ = std::fs::remove_dir_all(checkpoint_dir(&self.job_dir, old));
                        }
                        trigger_times.insert(id, (wall_clock_millis(), Instant::now()));
                        self.job.checkpoint_triggered(id);
                        self.trigger_savepoint(id, stop);
                        savepoints.insert(id, PendingSavepoint { stop, reply });
                    }
                    continue;
                }
                default(wake) => Err(RecvTimeoutError::Timeout),
            };
            let report = match received {
                Ok(report) => report,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => {
                    // Every task has ended: checkpoints still in flight never complete.
                    for (id, savepoint) in std::mem::take(&mut savepoints) {
                        let _ = savepoint.reply.send(Err(Error::Execution(format!(
                            "savepoint {id} did not complete: the job ended first"
                        ))));
                    }
                    if let Err(e) = clean_up(&self.job_dir, self.config.num_retained, &[]) {
                        eprintln!("[WARN] checkpoint clean-up: {e}");
                    }
                    return;
                }
            };
            match report {
                TaskReport::Acknowledge {
                    checkpoint,
                    task,
                    state: task_state,
                    blocked,
                    alignment,
                    channel_state_bytes,
                } => {
                    let ack = Ack {
                        task,
                        state: task_state,
                        blocked,
                        alignment,
                        channel_state_bytes,
                        received: Instant::now(),
                    };
                    if let AckOutcome::AllAcknowledged(done) = state.acknowledge(checkpoint, task, ack) {
                        let (trigger_time, triggered) = trigger_times
                            .remove(&checkpoint)
                            .unwrap_or((wall_clock_millis(), Instant::now()));
                        let acks: Vec<Ack> = done.acks.into_values().collect();
                        let kind = if done.savepoint {
                            BarrierKind::Savepoint
                        } else {
                            BarrierKind::Checkpoint
                        };
                        match self.persist(checkpoint, kind, trigger_time, triggered, &acks) {
                            Ok(stats) => {
                                for old in state.completed(checkpoint, now()) {
                                    trigger_times.remove(&old);
                                }
                                let dir = stats.dir.clone();
                                self.job.checkpoint_completed(stats);
                                match savepoints.remove(&checkpoint) {
                                    None => {
                                        for task in &self.tasks {
                                            let _ = task.control.send(TaskControl::Complete(checkpoint));
                                        }
                                    }
                                    Some(savepoint) => {
                                        if savepoint.stop {
                                            state.stop();
                                            for task in &self.tasks {
                                                let _ = task.control.send(TaskControl::Stop(checkpoint));
                                            }
                                        }
                                        let _ = savepoint.reply.send(Ok(dir));
                                    }
                                }
                                if let Err(e) =
                                    clean_up(&self.job_dir, self.config.num_retained, &state.pending_ids())
                                {
                                    eprintln!("[WARN] checkpoint clean-up: {e}");
                                }
                            }
                            Err(e) => self.failed(&mut state, &mut savepoints, checkpoint, e.to_string()),
                        }
                    }
                }
                TaskReport::Decline {
                    checkpoint, reason, ..
                } => {
                    if state.pending_ids().contains(&checkpoint) {
                        trigger_times.remove(&checkpoint);
                        self.failed(&mut state, &mut savepoints, checkpoint, reason);
                    }
                }
                TaskReport::SourceFinished { .. } => {
                    for id in state.source_finished() {
                        trigger_times.remove(&id);
                        let _ = std::fs::remove_dir_all(checkpoint_dir(&self.job_dir, id));
                        if let Some(savepoint) = savepoints.remove(&id) {
                            let dir = savepoint_dir(&self.config.savepoint_dir, self.job.name(), id);
                            let _ = std::fs::remove_dir_all(dir);
                            let _ = savepoint.reply.send(Err(Error::Execution(format!(
                                "savepoint {id} did not complete: a source reached the end of its input first"
                            ))));
                        }
                    }
                }
                TaskReport::Finished {
                    task,
                    state: final_state,
                } => {
                    finished.insert(task, final_state);
                    if finished.len() == self.tasks.len() {
                        let id = state.take_final_id();
                        let received = Instant::now();
                        let acks: Vec<Ack> = std::mem::take(&mut finished)
                            .into_iter()
                            .map(|(task, state)| Ack {
                                task,
                                state,
                                blocked: Duration::ZERO,
                                alignment: Duration::ZERO,
                                channel_state_bytes: 0,
                                received,
                            })
                            .collect();
                        for (id, savepoint) in std::mem::take(&mut savepoints) {
                            let _ = savepoint.reply.send(Err(Error::Execution(format!(
                                "savepoint {id} did not complete: the job reached the end of its input first"
                            ))));
                        }
                        let kind = BarrierKind::Checkpoint;
                        match self.persist(id, kind, wall_clock_millis(), Instant::now(), &acks) {
                            Ok(stats) => {
                                state.completed(id, now());
                                self.job.checkpoint_completed(stats);
                            }
                            // The output is committed all the same: the job is done.
                            Err(e) => eprintln!("[WARN] the final checkpoint {id} failed: {e}"),
                        }
                        if let Err(e) = clean_up(&self.job_dir, self.config.num_retained, &[]) {
                            eprintln!("[WARN] checkpoint clean-up: {e}");
                        }
                        for task in &self.tasks {
                            let _ = task.control.send(TaskControl::JobFinished(id));
                        }
                    }
                }
            }
        }
    }

    fn trigger_savepoint(&self, id: CheckpointId, stop: bool) {
        let barrier = CheckpointBarrier {
            id,
            kind: BarrierKind::Savepoint,
            timestamp: wall_clock_millis(),
        };
        for task in self.tasks.iter().filter(|t| t.is_source) {
            let message = if stop {
                TaskControl::TriggerStop(barrier)
            } else {
                TaskControl::Trigger(barrier)
            };
            let _ = task.control.send(message);
        }
    }

    fn trigger(&self, id: CheckpointId) {
        let barrier = CheckpointBarrier {
            id,
            kind: BarrierKind::Checkpoint,
            timestamp: wall_clock_millis(),
        };
        for task in self.tasks.iter().filter(|t| t.is_source) {
            let _ = task.control.send(TaskControl::Trigger(barrier));
        }
    }

    /// Writes `_metadata`: the checkpoint is complete once it is there.
    fn persist(
        &self,
        id: CheckpointId,
        kind: BarrierKind,
        trigger_time: i64,
        triggered: Instant,
        acks: &[Ack],
    ) -> crate::Result<CheckpointStats> {
        let dir = match kind {
            BarrierKind::Checkpoint => checkpoint_dir(&self.job_dir, id),
            BarrierKind::Savepoint => savepoint_dir(&self.config.savepoint_dir, self.job.name(), id),
        };
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let metadata = CheckpointMetadata {
            format: FORMAT_VERSION,
            job: self.job.name().to_string(),
            checkpoint_id: id,
            kind,
            trigger_time,
            completion_time: wall_clock_millis(),
            max_parallelism: self.max_parallelism,
            tasks: acks.iter().map(|a| a.state.clone()).collect(),
        };
        write_metadata(&dir, &metadata)?;
        let state_bytes: u64 = metadata
            .tasks
            .iter()
            .flat_map(|t| &t.operators)
            .filter_map(|o| o.file.as_ref())
            .map(|f| f.bytes)
            .sum();
        let channel_state_bytes: u64 = acks.iter().map(|a| a.channel_state_bytes).sum();
        Ok(CheckpointStats {
            id,
            kind,
            dir,
            trigger_time,
            duration: triggered.elapsed(),
            state_bytes: state_bytes + channel_state_bytes,
            channel_state_bytes,
            max_blocked: acks.iter().map(|a| a.blocked).max().unwrap_or_default(),
            max_alignment: acks.iter().map(|a| a.alignment).max().unwrap_or_default(),
            ack_delays: acks
                .iter()
                .map(|a| (a.task, a.received.saturating_duration_since(triggered)))
                .collect(),
        })
    }

    fn failed(
        &self,
        state: &mut CoordinatorState<Ack>,
        savepoints: &mut BTreeMap<CheckpointId, PendingSavepoint>,
        id: CheckpointId,
        reason: String,
    ) {
        if let Some(savepoint) = savepoints.remove(&id) {
            let dir = savepoint_dir(&self.config.savepoint_dir, self.job.name(), id);
            let _ = std::fs::remove_dir_all(&dir);
            state.failed(id);
            if savepoint.stop {
                // The sources paused for it: the job goes on as it was.
                for task in self.tasks.iter().filter(|t| t.is_source) {
                    let _ = task.control.send(TaskControl::Resume);
                }
            }
            let _ = savepoint
                .reply
                .send(Err(Error::Execution(format!("savepoint {id} failed: {reason}"))));
            return;
        }
        self.job.checkpoint_failed();
        let dir = checkpoint_dir(&self.job_dir, id);
        let _ = std::fs::remove_dir_all(&dir);
        if state.failed(id) == FailureVerdict::FailJob {
            self.attempt.fail(Error::Execution(format!(
                "checkpoint {id} failed ({reason}), and that exceeds \
                 'execution.checkpointing.tolerable-failed-checkpoints' = {}",
                self.config.tolerable_failures
            )));
        } else {
            eprintln!("[WARN] checkpoint {id} failed: {reason}; the job goes on");
        }
    }
}
