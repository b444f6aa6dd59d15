//! Join through the operator harness: rows into either side, changes out.

use crate::harness::{
    Harness, Step, deletions, emitted, entries_in, incremental_restores_as_if_never_stopped, sorted,
    spilled_restores_as_if_never_stopped, spilled_snapshot_holds_its_barrier, state_rows_of,
};

const SETUP: &[&str] = &[
    "CREATE TABLE l (k BIGINT, a STRING) WITH ('connector' = 'datagen')",
    "CREATE TABLE r (k BIGINT, b STRING) WITH ('connector' = 'datagen')",
    "CREATE TABLE out (k BIGINT, a STRING, k2 BIGINT, b STRING) WITH ('connector' = 'blackhole')",
    "CREATE TABLE counts (k BIGINT, n BIGINT, k2 BIGINT, b STRING) WITH ('connector' = 'blackhole')",
];

fn harness(join: &str) -> Harness {
    Harness::of(
        SETUP,
        &format!("INSERT INTO out SELECT l.k, a, r.k, b FROM l {join} r ON l.k = r.k"),
        "Join",
        0,
    )
    .unwrap()
}

fn lines(expected: &[&str]) -> Vec<String> {
    expected.iter().map(|s| s.to_string()).collect()
}

#[test]
fn an_inner_join_of_inserts_emits_each_pair_once_whichever_side_comes_first() {
    let mut h = harness("JOIN");
    assert_eq!(h.push_to(0, "1 a\n2 x").unwrap(), Vec::<String>::new());
    assert_eq!(
        h.push_to(1, "1 b\n1 c").unwrap(),
        lines(&["+I 1 a 1 b", "+I 1 a 1 c"])
    );
    assert_eq!(h.push_to(0, "1 d").unwrap(), lines(&["+I 1 d 1 b", "+I 1 d 1 c"]));
}

#[test]
fn a_left_join_pads_a_row_until_its_first_match_and_retracts_the_padded_row() {
    let mut h = harness("LEFT JOIN");
    assert_eq!(h.push_to(0, "1 a").unwrap(), lines(&["+I 1 a null null"]));
    assert_eq!(
        h.push_to(1, "1 b\n1 c").unwrap(),
        lines(&["-D 1 a null null", "+I 1 a 1 b", "+I 1 a 1 c"])
    );
    assert_eq!(
        h.push_to(1, "2 z").unwrap(),
        Vec::<String>::new(),
        "the right side is not outer"
    );
}

#[test]
fn a_full_join_pads_both_sides_and_a_null_key_matches_nothing() {
    let mut h = harness("FULL JOIN");
    assert_eq!(
        h.push_to(1, "1 b\nnull n").unwrap(),
        lines(&["+I null null 1 b", "+I null null null n"])
    );
    assert_eq!(
        h.push_to(0, "1 a\nnull m").unwrap(),
        lines(&["-D null null 1 b", "+I 1 a 1 b", "+I null m null null"])
    );
}

#[test]
fn a_residual_condition_decides_which_pairs_match() {
    let mut h = Harness::of(
        SETUP,
        "INSERT INTO out SELECT l.k, a, r.k, b FROM l LEFT JOIN r ON l.k = r.k AND a < b",
        "Join",
        0,
    )
    .unwrap();
    assert_eq!(h.push_to(1, "1 m").unwrap(), Vec::<String>::new());
    assert_eq!(
        h.push_to(0, "1 a\n1 z").unwrap(),
        lines(&["+I 1 a 1 m", "+I 1 z null null"])
    );
}

/// `(SELECT k, COUNT(*) AS n FROM l GROUP BY k) LEFT JOIN r`: the left
/// side updates.
fn counts_left_join() -> Harness {
    Harness::of(
        SETUP,
        "INSERT INTO counts SELECT c.k, c.n, r.k, b FROM \
         (SELECT k, COUNT(*) AS n FROM l GROUP BY k) c LEFT JOIN r ON c.k = r.k",
        "Join",
        0,
    )
    .unwrap()
}

#[test]
fn an_updating_left_side_retracts_its_old_rows_with_their_matches() {
    let mut h = counts_left_join();
    assert_eq!(h.push_to(0, "+I 1 1").unwrap(), lines(&["+I 1 1 null null"]));
    assert_eq!(
        h.push_to(1, "1 b").unwrap(),
        lines(&["-D 1 1 null null", "+I 1 1 1 b"])
    );
    assert_eq!(
        h.push_to(0, "-U 1 1\n+U 1 2").unwrap(),
        lines(&["-D 1 1 1 b", "+I 1 2 1 b"])
    );
}

#[test]
fn an_aggregate_side_unique_on_the_join_key_keeps_one_row_per_key_across_a_restore() {
    let mut h = counts_left_join();
    h.push_to(0, "+I 1 1\n+I 2 1").unwrap();
    h.push_to(0, "-U 1 1\n+U 1 2\n-U 1 2\n+U 1 3").unwrap();
    let snapshot = h.restart().unwrap().expect("state");
    let rows = snapshot.rows.unwrap();
    assert_eq!(rows.num_rows(), 2, "one row for each of keys 1 and 2");
    let count = rows.column_by_name("_count").unwrap();
    let count = arrow::array::AsArray::as_primitive::<arrow::datatypes::Int64Type>(count);
    assert!(count.iter().all(|c| c == Some(1)));
    // The restored row of key 1 is its latest, and still replaced by an update.
    assert_eq!(
        h.push_to(1, "1 b").unwrap(),
        lines(&["-D 1 3 null null", "+I 1 3 1 b"])
    );
    assert_eq!(
        h.push_to(0, "-U 1 3\n+U 1 4").unwrap(),
        lines(&["-D 1 3 1 b", "+I 1 4 1 b"])
    );
}

#[test]
fn join_state_survives_a_snapshot_and_restore_with_its_match_counts() {
    let mut h = harness("FULL JOIN");
    h.push_to(0, "1 a\n2 x").unwrap();
    h.push_to(1, "1 b").unwrap();
    let snapshot = h.restart().unwrap().expect("state");
    assert_eq!(snapshot.rows.unwrap().num_rows(), 3);
    // The right row 1 b has one match: a second left row adds a pair only.
    assert_eq!(h.push_to(0, "1 c").unwrap(), lines(&["+I 1 c 1 b"]));
    // The left row 2 x has none: its padded row goes when a match comes.
    assert_eq!(
        h.push_to(1, "2 y").unwrap(),
        lines(&["-D 2 x null null", "+I 2 x 2 y"])
    );
}

/// An inner join of `l` and `r` on `k` under a state TTL of `ttl`.
fn inner_join_with_ttl(ttl: &str) -> Harness {
    let mut setup = SETUP.to_vec();
    let ttl = format!("SET 'table.exec.state.ttl' = '{ttl}'");
    setup.push(&ttl);
    Harness::of(
        &setup,
        "INSERT INTO out SELECT l.k, a, r.k, b FROM l JOIN r ON l.k = r.k",
        "Join",
        0,
    )
    .unwrap()
}

#[test]
fn a_row_not_written_for_longer_than_the_state_ttl_is_forgotten_across_a_restore_too() {
    let mut h = inner_join_with_ttl("1 s");
    h.push_to(0, "1 a\n2 x").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(600));
    let rows = h.restart().unwrap().unwrap().rows.unwrap();
    assert!(rows.schema().column_with_name("_written").is_some());
    assert_eq!(h.push_to(0, "2 y").unwrap(), Vec::<String>::new());
    std::thread::sleep(std::time::Duration::from_millis(600));
    // 1 a was written 1.2 s ago: gone; 2 y 0.6 s ago: still there.
    assert_eq!(h.push_to(1, "1 b\n2 c").unwrap(), lines(&["+I 2 y 2 c"]));
}

