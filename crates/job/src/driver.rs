//! The coordinator thread of a job attempt: triggers checkpoints, collects
//! acknowledgements, writes `_metadata`, announces completion, and cleans
//! up; takes savepoints when the user asks ([`CoordinatorRequest`]). Its
//! decisions come from [`super::coordinator`]; this is the I/O. It reports
//! to its job through [`CoordinatorEvents`] and knows nothing else of it.
//!
//! Running sources are triggered and inject barriers; tasks that have
//! finished get no barriers any more and are asked directly (FLIP-147).
//! When every task has finished, the final checkpoint is taken; its
//! completion ([`TaskControl::JobFinished`]) lets tasks commit their last
//! output and end. If it fails, nothing is committed.
//!
//! A savepoint is a checkpoint written under the savepoint directory and never
//! deleted by weir. Completing one does not commit sinks (as in Flink, so a
//! failover to an older checkpoint cannot duplicate output), except when it
//! stops the job: then sources emit nothing after its barrier, and once it is
//! complete every task commits and ends without end-of-input processing.
//!
//! Once its attempt is over (failed or cancelled) the coordinator triggers,
//! persists and commits nothing more; it ends when every task and snapshot
//! writer of the attempt has, so the next attempt starts after it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::coordinator::{AckOutcome, CoordinatorState, FailureVerdict, PendingCheckpoint, Timing};
use crate::stats::CheckpointStats;
use crate::{Error, Result};
use weir_common::config::checkpoint::CheckpointConfig;
use weir_common::ids::JobId;
use weir_common::ids::{BarrierKind, CheckpointId};
use weir_common::time::wall_clock_millis;
use weir_runtime::control::{SnapshotFence, TaskControl, TaskReport, failpoint};
use weir_runtime::message::CheckpointBarrier;
use weir_state::checkpoint::metadata::{CheckpointMetadata, FORMAT_VERSION, TaskState};
use weir_state::checkpoint::remote;
use weir_state::checkpoint::storage::{checkpoint_dir, clean_up, savepoint_dir, write_metadata};
use weir_state::incremental::shared_file_checkpoint;

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

/// How the coordinator tells its job what happened.
pub trait CoordinatorEvents: Send + Sync {
    /// Checkpoint `id` was triggered.
    fn triggered(&self, id: CheckpointId);
    /// A checkpoint (or savepoint) is complete.
    fn completed(&self, stats: CheckpointStats);
    /// A periodic checkpoint failed, within the tolerance.
    fn checkpoint_failed(&self);
    /// The attempt must fail: too many failed checkpoints, or the
    /// coordinator itself failed.
    fn fail_attempt(&self, error: Error);
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

/// The coordinator of one attempt of a job.
pub struct CoordinatorDriver {
    /// Settings.
    pub config: CheckpointConfig,
    /// The run's directory, `<checkpoint dir>/<job name>/<job id>`.
    pub run_dir: PathBuf,
    /// The job's name.
    pub job_name: String,
    /// The run's id.
    pub job_id: JobId,
    /// Where to report.
    pub events: Arc<dyn CoordinatorEvents>,
    /// Shared with the attempt's snapshot writers.
    pub fence: Arc<SnapshotFence>,
    /// Key groups of the job.
    pub max_parallelism: usize,
    /// Every task, by task index.
    pub tasks: Vec<DriverTask>,
    /// Reports from the tasks; disconnected when every task and snapshot
    /// writer has ended.
    pub reports: Receiver<TaskReport>,
    /// Requests from the user (through the job handle).
    pub requests: Receiver<CoordinatorRequest>,
    /// The id of the first checkpoint.
    pub next_id: CheckpointId,
    /// The attempt, 0 first.
    pub attempt: u32,
}

/// What the coordinator tracks while it runs.
struct Running {
    state: CoordinatorState<Ack>,
    /// Per checkpoint in flight: its barrier, and when it was triggered.
    triggered: BTreeMap<CheckpointId, (CheckpointBarrier, Instant)>,
    savepoints: BTreeMap<CheckpointId, PendingSavepoint>,
    origin: Instant,
}

impl Running {
    fn now(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }
}

impl CoordinatorDriver {
    /// Runs until every task (and snapshot writer) of the attempt has ended.
    pub fn run(self) {
        let millis = |d: Duration| d.as_millis() as u64;
        let origin = Instant::now();
        let mut run = Running {
            state: CoordinatorState::new(
                Timing {
                    interval: self.config.interval.map(millis),
                    timeout: millis(self.config.timeout),
                    min_pause: millis(self.config.min_pause),
                    max_concurrent: self.config.max_concurrent,
                    tolerable_failures: self.config.tolerable_failures,
                },
                self.tasks.len(),
                self.next_id,
                0,
            ),
            triggered: BTreeMap::new(),
            savepoints: BTreeMap::new(),
            origin,
        };
        loop {
            fail::fail_point!(&failpoint("coordinator-loop", &self.job_name));
            if self.fence.attempt_over() {
                self.attempt_over(&mut run);
            } else {
                if let Some(id) = run.state.trigger_if_due(run.now()) {
                    self.trigger(&mut run, id, BarrierKind::Checkpoint, false);
                }
                for id in run.state.expired(run.now()) {
                    let reason = format!("checkpoint {id} expired before it completed");
                    self.failed(&mut run, id, reason);
                }
            }
            let wake = [run.state.next_trigger_at(), run.state.next_expiry_at()]
                .into_iter()
                .flatten()
                .min()
                .map_or(Duration::from_millis(100), |at| {
                    Duration::from_millis(at.saturating_sub(run.now()).clamp(1, 100))
                });
            let received = crossbeam_channel::select! {
                recv(self.reports) -> report => report.map_err(|_| RecvTimeoutError::Disconnected),
                recv(self.requests) -> request => {
                    if let Ok(CoordinatorRequest::Savepoint { stop, reply }) = request {
                        self.savepoint(&mut run, stop, reply);
                    }
                    continue;
                }
                default(wake) => Err(RecvTimeoutError::Timeout),
            };
            match received {
                Ok(report) => self.on_report(&mut run, report),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    // Every task has ended: checkpoints in flight never complete.
                    for (id, savepoint) in std::mem::take(&mut run.savepoints) {
                        let _ = savepoint.reply.send(Err(Error::Execution(format!(
                            "savepoint {id} did not complete: the job ended first"
                        ))));
                    }
                    if let Err(e) = clean_up(&self.run_dir, self.config.num_retained, &[]) {
                        eprintln!("[WARN] checkpoint clean-up: {e}");
                    }
                    return;
                }
            }
        }
    }

