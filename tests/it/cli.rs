//! The `weir` binary: `weir run FILE.sql`, its errors and its help.

use std::process::Command;

fn weir() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_weir"));
    command.current_dir(env!("CARGO_MANIFEST_DIR"));
    command
}

#[test]
fn help_documents_run() {
    let output = weir().arg("--help").output().unwrap();
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("run") && text.contains("Run the statements of a SQL file"),
        "{text}"
    );
}

#[test]
fn run_executes_a_file_and_waits_for_its_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.sql");
    let out = dir.path().join("out");
    std::fs::write(
        &file,
        format!(
            "CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP(3),
               WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
             ) WITH ('connector' = 'filesystem', 'path' = 'sql/data/bids.csv', 'format' = 'csv');
             CREATE TABLE `out` (auction BIGINT, window_start TIMESTAMP(3), window_end TIMESTAMP(3),
                                 bids BIGINT, max_price BIGINT)
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
             SET 'parallelism.default' = '4';
             INSERT INTO `out`
             SELECT auction, window_start, window_end, COUNT(*), MAX(price)
             FROM TABLE(HOP(TABLE bids, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '10' SECOND))
             GROUP BY auction, window_start, window_end;",
            out.display()
        ),
    )
    .unwrap();
    let output = weir().arg("run").arg(&file).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows = crate::part_file_lines(&out);
    assert_eq!(rows.len(), 14);
    assert_eq!(rows[0], "1,\"2019-12-31 23:59:55\",\"2020-01-01 00:00:05\",2,150");
}

#[test]
fn a_syntax_error_names_file_line_and_column_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.sql");
    std::fs::write(&file, "SET 'parallelism.default' = '2';\nSELECT 1 +;\n").unwrap();
    let output = weir().arg("run").arg(&file).output().unwrap();
    assert!(!output.status.success());
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(text.contains("bad.sql:2:11: SQL error"), "{text}");
    assert!(text.contains("SELECT 1 +;"), "{text}");
}

#[test]
fn a_select_prints_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("q.sql");
    std::fs::write(&file, "SELECT 40 + 2 AS answer;").unwrap();
    let output = weir().arg("run").arg(&file).output().unwrap();
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("answer") && text.contains("42"), "{text}");
}

#[test]
fn the_print_sink_writes_flink_style_rows_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("print.sql");
    std::fs::write(
        &file,
        "CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP(3),
           WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
         ) WITH ('connector' = 'filesystem', 'path' = 'sql/data/bids.csv', 'format' = 'csv');
         CREATE TABLE shown (auction BIGINT, window_start TIMESTAMP(3), c BIGINT)
         WITH ('connector' = 'print', 'print-identifier' = 'bids');
         SET 'parallelism.default' = '2';
         INSERT INTO shown SELECT auction, window_start, COUNT(*)
         FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND))
         GROUP BY auction, window_start, window_end;",
    )
    .unwrap();
    let output = weir().arg("run").arg(&file).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let mut rows: Vec<&str> = text
        .lines()
        .map(|l| l.split_once("> ").map_or(l, |(_, row)| row))
        .collect();
    rows.sort();
    assert_eq!(rows.len(), 7, "{text}");
    assert_eq!(rows[0], "+I[1, 2020-01-01T00:00, 3]");
    assert!(
        text.lines()
            .all(|l| l.starts_with("bids:1> +I[") || l.starts_with("bids:2> +I[")),
        "{text}"
    );
}

#[test]
fn the_print_sink_writes_the_changes_of_an_updating_query_with_their_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("print.sql");
    std::fs::write(
        &file,
        "CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP(3))
         WITH ('connector' = 'filesystem', 'path' = 'sql/data/bids.csv', 'format' = 'csv');
         CREATE TABLE shown (auction BIGINT, c BIGINT) WITH ('connector' = 'print');
         SET 'weir.batch-size' = '4';
         INSERT INTO shown SELECT auction, COUNT(*) FROM bids GROUP BY auction;",
    )
    .unwrap();
    let output = weir().arg("run").arg(&file).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    // Batches of 4 rows: auction 1 grows 2 → 4 → 5 (its second batch adds two rows).
    let auction_1: Vec<&str> = text.lines().filter(|l| l.contains("[1, ")).collect();
    assert_eq!(
        auction_1,
        ["+I[1, 2]", "-U[1, 2]", "+U[1, 4]", "-U[1, 4]", "+U[1, 5]"],
        "{text}"
    );
    assert!(
        text.lines()
            .all(|l| ["+I[", "-U[", "+U["].iter().any(|k| l.starts_with(k))),
        "{text}"
    );
}
