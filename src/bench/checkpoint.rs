//! `weir bench checkpoint`: what checkpoints cost and how fast a job recovers.
//!
//! 1. Overhead: a tumbling-window aggregation (or, with `--group-by`, a
//!    non-windowed GROUP BY) over `keys` keys runs in this
//!    process without checkpoints and with one every `interval`, `runs` times
//!    each, interleaved; median throughput of each, their ratio, and per
//!    checkpoint its duration (median, p99), state size, and how long tasks
//!    were blocked by snapshots.
//! 2. Recovery: the same job as a `weir run` process, rate-limited, is killed
//!    with SIGKILL once a checkpoint holds every key; a second process restores
//!    it, and the time from its start to its job running is the recovery time.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::bench::ScratchDir;
use crate::{Engine, Error, JobStatus, Result};
use weir_state::checkpoint::storage::{checkpoints_under, read_metadata};

/// What to measure.
#[derive(Debug, Clone)]
pub struct CheckpointBenchOptions {
    /// Rows of the overhead runs.
    pub rows: u64,
    /// Distinct keys (the state size).
    pub keys: u64,
    /// `parallelism.default`.
    pub parallelism: usize,
    /// Checkpoint interval.
    pub interval: Duration,
    /// Runs of each kind, interleaved; medians are reported.
    pub runs: usize,
    /// Unaligned checkpoints instead of aligned ones.
    pub unaligned: bool,
    /// Incremental checkpoints (`execution.checkpointing.incremental`).
    pub incremental: bool,
    /// After every key has a row, rows go to this many keys only (all rows
    /// then fall in one window): the keys that change between checkpoints.
    pub hot_keys: Option<u64>,
    /// The spilling state backend with this budget in bytes (the heap when `None`).
    pub spill_budget: Option<u64>,
    /// The job measured.
    pub job: CheckpointJob,
}

/// The job a checkpoint benchmark runs over its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointJob {
    /// Counts and sums per key in 1-hour tumbling windows.
    Windows,
    /// A non-windowed GROUP BY (an updating result).
    GroupBy,
    /// A regular join of the rows with one row per key (every row of
    /// both sides kept).
    Join,
}

impl CheckpointJob {
    /// What the report calls it.
    pub fn describe(self) -> &'static str {
        match self {
            CheckpointJob::Windows => "1-hour tumbling windows",
            CheckpointJob::GroupBy => "GROUP BY without windows",
            CheckpointJob::Join => "a regular join with one row per key",
        }
    }
}

/// The figures.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointBenchResult {
    /// Rows per run.
    pub rows: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Parallelism.
    pub parallelism: usize,
    /// Checkpoint interval, ms.
    pub interval_ms: u64,
    /// Unaligned checkpoints.
    pub unaligned: bool,
    /// Runs of each kind.
    pub runs: usize,
    /// Median rows/s without checkpoints.
    pub plain_rows_per_second: f64,
    /// Median rows/s with checkpoints.
    pub checkpointed_rows_per_second: f64,
    /// 1 - checkpointed / plain (medians).
    pub overhead: f64,
    /// Checkpoints completed over the checkpointed runs.
    pub checkpoints: usize,
    /// Median checkpoint duration (trigger to `_metadata`), ms.
    pub duration_median_ms: f64,
    /// 99th percentile checkpoint duration, ms.
    pub duration_p99_ms: f64,
    /// The largest checkpoint's state files, bytes.
    pub max_state_bytes: u64,
    /// Incremental checkpoints: median bytes a checkpoint wrote (its new
    /// files); otherwise its whole state.
    pub written_median_bytes: u64,
    /// Median bytes of the state files a checkpoint refers to (its own and,
    /// when incremental, earlier ones).
    pub full_median_bytes: u64,
    /// Incremental checkpoints.
    pub incremental: bool,
    /// Keys changing between checkpoints, if the run is limited to them.
    pub hot_keys: Option<u64>,
    /// Median over checkpoints of the longest time a task was blocked by its snapshot, ms.
    pub blocked_median_ms: f64,
    /// State rows in the checkpoint the recovery run restored (0: not measured).
    pub recovery_state_rows: u64,
    /// From the start of the restoring process to its job running, ms
    /// (not measured with the spilling backend).
    pub recovery_ms: Option<f64>,
    /// The spilling backend's budget, bytes.
    pub spill_budget: Option<u64>,
    /// The largest peak resident set of a run without checkpoints, bytes
    /// (Linux; 0 where it cannot be read).
    pub plain_peak_rss_bytes: u64,
    /// The largest peak resident set of a run with checkpoints, bytes.
    pub checkpointed_peak_rss_bytes: u64,
}

