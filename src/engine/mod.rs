//! The embedded API: an [`Engine`] runs SQL statements; queries and `INSERT`s
//! start jobs whose results come back as Arrow record batches.

mod ddl;
mod result;
pub(crate) mod statements;

use std::sync::{Arc, Mutex};

use arrow::datatypes::SchemaRef;
use datafusion_expr::{LogicalPlan, ScalarUDF};

use crate::{Error, Result};
use result::ResultBody;
pub use result::{ResultStream, TableResult};
pub use statements::human_bytes;
use weir_common::config::SessionConfig;
use weir_common::config::checkpoint::{CheckpointConfig, RestartStrategy};
use weir_connectors::BuiltinConnectors;
use weir_connectors::build::{ResultChannels, ResultSender};
use weir_functions::registry::FunctionRegistry;
use weir_job::ExecutionGraph;
use weir_job::settings::{JobSettings, RestoredCheckpoint};
use weir_job::supervisor::{self, JobHandle};
use weir_plan::codec::DecodeContext;
use weir_plan::graph::JobGraph;
use weir_plan::spec::PlanSpec;
use weir_runtime::transport::{Local, Transport};
use weir_sql::binder::Binder;
use weir_sql::catalog::{Catalog, CatalogTable, ViewBody, ViewDef};
use weir_sql::parser::{Statement, parse_statements};
use weir_sql::planner::Planner;
use weir_state::checkpoint::storage::{RestorePoint, resolve_restore};

/// The id of a query's result channel in its plan (a plan has at most one
/// collect sink; each job gets its own channels).
pub(crate) const RESULT_CHANNEL: u64 = 0;

/// A SQL session: catalog, settings, functions, and the jobs it started.
///
/// ```
/// use weir::Engine;
/// let engine = Engine::new();
/// let batches = engine.sql("SELECT 1 + 1 AS two").unwrap().collect().unwrap();
/// assert_eq!(batches[0].num_rows(), 1);
/// ```
///
/// A clone is another handle on the same session (as the [`Table`]s it
/// makes hold one).
#[derive(Clone)]
pub struct Engine {
    session: Arc<Mutex<Session>>,
}

impl Default for Engine {
    fn default() -> Self {
        Self::new()
    }
}

struct Session {
    catalog: Arc<Catalog>,
    config: SessionConfig,
    user_functions: Vec<Arc<ScalarUDF>>,
    jobs: Vec<JobHandle>,
    transport: Arc<dyn Transport>,
}

impl Engine {
    /// A new session with an empty catalog and default settings.
    pub fn new() -> Self {
        Engine {
            session: Arc::new(Mutex::new(Session {
                catalog: Arc::new(Catalog::default()),
                config: SessionConfig::default(),
                user_functions: Vec::new(),
                jobs: Vec::new(),
                transport: Arc::new(Local),
            })),
        }
    }

    /// Makes the channels between the subtasks of the jobs started from now
    /// on with `transport` (in-process crossbeam channels, [`Local`], by
    /// default).
    pub fn set_transport(&self, transport: Arc<dyn Transport>) {
        self.session().transport = transport;
    }

    fn session(&self) -> std::sync::MutexGuard<'_, Session> {
        self.session
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs one or more statements and returns the result of the last one.
    /// Jobs started by earlier `INSERT`s keep running (see [`Engine::jobs`]);
    /// a query must be the last statement.
    pub fn sql(&self, sql: &str) -> Result<TableResult> {
        let statements = parse_statements(sql)?;
        let count = statements.len();
        let mut last = TableResult::done();
        for (index, statement) in statements.into_iter().enumerate() {
            if index + 1 < count && matches!(statement.statement, Statement::Query(_)) {
                return Err(Error::sql_at(
                    "a query must be the last statement of a script; use INSERT INTO to send its rows to a table",
                    Some(statement.position),
                ));
            }
            last = self.execute(statement)?;
        }
        Ok(last)
    }

