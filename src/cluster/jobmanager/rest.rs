//! The JobManager's answers to the REST API: its jobs (their subtasks' figures asked of the TaskManagers that run them), savepoints, cancel, its TaskManagers and its Prometheus metrics.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use weir_job::driver::CoordinatorRequest;
use weir_job::metrics::{JobMetrics, TaskMetricsSnapshot};

use super::{JobEntry, JobManagerService};
use crate::cluster::protocol::{JobState, MetricsQuery};
use crate::rest::{Backend, JobView, TaskManagerView, metrics};
use crate::{Error, JobStatus, Result};

/// How long a stopped job may take to end after its savepoint completed.
const STOP_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a TaskManager may take to answer for its subtasks' figures.
const METRICS_TIMEOUT: Duration = Duration::from_secs(5);

fn view(job_id: &str, job: &JobEntry, tasks: Vec<TaskMetricsSnapshot>) -> JobView {
    let status = match job.state {
        JobState::Created | JobState::Running | JobState::Restarting => JobStatus::Running,
        JobState::Finished => JobStatus::Finished,
        JobState::Failed => JobStatus::Failed,
        JobState::Canceled => JobStatus::Cancelled,
    };
    JobView {
        id: job_id.to_string(),
        state: job.state.flink_name(),
        metrics: JobMetrics {
            id: 0,
            name: job.name.clone(),
            status,
            uptime: job.ended.unwrap_or_else(Instant::now) - job.started,
            restarts: u64::from(job.restarts),
            checkpoints: job.checkpoints.clone(),
            failed_checkpoints: job.failed_checkpoints,
            restores: job.restores.clone(),
            tasks,
            edges: job.spec.edges.clone(),
        },
    }
}

impl JobManagerService {
    /// Takes a savepoint of job `job_id` through its attempt's coordinator;
    /// with `stop`, the job then stops and this returns once it has ended.
    /// Blocks: call it off the runtime.
    pub(super) fn savepoint(&self, job_id: &str, stop: bool) -> Result<PathBuf> {
        let requests = {
            let state = self.state();
            let job = (state.jobs.get(job_id)).ok_or_else(|| Error::Execution(format!("no job {job_id}")))?;
            if job.state != JobState::Running {
                return Err(Error::Execution(format!(
                    "job {job_id} is not running ({}): no savepoint",
                    job.state.flink_name()
                )));
            }
            let link = job.coordinator.as_ref().ok_or_else(|| {
                Error::Execution(format!(
                    "job {job_id} cannot take savepoints: it was submitted without \
                     'execution.checkpointing.savepoint-dir' or 'execution.checkpointing.dir'"
                ))
            })?;
            link.requests.clone()
        };
        let (reply, answer) = crossbeam_channel::bounded(1);
        requests
            .send(CoordinatorRequest::Savepoint { stop, reply })
            .map_err(|_| Error::Execution(format!("job {job_id}'s attempt has ended: no savepoint")))?;
        let location = answer
            .recv()
            .map_err(|_| Error::Execution(format!("job {job_id} ended before its savepoint completed")))??;
        if stop {
            self.wait_until_over(job_id, STOP_TIMEOUT)?;
        }
        Ok(location)
    }

    /// Waits until job `job_id` is over.
    fn wait_until_over(&self, job_id: &str, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let state = (self.state().jobs.get(job_id)).map(|j| j.state);
            match state {
                Some(JobState::Finished) => return Ok(()),
                Some(state) if state.is_terminal() => {
                    return Err(Error::Execution(format!(
                        "job {job_id} ended {} after its savepoint",
                        state.flink_name()
                    )));
                }
                _ if Instant::now() >= deadline => {
                    return Err(Error::Execution(format!(
                        "job {job_id} did not end within {timeout:?} of its savepoint"
                    )));
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// The figures of the subtasks of job `job_id`'s current attempt, asked
    /// of each TaskManager that runs a part of it, in task index order. A
    /// TaskManager that does not answer in time is left out.
    fn task_figures(&self, job_id: &str) -> Vec<TaskMetricsSnapshot> {
        let (attempt, controls) = {
            let state = self.state();
            let Some(job) = state.jobs.get(job_id) else {
                return Vec::new();
            };
            let controls: Vec<String> = (state.task_managers.iter())
                .filter(|t| job.running.contains(&t.id))
                .map(|t| t.control.clone())
                .collect();
            (job.attempt, controls)
        };
        let mut tasks = Vec::new();
        for control in controls {
            let query = MetricsQuery {
                job_id: job_id.to_string(),
                attempt,
            };
            let asked = self
                .runtime
                .block_on(tokio::time::timeout(METRICS_TIMEOUT, async {
                    let mut client = super::task_manager(&control).await.ok()?;
                    client.metrics(query).await.ok()
                }));
            if let Ok(Some(figures)) = asked {
                tasks.extend(figures.into_inner().tasks);
            }
        }
        tasks.sort_by_key(|(index, _)| *index);
        tasks.into_iter().map(|(_, task)| task).collect()
    }
}

impl Backend for JobManagerService {
    fn jobs(&self) -> Vec<JobView> {
        let state = self.state();
        let mut jobs: Vec<(&String, &JobEntry)> = state.jobs.iter().collect();
        jobs.sort_by_key(|(_, j)| j.started);
        (jobs.into_iter())
            .map(|(id, job)| view(id, job, Vec::new()))
            .collect()
    }

    fn job(&self, id: &str) -> Option<JobView> {
        let tasks = self.task_figures(id);
        (self.state().jobs.get(id)).map(|job| view(id, job, tasks))
    }

    fn savepoint(&self, id: &str, stop: bool) -> Result<PathBuf> {
        JobManagerService::savepoint(self, id, stop)
    }

    fn cancel(&self, id: &str) -> Result<()> {
        let parts = (self.state().cancel(id)).ok_or_else(|| Error::Execution(format!("no job {id}")))?;
        self.runtime.block_on(super::cancel_parts(id, parts));
        Ok(())
    }

    fn task_managers(&self) -> Vec<TaskManagerView> {
        let now = Instant::now();
        (self.state().task_managers.iter())
            .map(|t| TaskManagerView {
                id: t.id.clone(),
                path: t.control.clone(),
                data_port: (t.data.rsplit_once(':'))
                    .and_then(|(_, p)| p.parse().ok())
                    .unwrap_or(0),
                since_heartbeat_ms: now.saturating_duration_since(t.last_seen).as_millis() as u64,
                slots: t.slots,
                free_slots: t.slots - t.used,
                cpu_cores: t.cpu_cores,
            })
            .collect()
    }

    fn metrics(&self) -> String {
        metrics::jobmanager(&self.jobs(), &self.task_managers())
    }
}
