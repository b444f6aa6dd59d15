//! The OVER aggregation through the harness: rows waiting for the
//! watermark, ROWS and RANGE frames, late rows, processing time, a
//! snapshot/restore round trip, and the same under the spilling backend.

use std::collections::BTreeMap;

use crate::harness::{
    Harness, Step, emitted, emitted_spilling, entries_in, spilled_restores_as_if_never_stopped_by,
    spilled_snapshot_holds_its_barrier_by, state_rows_of,
};

const EVENTS: &str = "CREATE TABLE bids (auction BIGINT, price BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) \
                      WITH ('connector' = 'datagen')";

fn over(select: &str) -> Harness {
    Harness::of(
        &[
            EVENTS,
            "CREATE TABLE out (auction BIGINT, price BIGINT, ts TIMESTAMP(3), a BIGINT, b BIGINT) \
             WITH ('connector' = 'blackhole')",
        ],
        &format!("INSERT INTO out SELECT auction, price, ts, {select} FROM bids"),
        "OverAggregate",
        0,
    )
    .unwrap()
}

fn lines(expected: &[&str]) -> Vec<String> {
    expected.iter().map(|s| s.to_string()).collect()
}

const T0: i64 = 1577836800000; // 2020-01-01T00:00:00

fn at(second: u32) -> String {
    format!("2020-01-01T00:00:{second:02}")
}

/// Each auction's lines (`+I auction ...`), in the order they came.
fn per_auction(lines: &[String]) -> BTreeMap<String, Vec<String>> {
    let mut auctions = BTreeMap::<String, Vec<String>>::new();
    for line in lines.iter().filter(|l| !l.starts_with("wm ")) {
        let auction = line.split(' ').nth(1).unwrap().to_string();
        auctions.entry(auction).or_default().push(line.clone());
    }
    auctions
}

/// Each row line with a watermark beside it: the last one before it
/// (`first`: the first one after it; `i64::MIN` / `i64::MAX` for none),
/// sorted.
fn watermark_beside(lines: &[String], first: bool) -> Vec<(String, i64)> {
    let (mut beside, mut open) = (Vec::new(), Vec::new());
    let mut last = i64::MIN;
    for line in lines {
        match line.strip_prefix("wm ") {
            Some(w) => {
                last = w.parse().unwrap();
                beside.extend(open.drain(..).map(|l| (l, last)));
            }
            None if first => open.push(line.clone()),
            None => beside.push((line.clone(), last)),
        }
    }
    beside.extend(open.into_iter().map(|l| (l, i64::MAX)));
    beside.sort();
    beside
}

/// A spilled OVER aggregation's output (each step's lines) against the
/// heap's: each auction's rows in the heap's order, no row after a
/// watermark the heap passed on only after it, and the same last
/// watermark. (A spilled partition's rows wait for their key group's read,
/// so they may come later, with the watermark held back until then, and
/// partitions interleave otherwise.)
fn same_over(got: Vec<Vec<String>>, expected: Vec<Vec<String>>, what: &str) {
    let (got, expected) = (got.concat(), expected.concat());
    assert_eq!(per_auction(&got), per_auction(&expected), "{what}");
    let (before, after) = (watermark_beside(&got, false), watermark_beside(&expected, true));
    for ((line, got), (_, heap)) in before.iter().zip(&after) {
        assert!(
            got < heap,
            "{what}: {line} after watermark {got}, the heap's first after it {heap}"
        );
    }
    let last = |lines: &[String]| lines.iter().rev().find(|l| l.starts_with("wm ")).cloned();
    assert_eq!(last(&got), last(&expected), "{what}: the last watermark");
}

/// A wall clock past every row's wait for its key group's read.
fn a_second_later() -> i64 {
    weir_common::time::wall_clock_millis() + crate::waiting::LONGEST_WAIT_MS
}

/// The watermark passed to `h`, then a second of wall clock: what they
/// emitted (a spilled partition's rows and the watermark wait up to a
/// second for its key group's read).
fn released(h: &mut Harness, watermark: i64) -> Vec<String> {
    let mut lines = h.watermark(watermark).unwrap();
    lines.extend(h.processing_time(a_second_later()).unwrap());
    lines
}

