//! The embedded API: an [`Engine`] runs SQL statements; queries and `INSERT`s
//! start jobs whose results come back as Arrow record batches.

use std::sync::{Arc, Mutex};

use arrow::array::StringArray;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use crossbeam_channel::Receiver;
use datafusion_expr::{ExprSchemable, LogicalPlan, ScalarUDF};

use crate::checkpoint::storage::{RestorePoint, resolve_restore};
use crate::checkpoint::{self, CheckpointConfig, RestartStrategy};
use crate::config::SessionConfig;
use crate::frontend::binder::Binder;
use crate::frontend::catalog::{
    Catalog, ColumnDef, MetadataColumn, TableDef, TableOptions, ViewBody, ViewDef, WatermarkDef,
};
use crate::frontend::functions::FunctionRegistry;
use crate::frontend::parser::{
    ColumnSpec, CreateTable, ParsedStatement, ShowWhat, Statement, parse_statements,
};
use crate::frontend::types::{flink_type_name, is_ltz};
use crate::plan::{Planner, StreamPlan};
use crate::runtime::job::{self, JobHandle, JobSettings, JobStatus, RestoredCheckpoint};
use crate::table::Table;
use crate::{Error, Result, connectors};

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
}

/// What a statement returns.
pub struct TableResult {
    schema: SchemaRef,
    body: ResultBody,
    /// The rows are a changelog: batches carry row kinds (see [`crate::changelog`]).
    updating: bool,
}

enum ResultBody {
    /// DDL and settings: nothing to show.
    Done,
    /// Rows computed at once (SET, EXPLAIN).
    Rows(Vec<RecordBatch>),
    /// A query's rows, arriving as its job runs.
    Stream {
        receiver: Receiver<RecordBatch>,
        job: JobHandle,
    },
    /// An `INSERT` job.
    Job(JobHandle),
}

impl std::fmt::Debug for TableResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.body {
            ResultBody::Done => "done",
            ResultBody::Rows(_) => "rows",
            ResultBody::Stream { .. } => "stream",
            ResultBody::Job(_) => "job",
        };
        write!(f, "TableResult({kind}, {:?})", self.schema)
    }
}

impl TableResult {
    fn done() -> Self {
        TableResult {
            schema: Arc::new(Schema::empty()),
            body: ResultBody::Done,
            updating: false,
        }
    }

    /// A table of text columns.
    fn table(columns: &[&str], rows: Vec<Vec<Option<String>>>) -> Result<Self> {
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .map(|c| Field::new(*c, DataType::Utf8, true))
                .collect::<Vec<_>>(),
        ));
        let arrays = (0..columns.len())
            .map(|i| {
                Arc::new(rows.iter().map(|r| r[i].clone()).collect::<StringArray>()) as arrow::array::ArrayRef
            })
            .collect();
        let batch = RecordBatch::try_new(schema.clone(), arrays)?;
        Ok(TableResult {
            schema,
            body: ResultBody::Rows(vec![batch]),
            updating: false,
        })
    }

    fn text(column: &str, lines: Vec<String>) -> Result<Self> {
        let schema = Arc::new(Schema::new(vec![Field::new(column, DataType::Utf8, false)]));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(StringArray::from(lines))])?;
        Ok(TableResult {
            schema,
            body: ResultBody::Rows(vec![batch]),
            updating: false,
        })
    }

    /// The schema of the rows (their data columns: an updating result's
    /// batches have the op column besides).
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Whether the rows are a changelog: each batch then ends with the op
    /// column, read by [`crate::changelog::row_kinds`].
    pub fn is_updating(&self) -> bool {
        self.updating
    }

    /// All rows of a bounded query as a table: its changelog applied to an
    /// empty table (for an insert-only query, every row).
    pub fn materialize(self) -> Result<RecordBatch> {
        let mut table = crate::changelog::Materialized::new(&self.schema)?;
        for batch in self.collect()? {
            table.apply(&batch)?;
        }
        table.table()
    }

    /// The job the statement started (a query or an `INSERT`).
    pub fn job(&self) -> Option<&JobHandle> {
        match &self.body {
            ResultBody::Stream { job, .. } | ResultBody::Job(job) => Some(job),
            _ => None,
        }
    }

    /// All rows: for a query, waits for its (bounded) job to finish; for an
    /// `INSERT`, waits for the job and returns no rows.
    pub fn collect(self) -> Result<Vec<RecordBatch>> {
        match self.body {
            ResultBody::Done => Ok(vec![]),
            ResultBody::Rows(batches) => Ok(batches),
            ResultBody::Job(job) => job.wait().map(|_| vec![]),
            ResultBody::Stream { .. } => self.stream().collect(),
        }
    }

    /// The rows as they arrive. Dropping the stream cancels the query's job.
    pub fn stream(self) -> ResultStream {
        match self.body {
            ResultBody::Stream { receiver, job } => ResultStream {
                receiver: Some(receiver),
                rows: vec![].into_iter(),
                job: Some(job),
                done: false,
            },
            ResultBody::Rows(batches) => ResultStream {
                receiver: None,
                rows: batches.into_iter(),
                job: None,
                done: false,
            },
            ResultBody::Job(job) => {
                let result = job.wait().map(drop);
                ResultStream {
                    receiver: None,
                    rows: vec![].into_iter(),
                    job: None,
                    done: result.is_ok(),
                }
            }
            ResultBody::Done => ResultStream {
                receiver: None,
                rows: vec![].into_iter(),
                job: None,
                done: true,
            },
        }
    }

    /// Waits for the statement's job, if any, to end.
    pub fn wait(&self) -> Result<()> {
        match self.job() {
            Some(job) => job.wait().map(drop),
            None => Ok(()),
        }
    }
}