#[test]
fn a_semi_join_emits_left_rows_as_they_gain_a_match_and_an_anti_join_as_they_lose_it() {
    let semi = "INSERT INTO out2 SELECT k, a FROM l WHERE k IN (SELECT k FROM r)";
    let anti = "INSERT INTO out2 SELECT k, a FROM l WHERE k NOT IN (SELECT k FROM r WHERE k IS NOT NULL)";
    let mut setup = SETUP.to_vec();
    setup.push("CREATE TABLE out2 (k BIGINT, a STRING) WITH ('connector' = 'blackhole')");
    let mut h = Harness::of(&setup, semi, "Join", 0).unwrap();
    assert_eq!(h.push_to(0, "1 a\n1 a\n2 b").unwrap(), Vec::<String>::new());
    assert_eq!(h.push_to(1, "1\n1").unwrap(), lines(&["+I 1 a", "+I 1 a"]));
    assert_eq!(h.push_to(0, "1 c").unwrap(), lines(&["+I 1 c"]));
    let mut h = Harness::of(&setup, anti, "Join", 0).unwrap();
    assert_eq!(h.push_to(0, "1 a\n2 b").unwrap(), lines(&["+I 1 a", "+I 2 b"]));
    h.restart().unwrap();
    assert_eq!(h.push_to(1, "2").unwrap(), lines(&["-D 2 b"]));
}

const INTERVAL_SETUP: &[&str] = &[
    "CREATE TABLE lt (k BIGINT, a STRING, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen')",
    "CREATE TABLE rt (k BIGINT, b STRING, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen')",
    "CREATE TABLE iout (k BIGINT, a STRING, lts TIMESTAMP(3), b STRING, rts TIMESTAMP(3)) WITH ('connector' = 'blackhole')",
];

fn interval(join: &str) -> Harness {
    Harness::of(
        INTERVAL_SETUP,
        &format!(
            "INSERT INTO iout SELECT lt.k, a, lt.ts, b, rt.ts FROM lt {join} rt ON lt.k = rt.k
             AND lt.ts BETWEEN rt.ts - INTERVAL '2' SECOND AND rt.ts + INTERVAL '1' SECOND"
        ),
        "IntervalJoin",
        0,
    )
    .unwrap()
}

#[test]
fn an_interval_join_pairs_rows_within_the_bounds_only() {
    let mut h = interval("JOIN");
    assert_eq!(
        h.push_to(0, "1 a 2020-01-01T00:00:10").unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        h.push_to(
            1,
            "1 b 2020-01-01T00:00:11\n1 c 2020-01-01T00:00:13\n2 d 2020-01-01T00:00:10"
        )
        .unwrap(),
        lines(&["+I 1 a 2020-01-01T00:00:10 1 b 2020-01-01T00:00:11"])
    );
}

#[test]
fn an_outer_interval_join_pads_a_row_once_the_watermark_says_no_match_can_come() {
    let mut h = interval("LEFT JOIN");
    h.push_to(0, "1 a 2020-01-01T00:00:10").unwrap();
    // 10 s joins right rows up to 12 s: at watermark 12 s one may still come.
    let w = |s: i64| 1_577_836_800_000 + s * 1000;
    assert_eq!(h.watermark(w(12)).unwrap(), lines(&[&format!("wm {}", w(10))]));
    let snapshot = h.restart().unwrap().expect("state");
    assert_eq!(snapshot.rows.unwrap().num_rows(), 1);
    assert_eq!(
        h.watermark(w(13)).unwrap(),
        lines(&[
            "+I 1 a 2020-01-01T00:00:10 null null null",
            &format!("wm {}", w(11))
        ])
    );
}

#[test]
fn a_row_behind_the_watermark_still_joins_what_is_kept_but_is_not_kept() {
    let mut h = interval("LEFT JOIN");
    let w = |s: i64| 1_577_836_800_000 + s * 1000;
    h.push_to(1, "1 b 2020-01-01T00:00:20").unwrap();
    h.watermark(w(19)).unwrap();
    // Late (behind 19 s) but the right row at 20 s is still kept: joined.
    assert_eq!(
        h.push_to(0, "1 a 2020-01-01T00:00:18").unwrap(),
        lines(&["+I 1 a 2020-01-01T00:00:18 1 b 2020-01-01T00:00:20"])
    );
    // Too late to join anything or to be kept: padded at once.
    assert_eq!(
        h.push_to(0, "1 z 2020-01-01T00:00:05").unwrap(),
        lines(&["+I 1 z 2020-01-01T00:00:05 null null null"])
    );
}

#[test]
fn an_incremental_interval_join_snapshot_holds_the_keys_whose_rows_joined_came_or_went() {
    let w = |s: i64| 1_577_836_800_000 + s * 1000;
    let mut h = interval("LEFT JOIN").incremental().unwrap();
    h.push_to(
        0,
        "1 a 2020-01-01T00:00:10\n2 x 2020-01-01T00:00:05\n3 y 2020-01-01T00:00:30",
    )
    .unwrap();
    assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 3);
    // A right row is kept under key 1, and key 1's left row joins (only its
    // flag changes); key 2's row expires, padded. Key 3 does not change.
    assert_eq!(
        h.push_to(1, "1 b 2020-01-01T00:00:11").unwrap(),
        lines(&["+I 1 a 2020-01-01T00:00:10 1 b 2020-01-01T00:00:11"])
    );
    assert_eq!(
        h.watermark(w(8)).unwrap(),
        lines(&[
            "+I 2 x 2020-01-01T00:00:05 null null null",
            &format!("wm {}", w(6))
        ])
    );
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(
        deletions(&delta),
        vec![false, false, true],
        "left 1, right 1, left 2 gone"
    );
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");

    h.restart_from_chain().unwrap();
    // The right row is kept, left 1 has joined (not padded at the end) and
    // key 3's row comes from the base.
    assert_eq!(
        h.push_to(0, "1 c 2020-01-01T00:00:12").unwrap(),
        lines(&["+I 1 c 2020-01-01T00:00:12 1 b 2020-01-01T00:00:11"])
    );
    assert_eq!(
        h.watermark(i64::MAX).unwrap(),
        lines(&[
            "+I 3 y 2020-01-01T00:00:30 null null null",
            "wm 9223372036854775807"
        ])
    );
}

#[test]
fn an_interval_join_restored_from_an_incremental_chain_emits_what_it_would_have() {
    incremental_restores_as_if_never_stopped(&|| interval("FULL JOIN"), &interval_steps(40, 20, 2000), 4);
}

fn window_join(join: &str) -> Harness {
    let mut setup = INTERVAL_SETUP.to_vec();
    setup.push("CREATE TABLE wout (k BIGINT, ws TIMESTAMP(3), b STRING) WITH ('connector' = 'blackhole')");
    let tumble =
        |t: &str| format!("(SELECT * FROM TABLE(TUMBLE(TABLE {t}, DESCRIPTOR(ts), INTERVAL '10' SECOND)))");
    Harness::of(
        &setup,
        &format!(
            "INSERT INTO wout SELECT l.k, l.window_start, r.b FROM {} l {join} {} r
             ON l.k = r.k AND l.window_start = r.window_start AND l.window_end = r.window_end",
            tumble("lt"),
            tumble("rt")
        ),
        "WindowJoin",
        0,
    )
    .unwrap()
}

