//! `weir bench latency`: how long a row takes from its source to the sink, at fixed rates, with checkpoints aligned and unaligned; and the same job written for Flink, whose output is read the same way.
//!
//! ```text
//!  datagen at R rows/s ─► created ─hash(k)─► COUNT(*) OVER (PARTITION BY k ...) ─► 1 row in 100 ─► arrived ─► CSV
//! ```
//!
//! The source stamps each row with the wall clock when it makes it
//! (`created`); a keyed OVER aggregation on processing time (a hash
//! exchange and keyed state, and an append-only result, so that Flink's
//! filesystem sink takes it too) passes every row on; one row in
//! [`SAMPLE`] is stamped again where the sink's projection computes it
//! (`arrived`) and written to CSV. A row's latency is `arrived - created`,
//! in milliseconds (the stamps are `TIMESTAMP_LTZ(3)`).
//!
//! The stamps are taken the same way in both engines, but not at the same
//! point of a row's wait: weir's datagen makes its rows a batch at a time,
//! every `execution.buffer-timeout` (a row waits up to that long before it
//! is made and stamped), while Flink stamps each row when it is made and
//! its network buffer then waits up to `execution.buffer-timeout`. The
//! report says so beside the figures.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::bench::ScratchDir;
use crate::{Engine, Error, JobStatus, Result};

/// One sampled row in this many (by a random column): the sink writes
/// 1% of the rows, so that its own cost does not dominate.
pub const SAMPLE: u64 = 100;

/// What to measure.
#[derive(Debug, Clone)]
pub struct LatencyBenchOptions {
    /// Source rates, rows per second.
    pub rates: Vec<u64>,
    /// How long each run lasts.
    pub run_time: Duration,
    /// Runs of each rate and mode; medians are reported.
    pub runs: usize,
    /// `parallelism.default`.
    pub parallelism: usize,
    /// Checkpoint interval.
    pub interval: Duration,
    /// `execution.buffer-timeout`.
    pub buffer_timeout: Duration,
    /// Distinct keys of the OVER aggregation.
    pub keys: u64,
}

/// The figures of one rate and mode: medians over runs.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyResult {
    /// Rows per second the source was asked for.
    pub rate: u64,
    /// `aligned` or `unaligned` checkpoints.
    pub mode: String,
    /// Rows per second the job took, source to end (below `rate` when it
    /// could not keep up).
    pub achieved: f64,
    /// Sampled rows per run.
    pub samples: usize,
    /// Latency percentiles, ms.
    pub p50_ms: f64,
    /// See above.
    pub p99_ms: f64,
    /// See above.
    pub p999_ms: f64,
    /// See above.
    pub max_ms: f64,
    /// Checkpoints completed per run.
    pub checkpoints: usize,
}

/// Which engine a job is written for: they stamp `created` differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// weir computes a table's computed columns in its source task, a
    /// `PROCTIME()` column too.
    Weir,
    /// Flink's `PROCTIME()` column is materialized where it is used, so
    /// `created` is `CURRENT_TIMESTAMP`, computed per row beside the source.
    Flink,
}

/// The job at `rate` rows/s for `rows` rows, writing CSV under `out`.
pub fn job_sql(dialect: Dialect, rate: u64, rows: u64, keys: u64, out: &str) -> String {
    let created = match dialect {
        Dialect::Weir => "created AS PROCTIME()",
        Dialect::Flink => "created AS CURRENT_TIMESTAMP, pt AS PROCTIME()",
    };
    let order = match dialect {
        Dialect::Weir => "created",
        Dialect::Flink => "pt",
    };
    format!(
        "CREATE TABLE src (k BIGINT, v BIGINT, {created})
           WITH ('connector' = 'datagen', 'rows-per-second' = '{rate}', 'number-of-rows' = '{rows}',
                 'fields.k.min' = '0', 'fields.k.max' = '{}',
                 'fields.v.min' = '0', 'fields.v.max' = '1000000000');
         CREATE TABLE sampled (created TIMESTAMP_LTZ(3), arrived TIMESTAMP_LTZ(3), c BIGINT)
           WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv');
         INSERT INTO sampled
         SELECT created, PROCTIME(), c FROM (
           SELECT created, v, COUNT(*) OVER (PARTITION BY k ORDER BY {order}
             ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS c
           FROM src)
         WHERE MOD(v, {SAMPLE}) = 0",
        keys - 1
    )
}

/// Milliseconds since the epoch of a CSV timestamp as weir and Flink
/// write them (`2026-12-07 01:02:03.456`, quoted or not, with a `T` or a
/// zone suffix or neither), read in UTC.
fn millis(text: &str) -> Option<f64> {
    let text = text.trim().trim_matches('"').replace('T', " ");
    let text = text.trim_end_matches('Z').trim_end_matches("+00:00");
    let time = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").ok()?;
    Some(time.and_utc().timestamp_micros() as f64 / 1000.0)
}

/// The latencies (ms) of the sampled rows the job wrote under `dir`: each
/// CSV line's `arrived - created`. A line that does not read is an error
/// naming its file and line.
pub fn latencies(dir: &Path) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    for file in csv_files(dir)? {
        let text = std::fs::read_to_string(&file).map_err(|e| Error::io(&file, e))?;
        for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let mut fields = line.split(',');
            let (created, arrived) = (fields.next().and_then(millis), fields.next().and_then(millis));
            match (created, arrived) {
                (Some(c), Some(a)) => out.push(a - c),
                _ => {
                    return Err(Error::Execution(format!(
                        "{}:{}: expected two timestamps (created, arrived), got '{line}'",
                        file.display(),
                        n + 1
                    )));
                }
            }
        }
    }
    Ok(out)
}

