//! Expressions of the Table API from Python, with PyFlink's names: `col("x") > 10`, `lit(5).minutes`, `col("p").sum.alias("total")`, `col("w").start`, `row_interval(100)`, `call("UPPER", col("s"))`.
//!
//! An [`Expression`] wraps a DataFusion expression (what weir's Rust Table
//! API takes), a sort key (`.asc`, `.desc`, for `order_by`) or a row count
//! (`row_interval`, for a row-count window). Python's operators build
//! expressions; a Python value on either side is a literal.

use std::time::Duration;

use arrow::datatypes::{DataType, IntervalMonthDayNano};
use arrow_pyarrow::FromPyArrow;
use datafusion_common::ScalarValue;
use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion_expr::{Expr, SortExpr, WindowFrameBound};
// DataFusion's aggregate calls, which a table replaces by the session's
// aggregate of the same name (Flink's result types).
use datafusion_functions_aggregate::expr_fn as aggregates;
use pyo3::basic::CompareOp;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyString, PyTuple};
use weir::table::Extent;

use crate::PythonFunction;

/// What an expression is: a value, a sort key, a count of rows, or an
/// OVER window's bound.
#[derive(Clone, Debug)]
enum Item {
    Value(Expr),
    Sorted(SortExpr),
    Rows(u64),
    /// `UNBOUNDED_ROW` (rows) or `UNBOUNDED_RANGE`.
    Unbounded {
        rows: bool,
    },
    /// `CURRENT_ROW` (rows) or `CURRENT_RANGE`.
    Current {
        rows: bool,
    },
}

/// An expression of the Table API (PyFlink's `Expression`).
#[pyclass(module = "weir._weir", frozen, skip_from_py_object)]
#[derive(Clone, Debug)]
pub struct Expression {
    item: Item,
}

impl Expression {
    pub(crate) fn value(expr: Expr) -> Self {
        Expression {
            item: Item::Value(expr),
        }
    }

    /// Its value; a sort key or a row count is an error naming `operation`.
    pub(crate) fn expr(&self, operation: &str) -> PyResult<Expr> {
        match &self.item {
            Item::Value(e) => Ok(e.clone()),
            Item::Sorted(s) => Err(PyTypeError::new_err(format!(
                "{operation}: {} is a sort key, for order_by only",
                s.expr
            ))),
            Item::Rows(n) => Err(PyTypeError::new_err(format!(
                "{operation}: row_interval({n}) is a window's size or slide, not a value"
            ))),
            Item::Unbounded { .. } | Item::Current { .. } => Err(PyTypeError::new_err(format!(
                "{operation}: {} is an OVER window's bound, not a value",
                self.__repr__()
            ))),
        }
    }

    /// As an OVER window's frame bound: whether it counts rows, and the
    /// bound (`preceding` says which side an offset is on).
    pub(crate) fn frame_bound(&self, preceding: bool, operation: &str) -> PyResult<(bool, WindowFrameBound)> {
        let side = |offset: ScalarValue| match preceding {
            true => WindowFrameBound::Preceding(offset),
            false => WindowFrameBound::Following(offset),
        };
        match &self.item {
            Item::Unbounded { rows } => Ok((*rows, side(ScalarValue::UInt64(None)))),
            Item::Current { rows } => Ok((*rows, WindowFrameBound::CurrentRow)),
            Item::Rows(n) => Ok((true, side(ScalarValue::UInt64(Some(*n))))),
            _ => match self.expr(operation)? {
                Expr::Literal(interval @ ScalarValue::IntervalMonthDayNano(Some(_)), _) => {
                    Ok((false, side(interval)))
                }
                other => Err(PyTypeError::new_err(format!(
                    "{operation}: expected UNBOUNDED_RANGE, UNBOUNDED_ROW, CURRENT_RANGE, CURRENT_ROW, an \
                     interval such as lit(1).hours or row_interval(n); got {other}"
                ))),
            },
        }
    }

