//! The JobManager: TaskManagers register their slots and send heartbeats; a submitted job is placed on free slots and each TaskManager told to run its part; a lost TaskManager or a failed part fails the job.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir_common::config::checkpoint::display_path;

use crossbeam_channel::Sender;
use tokio::runtime::Handle;
use tonic::transport::{Channel, Endpoint, Server};
use weir_common::config::checkpoint::{RestartStrategy, SAVEPOINT_PATH};
use weir_job::driver::CoordinatorRequest;
use weir_job::placement::share_slots;
use weir_job::stats::CheckpointStats;
use weir_runtime::control::TaskReport;
use weir_state::checkpoint::storage::{RestorePoint, resolve_restore};

use super::call_failed;
use super::protocol::*;
use super::rpc::job_manager_server::JobManagerServer;
use super::rpc::task_manager_client::TaskManagerClient;
use crate::{Error, Result};

/// Heartbeat settings (Flink's `heartbeat.interval` and `heartbeat.timeout`).
#[derive(Debug, Clone, Copy)]
pub struct Heartbeats {
    /// Between two heartbeats of a TaskManager (Flink: 10 s).
    pub interval: Duration,
    /// Silence after which a TaskManager is lost (Flink: 50 s).
    pub timeout: Duration,
}

impl Default for Heartbeats {
    fn default() -> Self {
        Heartbeats {
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(50),
        }
    }
}

/// How long a job waits for enough free slots (Flink's `slot.request.timeout`).
const SLOT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// A registered TaskManager.
#[derive(Debug, Clone)]
struct TaskManagerEntry {
    id: String,
    control: String,
    data: String,
    slots: usize,
    cpu_cores: usize,
    used: usize,
    last_seen: Instant,
}

/// A job and where its current attempt runs.
#[derive(Debug)]
struct JobEntry {
    /// What was submitted, and what a restart needs of it.
    spec: Arc<JobSpec>,
    /// Restarts so far.
    restarts: u32,
    name: String,
    state: JobState,
    error: Option<String>,
    attempt: u32,
    /// TaskManager id to the slots its part takes.
    parts: HashMap<String, usize>,
    /// TaskManagers whose part has not ended.
    running: BTreeSet<String>,
    /// With checkpoints: the line to the attempt's coordinator.
    coordinator: Option<CoordinatorLink>,
    /// When it was submitted, and when it ended.
    started: Instant,
    ended: Option<Instant>,
    /// Checkpoints and savepoints completed (of every attempt), oldest first.
    checkpoints: Vec<CheckpointStats>,
    /// Checkpoints that failed.
    failed_checkpoints: u64,
    /// The checkpoint the current attempt restored.
    restored: Option<u64>,
    /// The checkpoints its attempts restored, oldest first.
    restores: Vec<weir_job::stats::RestoreStats>,
    /// Where the current attempt's collect sink runs (a query's).
    result_host: Option<String>,
}

impl JobEntry {
    fn new(spec: Arc<JobSpec>) -> Self {
        JobEntry {
            name: spec.submit.name.clone(),
            spec,
            restarts: 0,
            state: JobState::Created,
            error: None,
            attempt: 0,
            parts: HashMap::new(),
            running: BTreeSet::new(),
            coordinator: None,
            started: Instant::now(),
            ended: None,
            checkpoints: Vec::new(),
            failed_checkpoints: 0,
            restored: None,
            restores: Vec::new(),
            result_host: None,
        }
    }

    /// The job is over, in `state`: its coordinator stops.
    fn end(&mut self, state: JobState) {
        self.state = state;
        self.ended = Some(Instant::now());
        if let Some(link) = self.coordinator.take() {
            link.attempt_over.store(true, Ordering::SeqCst);
        }
    }

    fn report(&self, job_id: &str) -> JobReport {
        JobReport {
            job_id: job_id.to_string(),
            name: self.name.clone(),
            state: self.state,
            error: self.error.clone(),
            restarts: self.restarts,
            checkpoints: self.checkpoints.len(),
            attempt: self.attempt,
            restored: self.restored,
            completed: self.checkpoints.iter().map(|c| c.id).max(),
            result_host: self.result_host.clone(),
            checkpointed: self.spec.checkpointed,
        }
    }
}

