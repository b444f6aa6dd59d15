//! A JobManager and TaskManager processes on loopback: a job submitted with `weir run --jobmanager` runs its subtasks on two TaskManagers (channels between them over Arrow Flight) and writes the rows of a run in one process; a TaskManager killed with SIGKILL fails the job rather than hanging it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// A `weir` process whose standard error is read line by line; killed when dropped.
struct Process {
    child: Child,
    lines: Receiver<String>,
}

impl Process {
    fn start(args: &[&str]) -> Process {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (send, lines) = channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        Process { child, lines }
    }

    /// The first line that holds `text`, waiting up to 60 s.
    fn wait_for(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(text) => return line,
                Ok(_) => {}
                Err(e) => panic!("no line with {text:?}: {e}"),
            }
        }
        panic!("no line with {text:?} within 60 s")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A JobManager (heartbeats every second, lost after 3 s) and two
/// TaskManagers of one slot each, registered.
fn cluster() -> (Process, String, Vec<Process>) {
    cluster_of(2)
}

/// A JobManager and `n` TaskManagers of one slot each, registered one
/// after the other (so the first two registered take a job of parallelism 2).
fn cluster_of(n: usize) -> (Process, String, Vec<Process>) {
    let jobmanager = Process::start(&[
        "jobmanager",
        "--port",
        "0",
        "--heartbeat-interval",
        "1s",
        "--heartbeat-timeout",
        "3s",
    ]);
    let line = jobmanager.wait_for("JobManager listening on");
    let address = line.rsplit(' ').next().unwrap().trim_end_matches('.').to_string();
    let task_managers: Vec<Process> = (0..n)
        .map(|_| {
            let task_manager = Process::start(&["taskmanager", "--jobmanager", &address, "--slots", "1"]);
            jobmanager.wait_for(&format!("TaskManager tm-{}-", task_manager.child.id()));
            task_manager
        })
        .collect();
    (jobmanager, address, task_managers)
}

/// A tumbling aggregation at parallelism 2 of `rows` sequence rows at
/// `rate` rows/s into CSV files under `<dir>/<name>`.
fn script(dir: &Path, name: &str, rows: u64, rate: u64) -> std::path::PathBuf {
    script_with(dir, name, rows, rate, "")
}

/// [`script`] after the statements `head`.
fn script_with(dir: &Path, name: &str, rows: u64, rate: u64, head: &str) -> std::path::PathBuf {
    let out = dir.join(name);
    let sql = format!(
        "{head}
         SET 'parallelism.default' = '2';
         CREATE TABLE seq (id BIGINT, name AS CAST(id % 13 AS STRING),
             ts AS TO_TIMESTAMP_LTZ(id * 10, 3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
           WITH ('connector' = 'datagen', 'rows-per-second' = '{rate}',
                 'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '{}');
         CREATE TABLE `out` (k STRING, ws TIMESTAMP(3), c BIGINT, s BIGINT)
           WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         INSERT INTO `out` SELECT name, window_start, COUNT(*), SUM(id)
           FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '10' SECOND))
           GROUP BY name, window_start, window_end;",
        rows - 1,
        out.display()
    );
    let path = dir.join(format!("{name}.sql"));
    std::fs::write(&path, sql).unwrap();
    path
}

fn weir(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_job_submitted_to_a_job_manager_runs_on_two_task_managers_and_writes_the_rows_of_a_local_run() {
    let dir = tempfile::tempdir().unwrap();
    let (jobmanager, address, _task_managers) = cluster();
    let remote = script(dir.path(), "remote", 200_000, 400_000);
    let output = weir(&["run", "--jobmanager", &address, remote.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("ended: Finished"), "{stderr}");
    jobmanager.wait_for("deployed on 2 TaskManager(s)");

    let local = script(dir.path(), "local", 200_000, 400_000);
    let output = weir(&["run", local.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows = crate::part_file_lines(&dir.path().join("remote"));
    assert!(!rows.is_empty());
    assert_eq!(rows, crate::part_file_lines(&dir.path().join("local")));
}

#[test]
fn a_task_manager_killed_mid_job_fails_the_job_instead_of_hanging_it() {
    let dir = tempfile::tempdir().unwrap();
    let (jobmanager, address, mut task_managers) = cluster();
    // 10M rows at 50k rows/s: far longer than the test.
    let job = script(dir.path(), "out", 10_000_000, 50_000);
    let client = Process::start(&["run", "--jobmanager", &address, job.to_str().unwrap()]);
    jobmanager.wait_for("deployed on 2 TaskManager(s)");
    std::thread::sleep(Duration::from_millis(500));
    let mut victim = task_managers.pop().unwrap();
    victim.child.kill().unwrap(); // SIGKILL
    let failed = client.wait_for("failed");
    assert!(failed.contains("Job"), "{failed}");
    jobmanager.wait_for("lost: no heartbeat for 3s");
}

#[test]
fn a_checkpointed_job_whose_task_manager_is_killed_restarts_on_a_spare_one_from_its_last_checkpoint_and_writes_each_row_once()
 {
    let dir = tempfile::tempdir().unwrap();
    let (jobmanager, address, mut task_managers) = cluster_of(3);
    let checkpoints = format!(
        "SET 'execution.checkpointing.interval' = '300 ms';
         SET 'execution.checkpointing.dir' = '{}';",
        dir.path().join("checkpoints").display()
    );
    // 800k rows at 100k rows/s: about 8 s.
    let job = script_with(dir.path(), "remote", 800_000, 100_000, &checkpoints);
    let client = Process::start(&["run", "--jobmanager", &address, job.to_str().unwrap()]);
    jobmanager.wait_for("attempt 0 deployed on 2 TaskManager(s)");
    jobmanager.wait_for("Checkpoint 3 of job");
    // The first TaskManager registered runs a part; the third is spare.
    let mut victim = task_managers.remove(0);
    victim.child.kill().unwrap(); // SIGKILL
    let restored = jobmanager.wait_for("restores");
    assert!(restored.contains("chk-"), "{restored}");
    jobmanager.wait_for("deployed on 2 TaskManager(s)");
    let ended = client.wait_for("ended:");
    assert!(ended.contains("Finished"), "{ended}");

    let local = script_with(dir.path(), "local", 800_000, 1_000_000, &checkpoints);
    let output = weir(&["run", local.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows = crate::part_file_lines(&dir.path().join("remote"));
    assert_eq!(
        rows.len(),
        crate::part_file_lines(&dir.path().join("local")).len()
    );
    assert_eq!(
        rows,
        crate::part_file_lines(&dir.path().join("local")),
        "each row once"
    );
}
