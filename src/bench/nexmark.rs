//! `weir bench nexmark`: the standard Nexmark queries on the built-in generator,
//! measured one after another in this process.
//!
//! Every run first measures the generator alone (all events into a blackhole),
//! then each query, and reports for each: events, wall seconds, events/s in
//! total and per CPU core used, output rows, peak resident memory, and the
//! share of the generator's own speed it reached.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::bench::{ScratchDir, cpu_seconds, peak_rss_bytes, reset_peak_rss};
use crate::{Engine, Error, JobStatus, Result};

/// The standard queries with their SQL (from `sql/nexmark/`). Whether weir
/// runs one is found by planning it, never stated here.
pub const QUERIES: [(&str, &str); 23] = [
    ("q0", include_str!("../../sql/nexmark/q0.sql")),
    ("q1", include_str!("../../sql/nexmark/q1.sql")),
    ("q2", include_str!("../../sql/nexmark/q2.sql")),
    ("q3", include_str!("../../sql/nexmark/q3.sql")),
    ("q4", include_str!("../../sql/nexmark/q4.sql")),
    ("q5", include_str!("../../sql/nexmark/q5.sql")),
    ("q6", include_str!("../../sql/nexmark/q6.sql")),
    ("q7", include_str!("../../sql/nexmark/q7.sql")),
    ("q8", include_str!("../../sql/nexmark/q8.sql")),
    ("q9", include_str!("../../sql/nexmark/q9.sql")),
    ("q10", include_str!("../../sql/nexmark/q10.sql")),
    ("q11", include_str!("../../sql/nexmark/q11.sql")),
    ("q12", include_str!("../../sql/nexmark/q12.sql")),
    ("q13", include_str!("../../sql/nexmark/q13.sql")),
    ("q14", include_str!("../../sql/nexmark/q14.sql")),
    ("q15", include_str!("../../sql/nexmark/q15.sql")),
    ("q16", include_str!("../../sql/nexmark/q16.sql")),
    ("q17", include_str!("../../sql/nexmark/q17.sql")),
    ("q18", include_str!("../../sql/nexmark/q18.sql")),
    ("q19", include_str!("../../sql/nexmark/q19.sql")),
    ("q20", include_str!("../../sql/nexmark/q20.sql")),
    ("q21", include_str!("../../sql/nexmark/q21.sql")),
    ("q22", include_str!("../../sql/nexmark/q22.sql")),
];

const DDL_GEN: &str = include_str!("../../sql/nexmark/ddl_gen.sql");
const DDL_VIEWS: &str = include_str!("../../sql/nexmark/ddl_views.sql");
const GENERATOR_QUERY: &str = "CREATE TABLE nexmark_generator (event_type INT, person_id BIGINT, auction_id BIGINT, bidder BIGINT)
WITH ('connector' = 'blackhole');
INSERT INTO nexmark_generator SELECT event_type, person.id AS person_id, auction.id AS auction_id, bid.bidder FROM datagen";

/// What to run.
#[derive(Debug, Clone)]
pub struct NexmarkOptions {
    /// Query names (`q0` ...).
    pub queries: Vec<String>,
    /// Events per query.
    pub events: u64,
    /// `parallelism.default`.
    pub parallelism: usize,
    /// Event-time rate (`first-event.rate`, events per second of event time).
    pub event_rate: u64,
    /// Emit at most this many events per second (wall clock); unlimited when `None`.
    pub rate_limit: Option<u64>,
    /// Nexmark's `${NEXMARK_DIR}`, under which q10 writes its files; when `None`,
    /// a fresh temporary directory, removed after each query.
    pub output_dir: Option<PathBuf>,
    /// Checkpoint every this long (into the output directory); none when `None`.
    pub checkpoint_interval: Option<Duration>,
}

impl Default for NexmarkOptions {
    fn default() -> Self {
        NexmarkOptions {
            queries: vec!["q0".into()],
            events: 10_000_000,
            parallelism: 1,
            event_rate: 10_000_000,
            rate_limit: None,
            output_dir: None,
            checkpoint_interval: None,
        }
    }
}

