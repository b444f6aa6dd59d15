//! The shell's link to a JobManager (`weir --jobmanager HOST:PORT`): `INSERT INTO`, `EXECUTE PLAN` and `SELECT` submit there (a query's rows come back over Flight, [`crate::cluster::results`]), `SHOW JOBS`, `DESCRIBE JOB` and `STOP JOB` reach the jobs there; every other statement (DDL, SET, EXPLAIN) stays in the shell's session.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;

use crate::cluster::client::{Client, job_name};
use crate::cluster::protocol::JobReport;
use crate::cluster::results::RemoteQuery;
use crate::engine::RESULT_CHANNEL;
use crate::sql::parser::{ShowWhat, Statement, parse_statements};
use crate::{Engine, Error, Result};
use arrow::datatypes::SchemaRef;

/// What became of a statement given to the JobManager's link.
pub enum Handled {
    /// It is for the shell's own session.
    No,
    /// It ran on the JobManager.
    Done,
    /// A query runs on the cluster: its rows to show.
    Query {
        /// Its rows as they become final.
        query: Box<RemoteQuery>,
        /// Their schema.
        schema: SchemaRef,
        /// They are a changelog.
        updating: bool,
    },
}

/// A JobManager the shell submits to.
pub struct Remote {
    client: Client,
    address: String,
}

impl Remote {
    /// Connects to the JobManager at `address`.
    pub fn connect(address: &str) -> Result<Remote> {
        Ok(Remote {
            client: Client::connect(address)?,
            address: address.to_string(),
        })
    }

    /// Runs `sql` on the JobManager when it is about jobs or a query.
    pub fn execute(&mut self, engine: &Engine, sql: &str) -> Result<Handled> {
        let Ok(mut statements) = parse_statements(sql) else {
            // The session reports the error where it is.
            return Ok(Handled::No);
        };
        let Some(parsed) = statements.pop().filter(|_| statements.is_empty()) else {
            return Ok(Handled::No);
        };
        let started = Instant::now();
        match parsed.statement {
            Statement::Insert(_) => {
                let plan = engine.plan(&parsed.text)?;
                self.submit(engine, plan)?;
            }
            Statement::ExecutePlan { path } => {
                let plan = crate::engine::statements::read_plan(&path, parsed.position)?;
                self.submit(engine, plan)?;
            }
            Statement::Show(ShowWhat::Jobs) => {
                let jobs = self.client.jobs()?;
                super::print_table(&[jobs_batch(&jobs)?], started, None);
            }
            Statement::DescribeJob(id) => {
                let job = self.client.job(&id)?;
                super::print_table(&[jobs_batch(&[job])?], started, None);
            }
            Statement::StopJob { id, savepoint: true } => {
                let location = self.client.savepoint(&id, true)?;
                println!("[INFO] Job {id} stopped with a savepoint: {location}");
            }
            Statement::StopJob { id, savepoint: false } => {
                self.client.cancel(&id)?;
                println!("[INFO] Job {id} cancelled.");
            }
            Statement::Query(query) => {
                let (plan, schema, updating) = engine.plan_select(*query)?;
                let job_id = self.submit(engine, plan)?;
                let mut client = Client::connect(&self.address)?;
                let checkpointed = client.job(&job_id)?.checkpointed;
                let query = Box::new(RemoteQuery::new(client, job_id, RESULT_CHANNEL, checkpointed)?);
                return Ok(Handled::Query {
                    query,
                    schema,
                    updating,
                });
            }
            Statement::CompilePlan { execute: true, .. } => {
                return Err(Error::sql_at(
                    "COMPILE AND EXECUTE PLAN on a JobManager: COMPILE PLAN, then EXECUTE PLAN",
                    Some(parsed.position),
                ));
            }
            _ => return Ok(Handled::No),
        }
        Ok(Handled::Done)
    }

    /// Submits `plan`; the job's id.
    fn submit(&mut self, engine: &Engine, plan: weir_plan::spec::PlanSpec) -> Result<String> {
        let config = engine.config();
        let name = job_name(&plan, &config);
        let job_id = self.client.submit(&name, &plan, &config)?;
        println!(
            "[INFO] Job {job_id} ({name}) submitted to the JobManager at {}.",
            self.address
        );
        Ok(job_id)
    }
}

/// Jobs as `SHOW JOBS` lists them (Flink's SQL client: id, name, status),
/// with restarts, checkpoints and the error of a failed one.
fn jobs_batch(jobs: &[JobReport]) -> Result<RecordBatch> {
    let strings = |f: fn(&JobReport) -> Option<&str>| -> ArrayRef {
        Arc::new(jobs.iter().map(f).collect::<StringArray>())
    };
    let schema = Schema::new(vec![
        Field::new("job id", DataType::Utf8, false),
        Field::new("job name", DataType::Utf8, false),
        Field::new("status", DataType::Utf8, false),
        Field::new("restarts", DataType::UInt64, false),
        Field::new("checkpoints", DataType::UInt64, false),
        Field::new("error", DataType::Utf8, true),
    ]);
    let columns = vec![
        strings(|j| Some(&j.job_id)),
        strings(|j| Some(&j.name)),
        strings(|j| Some(j.state.flink_name())),
        Arc::new(
            jobs.iter()
                .map(|j| u64::from(j.restarts))
                .collect::<UInt64Array>(),
        ) as ArrayRef,
        Arc::new(jobs.iter().map(|j| j.checkpoints as u64).collect::<UInt64Array>()),
        strings(|j| j.error.as_deref()),
    ];
    RecordBatch::try_new(Arc::new(schema), columns).map_err(|e| Error::Internal(format!("jobs table: {e}")))
}
