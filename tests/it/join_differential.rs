//! Differential test of regular joins: weir's streaming joins against
//! DataFusion's batch hash join on the same random rows (keys with NULLs
//! and duplicate rows), at parallelism 1, 2 and 4, and with the spilling
//! state backend: inner, outer, semi and anti joins. Updating joins (of aggregates) are compared by their
//! changelog applied to an empty table; the batch side joins the
//! aggregates computed here.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use datafusion_common::{JoinSide, JoinType, NullEquality};
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::expressions::{BinaryExpr, Column};
use datafusion_physical_plan::ExecutionPlan;
use datafusion_physical_plan::joins::utils::{ColumnIndex, JoinFilter};
use datafusion_physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion_physical_plan::test::TestMemoryExec;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use weir::Engine;

/// Rows `(k, v)`: `k` NULL now and then, few distinct values so that
/// equal rows repeat.
fn generate(rng: &mut SmallRng, rows: usize, keys: i64) -> Vec<(Option<i64>, i64)> {
    (0..rows)
        .map(|_| {
            let k = (rng.random_range(0..20) != 0).then(|| rng.random_range(0..keys));
            (k, rng.random_range(0..30))
        })
        .collect()
}

fn write_csv(rows: &[(Option<i64>, i64)], path: &std::path::Path) {
    let mut text = String::new();
    for (k, v) in rows {
        let k = k.map_or("NULL".to_string(), |k| k.to_string());
        let _ = writeln!(text, "{k},{v}");
    }
    std::fs::write(path, text).unwrap();
}

fn batch(names: [&str; 2], rows: &[(Option<i64>, i64)]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new(names[0], DataType::Int64, true),
        Field::new(names[1], DataType::Int64, true),
    ]));
    let k: ArrayRef = Arc::new(rows.iter().map(|r| r.0).collect::<Int64Array>());
    let v: ArrayRef = Arc::new(rows.iter().map(|r| Some(r.1)).collect::<Int64Array>());
    RecordBatch::try_new(schema, vec![k, v]).unwrap()
}

fn memory(batch: RecordBatch) -> Arc<dyn ExecutionPlan> {
    let schema: SchemaRef = batch.schema();
    TestMemoryExec::try_new_exec(&[vec![batch]], schema, None).unwrap()
}

/// DataFusion's hash join of `left` and `right` on their first columns,
/// with `left.1 < right.1` as a residual condition when `residual`.
fn batch_join(left: RecordBatch, right: RecordBatch, join_type: JoinType, residual: bool) -> Vec<String> {
    let on = vec![(
        Arc::new(Column::new(left.schema().field(0).name(), 0)) as Arc<dyn PhysicalExpr>,
        Arc::new(Column::new(right.schema().field(0).name(), 0)) as Arc<dyn PhysicalExpr>,
    )];
    let filter = residual.then(|| {
        let schema = Arc::new(Schema::new(vec![
            Field::new("lv", DataType::Int64, true),
            Field::new("rv", DataType::Int64, true),
        ]));
        let expression = Arc::new(BinaryExpr::new(
            Arc::new(Column::new("lv", 0)),
            datafusion_expr::Operator::Lt,
            Arc::new(Column::new("rv", 1)),
        ));
        let indices = vec![
            ColumnIndex {
                index: 1,
                side: JoinSide::Left,
            },
            ColumnIndex {
                index: 1,
                side: JoinSide::Right,
            },
        ];
        JoinFilter::new(expression, indices, schema)
    });
    let join = HashJoinExec::try_new(
        memory(left),
        memory(right),
        on,
        filter,
        &join_type,
        None,
        PartitionMode::CollectLeft,
        NullEquality::NullEqualsNothing,
        false,
    )
    .unwrap();
    let stream = join
        .execute(0, Arc::new(datafusion_execution::TaskContext::default()))
        .unwrap();
    let batches = futures::executor::block_on(datafusion_physical_plan::common::collect(stream)).unwrap();
    crate::sorted_rows(&batches)
}

