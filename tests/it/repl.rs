//! The SQL shell driven through standard input and `-e`: output format
//! (golden files under tests/golden/; `WEIR_UPDATE_GOLDEN=1` rewrites them),
//! errors, exit status.

use std::io::Write;
use std::process::{Command, Stdio};

fn weir() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
    command.current_dir(env!("CARGO_MANIFEST_DIR"));
    command.env("TZ", "UTC");
    command
}

/// Runs `weir` with `script` on standard input: (status, stdout, stderr).
fn with_stdin(script: &str) -> (bool, String, String) {
    let mut child = weir()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Timings vary; everything else must not.
fn normalized(text: &str) -> String {
    let timing = regex::Regex::new(r"\(\d+\.\d+ s\)").unwrap();
    timing.replace_all(text, "(… s)").into_owned()
}

fn golden(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    let actual = normalized(actual);
    if std::env::var_os("WEIR_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|_| panic!("{} is missing; WEIR_UPDATE_GOLDEN=1 writes it", path.display()));
    assert_eq!(actual, expected, "output differs from {}", path.display());
}

const SCRIPT: &str = "-- a comment line
SET 'table.local-time-zone' = 'UTC';
CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH ('connector' = 'filesystem', 'path' = 'sql/data/bids.csv', 'format' = 'csv');
SHOW TABLES; DESCRIBE bids;
SELECT auction, window_start, COUNT(*) AS bids, MAX(price) AS top
FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end;
SELECT * FROM bids WHERE price > 1000;
";

#[test]
fn a_script_on_stdin_prints_tables_with_row_counts() {
    let (ok, stdout, stderr) = with_stdin(SCRIPT);
    assert!(ok, "{stderr}");
    golden("repl_script.txt", &stdout);
}

#[test]
fn dash_e_runs_statements_and_the_first_error_stops_with_a_caret_and_status_1() {
    let output = weir()
        .args([
            "-e",
            "SELECT 1 AS one; SELECT nope FROM (VALUES (1)) AS t(a); SELECT 2 AS two",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stdout.contains(" one |") && !stdout.contains("two"), "{stdout}");
    assert!(
        stderr.contains("[ERROR] SQL error at line 1, column 8"),
        "{stderr}"
    );
    assert!(
        stderr.contains("  SELECT nope FROM") && stderr.contains("         ^"),
        "{stderr}"
    );
}

#[test]
fn help_show_jobs_and_stop_job_work_from_a_script() {
    let (ok, stdout, stderr) = with_stdin(
        "HELP;
         CREATE TABLE endless (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '10');
         CREATE TABLE sink (id BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO sink SELECT id FROM endless;
         SHOW JOBS;
         STOP JOB '1';
         QUIT;
         SELECT 'never' AS after_quit;",
    );
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("SHOW TABLES | VIEWS | FUNCTIONS | JOBS"),
        "{stdout}"
    );
    assert!(
        stdout.contains("[INFO] Job '1' (insert-into_sink) submitted."),
        "{stdout}"
    );
    assert!(
        stdout.contains("| 1      | insert-into_sink | RUNNING |"),
        "{stdout}"
    );
    assert!(!stdout.contains("never"), "{stdout}");
}

#[test]
fn source_runs_a_file_and_show_functions_lists_flink_builtins() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("defs.sql");
    std::fs::write(
        &file,
        "CREATE VIEW one AS SELECT 1 AS x;\nCREATE VIEW two AS SELECT 2 AS y;\n",
    )
    .unwrap();
    let (ok, stdout, stderr) = with_stdin(&format!(
        "SOURCE '{}';\nSHOW VIEWS;\nSHOW FUNCTIONS;\n",
        file.display()
    ));
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("| one       |") && stdout.contains("| two       |"),
        "{stdout}"
    );
    for function in ["DATE_FORMAT", "SPLIT_INDEX", "TO_TIMESTAMP_LTZ", "COUNT"] {
        assert!(
            stdout.contains(&format!("| {function}")),
            "{function} in {stdout}"
        );
    }
}

#[test]
fn describe_job_lists_the_tasks_and_the_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = with_stdin(&format!(
        "SET 'execution.checkpointing.interval' = '50 ms';
         SET 'execution.checkpointing.dir' = '{}';
         CREATE TABLE endless (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '1000');
         CREATE TABLE sink (id BIGINT) WITH ('connector' = 'blackhole');
         INSERT INTO sink SELECT id FROM endless;
         DESCRIBE JOB '1';
         STOP JOB '1';",
        dir.path().display()
    ));
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("| task")
            && stdout.contains("| backpressure")
            && stdout.contains("Sink: sink[blackhole] (1/1)"),
        "{stdout}"
    );
    // Right after submission no checkpoint may have completed yet; either way
    // the shell says what there is.
    assert!(
        stdout.contains("No checkpoint completed") || stdout.contains("| checkpoint"),
        "{stdout}"
    );
}

#[test]
fn an_updating_query_streams_its_changes_or_shows_its_table_in_table_mode() {
    let (ok, stdout, stderr) = with_stdin(
        "CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP(3))
           WITH ('connector' = 'filesystem', 'path' = 'sql/data/bids.csv', 'format' = 'csv');
         SET 'weir.batch-size' = '4';
         SELECT auction, COUNT(*) AS c FROM bids WHERE auction = 1 GROUP BY auction;
         SET 'sql-client.execution.result-mode' = 'table';
         SELECT auction, COUNT(*) AS c FROM bids GROUP BY auction;",
    );
    assert!(ok, "{stderr}");
    let (changes, table) = stdout.split_once("5 rows in set").unwrap_or((&stdout, ""));
    let kinds: Vec<&str> = changes
        .lines()
        .filter_map(|l| l.strip_prefix("| ").map(|rest| &rest[..2]))
        .filter(|k| k.starts_with(['+', '-']))
        .collect();
    assert_eq!(kinds, ["+I", "-U", "+U", "-U", "+U"], "{stdout}");
    // The table: one row per auction with its final count, no kinds.
    assert!(table.contains("3 rows in set"), "{stdout}");
    for row in ["| 1       | 5 |", "| 2       | 3 |", "| 3       | 2 |"] {
        assert!(table.contains(row), "{row} missing in\n{stdout}");
    }
    assert!(!table.contains("-U"), "{stdout}");
}
