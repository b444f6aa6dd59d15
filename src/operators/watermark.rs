//! The watermark assigner: `WATERMARK FOR ts AS expr` at the source.
//!
//! The watermark is the largest value of `expr` seen so far in this subtask; it
//! is emitted after each batch in which it advanced. A NULL rowtime is an error,
//! as in Flink.

use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::compute::kernels::aggregate::max;
use arrow::datatypes::{DataType, Int64Type, TimeUnit};
use arrow::record_batch::RecordBatch;
use datafusion_physical_expr::PhysicalExpr;

use crate::runtime::message::MIN_WATERMARK;
use crate::runtime::{Operator, OperatorFactory, Output, TaskContext, Timestamp};
use crate::{Error, Result};

/// Evaluates a column to epoch milliseconds (timestamps of any unit and zone).
pub fn to_epoch_millis(array: &dyn Array) -> Result<arrow::array::Int64Array> {
    let as_ms = arrow::compute::cast(&arrow::array::make_array(array.to_data()), &DataType::Timestamp(TimeUnit::Millisecond, None))?;
    let as_int = arrow::compute::cast(&as_ms, &DataType::Int64)?;
    Ok(as_int.as_primitive::<Int64Type>().clone())
}

/// Spec of a watermark assigner.
#[derive(Debug, Clone)]
pub struct WatermarkAssigner {
    /// The rowtime column, for errors.
    pub rowtime: String,
    /// Index of the rowtime column in the input.
    pub rowtime_index: usize,
    /// The watermark expression.
    pub expr: Arc<dyn PhysicalExpr>,
    /// Its SQL text.
    pub text: String,
}

impl OperatorFactory for WatermarkAssigner {
    fn describe(&self) -> String {
        format!("WatermarkAssigner(rowtime=[{}], watermark=[{}])", self.rowtime, self.text)
    }

    fn create(&self, _ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(WatermarkAssignerOperator {
            spec: self.clone(),
            current: MIN_WATERMARK,
        }))
    }
}

struct WatermarkAssignerOperator {
    spec: WatermarkAssigner,
    current: Timestamp,
}

impl Operator for WatermarkAssignerOperator {
    fn name(&self) -> String {
        "WatermarkAssigner".into()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        if batch.column(self.spec.rowtime_index).null_count() > 0 {
            return Err(Error::Execution(format!(
                "the rowtime column '{}' must not be NULL; filter or convert NULLs before using it as a time attribute",
                self.spec.rowtime
            )));
        }
        let values = self.spec.expr.evaluate(&batch)?.into_array(batch.num_rows())?;
        let candidate = max(&to_epoch_millis(values.as_ref())?);
        out.batch(batch);
        if let Some(candidate) = candidate
            && candidate > self.current
        {
            self.current = candidate;
            out.watermark(candidate);
        }
        Ok(())
    }

    fn process_watermark(&mut self, watermark: Timestamp, out: &mut Output) -> Result<()> {
        // Only the end of input reaches here (+infinity): forward it.
        if watermark > self.current {
            self.current = watermark;
            out.watermark(watermark);
        }
        Ok(())
    }
}