    /// As a sort key: ascending unless it is `.desc`.
    pub(crate) fn sort_key(&self) -> PyResult<SortExpr> {
        match &self.item {
            Item::Sorted(s) => Ok(s.clone()),
            _ => Ok(self.expr("order_by")?.sort(true, false)),
        }
    }

    /// As a window's size, slide or gap: an interval (`lit(10).minutes`)
    /// or a row count (`row_interval(n)`).
    pub(crate) fn extent(&self, operation: &str) -> PyResult<Extent> {
        if let Item::Rows(n) = self.item {
            return Ok(weir::table::rows(n));
        }
        match self.expr(operation)? {
            Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _)
                if v.months == 0 && v.days == 0 && v.nanoseconds > 0 =>
            {
                Ok(Extent::Time(Duration::from_nanos(v.nanoseconds as u64)))
            }
            other => Err(PyTypeError::new_err(format!(
                "{operation}: expected a positive interval such as lit(10).minutes, or row_interval(n); \
                 got {other}"
            ))),
        }
    }

    /// As a time interval only.
    pub(crate) fn duration(&self, operation: &str) -> PyResult<Duration> {
        match self.extent(operation)? {
            Extent::Time(d) => Ok(d),
            Extent::Rows(n) => Err(PyTypeError::new_err(format!(
                "{operation}: expected a time interval such as lit(10).minutes, not row_interval({n})"
            ))),
        }
    }

    /// The name of the column it is (a window's time attribute, a window
    /// alias).
    pub(crate) fn column_name(&self, operation: &str) -> PyResult<String> {
        match self.expr(operation)? {
            Expr::Column(c) => Ok(c.name),
            other => Err(PyTypeError::new_err(format!(
                "{operation}: expected a column such as col(\"ts\"), got {other}"
            ))),
        }
    }

    /// An interval of `n` times `unit` from an integer literal.
    fn interval(&self, unit: Duration, name: &str) -> PyResult<Expression> {
        let n = match self.expr(name)? {
            Expr::Literal(ScalarValue::Int64(Some(n)), _) if n > 0 => n as u64,
            other => {
                return Err(PyTypeError::new_err(format!(
                    "{name}: an interval is a positive integer literal's, as lit(10).{name}; got {other}"
                )));
            }
        };
        let nanos = (unit.as_nanos() as u64)
            .checked_mul(n)
            .and_then(|nanos| i64::try_from(nanos).ok())
            .ok_or_else(|| PyTypeError::new_err(format!("{name}: {n} {name} is too long")))?;
        let value = IntervalMonthDayNano::new(0, 0, nanos);
        Ok(Expression::value(datafusion_expr::lit(
            ScalarValue::IntervalMonthDayNano(Some(value)),
        )))
    }

    fn map(&self, name: &str, f: impl FnOnce(Expr) -> Expr) -> PyResult<Expression> {
        Ok(Expression::value(f(self.expr(name)?)))
    }

    fn binary(
        &self,
        other: &Bound<'_, PyAny>,
        name: &str,
        f: impl FnOnce(Expr, Expr) -> Expr,
    ) -> PyResult<Expression> {
        Ok(Expression::value(f(self.expr(name)?, to_expr(other, name)?)))
    }
}

/// A Python value as an expression: an [`Expression`] as it is, `None`,
/// a bool, an int, a float or a str as a literal.
pub(crate) fn to_expr(value: &Bound<'_, PyAny>, operation: &str) -> PyResult<Expr> {
    if let Ok(e) = value.extract::<PyRef<'_, Expression>>() {
        return e.expr(operation);
    }
    let scalar = if value.is_none() {
        ScalarValue::Null
    } else if value.is_instance_of::<PyBool>() {
        ScalarValue::Boolean(Some(value.extract()?))
    } else if value.is_instance_of::<PyInt>() {
        ScalarValue::Int64(Some(value.extract()?))
    } else if value.is_instance_of::<PyFloat>() {
        ScalarValue::Float64(Some(value.extract()?))
    } else if value.is_instance_of::<PyString>() {
        ScalarValue::Utf8(Some(value.extract()?))
    } else {
        let kind = value.get_type().name()?;
        return Err(PyTypeError::new_err(format!(
            "{operation}: a {kind} is no expression; use col(\"name\") or lit(value)"
        )));
    };
    Ok(datafusion_expr::lit(scalar))
}