/// The visible data files under `dir` (not hidden or in-progress ones).
fn csv_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let path = entry.map_err(|e| Error::io(&dir, e))?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with('.') || name.starts_with('_') {
                continue;
            }
            match path.is_dir() {
                true => pending.push(path),
                false => files.push(path),
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The `p` quantile of `sorted` (nearest rank).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n => sorted[((n as f64 * p).ceil() as usize).clamp(1, n) - 1],
    }
}

/// What one run measured.
struct Run {
    /// Latencies of the sampled rows, ms, sorted.
    latencies: Vec<f64>,
    /// Rows per second the job took.
    achieved: f64,
    /// Checkpoints it completed.
    checkpoints: usize,
}

/// One run of the job at `rate`.
fn run_once(options: &LatencyBenchOptions, rate: u64, unaligned: bool) -> Result<Run> {
    let scratch = ScratchDir::new(None)?;
    let out = scratch.path.join("out");
    let engine = Engine::new();
    for (key, value) in [
        ("parallelism.default", options.parallelism.to_string()),
        ("table.local-time-zone", "UTC".to_string()),
        ("pipeline.name", format!("latency-{rate}")),
        (
            "execution.buffer-timeout",
            format!("{} ms", options.buffer_timeout.as_millis()),
        ),
        (
            "execution.checkpointing.interval",
            format!("{} ms", options.interval.as_millis()),
        ),
        (
            "execution.checkpointing.dir",
            scratch.path.join("checkpoints").display().to_string(),
        ),
        ("execution.checkpointing.unaligned.enabled", unaligned.to_string()),
    ] {
        engine.set(key, &value)?;
    }
    let rows = rate * options.run_time.as_secs().max(1);
    let sql = job_sql(
        Dialect::Weir,
        rate,
        rows,
        options.keys,
        &out.display().to_string(),
    );
    let started = Instant::now();
    let job = (engine.sql(&sql)?.job().cloned())
        .ok_or_else(|| Error::Execution("the latency job started no job".into()))?;
    match job.wait()? {
        JobStatus::Finished => {}
        other => return Err(Error::Execution(format!("the latency job ended {other:?}"))),
    }
    let achieved = rows as f64 / started.elapsed().as_secs_f64();
    let mut latencies = latencies(&out)?;
    latencies.sort_by(f64::total_cmp);
    Ok(Run {
        latencies,
        achieved,
        checkpoints: job.completed_checkpoints().len(),
    })
}

/// Every rate, aligned then unaligned, `runs` times each.
pub fn run(options: &LatencyBenchOptions) -> Result<Vec<LatencyResult>> {
    let mut results = Vec::new();
    for &rate in &options.rates {
        for unaligned in [false, true] {
            let mut runs = Vec::new();
            for _ in 0..options.runs.max(1) {
                runs.push(run_once(options, rate, unaligned)?);
            }
            results.push(summary(rate, unaligned, &runs));
        }
    }
    Ok(results)
}

/// The medians over `runs` of each figure.
fn summary(rate: u64, unaligned: bool, runs: &[Run]) -> LatencyResult {
    let median = |f: &dyn Fn(&Run) -> f64| super::median(runs.iter().map(f).collect());
    LatencyResult {
        rate,
        mode: if unaligned { "unaligned" } else { "aligned" }.to_string(),
        achieved: median(&|r| r.achieved),
        samples: median(&|r| r.latencies.len() as f64) as usize,
        p50_ms: median(&|r| percentile(&r.latencies, 0.5)),
        p99_ms: median(&|r| percentile(&r.latencies, 0.99)),
        p999_ms: median(&|r| percentile(&r.latencies, 0.999)),
        max_ms: median(&|r| r.latencies.last().copied().unwrap_or(f64::NAN)),
        checkpoints: median(&|r| r.checkpoints as f64) as usize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_as_weir_and_flink_write_them_read_alike() {
        let plain = millis("2026-12-07 01:02:03.456").unwrap();
        assert_eq!(millis("\"2026-12-07 01:02:03.456\""), Some(plain));
        assert_eq!(millis("2026-12-07T01:02:03.456Z"), Some(plain));
        assert_eq!(millis("2026-12-07 01:02:03.457").unwrap() - plain, 1.0);
        assert_eq!(millis("yesterday"), None);
    }

    #[test]
    fn percentiles_are_nearest_ranks() {
        let sorted: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(percentile(&sorted, 0.5), 500.0);
        assert_eq!(percentile(&sorted, 0.99), 990.0);
        assert_eq!(percentile(&sorted, 0.999), 999.0);
        assert_eq!(percentile(&sorted[..1], 0.99), 1.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn a_line_without_two_timestamps_is_named_with_its_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("part-0"),
            "2026-12-07 01:02:03.000,2026-12-07 01:02:03.004,1\n\nbad,line\n",
        )
        .unwrap();
        std::fs::write(dir.path().join(".part-1.inprogress"), "ignored").unwrap();
        let error = latencies(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains("part-0:3") && error.contains("bad,line"),
            "{error}"
        );
        std::fs::write(
            dir.path().join("part-0"),
            "2026-12-07 01:02:03.000,2026-12-07 01:02:03.004,1\n",
        )
        .unwrap();
        assert_eq!(latencies(dir.path()).unwrap(), vec![4.0]);
    }
}
