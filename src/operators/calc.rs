//! Calc: a filter and a projection, evaluated with DataFusion physical expressions
//! on whole batches. Stateless, so it is chained into its neighbours' thread.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::filter_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion_physical_expr::PhysicalExpr;

use crate::runtime::{Operator, OperatorFactory, Output, TaskContext};
use crate::{Error, Result};

/// `WHERE` then `SELECT` over single batches.
#[derive(Debug, Clone)]
pub struct Calc {
    /// Rows are kept where this is true.
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// Output columns; `None` keeps the input columns as they are.
    pub projection: Option<Vec<Arc<dyn PhysicalExpr>>>,
    /// Output schema.
    pub schema: SchemaRef,
}

impl Calc {
    /// Applies the filter and projection to one batch.
    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let filtered = match &self.filter {
            None => batch.clone(),
            Some(predicate) => {
                let mask = predicate.evaluate(batch)?.into_array(batch.num_rows())?;
                let mask = mask
                    .as_boolean_opt()
                    .ok_or_else(|| Error::Internal(format!("filter is not boolean: {}", mask.data_type())))?;
                if mask.true_count() == batch.num_rows() {
                    batch.clone()
                } else {
                    filter_record_batch(batch, mask)?
                }
            }
        };
        let Some(projection) = &self.projection else {
            return Ok(filtered);
        };
        let rows = filtered.num_rows();
        let columns = projection
            .iter()
            .map(|e| e.evaluate(&filtered)?.into_array(rows))
            .collect::<datafusion_common::Result<Vec<ArrayRef>>>()?;
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )?)
    }

    /// A short description for EXPLAIN.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(projection) = &self.projection {
            let items: Vec<String> = projection
                .iter()
                .zip(self.schema.fields())
                .map(|(e, f)| {
                    let text = expr_text(e.as_ref());
                    if text == *f.name() {
                        text
                    } else {
                        format!("{text} AS {}", f.name())
                    }
                })
                .collect();
            parts.push(format!("select=[{}]", items.join(", ")));
        }
        if let Some(filter) = &self.filter {
            parts.push(format!("where=[{}]", expr_text(filter.as_ref())));
        }
        format!("Calc({})", parts.join(", "))
    }
}

/// A physical expression as SQL-like text: column references without their
/// `@index` suffixes.
pub fn expr_text(expr: &dyn PhysicalExpr) -> String {
    let text = expr.to_string();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '@' && chars.peek().is_some_and(|d| d.is_ascii_digit()) {
            while chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                chars.next();
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Operator for Calc {
    fn name(&self) -> String {
        "Calc".into()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        out.batch(self.apply(&batch)?);
        Ok(())
    }
}

impl OperatorFactory for Calc {
    fn describe(&self) -> String {
        Calc::describe(self)
    }

    fn create(&self, _ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(self.clone()))
    }
}
