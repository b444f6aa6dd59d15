//! The TopN operator through the harness: rank changes as rows enter and
//! leave, each ranking function, window TopN, snapshot and restore.

use crate::harness::{Harness, deletions};

#[test]
fn a_row_entering_a_full_partition_shifts_the_ranks_after_it() {
    use super::shifted_ranks;
    // Held 3 of 3, a row enters at rank 2: ranks 2 and 3 change.
    assert_eq!(shifted_ranks(1, 3, 1, 3), vec![(2, true), (3, true)]);
    // Held 1 of 3, a row enters first: rank 1 updates, rank 2 fills.
    assert_eq!(shifted_ranks(0, 1, 1, 3), vec![(1, true), (2, false)]);
    // Only ranks from `start` are output.
    assert_eq!(shifted_ranks(0, 2, 2, 3), vec![(2, true), (3, false)]);
}

const SETUP: &[&str] = &[
    "CREATE TABLE bids (auction BIGINT, price BIGINT) WITH ('connector' = 'datagen')",
    "CREATE TABLE out (auction BIGINT, price BIGINT, rn BIGINT) WITH ('connector' = 'blackhole')",
];

fn top2() -> Harness {
    Harness::of(
        SETUP,
        "INSERT INTO out SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rn FROM bids) WHERE rn <= 2",
        "Rank",
        0,
    )
    .unwrap()
}