/// A submitted job, as every attempt of it runs.
#[derive(Debug)]
struct JobSpec {
    submit: SubmitJob,
    /// By vertex.
    parallelisms: Vec<usize>,
    /// By vertex: whether it starts with a source.
    sources: Vec<bool>,
    /// What happens when an attempt fails.
    restart: RestartStrategy,
    /// The exchanges between the job graph's vertices.
    edges: Vec<weir_job::metrics::EdgeView>,
    /// The vertex of a query's collect sink.
    result_vertex: Option<usize>,
    /// Whether checkpoints are taken (an interval is set).
    checkpointed: bool,
    /// With checkpoints: the run's directory, where restarts restore from.
    run_dir: Option<PathBuf>,
}

/// What follows an attempt's failure: the parts to cancel, and the delay
/// before the next attempt (`None`: the job has failed).
#[derive(Debug, Default, PartialEq)]
struct Failure {
    cancel: Vec<(String, u32)>,
    restart: Option<Duration>,
}

/// Whether a job whose attempt failed after `restarts` restarts starts
/// again, and after how long (Flink's fixed-delay strategy).
fn after_failure(strategy: &RestartStrategy, restarts: u32) -> Option<Duration> {
    match strategy {
        RestartStrategy::FixedDelay { attempts, delay } if restarts < *attempts => Some(*delay),
        _ => None,
    }
}

/// `error` with each TaskManager's data address it names (a lost Flight
/// connection's peer) followed by that TaskManager's id, so that a
/// failure caused by a lost TaskManager says which one.
fn name_task_managers(error: &str, task_managers: &[TaskManagerEntry]) -> String {
    task_managers.iter().fold(error.to_string(), |error, tm| {
        // The colon after the address: a port is never taken for another's prefix.
        let node = format!("the node at {}:", tm.data);
        error.replace(&node, &format!("TaskManager {} at {}:", tm.id, tm.data))
    })
}

/// The JobManager's side of a running checkpoint coordinator.
#[derive(Debug)]
struct CoordinatorLink {
    /// Task reports from the TaskManagers; dropped when the attempt ends,
    /// which ends the coordinator.
    reports: Sender<TaskReport>,
    /// Savepoints asked for by users.
    requests: Sender<CoordinatorRequest>,
    /// Set when the attempt fails: the coordinator stops.
    attempt_over: Arc<AtomicBool>,
}

#[derive(Debug, Default)]
struct State {
    /// In the order they registered.
    task_managers: Vec<TaskManagerEntry>,
    jobs: HashMap<String, JobEntry>,
}

impl State {
    fn free_slots(&self) -> Vec<(String, usize)> {
        (self.task_managers.iter())
            .map(|t| (t.data.clone(), t.slots - t.used))
            .collect()
    }

    /// Ends the job's current attempt as failed (unless the job is over),
    /// frees its slots and decides what follows: the parts to cancel, and
    /// a restart when the strategy allows one (the attempt number moves on,
    /// so the old attempt's reports are ignored).
    fn fail(&mut self, job_id: &str, error: String) -> Failure {
        let error = name_task_managers(&error, &self.task_managers);
        let Some(job) = self.jobs.get_mut(job_id) else {
            return Failure::default();
        };
        if job.state.is_terminal() || job.state == JobState::Restarting {
            return Failure::default();
        }
        if let Some(link) = job.coordinator.take() {
            link.attempt_over.store(true, Ordering::SeqCst);
        }
        let restart = after_failure(&job.spec.restart, job.restarts);
        match restart {
            Some(delay) => {
                job.restarts += 1;
                eprintln!(
                    "[WARN] Job {job_id} ({}) failed: {error}; restarting in {delay:?} (restart {}).",
                    job.name, job.restarts
                );
                job.state = JobState::Restarting;
            }
            None => {
                eprintln!("[ERROR] Job {job_id} ({}) failed: {error}", job.name);
                job.end(JobState::Failed);
                job.error = Some(error);
            }
        }
        let attempt = job.attempt;
        job.attempt += u32::from(restart.is_some());
        // Known again once the next attempt is deployed.
        (job.restored, job.result_host) = (None, None);
        let cancel = self.stop_parts(job_id, attempt);
        Failure { cancel, restart }
    }