/// The job: `keys` keys in 1-hour tumbling windows, one row per millisecond
/// of event time, or as many more as it takes for a window to hold every
/// key (above 3M keys).
fn job_sql(rows: u64, keys: u64, rows_per_second: u64) -> String {
    windowed_job_sql(rows, keys.div_ceil(3_000_000).max(1), keys, rows_per_second)
}

/// The job of `options`: with hot keys, every key gets a row first, then
/// the rows go to the first `hot` keys only, all within one window.
fn options_job_sql(options: &CheckpointBenchOptions) -> String {
    match options.job {
        CheckpointJob::GroupBy => return group_job_sql(options.rows, options.keys, options.hot_keys),
        CheckpointJob::Join => return join_job_sql(options.rows, options.keys),
        CheckpointJob::Windows => {}
    }
    match options.hot_keys {
        None => job_sql(options.rows, options.keys, 1_000_000_000),
        Some(hot) => {
            let rows_per_ms = options.rows.div_ceil(3_000_000).max(1);
            windowed_job_sql(options.rows, rows_per_ms, options.keys, 1_000_000_000).replace(
                &format!("id % {}", options.keys),
                &format!("CASE WHEN id < {} THEN id ELSE id % {hot} END", options.keys),
            )
        }
    }
}

/// The benchmarks' job: ids `0..rows` (`rows_per_ms` per millisecond of event
/// time) counted and summed per key (`id % keys`) in 1-hour tumbling
/// windows, into a blackhole.
pub(crate) fn windowed_job_sql(rows: u64, rows_per_ms: u64, keys: u64, rows_per_second: u64) -> String {
    let millis = match rows_per_ms {
        1 => "id".to_string(),
        n => format!("id / {n}"),
    };
    format!(
        "CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ({millis}, 3),
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
         WITH ('connector' = 'datagen', 'rows-per-second' = '{rows_per_second}',
               'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '{}');
         CREATE TABLE sink (k BIGINT, c BIGINT, s BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO sink SELECT id % {keys}, COUNT(*), SUM(id)
         FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '1' HOUR))
         GROUP BY id % {keys}, window_start, window_end",
        rows - 1
    )
}

