//! Differential test: weir's streaming window aggregates against DataFusion's
//! batch GROUP BY over the same rows, with the window start computed by an
//! expression. Random keys, out-of-order timestamps within the watermark bound
//! (so no row is late), parallelism 1, 2 and 4; results equal as multisets.

use std::fmt::Write as _;
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::prelude::SessionContext;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use weir::Engine;

const DELAY_MS: i64 = 3_000;
const BASE_MS: i64 = 1_700_000_000_000;

/// Random rows: ids in order, timestamps advancing with jitter below the delay.
fn generate(seed: u64, rows: usize, keys: i64) -> RecordBatch {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut clock = BASE_MS;
    let (mut k, mut price, mut bidder, mut ts) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rows {
        clock += rng.random_range(0..40);
        k.push(rng.random_range(0..keys));
        price.push(rng.random_range(1..10_000));
        bidder.push(rng.random_range(0..50));
        ts.push(clock - rng.random_range(0..DELAY_MS));
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("price", DataType::Int64, false),
        Field::new("bidder", DataType::Int64, false),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), false),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(k)),
            Arc::new(Int64Array::from(price)),
            Arc::new(Int64Array::from(bidder)),
            Arc::new(TimestampMillisecondArray::from(ts)),
        ],
    )
    .unwrap()
}

fn write_csv(batch: &RecordBatch, path: &std::path::Path) {
    let mut text = String::new();
    let ts = batch
        .column(3)
        .as_any()
        .downcast_ref::<TimestampMillisecondArray>()
        .unwrap();
    for row in 0..batch.num_rows() {
        let value = |c: usize| {
            batch
                .column(c)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .value(row)
        };
        let t = chrono::DateTime::from_timestamp_millis(ts.value(row))
            .unwrap()
            .naive_utc();
        let _ = writeln!(
            text,
            "{},{},{},{}",
            value(0),
            value(1),
            value(2),
            t.format("%Y-%m-%d %H:%M:%S%.3f")
        );
    }
    std::fs::write(path, text).unwrap();
}

/// Rows as sorted strings, so results compare as multisets.
fn canonical(batches: &[RecordBatch]) -> Vec<String> {
    crate::sorted_rows(batches)
}

fn datafusion_rows(batch: &RecordBatch, sql: &str) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    runtime.block_on(async {
        let ctx = SessionContext::new();
        ctx.register_batch("t", batch.clone()).unwrap();
        let df = ctx.sql(sql).await.unwrap();
        canonical(&df.collect().await.unwrap())
    })
}

fn weir_rows(csv: &std::path::Path, parallelism: usize, sql: &str) -> Vec<String> {
    let engine = Engine::new();
    engine
        .set("parallelism.default", &parallelism.to_string())
        .unwrap();
    engine.set("table.local-time-zone", "UTC").unwrap();
    engine.set("weir.batch-size", "1000").unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE t (k BIGINT, price BIGINT, bidder BIGINT, ts TIMESTAMP(3),
               WATERMARK FOR ts AS ts - INTERVAL '{}' SECOND)
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            DELAY_MS / 1000,
            csv.display()
        ))
        .unwrap();
    canonical(&engine.sql(sql).unwrap().collect().unwrap())
}

/// Window start in milliseconds of a row, for a grid of `step` ms.
fn floor(step: i64) -> String {
    format!("(CAST(ts AS BIGINT) - CAST(ts AS BIGINT) % {step})")
}

struct Case {
    name: &'static str,
    weir: String,
    datafusion: String,
}