    /// Cancels a job that is not over: the parts to cancel (TaskManager
    /// control address, attempt), or `None` when there is no such job.
    fn cancel(&mut self, job_id: &str) -> Option<Vec<(String, u32)>> {
        let job = self.jobs.get_mut(job_id)?;
        if job.state.is_terminal() {
            return Some(Vec::new());
        }
        eprintln!("[INFO] Job {job_id} ({}) cancelled.", job.name);
        job.end(JobState::Canceled);
        let attempt = job.attempt;
        Some(self.stop_parts(job_id, attempt))
    }

    /// Frees the slots of a job's attempt `attempt`; its parts still
    /// running (TaskManager control address, attempt), to cancel.
    fn stop_parts(&mut self, job_id: &str, attempt: u32) -> Vec<(String, u32)> {
        let running = (self.jobs.get_mut(job_id))
            .map(|j| std::mem::take(&mut j.running))
            .unwrap_or_default();
        self.release(job_id);
        (running.iter())
            .filter_map(|id| self.task_managers.iter().find(|t| t.id == *id))
            .map(|t| (t.control.clone(), attempt))
            .collect()
    }

    /// Gives the slots of a job's parts back to their TaskManagers.
    fn release(&mut self, job_id: &str) {
        let parts = self
            .jobs
            .get_mut(job_id)
            .map(|j| std::mem::take(&mut j.parts))
            .unwrap_or_default();
        for (tm, slots) in parts {
            if let Some(entry) = self.task_managers.iter_mut().find(|t| t.id == tm) {
                entry.used = entry.used.saturating_sub(slots);
            }
        }
    }
}

/// The JobManager's service.
#[derive(Clone)]
pub struct JobManagerService {
    state: Arc<Mutex<State>>,
    heartbeats: Heartbeats,
    runtime: Handle,
}

