//! Row-count windows through the operator harness: windows of a key's rows fire with their last row, partial ones never; state survives a snapshot and restore.

use datafusion_expr::col;
use datafusion_functions_aggregate::expr_fn::sum;

use crate::harness::{Harness, Step, emitted};
use weir::Engine;
use weir::table::{Slide, Tumble, count_star, rows};

/// Windows of `size` rows every `slide` of each `k` (or of all rows when
/// `keyed` is false), with the sum and count of `v`.
fn counted(size: u64, slide: u64, keyed: bool) -> Harness {
    let engine = Engine::new();
    engine
        .sql("CREATE TABLE t (k STRING, v BIGINT, pt AS PROCTIME()) WITH ('connector' = 'datagen')")
        .unwrap();
    let window = match size == slide {
        true => Tumble::over(rows(size)),
        false => Slide::over(rows(size)).every(rows(slide)),
    };
    let windowed = engine.from("t").unwrap().window(window.on("pt").alias("w"));
    let table = match keyed {
        true => windowed.group_by([col("w"), col("k")]).select([
            col("k"),
            sum(col("v")).alias("s"),
            count_star().alias("n"),
        ]),
        false => windowed
            .group_by([col("w")])
            .select([sum(col("v")).alias("s"), count_star().alias("n")]),
    }
    .unwrap();
    Harness::of_table(&table, "CountWindowAggregate", 0).unwrap()
}

fn lines(expected: &[&str]) -> Vec<String> {
    expected.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_tumbling_count_window_fires_when_its_key_has_its_rows() {
    let mut h = counted(3, 3, true);
    assert_eq!(h.push("a 1\nb 10\na 2").unwrap(), Vec::<String>::new());
    assert_eq!(h.push("a 3\nb 20\na 4").unwrap(), lines(&["+I a 6 3"]));
    assert_eq!(
        h.push("a 5\nb 30\na 6\nb 40").unwrap(),
        lines(&["+I b 60 3", "+I a 15 3"]),
        "in the order their last rows came"
    );
    assert_eq!(
        h.end_input(0).unwrap(),
        Vec::<String>::new(),
        "b's one row never fires"
    );
}

#[test]
fn a_sliding_count_window_fires_every_slide_over_the_last_size_rows() {
    let mut h = counted(4, 2, true);
    let values: Vec<String> = (1..=9).map(|v| format!("a {v}")).collect();
    assert_eq!(
        h.push(&values.join("\n")).unwrap(),
        lines(&["+I a 10 4", "+I a 18 4", "+I a 26 4"]),
        "rows 1-4, 3-6 and 5-8"
    );
    assert_eq!(h.push("a 10").unwrap(), lines(&["+I a 34 4"]), "rows 7-10");
}

#[test]
fn a_count_window_without_keys_counts_every_row() {
    let mut h = counted(2, 2, false);
    assert_eq!(h.push("1\n2\n3\n4\n5").unwrap(), lines(&["+I 3 2", "+I 7 2"]));
}

#[test]
fn a_count_window_restored_from_a_snapshot_goes_on_counting_where_it_was() {
    let mut h = counted(4, 2, true);
    h.push("a 1\na 2\na 3\nb 1").unwrap();
    let snapshot = h.restart().unwrap().expect("open windows");
    assert_eq!(
        crate::harness::state_rows_of(&snapshot),
        3,
        "a's panes of rows 1-2 and 3, b's of row 1"
    );
    assert_eq!(
        h.push("a 4\na 5\na 6").unwrap(),
        lines(&["+I a 10 4", "+I a 18 4"])
    );
    assert_eq!(h.push("b 2\nb 3\nb 4").unwrap(), lines(&["+I b 10 4"]));
}

#[test]
fn a_count_window_restored_halfway_emits_what_it_would_have() {
    // 30 batches over 5 keys, restored from a snapshot after 15.
    let steps: Vec<Step> = (0..30)
        .map(|b| {
            let batch: Vec<String> = (0..7)
                .map(|r| format!("k{} {}", (b * 7 + r) % 5, b * 7 + r))
                .collect();
            Step::Rows(0, batch.join("\n"))
        })
        .collect();
    let (before, after) = steps.split_at(15);
    let mut never_stopped = counted(5, 2, true);
    emitted(&mut never_stopped, before);
    let expected = emitted(&mut never_stopped, after);
    assert!(expected.iter().flatten().count() > 30);
    let mut h = counted(5, 2, true);
    emitted(&mut h, before);
    h.restart().unwrap();
    assert_eq!(emitted(&mut h, after), expected);
}

#[test]
fn an_incremental_count_window_snapshot_holds_the_keys_that_had_rows() {
    use crate::harness::deletions;
    let mut h = counted(3, 3, true).incremental().unwrap();
    h.push("a 1\nb 10\nc 100").unwrap();
    assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 3);
    // a's window fills and fires (a has no window left); b gets a row.
    assert_eq!(h.push("a 2\na 3\nb 20").unwrap(), lines(&["+I a 6 3"]));
    let delta = h.snapshot_delta(false).unwrap().expect("a delta");
    let mut deleted = deletions(&delta);
    deleted.sort();
    assert_eq!(deleted, vec![false, true], "b's window, a gone");
    assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");
    h.restart_from_chain().unwrap();
    assert_eq!(
        h.push("b 30\nc 200\nc 300").unwrap(),
        lines(&["+I b 60 3", "+I c 600 3"])
    );
    assert_eq!(
        h.push("a 4\na 5\na 6").unwrap(),
        lines(&["+I a 15 3"]),
        "a counted afresh"
    );
}

