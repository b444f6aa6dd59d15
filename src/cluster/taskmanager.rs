//! A TaskManager: offers its slots to the JobManager, sends heartbeats, and runs the parts of jobs placed on it, their channels to other TaskManagers over its Flight node.

use std::collections::{BTreeSet, HashMap};
use std::net::ToSocketAddrs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};
use weir_common::ids::JobId;
use weir_connectors::build::{ResultChannels, ResultSender};
use weir_flight::ChannelKey;
use weir_flight::FlightNode;
use weir_flight::transport::FlightTransport;
use weir_job::deploy::build_attempt_part;
use weir_job::metrics::{BackpressureSampler, TaskMetricsSnapshot, read_tasks};
use weir_job::placement::Placement;
use weir_job::settings::TaskInfo;
use weir_job::supervisor::is_secondary;
use weir_plan::spec::{NodeSpec, PlanSpec, SinkSpec};
use weir_runtime::control::{SnapshotFence, TaskControl, TaskReport};
use weir_runtime::transport::{Delivered, local};

use super::protocol::*;
use super::rpc::job_manager_client::JobManagerClient;
use super::rpc::task_manager_server::{TaskManager, TaskManagerServer};
use super::{call_failed, status};
use crate::{Engine, Error, Result};

/// How a TaskManager is started.
#[derive(Debug, Clone)]
pub struct TaskManagerOptions {
    /// The JobManager's `host:port`.
    pub jobmanager: String,
    /// Slots offered.
    pub slots: usize,
    /// The host this TaskManager is reached at (it listens there).
    pub host: String,
    /// The port of its control service (0: any free one).
    pub rpc_port: u16,
    /// The port of its Flight node (0: any free one).
    pub data_port: u16,
    /// Where to serve Prometheus `/metrics` of its subtasks, if anywhere.
    pub metrics_port: Option<u16>,
}

/// A job's part running here.
#[derive(Default)]
struct PartHandle {
    /// Set to stop it.
    cancel: Arc<AtomicBool>,
    /// With checkpoints: each task's line from the coordinator, by job-wide task index.
    controls: HashMap<usize, Sender<TaskControl>>,
    /// With checkpoints: its snapshot writers' fence.
    fence: Option<Arc<SnapshotFence>>,
    /// The job's name.
    name: String,
    /// Its subtasks' names and counters, with their job-wide task indexes.
    tasks: Vec<(usize, TaskInfo)>,
    /// Backpressure since the previous reading of `tasks`.
    sampler: Option<BackpressureSampler>,
}

impl PartHandle {
    /// The figures of its subtasks now, by job-wide task index.
    fn figures(&mut self) -> Vec<(usize, TaskMetricsSnapshot)> {
        let sampler =
            (self.sampler).get_or_insert_with(|| BackpressureSampler::new(Instant::now(), self.tasks.len()));
        let infos: Vec<TaskInfo> = self.tasks.iter().map(|(_, info)| info.clone()).collect();
        let figures = read_tasks(&infos, sampler);
        self.tasks.iter().map(|(index, _)| *index).zip(figures).collect()
    }
}

/// The parts running here, by job id and attempt.
type Parts = Arc<Mutex<HashMap<(String, u32), PartHandle>>>;

fn lock(parts: &Parts) -> std::sync::MutexGuard<'_, HashMap<(String, u32), PartHandle>> {
    parts.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Clone)]
struct TaskManagerService {
    id: String,
    node: Arc<FlightNode>,
    jobmanager: JobManagerClient<Channel>,
    parts: Parts,
    runtime: tokio::runtime::Handle,
}

