//! A bounded source of constant rows: `VALUES (...)` and `SELECT` without `FROM`.

use arrow::record_batch::RecordBatch;

use crate::runtime::{SourceFactory, SourcePoll, SourceReader, TaskContext};
use crate::{Error, Result};

/// Emits fixed batches once, from subtask 0.
#[derive(Debug)]
pub struct ValuesSourceFactory {
    batches: Vec<RecordBatch>,
}

impl ValuesSourceFactory {
    /// A source emitting `batches`.
    pub fn new(batches: Vec<RecordBatch>) -> Self {
        ValuesSourceFactory { batches }
    }
}

impl SourceFactory for ValuesSourceFactory {
    fn describe(&self) -> String {
        let rows: usize = self.batches.iter().map(|b| b.num_rows()).sum();
        format!("Values({rows} rows)")
    }

    fn is_bounded(&self) -> bool {
        true
    }

    fn create_reader(&self, ctx: &TaskContext) -> Result<Box<dyn SourceReader>> {
        let batches = if ctx.subtask == 0 {
            self.batches.clone()
        } else {
            vec![]
        };
        Ok(Box::new(ValuesReader {
            batches: batches.into_iter(),
            emitted: 0,
        }))
    }

    fn supports_checkpoints(&self) -> bool {
        true
    }
}

struct ValuesReader {
    batches: std::vec::IntoIter<RecordBatch>,
    /// Batches emitted: the checkpointed position.
    emitted: usize,
}

impl SourceReader for ValuesReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        Ok(match self.batches.next() {
            Some(batch) => {
                self.emitted += 1;
                SourcePoll::Batch(batch)
            }
            None => SourcePoll::End,
        })
    }

    fn snapshot_position(&mut self) -> Result<serde_json::Value> {
        Ok(serde_json::json!({ "batches": self.emitted }))
    }

    fn restore_position(&mut self, position: &serde_json::Value) -> Result<()> {
        let n = position["batches"]
            .as_u64()
            .ok_or_else(|| Error::State(format!("values position {position} lacks 'batches'")))?;
        for _ in 0..n {
            self.batches.next();
        }
        self.emitted = n as usize;
        Ok(())
    }
}
