//! Savepoints: taken through the job handle, `STOP JOB ... WITH SAVEPOINT`,
//! and SIGTERM / Ctrl-C to `weir run`; a job stopped with one and restored
//! from it writes exactly the rows of a run that never stopped.

use std::path::Path;
use std::time::Duration;

use weir::JobStatus;

/// 300k rows at 100k rows/s: about 3 s.
const SOURCE: &str = "CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
    WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
  WITH ('connector' = 'datagen', 'rows-per-second' = '100000',
        'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '299999')";

const QUERY: &str = "INSERT INTO `out` SELECT id % 7, window_start, COUNT(*), SUM(id)
    FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '10' SECOND))
    GROUP BY id % 7, window_start, window_end";

/// Starts the job at `parallelism` writing into `out`, with savepoints (and
/// nothing else) under `dir`, restored from `restore` if given.
fn start(dir: &Path, out: &Path, parallelism: usize, restore: Option<&Path>) -> weir::JobHandle {
    start_with(dir, out, parallelism, restore, &[])
}

/// [`start`] with more settings.
fn start_with(
    dir: &Path,
    out: &Path,
    parallelism: usize,
    restore: Option<&Path>,
    settings: &[(&str, &str)],
) -> weir::JobHandle {
    let engine = crate::engine(parallelism);
    for (key, value) in settings {
        engine.set(key, value).unwrap();
    }
    engine.set("pipeline.name", "sp").unwrap();
    engine
        .set(
            "execution.checkpointing.savepoint-dir",
            &dir.join("savepoints").display().to_string(),
        )
        .unwrap();
    if let Some(path) = restore {
        engine
            .set("execution.savepoint.path", &path.display().to_string())
            .unwrap();
    }
    engine.sql(SOURCE).unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE `out` (k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT)
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            out.display()
        ))
        .unwrap();
    engine.sql(QUERY).unwrap().job().unwrap().clone()
}

fn clean_rows(dir: &Path) -> Vec<String> {
    let out = dir.join("clean");
    let engine = crate::engine(2);
    engine.sql(SOURCE).unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE `out` (k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT)
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            out.display()
        ))
        .unwrap();
    let job = engine.sql(QUERY).unwrap().job().unwrap().clone();
    assert_eq!(job.wait().unwrap(), JobStatus::Finished);
    crate::part_file_lines(&out)
}

#[test]
fn a_job_stopped_with_a_savepoint_and_restored_from_it_writes_exactly_the_rows_of_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let expected = clean_rows(dir.path());
    let out = dir.path().join("out");

    let job = start(dir.path(), &out, 2, None);
    std::thread::sleep(Duration::from_millis(1200));
    let savepoint = job.stop_with_savepoint().unwrap();
    assert_eq!(job.status(), JobStatus::Finished);
    assert!(
        savepoint.starts_with(dir.path().join("savepoints"))
            && savepoint
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("savepoint-sp-"),
        "{}",
        savepoint.display()
    );
    assert!(savepoint.join("_metadata").is_file());
    let before = crate::part_file_lines(&out);
    assert!(
        before.len() < expected.len(),
        "the job was stopped early: {} rows",
        before.len()
    );

    let resumed = start(dir.path(), &out, 2, Some(&savepoint));
    assert_eq!(resumed.wait().unwrap(), JobStatus::Finished);
    assert_eq!(crate::part_file_lines(&out), expected);
    // A savepoint is the user's: weir keeps it.
    assert!(savepoint.join("_metadata").is_file());
}

#[test]
fn stopping_with_savepoints_and_resuming_at_4_then_1_then_2_then_3_subtasks_writes_exactly_the_rows_of_an_uninterrupted_run()
 {
    // At parallelism 1 the aggregation is chained into the source's vertex
    // and planned in one phase: state is found by operator id, not vertex.
    let dir = tempfile::tempdir().unwrap();
    let expected = clean_rows(dir.path());
    let out = dir.path().join("out");
    let mut restore = None;
    for parallelism in [4, 1, 2] {
        let job = start(dir.path(), &out, parallelism, restore.as_deref());
        std::thread::sleep(Duration::from_millis(500));
        restore = Some(job.stop_with_savepoint().unwrap());
    }
    let job = start(dir.path(), &out, 3, restore.as_deref());
    assert!(
        job.notes().iter().any(|n| n.contains("from 2 to 3")),
        "{:?}",
        job.notes()
    );
    assert_eq!(job.wait().unwrap(), JobStatus::Finished);
    assert_eq!(crate::part_file_lines(&out), expected);
}

