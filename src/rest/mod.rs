//! Flink's REST API shape and a Prometheus `/metrics` endpoint for the jobs of this process (`weir run --rest-port`) or of a JobManager.
//!
//! The paths and JSON follow Flink's REST API where weir has the same
//! notions (`/overview`, `/jobs`, `/jobs/:id`, `/jobs/:id/checkpoints`,
//! `/jobs/:id/vertices/:vid/backpressure`, POST `/jobs/:id/savepoints` and
//! `/jobs/:id/stop` with `/jobs/:id/savepoints/:triggerid`, `/taskmanagers`);
//! a vertex's id is its index in the job graph. `/metrics` is Prometheus'
//! text format with the names of Flink's Prometheus reporter. The answers
//! come from a [`Backend`]: the jobs of this process, or a JobManager's
//! (`src/cluster/jobmanager/rest.rs`).

mod json;
pub mod metrics;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use weir_common::config::checkpoint::display_path;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use weir_job::metrics::JobMetrics;

use crate::{Error, JobHandle, Result};

/// A job as the API shows it.
#[derive(Debug, Clone)]
pub struct JobView {
    /// Its id.
    pub id: String,
    /// Flink's name of its state (`RUNNING`, `RESTARTING`, `FINISHED`, ...).
    pub state: &'static str,
    /// Its figures; `tasks` may be empty where a listing does not need them.
    pub metrics: JobMetrics,
}

/// A TaskManager as `/taskmanagers` shows it.
#[derive(Debug, Clone)]
pub struct TaskManagerView {
    /// Its id.
    pub id: String,
    /// Where it is reached (its control address, or this process).
    pub path: String,
    /// Its Flight port (0 in one process).
    pub data_port: u16,
    /// Since its last heartbeat.
    pub since_heartbeat_ms: u64,
    /// Slots it offers.
    pub slots: usize,
    /// Of those, free.
    pub free_slots: usize,
    /// Its machine's cores (as far as this process knows).
    pub cpu_cores: usize,
}

/// Where the API's answers come from: the jobs of this process, or a
/// JobManager's. Its calls may block (a JobManager asks its TaskManagers),
/// so handlers make them off the server's runtime.
pub trait Backend: Send + Sync + 'static {
    /// Every job, without task figures.
    fn jobs(&self) -> Vec<JobView>;
    /// One job with its task figures.
    fn job(&self, id: &str) -> Option<JobView>;
    /// Takes a savepoint of job `id` (`stop`: then stops it, and returns
    /// once it has ended); the savepoint's directory.
    fn savepoint(&self, id: &str, stop: bool) -> Result<PathBuf>;
    /// Cancels job `id`.
    fn cancel(&self, id: &str) -> Result<()>;
    /// The TaskManagers.
    fn task_managers(&self) -> Vec<TaskManagerView>;
    /// Prometheus' text of this process' metrics.
    fn metrics(&self) -> String;
}

/// The jobs a REST server shows: those this process started.
pub type Jobs = Arc<Mutex<Vec<JobHandle>>>;

/// The jobs this process runs (`weir run --rest-port`), as one TaskManager
/// and its JobManager at once.
struct LocalJobs(Jobs);

impl LocalJobs {
    fn handles(&self) -> Vec<JobHandle> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn handle(&self, id: &str) -> Result<JobHandle> {
        (self.handles().into_iter())
            .find(|j| j.job_id().as_str() == id)
            .ok_or_else(|| Error::Execution(format!("Job {id} not found")))
    }
}

fn view(job: &JobHandle) -> JobView {
    JobView {
        id: job.job_id().to_string(),
        state: json::state(job.status()),
        metrics: job.metrics(),
    }
}

impl Backend for LocalJobs {
    fn jobs(&self) -> Vec<JobView> {
        self.handles().iter().map(view).collect()
    }

    fn job(&self, id: &str) -> Option<JobView> {
        self.handle(id).ok().map(|job| view(&job))
    }

    fn savepoint(&self, id: &str, stop: bool) -> Result<PathBuf> {
        let job = self.handle(id)?;
        match stop {
            true => job.stop_with_savepoint(),
            false => job.trigger_savepoint(),
        }
    }

    fn cancel(&self, id: &str) -> Result<()> {
        self.handle(id).map(|job| job.cancel())
    }

    fn task_managers(&self) -> Vec<TaskManagerView> {
        let running = self
            .handles()
            .into_iter()
            .filter(|j| j.status() == crate::JobStatus::Running);
        // A job takes as many slots as its widest vertex.
        let slots = running
            .map(|j| {
                (j.metrics().tasks.iter())
                    .filter_map(|t| {
                        t.name
                            .rsplit_once('/')
                            .and_then(|(_, p)| p.trim_end_matches(')').parse::<usize>().ok())
                    })
                    .max()
                    .unwrap_or(0)
            })
            .sum();
        vec![TaskManagerView {
            id: "local".into(),
            path: format!("process {}", std::process::id()),
            data_port: 0,
            since_heartbeat_ms: 0,
            slots,
            free_slots: 0,
            cpu_cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }]
    }