#[test]
fn a_window_join_joins_a_windows_rows_when_the_watermark_passes_its_end_and_drops_late_rows() {
    let mut h = window_join("LEFT JOIN");
    let w = |s: i64| 1_577_836_800_000 + s * 1000;
    // Left rows (k, window_start, window_end); right rows (k, b, window_start, window_end).
    let (w0, w10) = ("2020-01-01T00:00:00", "2020-01-01T00:00:10");
    h.push_to(0, &format!("1 {w0} {w10}\n2 {w0} {w10}")).unwrap();
    h.push_to(1, &format!("1 x {w0} {w10}")).unwrap();
    assert_eq!(h.watermark(w(9)).unwrap(), lines(&[&format!("wm {}", w(9))]));
    let snapshot = h.restart().unwrap().expect("state");
    assert_eq!(snapshot.rows.unwrap().num_rows(), 3);
    let fired = h.watermark(w(10) - 1).unwrap();
    assert_eq!(
        fired,
        lines(&[
            &format!("+I 1 {w0} {w10} 1 x {w0} {w10}"),
            &format!("+I 2 {w0} {w10} null null null null"),
            &format!("wm {}", w(10) - 1)
        ])
    );
    // The window has fired: a row of it is late, and dropped.
    assert_eq!(
        h.push_to(1, &format!("2 y {w0} {w10}")).unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(h.restart().unwrap().unwrap().rows, None, "nothing is kept");
}

#[test]
fn a_lookup_join_holds_stream_rows_until_the_table_is_complete_then_joins_as_they_come() {
    let mut setup = SETUP.to_vec();
    setup.push("CREATE TABLE s (k BIGINT, a STRING, p AS PROCTIME()) WITH ('connector' = 'datagen')");
    setup.push("CREATE TABLE d (k BIGINT, b STRING) WITH ('connector' = 'datagen', 'number-of-rows' = '5')");
    let mut h = Harness::of(
        &setup,
        "INSERT INTO out SELECT s.k, a, d.k, b FROM s LEFT JOIN d FOR SYSTEM_TIME AS OF s.p ON s.k = d.k",
        "LookupJoin",
        0,
    )
    .unwrap();
    // Stream rows: k, a and the proctime p (kept for the AS OF).
    let p = "2020-01-01T00:00:00";
    assert_eq!(
        h.push_to(0, &format!("1 a {p}\n2 b {p}")).unwrap(),
        Vec::<String>::new()
    );
    let snapshot = h.restart().unwrap().expect("waiting rows");
    assert_eq!(snapshot.rows.unwrap().num_rows(), 2);
    assert_eq!(h.push_to(1, "1 x\n1 y").unwrap(), Vec::<String>::new());
    let joined = h.end_input(1).unwrap();
    assert_eq!(joined.len(), 3, "{joined:?}");
    assert!(
        joined[0].starts_with("+I 1 a ") && joined[0].ends_with(" 1 x"),
        "{joined:?}"
    );
    assert!(
        joined[1].ends_with(" 1 y") && joined[2].ends_with(" null null"),
        "{joined:?}"
    );
    let now = h.push_to(0, &format!("1 c {p}")).unwrap();
    assert_eq!(now.len(), 2, "{now:?}");
    assert!(
        now[0].starts_with("+I 1 c ") && now[0].ends_with(" 1 x"),
        "{now:?}"
    );
}

#[test]
fn a_temporal_join_joins_each_row_with_the_version_current_at_its_time_once_the_watermark_passes() {
    let mut setup = INTERVAL_SETUP.to_vec();
    setup.push(
        "CREATE TABLE v (k BIGINT, b STRING, ts TIMESTAMP(3), PRIMARY KEY (k) NOT ENFORCED, \
         WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen')",
    );
    let mut h = Harness::of(
        &setup,
        "INSERT INTO iout SELECT lt.k, a, lt.ts, b, v.ts FROM lt LEFT JOIN v FOR SYSTEM_TIME AS OF lt.ts ON lt.k = v.k",
        "TemporalJoin",
        0,
    )
    .unwrap();
    let w = |s: i64| 1_577_836_800_000 + s * 1000;
    // Versions of key 1 at 0 s and 10 s.
    h.push_to(1, "1 old 2020-01-01T00:00:00\n1 new 2020-01-01T00:00:10")
        .unwrap();
    h.push_to(
        0,
        "1 a 2020-01-01T00:00:05\n1 c 2020-01-01T00:00:12\n2 x 2020-01-01T00:00:05",
    )
    .unwrap();
    let snapshot = h.restart().unwrap().expect("state");
    assert_eq!(snapshot.rows.unwrap().num_rows(), 5);
    // Rows of the same time come in any order: sorted here.
    let mut fired = h.watermark(w(6)).unwrap();
    fired.sort();
    assert_eq!(
        fired,
        lines(&[
            "+I 1 a 2020-01-01T00:00:05 1 old 2020-01-01T00:00:00",
            "+I 2 x 2020-01-01T00:00:05 null null null",
            &format!("wm {}", w(6))
        ])
    );
    assert_eq!(
        h.watermark(w(12)).unwrap(),
        lines(&[
            "+I 1 c 2020-01-01T00:00:12 1 new 2020-01-01T00:00:10",
            &format!("wm {}", w(12))
        ])
    );
    // The version at 0 s is gone: only the one current at 12 s is kept.
    assert_eq!(h.restart().unwrap().unwrap().rows.unwrap().num_rows(), 1);
}

#[test]
fn explain_names_a_side_unique_on_its_join_key_as_flink_does() {
    let engine = weir::Engine::new();
    for statement in SETUP {
        engine.sql(statement).unwrap();
    }
    let plan = engine
        .plan(
            "INSERT INTO counts SELECT c.k, c.n, r.k, b FROM \
             (SELECT k, COUNT(*) AS n FROM l GROUP BY k) c JOIN r ON c.k = r.k",
        )
        .unwrap();
    let join = plan
        .nodes
        .iter()
        .map(|n| n.name.clone())
        .find(|d| d.starts_with("Join("))
        .unwrap();
    assert!(
        join.contains("leftInputSpec=[JoinKeyContainsUniqueKey], rightInputSpec=[NoUniqueKey]"),
        "{join}"
    );
}

#[test]
fn an_incremental_join_snapshot_holds_the_keys_whose_rows_or_matches_changed() {
    let mut h = harness("LEFT JOIN").incremental().unwrap();
    assert_eq!(
        h.push_to(0, "1 a\n2 x").unwrap(),
        lines(&["+I 1 a null null", "+I 2 x null null"])
    );
    assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 2);
    h.push_to(1, "1 b").unwrap();
    // The right row, and the left row of key 1, whose match count changed.
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(deletions(&delta), vec![false, false]);
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");

    h.restart_from_chain().unwrap();
    assert_eq!(h.push_to(1, "1 c").unwrap(), lines(&["+I 1 a 1 c"]));
    assert_eq!(
        h.push_to(1, "2 z").unwrap(),
        lines(&["-D 2 x null null", "+I 2 x 2 z"])
    );
}

#[test]
fn a_key_whose_last_row_went_is_deleted_by_the_next_delta() {
    let mut h = Harness::of(
        SETUP,
        "INSERT INTO counts SELECT x.k, x.n, r.k, b FROM (SELECT k, COUNT(*) AS n FROM l GROUP BY k) x
         JOIN r ON x.k = r.k",
        "Join",
        0,
    )
    .unwrap()
    .incremental()
    .unwrap();
    h.push_to(0, "+I 1 1").unwrap();
    assert_eq!(h.push_to(1, "1 b").unwrap(), lines(&["+I 1 1 1 b"]));
    h.snapshot_delta(true).unwrap().expect("a base");
    assert_eq!(h.push_to(0, "-D 1 1").unwrap(), lines(&["-D 1 1 1 b"]));
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(deletions(&delta), vec![true], "the left key is gone");

    h.restart_from_chain().unwrap();
    assert_eq!(h.push_to(1, "1 c").unwrap(), Vec::<String>::new());
    assert_eq!(
        h.push_to(0, "+I 1 5").unwrap(),
        lines(&["+I 1 5 1 b", "+I 1 5 1 c"])
    );
}

/// Batches for both sides in turn, `rows` rows each over `keys` keys:
/// `(side, lines)`, the keys of a batch far apart so that every batch
/// touches keys memory no longer holds (keys meet the other side's when
/// `keys / rows` is odd).
fn both_sides(batches: usize, rows: usize, keys: usize) -> Vec<(usize, String)> {
    (0..batches)
        .map(|b| {
            let lines = (0..rows)
                .map(|r| {
                    let i = b * rows + r;
                    format!("{} v{}", (i * 7919) % keys, i % 3)
                })
                .collect::<Vec<_>>()
                .join("\n");
            (b % 2, lines)
        })
        .collect()
}

/// Everything `h` emits for `batches`, in order.
fn joined(h: &mut Harness, batches: &[(usize, String)]) -> Vec<String> {
    batches
        .iter()
        .flat_map(|(side, rows)| h.push_to(*side, rows).unwrap())
        .collect()
}

/// Everything `h` emits for `batches` and at the end of input, when rows
/// waiting for spilled state come out.
fn joined_to_end(h: &mut Harness, batches: &[(usize, String)]) -> Vec<String> {
    let mut lines = joined(h, batches);
    lines.extend(h.finish().unwrap());
    lines
}

/// Each join key's changes, in their order (the key: the left's, or the
/// right's where the left is padded). A spilled join emits each key's
/// changes as the heap does; rows of keys whose key group was read later
/// come later.
fn per_key(lines: &[String]) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut keys = std::collections::BTreeMap::<String, Vec<String>>::new();
    for line in lines {
        let fields: Vec<&str> = line.split(' ').collect();
        let key = if fields[1] == "null" { fields[3] } else { fields[1] };
        keys.entry(key.to_string()).or_default().push(line.clone());
    }
    keys
}

