//! Calc: a filter and a projection, evaluated with DataFusion physical expressions
//! on whole batches. Stateless, so it is chained into its neighbours' thread.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::filter_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion_physical_expr::expressions::{CaseExpr, Column, Literal};
use datafusion_physical_expr::{PhysicalExpr, ScalarFunctionExpr};

use crate::{Error, Result};
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};

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
    ///
    /// When every projected expression is free to compute (a column, or a field
    /// of a `ROW` column), the projection runs first and the filter copies only
    /// the projected columns; otherwise rows are filtered before the projection
    /// computes anything.
    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let mask = match &self.filter {
            None => None,
            Some(predicate) => {
                let mask = predicate.evaluate(batch)?.into_array(batch.num_rows())?;
                let mask = mask
                    .as_boolean_opt()
                    .ok_or_else(|| Error::Internal(format!("filter is not boolean: {}", mask.data_type())))?
                    .clone();
                (mask.true_count() < batch.num_rows()).then_some(mask)
            }
        };
        let Some(projection) = &self.projection else {
            return Ok(match &mask {
                Some(mask) => filter_record_batch(batch, mask)?,
                None => batch.clone(),
            });
        };
        if let Some(mask) = &mask
            && projection.iter().any(|e| !is_free(e.as_ref()))
        {
            return self.project(&filter_record_batch(batch, mask)?, projection);
        }
        let projected = self.project(batch, projection)?;
        Ok(match &mask {
            Some(mask) => filter_record_batch(&projected, mask)?,
            None => projected,
        })
    }

    /// Evaluates the projection; on an updating stream (the output has an
    /// op column) each row keeps its kind.
    fn project(&self, batch: &RecordBatch, projection: &[Arc<dyn PhysicalExpr>]) -> Result<RecordBatch> {
        let rows = batch.num_rows();
        let mut columns = projection
            .iter()
            .map(|e| evaluate(e.as_ref(), batch))
            .collect::<Result<Vec<ArrayRef>>>()?;
        if weir_common::changelog::has_op(&self.schema) {
            let ops = weir_common::changelog::ops(batch)
                .ok_or_else(|| Error::Internal("an updating Calc got a batch without row kinds".into()))?;
            columns.push(Arc::new(ops.clone()));
        }
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )?)
    }
}

/// Evaluates an expression on a whole batch.
///
/// A searched `CASE` whose results are all free to compute (as Nexmark's
/// `dateTime`, a `CASE` over fields of three `ROW` columns) is evaluated by
/// computing every result on the whole batch and picking per row with Arrow's
/// `zip`; DataFusion's general `CASE` filters the whole batch once per branch,
/// which copies every column, however wide.
pub fn evaluate(expr: &dyn PhysicalExpr, batch: &RecordBatch) -> Result<ArrayRef> {
    let rows = batch.num_rows();
    if let Some(case) = expr.downcast_ref::<CaseExpr>()
        && case.expr().is_none()
        && case
            .when_then_expr()
            .iter()
            .all(|(_, then)| is_free(then.as_ref()))
        && case.else_expr().is_none_or(|e| is_free(e.as_ref()))
    {
        let data_type = expr.data_type(&batch.schema())?;
        let mut result = match case.else_expr() {
            Some(e) => e.evaluate(batch)?.into_array(rows)?,
            None => arrow::array::new_null_array(&data_type, rows),
        };
        // Last branch first, so that the first true condition wins.
        for (when, then) in case.when_then_expr().iter().rev() {
            let condition = when.evaluate(batch)?.into_array(rows)?;
            let condition = condition
                .as_boolean_opt()
                .ok_or_else(|| Error::Internal("CASE condition is not boolean".into()))?;
            let value = then.evaluate(batch)?.into_array(rows)?;
            result = arrow::compute::kernels::zip::zip(condition, &value, &result)?;
        }
        return Ok(result);
    }
    Ok(expr.evaluate(batch)?.into_array(rows)?)
}

/// True for expressions that cost nothing to evaluate: a column, a literal, or
/// a field of a `ROW` (which Arrow returns without copying).
fn is_free(expr: &dyn PhysicalExpr) -> bool {
    if expr.downcast_ref::<Column>().is_some() || expr.downcast_ref::<Literal>().is_some() {
        return true;
    }
    match expr.downcast_ref::<ScalarFunctionExpr>() {
        Some(f) if f.name() == "get_field" => f.args().iter().all(|a| is_free(a.as_ref())),
        _ => false,
    }
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
    fn create(&self, _ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(self.clone()))
    }
}
