//! Differential test: weir's streaming aggregates against a model, a plain
//! batch GROUP BY over the same rows written here without any engine code
//! (each row put in its windows by arithmetic, sessions by sorting).
//! Random keys, out-of-order timestamps within the watermark bound (so no row
//! is late), parallelism 1, 2 and 4; results equal as multisets. Updating
//! queries (GROUP BY without a window, aggregates of aggregates, DISTINCT)
//! are compared by their changelog applied to an empty table: their
//! retractions must cancel exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use weir::Engine;

const DELAY_MS: i64 = 3_000;
const BASE_MS: i64 = 1_700_000_000_000;

/// One generated row: `k`, `price`, `bidder` and `ts` in epoch milliseconds.
#[derive(Clone, Copy)]
struct Row {
    k: i64,
    price: i64,
    bidder: i64,
    ts: i64,
}

/// Random rows: timestamps advance with jitter below the watermark delay.
fn generate(seed: u64, rows: usize, keys: i64) -> Vec<Row> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut clock = BASE_MS;
    (0..rows)
        .map(|_| {
            clock += rng.random_range(0..40);
            Row {
                k: rng.random_range(0..keys),
                price: rng.random_range(1..10_000),
                bidder: rng.random_range(0..50),
                ts: clock - rng.random_range(0..DELAY_MS),
            }
        })
        .collect()
}

fn write_csv(rows: &[Row], path: &std::path::Path) {
    let mut text = String::new();
    for row in rows {
        let t = chrono::DateTime::from_timestamp_millis(row.ts)
            .unwrap()
            .naive_utc();
        let _ = writeln!(
            text,
            "{},{},{},{}",
            row.k,
            row.price,
            row.bidder,
            t.format("%Y-%m-%d %H:%M:%S%.3f")
        );
    }
    std::fs::write(path, text).unwrap();
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
    let result = engine.sql(sql).unwrap();
    if result.is_updating() {
        crate::sorted_rows(&[result.materialize().unwrap()])
    } else {
        crate::sorted_rows(&result.collect().unwrap())
    }
}

/// The aggregates every case selects, in this order.
const AGGREGATES: &str = "COUNT(*), SUM(price), MIN(price), MAX(bidder), COUNT(DISTINCT bidder)";

/// `AGGREGATES` over one group's rows, as `|`-separated text.
fn aggregate(rows: &[Row]) -> String {
    let distinct: BTreeSet<i64> = rows.iter().map(|r| r.bidder).collect();
    format!(
        "{}|{}|{}|{}|{}",
        rows.len(),
        rows.iter().map(|r| r.price).sum::<i64>(),
        rows.iter().map(|r| r.price).min().unwrap(),
        rows.iter().map(|r| r.bidder).max().unwrap(),
        distinct.len()
    )
}

/// The model's result: each row is put into the groups `windows` gives it
/// (leading columns as text), then each group is aggregated.
fn model(rows: &[Row], windows: impl Fn(&Row) -> Vec<String>) -> Vec<String> {
    let mut groups: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    for row in rows {
        for group in windows(row) {
            groups.entry(group).or_default().push(*row);
        }
    }
    let mut out: Vec<String> = groups
        .iter()
        .map(|(group, rows)| format!("{group}|{}", aggregate(rows)))
        .collect();
    out.sort();
    out
}

/// Start of the window of `size` ms that holds `ts`.
fn floor(ts: i64, size: i64) -> i64 {
    ts - ts.rem_euclid(size)
}

/// Session windows per key with `gap` ms: sorted by time, a row opens a new
/// session when it comes at least `gap` after the previous row of its key.
fn sessions(rows: &[Row], gap: i64) -> Vec<String> {
    let mut by_key: BTreeMap<i64, Vec<Row>> = BTreeMap::new();
    for row in rows {
        by_key.entry(row.k).or_default().push(*row);
    }
    let mut out = Vec::new();
    for (k, mut rows) in by_key {
        rows.sort_by_key(|r| r.ts);
        let mut start = 0;
        for i in 1..=rows.len() {
            if i == rows.len() || rows[i].ts - rows[i - 1].ts >= gap {
                let session = &rows[start..i];
                let (first, last) = (session[0].ts, session[i - start - 1].ts);
                out.push(format!("{k}|{first}|{}|{}", last + gap, aggregate(session)));
                start = i;
            }
        }
    }
    out.sort();
    out
}

