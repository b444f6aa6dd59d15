//! Job metrics: from `JobHandle::metrics()`, `SHOW JOBS` / `DESCRIBE JOB`, and
//! `weir run --metrics-interval`, plausible while a job runs.

use std::io::BufRead;
use std::time::Duration;

use weir::BackpressureLevel;

const SOURCE: &str = "CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id, 3),
    WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
  WITH ('connector' = 'datagen', 'rows-per-second' = '200000',
        'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '100000000')";

#[test]
fn metrics_show_growing_checkpoints_with_sizes_records_and_watermarks() {
    let dir = tempfile::tempdir().unwrap();
    let engine = crate::engine(2);
    engine.set("execution.checkpointing.interval", "100 ms").unwrap();
    engine
        .set("execution.checkpointing.dir", &dir.path().display().to_string())
        .unwrap();
    engine.sql(SOURCE).unwrap();
    engine
        .sql("CREATE TABLE sink (k BIGINT, c BIGINT) WITH ('connector' = 'blackhole')")
        .unwrap();
    let job = engine
        .sql(
            "INSERT INTO sink SELECT id % 1000, COUNT(*)
             FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '1' HOUR))
             GROUP BY id % 1000, window_start, window_end",
        )
        .unwrap()
        .job()
        .unwrap()
        .clone();
    std::thread::sleep(Duration::from_millis(700));
    let first = job.metrics();
    std::thread::sleep(Duration::from_millis(500));
    let second = job.metrics();
    job.cancel();

    assert!(
        second.checkpoints.len() > first.checkpoints.len(),
        "the count grows"
    );
    let last = second.checkpoints.last().unwrap();
    assert!(last.state_bytes > 0, "{last:?}");
    assert!(
        last.duration > Duration::ZERO && last.trigger_time > 0,
        "{last:?}"
    );
    assert_eq!(last.ack_delays.len(), second.tasks.len(), "one per task");
    assert_eq!(
        last.channel_state_bytes, 0,
        "aligned checkpoints keep no channel state"
    );
    assert_eq!(second.tasks.len(), 4, "2 source subtasks, 2 aggregation subtasks");
    let records_in = |m: &weir::JobMetrics| m.tasks.iter().map(|t| t.records_in).sum::<u64>();
    assert!(records_in(&second) > records_in(&first) && records_in(&first) > 0);
    assert!(
        second.tasks.iter().all(|t| t.watermark.is_some()),
        "{:?}",
        second.tasks
    );
    assert!(second.tasks.iter().all(|t| (0.0..=1.0).contains(&t.backpressure)));
    // The aggregation subtasks send nothing: they are never blocked on output.
    assert!(
        second.tasks[2..]
            .iter()
            .all(|t| t.backpressure_level == BackpressureLevel::Ok),
        "{:?}",
        second.tasks
    );
    let summary = second.summary();
    assert!(
        summary.contains("backpressure=") && summary.contains("checkpoints="),
        "{summary}"
    );
}

#[test]
fn show_jobs_and_describe_job_report_checkpoints_and_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let engine = crate::engine(1);
    engine.set("execution.checkpointing.interval", "100 ms").unwrap();
    engine
        .set("execution.checkpointing.dir", &dir.path().display().to_string())
        .unwrap();
    engine.sql(SOURCE).unwrap();
    engine
        .sql("CREATE TABLE sink (id BIGINT) WITH ('connector' = 'blackhole')")
        .unwrap();
    let job = engine
        .sql("INSERT INTO sink SELECT id FROM seq")
        .unwrap()
        .job()
        .unwrap()
        .clone();
    std::thread::sleep(Duration::from_millis(500));
    let jobs = crate::sorted_rows(&engine.sql("SHOW JOBS").unwrap().collect().unwrap());
    assert!(
        jobs[0].contains("|RUNNING|") && jobs[0].ends_with("|OK"),
        "{jobs:?}"
    );
    let tasks = crate::sorted_rows(
        &engine
            .sql(&format!("DESCRIBE JOB '{}'", job.id()))
            .unwrap()
            .collect()
            .unwrap(),
    );
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert!(tasks[0].contains("OK ("), "{tasks:?}");
    job.cancel();
    let err = engine.sql("DESCRIBE JOB '999'").unwrap_err().to_string();
    assert!(err.contains("no job '999'"), "{err}");
}

#[test]
fn a_slow_sink_shows_high_backpressure_in_weir_run_metrics_lines() {
    // The print sink writes to a pipe nobody reads: once it is full the sink
    // blocks, and the source subtasks feeding it are blocked on output.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.sql");
    std::fs::write(
        &file,
        format!(
            "SET 'parallelism.default' = '2';
             SET 'execution.checkpointing.interval' = '200 ms';
             SET 'execution.checkpointing.dir' = '{}';
             {SOURCE};
             CREATE TABLE slow (id BIGINT) WITH ('connector' = 'print', 'sink.parallelism' = '1');
             INSERT INTO slow SELECT id FROM seq;",
            dir.path().join("checkpoints").display()
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "--metrics-interval", "300ms"])
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut lines = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        let high = line.starts_with("[METRICS]") && line.contains("backpressure=HIGH");
        lines.push(line);
        if high || lines.len() > 200 {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let metrics: Vec<&String> = lines.iter().filter(|l| l.starts_with("[METRICS]")).collect();
    assert!(
        metrics.last().is_some_and(|l| l.contains("backpressure=HIGH")),
        "{lines:#?}"
    );
}

#[test]
fn the_backpressure_benchmark_runs_both_modes_and_unaligned_keeps_in_flight_records() {
    let options = weir::bench::backpressure::BackpressureBenchOptions {
        run_time: Duration::from_millis(1500),
        runs: 1,
        parallelism: 2,
        interval: Duration::from_millis(200),
        slow_per_row: Duration::from_micros(20),
    };
    let r = weir::bench::backpressure::run(&options).unwrap();
    assert_eq!(
        (r.aligned.mode.as_str(), r.unaligned.mode.as_str()),
        ("aligned", "unaligned")
    );
    assert!(r.aligned.rows_per_second > 0.0 && r.unaligned.rows_per_second > 0.0);
    assert!(r.unaligned.checkpoints > 0, "{r:?}");
    assert_eq!(r.aligned.channel_state_median_bytes, 0.0, "{r:?}");
    assert!(r.unaligned.channel_state_median_bytes > 0.0, "{r:?}");
}

#[test]
fn the_restore_benchmark_restores_at_both_parallelisms() {
    let options = weir::bench::restore::RestoreBenchOptions {
        keys: vec![1000],
        parallelism: 2,
        rescaled: 3,
        runs: 1,
    };
    let r = weir::bench::restore::run(&options).unwrap();
    assert_eq!(r.sizes.len(), 1);
    let size = &r.sizes[0];
    assert!(size.state_bytes > 0, "{r:?}");
    assert!(size.same_parallelism_ms > 0.0 && size.rescaled_ms > 0.0, "{r:?}");
}
