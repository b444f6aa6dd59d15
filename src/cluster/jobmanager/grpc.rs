//! The JobManager's gRPC service: what TaskManagers and clients call.

use std::sync::Arc;
use std::time::Instant;
use weir_common::config::checkpoint::display_path;

use tonic::{Request, Response, Status};
use weir_common::config::SessionConfig;
use weir_common::config::checkpoint::{CheckpointConfig, RestartStrategy};
use weir_common::ids::JobId;
use weir_plan::graph::JobGraph;
use weir_plan::spec::{NodeSpec, PlanSpec, SinkSpec};
use weir_state::checkpoint::storage::run_dir;

use super::{Failure, JobEntry, JobManagerService, JobSpec, TaskManagerEntry};
use crate::cluster::protocol::*;
use crate::cluster::rpc::job_manager_server::JobManager;
use crate::cluster::status;

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
            cpu_cores: tm.cpu_cores,
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
        let result_vertex = (graph.vertices.iter()).position(|v| {
            (v.nodes.iter()).any(|n| {
                matches!(
                    graph.plan.nodes[*n].kind,
                    NodeSpec::Sink(SinkSpec::Collect { .. })
                )
            })
        });
        let spec = JobSpec {
            edges: weir_job::metrics::EdgeView::of_graph(&graph.edges),
            result_vertex,
            checkpointed: checkpoints.as_ref().is_some_and(|c| c.interval.is_some()),
            run_dir: checkpoints.map(|c| run_dir(&c.dir, &submit.name, &id)),
            submit: submit.clone(),
            parallelisms: parallelisms.clone(),
            sources,
            restart,
        };
        (self.state().jobs).insert(job_id.clone(), JobEntry::new(Arc::new(spec)));
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
        Ok(Response::new(job.report(&job_id)))
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
                    job.end(JobState::Finished);
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

    async fn jobs(&self, _: Request<JobsQuery>) -> std::result::Result<Response<JobList>, Status> {
        let state = self.state();
        let mut jobs: Vec<(&String, &JobEntry)> = state.jobs.iter().collect();
        jobs.sort_by_key(|(_, j)| j.started);
        let jobs = jobs.into_iter().map(|(id, j)| j.report(id)).collect();
        Ok(Response::new(JobList { jobs }))
    }

    async fn savepoint(
        &self,
        request: Request<SavepointRequest>,
    ) -> std::result::Result<Response<SavepointDone>, Status> {
        let SavepointRequest { job_id, stop } = request.into_inner();
        let service = self.clone();
        let location = tokio::task::spawn_blocking(move || service.savepoint(&job_id, stop))
            .await
            .map_err(status)?
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        Ok(Response::new(SavepointDone {
            location: display_path(&location),
        }))
    }

    async fn cancel(&self, request: Request<JobQuery>) -> std::result::Result<Response<Done>, Status> {
        let job_id = request.into_inner().job_id;
        let parts = self
            .state()
            .cancel(&job_id)
            .ok_or_else(|| Status::not_found(format!("no job {job_id}")))?;
        super::cancel_parts(&job_id, parts).await;
        Ok(Response::new(Done {}))
    }
}