#[test]
fn a_spilled_join_emits_the_changes_the_heap_emits() {
    let dir = tempfile::tempdir().unwrap();
    let batches = both_sides(60, 50, 950);
    let expected = joined(&mut harness("FULL JOIN"), &batches);
    assert!(
        expected.iter().filter(|l| l.starts_with("-D")).count() > 500,
        "padded rows retracted at their first match"
    );
    let mut h = harness("FULL JOIN").spilling(16 * 1024, dir.path()).unwrap();
    let mut got = Vec::new();
    let mut files_seen = false;
    for (side, rows) in &batches {
        got.extend(h.push_to(*side, rows).unwrap());
        files_seen |= entries_in(dir.path()) > 0;
    }
    assert!(files_seen, "keys went to files");
    assert!(got.len() < expected.len(), "rows wait for their key group's read");
    got.extend(h.finish().unwrap());
    assert_eq!(per_key(&got), per_key(&expected));
}

/// A left join of per-key counts (an updating side, one row per join key)
/// with rows of `r`: counts of keys `0..keys` rise to 3 and fall back to
/// 0 (`-D`), a right row for every other key.
fn counts_then_retractions(keys: usize) -> Vec<(usize, String)> {
    let mut batches = vec![(
        1,
        (0..keys)
            .step_by(2)
            .map(|k| format!("{k} r{k}"))
            .collect::<Vec<_>>()
            .join("\n"),
    )];
    let change = |k: usize, n: usize, up: bool| match (up, n) {
        (true, 1) => vec![format!("+I {k} 1")],
        (true, _) => vec![format!("-U {k} {}", n - 1), format!("+U {k} {n}")],
        (false, 0) => vec![format!("-D {k} 1")],
        (false, _) => vec![format!("-U {k} {}", n + 1), format!("+U {k} {n}")],
    };
    for (n, up) in [
        (1, true),
        (2, true),
        (3, true),
        (2, false),
        (1, false),
        (0, false),
    ] {
        for chunk in (0..keys).collect::<Vec<_>>().chunks(50) {
            let lines: Vec<String> = chunk.iter().flat_map(|k| change(*k, n, up)).collect();
            batches.push((0, lines.join("\n")));
        }
    }
    batches
}

fn counts_join() -> Harness {
    Harness::of(
        SETUP,
        "INSERT INTO counts SELECT x.k, x.n, r.k, b FROM (SELECT k, COUNT(*) AS n FROM l GROUP BY k) x
         LEFT JOIN r ON x.k = r.k",
        "Join",
        0,
    )
    .unwrap()
}

#[test]
fn spilled_retractions_take_rows_away_and_keys_without_rows_leave_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let batches = counts_then_retractions(1000);
    let expected = joined(&mut counts_join(), &batches);
    let mut h = counts_join().spilling(16 * 1024, dir.path()).unwrap();
    assert_eq!(per_key(&joined_to_end(&mut h, &batches)), per_key(&expected));
    let snapshot = h.restart().unwrap().expect("a snapshot");
    assert_eq!(snapshot.runs.len(), 1, "the files as one run");
    assert_eq!(
        snapshot.runs[0].info.rows, 500,
        "the right rows are left; every left key was deleted"
    );
}

#[test]
fn a_spilled_join_restores_from_a_snapshot_as_if_never_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let batches = both_sides(40, 50, 750);
    let (before, after) = batches.split_at(batches.len() / 2);
    let mut heap = harness("FULL JOIN");
    joined(&mut heap, before);
    let expected = joined(&mut heap, after);
    let mut h = harness("FULL JOIN").spilling(16 * 1024, dir.path()).unwrap();
    joined(&mut h, before);
    let snapshot = h.restart().unwrap().expect("a snapshot");
    assert_eq!(snapshot.runs.len(), 1, "the files as one run");
    assert_eq!(snapshot.runs[0].info.rows, 1000, "every row of either side");
    assert_eq!(per_key(&joined_to_end(&mut h, after)), per_key(&expected));
}

#[test]
fn a_spilled_join_snapshot_holds_the_rows_of_its_barrier_while_the_join_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let batches = both_sides(40, 50, 750);
    let (before, after) = batches.split_at(batches.len() / 2);
    let mut heap = harness("FULL JOIN");
    joined(&mut heap, before);
    let expected = joined(&mut heap, after);
    let mut h = harness("FULL JOIN").spilling(16 * 1024, dir.path()).unwrap();
    joined(&mut h, before);
    let snapshot = h.snapshot_unwritten().unwrap().expect("a snapshot");
    assert_eq!(
        snapshot.deferred.len(),
        1,
        "the files, read by the snapshot's writer"
    );
    joined(&mut h, after);
    h.restart_from(snapshot).unwrap();
    assert_eq!(
        per_key(&joined_to_end(&mut h, after)),
        per_key(&expected),
        "the rows as they were at the barrier"
    );
}

#[test]
fn incremental_snapshots_of_a_spilled_join_hold_the_keys_changed_in_memory_and_in_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let batches = counts_then_retractions(600);
    let (first, rest) = batches.split_at(25);
    let (second, third) = rest.split_at(30);
    let mut heap = counts_join();
    joined(&mut heap, first);
    joined(&mut heap, second);
    let expected = joined(&mut heap, third);

    let mut h = counts_join()
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    joined(&mut h, first);
    let base = h.snapshot_delta(true).unwrap().expect("a base");
    assert!(base.num_rows() > 600, "{} rows", base.num_rows());
    joined(&mut h, second);
    let delta = h.snapshot_delta(false).unwrap().expect("changes");
    let deleted = deletions(&delta);
    assert_eq!(deleted.len(), 600, "each left key changed, once");
    assert_eq!(
        deleted.iter().filter(|d| **d).count(),
        0,
        "no key lost its last row yet"
    );
    h.restart_from_chain().unwrap();
    assert_eq!(per_key(&joined_to_end(&mut h, third)), per_key(&expected));
    let delta = h.snapshot_delta(false).unwrap().expect("changes");
    assert_eq!(
        deletions(&delta).iter().filter(|d| **d).count(),
        600,
        "every left key lost its last row"
    );
}

#[test]
fn a_delta_of_a_spilled_join_reads_the_store_of_its_barrier_while_the_join_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let batches = counts_then_retractions(600);
    let (first, rest) = batches.split_at(25);
    let (second, third) = rest.split_at(30);
    let mut heap = counts_join();
    joined(&mut heap, first);
    joined(&mut heap, second);
    let expected = joined(&mut heap, third);

    let mut h = counts_join()
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    joined(&mut h, first);
    h.snapshot_delta(true).unwrap();
    joined(&mut h, second);
    // The retractions change the store before the delta is read.
    let delta = h
        .snapshot_delta_while(false, |h| {
            joined(h, third);
            Ok(())
        })
        .unwrap()
        .expect("changes");
    let deleted = deletions(&delta);
    assert_eq!(
        deleted.len(),
        600,
        "each left key changed before the barrier, once"
    );
    assert!(
        deleted.iter().all(|d| !d),
        "no key had lost its last row at the barrier"
    );
    h.restart_from_chain().unwrap();
    assert_eq!(per_key(&joined_to_end(&mut h, third)), per_key(&expected));
}

#[test]
fn a_delta_after_a_savepoint_of_a_spilled_join_holds_what_changed_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness("JOIN")
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    let batches = both_sides(30, 50, 1000);
    joined(&mut h, &batches);
    let left_rows_of_first_keys = batches
        .iter()
        .filter(|(side, _)| *side == 0)
        .flat_map(|(_, rows)| rows.lines())
        .filter(|row| row.split(' ').next().unwrap().parse::<usize>().unwrap() < 300)
        .count();
    h.snapshot_delta(true).unwrap();
    h.push_to(
        0,
        &(0..300)
            .map(|k| format!("{k} new"))
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    // The savepoint writes every key to the store: memory holds none.
    let savepoint = h.snapshot_only().unwrap().expect("a savepoint");
    assert_eq!(savepoint.runs[0].info.rows, 1800);
    let delta = h.snapshot_delta(false).unwrap().expect("changes");
    assert_eq!(
        deletions(&delta).len(),
        left_rows_of_first_keys + 300,
        "the left rows of each key changed, as they are now"
    );
    assert!(
        h.snapshot_delta(false).unwrap().is_none(),
        "nothing changed since"
    );
}

