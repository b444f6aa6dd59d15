//! Crash recovery with real processes: `weir run` killed with SIGKILL at
//! random moments, restarted with `--restore`, gives exactly the output of a
//! run that never crashed.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use rand::{Rng, SeedableRng};

/// 400k generated rows at 100k rows/s (about 4 s).
pub const SEQUENCE: &str = "CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
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

/// A job over `source`, checkpointing every 200 ms with `settings` (more
/// `SET` statements), writing `query` into a directory in CSV (or, for a
/// name starting with `changelog`, in Debezium JSON: an updating query).
#[allow(clippy::too_many_arguments)]
pub fn job_file(
    dir: &Path,
    name: &str,
    out: &Path,
    parallelism: usize,
    settings: &str,
    source: &str,
    columns: &str,
    query: &str,
) -> String {
    let format = if name.starts_with("changelog") {
        "debezium-json"
    } else {
        "csv"
    };
    let file = dir.join(format!("{name}.sql"));
    // The reference run takes no checkpoints at all.
    let interval = if name.ends_with("-clean") {
        String::new()
    } else {
        format!("SET 'execution.checkpointing.interval' = '200 ms'; {settings}")
    };
    std::fs::write(
        &file,
        format!(
            "{interval}
             SET 'execution.checkpointing.dir' = '{ckpt}';
             SET 'pipeline.name' = '{name}';
             SET 'parallelism.default' = '{parallelism}';
             SET 'table.local-time-zone' = 'UTC';
             {source};
             CREATE TABLE `out` ({columns})
             WITH ('connector' = 'filesystem', 'path' = '{out}', 'format' = '{format}');
             INSERT INTO `out` {query};",
            ckpt = dir.join("checkpoints").display(),
            out = out.display(),
        ),
    )
    .unwrap();
    file.display().to_string()
}

