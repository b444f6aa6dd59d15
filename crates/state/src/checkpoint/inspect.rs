//! What a checkpoint or savepoint holds, for `weir checkpoint inspect` and
//! the `checkpoint` connector: operators, subtasks, state files, sizes,
//! key-group ranges, source positions, and the columns of each operator's
//! state (Flink's State Processor API idea: state as tables).

use std::fmt::Write;
use std::path::{Path, PathBuf};

use arrow::datatypes::SchemaRef;

use crate::checkpoint::metadata::{CheckpointMetadata, OperatorState};
use crate::checkpoint::storage::{RestorePoint, resolve_restore};
use crate::incremental::combine;
use crate::snapshot::{read_state_file, write_state_file};
use crate::{Error, Result};
use weir_common::key_group::key_group_range;

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
            if state.deltas.is_empty() {
                if let Some(file) = &state.file {
                    let path = dir.join(&file.path);
                    crate::checkpoint::remote::fetch(&path)?;
                    files.push(path);
                }
            } else {
                files.extend(combined_file(dir, task.vertex, task.subtask, state)?);
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

/// The state of an incremental chain (a base and its deltas) as one
/// Parquet file in a temporary directory of this process, to be read as a
/// table; `None` when the chain holds no rows.
fn combined_file(
    dir: &Path,
    vertex: usize,
    subtask: usize,
    state: &OperatorState,
) -> Result<Option<PathBuf>> {
    let mut batches = Vec::new();
    for file in state.files() {
        batches.extend(read_state_file(&dir.join(&file.path), &(0..=usize::MAX))?);
    }
    let Some(rows) = combine(state.delta_kind, batches)? else {
        return Ok(None);
    };
    let name = format!("{}-{vertex}-{subtask}.parquet", state.operator_id);
    let path = std::env::temp_dir()
        .join(format!("weir-state-{}", std::process::id()))
        .join(name);
    write_state_file(&path, &path.display().to_string(), &rows)?;
    Ok(Some(path))
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
        other => weir_common::types::flink_type_name(other),
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
                readable(position),
            ]);
        }
        for operator in &task.operators {
            let files: Vec<_> = operator.files().collect();
            let (file, rows, bytes, groups) = match files.first() {
                Some(f) => {
                    let bytes: u64 = files.iter().map(|f| f.bytes).sum();
                    total += bytes;
                    let (first, last) = files.iter().fold((usize::MAX, 0), |(a, b), f| {
                        (a.min(f.key_groups.0), b.max(f.key_groups.1))
                    });
                    let path = match files.len() {
                        1 => f.path.clone(),
                        n => format!("{} + {} delta(s)", f.path, n - 1),
                    };
                    (
                        path,
                        files.iter().map(|f| f.rows).sum::<u64>().to_string(),
                        bytes.to_string(),
                        format!("{}..={} (rows in {first}..={last})", range.start(), range.end()),
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
                readable(&operator.meta),
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

/// A source position or an operator's small state as the report shows it:
/// a Kafka source's partitions with their offsets, a Kafka sink's pending
/// transactions; anything else as its JSON.
fn readable(value: &serde_json::Value) -> String {
    if let Some(splits) = value["splits"].as_array()
        && !splits.is_empty()
        && splits.iter().all(|s| s["topic"].is_string())
    {
        let offsets: Vec<String> = splits
            .iter()
            .map(|s| {
                let done = if s["done"].as_bool() == Some(true) {
                    " (done)"
                } else {
                    ""
                };
                format!(
                    "{}-{} @ {}{done}",
                    s["topic"].as_str().unwrap_or_default(),
                    s["partition"],
                    s["offset"]
                )
            })
            .collect();
        return format!("kafka offsets: {}", offsets.join(", "));
    }
    if let (Some(pending), Some(_)) = (value["pending"].as_array(), value.get("next")) {
        let transactions: Vec<String> = pending
            .iter()
            .map(|p| {
                let t = &p[1];
                format!(
                    "{} (producer {}, epoch {}, checkpoint {})",
                    t["transactional_id"].as_str().unwrap_or_default(),
                    t["producer_id"],
                    t["epoch"],
                    p[0]
                )
            })
            .collect();
        return match transactions.is_empty() {
            true => "kafka: no pending transaction".into(),
            false => format!("kafka pending transactions: {}", transactions.join(", ")),
        };
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::readable;

    #[test]
    fn kafka_offsets_and_pending_transactions_read_as_text() {
        let position = serde_json::json!({"splits": [
            {"index": 0, "count": 2, "topic": "in", "partition": 0, "offset": 42, "stop": null, "done": false},
            {"index": 1, "count": 2, "topic": "in", "partition": 1, "offset": 7, "stop": 7, "done": true}
        ], "partitions": [["in", 0], ["in", 1]]});
        assert_eq!(readable(&position), "kafka offsets: in-0 @ 42, in-1 @ 7 (done)");
        let sink = serde_json::json!({"subtask": 0, "next": 5, "pending": [
            [4, {"transactional_id": "job-0-4", "producer_id": 12, "epoch": 0}]
        ]});
        assert_eq!(
            readable(&sink),
            "kafka pending transactions: job-0-4 (producer 12, epoch 0, checkpoint 4)"
        );
        let other = serde_json::json!({"watermark": 5});
        assert_eq!(readable(&other), r#"{"watermark":5}"#);
    }
}
