//! The `print` sink: rows to standard output as Flink prints them, `+I[1, abc]`
//! (and `-U`, `+U`, `-D` for the rows of an updating query).
//!
//! With parallelism above one each line starts with the subtask number
//! (`2> +I[...]`), and with `'print-identifier'` with that name. The sink is
//! at-least-once: after a recovery, replayed rows are printed again.

use std::io::Write;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::format::text::{TextStyle, format_column};
use crate::{Error, Result};
use crate::{OptionSpec, SinkFactory, SinkWriter};
use weir_common::config::SessionConfig;
use weir_plan::table::TableDef;
use weir_runtime::TaskContext;

const OPTIONS: OptionSpec = OptionSpec {
    connector: "print",
    keys: &["print-identifier", "standard-error", "sink.parallelism"],
    prefixes: &[],
    required: &[],
};

/// Checks the table's options.
pub fn validate(table: &TableDef) -> Result<()> {
    OPTIONS.validate(table, &[], &[])?;
    table.parse_bool_option("standard-error", false).map(drop)
}

/// The print sink of a table.
#[derive(Debug)]
pub struct PrintSinkFactory {
    table: String,
    identifier: Option<String>,
    stderr: bool,
}

impl PrintSinkFactory {
    /// The sink for `table`.
    pub fn try_new(
        table: &TableDef,
        _schema: SchemaRef,
        _config: &SessionConfig,
    ) -> Result<Arc<dyn SinkFactory>> {
        validate(table)?;
        Ok(Arc::new(PrintSinkFactory {
            table: table.name.clone(),
            identifier: table.option("print-identifier").map(str::to_string),
            stderr: table.parse_bool_option("standard-error", false)?,
        }))
    }
}

impl SinkFactory for PrintSinkFactory {
    fn describe(&self) -> String {
        format!("Sink: {}[print]", self.table)
    }

    fn accepts_updates(&self) -> bool {
        true
    }

    fn create_writer(&self, ctx: &TaskContext) -> Result<Box<dyn SinkWriter>> {
        let prefix = match (&self.identifier, ctx.parallelism > 1) {
            (Some(id), true) => format!("{id}:{}> ", ctx.subtask + 1),
            (Some(id), false) => format!("{id}> "),
            (None, true) => format!("{}> ", ctx.subtask + 1),
            (None, false) => String::new(),
        };
        Ok(Box::new(PrintWriter {
            prefix,
            stderr: self.stderr,
        }))
    }
}

struct PrintWriter {
    prefix: String,
    stderr: bool,
}

/// Formats a batch as Flink's `+I[...]` lines (`-U[...]`, `+U[...]`,
/// `-D[...]` for the rows of an updating stream).
pub fn format_rows(batch: &RecordBatch, prefix: &str) -> Result<Vec<String>> {
    let kinds = weir_common::changelog::row_kinds(batch)?;
    let batch = weir_common::changelog::data(batch);
    let columns = batch
        .columns()
        .iter()
        .map(|c| format_column(c, TextStyle::Print))
        .collect::<Result<Vec<_>>>()?;
    Ok((0..batch.num_rows())
        .map(|row| {
            let values: Vec<&str> = columns
                .iter()
                .map(|c| c[row].as_deref().unwrap_or("null"))
                .collect();
            format!("{prefix}{}[{}]", kinds[row].short(), values.join(", "))
        })
        .collect())
}

impl SinkWriter for PrintWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let mut text = format_rows(batch, &self.prefix)?.join("\n");
        text.push('\n');
        let result = if self.stderr {
            std::io::stderr().lock().write_all(text.as_bytes())
        } else {
            std::io::stdout().lock().write_all(text.as_bytes())
        };
        result.map_err(|e| Error::io("standard output", e))
    }

    fn finish(&mut self) -> Result<()> {
        std::io::stdout()
            .flush()
            .map_err(|e| Error::io("standard output", e))
    }
}
