//! Session windows through the operator harness: sessions that merge, close and come late, on the heap and under the spilling backend.

use crate::harness::{
    Harness, Step, emitted, emitted_spilling, entries_in, sorted, spilled_restores_as_if_never_stopped,
    spilled_snapshot_holds_its_barrier, state_rows_of,
};

const SETUP: &[&str] = &[
    "CREATE TABLE t (k STRING, v BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts)
     WITH ('connector' = 'datagen')",
    "CREATE TABLE out (k STRING, ws TIMESTAMP(3), we TIMESTAMP(3), c BIGINT, s BIGINT, d BIGINT)
     WITH ('connector' = 'blackhole')",
    "SET 'table.local-time-zone' = 'UTC'",
];

/// Sessions of 2 s per key; `COUNT(DISTINCT v)` keeps a list as its state.
fn session() -> Harness {
    Harness::of(
        SETUP,
        "INSERT INTO out SELECT k, SESSION_START(ts, INTERVAL '2' SECOND),
           SESSION_END(ts, INTERVAL '2' SECOND), COUNT(*), SUM(v), COUNT(DISTINCT v)
         FROM t GROUP BY k, SESSION(ts, INTERVAL '2' SECOND)",
        "SessionWindowAggregate",
        0,
    )
    .unwrap()
}

/// `2020-01-01` plus `ms` milliseconds, as the harness reads a timestamp.
fn at(ms: i64) -> String {
    let t = chrono::DateTime::from_timestamp_millis(1_577_836_800_000 + ms).unwrap();
    t.format("%Y-%m-%dT%H:%M:%S%.3f").to_string()
}

/// Batches of `rows` rows over `keys` keys, a batch a second after the one
/// before and its rows up to 4 s before it (so out of order: a row may
/// bridge two sessions of its key, which merge), the watermark 3 s behind
/// after every other batch (rows before it are late), and at the end past
/// every session.
fn session_steps(batches: usize, rows: usize, keys: usize) -> Vec<Step> {
    let mut steps = Vec::new();
    for b in 0..batches {
        let lines: Vec<String> = (0..rows)
            .map(|r| {
                let i = b * rows + r;
                let t = b as i64 * 1000 - ((i * 7919) % 4000) as i64;
                format!("k{} {} {}", (i * 31 + b) % keys, i % 7, at(t))
            })
            .collect();
        steps.push(Step::Rows(0, lines.join("\n")));
        if b % 2 == 1 {
            steps.push(Step::Watermark(1_577_836_800_000 + (b as i64 - 3) * 1000));
        }
    }
    steps.push(Step::Watermark(i64::MAX));
    steps
}

#[test]
fn a_row_between_two_sessions_of_its_key_merges_them_into_one() {
    let mut h = session();
    h.push(&format!("a 1 {}\na 2 {}", at(0), at(3000))).unwrap();
    h.push(&format!("a 3 {}", at(1500))).unwrap();
    assert_eq!(
        h.watermark(1_577_836_800_000 + 10_000).unwrap(),
        [
            "+I a 2020-01-01T00:00:00 2020-01-01T00:00:05 3 6 3",
            "wm 1577836810000"
        ]
    );
}

#[test]
fn a_spilled_session_window_emits_the_sessions_the_heap_emits() {
    let steps = session_steps(60, 50, 90);
    let mut heap = session();
    let expected = sorted(emitted(&mut heap, &steps));
    let fired: Vec<&String> = expected.iter().flatten().filter(|l| l.starts_with('+')).collect();
    let merged = fired.iter().filter(|l| !l.ends_with(" 1 1")).count();
    assert!(
        fired.len() > 300 && merged > 100,
        "{merged} of {} sessions with several rows",
        fired.len()
    );
    // A spill after every batch or so, and one every few batches.
    for budget in [16 * 1024, 192 * 1024] {
        let got = emitted_spilling(&session, &steps, budget, true);
        assert_eq!(got, expected, "at {budget} bytes");
    }
}