#[tonic::async_trait]
impl TaskManager for TaskManagerService {
    async fn deploy(&self, request: Request<DeployPart>) -> std::result::Result<Response<Done>, Status> {
        let deploy = request.into_inner();
        let key = (deploy.job_id.clone(), deploy.attempt);
        let handle = PartHandle {
            name: deploy.name.clone(),
            ..PartHandle::default()
        };
        lock(&self.parts).insert(key.clone(), handle);
        let service = self.clone();
        std::thread::Builder::new()
            .name(format!("weir-part-{}", deploy.job_id))
            .spawn(move || {
                let (job_id, attempt) = (deploy.job_id.clone(), deploy.attempt);
                let result = run_part(&service, deploy);
                if let Err(e) = &result {
                    eprintln!("[ERROR] Part of job {job_id} failed: {e}");
                }
                lock(&service.parts).remove(&key);
                let ended = PartEnded {
                    job_id,
                    attempt,
                    task_manager: service.id.clone(),
                    error: result.err().map(|e| e.to_string()),
                };
                let mut jobmanager = service.jobmanager.clone();
                if let Err(e) = service.runtime.block_on(jobmanager.part_ended(ended)) {
                    eprintln!(
                        "[WARN] Could not tell the JobManager that a part ended: {}",
                        e.message()
                    );
                }
            })
            .map_err(status)?;
        Ok(Response::new(Done {}))
    }

    async fn cancel(&self, request: Request<CancelPart>) -> std::result::Result<Response<Done>, Status> {
        let cancel = request.into_inner();
        if let Some(part) = lock(&self.parts).get(&(cancel.job_id, cancel.attempt)) {
            part.cancel.store(true, Ordering::SeqCst);
        }
        Ok(Response::new(Done {}))
    }

    async fn control(&self, request: Request<Control>) -> std::result::Result<Response<Done>, Status> {
        let Control {
            job_id,
            attempt,
            task,
            control,
        } = request.into_inner();
        let parts = lock(&self.parts);
        let line = (parts.get(&(job_id.clone(), attempt)))
            .and_then(|p| p.controls.get(&task))
            .ok_or_else(|| {
                Status::not_found(format!(
                    "no task {task} of attempt {attempt} of job {job_id} here"
                ))
            })?;
        // A task that ended no longer listens; the coordinator learns of it from its report.
        let _ = line.send(control);
        Ok(Response::new(Done {}))
    }

    async fn abort(&self, request: Request<AbortCheckpoint>) -> std::result::Result<Response<Done>, Status> {
        let abort = request.into_inner();
        let fence = lock(&self.parts)
            .get(&(abort.job_id, abort.attempt))
            .and_then(|p| p.fence.clone());
        if let Some(fence) = fence {
            fence.abort(abort.checkpoint);
        }
        Ok(Response::new(Done {}))
    }

    async fn metrics(
        &self,
        request: Request<MetricsQuery>,
    ) -> std::result::Result<Response<TaskFigures>, Status> {
        let query = request.into_inner();
        let tasks = (lock(&self.parts).get_mut(&(query.job_id, query.attempt)))
            .map(PartHandle::figures)
            .unwrap_or_default();
        Ok(Response::new(TaskFigures { tasks }))
    }
}

/// Prometheus' text of the subtasks running on TaskManager `id`.
fn render_metrics(id: &str, parts: &Parts) -> String {
    let figures: Vec<(String, String, Vec<TaskMetricsSnapshot>)> = (lock(parts).iter_mut())
        .map(|((job_id, _), part)| {
            let tasks = part.figures().into_iter().map(|(_, t)| t).collect();
            (job_id.clone(), part.name.clone(), tasks)
        })
        .collect();
    let samples: Vec<crate::rest::metrics::TaskSamples> = (figures.iter())
        .map(|(job_id, job_name, tasks)| crate::rest::metrics::TaskSamples {
            job_id,
            job_name,
            tasks,
        })
        .collect();
    crate::rest::metrics::taskmanager(id, &samples)
}

