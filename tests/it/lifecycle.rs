//! Job lifecycle beyond the happy path: reruns into a checkpoint directory
//! that holds checkpoints, twin jobs with one name, a sink restored beside
//! another writer's files, failovers racing slow snapshot writers,
//! checkpoints after some tasks finish, savepoints with finished tasks, and
//! failures that must not commit (failpoints are named per job, so the
//! tests of this binary running beside them are untouched).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weir::JobStatus;

/// 300k rows at 100k rows/s: about 3 s.
const SOURCE: &str = "CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
    WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
  WITH ('connector' = 'datagen', 'rows-per-second' = '100000',
        'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '299999')";

const COLUMNS: &str = "k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT";

const QUERY: &str = "SELECT id % 7, window_start, COUNT(*), SUM(id)
    FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '1' SECOND))
    GROUP BY id % 7, window_start, window_end";

/// A `weir run` file: the tumbling job with 200 ms checkpoints under `dir`,
/// named `name`, at `parallelism`, into `out`.
fn job_file(dir: &Path, name: &str, parallelism: usize, out: &Path) -> PathBuf {
    let file = dir.join(format!("{name}-{parallelism}.sql"));
    std::fs::write(
        &file,
        format!(
            "SET 'execution.checkpointing.interval' = '200 ms';
             SET 'execution.checkpointing.dir' = '{ckpt}';
             SET 'pipeline.name' = '{name}';
             SET 'parallelism.default' = '{parallelism}';
             SET 'table.local-time-zone' = 'UTC';
             {SOURCE};
             CREATE TABLE `out` ({COLUMNS}) WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = 'csv');
             INSERT INTO `out` {QUERY};",
            ckpt = dir.join("checkpoints").display(),
            out = out.display(),
        ),
    )
    .unwrap();
    file
}

fn weir_run(file: &Path, restore: Option<&Path>) -> Command {
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

/// The rows of the job run once, without checkpoints, in this process.
fn clean_rows(dir: &Path) -> Vec<String> {
    let out = dir.join("clean");
    let engine = crate::engine(2);
    engine.sql(SOURCE).unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE `out` ({COLUMNS}) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            out.display()
        ))
        .unwrap();
    let job = engine
        .sql(&format!("INSERT INTO `out` {QUERY}"))
        .unwrap()
        .job()
        .unwrap()
        .clone();
    assert_eq!(job.wait().unwrap(), JobStatus::Finished);
    crate::part_file_lines(&out)
}

/// Waits until some complete checkpoint exists under `dir` (any run).
fn wait_for_a_checkpoint(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let found = walk(dir).iter().any(|p| p.ends_with("_metadata"));
        if found {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no checkpoint under {} within a minute", dir.display());
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn a_rerun_into_a_used_checkpoint_directory_keeps_both_runs_checkpoints_and_restore_resumes_the_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let expected = clean_rows(dir.path());
    let out = dir.path().join("out");
    let file = job_file(dir.path(), "rerun", 2, &out);
    let job_dir = dir.path().join("checkpoints").join("rerun");

    // The first run ends; its final checkpoint stays.
    let first = weir_run(&file, None).output().unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let first_runs: Vec<PathBuf> = std::fs::read_dir(&job_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(first_runs.len(), 1, "{first_runs:?}");

    // The second run is killed once it has checkpoints of its own.
    let mut second = weir_run(&file, None).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let second_run = loop {
        let runs: Vec<PathBuf> = std::fs::read_dir(&job_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| !first_runs.contains(p))
            .collect();
        if let Some(run) = runs.first()
            && walk(run).iter().any(|p| p.ends_with("_metadata"))
        {
            break run.clone();
        }
        assert!(Instant::now() < deadline, "the second run made no checkpoint");
        std::thread::sleep(Duration::from_millis(10));
    };
    second.kill().unwrap(); // SIGKILL
    second.wait().unwrap();
    assert!(
        walk(&first_runs[0]).iter().any(|p| p.ends_with("_metadata")),
        "the second run deleted the first run's checkpoint"
    );

    // Restoring the job directory resumes the second run, and says so.
    let restored = weir_run(&file, Some(&job_dir)).output().unwrap();
    let stderr = String::from_utf8_lossy(&restored.stderr);
    assert!(restored.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("from {}", second_run.display()))
            && stderr.contains("most recently completed"),
        "{stderr}"
    );
    // Both runs wrote into `out`: every row of the job twice, none lost.
    let mut twice: Vec<String> = expected.iter().flat_map(|r| [r.clone(), r.clone()]).collect();
    twice.sort();
    assert_eq!(crate::part_file_lines(&out), twice);
}

#[test]
fn two_jobs_with_one_name_in_one_process_keep_their_own_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let expected = clean_rows(dir.path());
    let engine = crate::engine(2);
    for (key, value) in [
        ("execution.checkpointing.interval", "100 ms"),
        (
            "execution.checkpointing.dir",
            &dir.path().join("checkpoints").display().to_string(),
        ),
        ("pipeline.name", "twin"),
    ] {
        engine.set(key, value).unwrap();
    }
    engine.sql(SOURCE).unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE `out` ({COLUMNS}) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            dir.path().join("out").display()
        ))
        .unwrap();
    // Two INSERTs into one table, with one name.
    let jobs: Vec<weir::JobHandle> = (0..2)
        .map(|_| {
            engine
                .sql(&format!("INSERT INTO `out` {QUERY}"))
                .unwrap()
                .job()
                .unwrap()
                .clone()
        })
        .collect();
    assert_ne!(jobs[0].job_id(), jobs[1].job_id());
    for job in &jobs {
        assert_eq!(job.wait().unwrap(), JobStatus::Finished);
    }
    for job in &jobs {
        let last = job.completed_checkpoints().pop().expect("a final checkpoint");
        assert!(
            last.dir.starts_with(
                dir.path()
                    .join("checkpoints")
                    .join("twin")
                    .join(job.job_id().as_str())
            ),
            "{}",
            last.dir.display()
        );
        assert!(
            last.dir.join("_metadata").is_file(),
            "{} was deleted",
            last.dir.display()
        );
    }
    let mut twice: Vec<String> = expected.iter().flat_map(|r| [r.clone(), r.clone()]).collect();
    twice.sort();
    assert_eq!(crate::part_file_lines(&dir.path().join("out")), twice);
}