#[test]
fn a_spilled_session_window_keeps_the_sessions_the_heap_keeps() {
    let mut steps = session_steps(40, 50, 90);
    steps.pop();
    let mut heap = session();
    emitted(&mut heap, &steps);
    let kept = state_rows_of(&heap.snapshot_only().unwrap().expect("state"));
    assert!(kept > 50, "{kept} open sessions");
    let dir = tempfile::tempdir().unwrap();
    let mut h = session().spilling(16 * 1024, dir.path()).unwrap();
    emitted(&mut h, &steps);
    assert_eq!(state_rows_of(&h.restart().unwrap().expect("a snapshot")), kept);
}

#[test]
fn a_spilled_session_window_restores_from_a_snapshot_as_if_never_stopped() {
    spilled_restores_as_if_never_stopped(&session, &session_steps(40, 50, 90));
}

#[test]
fn a_spilled_session_window_snapshot_holds_the_sessions_of_its_barrier_while_they_go_on() {
    spilled_snapshot_holds_its_barrier(&session, &session_steps(40, 50, 90));
}

#[test]
fn stored_and_memorys_sessions_fire_in_order_of_end_over_several_chunks_of_the_store() {
    // 6000 keys' sessions in the store (more than a chunk of its index),
    // then 40 in memory (under the budget) with ends among theirs.
    let stored: Vec<String> = (0..6000).map(|i| format!("s{i} 1 {}", at(i * 10))).collect();
    let memory: Vec<String> = (0..40).map(|i| format!("m{i} 1 {}", at(i * 1500 + 5))).collect();
    let dir = tempfile::tempdir().unwrap();
    let mut h = session().spilling(256 * 1024, dir.path()).unwrap();
    for chunk in stored.chunks(500) {
        h.push(&chunk.join("\n")).unwrap();
    }
    h.push(&memory.join("\n")).unwrap();
    let fired = h.watermark(i64::MAX).unwrap();
    let ends: Vec<&str> = fired
        .iter()
        .filter(|l| l.starts_with('+'))
        .map(|l| l.split(' ').nth(3).unwrap())
        .collect();
    assert_eq!(ends.len(), 6040);
    assert!(ends.is_sorted(), "in order of end");
    assert!(
        fired.iter().any(|l| l.starts_with("+I m")) && fired.last().unwrap().starts_with("wm"),
        "memory's too, then the watermark"
    );
}

#[test]
fn a_restore_of_more_sessions_than_a_chunk_under_a_small_budget_loses_none_of_a_keys() {
    // 20k keys with two sessions each (0 s and 10 s): 40k state rows,
    // restored in chunks, with spills between them that write a key's
    // first session to the store before its second comes.
    let rows = |t: i64| -> String {
        let lines: Vec<String> = (0..20_000).map(|k| format!("k{k} {} {}", k % 3, at(t))).collect();
        lines.join("\n")
    };
    let mut heap = session();
    heap.push(&rows(0)).unwrap();
    heap.push(&rows(10_000)).unwrap();
    let snapshot = heap.snapshot_only().unwrap().expect("state");
    assert_eq!(state_rows_of(&snapshot), 40_000);
    let mut expected = heap.watermark(i64::MAX).unwrap();
    expected.sort();
    let dir = tempfile::tempdir().unwrap();
    let mut h = session().spilling(64 * 1024, dir.path()).unwrap();
    h.restart_from(snapshot).unwrap();
    assert!(entries_in(dir.path()) > 0, "sessions went to the store");
    let mut fired = h.watermark(i64::MAX).unwrap();
    fired.sort();
    assert_eq!(fired.len(), 40_001);
    assert_eq!(fired, expected);
}

/// [`session`] over `TIMESTAMP_LTZ` rows in a zone with daylight saving:
/// which sessions a watermark closes is known only within a day of it.
fn session_in_berlin() -> Harness {
    Harness::of(
        &[
            "CREATE TABLE t (k STRING, v BIGINT, ts TIMESTAMP_LTZ(3), WATERMARK FOR ts AS ts)
             WITH ('connector' = 'datagen')",
            SETUP[1],
            "SET 'table.local-time-zone' = 'Europe/Berlin'",
        ],
        "INSERT INTO out SELECT k, SESSION_START(ts, INTERVAL '2' SECOND),
           SESSION_END(ts, INTERVAL '2' SECOND), COUNT(*), SUM(v), COUNT(DISTINCT v)
         FROM t GROUP BY k, SESSION(ts, INTERVAL '2' SECOND)",
        "SessionWindowAggregate",
        0,
    )
    .unwrap()
}