impl JobManagerService {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Places a job on free slots, waiting up to [`SLOT_REQUEST_TIMEOUT`]:
    /// each TaskManager's data address and the slots its part takes, and
    /// the hosts of every subtask.
    async fn place(
        &self,
        job_id: &str,
        parallelisms: &[usize],
    ) -> Result<(Vec<Vec<String>>, HashMap<String, usize>)> {
        let deadline = Instant::now() + SLOT_REQUEST_TIMEOUT;
        loop {
            let placed = {
                let state = self.state();
                if (state.jobs.get(job_id)).is_none_or(|j| j.state.is_terminal()) {
                    return Err(Error::Execution(format!(
                        "job {job_id} ended while it waited for slots"
                    )));
                }
                share_slots(parallelisms, &state.free_slots()).map(|placement| {
                    let widest = parallelisms
                        .iter()
                        .enumerate()
                        .max_by_key(|(_, p)| **p)
                        .map(|(i, _)| i);
                    let mut slots: HashMap<String, usize> = HashMap::new();
                    for host in widest.map(|i| &placement.hosts[i]).into_iter().flatten() {
                        *slots.entry(host.clone()).or_default() += 1;
                    }
                    (placement.hosts, slots)
                })
            };
            match placed {
                Ok(placed) => return Ok(placed),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// Takes the slots of a placement (by data address) for `job_id`; the
    /// TaskManagers' ids and control addresses, or `None` when one of them
    /// went away meanwhile.
    fn take_slots(&self, job_id: &str, slots: &HashMap<String, usize>) -> Option<Vec<(String, String)>> {
        let mut state = self.state();
        let mut taken = Vec::new();
        for (data, count) in slots {
            let entry = state.task_managers.iter().find(|t| t.data == *data)?;
            if entry.slots - entry.used < *count {
                return None;
            }
            taken.push((entry.id.clone(), entry.control.clone(), *count));
        }
        let job = state.jobs.get_mut(job_id).filter(|j| !j.state.is_terminal())?;
        job.parts = taken.iter().map(|(id, _, n)| (id.clone(), *n)).collect();
        job.running = taken.iter().map(|(id, _, _)| id.clone()).collect();
        job.state = JobState::Running;
        for (id, _, count) in &taken {
            if let Some(entry) = state.task_managers.iter_mut().find(|t| t.id == *id) {
                entry.used += count;
            }
        }
        Some(taken.into_iter().map(|(id, control, _)| (id, control)).collect())
    }

    /// Places the current attempt of job `job_id` and deploys its parts;
    /// a restart restores the latest complete checkpoint.
    fn schedule(self, job_id: String) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        // Boxed: a failed deployment schedules the next attempt, which may fail too.
        Box::pin(async move {
            let result = self.deploy(&job_id).await;
            if let Err(e) = result {
                let failure = self.state().fail(&job_id, e.to_string());
                self.failed(job_id, failure).await;
            }
        })
    }

    async fn deploy(&self, job_id: &str) -> Result<()> {
        let Some((spec, attempt)) = (self.state().jobs.get(job_id))
            .filter(|j| !j.state.is_terminal())
            .map(|j| (j.spec.clone(), j.attempt))
        else {
            return Ok(());
        };
        let (mut config, mut next_id) = (spec.submit.config.clone(), 1);
        let mut restored = None;
        if let Some(dir) = spec.run_dir.as_ref().filter(|d| attempt > 0 && d.exists())
            && let RestorePoint::Checkpoint { dir, metadata, .. } = resolve_restore(dir, &spec.submit.name)?
        {
            eprintln!(
                "[INFO] Job {job_id}: attempt {attempt} restores {}.",
                display_path(&dir)
            );
            config.push((SAVEPOINT_PATH.to_string(), display_path(&dir)));
            next_id = metadata.checkpoint_id + 1;
            restored = Some(weir_job::stats::RestoreStats::now(
                metadata.checkpoint_id,
                metadata.kind,
                &dir,
            ));
        }
        let (hosts, slots) = self.place(job_id, &spec.parallelisms).await?;
        if let Some(job) = self.state().jobs.get_mut(job_id) {
            job.restored = restored.as_ref().map(|r| r.id);
            job.restores.extend(restored);
            job.result_host = spec.result_vertex.map(|v| hosts[v][0].clone());
        }
        let parts = self
            .take_slots(job_id, &slots)
            .ok_or_else(|| Error::Execution("a TaskManager went away while the job was placed".into()))?;
        let link = self.start_coordinator(job_id, &spec, &hosts, attempt, next_id)?;
        if let Some(job) = self.state().jobs.get_mut(job_id) {
            job.coordinator = link;
        }
        for (_, control) in &parts {
            let deploy = DeployPart {
                job_id: job_id.to_string(),
                name: spec.submit.name.clone(),
                attempt,
                plan: spec.submit.plan.clone(),
                config: config.clone(),
                hosts: hosts.clone(),
            };
            let mut client = match task_manager(control).await {
                Ok(client) => client,
                Err(e) => {
                    // Nothing listens there: it is gone, whatever its heartbeats said.
                    self.lose(|t| t.control == *control, "it refused a connection")
                        .await;
                    return Err(e);
                }
            };
            client
                .deploy(deploy)
                .await
                .map_err(|s| call_failed(&format!("deploying on TaskManager {control}"), s))?;
        }
        eprintln!(
            "[INFO] Job {job_id} ({}) attempt {attempt} deployed on {} TaskManager(s).",
            spec.submit.name,
            parts.len()
        );
        Ok(())
    }

    /// After an attempt failed: cancels its parts, and starts the next
    /// attempt after the restart delay when there is one.
    async fn failed(&self, job_id: String, failure: Failure) {
        cancel_parts(&job_id, failure.cancel).await;
        if let Some(delay) = failure.restart {
            let service = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                service.schedule(job_id).await;
            });
        }
    }

    /// Fails the jobs of TaskManagers silent for longer than the timeout,
    /// and forgets those TaskManagers.
    async fn watch_heartbeats(self) {
        loop {
            tokio::time::sleep(self.heartbeats.interval.min(Duration::from_secs(1))).await;
            let lost = lost_task_managers(
                &self.state().task_managers,
                Instant::now(),
                self.heartbeats.timeout,
            );
            for id in lost {
                let why = format!("no heartbeat for {:?}", self.heartbeats.timeout);
                self.lose(|t| t.id == id, &why).await;
            }
        }
    }