    /// The plan of an `INSERT INTO` as data, without running it: a value
    /// that serializes (serde, e.g. JSON) and holds everything needed to
    /// run the job, the tables' definitions included (see
    /// [`weir_plan::spec`] and [`Engine::submit`]).
    pub fn plan(&self, insert: &str) -> Result<weir_plan::spec::PlanSpec> {
        let mut statements = parse_statements(insert)?;
        let (Some(statement), 1) = (statements.pop(), statements.len() + 1) else {
            return Err(Error::sql("Engine::plan takes one INSERT statement"));
        };
        let Statement::Insert(insert) = statement.statement else {
            return Err(Error::sql_at(
                "Engine::plan takes an INSERT statement",
                Some(statement.position),
            ));
        };
        let session = self.session();
        let binder = session.binder()?;
        let logical = binder.bind_insert(*insert)?;
        Planner::new(&binder, &session.config, &BuiltinConnectors)?.plan_insert(&logical)
    }

    /// The plan of query `query` into collect sink [`RESULT_CHANNEL`], for
    /// another process to run; the schema of its rows, and whether they are
    /// a changelog.
    pub(crate) fn plan_select(&self, query: sqlparser::ast::Query) -> Result<(PlanSpec, SchemaRef, bool)> {
        let session = self.session();
        let binder = session.binder()?;
        let logical = binder.bind_query(query)?;
        let schema: SchemaRef = Arc::new(logical.schema().as_arrow().clone());
        let plan = Planner::new(&binder, &session.config, &BuiltinConnectors)?
            .plan_query(&logical, RESULT_CHANNEL)?;
        let updating = plan.nodes.last().is_some_and(|n| n.mode.is_updating());
        Ok((plan, schema, updating))
    }

    /// The plan of a bound query `plan` into a collect sink.
    pub(crate) fn query_spec(&self, plan: LogicalPlan) -> Result<PlanSpec> {
        let session = self.session();
        let binder = session.binder()?;
        let logical = binder.finish(plan)?;
        Planner::new(&binder, &session.config, &BuiltinConnectors)?.plan_query(&logical, RESULT_CHANNEL)
    }

    /// Runs a plan made by [`Engine::plan`] (here or in another engine, or
    /// read back from its JSON) as a job named `name`, with this session's
    /// functions and checkpoint settings.
    pub fn submit(&self, plan: &PlanSpec, name: &str) -> Result<JobHandle> {
        self.session()
            .start(plan.clone(), name.to_string(), ResultChannels::new())
    }

    /// What a job of `plan` named `name` would run, not started: its
    /// operators built and its settings from this session. A process that
    /// runs part of a job deploys its subtasks from these
    /// ([`weir_job::deploy::build_attempt_part`]).
    pub fn prepare(&self, plan: &PlanSpec, name: &str) -> Result<(ExecutionGraph, JobSettings)> {
        self.prepare_with(plan, name, &ResultChannels::new())
    }

    /// [`Engine::prepare`], its collect sinks sending to `results`.
    pub fn prepare_with(
        &self,
        plan: &PlanSpec,
        name: &str,
        results: &ResultChannels,
    ) -> Result<(ExecutionGraph, JobSettings)> {
        self.session().prepare(plan.clone(), name.to_string(), results)
    }

    /// This session's functions in time zone `zone` (a plan's), as a
    /// plan's expressions are decoded with them (EXPLAIN, building operators).
    pub fn with_decode_context<T>(
        &self,
        zone: &str,
        f: impl FnOnce(&DecodeContext) -> Result<T>,
    ) -> Result<T> {
        let functions = self.session().functions(zone);
        f(&DecodeContext::new(&functions, zone))
    }

    /// Whether the catalog has a table or view `name`; when not, the name
    /// closest to it (for a hint).
    pub(crate) fn find_relation(&self, name: &str) -> std::result::Result<(), Option<String>> {
        let session = self.session();
        if session.catalog.contains(name) {
            return Ok(());
        }
        let names = (session.catalog.table_names().into_iter()).chain(session.catalog.view_names());
        Err(names
            .map(|n| {
                (
                    datafusion_common::utils::datafusion_strsim::levenshtein(&n, name),
                    n,
                )
            })
            .filter(|(distance, _)| *distance <= 3)
            .min()
            .map(|(_, n)| n))
    }