/// The first key from `from` in `key`'s key group (of 128).
fn key_in_the_key_group_of(key: i64, from: i64) -> i64 {
    use arrow::array::{ArrayRef, Int64Array};
    let group = |k: i64| {
        let keys: Vec<ArrayRef> = vec![std::sync::Arc::new(Int64Array::from(vec![k]))];
        weir_state::snapshot::key_groups(&keys, 1, 128).unwrap().value(0)
    };
    (from..).find(|k| group(*k) == group(key)).unwrap()
}

#[test]
fn rows_of_spilled_keys_wait_for_their_key_group_and_not_once_its_files_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = harness("FULL JOIN").spilling(1 << 20, dir.path()).unwrap();
    // About 40 keys in each of 128 key groups: one row is not enough to
    // read its key group's files.
    let all: Vec<String> = (0..5000).map(|k| format!("{k} a")).collect();
    h.push_to(0, &all.join("\n")).unwrap();
    // A restore writes every key to its key group's files.
    h.restart().unwrap();
    assert!(
        h.push_to(1, "0 b").unwrap().is_empty(),
        "key 0's key group has files"
    );
    let later = weir_common::time::wall_clock_millis() + crate::waiting::LONGEST_WAIT_MS;
    assert_eq!(
        h.processing_time(later).unwrap(),
        lines(&["-D 0 a null null", "+I 0 a 0 b"]),
        "read after a second, as the heap joins it"
    );
    assert_eq!(
        h.push_to(0, "0 c").unwrap(),
        lines(&["+I 0 c 0 b"]),
        "read back, its rows are in memory"
    );
    let other = key_in_the_key_group_of(0, 1);
    assert_eq!(
        h.push_to(1, &format!("{other} d")).unwrap(),
        [
            format!("-D {other} a null null"),
            format!("+I {other} a {other} d")
        ],
        "another key of the key group read is in memory"
    );
    let new = key_in_the_key_group_of(0, 5000);
    assert_eq!(
        h.push_to(1, &format!("{new} e")).unwrap(),
        [format!("+I null null {new} e")],
        "a new key of a key group read has no rows to wait for"
    );
    assert!(h.finish().unwrap().is_empty(), "nothing waits");
}

#[test]
fn spilled_keys_of_many_key_groups_share_files_per_range_and_give_the_heaps_changes() {
    let dir = tempfile::tempdir().unwrap();
    let batches = both_sides(40, 50, 750);
    let expected = joined(&mut harness("FULL JOIN"), &batches);
    let mut h = harness("FULL JOIN")
        .max_parallelism(1024)
        .unwrap()
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    let (first, second) = batches.split_at(20);
    let mut got = joined(&mut h, first);
    h.snapshot_delta(true).unwrap();
    got.extend(h.take_barrier_output());
    let files: usize = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|d| std::fs::read_dir(d.unwrap().path()).map_or(0, |f| f.count()))
        .sum();
    assert!(files > 0 && files <= 128 + 1, "{files} files");
    got.extend(joined(&mut h, &second[..10]));
    let delta = h.snapshot_delta(false).unwrap().expect("changes");
    got.extend(h.take_barrier_output());
    assert!(!deletions(&delta).is_empty());
    h.restart_from_chain().unwrap();
    got.extend(joined_to_end(&mut h, &second[10..]));
    assert_eq!(per_key(&got), per_key(&expected));
    // A full snapshot's run is in key-group order across the shared files.
    let snapshot = h.restart().unwrap().expect("a snapshot");
    let groups = crate::harness::run_key_groups(&snapshot);
    assert!(
        groups.is_sorted() && groups.iter().any(|g| *g >= 128),
        "{groups:?}"
    );
}

#[test]
fn spilled_join_rows_past_the_state_ttl_are_swept_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = inner_join_with_ttl("1 h")
        .spilling(16 * 1024, dir.path())
        .unwrap();
    joined(&mut h, &both_sides(20, 50, 950));
    let later = weir_common::time::wall_clock_millis() + 2 * 3_600_000;
    for _ in 0..3 {
        h.processing_time(later).unwrap();
    }
    let snapshot = h.restart().unwrap().expect("a snapshot");
    assert!(snapshot.runs.is_empty(), "every row expired");
    assert_eq!(h.push_to(1, "1 b").unwrap(), Vec::<String>::new());
    assert_eq!(h.push_to(0, "1 a").unwrap(), lines(&["+I 1 a 1 b"]));
}

#[test]
fn the_state_ttl_sweeps_a_slice_of_the_rows_per_tick_and_all_of_them_in_half_the_ttl() {
    let mut h = inner_join_with_ttl("1 h").incremental().unwrap();
    let rows: Vec<String> = (0..20_000).map(|k| format!("{k} a")).collect();
    h.push_to(0, &rows.join("\n")).unwrap();
    h.snapshot_delta(true).unwrap();
    // Sweeps see the rows expired, as two hours later.
    let later = weir_common::time::wall_clock_millis() + 2 * 3_600_000;
    let deleted = |h: &mut Harness| h.snapshot_delta(false).unwrap().map_or(0, |d| d.num_rows());
    h.processing_time(later).unwrap();
    let first = deleted(&mut h);
    assert!(
        first > 0 && first < 20_000 / 4,
        "the first tick sweeps a slice: {first} keys"
    );
    // A tick a minute: half the TTL (30 minutes) goes round the table once.
    let mut swept = first;
    for minute in 1..=30 {
        h.processing_time(later + minute * 60_000).unwrap();
        let now = deleted(&mut h);
        assert!(now < 20_000 / 4, "minute {minute}: a slice, {now} keys");
        swept += now;
    }
    assert_eq!(swept, 20_000, "every key swept once within half the TTL");
}

/// Batches of `rows` rows for both sides in turn over `keys` keys, each
/// batch a second later than the one before (rows up to 2 s out of
/// order), the watermark 3 s behind after every other batch.
fn interval_steps(batches: usize, rows: usize, keys: usize) -> Vec<Step> {
    let base = 1_577_836_800; // 2020-01-01T00:00:00, s
    let mut steps = Vec::new();
    for b in 0..batches {
        let lines: Vec<String> = (0..rows)
            .map(|r| {
                let i = b * rows + r;
                let s = b + i % 3;
                let at = chrono::DateTime::from_timestamp(base + s as i64, 0).unwrap();
                format!(
                    "{} v{} {}",
                    (i * 7919) % keys,
                    i % 5,
                    at.format("%Y-%m-%dT%H:%M:%S")
                )
            })
            .collect();
        steps.push(Step::Rows(b % 2, lines.join("\n")));
        if b % 2 == 1 {
            steps.push(Step::Watermark((base + b as i64 - 3) * 1000));
        }
    }
    steps
}

/// What `h` emits for each step, each step's lines sorted (a watermark's
/// padded rows come in no set order).
fn interval_joined(h: &mut Harness, steps: &[Step]) -> Vec<Vec<String>> {
    sorted(emitted(h, steps))
}

#[test]
fn a_spilled_interval_join_emits_the_rows_the_heap_emits() {
    let dir = tempfile::tempdir().unwrap();
    // 90 keys: 590 pairs, 910 rows of each side that join nothing.
    let mut steps = interval_steps(60, 50, 90);
    steps.push(Step::Watermark(i64::MAX));
    let expected = interval_joined(&mut interval("FULL JOIN"), &steps);
    let all: Vec<&String> = expected.iter().flatten().collect();
    assert!(
        all.iter().filter(|l| l.contains("null")).count() > 300,
        "padded rows"
    );
    let pairs = all.iter().filter(|l| !l.contains("null")).count();
    assert!(pairs > 500, "{pairs} pairs");
    let mut h = interval("FULL JOIN").spilling(16 * 1024, dir.path()).unwrap();
    let mut got = Vec::new();
    let mut store_seen = false;
    for step in &steps {
        got.extend(interval_joined(&mut h, std::slice::from_ref(step)));
        store_seen |= entries_in(dir.path()) > 0;
    }
    assert!(store_seen, "rows went to the store");
    assert_eq!(got, expected);
    let snapshot = h.restart().unwrap().expect("a snapshot");
    assert!(
        snapshot.runs.is_empty() && snapshot.rows.is_none(),
        "the last watermark expired every row, in the store too"
    );
}