/// Builds this TaskManager's subtasks of a job and runs them to their end;
/// with checkpoints, their reports go to the coordinator on the JobManager
/// and its messages come back through [`TaskManager::control`].
fn run_part(service: &TaskManagerService, deploy: DeployPart) -> Result<()> {
    let node = &service.node;
    let engine = Engine::new();
    for (key, value) in &deploy.config {
        engine.set(key, value)?;
    }
    let plan: PlanSpec =
        serde_json::from_str(&deploy.plan).map_err(|e| Error::Plan(format!("not a weir plan: {e}")))?;
    let results = result_channels(node, &plan, &deploy.job_id, deploy.attempt);
    let (graph, mut settings) = engine.prepare_with(&plan, &deploy.name, &results)?;
    settings.job_id = JobId::parse(&deploy.job_id)
        .ok_or_else(|| Error::Execution(format!("not a job id: {}", deploy.job_id)))?;
    settings.transport = Arc::new(FlightTransport::new(node.clone(), &deploy.job_id, deploy.attempt));
    let placement = Placement {
        here: node.address().to_string(),
        hosts: deploy.hosts,
    };
    let mut part = build_attempt_part(
        &graph,
        &settings,
        settings.restore.as_ref(),
        &[],
        deploy.attempt,
        &placement,
    )?;
    let driver = part.driver.take();
    if let Some(handle) = lock(&service.parts).get_mut(&(deploy.job_id.clone(), deploy.attempt)) {
        // From now on the JobManager's cancel sets the attempt's own flag,
        // which the tasks watch; one set while building carries over.
        if handle.cancel.load(Ordering::SeqCst) {
            part.cancel.store(true, Ordering::SeqCst);
        }
        handle.cancel = part.cancel.clone();
        handle.tasks = (part.task_indexes.iter().copied())
            .zip(part.infos.iter().cloned())
            .collect();
        if let Some(driver) = &driver {
            let lines = driver.tasks.iter().map(|t| t.control.clone());
            handle.controls = part.task_indexes.iter().copied().zip(lines).collect();
            handle.fence = Some(driver.fence.clone());
        }
    }
    let reports = driver.map(|d| forward_reports(service, &deploy.job_id, deploy.attempt, d.reports));
    eprintln!(
        "[INFO] Running {} subtask(s) of job {} ({}).",
        part.tasks.len(),
        deploy.job_id,
        deploy.name
    );
    let threads: Vec<_> = (part.tasks.into_iter())
        .map(|task| std::thread::spawn(move || task.run()))
        .collect();
    let mut errors = Vec::new();
    for thread in threads {
        let result = thread
            .join()
            .unwrap_or_else(|_| Err(Error::Execution("a task panicked".into())));
        if let Err(e) = result {
            // The first failure cancels the others.
            part.cancel.store(true, Ordering::SeqCst);
            errors.push(e);
        }
    }
    if let Some(reports) = reports {
        // Every report is with the coordinator before the part is said to end.
        let _ = reports.join();
    }
    let peers: BTreeSet<&String> = (placement.hosts.iter().flatten())
        .filter(|h| **h != placement.here)
        .collect();
    let lost = || {
        (node.lost_connection(&deploy.job_id, deploy.attempt, LOST_CONNECTION_WAIT))
            .or_else(|| unreachable_peer(peers, PROBE_TIMEOUT))
    };
    let error = root_cause(errors, lost);
    // Channels of this attempt that no reader fetched are dropped.
    node.withdraw(&deploy.job_id, deploy.attempt + 1);
    match (error, part.cancel.load(Ordering::SeqCst)) {
        (Some(e), _) => Err(e),
        (None, true) => Err(Error::Execution("cancelled".into())),
        (None, false) => Ok(()),
    }
}

/// The channels of the plan's collect sinks (a query's rows), offered on
/// `node` to the process that submitted the query: it reads them with
/// Flight and confirms each checkpoint's barrier. Only the TaskManager
/// that runs a sink's subtask writes to its channel; the others' go
/// unread and are withdrawn when the part ends.
fn result_channels(node: &FlightNode, plan: &PlanSpec, job_id: &str, attempt: u32) -> ResultChannels {
    let ids = plan.nodes.iter().filter_map(|n| match &n.kind {
        NodeSpec::Sink(SinkSpec::Collect { id }) => Some(*id),
        _ => None,
    });
    ids.map(|id| {
        let (send, receive) = local(RESULT_CAPACITY, false);
        let delivered = Arc::new(Delivered::default());
        node.offer_result(
            ChannelKey::result(job_id, attempt, id),
            receive,
            delivered.clone(),
        );
        let sender = ResultSender::Checkpointed {
            messages: send.data,
            delivered,
        };
        (id, sender)
    })
    .collect()
}

/// Batches a result channel holds before its sink waits for the reader.
const RESULT_CAPACITY: usize = 16;