pub fn weir(file: &str, restore: Option<&Path>) -> Command {
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
pub fn committed_rows(dir: &Path) -> Vec<String> {
    crate::part_file_lines(dir)
}

/// Runs a job without checkpoints, then the same job killed three times at
/// random moments and restored; returns (clean rows, rows after crashes, context).
pub fn crash_three_times(
    name: &str,
    parallelism: usize,
    settings: &str,
    source: &str,
    columns: &str,
    query: &str,
) -> (Vec<String>, Vec<String>, String) {
    let seed: u64 = crate::test_seed();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let context = format!("{name} at parallelism {parallelism}, WEIR_TEST_SEED={seed}");
    // Shown with a failure's output; WEIR_TEST_KEEP=1 keeps the directory
    // (job files, checkpoints, outputs) to look into afterwards.
    eprintln!("{context}: {}", dir.path().display());
    let dir = Kept::unless_asked(dir);

    let clean_out = dir.path().join("clean");
    let clean = job_file(
        dir.path(),
        &format!("{name}-clean"),
        &clean_out,
        parallelism,
        "",
        source,
        columns,
        query,
    );
    let status = weir(&clean, None).status().unwrap();
    assert!(status.success(), "clean run failed: {context}");
    let expected = committed_rows(&clean_out);
    assert!(!expected.is_empty(), "{context}");

    let out = dir.path().join("out");
    let file = job_file(
        dir.path(),
        name,
        &out,
        parallelism,
        settings,
        source,
        columns,
        query,
    );
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
    (expected, committed_rows(&out), context)
}

/// A test's temporary directory, removed when dropped unless
/// `WEIR_TEST_KEEP` is set.
pub struct Kept {
    _temp: Option<tempfile::TempDir>,
    path: std::path::PathBuf,
}

impl Kept {
    pub fn unless_asked(dir: tempfile::TempDir) -> Kept {
        let path = dir.path().to_path_buf();
        match std::env::var_os("WEIR_TEST_KEEP") {
            Some(_) => Kept {
                _temp: None,
                path: dir.keep(),
            },
            None => Kept {
                _temp: Some(dir),
                path,
            },
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A few rows only one side has, for failure messages.
pub fn row_difference(expected: &[String], got: &[String]) -> String {
    let (mut missing, mut extra) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < expected.len() || j < got.len() {
        match (expected.get(i), got.get(j)) {
            (Some(e), Some(g)) if e == g => (i, j) = (i + 1, j + 1),
            (Some(e), Some(g)) if e < g => (missing.push(e), i += 1).1,
            (Some(_), Some(g)) => (extra.push(g), j += 1).1,
            (Some(e), None) => (missing.push(e), i += 1).1,
            (None, Some(g)) => (extra.push(g), j += 1).1,
            (None, None) => break,
        }
    }
    if missing.is_empty() && extra.is_empty() {
        return String::new();
    }
    format!(
        "\nmissing ({}): {:?}\nextra ({}): {:?}",
        missing.len(),
        &missing[..missing.len().min(5)],
        extra.len(),
        &extra[..extra.len().min(5)]
    )
}

/// Unaligned checkpoints with at most a few milliseconds of alignment first.
const UNALIGNED: &str = "SET 'execution.checkpointing.unaligned.enabled' = 'true';";

/// Each crash test runs aligned at parallelism 1 and 4, and unaligned at 4.
pub const MODES: [(usize, &str); 3] = [(1, ""), (4, ""), (4, UNALIGNED)];

fn crash_three_times_then_finish(name: &str, mode: (usize, &str), source: &str, columns: &str, query: &str) {
    let (parallelism, settings) = mode;
    let (expected, got, context) = crash_three_times(name, parallelism, settings, source, columns, query);
    let context = format!("{context} {settings}{}", row_difference(&expected, &got));
    assert_eq!(got.len(), expected.len(), "row count after crashes: {context}");
    assert!(got == expected, "rows differ after crashes: {context}");
}

/// The table a Debezium JSON changelog describes: each row (its `after` or
/// `before` object) with how often it is there, every count positive. The
/// files' order does not matter: counts add up the same.
pub fn changelog_table(lines: &[String]) -> std::collections::BTreeMap<String, i64> {
    let mut rows = std::collections::BTreeMap::<String, i64>::new();
    for line in lines {
        let change: serde_json::Value = serde_json::from_str(line).unwrap();
        let (row, delta) = match change["op"].as_str() {
            Some("c") => (&change["after"], 1),
            Some("d") => (&change["before"], -1),
            other => panic!("unknown op {other:?} in {line}"),
        };
        *rows.entry(row.to_string()).or_default() += delta;
    }
    let negative: Vec<_> = rows.iter().filter(|(_, c)| **c < 0).take(5).collect();
    assert!(
        negative.is_empty(),
        "rows retracted more often than added (row, count), of {} lines: {negative:?}",
        lines.len()
    );
    rows.retain(|_, c| *c > 0);
    rows
}

#[test]
fn an_updating_aggregation_killed_three_times_ends_with_the_exact_table_aligned_or_not() {
    for (parallelism, settings) in MODES {
        let (expected, got, context) = crash_three_times(
            "changelog",
            parallelism,
            settings,
            SEQUENCE,
            "k BIGINT, c BIGINT, s BIGINT, m BIGINT, n BIGINT",
            // Aggregates of aggregates: the outer one retracts as the inner
            // counts grow.
            "SELECT c % 10, COUNT(*), SUM(s), MAX(k), COUNT(DISTINCT s % 100) FROM
               (SELECT id % 997 AS k, COUNT(*) AS c, SUM(id) AS s FROM seq GROUP BY id % 997)
             GROUP BY c % 10",
        );
        let (expected, got) = (changelog_table(&expected), changelog_table(&got));
        assert!(!expected.is_empty(), "{context}");
        assert_eq!(got, expected, "final table after crashes: {context} {settings}");
    }
}

#[test]
fn a_regular_join_of_updating_inputs_killed_three_times_ends_with_the_exact_table_aligned_or_not() {
    for (parallelism, settings) in MODES {
        let (expected, got, context) = crash_three_times(
            "changelog-join",
            parallelism,
            settings,
            SEQUENCE,
            "k BIGINT, c BIGINT, n BIGINT",
            // Both sides retract as their aggregates grow; keys the right
            // side lacks keep a padded row, retracted when it comes.
            "SELECT a.k, a.c, b.n FROM
               (SELECT id % 500 AS k, COUNT(*) AS c FROM seq GROUP BY id % 500) a
             LEFT JOIN
               (SELECT id % 700 AS k, MAX(id) AS n FROM seq WHERE id % 3 = 0 GROUP BY id % 700) b
             ON a.k = b.k",
        );
        let (expected, got) = (changelog_table(&expected), changelog_table(&got));
        assert!(!expected.is_empty(), "{context}");
        assert_eq!(got, expected, "final table after crashes: {context} {settings}");
    }
}

#[test]
fn an_inner_join_of_two_streams_killed_three_times_writes_exactly_the_rows_of_a_clean_run() {
    crash_three_times_then_finish(
        "join",
        (2, ""),
        SEQUENCE,
        "a BIGINT, b BIGINT",
        "SELECT x.id, y.id * 2 FROM seq x JOIN seq y ON x.id = y.id",
    );
}

/// A bounded table of 1000 rows (8 kB: a join broadcasts it), read in
/// about half a second, so that a crash may come while it is incomplete.
const SMALL: &str = "CREATE TABLE small (k BIGINT, v AS k * 3)
  WITH ('connector' = 'datagen', 'rows-per-second' = '2000',
        'fields.k.kind' = 'sequence', 'fields.k.start' = '0', 'fields.k.end' = '999')";

#[test]
fn a_broadcast_join_killed_three_times_writes_exactly_the_rows_of_a_clean_run() {
    crash_three_times_then_finish(
        "broadcast-join",
        (4, UNALIGNED),
        &format!("{SEQUENCE}; {SMALL}"),
        "a BIGINT, b BIGINT",
        "SELECT x.id, s.v FROM seq x JOIN small s ON x.id % 1500 = s.k",
    );
}

#[test]
fn a_broadcast_left_join_killed_three_times_ends_with_the_exact_table() {
    let (expected, got, context) = crash_three_times(
        "changelog-broadcast-join",
        2,
        "",
        &format!("{SEQUENCE}; {SMALL}"),
        "a BIGINT, b BIGINT",
        // Ids whose key the table lacks come out padded.
        "SELECT x.id, s.v FROM seq x LEFT JOIN small s ON x.id % 1500 = s.k",
    );
    let (expected, got) = (changelog_table(&expected), changelog_table(&got));
    assert_eq!(expected.len(), 400_000, "{context}");
    let differ: Vec<_> = expected
        .iter()
        .filter(|(row, n)| got.get(*row) != Some(n))
        .take(5)
        .collect();
    assert!(
        got.len() == expected.len() && differ.is_empty(),
        "final table after crashes: {context}: {} rows, expected {}; differing: {differ:?}",
        got.len(),
        expected.len()
    );
}

#[test]
fn a_top_n_killed_three_times_ends_with_the_exact_table() {
    let (expected, got, context) = crash_three_times(
        "changelog-topn",
        4,
        UNALIGNED,
        SEQUENCE,
        "k BIGINT, v BIGINT, rn BIGINT",
        // Distinct order keys (a multiple of the id modulo a prime), so
        // ranks do not depend on arrival order.
        "SELECT k, v, rn FROM (
           SELECT id % 97 AS k, id * 7919 % 1000003 AS v,
             ROW_NUMBER() OVER (PARTITION BY id % 97 ORDER BY id * 7919 % 1000003 DESC) AS rn
           FROM seq) WHERE rn <= 3",
    );
    let (expected, got) = (changelog_table(&expected), changelog_table(&got));
    assert_eq!(expected.len(), 97 * 3, "{context}");
    assert_eq!(got, expected, "final table after crashes: {context}");
}

#[test]
fn an_over_aggregation_killed_three_times_writes_exactly_the_rows_of_a_clean_run() {
    // Rows wait for the watermark (1 s behind), frames of 6 rows and 2 s
    // keep rows to take away again: pending rows, frames and accumulators
    // all cross the restores.
    crash_three_times_then_finish(
        "over",
        (4, UNALIGNED),
        SEQUENCE,
        "k BIGINT, id BIGINT, s BIGINT, m BIGINT",
        "SELECT id % 13, id,
           SUM(id) OVER (PARTITION BY id % 13 ORDER BY ts ROWS BETWEEN 5 PRECEDING AND CURRENT ROW),
           MAX(id * 7919 % 1000003) OVER (PARTITION BY id % 13 ORDER BY ts ROWS BETWEEN 5 PRECEDING AND CURRENT ROW)
         FROM seq",
    );
}

#[test]
fn an_interval_join_killed_three_times_writes_exactly_the_rows_of_a_clean_run() {
    // Ids 0 to 10 apart (0 to 100 ms) with equal id % 7: each row joins
    // itself and the row 7 ahead; state is dropped as the watermark passes.
    crash_three_times_then_finish(
        "interval-join",
        (2, UNALIGNED),
        SEQUENCE,
        "a BIGINT, b BIGINT",
        "SELECT x.id, y.id FROM seq x JOIN seq y
         ON x.id % 7 = y.id % 7 AND x.ts BETWEEN y.ts - INTERVAL '100' MILLISECOND AND y.ts",
    );
}

#[test]
fn at_least_once_mode_killed_three_times_loses_nothing() {
    // Counts and sums per window may only grow (records replayed after a
    // restore count again); no window may be missing.
    let (expected, got, context) = crash_three_times(
        "alo",
        4,
        "SET 'execution.checkpointing.mode' = 'AT_LEAST_ONCE';",
        SEQUENCE,
        "k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT",
        "SELECT id % 7, window_start, COUNT(*), SUM(id)
         FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '10' SECOND))
         GROUP BY id % 7, window_start, window_end",
    );
    let parse = |rows: &[String]| -> std::collections::BTreeMap<String, Vec<(i64, i64)>> {
        let mut windows = std::collections::BTreeMap::<String, Vec<(i64, i64)>>::new();
        for row in rows {
            let fields: Vec<&str> = row.split(',').collect();
            windows
                .entry(format!("{},{}", fields[0], fields[1]))
                .or_default()
                .push((fields[2].parse().unwrap(), fields[3].parse().unwrap()));
        }
        windows
    };
    let (expected, got) = (parse(&expected), parse(&got));
    assert_eq!(
        expected.keys().collect::<Vec<_>>(),
        got.keys().collect::<Vec<_>>(),
        "windows after crashes: {context}"
    );
    for (window, clean) in &expected {
        let (count, sum) = clean[0];
        let rows = &got[window];
        assert!(
            rows.iter().all(|(c, s)| *c >= count && *s >= sum),
            "window {window}: {rows:?} has less than the clean run's ({count}, {sum}): {context}"
        );
    }
}

#[test]
fn a_tumbling_aggregation_killed_three_times_writes_exactly_the_rows_of_a_clean_run_aligned_or_not() {
    for mode in MODES {
        crash_three_times_then_finish(
            "tumble",
            mode,
            SEQUENCE,
            "k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT",
            "SELECT id % 7, window_start, COUNT(*), SUM(id)
             FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '10' SECOND))
             GROUP BY id % 7, window_start, window_end",
        );
    }
}

