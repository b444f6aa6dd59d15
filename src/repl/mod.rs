//! The SQL shell: `weir` at a terminal, `weir -e "..."`, and `weir < script.sql`.
//!
//! Statements end with `;` and may span lines or share one. Bounded results
//! print as an aligned table with a row count and the time taken; unbounded
//! ones stream as windows fire (Flink's `tableau` result mode) until the query
//! ends or Ctrl-C cancels it; `INSERT INTO` submits a background job. An error
//! prints one message (with a caret under the position for SQL errors) and the
//! shell goes on. Client commands: `HELP`, `SOURCE 'file.sql'`, `QUIT`.

pub mod complete;
pub mod remote;
pub mod splitter;

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use rustyline::error::ReadlineError;
use rustyline::history::FileHistory;
use rustyline::{Config, Editor};

use crate::repl::complete::ShellHelper;
use crate::repl::splitter::StatementBuffer;
use crate::{Engine, Error, Result, TableResult};

/// `sql-client.execution.max-table-result.rows`: rows a bounded result keeps.
pub const MAX_TABLE_ROWS: &str = "sql-client.execution.max-table-result.rows";
/// `sql-client.execution.result-mode`: `table` shows an updating query's
/// result as the table it describes, once it ends (or is cancelled);
/// otherwise its changes stream (`tableau`, `changelog`).
pub const RESULT_MODE: &str = "sql-client.execution.result-mode";

