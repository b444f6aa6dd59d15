//! Jobs: a graph of chained vertices expanded into subtasks, one thread each.
//!
//! The first attempt is built before `start` returns, so a setup error (a
//! missing file, an unwritable directory) fails the submission itself. Once
//! running, the first task error (or panic) fails the attempt: its other tasks
//! stop as their channels close. A supervisor thread then applies the restart
//! strategy: with `fixed-delay` (the default when checkpoints are on) it waits,
//! and deploys a new attempt restored from the latest complete checkpoint;
//! otherwise, or when attempts run out, the job fails with the root cause.
//!
//! ```text
//!   start ─► attempt 0 ─fails─► wait delay ─► attempt 1 (from chk-n) ─► ... ─► Finished
//!                                                        └─ no attempts left ─► Failed
//! ```

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::deploy::{Attempt, build_attempt};
use crate::driver::{CoordinatorDriver, CoordinatorEvents, CoordinatorRequest};
use crate::execution::ExecutionGraph;
use crate::metrics::{BackpressureSampler, JobMetrics, read_tasks};
pub use crate::settings::{JobSettings, JobStatus, RestoredCheckpoint, TaskInfo};
use crate::stats::CheckpointStats;
use crate::{Error, Result};
use weir_common::config::checkpoint::RestartStrategy;
use weir_common::ids::JobId;
use weir_common::ids::{BarrierKind, CheckpointId};
use weir_runtime::operator::TaskMetrics;
use weir_state::checkpoint::storage::read_metadata;

struct JobState {
    status: JobStatus,
    error: Option<Error>,
    error_text: Option<String>,
    user_cancelled: bool,
}

struct JobShared {
    id: u64,
    name: String,
    job_id: JobId,
    checkpoints: Mutex<Vec<CheckpointStats>>,
    failed_checkpoints: AtomicU64,
    restarts: AtomicU64,
    /// The checkpoints its attempts started from.
    restores: Mutex<Vec<crate::stats::RestoreStats>>,
    /// The id the next attempt's first checkpoint takes.
    next_checkpoint: AtomicU64,
    notes: Vec<String>,
    /// The running attempt's stop flag.
    cancel: Mutex<Arc<AtomicBool>>,
    /// The running attempt's checkpoint coordinator, when the job can snapshot.
    coordinator: Mutex<Option<crossbeam_channel::Sender<CoordinatorRequest>>>,
    state: Mutex<JobState>,
    done: Condvar,
    tasks: Vec<TaskInfo>,
    /// The exchanges between the job graph's vertices.
    edges: Vec<crate::metrics::EdgeView>,
    started: Instant,
    backpressure: Mutex<BackpressureSampler>,
}

/// A running (or finished) job: wait for it, cancel it, read its counters.
#[derive(Clone)]
pub struct JobHandle {
    shared: Arc<JobShared>,
}

impl std::fmt::Debug for JobHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JobHandle({}, {:?})", self.shared.name, self.status())
    }
}

static NEXT_JOB_ID: AtomicU64 = AtomicU64::new(1);

/// Errors that only say another task stopped first: never a job's root cause.
pub fn is_secondary(e: &Error) -> bool {
    matches!(e, Error::Execution(m) if m == "an upstream task stopped"
        || m == "a downstream task stopped"
        || m == "the job was cancelled")
        || e.to_string() == weir_runtime::task::coordinator_gone().to_string()
}