#[test]
fn rows_wait_for_the_watermark_and_enter_in_time_order() {
    let w = "OVER (PARTITION BY auction ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)";
    let mut h = over(&format!("SUM(price) {w}, COUNT(*) {w}"));
    let rows = [
        format!("1 10 {}", at(3)),
        format!("1 20 {}", at(1)),
        format!("2 5 {}", at(2)),
        format!("1 40 {}", at(5)),
    ];
    assert_eq!(h.push(&rows.join("\n")).unwrap(), Vec::<String>::new());
    assert_eq!(
        h.watermark(T0 + 3000).unwrap(),
        lines(&[
            &format!("+I 1 20 {} 20 1", at(1)),
            &format!("+I 2 5 {} 5 1", at(2)),
            &format!("+I 1 10 {} 30 2", at(3)),
            &format!("wm {}", T0 + 3000),
        ])
    );
    assert_eq!(h.push(&format!("1 99 {}", at(3))).unwrap(), Vec::<String>::new());
    let snapshot = h.restart().unwrap().expect("state");
    assert!(snapshot.rows.is_some());
    assert_eq!(
        h.watermark(T0 + 10_000).unwrap(),
        lines(&[&format!("+I 1 40 {} 50 2", at(5)), &format!("wm {}", T0 + 10_000),]),
        "the late row was dropped; 20 left the frame of 2 rows"
    );
}

#[test]
fn a_range_frame_gives_peers_one_result_and_lets_go_of_rows_older_than_its_interval() {
    let w =
        "OVER (PARTITION BY auction ORDER BY ts RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND CURRENT ROW)";
    let mut h = over(&format!("SUM(price) {w}, MAX(price) {w}"));
    let rows = [
        format!("1 10 {}", at(1)),
        format!("1 20 {}", at(3)),
        format!("1 30 {}", at(3)),
        format!("1 5 {}", at(6)),
    ];
    h.push(&rows.join("\n")).unwrap();
    assert_eq!(
        h.watermark(T0 + 10_000).unwrap(),
        lines(&[
            &format!("+I 1 10 {} 10 10", at(1)),
            &format!("+I 1 20 {} 60 30", at(3)),
            &format!("+I 1 30 {} 60 30", at(3)),
            &format!("+I 1 5 {} 5 5", at(6)),
            &format!("wm {}", T0 + 10_000),
        ])
    );
}

#[test]
fn an_unbounded_frame_keeps_aggregating_across_a_restore() {
    let w = "OVER (PARTITION BY auction ORDER BY ts)";
    let mut h = over(&format!("SUM(price) {w}, MIN(price) {w}"));
    h.push(&format!("1 10 {}\n1 4 {}", at(1), at(2))).unwrap();
    assert_eq!(h.watermark(T0 + 2000).unwrap().len(), 3);
    h.restart().unwrap();
    h.push(&format!("1 7 {}", at(4))).unwrap();
    assert_eq!(
        h.watermark(T0 + 4000).unwrap(),
        lines(&[&format!("+I 1 7 {} 21 4", at(4)), &format!("wm {}", T0 + 4000)])
    );
}

#[test]
fn on_processing_time_rows_enter_as_they_arrive() {
    let mut h = Harness::of(
        &[
            "CREATE TABLE bids (auction BIGINT, price BIGINT, p AS PROCTIME()) WITH ('connector' = 'datagen')",
            "CREATE TABLE out (auction BIGINT, price BIGINT, s BIGINT) WITH ('connector' = 'blackhole')",
        ],
        "INSERT INTO out SELECT auction, price, SUM(price) OVER (PARTITION BY auction ORDER BY p \
         ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM bids",
        "OverAggregate",
        0,
    )
    .unwrap();
    let out = h
        .push("1 10 2020-01-01T00:00:00Z\n1 20 2020-01-01T00:00:00Z\n1 40 2020-01-01T00:00:00Z")
        .unwrap();
    let sums: Vec<&str> = out.iter().map(|l| l.rsplit(' ').next().unwrap()).collect();
    assert_eq!(sums, vec!["10", "30", "60"]);
}

#[test]
fn over_an_updating_input_a_retracted_row_changes_the_results_of_the_rows_after_it() {
    let mut h = Harness::of(
        &[
            EVENTS,
            "CREATE TABLE out (auction BIGINT, price BIGINT, ts TIMESTAMP(3), s BIGINT) WITH ('connector' = 'blackhole')",
        ],
        "INSERT INTO out SELECT auction, price, ts, SUM(price) OVER (ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) \
         FROM (SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rn FROM bids) \
         WHERE rn = 1)",
        "RetractOverAggregate",
        0,
    )
    .unwrap();
    assert_eq!(
        h.push(&format!("+I 1 10 {}\n+I 2 5 {}", at(1), at(2))).unwrap(),
        lines(&[&format!("+I 1 10 {} 10", at(1)), &format!("+I 2 5 {} 15", at(2))]),
        "emitted at once: the result follows the input"
    );
    assert_eq!(
        h.push(&format!("-U 1 10 {}\n+U 1 30 {}", at(1), at(3))).unwrap(),
        lines(&[
            &format!("-D 1 10 {} 10", at(1)),
            &format!("-U 2 5 {} 15", at(2)),
            &format!("+U 2 5 {} 5", at(2)),
            &format!("+I 1 30 {} 35", at(3)),
        ])
    );
    let snapshot = h.restart().unwrap().expect("state");
    assert_eq!(snapshot.rows.unwrap().num_rows(), 2, "every row is kept");
    assert_eq!(
        h.push(&format!("-D 2 5 {}", at(2))).unwrap(),
        lines(&[
            &format!("-D 2 5 {} 5", at(2)),
            &format!("-U 1 30 {} 35", at(3)),
            &format!("+U 1 30 {} 30", at(3)),
        ])
    );
}

