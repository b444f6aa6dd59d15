//! The embedded API: results as record batches, streams, jobs, metrics, EXPLAIN.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use arrow::array::{AsArray, Int64Array};
use arrow::datatypes::Int64Type;
use weir::JobStatus;

use crate::engine;

const SEQUENCE: &str = "CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 100, 3),
    WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
  WITH ('connector' = 'datagen', 'rows-per-second' = '100000000',
        'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '99999')";

#[test]
fn a_bounded_query_collects_every_window() {
    for parallelism in [1, 3] {
        let engine = engine(parallelism);
        engine.sql(SEQUENCE).unwrap();
        let batches = engine
            .sql(
                "SELECT id % 4 AS k, COUNT(*) AS c, SUM(id) AS s
                 FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '1' SECOND))
                 GROUP BY id % 4, window_start, window_end",
            )
            .unwrap()
            .collect()
            .unwrap();
        let counts: i64 = batches
            .iter()
            .map(|b| {
                b.column(1)
                    .as_primitive::<Int64Type>()
                    .values()
                    .iter()
                    .sum::<i64>()
            })
            .sum();
        let sums: i64 = batches
            .iter()
            .map(|b| {
                b.column(2)
                    .as_primitive::<Int64Type>()
                    .values()
                    .iter()
                    .sum::<i64>()
            })
            .sum();
        assert_eq!(
            counts, 100_000,
            "every row counted once at parallelism {parallelism}"
        );
        assert_eq!(sums, (0..100_000i64).sum::<i64>());
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        assert_eq!(
            rows,
            10_000 * 4,
            "10 000 one-second windows, each with all 4 keys"
        );
    }
}

#[test]
fn an_unbounded_query_streams_rows_as_windows_fire_and_stops_when_dropped() {
    let engine = engine(2);
    engine
        .sql(
            "CREATE TABLE ticks (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 1000, 3),
               WATERMARK FOR ts AS ts)
             WITH ('connector' = 'datagen', 'rows-per-second' = '2000',
                   'fields.id.kind' = 'sequence', 'fields.id.start' = '0',
                   'fields.id.end' = '9223372036854775806')",
        )
        .unwrap();
    let result = engine
        .sql(
            "SELECT window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE ticks, DESCRIPTOR(ts), INTERVAL '10' SECOND))
             GROUP BY window_start, window_end",
        )
        .unwrap();
    let job = result.job().unwrap().clone();
    let mut stream = result.stream();
    let started = Instant::now();
    let first = stream.next().unwrap().unwrap();
    assert!(first.num_rows() >= 1);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(job.status(), JobStatus::Running);
    drop(stream);
    assert_eq!(
        job.wait_timeout(Duration::from_secs(20)).unwrap(),
        JobStatus::Cancelled
    );
}

#[test]
fn late_rows_are_dropped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("late.csv");
    std::fs::write(
        &file,
        "1,2020-01-01 00:00:01\n2,2020-01-01 00:00:15\n3,2020-01-01 00:00:05\n4,2020-01-01 00:00:16\n",
    )
    .unwrap();
    let engine = engine(1);
    engine.set("weir.batch-size", "1").unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE t (x BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            file.display()
        ))
        .unwrap();
    let result = engine
        .sql("SELECT SUM(x) FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end")
        .unwrap();
    let job = result.job().unwrap().clone();
    let batches = result.collect().unwrap();
    let sums: Vec<i64> = batches
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect();
    assert_eq!(sums, vec![1, 6]);
    let late: u64 = job
        .tasks()
        .iter()
        .map(|t| t.metrics.late_records_dropped.load(Ordering::Relaxed))
        .sum();
    assert_eq!(late, 1);
}

