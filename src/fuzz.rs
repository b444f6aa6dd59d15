//! Entry points for the fuzz targets under `fuzz/` and for the tests that
//! replay their corpora: each takes arbitrary input and may return an error
//! (naming what and where), but must never panic.
//!
//! SQL is planned, never run: queries and `INSERT`s go through `EXPLAIN`,
//! which has no side effects.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, TimeUnit};

use crate::Result;
use weir_connectors::format::csv::{CsvBatchReader, CsvOptions};
use weir_connectors::format::json::{JsonBatchReader, JsonOptions};
use weir_sql::parser::parse_statements;
use weir_state::checkpoint::storage::{read_metadata, verify};
use weir_state::snapshot::{read_batches, read_state_file};

/// Parses, binds and plans every statement of `text` in a fresh engine:
/// DDL and `SET` are executed (they only change the session), queries and
/// `INSERT`s are explained; other statements (jobs, files) are skipped.
pub fn sql(text: &str) -> Result<()> {
    let engine = crate::Engine::new();
    for statement in parse_statements(text)? {
        let head = statement.text.trim_start().to_ascii_uppercase();
        let planned = if head.starts_with("SELECT")
            || head.starts_with("WITH")
            || head.starts_with("INSERT")
            || head.starts_with("VALUES")
        {
            format!("EXPLAIN {}", statement.text)
        } else if ["CREATE", "DROP", "SET", "RESET", "EXPLAIN", "DESCRIBE", "SHOW"]
            .iter()
            .any(|k| head.starts_with(k))
        {
            statement.text.clone()
        } else {
            continue;
        };
        engine.sql(&planned)?;
    }
    Ok(())
}

/// The columns the CSV and JSON targets read: one of each kind of type.
fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("i", DataType::Int64, true),
        Field::new("d", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("b", DataType::Boolean, true),
        Field::new("dec", DataType::Decimal128(10, 2), true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("day", DataType::Date32, true),
    ]))
}

/// Reads `bytes` as a CSV file of [`schema`]'s columns.
pub fn csv(bytes: &[u8]) -> Result<()> {
    let schema = schema();
    let options = CsvOptions {
        delimiter: b',',
        quote: b'"',
        allow_comments: bytes.first() == Some(&b'#'),
        ignore_parse_errors: !bytes.len().is_multiple_of(2),
        null_literal: None,
    };
    let columns = schema.fields().len();
    let mut reader = CsvBatchReader::new(
        bytes,
        "fuzz.csv".into(),
        columns,
        (0..columns).collect(),
        schema,
        options,
    );
    while reader.next_batch(7)?.is_some() {}
    Ok(())
}

/// Reads `bytes` as a JSON-lines file of [`schema`]'s columns.
pub fn json(bytes: &[u8]) -> Result<()> {
    let options = JsonOptions {
        ignore_parse_errors: !bytes.len().is_multiple_of(2),
        fail_on_missing_field: bytes.len().is_multiple_of(3),
    };
    let mut reader = JsonBatchReader::new(bytes, "fuzz.json".into(), schema(), options);
    while reader.next_batch(7)?.is_some() {}
    Ok(())
}

/// A scratch directory for one input, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "weir-fuzz-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::create_dir_all(&dir);
        Scratch(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Restores from a checkpoint whose `_metadata` is `bytes`: read, check
/// against its (absent) state files.
pub fn checkpoint_metadata(bytes: &[u8]) -> Result<()> {
    let scratch = Scratch::new();
    std::fs::write(scratch.path().join("_metadata"), bytes)
        .map_err(|e| crate::Error::io(scratch.path(), e))?;
    let metadata = read_metadata(scratch.path())?;
    verify(scratch.path(), &metadata)
}

/// Reads `bytes` as a keyed state file and as a channel-state file.
pub fn state_file(bytes: &[u8]) -> Result<()> {
    let scratch = Scratch::new();
    let path = scratch.path().join("0.parquet");
    std::fs::write(&path, bytes).map_err(|e| crate::Error::io(&path, e))?;
    let keyed = read_state_file(&path, &(0..=127)).map(drop);
    let channel = read_batches(&path).map(drop);
    keyed.and(channel)
}
