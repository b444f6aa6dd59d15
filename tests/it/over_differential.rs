//! Differential test of OVER aggregations: weir's streaming OVER (rows
//! released by the watermark) against DataFusion's batch window functions
//! (a sort and a window aggregation) over the same in-order rows, for ROWS
//! and RANGE frames, bounded and unbounded, five aggregates at once, at
//! parallelism 1, 2 and 4. Partition keys repeat and are NULL now and then,
//! values too. ROWS frames get rows of distinct times (ties would rank in
//! arrival order, which a batch sort does not know); RANGE frames get many
//! ties, peers with one result; the watermark trails by a second so that
//! no peer comes after its time was released (it would be late, as in Flink).

use std::fmt::Write as _;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, TimestampMillisecondArray};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema, TimeUnit, TimestampMillisecondType};
use arrow::record_batch::RecordBatch;
use datafusion_common::ScalarValue;
use datafusion_expr::{WindowFrame, WindowFrameBound, WindowFrameUnits, WindowFunctionDefinition};
use datafusion_physical_expr::expressions::Column;
use datafusion_physical_expr::{LexOrdering, PhysicalExpr, PhysicalSortExpr};
use datafusion_physical_plan::ExecutionPlan;
use datafusion_physical_plan::sorts::sort::SortExec;
use datafusion_physical_plan::test::TestMemoryExec;
use datafusion_physical_plan::windows::{WindowAggExec, create_window_expr};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use weir::Engine;

/// A row: partition key, value, time (ms).
type Row = (Option<i64>, Option<i64>, i64);

/// Rows in time order; times tie when `ties`.
fn generate(rng: &mut SmallRng, rows: usize, ties: bool) -> Vec<Row> {
    let mut time = 1_600_000_000_000i64;
    (0..rows)
        .map(|_| {
            time += if ties {
                rng.random_range(0..3) * 500
            } else {
                rng.random_range(1..1500)
            };
            let k = (rng.random_range(0..12) != 0).then(|| rng.random_range(0..8));
            let v = (rng.random_range(0..10) != 0).then(|| rng.random_range(-100..1000));
            (k, v, time)
        })
        .collect()
}

const AGGREGATES: [&str; 5] = ["SUM", "COUNT", "MIN", "MAX", "AVG"];

fn udaf(name: &str) -> Arc<datafusion_expr::AggregateUDF> {
    use datafusion_functions_aggregate::*;
    match name {
        "SUM" => sum::sum_udaf(),
        "COUNT" => count::count_udaf(),
        "MIN" => min_max::min_udaf(),
        "MAX" => min_max::max_udaf(),
        _ => average::avg_udaf(),
    }
}

/// A row of results as text. AVG of a BIGINT is a BIGINT in Flink and weir
/// (the quotient truncated); DataFusion's is a float, truncated here.
fn render(batch: &RecordBatch, row: usize) -> String {
    let cells: Vec<String> = batch
        .columns()
        .iter()
        .map(|c| match (c.is_null(row), c.data_type()) {
            (true, _) => "NULL".to_string(),
            (false, DataType::Float64) => {
                (c.as_primitive::<Float64Type>().value(row).trunc() as i64).to_string()
            }
            (false, DataType::Timestamp(..)) => c
                .as_primitive::<TimestampMillisecondType>()
                .value(row)
                .to_string(),
            (false, _) => arrow::compute::cast(c, &DataType::Int64)
                .unwrap()
                .as_primitive::<Int64Type>()
                .value(row)
                .to_string(),
        })
        .collect();
    cells.join("|")
}

