//! The `weir` command: run SQL files.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};
use weir::{Engine, Error, JobStatus};

/// weir — a streaming SQL engine (Flink SQL on Apache Arrow).
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the statements of a SQL file, then wait for the jobs it started.
    ///
    /// Statements end with `;`. `SET 'key' = 'value'` changes settings (Flink's
    /// keys, e.g. 'parallelism.default'); `INSERT INTO` starts a job; a `SELECT`
    /// prints its rows as they arrive. The command exits when every bounded job
    /// has finished, with status 1 if any statement or job failed.
    Run {
        /// The SQL file.
        file: PathBuf,
        /// Settings applied before the file, as key=value (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        settings: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run { file, settings } => run(&file, &settings),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(file: &Path, settings: &[String]) -> anyhow::Result<()> {
    let sql = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let engine = Engine::new();
    for setting in settings {
        let (key, value) = setting
            .split_once('=')
            .with_context(|| format!("--set takes KEY=VALUE, got '{setting}'"))?;
        engine.set(key.trim(), value.trim())?;
    }
    let statements = weir::frontend::parser::parse_statements(&sql).map_err(|e| located(e, file, &sql))?;
    let started = Instant::now();
    let mut jobs = Vec::new();
    for statement in statements {
        let result = engine.sql(&statement.text).map_err(|e| {
            // Positions in errors are relative to the statement; make them the file's.
            located(shift_position(e, statement.position), file, &sql)
        })?;
        if let Some(job) = result.job() {
            jobs.push(job.clone());
            if result.schema().fields().is_empty() {
                eprintln!("[INFO] Job {} ({}) submitted.", job.id(), job.name());
                continue;
            }
        }
        print_result(result)?;
    }
    let mut failed = None;
    for job in jobs {
        match job.wait() {
            Ok(JobStatus::Finished) => eprintln!(
                "[INFO] Job {} ({}) finished in {:.3} s.",
                job.id(),
                job.name(),
                job.elapsed().as_secs_f64()
            ),
            Ok(status) => eprintln!("[INFO] Job {} ({}) ended: {status:?}.", job.id(), job.name()),
            Err(e) => {
                eprintln!("[ERROR] Job {} ({}) failed: {e}", job.id(), job.name());
                failed.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failed {
        return Err(anyhow::Error::new(e).context("a job failed"));
    }
    eprintln!("[INFO] Done in {:.3} s.", started.elapsed().as_secs_f64());
    Ok(())
}

fn print_result(result: weir::TableResult) -> anyhow::Result<()> {
    let mut rows = 0;
    for batch in result.stream() {
        let batch = batch?;
        rows += batch.num_rows();
        println!("{}", arrow::util::pretty::pretty_format_batches(&[batch])?);
    }
    if rows > 0 {
        eprintln!("[INFO] {rows} row(s).");
    }
    Ok(())
}

/// Moves a statement-relative SQL position to file coordinates.
fn shift_position(e: Error, start: weir::error::Position) -> Error {
    match e {
        Error::Sql {
            message,
            position: Some(p),
        } => {
            let column = if p.line == 1 {
                p.column + start.column - 1
            } else {
                p.column
            };
            Error::sql_at(
                message,
                Some(weir::error::Position {
                    line: p.line + start.line - 1,
                    column,
                }),
            )
        }
        other => other,
    }
}

/// An error with the file, line and a caret under the column, when known.
fn located(e: Error, file: &Path, sql: &str) -> anyhow::Error {
    if let Error::Sql {
        message,
        position: Some(p),
    } = &e
    {
        let line_text = sql.lines().nth(p.line as usize - 1).unwrap_or_default();
        let caret = format!("{}^", " ".repeat(p.column.saturating_sub(1) as usize));
        return anyhow::anyhow!(
            "{}:{}:{}: SQL error: {message}\n  {line_text}\n  {caret}",
            file.display(),
            p.line,
            p.column
        );
    }
    anyhow::Error::new(e)
}