    /// The logical plan of one SQL query over this session's catalog.
    pub(crate) fn query_plan(&self, query: &str) -> Result<LogicalPlan> {
        let mut statements = parse_statements(query)?;
        let (Some(statement), 1) = (statements.pop(), statements.len() + 1) else {
            return Err(Error::sql("sql_query takes one query"));
        };
        let Statement::Query(query) = statement.statement else {
            return Err(Error::sql_at("sql_query takes a query", Some(statement.position)));
        };
        self.session().binder()?.plan_query(*query)
    }

    /// Registers the query `plan` as a temporary view `name`.
    pub(crate) fn add_plan_view(&self, name: &str, plan: &LogicalPlan) -> Result<()> {
        let mut session = self.session();
        let mut catalog = (*session.catalog).clone();
        catalog.add_view(
            name.to_string(),
            ViewDef {
                body: ViewBody::Plan(plan.clone()),
                text: plan.display_indent().to_string(),
                schema: Arc::new(plan.schema().as_arrow().clone()),
            },
        )?;
        session.catalog = Arc::new(catalog);
        Ok(())
    }

    /// The session's functions (as a [`Table`] resolves calls by name).
    pub(crate) fn functions(&self) -> Result<FunctionRegistry> {
        let session = self.session();
        let zone = session.config.local_time_zone()?;
        Ok(session.functions(&zone))
    }

    /// Analyzes `plan` as a query's is, for its errors.
    pub(crate) fn check_plan(&self, plan: LogicalPlan) -> Result<()> {
        self.session().binder()?.finish(plan).map(|_| ())
    }

    /// Runs the query `plan` (a [`Table`]'s), as a SQL query runs.
    pub(crate) fn execute_plan(&self, plan: LogicalPlan) -> Result<TableResult> {
        let mut session = self.session();
        let logical = session.binder()?.finish(plan)?;
        session.run_query(logical)
    }

    /// The logical plan and job graph of the query `plan`, as `EXPLAIN`'s.
    pub(crate) fn explain_plan(&self, plan: LogicalPlan) -> Result<String> {
        let session = self.session();
        let binder = session.binder()?;
        let logical = binder.finish(plan)?;
        let plan = Planner::new(&binder, &session.config, &BuiltinConnectors)?
            .plan_query(&logical, RESULT_CHANNEL)?;
        Ok(format!(
            "== Logical Plan ==\n{}\n\n== Job Graph ==\n{}",
            logical.display_indent(),
            session.explain(plan, false)?
        ))
    }

    /// Starts `INSERT INTO sink SELECT * FROM (plan)`: the query as a view
    /// of a catalog of its own, so that the insert is bound as SQL's is.
    pub(crate) fn insert_plan(&self, plan: LogicalPlan, sink: &str) -> Result<JobHandle> {
        const VIEW: &str = "__weir_table";
        let mut session = self.session();
        let mut catalog = (*session.catalog).clone();
        let schema = Arc::new(plan.schema().as_arrow().clone());
        let text = plan.display_indent().to_string();
        catalog.add_view(
            VIEW.to_string(),
            ViewDef {
                body: ViewBody::Plan(plan),
                text,
                schema,
            },
        )?;
        let sql = format!("INSERT INTO `{}` SELECT * FROM `{VIEW}`", sink.replace('`', "``"));
        let statement = parse_statements(&sql)?.pop().expect("one statement");
        let Statement::Insert(insert) = statement.statement else {
            return Err(Error::Internal("an INSERT was expected".into()));
        };
        let binder = session.binder_over(Arc::new(catalog))?;
        session.run_insert(&binder, *insert, sink)
    }

    /// Sets a configuration key, as `SET 'key' = 'value'` does.
    pub fn set(&self, key: &str, value: &str) -> Result<()> {
        self.session().config.set(key, value)
    }

    /// The session's settings.
    pub fn config(&self) -> SessionConfig {
        self.session().config.clone()
    }

    /// Registers a scalar function SQL can call by its name.
    pub fn register_udf(&self, function: ScalarUDF) {
        self.session().user_functions.push(Arc::new(function));
    }

    /// Jobs started in this session.
    pub fn jobs(&self) -> Vec<JobHandle> {
        self.session().jobs.clone()
    }