/// Rows of a query, batch by batch, as windows fire.
pub struct ResultStream {
    receiver: Option<Receiver<RecordBatch>>,
    rows: std::vec::IntoIter<RecordBatch>,
    job: Option<JobHandle>,
    done: bool,
}

impl ResultStream {
    /// The query's job.
    pub fn job(&self) -> Option<&JobHandle> {
        self.job.as_ref()
    }
}

impl ResultStream {
    /// Like `next`, but waits at most `timeout`: `Some(Ok(None))` when no
    /// batch arrived in time, `None` when the query has ended.
    pub fn next_timeout(&mut self, timeout: std::time::Duration) -> Option<Result<Option<RecordBatch>>> {
        if let Some(batch) = self.rows.next() {
            return Some(Ok(Some(batch)));
        }
        if self.done {
            return None;
        }
        let receiver = self.receiver.as_ref()?;
        match receiver.recv_timeout(timeout) {
            Ok(batch) => Some(Ok(Some(batch))),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Some(Ok(None)),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => self.ended().map(|r| r.map(Some)),
        }
    }

    /// The sink is gone: the job ended. How.
    fn ended(&mut self) -> Option<Result<RecordBatch>> {
        self.done = true;
        let job = self.job.as_ref()?;
        match job.wait() {
            Ok(JobStatus::Finished) => None,
            Ok(JobStatus::Cancelled) => Some(Err(Error::Execution("the query was cancelled".into()))),
            Ok(status) => Some(Err(Error::Execution(format!("the query ended as {status:?}")))),
            Err(e) => Some(Err(e)),
        }
    }
}

impl Iterator for ResultStream {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(batch) = self.rows.next() {
            return Some(Ok(batch));
        }
        if self.done {
            return None;
        }
        let receiver = self.receiver.as_ref()?;
        match receiver.recv() {
            Ok(batch) => Some(Ok(batch)),
            Err(_) => self.ended(),
        }
    }
}

