//! WindowAggregate through the operator harness: rows and watermarks in,
//! fired windows out, and incremental snapshots (partial states since the
//! last one) restored as a chain.

use crate::harness::Harness;

const TABLE: &str = "CREATE TABLE t (k STRING, v BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts)
    WITH ('connector' = 'datagen')";
const SINK: &str = "CREATE TABLE out (k STRING, ws TIMESTAMP(3), c BIGINT, s BIGINT)
    WITH ('connector' = 'blackhole')";

fn harness(size_and_slide: &str) -> Harness {
    let insert = format!(
        "INSERT INTO out SELECT k, window_start, COUNT(*), SUM(v)
         FROM TABLE({size_and_slide}) GROUP BY k, window_start, window_end"
    );
    Harness::of(
        &[TABLE, SINK, "SET 'table.local-time-zone' = 'UTC'"],
        &insert,
        "WindowAggregate",
        0,
    )
    .unwrap()
}

fn tumbling() -> Harness {
    harness("TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND)")
}

fn lines(expected: &[&str]) -> Vec<String> {
    expected.iter().map(|s| s.to_string()).collect()
}

/// A second of event time (the epoch's first minute).
fn at(second: u32) -> String {
    format!("1970-01-01T00:00:{second:02}")
}

#[test]
fn a_tumbling_window_fires_when_the_watermark_passes_its_end() {
    let mut h = tumbling();
    h.push(&format!("a 1 {}\na 2 {}\nb 5 {}", at(1), at(3), at(12)))
        .unwrap();
    assert_eq!(
        h.watermark(9_999).unwrap(),
        lines(&["+I a 1970-01-01T00:00:00 1970-01-01T00:00:10 2 3", "wm 9999"])
    );
}

#[test]
fn an_incremental_snapshot_holds_the_states_of_the_keys_changed_since_the_last_one() {
    let mut h = tumbling().incremental().unwrap();
    h.push(&format!("a 1 {}\nb 2 {}", at(1), at(2))).unwrap();
    assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 2);
    h.push(&format!("a 10 {}", at(3))).unwrap();
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(delta.num_rows(), 1, "only a changed");
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");
    h.push(&format!("a 100 {}\nc 7 {}", at(4), at(15))).unwrap();
    assert_eq!(h.snapshot_delta(false).unwrap().expect("a delta").num_rows(), 2);

    // The chain: base {a: 1, b: 2}, then {a: +10}, then {a: +100, c (next window)}.
    h.restart_from_chain().unwrap();
    h.push(&format!("b 3 {}", at(5))).unwrap();
    let mut fired = h.watermark(9_999).unwrap();
    fired.sort();
    assert_eq!(
        fired,
        lines(&[
            "+I a 1970-01-01T00:00:00 1970-01-01T00:00:10 3 111",
            "+I b 1970-01-01T00:00:00 1970-01-01T00:00:10 2 5",
            "wm 9999"
        ])
    );
    assert_eq!(
        h.watermark(19_999).unwrap(),
        lines(&["+I c 1970-01-01T00:00:10 1970-01-01T00:00:20 1 7", "wm 19999"])
    );
}

#[test]
fn a_window_fired_after_a_delta_is_not_restored_from_it() {
    let mut h = tumbling().incremental().unwrap();
    h.snapshot_delta(true).unwrap();
    h.push(&format!("a 1 {}", at(1))).unwrap();
    h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(h.watermark(9_999).unwrap().len(), 2, "fired");
    // The next delta is empty, but the chain still holds the fired window's
    // partial state; the watermark of the snapshot says it fired.
    assert!(h.snapshot_delta(false).unwrap().is_none());
    h.restart_from_chain().unwrap();
    assert_eq!(
        h.watermark(19_999).unwrap(),
        lines(&["wm 19999"]),
        "fired once only"
    );
}

