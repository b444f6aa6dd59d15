//! The `blackhole` sink: accepts and discards every row (for benchmarks).

use std::sync::Arc;

use arrow::record_batch::RecordBatch;

use crate::Result;
use crate::{OptionSpec, SinkFactory, SinkWriter};
use weir_plan::table::TableDef;
use weir_runtime::TaskContext;

const OPTIONS: OptionSpec = OptionSpec {
    connector: "blackhole",
    keys: &[],
    prefixes: &[],
    required: &[],
};

/// Checks the table's options.
pub fn validate(table: &TableDef) -> Result<()> {
    OPTIONS.validate(table, &[], &[])
}

/// The blackhole sink of a table.
#[derive(Debug)]
pub struct BlackholeSinkFactory {
    table: String,
}

impl BlackholeSinkFactory {
    /// The sink for `table`.
    pub fn try_new(table: &TableDef) -> Result<Arc<dyn SinkFactory>> {
        validate(table)?;
        Ok(Arc::new(BlackholeSinkFactory {
            table: table.name.clone(),
        }))
    }
}

impl SinkFactory for BlackholeSinkFactory {
    fn describe(&self) -> String {
        format!("Sink: {}[blackhole]", self.table)
    }

    fn accepts_updates(&self) -> bool {
        true
    }

    /// As Flink's blackhole: it takes `[I,UA,D]`.
    fn needs_update_before(&self) -> bool {
        false
    }

    fn create_writer(&self, _ctx: &TaskContext) -> Result<Box<dyn SinkWriter>> {
        Ok(Box::new(Blackhole))
    }
}

struct Blackhole;

impl SinkWriter for Blackhole {
    fn write(&mut self, _batch: &RecordBatch) -> Result<()> {
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}
