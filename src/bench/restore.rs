//! `weir bench restore`: how long restoring takes as state grows, at the
//! parallelism of the savepoint and at another one (rescaling).
//!
//! For each state size, a tumbling-window aggregation with one-hour windows
//! runs until every one of `keys` keys is in its state, and stops with a
//! savepoint. The same query is then started from the savepoint, `runs`
//! times at the same parallelism and `runs` times at another; restoring
//! (reading and filtering the state files, rebuilding the windows) happens
//! before the job's tasks start, so the time to submit is the restore time.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::bench::checkpoint::windowed_job_sql;
use crate::bench::{ScratchDir, median};
use crate::{Engine, Error, JobStatus, Result};

/// What to measure.
#[derive(Debug, Clone)]
pub struct RestoreBenchOptions {
    /// State sizes, in keys.
    pub keys: Vec<u64>,
    /// Parallelism of the job that takes the savepoint.
    pub parallelism: usize,
    /// Parallelism of the rescaled restore.
    pub rescaled: usize,
    /// Restores of each kind; medians are reported.
    pub runs: usize,
}

/// The figures of one state size.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreResult {
    /// Keys in the state.
    pub keys: u64,
    /// Bytes of state files in the savepoint.
    pub state_bytes: u64,
    /// Median restore at the same parallelism, ms.
    pub same_parallelism_ms: f64,
    /// Median restore at the other parallelism, ms.
    pub rescaled_ms: f64,
}

/// All sizes.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreBenchResult {
    /// Parallelism of the savepoint.
    pub parallelism: usize,
    /// Parallelism of the rescaled restore.
    pub rescaled: usize,
    /// Restores per kind.
    pub runs: usize,
    /// Per state size.
    pub sizes: Vec<RestoreResult>,
}

fn engine(
    parallelism: usize,
    savepoints: &std::path::Path,
    restore: Option<&std::path::Path>,
) -> Result<Engine> {
    let engine = Engine::new();
    engine.set("parallelism.default", &parallelism.to_string())?;
    engine.set("table.local-time-zone", "UTC")?;
    engine.set("pipeline.name", "restore-bench")?;
    engine.set(
        "execution.checkpointing.savepoint-dir",
        &savepoints.display().to_string(),
    )?;
    if let Some(path) = restore {
        engine.set("execution.savepoint.path", &path.display().to_string())?;
    }
    Ok(engine)
}

/// The job, 1000 rows per millisecond of event time: an hour's window
/// holds every key long before it closes.
fn job_sql(keys: u64) -> String {
    windowed_job_sql(9_000_000_000_001, 1000, keys, 1_000_000_000)
}

/// Takes a savepoint of the job holding every one of `keys` keys.
fn savepoint(keys: u64, parallelism: usize, dir: &std::path::Path) -> Result<(std::path::PathBuf, u64)> {
    let engine = engine(parallelism, dir, None)?;
    let job = engine
        .sql(&job_sql(keys))?
        .job()
        .cloned()
        .ok_or_else(|| Error::Internal("the benchmark started no job".into()))?;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let read: u64 = job
            .metrics()
            .tasks
            .iter()
            .filter(|t| t.name.starts_with("Source"))
            .map(|t| t.records_in)
            .sum();
        if read >= keys {
            break;
        }
        if Instant::now() > deadline {
            job.cancel();
            return Err(Error::Execution(format!(
                "{keys} rows were not read within 10 minutes"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let path = job.stop_with_savepoint()?;
    let bytes = job.completed_checkpoints().last().map_or(0, |c| c.state_bytes);
    Ok((path, bytes))
}

/// Restores `path` at `parallelism`: the time to submit the job.
fn restore_once(path: &std::path::Path, keys: u64, parallelism: usize, dir: &std::path::Path) -> Result<f64> {
    let engine = engine(parallelism, dir, Some(path))?;
    let started = Instant::now();
    let result = engine.sql(&job_sql(keys))?;
    let elapsed = started.elapsed().as_secs_f64() * 1e3;
    if let Some(job) = result.job() {
        job.cancel();
        let status = job.wait()?;
        if status != JobStatus::Cancelled {
            return Err(Error::Execution(format!("the restored job ended {status:?}")));
        }
    }
    Ok(elapsed)
}

/// Runs the benchmark.
pub fn run(options: &RestoreBenchOptions) -> Result<RestoreBenchResult> {
    let scratch = ScratchDir::new(None)?;
    let mut sizes = Vec::new();
    for &keys in &options.keys {
        let dir = scratch.path.join(format!("keys-{keys}"));
        let (path, state_bytes) = savepoint(keys, options.parallelism, &dir)?;
        let (mut same, mut rescaled) = (Vec::new(), Vec::new());
        for _ in 0..options.runs.max(1) {
            same.push(restore_once(&path, keys, options.parallelism, &dir)?);
            rescaled.push(restore_once(&path, keys, options.rescaled, &dir)?);
        }
        sizes.push(RestoreResult {
            keys,
            state_bytes,
            same_parallelism_ms: median(same),
            rescaled_ms: median(rescaled),
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(RestoreBenchResult {
        parallelism: options.parallelism,
        rescaled: options.rescaled,
        runs: options.runs.max(1),
        sizes,
    })
}