    /// The attempt failed or was cancelled: abort everything in flight.
    fn attempt_over(&self, run: &mut Running) {
        run.state.stop();
        for id in run.state.pending_ids() {
            self.fence.abort(id);
            run.state.failed(id);
            run.triggered.remove(&id);
        }
        for (id, savepoint) in std::mem::take(&mut run.savepoints) {
            let _ = savepoint.reply.send(Err(Error::Execution(format!(
                "savepoint {id} did not complete: the job failed or was cancelled"
            ))));
        }
    }

    fn on_report(&self, run: &mut Running, report: TaskReport) {
        match report {
            TaskReport::Acknowledge {
                checkpoint,
                task,
                state,
                blocked,
                alignment,
                channel_state_bytes,
            } => {
                let ack = Ack {
                    task,
                    state,
                    blocked,
                    alignment,
                    channel_state_bytes,
                    received: Instant::now(),
                };
                if let AckOutcome::AllAcknowledged(done) = run.state.acknowledge(checkpoint, task, ack)
                    && !self.fence.attempt_over()
                {
                    self.complete(run, done);
                }
            }
            TaskReport::Decline {
                checkpoint, reason, ..
            } => {
                if run.state.pending_ids().contains(&checkpoint) {
                    self.failed(run, checkpoint, reason);
                }
            }
            TaskReport::Finished { task } => {
                for id in run.state.task_finished(task) {
                    if let Some((barrier, _)) = run.triggered.get(&id) {
                        let _ = self.tasks[task].control.send(TaskControl::Trigger(*barrier));
                    }
                }
            }
        }
    }

    /// Every task acknowledged: persist, then announce.
    fn complete(&self, run: &mut Running, done: PendingCheckpoint<Ack>) {
        let id = done.id;
        let (barrier, triggered) = run.triggered.remove(&id).unwrap_or((
            CheckpointBarrier {
                id,
                kind: BarrierKind::Checkpoint,
                timestamp: wall_clock_millis(),
            },
            Instant::now(),
        ));
        let acks: Vec<Ack> = done.acks.into_values().collect();
        let stats = match self.persist(&barrier, triggered, &acks) {
            Ok(stats) => stats,
            Err(e) => return self.failed(run, id, e.to_string()),
        };
        for old in run.state.completed(id, run.now()) {
            run.triggered.remove(&old);
            self.fence.abort(old);
        }
        let dir = stats.dir.clone();
        self.events.completed(stats);
        match run.savepoints.remove(&id) {
            None if done.is_final => {
                run.state.stop();
                self.broadcast(TaskControl::JobFinished(id));
            }
            None => self.broadcast(TaskControl::Complete(id)),
            Some(savepoint) => {
                if savepoint.stop {
                    run.state.stop();
                    self.broadcast(TaskControl::Stop(id));
                }
                let _ = savepoint.reply.send(Ok(dir));
            }
        }
        if let Err(e) = clean_up(&self.run_dir, self.config.num_retained, &run.state.pending_ids()) {
            eprintln!("[WARN] checkpoint clean-up: {e}");
        }
    }

    fn broadcast(&self, message: TaskControl) {
        for task in &self.tasks {
            let _ = task.control.send(message.clone());
        }
    }

