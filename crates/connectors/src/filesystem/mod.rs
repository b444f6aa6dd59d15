//! The `filesystem` connector: files in `csv`, `json` or `parquet` format.
//!
//! Source: `'path'` is a file or a directory (its non-hidden files, recursively,
//! in name order); each file is a split, and subtask `i` of `p` reads files
//! `i, i+p, ...` one after another. Sink: `'path'` is a directory; each subtask
//! writes part files `part-<uuid>-<subtask>-<n>`, which stay hidden
//! (`.part-...inprogress...`) until they are complete.

pub mod commit;
pub mod partition;
mod sink;
mod source;

use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use sink::FileSinkFactory;
pub use sink::random_uuid;
pub use source::{FileList, FileSourceFactory};

use crate::OptionSpec;
use crate::format::csv::{CSV_KEYS, CsvOptions};
use crate::format::json::{JSON_KEYS, JsonOptions};
use crate::{Error, Result};
use weir_common::config::SessionConfig;
use weir_plan::table::TableDef;

const OPTIONS: OptionSpec = OptionSpec {
    connector: "filesystem",
    keys: &[
        "path",
        "format",
        "sink.rolling-policy.file-size",
        "sink.rolling-policy.rollover-interval",
        "sink.rolling-policy.check-interval",
        "partition.default-name",
        "partition.time-extractor.kind",
        "partition.time-extractor.timestamp-pattern",
        "partition.time-extractor.timestamp-formatter",
        "sink.partition-commit.trigger",
        "sink.partition-commit.delay",
        "sink.partition-commit.policy.kind",
        "sink.partition-commit.success-file.name",
        "sink.partition-commit.watermark-time-zone",
        "sink.parallelism",
        "scan.parallelism",
    ],
    prefixes: &[],
    required: &["path", "format"],
};

/// A file format and its options.
#[derive(Debug, Clone)]
pub enum FileFormat {
    /// `csv`.
    Csv(CsvOptions),
    /// `json` (one object per line).
    Json(JsonOptions),
    /// `debezium-json`: a changelog, each row `{"before": ..., "after": ...,
    /// "op": "c" | "d"}` as Flink writes it (sink only).
    DebeziumJson,
    /// `parquet`.
    Parquet {
        /// `parquet.compression`.
        compression: parquet::basic::Compression,
    },
}

impl FileFormat {
    /// The format's name.
    pub fn name(&self) -> &'static str {
        match self {
            FileFormat::Csv(_) => "csv",
            FileFormat::Json(_) => "json",
            FileFormat::DebeziumJson => "debezium-json",
            FileFormat::Parquet { .. } => "parquet",
        }
    }

    fn from_table(table: &TableDef) -> Result<Self> {
        let format = table.option("format").unwrap_or_default();
        let (keys, prefixes): (&[&str], &[&str]) = match format {
            "csv" => (CSV_KEYS, &[]),
            "json" => (JSON_KEYS, &[]),
            "debezium-json" => (&[], &[]),
            "parquet" => (&["parquet.compression"], &[]),
            other => {
                return Err(Error::sql(format!(
                    "table '{}': unknown format '{other}' for the filesystem connector; \
                     use csv, json, debezium-json or parquet",
                    table.name
                )));
            }
        };
        OPTIONS.validate(table, keys, prefixes)?;
        Ok(match format {
            "csv" => FileFormat::Csv(CsvOptions::from_table(table)?),
            "json" => FileFormat::Json(JsonOptions::from_table(table)?),
            "debezium-json" => FileFormat::DebeziumJson,
            _ => {
                let compression = match table.option("parquet.compression") {
                    None => parquet::basic::Compression::SNAPPY,
                    Some(c) => {
                        parquet::basic::Compression::from_str(&c.to_ascii_uppercase()).map_err(|_| {
                            Error::sql(format!(
                                "table '{}': unknown parquet.compression '{c}'",
                                table.name
                            ))
                        })?
                    }
                };
                FileFormat::Parquet { compression }
            }
        })
    }
}

/// Checks a filesystem table's options.
pub fn validate(table: &TableDef, _config: &SessionConfig) -> Result<()> {
    FileFormat::from_table(table)?;
    sink::RollingPolicy::from_table(table)?;
    commit::CommitPolicy::from_table(table)?;
    Ok(())
}

/// The path of the `'path'` option; `file://` URIs are accepted.
fn table_path(table: &TableDef) -> Result<PathBuf> {
    let path = table
        .option("path")
        .ok_or_else(|| Error::sql(format!("table '{}' has no 'path' option", table.name)))?;
    let path = path.strip_prefix("file://").unwrap_or(path);
    if path.contains("://") {
        return Err(Error::sql(format!(
            "table '{}': only local paths are supported, got '{path}'",
            table.name
        )));
    }
    Ok(PathBuf::from(path))
}

/// Hidden files (`.name`, `_name`) are not data: in-progress part files, markers.
fn is_hidden(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.') || n.starts_with('_'))
}

/// The data files under `path`, sorted by name.
pub fn list_files(path: &Path) -> Result<Vec<PathBuf>> {
    let metadata = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if metadata.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            let p = entry.path();
            if is_hidden(&p) {
                continue;
            }
            if entry.file_type().map_err(|e| Error::io(&p, e))?.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
    Ok(files)
}
