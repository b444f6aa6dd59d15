//! Row-count windows (the Table API's `Tumble::over(rows(n))` and `Slide::over(rows(n)).every(rows(m))`): a logical node an aggregation groups over.
//!
//! SQL has no row-count windows; the Table API puts a [`CountWindowNode`]
//! under the `Aggregate` of a window grouped by its alias, and the
//! streaming planner plans the pair as one count window aggregation. The
//! node passes its input's columns through: the windows are made of each
//! key's rows in the order they arrive (processing time, as in Flink).

use std::fmt;

use datafusion_common::{Column, DFSchemaRef, Result as DFResult};
use datafusion_expr::Expr;
use datafusion_expr::logical_plan::{LogicalPlan, UserDefinedLogicalNodeCore};

/// Windows of `size` rows of a key, one every `slide` rows.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub struct CountWindowNode {
    /// The rows windowed.
    pub input: LogicalPlan,
    /// Rows a window holds.
    pub size: u64,
    /// Rows between the starts of two windows (`size` for tumbling ones).
    pub slide: u64,
    /// The processing-time attribute the windows are on (for EXPLAIN).
    pub time_column: Column,
}

impl CountWindowNode {
    /// The node over `input` (an error when `slide` is 0 or above `size`).
    pub fn try_new(input: LogicalPlan, size: u64, slide: u64, time_column: Column) -> DFResult<Self> {
        if size == 0 || slide == 0 {
            return datafusion_common::plan_err!("a row-count window holds at least one row");
        }
        if slide > size {
            return datafusion_common::plan_err!(
                "a sliding row-count window slides by at most its size ({slide} rows > {size})"
            );
        }
        Ok(CountWindowNode {
            input,
            size,
            slide,
            time_column,
        })
    }
}

impl UserDefinedLogicalNodeCore for CountWindowNode {
    fn name(&self) -> &str {
        "CountWindow"
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
        match self.size == self.slide {
            true => write!(
                f,
                "CountWindow: TUMBLE({} rows) on {}",
                self.size, self.time_column
            ),
            false => write!(
                f,
                "CountWindow: SLIDE({} rows, every {}) on {}",
                self.size, self.slide, self.time_column
            ),
        }
    }

    fn with_exprs_and_inputs(&self, _exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> DFResult<Self> {
        let input = inputs.into_iter().next().expect("a count window has one input");
        Ok(CountWindowNode {
            input,
            ..self.clone()
        })
    }

    fn necessary_children_exprs(&self, output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        Some(vec![output_columns.to_vec()])
    }
}
