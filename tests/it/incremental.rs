//! Incremental checkpoints with real processes: `weir run` killed with
//! SIGKILL while its checkpoints are chains of shared files (a base and
//! deltas of earlier checkpoints), restored, rescaled, and restored past a
//! shared file that went missing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::recovery::{
    MODES, SEQUENCE, changelog_table, committed_rows, crash_and_rescale, crash_three_times, job_file,
    row_difference, weir,
};

/// Incremental checkpoints, compacted after `max_deltas` deltas.
fn incremental(max_deltas: usize) -> String {
    format!(
        "SET 'execution.checkpointing.incremental' = 'true';
         SET 'execution.checkpointing.incremental.max-deltas' = '{max_deltas}';"
    )
}

const UPDATING: &str = "SELECT c % 10, COUNT(*), SUM(s), MAX(k) FROM
   (SELECT id % 997 AS k, COUNT(*) AS c, SUM(id) AS s FROM seq GROUP BY id % 997)
 GROUP BY c % 10";

const HOPPING: &str = "SELECT id % 7, window_start, COUNT(*), SUM(id)
 FROM TABLE(HOP(TABLE seq, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
 GROUP BY id % 7, window_start, window_end";

#[test]
fn an_updating_aggregation_with_incremental_checkpoints_killed_three_times_ends_with_the_exact_table() {
    for (parallelism, settings) in MODES {
        let settings = format!("{settings} {}", incremental(3));
        let (expected, got, context) = crash_three_times(
            "changelog-incremental",
            parallelism,
            &settings,
            SEQUENCE,
            "k BIGINT, c BIGINT, s BIGINT, m BIGINT",
            UPDATING,
        );
        let (expected, got) = (changelog_table(&expected), changelog_table(&got));
        assert!(!expected.is_empty(), "{context}");
        assert_eq!(got, expected, "final table after crashes: {context} {settings}");
    }
}

#[test]
fn a_hopping_aggregation_with_incremental_checkpoints_killed_three_times_writes_exactly_the_rows_of_a_clean_run()
 {
    for (parallelism, settings) in MODES {
        let settings = format!("{settings} {}", incremental(3));
        let (expected, got, context) = crash_three_times(
            "hop-incremental",
            parallelism,
            &settings,
            SEQUENCE,
            "k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT",
            HOPPING,
        );
        let context = format!("{context} {settings}{}", row_difference(&expected, &got));
        assert!(got == expected, "rows differ after crashes: {context}");
    }
}

#[test]
fn a_tumbling_aggregation_with_incremental_checkpoints_killed_three_times_writes_exactly_the_rows_of_a_clean_run()
 {
    for (parallelism, settings) in MODES {
        let settings = format!("{settings} {}", incremental(3));
        let (expected, got, context) = crash_three_times(
            "tumble-incremental",
            parallelism,
            &settings,
            SEQUENCE,
            "k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT",
            "SELECT id % 7, window_start, COUNT(*), SUM(id)
             FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '3' SECOND))
             GROUP BY id % 7, window_start, window_end",
        );
        let context = format!("{context} {settings}{}", row_difference(&expected, &got));
        assert!(got == expected, "rows differ after crashes: {context}");
    }
}