impl Drop for ResultStream {
    fn drop(&mut self) {
        if !self.done
            && let Some(job) = &self.job
        {
            job.cancel();
        }
    }
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
            })),
        }
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
    /// [`crate::plan::spec`] and [`Engine::submit`]).
    pub fn plan(&self, insert: &str) -> Result<crate::plan::spec::PlanSpec> {
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
        let plan = Planner::new(&binder, &session.config)?.plan_insert(&logical)?;
        plan.to_spec(&session.config)
    }

    /// The stream plan of an `INSERT`, built back from its spec as a job
    /// would be (operator tests take their operators from it).
    #[cfg(test)]
    pub(crate) fn stream_plan(&self, insert: &str) -> Result<crate::plan::StreamPlan> {
        let spec = self.plan(insert)?;
        let session = self.session();
        let zone = session.config.local_time_zone()?;
        let functions = session.functions(&zone);
        spec.build(&crate::plan::codec::DecodeContext::new(&functions, &zone))
    }

    /// The stream plan of a [`Table`]'s query into a collect sink (operator
    /// tests take their operators from it).
    #[cfg(test)]
    pub(crate) fn table_stream_plan(&self, plan: LogicalPlan) -> Result<crate::plan::StreamPlan> {
        let session = self.session();
        let binder = session.binder()?;
        let logical = binder.finish(plan)?;
        let (sender, _receiver) = crossbeam_channel::bounded(1);
        let sink = Arc::new(connectors::collect::CollectSinkFactory::new(sender));
        Planner::new(&binder, &session.config)?.plan_query(&logical, sink)
    }

    /// Runs a plan made by [`Engine::plan`] (here or in another engine, or
    /// read back from its JSON) as a job named `name`, with this session's
    /// functions and checkpoint settings.
    pub fn submit(&self, plan: &crate::plan::spec::PlanSpec, name: &str) -> Result<JobHandle> {
        let mut session = self.session();
        let zone = session.config.local_time_zone()?;
        let functions = session.functions(&zone);
        let plan = plan.build(&crate::plan::codec::DecodeContext::new(&functions, &zone))?;
        session.start(plan, name.to_string())
    }

    /// A catalog table or view as a [`Table`] (Flink's `from`): its
    /// columns, computed ones included, as `SELECT * FROM name` has them.
    pub fn from(&self, name: &str) -> Result<Table> {
        if !self.session().catalog.contains(name) {
            let session = self.session();
            let names: Vec<String> = session
                .catalog
                .table_names()
                .into_iter()
                .chain(session.catalog.view_names())
                .collect();
            let hint = (names.iter())
                .map(|n| {
                    (
                        datafusion_common::utils::datafusion_strsim::levenshtein(n, name),
                        n,
                    )
                })
                .filter(|(distance, _)| *distance <= 3)
                .min()
                .map(|(_, n)| format!("; did you mean '{n}'?"))
                .unwrap_or_default();
            return Err(Error::Plan(format!(
                "from: no table or view named '{name}'{hint}"
            )));
        }
        self.sql_query(&format!("SELECT * FROM `{}`", name.replace('`', "``")))
    }

    /// A SQL query as a [`Table`] to go on with in code (Flink's
    /// `sqlQuery`); its views and tables are this session's.
    pub fn sql_query(&self, query: &str) -> Result<Table> {
        let mut statements = parse_statements(query)?;
        let (Some(statement), 1) = (statements.pop(), statements.len() + 1) else {
            return Err(Error::sql("sql_query takes one query"));
        };
        let Statement::Query(query) = statement.statement else {
            return Err(Error::sql_at("sql_query takes a query", Some(statement.position)));
        };
        let plan = self.session().binder()?.plan_query(*query)?;
        Ok(Table::new(self.clone(), plan))
    }

    /// Rows given as record batches as a bounded [`Table`] (Flink's
    /// `fromValues`); `schema` names and types its columns.
    pub fn from_batches(&self, schema: SchemaRef, batches: &[RecordBatch]) -> Result<Table> {
        let mut rows = Vec::new();
        for batch in batches {
            if batch.schema().fields() != schema.fields() {
                return Err(Error::Plan(format!(
                    "from_batches: a batch's columns ({}) are not the schema's ({})",
                    batch.schema(),
                    schema
                )));
            }
            for row in 0..batch.num_rows() {
                let values = (batch.columns().iter().zip(schema.fields()))
                    .map(|(column, field)| {
                        let value = datafusion_common::ScalarValue::try_from_array(column, row)?;
                        Ok(datafusion_expr::lit(value).alias(field.name()))
                    })
                    .collect::<Result<Vec<_>>>()?;
                rows.push(values);
            }
        }
        if rows.is_empty() {
            return Err(Error::Plan(
                "from_batches: no rows (a table needs at least one)".into(),
            ));
        }
        let unnamed: Vec<Vec<datafusion_expr::Expr>> = (rows.iter())
            .map(|r| r.iter().map(|e| e.clone().unalias()).collect())
            .collect();
        let plan = datafusion_expr::LogicalPlanBuilder::values(unnamed)
            .and_then(|b| {
                let names = (b.schema().columns().into_iter().zip(schema.fields()))
                    .map(|(c, f)| datafusion_expr::Expr::Column(c).alias(f.name()));
                b.project(names)
            })
            .and_then(|b| b.build())
            .map_err(|e| Error::Plan(format!("from_batches: {}", e.strip_backtrace())))?;
        Ok(Table::new(self.clone(), plan))
    }

    /// Registers `table` as a temporary view SQL (and [`Engine::from`]) can
    /// read by `name` (Flink's `createTemporaryView`).
    pub fn create_temporary_view(&self, name: &str, table: &Table) -> Result<()> {
        let mut session = self.session();
        let mut catalog = (*session.catalog).clone();
        catalog.add_view(
            name.to_string(),
            ViewDef {
                body: ViewBody::Plan(table.logical_plan().clone()),
                text: table.logical_plan().display_indent().to_string(),
                schema: table.schema(),
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
        let (sender, _receiver) = crossbeam_channel::bounded(1);
        let sink = Arc::new(connectors::collect::CollectSinkFactory::new(sender));
        let stream = Planner::new(&binder, &session.config)?.plan_query(&logical, sink)?;
        Ok(format!(
            "== Logical Plan ==\n{}\n\n== Job Graph ==\n{}",
            logical.display_indent(),
            stream.explain(false)
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

    fn execute(&self, parsed: ParsedStatement) -> Result<TableResult> {
        let position = parsed.position;
        let mut session = self.session();
        match parsed.statement {
            Statement::CreateTable(create) => {
                if session.catalog.contains(&create.name) {
                    if create.if_not_exists {
                        return Ok(TableResult::done());
                    }
                    return Err(Error::sql_at(
                        format!("a table or view named '{}' already exists", create.name),
                        Some(position),
                    ));
                }
                let table = session.table_from_ddl(*create)?;
                let mut catalog = (*session.catalog).clone();
                catalog.add_table(table)?;
                session.catalog = Arc::new(catalog);
                Ok(TableResult::done())
            }
            Statement::CreateView(mut view) => {
                Binder::prepare_query(&mut view.query)?;
                if session.catalog.contains(&view.name) {
                    if view.if_not_exists {
                        return Ok(TableResult::done());
                    }
                    return Err(Error::sql_at(
                        format!("a table or view named '{}' already exists", view.name),
                        Some(position),
                    ));
                }
                let plan = session.binder()?.bind_query(*view.query.clone())?;
                let mut fields: Vec<Field> = plan
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone())
                    .collect();
                if !view.columns.is_empty() {
                    if view.columns.len() != fields.len() {
                        return Err(Error::sql_at(
                            format!(
                                "view '{}' names {} columns but its query has {}",
                                view.name,
                                view.columns.len(),
                                fields.len()
                            ),
                            Some(position),
                        ));
                    }
                    for (field, name) in fields.iter_mut().zip(&view.columns) {
                        *field = field.clone().with_name(name);
                    }
                }
                let mut catalog = (*session.catalog).clone();
                let name = view.name.clone();
                catalog.add_view(
                    name,
                    ViewDef {
                        body: ViewBody::Sql(view),
                        text: parsed.text,
                        schema: Arc::new(Schema::new(fields)),
                    },
                )?;
                session.catalog = Arc::new(catalog);
                Ok(TableResult::done())
            }
            Statement::CreateFunction { name, implementation } => {
                create_function(&mut session, &name, &implementation, Some(position))
            }
            Statement::Drop(drop) => {
                let mut catalog = (*session.catalog).clone();
                let removed = if drop.view {
                    catalog.drop_view(&drop.name)
                } else {
                    catalog.drop_table(&drop.name)
                };
                if !removed && !drop.if_exists {
                    let kind = if drop.view { "view" } else { "table" };
                    return Err(Error::sql_at(
                        format!("{kind} '{}' does not exist", drop.name),
                        Some(position),
                    ));
                }
                session.catalog = Arc::new(catalog);
                Ok(TableResult::done())
            }
            Statement::Set { assignment: None } => {
                let lines = session
                    .config
                    .entries()
                    .map(|(k, v)| format!("'{k}' = '{v}'"))
                    .collect();
                TableResult::text("setting", lines)
            }
            Statement::Set {
                assignment: Some((key, value)),
            } => {
                session.config.set(&key, &value).map_err(|e| match e {
                    Error::Sql { message, .. } => Error::sql_at(message, Some(position)),
                    other => other,
                })?;
                Ok(TableResult::done())
            }
            Statement::Show(what) => match what {
                ShowWhat::Tables => TableResult::text("table name", session.catalog.table_names()),
                ShowWhat::Views => TableResult::text("view name", session.catalog.view_names()),
                ShowWhat::Functions => {
                    let registry = {
                        let zone = session.config.local_time_zone()?;
                        let mut functions = FunctionRegistry::new(&zone);
                        for f in &session.user_functions {
                            functions.register_scalar(f.clone());
                        }
                        functions
                    };
                    let mut names: Vec<String> = registry
                        .scalar_names()
                        .into_iter()
                        .chain(registry.aggregate_names())
                        .map(|n| n.to_uppercase())
                        .collect();
                    names.sort();
                    names.dedup();
                    TableResult::text("function name", names)
                }
                ShowWhat::Jobs => {
                    let rows = session
                        .jobs
                        .iter()
                        .map(|job| {
                            let metrics = job.metrics();
                            let last = metrics.checkpoints.last().map(|c| {
                                format!(
                                    "{} ({} ms, {})",
                                    c.id,
                                    c.duration.as_millis(),
                                    human_bytes(c.state_bytes)
                                )
                            });
                            vec![
                                Some(job.id().to_string()),
                                Some(job.name().to_string()),
                                Some(format!("{:?}", metrics.status).to_uppercase()),
                                Some(format!("{:.1} s", metrics.uptime.as_secs_f64())),
                                Some(metrics.restarts.to_string()),
                                Some(metrics.checkpoints.len().to_string()),
                                Some(metrics.failed_checkpoints.to_string()),
                                last,
                                Some(metrics.max_backpressure().to_string()),
                            ]
                        })
                        .collect();
                    TableResult::table(
                        &[
                            "job id",
                            "job name",
                            "status",
                            "running for",
                            "restarts",
                            "checkpoints",
                            "failed checkpoints",
                            "last checkpoint",
                            "backpressure",
                        ],
                        rows,
                    )
                }
            },
            Statement::Describe(name) => describe(&session.catalog, &name, position),
            Statement::DescribeJob(id) => {
                let job = find_job(&session.jobs, &id, position)?;
                let rows = job
                    .metrics()
                    .tasks
                    .into_iter()
                    .map(|t| {
                        vec![
                            Some(t.name),
                            Some(t.records_in.to_string()),
                            Some(t.records_out.to_string()),
                            Some(t.records_written.to_string()),
                            Some(format!(
                                "{} ({:.0}%)",
                                t.backpressure_level,
                                t.backpressure * 100.0
                            )),
                            t.watermark.map(format_watermark),
                            Some(t.late_records_dropped.to_string()),
                        ]
                    })
                    .collect();
                TableResult::table(
                    &[
                        "task",
                        "records in",
                        "records out",
                        "records written",
                        "backpressure",
                        "watermark",
                        "late records dropped",
                    ],
                    rows,
                )
            }
            Statement::StopJob { id, savepoint } => {
                let job = find_job(&session.jobs, &id, position)?;
                if !savepoint {
                    job.cancel();
                    return Ok(TableResult::done());
                }
                let job = job.clone();
                drop(session);
                let path = job.stop_with_savepoint()?;
                TableResult::table(&["savepoint path"], vec![vec![Some(path.display().to_string())]])
            }
            Statement::Reset { key } => {
                match key {
                    Some(key) => session.config.reset(&key),
                    None => session.config.reset_all(),
                }
                Ok(TableResult::done())
            }
            Statement::Explain {
                inner,
                changelog_mode,
            } => {
                let binder = session.binder()?;
                let (logical, plan) = match inner.statement {
                    Statement::Query(query) => {
                        let logical = binder.bind_query(*query)?;
                        let (sender, _receiver) = crossbeam_channel::bounded(1);
                        let sink = Arc::new(connectors::collect::CollectSinkFactory::new(sender));
                        let plan = Planner::new(&binder, &session.config)?.plan_query(&logical, sink)?;
                        (logical, plan)
                    }
                    Statement::Insert(insert) => {
                        let logical = binder.bind_insert(*insert)?;
                        let plan = Planner::new(&binder, &session.config)?.plan_insert(&logical)?;
                        (logical, plan)
                    }
                    _ => {
                        return Err(Error::sql_at(
                            "EXPLAIN takes a query or an INSERT",
                            Some(position),
                        ));
                    }
                };
                let text = format!(
                    "== Logical Plan ==\n{}\n\n== Job Graph ==\n{}",
                    logical.display_indent(),
                    plan.explain(changelog_mode)
                );
                TableResult::text("plan", vec![text])
            }
            Statement::Query(query) => {
                let logical = session.binder()?.bind_query(*query)?;
                session.run_query(logical)
            }
            Statement::Insert(insert) => {
                let target = match insert.as_ref() {
                    sqlparser::ast::Statement::Insert(i) => i.table.to_string(),
                    _ => String::new(),
                };
                let binder = session.binder()?;
                let job = session.run_insert(&binder, *insert, &target)?;
                Ok(TableResult {
                    schema: Arc::new(Schema::empty()),
                    body: ResultBody::Job(job),
                    updating: false,
                })
            }
        }
    }
}

/// The job of this session with id `id`; the error lists the others.
fn find_job<'a>(jobs: &'a [JobHandle], id: &str, position: crate::error::Position) -> Result<&'a JobHandle> {
    jobs.iter()
        .find(|j| j.id().to_string() == id.trim())
        .ok_or_else(|| {
            Error::sql_at(
                format!(
                    "no job '{id}'; the jobs of this session are: {}",
                    jobs.iter()
                        .map(|j| j.id().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Some(position),
            )
        })
}

/// Bytes for people: `512 B`, `3.4 kB`, `12.0 MB`.
pub fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b < 1_000 => format!("{b} B"),
        b if b < 1_000_000 => format!("{:.1} kB", b as f64 / 1e3),
        b if b < 1_000_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        b => format!("{:.2} GB", b as f64 / 1e9),
    }
}

/// A watermark as a UTC timestamp, as Flink's web UI shows it.
fn format_watermark(watermark: i64) -> String {
    chrono::DateTime::from_timestamp_millis(watermark).map_or(watermark.to_string(), |t| {
        t.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
    })
}

/// `DESCRIBE name`: Flink's columns (name, type, null, key, extras, watermark).
fn describe(catalog: &Catalog, name: &str, position: crate::error::Position) -> Result<TableResult> {
    let columns = ["name", "type", "null", "key", "extras", "watermark"];
    if let Some(table) = catalog.table(name) {
        let rows = table
            .columns
            .iter()
            .map(|c| {
                let mut data_type = flink_type_name(&c.data_type);
                if !c.nullable {
                    data_type.push_str(" NOT NULL");
                }
                if let Some(kind) = table.time_attribute(&c.name) {
                    data_type.push_str(&format!(" *{}*", kind.to_uppercase()));
                }
                vec![
                    Some(c.name.clone()),
                    Some(data_type),
                    Some(if c.nullable { "TRUE" } else { "FALSE" }.to_string()),
                    table
                        .primary_key
                        .contains(&c.name)
                        .then(|| format!("PRI({})", table.primary_key.join(", "))),
                    c.computed_text.as_ref().map(|t| format!("AS {t}")).or_else(|| {
                        c.metadata.as_ref().map(|m| {
                            let from = if m.key == c.name {
                                String::new()
                            } else {
                                format!(" FROM '{}'", m.key)
                            };
                            let virt = if m.is_virtual { " VIRTUAL" } else { "" };
                            format!("METADATA{from}{virt}")
                        })
                    }),
                    table
                        .watermark
                        .as_ref()
                        .filter(|w| w.column == c.name)
                        .map(|w| w.text.clone()),
                ]
            })
            .collect();
        return TableResult::table(&columns, rows);
    }
    if let Some(view) = catalog.view(name) {
        let rows = view
            .schema
            .fields()
            .iter()
            .map(|f| {
                vec![
                    Some(f.name().clone()),
                    Some(flink_type_name(f.data_type())),
                    Some(if f.is_nullable() { "TRUE" } else { "FALSE" }.to_string()),
                    None,
                    None,
                    None,
                ]
            })
            .collect();
        return TableResult::table(&columns, rows);
    }
    let hint = catalog
        .similar_name(name)
        .map(|s| format!(" (did you mean '{s}'?)"))
        .unwrap_or_default();
    Err(Error::sql_at(
        format!("table or view '{name}' does not exist{hint}"),
        Some(position),
    ))
}

impl Session {
    /// Runs a bound query: a job into a collect sink, its rows the result's.
    fn run_query(&mut self, logical: LogicalPlan) -> Result<TableResult> {
        let binder = self.binder()?;
        let schema: SchemaRef = Arc::new(logical.schema().as_arrow().clone());
        let (sender, receiver) = crossbeam_channel::bounded(16);
        let sink = Arc::new(connectors::collect::CollectSinkFactory::new(sender));
        let plan = Planner::new(&binder, &self.config)?.plan_query(&logical, sink)?;
        let updating = plan.nodes.last().is_some_and(|n| n.mode().is_updating());
        let job = self.start(plan, "collect".to_string())?;
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
        let plan = Planner::new(binder, &self.config)?.plan_insert(&logical)?;
        let name = match self.config.pipeline_name() {
            Some(name) => name.to_string(),
            None => format!("insert-into_{target}"),
        };
        self.start(plan, name)
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

    /// The plan written out as data (JSON) and built again: every job runs
    /// from its plan as a value, as a plan shipped to another process would.
    fn through_spec(&self, plan: StreamPlan) -> Result<StreamPlan> {
        let spec = plan.to_spec(&self.config)?;
        let json = serde_json::to_string(&spec)
            .map_err(|e| Error::Internal(format!("the plan could not be written out: {e}")))?;
        let spec: crate::plan::spec::PlanSpec = serde_json::from_str(&json)
            .map_err(|e| Error::Internal(format!("the plan written out could not be read: {e}")))?;
        let zone = self.config.local_time_zone()?;
        let functions = self.functions(&zone);
        spec.build(&crate::plan::codec::DecodeContext::new(&functions, &zone))
    }

    fn start(&mut self, plan: StreamPlan, name: String) -> Result<JobHandle> {
        let max_parallelism = self.config.max_parallelism()?;
        if let Some(node) = plan.nodes.iter().find(|n| n.parallelism > max_parallelism) {
            return Err(Error::Plan(format!(
                "parallelism {} of {} is above the max parallelism {max_parallelism} \
                 ('pipeline.max-parallelism')",
                node.parallelism,
                node.kind.describe()
            )));
        }
        let mut notes = Vec::new();
        let restore = match self.config.get(checkpoint::config::SAVEPOINT_PATH) {
            None => None,
            Some(path) => match resolve_restore(&checkpoint::config::path_option(path), &name)? {
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
            },
        };
        let graph = self.through_spec(plan)?.to_job_graph();
        if let Some(restored) = &restore {
            let uids = crate::runtime::deploy::operator_uids(&graph);
            let rescaled: Vec<String> = graph
                .vertices
                .iter()
                .zip(&uids)
                .filter_map(|(vertex, (source, operators))| {
                    let holds = |t: &&crate::checkpoint::TaskState| {
                        t.source_id.as_ref().is_some_and(|s| Some(s) == source.as_ref())
                            || t.operators.iter().any(|o| operators.contains(&o.operator_id))
                    };
                    let old = restored.metadata.tasks.iter().find(holds)?;
                    (old.parallelism != vertex.parallelism).then(|| {
                        format!(
                            "{} from {} to {}",
                            vertex.name(),
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
        let job_id = crate::runtime::job_id::JobId::new();
        if let Some(config) = &checkpoint {
            notes.push(format!(
                "job id {job_id}: checkpoints go to {}",
                checkpoint::storage::run_dir(&config.dir, &name, &job_id).display()
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
        };
        let job = job::start(graph, settings)?;
        self.jobs.push(job.clone());
        Ok(job)
    }

    /// Builds a table from `CREATE TABLE`: types of computed columns come from
    /// binding them over the physical columns; the watermark is checked.
    fn table_from_ddl(&self, create: CreateTable) -> Result<TableDef> {
        let mut columns = Vec::new();
        for column in &create.columns {
            if columns.iter().any(|c: &ColumnDef| c.name == column.name()) {
                return Err(Error::sql(format!(
                    "column '{}' is declared twice in table '{}'",
                    column.name(),
                    create.name
                )));
            }
            columns.push(match column {
                ColumnSpec::Physical {
                    name,
                    data_type,
                    nullable,
                    metadata,
                } => ColumnDef {
                    metadata: metadata.as_ref().map(|(key, is_virtual)| MetadataColumn {
                        key: key.clone(),
                        is_virtual: *is_virtual,
                    }),
                    ..ColumnDef::physical(name.clone(), data_type.clone(), *nullable)
                },
                ColumnSpec::Computed { name, expr } => ColumnDef {
                    name: name.clone(),
                    data_type: DataType::Null,
                    nullable: true,
                    computed: Some(expr.as_ref().clone()),
                    computed_text: Some(expr.to_string()),
                    metadata: None,
                },
            });
        }
        let mut table = TableDef {
            name: create.name.clone(),
            columns,
            watermark: None,
            primary_key: create.primary_key.clone(),
            partition_keys: create.partition_keys.clone(),
            options: TableOptions::new(crate::frontend::legacy_options::translate(
                &create.name,
                create.options.clone(),
            )?)?,
        };
        // Type the computed columns by binding them over the physical columns.
        let computed: Vec<usize> = (0..table.columns.len())
            .filter(|i| table.columns[*i].computed.is_some())
            .collect();
        if !computed.is_empty() {
            let exprs = computed
                .iter()
                .map(|i| table.columns[*i].computed.clone().expect("computed"))
                .collect();
            let (bound, schema) = self
                .with_table(&table)?
                .bind_table_exprs(&table.name, true, exprs)?;
            for (i, expr) in computed.iter().zip(bound) {
                let field = expr.to_field(schema.as_ref())?.1;
                let (data_type, nullable) = (field.data_type().clone(), field.is_nullable());
                // The catalog keeps TIMESTAMP_LTZ in its own zone; binding gives it the session's.
                let data_type = if is_ltz(&data_type) {
                    crate::frontend::types::with_zone(&data_type, crate::frontend::types::LTZ_CATALOG_ZONE)
                } else {
                    data_type
                };
                table.columns[*i].data_type = data_type;
                table.columns[*i].nullable = nullable;
            }
        }
        if let Some(w) = &create.watermark {
            let Some(column) = table.columns.iter().find(|c| c.name == w.column) else {
                return Err(Error::sql(format!(
                    "the watermark column '{}' is not a column of table '{}'",
                    w.column, create.name
                )));
            };
            if !matches!(
                &column.data_type,
                DataType::Timestamp(
                    arrow::datatypes::TimeUnit::Millisecond | arrow::datatypes::TimeUnit::Second,
                    _
                )
            ) {
                return Err(Error::sql(format!(
                    "the watermark column '{}' must be TIMESTAMP(p) or TIMESTAMP_LTZ(p) with p at most 3, but is {}",
                    w.column,
                    flink_type_name(&column.data_type)
                )));
            }
            table.watermark = Some(WatermarkDef {
                column: w.column.clone(),
                expr: w.expr.clone(),
                text: w.text.clone(),
            });
            let (bound, schema) =
                self.with_table(&table)?
                    .bind_table_exprs(&table.name, false, vec![w.expr.clone()])?;
            let data_type = bound[0].get_type(schema.as_ref())?;
            if !matches!(data_type, DataType::Timestamp(_, _)) {
                return Err(Error::sql(format!(
                    "the watermark expression '{}' must return a timestamp, but returns {}",
                    w.text,
                    flink_type_name(&data_type)
                )));
            }
        }
        if let Some(key) = table
            .primary_key
            .iter()
            .find(|k| !table.columns.iter().any(|c| &c.name == *k))
        {
            return Err(Error::sql(format!(
                "primary key column '{key}' is not a column of table '{}'",
                table.name
            )));
        }
        for (i, key) in table.partition_keys.iter().enumerate() {
            match table.columns.iter().find(|c| &c.name == key) {
                None => {
                    return Err(Error::sql(format!(
                        "partition key '{key}' is not a column of table '{}'",
                        table.name
                    )));
                }
                Some(c) if c.computed.is_some() => {
                    return Err(Error::sql(format!(
                        "partition key '{key}' of table '{}' is a computed column; partition keys must be physical columns",
                        table.name
                    )));
                }
                Some(_) if table.partition_keys[..i].contains(key) => {
                    return Err(Error::sql(format!(
                        "partition key '{key}' is listed twice in table '{}'",
                        table.name
                    )));
                }
                Some(_) => {}
            }
        }
        connectors::validate_table(&table, &self.config)?;
        Ok(table)
    }

    /// A binder whose catalog also holds `table` (for binding its own columns).
    fn with_table(&self, table: &TableDef) -> Result<Binder> {
        let mut catalog = (*self.catalog).clone();
        let _ = catalog.drop_table(&table.name);
        catalog.add_table(table.clone())?;
        self.binder_over(Arc::new(catalog))
    }
}

/// `CREATE FUNCTION name AS 'class'`: a function registered under `name`,
/// else a Rust port of the class, else an error naming both ways.
fn create_function(
    session: &mut Session,
    name: &str,
    implementation: &str,
    position: Option<crate::error::Position>,
) -> Result<TableResult> {
    let registered = session.user_functions.iter().any(|f| {
        f.name().eq_ignore_ascii_case(name) || f.aliases().iter().any(|a| a.eq_ignore_ascii_case(name))
    });
    if registered {
        return Ok(TableResult::done());
    }
    match crate::frontend::ported_udfs::port(implementation, name) {
        Some(port) => {
            session.user_functions.push(Arc::new(port));
            Ok(TableResult::done())
        }
        None => Err(Error::sql_at(
            format!(
                "function '{name}' ({implementation}) is not registered: weir runs no Java; \
                 it has Rust ports of {}, and a Rust implementation of any other can be \
                 registered with Engine::register_udf before this statement",
                crate::frontend::ported_udfs::PORTED_CLASSES.join(", ")
            ),
            position,
        )),
    }
}