/// `(k, COUNT(*))` and `(k, SUM(v))` per key, the NULL key a group too.
fn aggregated(rows: &[(Option<i64>, i64)], count: bool) -> Vec<(Option<i64>, i64)> {
    let mut groups: BTreeMap<Option<i64>, i64> = BTreeMap::new();
    for (k, v) in rows {
        *groups.entry(*k).or_default() += if count { 1 } else { *v };
    }
    groups.into_iter().collect()
}

/// The ways weir runs each case: at parallelism 1, 2 and 4 on the heap,
/// and at 2 with the spilling backend under 16 kB (every key written to
/// its store every few batches of 50 rows; hashed, not broadcast).
const RUNS: [(usize, &[(&str, &str)]); 4] = [
    (1, &[]),
    (2, &[]),
    (4, &[]),
    (
        2,
        &[
            ("state.backend.type", "spilling"),
            ("taskmanager.memory.managed.size", "16 kb"),
            ("weir.batch-size", "50"),
            ("table.optimizer.join.broadcast-threshold", "-1"),
        ],
    ),
];

fn weir_rows(
    dir: &std::path::Path,
    (parallelism, settings): (usize, &[(&str, &str)]),
    sql: &str,
) -> Vec<String> {
    let engine = Engine::new();
    engine
        .set("parallelism.default", &parallelism.to_string())
        .unwrap();
    engine.set("weir.batch-size", "500").unwrap();
    engine
        .set("state.backend.spilling.local-dir", &dir.display().to_string())
        .unwrap();
    for (key, value) in settings {
        engine.set(key, value).unwrap();
    }
    for (table, value) in [("l", "v"), ("r", "w")] {
        engine
            .sql(&format!(
                "CREATE TABLE {table} (k BIGINT, {value} BIGINT) WITH ('connector' = 'filesystem',
                   'path' = '{}', 'format' = 'csv', 'csv.null-literal' = 'NULL')",
                dir.join(format!("{table}.csv")).display()
            ))
            .unwrap();
    }
    let result = engine.sql(sql).unwrap();
    if result.is_updating() {
        crate::sorted_rows(&[result.materialize().unwrap()])
    } else {
        crate::sorted_rows(&result.collect().unwrap())
    }
}

