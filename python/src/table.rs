//! The Table API from Python, with PyFlink's names: `engine.from_path("bids").filter(col("price") > 10).group_by(col("auction")).select(col("auction"), col("price").max)`, group windows (`Tumble`, `Slide`, `Session`, `Cumulate`), joins, `order_by(...).fetch(n)`, `execute()`.
//!
//! Each class wraps its counterpart in weir's Rust Table API
//! (`weir::table`), which checks each operation as it is made; its errors
//! are raised as `WeirError`.

use arrow::datatypes::Schema;
use arrow::record_batch::RecordBatch;
use arrow_pyarrow::{FromPyArrow, ToPyArrow};
use datafusion_expr::Expr;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::expressions::{Expression, table_expr, table_exprs, to_exprs};
use crate::{Job, TableResult, error};

/// A relational query (PyFlink's `Table`); every operation returns a new one.
#[pyclass(module = "weir._weir", frozen)]
pub struct Table {
    table: weir::Table,
    /// Rows an `offset` skips, for the `fetch` that must follow it.
    offset: Option<usize>,
}

impl Table {
    pub(crate) fn new(table: weir::Table) -> Self {
        Table { table, offset: None }
    }

    /// The table, when it is not waiting for a `fetch`.
    pub(crate) fn table(&self, operation: &str) -> PyResult<&weir::Table> {
        match self.offset {
            Some(n) => Err(PyValueError::new_err(format!(
                "{operation}: offset({n}) is followed by fetch(n) first (a streaming TopN needs its count)"
            ))),
            None => Ok(&self.table),
        }
    }

    /// `args` as expressions of `operation` on this table.
    fn exprs(&self, args: &Bound<'_, PyTuple>, operation: &str) -> PyResult<Vec<Expr>> {
        table_exprs(self.table.engine(), args, operation)
    }

    fn then(
        &self,
        operation: &str,
        f: impl FnOnce(&weir::Table) -> weir::Result<weir::Table>,
    ) -> PyResult<Table> {
        f(self.table(operation)?).map(Table::new).map_err(error)
    }
}