#[test]
fn a_restored_sink_leaves_another_writers_in_progress_files_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    // Another job writes into the same directory: its hidden files, subtask 0.
    let theirs = [
        out.join(
            ".part-8f7e2f1c-1c1d-4f0e-9a51-0c6f8d3b2a10-0-0.inprogress.0196a0b1c2d3e4f5a6b7c8d9e0f1a2b3-0",
        ),
        out.join(
            ".part-8f7e2f1c-1c1d-4f0e-9a51-0c6f8d3b2a10-0-1.inprogress.5e1f6a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b",
        ),
    ];
    for file in &theirs {
        std::fs::write(file, "1,2\n").unwrap();
    }
    let file = job_file(dir.path(), "beside", 1, &out);
    let job_dir = dir.path().join("checkpoints").join("beside");
    let mut child = weir_run(&file, None).spawn().unwrap();
    wait_for_a_checkpoint(&job_dir);
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let restored = weir_run(&file, Some(&job_dir)).output().unwrap();
    assert!(
        restored.status.success(),
        "{}",
        String::from_utf8_lossy(&restored.stderr)
    );
    for file in &theirs {
        assert!(file.is_file(), "the restore deleted {}", file.display());
    }
}

#[test]
fn a_savepoint_rescaled_2_3_1_with_sigterm_stops_between_writes_exactly_the_rows_of_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let expected = clean_rows(dir.path());
    let out = dir.path().join("out");
    let mut restore: Option<PathBuf> = None;
    // At 3 subtasks the datagen's 2 splits leave one subtask nothing to read:
    // it finishes at once, and the stop must still take a savepoint.
    for parallelism in [2, 3] {
        let file = job_file(dir.path(), "rescaled", parallelism, &out);
        let child = weir_run(&file, restore.as_deref()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(700));
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "stop at parallelism {parallelism}: {stderr}"
        );
        let path = stderr
            .lines()
            .find_map(|l| {
                l.split_once("stopped with a savepoint: ")
                    .map(|(_, p)| p.trim().to_string())
            })
            .unwrap_or_else(|| panic!("no savepoint at parallelism {parallelism}: {stderr}"));
        restore = Some(PathBuf::from(path));
    }
    let file = job_file(dir.path(), "rescaled", 1, &out);
    let last = weir_run(&file, restore.as_deref()).output().unwrap();
    assert!(last.status.success(), "{}", String::from_utf8_lossy(&last.stderr));
    assert_eq!(crate::part_file_lines(&out), expected);
}

#[test]
fn with_one_file_read_by_four_subtasks_beside_an_endless_source_checkpoints_go_on_and_the_file_rows_become_visible()
 {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("rows.csv");
    let rows: String = (0..1000).map(|i| format!("{i}\n")).collect();
    std::fs::write(&csv, rows).unwrap();
    let out = dir.path().join("out");
    let engine = crate::engine(4);
    for (key, value) in [
        ("execution.checkpointing.interval", "200 ms"),
        (
            "execution.checkpointing.dir",
            &dir.path().join("checkpoints").display().to_string(),
        ),
    ] {
        engine.set(key, value).unwrap();
    }
    engine
        .sql(&format!(
            "CREATE TABLE f (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            csv.display()
        ))
        .unwrap();
    engine
        .sql(
            "CREATE TABLE endless (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '10',
               'fields.id.kind' = 'random', 'fields.id.min' = '1000000', 'fields.id.max' = '2000000')",
        )
        .unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE `out` (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            out.display()
        ))
        .unwrap();
    let job = engine
        .sql("INSERT INTO `out` SELECT id FROM f UNION ALL SELECT id FROM endless")
        .unwrap()
        .job()
        .unwrap()
        .clone();
    // The file's rows are committed by a checkpoint taken after its reader
    // (and three subtasks without a split) finished.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let visible: Vec<i64> = crate::part_file_lines(&out)
            .iter()
            .map(|l| l.parse().unwrap())
            .filter(|id| *id < 1000)
            .collect();
        if visible.len() == 1000 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of the file's rows visible after a minute; {} checkpoints",
            visible.len(),
            job.completed_checkpoints().len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let done = job.completed_checkpoints().len();
    std::thread::sleep(Duration::from_millis(800));
    assert!(job.completed_checkpoints().len() > done, "checkpoints stopped");
    assert_eq!(job.status(), JobStatus::Running);
    job.cancel();
    assert_eq!(job.wait().unwrap(), JobStatus::Cancelled);
}

