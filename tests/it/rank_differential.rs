//! Differential test of TopN: weir's streaming TopN against DataFusion's
//! batch ranking functions (a sort and a window aggregation) over the same
//! random rows, at parallelism 1, 2 and 4. Partition keys repeat and are
//! NULL now and then. For `ROW_NUMBER()` order keys are distinct, so that
//! the ranks are the same whatever order the rows arrive in; `RANK()` and
//! `DENSE_RANK()` rank ties alike, so their rows have many. A TopN over a
//! non-windowed aggregation (updating input) is compared with the ranks of
//! the aggregation's final rows.

use std::fmt::Write as _;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Schema, UInt64Type};
use arrow::record_batch::RecordBatch;
use datafusion_expr::{WindowFrame, WindowFunctionDefinition};
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::expressions::Column;
use datafusion_physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion_physical_plan::ExecutionPlan;
use datafusion_physical_plan::sorts::sort::SortExec;
use datafusion_physical_plan::test::TestMemoryExec;
use datafusion_physical_plan::windows::{WindowAggExec, create_window_expr};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use weir::Engine;

/// Rows `(k, v)`: `k` one of a few keys or NULL, `v` distinct.
fn generate(rng: &mut SmallRng, rows: usize) -> Vec<(Option<i64>, i64)> {
    let mut values: Vec<i64> = (0..rows as i64).map(|v| v * 3 - 500).collect();
    values.shuffle(rng);
    values
        .into_iter()
        .map(|v| ((rng.random_range(0..15) != 0).then(|| rng.random_range(0..20)), v))
        .collect()
}

/// A ranking function: its SQL name and DataFusion's batch function.
type Ranking = (&'static str, fn() -> Arc<datafusion_expr::WindowUDF>);

const ROW_NUMBER: Ranking = (
    "ROW_NUMBER",
    datafusion_functions_window::row_number::row_number_udwf,
);
const RANK: Ranking = ("RANK", datafusion_functions_window::rank::rank_udwf);
const DENSE_RANK: Ranking = ("DENSE_RANK", datafusion_functions_window::rank::dense_rank_udwf);

/// DataFusion's `function() OVER ([PARTITION BY k] ORDER BY v DESC)` of
/// `rows`, as rows `k, v, rn` with `rn` in `start..=end`.
fn batch_top_n(
    rows: &[(Option<i64>, Option<i64>)],
    function: Ranking,
    partitioned: bool,
    (start, end): (u64, u64),
) -> Vec<String> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
    ]));
    let k: ArrayRef = Arc::new(rows.iter().map(|r| r.0).collect::<Int64Array>());
    let v: ArrayRef = Arc::new(rows.iter().map(|r| r.1).collect::<Int64Array>());
    let batch = RecordBatch::try_new(schema.clone(), vec![k, v]).unwrap();
    let input = TestMemoryExec::try_new_exec(&[vec![batch]], schema.clone(), None).unwrap();
    let column = |name: &str, i: usize| Arc::new(Column::new(name, i)) as Arc<dyn PhysicalExpr>;
    let partition_by: Vec<Arc<dyn PhysicalExpr>> = match partitioned {
        true => vec![column("k", 0)],
        false => vec![],
    };
    let descending = SortOptions {
        descending: true,
        nulls_first: true,
    };
    let order_by = vec![PhysicalSortExpr::new(column("v", 1), descending)];
    let mut sort = partition_by
        .iter()
        .map(|e| PhysicalSortExpr::new(e.clone(), SortOptions::default()))
        .collect::<Vec<_>>();
    sort.extend(order_by.clone());
    let sorted = Arc::new(SortExec::new(LexOrdering::new(sort).unwrap(), input));
    let row_number = create_window_expr(
        &WindowFunctionDefinition::WindowUDF((function.1)()),
        "rn".to_string(),
        &[],
        &partition_by,
        &order_by,
        Arc::new(WindowFrame::new(Some(true))),
        schema,
        false,
        false,
        None,
    )
    .unwrap();
    let window = WindowAggExec::try_new(vec![row_number], sorted, false).unwrap();
    let stream = window
        .execute(0, Arc::new(datafusion_execution::TaskContext::default()))
        .unwrap();
    let batches = futures::executor::block_on(datafusion_physical_plan::common::collect(stream)).unwrap();
    let mut out = Vec::new();
    for batch in &batches {
        let (k, v) = (
            batch.column(0).as_primitive::<arrow::datatypes::Int64Type>(),
            batch.column(1).as_primitive::<arrow::datatypes::Int64Type>(),
        );
        let rn = batch.column(2).as_primitive::<UInt64Type>();
        for i in 0..batch.num_rows() {
            let rank = rn.value(i);
            if rank >= start && rank <= end {
                let text = |a: &arrow::array::Int64Array| match a.is_null(i) {
                    true => "NULL".to_string(),
                    false => a.value(i).to_string(),
                };
                out.push(format!("{}|{}|{rank}", text(k), text(v)));
            }
        }
    }
    out.sort();
    out
}

fn weir_top_n(dir: &std::path::Path, parallelism: usize, sql: &str) -> Vec<String> {
    let engine = Engine::new();
    engine
        .set("parallelism.default", &parallelism.to_string())
        .unwrap();
    engine.set("weir.batch-size", "100").unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE t (k BIGINT, v BIGINT) WITH ('connector' = 'filesystem',
               'path' = '{}', 'format' = 'csv', 'csv.null-literal' = 'NULL')",
            dir.join("t.csv").display()
        ))
        .unwrap();
    let result = engine.sql(sql).unwrap();
    assert!(result.is_updating(), "a TopN updates");
    crate::sorted_rows(&[result.materialize().unwrap()])
}