#[pymethods]
impl Table {
    /// Its columns, as a `pyarrow.Schema` (PyFlink's `get_schema`).
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.table.schema().as_ref().to_pyarrow(py)
    }

    /// A projection; aggregates without `group_by` aggregate all rows.
    #[pyo3(signature = (*fields))]
    fn select(&self, fields: &Bound<'_, PyTuple>) -> PyResult<Table> {
        let exprs = self.exprs(fields, "select")?;
        self.then("select", |t| t.select(exprs))
    }

    /// The rows for which `predicate` is true.
    fn filter(&self, predicate: &Bound<'_, PyAny>) -> PyResult<Table> {
        let predicate = table_expr(self.table.engine(), predicate, "filter")?;
        self.then("filter", |t| t.filter(predicate))
    }

    /// `filter` (PyFlink's `where`).
    #[pyo3(name = "where")]
    fn where_(&self, predicate: &Bound<'_, PyAny>) -> PyResult<Table> {
        self.filter(predicate)
    }

    /// Its columns and `fields` after them.
    #[pyo3(signature = (*fields))]
    fn add_columns(&self, fields: &Bound<'_, PyTuple>) -> PyResult<Table> {
        let exprs = self.exprs(fields, "add_columns")?;
        self.then("add_columns", |t| t.add_columns(exprs))
    }

    /// Its columns, those `fields` name replaced in place, the others after.
    #[pyo3(signature = (*fields))]
    fn add_or_replace_columns(&self, fields: &Bound<'_, PyTuple>) -> PyResult<Table> {
        let exprs = self.exprs(fields, "add_or_replace_columns")?;
        self.then("add_or_replace_columns", |t| t.add_or_replace_columns(exprs))
    }

    /// Renames columns: `rename_columns(col("a").alias("b"), ...)`.
    #[pyo3(signature = (*fields))]
    fn rename_columns(&self, fields: &Bound<'_, PyTuple>) -> PyResult<Table> {
        let mut renames = Vec::new();
        for e in to_exprs(fields, "rename_columns")? {
            match e {
                Expr::Alias(a) if matches!(*a.expr, Expr::Column(_)) => {
                    let Expr::Column(c) = *a.expr else { unreachable!() };
                    renames.push((c.name, a.name));
                }
                other => {
                    return Err(PyValueError::new_err(format!(
                        "rename_columns: expected col(\"old\").alias(\"new\"), got {other}"
                    )));
                }
            }
        }
        let renames: Vec<(&str, &str)> = renames.iter().map(|(o, n)| (o.as_str(), n.as_str())).collect();
        self.then("rename_columns", |t| t.rename_columns(renames))
    }

    /// Its columns but those of `fields` (columns).
    #[pyo3(signature = (*fields))]
    fn drop_columns(&self, fields: &Bound<'_, PyTuple>) -> PyResult<Table> {
        let names = (fields.iter())
            .map(|f| f.extract::<PyRef<'_, Expression>>()?.column_name("drop_columns"))
            .collect::<PyResult<Vec<_>>>()?;
        self.then("drop_columns", |t| {
            t.drop_columns(names.iter().map(String::as_str))
        })
    }

    /// Its columns renamed, by position (PyFlink's `alias`).
    #[pyo3(signature = (*names))]
    fn alias(&self, names: Vec<String>) -> PyResult<Table> {
        let schema = self.table.schema();
        if names.len() > schema.fields().len() {
            return Err(PyValueError::new_err(format!(
                "alias: {} names for {} columns",
                names.len(),
                schema.fields().len()
            )));
        }
        let renames: Vec<(&str, &str)> = (schema.fields().iter())
            .zip(&names)
            .map(|(f, n)| (f.name().as_str(), n.as_str()))
            .collect();
        self.then("alias", |t| t.rename_columns(renames))
    }

    /// Its rows once each: an updating result.
    fn distinct(&self) -> PyResult<Table> {
        self.then("distinct", weir::Table::distinct)
    }

    /// Its rows and `other`'s; columns match by position and type.
    fn union_all(&self, other: &Table) -> PyResult<Table> {
        let other = other.table("union_all")?;
        self.then("union_all", |t| t.union_all(other))
    }

    /// Groups by `fields`, for a `select` of each group's aggregates.
    #[pyo3(signature = (*fields))]
    fn group_by(&self, fields: &Bound<'_, PyTuple>) -> PyResult<GroupedTable> {
        let keys = self.exprs(fields, "group_by")?;
        Ok(GroupedTable {
            grouped: self.table("group_by")?.group_by(keys),
            engine: self.table.engine().clone(),
        })
    }

    /// A group window, to group by its alias: `window(Tumble.over(lit(1).
    /// minutes).on(col("ts")).alias("w")).group_by(col("w"), ...)`.
    fn window(&self, window: &GroupWindow) -> PyResult<WindowedTable> {
        Ok(WindowedTable {
            windowed: self.table("window")?.window(window.window.clone()),
            engine: self.table.engine().clone(),
        })
    }

    /// OVER windows, for a `select` of aggregates over them
    /// (`col("v").sum.over(col("w"))`).
    #[pyo3(signature = (*windows))]
    fn over_window(
        &self,
        windows: Vec<PyRef<'_, crate::over::OverWindow>>,
    ) -> PyResult<crate::over::OverWindowedTable> {
        let windows = windows.iter().map(|w| (**w).clone()).collect();
        Ok(crate::over::OverWindowedTable::new(
            self.table("over_window")?.clone(),
            windows,
        ))
    }

    /// An inner join on `condition` (with time bounds, an interval join).
    fn join(&self, right: &Table, condition: &Bound<'_, PyAny>) -> PyResult<Table> {
        self.join_with(right, condition, "join", weir::Table::join)
    }

    fn left_outer_join(&self, right: &Table, condition: &Bound<'_, PyAny>) -> PyResult<Table> {
        self.join_with(right, condition, "left_outer_join", weir::Table::left_outer_join)
    }

    fn right_outer_join(&self, right: &Table, condition: &Bound<'_, PyAny>) -> PyResult<Table> {
        self.join_with(
            right,
            condition,
            "right_outer_join",
            weir::Table::right_outer_join,
        )
    }

    fn full_outer_join(&self, right: &Table, condition: &Bound<'_, PyAny>) -> PyResult<Table> {
        self.join_with(right, condition, "full_outer_join", weir::Table::full_outer_join)
    }

    /// Its rows ordered by `fields` (`col("x").desc`; ascending otherwise):
    /// on a stream, a time attribute ascending first, or with a `fetch`.
    #[pyo3(signature = (*fields))]
    fn order_by(&self, fields: &Bound<'_, PyTuple>) -> PyResult<Table> {
        let keys = (fields.iter())
            .map(|f| f.extract::<PyRef<'_, Expression>>()?.sort_key())
            .collect::<PyResult<Vec<_>>>()?;
        self.then("order_by", |t| t.order_by(keys))
    }

    /// Skips the first `n` rows of an `order_by`; a `fetch` follows.
    fn offset(&self, n: usize) -> PyResult<Table> {
        self.table("offset")?;
        Ok(Table {
            table: self.table.clone(),
            offset: Some(n),
        })
    }

    /// The first `n` rows of an `order_by` (after an `offset`): a TopN.
    fn fetch(&self, n: usize) -> PyResult<Table> {
        let table = match self.offset {
            Some(skip) => self.table.offset_fetch(skip, n),
            None => self.table.fetch(n),
        };
        table.map(Table::new).map_err(error)
    }

    /// `fetch` (PyFlink's `limit`), with an optional `offset`.
    #[pyo3(signature = (n, offset = 0))]
    fn limit(&self, n: usize, offset: usize) -> PyResult<Table> {
        self.then("limit", |t| t.offset_fetch(offset, n))
    }

    /// Runs it: a result whose rows arrive as its job runs.
    fn execute(&self, py: Python<'_>) -> PyResult<TableResult> {
        let table = self.table("execute")?;
        let result = py.detach(|| table.execute()).map_err(error)?;
        Ok(TableResult::new(result))
    }

    /// Starts a job writing its rows into catalog table `table_path`;
    /// its `Job` (`.wait()`).
    fn execute_insert(&self, py: Python<'_>, table_path: &str) -> PyResult<Job> {
        let table = self.table("execute_insert")?;
        let job = py.detach(|| table.execute_insert(table_path)).map_err(error)?;
        Ok(Job { job })
    }

    /// Its logical plan and job graph, as `EXPLAIN` prints them.
    fn explain(&self) -> PyResult<String> {
        self.table("explain")?.explain().map_err(error)
    }

    /// `execute().to_pandas()`: every row of a bounded query.
    fn to_pandas<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.execute(py)?.to_pandas(py)
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.table)
    }
}