impl JobHandle {
    /// The job's id, unique in this process.
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The job's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// This run's id, unique across processes (Flink's job id); its
    /// checkpoints are under `<checkpoint dir>/<name>/<job id>/`.
    pub fn job_id(&self) -> &JobId {
        &self.shared.job_id
    }

    /// The current state.
    pub fn status(&self) -> JobStatus {
        self.shared.state.lock().expect("job state").status
    }

    /// Time since the job started.
    pub fn elapsed(&self) -> Duration {
        self.shared.started.elapsed()
    }

    /// Every subtask's counters (summed over attempts).
    pub fn tasks(&self) -> &[TaskInfo] {
        &self.shared.tasks
    }

    /// What the user should know about how the job started (what was restored).
    pub fn notes(&self) -> &[String] {
        &self.shared.notes
    }

    /// The checkpoints completed so far, oldest first.
    pub fn completed_checkpoints(&self) -> Vec<CheckpointStats> {
        self.shared.checkpoints.lock().expect("checkpoint stats").clone()
    }

    /// How many checkpoints failed (expired, declined, or not written).
    pub fn failed_checkpoints(&self) -> u64 {
        self.shared.failed_checkpoints.load(Ordering::Relaxed)
    }

    /// How many times the job restarted after a failure.
    pub fn restarts(&self) -> u64 {
        self.shared.restarts.load(Ordering::Relaxed)
    }

    pub(crate) fn checkpoint_triggered(&self, id: CheckpointId) {
        self.shared.next_checkpoint.fetch_max(id + 1, Ordering::SeqCst);
    }

    pub(crate) fn checkpoint_completed(&self, stats: CheckpointStats) {
        self.shared
            .checkpoints
            .lock()
            .expect("checkpoint stats")
            .push(stats);
    }

    pub(crate) fn checkpoint_failed(&self) {
        self.shared.failed_checkpoints.fetch_add(1, Ordering::Relaxed);
    }

    /// The job's figures now: per task (records, backpressure since the
    /// previous call, watermark, late rows) and per completed checkpoint.
    pub fn metrics(&self) -> JobMetrics {
        let tasks = read_tasks(
            self.tasks(),
            &mut self.shared.backpressure.lock().expect("backpressure sampler"),
        );
        JobMetrics {
            id: self.id(),
            name: self.name().to_string(),
            status: self.status(),
            uptime: self.elapsed(),
            restarts: self.restarts(),
            checkpoints: self.completed_checkpoints(),
            failed_checkpoints: self.failed_checkpoints(),
            restores: self.shared.restores.lock().expect("restores").clone(),
            tasks,
            edges: self.shared.edges.clone(),
        }
    }

    /// Takes a savepoint and returns its directory; the job goes on. Needs a
    /// checkpoint or savepoint directory (`execution.checkpointing.dir` or
    /// `execution.checkpointing.savepoint-dir`).
    pub fn trigger_savepoint(&self) -> Result<PathBuf> {
        self.savepoint(false)
    }

    /// Stops the job with a savepoint (Flink's stop-with-savepoint): sources
    /// emit nothing after its barrier, and once it is complete the output
    /// before it is committed and the job ends [`JobStatus::Finished`]
    /// without firing open windows, so restoring the savepoint resumes the
    /// job exactly. Returns the savepoint's directory once the job has ended.
    pub fn stop_with_savepoint(&self) -> Result<PathBuf> {
        let dir = self.savepoint(true)?;
        self.wait()?;
        Ok(dir)
    }

    fn savepoint(&self, stop: bool) -> Result<PathBuf> {
        if self.status() != JobStatus::Running {
            return Err(Error::Execution(format!(
                "job {} is not running ({:?}): no savepoint",
                self.id(),
                self.status()
            )));
        }
        let coordinator = self.shared.coordinator.lock().expect("job coordinator").clone();
        let Some(coordinator) = coordinator else {
            return Err(Error::Execution(format!(
                "job {} cannot take savepoints: it was started without \
                 'execution.checkpointing.savepoint-dir' or 'execution.checkpointing.dir'",
                self.id()
            )));
        };
        let (reply, answer) = crossbeam_channel::bounded(1);
        coordinator
            .send(CoordinatorRequest::Savepoint { stop, reply })
            .map_err(|_| Error::Execution(format!("job {} has ended: no savepoint", self.id())))?;
        answer.recv().map_err(|_| {
            Error::Execution(format!("job {} ended before its savepoint completed", self.id()))
        })?
    }

    /// Stops the job; `wait` then returns [`JobStatus::Cancelled`].
    pub fn cancel(&self) {
        {
            let mut state = self.shared.state.lock().expect("job state");
            if state.status == JobStatus::Running {
                state.user_cancelled = true;
            }
        }
        self.shared
            .cancel
            .lock()
            .expect("job cancel")
            .store(true, Ordering::SeqCst);
        self.shared.done.notify_all();
    }

    fn user_cancelled(&self) -> bool {
        self.shared.state.lock().expect("job state").user_cancelled
    }

    /// Blocks until the job ends. A failed job returns its root-cause error (the
    /// first waiter gets the error itself, later ones a copy of its message).
    pub fn wait(&self) -> Result<JobStatus> {
        let mut state = self.shared.state.lock().expect("job state");
        while state.status == JobStatus::Running {
            state = self.shared.done.wait(state).expect("job state");
        }
        match state.status {
            JobStatus::Failed => Err(state
                .error
                .take()
                .unwrap_or_else(|| Error::Execution(state.error_text.clone().unwrap_or_default()))),
            status => Ok(status),
        }
    }

    /// Like `wait`, but gives up after `timeout` and returns the status then.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<JobStatus> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.state.lock().expect("job state");
        while state.status == JobStatus::Running {
            let now = Instant::now();
            if now >= deadline {
                return Ok(JobStatus::Running);
            }
            state = self
                .shared
                .done
                .wait_timeout(state, deadline - now)
                .expect("job state")
                .0;
        }
        drop(state);
        self.wait()
    }