/// A bounded job named `name` (failpoints are named by job) with only the
/// final checkpoint (the interval is an hour), no restarts, into `out`.
fn bounded_job(dir: &Path, name: &str, out: &Path) -> weir::JobHandle {
    let engine = crate::engine(2);
    for (key, value) in [
        ("execution.checkpointing.interval", "1 h"),
        (
            "execution.checkpointing.dir",
            &dir.join("checkpoints").display().to_string(),
        ),
        ("pipeline.name", name),
        ("restart-strategy.type", "none"),
    ] {
        engine.set(key, value).unwrap();
    }
    engine
        .sql(
            "CREATE TABLE small (id BIGINT) WITH ('connector' = 'datagen',
               'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '1000')",
        )
        .unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE `out` (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            out.display()
        ))
        .unwrap();
    engine
        .sql("INSERT INTO `out` SELECT id FROM small")
        .unwrap()
        .job()
        .unwrap()
        .clone()
}

#[test]
fn a_failed_final_checkpoint_commits_nothing_and_fails_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    fail::cfg("checkpoint-persist/final-fails", "return").unwrap();
    let job = bounded_job(dir.path(), "final-fails", &out);
    let result = job.wait();
    let err = result.expect_err("the job must fail").to_string();
    assert!(err.contains("failpoint checkpoint-persist"), "{err}");
    assert!(
        crate::part_files(&out).is_empty(),
        "{:?}",
        crate::part_files(&out)
    );
}

#[test]
fn a_panic_in_the_checkpoint_coordinator_fails_the_job_and_nothing_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    fail::cfg(
        "coordinator-loop/coordinator-panics",
        "panic(coordinator failpoint)",
    )
    .unwrap();
    let job = bounded_job(dir.path(), "coordinator-panics", &out);
    let err = job.wait().expect_err("the job must fail").to_string();
    assert!(err.contains("coordinator panicked"), "{err}");
    assert!(
        crate::part_files(&out).is_empty(),
        "{:?}",
        crate::part_files(&out)
    );
}

#[test]
fn a_failover_racing_a_slow_snapshot_writer_starts_after_the_old_attempt_has_ended() {
    let dir = tempfile::tempdir().unwrap();
    let expected = clean_rows(dir.path());
    let out = dir.path().join("out");
    // Every snapshot write of this job takes 400 ms: checkpoints are in
    // flight when a task fails.
    fail::cfg("snapshot-write/slow-writer", "sleep(400)").unwrap();
    let engine = crate::engine(2);
    for (key, value) in [
        ("execution.checkpointing.interval", "100 ms"),
        ("execution.checkpointing.max-concurrent-checkpoints", "3"),
        (
            "execution.checkpointing.dir",
            &dir.path().join("checkpoints").display().to_string(),
        ),
        ("pipeline.name", "slow-writer"),
        ("restart-strategy.fixed-delay.delay", "10 ms"),
    ] {
        engine.set(key, value).unwrap();
    }
    engine.register_udf(crate::recovery::chaos_udf(vec![120_000, 240_000]));
    engine.sql(SOURCE).unwrap();
    engine
        .sql("CREATE VIEW checked AS SELECT chaos(id) AS id, ts FROM seq")
        .unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE `out` ({COLUMNS}) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            out.display()
        ))
        .unwrap();
    let job = engine
        .sql(&format!(
            "INSERT INTO `out` {}",
            QUERY.replace("TABLE seq", "TABLE checked")
        ))
        .unwrap()
        .job()
        .unwrap()
        .clone();
    assert_eq!(job.wait().unwrap(), JobStatus::Finished);
    assert!(job.restarts() >= 1, "no failover happened");
    // No checkpoint of a failed attempt completed after a later one started.
    let attempts: Vec<u32> = job.completed_checkpoints().iter().map(|c| c.attempt).collect();
    assert!(attempts.windows(2).all(|w| w[0] <= w[1]), "{attempts:?}");
    let ids: Vec<u64> = job.completed_checkpoints().iter().map(|c| c.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    // Each restart that restored a checkpoint names one the job completed.
    let restores = job.metrics().restores;
    assert!(restores.len() as u64 <= job.restarts(), "{restores:?}");
    assert!(
        (restores.iter()).all(|r| ids.contains(&r.id) && r.dir.ends_with(format!("chk-{}", r.id))),
        "{restores:?} of {ids:?}"
    );
    assert_eq!(crate::part_file_lines(&out), expected);
}
