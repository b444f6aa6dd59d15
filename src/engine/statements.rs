//! What each SQL statement does to a session: DDL changes its catalog, `SET`
//! its settings, queries and `INSERT`s start jobs, `SHOW`, `DESCRIBE` and
//! `EXPLAIN` return text, `COMPILE PLAN` writes a plan out as JSON and
//! `EXECUTE PLAN` runs one (as Flink's statements of those names do).

use std::path::Path;
use std::sync::Arc;
use weir_common::config::checkpoint::display_path;

use arrow::datatypes::{Field, Schema};

use crate::engine::result::{ResultBody, TableResult};
use crate::engine::{Engine, RESULT_CHANNEL, Session};
use crate::{Error, Result};
use weir_common::error::Position;
use weir_common::types::flink_type_name;
use weir_connectors::BuiltinConnectors;
use weir_connectors::build::ResultChannels;
use weir_functions::registry::FunctionRegistry;
use weir_job::supervisor::JobHandle;
use weir_plan::spec::{NodeSpec, PlanSpec, SinkSpec};
use weir_sql::binder::Binder;
use weir_sql::catalog::{Catalog, ViewBody, ViewDef};
use weir_sql::parser::{CreateView, Drop, ParsedStatement, ShowWhat, Statement};
use weir_sql::planner::Planner;

impl Engine {
    /// Runs one parsed statement.
    pub(super) fn execute(&self, parsed: ParsedStatement) -> Result<TableResult> {
        let position = parsed.position;
        let mut session = self.session();
        match parsed.statement {
            Statement::CreateTable(create) => session.create_table(*create, position),
            Statement::CreateView(view) => session.create_view(view, parsed.text, position),
            Statement::CreateFunction { name, implementation } => {
                create_function(&mut session, &name, &implementation, Some(position))
            }
            Statement::Drop(drop) => session.drop_object(drop, position),
            Statement::Set { assignment: None } => {
                let lines = (session.config.entries())
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
            Statement::Reset { key } => {
                match key {
                    Some(key) => session.config.reset(&key),
                    None => session.config.reset_all(),
                }
                Ok(TableResult::done())
            }
            Statement::Show(what) => session.show(what),
            Statement::Describe(name) => describe(&session.catalog, &name, position),
            Statement::DescribeJob(id) => describe_job(find_job(&session.jobs, &id, position)?),
            Statement::StopJob { id, savepoint } => {
                let job = find_job(&session.jobs, &id, position)?.clone();
                if !savepoint {
                    job.cancel();
                    return Ok(TableResult::done());
                }
                drop(session);
                let path = job.stop_with_savepoint()?;
                TableResult::table(&["savepoint path"], vec![vec![Some(display_path(&path))]])
            }
            Statement::Explain {
                inner,
                changelog_mode,
            } => session.explain_statement(*inner, changelog_mode),
            Statement::Query(query) => {
                let logical = session.binder()?.bind_query(*query)?;
                session.run_query(logical)
            }
            Statement::Insert(insert) => {
                let job = session.insert(*insert)?;
                Ok(job_result(job))
            }
            Statement::CompilePlan {
                path,
                if_not_exists,
                insert,
                execute,
            } => session.compile_plan(&path, if_not_exists, *insert, execute, position),
            Statement::ExecutePlan { path } => {
                let plan = read_plan(&path, position)?;
                Ok(job_result(session.execute_plan(plan)?))
            }
        }
    }
}

/// What an `INSERT` (or `EXECUTE PLAN`) returns: its job.
fn job_result(job: JobHandle) -> TableResult {
    TableResult {
        schema: Arc::new(Schema::empty()),
        body: ResultBody::Job(job),
        updating: false,
    }
}

impl Session {
    /// `CREATE TABLE`.
    fn create_table(
        &mut self,
        create: weir_sql::parser::CreateTable,
        position: Position,
    ) -> Result<TableResult> {
        if self.catalog.contains(&create.name) {
            if create.if_not_exists {
                return Ok(TableResult::done());
            }
            return Err(Error::sql_at(
                format!("a table or view named '{}' already exists", create.name),
                Some(position),
            ));
        }
        let table = self.table_from_ddl(create)?;
        let mut catalog = (*self.catalog).clone();
        catalog.add_table(table)?;
        self.catalog = Arc::new(catalog);
        Ok(TableResult::done())
    }

