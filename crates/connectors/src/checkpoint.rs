//! The `checkpoint` source: an operator's keyed state in a checkpoint or
//! savepoint, read as a table (Flink's State Processor API, in SQL).
//!
//! ```sql
//! CREATE TABLE state (`_key_group` INT, `_slice` BIGINT, ...)
//! WITH ('connector' = 'checkpoint', 'path' = '/ckpt/job/chk-7', 'operator' = 'WindowAggregate-0');
//! ```
//!
//! `path` is a `chk-<n>` or savepoint directory, or a job directory (its
//! newest intact checkpoint); `operator` an operator id of it. The columns are
//! read by name from the state files; `weir checkpoint inspect` prints the
//! statement with every column.

use std::path::PathBuf;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;

use crate::OptionSpec;
use crate::filesystem::{FileList, FileSourceFactory};
use crate::{Error, Result};
use weir_common::config::checkpoint::path_option;
use weir_plan::table::TableDef;
use weir_runtime::SourceFactory;
use weir_state::checkpoint::inspect::{open, state_files};

const OPTIONS: OptionSpec = OptionSpec {
    connector: "checkpoint",
    keys: &["path", "operator"],
    prefixes: &[],
    required: &["path", "operator"],
};

/// Checks the table's options.
pub fn validate(table: &TableDef) -> Result<()> {
    OPTIONS.validate(table, &[], &[])
}

/// The source of the state of `operator` in the checkpoint at `path`.
pub fn create_source(
    table: &TableDef,
    projection: &[usize],
    schema: SchemaRef,
) -> Result<Arc<dyn SourceFactory>> {
    validate(table)?;
    let option = |key: &str| {
        table
            .option(key)
            .ok_or_else(|| Error::sql(format!("table '{}' has no '{key}' option", table.name)))
    };
    let path: PathBuf = path_option(option("path")?)?;
    let operator = option("operator")?.to_string();
    // The checkpoint is read when the job is deployed, not when planned.
    let (at, name) = (path.clone(), operator.clone());
    let files = FileList::Deferred(Box::new(move || {
        let (dir, metadata) = open(&at)?;
        state_files(&dir, &metadata, &name)
    }));
    Ok(FileSourceFactory::parquet_files(
        table,
        "checkpoint",
        path.join(operator),
        files,
        projection,
        schema,
    ))
}