fn lines(expected: &[&str]) -> Vec<String> {
    expected.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_top_2_emits_rank_changes_as_higher_rows_arrive() {
    let mut h = top2();
    assert_eq!(h.push("1 10\n2 5").unwrap(), lines(&["+I 1 10 1", "+I 2 5 1"]));
    assert_eq!(
        h.push("1 30").unwrap(),
        lines(&["-U 1 10 1", "+U 1 30 1", "+I 1 10 2"])
    );
    assert_eq!(
        h.push("1 20").unwrap(),
        lines(&["-U 1 10 2", "+U 1 20 2"]),
        "the row at rank 2 is pushed out"
    );
    assert_eq!(
        h.push("1 5\n1 20").unwrap(),
        Vec::<String>::new(),
        "ties rank after"
    );
}

#[test]
fn a_top_n_without_partition_by_ranks_all_rows_together() {
    let mut h = Harness::of(
        SETUP,
        "INSERT INTO out SELECT * FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY price ASC) AS rn FROM bids) WHERE rn = 1",
        "Rank",
        0,
    )
    .unwrap();
    assert_eq!(
        h.push("1 10\n2 5\n3 7").unwrap(),
        lines(&["+I 1 10 1", "-U 1 10 1", "+U 2 5 1"])
    );
}

#[test]
fn without_the_rank_in_the_output_rows_enter_and_leave_without_updates() {
    let mut h = Harness::of(
        &[
            SETUP[0],
            "CREATE TABLE out2 (auction BIGINT, price BIGINT) WITH ('connector' = 'blackhole')",
        ],
        "INSERT INTO out2 SELECT auction, price FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rn FROM bids) WHERE rn <= 2",
        "Rank",
        0,
    )
    .unwrap();
    assert_eq!(h.push("1 10\n1 30").unwrap(), lines(&["+I 1 10", "+I 1 30"]));
    assert_eq!(h.push("1 20").unwrap(), lines(&["-D 1 10", "+I 1 20"]));
    assert_eq!(h.push("1 5").unwrap(), Vec::<String>::new());
}

/// A deduplication of bids by auction on processing time, keeping the
/// first (`ASC`) or the last (`DESC`) row.
fn dedup(order: &str) -> Harness {
    let setup = [
        "CREATE TABLE bids (auction BIGINT, price BIGINT, p AS PROCTIME()) WITH ('connector' = 'datagen')",
        "CREATE TABLE out2 (auction BIGINT, price BIGINT) WITH ('connector' = 'blackhole')",
    ];
    Harness::of(
        &setup,
        &format!(
            "INSERT INTO out2 SELECT auction, price FROM (SELECT *, ROW_NUMBER() OVER \
             (PARTITION BY auction ORDER BY p {order}) AS rn FROM bids) WHERE rn = 1"
        ),
        "Deduplicate",
        0,
    )
    .unwrap()
}

#[test]
fn deduplication_on_processing_time_keeps_the_first_or_the_last_row_by_arrival() {
    let mut first = dedup("ASC");
    let rows = "1 10 2020-01-01T00:00:00Z\n1 30 2020-01-01T00:00:01Z\n2 5 2020-01-01T00:00:01Z";
    assert_eq!(
        first.push(rows).unwrap(),
        lines(&["+I 1 10 2020-01-01T00:00:00Z 1", "+I 2 5 2020-01-01T00:00:01Z 1"]),
        "the first row of each key, and nothing after"
    );
    let mut last = dedup("DESC");
    assert_eq!(
        last.push(rows).unwrap(),
        lines(&[
            "+I 1 10 2020-01-01T00:00:00Z 1",
            "-U 1 10 2020-01-01T00:00:00Z 1",
            "+U 1 30 2020-01-01T00:00:01Z 1",
            "+I 2 5 2020-01-01T00:00:01Z 1"
        ])
    );
}

#[test]
fn a_top_2_restores_its_kept_rows_in_rank_order() {
    let mut h = top2();
    h.push("1 10\n1 30\n1 20").unwrap();
    let snapshot = h.restart().unwrap().expect("state");
    assert_eq!(snapshot.rows.unwrap().num_rows(), 2, "only the top 2 are kept");
    assert_eq!(h.push("1 25").unwrap(), lines(&["-U 1 20 2", "+U 1 25 2"]));
}

#[test]
fn a_top_n_over_an_updating_input_moves_the_next_row_up_when_one_is_retracted() {
    let mut h = Harness::of(
        &[
            SETUP[0],
            "CREATE TABLE out2 (auction BIGINT, n BIGINT, rn BIGINT) WITH ('connector' = 'blackhole')",
        ],
        "INSERT INTO out2 SELECT * FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY n DESC) AS rn FROM \
         (SELECT auction, SUM(price) AS n FROM bids GROUP BY auction)) WHERE rn <= 2",
        "Rank(strategy=[RetractStrategy]",
        0,
    )
    .unwrap();
    assert_eq!(
        h.push("+I 1 5\n+I 2 3\n+I 3 1").unwrap(),
        lines(&["+I 1 5 1", "+I 2 3 2"]),
        "a row ranked third is kept but not emitted"
    );
    assert_eq!(
        h.push("-U 1 5\n+U 1 0").unwrap(),
        lines(&["-U 1 5 1", "+U 2 3 1", "-U 2 3 2", "+U 3 1 2"]),
        "the third row comes back up; the updated row ranks fourth"
    );
    let snapshot = h.restart().unwrap().expect("state");
    assert_eq!(snapshot.rows.unwrap().num_rows(), 3, "every row is kept");
    assert_eq!(
        h.push("-D 2 3").unwrap(),
        lines(&["-U 2 3 1", "+U 3 1 1", "-U 3 1 2", "+U 1 0 2"])
    );
}

fn ranked(function: &str) -> Harness {
    Harness::of(
        SETUP,
        &format!(
            "INSERT INTO out SELECT * FROM (SELECT *, {function}() OVER (PARTITION BY auction ORDER BY price DESC) \
             AS rk FROM bids) WHERE rk <= 2"
        ),
        "Rank",
        0,
    )
    .unwrap()
}

#[test]
fn rank_gives_ties_one_rank_and_skips_the_ranks_they_fill() {
    let mut h = ranked("RANK");
    assert_eq!(h.push("1 10").unwrap(), lines(&["+I 1 10 1"]));
    assert_eq!(
        h.push("1 20").unwrap(),
        lines(&["-U 1 10 1", "+U 1 20 1", "+I 1 10 2"])
    );
    assert_eq!(
        h.push("1 20").unwrap(),
        lines(&["-D 1 10 2", "+I 1 20 1"]),
        "a tie at rank 1 pushes the next row to rank 3"
    );
    assert_eq!(
        h.push("1 15").unwrap(),
        Vec::<String>::new(),
        "ranked 3 after the ties"
    );
}

#[test]
fn dense_rank_gives_ties_one_rank_without_gaps() {
    let mut h = ranked("DENSE_RANK");
    h.push("1 10\n1 20").unwrap();
    assert_eq!(h.push("1 20").unwrap(), lines(&["+I 1 20 1"]), "10 stays second");
    assert_eq!(h.push("1 5").unwrap(), Vec::<String>::new());
    assert_eq!(h.push("1 15").unwrap(), lines(&["-U 1 10 2", "+U 1 15 2"]));
}

const EVENTS: &[&str] = &[
    "CREATE TABLE bids (auction BIGINT, price BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) \
     WITH ('connector' = 'datagen')",
    "CREATE TABLE out (auction BIGINT, price BIGINT, ts TIMESTAMP(3), rn BIGINT) WITH ('connector' = 'blackhole')",
];

#[test]
fn a_tie_ranks_by_the_rows_values_whatever_order_the_rows_arrive_in() {
    let dedup = || {
        Harness::of(
            EVENTS,
            "INSERT INTO out SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY ts DESC) \
             AS rn FROM bids) WHERE rn = 1",
            "Rank",
            0,
        )
        .unwrap()
    };
    let (ten, twenty) = ("1 10 2020-01-01T00:00:01", "1 20 2020-01-01T00:00:01");
    assert_eq!(
        dedup().push(&format!("{twenty}\n{ten}")).unwrap(),
        lines(&[
            &format!("+I {twenty} 1"),
            &format!("-U {twenty} 1"),
            &format!("+U {ten} 1")
        ])
    );
    assert_eq!(
        dedup().push(&format!("{ten}\n{twenty}")).unwrap(),
        lines(&[&format!("+I {ten} 1")]),
        "the same row is kept"
    );
}

fn window_top2() -> Harness {
    Harness::of(
        &[
            EVENTS[0],
            "CREATE TABLE out2 (auction BIGINT, price BIGINT, ts TIMESTAMP(3), ws TIMESTAMP(3), we TIMESTAMP(3), \
             wt TIMESTAMP(3), rn BIGINT) WITH ('connector' = 'blackhole')",
        ],
        "INSERT INTO out2 SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end \
         ORDER BY price DESC) AS rn FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND))) \
         WHERE rn <= 2",
        "WindowRank",
        0,
    )
    .unwrap()
}

#[test]
fn a_window_top_n_emits_each_windows_ranks_when_the_watermark_passes_its_end() {
    let mut h = window_top2();
    let window = |t: &str, price: u32, start: u32| {
        format!(
            "1 {price} 2020-01-01T00:00:{t} 2020-01-01T00:00:{start:02} 2020-01-01T00:00:{:02} \
             2020-01-01T00:00:{:02}.999",
            start + 10,
            start + 9
        )
    };
    let rows = [
        window("01", 10, 0),
        window("02", 30, 0),
        window("03", 20, 0),
        window("11", 5, 10),
    ];
    assert_eq!(
        h.push(&rows.join("\n")).unwrap(),
        Vec::<String>::new(),
        "nothing before the window ends"
    );
    let end = 1577836810000i64; // 2020-01-01T00:00:10
    assert_eq!(
        h.watermark(end - 1).unwrap(),
        lines(&[
            "+I 1 30 2020-01-01T00:00:02 2020-01-01T00:00:00 2020-01-01T00:00:10 2020-01-01T00:00:09.999 1",
            "+I 1 20 2020-01-01T00:00:03 2020-01-01T00:00:00 2020-01-01T00:00:10 2020-01-01T00:00:09.999 2",
            &format!("wm {}", end - 1),
        ])
    );
    assert_eq!(
        h.push(&window("04", 99, 0)).unwrap(),
        Vec::<String>::new(),
        "late: dropped"
    );
    let snapshot = h.restart().unwrap().expect("state");
    assert_eq!(snapshot.rows.unwrap().num_rows(), 1, "only the open window's row");
    assert_eq!(
        h.push(&window("05", 99, 0)).unwrap(),
        Vec::<String>::new(),
        "still late after a restore"
    );
    assert_eq!(
        h.watermark(end + 10_000).unwrap(),
        lines(&[
            "+I 1 5 2020-01-01T00:00:11 2020-01-01T00:00:10 2020-01-01T00:00:20 2020-01-01T00:00:19.999 1",
            &format!("wm {}", end + 10_000),
        ])
    );
}

/// Batches of `rows` rows each of `auction price` over `keys` auctions,
/// a batch's auctions far apart so that every batch touches new partitions.
fn many_bids(batches: usize, rows: usize, keys: usize) -> Vec<String> {
    (0..batches)
        .map(|b| {
            (0..rows)
                .map(|r| {
                    let i = b * rows + r;
                    format!("{} {}", (i * 7919) % keys, (i * 31) % 1000)
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}

/// Everything `h` emits for `batches`, in order.
fn emitted(h: &mut Harness, batches: &[String]) -> Vec<String> {
    batches.iter().flat_map(|b| h.push(b).unwrap()).collect()
}

/// Everything `h` emits for `batches` and at the end of input, when rows
/// waiting for spilled partitions come out.
fn emitted_to_end(h: &mut Harness, batches: &[String]) -> Vec<String> {
    let mut lines = emitted(h, batches);
    lines.extend(h.finish().unwrap());
    lines
}

/// Each partition's changes in their order, the partition named by
/// `partition` of a line's first value (a spilled TopN emits each
/// partition's changes as the heap does; partitions whose key group was
/// read later come later).
fn per_partition(
    lines: &[String],
    partition: impl Fn(i64) -> i64,
) -> std::collections::BTreeMap<i64, Vec<String>> {
    let mut partitions = std::collections::BTreeMap::<i64, Vec<String>>::new();
    for line in lines {
        let first: i64 = line.split(' ').nth(1).unwrap().parse().unwrap();
        partitions.entry(partition(first)).or_default().push(line.clone());
    }
    partitions
}

/// Whether the spilling backend made its store (or a run) under `dir`.
fn stored_under(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some())
}

#[test]
fn a_spilled_top_2_emits_the_rank_changes_the_heap_emits() {
    let dir = tempfile::tempdir().unwrap();
    let batches = many_bids(60, 100, 2000);
    let expected = emitted(&mut top2(), &batches);
    assert!(expected.len() >= 4000, "{} changes", expected.len());
    let mut spilling = top2().spilling(16 * 1024, dir.path()).unwrap();
    let mut got = Vec::new();
    let mut store_seen = false;
    for batch in &batches {
        got.extend(spilling.push(batch).unwrap());
        store_seen |= stored_under(dir.path());
    }
    assert!(store_seen, "partitions went to files");
    got.extend(spilling.finish().unwrap());
    assert_eq!(per_partition(&got, |a| a), per_partition(&expected, |a| a));
}

/// The first auction from `from` in `auction`'s key group (of 128).
fn auction_in_the_key_group_of(auction: i64, from: i64) -> i64 {
    use arrow::array::{ArrayRef, Int64Array};
    let group = |a: i64| {
        let keys: Vec<ArrayRef> = vec![std::sync::Arc::new(Int64Array::from(vec![a]))];
        weir_state::snapshot::key_groups(&keys, 1, 128).unwrap().value(0)
    };
    (from..).find(|a| group(*a) == group(auction)).unwrap()
}

#[test]
fn rows_of_spilled_partitions_wait_for_their_key_group_and_not_once_its_files_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let (mut heap, mut h) = (top2(), top2().spilling(64 * 1024, dir.path()).unwrap());
    // About 40 partitions in each of 128 key groups: one row is not enough
    // to read its key group's files.
    let all: Vec<String> = (0..5000).map(|a| format!("{a} 10")).collect();
    heap.push(&all.join("\n")).unwrap();
    h.push(&all.join("\n")).unwrap();
    h.restart().unwrap();
    assert!(stored_under(dir.path()), "the restore wrote files");
    assert!(
        h.push("0 20").unwrap().is_empty(),
        "auction 0's key group has files"
    );
    let later = weir_common::time::wall_clock_millis() + crate::waiting::LONGEST_WAIT_MS;
    assert_eq!(
        h.processing_time(later).unwrap(),
        heap.push("0 20").unwrap(),
        "read after a second, ranked as on the heap"
    );
    let other = auction_in_the_key_group_of(0, 1);
    assert_eq!(
        h.push(&format!("{other} 30")).unwrap(),
        heap.push(&format!("{other} 30")).unwrap(),
        "another partition of the key group read is in memory"
    );
    let new = auction_in_the_key_group_of(0, 5000);
    assert_eq!(
        h.push(&format!("{new} 5")).unwrap(),
        lines(&[&format!("+I {new} 5 1")]),
        "a new partition of a key group read has no rows to wait for"
    );
    assert!(h.finish().unwrap().is_empty(), "nothing waits");
}

#[test]
fn spilled_deduplication_keeps_the_heaps_first_and_last_rows() {
    let batches: Vec<String> = many_bids(40, 100, 1500)
        .iter()
        .map(|b| {
            b.lines()
                .map(|l| format!("{l} 2020-01-01T00:00:00Z"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    for order in ["ASC", "DESC"] {
        let dir = tempfile::tempdir().unwrap();
        let expected = emitted(&mut dedup(order), &batches);
        let mut spilling = dedup(order).spilling(8 * 1024, dir.path()).unwrap();
        assert_eq!(
            per_partition(&emitted_to_end(&mut spilling, &batches), |a| a),
            per_partition(&expected, |a| a),
            "{order}"
        );
        assert!(stored_under(dir.path()), "{order}: partitions went to the store");
    }
}

/// A top 2 over an updating input (sums per auction), which keeps every row.
fn updating_top2() -> Harness {
    Harness::of(
        &[
            SETUP[0],
            "CREATE TABLE out2 (auction BIGINT, n BIGINT, rn BIGINT) WITH ('connector' = 'blackhole')",
        ],
        "INSERT INTO out2 SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY MOD(auction, 50) ORDER BY n DESC) \
         AS rn FROM (SELECT auction, SUM(price) AS n FROM bids GROUP BY auction)) WHERE rn <= 2",
        "Rank(strategy=[RetractStrategy]",
        0,
    )
    .unwrap()
}

#[test]
fn a_spilled_top_n_over_an_updating_input_moves_rows_up_as_the_heap_does() {
    // Each auction's sum is updated again and again: -U the old, +U the new.
    let batches: Vec<String> = (0..40)
        .map(|b| {
            (0..100)
                .map(|r| {
                    let auction = (b * 100 + r) * 7 % 1000;
                    match b {
                        0..10 => format!("+I {auction} {}", r % 13),
                        _ => format!("-U {auction} {}\n+U {auction} {}", r % 13, (b * r) % 17),
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let expected = emitted(&mut updating_top2(), &batches);
    let mut spilling = updating_top2().spilling(8 * 1024, dir.path()).unwrap();
    assert_eq!(
        per_partition(&emitted_to_end(&mut spilling, &batches), |a| a % 50),
        per_partition(&expected, |a| a % 50)
    );
    assert!(stored_under(dir.path()));
}

#[test]
fn a_spilled_top_2_restores_from_a_snapshot_as_if_never_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let batches = many_bids(40, 100, 500);
    let (before, after) = batches.split_at(batches.len() / 2);
    let mut heap = top2();
    emitted(&mut heap, before);
    let expected = emitted(&mut heap, after);

    let mut h = top2().spilling(16 * 1024, dir.path()).unwrap();
    emitted(&mut h, before);
    let snapshot = h.restart().unwrap().expect("a snapshot");
    assert_eq!(snapshot.runs.len(), 1, "the store as one run");
    assert_eq!(
        snapshot.runs[0].info.rows, 1000,
        "two of the four rows of each of 500 auctions"
    );
    assert_eq!(emitted(&mut h, after), expected);
}

#[test]
fn a_spilled_top_2_snapshot_holds_the_ranks_of_its_barrier_while_the_operator_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let batches = many_bids(40, 100, 500);
    let (before, after) = batches.split_at(batches.len() / 2);
    let mut heap = top2();
    emitted(&mut heap, before);
    let expected = emitted(&mut heap, after);

    let mut h = top2().spilling(16 * 1024, dir.path()).unwrap();
    emitted(&mut h, before);
    let snapshot = h.snapshot_unwritten().unwrap().expect("a snapshot");
    assert_eq!(
        snapshot.deferred.len(),
        1,
        "the store, read by the snapshot's writer"
    );
    emitted(&mut h, after);
    h.restart_from(snapshot).unwrap();
    assert_eq!(
        emitted(&mut h, after),
        expected,
        "the ranks as they were at the barrier"
    );
}

#[test]
fn a_small_top_n_under_the_spilling_backend_never_spills() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = top2().spilling(1 << 20, dir.path()).unwrap();
    h.push("1 10\n1 30\n1 20").unwrap();
    let snapshot = h.restart().unwrap().expect("state");
    assert!(snapshot.runs.is_empty(), "state files as on the heap");
    assert!(
        !stored_under(dir.path()),
        "{:?}",
        std::fs::read_dir(dir.path()).unwrap().collect::<Vec<_>>()
    );
    assert_eq!(h.push("1 25").unwrap(), lines(&["-U 1 20 2", "+U 1 25 2"]));
}

#[test]
fn an_incremental_window_top_n_snapshot_holds_changed_partitions_and_deletes_fired_windows() {
    let mut h = window_top2().incremental().unwrap();
    let row = |t: &str, price: u32, start: u32| {
        format!(
            "1 {price} 2020-01-01T00:00:{t} 2020-01-01T00:00:{start:02} 2020-01-01T00:00:{:02} \
             2020-01-01T00:00:{:02}.999",
            start + 10,
            start + 9
        )
    };
    h.push(&[row("01", 10, 0), row("02", 30, 0), row("11", 5, 10)].join("\n"))
        .unwrap();
    assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 3);
    h.push(&row("03", 20, 0)).unwrap();
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(
        deletions(&delta),
        vec![false, false],
        "window [0, 10)'s two kept rows"
    );
    let end = 1577836810000i64; // 2020-01-01T00:00:10
    assert_eq!(
        h.watermark(end - 1).unwrap().len(),
        3,
        "two ranks and the watermark"
    );
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(deletions(&delta), vec![true], "the fired window's partition");
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");

    h.restart_from_chain().unwrap();
    assert_eq!(h.push(&row("04", 99, 0)).unwrap(), Vec::<String>::new());
    assert_eq!(
        h.watermark(end + 10_000 - 1).unwrap(),
        lines(&[
            "+I 1 5 2020-01-01T00:00:11 2020-01-01T00:00:10 2020-01-01T00:00:20 2020-01-01T00:00:19.999 1",
            &format!("wm {}", end + 10_000 - 1),
        ]),
        "the open window from the base; the fired one neither again nor with its late row"
    );
}

#[test]
fn a_window_top_n_restored_from_an_incremental_chain_emits_what_it_would_have() {
    use crate::harness::{Step, incremental_restores_as_if_never_stopped};
    let second = |s: usize| format!("2020-01-01T00:{:02}:{:02}", s / 60, s % 60);
    // 12 windows of 10 s, 20 rows a second over 500 auctions.
    let mut steps = Vec::new();
    for s in 0..120 {
        let rows: Vec<String> = (0..20)
            .map(|r| {
                let (start, end) = (s / 10 * 10, s / 10 * 10 + 10);
                format!(
                    "{} {} {} {} {} {}.999",
                    (s * 20 + r) * 7 % 500,
                    (s * 7 + r * 13) % 101,
                    second(s),
                    second(start),
                    second(end),
                    second(end - 1)
                )
            })
            .collect();
        steps.push(Step::Rows(0, rows.join("\n")));
        if s % 10 == 9 {
            steps.push(Step::Watermark(1577836800000 + (s as i64 - 5) * 1000));
        }
    }
    steps.push(Step::Watermark(i64::MAX));
    let window = || {
        Harness::of(
            &[
                EVENTS[0],
                "CREATE TABLE out2 (auction BIGINT, price BIGINT, ts TIMESTAMP(3), ws TIMESTAMP(3), we TIMESTAMP(3), \
                 wt TIMESTAMP(3), rn BIGINT) WITH ('connector' = 'blackhole')",
            ],
            "INSERT INTO out2 SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction, window_start, window_end \
             ORDER BY price DESC) AS rn FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND))) \
             WHERE rn <= 2",
            "WindowRank",
            0,
        )
        .unwrap()
    };
    incremental_restores_as_if_never_stopped(&window, &steps, 5);
}

#[test]
fn a_spilled_window_top_n_fires_the_heaps_ranks_across_a_restore_and_leaves_no_window_behind() {
    let second = |s: usize| format!("2020-01-01T00:{:02}:{:02}", s / 60, s % 60);
    // 30 windows of 10 s, 20 rows a second over 100 auctions.
    let batches: Vec<String> = (0..300)
        .map(|s| {
            (0..20)
                .map(|r| {
                    let auction = (s * 20 + r) % 100;
                    let (start, end) = (s / 10 * 10, s / 10 * 10 + 10);
                    format!(
                        "{auction} {} {} {} {} {}.999",
                        (s * 7 + r * 13) % 101,
                        second(s),
                        second(start),
                        second(end),
                        second(end - 1)
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    let window = || {
        Harness::of(
            &[
                EVENTS[0],
                "CREATE TABLE out2 (auction BIGINT, price BIGINT, ts TIMESTAMP(3), ws TIMESTAMP(3), we TIMESTAMP(3), \
                 wt TIMESTAMP(3), rn BIGINT) WITH ('connector' = 'blackhole')",
            ],
            "INSERT INTO out2 SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction, window_start, window_end \
             ORDER BY price DESC) AS rn FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND))) \
             WHERE rn <= 2",
            "WindowRank",
            0,
        )
        .unwrap()
    };
    let start = 1577836800000i64; // 2020-01-01T00:00:00
    let dir = tempfile::tempdir().unwrap();
    let spilled = std::cell::Cell::new(false);
    let run = |h: &mut Harness, restart_at: usize| -> Vec<String> {
        let mut out = Vec::new();
        for (s, batch) in batches.iter().enumerate() {
            if s == restart_at {
                h.restart().unwrap();
            }
            out.extend(h.push(batch).unwrap());
            spilled.set(spilled.get() || stored_under(dir.path()));
            if s % 10 == 9 {
                out.extend(h.watermark(start + (s as i64 - 5) * 1000).unwrap());
            }
        }
        out.extend(h.watermark(start + 400_000).unwrap());
        out
    };
    let expected = run(&mut window(), usize::MAX);
    assert_eq!(
        expected.iter().filter(|l| l.starts_with("+I")).count(),
        30 * 100 * 2
    );
    // Rows of spilled partitions wait for their key group's read, and a
    // restore registers the open windows' partitions in the files' order:
    // a window fires the same rows, not in the same order.
    let fired = |lines: Vec<String>| -> Vec<Vec<String>> {
        let mut segments = vec![Vec::new()];
        for line in lines {
            let ends = line.starts_with("wm");
            segments.last_mut().expect("one").push(line);
            if ends {
                segments.push(Vec::new());
            }
        }
        segments.iter_mut().for_each(|s| s.sort());
        segments
    };
    let mut h = window().spilling(16 * 1024, dir.path()).unwrap();
    assert!(fired(run(&mut h, usize::MAX)) == fired(expected.clone()));
    let mut restarted = window().spilling(16 * 1024, dir.path()).unwrap();
    assert!(
        fired(run(&mut restarted, 155)) == fired(expected.clone()),
        "restored from the store's run mid-window"
    );
    assert!(spilled.get(), "partitions went to files");
    let snapshot = h.restart().unwrap().expect("the watermark");
    assert!(
        snapshot.runs.is_empty(),
        "every window fired: the store holds none"
    );
    assert_eq!(snapshot.watermark("t").unwrap(), start + 400_000);
}

fn top2_with_ttl(ttl: &str) -> Harness {
    let mut setup = SETUP.to_vec();
    let ttl = format!("SET 'table.exec.state.ttl' = '{ttl}'");
    setup.push(&ttl);
    Harness::of(
        &setup,
        "INSERT INTO out SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rn FROM bids) WHERE rn <= 2",
        "Rank",
        0,
    )
    .unwrap()
}

#[test]
fn a_partition_not_written_for_longer_than_the_state_ttl_ranks_afresh_across_a_restore_too() {
    let mut h = top2_with_ttl("1 s");
    h.push("1 10\n1 30\n2 5").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(600));
    let rows = h.restart().unwrap().unwrap().rows.unwrap();
    assert!(rows.schema().column_with_name("_written").is_some());
    assert_eq!(h.push("2 3").unwrap(), lines(&["+I 2 3 2"]), "written again");
    std::thread::sleep(std::time::Duration::from_millis(600));
    // Auction 1 was written 1.2 s ago: forgotten, nothing retracted; 2 was
    // written 0.6 s ago: its ranks hold.
    assert_eq!(h.push("1 20").unwrap(), lines(&["+I 1 20 1"]));
    assert_eq!(h.push("2 4").unwrap(), lines(&["-U 2 3 2", "+U 2 4 2"]));
}

/// Bids of auctions `0..keys`, one each.
fn one_bid_each(keys: usize) -> String {
    (0..keys).map(|k| format!("{k} 1")).collect::<Vec<_>>().join("\n")
}

#[test]
fn the_state_ttl_sweeps_a_slice_of_the_partitions_per_tick_and_all_of_them_in_half_the_ttl() {
    let mut h = top2_with_ttl("1 h");
    h.push(&one_bid_each(20_000)).unwrap();
    let later = weir_common::time::wall_clock_millis() + 2 * 3_600_000;
    let kept = |h: &mut Harness| {
        h.snapshot_only()
            .unwrap()
            .and_then(|s| s.rows)
            .map_or(0, |r| r.num_rows())
    };
    h.processing_time(later).unwrap();
    let first = kept(&mut h);
    assert!(
        first > 15_000 && first < 20_000,
        "the first tick sweeps a slice: {first} left"
    );
    for minute in 1..=30 {
        h.processing_time(later + minute * 60_000).unwrap();
    }
    assert_eq!(kept(&mut h), 0, "every partition swept within half the TTL");
}

#[test]
fn spilled_partitions_past_the_state_ttl_are_swept_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = top2_with_ttl("1 h").spilling(16 * 1024, dir.path()).unwrap();
    for batch in many_bids(20, 100, 2000) {
        h.push(&batch).unwrap();
    }
    assert!(stored_under(dir.path()));
    let later = weir_common::time::wall_clock_millis() + 2 * 3_600_000;
    for minute in 0..3 {
        h.processing_time(later + minute * 60_000).unwrap();
    }
    let snapshot = h.restart().unwrap().expect("a snapshot");
    assert!(snapshot.runs.is_empty(), "every partition expired");
    assert_eq!(h.push("1 10").unwrap(), lines(&["+I 1 10 1"]), "ranked afresh");
}

#[test]
fn an_incremental_top_n_snapshot_holds_the_partitions_changed_since_the_last_one() {
    let mut h = top2().incremental().unwrap();
    h.push("1 10\n1 30\n2 5\n3 1").unwrap();
    assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 4);
    h.push("1 20").unwrap();
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(
        deletions(&delta),
        vec![false, false],
        "auction 1's two rows, as they are now"
    );
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");
    h.push("2 6").unwrap();
    h.snapshot_delta(false).unwrap().expect("a delta");
    h.restart_from_chain().unwrap();
    assert_eq!(h.push("1 25").unwrap(), lines(&["-U 1 20 2", "+U 1 25 2"]));
    assert_eq!(h.push("2 4").unwrap(), Vec::<String>::new(), "6 and 5 are kept");
    assert_eq!(
        h.push("3 2").unwrap(),
        lines(&["-U 3 1 1", "+U 3 2 1", "+I 3 1 2"])
    );
}

#[test]
fn a_partition_whose_last_row_was_retracted_is_deleted_by_the_next_delta() {
    let mut h = updating_top2().incremental().unwrap();
    h.push("+I 1 5\n+I 2 3").unwrap();
    h.snapshot_delta(true).unwrap().expect("a base");
    // Partitions are MOD(auction, 50): auction 1 leaves partition 1 empty.
    h.push("-D 1 5").unwrap();
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(deletions(&delta), vec![true]);
    h.restart_from_chain().unwrap();
    assert_eq!(
        h.push("+I 51 1").unwrap(),
        lines(&["+I 51 1 1"]),
        "partition 1 starts empty"
    );
    assert_eq!(
        h.push("+I 52 9").unwrap(),
        lines(&["-U 2 3 1", "+U 52 9 1", "+I 2 3 2"])
    );
}

#[test]
fn incremental_snapshots_of_a_spilled_top_n_hold_the_partitions_changed_in_memory_and_in_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let first = many_bids(40, 100, 500);
    // Higher bids for auctions 0..100, batch after batch: memory spills
    // them to the store several times before the next snapshot.
    let second: Vec<String> = (0..20)
        .map(|b| {
            (0..100)
                .map(|a| format!("{a} {}", 1000 + b))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect();
    let third = many_bids(10, 100, 500);
    let mut heap = top2();
    emitted(&mut heap, &first);
    emitted(&mut heap, &second);
    let expected = emitted(&mut heap, &third);

    let mut h = top2()
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    emitted(&mut h, &first);
    assert!(stored_under(dir.path()), "partitions went to the store");
    let base = h.snapshot_delta(true).unwrap().expect("a base");
    assert_eq!(base.num_rows(), 1000, "two rows of each of 500 auctions");
    emitted(&mut h, &second);
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(
        deletions(&delta),
        vec![false; 200],
        "the two rows of each of the 100 auctions bid on, as they are now"
    );
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");
    h.restart_from_chain().unwrap();
    assert_eq!(emitted(&mut h, &third), expected);
}

#[test]
fn a_spilled_top_n_over_an_updating_input_restored_from_an_incremental_chain_emits_what_it_would_have() {
    use crate::harness::{Step, incremental_restores_as_if_never_stopped};
    // Sums of 500 auctions updated again and again, a block of ten
    // partitions (auction % 50) a batch, so that a delta holds some of
    // them; batch 15 deletes every auction of partitions 0..10, which
    // empties them, and from batch 20 on they come back.
    let mut sums = std::collections::HashMap::new();
    let mut steps = Vec::new();
    for b in 0..40 {
        let mut rows = Vec::new();
        for r in 0..100 {
            let auction = (b % 5) * 10 + r % 10 + 50 * (r / 10);
            let new = (b * r) % 17;
            let deleting = (15..20).contains(&b) && auction % 50 < 10;
            match (sums.get(&auction).copied(), deleting) {
                (Some(old), true) => {
                    rows.push(format!("-D {auction} {old}"));
                    sums.remove(&auction);
                }
                (None, true) => {}
                (Some(old), false) => {
                    rows.push(format!("-U {auction} {old}\n+U {auction} {new}"));
                    sums.insert(auction, new);
                }
                (None, false) => {
                    rows.push(format!("+I {auction} {new}"));
                    sums.insert(auction, new);
                }
            }
        }
        steps.push(Step::Rows(0, rows.join("\n")));
    }
    let dir = tempfile::tempdir().unwrap();
    let spilled = || updating_top2().spilling(8 * 1024, dir.path()).unwrap();
    let mut first_half = spilled();
    crate::harness::emitted(&mut first_half, &steps[..steps.len() / 2]);
    assert!(stored_under(dir.path()), "partitions go to the store");
    drop(first_half);
    incremental_restores_as_if_never_stopped(&spilled, &steps, 3);
}

#[test]
fn a_delta_of_a_spilled_top_n_deletes_the_partitions_the_state_ttl_swept_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = top2_with_ttl("1 h")
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    for batch in many_bids(20, 100, 2000) {
        h.push(&batch).unwrap();
    }
    let base = h.snapshot_delta(true).unwrap().expect("a base");
    let later = weir_common::time::wall_clock_millis() + 2 * 3_600_000;
    for minute in 0..3 {
        h.processing_time(later + minute * 60_000).unwrap();
    }
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    let deleted = deletions(&delta);
    assert!(
        deleted.iter().all(|d| *d) && deleted.len() == 2000,
        "each of 2000 partitions deleted ({} rows in the base; {} of {} rows deleting)",
        base.num_rows(),
        deleted.iter().filter(|d| **d).count(),
        deleted.len()
    );
    h.restart_from_chain().unwrap();
    assert_eq!(h.push("1 10").unwrap(), lines(&["+I 1 10 1"]), "ranked afresh");
}