/// The non-windowed job: ids `0..rows` counted and summed per key (`id %
/// keys`, or with hot keys, each key once and then the first `hot` keys),
/// its changes into a blackhole.
fn group_job_sql(rows: u64, keys: u64, hot: Option<u64>) -> String {
    let key = match hot {
        None => format!("id % {keys}"),
        Some(hot) => format!("CASE WHEN id < {keys} THEN id ELSE id % {hot} END"),
    };
    format!(
        "CREATE TABLE seq (id BIGINT)
         WITH ('connector' = 'datagen', 'rows-per-second' = '1000000000',
               'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '{}');
         CREATE TABLE sink (k BIGINT, c BIGINT, s BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO sink SELECT {key}, COUNT(*), SUM(id) FROM seq GROUP BY {key}",
        rows - 1
    )
}

/// The join job: ids `0..rows` joined on `id % keys` with one row of each
/// key (ids `0..keys` of a second table), into a blackhole; the join keeps
/// every row of both sides.
fn join_job_sql(rows: u64, keys: u64) -> String {
    format!(
        "SET 'table.optimizer.join.broadcast-threshold' = '-1';
         CREATE TABLE seq (id BIGINT)
         WITH ('connector' = 'datagen', 'rows-per-second' = '1000000000',
               'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '{}');
         CREATE TABLE dim (id BIGINT)
         WITH ('connector' = 'datagen', 'rows-per-second' = '1000000000',
               'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '{}');
         CREATE TABLE sink (k BIGINT, id BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO sink SELECT d.id, x.id FROM seq x JOIN dim d ON x.id % {keys} = d.id",
        rows - 1,
        keys - 1
    )
}

/// The `p` quantile of `sorted` (0 when empty).
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index]
}

/// Runs the job in this process; wall seconds and the job's checkpoint stats.
/// One run of the job in this process: (seconds, checkpoints, peak RSS bytes).
fn run_in_process(
    options: &CheckpointBenchOptions,
    checkpoint_dir: Option<&Path>,
    spill_dir: &Path,
) -> Result<(f64, Vec<weir_job::stats::CheckpointStats>, u64)> {
    let engine = Engine::new();
    engine.set("parallelism.default", &options.parallelism.to_string())?;
    engine.set("table.local-time-zone", "UTC")?;
    if let Some(budget) = options.spill_budget {
        engine.set("state.backend.type", "spilling")?;
        engine.set("taskmanager.memory.managed.size", &budget.to_string())?;
        engine.set(
            "state.backend.spilling.local-dir",
            &spill_dir.display().to_string(),
        )?;
    }
    if let Some(dir) = checkpoint_dir {
        engine.set(
            "execution.checkpointing.interval",
            &format!("{} ms", options.interval.as_millis()),
        )?;
        engine.set("execution.checkpointing.dir", &dir.display().to_string())?;
        engine.set(
            "execution.checkpointing.unaligned.enabled",
            &options.unaligned.to_string(),
        )?;
        engine.set(
            "execution.checkpointing.incremental",
            &options.incremental.to_string(),
        )?;
        engine.set("pipeline.name", "checkpoint-bench")?;
    }
    super::reset_peak_rss();
    let started = Instant::now();
    let result = engine.sql(&options_job_sql(options))?;
    let job = result
        .job()
        .cloned()
        .ok_or_else(|| Error::Internal("the benchmark started no job".into()))?;
    let status = job.wait()?;
    if status != JobStatus::Finished {
        return Err(Error::Execution(format!("the benchmark job ended {status:?}")));
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok((seconds, job.completed_checkpoints(), super::peak_rss_bytes()))
}

/// Runs `weir run` on the job, kills it with SIGKILL once a checkpoint holds
/// every key, restores it, and times the restoring process until its job runs.
fn recovery(weir: &Path, options: &CheckpointBenchOptions, scratch: &Path) -> Result<(u64, f64)> {
    let dir = scratch.join("recovery");
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let file = dir.join("job.sql");
    // Rows arrive at 2 keys' worth per second, so a checkpoint soon holds every key,
    // and the job is far from done when it is killed.
    let sql = format!(
        "SET 'execution.checkpointing.interval' = '{} ms';
         SET 'execution.checkpointing.dir' = '{}';
         SET 'pipeline.name' = 'recovery';
         SET 'parallelism.default' = '{}';
         SET 'table.local-time-zone' = 'UTC';
         {};",
        options.interval.as_millis(),
        dir.join("checkpoints").display(),
        options.parallelism,
        job_sql(options.keys * 1000, options.keys, options.keys * 2)
    );
    std::fs::write(&file, sql).map_err(|e| Error::io(&file, e))?;
    let job_dir = dir.join("checkpoints").join("recovery");
    let mut first = Command::new(weir)
        .arg("run")
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::io(weir, e))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let rows = loop {
        let newest = checkpoints_under(&job_dir, "recovery")?
            .into_iter()
            .filter(|c| c.2)
            .max_by_key(|c| c.1);
        let mut held = 0;
        if let Some((dir, _, _)) = newest {
            let metadata = read_metadata(&dir)?;
            held = metadata
                .tasks
                .iter()
                .flat_map(|t| &t.operators)
                .filter_map(|o| o.file.as_ref())
                .map(|f| f.rows)
                .sum();
        }
        if held >= options.keys {
            break held;
        }
        if Instant::now() > deadline {
            let _ = first.kill();
            return Err(Error::Execution(
                "no checkpoint held every key within 2 minutes".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    first.kill().map_err(|e| Error::io(weir, e))?; // SIGKILL
    let _ = first.wait();
    let started = Instant::now();
    let mut second = Command::new(weir)
        .arg("run")
        .arg("--restore")
        .arg(&job_dir)
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io(weir, e))?;
    let stderr = second.stderr.take().expect("piped");
    let mut running = None;
    for line in BufReader::new(stderr).lines() {
        let line = line.map_err(|e| Error::io(weir, e))?;
        if line.contains("submitted") {
            running = Some(started.elapsed());
            break;
        }
    }
    let _ = second.kill();
    let _ = second.wait();
    let running =
        running.ok_or_else(|| Error::Execution("the restoring process never started its job".into()))?;
    Ok((rows, running.as_secs_f64() * 1e3))
}

/// Runs the benchmark; `weir` is the binary to run for the recovery part.
pub fn run(options: &CheckpointBenchOptions, weir: &Path) -> Result<CheckpointBenchResult> {
    let scratch = ScratchDir::new(None)?;
    let (mut plain, mut checkpointed, mut stats) = (Vec::new(), Vec::new(), Vec::new());
    let (mut plain_peak, mut checkpointed_peak) = (0, 0);
    let spill_dir = scratch.path.join("spill");
    for run in 0..options.runs.max(1) {
        let (seconds, _, peak) = run_in_process(options, None, &spill_dir)?;
        plain.push(options.rows as f64 / seconds);
        plain_peak = plain_peak.max(peak);
        let dir = scratch.path.join(format!("overhead-{run}"));
        let (seconds, run_stats, peak) = run_in_process(options, Some(&dir), &spill_dir)?;
        checkpointed.push(options.rows as f64 / seconds);
        checkpointed_peak = checkpointed_peak.max(peak);
        stats.extend(run_stats);
        let _ = std::fs::remove_dir_all(&dir);
    }
    plain.sort_by(f64::total_cmp);
    checkpointed.sort_by(f64::total_cmp);
    let mut durations: Vec<f64> = stats.iter().map(|c| c.duration.as_secs_f64() * 1e3).collect();
    durations.sort_by(f64::total_cmp);
    let mut blocked: Vec<f64> = stats.iter().map(|c| c.max_blocked.as_secs_f64() * 1e3).collect();
    blocked.sort_by(f64::total_cmp);
    // A restore of spilled state reads it into memory first, and the
    // recovery job is the windowed one: not measured.
    let (recovery_state_rows, recovery_ms) = match (options.spill_budget, options.job) {
        (Some(_), _) | (_, CheckpointJob::GroupBy | CheckpointJob::Join) => (0, None),
        (None, CheckpointJob::Windows) => {
            let (rows, ms) = recovery(weir, options, &scratch.path)?;
            (rows, Some(ms))
        }
    };
    let median_bytes = |bytes: &dyn Fn(&weir_job::stats::CheckpointStats) -> u64| {
        let mut all: Vec<f64> = stats.iter().map(|c| bytes(c) as f64).collect();
        all.sort_by(f64::total_cmp);
        percentile(&all, 0.5) as u64
    };
    let plain = percentile(&plain, 0.5);
    let checkpointed = percentile(&checkpointed, 0.5);
    Ok(CheckpointBenchResult {
        runs: options.runs.max(1),
        rows: options.rows,
        keys: options.keys,
        parallelism: options.parallelism,
        interval_ms: options.interval.as_millis() as u64,
        unaligned: options.unaligned,
        plain_rows_per_second: plain,
        checkpointed_rows_per_second: checkpointed,
        overhead: 1.0 - checkpointed / plain,
        checkpoints: stats.len(),
        duration_median_ms: percentile(&durations, 0.5),
        duration_p99_ms: percentile(&durations, 0.99),
        max_state_bytes: stats.iter().map(|c| c.full_state_bytes).max().unwrap_or(0),
        written_median_bytes: median_bytes(&|c| c.state_bytes),
        full_median_bytes: median_bytes(&|c| c.full_state_bytes),
        incremental: options.incremental,
        hot_keys: options.hot_keys,
        blocked_median_ms: percentile(&blocked, 0.5),
        recovery_state_rows,
        recovery_ms,
        spill_budget: options.spill_budget,
        plain_peak_rss_bytes: plain_peak,
        checkpointed_peak_rss_bytes: checkpointed_peak,
    })
}
