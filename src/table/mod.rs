//! The Table API: weir's relational queries written as Rust code, planned by the same binder and planner as SQL.
//!
//! ```text
//!  engine.from("bids")            a Table: a DataFusion logical plan over the catalog
//!    .filter(col("price").gt(lit(100)))
//!    .window(Tumble::over(10 s).on("ts").alias("w"))
//!    .group_by([col("auction"), col("w")])
//!    .select([col("auction"), window_start("w"), count_star()])
//!    .execute()                   the binder's analysis and optimization, then the
//!                                 streaming planner, as a SQL query's plan takes
//! ```
//!
//! Each operation returns a new [`Table`] and checks what it is given at
//! once: an unknown column is named with the closest one the table has, a
//! type that does not fit names the operation. Expressions are DataFusion's
//! (`col`, `lit`, `sum`, ... from `datafusion_expr` and
//! `datafusion_functions_aggregate::expr_fn`); a function call is resolved
//! by name against the session's functions ([`call`] names any of them).
//! Unnamed select items are named as in SQL (`EXPR$<position>`), so a
//! query written both ways has the same columns and the same job graph.
//! Tables and SQL share one catalog: [`crate::Engine::create_temporary_view`]
//! makes a table a view SQL can read, and [`crate::Engine::sql_query`] makes
//! a SQL query a table.
//!
//! ```
//! use std::time::Duration;
//! use datafusion_expr::{col, lit};
//! use datafusion_functions_aggregate::expr_fn::max;
//! use weir::Engine;
//! use weir::table::{Tumble, count_star, window_start};
//!
//! let engine = Engine::new();
//! engine.sql(
//!     "CREATE TABLE bids (auction BIGINT, price BIGINT, ts TIMESTAMP(3),
//!        WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
//!      WITH ('connector' = 'datagen', 'number-of-rows' = '100',
//!            'fields.auction.min' = '1', 'fields.auction.max' = '3')",
//! )?;
//! let per_minute = engine
//!     .from("bids")?
//!     .filter(col("price").gt(lit(0)))?
//!     .window(Tumble::over(Duration::from_secs(60)).on("ts").alias("w"))
//!     .group_by([col("w"), col("auction")])
//!     .select([col("auction"), window_start("w"), count_star().alias("bids"), max(col("price"))])?;
//! assert_eq!(per_minute.schema().field(3).name(), "EXPR$3");
//! let rows: usize = per_minute.execute()?.collect()?.iter().map(|b| b.num_rows()).sum();
//! assert!(rows >= 1);
//! # Ok::<(), weir::Error>(())
//! ```
//!
//! What does not compile, by design: a windowed table is grouped by its
//! window before it selects, and a grouped table selects before it does
//! anything else (as in Flink, where these are other types too).
//!
//! ```compile_fail
//! # use std::time::Duration;
//! # use datafusion_expr::col;
//! # use weir::table::{Tumble, count_star};
//! # fn windowed(engine: &weir::Engine) -> weir::Result<()> {
//! let windowed = engine.from("bids")?.window(Tumble::over(Duration::from_secs(60)).on("ts").alias("w"));
//! windowed.select([count_star()])?; // no `select` on a WindowedTable: group_by([col("w")]) first
//! # Ok(()) }
//! ```
//!
//! ```compile_fail
//! # use datafusion_expr::{col, lit};
//! # fn grouped(engine: &weir::Engine) -> weir::Result<()> {
//! let grouped = engine.from("bids")?.group_by([col("auction")]);
//! grouped.filter(col("price").gt(lit(0)))?; // a GroupedTable only selects
//! # Ok(()) }
//! ```

mod expr;
mod source;
mod window;

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion_common::JoinType;
use datafusion_expr::{Expr, LogicalPlan, LogicalPlanBuilder, SortExpr};

use expr::{aggregate_calls, check_columns, name_items, rebase, resolve_functions, window_calls};
pub use expr::{call, count_star, over};
pub use window::{
    Cumulate, Extent, GroupWindow, GroupedTable, Session, Slide, Tumble, WindowBuilder, WindowGroupedTable,
    WindowedTable, rows, window_end, window_start, window_time,
};

use crate::engine::{Engine, TableResult};
use crate::{Error, Result};
use weir_job::supervisor::JobHandle;

/// A relational query built from code, over the engine's catalog (Flink's
/// `Table`). Cheap to clone; every operation returns a new one.
#[derive(Clone)]
pub struct Table {
    engine: Engine,
    plan: LogicalPlan,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Table({})", self.plan.display())
    }
}