/// `2020-01-01` plus `ms` milliseconds, as the harness reads a timestamp.
fn at_ms(ms: i64) -> String {
    let t = chrono::DateTime::from_timestamp_millis(T0 + ms).unwrap();
    t.format("%Y-%m-%dT%H:%M:%S%.3f").to_string()
}

/// Batches of `rows` rows over `partitions` auctions, a batch a second
/// after the one before and its rows up to 4 s before it (out of order),
/// the watermark 2 s behind after every other batch (rows at or before a
/// partition's last released time are late), and at the end past all.
fn over_steps(batches: usize, rows: usize, partitions: usize) -> Vec<Step> {
    let mut steps = Vec::new();
    for b in 0..batches {
        let lines: Vec<String> = (0..rows)
            .map(|r| {
                let i = b * rows + r;
                let t = b as i64 * 1000 - ((i * 7919) % 4000) as i64;
                format!("{} {} {}", (i * 31 + b) % partitions, i % 97, at_ms(t))
            })
            .collect();
        steps.push(Step::Rows(0, lines.join("\n")));
        if b % 2 == 1 {
            steps.push(Step::Watermark(T0 + (b as i64 - 2) * 1000));
        }
    }
    steps.push(Step::Watermark(i64::MAX));
    steps
}

/// The frames a spilled OVER aggregation is checked with: a bounded ROWS
/// frame, a RANGE frame (`MAX` keeps its values as state), an unbounded
/// one, and a bounded one without partitions.
const FRAMES: [&str; 4] = [
    "SUM(price) OVER w, COUNT(*) OVER w FROM bids \
     WINDOW w AS (PARTITION BY auction ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)",
    "SUM(price) OVER w, MAX(price) OVER w FROM bids \
     WINDOW w AS (PARTITION BY auction ORDER BY ts RANGE BETWEEN INTERVAL '3' SECOND PRECEDING AND CURRENT ROW)",
    "SUM(price) OVER w, MIN(price) OVER w FROM bids WINDOW w AS (PARTITION BY auction ORDER BY ts)",
    "SUM(price) OVER w, COUNT(*) OVER w FROM bids WINDOW w AS (ORDER BY ts ROWS BETWEEN 5 PRECEDING AND CURRENT ROW)",
];

fn over_of(frame: &'static str) -> impl Fn() -> Harness {
    move || {
        Harness::of(
            &[
                EVENTS,
                "CREATE TABLE out (auction BIGINT, price BIGINT, ts TIMESTAMP(3), a BIGINT, b BIGINT) \
                 WITH ('connector' = 'blackhole')",
            ],
            &format!("INSERT INTO out SELECT auction, price, ts, {frame}"),
            "OverAggregate",
            0,
        )
        .unwrap()
    }
}

#[test]
fn a_spilled_over_aggregation_emits_the_rows_the_heap_emits() {
    let steps = over_steps(60, 50, 90);
    for frame in FRAMES {
        let make = over_of(frame);
        let expected = emitted(&mut make(), &steps);
        let rows = expected.iter().flatten().filter(|l| l.starts_with('+')).count();
        assert!((2500..3000).contains(&rows), "{rows} of 3000 rows not late");
        // A spill after every batch or so, and one every few batches (the
        // keyless one holds one partition and its waiting rows).
        let budgets = match frame.contains("PARTITION BY") {
            true => [16 * 1024, 48 * 1024],
            false => [2 * 1024, 8 * 1024],
        };
        for budget in budgets {
            let got = emitted_spilling(&make, &steps, budget, false);
            same_over(got, expected.clone(), &format!("{frame} at {budget} bytes"));
        }
    }
}

#[test]
fn a_spilled_over_aggregation_keeps_the_state_the_heap_keeps() {
    let mut steps = over_steps(40, 50, 90);
    steps.pop();
    for frame in FRAMES {
        let mut heap = over_of(frame)();
        emitted(&mut heap, &steps);
        let kept = state_rows_of(&heap.snapshot_only().unwrap().expect("state"));
        assert!(kept > 40, "{kept} rows: partitions, frames and waiting rows");
        let dir = tempfile::tempdir().unwrap();
        let mut h = over_of(frame)().spilling(16 * 1024, dir.path()).unwrap();
        emitted(&mut h, &steps);
        assert_eq!(
            state_rows_of(&h.restart().unwrap().expect("a snapshot")),
            kept,
            "{frame}"
        );
    }
}