    /// Ends the job: finished, cancelled, or failed with `error`.
    fn end(&self, error: Option<Error>) {
        let mut state = self.shared.state.lock().expect("job state");
        state.status = if state.user_cancelled {
            JobStatus::Cancelled
        } else if let Some(error) = error {
            state.error_text = Some(error.to_string());
            state.error = Some(error);
            JobStatus::Failed
        } else {
            JobStatus::Finished
        };
        self.shared.done.notify_all();
    }
}

/// How one attempt ended, as its tasks report it.
pub struct AttemptShared {
    cancel: Arc<AtomicBool>,
    state: Mutex<AttemptState>,
    done: Condvar,
}

struct AttemptState {
    running: usize,
    /// The root cause: the first error that is not a consequence of another.
    error: Option<Error>,
    /// Any error, when only consequences were seen.
    secondary: Option<Error>,
}

impl AttemptShared {
    fn new(cancel: Arc<AtomicBool>, running: usize) -> Self {
        AttemptShared {
            cancel,
            state: Mutex::new(AttemptState {
                running,
                error: None,
                secondary: None,
            }),
            done: Condvar::new(),
        }
    }

    /// A task ended; an error fails the attempt and stops its other tasks.
    fn task_ended(&self, result: Result<()>) {
        let mut state = self.state.lock().expect("attempt state");
        state.running -= 1;
        if let Err(e) = result {
            self.record(&mut state, e);
        }
        if state.running == 0 {
            self.done.notify_all();
        }
    }

    fn record(&self, state: &mut AttemptState, e: Error) {
        if !is_secondary(&e) && state.error.is_none() {
            state.error = Some(e);
        } else if state.secondary.is_none() {
            state.secondary = Some(e);
        }
        self.cancel.store(true, Ordering::SeqCst);
    }

    /// Fails the attempt from outside its tasks (the checkpoint coordinator).
    pub(crate) fn fail(&self, error: Error) {
        let mut state = self.state.lock().expect("attempt state");
        self.record(&mut state, error);
    }

    /// Waits for every task; the attempt's error, if it failed.
    fn wait(&self) -> Option<Error> {
        let mut state = self.state.lock().expect("attempt state");
        while state.running > 0 {
            state = self.done.wait(state).expect("attempt state");
        }
        state.error.take().or_else(|| state.secondary.take())
    }

    /// An error recorded after [`AttemptShared::wait`] returned (by the
    /// coordinator, which ends after the tasks).
    fn late_error(&self) -> Option<Error> {
        let mut state = self.state.lock().expect("attempt state");
        state.error.take().or_else(|| state.secondary.take())
    }
}