    /// Forgets the TaskManager that `is_it` picks (it is lost: `why`) and
    /// fails the jobs that had a part on it. A TaskManager that is in fact
    /// alive learns from its next heartbeat that it was forgotten, stops
    /// its tasks and registers again.
    async fn lose(&self, is_it: impl Fn(&TaskManagerEntry) -> bool, why: &str) {
        let mut failures = Vec::new();
        {
            let mut state = self.state();
            let Some(index) = state.task_managers.iter().position(is_it) else {
                return;
            };
            let entry = state.task_managers.remove(index);
            eprintln!("[WARN] TaskManager {} ({}) lost: {why}.", entry.id, entry.data);
            let jobs: Vec<String> = (state.jobs.iter())
                .filter(|(_, j)| j.parts.contains_key(&entry.id))
                .map(|(job_id, _)| job_id.clone())
                .collect();
            for job_id in jobs {
                let error = format!("TaskManager {} ({}) was lost: {why}", entry.id, entry.data);
                failures.push((job_id.clone(), state.fail(&job_id, error)));
            }
        }
        for (job_id, failure) in failures {
            self.failed(job_id, failure).await;
        }
    }
}

/// The TaskManagers among `task_managers` last heard from longer than
/// `timeout` before `now`.
fn lost_task_managers(task_managers: &[TaskManagerEntry], now: Instant, timeout: Duration) -> Vec<String> {
    (task_managers.iter())
        .filter(|t| now.saturating_duration_since(t.last_seen) > timeout)
        .map(|t| t.id.clone())
        .collect()
}

/// How long the JobManager waits to connect to a TaskManager, and for its
/// answer to a call: a paused or cut-off TaskManager must not hold up the
/// JobManager (its loss is for the heartbeats to find).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A client of the TaskManager at `control` whose calls time out.
async fn task_manager(control: &str) -> Result<TaskManagerClient<Channel>> {
    let endpoint = Endpoint::from_shared(format!("http://{control}"))
        .map_err(|e| Error::Execution(format!("not an address: {control}: {e}")))?
        .connect_timeout(CALL_TIMEOUT)
        .timeout(CALL_TIMEOUT);
    let channel = (endpoint.connect().await)
        .map_err(|e| Error::Execution(format!("cannot reach TaskManager {control}: {e}")))?;
    Ok(TaskManagerClient::new(channel))
}

/// Tells TaskManagers (control addresses) to cancel their parts of a job,
/// all at once.
async fn cancel_parts(job_id: &str, parts: Vec<(String, u32)>) {
    let calls = parts.into_iter().map(|(control, attempt)| async move {
        let cancel = CancelPart {
            job_id: job_id.to_string(),
            attempt,
        };
        if let Ok(mut client) = task_manager(&control).await {
            // A TaskManager that cannot be told stops its tasks itself when
            // it loses the JobManager.
            let _ = client.cancel(cancel).await;
        }
    });
    futures::future::join_all(calls).await;
}

/// Runs a JobManager on `bind` (`host:port`) until the process ends; with
/// `rest`, its REST API and Prometheus metrics on that `host:port` too.
pub fn run(bind: &str, heartbeats: Heartbeats, rest: Option<&str>) -> Result<()> {
    let runtime = weir_flight::runtime("weir-jobmanager")?;
    let service = JobManagerService {
        state: Arc::default(),
        heartbeats,
        runtime: runtime.handle().clone(),
    };
    if let Some(rest) = rest {
        let address = crate::rest::serve_backend(rest, Arc::new(service.clone()))?;
        eprintln!("[INFO] JobManager REST API on http://{address}");
    }
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|e| Error::Execution(format!("cannot listen on {bind}: {e}")))?;
        let address = listener
            .local_addr()
            .map_err(|e| Error::Execution(e.to_string()))?;
        eprintln!("[INFO] JobManager listening on {address}.");
        tokio::spawn(service.clone().watch_heartbeats());
        Server::builder()
            .add_service(JobManagerServer::new(service))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .map_err(|e| Error::Execution(format!("the JobManager's server stopped: {e}")))
    })
}

mod coordinator;
mod grpc;
mod rest;
#[cfg(test)]
mod tests;