#[test]
fn a_savepoint_restored_with_another_max_parallelism_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let job = start(dir.path(), &out, 2, None);
    std::thread::sleep(Duration::from_millis(200));
    let savepoint = job.stop_with_savepoint().unwrap();
    let engine = crate::engine(2);
    engine.set("pipeline.max-parallelism", "256").unwrap();
    engine
        .set("execution.savepoint.path", &savepoint.display().to_string())
        .unwrap();
    engine.sql(SOURCE).unwrap();
    engine
        .sql("CREATE TABLE `out` (k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT) WITH ('connector' = 'blackhole')")
        .unwrap();
    let err = engine.sql(QUERY).unwrap_err().to_string();
    assert!(err.contains("the max parallelism cannot change"), "{err}");
}

#[test]
fn a_savepoint_restored_into_a_query_with_other_keys_or_aggregates_is_refused_naming_the_operator() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let job = start(dir.path(), &out, 2, None);
    std::thread::sleep(Duration::from_millis(300));
    let savepoint = job.stop_with_savepoint().unwrap();
    for changed in [
        QUERY.replace("id % 7", "id % 5"),
        QUERY.replace("SUM(id)", "MAX(id)"),
    ] {
        let engine = crate::engine(2);
        engine
            .set("execution.savepoint.path", &savepoint.display().to_string())
            .unwrap();
        engine.sql(SOURCE).unwrap();
        engine
            .sql("CREATE TABLE `out` (k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT) WITH ('connector' = 'blackhole')")
            .unwrap();
        let err = engine.sql(&changed).unwrap_err().to_string();
        assert!(
            err.contains("the state of operator '") && err.contains("does not match this query"),
            "{changed}: {err}"
        );
        assert!(err.contains("WindowAggregate"), "names the operator: {err}");
    }
    // The same query restores.
    let job = start(dir.path(), &dir.path().join("again"), 2, Some(&savepoint));
    job.cancel();
}

#[test]
fn a_savepoint_whose_state_the_query_has_no_operator_for_is_refused_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let job = start(dir.path(), &dir.path().join("out"), 2, None);
    std::thread::sleep(Duration::from_millis(300));
    let savepoint = job.stop_with_savepoint().unwrap();
    let engine = crate::engine(2);
    engine
        .set("execution.savepoint.path", &savepoint.display().to_string())
        .unwrap();
    engine.sql(SOURCE).unwrap();
    engine
        .sql("CREATE TABLE `out` (k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT) WITH ('connector' = 'blackhole')")
        .unwrap();
    let err = engine
        .sql("INSERT INTO `out` SELECT id AS k, CAST(ts AS TIMESTAMP(3)) AS ws, 1 AS c, id AS s FROM seq")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("'WindowAggregate-0', which this job does not have"),
        "{err}"
    );
}

#[test]
fn with_unaligned_checkpoints_a_savepoint_is_aligned_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let expected = clean_rows(dir.path());
    let out = dir.path().join("out");
    let checkpoints = dir.path().join("checkpoints").display().to_string();
    let settings = [
        ("execution.checkpointing.interval", "100 ms"),
        ("execution.checkpointing.dir", checkpoints.as_str()),
        ("execution.checkpointing.unaligned.enabled", "true"),
    ];
    let job = start_with(dir.path(), &out, 2, None, &settings);
    std::thread::sleep(Duration::from_millis(800));
    let savepoint = job.stop_with_savepoint().unwrap();
    let metadata = std::fs::read_to_string(savepoint.join("_metadata")).unwrap();
    assert!(
        !metadata.contains("channel_state"),
        "savepoints hold no in-flight records"
    );
    let resumed = start_with(dir.path(), &out, 3, Some(&savepoint), &settings);
    assert_eq!(resumed.wait().unwrap(), JobStatus::Finished);
    assert_eq!(crate::part_file_lines(&out), expected);
}

#[test]
fn savepoints_taken_while_running_leave_the_job_running_and_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let job = start(dir.path(), &out, 1, None);
    std::thread::sleep(Duration::from_millis(300));
    let first = job.trigger_savepoint().unwrap();
    let second = job.trigger_savepoint().unwrap();
    assert_ne!(first, second);
    assert_eq!(job.status(), JobStatus::Running);
    assert_eq!(job.wait().unwrap(), JobStatus::Finished);
    for savepoint in [first, second] {
        let metadata = std::fs::read_to_string(savepoint.join("_metadata")).unwrap();
        assert!(metadata.contains("\"Savepoint\""), "{metadata}");
    }
}