/// Starts a job: builds and launches its first attempt; a supervisor thread
/// restarts it as the restart strategy says.
pub fn start(graph: ExecutionGraph, settings: JobSettings) -> Result<JobHandle> {
    let first = build_attempt(&graph, &settings, settings.restore.as_ref(), &[], 0)?;
    let handle = JobHandle {
        shared: Arc::new(JobShared {
            id: NEXT_JOB_ID.fetch_add(1, Ordering::Relaxed),
            name: settings.name.clone(),
            job_id: settings.job_id.clone(),
            checkpoints: Mutex::new(Vec::new()),
            failed_checkpoints: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            restores: Mutex::new(settings.restore.iter().map(restore_stats).collect()),
            next_checkpoint: AtomicU64::new(
                settings
                    .restore
                    .as_ref()
                    .map_or(1, |r| r.metadata.checkpoint_id + 1),
            ),
            notes: settings.notes.clone(),
            edges: crate::metrics::EdgeView::of_execution(&graph.edges),
            cancel: Mutex::new(first.cancel.clone()),
            coordinator: Mutex::new(None),
            state: Mutex::new(JobState {
                status: JobStatus::Running,
                error: None,
                error_text: None,
                user_cancelled: false,
            }),
            done: Condvar::new(),
            backpressure: Mutex::new(BackpressureSampler::new(Instant::now(), first.infos.len())),
            tasks: first.infos.clone(),
            started: Instant::now(),
        }),
    };
    if first.tasks.is_empty() {
        handle.end(None);
        return Ok(handle);
    }
    let attempt = launch(&handle, first)?;
    let supervisor = handle.clone();
    std::thread::Builder::new()
        .name(format!("weir-{}-supervisor", handle.id()))
        .spawn(move || supervise(supervisor, graph, settings, attempt))
        .map_err(|e| Error::Execution(format!("could not start the job supervisor: {e}")))?;
    Ok(handle)
}

/// Waits for each attempt, restarting failed ones while the strategy allows.
/// An attempt is over when its tasks and its coordinator (which outlives
/// its snapshot writers) have ended: only then does the next one start.
fn supervise(handle: JobHandle, graph: ExecutionGraph, settings: JobSettings, mut attempt: Launched) {
    let mut restarts = 0u32;
    loop {
        let outcome = attempt.shared.wait();
        if let Some(coordinator) = attempt.coordinator.take() {
            let _ = coordinator.join();
        }
        let Some(error) = outcome.or_else(|| attempt.shared.late_error()) else {
            return handle.end(None);
        };
        let (attempts, delay) = match settings.restart {
            RestartStrategy::FixedDelay { attempts, delay } => (attempts, delay),
            RestartStrategy::None => return handle.end(Some(error)),
        };
        if handle.user_cancelled() || restarts >= attempts {
            return handle.end(Some(error));
        }
        restarts += 1;
        handle.shared.restarts.fetch_add(1, Ordering::Relaxed);
        eprintln!(
            "[WARN] job {} ({}) failed: {error}; restarting in {:?} (restart {restarts})",
            handle.id(),
            handle.name(),
            delay
        );
        // Wait the delay, unless the job is cancelled meanwhile.
        {
            let deadline = Instant::now() + delay;
            let mut state = handle.shared.state.lock().expect("job state");
            while !state.user_cancelled && Instant::now() < deadline {
                state = handle
                    .shared
                    .done
                    .wait_timeout(state, deadline - Instant::now())
                    .expect("job state")
                    .0;
            }
            if state.user_cancelled {
                drop(state);
                return handle.end(Some(error));
            }
        }
        let restore = match latest_checkpoint(&handle, &settings) {
            Ok(restore) => restore,
            Err(e) => return handle.end(Some(e)),
        };
        let metrics: Vec<Arc<TaskMetrics>> = handle.tasks().iter().map(|t| t.metrics.clone()).collect();
        let next = match build_attempt(&graph, &settings, restore.as_ref(), &metrics, restarts) {
            Ok(next) => next,
            Err(e) => return handle.end(Some(e)),
        };
        if let Some(restore) = &restore {
            handle
                .shared
                .restores
                .lock()
                .expect("restores")
                .push(restore_stats(restore));
        }
        *handle.shared.cancel.lock().expect("job cancel") = next.cancel.clone();
        attempt = match launch(&handle, next) {
            Ok(attempt) => attempt,
            Err(e) => return handle.end(Some(e)),
        };
    }
}