/// A planning error of `operation`.
fn failed(operation: &str, e: datafusion_common::DataFusionError) -> Error {
    Error::Plan(format!("{operation}: {}", e.strip_backtrace()))
}

impl Table {
    /// A table of `plan` (a plan as SQL binding gives it, not yet analyzed).
    pub(crate) fn new(engine: Engine, plan: LogicalPlan) -> Self {
        Table { engine, plan }
    }

    /// The engine it belongs to.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The logical plan, not yet analyzed and optimized.
    pub fn logical_plan(&self) -> &LogicalPlan {
        &self.plan
    }

    /// Its columns (Flink's `getResolvedSchema`).
    pub fn schema(&self) -> SchemaRef {
        Arc::new(self.plan.schema().as_arrow().clone())
    }

    /// A table of `plan` in the same engine, checked by `operation`: its
    /// types are analyzed now, so that a mismatch names the operation.
    fn then(&self, plan: LogicalPlan, operation: &str) -> Result<Table> {
        self.engine.check_plan(plan.clone()).map_err(|e| match e {
            Error::Plan(m) | Error::Sql { message: m, .. } => Error::Plan(format!("{operation}: {m}")),
            other => other,
        })?;
        Ok(Table::new(self.engine.clone(), plan))
    }

    /// This table's plan with `build` added on top, checked as
    /// [`Table::then`] checks it.
    fn built(
        &self,
        operation: &str,
        build: impl FnOnce(LogicalPlanBuilder) -> datafusion_common::Result<LogicalPlanBuilder>,
    ) -> Result<Table> {
        let plan = build(LogicalPlanBuilder::from(self.plan.clone()))
            .and_then(LogicalPlanBuilder::build)
            .map_err(|e| failed(operation, e))?;
        self.then(plan, operation)
    }

    /// `exprs` with their function calls resolved and their columns checked
    /// against this table's.
    fn prepare(&self, exprs: impl IntoIterator<Item = Expr>, operation: &str) -> Result<Vec<Expr>> {
        let functions = self.engine.functions()?;
        let exprs = (exprs.into_iter())
            .map(|e| resolve_functions(e, &functions, operation))
            .collect::<Result<Vec<_>>>()?;
        check_columns(&exprs, self.plan.schema(), operation)?;
        // Columns qualified as the plan has them, as a builder would
        // qualify them: aggregate and window calls are then named alike.
        (exprs.into_iter())
            .map(|e| {
                datafusion_expr::expr_rewriter::normalize_col(e, &self.plan).map_err(|e| failed(operation, e))
            })
            .collect()
    }

    /// The rows for which `predicate` is true (Flink's `filter`).
    pub fn filter(&self, predicate: Expr) -> Result<Table> {
        let predicate = self.prepare([predicate], "filter")?.remove(0);
        self.built("filter", |b| b.filter(predicate))
    }

    /// [`Table::filter`] (Flink's `where`).
    pub fn where_(&self, predicate: Expr) -> Result<Table> {
        self.filter(predicate)
    }

    /// A projection (Flink's `select`). Aggregate calls without a
    /// [`Table::group_by`] aggregate all rows; window function calls
    /// (`sum(x).partition_by(...).order_by(...)...`) are an OVER
    /// aggregation.
    pub fn select(&self, exprs: impl IntoIterator<Item = Expr>) -> Result<Table> {
        let exprs = name_items(self.prepare(exprs, "select")?);
        let overs = window_calls(&exprs);
        if !overs.is_empty() {
            let plan = LogicalPlanBuilder::window_plan(self.plan.clone(), overs.clone())
                .map_err(|e| failed("select", e))?;
            let exprs = (exprs.into_iter())
                .map(|e| rebase(e, &overs, &plan))
                .collect::<Result<Vec<_>>>()?;
            return self.project(plan, exprs, "select");
        }
        if !aggregate_calls(&exprs).is_empty() {
            return self.aggregate(self.plan.clone(), Vec::new(), exprs, "select");
        }
        self.project(self.plan.clone(), exprs, "select")
    }

    /// `exprs` over `plan`.
    fn project(&self, plan: LogicalPlan, exprs: Vec<Expr>, operation: &str) -> Result<Table> {
        let plan = (LogicalPlanBuilder::from(plan))
            .project(exprs)
            .and_then(LogicalPlanBuilder::build)
            .map_err(|e| failed(operation, e))?;
        self.then(plan, operation)
    }

