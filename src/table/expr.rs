//! Expressions of the Table API: DataFusion's, checked against a table's columns, resolved against the session's functions, and named as Flink names select items.
//!
//! A function call is looked up by its name among the session's functions,
//! so `sum(col("price"))` built with DataFusion's builder is Flink's `SUM`
//! (its result type), as `SUM(price)` is in SQL, and a function weir adds
//! (Flink's built-ins, registered UDFs) can be called by name with
//! [`call`].

use std::collections::HashSet;

use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{Column, DFSchema};
use datafusion_expr::expr::{AggregateFunction, ScalarFunction, WindowFunctionDefinition};
use datafusion_expr::{Expr, LogicalPlan};

use crate::{Error, Result};
use weir_functions::registry::FunctionRegistry;

/// A call of the session function `name` (scalar or aggregate, looked up
/// when the expression is used: `call("DATE_FORMAT", ...)`, `call("SUM",
/// ...)`), as Flink's `call(String, Object...)`.
pub fn call(name: &str, args: Vec<Expr>) -> Expr {
    // A placeholder the table resolves by name (see `resolve_functions`).
    Expr::ScalarFunction(ScalarFunction::new_udf(
        std::sync::Arc::new(datafusion_expr::ScalarUDF::new_from_impl(Named::new(name))),
        args,
    ))
}

/// An aggregate call as a window function call (`SUM(x) OVER (...)`), for
/// DataFusion's `ExprFunctionExt` to give its window: `over(sum(col("x")))
/// .partition_by(...).order_by(...).window_frame(...).build()` (Flink's
/// `$("x").sum().over($("w"))`). Any other expression is left as it is.
pub fn over(call: Expr) -> Expr {
    match call {
        Expr::AggregateFunction(f) => {
            let mut window = datafusion_expr::expr::WindowFunction::new(
                WindowFunctionDefinition::AggregateUDF(f.func),
                f.params.args,
            );
            window.params.distinct = f.params.distinct;
            window.params.filter = f.params.filter;
            Expr::from(window)
        }
        other => other,
    }
}

/// `COUNT(*)`: the rows of a group, as SQL counts them (`count(lit(1i64))`).
pub fn count_star() -> Expr {
    datafusion_functions_aggregate::expr_fn::count(datafusion_expr::lit(1i64))
}

/// A function known by name only, until [`resolve_functions`] finds it.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Named {
    name: String,
    signature: datafusion_expr::Signature,
}

impl Named {
    fn new(name: &str) -> Self {
        Named {
            name: name.to_string(),
            signature: datafusion_expr::Signature::variadic_any(datafusion_expr::Volatility::Volatile),
        }
    }
}

impl datafusion_expr::ScalarUDFImpl for Named {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &datafusion_expr::Signature {
        &self.signature
    }

    fn return_type(
        &self,
        _: &[arrow::datatypes::DataType],
    ) -> datafusion_common::Result<arrow::datatypes::DataType> {
        datafusion_common::plan_err!("call(\"{}\") is resolved by a table before use", self.name)
    }

    fn invoke_with_args(
        &self,
        _: datafusion_expr::ScalarFunctionArgs,
    ) -> datafusion_common::Result<datafusion_expr::ColumnarValue> {
        datafusion_common::plan_err!("call(\"{}\") is resolved by a table before use", self.name)
    }
}