type JoinFn = fn(&weir::Table, &weir::Table, Expr) -> weir::Result<weir::Table>;

impl Table {
    fn join_with(
        &self,
        right: &Table,
        condition: &Bound<'_, PyAny>,
        operation: &str,
        join: JoinFn,
    ) -> PyResult<Table> {
        let condition = table_expr(self.table.engine(), condition, operation)?;
        let right = right.table(operation)?;
        self.then(operation, |t| join(t, right, condition))
    }
}

/// A table grouped by keys (PyFlink's `GroupedTable`).
#[pyclass(module = "weir._weir", frozen)]
pub struct GroupedTable {
    grouped: weir::table::GroupedTable,
    engine: weir::Engine,
}

#[pymethods]
impl GroupedTable {
    /// The keys and aggregates of each group: an updating result.
    #[pyo3(signature = (*fields))]
    fn select(&self, fields: &Bound<'_, PyTuple>) -> PyResult<Table> {
        let exprs = table_exprs(&self.engine, fields, "select")?;
        self.grouped.select(exprs).map(Table::new).map_err(error)
    }
}

/// A table with a group window (PyFlink's `GroupWindowedTable`).
#[pyclass(module = "weir._weir", frozen)]
pub struct WindowedTable {
    windowed: weir::table::WindowedTable,
    engine: weir::Engine,
}

#[pymethods]
impl WindowedTable {
    /// Groups by the window's alias and other keys.
    #[pyo3(signature = (*fields))]
    fn group_by(&self, fields: &Bound<'_, PyTuple>) -> PyResult<WindowGroupedTable> {
        let keys = table_exprs(&self.engine, fields, "group_by")?;
        Ok(WindowGroupedTable {
            grouped: self.windowed.group_by(keys),
            engine: self.engine.clone(),
        })
    }
}

/// A windowed table grouped by its window (PyFlink's `WindowGroupedTable`).
#[pyclass(module = "weir._weir", frozen)]
pub struct WindowGroupedTable {
    grouped: weir::table::WindowGroupedTable,
    engine: weir::Engine,
}

