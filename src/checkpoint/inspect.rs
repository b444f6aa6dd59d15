//! What a checkpoint or savepoint holds, for `weir checkpoint inspect` and
//! the `checkpoint` connector: operators, subtasks, state files, sizes,
//! key-group ranges, source positions, and the columns of each operator's
//! state (Flink's State Processor API idea: state as tables).

use std::fmt::Write;
use std::path::{Path, PathBuf};

use arrow::datatypes::SchemaRef;

use super::metadata::CheckpointMetadata;
use super::storage::{RestorePoint, resolve_restore};
use crate::state::key_group::key_group_range;
use crate::{Error, Result};

/// A checkpoint found from a path: a `chk-<n>` or savepoint directory, or a
/// job directory (its newest intact checkpoint).
pub fn open(path: &Path) -> Result<(PathBuf, CheckpointMetadata)> {
    match resolve_restore(path, "")? {
        RestorePoint::Checkpoint { dir, metadata, .. } => Ok((dir, *metadata)),
        RestorePoint::Nothing { .. } => Err(Error::State(format!(
            "{} holds no complete checkpoint",
            path.display()
        ))),
    }
}

/// The state files of operator `operator` in a checkpoint, by subtask; the
/// error lists the operators there are.
pub fn state_files(dir: &Path, metadata: &CheckpointMetadata, operator: &str) -> Result<Vec<PathBuf>> {
    let mut found = false;
    let mut files = Vec::new();
    let mut tasks: Vec<_> = metadata.tasks.iter().collect();
    tasks.sort_by_key(|t| (t.vertex, t.subtask));
    for task in tasks {
        for state in task.operators.iter().filter(|o| o.operator_id == operator) {
            found = true;
            if let Some(file) = &state.file {
                files.push(dir.join(&file.path));
            }
        }
    }
    if !found {
        return Err(Error::State(format!(
            "checkpoint {} has no state of operator '{operator}'; its operators: {}",
            dir.display(),
            operator_ids(metadata).join(", ")
        )));
    }
    Ok(files)
}

/// Every operator id with state in a checkpoint, sorted.
pub fn operator_ids(metadata: &CheckpointMetadata) -> Vec<String> {
    let mut ids: Vec<String> = metadata
        .tasks
        .iter()
        .flat_map(|t| t.operators.iter().map(|o| o.operator_id.clone()))
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// The columns of an operator's state, from its first state file (`None`
/// when no subtask had any rows).
pub fn state_schema(files: &[PathBuf]) -> Result<Option<SchemaRef>> {
    let Some(first) = files.first() else {
        return Ok(None);
    };
    let file = std::fs::File::open(first).map_err(|e| Error::io(first, e))?;
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| Error::State(format!("cannot read state file {}: {e}", first.display())))?;
    Ok(Some(builder.schema().clone()))
}

/// The SQL type to declare a state column as (SQL has no unsigned integers:
/// the key group is read as INT).
fn sql_type(data_type: &arrow::datatypes::DataType) -> String {
    use arrow::datatypes::DataType::*;
    match data_type {
        UInt8 | UInt16 => "INT".into(),
        UInt32 | UInt64 => "BIGINT".into(),
        other => crate::frontend::types::flink_type_name(other),
    }
}

/// The report `weir checkpoint inspect` prints.
pub fn report(path: &Path) -> Result<String> {
    let (dir, metadata) = open(path)?;
    let mut out = String::new();
    let when = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms).map_or(ms.to_string(), |t| {
            t.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string()
        })
    };
    let _ = writeln!(out, "{}", dir.display());
    let _ = writeln!(
        out,
        "{:?} {} of job '{}', triggered {}, completed {}, {} key groups",
        metadata.kind,
        metadata.checkpoint_id,
        metadata.job,
        when(metadata.trigger_time),
        when(metadata.completion_time),
        metadata.max_parallelism
    );
    let mut tasks: Vec<_> = metadata.tasks.iter().collect();
    tasks.sort_by_key(|t| (t.vertex, t.subtask));
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::ASCII_FULL_CONDENSED);
    table.set_header([
        "vertex",
        "subtask",
        "operator",
        "key groups",
        "file",
        "rows",
        "bytes",
        "state",
    ]);
    let mut total = 0;
    for task in &tasks {
        let range = key_group_range(task.subtask, task.parallelism, metadata.max_parallelism);
        let subtask = format!("{}/{}", task.subtask, task.parallelism);
        if let Some(position) = &task.source {
            table.add_row([
                task.vertex.to_string(),
                subtask.clone(),
                "source".to_string(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                position.to_string(),
            ]);
        }
        for operator in &task.operators {
            let (file, rows, bytes, groups) = match &operator.file {
                Some(f) => {
                    total += f.bytes;
                    (
                        f.path.clone(),
                        f.rows.to_string(),
                        f.bytes.to_string(),
                        format!(
                            "{}..={} (rows in {}..={})",
                            range.start(),
                            range.end(),
                            f.key_groups.0,
                            f.key_groups.1
                        ),
                    )
                }
                None => (
                    String::new(),
                    "0".into(),
                    "0".into(),
                    format!("{}..={}", range.start(), range.end()),
                ),
            };
            table.add_row([
                task.vertex.to_string(),
                subtask.clone(),
                operator.operator_id.clone(),
                groups,
                file,
                rows,
                bytes,
                operator.meta.to_string(),
            ]);
        }
    }
    let _ = writeln!(out, "{table}");
    let _ = writeln!(out, "{} state file bytes in all", total);
    for operator in operator_ids(&metadata) {
        let files = state_files(&dir, &metadata, &operator)?;
        let Some(schema) = state_schema(&files)? else {
            continue;
        };
        let columns: Vec<String> = schema
            .fields()
            .iter()
            .map(|f| format!("`{}` {}", f.name(), sql_type(f.data_type())))
            .collect();
        let _ = writeln!(
            out,
            "\nState of '{operator}' as a table:\n  CREATE TABLE `{}` ({}) WITH ('connector' = 'checkpoint', 'path' = '{}', 'operator' = '{operator}');",
            operator.replace('-', "_"),
            columns.join(", "),
            dir.display()
        );
    }
    Ok(out)
}