#[test]
fn a_spilled_over_aggregation_restores_from_a_snapshot_as_if_never_stopped() {
    for frame in FRAMES {
        spilled_restores_as_if_never_stopped_by(&over_of(frame), &over_steps(40, 50, 90), &same_over);
    }
}

#[test]
fn a_spilled_over_aggregation_snapshot_holds_the_partitions_of_its_barrier_while_they_go_on() {
    for frame in FRAMES {
        spilled_snapshot_holds_its_barrier_by(&over_of(frame), &over_steps(40, 50, 90), &same_over);
    }
}

#[test]
fn a_watermark_waits_with_the_rows_of_key_groups_with_files_and_passes_once_they_are_released() {
    // 6000 partitions' rows, most of them to files, then 40 more with
    // times among theirs.
    let stored: Vec<String> = (0..6000)
        .map(|i| format!("{i} 1 {}", at_ms(i as i64 * 10)))
        .collect();
    let more: Vec<String> = (0..40)
        .map(|i| format!("{} 2 {}", 10_000 + i, at_ms(i * 1500 + 5)))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let mut h = over_of(FRAMES[0])().spilling(256 * 1024, dir.path()).unwrap();
    for chunk in stored.chunks(500) {
        h.push(&chunk.join("\n")).unwrap();
    }
    h.push(&more.join("\n")).unwrap();
    assert!(entries_in(dir.path()) > 0, "partitions went to files");
    let time = |line: &String| line.split(' ').nth(3).unwrap().to_string();
    let at_once = h.watermark(T0 + 30_000).unwrap();
    assert!(
        at_once
            .iter()
            .all(|l| l.starts_with('+') && time(l) <= at_ms(30_000)),
        "memory's rows up to the watermark, and not the watermark: {at_once:?}"
    );
    let later = h.processing_time(a_second_later()).unwrap();
    let (last, rows) = later.split_last().unwrap();
    assert_eq!(
        last,
        &format!("wm {}", T0 + 30_000),
        "once the files' rows are out"
    );
    assert!(!rows.is_empty() && rows.iter().all(|l| time(l) <= at_ms(30_000)));
    // Rows at or before 30 s: 3001 of the 6000, 20 of the 40.
    assert_eq!(at_once.len() + rows.len(), 3001 + 20);
    let rest = h.watermark(i64::MAX).unwrap();
    let (last, rows) = rest.split_last().unwrap();
    assert_eq!(last, &format!("wm {}", i64::MAX));
    assert_eq!(rows.len(), 6040 - 3021);
    assert!(rows.iter().all(|l| time(l) > at_ms(30_000)));
}

#[test]
fn a_late_row_of_a_stored_partition_is_dropped_as_on_the_heap() {
    // Under 1 kB every batch spills: the partition's last released time
    // comes from the store.
    let dir = tempfile::tempdir().unwrap();
    let mut h = over_of(FRAMES[0])().spilling(1024, dir.path()).unwrap();
    h.push(&format!("1 10 {}\n2 20 {}", at(3), at(1))).unwrap();
    assert_eq!(released(&mut h, T0 + 3000).len(), 3);
    h.push(&format!("1 30 {}\n2 40 {}", at(3), at(2))).unwrap();
    assert_eq!(
        released(&mut h, T0 + 5000),
        lines(&[&format!("+I 2 40 {} 60 2", at(2)), &format!("wm {}", T0 + 5000)]),
        "1's row at its last time is late, 2's after its last is not"
    );
}

#[test]
fn a_spilled_over_aggregation_on_processing_time_aggregates_as_the_heap_does() {
    let make = || {
        Harness::of(
            &[
                "CREATE TABLE bids (auction BIGINT, price BIGINT, p AS PROCTIME()) WITH ('connector' = 'datagen')",
                "CREATE TABLE out (auction BIGINT, price BIGINT, s BIGINT) WITH ('connector' = 'blackhole')",
            ],
            "INSERT INTO out SELECT auction, price, SUM(price) OVER (PARTITION BY auction ORDER BY p \
             ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM bids",
            "OverAggregate",
            0,
        )
        .unwrap()
    };
    let batches: Vec<String> = (0..40)
        .map(|b| {
            let rows: Vec<String> = (0..50)
                .map(|r| format!("{} {} 2020-01-01T00:00:00Z", (b * 50 + r) * 7 % 300, b * 50 + r))
                .collect();
            rows.join("\n")
        })
        .collect();
    let (mut heap, dir) = (make(), tempfile::tempdir().unwrap());
    let mut h = make().spilling(16 * 1024, dir.path()).unwrap();
    let (mut got, mut expected) = (Vec::new(), Vec::new());
    for batch in &batches {
        got.extend(h.push(batch).unwrap());
        expected.extend(heap.push(batch).unwrap());
    }
    got.extend(h.finish().unwrap());
    assert!(entries_in(dir.path()) > 0, "partitions went to files");
    assert_eq!(per_auction(&got), per_auction(&expected));
}