fn cases() -> Vec<Case> {
    let aggregates = "COUNT(*), SUM(price), MIN(price), MAX(bidder), COUNT(DISTINCT bidder)";
    // HOP 2 s / 6 s: a row is in the 3 windows starting at floor(ts, 2 s) - j * 2 s.
    let hop_start = format!("{} - j * 2000", floor(2000));
    // CUMULATE 1 s / 4 s: windows [cycle, cycle + i * 1 s) for i with cycle + i * 1 s > ts.
    let cycle = floor(4000);
    vec![
        Case {
            name: "tumble with keys",
            weir: format!(
                "SELECT k, CAST(window_start AS BIGINT), {aggregates}
                 FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '5' SECOND))
                 GROUP BY k, window_start, window_end"
            ),
            datafusion: format!(
                "SELECT k, {} AS ws, {aggregates} FROM t GROUP BY k, ws",
                floor(5000)
            ),
        },
        Case {
            name: "tumble without keys",
            weir: format!(
                "SELECT CAST(window_end AS BIGINT), {aggregates}
                 FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '3' SECOND))
                 GROUP BY window_start, window_end"
            ),
            datafusion: format!(
                "SELECT {} + 3000 AS we, {aggregates} FROM t GROUP BY we",
                floor(3000)
            ),
        },
        Case {
            name: "hop with keys and a filter",
            weir: format!(
                "SELECT k % 7, CAST(window_start AS BIGINT), {aggregates}
                 FROM TABLE(HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '6' SECOND))
                 WHERE price > 2000
                 GROUP BY k % 7, window_start, window_end"
            ),
            datafusion: format!(
                "SELECT k % 7 AS kk, {hop_start} AS ws, {aggregates}
                 FROM t CROSS JOIN (VALUES (0), (1), (2)) AS o(j)
                 WHERE price > 2000
                 GROUP BY kk, ws"
            ),
        },
        Case {
            name: "cumulate with keys",
            weir: format!(
                "SELECT k, CAST(window_start AS BIGINT), CAST(window_end AS BIGINT), {aggregates}
                 FROM TABLE(CUMULATE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '4' SECOND))
                 GROUP BY k, window_start, window_end"
            ),
            datafusion: format!(
                "SELECT k, {cycle} AS ws, {cycle} + i * 1000 AS we, {aggregates}
                 FROM t CROSS JOIN (VALUES (1), (2), (3), (4)) AS o(i)
                 WHERE {cycle} + i * 1000 > CAST(ts AS BIGINT)
                 GROUP BY k, ws, we"
            ),
        },
        Case {
            name: "session per key",
            weir: format!(
                "SELECT k, CAST(window_start AS BIGINT), CAST(window_end AS BIGINT), {aggregates}
                 FROM TABLE(SESSION(TABLE t PARTITION BY k, DESCRIPTOR(ts), INTERVAL '10' SECOND))
                 GROUP BY k, window_start, window_end"
            ),
            // Sorted by time, a row starts a new session when it is at least the gap
            // after the previous row of its key.
            datafusion: format!(
                "SELECT k, MIN(CAST(ts AS BIGINT)) AS ws, MAX(CAST(ts AS BIGINT)) + 10000 AS we, {aggregates}
                 FROM (SELECT *, SUM(fresh) OVER (PARTITION BY k ORDER BY ts, price, bidder
                                                  ROWS UNBOUNDED PRECEDING) AS session
                       FROM (SELECT *, CASE WHEN CAST(ts AS BIGINT) - LAG(CAST(ts AS BIGINT))
                                          OVER (PARTITION BY k ORDER BY ts, price, bidder) < 10000
                                        THEN 0 ELSE 1 END AS fresh
                             FROM t))
                 GROUP BY k, session"
            ),
        },
    ]
}

#[test]
fn window_aggregates_equal_batch_group_by_at_every_parallelism() {
    let seed: u64 = std::env::var("WEIR_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("rows.csv");
    let batch = generate(seed, 20_000, 300);
    write_csv(&batch, &csv);
    for case in cases() {
        let expected = datafusion_rows(&batch, &case.datafusion);
        assert!(!expected.is_empty(), "{}: DataFusion returned no rows", case.name);
        for parallelism in [1, 2, 4] {
            let actual = weir_rows(&csv, parallelism, &case.weir);
            if actual != expected {
                let missing: Vec<_> = expected.iter().filter(|r| !actual.contains(r)).take(5).collect();
                let extra: Vec<_> = actual.iter().filter(|r| !expected.contains(r)).take(5).collect();
                panic!(
                    "{} at parallelism {parallelism} differs (seed {seed}, rerun with WEIR_TEST_SEED={seed}): \
                     {} rows vs {} expected; missing {missing:?}; extra {extra:?}",
                    case.name,
                    actual.len(),
                    expected.len()
                );
            }
        }
    }
}