#[test]
fn regular_joins_equal_datafusions_batch_join_at_every_parallelism() {
    let seed: u64 = crate::test_seed();
    let mut rng = SmallRng::seed_from_u64(seed);
    let (left, right) = (generate(&mut rng, 3_000, 400), generate(&mut rng, 2_000, 400));
    let dir = tempfile::tempdir().unwrap();
    write_csv(&left, &dir.path().join("l.csv"));
    write_csv(&right, &dir.path().join("r.csv"));
    let l = || batch(["k", "v"], &left);
    let r = || batch(["k", "w"], &right);
    let counts = || batch(["k", "c"], &aggregated(&left, true));
    let sums = || batch(["k", "s"], &aggregated(&right, false));
    let kinds = [
        ("JOIN", JoinType::Inner),
        ("LEFT JOIN", JoinType::Left),
        ("RIGHT JOIN", JoinType::Right),
        ("FULL JOIN", JoinType::Full),
    ];
    let mut cases = Vec::new();
    for (sql_kind, join_type) in kinds {
        cases.push((
            format!("SELECT l.k, v, r.k, w FROM l {sql_kind} r ON l.k = r.k"),
            batch_join(l(), r(), join_type, false),
        ));
        cases.push((
            format!("SELECT l.k, v, r.k, w FROM l {sql_kind} r ON l.k = r.k AND v < w"),
            batch_join(l(), r(), join_type, true),
        ));
        cases.push((
            format!(
                "SELECT a.k, c, b.k, s FROM (SELECT k, COUNT(*) AS c FROM l GROUP BY k) a
                 {sql_kind} (SELECT k, SUM(w) AS s FROM r GROUP BY k) b ON a.k = b.k"
            ),
            batch_join(counts(), sums(), join_type, false),
        ));
    }
    // Semi and anti joins from subqueries; the last one's right side
    // updates (keys appear as their counts pass 3).
    let frequent: Vec<_> = aggregated(&right, true)
        .into_iter()
        .filter(|(_, c)| *c > 3)
        .collect();
    cases.push((
        "SELECT k, v FROM l WHERE k IN (SELECT k FROM r)".to_string(),
        batch_join(l(), r(), JoinType::LeftSemi, false),
    ));
    cases.push((
        "SELECT k, v FROM l WHERE NOT EXISTS (SELECT * FROM r WHERE r.k = l.k AND l.v < r.w)".to_string(),
        batch_join(l(), r(), JoinType::LeftAnti, true),
    ));
    cases.push((
        "SELECT k, v FROM l WHERE k IN (SELECT k FROM (SELECT k, COUNT(*) AS c FROM r GROUP BY k) WHERE c > 3)"
            .to_string(),
        batch_join(l(), batch(["k", "c"], &frequent), JoinType::LeftSemi, false),
    ));
    for (sql, expected) in cases {
        assert!(!expected.is_empty(), "{sql}: the batch join gave no rows");
        for run in RUNS {
            let actual = weir_rows(dir.path(), run, &sql);
            if actual != expected {
                let missing: Vec<_> = expected.iter().filter(|r| !actual.contains(r)).take(5).collect();
                let extra: Vec<_> = actual.iter().filter(|r| !expected.contains(r)).take(5).collect();
                panic!(
                    "{sql} at parallelism {} with {:?} differs (rerun with WEIR_TEST_SEED={seed}): \
                     {} rows vs {} expected; missing {missing:?}; extra {extra:?}",
                    run.0,
                    run.1,
                    actual.len(),
                    expected.len()
                );
            }
        }
    }
}

/// Rows `(k, v, ts ms)`: timestamps advance with jitter below the
/// watermark delay (3 s), so no row is late.
fn generate_timed(rng: &mut SmallRng, rows: usize, keys: i64) -> Vec<(Option<i64>, i64, i64)> {
    let mut clock = 1_700_000_000_000i64;
    (0..rows)
        .map(|_| {
            clock += rng.random_range(0..20);
            let k = (rng.random_range(0..20) != 0).then(|| rng.random_range(0..keys));
            (k, rng.random_range(0..30), clock - rng.random_range(0..2_990))
        })
        .collect()
}

fn write_timed_csv(rows: &[(Option<i64>, i64, i64)], path: &std::path::Path) {
    let mut text = String::new();
    for (k, v, ts) in rows {
        let k = k.map_or("NULL".to_string(), |k| k.to_string());
        let t = chrono::DateTime::from_timestamp_millis(*ts).unwrap().naive_utc();
        let _ = writeln!(text, "{k},{v},{}", t.format("%Y-%m-%d %H:%M:%S%.3f"));
    }
    std::fs::write(path, text).unwrap();
}