/// Every argument of `args` as an expression.
pub(crate) fn to_exprs(args: &Bound<'_, PyTuple>, operation: &str) -> PyResult<Vec<Expr>> {
    args.iter().map(|a| to_expr(&a, operation)).collect()
}

/// `args` as expressions of `operation` for a table of `engine`: the
/// Python functions they call are registered with it, so that the plan
/// finds them by name as it finds SQL's.
pub(crate) fn table_exprs(
    engine: &weir::Engine,
    args: &Bound<'_, PyTuple>,
    operation: &str,
) -> PyResult<Vec<Expr>> {
    let exprs = to_exprs(args, operation)?;
    for expr in &exprs {
        let _ = expr.apply(|e| {
            if let Expr::ScalarFunction(f) = e
                && f.func.inner().is::<PythonFunction>()
            {
                engine.register_udf(f.func.as_ref().clone());
            }
            Ok(TreeNodeRecursion::Continue)
        });
    }
    Ok(exprs)
}

/// One value as [`table_exprs`] takes it.
pub(crate) fn table_expr(engine: &weir::Engine, value: &Bound<'_, PyAny>, operation: &str) -> PyResult<Expr> {
    let args = PyTuple::new(value.py(), [value])?;
    Ok(table_exprs(engine, &args, operation)?.remove(0))
}

const SECOND: Duration = Duration::from_secs(1);

#[pymethods]
impl Expression {
    /// Names it (Flink's `alias`).
    fn alias(&self, name: &str) -> PyResult<Expression> {
        self.map("alias", |e| e.alias(name))
    }

    /// Converts it to `data_type`, a `pyarrow.DataType` (Flink's `cast`).
    fn cast(&self, data_type: &Bound<'_, PyAny>) -> PyResult<Expression> {
        let data_type = DataType::from_pyarrow_bound(data_type)?;
        self.map("cast", |e| datafusion_expr::cast(e, data_type))
    }

    /// Whether it lies between `low` and `high`, both included.
    fn between(&self, low: &Bound<'_, PyAny>, high: &Bound<'_, PyAny>) -> PyResult<Expression> {
        let (low, high) = (to_expr(low, "between")?, to_expr(high, "between")?);
        self.map("between", |e| e.between(low, high))
    }

    /// Whether it is one of `values` (Flink's `in_`).
    #[pyo3(signature = (*values))]
    fn in_(&self, values: &Bound<'_, PyTuple>) -> PyResult<Expression> {
        let values = to_exprs(values, "in_")?;
        self.map("in_", |e| e.in_list(values, false))
    }

    /// Whether a string matches a SQL LIKE `pattern`.
    fn like(&self, pattern: &Bound<'_, PyAny>) -> PyResult<Expression> {
        self.binary(pattern, "like", Expr::like)
    }

    #[getter]
    fn is_null(&self) -> PyResult<Expression> {
        self.map("is_null", Expr::is_null)
    }

    #[getter]
    fn is_not_null(&self) -> PyResult<Expression> {
        self.map("is_not_null", Expr::is_not_null)
    }

    /// Ascending, as an `order_by` key.
    #[getter]
    fn asc(&self) -> PyResult<Expression> {
        Ok(Expression {
            item: Item::Sorted(self.expr("asc")?.sort(true, false)),
        })
    }

    /// Descending, as an `order_by` key.
    #[getter]
    fn desc(&self) -> PyResult<Expression> {
        Ok(Expression {
            item: Item::Sorted(self.expr("desc")?.sort(false, true)),
        })
    }

    #[getter]
    fn sum(&self) -> PyResult<Expression> {
        self.map("sum", aggregates::sum)
    }

    #[getter]
    fn count(&self) -> PyResult<Expression> {
        self.map("count", aggregates::count)
    }

