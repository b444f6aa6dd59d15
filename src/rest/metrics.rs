//! `/metrics`: Prometheus' text format with the names of Flink's Prometheus reporter.
//!
//! As in Flink, each process reports its own: a TaskManager its subtasks'
//! figures (`flink_taskmanager_job_task_*`), the JobManager its jobs' and the
//! cluster's (`flink_jobmanager_*`); `weir run --rest-port` is both at once.

use std::fmt::Write;

use weir_job::metrics::TaskMetricsSnapshot;

use super::{JobView, TaskManagerView};

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One metric family: its type line and a sample per label set.
fn family(out: &mut String, name: &str, kind: &str, samples: &[(String, f64)]) {
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = match labels.is_empty() {
            true => writeln!(out, "{name} {value}"),
            false => writeln!(out, "{name}{{{labels}}} {value}"),
        };
    }
}

fn job_labels(id: &str, name: &str) -> String {
    format!("job_id=\"{}\",job_name=\"{}\"", escape(id), escape(name))
}

/// The subtasks of one job running in a process.
pub struct TaskSamples<'a> {
    /// The job's id.
    pub job_id: &'a str,
    /// The job's name.
    pub job_name: &'a str,
    /// Its subtasks here.
    pub tasks: &'a [TaskMetricsSnapshot],
}

/// A TaskManager's families: one sample per subtask. A subtask's name is
/// `vertex (i/p)`; its vertex is the task (an operator chain), so
/// `task_name` and `operator_name` are both the chain's name.
pub fn taskmanager(tm_id: &str, jobs: &[TaskSamples]) -> String {
    let (mut records_in, mut records_out, mut backpressured) = (Vec::new(), Vec::new(), Vec::new());
    for job in jobs {
        let job_labels = job_labels(job.job_id, job.job_name);
        for task in job.tasks {
            let (vertex, subtask) = task.name.rsplit_once(" (").unwrap_or((&task.name, "1/1)"));
            let index = subtask
                .split('/')
                .next()
                .and_then(|i| i.parse::<usize>().ok())
                .unwrap_or(1)
                - 1;
            let labels = format!(
                "{job_labels},tm_id=\"{}\",task_name=\"{}\",operator_name=\"{}\",subtask_index=\"{index}\"",
                escape(tm_id),
                escape(vertex),
                escape(vertex)
            );
            records_in.push((labels.clone(), task.records_in as f64));
            records_out.push((labels.clone(), task.records_out as f64));
            backpressured.push((labels, (task.backpressure * 1000.0).round()));
        }
    }
    let mut out = String::new();
    let prefix = "flink_taskmanager_job_task";
    family(
        &mut out,
        &format!("{prefix}_operator_numRecordsIn"),
        "counter",
        &records_in,
    );
    family(
        &mut out,
        &format!("{prefix}_operator_numRecordsOut"),
        "counter",
        &records_out,
    );
    family(
        &mut out,
        &format!("{prefix}_backPressuredTimeMsPerSecond"),
        "gauge",
        &backpressured,
    );
    out
}

/// The JobManager's families: per job (restarts, checkpoints) and of the
/// cluster (TaskManagers, slots, running jobs).
pub fn jobmanager(jobs: &[JobView], task_managers: &[TaskManagerView]) -> String {
    let (mut restarts, mut last_duration, mut completed, mut failed) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for job in jobs {
        let labels = job_labels(&job.id, &job.metrics.name);
        let metrics = &job.metrics;
        restarts.push((labels.clone(), metrics.restarts as f64));
        completed.push((labels.clone(), metrics.checkpoints.len() as f64));
        failed.push((labels.clone(), metrics.failed_checkpoints as f64));
        if let Some(last) = metrics.checkpoints.last() {
            last_duration.push((labels, last.duration.as_millis() as f64));
        }
    }
    let mut out = String::new();
    family(&mut out, "flink_jobmanager_job_numRestarts", "gauge", &restarts);
    family(
        &mut out,
        "flink_jobmanager_job_numberOfCompletedCheckpoints",
        "gauge",
        &completed,
    );
    family(
        &mut out,
        "flink_jobmanager_job_numberOfFailedCheckpoints",
        "gauge",
        &failed,
    );
    family(
        &mut out,
        "flink_jobmanager_job_lastCheckpointDuration",
        "gauge",
        &last_duration,
    );
    let running = jobs.iter().filter(|j| j.state == "RUNNING").count();
    let cluster = [
        ("numRegisteredTaskManagers", task_managers.len()),
        ("taskSlotsTotal", task_managers.iter().map(|t| t.slots).sum()),
        (
            "taskSlotsAvailable",
            task_managers.iter().map(|t| t.free_slots).sum(),
        ),
        ("numRunningJobs", running),
    ];
    for (name, value) in cluster {
        family(
            &mut out,
            &format!("flink_jobmanager_{name}"),
            "gauge",
            &[(String::new(), value as f64)],
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_escape_quotes_backslashes_and_newlines() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn a_family_has_its_type_line_then_one_sample_per_label_set() {
        let mut out = String::new();
        family(
            &mut out,
            "m",
            "counter",
            &[("a=\"1\"".into(), 2.0), ("a=\"2\"".into(), 3.5)],
        );
        assert_eq!(out, "# TYPE m counter\nm{a=\"1\"} 2\nm{a=\"2\"} 3.5\n");
    }

    #[test]
    fn a_subtask_sample_names_its_task_manager_vertex_and_zero_based_index() {
        let task = TaskMetricsSnapshot {
            name: "Source: seq -> Calc (2/2)".into(),
            records_in: 7,
            records_out: 5,
            records_written: 0,
            late_records_dropped: 0,
            backpressure: 0.25,
            backpressure_level: weir_job::metrics::BackpressureLevel::Low,
            watermark: None,
        };
        let tasks = [task];
        let text = taskmanager(
            "tm-1",
            &[TaskSamples {
                job_id: "j",
                job_name: "n",
                tasks: &tasks,
            }],
        );
        let labels = "job_id=\"j\",job_name=\"n\",tm_id=\"tm-1\",task_name=\"Source: seq -> Calc\",\
                      operator_name=\"Source: seq -> Calc\",subtask_index=\"1\"";
        assert!(
            text.contains(&format!(
                "flink_taskmanager_job_task_operator_numRecordsIn{{{labels}}} 7\n"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "flink_taskmanager_job_task_backPressuredTimeMsPerSecond{{{labels}}} 250\n"
            )),
            "{text}"
        );
    }
}
