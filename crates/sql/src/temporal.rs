//! `t FOR SYSTEM_TIME AS OF x.time`: a table read as of another row's time
//! (a temporal or lookup join's table side). The binder wraps the table's
//! plan in a [`VersionedTableNode`] that remembers the time expression; the
//! planner turns the join over it into a lookup join (processing time).

use std::cmp::Ordering;
use std::fmt;

use datafusion_common::{DFSchemaRef, Result as DFResult};
use datafusion_expr::{Expr, LogicalPlan, UserDefinedLogicalNodeCore};

/// A table as of the time `time` names (a column of the other join side).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VersionedTableNode {
    /// The table's plan.
    pub input: LogicalPlan,
    /// The `AS OF` column, as written (`b.p_time` or `p_time`).
    pub time: Vec<String>,
}

impl PartialOrd for VersionedTableNode {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        self.time.partial_cmp(&other.time)
    }
}

impl UserDefinedLogicalNodeCore for VersionedTableNode {
    fn name(&self) -> &str {
        "VersionedTable"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        self.input.schema()
    }

    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "VersionedTable: FOR SYSTEM_TIME AS OF {}", self.time.join("."))
    }

    fn with_exprs_and_inputs(&self, _exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> DFResult<Self> {
        let input = inputs.into_iter().next().ok_or_else(|| {
            datafusion_common::DataFusionError::Internal("a versioned table has one input".into())
        })?;
        Ok(VersionedTableNode {
            input,
            time: self.time.clone(),
        })
    }
}

/// The `VersionedTableNode` under `plan`, through aliases, filters and
/// projections (the table side of a join).
pub fn versioned_table(plan: &LogicalPlan) -> Option<&VersionedTableNode> {
    match plan {
        LogicalPlan::Extension(e) => e.node.as_any().downcast_ref::<VersionedTableNode>(),
        LogicalPlan::SubqueryAlias(a) => versioned_table(&a.input),
        LogicalPlan::Filter(f) => versioned_table(&f.input),
        LogicalPlan::Projection(p) => versioned_table(&p.input),
        _ => None,
    }
}

/// The `AS OF` column as a column reference; the qualifier is taken as
/// written (a `&str` qualifier would be parsed and lower-cased).
pub fn as_of_column(time: &[String]) -> datafusion_common::Column {
    match time {
        [.., qualifier, name] => datafusion_common::Column::new(
            Some(datafusion_common::TableReference::bare(qualifier.as_str())),
            name,
        ),
        _ => datafusion_common::Column::new_unqualified(time.last().map_or("", |s| s.as_str())),
    }
}

/// `weir_keep_columns(...)`: always true, and volatile, so the optimizer
/// neither folds it away nor prunes the columns it reads.
#[derive(Debug, PartialEq, Eq, Hash)]
struct KeepColumns {
    signature: datafusion_expr::Signature,
}

/// Its name.
pub const KEEP_COLUMNS: &str = "weir_keep_columns";

impl datafusion_expr::ScalarUDFImpl for KeepColumns {
    fn name(&self) -> &str {
        KEEP_COLUMNS
    }

    fn signature(&self) -> &datafusion_expr::Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[arrow::datatypes::DataType]) -> DFResult<arrow::datatypes::DataType> {
        Ok(arrow::datatypes::DataType::Boolean)
    }

    fn invoke_with_args(
        &self,
        args: datafusion_expr::ScalarFunctionArgs,
    ) -> DFResult<datafusion_expr::ColumnarValue> {
        let all_true = arrow::array::BooleanArray::from(vec![true; args.number_rows]);
        Ok(datafusion_expr::ColumnarValue::Array(std::sync::Arc::new(
            all_true,
        )))
    }
}

/// The condition [`keep_as_of_columns`] adds to a join over a versioned
/// table: `weir_keep_columns(s.time, versioned.rowtime)`.
pub fn kept_columns(join: &datafusion_expr::logical_plan::Join, time: &[String]) -> Vec<Expr> {
    let mut columns = vec![Expr::Column(as_of_column(time))];
    let rowtime = join.right.schema().iter().find(|(_, f)| {
        f.metadata()
            .get(weir_common::types::TIME_ATTRIBUTE_KEY)
            .map(String::as_str)
            == Some(weir_common::types::ROWTIME)
    });
    // A column of the table side even without a rowtime, so that the
    // condition stays on the join (one of only the stream side's columns
    // would be pushed below it).
    let right = rowtime.or_else(|| join.right.schema().iter().next());
    if let Some((qualifier, field)) = right {
        columns.push(Expr::Column(datafusion_common::Column::new(
            qualifier.cloned(),
            field.name(),
        )));
    }
    let udf = datafusion_expr::ScalarUDF::new_from_impl(KeepColumns {
        signature: datafusion_expr::Signature::variadic_any(datafusion_expr::Volatility::Volatile),
    });
    vec![Expr::ScalarFunction(
        datafusion_expr::expr::ScalarFunction::new_udf(std::sync::Arc::new(udf), columns),
    )]
}

/// Adds [`kept_columns`] to the condition of each join over a versioned
/// table, so that the optimizer keeps the `AS OF` column and the table's
/// rowtime (no expression reads them otherwise). The planner takes it out
/// again.
pub fn keep_as_of_columns(plan: LogicalPlan) -> DFResult<LogicalPlan> {
    use datafusion_common::tree_node::{Transformed, TreeNode};
    plan.transform_up(|plan| {
        let LogicalPlan::Join(mut join) = plan else {
            return Ok(Transformed::no(plan));
        };
        let Some(versioned) = versioned_table(&join.right) else {
            return Ok(Transformed::no(LogicalPlan::Join(join)));
        };
        let kept = kept_columns(&join, &versioned.time);
        let mut filter = join.filter.take();
        for condition in kept {
            filter = Some(match filter {
                Some(f) => f.and(condition),
                None => condition,
            });
        }
        join.filter = filter;
        Ok(Transformed::yes(LogicalPlan::Join(join)))
    })
    .map(|t| t.data)
}