const HELP: &str = "Statements end with ';' and may span lines.

  CREATE [TEMPORARY] TABLE / VIEW / FUNCTION ...   DROP TABLE / VIEW ...
  SELECT ...            bounded: a table; unbounded: rows as windows fire (Ctrl-C stops it)
  INSERT INTO t SELECT  submit a background job
  EXPLAIN <query>       the operator graph
  SHOW TABLES | VIEWS | FUNCTIONS | JOBS
  DESCRIBE JOB '<id>'   its tasks (records, backpressure, watermark) and checkpoints
  DESCRIBE <table>      columns, types, watermark, connector options
  STOP JOB '<id>'       cancel a job
  STOP JOB '<id>' WITH SAVEPOINT   stop it with a savepoint (prints its path)
  SET / SET 'k' = 'v' / RESET ['k']   settings (Flink's keys)
  SOURCE 'file.sql'     run the statements of a file
  HELP                  this text
  QUIT / EXIT / Ctrl-D  leave";

/// How a statement ended, for scripts.
enum Outcome {
    Ok,
    Quit,
}

/// A shell over an engine, writing results to `out` and errors to stderr.
pub struct Shell {
    engine: Engine,
    /// Set by Ctrl-C while a query runs: cancel it.
    interrupted: Arc<AtomicBool>,
    tables: Arc<Mutex<Vec<String>>>,
    /// With `--jobmanager`: where jobs are submitted.
    remote: Option<remote::Remote>,
}

impl Shell {
    /// A shell over `engine`.
    pub fn new(engine: Engine) -> Self {
        Shell {
            engine,
            interrupted: Arc::new(AtomicBool::new(false)),
            tables: Arc::new(Mutex::new(Vec::new())),
            remote: None,
        }
    }

    /// A shell whose jobs run on the JobManager at `address` (`host:port`).
    pub fn with_jobmanager(engine: Engine, address: &str) -> Result<Self> {
        let mut shell = Shell::new(engine);
        shell.remote = Some(remote::Remote::connect(address)?);
        Ok(shell)
    }

    /// The interactive loop: line editing, history in `history`, completion.
    pub fn run_interactive(&mut self, history: Option<PathBuf>) -> Result<()> {
        let config = Config::builder().auto_add_history(false).build();
        let mut editor: Editor<ShellHelper, FileHistory> =
            Editor::with_config(config).map_err(|e| Error::Internal(format!("line editor: {e}")))?;
        // Ctrl-C while a query runs cancels it; at the prompt the terminal is
        // in raw mode and rustyline reads it as a key. Installed after the
        // editor, which replaces the SIGINT handler when it is created.
        signal_hook::flag::register(signal_hook::consts::SIGINT, self.interrupted.clone())
            .map_err(|e| Error::Internal(format!("Ctrl-C handler: {e}")))?;
        editor.set_helper(Some(ShellHelper {
            tables: self.tables.clone(),
        }));
        if let Some(path) = &history {
            let _ = editor.load_history(path);
        }
        println!(
            "weir {} — streaming SQL. Type HELP; for help, QUIT; or Ctrl-D to leave.",
            env!("CARGO_PKG_VERSION")
        );
        let mut buffer = StatementBuffer::default();
        loop {
            let prompt = if buffer.is_empty() { "weir> " } else { "   -> " };
            match editor.readline(prompt) {
                Ok(line) => {
                    if !line.trim().is_empty() {
                        let _ = editor.add_history_entry(line.as_str());
                    }
                    // A bracketed paste comes as one "line" of several.
                    let statements: Vec<String> =
                        line.split('\n').flat_map(|l| buffer.push_line(l)).collect();
                    for statement in statements {
                        if let Outcome::Quit = self.run_statement(&statement) {
                            return save(&mut editor, history.as_ref());
                        }
                    }
                }
                Err(ReadlineError::Interrupted) => buffer.clear(),
                Err(ReadlineError::Eof) => return save(&mut editor, history.as_ref()),
                Err(e) => return Err(Error::Internal(format!("line editor: {e}"))),
            }
        }
    }

    /// Runs a script (stdin, `-e`, `SOURCE`): stops at the first error.
    pub fn run_script(&mut self, text: &str) -> Result<()> {
        let mut buffer = StatementBuffer::default();
        let mut statements = Vec::new();
        for line in text.lines() {
            statements.extend(buffer.push_line(line));
        }
        statements.extend(buffer.finish());
        for statement in statements {
            match self.execute(&statement) {
                Ok(Outcome::Ok) => {}
                Ok(Outcome::Quit) => return Ok(()),
                Err(e) => {
                    report(&statement, &e);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Runs a statement typed at the prompt: errors are printed, never fatal;
    /// not even a bug in the engine (a panic) ends the shell.
    fn run_statement(&mut self, statement: &str) -> Outcome {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.execute(statement)));
        match run {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => {
                report(statement, &e);
                Outcome::Ok
            }
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("unknown cause");
                report(
                    statement,
                    &Error::Internal(format!("the statement failed: {message}")),
                );
                Outcome::Ok
            }
        }
    }

    fn execute(&mut self, statement: &str) -> Result<Outcome> {
        let words: Vec<&str> = statement.split_whitespace().collect();
        match words.first().map(|w| w.to_ascii_uppercase()).as_deref() {
            Some("HELP") if words.len() == 1 => {
                println!("{HELP}");
                return Ok(Outcome::Ok);
            }
            Some("QUIT" | "EXIT") if words.len() == 1 => return Ok(Outcome::Quit),
            Some("SOURCE") => {
                let path = statement.trim()[6..].trim().trim_matches('\'').to_string();
                let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
                self.run_script(&text)?;
                return Ok(Outcome::Ok);
            }
            _ => {}
        }
        if let Some(remote) = &mut self.remote {
            match remote.execute(&self.engine, statement)? {
                remote::Handled::No => {}
                remote::Handled::Done => return Ok(Outcome::Ok),
                remote::Handled::Query {
                    mut query,
                    schema,
                    updating,
                } => {
                    let started = Instant::now();
                    self.show_rows(&schema, updating, query.as_mut(), started)?;
                    return Ok(Outcome::Ok);
                }
            }
        }
        let started = Instant::now();
        let result = self.engine.sql(statement)?;
        *self.tables.lock().unwrap_or_else(|e| e.into_inner()) = self
            .engine
            .table_names()
            .into_iter()
            .chain(self.engine.view_names())
            .collect();
        self.print(result, started)?;
        let describe = matches!(
            words.first().map(|w| w.to_ascii_uppercase()).as_deref(),
            Some("DESCRIBE" | "DESC")
        );
        if describe && words.len() == 2 {
            self.print_options(words[1].trim_end_matches(';').trim_matches('`'));
        }
        if describe && words.len() == 3 && words[1].eq_ignore_ascii_case("JOB") {
            let id = words[2].trim_end_matches(';').trim_matches('\'');
            if let Some(job) = self.engine.jobs().into_iter().find(|j| j.id().to_string() == id) {
                print_checkpoints(&job);
            }
        }
        Ok(Outcome::Ok)
    }

    /// After `DESCRIBE <table>`: the connector options, as `SHOW CREATE TABLE`
    /// would spell them.
    fn print_options(&self, table: &str) {
        let Some(options) = self.engine.table_options(table) else {
            return;
        };
        println!("WITH (");
        let last = options.len().saturating_sub(1);
        for (i, (key, value)) in options.iter().enumerate() {
            let comma = if i < last { "," } else { "" };
            println!("  '{key}' = '{}'{comma}", value.replace('\'', "''"));
        }
        println!(")");
    }

    fn print(&mut self, result: TableResult, started: Instant) -> Result<()> {
        let schema = result.schema();
        if schema.fields().is_empty() {
            match result.job() {
                Some(job) => {
                    for note in job.notes() {
                        println!("[INFO] {note}");
                    }
                    println!("[INFO] Job '{}' ({}) submitted.", job.id(), job.name());
                }
                None => println!("[INFO] Execute statement succeeded."),
            }
            return Ok(());
        }
        if result.job().is_none() {
            let batches = result.collect()?;
            print_table(&batches, started, None);
            return Ok(());
        }
        let updating = result.is_updating();
        let mut stream = LocalRows {
            job: result.job().cloned(),
            stream: result.stream(),
        };
        self.show_rows(&schema, updating, &mut stream, started)
    }

    /// A query's rows as they arrive (Flink's tableau mode), at most the
    /// configured number of rows shown; in table mode, the final table of
    /// an updating query.
    fn show_rows(
        &mut self,
        schema: &arrow::datatypes::SchemaRef,
        updating: bool,
        stream: &mut dyn Rows,
        started: Instant,
    ) -> Result<()> {
        let limit = self
            .engine
            .config()
            .get(MAX_TABLE_ROWS)
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(usize::MAX);
        self.interrupted.store(false, Ordering::SeqCst);
        let table_mode = updating
            && self
                .engine
                .config()
                .get(RESULT_MODE)
                .is_some_and(|m| m.eq_ignore_ascii_case("table"));
        let mut table = match table_mode {
            true => Some(weir_common::changelog::Materialized::new(schema)?),
            false => None,
        };
        let mut printer = Tableau::new(schema);
        let mut note = None;
        loop {
            if self.interrupted.swap(false, Ordering::SeqCst) {
                stream.cancel()?;
                note = Some("cancelled");
                break;
            }
            match stream.next_timeout(std::time::Duration::from_millis(50)) {
                Some(Ok(Some(batch))) => match &mut table {
                    Some(table) => table.apply(&batch)?,
                    None => printer.batch(&batch, limit),
                },
                Some(Ok(None)) => {}
                Some(Err(e)) => {
                    printer.finish(started, None);
                    return Err(e);
                }
                None => break,
            }
        }
        match table {
            Some(table) => print_table(&[table.table()?], started, note),
            None => printer.finish(started, note),
        }
        Ok(())
    }
}

/// A query's rows as the shell reads them, from a job of its own process
/// or from a cluster's.
trait Rows {
    /// The next batch, waiting at most `timeout`: `Some(Ok(None))` when
    /// none came in time, `None` when the query has ended.
    fn next_timeout(
        &mut self,
        timeout: std::time::Duration,
    ) -> Option<Result<Option<arrow::record_batch::RecordBatch>>>;
    /// Stops the query (Ctrl-C).
    fn cancel(&mut self) -> Result<()>;
}

/// The rows of a query this process runs.
struct LocalRows {
    job: Option<weir_job::supervisor::JobHandle>,
    stream: crate::ResultStream,
}

impl Rows for LocalRows {
    fn next_timeout(
        &mut self,
        timeout: std::time::Duration,
    ) -> Option<Result<Option<arrow::record_batch::RecordBatch>>> {
        self.stream.next_timeout(timeout)
    }

    fn cancel(&mut self) -> Result<()> {
        if let Some(job) = &self.job {
            job.cancel();
        }
        Ok(())
    }
}

impl Rows for crate::cluster::results::RemoteQuery {
    fn next_timeout(
        &mut self,
        timeout: std::time::Duration,
    ) -> Option<Result<Option<arrow::record_batch::RecordBatch>>> {
        crate::cluster::results::RemoteQuery::next_timeout(self, timeout)
    }

    fn cancel(&mut self) -> Result<()> {
        crate::cluster::results::RemoteQuery::cancel(self)
    }
}

/// Prints rows as they arrive under a header, in columns sized by the header
/// and the first rows (later, longer values widen their row only). The first
/// column, `op`, is each row's kind as in Flink's streaming tableau: `+I`,
/// and `-U`, `+U`, `-D` in the changelog of an updating query.
struct Tableau {
    names: Vec<String>,
    /// The widest text each column's type can produce, where bounded.
    type_widths: Vec<usize>,
    widths: Option<Vec<usize>>,
    rows: usize,
    shown: usize,
}

impl Tableau {
    fn new(schema: &arrow::datatypes::SchemaRef) -> Self {
        Tableau {
            names: std::iter::once("op".to_string())
                .chain(schema.fields().iter().map(|f| f.name().clone()))
                .collect(),
            type_widths: std::iter::once(2)
                .chain(schema.fields().iter().map(|f| type_width(f.data_type())))
                .collect(),
            widths: None,
            rows: 0,
            shown: 0,
        }
    }

    fn line(widths: &[usize]) -> String {
        let dashes: Vec<String> = widths.iter().map(|w| "-".repeat(w + 2)).collect();
        format!("+{}+", dashes.join("+"))
    }

    fn row(values: &[String], widths: &[usize]) -> String {
        let cells: Vec<String> = values
            .iter()
            .zip(widths)
            .map(|(v, w)| format!(" {v:>w$} "))
            .collect();
        format!("|{}|", cells.join("|"))
    }

    fn batch(&mut self, batch: &RecordBatch, limit: usize) {
        let kinds = weir_common::changelog::row_kinds(batch).unwrap_or_default();
        let values: Vec<Vec<String>> = display_rows(&weir_common::changelog::data(batch))
            .into_iter()
            .enumerate()
            .map(|(i, row)| {
                let kind = kinds.get(i).map_or("+I", |k| k.short());
                std::iter::once(kind.to_string()).chain(row).collect()
            })
            .collect();
        self.rows += values.len();
        if self.widths.is_none() {
            let widths: Vec<usize> = self
                .names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    values
                        .iter()
                        .map(|v| v[i].chars().count())
                        .chain([name.chars().count(), self.type_widths[i]])
                        .max()
                        .unwrap_or(1)
                })
                .collect();
            println!("{}", Self::line(&widths));
            println!("{}", Self::row(&self.names, &widths));
            println!("{}", Self::line(&widths));
            self.widths = Some(widths);
        }
        let widths = self.widths.as_ref().expect("set above");
        for value in values {
            if self.shown >= limit {
                break;
            }
            println!("{}", Self::row(&value, widths));
            self.shown += 1;
        }
        let _ = std::io::stdout().flush();
    }

    fn finish(&self, started: Instant, note: Option<&str>) {
        match &self.widths {
            None => println!(
                "Empty set ({:.2} s){}",
                started.elapsed().as_secs_f64(),
                suffix(note)
            ),
            Some(widths) => {
                println!("{}", Self::line(widths));
                let hidden = self.rows - self.shown;
                println!(
                    "{} row{} in set ({:.2} s){}{}",
                    self.rows,
                    if self.rows == 1 { "" } else { "s" },
                    started.elapsed().as_secs_f64(),
                    if hidden > 0 {
                        format!(", {hidden} not shown ('{MAX_TABLE_ROWS}')")
                    } else {
                        String::new()
                    },
                    suffix(note)
                );
            }
        }
        let _ = std::io::stdout().flush();
    }
}