#[test]
fn hopping_windows_restored_from_a_chain_fire_with_every_partial_state_once() {
    let mut h = harness("HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '10' SECOND)")
        .incremental()
        .unwrap();
    h.push(&format!("a 1 {}\na 2 {}", at(1), at(6))).unwrap();
    h.snapshot_delta(true).unwrap();
    h.push(&format!("a 4 {}", at(7))).unwrap();
    // Window [-5, 5) fires and freezes slice [0, 5) for window [0, 10).
    assert_eq!(
        h.watermark(4_999).unwrap(),
        lines(&["+I a 1969-12-31T23:59:55 1970-01-01T00:00:05 1 1", "wm 4999"])
    );
    h.push(&format!("a 8 {}", at(8))).unwrap();
    h.snapshot_delta(false).unwrap().expect("a delta");
    h.restart_from_chain().unwrap();
    assert_eq!(
        h.watermark(9_999).unwrap(),
        lines(&["+I a 1970-01-01T00:00:00 1970-01-01T00:00:10 4 15", "wm 9999"])
    );
    assert_eq!(
        h.watermark(14_999).unwrap(),
        lines(&["+I a 1970-01-01T00:00:05 1970-01-01T00:00:15 3 14", "wm 14999"])
    );
}

#[test]
fn a_full_snapshot_of_an_incremental_operator_is_its_whole_state_and_restores_as_one() {
    let mut h = tumbling().incremental().unwrap();
    h.push(&format!("a 1 {}", at(1))).unwrap();
    h.snapshot_delta(true).unwrap();
    h.push(&format!("a 2 {}", at(2))).unwrap();
    let savepoint = h.snapshot_only().unwrap().and_then(|s| s.rows).expect("rows");
    assert_eq!(savepoint.num_rows(), 1, "a's whole state, one row");
    let delta = h
        .snapshot_delta(false)
        .unwrap()
        .expect("the savepoint left the change to the delta");
    assert_eq!(delta.num_rows(), 1, "a's whole state, replacing the base's");
    assert_eq!(h.restart_from_chain().unwrap().expect("rows").num_rows(), 1);
    assert_eq!(
        h.watermark(9_999).unwrap(),
        lines(&["+I a 1970-01-01T00:00:00 1970-01-01T00:00:10 2 3", "wm 9999"])
    );
}

/// `keys` keys, each with rows of `v` = 1..=`per_key`, spread over the
/// first `seconds` seconds, as batches of about 500 lines.
fn many_rows(keys: usize, per_key: usize, seconds: u32) -> Vec<String> {
    let mut rows = Vec::new();
    for round in 1..=per_key {
        for key in 0..keys {
            let second = ((key * 7 + round * 3) % seconds as usize) as u32;
            rows.push(format!("k{key} {round} {}", at(second)));
        }
    }
    rows.chunks(500).map(|c| c.join("\n")).collect()
}

/// What `h` emits for `batches` then each watermark, rows of one
/// watermark sorted (their order across key groups differs by backend).
fn run(h: &mut Harness, batches: &[String], watermarks: &[i64]) -> Vec<String> {
    for batch in batches {
        h.push(batch).unwrap();
    }
    let mut all = Vec::new();
    for wm in watermarks {
        let mut fired = h.watermark(*wm).unwrap();
        assert_eq!(
            fired.last(),
            Some(&format!("wm {wm}")),
            "the watermark comes last"
        );
        fired.sort();
        all.extend(fired);
    }
    all
}

fn files_in(dir: &std::path::Path) -> usize {
    walk(dir).len()
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .flat_map(|e| {
            let path = e.path();
            if path.is_dir() { walk(&path) } else { vec![path] }
        })
        .collect()
}

const HOP: &str = "HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '10' SECOND)";

