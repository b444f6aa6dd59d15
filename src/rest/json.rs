//! The JSON bodies of the REST API, shaped as Flink's.

use serde_json::{Value, json};
use weir_common::config::checkpoint::display_path;
use weir_job::metrics::{BackpressureLevel, JobMetrics, TaskMetricsSnapshot};
use weir_job::stats::CheckpointStats;

use super::{JobView, TaskManagerView};
use crate::JobStatus;

/// Flink's name of a job state.
pub(super) fn state(status: JobStatus) -> &'static str {
    match status {
        JobStatus::Running => "RUNNING",
        JobStatus::Finished => "FINISHED",
        JobStatus::Cancelled => "CANCELED",
        JobStatus::Failed => "FAILED",
    }
}

fn now_ms() -> i64 {
    weir_common::time::wall_clock_millis()
}

pub(super) fn overview(jobs: &[JobView], task_managers: &[TaskManagerView]) -> Value {
    let count = |state: &str| jobs.iter().filter(|j| j.state == state).count();
    json!({
        "taskmanagers": task_managers.len(),
        "slots-total": task_managers.iter().map(|t| t.slots).sum::<usize>(),
        "slots-available": task_managers.iter().map(|t| t.free_slots).sum::<usize>(),
        "jobs-running": jobs.iter().filter(|j| !matches!(j.state, "FINISHED" | "CANCELED" | "FAILED")).count(),
        "jobs-finished": count("FINISHED"),
        "jobs-cancelled": count("CANCELED"),
        "jobs-failed": count("FAILED"),
        "weir-version": env!("CARGO_PKG_VERSION"),
    })
}

/// A job's subtasks grouped by vertex, in the order they come: a
/// subtask's name is `vertex (i/p)`.
fn vertices(metrics: &JobMetrics) -> Vec<(String, Vec<&TaskMetricsSnapshot>)> {
    let mut vertices: Vec<(String, Vec<&TaskMetricsSnapshot>)> = Vec::new();
    for task in &metrics.tasks {
        let vertex = task.name.rsplit_once(" (").map_or(task.name.as_str(), |(v, _)| v);
        match vertices.iter_mut().find(|(name, _)| name == vertex) {
            Some((_, tasks)) => tasks.push(task),
            None => vertices.push((vertex.to_string(), vec![task])),
        }
    }
    vertices
}

pub(super) fn job(job: &JobView) -> Value {
    let metrics = &job.metrics;
    let now = now_ms();
    let duration = metrics.uptime.as_millis() as i64;
    let status = job.state;
    let vertices: Vec<Value> = (vertices(metrics).iter().enumerate())
        .map(|(id, (name, tasks))| {
            json!({
                "id": id.to_string(),
                "name": name,
                "parallelism": tasks.len(),
                "status": status,
                "tasks": tasks.iter().map(|t| &t.name).collect::<Vec<_>>(),
                "metrics": {
                    "read-records": tasks.iter().map(|t| t.records_in).sum::<u64>(),
                    "write-records": tasks.iter().map(|t| t.records_out).sum::<u64>(),
                },
                "watermark": tasks.iter().filter_map(|t| t.watermark).min(),
                "backpressure-level": level(tasks.iter().map(|t| t.backpressure_level).max().unwrap_or(BackpressureLevel::Ok)),
            })
        })
        .collect();
    // Flink's plan: each vertex with the vertices it reads and how.
    let nodes: Vec<Value> = (vertices.iter())
        .map(|v| {
            let id: usize = v["id"].as_str().and_then(|i| i.parse().ok()).unwrap_or(0);
            let inputs: Vec<Value> = (metrics.edges.iter())
                .filter(|e| e.to == id)
                .map(|e| json!({ "id": e.from.to_string(), "ship_strategy": e.ship_strategy }))
                .collect();
            json!({
                "id": v["id"],
                "parallelism": v["parallelism"],
                "description": v["name"],
                "inputs": inputs,
            })
        })
        .collect();
    json!({
        "jid": job.id,
        "name": metrics.name,
        "plan": { "jid": job.id, "name": metrics.name, "nodes": nodes },
        "state": status,
        "start-time": now - duration,
        "duration": duration,
        "now": now,
        "restarts": metrics.restarts,
        "vertices": vertices,
    })
}