    /// Names of the tables.
    pub fn table_names(&self) -> Vec<String> {
        self.session().catalog.table_names()
    }

    /// Names of the views.
    pub fn view_names(&self) -> Vec<String> {
        self.session().catalog.view_names()
    }

    /// The connector options of table `name` (`WITH (...)`), in declaration order.
    pub fn table_options(&self, name: &str) -> Option<Vec<(String, String)>> {
        let session = self.session();
        let table = session.catalog.table(name)?;
        Some(table.options.entries().to_vec())
    }
}

impl Session {
    /// Runs a bound query: a job into a collect sink, its rows the result's.
    fn run_query(&mut self, logical: LogicalPlan) -> Result<TableResult> {
        let binder = self.binder()?;
        let schema: SchemaRef = Arc::new(logical.schema().as_arrow().clone());
        let (sender, receiver) = crossbeam_channel::bounded(16);
        let plan =
            Planner::new(&binder, &self.config, &BuiltinConnectors)?.plan_query(&logical, RESULT_CHANNEL)?;
        let updating = plan.nodes.last().is_some_and(|n| n.mode.is_updating());
        let results = ResultChannels::from([(RESULT_CHANNEL, ResultSender::Batches(sender))]);
        let job = self.start(plan, "collect".to_string(), results)?;
        Ok(TableResult {
            schema,
            body: ResultBody::Stream { receiver, job },
            updating,
        })
    }

    /// Binds and starts an `INSERT` into `target` with `binder`.
    fn run_insert(
        &mut self,
        binder: &Binder,
        insert: sqlparser::ast::Statement,
        target: &str,
    ) -> Result<JobHandle> {
        let logical = binder.bind_insert(insert)?;
        let plan = Planner::new(binder, &self.config, &BuiltinConnectors)?.plan_insert(&logical)?;
        let name = match self.config.pipeline_name() {
            Some(name) => name.to_string(),
            None => format!("insert-into_{target}"),
        };
        self.start(plan, name, ResultChannels::new())
    }

    fn binder(&self) -> Result<Binder> {
        self.binder_over(self.catalog.clone())
    }

    fn binder_over(&self, catalog: Arc<Catalog>) -> Result<Binder> {
        let zone = self.config.local_time_zone()?;
        Ok(Binder::new(catalog, Arc::new(self.functions(&zone)), &zone))
    }

    /// The session's functions: built-in and registered, in `zone`.
    fn functions(&self, zone: &str) -> FunctionRegistry {
        let mut functions = FunctionRegistry::new(zone);
        for f in &self.user_functions {
            functions.register_scalar(f.clone());
        }
        functions
    }

    /// The plan as EXPLAIN shows it: its job graph, hash keys decoded with
    /// the session's functions.
    fn explain(&self, plan: PlanSpec, changelog_mode: bool) -> Result<String> {
        let zone = plan.time_zone.clone();
        let functions = self.functions(&zone);
        JobGraph::of(plan).explain(changelog_mode, &DecodeContext::new(&functions, &zone))
    }

    /// Starts `plan` as a job named `name`, its collect sinks sending to
    /// `results`.
    fn start(&mut self, plan: PlanSpec, name: String, results: ResultChannels) -> Result<JobHandle> {
        let (built, settings) = self.prepare(plan, name, &results)?;
        let job = supervisor::start(built, settings)?;
        self.jobs.push(job.clone());
        Ok(job)
    }