#[test]
fn a_spilled_processing_time_over_aggregation_holds_the_watermark_behind_its_waiting_rows() {
    let make = || {
        Harness::of(
            &[
                "CREATE TABLE bids (auction BIGINT, price BIGINT, ts TIMESTAMP(3), p AS PROCTIME(), \
                 WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen')",
                "CREATE TABLE out (auction BIGINT, price BIGINT, ts TIMESTAMP(3), s BIGINT) \
                 WITH ('connector' = 'blackhole')",
            ],
            "INSERT INTO out SELECT auction, price, ts, SUM(price) OVER (PARTITION BY auction ORDER BY p \
             ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM bids",
            "OverAggregate",
            0,
        )
        .unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut h = make().spilling(16 * 1024, dir.path()).unwrap();
    let first: Vec<String> = (0..2000)
        .map(|a| format!("{a} 1 {} 2020-01-01T00:00:00Z", at(1)))
        .collect();
    assert_eq!(h.push(&first.join("\n")).unwrap().len(), 2000);
    assert!(entries_in(dir.path()) > 0, "partitions went to files");
    let row = format!("5 2 {} 2020-01-01T00:00:00Z", at(2));
    assert!(
        h.push(&row).unwrap().is_empty(),
        "partition 5's key group has files"
    );
    assert!(
        h.watermark(T0 + 2000).unwrap().is_empty(),
        "the watermark waits behind the row of its time"
    );
    let later = h.processing_time(a_second_later()).unwrap();
    assert_eq!(later.len(), 2, "{later:?}");
    assert!(
        later[0].starts_with("+I 5 2 ") && later[0].ends_with(" 3"),
        "{later:?}"
    );
    assert_eq!(later[1], format!("wm {}", T0 + 2000));
}

const UPDATING: &str = "CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP(3), \
                        WATERMARK FOR ts AS ts) WITH ('connector' = 'datagen')";

/// The OVER aggregation of each auction's highest bid (an updating input),
/// per bidder.
fn retracting() -> Harness {
    Harness::of(
        &[
            UPDATING,
            "CREATE TABLE out (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP(3), s BIGINT, m BIGINT) \
             WITH ('connector' = 'blackhole')",
        ],
        "INSERT INTO out SELECT auction, bidder, price, ts, SUM(price) OVER w, MAX(price) OVER w \
         FROM (SELECT auction, bidder, price, ts FROM (SELECT *, ROW_NUMBER() OVER \
         (PARTITION BY auction ORDER BY price DESC) AS rn FROM bids) WHERE rn = 1) \
         WINDOW w AS (PARTITION BY bidder ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)",
        "RetractOverAggregate",
        0,
    )
    .unwrap()
}

/// Batches of changes to 400 auctions' rows over 60 bidders: a new
/// auction's row comes, a present one's is replaced (`-U`, `+U`) or goes.
fn retracting_steps(batches: usize) -> Vec<Step> {
    let mut current: Vec<Option<String>> = vec![None; 400];
    let mut steps = Vec::new();
    for b in 0..batches {
        let mut lines = Vec::new();
        for r in 0..30 {
            let i = b * 30 + r;
            let auction = (i * 7919) % 400;
            let row = format!(
                "{auction} {} {} {}",
                auction % 60,
                i % 89,
                at_ms((i as i64 * 37) % 20_000)
            );
            match (current[auction].take(), i % 5) {
                (None, _) => {
                    lines.push(format!("+I {row}"));
                    current[auction] = Some(row);
                }
                (Some(old), 0) => lines.push(format!("-D {old}")),
                (Some(old), _) => {
                    lines.push(format!("-U {old}"));
                    lines.push(format!("+U {row}"));
                    current[auction] = Some(row);
                }
            }
        }
        steps.push(Step::Rows(0, lines.join("\n")));
    }
    steps
}

/// The table a changelog leaves: each row (its line without the kind)
/// with how many times it is there, asserting that every `-U` / `-D`
/// takes away a row that is there (watermark lines are left out).
fn table_of(lines: &[String]) -> BTreeMap<String, i64> {
    let mut table = BTreeMap::<String, i64>::new();
    for line in lines.iter().filter(|l| !l.starts_with("wm ")) {
        let (kind, row) = line.split_once(' ').unwrap();
        let n = table.entry(row.to_string()).or_default();
        match kind {
            "+I" | "+U" => *n += 1,
            _ => {
                assert!(*n > 0, "{line} takes away a row not there");
                *n -= 1;
            }
        }
    }
    table.retain(|_, n| *n != 0);
    table
}

/// What each run's changes did to the table, together: the same rows
/// came and went (a spilled run batches a partition's changes in other
/// mini-batches, so the updates in between differ).
fn same_table(got: Vec<Vec<String>>, expected: Vec<Vec<String>>, what: &str) {
    let changed = |lines: &[String]| {
        let mut net = BTreeMap::<String, i64>::new();
        for line in lines.iter().filter(|l| !l.starts_with("wm ")) {
            let (kind, row) = line.split_once(' ').unwrap();
            *net.entry(row.to_string()).or_default() += if kind.starts_with('+') { 1 } else { -1 };
        }
        net.retain(|_, n| *n != 0);
        net
    };
    assert_eq!(changed(&got.concat()), changed(&expected.concat()), "{what}");
}

/// [`retracting_steps`], then a barrier: changes still waiting for their
/// key group's read come out before it.
fn retracting_steps_to_barrier(batches: usize) -> Vec<Step> {
    let mut steps = retracting_steps(batches);
    steps.push(Step::Barrier);
    steps
}

#[test]
fn a_spilled_over_aggregation_of_an_updating_input_ends_with_the_heaps_table() {
    let steps = retracting_steps_to_barrier(60);
    let heap = emitted(&mut retracting(), &steps).concat();
    assert!(heap.iter().filter(|l| l.starts_with("-U")).count() > 500);
    let expected = table_of(&heap);
    for budget in [8 * 1024, 64 * 1024] {
        let dir = tempfile::tempdir().unwrap();
        let mut h = retracting().spilling(budget, dir.path()).unwrap();
        let mut got = Vec::new();
        let mut waited = false;
        for (step, heap_step) in steps.iter().zip(emitted(&mut retracting(), &steps)) {
            let lines = emitted(&mut h, std::slice::from_ref(step)).concat();
            waited |= lines.len() < heap_step.len();
            got.extend(lines);
        }
        assert!(
            entries_in(dir.path()) > 0,
            "at {budget} bytes: partitions went to files"
        );
        assert!(
            waited,
            "at {budget} bytes: changes waited for their key group's read"
        );
        assert_eq!(table_of(&got), expected, "at {budget} bytes");
    }
}

#[test]
fn a_spilled_over_aggregation_of_an_updating_input_restores_as_if_never_stopped() {
    let steps = retracting_steps_to_barrier(40);
    spilled_restores_as_if_never_stopped_by(&retracting, &steps, &same_table);
    spilled_snapshot_holds_its_barrier_by(&retracting, &steps, &same_table);
}

#[test]
fn a_spilled_over_aggregation_of_an_updating_input_holds_the_watermark_behind_its_waiting_changes() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = retracting().spilling(8 * 1024, dir.path()).unwrap();
    let first: Vec<String> = (0..600).map(|a| format!("+I {a} {a} 10 {}", at_ms(a))).collect();
    h.push(&first.join("\n")).unwrap();
    h.restart().unwrap();
    assert!(entries_in(dir.path()) > 0, "the restore wrote files");
    assert!(
        h.push(&format!("+I 1000 5 3 {}", at_ms(700))).unwrap().is_empty(),
        "bidder 5's key group has files"
    );
    assert!(
        h.watermark(T0 + 800).unwrap().is_empty(),
        "held behind the change"
    );
    assert_eq!(
        h.processing_time(a_second_later()).unwrap(),
        lines(&[
            &format!("+I 1000 5 3 {} 13 10", at_ms(700)),
            &format!("wm {}", T0 + 800)
        ]),
        "read after a second, then the watermark"
    );
    assert_eq!(
        h.watermark(T0 + 900).unwrap(),
        lines(&[&format!("wm {}", T0 + 900)]),
        "nothing waits"
    );
}