#[test]
fn a_count_window_restored_from_an_incremental_chain_emits_what_it_would_have() {
    let steps: Vec<Step> = (0..40)
        .map(|b| {
            let batch: Vec<String> = (0..5)
                .map(|r| format!("k{} {}", (b * 5 + r) * 7 % 23, b * 5 + r))
                .collect();
            Step::Rows(0, batch.join("\n"))
        })
        .collect();
    crate::harness::incremental_restores_as_if_never_stopped(&|| counted(6, 3, true), &steps, 2);
}

#[test]
fn a_filtered_aggregate_of_a_sliding_count_window_counts_every_row_but_sums_those_passing() {
    use datafusion_expr::{ExprFunctionExt, lit};
    let engine = Engine::new();
    engine
        .sql("CREATE TABLE t (k STRING, v BIGINT, pt AS PROCTIME()) WITH ('connector' = 'datagen')")
        .unwrap();
    let table = (engine.from("t").unwrap())
        .window(Slide::over(rows(4)).every(rows(2)).on("pt").alias("w"))
        .group_by([col("w"), col("k")])
        .select([
            col("k"),
            sum(col("v"))
                .filter(col("v").gt(lit(2)))
                .build()
                .unwrap()
                .alias("s"),
            count_star().alias("n"),
        ])
        .unwrap();
    let mut h = Harness::of_table(&table, "CountWindowAggregate", 0).unwrap();
    assert_eq!(
        h.push("a 1\nb 5\na 3\na NULL\nb 1\na 4\na 1\na 9").unwrap(),
        lines(&["+I a 7 4", "+I a 13 4"]),
        "a's rows 1-4 (3 and 4 pass) and 3-6 (4 and 9 pass; a null passes no filter)"
    );
    assert_eq!(h.push("b 7\nb 2").unwrap(), lines(&["+I b 12 4"]));
}

/// What `counted(size, slide, true)` emits by definition: per key, a row
/// numbered `c` fires window `w` when `c + 1 == w * slide + size`, with the
/// sum and count of the key's rows `w * slide ..= c`.
fn by_definition(size: u64, slide: u64, batches: &[Vec<(String, i64)>]) -> Vec<Vec<String>> {
    let mut seen: std::collections::HashMap<String, Vec<i64>> = Default::default();
    let mut emitted = Vec::new();
    for batch in batches {
        let mut lines = Vec::new();
        for (key, v) in batch {
            let rows = seen.entry(key.clone()).or_default();
            rows.push(*v);
            let end = rows.len() as u64;
            if end >= size && (end - size).is_multiple_of(slide) {
                let window = &rows[(end - size) as usize..];
                lines.push(format!("+I {key} {} {size}", window.iter().sum::<i64>()));
            }
        }
        emitted.push(lines);
    }
    emitted
}

#[test]
fn count_windows_over_many_keys_emit_what_their_definition_says_through_compactions() {
    // 300 keys in a scrambled order, so keys come and go (forgotten keys
    // and superseded panes are compacted many times over).
    let batches: Vec<Vec<(String, i64)>> = (0..40)
        .map(|b| {
            (0..50)
                .map(|r| {
                    let i = b * 50 + r;
                    (format!("k{}", (i * 7919 + i / 13) % 300), i)
                })
                .collect()
        })
        .collect();
    for (size, slide) in [(3, 3), (5, 2), (6, 3), (4, 1)] {
        let expected = by_definition(size, slide, &batches);
        assert!(expected.iter().flatten().count() > 100);
        let mut h = counted(size, slide, true);
        for (batch, expected) in batches.iter().zip(&expected) {
            let text: Vec<String> = batch.iter().map(|(k, v)| format!("{k} {v}")).collect();
            assert_eq!(
                &h.push(&text.join("\n")).unwrap(),
                expected,
                "{size} rows every {slide}"
            );
        }
    }
}

#[test]
fn a_batch_counts_rows_into_panes_and_fires_windows_at_their_last_rows() {
    use super::{BatchPanes, Fired, Scratch, Shape, assign};
    // Size 4, slide 2: panes of 2 rows; key 0 has counted 3 rows already.
    let shape = Shape::of(4, 2).unwrap();
    let mut counts = vec![3, 0];
    let panes = assign(&[0, 1, 0, 0, 1], &mut counts, shape, &mut Scratch::default());
    assert_eq!(
        panes,
        BatchPanes {
            pane_of_row: vec![0, 1, 2, 2, 1],
            panes: vec![(0, 1), (1, 0), (0, 2)],
            keys: vec![0, 1],
            fired: vec![
                Fired {
                    row: 0,
                    key: 0,
                    window: 0
                },
                Fired {
                    row: 3,
                    key: 0,
                    window: 1
                },
            ],
        },
        "key 0's rows 3 (ending pane 1 and window 0), 4 and 5 (pane 2, ending window 1)"
    );
    assert_eq!(counts, vec![6, 2]);
    assert_eq!(
        shape.first_needed(6),
        4 / 2,
        "window 2 (rows 4-7) is the first open one"
    );
    assert_eq!(Shape::of(5, 2).unwrap().pane, 1);
    assert!(Shape::of(2, 3).is_err(), "a slide above the size");
}