    #[getter]
    fn avg(&self) -> PyResult<Expression> {
        self.map("avg", aggregates::avg)
    }

    #[getter]
    fn min(&self) -> PyResult<Expression> {
        self.map("min", aggregates::min)
    }

    #[getter]
    fn max(&self) -> PyResult<Expression> {
        self.map("max", aggregates::max)
    }

    /// An aggregate over OVER window `window` (`col("p").sum.over(col("w"))`),
    /// which the table's `over_window` defines.
    fn over(&self, window: &Expression) -> PyResult<Expression> {
        let window = window.column_name("over")?;
        let call = self.expr("over")?;
        if !matches!(call, Expr::AggregateFunction(_)) {
            return Err(PyTypeError::new_err(format!(
                "over: expected an aggregate such as col(\"x\").sum, got {call}"
            )));
        }
        Ok(Expression::value(crate::over::placeholder(&window, call)))
    }

    /// The start of the window it names (`col("w").start`).
    #[getter]
    fn start(&self) -> PyResult<Expression> {
        Ok(Expression::value(weir::table::window_start(
            &self.column_name("start")?,
        )))
    }

    /// The end of the window it names.
    #[getter]
    fn end(&self) -> PyResult<Expression> {
        Ok(Expression::value(weir::table::window_end(
            &self.column_name("end")?,
        )))
    }

    /// The time attribute of the window it names (its end less 1 ms).
    #[getter]
    fn rowtime(&self) -> PyResult<Expression> {
        Ok(Expression::value(weir::table::window_time(
            &self.column_name("rowtime")?,
        )))
    }

    #[getter]
    fn millis(&self) -> PyResult<Expression> {
        self.interval(Duration::from_millis(1), "millis")
    }

    #[getter]
    fn seconds(&self) -> PyResult<Expression> {
        self.interval(SECOND, "seconds")
    }

    #[getter]
    fn minutes(&self) -> PyResult<Expression> {
        self.interval(60 * SECOND, "minutes")
    }

    #[getter]
    fn hours(&self) -> PyResult<Expression> {
        self.interval(3600 * SECOND, "hours")
    }