#[test]
fn a_hopping_aggregation_killed_three_times_writes_exactly_the_rows_of_a_clean_run_aligned_or_not() {
    for mode in MODES {
        crash_three_times_then_finish(
            "hop",
            mode,
            SEQUENCE,
            "k BIGINT, we TIMESTAMP(3), c BIGINT, m BIGINT",
            "SELECT id % 5, window_end, COUNT(*), MAX(id)
             FROM TABLE(HOP(TABLE seq, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
             GROUP BY id % 5, window_start, window_end",
        );
    }
}

#[test]
fn a_session_aggregation_killed_three_times_writes_exactly_the_rows_of_a_clean_run_aligned_or_not() {
    for mode in MODES {
        crash_three_times_then_finish(
            "session",
            mode,
            SEQUENCE,
            "k BIGINT, ss TIMESTAMP(3), se TIMESTAMP(3), c BIGINT, s BIGINT",
            // Every third 10 s of ids is missing: sessions (gap 5 s) close as time goes on.
            "SELECT id % 11, SESSION_START(ts, INTERVAL '5' SECOND), SESSION_END(ts, INTERVAL '5' SECOND),
                    COUNT(*), SUM(id)
             FROM seq WHERE (id / 1000) % 3 <> 0
             GROUP BY id % 11, SESSION(ts, INTERVAL '5' SECOND)",
        );
    }
}

#[test]
fn a_filter_killed_three_times_writes_exactly_the_rows_of_a_clean_run_aligned_or_not() {
    for mode in MODES {
        crash_three_times_then_finish(
            "filter",
            mode,
            SEQUENCE,
            "id BIGINT, ts TIMESTAMP(3)",
            "SELECT id, CAST(ts AS TIMESTAMP(3)) FROM seq WHERE id % 3 = 0",
        );
    }
}

#[test]
fn a_nexmark_aggregation_killed_three_times_writes_exactly_the_rows_of_a_clean_run_aligned_or_not() {
    for mode in MODES {
        crash_three_times_then_finish(
            "nexmark",
            mode,
            &nexmark(),
            "auction BIGINT, we TIMESTAMP(3), c BIGINT, m BIGINT",
            "SELECT auction, window_end, COUNT(*), MAX(price)
             FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '1' SECOND))
             GROUP BY auction, window_start, window_end",
        );
    }
}

