//! The checkpoint coordinator of a cluster job: it runs on the JobManager, and its messages to each task go to the TaskManager that runs it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use weir_common::config::checkpoint::display_path;

use crossbeam_channel::Receiver;
use weir_common::config::SessionConfig;
use weir_common::config::checkpoint::CheckpointConfig;
use weir_common::ids::JobId;
use weir_job::driver::{CoordinatorDriver, CoordinatorEvents, DriverTask};
use weir_job::stats::CheckpointStats;
use weir_runtime::control::{SnapshotFence, TaskControl};
use weir_state::checkpoint::storage::run_dir;

use super::{CoordinatorLink, JobManagerService, JobSpec};
use crate::cluster::protocol::{AbortCheckpoint, Control};
use crate::{Error, Result};

impl JobManagerService {
    /// Starts the checkpoint coordinator of attempt `attempt` of a job
    /// placed on `hosts` (data addresses), when its settings turn
    /// checkpoints on. It runs here; its messages to each task go to the
    /// TaskManager that runs it, and the tasks' reports come back through
    /// the JobManager's `report` call.
    pub(super) fn start_coordinator(
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
            requests,
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
                    client = runtime.block_on(super::task_manager(&control)).ok();
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
                    if let Ok(mut client) = super::task_manager(&control).await {
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
            display_path(&stats.dir)
        );
        if let Some(job) = self.service.state().jobs.get_mut(&self.job_id) {
            job.checkpoints.push(stats);
        }
    }

    fn checkpoint_failed(&self) {
        eprintln!("[WARN] A checkpoint of job {} failed.", self.job_id);
        if let Some(job) = self.service.state().jobs.get_mut(&self.job_id) {
            job.failed_checkpoints += 1;
        }
    }

    fn fail_attempt(&self, error: Error) {
        let failure = self.service.state().fail(&self.job_id, error.to_string());
        let (service, job_id) = (self.service.clone(), self.job_id.clone());
        self.service
            .runtime
            .spawn(async move { service.failed(job_id, failure).await });
    }
}