#[test]
fn a_spilled_restore_of_more_rows_than_a_chunk_in_any_order_restores_what_the_heap_does() {
    // 3000 partitions with a frame of 6 rows each and rows waiting: over
    // 21k state rows, given in reverse order, restored in chunks with
    // spills between them.
    let frame = "SUM(price) OVER w, COUNT(*) OVER w FROM bids \
                 WINDOW w AS (PARTITION BY auction ORDER BY ts ROWS BETWEEN 5 PRECEDING AND CURRENT ROW)";
    let rows = |from: i64, n: i64| -> String {
        let lines: Vec<String> = (0..3000 * n)
            .map(|i| format!("{} {} {}", i % 3000, i % 13, at_ms((from + i / 3000) * 100)))
            .collect();
        lines.join("\n")
    };
    let mut heap = over_of(frame)();
    heap.push(&rows(0, 8)).unwrap();
    heap.watermark(T0 + 1000).unwrap();
    heap.push(&rows(20, 1)).unwrap();
    let mut snapshot = heap.snapshot_only().unwrap().expect("state");
    assert!(state_rows_of(&snapshot) > 21_000);
    let after = |h: &mut Harness| {
        h.push(&rows(30, 2)).unwrap();
        let mut out = h.watermark(i64::MAX).unwrap();
        out.sort();
        out
    };
    let expected = after(&mut heap);
    let kept = snapshot.rows.take().expect("rows");
    let reversed = arrow::array::UInt32Array::from_iter_values((0..kept.num_rows() as u32).rev());
    snapshot.rows = Some(arrow::compute::take_record_batch(&kept, &reversed).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let mut h = over_of(frame)().spilling(64 * 1024, dir.path()).unwrap();
    h.restart_from(snapshot).unwrap();
    assert!(entries_in(dir.path()) > 0, "partitions went to the store");
    assert_eq!(after(&mut h), expected);
}

#[test]
fn an_incremental_over_snapshot_holds_the_partitions_changed_since_the_last_one() {
    use crate::harness::deletions;
    let w = "OVER (PARTITION BY auction ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)";
    let mut h = over(&format!("SUM(price) {w}, COUNT(*) {w}"))
        .incremental()
        .unwrap();
    h.push(&format!("1 10 {}\n2 5 {}\n3 1 {}", at(1), at(1), at(1)))
        .unwrap();
    assert_eq!(h.watermark(T0 + 1000).unwrap().len(), 4);
    let base = h.snapshot_delta(true).unwrap().expect("a base");
    assert_eq!(base.num_rows(), 6, "three partitions, each with a frame row");
    h.push(&format!("1 20 {}", at(2))).unwrap();
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(
        deletions(&delta),
        vec![false; 3],
        "partition 1 whole: accumulators, its frame row, the waiting row"
    );
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");
    assert_eq!(h.watermark(T0 + 2000).unwrap().len(), 2);
    assert_eq!(h.snapshot_delta(false).unwrap().expect("a delta").num_rows(), 3);
    h.restart_from_chain().unwrap();
    h.push(&format!("1 40 {}\n2 7 {}", at(3), at(3))).unwrap();
    assert_eq!(
        h.watermark(T0 + 3000).unwrap(),
        lines(&[
            &format!("+I 1 40 {} 60 2", at(3)),
            &format!("+I 2 7 {} 12 2", at(3)),
            &format!("wm {}", T0 + 3000),
        ]),
        "partition 1 from the delta (10 left its frame), 2 from the base"
    );
}

#[test]
fn an_incremental_snapshot_of_an_over_aggregation_of_an_updating_input_holds_the_changed_partitions() {
    use crate::harness::deletions;
    let mut h = retracting().incremental().unwrap();
    h.push(&format!("+I 1 1 10 {}\n+I 2 2 20 {}", at_ms(1000), at_ms(2000)))
        .unwrap();
    assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 2);
    // Bidder 1's only row goes; bidder 2 gets a second one.
    h.push(&format!("-D 1 1 10 {}\n+I 3 2 5 {}", at_ms(1000), at_ms(3000)))
        .unwrap();
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(
        deletions(&delta),
        vec![false, false, true],
        "bidder 2's two rows, bidder 1 gone"
    );
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");

    h.restart_from_chain().unwrap();
    assert_eq!(
        h.push(&format!("+I 4 1 7 {}", at_ms(4000))).unwrap(),
        lines(&[&format!("+I 4 1 7 {} 7 7", at(4))]),
        "bidder 1 starts afresh"
    );
    assert_eq!(
        h.push(&format!("-D 3 2 5 {}", at_ms(3000))).unwrap(),
        lines(&[&format!("-D 3 2 5 {} 25 20", at(3))]),
        "bidder 2's rows from the delta"
    );
}

