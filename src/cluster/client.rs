//! Submitting to a JobManager: a job's plan and the session's settings, then its state until it ends.

use std::time::Duration;

use tonic::transport::Channel;
use weir_common::config::SessionConfig;
use weir_plan::spec::PlanSpec;

use super::call_failed;
use super::protocol::{JobQuery, JobReport, JobsQuery, SavepointRequest, SubmitJob};
use super::rpc::job_manager_client::JobManagerClient;
use crate::{Error, Result};

/// The name of a job of `plan`, as a local run names it: `pipeline.name`,
/// else after its sink's table.
pub fn job_name(plan: &PlanSpec, config: &SessionConfig) -> String {
    use weir_plan::spec::{NodeSpec, SinkSpec};
    let sink = plan.nodes.iter().rev().find_map(|n| match &n.kind {
        NodeSpec::Sink(SinkSpec::Connector { table, .. }) => Some(table.name.clone()),
        _ => None,
    });
    match (config.pipeline_name(), sink) {
        (Some(name), _) => name.to_string(),
        (None, Some(table)) => format!("insert-into_{table}"),
        (None, None) => "job".to_string(),
    }
}

/// A connection to a JobManager.
pub struct Client {
    runtime: tokio::runtime::Runtime,
    jobmanager: JobManagerClient<Channel>,
    address: String,
}

impl Client {
    /// Connects to the JobManager at `address` (`host:port`).
    pub fn connect(address: &str) -> Result<Client> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Execution(format!("cannot start a runtime: {e}")))?;
        let jobmanager = runtime
            .block_on(JobManagerClient::connect(format!("http://{address}")))
            .map_err(|e| Error::Execution(format!("cannot reach the JobManager at {address}: {e}")))?;
        Ok(Client {
            runtime,
            jobmanager,
            address: address.to_string(),
        })
    }

    /// Submits `plan` as a job named `name`, run with the settings of `config`; its id.
    pub fn submit(&mut self, name: &str, plan: &PlanSpec, config: &SessionConfig) -> Result<String> {
        let plan = serde_json::to_string(plan)
            .map_err(|e| Error::Internal(format!("cannot write the plan: {e}")))?;
        let submit = SubmitJob {
            name: name.to_string(),
            plan,
            config: config
                .entries()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let what = format!("submitting to the JobManager at {}", self.address);
        let submitted = self
            .runtime
            .block_on(self.jobmanager.submit(submit))
            .map_err(|s| call_failed(&what, s))?;
        Ok(submitted.into_inner().job_id)
    }

    /// The state of job `job_id`.
    pub fn job(&mut self, job_id: &str) -> Result<JobReport> {
        let query = JobQuery {
            job_id: job_id.to_string(),
        };
        let report = self
            .runtime
            .block_on(self.jobmanager.job(query))
            .map_err(|s| call_failed("asking for a job", s))?;
        Ok(report.into_inner())
    }

    /// Waits until job `job_id` ends; its last state.
    pub fn wait(&mut self, job_id: &str) -> Result<JobReport> {
        loop {
            let report = self.job(job_id)?;
            if report.state.is_terminal() {
                return Ok(report);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every job the JobManager knows, in the order they were submitted.
    pub fn jobs(&mut self) -> Result<Vec<JobReport>> {
        let list = self
            .runtime
            .block_on(self.jobmanager.jobs(JobsQuery {}))
            .map_err(|s| call_failed("listing the JobManager's jobs", s))?;
        Ok(list.into_inner().jobs)
    }

    /// Takes a savepoint of job `job_id` (`stop`: then stops it, returning
    /// once it has ended); the savepoint's directory.
    pub fn savepoint(&mut self, job_id: &str, stop: bool) -> Result<String> {
        let request = SavepointRequest {
            job_id: job_id.to_string(),
            stop,
        };
        let done = self
            .runtime
            .block_on(self.jobmanager.savepoint(request))
            .map_err(|s| call_failed(&format!("savepoint of job {job_id}"), s))?;
        Ok(done.into_inner().location)
    }

    /// Cancels job `job_id`.
    pub fn cancel(&mut self, job_id: &str) -> Result<()> {
        let query = JobQuery {
            job_id: job_id.to_string(),
        };
        self.runtime
            .block_on(self.jobmanager.cancel(query))
            .map_err(|s| call_failed(&format!("cancelling job {job_id}"), s))?;
        Ok(())
    }
}