    fn savepoint(&self, run: &mut Running, stop: bool, reply: Sender<Result<PathBuf>>) {
        if run.state.all_finished() || self.fence.attempt_over() {
            let _ = reply.send(Err(Error::Execution(
                "no savepoint: the job has reached the end of its input, or is ending".into(),
            )));
            return;
        }
        let (id, aborted) = run.state.trigger_savepoint(run.now());
        for old in aborted {
            run.triggered.remove(&old);
            self.fence.abort(old);
            let _ = remote::remove_dir_all(&checkpoint_dir(&self.run_dir, old));
        }
        self.trigger(run, id, BarrierKind::Savepoint, stop);
        run.savepoints.insert(id, PendingSavepoint { stop, reply });
    }

    /// Sends checkpoint `id`'s trigger to the running sources (a stopping
    /// savepoint pauses them) and to every finished task.
    fn trigger(&self, run: &mut Running, id: CheckpointId, kind: BarrierKind, stop: bool) {
        let barrier = CheckpointBarrier {
            id,
            kind,
            timestamp: wall_clock_millis(),
        };
        run.triggered.insert(id, (barrier, Instant::now()));
        self.events.triggered(id);
        for (index, task) in self.tasks.iter().enumerate() {
            let message = if run.state.is_finished(index) {
                TaskControl::Trigger(barrier)
            } else if !task.is_source {
                continue;
            } else if stop {
                TaskControl::TriggerStop(barrier)
            } else {
                TaskControl::Trigger(barrier)
            };
            let _ = task.control.send(message);
        }
    }

    /// Writes `_metadata`: the checkpoint is complete once it is there.
    fn persist(
        &self,
        barrier: &CheckpointBarrier,
        triggered: Instant,
        acks: &[Ack],
    ) -> Result<CheckpointStats> {
        fail::fail_point!(&failpoint("checkpoint-persist", &self.job_name), |_| {
            Err(Error::Execution("failpoint checkpoint-persist".into()))
        });
        let id = barrier.id;
        let dir = match barrier.kind {
            BarrierKind::Checkpoint => checkpoint_dir(&self.run_dir, id),
            BarrierKind::Savepoint => {
                savepoint_dir(&self.config.savepoint_dir, &self.job_name, &self.job_id, id)
            }
        };
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let metadata = CheckpointMetadata {
            format: FORMAT_VERSION,
            job: self.job_name.clone(),
            job_id: Some(self.job_id.to_string()),
            checkpoint_id: id,
            kind: barrier.kind,
            trigger_time: barrier.timestamp,
            completion_time: wall_clock_millis(),
            max_parallelism: self.max_parallelism,
            tasks: acks.iter().map(|a| a.state.clone()).collect(),
        };
        write_metadata(&dir, &metadata)?;
        let files = || {
            metadata
                .tasks
                .iter()
                .flat_map(|t| &t.operators)
                .flat_map(|o| o.files())
        };
        // Incremental checkpoints refer to files of earlier ones: written
        // now are the files named by this checkpoint (Flink's checkpointed
        // data size), the full size counts them all.
        let written_now = |path: &str| {
            !path.starts_with("../")
                || std::path::Path::new(path)
                    .file_name()
                    .and_then(|n| shared_file_checkpoint(&n.to_string_lossy()))
                    == Some(id)
        };
        let state_bytes: u64 = files().filter(|f| written_now(&f.path)).map(|f| f.bytes).sum();
        let full_state_bytes: u64 = files().map(|f| f.bytes).sum();
        let channel_state_bytes: u64 = acks.iter().map(|a| a.channel_state_bytes).sum();
        Ok(CheckpointStats {
            id,
            attempt: self.attempt,
            kind: barrier.kind,
            dir,
            trigger_time: barrier.timestamp,
            duration: triggered.elapsed(),
            state_bytes: state_bytes + channel_state_bytes,
            full_state_bytes: full_state_bytes + channel_state_bytes,
            channel_state_bytes,
            max_blocked: acks.iter().map(|a| a.blocked).max().unwrap_or_default(),
            max_alignment: acks.iter().map(|a| a.alignment).max().unwrap_or_default(),
            ack_delays: acks
                .iter()
                .map(|a| (a.task, a.received.saturating_duration_since(triggered)))
                .collect(),
        })
    }

    /// Checkpoint `id` failed: its writers stop, its files go, and the job
    /// goes on or fails as the tolerance says.
    fn failed(&self, run: &mut Running, id: CheckpointId, reason: String) {
        self.fence.abort(id);
        run.triggered.remove(&id);
        if let Some(savepoint) = run.savepoints.remove(&id) {
            let dir = savepoint_dir(&self.config.savepoint_dir, &self.job_name, &self.job_id, id);
            let _ = remote::remove_dir_all(&dir);
            run.state.failed(id);
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
        let _ = remote::remove_dir_all(&checkpoint_dir(&self.run_dir, id));
        self.events.checkpoint_failed();
        if run.state.failed(id) == FailureVerdict::FailJob {
            self.events.fail_attempt(Error::Execution(format!(
                "checkpoint {id} failed ({reason}), and that exceeds \
                 'execution.checkpointing.tolerable-failed-checkpoints' = {}",
                self.config.tolerable_failures
            )));
        } else {
            eprintln!("[WARN] checkpoint {id} failed: {reason}; the job goes on");
        }
    }
}
