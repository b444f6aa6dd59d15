//! Union: passes batches of several inputs through unchanged.

use arrow::record_batch::RecordBatch;

use crate::Result;
use crate::runtime::{Operator, OperatorFactory, Output, TaskContext};

/// `UNION ALL` of inputs with the same schema.
#[derive(Debug, Clone)]
pub struct Union;

impl Operator for Union {
    fn name(&self) -> String {
        "Union".into()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        out.batch(batch);
        Ok(())
    }
}

impl OperatorFactory for Union {
    fn spec(&self, _inputs: &[arrow::datatypes::SchemaRef]) -> Result<crate::plan::spec::NodeSpec> {
        Ok(crate::plan::spec::NodeSpec::Union)
    }

    fn describe(&self) -> String {
        "Union".into()
    }

    fn create(&self, _ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(Union))
    }
}