/// Groups rows by `key` and gives each group's rows to `aggregate`.
fn grouped<K: Ord, V>(rows: impl Iterator<Item = V>, key: impl Fn(&V) -> K) -> BTreeMap<K, Vec<V>> {
    let mut groups: BTreeMap<K, Vec<V>> = BTreeMap::new();
    for row in rows {
        groups.entry(key(&row)).or_default().push(row);
    }
    groups
}

/// Per key: its row count and price sum (the inner query of the nested cases).
fn counts_and_sums(rows: &[Row]) -> Vec<(i64, i64, i64)> {
    grouped(rows.iter(), |r| r.k)
        .into_iter()
        .map(|(k, rows)| (k, rows.len() as i64, rows.iter().map(|r| r.price).sum()))
        .collect()
}

fn sorted(mut out: Vec<String>) -> Vec<String> {
    out.sort();
    out
}

/// The updating cases: their results are their changelogs applied.
fn changelog_cases() -> Vec<Case> {
    vec![
        Case {
            name: "group by key",
            weir: format!("SELECT k, {AGGREGATES} FROM t GROUP BY k"),
            model: |rows| model(rows, |r| vec![r.k.to_string()]),
        },
        Case {
            name: "group by key in two phases (every aggregate merges)",
            weir: "SELECT k, COUNT(*), SUM(price), MIN(price), MAX(bidder) FROM t GROUP BY k".to_string(),
            model: |rows| {
                let groups = grouped(rows.iter(), |r| r.k);
                sorted(
                    groups
                        .iter()
                        .map(|(k, rows)| {
                            let prices = rows.iter().map(|r| r.price);
                            format!(
                                "{k}|{}|{}|{}|{}",
                                rows.len(),
                                prices.clone().sum::<i64>(),
                                prices.min().unwrap(),
                                rows.iter().map(|r| r.bidder).max().unwrap()
                            )
                        })
                        .collect(),
                )
            },
        },
        Case {
            name: "two phases over retractions",
            weir: "SELECT c % 5, COUNT(*), SUM(s), AVG(c) FROM
                     (SELECT k, COUNT(*) AS c, SUM(price) AS s FROM t GROUP BY k)
                   GROUP BY c % 5"
                .to_string(),
            model: |rows| {
                let inner = counts_and_sums(rows);
                sorted(
                    grouped(inner.into_iter(), |(_, c, _)| c % 5)
                        .into_iter()
                        .map(|(group, rows)| {
                            let counts: i64 = rows.iter().map(|r| r.1).sum();
                            format!(
                                "{group}|{}|{}|{}",
                                rows.len(),
                                rows.iter().map(|r| r.2).sum::<i64>(),
                                counts / rows.len() as i64
                            )
                        })
                        .collect(),
                )
            },
        },
        Case {
            name: "global aggregate",
            weir: format!("SELECT {AGGREGATES} FROM t"),
            model: |rows| vec![aggregate(rows)],
        },
        Case {
            name: "having",
            weir: "SELECT k, COUNT(*) FROM t GROUP BY k HAVING COUNT(*) > 66".to_string(),
            model: |rows| {
                sorted(
                    counts_and_sums(rows)
                        .into_iter()
                        .filter(|(_, c, _)| *c > 66)
                        .map(|(k, c, _)| format!("{k}|{c}"))
                        .collect(),
                )
            },
        },
        Case {
            name: "aggregates of aggregates",
            weir: "SELECT c % 5, COUNT(*), SUM(s), MIN(s), MAX(s), MAX(c), COUNT(DISTINCT c) FROM
                     (SELECT k, COUNT(*) AS c, SUM(price) AS s FROM t GROUP BY k)
                   GROUP BY c % 5"
                .to_string(),
            model: |rows| {
                let inner = counts_and_sums(rows);
                sorted(
                    grouped(inner.into_iter(), |(_, c, _)| c % 5)
                        .into_iter()
                        .map(|(group, rows)| {
                            let sums = rows.iter().map(|r| r.2);
                            let distinct: BTreeSet<i64> = rows.iter().map(|r| r.1).collect();
                            format!(
                                "{group}|{}|{}|{}|{}|{}|{}",
                                rows.len(),
                                sums.clone().sum::<i64>(),
                                sums.clone().min().unwrap(),
                                sums.max().unwrap(),
                                rows.iter().map(|r| r.1).max().unwrap(),
                                distinct.len()
                            )
                        })
                        .collect(),
                )
            },
        },
        Case {
            name: "select distinct",
            weir: "SELECT DISTINCT k % 13, bidder FROM t".to_string(),
            model: |rows| {
                let pairs: BTreeSet<(i64, i64)> = rows.iter().map(|r| (r.k % 13, r.bidder)).collect();
                sorted(pairs.iter().map(|(a, b)| format!("{a}|{b}")).collect())
            },
        },
    ]
}