#[test]
fn a_session_stored_after_a_watermark_ending_before_every_stored_one_still_fires() {
    // Under 1 kB every batch spills. In a zone, the watermark at 5 s scans
    // the store up to a day on and finds a's session (to 12 s) open first;
    // b's (to 8 s) is stored after that.
    let dir = tempfile::tempdir().unwrap();
    let mut h = session_in_berlin().spilling(1024, dir.path()).unwrap();
    // Rows are read in the zone: midnight there is 23:00 UTC.
    let base = 1_577_836_800_000 - 3_600_000;
    h.push(&format!("a 1 {}", at(10_000))).unwrap();
    assert_eq!(h.watermark(base + 5_000).unwrap(), ["wm 1577833205000"]);
    h.push(&format!("b 2 {}", at(6_000))).unwrap();
    let fired = h.watermark(base + 9_000).unwrap();
    assert_eq!(fired.len(), 2, "{fired:?}");
    assert!(
        fired[0].starts_with("+I b ") && fired[0].ends_with(" 1 2 1"),
        "{fired:?}"
    );
    assert_eq!(h.watermark(i64::MAX).unwrap().len(), 2, "then a's");
}

#[test]
fn an_incremental_session_snapshot_holds_the_keys_whose_sessions_changed_since_the_last_one() {
    use crate::harness::deletions;
    let base = 1_577_836_800_000;
    let mut h = session().incremental().unwrap();
    h.push(&format!("a 1 {}\nb 2 {}\nc 3 {}", at(0), at(0), at(5000)))
        .unwrap();
    assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 3);
    h.push(&format!("a 4 {}", at(1000))).unwrap();
    assert_eq!(h.watermark(base + 2500).unwrap().len(), 2, "b's session fires");
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(deletions(&delta), vec![false, true], "a's longer session, b gone");
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");
    h.restart_from_chain().unwrap();
    h.push(&format!("a 5 {}", at(2500))).unwrap();
    assert_eq!(
        h.watermark(i64::MAX).unwrap(),
        [
            "+I a 2020-01-01T00:00:00 2020-01-01T00:00:04.500 3 10 3",
            "+I c 2020-01-01T00:00:05 2020-01-01T00:00:07 1 3 1",
            "wm 9223372036854775807"
        ],
        "a's session from the delta, c's from the base, b's not again"
    );
}

#[test]
fn incremental_snapshots_of_a_spilled_session_window_hold_the_keys_changed_in_memory_and_in_the_store() {
    use crate::harness::deletions;
    let base = 1_577_836_800_000;
    let dir = tempfile::tempdir().unwrap();
    let mut h = session()
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    let first: Vec<String> = (0..500).map(|i| format!("k{i} 1 {}", at(0))).collect();
    h.push(&first.join("\n")).unwrap();
    assert!(entries_in(dir.path()) > 0, "sessions went to the store");
    assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 500);
    // k1 read back from the store and longer, then written to it again by
    // the spill of 300 new keys; k2 read back and longer, in memory.
    h.push(&format!("k1 2 {}", at(1000))).unwrap();
    let new: Vec<String> = (0..300).map(|i| format!("n{i} 3 {}", at(5000))).collect();
    h.push(&new.join("\n")).unwrap();
    h.push(&format!("k2 4 {}", at(1500))).unwrap();
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(deletions(&delta), vec![false; 302], "k1, k2 and the 300 new keys");
    // The other 498 keys' sessions fire, from the store.
    assert_eq!(h.watermark(base + 2998).unwrap().len(), 499);
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(
        deletions(&delta),
        vec![true; 498],
        "the keys whose sessions fired"
    );
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");

    h.restart_from_chain().unwrap();
    let fired = h.watermark(i64::MAX).unwrap();
    assert_eq!(fired.len(), 303, "k1, k2, the new keys, the watermark");
    assert!(fired.contains(&"+I k1 2020-01-01T00:00:00 2020-01-01T00:00:03 2 3 2".to_string()));
    assert!(fired.contains(&"+I k2 2020-01-01T00:00:00 2020-01-01T00:00:03.500 2 5 2".to_string()));
}