    #[getter]
    fn days(&self) -> PyResult<Expression> {
        self.interval(86400 * SECOND, "days")
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Expression> {
        let f = match op {
            CompareOp::Lt => Expr::lt,
            CompareOp::Le => Expr::lt_eq,
            CompareOp::Eq => Expr::eq,
            CompareOp::Ne => Expr::not_eq,
            CompareOp::Gt => Expr::gt,
            CompareOp::Ge => Expr::gt_eq,
        };
        self.binary(other, "comparison", f)
    }

    fn __add__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expression> {
        self.binary(other, "+", |a, b| a + b)
    }

    fn __radd__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expression> {
        self.binary(other, "+", |a, b| b + a)
    }

    fn __sub__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expression> {
        self.binary(other, "-", |a, b| a - b)
    }

    fn __rsub__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expression> {
        self.binary(other, "-", |a, b| b - a)
    }

    fn __mul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expression> {
        self.binary(other, "*", |a, b| a * b)
    }

    fn __rmul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expression> {
        self.binary(other, "*", |a, b| b * a)
    }

    fn __truediv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expression> {
        self.binary(other, "/", |a, b| a / b)
    }

    fn __rtruediv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expression> {
        self.binary(other, "/", |a, b| b / a)
    }

    fn __mod__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expression> {
        self.binary(other, "%", |a, b| a % b)
    }

    fn __rmod__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expression> {
        self.binary(other, "%", |a, b| b % a)
    }

    fn __neg__(&self) -> PyResult<Expression> {
        self.map("-", |e| -e)
    }

    /// `a & b`: both are true (Flink's `and_`).
    fn __and__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expression> {
        self.binary(other, "&", Expr::and)
    }

    fn __rand__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expression> {
        self.binary(other, "&", |a, b| b.and(a))
    }

    /// `a | b`: either is true (Flink's `or_`).
    fn __or__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expression> {
        self.binary(other, "|", Expr::or)
    }

    fn __ror__(&self, other: &Bound<'_, PyAny>) -> PyResult<Expression> {
        self.binary(other, "|", |a, b| b.or(a))
    }

    /// `~a`: it is not true (Flink's `not_`).
    fn __invert__(&self) -> PyResult<Expression> {
        self.map("~", datafusion_expr::not)
    }

    /// An expression is no truth value: `a and b` would drop one of them.
    fn __bool__(&self) -> PyResult<bool> {
        Err(PyTypeError::new_err(
            "an expression has no truth value: combine conditions with & and |, not `and` and `or`",
        ))
    }

    fn __repr__(&self) -> String {
        match &self.item {
            Item::Value(e) => e.to_string(),
            Item::Sorted(s) => s.to_string(),
            Item::Rows(n) => format!("row_interval({n})"),
            Item::Unbounded { rows: true } => "UNBOUNDED_ROW".into(),
            Item::Unbounded { rows: false } => "UNBOUNDED_RANGE".into(),
            Item::Current { rows: true } => "CURRENT_ROW".into(),
            Item::Current { rows: false } => "CURRENT_RANGE".into(),
        }
    }
}

/// The column `name` (PyFlink's `col`).
#[pyfunction]
pub fn col(name: &str) -> Expression {
    Expression::value(Expr::Column(datafusion_common::Column::from_name(name)))
}

/// A literal (PyFlink's `lit`): None, a bool, an int (BIGINT), a float
/// (DOUBLE) or a str (STRING).
#[pyfunction]
pub fn lit(value: &Bound<'_, PyAny>) -> PyResult<Expression> {
    Ok(Expression::value(to_expr(value, "lit")?))
}

/// A call of the session's function `name`, scalar or aggregate: a
/// built-in or a registered function (PyFlink's `call`).
#[pyfunction]
#[pyo3(signature = (name, *args))]
pub fn call(name: &str, args: &Bound<'_, PyTuple>) -> PyResult<Expression> {
    Ok(Expression::value(weir::table::call(
        name,
        to_exprs(args, "call")?,
    )))
}

/// `n` rows: a row-count window's size or slide (PyFlink's `row_interval`).
#[pyfunction]
pub fn row_interval(n: u64) -> PyResult<Expression> {
    if n == 0 {
        return Err(PyTypeError::new_err(
            "row_interval: a window has at least one row",
        ));
    }
    Ok(Expression { item: Item::Rows(n) })
}

/// The bounds of OVER windows (PyFlink's constants of the same names).
pub fn bounds() -> [(&'static str, Expression); 4] {
    let bound = |item| Expression { item };
    [
        ("UNBOUNDED_ROW", bound(Item::Unbounded { rows: true })),
        ("UNBOUNDED_RANGE", bound(Item::Unbounded { rows: false })),
        ("CURRENT_ROW", bound(Item::Current { rows: true })),
        ("CURRENT_RANGE", bound(Item::Current { rows: false })),
    ]
}

/// Every argument is true (PyFlink's `and_`).
#[pyfunction]
#[pyo3(signature = (first, *rest))]
pub fn and_(first: &Bound<'_, PyAny>, rest: &Bound<'_, PyTuple>) -> PyResult<Expression> {
    let first = to_expr(first, "and_")?;
    Ok(Expression::value(
        to_exprs(rest, "and_")?.into_iter().fold(first, Expr::and),
    ))
}

/// Any argument is true (PyFlink's `or_`).
#[pyfunction]
#[pyo3(signature = (first, *rest))]
pub fn or_(first: &Bound<'_, PyAny>, rest: &Bound<'_, PyTuple>) -> PyResult<Expression> {
    let first = to_expr(first, "or_")?;
    Ok(Expression::value(
        to_exprs(rest, "or_")?.into_iter().fold(first, Expr::or),
    ))
}

/// It is not true (PyFlink's `not_`).
#[pyfunction]
pub fn not_(value: &Bound<'_, PyAny>) -> PyResult<Expression> {
    Ok(Expression::value(datafusion_expr::not(to_expr(value, "not_")?)))
}