#[test]
fn incremental_snapshots_of_a_spilled_interval_join_hold_the_keys_whose_stored_rows_joined_came_or_went() {
    let w = |s: i64| 1_577_836_800_000 + s * 1000;
    let dir = tempfile::tempdir().unwrap();
    let mut h = interval("LEFT JOIN")
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    let mut left: Vec<String> = (100..400).map(|k| format!("{k} o 2020-01-01T00:00:30")).collect();
    left.extend(
        [
            "1 a 2020-01-01T00:00:10",
            "2 x 2020-01-01T00:00:05",
            "3 y 2020-01-01T00:00:30",
        ]
        .map(String::from),
    );
    h.push_to(0, &left.join("\n")).unwrap();
    assert!(entries_in(dir.path()) > 0, "rows went to the store");
    assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 303);
    // Key 1's stored left row joins a right row kept in memory; key 2's
    // stored row expires, padded.
    assert_eq!(
        h.push_to(1, "1 b 2020-01-01T00:00:11").unwrap(),
        lines(&["+I 1 a 2020-01-01T00:00:10 1 b 2020-01-01T00:00:11"])
    );
    assert_eq!(
        h.watermark(w(8)).unwrap(),
        lines(&[
            "+I 2 x 2020-01-01T00:00:05 null null null",
            &format!("wm {}", w(6))
        ])
    );
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    let mut deleted = deletions(&delta);
    deleted.sort();
    assert_eq!(deleted, vec![false, false, true], "left 1, right 1, left 2 gone");
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");

    h.restart_from_chain().unwrap();
    assert_eq!(
        h.push_to(0, "1 c 2020-01-01T00:00:12").unwrap(),
        lines(&["+I 1 c 2020-01-01T00:00:12 1 b 2020-01-01T00:00:11"])
    );
    let padded = h.watermark(i64::MAX).unwrap();
    assert_eq!(
        padded.len(),
        302,
        "3 y and the 300 others, padded, and the watermark"
    );
    assert!(!padded.iter().any(|l| l.starts_with("+I 1 a")), "left 1 joined");
}

#[test]
fn a_spilled_interval_join_restored_from_an_incremental_chain_emits_what_it_would_have() {
    let dir = tempfile::tempdir().unwrap();
    let steps = interval_steps(40, 20, 2000);
    let spilled = || interval("FULL JOIN").spilling(8 * 1024, dir.path()).unwrap();
    let mut first_half = spilled();
    emitted(&mut first_half, &steps[..steps.len() / 2]);
    assert!(entries_in(dir.path()) > 0, "rows go to the store");
    drop(first_half);
    incremental_restores_as_if_never_stopped(&spilled, &steps, 4);
}

#[test]
fn a_spilled_interval_join_restores_from_a_snapshot_as_if_never_stopped() {
    spilled_restores_as_if_never_stopped(&|| interval("LEFT JOIN"), &interval_steps(40, 50, 90));
}

#[test]
fn a_spilled_interval_join_snapshot_holds_the_rows_of_its_barrier_while_the_join_goes_on() {
    spilled_snapshot_holds_its_barrier(&|| interval("FULL JOIN"), &interval_steps(40, 50, 90));
}

/// A LEFT temporal join of `lt` with `v`, a versioned table whose rows are
/// given as a changelog (its `-D` rows delete a key).
fn temporal() -> Harness {
    let mut setup = INTERVAL_SETUP.to_vec();
    setup.push(
        "CREATE TABLE v (k BIGINT, b STRING, ts TIMESTAMP(3), PRIMARY KEY (k) NOT ENFORCED, \
         WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen')",
    );
    Harness::of(
        &setup,
        "INSERT INTO iout SELECT lt.k, a, lt.ts, b, v.ts FROM lt LEFT JOIN v FOR SYSTEM_TIME AS OF lt.ts ON lt.k = v.k",
        "TemporalJoin",
        0,
    )
    .unwrap()
    .updating_input(1)
}

#[test]
fn an_incremental_temporal_join_snapshot_holds_changed_times_and_keys_and_deletes_fired_rows() {
    let w = |s: i64| 1_577_836_800_000 + s * 1000;
    let mut h = temporal().incremental().unwrap();
    h.push_to(0, "1 a 2020-01-01T00:00:10").unwrap();
    h.push_to(1, "+I 1 x 2020-01-01T00:00:05").unwrap();
    assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 2);
    h.push_to(1, "+I 2 y 2020-01-01T00:00:06").unwrap();
    h.push_to(0, "2 b 2020-01-01T00:00:07\n3 d 2020-01-01T00:00:07")
        .unwrap();
    let fired = h.watermark(w(8)).unwrap();
    assert_eq!(fired.len(), 3, "2 b joined, 3 d padded: {fired:?}");
    // Late: it waits for the next watermark, at a time that fired.
    h.push_to(0, "2 c 2020-01-01T00:00:07").unwrap();
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    // 2 c (its time and key fired, and it waits), 2's version, 3 d gone.
    assert_eq!(deletions(&delta), vec![false, false, true]);
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");

    h.restart_from_chain().unwrap();
    assert_eq!(
        h.watermark(w(11)).unwrap(),
        lines(&[
            "+I 2 c 2020-01-01T00:00:07 2 y 2020-01-01T00:00:06",
            "+I 1 a 2020-01-01T00:00:10 1 x 2020-01-01T00:00:05",
            &format!("wm {}", w(11))
        ]),
        "the late row and the base's, with their versions; 2 b and 3 d not again"
    );
}

#[test]
fn versions_the_watermark_dropped_after_a_base_stay_dropped_in_a_restore_from_the_chain() {
    let w = |s: i64| 1_577_836_800_000 + s * 1000;
    let mut h = temporal().incremental().unwrap();
    h.push_to(1, "+I 1 x 2020-01-01T00:00:05\n+I 1 y 2020-01-01T00:00:07")
        .unwrap();
    h.snapshot_delta(true).unwrap().expect("a base");
    // At 8 s, 1 y is current: 1 x can join nothing that is not late.
    h.watermark(w(8)).unwrap();
    h.snapshot_delta(false).unwrap().expect("key 1 lost a version");
    h.restart_from_chain().unwrap();
    // A late row at 6 s finds no version, as it would had the join not stopped.
    h.push_to(0, "1 a 2020-01-01T00:00:06").unwrap();
    assert_eq!(
        h.watermark(w(9)).unwrap(),
        lines(&[
            "+I 1 a 2020-01-01T00:00:06 null null null",
            &format!("wm {}", w(9))
        ])
    );
}

#[test]
fn a_temporal_join_restored_from_an_incremental_chain_emits_what_it_would_have() {
    incremental_restores_as_if_never_stopped(&temporal, &temporal_steps(40, 20, 2000), 4);
}

/// Batches of `rows` rows for the stream (even batches) and the versioned
/// table (odd ones, every seventh row a deletion) over `keys` keys, a
/// second apart (up to 2 s out of order, every eleventh stream row 6 s
/// late), the watermark 3 s behind after every other batch.
fn temporal_steps(batches: usize, rows: usize, keys: usize) -> Vec<Step> {
    let base = 1_577_836_800; // 2020-01-01T00:00:00, s
    let mut steps = Vec::new();
    for b in 0..batches {
        let side = b % 2;
        let lines: Vec<String> = (0..rows)
            .map(|r| {
                let i = b * rows + r;
                let late = side == 0 && i.is_multiple_of(11);
                let s = b as i64 + (i % 3) as i64 - if late { 6 } else { 0 };
                let at = chrono::DateTime::from_timestamp(base + s, 0).unwrap();
                let kind = match side {
                    1 if i.is_multiple_of(7) => "-D ",
                    1 => "+I ",
                    _ => "",
                };
                let at = at.format("%Y-%m-%dT%H:%M:%S");
                format!("{kind}{} v{i} {at}", (i * 7919) % keys)
            })
            .collect();
        steps.push(Step::Rows(side, lines.join("\n")));
        if side == 1 {
            steps.push(Step::Watermark((base + b as i64 - 3) * 1000));
        }
    }
    steps
}

