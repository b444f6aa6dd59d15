//! The OVER aggregation through the harness: rows waiting for the
//! watermark, ROWS and RANGE frames, late rows, processing time, and a
//! snapshot/restore round trip.

use crate::operators::harness::Harness;

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
