//! Sinks: the writer interface connectors implement, and the operator running it.

use arrow::record_batch::RecordBatch;

use crate::Result;
use crate::runtime::operator::TaskMetrics;
use crate::runtime::{Operator, OperatorFactory, Output, TaskContext};

/// Writes one subtask's rows.
pub trait SinkWriter: Send {
    /// Writes a batch.
    fn write(&mut self, batch: &RecordBatch) -> Result<()>;

    /// The input is done: flush and make everything visible.
    fn finish(&mut self) -> Result<()>;
}

/// Creates each subtask's writer.
pub trait SinkFactory: Send + Sync + std::fmt::Debug {
    /// A one-line description for EXPLAIN.
    fn describe(&self) -> String;

    /// The writer for one subtask.
    fn create_writer(&self, ctx: &TaskContext) -> Result<Box<dyn SinkWriter>>;
}

/// The operator at the end of a chain that hands batches to a sink writer.
pub struct SinkOperator {
    name: String,
    writer: Box<dyn SinkWriter>,
    metrics: std::sync::Arc<TaskMetrics>,
}

impl Operator for SinkOperator {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, _out: &mut Output) -> Result<()> {
        self.writer.write(&batch)?;
        TaskMetrics::add(&self.metrics.records_written, batch.num_rows() as u64);
        Ok(())
    }

    fn process_watermark(&mut self, _watermark: i64, _out: &mut Output) -> Result<()> {
        Ok(())
    }

    fn finish(&mut self, _out: &mut Output) -> Result<()> {
        self.writer.finish()
    }
}

/// Plans a sink into the operator chain.
#[derive(Debug)]
pub struct SinkOperatorFactory {
    /// The connector's sink.
    pub sink: std::sync::Arc<dyn SinkFactory>,
}

impl OperatorFactory for SinkOperatorFactory {
    fn describe(&self) -> String {
        self.sink.describe()
    }

    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(SinkOperator {
            name: self.sink.describe(),
            writer: self.sink.create_writer(ctx)?,
            metrics: ctx.metrics.clone(),
        }))
    }
}