#[test]
fn an_over_aggregation_of_an_updating_input_restored_from_an_incremental_chain_emits_what_it_would_have() {
    crate::harness::incremental_restores_as_if_never_stopped(&retracting, &retracting_steps(40), 1);
}

/// The distinct state keys of a file of a replacing chain.
fn state_keys_in(file: &arrow::array::RecordBatch) -> usize {
    use arrow::array::AsArray;
    let keys = file
        .column_by_name(weir_state::incremental::STATE_KEY_COLUMN)
        .expect("state keys")
        .as_binary::<i32>();
    keys.iter().collect::<std::collections::HashSet<_>>().len()
}

#[test]
fn incremental_snapshots_of_a_spilled_over_aggregation_hold_the_partitions_changed_in_memory_and_in_the_store()
 {
    use crate::harness::deletions;
    let w = "OVER (PARTITION BY auction ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)";
    let dir = tempfile::tempdir().unwrap();
    let mut h = over(&format!("SUM(price) {w}, COUNT(*) {w}"))
        .incremental()
        .unwrap()
        .spilling(16 * 1024, dir.path())
        .unwrap();
    let first: Vec<String> = (0..500).map(|a| format!("{a} 1 {}", at(1))).collect();
    h.push(&first.join("\n")).unwrap();
    assert_eq!(released(&mut h, T0 + 1000).len(), 501);
    assert!(entries_in(dir.path()) > 0, "partitions went to the store");
    let base = h.snapshot_delta(true).unwrap().expect("a base");
    assert_eq!(
        base.num_rows(),
        1000,
        "each partition's accumulators and frame row"
    );
    // Partition 1 read back and changed, then written to the store again
    // by the spill of 300 new partitions; partition 2 read back and
    // changed, in memory.
    h.push(&format!("1 2 {}", at(2))).unwrap();
    let new: Vec<String> = (0..300).map(|i| format!("{} 3 {}", 1000 + i, at(2))).collect();
    h.push(&new.join("\n")).unwrap();
    h.push(&format!("2 4 {}", at(2))).unwrap();
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    assert_eq!(state_keys_in(&delta), 302, "partitions 1, 2 and the 300 new ones");
    assert!(deletions(&delta).iter().all(|d| !d), "partitions never go");
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");

    h.restart_from_chain().unwrap();
    h.push(&format!("1 5 {}\n7 6 {}", at(3), at(3))).unwrap();
    let released = released(&mut h, T0 + 3000);
    assert_eq!(
        released.len(),
        305,
        "302 waiting rows, 2 new ones and the watermark"
    );
    for line in [
        format!("+I 1 2 {} 3 2", at(2)),
        format!("+I 1 5 {} 7 2", at(3)),
        format!("+I 2 4 {} 5 2", at(2)),
        format!("+I 7 6 {} 7 2", at(3)),
    ] {
        assert!(released.contains(&line), "{line} in {:?}", &released[..4]);
    }
}

