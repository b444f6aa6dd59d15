//! A bounded source of constant rows: `VALUES (...)` and `SELECT` without `FROM`.

use arrow::record_batch::RecordBatch;

use crate::Result;
use crate::runtime::{SourceFactory, SourcePoll, SourceReader, TaskContext};

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
        }))
    }
}

struct ValuesReader {
    batches: std::vec::IntoIter<RecordBatch>,
}

impl SourceReader for ValuesReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        Ok(match self.batches.next() {
            Some(batch) => SourcePoll::Batch(batch),
            None => SourcePoll::End,
        })
    }
}
