//! The JobManager: TaskManagers register their slots and send heartbeats; a submitted job is placed on free slots and each TaskManager told to run its part; a lost TaskManager or a failed part fails the job.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::{Receiver, Sender};
use std::path::PathBuf;
use std::pin::Pin;
use tokio::runtime::Handle;
use tonic::transport::Server;
use weir_common::config::SessionConfig;

use tonic::{Request, Response, Status};
use weir_common::config::checkpoint::{CheckpointConfig, RestartStrategy, SAVEPOINT_PATH};
use weir_common::ids::JobId;
use weir_job::driver::{CoordinatorDriver, CoordinatorEvents, CoordinatorRequest, DriverTask};
use weir_job::placement::share_slots;
use weir_job::stats::CheckpointStats;
use weir_plan::graph::JobGraph;
use weir_plan::spec::NodeSpec;
use weir_plan::spec::PlanSpec;
use weir_runtime::control::{SnapshotFence, TaskControl, TaskReport};
use weir_state::checkpoint::storage::run_dir;
use weir_state::checkpoint::storage::{RestorePoint, resolve_restore};

use super::protocol::*;
use super::rpc::job_manager_server::{JobManager, JobManagerServer};
use super::rpc::task_manager_client::TaskManagerClient;
use super::{call_failed, status};
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