#[test]
fn a_spilled_session_window_restored_from_an_incremental_chain_emits_what_it_would_have() {
    let dir = tempfile::tempdir().unwrap();
    let steps = session_steps(40, 50, 2000);
    let spilled = || session().spilling(16 * 1024, dir.path()).unwrap();
    let mut first_half = spilled();
    emitted(&mut first_half, &steps[..steps.len() / 2]);
    assert!(entries_in(dir.path()) > 0, "sessions go to the store");
    drop(first_half);
    crate::harness::incremental_restores_as_if_never_stopped(&spilled, &steps, 3);
}

#[test]
fn a_stored_key_read_back_for_a_late_row_only_is_still_in_the_next_delta() {
    use crate::harness::deletions;
    let base = 1_577_836_800_000;
    let dir = tempfile::tempdir().unwrap();
    let mut h = session()
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    let first: Vec<String> = (0..500).map(|i| format!("k{i} 1 {}", at(0))).collect();
    h.push(&first.join("\n")).unwrap();
    h.snapshot_delta(true).unwrap().expect("a base");
    // k7 changes and goes to the store again with 300 new keys.
    h.push(&format!("k7 2 {}", at(500))).unwrap();
    let new: Vec<String> = (0..300).map(|i| format!("n{i} 3 {}", at(5000))).collect();
    h.push(&new.join("\n")).unwrap();
    h.watermark(base + 100).unwrap();
    // Read back (its entry leaves the store) for a row too late to count.
    h.push(&format!("k7 4 {}", at(-5000))).unwrap();
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(deletions(&delta), vec![false; 301], "k7 and the 300 new keys");
    h.restart_from_chain().unwrap();
    let fired = h.watermark(i64::MAX).unwrap();
    assert!(
        fired.contains(&"+I k7 2020-01-01T00:00:00 2020-01-01T00:00:02.500 2 3 2".to_string()),
        "{:?}",
        &fired[..3]
    );
}

#[test]
fn processing_time_sessions_gather_the_rows_that_come_less_than_a_gap_apart_and_fire_by_the_clock() {
    let mut h = Harness::of(
        &[
            "CREATE TABLE c (k STRING, v BIGINT, pt AS PROCTIME()) WITH ('connector' = 'datagen')",
            "CREATE TABLE cout (k STRING, c BIGINT, s BIGINT) WITH ('connector' = 'blackhole')",
        ],
        "INSERT INTO cout SELECT k, COUNT(*), SUM(v)
         FROM TABLE(SESSION(TABLE c PARTITION BY k, DESCRIPTOR(pt), INTERVAL '1' HOUR))
         GROUP BY k, window_start, window_end",
        "SessionWindowAggregate",
        0,
    )
    .unwrap();
    // The rows' own times (any) are not their processing times.
    let t = at(0);
    h.push(&format!("a 1 {t}\nb 2 {t}\na 3 {t}")).unwrap();
    assert_eq!(
        h.watermark(1_000).unwrap(),
        ["wm 1000"],
        "event time passes through"
    );
    let now = weir_common::time::wall_clock_millis();
    assert!(
        h.processing_time(now).unwrap().is_empty(),
        "an hour's gap is open"
    );
    h.push(&format!("a 5 {t}")).unwrap();
    let mut fired: Vec<String> = (h.processing_time(now + 2 * 3_600_000).unwrap().iter())
        .map(|line| {
            // Key, count and sum (the bounds are wall-clock times).
            let cells: Vec<&str> = line.split(' ').collect();
            format!("{} {} {}", cells[1], cells[4], cells[5])
        })
        .collect();
    fired.sort();
    assert_eq!(fired, ["a 3 9", "b 1 2"], "each key's session, by the clock");
    assert!(h.end_input(0).unwrap().is_empty());
}