#[test]
fn a_spilled_temporal_join_emits_the_rows_the_heap_emits_in_its_order() {
    let steps = temporal_steps(60, 50, 90);
    let mut heap = temporal();
    let expected = emitted(&mut heap, &steps);
    let all: Vec<&String> = expected.iter().flatten().filter(|l| l.starts_with('+')).collect();
    let padded = all.iter().filter(|l| l.ends_with("null null")).count();
    assert!(
        padded > 100 && all.len() - padded > 500,
        "{padded} of {} padded",
        all.len()
    );
    let kept = state_rows_of(&heap.snapshot_only().unwrap().expect("state"));
    // A spill after every batch, and one every few batches: rows of one
    // time then fire from the store and from memory.
    for budget in [16 * 1024, 192 * 1024] {
        let dir = tempfile::tempdir().unwrap();
        let mut h = temporal().spilling(budget, dir.path()).unwrap();
        let mut got = Vec::new();
        let mut store_seen = false;
        for step in &steps {
            got.extend(emitted(&mut h, std::slice::from_ref(step)));
            store_seen |= entries_in(dir.path()) > 0;
        }
        assert!(store_seen, "versions and rows went to the store");
        assert_eq!(got, expected, "at {budget} bytes");
        assert_eq!(
            state_rows_of(&h.restart().unwrap().expect("a snapshot")),
            kept,
            "the versions and waiting rows the heap keeps"
        );
    }
}

#[test]
fn a_spilled_temporal_join_restores_from_a_snapshot_as_if_never_stopped() {
    let mut steps = temporal_steps(40, 50, 90);
    steps.push(Step::Watermark(i64::MAX));
    spilled_restores_as_if_never_stopped(&temporal, &steps);
}

#[test]
fn a_null_keyed_row_of_a_spilled_temporal_join_comes_out_padded() {
    let w = |s: i64| 1_577_836_800_000 + s * 1000;
    let dir = tempfile::tempdir().unwrap();
    let mut h = temporal().spilling(16 * 1024, dir.path()).unwrap();
    let versions: Vec<String> = (100..400)
        .map(|k| format!("+I {k} v 2020-01-01T00:00:01"))
        .collect();
    h.push_to(1, &versions.join("\n")).unwrap();
    assert!(entries_in(dir.path()) > 0, "versions went to the store");
    h.push_to(0, "null n 2020-01-01T00:00:07\n100 m 2020-01-01T00:00:07")
        .unwrap();
    assert_eq!(
        h.watermark(w(8)).unwrap(),
        lines(&[
            "+I null n 2020-01-01T00:00:07 null null null",
            "+I 100 m 2020-01-01T00:00:07 100 v 2020-01-01T00:00:01",
            &format!("wm {}", w(8))
        ])
    );
}

#[test]
fn incremental_snapshots_of_a_spilled_temporal_join_hold_changed_stream_rows_and_versions_and_delete_fired_rows()
 {
    let w = |s: i64| 1_577_836_800_000 + s * 1000;
    let dir = tempfile::tempdir().unwrap();
    let mut h = temporal()
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    // 300 keys' versions and a row waiting at 00:00:30 of each go to the
    // store; key 1's version at 5 s and a row of it at 10 s too.
    let versions: Vec<String> = (100..400)
        .map(|k| format!("+I {k} v 2020-01-01T00:00:01"))
        .collect();
    h.push_to(1, &versions.join("\n")).unwrap();
    h.push_to(1, "+I 1 x 2020-01-01T00:00:05").unwrap();
    let rows: Vec<String> = (100..400).map(|k| format!("{k} r 2020-01-01T00:00:30")).collect();
    h.push_to(0, &rows.join("\n")).unwrap();
    h.push_to(0, "1 a 2020-01-01T00:00:10\nnull n 2020-01-01T00:00:07")
        .unwrap();
    assert!(entries_in(dir.path()) > 0, "state went to the store");
    assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 603);
    // Key 2 gets a version; rows of 2 and 3 at 7 s fire with the null-keyed
    // one (2 joined, 3 and null padded), then a late row of 2 at 7 s waits.
    h.push_to(1, "+I 2 y 2020-01-01T00:00:06").unwrap();
    h.push_to(0, "2 b 2020-01-01T00:00:07\n3 d 2020-01-01T00:00:07")
        .unwrap();
    let fired = h.watermark(w(8)).unwrap();
    assert_eq!(
        fired.len(),
        4,
        "2 b joined, 3 d and the null key padded: {fired:?}"
    );
    h.push_to(0, "2 c 2020-01-01T00:00:07").unwrap();
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    let mut deleted = deletions(&delta);
    deleted.sort();
    assert_eq!(
        deleted,
        vec![false, false, true, true],
        "2 c waiting, 2's version; 3 d and the null-keyed row gone"
    );
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");

    h.restart_from_chain().unwrap();
    let out = h.watermark(w(11)).unwrap();
    assert_eq!(
        out,
        lines(&[
            "+I 2 c 2020-01-01T00:00:07 2 y 2020-01-01T00:00:06",
            "+I 1 a 2020-01-01T00:00:10 1 x 2020-01-01T00:00:05",
            &format!("wm {}", w(11))
        ]),
        "the late row and the base's, with their versions; 2 b, 3 d and the null key not again"
    );
    assert_eq!(
        h.watermark(w(31)).unwrap().len(),
        301,
        "the 300 stored rows, joined"
    );
}

#[test]
fn a_delta_of_a_spilled_temporal_join_deletes_the_stored_rows_that_fired() {
    let w = |s: i64| 1_577_836_800_000 + s * 1000;
    let dir = tempfile::tempdir().unwrap();
    let mut h = temporal()
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    let rows: Vec<String> = (100..400).map(|k| format!("{k} r 2020-01-01T00:00:30")).collect();
    h.push_to(0, &rows.join("\n")).unwrap();
    h.push_to(0, "1 a 2020-01-01T00:00:40").unwrap();
    assert!(entries_in(dir.path()) > 0, "rows went to the store");
    assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 301);
    assert_eq!(
        h.watermark(w(31)).unwrap().len(),
        301,
        "the stored rows fire, padded"
    );
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(deletions(&delta), vec![true; 300], "each fired key deleted");
    h.restart_from_chain().unwrap();
    assert_eq!(
        h.watermark(i64::MAX).unwrap(),
        lines(&[
            "+I 1 a 2020-01-01T00:00:40 null null null",
            "wm 9223372036854775807"
        ]),
        "only the row that had not fired"
    );
}

#[test]
fn a_spilled_temporal_join_restored_from_its_chain_drops_the_versions_the_watermark_dropped_since() {
    let w = |s: i64| 1_577_836_800_000 + s * 1000;
    let dir = tempfile::tempdir().unwrap();
    let make = || {
        temporal()
            .incremental()
            .unwrap()
            .spilling(16 * 1024, dir.path())
            .unwrap()
    };
    let mut h = make();
    let mut versions: Vec<String> = (100..400)
        .map(|k| format!("+I {k} v 2020-01-01T00:00:01"))
        .collect();
    versions.extend(["+I 5 p 2020-01-01T00:00:01", "+I 5 q 2020-01-01T00:00:03"].map(String::from));
    h.push_to(1, &versions.join("\n")).unwrap();
    assert!(entries_in(dir.path()) > 0, "versions went to the store");
    h.snapshot_delta(true).unwrap().expect("a base");
    // Past 3 s key 5's version at 1 s can join nothing: it is dropped when
    // the key is next read, and no delta notes it.
    h.watermark(w(4)).unwrap();
    h.snapshot_delta(false).unwrap();
    h.restart_from_chain_on_the_heap().unwrap();
    // A late row at 2 s finds no version current then, as it would have.
    h.push_to(0, "5 z 2020-01-01T00:00:02").unwrap();
    assert_eq!(
        h.watermark(w(5)).unwrap(),
        lines(&[
            "+I 5 z 2020-01-01T00:00:02 null null null",
            &format!("wm {}", w(5))
        ])
    );
}

#[test]
fn a_spilled_temporal_join_restored_from_an_incremental_chain_emits_what_it_would_have() {
    let dir = tempfile::tempdir().unwrap();
    let steps = temporal_steps(40, 20, 2000);
    let spilled = || temporal().spilling(8 * 1024, dir.path()).unwrap();
    let mut first_half = spilled();
    emitted(&mut first_half, &steps[..steps.len() / 2]);
    assert!(entries_in(dir.path()) > 0, "state goes to the store");
    drop(first_half);
    incremental_restores_as_if_never_stopped(&spilled, &steps, 4);
}

#[test]
fn a_spilled_temporal_join_snapshot_holds_the_state_of_its_barrier_while_the_join_goes_on() {
    spilled_snapshot_holds_its_barrier(&temporal, &temporal_steps(40, 50, 90));
}