/// The JobManager's side of a running checkpoint coordinator.
#[derive(Debug)]
struct CoordinatorLink {
    /// Task reports from the TaskManagers; dropped when the attempt ends,
    /// which ends the coordinator.
    reports: Sender<TaskReport>,
    /// Kept for savepoints (not offered yet on a cluster).
    _requests: Sender<CoordinatorRequest>,
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
                job.state = JobState::Failed;
                job.error = Some(error);
            }
        }
        let running: Vec<String> = std::mem::take(&mut job.running).into_iter().collect();
        let attempt = job.attempt;
        job.attempt += u32::from(restart.is_some());
        self.release(job_id);
        let cancel = (running.iter())
            .filter_map(|id| self.task_managers.iter().find(|t| t.id == *id))
            .map(|t| (t.control.clone(), attempt))
            .collect();
        Failure { cancel, restart }
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
    async fn place(&self, parallelisms: &[usize]) -> Result<(Vec<Vec<String>>, HashMap<String, usize>)> {
        let deadline = Instant::now() + SLOT_REQUEST_TIMEOUT;
        loop {
            let placed = {
                let state = self.state();
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
        let job = state.jobs.get_mut(job_id)?;
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
        let Some((spec, attempt)) = self.state().jobs.get(job_id).map(|j| (j.spec.clone(), j.attempt)) else {
            return Ok(());
        };
        let (mut config, mut next_id) = (spec.submit.config.clone(), 1);
        if let Some(dir) = spec.run_dir.as_ref().filter(|d| attempt > 0 && d.exists())
            && let RestorePoint::Checkpoint { dir, metadata, .. } = resolve_restore(dir, &spec.submit.name)?
        {
            eprintln!(
                "[INFO] Job {job_id}: attempt {attempt} restores {}.",
                dir.display()
            );
            config.push((SAVEPOINT_PATH.to_string(), dir.display().to_string()));
            next_id = metadata.checkpoint_id + 1;
        }
        let (hosts, slots) = self.place(&spec.parallelisms).await?;
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
            let mut client = TaskManagerClient::connect(format!("http://{control}"))
                .await
                .map_err(|e| Error::Execution(format!("cannot reach TaskManager {control}: {e}")))?;
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
                let mut cancels = Vec::new();
                {
                    let mut state = self.state();
                    let Some(index) = state.task_managers.iter().position(|t| t.id == id) else {
                        continue;
                    };
                    let entry = state.task_managers.remove(index);
                    eprintln!(
                        "[WARN] TaskManager {} ({}) lost: no heartbeat for {:?}.",
                        entry.id, entry.data, self.heartbeats.timeout
                    );
                    let jobs: Vec<String> = (state.jobs.iter())
                        .filter(|(_, j)| j.parts.contains_key(&id))
                        .map(|(job_id, _)| job_id.clone())
                        .collect();
                    for job_id in jobs {
                        let why = format!(
                            "TaskManager {} ({}) was lost: no heartbeat for {:?}",
                            entry.id, entry.data, self.heartbeats.timeout
                        );
                        cancels.push((job_id.clone(), state.fail(&job_id, why)));
                    }
                }
                for (job_id, failure) in cancels {
                    self.failed(job_id, failure).await;
                }
            }
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

impl JobManagerService {
    /// Starts the checkpoint coordinator of attempt `attempt` of a job
    /// placed on `hosts` (data addresses), when its settings turn
    /// checkpoints on. It runs here; its messages to each task go to the
    /// TaskManager that runs it, and the tasks' reports come back through
    /// [`JobManager::report`].
    fn start_coordinator(
        &self,
        job_id: &str,
        spec: &JobSpec,
        hosts: &[Vec<String>],
        attempt: u32,
        next_id: u64,
    ) -> Result<Option<CoordinatorLink>> {
        let (submit, sources) = (&spec.submit, &spec.sources);
        let mut session = SessionConfig::default();
        submit
            .config
            .iter()
            .for_each(|(k, v)| session.set_unchecked(k, v));
        let Some(config) = CheckpointConfig::from_session(&session)? else {
            return Ok(None);
        };
        let id = JobId::parse(job_id).ok_or_else(|| Error::Internal(format!("not a job id: {job_id}")))?;
        let dir = run_dir(&config.dir, &submit.name, &id);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let controls: HashMap<String, String> = (self.state().task_managers.iter())
            .map(|t| (t.data.clone(), t.control.clone()))
            .collect();
        let control_of = |host: &String| {
            (controls.get(host).cloned())
                .ok_or_else(|| Error::Execution(format!("TaskManager {host} went away")))
        };
        let mut tasks = Vec::new();
        for (vertex, subtasks) in hosts.iter().enumerate() {
            for host in subtasks {
                let (control, line) = crossbeam_channel::unbounded();
                let task = tasks.len();
                self.forward_controls(control_of(host)?, job_id, attempt, task, line);
                tasks.push(DriverTask {
                    control,
                    is_source: sources[vertex],
                });
            }
        }
        let attempt_over = Arc::new(AtomicBool::new(false));
        let mut every: Vec<String> = hosts.iter().flatten().map(control_of).collect::<Result<_>>()?;
        every.sort();
        every.dedup();
        let fence = self.fence(attempt_over.clone(), job_id, attempt, every);
        let (reports, report_lines) = crossbeam_channel::unbounded();
        let (requests, request_lines) = crossbeam_channel::unbounded();
        let driver = CoordinatorDriver {
            requests: request_lines,
            config,
            run_dir: dir,
            job_name: submit.name.clone(),
            job_id: id,
            events: Arc::new(JobEvents {
                service: self.clone(),
                job_id: job_id.to_string(),
            }),
            fence: Arc::new(fence),
            max_parallelism: session.max_parallelism()?,
            tasks,
            reports: report_lines,
            next_id,
            attempt,
        };
        std::thread::Builder::new()
            .name(format!("weir-coordinator-{job_id}"))
            .spawn(move || driver.run())
            .map_err(|e| Error::Execution(format!("cannot start the checkpoint coordinator: {e}")))?;
        Ok(Some(CoordinatorLink {
            reports,
            _requests: requests,
            attempt_over,
        }))
    }

    /// Sends what the coordinator says to task `task` to the TaskManager at
    /// `control`, until the coordinator ends.
    fn forward_controls(
        &self,
        control: String,
        job_id: &str,
        attempt: u32,
        task: usize,
        line: Receiver<TaskControl>,
    ) {
        let (runtime, job_id) = (self.runtime.clone(), job_id.to_string());
        std::thread::spawn(move || {
            let mut client = None;
            for message in line.iter() {
                if client.is_none() {
                    client = runtime
                        .block_on(TaskManagerClient::connect(format!("http://{control}")))
                        .ok();
                }
                let Some(client) = client.as_mut() else {
                    eprintln!("[WARN] Cannot reach TaskManager {control} for task {task} of job {job_id}");
                    continue;
                };
                let message = Control {
                    job_id: job_id.clone(),
                    attempt,
                    task,
                    control: message,
                };
                if let Err(e) = runtime.block_on(client.control(message)) {
                    eprintln!(
                        "[WARN] Task {task} of job {job_id} missed a message: {}",
                        e.message()
                    );
                }
            }
        });
    }

    /// The coordinator's fence: its aborts also reach the snapshot
    /// writers on the TaskManagers at `controls`.
    fn fence(
        &self,
        attempt_over: Arc<AtomicBool>,
        job_id: &str,
        attempt: u32,
        controls: Vec<String>,
    ) -> SnapshotFence {
        let (runtime, job_id) = (self.runtime.clone(), job_id.to_string());
        SnapshotFence::new(attempt_over).with_on_abort(move |checkpoint| {
            for control in &controls {
                let control = control.clone();
                let abort = AbortCheckpoint {
                    job_id: job_id.clone(),
                    attempt,
                    checkpoint,
                };
                runtime.spawn(async move {
                    if let Ok(mut client) = TaskManagerClient::connect(format!("http://{control}")).await {
                        let _ = client.abort(abort).await;
                    }
                });
            }
        })
    }
}

/// What the coordinator of a job on the cluster tells the JobManager.
struct JobEvents {
    service: JobManagerService,
    job_id: String,
}

impl CoordinatorEvents for JobEvents {
    fn triggered(&self, _id: u64) {}

    fn completed(&self, stats: CheckpointStats) {
        eprintln!(
            "[INFO] Checkpoint {} of job {} complete: {}.",
            stats.id,
            self.job_id,
            stats.dir.display()
        );
    }

    fn checkpoint_failed(&self) {
        eprintln!("[WARN] A checkpoint of job {} failed.", self.job_id);
    }

    fn fail_attempt(&self, error: Error) {
        let failure = self.service.state().fail(&self.job_id, error.to_string());
        let (service, job_id) = (self.service.clone(), self.job_id.clone());
        self.service
            .runtime
            .spawn(async move { service.failed(job_id, failure).await });
    }
}

/// Tells TaskManagers (control addresses) to cancel their parts of a job.
async fn cancel_parts(job_id: &str, parts: Vec<(String, u32)>) {
    for (control, attempt) in parts {
        let cancel = CancelPart {
            job_id: job_id.to_string(),
            attempt,
        };
        if let Ok(mut client) = TaskManagerClient::connect(format!("http://{control}")).await {
            // A TaskManager that cannot be told stops its tasks itself when
            // it loses the JobManager.
            let _ = client.cancel(cancel).await;
        }
    }
}

#[tonic::async_trait]
impl JobManager for JobManagerService {
    async fn register(
        &self,
        request: Request<RegisterTaskManager>,
    ) -> std::result::Result<Response<Registered>, Status> {
        let tm = request.into_inner();
        if tm.slots == 0 {
            return Err(Status::invalid_argument(
                "a TaskManager must offer at least one slot",
            ));
        }
        eprintln!(
            "[INFO] TaskManager {} registered: {} slot(s), data {}.",
            tm.id, tm.slots, tm.data
        );
        let mut state = self.state();
        state.task_managers.retain(|t| t.id != tm.id);
        state.task_managers.push(TaskManagerEntry {
            id: tm.id,
            control: tm.control,
            data: tm.data,
            slots: tm.slots,
            used: 0,
            last_seen: Instant::now(),
        });
        Ok(Response::new(Registered {
            heartbeat_interval_ms: self.heartbeats.interval.as_millis() as u64,
            heartbeat_timeout_ms: self.heartbeats.timeout.as_millis() as u64,
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<Heartbeat>,
    ) -> std::result::Result<Response<HeartbeatAck>, Status> {
        let id = request.into_inner().id;
        let mut state = self.state();
        let entry = state.task_managers.iter_mut().find(|t| t.id == id);
        let known = entry.is_some();
        if let Some(entry) = entry {
            entry.last_seen = Instant::now();
        }
        Ok(Response::new(HeartbeatAck { known }))
    }

    async fn submit(&self, request: Request<SubmitJob>) -> std::result::Result<Response<Submitted>, Status> {
        let submit = request.into_inner();
        let plan: PlanSpec = serde_json::from_str(&submit.plan)
            .map_err(|e| Status::invalid_argument(format!("not a weir plan: {e}")))?;
        let graph = JobGraph::of(plan);
        let parallelisms: Vec<usize> = graph.vertices.iter().map(|v| v.parallelism).collect();
        let sources: Vec<bool> = (graph.vertices.iter())
            .map(|v| matches!(graph.plan.nodes[v.nodes[0]].kind, NodeSpec::Source(_)))
            .collect();
        let id = JobId::new();
        let job_id = id.to_string();
        let mut session = SessionConfig::default();
        submit
            .config
            .iter()
            .for_each(|(k, v)| session.set_unchecked(k, v));
        let checkpoints = CheckpointConfig::from_session(&session).map_err(status)?;
        let restart = RestartStrategy::from_session(
            &session,
            checkpoints.as_ref().is_some_and(|c| c.interval.is_some()),
        )
        .map_err(status)?;
        let spec = JobSpec {
            run_dir: checkpoints.map(|c| run_dir(&c.dir, &submit.name, &id)),
            submit: submit.clone(),
            parallelisms: parallelisms.clone(),
            sources,
            restart,
        };
        self.state().jobs.insert(
            job_id.clone(),
            JobEntry {
                spec: Arc::new(spec),
                restarts: 0,
                name: submit.name.clone(),
                state: JobState::Created,
                error: None,
                attempt: 0,
                parts: HashMap::new(),
                running: BTreeSet::new(),
                coordinator: None,
            },
        );
        eprintln!(
            "[INFO] Job {job_id} ({}) submitted: {} vertices.",
            submit.name,
            parallelisms.len()
        );
        tokio::spawn(self.clone().schedule(job_id.clone()));
        Ok(Response::new(Submitted { job_id }))
    }

    async fn job(&self, request: Request<JobQuery>) -> std::result::Result<Response<JobReport>, Status> {
        let job_id = request.into_inner().job_id;
        let state = self.state();
        let job = state
            .jobs
            .get(&job_id)
            .ok_or_else(|| Status::not_found(format!("no job {job_id}")))?;
        Ok(Response::new(JobReport {
            job_id,
            name: job.name.clone(),
            state: job.state,
            error: job.error.clone(),
        }))
    }

    async fn report(&self, request: Request<Report>) -> std::result::Result<Response<Done>, Status> {
        let Report {
            job_id,
            attempt,
            report,
        } = request.into_inner();
        let state = self.state();
        let link = (state.jobs.get(&job_id))
            .filter(|j| j.attempt == attempt)
            .and_then(|j| j.coordinator.as_ref());
        if let Some(link) = link {
            // A coordinator that has ended takes no more reports.
            let _ = link.reports.send(report);
        }
        Ok(Response::new(Done {}))
    }

    async fn part_ended(&self, request: Request<PartEnded>) -> std::result::Result<Response<Done>, Status> {
        let ended = request.into_inner();
        let failure = {
            let mut state = self.state();
            let Some(job) = state
                .jobs
                .get_mut(&ended.job_id)
                .filter(|j| j.attempt == ended.attempt)
            else {
                return Ok(Response::new(Done {}));
            };
            job.running.remove(&ended.task_manager);
            match ended.error {
                Some(error) => state.fail(
                    &ended.job_id,
                    format!("on TaskManager {}: {error}", ended.task_manager),
                ),
                None if job.running.is_empty() && !job.state.is_terminal() => {
                    job.state = JobState::Finished;
                    job.coordinator = None;
                    eprintln!("[INFO] Job {} ({}) finished.", ended.job_id, job.name);
                    state.release(&ended.job_id);
                    Failure::default()
                }
                None => Failure::default(),
            }
        };
        self.failed(ended.job_id, failure).await;
        Ok(Response::new(Done {}))
    }
}

/// Runs a JobManager on `bind` (`host:port`) until the process ends.
pub fn run(bind: &str, heartbeats: Heartbeats) -> Result<()> {
    let runtime = weir_flight::runtime("weir-jobmanager")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|e| Error::Execution(format!("cannot listen on {bind}: {e}")))?;
        let address = listener
            .local_addr()
            .map_err(|e| Error::Execution(e.to_string()))?;
        eprintln!("[INFO] JobManager listening on {address}.");
        let service = JobManagerService {
            state: Arc::default(),
            heartbeats,
            runtime: Handle::current(),
        };
        tokio::spawn(service.clone().watch_heartbeats());
        Server::builder()
            .add_service(JobManagerServer::new(service))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .map_err(|e| Error::Execution(format!("the JobManager's server stopped: {e}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, seen: Instant) -> TaskManagerEntry {
        TaskManagerEntry {
            id: id.into(),
            control: String::new(),
            data: String::new(),
            slots: 1,
            used: 0,
            last_seen: seen,
        }
    }

    #[test]
    fn a_task_manager_is_lost_only_after_a_whole_timeout_of_silence() {
        let start = Instant::now();
        let tms = [
            entry("quiet", start),
            entry("recent", start + Duration::from_secs(40)),
        ];
        let timeout = Duration::from_secs(50);
        assert!(lost_task_managers(&tms, start + Duration::from_secs(50), timeout).is_empty());
        assert_eq!(
            lost_task_managers(&tms, start + Duration::from_secs(51), timeout),
            ["quiet"]
        );
    }

    fn job(restart: RestartStrategy) -> JobEntry {
        let submit = SubmitJob {
            name: "n".into(),
            plan: String::new(),
            config: Vec::new(),
        };
        JobEntry {
            spec: Arc::new(JobSpec {
                submit,
                parallelisms: vec![2],
                sources: vec![true],
                restart,
                run_dir: None,
            }),
            restarts: 0,
            name: "n".into(),
            state: JobState::Running,
            error: None,
            attempt: 3,
            parts: HashMap::from([("a".to_string(), 2)]),
            running: BTreeSet::from(["a".to_string()]),
            coordinator: None,
        }
    }

    fn state_with(job: JobEntry) -> State {
        let mut state = State::default();
        let mut a = entry("a", Instant::now());
        (a.control, a.slots, a.used) = ("ctl-a".into(), 2, 2);
        state.task_managers.push(a);
        state.jobs.insert("j".into(), job);
        state
    }

    #[test]
    fn a_failed_attempt_gives_its_slots_back_and_names_the_parts_to_cancel() {
        let mut state = state_with(job(RestartStrategy::None));
        let failure = state.fail("j", "boom".into());
        assert_eq!(failure.cancel, [("ctl-a".to_string(), 3)]);
        assert_eq!(failure.restart, None);
        assert_eq!(state.task_managers[0].used, 0);
        assert_eq!(state.jobs["j"].state, JobState::Failed);
        assert_eq!(
            state.fail("j", "again".into()),
            Failure::default(),
            "a job fails once"
        );
    }

    #[test]
    fn a_fixed_delay_strategy_restarts_as_the_next_attempt_until_its_restarts_are_used_up() {
        let delay = Duration::from_millis(300);
        let mut state = state_with(job(RestartStrategy::FixedDelay { attempts: 1, delay }));
        assert_eq!(state.fail("j", "boom".into()).restart, Some(delay));
        let job = &state.jobs["j"];
        assert_eq!(
            (job.state, job.attempt, job.restarts),
            (JobState::Restarting, 4, 1)
        );
        assert_eq!(state.fail("j", "while restarting".into()), Failure::default());
        state.jobs.get_mut("j").unwrap().state = JobState::Running;
        assert_eq!(
            state.fail("j", "again".into()).restart,
            None,
            "one restart allowed"
        );
        assert_eq!(state.jobs["j"].state, JobState::Failed);
    }
}