    /// `exprs` (named select items) of the groups of `keys` over `input`:
    /// an aggregation of their aggregate calls, then a projection of the
    /// keys and calls it computed.
    fn aggregate(
        &self,
        input: LogicalPlan,
        keys: Vec<Expr>,
        exprs: Vec<Expr>,
        operation: &str,
    ) -> Result<Table> {
        let calls = aggregate_calls(&exprs);
        let plan = (LogicalPlanBuilder::from(input))
            .aggregate(keys.clone(), calls.clone())
            .and_then(LogicalPlanBuilder::build)
            .map_err(|e| failed(operation, e))?;
        let computed: Vec<Expr> = keys.into_iter().chain(calls).collect();
        let exprs = (exprs.into_iter())
            .map(|e| rebase(e, &computed, &plan))
            .collect::<Result<Vec<_>>>()?;
        for column in exprs.iter().flat_map(|e| e.column_refs()) {
            if !plan.schema().has_column(column) {
                return Err(Error::Plan(format!(
                    "{operation}: column '{}' is neither grouped nor aggregated",
                    column.flat_name()
                )));
            }
        }
        self.project(plan, exprs, operation)
    }

    /// Its columns and `exprs` after them (Flink's `addColumns`; a name it
    /// has already is an error).
    pub fn add_columns(&self, exprs: impl IntoIterator<Item = Expr>) -> Result<Table> {
        let added = self.prepare(exprs, "add_columns")?;
        let mut all = self.columns();
        let first = all.len();
        all.extend(added);
        let all = name_items(all);
        for e in &all[first..] {
            let name = e.schema_name().to_string();
            if self.plan.schema().has_column_with_unqualified_name(&name) {
                return Err(Error::Plan(format!(
                    "add_columns: the table has a column '{name}' already; use add_or_replace_columns"
                )));
            }
        }
        self.project(self.plan.clone(), all, "add_columns")
    }

    /// Its columns, those `exprs` name replaced in place, the others after
    /// them (Flink's `addOrReplaceColumns`).
    pub fn add_or_replace_columns(&self, exprs: impl IntoIterator<Item = Expr>) -> Result<Table> {
        let added = self.prepare(exprs, "add_or_replace_columns")?;
        let first = self.columns().len();
        let named: Vec<Expr> = name_items(self.columns().into_iter().chain(added).collect()).split_off(first);
        let mut all = self.columns();
        for e in named {
            let name = e.schema_name().to_string();
            match all
                .iter()
                .position(|c| c.schema_name().to_string().rsplit('.').next() == Some(name.as_str()))
            {
                Some(i) => all[i] = e,
                None => all.push(e),
            }
        }
        self.project(self.plan.clone(), all, "add_or_replace_columns")
    }