#[test]
fn insert_returns_a_job_that_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(2);
    engine.sql(SEQUENCE).unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE out (k BIGINT, c BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            dir.path().display()
        ))
        .unwrap();
    let result = engine
        .sql(
            "INSERT INTO out SELECT id % 3, COUNT(*) FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '1' DAY))
             GROUP BY id % 3, window_start, window_end",
        )
        .unwrap();
    let job = result.job().unwrap().clone();
    assert_eq!(job.wait().unwrap(), JobStatus::Finished);
    let lines = crate::part_file_lines(dir.path());
    assert_eq!(lines, vec!["0,33334", "1,33333", "2,33333"]);
    assert_eq!(engine.jobs().len(), 1);
}

#[test]
fn explain_shows_chains_exchanges_and_parallelism() {
    let engine = engine(4);
    engine.sql(SEQUENCE).unwrap();
    engine
        .sql("CREATE TABLE sink (k BIGINT, c BIGINT) WITH ('connector' = 'blackhole')")
        .unwrap();
    let query = "INSERT INTO sink SELECT id % 3, COUNT(*) FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '1' HOUR))
                 GROUP BY id % 3, window_start, window_end";
    let plan = engine
        .sql(&format!("EXPLAIN {query}"))
        .unwrap()
        .collect()
        .unwrap();
    let text = plan[0].column(0).as_string::<i32>().value(0).to_string();
    assert!(text.contains("== Logical Plan =="), "{text}");
    assert!(text.contains("[1] parallelism=4"), "{text}");
    assert!(text.contains("Source: seq[datagen]"), "{text}");
    assert!(
        text.contains("-> WatermarkAssigner(rowtime=[ts], watermark=[ts - INTERVAL '1' SECOND])"),
        "{text}"
    );
    assert!(
        text.contains("-> LocalWindowAggregate(window=[TUMBLE(size=1 h)]"),
        "{text}"
    );
    assert!(text.contains("=> HASH["), "{text}");
    assert!(text.contains("GlobalWindowAggregate"), "{text}");
    assert!(text.contains("-> Sink: sink[blackhole]"), "{text}");

    let engine = self::engine(1);
    engine.sql(SEQUENCE).unwrap();
    engine
        .sql("CREATE TABLE sink (k BIGINT, c BIGINT) WITH ('connector' = 'blackhole')")
        .unwrap();
    let plan = engine
        .sql(&format!("EXPLAIN {query}"))
        .unwrap()
        .collect()
        .unwrap();
    let text = plan[0].column(0).as_string::<i32>().value(0).to_string();
    assert!(!text.contains("HASH"), "one chain at parallelism 1: {text}");
    assert!(text.contains("-> WindowAggregate("), "{text}");
}

#[test]
fn result_batches_carry_the_query_schema() {
    let engine = engine(1);
    let result = engine.sql("SELECT 1 AS one, 'x' AS s, 2.5 AS d").unwrap();
    let schema = result.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["one", "s", "d"]);
    let batches = result.collect().unwrap();
    let one = batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    assert_eq!(one.value(0), 1);
}

#[test]
fn sink_parallelism_sets_the_number_of_part_files() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(4);
    engine.sql(SEQUENCE).unwrap();
    for (name, parallelism) in [("one", 1), ("two", 2)] {
        engine
            .sql(&format!(
                "CREATE TABLE {name} (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}',
                   'format' = 'csv', 'sink.parallelism' = '{parallelism}')",
                dir.path().join(name).display()
            ))
            .unwrap();
        engine
            .sql(&format!("INSERT INTO {name} SELECT id FROM seq"))
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(
            crate::part_files(&dir.path().join(name)).len(),
            parallelism,
            "{name}"
        );
        let lines = crate::part_file_lines(&dir.path().join(name)).len();
        assert_eq!(lines, 100_000);
    }
}

#[test]
fn a_job_above_the_max_parallelism_is_refused() {
    let engine = engine(4);
    engine.set("pipeline.max-parallelism", "2").unwrap();
    engine.sql(SEQUENCE).unwrap();
    let err = engine.sql("SELECT id FROM seq").unwrap_err().to_string();
    assert!(err.contains("above the max parallelism 2"), "{err}");
}