    /// What a job of `plan` named `name` runs: its operators built (collect
    /// sinks sending to `results`) and its settings from this session. The
    /// plan goes through its JSON first, so a job always runs what a plan
    /// shipped to another process would.
    fn prepare(
        &self,
        plan: PlanSpec,
        name: String,
        results: &ResultChannels,
    ) -> Result<(ExecutionGraph, JobSettings)> {
        let json = serde_json::to_string(&plan)
            .map_err(|e| Error::Internal(format!("the plan could not be written out: {e}")))?;
        let plan: PlanSpec = serde_json::from_str(&json)
            .map_err(|e| Error::Internal(format!("the plan written out could not be read: {e}")))?;
        let max_parallelism = self.config.max_parallelism()?;
        if let Some(node) = plan.nodes.iter().find(|n| n.parallelism > max_parallelism) {
            return Err(Error::Plan(format!(
                "parallelism {} of {} is above the max parallelism {max_parallelism} \
                 ('pipeline.max-parallelism')",
                node.parallelism, node.name
            )));
        }
        let mut notes = Vec::new();
        let restore = match self.config.get(weir_common::config::checkpoint::SAVEPOINT_PATH) {
            None => None,
            Some(path) => {
                match resolve_restore(&weir_common::config::checkpoint::path_option(path)?, &name)? {
                    RestorePoint::Checkpoint {
                        dir,
                        metadata,
                        chosen,
                        skipped,
                    } => {
                        notes.extend(
                            skipped
                                .into_iter()
                                .map(|s| format!("skipped a damaged checkpoint: {s}")),
                        );
                        if metadata.max_parallelism != max_parallelism {
                            return Err(Error::State(format!(
                                "checkpoint {} has {} key groups ('pipeline.max-parallelism'), this job {max_parallelism}; \
                             the max parallelism cannot change across a restore",
                                dir.display(),
                                metadata.max_parallelism
                            )));
                        }
                        notes.push(format!("restoring {chosen}"));
                        Some(RestoredCheckpoint {
                            dir,
                            metadata: *metadata,
                        })
                    }
                    RestorePoint::Nothing { skipped } => {
                        notes.extend(
                            skipped
                                .into_iter()
                                .map(|s| format!("skipped a damaged checkpoint: {s}")),
                        );
                        notes.push(format!("no complete checkpoint in {path}: the job starts afresh"));
                        None
                    }
                }
            }
        };
        let graph = JobGraph::of(plan);
        if let Some(restored) = &restore {
            let uids = graph.operator_uids();
            let rescaled: Vec<String> = graph
                .vertices
                .iter()
                .enumerate()
                .zip(&uids)
                .filter_map(|((index, vertex), (source, operators))| {
                    let holds = |t: &&weir_state::checkpoint::metadata::TaskState| {
                        t.source_id.as_ref().is_some_and(|s| Some(s) == source.as_ref())
                            || t.operators.iter().any(|o| operators.contains(&o.operator_id))
                    };
                    let old = restored.metadata.tasks.iter().find(holds)?;
                    (old.parallelism != vertex.parallelism).then(|| {
                        format!(
                            "{} from {} to {}",
                            graph.vertex_name(index),
                            old.parallelism,
                            vertex.parallelism
                        )
                    })
                })
                .collect();
            if !rescaled.is_empty() {
                notes.push(format!("rescaling {}", rescaled.join("; ")));
            }
        }
        let checkpoint = CheckpointConfig::from_session(&self.config)?;
        let job_id = weir_common::ids::JobId::new();
        if let Some(config) = &checkpoint {
            notes.push(format!(
                "job id {job_id}: checkpoints go to {}",
                weir_common::config::checkpoint::display_path(&weir_state::checkpoint::storage::run_dir(
                    &config.dir,
                    &name,
                    &job_id
                ))
            ));
        }
        let settings = JobSettings {
            name,
            job_id,
            max_parallelism,
            batch_size: self.config.batch_size()?,
            channel_capacity: self.config.channel_capacity()?,
            source_idle_timeout: self.config.source_idle_timeout()?,
            restart: RestartStrategy::from_session(
                &self.config,
                checkpoint.as_ref().is_some_and(|c| c.interval.is_some()),
            )?,
            checkpoint,
            restore,
            notes,
            state_backend: self.config.state_backend()?,
            transport: self.transport.clone(),
        };
        // The plan's expressions are of the zone it was planned in.
        let zone = &graph.plan.time_zone;
        let functions = self.functions(zone);
        let built = weir_job::execution::build(&graph, &DecodeContext::new(&functions, zone), results)?;
        Ok((built, settings))
    }

    /// A binder whose catalog also holds `table` (for binding its own columns).
    fn with_table(&self, table: &CatalogTable) -> Result<Binder> {
        let mut catalog = (*self.catalog).clone();
        let _ = catalog.drop_table(&table.name);
        catalog.add_table(table.clone())?;
        self.binder_over(Arc::new(catalog))
    }
}