/// The widest display text of a fixed-width type (so that a streamed column
/// stays aligned as values grow, as Flink's tableau sizes columns by type);
/// 1 for types without a useful bound, which take the first rows' width.
fn type_width(data_type: &arrow::datatypes::DataType) -> usize {
    use arrow::datatypes::DataType::*;
    match data_type {
        Int8 => 4,
        Int16 => 6,
        Int32 => 11,
        Int64 => 20,
        UInt8 => 3,
        UInt16 => 5,
        UInt32 => 10,
        UInt64 => 20,
        Boolean => 5,
        Date32 | Date64 => 10,
        Timestamp(_, _) => 23,
        Decimal128(precision, scale) | Decimal256(precision, scale) => {
            *precision as usize + 2 + usize::from(*scale > 0)
        }
        _ => 1,
    }
}

/// After `DESCRIBE JOB`: the job's completed checkpoints and savepoints.
fn print_checkpoints(job: &crate::JobHandle) {
    let metrics = job.metrics();
    if metrics.checkpoints.is_empty() {
        println!("No checkpoint completed ({} failed).", metrics.failed_checkpoints);
        return;
    }
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::ASCII_FULL_CONDENSED);
    table.set_header([
        "checkpoint",
        "kind",
        "triggered",
        "duration",
        "size",
        "channel state",
        "alignment",
        "slowest acknowledgement",
    ]);
    for c in &metrics.checkpoints {
        let slowest = c
            .ack_delays
            .iter()
            .max_by_key(|(_, delay)| *delay)
            .map(|(task, delay)| {
                let name = metrics.tasks.get(*task).map_or("?", |t| t.name.as_str());
                format!("{} ms ({name})", delay.as_millis())
            })
            .unwrap_or_default();
        table.add_row([
            c.id.to_string(),
            format!("{:?}", c.kind).to_uppercase(),
            chrono::DateTime::from_timestamp_millis(c.trigger_time)
                .map_or(String::new(), |t| t.format("%H:%M:%S%.3f").to_string()),
            format!("{} ms", c.duration.as_millis()),
            crate::engine::human_bytes(c.state_bytes),
            crate::engine::human_bytes(c.channel_state_bytes),
            format!("{} ms", c.max_alignment.as_millis()),
            slowest,
        ]);
    }
    println!("{table}");
    println!(
        "{} completed, {} failed",
        metrics.checkpoints.len(),
        metrics.failed_checkpoints
    );
}

