//! `weir bench backpressure`: aligned against unaligned checkpoints under
//! heavy backpressure, in one run.
//!
//! A session aggregation whose aggregate calls `weir_slow` (a fixed sleep
//! per row, in the aggregation subtasks) cannot keep up with its datagen
//! source, so the channels between them stay full. The same job runs for a
//! fixed time with aligned checkpoints and with unaligned ones, alternately;
//! for each: rows per second, and per checkpoint its duration, alignment
//! time and channel-state size (medians and p99 over all checkpoints).

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::bench::ScratchDir;
use crate::bench::slow::Slow;
use crate::{Engine, Error, JobStatus, Result};

/// What to measure.
#[derive(Debug, Clone)]
pub struct BackpressureBenchOptions {
    /// How long each run lasts.
    pub run_time: Duration,
    /// Runs of each mode, alternating.
    pub runs: usize,
    /// `parallelism.default`.
    pub parallelism: usize,
    /// Checkpoint interval.
    pub interval: Duration,
    /// Sleep per row in the aggregation.
    pub slow_per_row: Duration,
}

/// The figures of one mode.
#[derive(Debug, Clone, Serialize)]
pub struct ModeResult {
    /// `aligned` or `unaligned`.
    pub mode: String,
    /// Median over runs of rows read per second.
    pub rows_per_second: f64,
    /// Checkpoints completed over all runs.
    pub checkpoints: usize,
    /// Checkpoint duration, ms: median and p99.
    pub duration_median_ms: f64,
    /// See above.
    pub duration_p99_ms: f64,
    /// Longest alignment of a task per checkpoint, ms: median and p99.
    pub alignment_median_ms: f64,
    /// See above.
    pub alignment_p99_ms: f64,
    /// Channel state per checkpoint, bytes: median.
    pub channel_state_median_bytes: f64,
    /// Checkpoints that failed.
    pub failed: u64,
}

/// Both modes.
#[derive(Debug, Clone, Serialize)]
pub struct BackpressureBenchResult {
    /// Seconds per run.
    pub run_seconds: f64,
    /// Runs per mode.
    pub runs: usize,
    /// Parallelism.
    pub parallelism: usize,
    /// Checkpoint interval, ms.
    pub interval_ms: u64,
    /// Sleep per row in the aggregation, µs.
    pub slow_per_row_us: f64,
    /// Aligned checkpoints.
    pub aligned: ModeResult,
    /// Unaligned checkpoints.
    pub unaligned: ModeResult,
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    if values.is_empty() {
        return 0.0;
    }
    values[((values.len() - 1) as f64 * p).round() as usize]
}

/// One run; rows per second and the checkpoints it completed.
fn run_once(
    options: &BackpressureBenchOptions,
    unaligned: bool,
    dir: &std::path::Path,
) -> Result<(f64, Vec<weir_job::stats::CheckpointStats>, u64)> {
    let engine = Engine::new();
    engine.register_udf(Slow::udf(options.slow_per_row));
    for (key, value) in [
        ("parallelism.default", options.parallelism.to_string()),
        ("table.local-time-zone", "UTC".to_string()),
        ("pipeline.name", "backpressure".to_string()),
        (
            "execution.checkpointing.interval",
            format!("{} ms", options.interval.as_millis()),
        ),
        ("execution.checkpointing.dir", dir.display().to_string()),
        ("execution.checkpointing.unaligned.enabled", unaligned.to_string()),
        // Let slow checkpoints finish rather than fail the job.
        (
            "execution.checkpointing.tolerable-failed-checkpoints",
            "1000".to_string(),
        ),
    ] {
        engine.set(key, &value)?;
    }
    let job = engine
        .sql(
            "CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id, 3),
               WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
             WITH ('connector' = 'datagen', 'rows-per-second' = '10000000',
                   'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '9000000000000');
             CREATE TABLE sink (k BIGINT, c BIGINT, s BIGINT) WITH ('connector' = 'blackhole');
             INSERT INTO sink SELECT id % 1000, COUNT(*), SUM(weir_slow(id))
             FROM seq GROUP BY id % 1000, SESSION(ts, INTERVAL '10' SECOND)",
        )?
        .job()
        .cloned()
        .ok_or_else(|| Error::Internal("the benchmark started no job".into()))?;
    let started = Instant::now();
    std::thread::sleep(options.run_time);
    let metrics = job.metrics();
    let elapsed = started.elapsed().as_secs_f64();
    job.cancel();
    let status = job.wait()?;
    if status != JobStatus::Cancelled {
        return Err(Error::Execution(format!("the benchmark job ended {status:?}")));
    }
    let rows: u64 = metrics
        .tasks
        .iter()
        .filter(|t| t.name.starts_with("Source"))
        .map(|t| t.records_in)
        .sum();
    Ok((
        rows as f64 / elapsed,
        metrics.checkpoints,
        metrics.failed_checkpoints,
    ))
}

fn summarize(
    mode: &str,
    rates: &mut [f64],
    stats: &[weir_job::stats::CheckpointStats],
    failed: u64,
) -> ModeResult {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut durations: Vec<f64> = stats.iter().map(|c| ms(c.duration)).collect();
    let mut alignments: Vec<f64> = stats.iter().map(|c| ms(c.max_alignment)).collect();
    let mut channel: Vec<f64> = stats.iter().map(|c| c.channel_state_bytes as f64).collect();
    ModeResult {
        mode: mode.to_string(),
        rows_per_second: percentile(rates, 0.5),
        checkpoints: stats.len(),
        duration_median_ms: percentile(&mut durations, 0.5),
        duration_p99_ms: percentile(&mut durations, 0.99),
        alignment_median_ms: percentile(&mut alignments, 0.5),
        alignment_p99_ms: percentile(&mut alignments, 0.99),
        channel_state_median_bytes: percentile(&mut channel, 0.5),
        failed,
    }
}

/// Runs the benchmark.
pub fn run(options: &BackpressureBenchOptions) -> Result<BackpressureBenchResult> {
    let scratch = ScratchDir::new(None)?;
    let mut rates = [Vec::new(), Vec::new()];
    let mut stats = [Vec::new(), Vec::new()];
    let mut failed = [0, 0];
    for run in 0..options.runs.max(1) {
        for (index, unaligned) in [false, true].into_iter().enumerate() {
            let dir = scratch.path.join(format!("run-{run}-{index}"));
            let (rate, checkpoints, failures) = run_once(options, unaligned, &dir)?;
            rates[index].push(rate);
            stats[index].extend(checkpoints);
            failed[index] += failures;
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let [mut aligned_rates, mut unaligned_rates] = rates;
    Ok(BackpressureBenchResult {
        run_seconds: options.run_time.as_secs_f64(),
        runs: options.runs.max(1),
        parallelism: options.parallelism,
        interval_ms: options.interval.as_millis() as u64,
        slow_per_row_us: options.slow_per_row.as_secs_f64() * 1e6,
        aligned: summarize("aligned", &mut aligned_rates, &stats[0], failed[0]),
        unaligned: summarize("unaligned", &mut unaligned_rates, &stats[1], failed[1]),
    })
}
