//! Sinks: the writer interface connectors implement, and the operator running it.

use arrow::record_batch::RecordBatch;

use crate::Result;
use weir_common::ids::CheckpointId;
use weir_runtime::operator::{OperatorSnapshot, TaskMetrics};
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};

/// Writes one subtask's rows.
pub trait SinkWriter: Send {
    /// Writes a batch.
    fn write(&mut self, batch: &RecordBatch) -> Result<()>;

    /// The input is done: flush and make everything visible.
    fn finish(&mut self) -> Result<()>;

    /// The sink's input watermark advanced.
    fn on_watermark(&mut self, _watermark: i64) -> Result<()> {
        Ok(())
    }

    /// True for writers that act on the wall clock (rolling files by time).
    fn uses_processing_time(&self) -> bool {
        false
    }

    /// The wall clock reached `now` (ms since the epoch).
    fn on_processing_time(&mut self, _now: i64) -> Result<()> {
        Ok(())
    }

    /// Checkpoint barrier (first phase of two-phase commit): close what was
    /// written as pending, not yet visible; returns what the checkpoint must
    /// record to commit it after a crash.
    fn pre_commit(&mut self, _checkpoint: CheckpointId) -> Result<serde_json::Value> {
        Ok(serde_json::Value::Null)
    }

    /// The checkpoint is complete (second phase): make its pending data visible.
    fn commit(&mut self, _checkpoint: CheckpointId) -> Result<()> {
        Ok(())
    }

    /// Restore: commit what the checkpoint recorded (idempotently) and discard
    /// anything written after it.
    fn restore(&mut self, _recorded: &serde_json::Value) -> Result<()> {
        Ok(())
    }
}

/// Creates each subtask's writer.
pub trait SinkFactory: Send + Sync + std::fmt::Debug {
    /// A one-line description for EXPLAIN.
    fn describe(&self) -> String;

    /// The writer for one subtask.
    fn create_writer(&self, ctx: &TaskContext) -> Result<Box<dyn SinkWriter>>;

    /// Whether it takes updates (rows of every kind); a sink that does not
    /// refuses an updating query when it is planned.
    fn accepts_updates(&self) -> bool {
        false
    }

    /// Whether it needs the `-U` row of each update (Flink's print and
    /// `debezium-json` do); an upsert sink does not, when the table's
    /// primary key holds the input's upsert key.
    fn needs_update_before(&self) -> bool {
        true
    }
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

    fn process_watermark(&mut self, watermark: i64, _out: &mut Output) -> Result<()> {
        self.writer.on_watermark(watermark)
    }

    fn uses_processing_time(&self) -> bool {
        self.writer.uses_processing_time()
    }

    fn on_processing_time(&mut self, now: i64, _out: &mut Output) -> Result<()> {
        self.writer.on_processing_time(now)
    }

    fn finish(&mut self, _out: &mut Output) -> Result<()> {
        self.writer.finish()
    }

    fn snapshot(&mut self, checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        Ok(Some(OperatorSnapshot {
            runs: Vec::new(),
            deferred: Vec::new(),
            rows_later: None,
            meta: self.writer.pre_commit(checkpoint)?,
            rows: None,
        }))
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        self.writer.restore(&snapshot.meta)
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        self.writer.commit(checkpoint)
    }
}

/// Plans a sink into the operator chain.
#[derive(Debug)]
pub struct SinkOperatorFactory {
    /// The connector's sink.
    pub sink: std::sync::Arc<dyn SinkFactory>,
}

impl OperatorFactory for SinkOperatorFactory {
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(SinkOperator {
            name: self.sink.describe(),
            writer: self.sink.create_writer(ctx)?,
            metrics: ctx.metrics.clone(),
        }))
    }
}