    /// Its columns, `(old, new)` renamed (Flink's `renameColumns`).
    pub fn rename_columns<'a>(&self, renames: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Table> {
        let renames: Vec<(&str, &str)> = renames.into_iter().collect();
        let schema = self.plan.schema();
        for (old, _) in &renames {
            let column = datafusion_common::Column::from_name(*old);
            if !schema.has_column(&column) {
                return Err(expr::unknown_column(&column, schema, "rename_columns"));
            }
        }
        let exprs = (schema.iter())
            .map(|(qualifier, field)| {
                let column = Expr::Column(datafusion_common::Column::new(qualifier.cloned(), field.name()));
                match renames.iter().find(|(old, _)| *old == field.name()) {
                    Some((_, new)) => column.alias(*new),
                    None => column,
                }
            })
            .collect();
        self.project(self.plan.clone(), exprs, "rename_columns")
    }

    /// Its columns but `names` (Flink's `dropColumns`).
    pub fn drop_columns<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Result<Table> {
        let names: Vec<&str> = names.into_iter().collect();
        let schema = self.plan.schema();
        for name in &names {
            let column = datafusion_common::Column::from_name(*name);
            if !schema.has_column(&column) {
                return Err(expr::unknown_column(&column, schema, "drop_columns"));
            }
        }
        let kept = (self.columns().into_iter())
            .filter(|c| !matches!(c, Expr::Column(c) if names.contains(&c.name.as_str())))
            .collect();
        self.project(self.plan.clone(), kept, "drop_columns")
    }

    /// Every column, as a column reference.
    fn columns(&self) -> Vec<Expr> {
        (self.plan.schema().iter())
            .map(|(q, f)| Expr::Column(datafusion_common::Column::new(q.cloned(), f.name())))
            .collect()
    }

    /// Its rows once each (Flink's `distinct`): an updating result.
    pub fn distinct(&self) -> Result<Table> {
        self.built("distinct", |b| b.distinct())
    }

    /// Its rows and `other`'s (Flink's `unionAll`); the columns must match
    /// by position and type.
    pub fn union_all(&self, other: &Table) -> Result<Table> {
        self.built("union_all", |b| b.union(other.plan.clone()))
    }

    /// The table under another name: its columns are `alias.column` (for a
    /// join of a table with itself).
    pub fn alias(&self, alias: &str) -> Result<Table> {
        self.built("alias", |b| b.alias(alias))
    }

    /// Groups by `keys`; a [`GroupedTable::select`] aggregates each group
    /// (Flink's `groupBy`).
    pub fn group_by(&self, keys: impl IntoIterator<Item = Expr>) -> GroupedTable {
        GroupedTable::new(self.clone(), keys.into_iter().collect())
    }

    /// Group windows: a [`Tumble`], [`Slide`], [`Session`] or [`Cumulate`]
    /// window, grouped by its alias (Flink's `window`).
    pub fn window(&self, window: impl Into<GroupWindow>) -> WindowedTable {
        WindowedTable::new(self.clone(), window.into())
    }

    fn join_with(&self, right: &Table, on: Expr, kind: JoinType, operation: &str) -> Result<Table> {
        let functions = self.engine.functions()?;
        let on = resolve_functions(on, &functions, operation)?;
        let both = self
            .plan
            .schema()
            .join(right.plan.schema())
            .map_err(|e| failed(operation, e))?;
        check_columns([&on], &both, operation)?;
        self.built(operation, |b| b.join_on(right.plan.clone(), kind, [on]))
    }

    /// An inner join with `right` on `on` (Flink's `join(right, on)`): an
    /// equality of keys, and with time bounds an interval join.
    pub fn join(&self, right: &Table, on: Expr) -> Result<Table> {
        self.join_with(right, on, JoinType::Inner, "join")
    }

    /// A left outer join (Flink's `leftOuterJoin`).
    pub fn left_outer_join(&self, right: &Table, on: Expr) -> Result<Table> {
        self.join_with(right, on, JoinType::Left, "left_outer_join")
    }

    /// A right outer join (Flink's `rightOuterJoin`).
    pub fn right_outer_join(&self, right: &Table, on: Expr) -> Result<Table> {
        self.join_with(right, on, JoinType::Right, "right_outer_join")
    }

    /// A full outer join (Flink's `fullOuterJoin`).
    pub fn full_outer_join(&self, right: &Table, on: Expr) -> Result<Table> {
        self.join_with(right, on, JoinType::Full, "full_outer_join")
    }

    /// Its rows in the order of `keys` (Flink's `orderBy`): on a stream, by
    /// a time attribute ascending first, or with a [`Table::fetch`] (a
    /// TopN).
    pub fn order_by(&self, keys: impl IntoIterator<Item = SortExpr>) -> Result<Table> {
        let functions = self.engine.functions()?;
        let keys = (keys.into_iter())
            .map(|k| {
                let expr = resolve_functions(k.expr, &functions, "order_by")?;
                Ok(SortExpr { expr, ..k })
            })
            .collect::<Result<Vec<_>>>()?;
        check_columns(keys.iter().map(|k| &k.expr), self.plan.schema(), "order_by")?;
        self.built("order_by", |b| b.sort(keys))
    }

    /// The first `n` rows of an [`Table::order_by`] (Flink's `fetch`).
    pub fn fetch(&self, n: usize) -> Result<Table> {
        self.limit(0, n, "fetch")
    }

    /// The rows of an [`Table::order_by`] after the first `skip`, then
    /// `n` of them (Flink's `offset(skip).fetch(n)`).
    pub fn offset_fetch(&self, skip: usize, n: usize) -> Result<Table> {
        self.limit(skip, n, "offset_fetch")
    }

    fn limit(&self, skip: usize, n: usize, operation: &str) -> Result<Table> {
        if !matches!(self.plan, LogicalPlan::Sort(_)) {
            return Err(Error::Plan(format!(
                "{operation}: the table is not ordered; call order_by first"
            )));
        }
        self.built(operation, |b| b.limit(skip, Some(n)))
    }

    /// Runs it: its rows, as [`crate::Engine::sql`] gives a query's
    /// (collect them, or stream them; an updating result has row kinds).
    pub fn execute(&self) -> Result<TableResult> {
        self.engine.execute_plan(self.plan.clone())
    }

    /// Starts a job writing its rows into catalog table `sink` (Flink's
    /// `executeInsert`), as `INSERT INTO sink SELECT * FROM (this)`.
    pub fn execute_insert(&self, sink: &str) -> Result<JobHandle> {
        self.engine.insert_plan(self.plan.clone(), sink)
    }

    /// Its logical plan and job graph, as `EXPLAIN` prints them.
    pub fn explain(&self) -> Result<String> {
        self.engine.explain_plan(self.plan.clone())
    }
}

#[cfg(test)]
mod tests;