#[test]
fn a_regular_join_of_updating_inputs_with_incremental_checkpoints_killed_three_times_ends_with_the_exact_table()
 {
    for (parallelism, settings) in MODES {
        let settings = format!("{settings} {}", incremental(3));
        let (expected, got, context) = crash_three_times(
            "changelog-join-incremental",
            parallelism,
            &settings,
            SEQUENCE,
            "k BIGINT, c BIGINT, n BIGINT",
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
fn a_top_n_over_updating_input_with_incremental_checkpoints_killed_three_times_ends_with_the_exact_table() {
    for (parallelism, settings) in MODES {
        let settings = format!("{settings} {}", incremental(3));
        let (expected, got, context) = crash_three_times(
            "changelog-topn-incremental",
            parallelism,
            &settings,
            SEQUENCE,
            "p BIGINT, k BIGINT, c BIGINT, rn BIGINT",
            "SELECT p, k, c, rn FROM (SELECT p, k, c,
               ROW_NUMBER() OVER (PARTITION BY p ORDER BY c DESC, k ASC) AS rn
             FROM (SELECT id % 97 AS p, id % 991 AS k, COUNT(*) AS c FROM seq GROUP BY id % 97, id % 991))
             WHERE rn <= 3",
        );
        let (expected, got) = (changelog_table(&expected), changelog_table(&got));
        assert!(!expected.is_empty(), "{context}");
        assert_eq!(got, expected, "final table after crashes: {context} {settings}");
    }
}

#[test]
fn a_hopping_aggregation_rescaled_4_2_3_from_incremental_checkpoints_writes_exactly_the_rows_of_a_clean_run()
{
    crash_and_rescale(
        "rescale-incremental",
        &[4, 2, 3],
        &incremental(3),
        SEQUENCE,
        "k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT",
        HOPPING,
    );
}

/// The state files each operator state of a checkpoint refers to.
fn referenced_files(checkpoint: &Path) -> Vec<String> {
    let metadata: serde_json::Value =
        serde_json::from_slice(&std::fs::read(checkpoint.join("_metadata")).unwrap()).unwrap();
    let mut files = Vec::new();
    for task in metadata["tasks"].as_array().unwrap() {
        for operator in task["operators"].as_array().unwrap() {
            let chain = operator["file"].as_object().into_iter().chain(
                operator["deltas"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|d| d.as_object()),
            );
            files.extend(chain.map(|f| f["path"].as_str().unwrap().to_string()));
        }
    }
    files
}

/// The complete checkpoints of the single run under a job directory, oldest first.
fn complete_checkpoints(job_dir: &Path) -> Vec<PathBuf> {
    let Ok(runs) = std::fs::read_dir(job_dir) else {
        return Vec::new();
    };
    let mut found: Vec<(u64, PathBuf)> = runs
        .flat_map(|run| std::fs::read_dir(run.unwrap().path()).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("_metadata").is_file())
        .filter_map(|p| {
            let id = p.file_name()?.to_str()?.strip_prefix("chk-")?.parse().ok()?;
            Some((id, p))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
}

/// The checkpoint a shared file was written for (`../shared/<op>/<subtask>-<n>.parquet`).
fn written_for(path: &str) -> u64 {
    let name = Path::new(path).file_stem().unwrap().to_str().unwrap();
    name.split('-').nth(1).unwrap().parse().unwrap()
}

/// Runs `query` killed once `ready` holds for the job directory's
/// checkpoints; returns (clean rows, the job file, the job directory, the scratch directory).
fn kill_when(
    name: &str,
    settings: &str,
    query: &str,
    ready: impl Fn(&[PathBuf]) -> bool,
) -> (Vec<String>, String, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let columns = "k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT";
    let clean_out = dir.path().join("clean");
    let clean = job_file(
        dir.path(),
        &format!("{name}-clean"),
        &clean_out,
        2,
        "",
        SEQUENCE,
        columns,
        query,
    );
    assert!(weir(&clean, None).status().unwrap().success(), "clean run failed");
    let expected = committed_rows(&clean_out);
    let out = dir.path().join("out");
    let file = job_file(dir.path(), name, &out, 2, settings, SEQUENCE, columns, query);
    let job_dir = dir.path().join("checkpoints").join(name);
    let mut child = weir(&file, None).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready(&complete_checkpoints(&job_dir)) {
        assert!(Instant::now() < deadline, "the checkpoints never got ready");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the job ended before it was killed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    (expected, file, job_dir, dir)
}

#[test]
fn a_restore_from_a_checkpoint_whose_files_span_several_earlier_checkpoints_writes_exactly_the_rows_of_a_clean_run()
 {
    // No compaction: the chain grows with every checkpoint that changed state.
    let spans = |checkpoint: &Path| -> BTreeSet<u64> {
        referenced_files(checkpoint)
            .iter()
            .filter(|p| p.starts_with("../shared/"))
            .map(|p| written_for(p))
            .collect()
    };
    let (expected, file, job_dir, _dir) = kill_when("span", &incremental(1000), HOPPING, |complete| {
        complete.last().is_some_and(|c| spans(c).len() >= 3)
    });
    let newest = complete_checkpoints(&job_dir).pop().unwrap();
    let spanned = spans(&newest);
    assert!(
        spanned.len() >= 3,
        "{} refers to files of {spanned:?}",
        newest.display()
    );
    let output = weir(&file, Some(&job_dir)).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let got = committed_rows(&job_dir.parent().unwrap().parent().unwrap().join("out"));
    assert!(got == expected, "rows differ{}", row_difference(&expected, &got));
}

#[test]
fn a_missing_shared_file_of_the_newest_checkpoint_falls_back_to_the_previous_complete_one() {
    let settings = format!(
        "{} SET 'execution.checkpointing.num-retained' = '2';",
        incremental(1000)
    );
    // Two retained checkpoints, the newest with a file the older lacks.
    let exclusive = |complete: &[PathBuf]| -> Option<String> {
        let [.., older, newest] = complete else {
            return None;
        };
        let kept: BTreeSet<String> = referenced_files(older).into_iter().collect();
        referenced_files(newest).into_iter().find(|f| !kept.contains(f))
    };
    let (expected, file, job_dir, _dir) = kill_when("missing", &settings, HOPPING, |complete| {
        exclusive(complete).is_some()
    });
    let complete = complete_checkpoints(&job_dir);
    let (older, newest) = (&complete[complete.len() - 2], &complete[complete.len() - 1]);
    let missing = newest.join(exclusive(&complete).unwrap());
    std::fs::remove_file(&missing).unwrap();

    let output = weir(&file, Some(&job_dir)).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let older_id = older
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .strip_prefix("chk-")
        .unwrap();
    assert!(
        stderr.contains("skipped a damaged checkpoint")
            && stderr.contains(&format!("restoring checkpoint {older_id} ")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&missing.display().to_string()),
        "the missing file is named: {stderr}"
    );
    // Nothing is lost. The output the skipped checkpoint had committed is
    // written again (the sink cannot take back what it committed): rows
    // beyond the clean run's are copies of its rows.
    let got = committed_rows(&job_dir.parent().unwrap().parent().unwrap().join("out"));
    let mut once = got.clone();
    once.dedup();
    assert!(
        once == expected,
        "rows lost or wrong{}",
        row_difference(&expected, &once)
    );
}

#[test]
fn a_finished_job_leaves_only_the_shared_files_its_retained_checkpoint_refers_to() {
    let dir = tempfile::tempdir().unwrap();
    let columns = "k BIGINT, ws TIMESTAMP(3), c BIGINT, s BIGINT";
    let out = dir.path().join("out");
    let file = job_file(
        dir.path(),
        "kept",
        &out,
        2,
        &incremental(2),
        SEQUENCE,
        columns,
        HOPPING,
    );
    let output = weir(&file, None).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let complete = complete_checkpoints(&dir.path().join("checkpoints/kept"));
    assert_eq!(complete.len(), 1, "one retained: {complete:?}");
    let newest = &complete[0];
    let id: u64 = newest.file_name().unwrap().to_str().unwrap()[4..]
        .parse()
        .unwrap();
    assert!(id >= 5, "checkpoints in a row: {id}");
    let referenced: BTreeSet<String> = referenced_files(newest)
        .into_iter()
        .filter_map(|p| p.strip_prefix("../").map(str::to_string))
        .collect();
    assert!(!referenced.is_empty());
    let run = newest.parent().unwrap();
    let on_disk: BTreeSet<String> = std::fs::read_dir(run.join("shared"))
        .unwrap()
        .flat_map(|op| std::fs::read_dir(op.unwrap().path()).unwrap())
        .map(|f| f.unwrap().path().strip_prefix(run).unwrap().display().to_string())
        .filter(|f| !f.contains("compacting"))
        .collect();
    assert_eq!(
        on_disk, referenced,
        "shared files left beside the retained checkpoint's"
    );
}

#[test]
fn inspect_shows_a_chain_and_the_checkpoint_connector_reads_its_combined_rows() {
    let dir = tempfile::tempdir().unwrap();
    let engine = crate::engine(1);
    for (key, value) in [
        ("execution.checkpointing.interval", "100 ms"),
        ("execution.checkpointing.dir", &dir.path().display().to_string()),
        ("execution.checkpointing.incremental", "true"),
        ("execution.checkpointing.incremental.max-deltas", "1000"),
        // All kept, so that none is deleted while it is looked at.
        ("execution.checkpointing.num-retained", "1000"),
        ("pipeline.name", "chained"),
    ] {
        engine.set(key, value).unwrap();
    }
    engine
        .sql(
            "CREATE TABLE seq (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '20000',
               'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '999999')",
        )
        .unwrap();
    engine
        .sql("CREATE TABLE sink (k BIGINT, c BIGINT) WITH ('connector' = 'blackhole')")
        .unwrap();
    let job = engine
        .sql("INSERT INTO sink SELECT id % 100, COUNT(*) FROM seq GROUP BY id % 100")
        .unwrap()
        .job()
        .unwrap()
        .clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    let checkpoint = loop {
        let chained = job
            .completed_checkpoints()
            .into_iter()
            .rev()
            .find(|c| referenced_files(&c.dir).len() >= 3 && c.full_state_bytes > c.state_bytes);
        if let Some(c) = chained {
            break c.dir;
        }
        assert!(Instant::now() < deadline, "no checkpoint with a chain");
        std::thread::sleep(Duration::from_millis(20));
    };
    job.cancel();
    let _ = job.wait();

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["checkpoint", "inspect"])
        .arg(&checkpoint)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        report.contains("GroupAggregate-0") && report.contains("delta(s)"),
        "{report}"
    );

    let metadata: serde_json::Value =
        serde_json::from_slice(&std::fs::read(checkpoint.join("_metadata")).unwrap()).unwrap();
    let emitted: u64 = metadata["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["source"]["splits"].as_array())
        .flatten()
        .map(|s| s["emitted"].as_u64().unwrap())
        .sum();
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
            .sql(&format!("SELECT COUNT(*), SUM(`_count`) FROM {table}"))
            .unwrap()
            .collect()
            .unwrap(),
    );
    // One row per group (the base's and the deltas' combined), and the
    // groups' counts add up to the rows the source had emitted.
    let totals: Vec<&str> = state[0].split('|').take(2).collect();
    assert_eq!(totals, ["100".to_string(), emitted.to_string()], "{report}");
}

/// `query` (insert-only, its columns `columns`) with incremental
/// checkpoints (max-deltas 3), killed three times at each of [`MODES`]:
/// exactly the rows of a clean run.
fn insert_only_killed_three_times(name: &str, columns: &str, query: &str) {
    insert_only_from_killed_three_times(name, SEQUENCE, columns, query)
}

/// [`insert_only_killed_three_times`] over the tables `source` creates.
fn insert_only_from_killed_three_times(name: &str, source: &str, columns: &str, query: &str) {
    for (parallelism, settings) in MODES {
        let settings = format!("{settings} {}", incremental(3));
        let (expected, got, context) =
            crash_three_times(name, parallelism, &settings, source, columns, query);
        let context = format!("{context} {settings}{}", row_difference(&expected, &got));
        assert!(!expected.is_empty(), "{context}");
        assert!(got == expected, "rows differ after crashes: {context}");
    }
}

#[test]
fn an_over_aggregation_with_incremental_checkpoints_killed_three_times_writes_exactly_the_rows_of_a_clean_run()
 {
    // 2000 partitions: a delta holds the partitions with rows since the
    // last checkpoint, a base every 4th checkpoint.
    insert_only_killed_three_times(
        "over-incremental",
        "k BIGINT, id BIGINT, s BIGINT, c BIGINT",
        "SELECT k, id, SUM(id) OVER w, COUNT(*) OVER w
         FROM (SELECT id % 2000 AS k, id, ts FROM seq)
         WINDOW w AS (PARTITION BY k ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)",
    );
}

#[test]
fn a_session_window_with_incremental_checkpoints_killed_three_times_writes_exactly_the_rows_of_a_clean_run() {
    // 20k keys, a row of each every 200 s, sessions of a 5-minute gap closed
    // by two 600 s holes: a delta holds the keys with rows or fired
    // sessions since the last checkpoint.
    insert_only_killed_three_times(
        "session-incremental",
        "k BIGINT, ss TIMESTAMP(3), se TIMESTAMP(3), c BIGINT, s BIGINT",
        "SELECT id % 20000, SESSION_START(ts, INTERVAL '5' MINUTE), SESSION_END(ts, INTERVAL '5' MINUTE),
                COUNT(*), SUM(id)
         FROM seq WHERE (id / 60000) % 3 <> 2
         GROUP BY id % 20000, SESSION(ts, INTERVAL '5' MINUTE)",
    );
}

#[test]
fn an_interval_join_with_incremental_checkpoints_killed_three_times_writes_exactly_the_rows_of_a_clean_run() {
    // Each row joins the rows of its key (id % 2000, every 20 s) up to 30 s
    // ahead: 3000 rows a side are kept, a delta holds the keys whose rows
    // came, joined or expired since the last checkpoint.
    insert_only_killed_three_times(
        "interval-incremental",
        "a BIGINT, b BIGINT",
        "SELECT x.id, y.id FROM seq x JOIN seq y
         ON x.id % 2000 = y.id % 2000 AND x.ts BETWEEN y.ts - INTERVAL '30' SECOND AND y.ts",
    );
}

#[test]
fn a_window_join_with_incremental_checkpoints_killed_three_times_writes_exactly_the_rows_of_a_clean_run() {
    // Each even id joins the next one in its 5-minute window, each odd one
    // comes out padded when its window fires; a delta holds the rows that
    // came since the last checkpoint.
    let window = |t: &str| format!("TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '5' MINUTE)) {t}");
    insert_only_killed_three_times(
        "window-join-incremental",
        "a BIGINT, b BIGINT",
        &format!(
            "SELECT a.id, b.id FROM {} LEFT JOIN {} ON a.id / 2 = b.id / 2 AND a.id < b.id
             AND a.window_start = b.window_start AND a.window_end = b.window_end",
            window("a"),
            window("b")
        ),
    );
}

#[test]
fn a_temporal_join_with_incremental_checkpoints_killed_three_times_writes_exactly_the_rows_of_a_clean_run() {
    // 400k versions, one a key: each row joins key id * 7 % 400000 once its
    // version's time is not after the row's, else comes out padded; a delta
    // holds the versions and waiting rows that came or fired since the last
    // checkpoint.
    let source = format!(
        "{SEQUENCE};
         CREATE TABLE versions (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
           PRIMARY KEY (id) NOT ENFORCED, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
         WITH ('connector' = 'datagen', 'rows-per-second' = '100000',
           'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '399999')"
    );
    insert_only_from_killed_three_times(
        "temporal-incremental",
        &source,
        "id BIGINT, version BIGINT",
        "SELECT s.id, v.id FROM seq s LEFT JOIN versions FOR SYSTEM_TIME AS OF s.ts AS v
         ON s.id * 7 % 400000 = v.id",
    );
}

#[test]
fn a_window_top_n_with_incremental_checkpoints_killed_three_times_writes_exactly_the_rows_of_a_clean_run() {
    // The 3 highest ids of each of 50 keys in each 2 s window: a delta holds
    // the partitions whose ranks changed and deletes those of fired windows.
    insert_only_killed_three_times(
        "window-top-n-incremental",
        "k BIGINT, ws TIMESTAMP(3), id BIGINT",
        "SELECT k, ws, id FROM (
           SELECT id % 50 AS k, window_start AS ws, id,
             ROW_NUMBER() OVER (PARTITION BY id % 50, window_start, window_end ORDER BY id DESC) AS rn
           FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '2' SECOND)))
         WHERE rn <= 3",
    );
}

#[test]
fn an_over_aggregation_of_an_updating_input_with_incremental_checkpoints_killed_three_times_ends_with_the_exact_table()
 {
    // The newest row of each id % 1000 (replaced again and again), summed
    // over the rows before it of its partition (id % 300): a delta holds the
    // partitions that a row came to or left since the last checkpoint.
    for (parallelism, settings) in MODES {
        let settings = format!("{settings} {}", incremental(3));
        let (expected, got, context) = crash_three_times(
            "changelog-over-incremental",
            parallelism,
            &settings,
            SEQUENCE,
            "k BIGINT, id BIGINT, s BIGINT",
            "SELECT k, id, SUM(id) OVER w FROM
               (SELECT k, id, ts FROM (SELECT id % 300 AS k, id, ts,
                  ROW_NUMBER() OVER (PARTITION BY id % 1000 ORDER BY id DESC) AS rn FROM seq)
                WHERE rn = 1)
             WINDOW w AS (PARTITION BY k ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)",
        );
        let (expected, got) = (changelog_table(&expected), changelog_table(&got));
        assert!(!expected.is_empty(), "{context}");
        assert_eq!(got, expected, "final table after crashes: {context} {settings}");
    }
}

#[test]
fn a_sink_materializer_with_incremental_checkpoints_killed_three_times_ends_with_the_exact_table() {
    // The largest id of each of 1000 keys into a sink keyed by it: each
    // update moves a row from one of the materializer's keys to another.
    for (parallelism, settings) in MODES {
        let settings = format!("{settings} {}", incremental(3));
        let (expected, got, context) = crash_three_times(
            "changelog-materializer-incremental",
            parallelism,
            &settings,
            SEQUENCE,
            "k BIGINT, m BIGINT, PRIMARY KEY (m) NOT ENFORCED",
            "SELECT id % 1000, MAX(id) FROM seq GROUP BY id % 1000",
        );
        let (expected, got) = (changelog_table(&expected), changelog_table(&got));
        assert_eq!(expected.len(), 1000, "{context}");
        assert_eq!(got, expected, "final table after crashes: {context} {settings}");
    }
}