/// The figures of one query (or of the generator alone).
#[derive(Debug, Clone, Serialize)]
pub struct QueryResult {
    /// `generator`, or the query's name.
    pub query: String,
    /// `finished`, or why it did not run.
    pub status: String,
    /// Events generated.
    pub events: u64,
    /// Parallelism.
    pub parallelism: usize,
    /// Wall-clock seconds from submission to the end of the job.
    pub wall_seconds: f64,
    /// Events per wall-clock second.
    pub events_per_second: f64,
    /// CPU seconds the process used during the job (user + system).
    pub cpu_seconds: f64,
    /// Events per CPU second: the throughput of one fully used core.
    pub events_per_second_per_core: f64,
    /// Rows written by the sink.
    pub output_rows: u64,
    /// Peak resident memory of the process during the job.
    pub peak_rss_bytes: u64,
    /// This query's events/s as a share of the generator's alone.
    pub fraction_of_generator: Option<f64>,
    /// Checkpoints completed (with `checkpoint_interval`).
    pub checkpoints: u64,
    /// Their median duration, trigger to `_metadata`, in ms.
    pub checkpoint_median_ms: Option<f64>,
    /// The largest checkpoint's state files, in bytes.
    pub checkpoint_max_state_bytes: Option<u64>,
}

/// Progress of a running query: events generated so far, of the total.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Events generated.
    pub done: u64,
    /// Events to generate.
    pub total: u64,
}

/// The SQL of a query with the placeholders of Nexmark's scripts filled in;
/// files go under `nexmark_dir`, in a directory named by `submit_time`, as
/// Nexmark's scripts do.
pub fn query_script(
    query_sql: &str,
    options: &NexmarkOptions,
    nexmark_dir: &Path,
    submit_time: u64,
) -> String {
    let mut ddl = DDL_GEN
        .replace("${TPS}", &options.event_rate.to_string())
        .replace("${EVENTS_NUM}", &options.events.to_string())
        .replace("${PERSON_PROPORTION}", "1")
        .replace("${AUCTION_PROPORTION}", "3")
        .replace("${BID_PROPORTION}", "46");
    if let Some(rate) = options.rate_limit {
        ddl = ddl
            .replace(
                &format!("'first-event.rate' = '{}'", options.event_rate),
                &format!("'first-event.rate' = '{rate}'"),
            )
            .replace(
                "'connector' = 'nexmark',",
                "'connector' = 'nexmark',\n    'rate.limited' = 'true',",
            );
    }
    let views = DDL_VIEWS.replace("${NEXMARK_TABLE}", "datagen");
    let query_sql = query_sql
        .replace("${NEXMARK_DIR}", &nexmark_dir.display().to_string())
        .replace("${FLINK_HOME}", &nexmark_dir.display().to_string())
        .replace("${SUBMIT_TIME}", &submit_time.to_string());
    format!("{ddl};\n{views};\n{query_sql};\n")
}

/// Rows in Nexmark's side input file (its `side_input_gen.sh --num`).
pub const SIDE_INPUT_ROWS: u64 = 10_000;

/// Writes `<flink_home>/data/side_input.txt` as Nexmark's `side_input_gen.sh`
/// does before q13 (rows `i,i` for `i` in `0..10000`); returns its path.
pub fn write_side_input(flink_home: &Path) -> Result<PathBuf> {
    let dir = flink_home.join("data");
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let path = dir.join("side_input.txt");
    let text: String = (0..SIDE_INPUT_ROWS).map(|i| format!("{i},{i}\n")).collect();
    std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
    Ok(path)
}