/// Batches of `rows` rows for both sides of [`window_join`] in turn over
/// `keys` keys (every thirteenth key NULL), in 10 s windows a second
/// apart (up to 2 s out of order), the watermark 3 s behind after every
/// other batch, and at the end past every window.
fn window_steps(batches: usize, rows: usize, keys: usize) -> Vec<Step> {
    let base = 1_577_836_800; // 2020-01-01T00:00:00, s
    let at = |s: i64| {
        let t = chrono::DateTime::from_timestamp(base + s, 0).unwrap();
        t.format("%Y-%m-%dT%H:%M:%S").to_string()
    };
    let mut steps = Vec::new();
    for b in 0..batches {
        let side = b % 2;
        let lines: Vec<String> = (0..rows)
            .map(|r| {
                let i = b * rows + r;
                let start = (b as i64 + (i % 3) as i64) / 10 * 10;
                let (ws, we) = (at(start), at(start + 10));
                let key = match i.is_multiple_of(13) {
                    true => "null".to_string(),
                    false => ((i * 7919) % keys).to_string(),
                };
                match side {
                    0 => format!("{key} {ws} {we}"),
                    _ => format!("{key} b{i} {ws} {we}"),
                }
            })
            .collect();
        steps.push(Step::Rows(side, lines.join("\n")));
        if side == 1 {
            steps.push(Step::Watermark((base + b as i64 - 3) * 1000));
        }
    }
    steps.push(Step::Watermark(i64::MAX));
    steps
}

#[test]
fn an_incremental_window_join_snapshot_holds_the_rows_since_the_last_and_a_fired_window_stays_fired() {
    let w = |s: i64| 1_577_836_800_000 + s * 1000;
    let (w0, w10, w20) = (
        "2020-01-01T00:00:00",
        "2020-01-01T00:00:10",
        "2020-01-01T00:00:20",
    );
    let mut h = window_join("LEFT JOIN").incremental().unwrap();
    h.push_to(0, &format!("1 {w0} {w10}")).unwrap();
    assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 1);
    h.push_to(1, &format!("1 x {w0} {w10}")).unwrap();
    h.push_to(0, &format!("2 {w10} {w20}")).unwrap();
    assert_eq!(
        h.snapshot_delta(false).unwrap().expect("a delta").num_rows(),
        2,
        "the new rows only"
    );
    assert_eq!(
        h.watermark(w(10) - 1).unwrap(),
        lines(&[
            &format!("+I 1 {w0} {w10} 1 x {w0} {w10}"),
            &format!("wm {}", w(10) - 1)
        ])
    );
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");

    // The chain still holds the fired window's rows; the watermark of its
    // newest file says the window fired.
    h.restart_from_chain().unwrap();
    assert_eq!(
        h.watermark(w(20) - 1).unwrap(),
        lines(&[
            &format!("+I 2 {w10} {w20} null null null null"),
            &format!("wm {}", w(20) - 1)
        ])
    );
}

#[test]
fn a_window_join_that_spills_after_a_snapshot_on_the_heap_writes_each_row_to_one_delta() {
    let w = |s: i64| 1_577_836_800_000 + s * 1000;
    let (w0, w10, w20) = (
        "2020-01-01T00:00:00",
        "2020-01-01T00:00:10",
        "2020-01-01T00:00:20",
    );
    let dir = tempfile::tempdir().unwrap();
    let mut h = window_join("LEFT JOIN")
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    let rows = |keys: std::ops::Range<usize>, ws: &str, we: &str| -> String {
        let rows: Vec<String> = keys.map(|k| format!("{k} {ws} {we}")).collect();
        rows.join("\n")
    };
    h.push_to(0, &rows(0..10, w0, w10)).unwrap();
    assert_eq!(entries_in(dir.path()), 0, "ten rows stay in memory");
    assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 10);
    // 300 more rows of the same window: memory goes to the store with the
    // ten the base holds; then a right row and a row of the next window.
    h.push_to(0, &rows(10..310, w0, w10)).unwrap();
    assert!(entries_in(dir.path()) > 0, "rows went to the store");
    h.push_to(1, &format!("3 x {w0} {w10}")).unwrap();
    h.push_to(0, &rows(400..401, w10, w20)).unwrap();
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(delta.num_rows(), 302, "the rows since the base, once each");
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");

    h.restart_from_chain().unwrap();
    let fired = h.watermark(w(20) - 1).unwrap();
    assert_eq!(
        fired.len(),
        312,
        "310 left rows of the first window, the next one's, the watermark"
    );
    assert!(fired.contains(&format!("+I 3 {w0} {w10} 3 x {w0} {w10}")));
}

#[test]
fn a_spilled_window_join_restored_from_an_incremental_chain_emits_what_it_would_have() {
    let dir = tempfile::tempdir().unwrap();
    let steps = window_steps(40, 20, 2000);
    let spilled = || window_join("FULL JOIN").spilling(8 * 1024, dir.path()).unwrap();
    let mut first_half = spilled();
    emitted(&mut first_half, &steps[..steps.len() / 2]);
    assert!(entries_in(dir.path()) > 0, "rows go to the store");
    drop(first_half);
    incremental_restores_as_if_never_stopped(&spilled, &steps, 4);
}

#[test]
fn a_window_join_restored_from_an_incremental_chain_emits_what_it_would_have() {
    incremental_restores_as_if_never_stopped(&|| window_join("FULL JOIN"), &window_steps(40, 20, 2000), 4);
}

#[test]
fn a_spilled_window_join_emits_the_rows_the_heap_emits() {
    let steps = window_steps(60, 50, 90);
    let expected = sorted(emitted(&mut window_join("FULL JOIN"), &steps));
    let all: Vec<&String> = expected.iter().flatten().filter(|l| l.starts_with('+')).collect();
    let padded = all.iter().filter(|l| l.contains("null")).count();
    assert!(
        padded > 100 && all.len() - padded > 1000,
        "{padded} of {} padded",
        all.len()
    );
    for budget in [16 * 1024, 128 * 1024] {
        let dir = tempfile::tempdir().unwrap();
        let mut h = window_join("FULL JOIN").spilling(budget, dir.path()).unwrap();
        let mut got = Vec::new();
        let mut store_seen = false;
        for step in &steps {
            got.extend(sorted(emitted(&mut h, std::slice::from_ref(step))));
            store_seen |= entries_in(dir.path()) > 0;
        }
        assert!(store_seen, "rows went to the store");
        assert_eq!(got, expected, "at {budget} bytes");
        let snapshot = h.restart().unwrap().expect("a snapshot");
        assert_eq!(
            state_rows_of(&snapshot),
            0,
            "every window fired, in the store too"
        );
    }
}

#[test]
fn a_spilled_window_join_restores_from_a_snapshot_as_if_never_stopped() {
    spilled_restores_as_if_never_stopped(&|| window_join("LEFT JOIN"), &window_steps(40, 50, 90));
}

#[test]
fn a_spilled_window_join_snapshot_holds_the_rows_of_its_barrier_while_the_join_goes_on() {
    spilled_snapshot_holds_its_barrier(&|| window_join("FULL JOIN"), &window_steps(40, 50, 90));
}

#[test]
fn a_window_with_rows_in_the_store_and_in_memory_joins_them_all() {
    let (w0, w10) = ("2020-01-01T00:00:00", "2020-01-01T00:00:10");
    let left: Vec<String> = (0..200).map(|k| format!("{k} {w0} {w10}")).collect();
    let steps = [
        Step::Rows(0, left.join("\n")),
        // After the spill of the left rows: one row, kept in memory.
        Step::Rows(1, format!("7 x {w0} {w10}")),
        Step::Watermark(1_577_836_810_000),
    ];
    let expected = sorted(emitted(&mut window_join("LEFT JOIN"), &steps));
    let dir = tempfile::tempdir().unwrap();
    let mut h = window_join("LEFT JOIN").spilling(16 * 1024, dir.path()).unwrap();
    let mut got = emitted(&mut h, &steps[..2]);
    assert!(entries_in(dir.path()) > 0, "the left rows went to the store");
    got.extend(emitted(&mut h, &steps[2..]));
    assert_eq!(sorted(got), expected);
    assert!(
        expected[2].contains(&format!("+I 7 {w0} {w10} 7 x {w0} {w10}")),
        "{expected:?}"
    );
}