#[test]
fn cancelling_a_query_nobody_reads_ends_it() {
    let engine = engine(2);
    engine
        .sql(
            "CREATE TABLE endless (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '100000000',
               'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '9223372036854775806')",
        )
        .unwrap();
    let result = engine.sql("SELECT id FROM endless").unwrap();
    let job = result.job().unwrap().clone();
    // Let every channel and the result buffer fill up, with nobody reading.
    std::thread::sleep(Duration::from_millis(300));
    job.cancel();
    assert_eq!(
        job.wait_timeout(Duration::from_secs(20)).unwrap(),
        JobStatus::Cancelled
    );
    drop(result);
}

#[test]
fn processing_time_windows_fire_by_the_wall_clock() {
    let engine = engine(2);
    engine
        .sql(
            "CREATE TABLE clicks (id BIGINT, pt AS PROCTIME())
             WITH ('connector' = 'datagen', 'rows-per-second' = '2000')",
        )
        .unwrap();
    let result = engine
        .sql(
            "SELECT window_start, window_end, COUNT(*) AS c
             FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(pt), INTERVAL '1' SECOND))
             GROUP BY window_start, window_end",
        )
        .unwrap();
    let job = result.job().unwrap().clone();
    let started = Instant::now();
    let mut stream = result.stream();
    // The source never ends: only the wall clock can fire these windows.
    let batch = stream.next().unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    let start = batch
        .column(0)
        .as_primitive::<arrow::datatypes::TimestampMillisecondType>()
        .value(0);
    let end = batch
        .column(1)
        .as_primitive::<arrow::datatypes::TimestampMillisecondType>()
        .value(0);
    assert_eq!(end - start, 1000);
    assert!(batch.column(2).as_primitive::<Int64Type>().value(0) > 0);
    drop(stream);
    assert_eq!(
        job.wait_timeout(Duration::from_secs(20)).unwrap(),
        JobStatus::Cancelled
    );
}

#[test]
fn processing_time_windows_of_a_bounded_input_count_every_row() {
    let engine = engine(3);
    engine
        .sql(
            "CREATE TABLE clicks (id BIGINT, pt AS PROCTIME())
             WITH ('connector' = 'datagen', 'rows-per-second' = '20000', 'number-of-rows' = '5000')",
        )
        .unwrap();
    let batches = engine
        .sql(
            "SELECT id % 3 AS k, COUNT(*) AS c FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(pt), INTERVAL '100' MILLISECOND))
             GROUP BY id % 3, window_start, window_end",
        )
        .unwrap()
        .collect()
        .unwrap();
    let total: i64 = batches
        .iter()
        .map(|b| {
            b.column(1)
                .as_primitive::<Int64Type>()
                .values()
                .iter()
                .sum::<i64>()
        })
        .sum();
    assert_eq!(total, 5000);
    let windows: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert!(
        windows > 3,
        "a quarter second of input spans several 100 ms windows: {windows}"
    );
}

#[test]
fn explain_insert_touches_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("not-yet");
    let engine = crate::engine(2);
    engine
        .sql("CREATE TABLE src (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '10')")
        .unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE `out` (id BIGINT) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            out.display()
        ))
        .unwrap();
    let plan = engine
        .sql("EXPLAIN INSERT INTO `out` SELECT id FROM src")
        .unwrap()
        .collect()
        .unwrap();
    assert_eq!(plan.len(), 1);
    assert!(!out.exists(), "EXPLAIN created {}", out.display());
    // Running it does create the directory.
    let job = engine
        .sql("INSERT INTO `out` SELECT id FROM src")
        .unwrap()
        .job()
        .unwrap()
        .clone();
    assert_eq!(job.wait().unwrap(), weir::JobStatus::Finished);
    assert_eq!(crate::part_file_lines(&out).len(), 10);
}