    /// `CREATE VIEW name [(columns)] AS query` (`text`: the statement's).
    fn create_view(&mut self, mut view: CreateView, text: String, position: Position) -> Result<TableResult> {
        Binder::prepare_query(&mut view.query)?;
        if self.catalog.contains(&view.name) {
            if view.if_not_exists {
                return Ok(TableResult::done());
            }
            return Err(Error::sql_at(
                format!("a table or view named '{}' already exists", view.name),
                Some(position),
            ));
        }
        let plan = self.binder()?.bind_query(*view.query.clone())?;
        let mut fields: Vec<Field> = (plan.schema().fields().iter())
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
        let mut catalog = (*self.catalog).clone();
        let name = view.name.clone();
        catalog.add_view(
            name,
            ViewDef {
                body: ViewBody::Sql(view),
                text,
                schema: Arc::new(Schema::new(fields)),
            },
        )?;
        self.catalog = Arc::new(catalog);
        Ok(TableResult::done())
    }

    /// `DROP TABLE|VIEW [IF EXISTS] name`.
    fn drop_object(&mut self, drop: Drop, position: Position) -> Result<TableResult> {
        let mut catalog = (*self.catalog).clone();
        let removed = match drop.view {
            true => catalog.drop_view(&drop.name),
            false => catalog.drop_table(&drop.name),
        };
        if !removed && !drop.if_exists {
            let kind = if drop.view { "view" } else { "table" };
            return Err(Error::sql_at(
                format!("{kind} '{}' does not exist", drop.name),
                Some(position),
            ));
        }
        self.catalog = Arc::new(catalog);
        Ok(TableResult::done())
    }

    /// `SHOW TABLES | VIEWS | FUNCTIONS | JOBS`.
    fn show(&self, what: ShowWhat) -> Result<TableResult> {
        match what {
            ShowWhat::Tables => TableResult::text("table name", self.catalog.table_names()),
            ShowWhat::Views => TableResult::text("view name", self.catalog.view_names()),
            ShowWhat::Functions => {
                let registry: FunctionRegistry = self.functions(&self.config.local_time_zone()?);
                let mut names: Vec<String> = (registry.scalar_names().into_iter())
                    .chain(registry.aggregate_names())
                    .map(|n| n.to_uppercase())
                    .collect();
                names.sort();
                names.dedup();
                TableResult::text("function name", names)
            }
            ShowWhat::Jobs => show_jobs(&self.jobs),
        }
    }

    /// `EXPLAIN [CHANGELOG_MODE] query | insert`: the logical plan and the
    /// job graph.
    fn explain_statement(&self, inner: ParsedStatement, changelog_mode: bool) -> Result<TableResult> {
        let binder = self.binder()?;
        let (logical, plan) = match inner.statement {
            Statement::Query(query) => {
                let logical = binder.bind_query(*query)?;
                let plan = Planner::new(&binder, &self.config, &BuiltinConnectors)?
                    .plan_query(&logical, RESULT_CHANNEL)?;
                (logical, plan)
            }
            Statement::Insert(insert) => {
                let logical = binder.bind_insert(*insert)?;
                let plan = Planner::new(&binder, &self.config, &BuiltinConnectors)?.plan_insert(&logical)?;
                (logical, plan)
            }
            _ => {
                return Err(Error::sql_at(
                    "EXPLAIN takes a query or an INSERT",
                    Some(inner.position),
                ));
            }
        };
        let text = format!(
            "== Logical Plan ==\n{}\n\n== Job Graph ==\n{}",
            logical.display_indent(),
            self.explain(plan, changelog_mode)?
        );
        TableResult::text("plan", vec![text])
    }

    /// `INSERT INTO table query`: its job.
    fn insert(&mut self, insert: sqlparser::ast::Statement) -> Result<JobHandle> {
        let target = match &insert {
            sqlparser::ast::Statement::Insert(i) => i.table.to_string(),
            _ => String::new(),
        };
        let binder = self.binder()?;
        self.run_insert(&binder, insert, &target)
    }

