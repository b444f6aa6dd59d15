//! Runs the SQL case files (`sql/**/*.slt`) with the sqllogictest crate, each
//! file twice: at parallelism 1 and at parallelism 4 (labels `p1` and `p4` for
//! `onlyif`/`skipif`). `cargo test --test slt -- FILTER` runs matching files.
//! With `WEIR_SLT_COMPLETE=1` the matching files' expected results are rewritten
//! from a parallelism-1 run first (review the diff before committing it).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use arrow::datatypes::DataType;
use sqllogictest::{DBOutput, DefaultColumnType, Runner};
use weir::Engine;
use weir::connectors::format::text::{TextStyle, format_column};

/// Flink's SQL client option: how a query's result is shown.
const RESULT_MODE: &str = "sql-client.execution.result-mode";

/// One engine session per file run.
struct WeirDb {
    engine: Engine,
}

impl sqllogictest::DB for WeirDb {
    type Error = weir::Error;
    type ColumnType = DefaultColumnType;

    fn run(&mut self, sql: &str) -> Result<DBOutput<Self::ColumnType>, Self::Error> {
        let result = self.engine.sql(sql)?;
        let schema = result.schema();
        if schema.fields().is_empty() {
            result.wait()?;
            return Ok(DBOutput::StatementComplete(0));
        }
        let types = schema
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                t if t.is_integer() => DefaultColumnType::Integer,
                t if t.is_floating() || matches!(t, DataType::Decimal128(_, _)) => {
                    DefaultColumnType::FloatingPoint
                }
                DataType::Utf8 => DefaultColumnType::Text,
                _ => DefaultColumnType::Any,
            })
            .collect();
        // An updating query shows its final table (its changelog applied),
        // or with `SET 'sql-client.execution.result-mode' = 'changelog'` the
        // changelog itself, each row's kind first.
        let mode = self.engine.config().get(RESULT_MODE).map(str::to_ascii_lowercase);
        let batches = match (result.is_updating(), mode.as_deref()) {
            (true, Some("changelog" | "tableau")) => result
                .collect()?
                .iter()
                .map(weir::common::changelog::with_kind_column)
                .collect::<weir::Result<Vec<_>>>()?,
            (true, _) => vec![result.materialize()?],
            (false, _) => result.collect()?,
        };
        let mut rows: Vec<Vec<String>> = Vec::new();
        for batch in batches {
            let columns = batch
                .columns()
                .iter()
                .map(|c| format_column(c, TextStyle::Print))
                .collect::<weir::Result<Vec<_>>>()?;
            for row in 0..batch.num_rows() {
                rows.push(
                    columns
                        .iter()
                        .map(|values| match &values[row] {
                            None => "NULL".to_string(),
                            Some(v) if v.is_empty() => "(empty)".to_string(),
                            Some(v) => v.clone(),
                        })
                        .collect(),
                );
            }
        }
        // A single text value of several lines (EXPLAIN) is shown line by line.
        if let [row] = rows.as_slice()
            && let [value] = row.as_slice()
            && value.contains('\n')
        {
            rows = value
                .lines()
                .map(|line| {
                    vec![if line.is_empty() {
                        "(empty)".to_string()
                    } else {
                        line.to_string()
                    }]
                })
                .collect();
        }
        Ok(DBOutput::Rows { types, rows })
    }

    fn engine_name(&self) -> &str {
        "weir"
    }
}

/// A fresh session at `parallelism`, with UTC as the local time zone.
fn new_db(parallelism: usize) -> weir::Result<WeirDb> {
    let engine = Engine::new();
    // Nexmark q14's UDF, as `weir bench nexmark` registers it.
    engine.set("parallelism.default", &parallelism.to_string())?;
    engine.set("table.local-time-zone", "UTC")?;
    Ok(WeirDb { engine })
}

/// Drives a future whose work is all synchronous (our DB never waits on I/O).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::yield_now();
    }
}

fn slt_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            slt_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "slt") {
            out.push(path);
        }
    }
}

fn main() -> ExitCode {
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    slt_files(&root.join("sql"), &mut files);
    files.sort();
    files.retain(|f| filters.is_empty() || filters.iter().any(|x| f.to_string_lossy().contains(x.as_str())));
    if std::env::var_os("WEIR_SLT_COMPLETE").is_some() {
        for file in &files {
            let mut runner = Runner::new(|| std::future::ready(new_db(1)));
            runner.add_label("p1");
            let update = runner.update_test_file(
                file,
                " ",
                sqllogictest::default_validator,
                sqllogictest::default_normalizer,
                sqllogictest::default_column_validator,
            );
            if let Err(e) = block_on(update) {
                println!("could not complete {}: {e}", file.display());
                return ExitCode::FAILURE;
            }
        }
    }
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let started = Instant::now();
    let mut count = 0;
    for file in &files {
        for parallelism in [1, 4] {
            count += 1;
            let label = format!("p{parallelism}");
            let mut runner = Runner::new(|| std::future::ready(new_db(parallelism)));
            runner.add_label(&label);
            runner.with_column_validator(|_, _| true);
            let name = file.strip_prefix(root).unwrap_or(file).display().to_string();
            let file_started = Instant::now();
            match runner.run_file(file) {
                Ok(()) => println!(
                    "ok   {name} [{label}] ({:.2} s)",
                    file_started.elapsed().as_secs_f64()
                ),
                Err(e) => {
                    println!("FAIL {name} [{label}]\n{e}\n");
                    failures.lock().unwrap().push(format!("{name} [{label}]"));
                }
            }
        }
    }
    let failures = failures.lock().unwrap();
    println!(
        "\n{} of {count} file runs passed in {:.1} s",
        count - failures.len(),
        started.elapsed().as_secs_f64()
    );
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!("failed: {}", failures.join(", "));
        ExitCode::FAILURE
    }
}
