//! A bounded source of constant rows: `VALUES (...)` and `SELECT` without `FROM`.

use arrow::record_batch::RecordBatch;

use crate::{Error, Result};
use weir_runtime::{SourceFactory, SourcePoll, SourceReader, TaskContext};

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

    fn estimated_bytes(&self) -> Option<u64> {
        Some(
            self.batches
                .iter()
                .map(|b| b.get_array_memory_size() as u64)
                .sum(),
        )
    }

    fn create_reader(&self, ctx: &TaskContext) -> Result<Box<dyn SourceReader>> {
        // One split, read by subtask 0.
        Ok(Box::new(ValuesReader {
            all: self.batches.clone(),
            split: (ctx.subtask == 0).then_some(0),
        }))
    }

    fn supports_checkpoints(&self) -> bool {
        true
    }
}

struct ValuesReader {
    all: Vec<RecordBatch>,
    /// Batches of the one split emitted (the checkpointed position), when
    /// this subtask reads it.
    split: Option<usize>,
}

impl SourceReader for ValuesReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        let Some(emitted) = self.split.as_mut() else {
            return Ok(SourcePoll::End);
        };
        Ok(match self.all.get(*emitted) {
            Some(batch) => {
                *emitted += 1;
                SourcePoll::Batch(batch.clone())
            }
            None => SourcePoll::End,
        })
    }

    fn snapshot_position(
        &mut self,
        _checkpoint: weir_common::ids::CheckpointId,
    ) -> Result<serde_json::Value> {
        let splits: Vec<serde_json::Value> = self
            .split
            .iter()
            .map(|n| serde_json::json!({ "index": 0, "count": 1, "batches": n }))
            .collect();
        Ok(serde_json::json!({ "splits": splits }))
    }

    fn restore_position(&mut self, position: &serde_json::Value) -> Result<()> {
        let bad = || Error::State(format!("values position {position} is not one this source wrote"));
        let splits = position["splits"].as_array().ok_or_else(bad)?;
        self.split = match splits.as_slice() {
            [] => None,
            [split] => Some(split["batches"].as_u64().ok_or_else(bad)? as usize),
            _ => return Err(bad()),
        };
        Ok(())
    }
}