/// `expr` with every function call replaced by the session's function of
/// the same name (an error naming `operation` for a name it lacks).
pub fn resolve_functions(expr: Expr, functions: &FunctionRegistry, operation: &str) -> Result<Expr> {
    let resolved = expr.transform_up(|e| {
        Ok(match e {
            Expr::ScalarFunction(f) => {
                let name = f.func.name().to_string();
                let named = f.func.inner().is::<Named>();
                if let Some(aggregate) = named.then(|| functions.aggregate(&name)).flatten() {
                    let call = AggregateFunction::new_udf(aggregate, f.args, false, None, vec![], None);
                    return Ok(Transformed::yes(Expr::AggregateFunction(call)));
                }
                match functions.scalar(&name) {
                    Some(udf) => Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(udf, f.args))),
                    None if named => {
                        return Err(datafusion_common::DataFusionError::Plan(format!(
                            "{operation}: no function named '{name}'"
                        )));
                    }
                    None => Transformed::no(Expr::ScalarFunction(f)),
                }
            }
            Expr::AggregateFunction(mut f) => match functions.aggregate(f.func.name()) {
                Some(udaf) => {
                    f.func = udaf;
                    Transformed::yes(Expr::AggregateFunction(f))
                }
                None => Transformed::no(Expr::AggregateFunction(f)),
            },
            Expr::WindowFunction(mut w) => {
                if let WindowFunctionDefinition::AggregateUDF(udaf) = &w.fun
                    && let Some(flink) = functions.aggregate(udaf.name())
                {
                    w.fun = WindowFunctionDefinition::AggregateUDF(flink);
                }
                Transformed::yes(Expr::WindowFunction(w))
            }
            other => Transformed::no(other),
        })
    });
    Ok(resolved.map_err(|e| Error::Plan(e.strip_backtrace()))?.data)
}

/// Checks that every column `exprs` name is one of `schema`'s: an error
/// names `operation`, the column and the closest name there is.
pub fn check_columns<'a>(
    exprs: impl IntoIterator<Item = &'a Expr>,
    schema: &DFSchema,
    operation: &str,
) -> Result<()> {
    for expr in exprs {
        for column in expr.column_refs() {
            if schema.has_column(column) {
                continue;
            }
            return Err(unknown_column(column, schema, operation));
        }
    }
    Ok(())
}

/// The error of a column `schema` lacks, with the closest name it has.
pub fn unknown_column(column: &Column, schema: &DFSchema, operation: &str) -> Error {
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let closest = names
        .iter()
        .min_by_key(|n| datafusion_common::utils::datafusion_strsim::levenshtein(n, &column.name))
        .filter(|n| datafusion_common::utils::datafusion_strsim::levenshtein(n, &column.name) <= 3);
    let hint = match closest {
        Some(name) => format!("; did you mean '{name}'?"),
        None => String::new(),
    };
    Error::Plan(format!(
        "{operation}: unknown column '{}'{hint} (the table has: {})",
        column.flat_name(),
        names.join(", ")
    ))
}

/// Select items named as Flink names them: a column keeps its name, any
/// other unnamed item is `EXPR$<position>`.
pub fn name_items(exprs: Vec<Expr>) -> Vec<Expr> {
    let taken: HashSet<String> = (exprs.iter())
        .filter_map(|e| match e {
            Expr::Alias(alias) => Some(alias.name.clone()),
            Expr::Column(c) => Some(c.name.clone()),
            _ => None,
        })
        .collect();
    (exprs.into_iter().enumerate())
        .map(|(position, e)| match e {
            Expr::Alias(_) | Expr::Column(_) => e,
            other => {
                let mut name = format!("EXPR${position}");
                while taken.contains(&name) {
                    name.push('_');
                }
                other.alias(name)
            }
        })
        .collect()
}

/// `expr` with each of `computed` (aggregate or window calls, or grouping
/// keys) replaced by the column `plan` computed it as.
pub fn rebase(expr: Expr, computed: &[Expr], plan: &LogicalPlan) -> Result<Expr> {
    let rebased = expr.transform_down(|e| {
        if computed.contains(&e) {
            return Ok(Transformed::yes(datafusion_expr::utils::expr_as_column_expr(
                &e, plan,
            )?));
        }
        Ok(Transformed::no(e))
    });
    Ok(rebased.map_err(|e| Error::Plan(e.strip_backtrace()))?.data)
}

/// The window function calls of `exprs`.
pub fn window_calls(exprs: &[Expr]) -> Vec<Expr> {
    datafusion_expr::utils::find_window_exprs(exprs)
}

/// The aggregate calls of `exprs`.
pub fn aggregate_calls(exprs: &[Expr]) -> Vec<Expr> {
    datafusion_expr::utils::find_aggregate_exprs(exprs)
}