#[pymethods]
impl WindowGroupedTable {
    /// The keys, window bounds (`col("w").start`) and aggregates of each
    /// window: one row a window, when it fires.
    #[pyo3(signature = (*fields))]
    fn select(&self, fields: &Bound<'_, PyTuple>) -> PyResult<Table> {
        let exprs = table_exprs(&self.engine, fields, "select")?;
        self.grouped.select(exprs).map(Table::new).map_err(error)
    }
}

/// A group window being described: `.every(...)`, `.on(col("ts"))`,
/// then `.alias("w")`.
#[pyclass(module = "weir._weir", frozen)]
pub struct WindowBuilder {
    builder: weir::table::WindowBuilder,
}

#[pymethods]
impl WindowBuilder {
    /// A sliding window's slide, or a cumulating window's step.
    fn every(&self, every: &Expression) -> PyResult<WindowBuilder> {
        Ok(WindowBuilder {
            builder: self.builder.clone().every(every.extent("every")?),
        })
    }

    /// The time attribute the windows are over.
    fn on(&self, time: &Expression) -> PyResult<WindowBuilder> {
        Ok(WindowBuilder {
            builder: self.builder.clone().on(&time.column_name("on")?),
        })
    }

    /// Names the window, for `group_by` and `col(alias).start`.
    fn alias(&self, alias: &str) -> GroupWindow {
        GroupWindow {
            window: self.builder.clone().alias(alias),
        }
    }
}

/// A group window with its alias.
#[pyclass(module = "weir._weir", frozen)]
pub struct GroupWindow {
    window: weir::table::GroupWindow,
}

/// Tumbling windows: `Tumble.over(lit(10).minutes)` or `row_interval(n)`.
#[pyclass(module = "weir._weir", frozen)]
pub struct Tumble;

#[pymethods]
impl Tumble {
    #[staticmethod]
    fn over(size: &Expression) -> PyResult<WindowBuilder> {
        Ok(WindowBuilder {
            builder: weir::table::Tumble::over(size.extent("Tumble.over")?),
        })
    }
}

/// Sliding windows: `Slide.over(size).every(slide)`.
#[pyclass(module = "weir._weir", frozen)]
pub struct Slide;

#[pymethods]
impl Slide {
    #[staticmethod]
    fn over(size: &Expression) -> PyResult<WindowBuilder> {
        Ok(WindowBuilder {
            builder: weir::table::Slide::over(size.extent("Slide.over")?),
        })
    }
}

/// Session windows: `Session.with_gap(lit(30).seconds)`.
#[pyclass(module = "weir._weir", frozen)]
pub struct Session;

#[pymethods]
impl Session {
    #[staticmethod]
    fn with_gap(gap: &Expression) -> PyResult<WindowBuilder> {
        Ok(WindowBuilder {
            builder: weir::table::Session::with_gap(gap.duration("Session.with_gap")?),
        })
    }
}

/// Cumulating windows: `Cumulate.over(lit(1).days).every(lit(1).hours)`.
#[pyclass(module = "weir._weir", frozen)]
pub struct Cumulate;

#[pymethods]
impl Cumulate {
    #[staticmethod]
    fn over(size: &Expression) -> PyResult<WindowBuilder> {
        Ok(WindowBuilder {
            builder: weir::table::Cumulate::over(size.duration("Cumulate.over")?),
        })
    }
}

/// A `pyarrow.Table` or `pyarrow.RecordBatch` as a bounded table.
pub(crate) fn from_arrow(engine: &weir::Engine, data: &Bound<'_, PyAny>) -> PyResult<Table> {
    let schema = Schema::from_pyarrow_bound(&data.getattr("schema")?)?;
    let batches = match data.hasattr("to_batches")? {
        true => data
            .call_method0("to_batches")?
            .try_iter()?
            .collect::<PyResult<Vec<_>>>()?,
        false => vec![data.clone()],
    };
    let batches = (batches.iter())
        .map(RecordBatch::from_pyarrow_bound)
        .collect::<PyResult<Vec<_>>>()?;
    (engine.from_batches(std::sync::Arc::new(schema), &batches))
        .map(Table::new)
        .map_err(error)
}
