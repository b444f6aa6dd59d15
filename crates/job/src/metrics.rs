//! A job's metrics at a point in time: per task (records, backpressure,
//! watermark, late rows) and per checkpoint, with Flink's names and levels.
//!
//! Backpressure is the share of wall-clock time a task spent blocked on full
//! output channels since the previous reading (Flink's
//! `backPressuredTimeMsPerSecond`), graded as Flink grades it: OK up to 10%,
//! LOW up to 50%, HIGH above.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::settings::{JobStatus, TaskInfo};
use crate::stats::CheckpointStats;
use weir_common::time::{MIN_WATERMARK, Timestamp};

/// Flink's backpressure levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum BackpressureLevel {
    /// At most 10% of the time blocked on output.
    Ok,
    /// Up to 50%.
    Low,
    /// More than 50%.
    High,
}

impl BackpressureLevel {
    /// The level of a share of time blocked, in [0, 1].
    pub fn of(ratio: f64) -> Self {
        if ratio <= 0.10 {
            BackpressureLevel::Ok
        } else if ratio <= 0.50 {
            BackpressureLevel::Low
        } else {
            BackpressureLevel::High
        }
    }
}

impl std::fmt::Display for BackpressureLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BackpressureLevel::Ok => "OK",
            BackpressureLevel::Low => "LOW",
            BackpressureLevel::High => "HIGH",
        })
    }
}

/// One subtask's figures (serde: a TaskManager sends them to the JobManager).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskMetricsSnapshot {
    /// `Vertex (i/p)`.
    pub name: String,
    /// Rows into the task (read from outside, for a source).
    pub records_in: u64,
    /// Rows sent to downstream tasks.
    pub records_out: u64,
    /// Rows handed to a sink connector.
    pub records_written: u64,
    /// Rows dropped because their window had fired.
    pub late_records_dropped: u64,
    /// Share of time blocked on output since the previous reading.
    pub backpressure: f64,
    /// Its level.
    pub backpressure_level: BackpressureLevel,
    /// The most advanced watermark that reached the task, if any.
    pub watermark: Option<Timestamp>,
}

/// A job's figures at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct JobMetrics {
    /// The job's id.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// Its state.
    pub status: JobStatus,
    /// Since it started.
    pub uptime: Duration,
    /// Restarts after failures.
    pub restarts: u64,
    /// Checkpoints and savepoints completed, oldest first.
    pub checkpoints: Vec<CheckpointStats>,
    /// Checkpoints that failed.
    pub failed_checkpoints: u64,
    /// The checkpoints its attempts started from, oldest first.
    pub restores: Vec<crate::stats::RestoreStats>,
    /// Every subtask.
    pub tasks: Vec<TaskMetricsSnapshot>,
    /// The exchanges between the job graph's vertices.
    pub edges: Vec<EdgeView>,
}

/// An exchange between two vertices of a job graph, as the REST API's plan
/// shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeView {
    /// Upstream vertex index.
    pub from: usize,
    /// Downstream vertex index.
    pub to: usize,
    /// How rows are distributed, in Flink's words (`FORWARD`, `HASH`,
    /// `REBALANCE`, `BROADCAST`, `GLOBAL`).
    pub ship_strategy: &'static str,
}

impl EdgeView {
    /// The edges of a built job graph.
    pub fn of_execution(edges: &[crate::execution::ExecutionEdge]) -> Vec<EdgeView> {
        use weir_runtime::Exchange;
        let strategy = |e: &Exchange| match e {
            Exchange::Forward => "FORWARD",
            Exchange::Hash(_) => "HASH",
            Exchange::Rebalance => "REBALANCE",
            Exchange::Broadcast => "BROADCAST",
            Exchange::Single => "GLOBAL",
        };
        Self::list(edges.iter().map(|e| (e.from, e.to, strategy(&e.exchange))))
    }

    /// The edges of a job graph.
    pub fn of_graph(edges: &[weir_plan::graph::JobEdge]) -> Vec<EdgeView> {
        use weir_plan::spec::ExchangeSpec;
        let strategy = |e: &ExchangeSpec| match e {
            ExchangeSpec::Forward => "FORWARD",
            ExchangeSpec::Hash(_) => "HASH",
            ExchangeSpec::Rebalance => "REBALANCE",
            ExchangeSpec::Broadcast => "BROADCAST",
            ExchangeSpec::Single => "GLOBAL",
        };
        Self::list(edges.iter().map(|e| (e.from, e.to, strategy(&e.exchange))))
    }

    fn list(edges: impl Iterator<Item = (usize, usize, &'static str)>) -> Vec<EdgeView> {
        (edges.map(|(from, to, ship_strategy)| EdgeView {
            from,
            to,
            ship_strategy,
        }))
        .collect()
    }
}

impl JobMetrics {
    /// The highest backpressure level of any task.
    pub fn max_backpressure(&self) -> BackpressureLevel {
        self.tasks
            .iter()
            .map(|t| t.backpressure_level)
            .max()
            .unwrap_or(BackpressureLevel::Ok)
    }