/// How long a part whose tasks only saw each other stop waits for its
/// node to name a lost connection.
const LOST_CONNECTION_WAIT: Duration = Duration::from_millis(300);

/// How long a connection to a peer's data plane may take before the peer
/// counts as unreachable.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// The first of `peers` (data-plane `host:port`s) that does not accept a
/// connection within `timeout`, as the cause of a lost connection: when a
/// part's tasks stopped because a channel to a peer went away, a peer that
/// refuses connections died (a peer that failed for its own reason still
/// listens, and reports that reason itself).
fn unreachable_peer<'a>(peers: impl IntoIterator<Item = &'a String>, timeout: Duration) -> Option<String> {
    peers.into_iter().find_map(|peer| {
        let address = peer.to_socket_addrs().ok()?.next()?;
        let error = std::net::TcpStream::connect_timeout(&address, timeout).err()?;
        Some(format!("lost the connection to the node at {peer}: {error}"))
    })
}

/// What a part reports of its tasks' `errors`: the first that is a cause
/// of its own; else the connection its node lost (`lost`), as Flink's
/// "Connection unexpectedly closed by remote task manager"; else the
/// first (a task that saw another stop).
fn root_cause(errors: Vec<Error>, lost: impl FnOnce() -> Option<String>) -> Option<Error> {
    if let Some(i) = errors.iter().position(|e| !is_secondary(e)) {
        return errors.into_iter().nth(i);
    }
    let first = errors.into_iter().next()?;
    Some(match lost() {
        Some(cause) => Error::Execution(cause),
        None => first,
    })
}

/// Sends the reports of a part's tasks and snapshot writers to the
/// JobManager until the last of them is gone.
fn forward_reports(
    service: &TaskManagerService,
    job_id: &str,
    attempt: u32,
    reports: Receiver<TaskReport>,
) -> std::thread::JoinHandle<()> {
    let (mut jobmanager, runtime) = (service.jobmanager.clone(), service.runtime.clone());
    let job_id = job_id.to_string();
    std::thread::spawn(move || {
        for report in reports.iter() {
            let report = Report {
                job_id: job_id.clone(),
                attempt,
                report,
            };
            if let Err(e) = runtime.block_on(jobmanager.report(report)) {
                eprintln!(
                    "[WARN] A checkpoint report did not reach the JobManager: {}",
                    e.message()
                );
            }
        }
    })
}

