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