struct Case {
    name: &'static str,
    weir: String,
    model: fn(&[Row]) -> Vec<String>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "tumble with keys",
            weir: format!(
                "SELECT k, CAST(window_start AS BIGINT), {AGGREGATES}
                 FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '5' SECOND))
                 GROUP BY k, window_start, window_end"
            ),
            model: |rows| model(rows, |r| vec![format!("{}|{}", r.k, floor(r.ts, 5000))]),
        },
        Case {
            name: "tumble without keys",
            weir: format!(
                "SELECT CAST(window_end AS BIGINT), {AGGREGATES}
                 FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '3' SECOND))
                 GROUP BY window_start, window_end"
            ),
            model: |rows| model(rows, |r| vec![(floor(r.ts, 3000) + 3000).to_string()]),
        },
        Case {
            name: "hop with keys and a filter",
            weir: format!(
                "SELECT k % 7, CAST(window_start AS BIGINT), {AGGREGATES}
                 FROM TABLE(HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '6' SECOND))
                 WHERE price > 2000
                 GROUP BY k % 7, window_start, window_end"
            ),
            // Slide 2 s, size 6 s: a row is in the 3 windows starting at
            // floor(ts, 2 s) - j * 2 s.
            model: |rows| {
                let kept: Vec<Row> = rows.iter().copied().filter(|r| r.price > 2000).collect();
                model(&kept, |r| {
                    (0..3)
                        .map(|j| format!("{}|{}", r.k % 7, floor(r.ts, 2000) - j * 2000))
                        .collect()
                })
            },
        },
        Case {
            name: "cumulate with keys",
            weir: format!(
                "SELECT k, CAST(window_start AS BIGINT), CAST(window_end AS BIGINT), {AGGREGATES}
                 FROM TABLE(CUMULATE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '4' SECOND))
                 GROUP BY k, window_start, window_end"
            ),
            // Step 1 s, size 4 s: windows [cycle, cycle + i * 1 s) that end after ts.
            model: |rows| {
                model(rows, |r| {
                    let cycle = floor(r.ts, 4000);
                    (1..=4)
                        .map(|i| cycle + i * 1000)
                        .filter(|end| *end > r.ts)
                        .map(|end| format!("{}|{cycle}|{end}", r.k))
                        .collect()
                })
            },
        },
        Case {
            name: "session per key",
            weir: format!(
                "SELECT k, CAST(window_start AS BIGINT), CAST(window_end AS BIGINT), {AGGREGATES}
                 FROM TABLE(SESSION(TABLE t PARTITION BY k, DESCRIPTOR(ts), INTERVAL '10' SECOND))
                 GROUP BY k, window_start, window_end"
            ),
            model: |rows| sessions(rows, 10_000),
        },
    ]
}

#[test]
fn aggregates_equal_a_batch_model_at_every_parallelism() {
    let seed: u64 = crate::test_seed();
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("rows.csv");
    let rows = generate(seed, 20_000, 300);
    write_csv(&rows, &csv);
    for case in cases().into_iter().chain(changelog_cases()) {
        let expected = (case.model)(&rows);
        assert!(!expected.is_empty(), "{}: the model gave no rows", case.name);
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
