//! The collect sink: hands a query's result batches to the embedded API.

use arrow::record_batch::RecordBatch;
use crossbeam_channel::Sender;

use crate::Result;
use crate::{SinkFactory, SinkWriter};
use weir_runtime::TaskContext;
use weir_runtime::operator::send_or_cancel;
use weir_runtime::task::cancelled;

/// Sends every batch to the receiver of a query result.
#[derive(Debug)]
pub struct CollectSinkFactory {
    sender: Sender<RecordBatch>,
}

impl CollectSinkFactory {
    /// A sink feeding `sender`.
    pub fn new(sender: Sender<RecordBatch>) -> Self {
        CollectSinkFactory { sender }
    }
}

impl SinkFactory for CollectSinkFactory {
    fn describe(&self) -> String {
        "Sink: collect".to_string()
    }

    fn accepts_updates(&self) -> bool {
        true
    }

    fn create_writer(&self, ctx: &TaskContext) -> Result<Box<dyn SinkWriter>> {
        Ok(Box::new(CollectWriter {
            sender: self.sender.clone(),
            cancel: ctx.cancel.clone(),
        }))
    }
}

struct CollectWriter {
    sender: Sender<RecordBatch>,
    cancel: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SinkWriter for CollectWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        // The receiver is gone only when the caller dropped the result: a cancel.
        send_or_cancel(&self.sender, batch.clone(), &self.cancel)
            .map(drop)
            .map_err(|_| cancelled())
    }

    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}
