//! Looking into checkpoints: `weir checkpoint inspect`, and state files
//! queried from SQL through the `checkpoint` connector.

use std::time::Duration;

use weir::JobStatus;

#[test]
fn inspect_lists_operators_and_its_create_table_reads_the_state_which_with_the_output_accounts_for_every_row()
{
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let engine = crate::engine(2);
    engine.set("pipeline.name", "inspected").unwrap();
    engine
        .set(
            "execution.checkpointing.savepoint-dir",
            &dir.path().display().to_string(),
        )
        .unwrap();
    engine
        .sql(
            "CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
               WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
             WITH ('connector' = 'datagen', 'rows-per-second' = '100000',
                   'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '999999')",
        )
        .unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE `out` (k BIGINT, c BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            out.display()
        ))
        .unwrap();
    let job = engine
        .sql(
            "INSERT INTO `out` SELECT id % 7, COUNT(*)
             FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '2' SECOND))
             GROUP BY id % 7, window_start, window_end",
        )
        .unwrap()
        .job()
        .unwrap()
        .clone();
    std::thread::sleep(Duration::from_millis(800));
    let savepoint = job.stop_with_savepoint().unwrap();
    assert_eq!(job.status(), JobStatus::Finished);

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["checkpoint", "inspect"])
        .arg(&savepoint)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        report.contains("Savepoint") && report.contains("job 'inspected'"),
        "{report}"
    );
    assert!(
        report.contains("WindowAggregate-0") && report.contains("0..=63"),
        "{report}"
    );
    // The source's position: rows emitted per split.
    let metadata: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(savepoint.join("_metadata")).unwrap()).unwrap();
    let emitted: u64 = metadata["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["source"]["splits"].as_array())
        .flatten()
        .map(|s| s["emitted"].as_u64().unwrap())
        .sum();
    assert!(emitted > 0);

    // The statement the report prints reads the open windows' state.
    let create = report
        .lines()
        .find(|l| l.trim_start().starts_with("CREATE TABLE"))
        .unwrap_or_else(|| panic!("no CREATE TABLE in {report}"));
    let reader = crate::engine(1);
    reader.sql(create).unwrap();
    let table = create.trim_start()["CREATE TABLE ".len()..]
        .split(' ')
        .next()
        .unwrap();
    let state = crate::sorted_rows(
        &reader
            .sql(&format!("SELECT * FROM {table}"))
            .unwrap()
            .collect()
            .unwrap(),
    );
    let counted_in_state: u64 = state
        .iter()
        .map(|row| row.split('|').nth(3).unwrap().parse::<u64>().unwrap())
        .sum();
    let counted_in_output: u64 = crate::part_file_lines(&out)
        .iter()
        .map(|line| line.split(',').nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(
        counted_in_state + counted_in_output,
        emitted,
        "every row is in a fired window or in state"
    );
}

#[test]
fn the_checkpoint_connector_names_the_operators_when_one_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let engine = crate::engine(1);
    engine
        .set(
            "execution.checkpointing.savepoint-dir",
            &dir.path().display().to_string(),
        )
        .unwrap();
    engine
        .sql("CREATE TABLE seq (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '1000')")
        .unwrap();
    engine
        .sql("CREATE TABLE sink (id BIGINT) WITH ('connector' = 'blackhole')")
        .unwrap();
    let job = engine
        .sql("INSERT INTO sink SELECT id FROM seq")
        .unwrap()
        .job()
        .unwrap()
        .clone();
    let savepoint = job.stop_with_savepoint().unwrap();
    let reader = crate::engine(1);
    reader
        .sql(&format!(
            "CREATE TABLE st (a BIGINT) WITH ('connector' = 'checkpoint', 'path' = '{}', 'operator' = 'nope')",
            savepoint.display()
        ))
        .unwrap();
    let err = reader.sql("SELECT * FROM st").unwrap_err().to_string();
    assert!(
        err.contains("no state of operator 'nope'") && err.contains("Sink"),
        "{err}"
    );
}