/// The interval join by brute force: every pair with equal keys and
/// `-2000 <= l.ts - r.ts <= 1000` (and `v < w` with `residual`); outer
/// sides' rows without a pair padded.
fn nested_loop(
    left: &[(Option<i64>, i64, i64)],
    right: &[(Option<i64>, i64, i64)],
    outer: (bool, bool),
    residual: bool,
) -> Vec<String> {
    let text = |row: Option<&(Option<i64>, i64, i64)>| match row {
        Some((k, v, t)) => format!("{}|{v}|{t}", k.map_or("NULL".to_string(), |k| k.to_string())),
        None => "NULL|NULL|NULL".to_string(),
    };
    let mut out = Vec::new();
    let mut right_joined = vec![false; right.len()];
    for l in left {
        let mut joined = false;
        for (j, r) in right.iter().enumerate() {
            let keys = l.0.is_some() && l.0 == r.0;
            if keys && (-2000..=1000).contains(&(l.2 - r.2)) && (!residual || l.1 < r.1) {
                out.push(format!("{}|{}", text(Some(l)), text(Some(r))));
                joined = true;
                right_joined[j] = true;
            }
        }
        if !joined && outer.0 {
            out.push(format!("{}|{}", text(Some(l)), text(None)));
        }
    }
    if outer.1 {
        for (r, joined) in right.iter().zip(right_joined) {
            if !joined {
                out.push(format!("{}|{}", text(None), text(Some(r))));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn interval_joins_equal_a_nested_loop_at_every_parallelism() {
    let seed: u64 = crate::test_seed();
    let mut rng = SmallRng::seed_from_u64(seed);
    let (left, right) = (
        generate_timed(&mut rng, 2_000, 50),
        generate_timed(&mut rng, 2_000, 50),
    );
    let dir = tempfile::tempdir().unwrap();
    write_timed_csv(&left, &dir.path().join("l.csv"));
    write_timed_csv(&right, &dir.path().join("r.csv"));
    let kinds = [
        ("JOIN", (false, false)),
        ("LEFT JOIN", (true, false)),
        ("RIGHT JOIN", (false, true)),
        ("FULL JOIN", (true, true)),
    ];
    for (sql_kind, outer) in kinds {
        for residual in [false, true] {
            let sql = format!(
                "SELECT l.k, l.v, CAST(l.ts AS BIGINT), r.k, r.w, CAST(r.ts AS BIGINT) FROM l {sql_kind} r
                 ON l.k = r.k AND l.ts BETWEEN r.ts - INTERVAL '2' SECOND AND r.ts + INTERVAL '1' SECOND{}",
                if residual { " AND l.v < r.w" } else { "" }
            );
            let expected = nested_loop(&left, &right, outer, residual);
            for parallelism in [1, 2, 4] {
                let engine = Engine::new();
                engine
                    .set("parallelism.default", &parallelism.to_string())
                    .unwrap();
                // Small batches: watermarks follow the rows closely.
                engine.set("weir.batch-size", "20").unwrap();
                for (table, value) in [("l", "v"), ("r", "w")] {
                    engine
                        .sql(&format!(
                            "CREATE TABLE {table} (k BIGINT, {value} BIGINT, ts TIMESTAMP(3),
                               WATERMARK FOR ts AS ts - INTERVAL '3' SECOND) WITH ('connector' = 'filesystem',
                               'path' = '{}', 'format' = 'csv', 'csv.null-literal' = 'NULL')",
                            dir.path().join(format!("{table}.csv")).display()
                        ))
                        .unwrap();
                }
                let plan = engine.sql(&format!("EXPLAIN {sql}")).unwrap();
                let plan = crate::sorted_rows(&plan.collect().unwrap()).join("\n");
                assert!(
                    plan.contains("IntervalJoin"),
                    "{sql} is not an interval join:\n{plan}"
                );
                let actual = crate::sorted_rows(&engine.sql(&sql).unwrap().collect().unwrap());
                if actual != expected {
                    let missing: Vec<_> = expected.iter().filter(|r| !actual.contains(r)).take(5).collect();
                    let extra: Vec<_> = actual.iter().filter(|r| !expected.contains(r)).take(5).collect();
                    panic!(
                        "{sql} at parallelism {parallelism} differs (rerun with WEIR_TEST_SEED={seed}): \
                         {} rows vs {} expected; missing {missing:?}; extra {extra:?}",
                        actual.len(),
                        expected.len()
                    );
                }
            }
        }
    }
}

/// The window join by brute force: rows of the same key (not NULL) and the
/// same 2 s tumbling window paired; outer sides' unpaired rows padded.
fn windowed_pairs(
    left: &[(Option<i64>, i64, i64)],
    right: &[(Option<i64>, i64, i64)],
    outer: (bool, bool),
) -> Vec<String> {
    let window = |t: i64| t.div_euclid(2000) * 2000;
    let text = |row: Option<&(Option<i64>, i64, i64)>| match row {
        Some((k, v, t)) => format!(
            "{}|{v}|{}",
            k.map_or("NULL".to_string(), |k| k.to_string()),
            window(*t)
        ),
        None => "NULL|NULL|NULL".to_string(),
    };
    let mut out = Vec::new();
    let mut right_joined = vec![false; right.len()];
    for l in left {
        let mut joined = false;
        for (j, r) in right.iter().enumerate() {
            if l.0.is_some() && l.0 == r.0 && window(l.2) == window(r.2) {
                out.push(format!("{}|{}", text(Some(l)), text(Some(r))));
                joined = true;
                right_joined[j] = true;
            }
        }
        if !joined && outer.0 {
            out.push(format!("{}|{}", text(Some(l)), text(None)));
        }
    }
    if outer.1 {
        for (r, joined) in right.iter().zip(right_joined) {
            if !joined {
                out.push(format!("{}|{}", text(None), text(Some(r))));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn window_joins_equal_a_nested_loop_over_windows_at_every_parallelism() {
    let seed: u64 = crate::test_seed();
    let mut rng = SmallRng::seed_from_u64(seed);
    let (left, right) = (
        generate_timed(&mut rng, 1_500, 40),
        generate_timed(&mut rng, 1_500, 40),
    );
    let dir = tempfile::tempdir().unwrap();
    write_timed_csv(&left, &dir.path().join("l.csv"));
    write_timed_csv(&right, &dir.path().join("r.csv"));
    let tumble =
        |t: &str| format!("(SELECT * FROM TABLE(TUMBLE(TABLE {t}, DESCRIPTOR(ts), INTERVAL '2' SECOND)))");
    for (sql_kind, outer) in [
        ("JOIN", (false, false)),
        ("LEFT JOIN", (true, false)),
        ("FULL JOIN", (true, true)),
    ] {
        let sql = format!(
            "SELECT a.k, a.v, CAST(a.window_start AS BIGINT), b.k, b.w, CAST(b.window_start AS BIGINT)
             FROM {} a {sql_kind} {} b
             ON a.k = b.k AND a.window_start = b.window_start AND a.window_end = b.window_end",
            tumble("l"),
            tumble("r")
        );
        let expected = windowed_pairs(&left, &right, outer);
        for parallelism in [1, 2, 4] {
            let engine = Engine::new();
            engine
                .set("parallelism.default", &parallelism.to_string())
                .unwrap();
            engine.set("weir.batch-size", "50").unwrap();
            engine.set("table.local-time-zone", "UTC").unwrap();
            for (table, value) in [("l", "v"), ("r", "w")] {
                engine
                    .sql(&format!(
                        "CREATE TABLE {table} (k BIGINT, {value} BIGINT, ts TIMESTAMP(3),
                           WATERMARK FOR ts AS ts - INTERVAL '3' SECOND) WITH ('connector' = 'filesystem',
                           'path' = '{}', 'format' = 'csv', 'csv.null-literal' = 'NULL')",
                        dir.path().join(format!("{table}.csv")).display()
                    ))
                    .unwrap();
            }
            let plan = crate::sorted_rows(&engine.sql(&format!("EXPLAIN {sql}")).unwrap().collect().unwrap())
                .join("\n");
            assert!(plan.contains("WindowJoin"), "{sql} is not a window join:\n{plan}");
            let actual = crate::sorted_rows(&engine.sql(&sql).unwrap().collect().unwrap());
            if actual != expected {
                let missing: Vec<_> = expected.iter().filter(|r| !actual.contains(r)).take(5).collect();
                let extra: Vec<_> = actual.iter().filter(|r| !expected.contains(r)).take(5).collect();
                panic!(
                    "{sql} at parallelism {parallelism} differs (rerun with WEIR_TEST_SEED={seed}): \
                     {} rows vs {} expected; missing {missing:?}; extra {extra:?}",
                    actual.len(),
                    expected.len()
                );
            }
        }
    }
}
