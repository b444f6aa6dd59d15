//! OVER windows from Python, with PyFlink's names: `table.over_window(Over.partition_by(col("k")).order_by(col("ts")).preceding(lit(1).hours).alias("w")).select(col("k"), col("v").sum.over(col("w")))`.
//!
//! `aggregate.over(col("w"))` is made before the table knows window `w`,
//! so it is a placeholder call naming the window, with the aggregate as its
//! argument; [`OverWindowedTable::select`] replaces each by the window
//! function weir's Rust Table API plans as SQL's `OVER`.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{DataFusionError, Result as DFResult};
use datafusion_expr::expr::ScalarFunction;
use datafusion_expr::{
    ColumnarValue, Expr, ExprFunctionExt, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, SortExpr,
    Volatility, WindowFrame, WindowFrameBound, WindowFrameUnits,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::error;
use crate::expressions::{Expression, table_exprs, to_exprs};
use crate::table::Table;

/// `aggregate` over the OVER window named `window`, to be resolved.
pub(crate) fn placeholder(window: &str, aggregate: Expr) -> Expr {
    let udf = OverPlaceholder {
        window: window.to_string(),
        signature: Signature::any(1, Volatility::Volatile),
    };
    Expr::ScalarFunction(ScalarFunction::new_udf(
        Arc::new(ScalarUDF::from(udf)),
        vec![aggregate],
    ))
}

/// A call over a window the table has not defined yet.
#[derive(Debug, PartialEq, Eq, Hash)]
struct OverPlaceholder {
    window: String,
    signature: Signature,
}

impl ScalarUDFImpl for OverPlaceholder {
    fn name(&self) -> &str {
        "over"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> DFResult<DataType> {
        Err(self.unresolved())
    }

    fn invoke_with_args(&self, _: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        Err(self.unresolved())
    }
}

impl OverPlaceholder {
    /// The error of a placeholder used outside `over_window(...).select`.
    fn unresolved(&self) -> DataFusionError {
        DataFusionError::Plan(format!(
            "an aggregate over window '{}' is selected from table.over_window(...) only",
            self.window
        ))
    }
}

/// An OVER window being described (made by `weir.window.Over`, PyFlink's):
/// `partition_by`, `order_by`, `preceding`, `following`, then `alias`.
#[pyclass(module = "weir._weir", frozen, skip_from_py_object)]
#[derive(Clone, Default)]
pub struct OverWindowBuilder {
    partition: Vec<Expr>,
    order: Option<SortExpr>,
    preceding: Option<(bool, WindowFrameBound)>,
    following: Option<(bool, WindowFrameBound)>,
}

#[pymethods]
impl OverWindowBuilder {
    /// Windows per value of `fields` (none: one window over all rows).
    #[staticmethod]
    #[pyo3(signature = (*fields))]
    fn partition_by(fields: &Bound<'_, PyTuple>) -> PyResult<OverWindowBuilder> {
        Ok(OverWindowBuilder {
            partition: to_exprs(fields, "partition_by")?,
            ..OverWindowBuilder::default()
        })
    }

    /// The time attribute the rows are ordered by.
    fn order_by(&self, field: &Expression) -> PyResult<OverWindowBuilder> {
        Ok(OverWindowBuilder {
            order: Some(field.sort_key()?),
            ..self.clone()
        })
    }

    /// How far back a row's window reaches: `UNBOUNDED_RANGE` (the
    /// default), `UNBOUNDED_ROW`, an interval (`lit(1).hours`) or
    /// `row_interval(n)`.
    fn preceding(&self, bound: &Expression) -> PyResult<OverWindowBuilder> {
        Ok(OverWindowBuilder {
            preceding: Some(bound.frame_bound(true, "preceding")?),
            ..self.clone()
        })
    }

    /// `CURRENT_ROW` or `CURRENT_RANGE` (as the preceding bound counts).
    fn following(&self, bound: &Expression) -> PyResult<OverWindowBuilder> {
        Ok(OverWindowBuilder {
            following: Some(bound.frame_bound(false, "following")?),
            ..self.clone()
        })
    }

    /// Names the window, for `aggregate.over(col(alias))`.
    fn alias(&self, alias: &str) -> PyResult<OverWindow> {
        let order = self.order.clone().ok_or_else(|| {
            PyValueError::new_err(format!(
                "over window '{alias}': order_by(time attribute) is required"
            ))
        })?;
        let (rows, start) = (self.preceding.clone()).unwrap_or((
            false,
            WindowFrameBound::Preceding(datafusion_common::ScalarValue::UInt64(None)),
        ));
        let (following_rows, end) = self
            .following
            .clone()
            .unwrap_or((rows, WindowFrameBound::CurrentRow));
        if following_rows != rows && end != WindowFrameBound::CurrentRow {
            return Err(PyValueError::new_err(format!(
                "over window '{alias}': preceding and following are both rows or both a range"
            )));
        }
        let units = match rows {
            true => WindowFrameUnits::Rows,
            false => WindowFrameUnits::Range,
        };
        Ok(OverWindow {
            alias: alias.to_string(),
            partition: self.partition.clone(),
            order,
            frame: WindowFrame::new_bounds(units, start, end),
        })
    }
}

/// An OVER window with its alias.
#[pyclass(module = "weir._weir", frozen, skip_from_py_object)]
#[derive(Clone)]
pub struct OverWindow {
    alias: String,
    partition: Vec<Expr>,
    order: SortExpr,
    frame: WindowFrame,
}

/// A table with OVER windows (PyFlink's `OverWindowedTable`).
#[pyclass(module = "weir._weir", frozen)]
pub struct OverWindowedTable {
    table: weir::Table,
    windows: Vec<OverWindow>,
}

impl OverWindowedTable {
    pub(crate) fn new(table: weir::Table, windows: Vec<OverWindow>) -> Self {
        OverWindowedTable { table, windows }
    }

    /// `expr` with each aggregate over a window as its window function.
    fn resolve(&self, expr: Expr) -> PyResult<Expr> {
        let resolved = expr.transform_up(|e| match e {
            Expr::ScalarFunction(f) if f.func.inner().is::<OverPlaceholder>() => {
                let name = (f.func.inner().downcast_ref::<OverPlaceholder>())
                    .map(|p| p.window.clone())
                    .unwrap_or_default();
                let Some(window) = self.windows.iter().find(|w| w.alias == name) else {
                    let known: Vec<&str> = self.windows.iter().map(|w| w.alias.as_str()).collect();
                    return Err(DataFusionError::Plan(format!(
                        "select: no over window named '{name}' (the table has: {})",
                        known.join(", ")
                    )));
                };
                let call = f.args.into_iter().next().expect("one argument");
                weir::table::over(call)
                    .partition_by(window.partition.clone())
                    .order_by(vec![window.order.clone()])
                    .window_frame(window.frame.clone())
                    .build()
                    .map(Transformed::yes)
            }
            other => Ok(Transformed::no(other)),
        });
        resolved
            .map(|t| t.data)
            .map_err(|e| PyTypeError::new_err(e.strip_backtrace()))
    }
}

#[pymethods]
impl OverWindowedTable {
    /// The rows with their aggregates over the windows
    /// (`col("v").sum.over(col("w"))`).
    #[pyo3(signature = (*fields))]
    fn select(&self, fields: &Bound<'_, PyTuple>) -> PyResult<Table> {
        let exprs = (table_exprs(self.table.engine(), fields, "select")?.into_iter())
            .map(|e| self.resolve(e))
            .collect::<PyResult<Vec<_>>>()?;
        self.table.select(exprs).map(Table::new).map_err(error)
    }
}