/// DataFusion's five aggregates `OVER (PARTITION BY k ORDER BY ts <frame>)`.
fn batch_over(rows: &[Row], frame: WindowFrame) -> Vec<String> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(rows.iter().map(|r| r.0).collect::<Int64Array>()),
        Arc::new(rows.iter().map(|r| r.1).collect::<Int64Array>()),
        Arc::new(TimestampMillisecondArray::from_iter_values(
            rows.iter().map(|r| r.2),
        )),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
    let input = TestMemoryExec::try_new_exec(&[vec![batch]], schema.clone(), None).unwrap();
    let column = |name: &str, i: usize| Arc::new(Column::new(name, i)) as Arc<dyn PhysicalExpr>;
    let partition_by = vec![column("k", 0)];
    let order_by = vec![PhysicalSortExpr::new(column("ts", 2), SortOptions::default())];
    let mut sort = vec![PhysicalSortExpr::new(column("k", 0), SortOptions::default())];
    sort.extend(order_by.clone());
    let sorted = Arc::new(SortExec::new(LexOrdering::new(sort).unwrap(), input));
    let frame = Arc::new(frame);
    let windows = AGGREGATES
        .iter()
        .map(|name| {
            create_window_expr(
                &WindowFunctionDefinition::AggregateUDF(udaf(name)),
                name.to_string(),
                &[match *name {
                    // The logical planner's coercion: AVG of a float.
                    "AVG" => Arc::new(datafusion_physical_expr::expressions::CastExpr::new(
                        column("v", 1),
                        DataType::Float64,
                        None,
                    )) as Arc<dyn PhysicalExpr>,
                    _ => column("v", 1),
                }],
                &partition_by,
                &order_by,
                frame.clone(),
                schema.clone(),
                false,
                false,
                None,
            )
            .unwrap()
        })
        .collect();
    let window = WindowAggExec::try_new(windows, sorted, false).unwrap();
    let stream = window
        .execute(0, Arc::new(datafusion_execution::TaskContext::default()))
        .unwrap();
    let batches = futures::executor::block_on(datafusion_physical_plan::common::collect(stream)).unwrap();
    let mut out: Vec<String> = batches
        .iter()
        .flat_map(|b| (0..b.num_rows()).map(move |i| render(b, i)))
        .collect();
    out.sort();
    out
}

fn weir_over(dir: &std::path::Path, parallelism: usize, frame: &str) -> Vec<String> {
    let engine = Engine::new();
    engine
        .set("parallelism.default", &parallelism.to_string())
        .unwrap();
    engine.set("weir.batch-size", "64").unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE t (k BIGINT, v BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND) WITH (
               'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv', 'csv.null-literal' = 'NULL')",
            dir.join("t.csv").display()
        ))
        .unwrap();
    let calls: Vec<String> = AGGREGATES.iter().map(|a| format!("{a}(v) OVER w")).collect();
    let sql = format!(
        "SELECT k, v, ts, {} FROM t WINDOW w AS (PARTITION BY k ORDER BY ts {frame})",
        calls.join(", ")
    );
    let result = engine.sql(&sql).unwrap();
    assert!(
        !result.is_updating(),
        "an OVER aggregation on event time is insert-only"
    );
    let mut out: Vec<String> = result
        .collect()
        .unwrap()
        .iter()
        .flat_map(|b| (0..b.num_rows()).map(move |i| render(b, i)))
        .collect();
    out.sort();
    out
}

fn write(rows: &[Row]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    let cell = |v: Option<i64>| v.map_or("NULL".to_string(), |v| v.to_string());
    for (k, v, ts) in rows {
        let time = chrono::DateTime::from_timestamp_millis(*ts).unwrap().naive_utc();
        let _ = writeln!(
            text,
            "{},{},{}",
            cell(*k),
            cell(*v),
            time.format("%Y-%m-%d %H:%M:%S%.3f")
        );
    }
    std::fs::write(dir.path().join("t.csv"), text).unwrap();
    dir
}

#[test]
fn over_aggregations_equal_datafusions_batch_window_functions_at_every_parallelism() {
    let seed: u64 = crate::test_seed();
    let mut rng = SmallRng::seed_from_u64(seed);
    use WindowFrameBound::{CurrentRow, Preceding};
    let rows_frame = |n: Option<u64>| {
        WindowFrame::new_bounds(
            WindowFrameUnits::Rows,
            Preceding(ScalarValue::UInt64(n)),
            CurrentRow,
        )
    };
    let range_frame = |ms: Option<i64>| {
        let bound = ms.map_or(ScalarValue::IntervalMonthDayNano(None), |ms| {
            ScalarValue::new_interval_mdn(0, 0, ms * 1_000_000)
        });
        WindowFrame::new_bounds(WindowFrameUnits::Range, Preceding(bound), CurrentRow)
    };
    let cases = [
        (
            false,
            "ROWS BETWEEN 3 PRECEDING AND CURRENT ROW",
            rows_frame(Some(3)),
        ),
        (
            false,
            "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
            rows_frame(None),
        ),
        (
            true,
            "RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND CURRENT ROW",
            range_frame(Some(2000)),
        ),
        (
            true,
            "RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
            range_frame(None),
        ),
    ];
    for (ties, sql_frame, frame) in cases {
        let rows = generate(&mut rng, 1500, ties);
        let dir = write(&rows);
        let expected = batch_over(&rows, frame);
        assert_eq!(expected.len(), rows.len());
        for parallelism in [1, 2, 4] {
            let got = weir_over(dir.path(), parallelism, sql_frame);
            assert!(
                got == expected,
                "{sql_frame} at parallelism {parallelism}, WEIR_TEST_SEED={seed}: {} rows, expected {}; \
                 first differing: {:?}",
                got.len(),
                expected.len(),
                got.iter().zip(&expected).find(|(g, e)| g != e)
            );
        }
    }
}