fn save(editor: &mut Editor<ShellHelper, FileHistory>, history: Option<&PathBuf>) -> Result<()> {
    if let Some(path) = history {
        let _ = editor.save_history(path);
    }
    Ok(())
}

/// One error message; a caret under the position of a SQL error.
fn report(statement: &str, e: &Error) {
    eprintln!("[ERROR] {e}");
    if let Error::Sql {
        position: Some(p), ..
    } = e
        && let Some(line) = statement.lines().nth(p.line.saturating_sub(1) as usize)
    {
        eprintln!("  {line}");
        eprintln!("  {}^", " ".repeat(p.column.saturating_sub(1) as usize));
    }
}

/// An aligned table of `batches` with a row count and the elapsed time.
fn print_table(batches: &[RecordBatch], started: Instant, note: Option<&str>) {
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let Some(first) = batches.first().filter(|_| rows > 0) else {
        println!(
            "Empty set ({:.2} s){}",
            started.elapsed().as_secs_f64(),
            suffix(note)
        );
        return;
    };
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::ASCII_FULL_CONDENSED);
    table.set_header(first.schema().fields().iter().map(|f| f.name().clone()));
    for batch in batches {
        for row in display_rows(batch) {
            table.add_row(row);
        }
    }
    println!("{table}");
    println!(
        "{rows} row{} in set ({:.2} s){}",
        if rows == 1 { "" } else { "s" },
        started.elapsed().as_secs_f64(),
        suffix(note)
    );
    let _ = std::io::stdout().flush();
}