    /// One line: status, rates, backpressure, watermark, the last checkpoint.
    pub fn summary(&self) -> String {
        let sum = |f: fn(&TaskMetricsSnapshot) -> u64| self.tasks.iter().map(f).sum::<u64>();
        let watermark = self
            .tasks
            .iter()
            .filter_map(|t| t.watermark)
            .min()
            .map_or("-".to_string(), |w| w.to_string());
        let checkpoint = self.checkpoints.last().map_or("none".to_string(), |c| {
            format!(
                "#{} {} ms {:.1} MB align {} ms",
                c.id,
                c.duration.as_millis(),
                c.state_bytes as f64 / 1e6,
                c.max_alignment.as_millis()
            )
        });
        format!(
            "job {} {:?} t={:.1}s in={} out={} written={} late={} backpressure={} watermark={} \
             checkpoints={} (failed {}) last={}",
            self.id,
            self.status,
            self.uptime.as_secs_f64(),
            sum(|t| t.records_in),
            sum(|t| t.records_out),
            sum(|t| t.records_written),
            sum(|t| t.late_records_dropped),
            self.max_backpressure(),
            watermark,
            self.checkpoints.len(),
            self.failed_checkpoints,
            checkpoint
        )
    }
}

/// The previous reading of blocked time, to measure backpressure since.
#[derive(Debug)]
pub struct BackpressureSampler {
    at: Instant,
    blocked_nanos: Vec<u64>,
    ratios: Vec<f64>,
}

/// Readings closer together than this reuse the previous ratios: too short
/// a window says nothing.
const MIN_WINDOW: Duration = Duration::from_millis(100);

impl BackpressureSampler {
    /// A sampler whose first window starts at `started` with nothing blocked.
    pub fn new(started: Instant, tasks: usize) -> Self {
        BackpressureSampler {
            at: started,
            blocked_nanos: vec![0; tasks],
            ratios: vec![0.0; tasks],
        }
    }

    /// The share of time each task was blocked since the previous reading,
    /// given their cumulative blocked nanoseconds now.
    pub fn read(&mut self, now: Instant, blocked_nanos: &[u64]) -> Vec<f64> {
        let window = now.saturating_duration_since(self.at);
        if window < MIN_WINDOW || blocked_nanos.len() != self.blocked_nanos.len() {
            return self.ratios.clone();
        }
        self.ratios = blocked_nanos
            .iter()
            .zip(&self.blocked_nanos)
            .map(|(now, before)| {
                (now.saturating_sub(*before) as f64 / window.as_nanos() as f64).clamp(0.0, 1.0)
            })
            .collect();
        self.blocked_nanos = blocked_nanos.to_vec();
        self.at = now;
        self.ratios.clone()
    }
}

/// The figures of `tasks` now; backpressure since `sampler`'s last reading.
pub fn read_tasks(tasks: &[TaskInfo], sampler: &mut BackpressureSampler) -> Vec<TaskMetricsSnapshot> {
    let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let blocked: Vec<u64> = tasks.iter().map(|t| t.metrics.blocked_nanos_now()).collect();
    let ratios = sampler.read(Instant::now(), &blocked);
    (tasks.iter().zip(ratios))
        .map(|(task, ratio)| TaskMetricsSnapshot {
            name: task.name.clone(),
            records_in: load(&task.metrics.records_in),
            records_out: load(&task.metrics.records_out),
            records_written: load(&task.metrics.records_written),
            late_records_dropped: load(&task.metrics.late_records_dropped),
            backpressure: ratio,
            backpressure_level: BackpressureLevel::of(ratio),
            watermark: watermark_reading(task.metrics.watermark.load(Ordering::Relaxed)),
        })
        .collect()
}

/// A watermark as a reading: `None` before the first.
pub fn watermark_reading(watermark: Timestamp) -> Option<Timestamp> {
    (watermark != MIN_WATERMARK).then_some(watermark)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_flinks_thresholds() {
        assert_eq!(BackpressureLevel::of(0.0), BackpressureLevel::Ok);
        assert_eq!(BackpressureLevel::of(0.10), BackpressureLevel::Ok);
        assert_eq!(BackpressureLevel::of(0.11), BackpressureLevel::Low);
        assert_eq!(BackpressureLevel::of(0.50), BackpressureLevel::Low);
        assert_eq!(BackpressureLevel::of(0.51), BackpressureLevel::High);
    }

    #[test]
    fn backpressure_is_the_blocked_share_of_the_window_since_the_last_reading() {
        let start = Instant::now();
        let mut sampler = BackpressureSampler::new(start, 2);
        let second = Duration::from_secs(1).as_nanos() as u64;
        let ratios = sampler.read(start + Duration::from_secs(1), &[second * 9 / 10, 0]);
        assert!((ratios[0] - 0.9).abs() < 1e-9 && ratios[1] == 0.0, "{ratios:?}");
        // The next window counts only what was blocked in it.
        let ratios = sampler.read(start + Duration::from_secs(2), &[second * 9 / 10, second / 4]);
        assert!(ratios[0] == 0.0 && (ratios[1] - 0.25).abs() < 1e-9, "{ratios:?}");
        // Too short a window repeats the last reading.
        let again = sampler.read(start + Duration::from_millis(2010), &[second * 2, second * 2]);
        assert_eq!(again, ratios);
    }
}