    /// `[COMPILE AND EXECUTE | COMPILE] PLAN 'path' [IF NOT EXISTS] FOR
    /// INSERT ...`: the insert's plan written to `path` as JSON (not over an
    /// existing file, unless `table.plan.force-recompile`; with `IF NOT
    /// EXISTS` an existing file is kept), and with `execute` run from that
    /// file, as Flink's statements do.
    fn compile_plan(
        &mut self,
        path: &str,
        if_not_exists: bool,
        insert: ParsedStatement,
        execute: bool,
        position: Position,
    ) -> Result<TableResult> {
        let Statement::Insert(statement) = insert.statement else {
            return Err(Error::sql_at(
                "COMPILE PLAN takes an INSERT",
                Some(insert.position),
            ));
        };
        let file = Path::new(path);
        let exists = file.exists();
        if exists && !if_not_exists && !self.config.plan_force_recompile()? {
            return Err(Error::sql_at(
                format!(
                    "cannot overwrite the plan file '{path}': use COMPILE PLAN ... IF NOT EXISTS to keep it, \
                     or SET 'table.plan.force-recompile' = 'true' to replace it"
                ),
                Some(position),
            ));
        }
        if !exists || !if_not_exists {
            let binder = self.binder()?;
            let logical = binder.bind_insert(*statement)?;
            let plan = Planner::new(&binder, &self.config, &BuiltinConnectors)?.plan_insert(&logical)?;
            let json = serde_json::to_string_pretty(&plan)
                .map_err(|e| Error::Internal(format!("the plan could not be written out: {e}")))?;
            if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
            }
            std::fs::write(file, json + "\n").map_err(|e| Error::io(file, e))?;
        }
        match execute {
            true => Ok(job_result(self.execute_plan(read_plan(path, position)?)?)),
            false => Ok(TableResult::done()),
        }
    }

    /// Runs a plan read from a file (`EXECUTE PLAN`): a job named after its
    /// sink's table, as an `INSERT` into it is.
    fn execute_plan(&mut self, plan: PlanSpec) -> Result<JobHandle> {
        let sink = plan.nodes.iter().rev().find_map(|n| match &n.kind {
            NodeSpec::Sink(SinkSpec::Connector { table, .. }) => Some(table.name.clone()),
            _ => None,
        });
        let name = match (self.config.pipeline_name(), sink) {
            (Some(name), _) => name.to_string(),
            (None, Some(table)) => format!("insert-into_{table}"),
            (None, None) => "execute-plan".to_string(),
        };
        self.start(plan, name, ResultChannels::new())
    }
}

/// The plan in the JSON file `path`; an error names the file, and the
/// line and column of bad JSON.
pub(crate) fn read_plan(path: &str, position: Position) -> Result<PlanSpec> {
    let file = Path::new(path);
    let text = std::fs::read_to_string(file).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            Error::sql_at(format!("plan file '{path}' does not exist"), Some(position))
        }
        _ => Error::io(file, e),
    })?;
    serde_json::from_str(&text).map_err(|e| {
        Error::sql_at(
            format!(
                "plan file '{path}' is not a weir plan: {e} (line {}, column {})",
                e.line(),
                e.column()
            ),
            Some(position),
        )
    })
}

/// `SHOW JOBS`: each job's status, uptime, restarts and checkpoints.
fn show_jobs(jobs: &[JobHandle]) -> Result<TableResult> {
    let rows = jobs
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

/// `DESCRIBE JOB 'id'`: the job's tasks and their counters.
fn describe_job(job: &JobHandle) -> Result<TableResult> {
    let rows = (job.metrics().tasks.into_iter())
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

/// The job of this session with id `id`; the error lists the others.
fn find_job<'a>(jobs: &'a [JobHandle], id: &str, position: Position) -> Result<&'a JobHandle> {
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
fn describe(catalog: &Catalog, name: &str, position: Position) -> Result<TableResult> {
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

/// `CREATE FUNCTION name AS 'class'`: a function registered under `name`,
/// else a Rust port of the class, else an error naming both ways.
fn create_function(
    session: &mut Session,
    name: &str,
    implementation: &str,
    position: Option<Position>,
) -> Result<TableResult> {
    let registered = session.user_functions.iter().any(|f| {
        f.name().eq_ignore_ascii_case(name) || f.aliases().iter().any(|a| a.eq_ignore_ascii_case(name))
    });
    if registered {
        return Ok(TableResult::done());
    }
    match weir_functions::ported_udfs::port(implementation, name) {
        Some(port) => {
            session.user_functions.push(Arc::new(port));
            Ok(TableResult::done())
        }
        None => Err(Error::sql_at(
            format!(
                "function '{name}' ({implementation}) is not registered: weir runs no Java; \
                 it has Rust ports of {}, and a Rust implementation of any other can be \
                 registered with Engine::register_udf before this statement",
                weir_functions::ported_udfs::PORTED_CLASSES.join(", ")
            ),
            position,
        )),
    }
}