#[test]
fn an_over_aggregation_of_an_updating_input_equals_the_batch_functions_over_its_final_rows() {
    let seed: u64 = crate::test_seed();
    let mut rng = SmallRng::seed_from_u64(seed);
    // Rows (g, k, v, ts), v and ts distinct; the input of the OVER is each
    // g's highest v (a TopN, which updates as higher values arrive).
    let mut values: Vec<i64> = (0..2000).collect();
    rand::seq::SliceRandom::shuffle(&mut values[..], &mut rng);
    let rows: Vec<(i64, Option<i64>, i64, i64)> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let k = (rng.random_range(0..10) != 0).then(|| rng.random_range(0..5));
            (
                rng.random_range(0..300),
                k,
                *v,
                1_600_000_000_000 + i as i64 * 1000,
            )
        })
        .collect();
    let mut best: std::collections::BTreeMap<i64, (Option<i64>, i64, i64)> = Default::default();
    for (g, k, v, ts) in &rows {
        if best.get(g).is_none_or(|b| b.1 < *v) {
            best.insert(*g, (*k, *v, *ts));
        }
    }
    let finals: Vec<Row> = best.values().map(|(k, v, ts)| (*k, Some(*v), *ts)).collect();
    let frame = WindowFrame::new_bounds(
        WindowFrameUnits::Rows,
        WindowFrameBound::Preceding(ScalarValue::UInt64(Some(3))),
        WindowFrameBound::CurrentRow,
    );
    let expected = batch_over(&finals, frame);
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for (g, k, v, ts) in &rows {
        let time = chrono::DateTime::from_timestamp_millis(*ts).unwrap().naive_utc();
        let k = k.map_or("NULL".to_string(), |k| k.to_string());
        let _ = writeln!(text, "{g},{k},{v},{}", time.format("%Y-%m-%d %H:%M:%S%.3f"));
    }
    std::fs::write(dir.path().join("t.csv"), text).unwrap();
    for parallelism in [1, 2, 4] {
        let engine = Engine::new();
        engine
            .set("parallelism.default", &parallelism.to_string())
            .unwrap();
        engine.set("weir.batch-size", "64").unwrap();
        engine
            .sql(&format!(
                "CREATE TABLE t (g BIGINT, k BIGINT, v BIGINT, ts TIMESTAMP(3), WATERMARK FOR ts AS ts) WITH (
                   'connector' = 'filesystem', 'path' = '{}', 'format' = 'csv', 'csv.null-literal' = 'NULL')",
                dir.path().join("t.csv").display()
            ))
            .unwrap();
        let calls: Vec<String> = AGGREGATES.iter().map(|a| format!("{a}(v) OVER w")).collect();
        let sql = format!(
            "SELECT k, v, ts, {} FROM (SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY g ORDER BY v DESC) \
             AS rn FROM t) WHERE rn = 1) WINDOW w AS (PARTITION BY k ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW)",
            calls.join(", ")
        );
        let result = engine.sql(&sql).unwrap();
        assert!(
            result.is_updating(),
            "an OVER aggregation of updating input updates"
        );
        let table = result.materialize().unwrap();
        let mut got: Vec<String> = (0..table.num_rows()).map(|i| render(&table, i)).collect();
        got.sort();
        assert!(
            got == expected,
            "parallelism {parallelism}, WEIR_TEST_SEED={seed}: {} rows, expected {}; first differing: {:?}",
            got.len(),
            expected.len(),
            got.iter().zip(&expected).find(|(g, e)| g != e)
        );
    }
}