/// `chaos(id)`: returns `id`, but panics (once) when `id` is one of the armed
/// ids: a task failure at a chosen record, in whichever subtask reads it.
#[derive(Debug)]
struct Chaos {
    signature: datafusion_expr::Signature,
    armed: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<i64>>>,
}

impl PartialEq for Chaos {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for Chaos {}

impl std::hash::Hash for Chaos {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        "chaos".hash(state);
    }
}

impl datafusion_expr::ScalarUDFImpl for Chaos {
    fn name(&self) -> &str {
        "chaos"
    }

    fn signature(&self) -> &datafusion_expr::Signature {
        &self.signature
    }

    fn return_type(
        &self,
        _: &[arrow::datatypes::DataType],
    ) -> datafusion_common::Result<arrow::datatypes::DataType> {
        Ok(arrow::datatypes::DataType::Int64)
    }

    fn invoke_with_args(
        &self,
        args: datafusion_expr::ScalarFunctionArgs,
    ) -> datafusion_common::Result<datafusion_expr::ColumnarValue> {
        use arrow::array::AsArray;
        let values = datafusion_expr::ColumnarValue::values_to_arrays(&args.args)?;
        let ids = values[0].as_primitive::<arrow::datatypes::Int64Type>();
        let mut armed = self.armed.lock().unwrap();
        if let Some(hit) = ids.values().iter().find(|id| armed.contains(id)).copied() {
            armed.remove(&hit);
            drop(armed);
            panic!("chaos: injected failure at id {hit}");
        }
        Ok(datafusion_expr::ColumnarValue::Array(values[0].clone()))
    }
}