/// The checkpoint a restart starts from: the latest periodic checkpoint this
/// job completed (not a savepoint: its output was not committed, as in
/// Flink), else the one the job started from, else none.
fn latest_checkpoint(handle: &JobHandle, settings: &JobSettings) -> Result<Option<RestoredCheckpoint>> {
    let completed = handle.completed_checkpoints();
    match completed.iter().rev().find(|c| c.kind == BarrierKind::Checkpoint) {
        Some(stats) => Ok(Some(RestoredCheckpoint {
            metadata: read_metadata(&stats.dir)?,
            dir: stats.dir.clone(),
        })),
        None => Ok(settings.restore.clone()),
    }
}

/// The figures of restoring `restore` now.
fn restore_stats(restore: &RestoredCheckpoint) -> crate::stats::RestoreStats {
    crate::stats::RestoreStats::now(
        restore.metadata.checkpoint_id,
        restore.metadata.kind,
        &restore.dir,
    )
}

/// A running attempt: how it ends, and its coordinator thread.
struct Launched {
    shared: Arc<AttemptShared>,
    coordinator: Option<std::thread::JoinHandle<()>>,
}

/// The coordinator's reports, to the job and its running attempt.
struct AttemptEvents {
    job: JobHandle,
    attempt: Arc<AttemptShared>,
}

impl CoordinatorEvents for AttemptEvents {
    fn triggered(&self, id: CheckpointId) {
        self.job.checkpoint_triggered(id);
    }

    fn completed(&self, stats: CheckpointStats) {
        self.job.checkpoint_completed(stats);
    }

    fn checkpoint_failed(&self) {
        self.job.checkpoint_failed();
    }

    fn fail_attempt(&self, error: Error) {
        self.attempt.fail(error);
    }
}

/// Starts the threads of an attempt (and its checkpoint coordinator). A
/// panic in the coordinator fails the attempt.
fn launch(handle: &JobHandle, attempt: Attempt) -> Result<Launched> {
    let shared = Arc::new(AttemptShared::new(attempt.cancel.clone(), attempt.tasks.len()));
    let max_parallelism = attempt.max_parallelism;
    let mut coordinator = None;
    if let Some(parts) = attempt.driver {
        let (requests, requests_receiver) = crossbeam_channel::unbounded();
        *handle.shared.coordinator.lock().expect("job coordinator") = Some(requests);
        let events = Arc::new(AttemptEvents {
            job: handle.clone(),
            attempt: shared.clone(),
        });
        let driver = CoordinatorDriver {
            requests: requests_receiver,
            config: parts.config,
            run_dir: parts.run_dir,
            job_name: handle.name().to_string(),
            job_id: handle.job_id().clone(),
            events: events.clone(),
            fence: parts.fence,
            max_parallelism,
            tasks: parts.tasks,
            reports: parts.reports,
            next_id: handle.shared.next_checkpoint.load(Ordering::SeqCst),
            attempt: attempt.number,
        };
        let thread = std::thread::Builder::new()
            .name(format!("weir-{}-coordinator", handle.id()))
            .spawn(move || {
                if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| driver.run())) {
                    events.fail_attempt(Error::Execution(format!(
                        "the checkpoint coordinator panicked: {}",
                        panic_message(panic.as_ref())
                    )));
                }
            })
            .map_err(|e| Error::Execution(format!("could not start the checkpoint coordinator: {e}")))?;
        coordinator = Some(thread);
    }
    for (index, task) in attempt.tasks.into_iter().enumerate() {
        let attempt_shared = shared.clone();
        let thread_name = format!("weir-{}-{index}", handle.id());
        let spawned = std::thread::Builder::new().name(thread_name).spawn(move || {
            let name = task.name.clone();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.run()))
                .unwrap_or_else(|panic| {
                    Err(Error::Execution(format!(
                        "task {name} panicked: {}",
                        panic_message(panic.as_ref())
                    )))
                });
            attempt_shared.task_ended(result);
        });
        if let Err(e) = spawned {
            shared.fail(Error::Execution(format!("could not start a task thread: {e}")));
            shared.task_ended(Ok(()));
        }
    }
    Ok(Launched { shared, coordinator })
}

/// The text of a panic's payload.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
