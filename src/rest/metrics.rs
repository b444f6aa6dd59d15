//! `/metrics`: Prometheus' text format with the names of Flink's Prometheus reporter.

use std::fmt::Write;

use crate::JobHandle;

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
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

/// Every metric of `jobs`, as Prometheus scrapes them.
pub(super) fn render(jobs: &[JobHandle]) -> String {
    let (mut records_in, mut records_out, mut backpressured) = (Vec::new(), Vec::new(), Vec::new());
    let (mut restarts, mut last_duration, mut completed) = (Vec::new(), Vec::new(), Vec::new());
    for job in jobs {
        let metrics = job.metrics();
        let job_labels = format!(
            "job_id=\"{}\",job_name=\"{}\"",
            escape(job.job_id().as_str()),
            escape(job.name())
        );
        for task in &metrics.tasks {
            let (vertex, subtask) = task.name.rsplit_once(" (").unwrap_or((&task.name, "1/1)"));
            let index = subtask
                .split('/')
                .next()
                .and_then(|i| i.parse::<usize>().ok())
                .unwrap_or(1)
                - 1;
            let labels = format!(
                "{job_labels},tm_id=\"local\",task_name=\"{}\",operator_name=\"{}\",subtask_index=\"{index}\"",
                escape(vertex),
                escape(vertex)
            );
            records_in.push((labels.clone(), task.records_in as f64));
            records_out.push((labels.clone(), task.records_out as f64));
            backpressured.push((labels, (task.backpressure * 1000.0).round()));
        }
        restarts.push((job_labels.clone(), metrics.restarts as f64));
        completed.push((job_labels.clone(), metrics.checkpoints.len() as f64));
        if let Some(last) = metrics.checkpoints.last() {
            last_duration.push((job_labels, last.duration.as_millis() as f64));
        }
    }
    let mut out = String::new();
    family(
        &mut out,
        "flink_taskmanager_job_task_operator_numRecordsIn",
        "counter",
        &records_in,
    );
    family(
        &mut out,
        "flink_taskmanager_job_task_operator_numRecordsOut",
        "counter",
        &records_out,
    );
    family(
        &mut out,
        "flink_taskmanager_job_task_backPressuredTimeMsPerSecond",
        "gauge",
        &backpressured,
    );
    family(&mut out, "flink_jobmanager_job_numRestarts", "gauge", &restarts);
    family(
        &mut out,
        "flink_jobmanager_job_numberOfCompletedCheckpoints",
        "gauge",
        &completed,
    );
    family(
        &mut out,
        "flink_jobmanager_job_lastCheckpointDuration",
        "gauge",
        &last_duration,
    );
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
}
