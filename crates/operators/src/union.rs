//! Union: passes batches of several inputs through; when the union updates,
//! rows of its insert-only inputs become `+I` rows.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::Result;
use weir_common::changelog;
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};

/// `UNION ALL` of inputs with the same columns.
#[derive(Debug, Clone)]
pub struct Union {
    /// The output (with the op column when an input updates).
    pub schema: SchemaRef,
}

impl Operator for Union {
    fn name(&self) -> String {
        "Union".into()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        if changelog::has_op(&self.schema) {
            out.batch(changelog::as_updating(batch, &self.schema)?);
        } else {
            out.batch(batch);
        }
        Ok(())
    }
}

impl OperatorFactory for Union {
    fn create(&self, _ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(self.clone()))
    }
}