    fn metrics(&self) -> String {
        let jobs = self.jobs();
        let samples: Vec<metrics::TaskSamples> = (jobs.iter())
            .map(|j| metrics::TaskSamples {
                job_id: &j.id,
                job_name: &j.metrics.name,
                tasks: &j.metrics.tasks,
            })
            .collect();
        metrics::taskmanager("local", &samples) + &metrics::jobmanager(&jobs, &self.task_managers())
    }
}

/// A savepoint asked for over REST, by trigger id.
type Triggers = Arc<Mutex<HashMap<String, std::result::Result<Option<String>, String>>>>;

#[derive(Clone)]
struct Rest {
    backend: Arc<dyn Backend>,
    triggers: Triggers,
}

impl Rest {
    /// Runs `f` on the backend off the server's runtime.
    async fn with<T: Send + 'static>(&self, f: impl FnOnce(&dyn Backend) -> T + Send + 'static) -> T {
        let backend = self.backend.clone();
        tokio::task::spawn_blocking(move || f(backend.as_ref()))
            .await
            .expect("a REST call panicked")
    }

    async fn job(&self, id: &str) -> Option<JobView> {
        let id = id.to_string();
        self.with(move |b| b.job(&id)).await
    }
}

fn missing_job(id: &str) -> Response {
    not_found(&format!("Job {id} not found"))
}

fn not_found(what: &str) -> Response {
    (StatusCode::NOT_FOUND, Json(json!({ "errors": [what] }))).into_response()
}

async fn overview(State(rest): State<Rest>) -> Json<Value> {
    Json(rest.with(|b| json::overview(&b.jobs(), &b.task_managers())).await)
}

async fn job_list(State(rest): State<Rest>) -> Json<Value> {
    let jobs = rest.with(|b| b.jobs()).await;
    Json(json!({ "jobs": jobs.iter().map(|j| json!({
        "id": j.id,
        "status": j.state,
    })).collect::<Vec<_>>() }))
}

/// The web dashboard: one page, embedded in the binary, that reads this API.
async fn dashboard() -> impl IntoResponse {
    const PAGE: &str = include_str!("dashboard.html");
    ([("content-type", "text/html; charset=utf-8")], PAGE)
}

/// Flink's `/jobs/overview`: every job with its name, state and duration.
async fn jobs_overview(State(rest): State<Rest>) -> Json<Value> {
    let jobs = rest.with(|b| b.jobs()).await;
    Json(json!({ "jobs": jobs.iter().map(|j| json!({
        "jid": j.id,
        "name": j.metrics.name,
        "state": j.state,
        "duration": j.metrics.uptime.as_millis() as u64,
    })).collect::<Vec<_>>() }))
}

async fn job(State(rest): State<Rest>, Path(id): Path<String>) -> Response {
    match rest.job(&id).await {
        Some(job) => Json(json::job(&job)).into_response(),
        None => missing_job(&id),
    }
}

/// Flink's `PATCH /jobs/:id?mode=cancel`.
async fn cancel(
    State(rest): State<Rest>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if query.get("mode").is_some_and(|m| m != "cancel") {
        let error = json!({ "errors": ["mode must be 'cancel'"] });
        return (StatusCode::BAD_REQUEST, Json(error)).into_response();
    }
    let job = id.clone();
    match rest.with(move |b| b.cancel(&job)).await {
        Ok(()) => (StatusCode::ACCEPTED, Json(json!({}))).into_response(),
        Err(_) => missing_job(&id),
    }
}

async fn checkpoints(State(rest): State<Rest>, Path(id): Path<String>) -> Response {
    match rest.job(&id).await {
        Some(job) => Json(json::checkpoints(&job)).into_response(),
        None => missing_job(&id),
    }
}

async fn backpressure(State(rest): State<Rest>, Path((id, vertex)): Path<(String, usize)>) -> Response {
    match rest.job(&id).await.map(|job| json::backpressure(&job, vertex)) {
        Some(Some(body)) => Json(body).into_response(),
        Some(None) => not_found(&format!("Vertex {vertex} of job {id} not found")),
        None => missing_job(&id),
    }
}

async fn task_managers(State(rest): State<Rest>) -> Json<Value> {
    Json(json::task_managers(&rest.with(|b| b.task_managers()).await))
}

async fn prometheus(State(rest): State<Rest>) -> Response {
    let body = rest.with(|b| b.metrics()).await;
    ([("content-type", "text/plain; version=0.0.4")], body).into_response()
}