/// The `chaos` function, armed to panic once at each of `armed`.
pub fn chaos_udf(armed: Vec<i64>) -> datafusion_expr::ScalarUDF {
    datafusion_expr::ScalarUDF::from(Chaos {
        signature: datafusion_expr::Signature::exact(
            vec![arrow::datatypes::DataType::Int64],
            datafusion_expr::Volatility::Volatile,
        ),
        armed: std::sync::Arc::new(std::sync::Mutex::new(armed.into_iter().collect())),
    })
}

/// Runs the tumbling job in-process with checkpoints every 100 ms and a 50 ms
/// restart delay; `chaos` panics at the `armed` ids. Returns the job.
fn run_with_chaos(dir: &Path, out: &Path, parallelism: usize, armed: Vec<i64>) -> weir::JobHandle {
    run_with_settings(dir, out, parallelism, armed, &[]).unwrap()
}

/// The reference: the same job without checkpoints.
fn run_without_checkpoints(dir: &Path, out: &Path, parallelism: usize) -> weir::JobHandle {
    run_with_settings(
        dir,
        out,
        parallelism,
        vec![],
        &[("execution.checkpointing.interval", "")],
    )
    .unwrap()
}

/// Like [`run_with_chaos`], with more settings; the submission's error if any.
fn run_with_settings(
    dir: &Path,
    out: &Path,
    parallelism: usize,
    armed: Vec<i64>,
    settings: &[(&str, &str)],
) -> weir::Result<weir::JobHandle> {
    let engine = crate::engine(parallelism);
    engine.register_udf(chaos_udf(armed));
    let name = out.file_name().unwrap().to_string_lossy().into_owned();
    let checkpoints = dir.join("checkpoints").display().to_string();
    for (key, value) in [
        ("execution.checkpointing.interval", "100 ms"),
        ("execution.checkpointing.dir", checkpoints.as_str()),
        ("pipeline.name", name.as_str()),
        ("restart-strategy.fixed-delay.delay", "50 ms"),
    ] {
        engine.set(key, value).unwrap();
    }
    for (key, value) in settings {
        if value.is_empty() {
            engine.sql(&format!("RESET '{key}'")).unwrap();
        } else {
            engine.set(key, value).unwrap();
        }
    }
    let script = format!(
        "CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
         WITH ('connector' = 'datagen', 'rows-per-second' = '200000',
               'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '399999');
         CREATE VIEW checked AS SELECT chaos(id) AS id, ts FROM seq;
         CREATE TABLE `out` (k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         INSERT INTO `out` SELECT id % 7, window_start, COUNT(*), SUM(id)
         FROM TABLE(TUMBLE(TABLE checked, DESCRIPTOR(ts), INTERVAL '10' SECOND))
         GROUP BY id % 7, window_start, window_end",
        out.display()
    );
    Ok(engine.sql(&script)?.job().unwrap().clone())
}

#[test]
fn panics_in_random_subtasks_are_survived_by_restarts_with_exactly_once_output() {
    let seed: u64 = crate::test_seed();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    for parallelism in [1, 4] {
        let dir = tempfile::tempdir().unwrap();
        let armed: Vec<i64> = (0..3).map(|_| rng.random_range(20_000..380_000)).collect();
        let context = format!("parallelism {parallelism}, failures at ids {armed:?}, WEIR_TEST_SEED={seed}");
        let clean_out = dir.path().join("clean");
        let clean = run_without_checkpoints(dir.path(), &clean_out, parallelism);
        assert_eq!(clean.wait().unwrap(), weir::JobStatus::Finished, "{context}");
        assert_eq!(clean.restarts(), 0);
        let out = dir.path().join("chaos");
        let job = run_with_chaos(dir.path(), &out, parallelism, armed);
        assert_eq!(job.wait().unwrap(), weir::JobStatus::Finished, "{context}");
        assert!(
            (1..=3).contains(&job.restarts()),
            "{} restarts: {context}",
            job.restarts()
        );
        let expected = committed_rows(&clean_out);
        let got = committed_rows(&out);
        assert_eq!(got.len(), expected.len(), "row count: {context}");
        assert!(got == expected, "rows differ: {context}");
    }
}

#[test]
fn a_checkpoint_that_cannot_be_written_is_declined_and_the_job_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let clean_out = dir.path().join("clean");
    let clean = run_without_checkpoints(dir.path(), &clean_out, 2);
    assert_eq!(clean.wait().unwrap(), weir::JobStatus::Finished);
    // The first snapshot write of the job fails: its checkpoint is declined.
    let out = dir.path().join("declined");
    fail::cfg("snapshot-write/declined", "1*return").unwrap();
    let job = run_with_settings(
        dir.path(),
        &out,
        2,
        vec![],
        &[("execution.checkpointing.tolerable-failed-checkpoints", "10")],
    )
    .unwrap();
    assert_eq!(job.wait().unwrap(), weir::JobStatus::Finished);
    assert!(job.failed_checkpoints() >= 1, "a checkpoint was declined");
    assert!(job.completed_checkpoints().iter().all(|c| c.id != 1));
    assert!(
        !job.completed_checkpoints().is_empty(),
        "later checkpoints completed"
    );
    assert_eq!(job.restarts(), 0, "the job went on without a restart");
    assert!(committed_rows(&out) == committed_rows(&clean_out));
}

#[test]
fn only_the_retained_checkpoints_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("retained");
    let job = run_with_settings(
        dir.path(),
        &out,
        1,
        vec![],
        &[("execution.checkpointing.num-retained", "2")],
    )
    .unwrap();
    assert_eq!(job.wait().unwrap(), weir::JobStatus::Finished);
    let completed = job.completed_checkpoints();
    assert!(completed.len() >= 3, "{} checkpoints", completed.len());
    let run = dir
        .path()
        .join("checkpoints/retained")
        .join(job.job_id().as_str());
    let mut left: Vec<String> = std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let mut newest: Vec<String> = completed[completed.len() - 2..]
        .iter()
        .map(|c| format!("chk-{}", c.id))
        .collect();
    newest.sort();
    assert_eq!(left, newest);
    for chk in &left {
        let metadata = run.join(chk).join("_metadata");
        assert!(metadata.is_file(), "{chk} is complete");
    }
}