fn seeded() -> (u64, SmallRng) {
    let seed: u64 = crate::test_seed();
    (seed, SmallRng::seed_from_u64(seed))
}

fn nullable(rows: &[(Option<i64>, i64)]) -> Vec<(Option<i64>, Option<i64>)> {
    rows.iter().map(|(k, v)| (*k, Some(*v))).collect()
}

/// Writes `rows` as `t.csv` in a new directory.
fn table(rows: &[(Option<i64>, i64)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for (k, v) in rows {
        let k = k.map_or("NULL".to_string(), |k| k.to_string());
        let _ = writeln!(text, "{k},{v}");
    }
    std::fs::write(dir.path().join("t.csv"), text).unwrap();
    dir
}

fn assert_same(dir: &std::path::Path, sql: &str, expected: &[String], seed: u64) {
    assert!(!expected.is_empty());
    for parallelism in [1, 2, 4] {
        let got = weir_top_n(dir, parallelism, sql);
        assert!(
            got == expected,
            "{sql} at parallelism {parallelism}, WEIR_TEST_SEED={seed}: {} rows, expected {}; \
             first differing: {:?}",
            got.len(),
            expected.len(),
            got.iter().zip(expected).find(|(g, e)| g != e)
        );
    }
}

#[test]
fn top_n_equals_datafusions_batch_row_number_at_every_parallelism() {
    let (seed, mut rng) = seeded();
    let rows = generate(&mut rng, 2000);
    let dir = table(&rows);
    let cases = [
        (true, (1, 3), "rn <= 3"),
        (true, (2, 4), "rn BETWEEN 2 AND 4"),
        (true, (1, 1), "rn = 1"),
        (false, (1, 5), "rn < 6"),
    ];
    for (partitioned, range, filter) in cases {
        let over = match partitioned {
            true => "PARTITION BY k ORDER BY v DESC",
            false => "ORDER BY v DESC",
        };
        let sql = format!(
            "SELECT k, v, rn FROM (SELECT k, v, ROW_NUMBER() OVER ({over}) AS rn FROM t) WHERE {filter}"
        );
        let expected = batch_top_n(&nullable(&rows), ROW_NUMBER, partitioned, range);
        assert_same(dir.path(), &sql, &expected, seed);
        // Without the rank in the output (rows enter and leave, no updates).
        let sql =
            format!("SELECT k, v FROM (SELECT k, v, ROW_NUMBER() OVER ({over}) AS rn FROM t) WHERE {filter}");
        let mut expected: Vec<String> = expected
            .iter()
            .map(|r| r[..r.rfind('|').unwrap()].to_string())
            .collect();
        expected.sort();
        assert_same(dir.path(), &sql, &expected, seed);
    }
}

#[test]
fn rank_and_dense_rank_top_n_equal_datafusions_batch_functions_with_ties() {
    let (seed, mut rng) = seeded();
    let rows: Vec<(Option<i64>, i64)> = generate(&mut rng, 2000)
        .into_iter()
        .map(|(k, v)| (k, v.rem_euclid(40)))
        .collect();
    let dir = table(&rows);
    for function in [RANK, DENSE_RANK] {
        for (range, filter) in [((1, 3), "rn <= 3"), ((2, 5), "rn BETWEEN 2 AND 5")] {
            let sql = format!(
                "SELECT k, v, rn FROM (SELECT k, v, {}() OVER (PARTITION BY k ORDER BY v DESC) AS rn FROM t) \
                 WHERE {filter}",
                function.0
            );
            assert_same(
                dir.path(),
                &sql,
                &batch_top_n(&nullable(&rows), function, true, range),
                seed,
            );
        }
    }
}

#[test]
fn a_top_n_over_an_updating_aggregation_equals_the_batch_ranks_of_its_final_rows() {
    let (seed, mut rng) = seeded();
    let rows = generate(&mut rng, 3000);
    let dir = table(&rows);
    // The aggregation's final rows: per group g = v % 300, the sum of k;
    // ranked per g % 7 by that sum. Sums tie now and then: RANK ranks ties
    // alike whatever order they come in, and the rows compared leave g out.
    let mut sums: std::collections::BTreeMap<i64, Option<i64>> = Default::default();
    for (k, v) in &rows {
        let sum = sums.entry(v % 300).or_insert(None);
        if let Some(k) = k {
            *sum = Some(sum.unwrap_or(0) + k);
        }
    }
    let finals: Vec<(Option<i64>, Option<i64>)> = sums.iter().map(|(g, s)| (Some(g % 7), *s)).collect();
    for (function, range, filter) in [(RANK, (1, 4), "rn <= 4"), (ROW_NUMBER, (1, 1), "rn = 1")] {
        let sql = format!(
            "SELECT p, s, rn FROM (SELECT p, s, {}() OVER (PARTITION BY p ORDER BY s DESC) AS rn \
             FROM (SELECT g % 7 AS p, s FROM (SELECT v % 300 AS g, SUM(k) AS s FROM t GROUP BY v % 300))) \
             WHERE {filter}",
            function.0
        );
        // (Rank 1 of a ROW_NUMBER tie is either row: the same p, s, 1.)
        assert_same(
            dir.path(),
            &sql,
            &batch_top_n(&finals, function, true, range),
            seed,
        );
    }
}
