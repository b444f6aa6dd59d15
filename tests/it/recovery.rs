//! Crash recovery with real processes: `weir run` killed with SIGKILL at
//! random moments, restarted with `--restore`, gives exactly the output of a
//! run that never crashed.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use rand::{Rng, SeedableRng};

/// 400k generated rows at 100k rows/s (about 4 s).
const SEQUENCE: &str = "CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
    WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
  WITH ('connector' = 'datagen', 'rows-per-second' = '100000',
        'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '399999')";

/// Nexmark's standard DDL and views: 300k events emitted at their event
/// time, 100k per second (about 3 s).
fn nexmark() -> String {
    let script = weir::bench::query_script(
        "SELECT 1",
        &weir::bench::NexmarkOptions {
            events: 300_000,
            event_rate: 100_000,
            rate_limit: Some(100_000),
            ..Default::default()
        },
        Path::new("unused"),
        0,
    );
    let ddl = script.rsplit_once("SELECT 1").unwrap().0.trim_end();
    ddl.trim_end_matches(';').to_string()
}

/// A job over `source`, checkpointing every 200 ms, writing `query` into a
/// CSV directory.
fn job_file(
    dir: &Path,
    name: &str,
    out: &Path,
    parallelism: usize,
    source: &str,
    columns: &str,
    query: &str,
) -> String {
    let file = dir.join(format!("{name}.sql"));
    std::fs::write(
        &file,
        format!(
            "SET 'execution.checkpointing.interval' = '200 ms';
             SET 'execution.checkpointing.dir' = '{ckpt}';
             SET 'pipeline.name' = '{name}';
             SET 'parallelism.default' = '{parallelism}';
             SET 'table.local-time-zone' = 'UTC';
             {source};
             CREATE TABLE `out` ({columns})
             WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv');
             INSERT INTO `out` {query};",
            ckpt = dir.join("checkpoints").display(),
            out = out.display(),
        ),
    )
    .unwrap();
    file.display().to_string()
}

fn weir(file: &str, restore: Option<&Path>) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
    command
        .arg("run")
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(path) = restore {
        command.arg("--restore").arg(path);
    }
    command
}

/// Every line of the committed part files under `dir`, sorted.
fn committed_rows(dir: &Path) -> Vec<String> {
    crate::part_file_lines(dir)
}

fn crash_three_times_then_finish(name: &str, parallelism: usize, source: &str, columns: &str, query: &str) {
    let seed: u64 = std::env::var("WEIR_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let context = format!("{name} at parallelism {parallelism}, WEIR_TEST_SEED={seed}");

    let clean_out = dir.path().join("clean");
    let clean = job_file(
        dir.path(),
        &format!("{name}-clean"),
        &clean_out,
        parallelism,
        source,
        columns,
        query,
    );
    let status = weir(&clean, None).status().unwrap();
    assert!(status.success(), "clean run failed: {context}");
    let expected = committed_rows(&clean_out);
    assert!(!expected.is_empty(), "{context}");

    let out = dir.path().join("out");
    let file = job_file(dir.path(), name, &out, parallelism, source, columns, query);
    let job_dir = dir.path().join("checkpoints").join(name);
    for attempt in 0..3 {
        let restore = (attempt > 0).then_some(job_dir.as_path());
        let mut child = weir(&file, restore).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(rng.random_range(300..1500)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }
    let output = weir(&file, Some(&job_dir)).output().unwrap();
    assert!(
        output.status.success(),
        "the restored run failed: {context}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let got = committed_rows(&out);
    assert_eq!(got.len(), expected.len(), "row count after crashes: {context}");
    assert!(got == expected, "rows differ after crashes: {context}");
}

#[test]
fn a_tumbling_aggregation_killed_three_times_writes_exactly_the_rows_of_a_clean_run() {
    for parallelism in [1, 4] {
        crash_three_times_then_finish(
            "tumble",
            parallelism,
            SEQUENCE,
            "k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT",
            "SELECT id % 7, window_start, COUNT(*), SUM(id)
             FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '10' SECOND))
             GROUP BY id % 7, window_start, window_end",
        );
    }
}

#[test]
fn a_hopping_aggregation_killed_three_times_writes_exactly_the_rows_of_a_clean_run() {
    for parallelism in [1, 4] {
        crash_three_times_then_finish(
            "hop",
            parallelism,
            SEQUENCE,
            "k BIGINT, we TIMESTAMP(3), c BIGINT, m BIGINT",
            "SELECT id % 5, window_end, COUNT(*), MAX(id)
             FROM TABLE(HOP(TABLE seq, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
             GROUP BY id % 5, window_start, window_end",
        );
    }
}

#[test]
fn a_filter_killed_three_times_writes_exactly_the_rows_of_a_clean_run() {
    for parallelism in [1, 4] {
        crash_three_times_then_finish(
            "filter",
            parallelism,
            SEQUENCE,
            "id BIGINT, ts TIMESTAMP(3)",
            "SELECT id, CAST(ts AS TIMESTAMP(3)) FROM seq WHERE id % 3 = 0",
        );
    }
}

#[test]
fn a_nexmark_aggregation_killed_three_times_writes_exactly_the_rows_of_a_clean_run() {
    for parallelism in [1, 4] {
        crash_three_times_then_finish(
            "nexmark",
            parallelism,
            &nexmark(),
            "auction BIGINT, we TIMESTAMP(3), c BIGINT, m BIGINT",
            "SELECT auction, window_end, COUNT(*), MAX(price)
             FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '1' SECOND))
             GROUP BY auction, window_start, window_end",
        );
    }
}