#[test]
fn a_damaged_newest_checkpoint_falls_back_to_an_older_one_and_a_corrupt_state_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("damaged");
    let job = run_with_settings(
        dir.path(),
        &out,
        1,
        vec![],
        // All kept: the last ones, taken once the input has ended, may hold
        // no state file to corrupt.
        &[("execution.checkpointing.num-retained", "1000")],
    )
    .unwrap();
    assert_eq!(job.wait().unwrap(), weir::JobStatus::Finished);
    let completed = job.completed_checkpoints();
    let (older, newest) = (&completed[completed.len() - 2], &completed[completed.len() - 1]);
    std::fs::write(newest.dir.join("_metadata"), "{ not json").unwrap();
    let job_dir = dir.path().join("checkpoints/damaged");

    // The job directory restores the older checkpoint, and says why.
    let restored = run_with_settings(
        dir.path(),
        &dir.path().join("again"),
        1,
        vec![],
        &[("execution.savepoint.path", &job_dir.display().to_string())],
    )
    .unwrap();
    let notes = restored.notes().join("\n");
    assert!(
        notes.contains("_metadata") && notes.contains(&format!("restoring checkpoint {}", older.id)),
        "{notes}"
    );
    restored.cancel();
    let _ = restored.wait();

    // The damaged checkpoint itself is refused, naming the file.
    let err = run_with_settings(
        dir.path(),
        &dir.path().join("refused"),
        1,
        vec![],
        &[("execution.savepoint.path", &newest.dir.display().to_string())],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(&newest.dir.join("_metadata").display().to_string()),
        "{err}"
    );

    // A corrupt state file is named too (in the newest intact checkpoint
    // that has one).
    let (with_state, state) = completed[..completed.len() - 1]
        .iter()
        .rev()
        .find_map(|c| {
            let operator = std::fs::read_dir(&c.dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| p.is_dir())?;
            Some((c, operator))
        })
        .expect("a checkpoint with an operator directory");
    let file = std::fs::read_dir(&state).unwrap().next().unwrap().unwrap().path();
    let size = std::fs::metadata(&file).unwrap().len() as usize;
    std::fs::write(&file, vec![b'x'; size]).unwrap();
    let err = run_with_settings(
        dir.path(),
        &dir.path().join("corrupt"),
        1,
        vec![],
        &[("execution.savepoint.path", &with_state.dir.display().to_string())],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains(&file.display().to_string()), "{err}");
}

#[test]
fn restoring_a_job_directory_without_a_complete_checkpoint_starts_afresh_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("checkpoints/never");
    std::fs::create_dir_all(empty.join("chk-1")).unwrap(); // in flight when it crashed
    let out = dir.path().join("fresh");
    let job = run_with_settings(
        dir.path(),
        &out,
        1,
        vec![],
        &[("execution.savepoint.path", &empty.display().to_string())],
    )
    .unwrap();
    assert!(
        job.notes().iter().any(|n| n.contains("starts afresh")),
        "{:?}",
        job.notes()
    );
    assert_eq!(job.wait().unwrap(), weir::JobStatus::Finished);
    assert_eq!(committed_rows(&out).len(), 2800);
}