/// Runs one query (by its SQL) and measures it.
pub fn run_script(
    name: &str,
    query_sql: &str,
    options: &NexmarkOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<QueryResult> {
    let engine = Engine::new();
    engine.set("parallelism.default", &options.parallelism.to_string())?;
    let scratch = ScratchDir::new(options.output_dir.as_deref())?;
    let submit_time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    write_side_input(&scratch.path)?;
    let script = query_script(query_sql, options, &scratch.path, submit_time);
    if let Some(interval) = options.checkpoint_interval {
        engine.set(
            "execution.checkpointing.interval",
            &format!("{} ms", interval.as_millis().max(1)),
        )?;
        engine.set(
            "execution.checkpointing.dir",
            &scratch.path.join("checkpoints").display().to_string(),
        )?;
        engine.set("pipeline.name", name)?;
    }
    reset_peak_rss();
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    let result = engine.sql(&script)?;
    let job = result
        .job()
        .cloned()
        .ok_or_else(|| Error::Internal(format!("{name} started no job")))?;
    let total = options.events;
    let status = loop {
        let status = job.wait_timeout(Duration::from_millis(100))?;
        let done: u64 = job
            .tasks()
            .iter()
            .filter(|t| t.is_source)
            .map(|t| t.metrics.records_in.load(Ordering::Relaxed))
            .sum();
        progress(Progress { done, total });
        if status != JobStatus::Running {
            break status;
        }
    };
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_before;
    let output_rows = job
        .tasks()
        .iter()
        .map(|t| t.metrics.records_written.load(Ordering::Relaxed))
        .sum();
    let checkpoints = job.completed_checkpoints();
    let mut durations: Vec<f64> = checkpoints
        .iter()
        .map(|c| c.duration.as_secs_f64() * 1e3)
        .collect();
    durations.sort_by(f64::total_cmp);
    Ok(QueryResult {
        checkpoints: checkpoints.len() as u64,
        checkpoint_median_ms: durations.get(durations.len() / 2).copied(),
        checkpoint_max_state_bytes: checkpoints.iter().map(|c| c.state_bytes).max(),
        query: name.to_string(),
        status: format!("{status:?}").to_lowercase(),
        events: total,
        parallelism: options.parallelism,
        wall_seconds: wall,
        events_per_second: total as f64 / wall,
        cpu_seconds: cpu,
        events_per_second_per_core: if cpu > 0.0 { total as f64 / cpu } else { 0.0 },
        output_rows,
        peak_rss_bytes: peak_rss_bytes(),
        fraction_of_generator: None,
    })
}

/// The SQL of a standard query by name.
pub fn query(name: &str) -> Option<&'static str> {
    QUERIES.iter().find(|(n, _)| *n == name).map(|(_, sql)| *sql)
}

/// Runs the generator alone, then every query of `options`.
pub fn run(options: &NexmarkOptions, progress: &mut dyn FnMut(&str, Progress)) -> Result<Vec<QueryResult>> {
    for name in &options.queries {
        if query(name).is_none() {
            return Err(Error::Plan(format!(
                "unknown Nexmark query '{name}'; the queries are q0 to q22"
            )));
        }
    }
    let generator = run_script("generator", GENERATOR_QUERY, options, &mut |p| {
        progress("generator", p)
    })?;
    let baseline = generator.events_per_second;
    let mut results = vec![generator];
    for name in &options.queries {
        let sql = query(name).expect("checked above");
        match run_script(name, sql, options, &mut |p| progress(name, p)) {
            Ok(mut result) => {
                result.fraction_of_generator = Some(result.events_per_second / baseline);
                results.push(result);
            }
            // A query that does not plan is reported with the planner's
            // reason, and the others still run.
            Err(e @ (Error::Plan(_) | Error::Sql { .. })) => results.push(QueryResult {
                query: name.clone(),
                status: format!("does not plan: {e}"),
                events: 0,
                parallelism: options.parallelism,
                wall_seconds: 0.0,
                events_per_second: 0.0,
                cpu_seconds: 0.0,
                events_per_second_per_core: 0.0,
                output_rows: 0,
                peak_rss_bytes: 0,
                fraction_of_generator: None,
                checkpoints: 0,
                checkpoint_median_ms: None,
                checkpoint_max_state_bytes: None,
            }),
            Err(e) => return Err(e),
        }
    }
    Ok(results)
}