#[test]
fn windows_over_state_beyond_the_budget_fire_from_runs_with_the_results_of_the_heap() {
    for window in ["TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND)", HOP] {
        let dir = tempfile::tempdir().unwrap();
        let batches = many_rows(2000, 3, 20);
        let watermarks = [4_999, 9_999, 14_999, 19_999, 29_999];
        let expected = run(&mut harness(window), &batches, &watermarks);
        assert!(expected.len() > 3000, "{window}: {} lines", expected.len());

        let mut spilling = harness(window).spilling(64 * 1024, dir.path()).unwrap();
        for batch in &batches {
            spilling.push(batch).unwrap();
        }
        assert!(files_in(dir.path()) > 2, "{window}: runs were written");
        let fired = run(&mut spilling, &[], &watermarks);
        assert_eq!(fired, expected, "{window}");
        assert_eq!(files_in(dir.path()), 0, "{window}: the runs go with their slices");
    }
}

#[test]
fn spilled_state_restores_from_a_snapshot_and_fires_as_if_never_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let batches = many_rows(1500, 4, 10);
    let (before, after) = batches.split_at(batches.len() / 2);
    let expected = run(&mut tumbling(), &batches, &[9_999]);

    let mut h = tumbling().spilling(32 * 1024, dir.path()).unwrap();
    for batch in before {
        h.push(batch).unwrap();
    }
    let snapshot = h.restart().unwrap().expect("state");
    assert!(!snapshot.runs.is_empty(), "the snapshot takes the runs");
    let fired = run(&mut h, after, &[9_999]);
    assert_eq!(fired, expected);
}

#[test]
fn a_window_over_a_few_keys_under_the_budget_never_spills() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = tumbling().spilling(64 << 20, dir.path()).unwrap();
    h.push(&format!("a 1 {}\na 2 {}\nb 5 {}", at(1), at(3), at(12)))
        .unwrap();
    assert_eq!(files_in(dir.path()), 0);
    assert_eq!(
        h.watermark(9_999).unwrap(),
        lines(&["+I a 1970-01-01T00:00:00 1970-01-01T00:00:10 2 3", "wm 9999"])
    );
}

#[test]
fn a_window_snapshot_reads_its_state_at_the_barrier_and_its_writer_builds_the_rows_later() {
    let mut h = tumbling();
    h.push(&format!("a 1 {}\nb 2 {}\na 3 {}", at(1), at(2), at(3)))
        .unwrap();
    let snapshot = h.snapshot_unwritten().unwrap().expect("state");
    assert!(snapshot.rows.is_none() && snapshot.rows_later.is_some());
    // Rows after the barrier change the live state, not the snapshot.
    h.push(&format!("a 100 {}\nc 7 {}", at(4), at(5))).unwrap();
    assert_eq!(
        h.watermark(9_999).unwrap(),
        lines(&[
            "+I a 1970-01-01T00:00:00 1970-01-01T00:00:10 3 104",
            "+I b 1970-01-01T00:00:00 1970-01-01T00:00:10 1 2",
            "+I c 1970-01-01T00:00:00 1970-01-01T00:00:10 1 7",
            "wm 9999"
        ])
    );
    let written = snapshot.written(&|| true).unwrap();
    let rows = written.rows.as_ref().expect("built");
    assert_eq!(rows.num_rows(), 2, "a and b as they were");
    let mut restored = tumbling();
    restored.restart_from(written).unwrap();
    assert_eq!(
        restored.watermark(9_999).unwrap(),
        lines(&[
            "+I a 1970-01-01T00:00:00 1970-01-01T00:00:10 2 4",
            "+I b 1970-01-01T00:00:00 1970-01-01T00:00:10 1 2",
            "wm 9999"
        ])
    );
}

#[test]
fn an_incremental_window_snapshot_with_nothing_changed_has_no_rows_to_build() {
    let mut h = tumbling().incremental().unwrap();
    h.push(&format!("a 1 {}", at(1))).unwrap();
    h.snapshot_delta(true).unwrap();
    let delta = h.snapshot_delta_unwritten(false).unwrap().expect("its watermark");
    assert!(!delta.has_rows(), "the chain must not count it as a delta");
    h.push(&format!("a 2 {}", at(2))).unwrap();
    assert!(h.snapshot_delta_unwritten(false).unwrap().unwrap().has_rows());
}