#[test]
fn a_savepoint_without_a_directory_is_a_clear_error() {
    let engine = crate::engine(1);
    engine.sql(SOURCE).unwrap();
    engine
        .sql("CREATE TABLE `out` (k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT) WITH ('connector' = 'blackhole')")
        .unwrap();
    let job = engine.sql(QUERY).unwrap().job().unwrap().clone();
    let err = job.stop_with_savepoint().unwrap_err().to_string();
    assert!(err.contains("execution.checkpointing.savepoint-dir"), "{err}");
    assert_eq!(job.status(), JobStatus::Running);
    job.cancel();
}

#[test]
fn stop_job_with_savepoint_returns_the_path_as_flinks_sql_client_does() {
    let dir = tempfile::tempdir().unwrap();
    let engine = crate::engine(1);
    engine
        .set(
            "execution.checkpointing.savepoint-dir",
            &dir.path().display().to_string(),
        )
        .unwrap();
    engine.sql(SOURCE).unwrap();
    engine
        .sql("CREATE TABLE `out` (k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT) WITH ('connector' = 'blackhole')")
        .unwrap();
    let job = engine.sql(QUERY).unwrap().job().unwrap().clone();
    std::thread::sleep(Duration::from_millis(200));
    let result = engine
        .sql(&format!("STOP JOB '{}' WITH SAVEPOINT", job.id()))
        .unwrap();
    let rows = crate::sorted_rows(&result.collect().unwrap());
    assert_eq!(rows.len(), 1);
    assert!(Path::new(&rows[0]).join("_metadata").is_file(), "{rows:?}");
    assert_eq!(job.status(), JobStatus::Finished);
    let err = engine
        .sql(&format!("STOP JOB '{}' WITH DRAIN", job.id()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("WITH DRAIN is not supported"), "{err}");
}

fn job_file(dir: &Path, out: &Path) -> std::path::PathBuf {
    let file = dir.join("job.sql");
    std::fs::write(
        &file,
        format!(
            "SET 'pipeline.name' = 'cli';
             SET 'parallelism.default' = '2';
             SET 'table.local-time-zone' = 'UTC';
             SET 'execution.checkpointing.savepoint-dir' = '{savepoints}';
             {SOURCE};
             CREATE TABLE `out` (k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT)
             WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv');
             {QUERY};",
            savepoints = dir.join("savepoints").display(),
            out = out.display(),
        ),
    )
    .unwrap();
    file
}

fn signal(child: &std::process::Child, name: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn sigterm_to_weir_run_stops_with_a_savepoint_that_run_restore_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let expected = clean_rows(dir.path());
    let out = dir.path().join("out");
    let file = job_file(dir.path(), &out);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .arg(&file)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    signal(&child, "TERM");
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let path = stderr
        .lines()
        .find_map(|l| {
            l.split_once("stopped with a savepoint: ")
                .map(|(_, p)| p.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no savepoint path printed: {stderr}"));
    assert!(
        crate::part_file_lines(&out).len() < expected.len(),
        "stopped early"
    );

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .arg(&file)
        .arg("--restore")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains(&path), "the restore is reported: {stderr}");
    assert_eq!(crate::part_file_lines(&out), expected);
}

#[test]
fn a_second_interrupt_exits_at_once_with_status_130() {
    // A source reading a FIFO nobody writes to blocks in open(): the
    // savepoint the first interrupt asks for can never complete.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input");
    std::fs::create_dir(&input).unwrap();
    let fifo = input.join("rows.csv");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let file = dir.path().join("job.sql");
    std::fs::write(
        &file,
        format!(
            "SET 'execution.checkpointing.savepoint-dir' = '{}';
             CREATE TABLE t (a BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
             CREATE TABLE sink (a BIGINT) WITH ('connector' = 'blackhole');
             INSERT INTO sink SELECT a FROM t;",
            dir.path().join("savepoints").display(),
            input.display()
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("run")
        .arg(&file)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, "INT");
    // Wait until the first interrupt is being handled.
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("Stopping with a savepoint") {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut stderr, &mut line).unwrap() == 0 {
            break;
        }
        seen.push_str(&line);
    }
    assert!(child.try_wait().unwrap().is_none(), "still running: {seen}");
    signal(&child, "INT");
    std::io::Read::read_to_string(&mut stderr, &mut seen).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{seen}");
    assert!(seen.contains("without a savepoint"), "{seen}");
}