/// Like [`crash_three_times`], but each run of the job goes at the next of
/// `parallelisms` (the last one runs to the end), restoring the previous
/// run's latest checkpoint through key groups and source splits.
pub fn crash_and_rescale(
    name: &str,
    parallelisms: &[usize],
    settings: &str,
    source: &str,
    columns: &str,
    query: &str,
) {
    let seed: u64 = crate::test_seed();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let context = format!("{name} rescaled {parallelisms:?}, WEIR_TEST_SEED={seed}");
    let clean_out = dir.path().join("clean");
    let clean = job_file(
        dir.path(),
        &format!("{name}-clean"),
        &clean_out,
        2,
        "",
        source,
        columns,
        query,
    );
    assert!(
        weir(&clean, None).status().unwrap().success(),
        "clean run failed: {context}"
    );
    let expected = committed_rows(&clean_out);

    let out = dir.path().join("out");
    let job_dir = dir.path().join("checkpoints").join(name);
    let (last, killed) = parallelisms.split_last().unwrap();
    for (attempt, parallelism) in killed.iter().enumerate() {
        let file = job_file(
            dir.path(),
            name,
            &out,
            *parallelism,
            settings,
            source,
            columns,
            query,
        );
        let restore = (attempt > 0).then_some(job_dir.as_path());
        let mut child = weir(&file, restore).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(rng.random_range(600..1500)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }
    let file = job_file(dir.path(), name, &out, *last, settings, source, columns, query);
    let output = weir(&file, Some(&job_dir)).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the rescaled run failed: {context}\n{stderr}"
    );
    assert!(
        stderr.contains(&format!(" to {last}")),
        "not rescaled: {context}\n{stderr}"
    );
    let got = committed_rows(&out);
    assert_eq!(got.len(), expected.len(), "row count after rescaling: {context}");
    assert!(got == expected, "rows differ after rescaling: {context}");
}

#[test]
fn a_tumbling_aggregation_killed_and_rescaled_4_2_3_writes_exactly_the_rows_of_a_clean_run() {
    crash_and_rescale(
        "rescale-tumble",
        &[4, 2, 3],
        "",
        SEQUENCE,
        "k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT",
        "SELECT id % 7, window_start, COUNT(*), SUM(id)
         FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '10' SECOND))
         GROUP BY id % 7, window_start, window_end",
    );
}

#[test]
fn a_nexmark_session_of_bids_killed_and_rescaled_4_2_3_writes_exactly_the_rows_of_a_clean_run() {
    crash_and_rescale(
        "rescale-nexmark",
        &[4, 2, 3],
        "",
        &nexmark(),
        "bidder BIGINT, ss TIMESTAMP(3), c BIGINT, m BIGINT",
        "SELECT bidder, SESSION_START(`dateTime`, INTERVAL '2' SECOND), COUNT(*), MAX(price)
         FROM bid GROUP BY bidder, SESSION(`dateTime`, INTERVAL '2' SECOND)",
    );
}