#[test]
fn a_spilled_over_aggregation_restored_from_an_incremental_chain_emits_what_it_would_have() {
    let steps = over_steps(40, 50, 2000);
    for frame in FRAMES.iter().filter(|f| f.contains("PARTITION BY")) {
        let dir = tempfile::tempdir().unwrap();
        let spilled = || over_of(frame)().spilling(16 * 1024, dir.path()).unwrap();
        let mut first_half = spilled();
        emitted(&mut first_half, &steps[..steps.len() / 2]);
        assert!(entries_in(dir.path()) > 0, "{frame}: partitions go to the store");
        drop(first_half);
        let heap = over_of(frame);
        crate::harness::incremental_restores_as_if_never_stopped_by(&spilled, &heap, &steps, 3, &same_over);
    }
}

#[test]
fn a_stored_partition_of_an_updating_input_left_without_rows_is_deleted_by_the_next_delta() {
    use crate::harness::deletions;
    let dir = tempfile::tempdir().unwrap();
    let mut h = retracting()
        .incremental()
        .unwrap()
        .spilling(8 * 1024, dir.path())
        .unwrap();
    let first: Vec<String> = (0..600).map(|a| format!("+I {a} {a} 10 {}", at_ms(a))).collect();
    h.push(&first.join("\n")).unwrap();
    assert!(entries_in(dir.path()) > 0, "partitions went to the store");
    assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 600);
    // Bidder 5's only row goes (read back from the store, left empty),
    // then 300 new bidders spill memory to the store.
    h.push(&format!("-D 5 5 10 {}", at_ms(5))).unwrap();
    let new: Vec<String> = (0..300)
        .map(|i| format!("+I {} {} 20 {}", 1000 + i, 1000 + i, at_ms(i)))
        .collect();
    h.push(&new.join("\n")).unwrap();
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    let deleted = deletions(&delta);
    assert_eq!(deleted.len(), 301, "the new bidders' rows and bidder 5");
    assert_eq!(deleted.iter().filter(|d| **d).count(), 1, "bidder 5 deleted");
    h.restart_from_chain().unwrap();
    // The chain restores into files: a change waits for its key group's read.
    let mut pushed = |rows: &str| {
        let mut lines = h.push(rows).unwrap();
        lines.extend(h.processing_time(a_second_later()).unwrap());
        lines
    };
    assert_eq!(
        pushed(&format!("+I 7 5 3 {}", at_ms(9))),
        lines(&[&format!("+I 7 5 3 {} 3 3", at_ms(9))]),
        "bidder 5 starts afresh"
    );
    assert_eq!(
        pushed(&format!("+I 8 6 4 {}", at_ms(9))),
        lines(&[&format!("+I 8 6 4 {} 14 10", at_ms(9))]),
        "bidder 6 from the base"
    );
}

#[test]
fn a_spilled_over_aggregation_of_an_updating_input_restored_from_an_incremental_chain_emits_what_it_would_have()
 {
    let dir = tempfile::tempdir().unwrap();
    let steps = retracting_steps_to_barrier(40);
    let spilled = || retracting().spilling(8 * 1024, dir.path()).unwrap();
    let mut first_half = spilled();
    emitted(&mut first_half, &steps[..steps.len() / 2]);
    assert!(entries_in(dir.path()) > 0, "partitions go to files");
    drop(first_half);
    crate::harness::incremental_restores_as_if_never_stopped_by(
        &spilled,
        &retracting,
        &steps,
        1,
        &same_table,
    );
}