/// Values as Flink's SQL client shows them: NULL as `<NULL>`, timestamps as
/// `2020-01-01 00:00:00.000` (`TIMESTAMP_LTZ` in the session's zone).
fn display_options() -> FormatOptions<'static> {
    FormatOptions::default()
        .with_null("<NULL>")
        .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.3f"))
        .with_timestamp_tz_format(Some("%Y-%m-%d %H:%M:%S%.3f"))
}

/// Every row of `batch` as display text, column by column.
fn display_rows(batch: &RecordBatch) -> Vec<Vec<String>> {
    let options = display_options();
    let formatters: Vec<ArrayFormatter> = batch
        .columns()
        .iter()
        .filter_map(|c| ArrayFormatter::try_new(c.as_ref(), &options).ok())
        .collect();
    (0..batch.num_rows())
        .map(|row| formatters.iter().map(|f| f.value(row).to_string()).collect())
        .collect()
}

fn suffix(note: Option<&str>) -> String {
    note.map(|n| format!(", {n}")).unwrap_or_default()
}

/// Reads all of standard input as a script.
pub fn read_stdin() -> Result<String> {
    let mut text = String::new();
    for line in std::io::stdin().lock().lines() {
        text.push_str(&line.map_err(|e| Error::io("<stdin>", e))?);
        text.push('\n');
    }
    Ok(text)
}
