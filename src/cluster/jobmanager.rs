//! The JobManager: TaskManagers register their slots and send heartbeats; a submitted job is placed on free slots and each TaskManager told to run its part; a lost TaskManager or a failed part fails the job.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tonic::transport::Server;
use tonic::{Request, Response, Status};
use weir_common::ids::JobId;
use weir_job::placement::share_slots;
use weir_plan::graph::JobGraph;
use weir_plan::spec::PlanSpec;

use super::call_failed;
use super::protocol::*;
use super::rpc::job_manager_server::{JobManager, JobManagerServer};
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
    used: usize,
    last_seen: Instant,
}

/// A job and where its current attempt runs.
#[derive(Debug)]
struct JobEntry {
    name: String,
    state: JobState,
    error: Option<String>,
    attempt: u32,
    /// TaskManager id to the slots its part takes.
    parts: HashMap<String, usize>,
    /// TaskManagers whose part has not ended.
    running: BTreeSet<String>,
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

    /// Ends the job's attempt as failed (unless it is over) and frees its
    /// slots; the TaskManagers still running a part of it, to cancel.
    fn fail(&mut self, job_id: &str, error: String) -> Vec<(String, u32)> {
        let Some(job) = self.jobs.get_mut(job_id) else {
            return Vec::new();
        };
        if job.state.is_terminal() {
            return Vec::new();
        }
        eprintln!("[ERROR] Job {job_id} ({}) failed: {error}", job.name);
        job.state = JobState::Failed;
        job.error = Some(error);
        let running: Vec<String> = std::mem::take(&mut job.running).into_iter().collect();
        let attempt = job.attempt;
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

    /// Places job `job_id` and deploys its parts.
    async fn schedule(self, job_id: String, submit: SubmitJob, parallelisms: Vec<usize>) {
        let result = async {
            let (hosts, slots) = self.place(&parallelisms).await?;
            let parts = self
                .take_slots(&job_id, &slots)
                .ok_or_else(|| Error::Execution("a TaskManager went away while the job was placed".into()))?;
            let attempt = self.state().jobs.get(&job_id).map_or(0, |j| j.attempt);
            for (_, control) in &parts {
                let deploy = DeployPart {
                    job_id: job_id.clone(),
                    name: submit.name.clone(),
                    attempt,
                    plan: submit.plan.clone(),
                    config: submit.config.clone(),
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
                "[INFO] Job {job_id} ({}) deployed on {} TaskManager(s).",
                submit.name,
                parts.len()
            );
            Ok::<(), Error>(())
        }
        .await;
        if let Err(e) = result {
            let cancel = self.state().fail(&job_id, e.to_string());
            cancel_parts(&job_id, cancel).await;
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
                for (job_id, parts) in cancels {
                    cancel_parts(&job_id, parts).await;
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
        let parallelisms: Vec<usize> = JobGraph::of(plan)
            .vertices
            .iter()
            .map(|v| v.parallelism)
            .collect();
        let job_id = JobId::new().to_string();
        self.state().jobs.insert(
            job_id.clone(),
            JobEntry {
                name: submit.name.clone(),
                state: JobState::Created,
                error: None,
                attempt: 0,
                parts: HashMap::new(),
                running: BTreeSet::new(),
            },
        );
        eprintln!(
            "[INFO] Job {job_id} ({}) submitted: {} vertices.",
            submit.name,
            parallelisms.len()
        );
        tokio::spawn(self.clone().schedule(job_id.clone(), submit, parallelisms));
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

    async fn part_ended(&self, request: Request<PartEnded>) -> std::result::Result<Response<Done>, Status> {
        let ended = request.into_inner();
        let cancel = {
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
                    eprintln!("[INFO] Job {} ({}) finished.", ended.job_id, job.name);
                    state.release(&ended.job_id);
                    Vec::new()
                }
                None => Vec::new(),
            }
        };
        cancel_parts(&ended.job_id, cancel).await;
        Ok(Response::new(Done {}))
    }
}

/// Runs a JobManager on `bind` (`host:port`) until the process ends.
pub fn run(bind: &str, heartbeats: Heartbeats) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("weir-jobmanager")
        .enable_all()
        .build()
        .map_err(|e| Error::Execution(format!("cannot start the JobManager's runtime: {e}")))?;
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

    #[test]
    fn a_failed_job_gives_its_slots_back_and_names_the_parts_to_cancel() {
        let mut state = State::default();
        let mut a = entry("a", Instant::now());
        (a.control, a.slots, a.used) = ("ctl-a".into(), 2, 2);
        state.task_managers.push(a);
        state.jobs.insert(
            "j".into(),
            JobEntry {
                name: "n".into(),
                state: JobState::Running,
                error: None,
                attempt: 3,
                parts: HashMap::from([("a".to_string(), 2)]),
                running: BTreeSet::from(["a".to_string()]),
            },
        );
        assert_eq!(state.fail("j", "boom".into()), [("ctl-a".to_string(), 3)]);
        assert_eq!(state.task_managers[0].used, 0);
        assert_eq!(state.jobs["j"].state, JobState::Failed);
        assert!(state.fail("j", "again".into()).is_empty(), "a job fails once");
    }
}
