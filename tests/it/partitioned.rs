//! Partitioned filesystem sinks: directory layout, part-file contents, success files.

use std::path::Path;
use std::time::{Duration, Instant};

use weir::JobStatus;

use crate::engine;

/// One row per 100 ms of event time; `end` bounds the ids (inclusive).
fn sequence(rows_per_second: u64, end: i64) -> String {
    format!(
        "CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 100, 3),
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
         WITH ('connector' = 'datagen', 'rows-per-second' = '{rows_per_second}',
               'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '{end}')"
    )
}

fn by_minute(path: &Path, delay: &str) -> String {
    format!(
        "CREATE TABLE by_minute (id BIGINT, dt STRING, hm STRING) PARTITIONED BY (dt, hm) WITH (
           'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv',
           'sink.partition-commit.trigger' = 'partition-time',
           'sink.partition-commit.delay' = '{delay}',
           'sink.partition-commit.policy.kind' = 'success-file',
           'partition.time-extractor.timestamp-pattern' = '$dt $hm:00')",
        path.display()
    )
}

const INSERT: &str = "INSERT INTO by_minute
    SELECT id, DATE_FORMAT(ts, 'yyyy-MM-dd'), DATE_FORMAT(ts, 'HH:mm') FROM seq";

/// The lines of the visible part files of one partition directory, sorted.
fn partition_lines(dir: &Path) -> Vec<String> {
    let mut files = crate::part_files(dir);
    files.retain(|p| p.file_name().unwrap() != "_SUCCESS");
    crate::file_lines(&files)
}

#[test]
fn rows_land_in_escaped_partition_directories_without_their_partition_columns() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(2);
    // Three minutes of event time: ids 0..=1799.
    engine.sql(&sequence(100_000_000, 1799)).unwrap();
    engine.sql(&by_minute(dir.path(), "1 min")).unwrap();
    let job = engine.sql(INSERT).unwrap().job().unwrap().clone();
    assert_eq!(job.wait().unwrap(), JobStatus::Finished);

    let day = dir.path().join("dt=1970-01-01");
    let mut minutes: Vec<String> = std::fs::read_dir(&day)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    minutes.sort();
    assert_eq!(minutes, vec!["hm=00%3A00", "hm=00%3A01", "hm=00%3A02"]);
    for (minute, name) in minutes.iter().enumerate() {
        let partition = day.join(name);
        assert!(
            partition.join("_SUCCESS").is_file(),
            "{name} committed at end of input"
        );
        let mut ids: Vec<i64> = partition_lines(&partition)
            .iter()
            .map(|line| {
                assert!(!line.contains(','), "only the id column is stored: {line}");
                line.parse().unwrap()
            })
            .collect();
        ids.sort();
        let first = minute as i64 * 600;
        assert_eq!(ids, (first..first + 600).collect::<Vec<_>>(), "{name}");
    }
}

#[test]
fn a_partition_is_committed_once_the_watermark_passes_its_time_plus_delay() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(2);
    // 2000 rows per second: a minute of event time passes every 0.3 s.
    engine.sql(&sequence(2000, i64::MAX - 1)).unwrap();
    // A partition's time is its start: a delay of one partition (1 min) waits for its end.
    engine.sql(&by_minute(dir.path(), "1 min")).unwrap();
    let job = engine.sql(INSERT).unwrap().job().unwrap().clone();
    let first = dir.path().join("dt=1970-01-01/hm=00%3A00");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !first.join("_SUCCESS").exists() {
        assert!(Instant::now() < deadline, "the first minute was not committed");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The job is still running; the committed partition is complete.
    assert_eq!(job.status(), JobStatus::Running);
    let mut ids: Vec<i64> = partition_lines(&first)
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, (0..600).collect::<Vec<_>>());
    job.cancel();
    assert_eq!(
        job.wait_timeout(Duration::from_secs(20)).unwrap(),
        JobStatus::Cancelled
    );
}

#[test]
fn killed_and_restored_three_times_every_partition_gets_its_rows_and_its_success_file() {
    let seed: u64 = crate::test_seed();
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let file = dir.path().join("job.sql");
    // Fifteen minutes of event time at 6000 rows/s: about 1.5 s of work.
    std::fs::write(
        &file,
        format!(
            "SET 'execution.checkpointing.interval' = '100 ms';
             SET 'execution.checkpointing.dir' = '{}';
             SET 'pipeline.name' = 'partitions';
             SET 'parallelism.default' = '2';
             SET 'table.local-time-zone' = 'UTC';
             {};
             {};
             {INSERT};",
            dir.path().join("checkpoints").display(),
            sequence(6000, 8999),
            by_minute(&out, "0 s"),
        ),
    )
    .unwrap();
    let job_dir = dir.path().join("checkpoints").join("partitions");
    let weir = |restore: bool| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_weir"));
        command
            .arg("run")
            .arg(&file)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if restore {
            command.arg("--restore").arg(&job_dir);
        }
        command
    };
    for attempt in 0..3 {
        let mut child = weir(attempt > 0).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(rand::Rng::random_range(
            &mut rng,
            300..1200,
        )));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }
    let last = weir(true).output().unwrap();
    assert!(last.status.success(), "{}", String::from_utf8_lossy(&last.stderr));
    let day = out.join("dt=1970-01-01");
    for minute in 0..15 {
        let partition = day.join(format!("hm=00%3A{minute:02}"));
        assert!(
            partition.join("_SUCCESS").is_file(),
            "minute {minute} has no success file (WEIR_TEST_SEED={seed})"
        );
        let mut ids: Vec<i64> = partition_lines(&partition)
            .iter()
            .map(|l| l.parse().unwrap())
            .collect();
        ids.sort();
        let first = minute * 600;
        assert_eq!(
            ids,
            (first..first + 600).collect::<Vec<_>>(),
            "minute {minute} (WEIR_TEST_SEED={seed})"
        );
    }
}