fn level(level: BackpressureLevel) -> &'static str {
    match level {
        BackpressureLevel::Ok => "ok",
        BackpressureLevel::Low => "low",
        BackpressureLevel::High => "high",
    }
}

fn checkpoint(stats: &CheckpointStats) -> Value {
    json!({
        "id": stats.id,
        "status": "COMPLETED",
        "is_savepoint": matches!(stats.kind, weir_common::ids::BarrierKind::Savepoint),
        "trigger_timestamp": stats.trigger_time,
        "latest_ack_timestamp": stats.trigger_time + stats.duration.as_millis() as i64,
        "end_to_end_duration": stats.duration.as_millis() as u64,
        "state_size": stats.full_state_bytes,
        "checkpointed_size": stats.state_bytes,
        "alignment_buffered": stats.channel_state_bytes,
        "alignment_duration": stats.max_alignment.as_millis() as u64,
        "external_path": display_path(&stats.dir),
        "attempt": stats.attempt,
    })
}

pub(super) fn checkpoints(job: &JobView) -> Value {
    let completed = &job.metrics.checkpoints;
    let failed = job.metrics.failed_checkpoints;
    let summary = |f: fn(&CheckpointStats) -> u64| {
        let values: Vec<u64> = completed.iter().map(f).collect();
        json!({
            "min": values.iter().min(),
            "max": values.iter().max(),
            "avg": (!values.is_empty()).then(|| values.iter().sum::<u64>() / values.len() as u64),
        })
    };
    let latest = |savepoint: bool| {
        (completed.iter())
            .rev()
            .find(|c| matches!(c.kind, weir_common::ids::BarrierKind::Savepoint) == savepoint)
            .map(checkpoint)
    };
    let restored = job.metrics.restores.last().map(|r| {
        json!({
            "id": r.id,
            "restore_timestamp": r.restore_time,
            "is_savepoint": matches!(r.kind, weir_common::ids::BarrierKind::Savepoint),
            "external_path": display_path(&r.dir),
        })
    });
    json!({
        "counts": {
            "restored": job.metrics.restores.len(),
            "total": completed.len() as u64 + failed,
            "in_progress": 0,
            "completed": completed.len(),
            "failed": failed,
        },
        "summary": {
            "state_size": summary(|c| c.full_state_bytes),
            "checkpointed_size": summary(|c| c.state_bytes),
            "end_to_end_duration": summary(|c| c.duration.as_millis() as u64),
        },
        "latest": { "completed": latest(false), "savepoint": latest(true), "failed": null, "restored": restored },
        "history": completed.iter().rev().map(checkpoint).collect::<Vec<_>>(),
    })
}

pub(super) fn backpressure(job: &JobView, vertex: usize) -> Option<Value> {
    let vertices = vertices(&job.metrics);
    let (_, tasks) = vertices.get(vertex)?;
    let worst = tasks
        .iter()
        .map(|t| t.backpressure_level)
        .max()
        .unwrap_or(BackpressureLevel::Ok);
    Some(json!({
        "status": "ok",
        "backpressure-level": level(worst),
        "end-timestamp": now_ms(),
        "subtasks": tasks.iter().enumerate().map(|(i, t)| json!({
            "subtask": i,
            "backpressure-level": level(t.backpressure_level),
            "ratio": t.backpressure,
        })).collect::<Vec<_>>(),
    }))
}

pub(super) fn task_managers(task_managers: &[TaskManagerView]) -> Value {
    json!({ "taskmanagers": task_managers.iter().map(|t| json!({
        "id": t.id,
        "path": t.path,
        "dataPort": t.data_port,
        "timeSinceLastHeartbeat": t.since_heartbeat_ms,
        "slotsNumber": t.slots,
        "freeSlots": t.free_slots,
        "hardware": { "cpuCores": t.cpu_cores },
    })).collect::<Vec<_>>() })
}