/// Registers with the JobManager, retrying for up to a minute.
async fn register(
    jobmanager: &mut JobManagerClient<Channel>,
    offer: &RegisterTaskManager,
) -> Result<Registered> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match jobmanager.register(offer.clone()).await {
            Ok(registered) => return Ok(registered.into_inner()),
            Err(e) if Instant::now() >= deadline => {
                return Err(call_failed("registering with the JobManager", e));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// Cancels every part running here.
fn cancel_all(parts: &Parts) {
    for part in lock(parts).values() {
        part.cancel.store(true, Ordering::SeqCst);
    }
}

/// Runs a TaskManager until the process ends.
pub fn run(options: TaskManagerOptions) -> Result<()> {
    let node = FlightNode::start(&format!("{}:{}", options.host, options.data_port))?;
    let runtime = weir_flight::runtime("weir-taskmanager")?;
    let handle = runtime.handle().clone();
    let id = format!("tm-{}-{}", std::process::id(), JobId::new());
    let parts: Parts = Arc::default();
    if let Some(port) = options.metrics_port {
        let (id, parts) = (id.clone(), parts.clone());
        let render = Arc::new(move || render_metrics(&id, &parts));
        let address = crate::rest::serve_metrics(&format!("{}:{port}", options.host), render)?;
        eprintln!("[INFO] TaskManager metrics on http://{address}/metrics");
    }
    runtime.block_on(async move {
        let bind = format!("{}:{}", options.host, options.rpc_port);
        let listener = tokio::net::TcpListener::bind(&bind)
            .await
            .map_err(|e| Error::Execution(format!("cannot listen on {bind}: {e}")))?;
        let control = listener
            .local_addr()
            .map_err(|e| Error::Execution(e.to_string()))?;
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", options.jobmanager))
            .map_err(|e| Error::Execution(format!("not an address: {}: {e}", options.jobmanager)))?
            // A JobManager that is paused or cut off must not hold a part
            // up forever: its calls give up.
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10));
        let mut jobmanager = JobManagerClient::new(endpoint.connect_lazy());
        let service = TaskManagerService {
            id: id.clone(),
            node: node.clone(),
            jobmanager: jobmanager.clone(),
            parts: parts.clone(),
            runtime: handle,
        };
        tokio::spawn(
            Server::builder()
                .add_service(TaskManagerServer::new(service))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let offer = RegisterTaskManager {
            id: id.clone(),
            control: control.to_string(),
            data: node.address().to_string(),
            slots: options.slots,
            cpu_cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let registered = register(&mut jobmanager, &offer).await?;
        eprintln!(
            "[INFO] TaskManager {id} registered with the JobManager at {}: {} slot(s), data {}.",
            options.jobmanager,
            options.slots,
            node.address()
        );
        heartbeat(&mut jobmanager, &offer, registered, &parts).await
    })
}

/// Sends heartbeats forever. The JobManager not knowing this TaskManager
/// (it restarted, or declared it lost) or silent past the timeout stops
/// every part here, then registers again.
async fn heartbeat(
    jobmanager: &mut JobManagerClient<Channel>,
    offer: &RegisterTaskManager,
    mut registered: Registered,
    parts: &Parts,
) -> Result<()> {
    let mut last_ack = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(registered.heartbeat_interval_ms)).await;
        let timeout = Duration::from_millis(registered.heartbeat_timeout_ms);
        // A JobManager that is paused or cut off never answers: the call
        // gives up after an interval, as a missed heartbeat.
        let interval = Duration::from_millis(registered.heartbeat_interval_ms).max(Duration::from_secs(1));
        let call = jobmanager.heartbeat(Heartbeat { id: offer.id.clone() });
        let answer = tokio::time::timeout(interval, call)
            .await
            .unwrap_or_else(|_| Err(Status::deadline_exceeded("no answer")));
        match answer {
            Ok(ack) if ack.get_ref().known => last_ack = Instant::now(),
            Ok(_) => {
                eprintln!(
                    "[WARN] The JobManager does not know this TaskManager: stopping its tasks and registering again."
                );
                cancel_all(parts);
                registered = register(jobmanager, offer).await?;
                last_ack = Instant::now();
            }
            Err(_) if last_ack.elapsed() > timeout => {
                eprintln!(
                    "[WARN] No answer from the JobManager for {timeout:?}: stopping this TaskManager's tasks."
                );
                cancel_all(parts);
                last_ack = Instant::now();
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gone() -> Error {
        weir_runtime::input::upstream_gone()
    }

    #[test]
    fn a_part_reports_a_task_error_of_its_own_before_a_lost_connection() {
        let failed = Error::Execution("division by zero".into());
        let got = root_cause(vec![gone(), failed], || Some("lost the connection".into()));
        assert_eq!(got.unwrap().to_string(), "Execution error: division by zero");
    }

    #[test]
    fn a_part_whose_tasks_only_saw_each_other_stop_reports_the_lost_connection_if_any() {
        let lost = "lost the connection to the node at h:1: broken pipe";
        let got = root_cause(vec![gone()], || Some(lost.into()));
        assert_eq!(got.unwrap().to_string(), format!("Execution error: {lost}"));
        let got = root_cause(vec![gone()], || None);
        assert_eq!(got.unwrap().to_string(), gone().to_string());
        assert!(root_cause(Vec::new(), || panic!("not asked without errors")).is_none());
    }

    #[test]
    fn a_peer_that_refuses_connections_is_named_and_one_that_listens_is_not() {
        let listening = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let alive = listening.local_addr().unwrap().to_string();
        let closed = {
            let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            gone.local_addr().unwrap().to_string()
        };
        let timeout = Duration::from_secs(5);
        assert_eq!(unreachable_peer([&alive], timeout), None);
        let cause = unreachable_peer([&alive, &closed], timeout).unwrap();
        assert!(
            cause.starts_with(&format!("lost the connection to the node at {closed}: ")),
            "{cause}"
        );
    }
}