/// Starts a savepoint (`stop`: stop-with-savepoint) on a thread of its
/// own; its trigger id, to ask for its outcome.
fn trigger(rest: &Rest, job: String, stop: bool) -> String {
    let trigger_id = weir_common::ids::JobId::new().to_string();
    let triggers = rest.triggers.clone();
    triggers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(trigger_id.clone(), Ok(None));
    let (id, backend) = (trigger_id.clone(), rest.backend.clone());
    std::thread::spawn(move || {
        let outcome = (backend.savepoint(&job, stop))
            .map(|path| Some(display_path(&path)))
            .map_err(|e| e.to_string());
        triggers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, outcome);
    });
    trigger_id
}

async fn savepoint(State(rest): State<Rest>, Path(id): Path<String>) -> Response {
    start_savepoint(rest, id, false).await
}

async fn stop(State(rest): State<Rest>, Path(id): Path<String>) -> Response {
    start_savepoint(rest, id, true).await
}

async fn start_savepoint(rest: Rest, id: String, stop: bool) -> Response {
    let job = id.clone();
    if !rest.with(move |b| b.jobs().iter().any(|j| j.id == job)).await {
        return missing_job(&id);
    }
    let body = json!({ "request-id": trigger(&rest, id, stop) });
    (StatusCode::ACCEPTED, Json(body)).into_response()
}

async fn savepoint_status(State(rest): State<Rest>, Path((_, trigger)): Path<(String, String)>) -> Response {
    let triggers = rest.triggers.lock().unwrap_or_else(|e| e.into_inner());
    let body = match triggers.get(&trigger) {
        None => return not_found(&format!("Savepoint trigger {trigger} not found")),
        Some(Ok(None)) => json!({ "status": { "id": "IN_PROGRESS" } }),
        Some(Ok(Some(location))) => {
            json!({ "status": { "id": "COMPLETED" }, "operation": { "location": location } })
        }
        Some(Err(cause)) => json!({
            "status": { "id": "COMPLETED" },
            "operation": { "failure-cause": { "class": "weir.Error", "stack-trace": cause } },
        }),
    };
    Json(body).into_response()
}

/// Serves the REST API of the jobs of this process on `bind` (`host:port`,
/// port 0: any free one) from a thread of its own; the address it listens on.
pub fn serve(bind: &str, jobs: Jobs) -> Result<SocketAddr> {
    serve_backend(bind, Arc::new(LocalJobs(jobs)))
}

/// Serves the REST API of `backend` on `bind`, as [`serve`].
pub fn serve_backend(bind: &str, backend: Arc<dyn Backend>) -> Result<SocketAddr> {
    let rest = Rest {
        backend,
        triggers: Triggers::default(),
    };
    let router = Router::new()
        .route("/", get(dashboard))
        .route("/overview", get(overview))
        .route("/jobs", get(job_list))
        .route("/jobs/overview", get(jobs_overview))
        .route("/jobs/{id}", get(job).patch(cancel))
        .route("/jobs/{id}/checkpoints", get(checkpoints))
        .route("/jobs/{id}/vertices/{vertex}/backpressure", get(backpressure))
        .route("/jobs/{id}/savepoints", post(savepoint))
        .route("/jobs/{id}/savepoints/{trigger}", get(savepoint_status))
        .route("/jobs/{id}/stop", post(stop))
        .route("/taskmanagers", get(task_managers))
        .route("/metrics", get(prometheus))
        .with_state(rest);
    spawn_server(bind, router, "weir-rest")
}

/// Serves only Prometheus' `/metrics` on `bind`, its text made by `render`
/// (a TaskManager's reporter, Flink's `metrics.reporter.prom.port`).
pub fn serve_metrics(bind: &str, render: Arc<dyn Fn() -> String + Send + Sync>) -> Result<SocketAddr> {
    let router = Router::new().route(
        "/metrics",
        get(move || {
            let render = render.clone();
            async move {
                let body = tokio::task::spawn_blocking(move || render())
                    .await
                    .unwrap_or_default();
                ([("content-type", "text/plain; version=0.0.4")], body)
            }
        }),
    );
    spawn_server(bind, router, "weir-metrics")
}

/// Serves `router` on `bind` from a thread of its own (`name`), on a
/// runtime of its own; the address it listens on.
fn spawn_server(bind: &str, router: Router, name: &str) -> Result<SocketAddr> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Execution(format!("cannot start the HTTP server's runtime: {e}")))?;
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(bind))
        .map_err(|e| Error::Execution(format!("cannot listen on {bind}: {e}")))?;
    let address = listener
        .local_addr()
        .map_err(|e| Error::Execution(e.to_string()))?;
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if let Err(e) = runtime.block_on(async { axum::serve(listener, router).await }) {
                eprintln!("[WARN] The HTTP server on {address} stopped: {e}");
            }
        })
        .map_err(|e| Error::Execution(format!("cannot start the HTTP server: {e}")))?;
    Ok(address)
}