/// A session aggregation made slow by `weir_slow` (20 µs a row, in the
/// aggregation subtasks): its sources are backpressured. With `armed`, the
/// `chaos` UDF panics at those ids; with `settings`, checkpoints as they say.
fn run_backpressured(out: &Path, armed: Vec<i64>, settings: &[(&str, &str)]) -> weir::JobHandle {
    let engine = crate::engine(2);
    engine.register_udf(datafusion_expr::ScalarUDF::from(Chaos {
        signature: datafusion_expr::Signature::exact(
            vec![arrow::datatypes::DataType::Int64],
            datafusion_expr::Volatility::Volatile,
        ),
        armed: std::sync::Arc::new(std::sync::Mutex::new(armed.into_iter().collect())),
    }));
    engine.register_udf(weir::bench::slow::Slow::udf(Duration::from_micros(20)));
    let name = out.file_name().unwrap().to_string_lossy().into_owned();
    engine.set("pipeline.name", &name).unwrap();
    engine.set("restart-strategy.fixed-delay.delay", "50 ms").unwrap();
    for (key, value) in settings {
        engine.set(key, value).unwrap();
    }
    let script = format!(
        "CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
         WITH ('connector' = 'datagen', 'rows-per-second' = '200000',
               'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '199999');
         CREATE VIEW checked AS SELECT chaos(id) AS id, ts FROM seq;
         CREATE TABLE `out` (k BIGINT, ss TIMESTAMP(3), c BIGINT, s BIGINT)
         WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv');
         INSERT INTO `out` SELECT id % 11, SESSION_START(ts, INTERVAL '5' SECOND), COUNT(*), SUM(weir_slow(id))
         FROM checked WHERE (id / 1000) % 3 <> 0
         GROUP BY id % 11, SESSION(ts, INTERVAL '5' SECOND)",
        out.display()
    );
    engine.sql(&script).unwrap().job().unwrap().clone()
}

#[test]
fn unaligned_checkpoints_under_backpressure_save_in_flight_records_and_restarts_keep_exactly_once_output() {
    let seed: u64 = crate::test_seed();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let armed: Vec<i64> = (0..2).map(|_| rng.random_range(40_000..180_000)).collect();
    let context = format!("failures at ids {armed:?}, WEIR_TEST_SEED={seed}");
    let clean_out = dir.path().join("clean");
    let clean = run_backpressured(&clean_out, vec![], &[]);
    assert_eq!(clean.wait().unwrap(), weir::JobStatus::Finished);
    let expected = committed_rows(&clean_out);
    assert!(!expected.is_empty());

    let out = dir.path().join("unaligned");
    let checkpoints = dir.path().join("checkpoints").display().to_string();
    let job = run_backpressured(
        &out,
        armed,
        &[
            ("execution.checkpointing.interval", "100 ms"),
            ("execution.checkpointing.dir", &checkpoints),
            ("execution.checkpointing.unaligned.enabled", "true"),
        ],
    );
    assert_eq!(job.wait().unwrap(), weir::JobStatus::Finished, "{context}");
    assert!(job.restarts() >= 1, "{context}");
    let metrics = job.metrics();
    assert!(
        metrics.checkpoints.iter().any(|c| c.channel_state_bytes > 0),
        "no checkpoint saved in-flight records: {:?}; {context}",
        metrics.checkpoints
    );
    let got = committed_rows(&out);
    assert_eq!(got.len(), expected.len(), "row count: {context}");
    assert!(got == expected, "rows differ: {context}");
}

#[test]
fn restoring_an_unaligned_checkpoint_replays_its_in_flight_records_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let clean_out = dir.path().join("clean");
    let clean = run_backpressured(&clean_out, vec![], &[]);
    assert_eq!(clean.wait().unwrap(), weir::JobStatus::Finished);
    let expected = committed_rows(&clean_out);

    let out = dir.path().join("restored");
    let checkpoints = dir.path().join("checkpoints").display().to_string();
    let settings = [
        ("execution.checkpointing.interval", "100 ms"),
        ("execution.checkpointing.dir", checkpoints.as_str()),
        ("execution.checkpointing.unaligned.enabled", "true"),
        ("execution.checkpointing.num-retained", "1000"),
    ];
    let job = run_backpressured(&out, vec![], &settings);
    // Wait for a checkpoint that holds in-flight records, then stop the job.
    let with_channel_state = loop {
        std::thread::sleep(Duration::from_millis(50));
        let metrics = job.metrics();
        if let Some(c) = metrics.checkpoints.iter().find(|c| c.channel_state_bytes > 0) {
            break c.dir.clone();
        }
        assert_eq!(
            metrics.status,
            weir::JobStatus::Running,
            "finished before an unaligned checkpoint"
        );
    };
    job.cancel();
    let _ = job.wait();
    let metadata = std::fs::read_to_string(with_channel_state.join("_metadata")).unwrap();
    assert!(metadata.contains("channel_state"), "{metadata}");

    let restore = with_channel_state.display().to_string();
    // In-flight records cannot be handed to the subtasks of another parallelism.
    let rescaled = crate::engine(3);
    rescaled.register_udf(weir::bench::slow::Slow::udf(Duration::from_micros(20)));
    rescaled.set("execution.savepoint.path", &restore).unwrap();
    rescaled.set("pipeline.name", "restored").unwrap();
    rescaled
        .sql(
            "CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
               WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
             WITH ('connector' = 'datagen', 'fields.id.kind' = 'sequence',
                   'fields.id.start' = '0', 'fields.id.end' = '199999')",
        )
        .unwrap();
    rescaled
        .sql("CREATE TABLE sink (k BIGINT, ss TIMESTAMP(3), c BIGINT, s BIGINT) WITH ('connector' = 'blackhole')")
        .unwrap();
    let err = rescaled
        .sql(
            "INSERT INTO sink SELECT id % 11, SESSION_START(ts, INTERVAL '5' SECOND), COUNT(*), SUM(weir_slow(id))
             FROM seq WHERE (id / 1000) % 3 <> 0 GROUP BY id % 11, SESSION(ts, INTERVAL '5' SECOND)",
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot be restored at another parallelism"), "{err}");
    let mut settings = settings.to_vec();
    settings.push(("execution.savepoint.path", restore.as_str()));
    let resumed = run_backpressured(&out, vec![], &settings);
    assert_eq!(resumed.wait().unwrap(), weir::JobStatus::Finished);
    let got = committed_rows(&out);
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "rows differ after restoring {restore}");
}
