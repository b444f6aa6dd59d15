//! Flink's REST API shape and a Prometheus `/metrics` endpoint for the jobs of this process (`weir run --rest-port`).
//!
//! The paths and JSON follow Flink's REST API where weir has the same
//! notions (`/overview`, `/jobs`, `/jobs/:id`, `/jobs/:id/checkpoints`,
//! `/jobs/:id/vertices/:vid/backpressure`, POST `/jobs/:id/savepoints` and
//! `/jobs/:id/stop` with `/jobs/:id/savepoints/:triggerid`, `/taskmanagers`);
//! a vertex's id is its index in the job graph. `/metrics` is Prometheus'
//! text format with the names of Flink's Prometheus reporter.

mod json;
mod metrics;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::{Error, JobHandle, Result};

/// The jobs a REST server shows: those this process started.
pub type Jobs = Arc<Mutex<Vec<JobHandle>>>;

/// A savepoint asked for over REST, by trigger id.
type Triggers = Arc<Mutex<HashMap<String, std::result::Result<Option<String>, String>>>>;

#[derive(Clone)]
struct Rest {
    jobs: Jobs,
    triggers: Triggers,
}

impl Rest {
    fn jobs(&self) -> Vec<JobHandle> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn job(&self, id: &str) -> Option<JobHandle> {
        (self.jobs().into_iter()).find(|j| j.job_id().as_str() == id)
    }
}

fn missing_job(id: &str) -> Response {
    not_found(&format!("Job {id} not found"))
}

fn not_found(what: &str) -> Response {
    (StatusCode::NOT_FOUND, Json(json!({ "errors": [what] }))).into_response()
}

async fn overview(State(rest): State<Rest>) -> Json<Value> {
    Json(json::overview(&rest.jobs()))
}

async fn job_list(State(rest): State<Rest>) -> Json<Value> {
    Json(json!({ "jobs": rest.jobs().iter().map(|j| json!({
        "id": j.job_id().as_str(),
        "status": json::state(j.status()),
    })).collect::<Vec<_>>() }))
}

async fn job(State(rest): State<Rest>, Path(id): Path<String>) -> Response {
    match rest.job(&id) {
        Some(job) => Json(json::job(&job)).into_response(),
        None => missing_job(&id),
    }
}

async fn checkpoints(State(rest): State<Rest>, Path(id): Path<String>) -> Response {
    match rest.job(&id) {
        Some(job) => Json(json::checkpoints(&job)).into_response(),
        None => missing_job(&id),
    }
}

async fn backpressure(State(rest): State<Rest>, Path((id, vertex)): Path<(String, usize)>) -> Response {
    match rest.job(&id).map(|job| json::backpressure(&job, vertex)) {
        Some(Some(body)) => Json(body).into_response(),
        Some(None) => not_found(&format!("Vertex {vertex} of job {id} not found")),
        None => missing_job(&id),
    }
}

async fn task_managers() -> Json<Value> {
    Json(json::task_managers())
}

async fn prometheus(State(rest): State<Rest>) -> Response {
    let body = metrics::render(&rest.jobs());
    ([("content-type", "text/plain; version=0.0.4")], body).into_response()
}

/// Starts a savepoint (`stop`: stop-with-savepoint) on a thread of its
/// own; its trigger id, to ask for its outcome.
fn trigger(rest: &Rest, job: JobHandle, stop: bool) -> String {
    let trigger_id = weir_common::ids::JobId::new().to_string();
    let triggers = rest.triggers.clone();
    triggers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(trigger_id.clone(), Ok(None));
    let id = trigger_id.clone();
    std::thread::spawn(move || {
        let result = match stop {
            true => job.stop_with_savepoint(),
            false => job.trigger_savepoint(),
        };
        let outcome = result
            .map(|path| Some(path.display().to_string()))
            .map_err(|e| e.to_string());
        triggers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, outcome);
    });
    trigger_id
}

async fn savepoint(State(rest): State<Rest>, Path(id): Path<String>) -> Response {
    match rest.job(&id) {
        Some(job) => (
            StatusCode::ACCEPTED,
            Json(json!({ "request-id": trigger(&rest, job, false) })),
        )
            .into_response(),
        None => missing_job(&id),
    }
}

async fn stop(State(rest): State<Rest>, Path(id): Path<String>) -> Response {
    match rest.job(&id) {
        Some(job) => (
            StatusCode::ACCEPTED,
            Json(json!({ "request-id": trigger(&rest, job, true) })),
        )
            .into_response(),
        None => missing_job(&id),
    }
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

/// Serves the REST API of `jobs` on `bind` (`host:port`, port 0: any free
/// one) from a thread of its own; the address it listens on.
pub fn serve(bind: &str, jobs: Jobs) -> Result<SocketAddr> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Execution(format!("cannot start the REST server's runtime: {e}")))?;
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(bind))
        .map_err(|e| Error::Execution(format!("cannot listen on {bind}: {e}")))?;
    let address = listener
        .local_addr()
        .map_err(|e| Error::Execution(e.to_string()))?;
    let rest = Rest {
        jobs,
        triggers: Triggers::default(),
    };
    let router = Router::new()
        .route("/overview", get(overview))
        .route("/jobs", get(job_list))
        .route("/jobs/{id}", get(job))
        .route("/jobs/{id}/checkpoints", get(checkpoints))
        .route("/jobs/{id}/vertices/{vertex}/backpressure", get(backpressure))
        .route("/jobs/{id}/savepoints", post(savepoint))
        .route("/jobs/{id}/savepoints/{trigger}", get(savepoint_status))
        .route("/jobs/{id}/stop", post(stop))
        .route("/taskmanagers", get(task_managers))
        .route("/metrics", get(prometheus))
        .with_state(rest);
    std::thread::Builder::new()
        .name("weir-rest".into())
        .spawn(move || {
            if let Err(e) = runtime.block_on(async { axum::serve(listener, router).await }) {
                eprintln!("[WARN] The REST server stopped: {e}");
            }
        })
        .map_err(|e| Error::Execution(format!("cannot start the REST server: {e}")))?;
    Ok(address)
}
