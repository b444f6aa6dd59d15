//! The Table API against SQL: each operation plans to the job graph of the equivalent query and gives its rows; misuse gets errors that name the operation and the column.

use std::time::Duration;

use arrow::util::pretty::pretty_format_batches;
use datafusion_expr::{col, lit};
use datafusion_functions_aggregate::expr_fn::{max, sum};

use crate::Engine;
use crate::table::*;

/// 1000 rows, one every 100 ms of event time, over 7 auctions.
const SEQ: &str = "CREATE TABLE seq (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 100, 3),
    auction AS id % 7, price AS id * 13 % 101, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
  WITH ('connector' = 'datagen', 'fields.id.kind' = 'sequence',
        'fields.id.start' = '0', 'fields.id.end' = '999')";

fn engine() -> Engine {
    let engine = Engine::new();
    engine.sql(SEQ).unwrap();
    engine.sql("SET 'table.local-time-zone' = 'UTC'").unwrap();
    engine
}

/// The job graph part of an explanation.
fn job_graph(explained: &str) -> String {
    explained
        .split("== Job Graph ==")
        .nth(1)
        .expect("a job graph")
        .trim()
        .to_string()
}

/// The job graph of SQL `query`.
fn sql_graph(engine: &Engine, query: &str) -> String {
    let batches = engine
        .sql(&format!("EXPLAIN {query}"))
        .unwrap()
        .collect()
        .unwrap();
    let text = arrow::array::AsArray::as_string::<i32>(batches[0].column(0))
        .value(0)
        .to_string();
    job_graph(&text)
}

/// The final table of a result, its rows as sorted lines.
fn table_rows(result: crate::TableResult) -> Vec<String> {
    let table = result.materialize().unwrap();
    let text = pretty_format_batches(&[table]).unwrap().to_string();
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(1)
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// `table` plans to the job graph of `query` and gives its rows (some).
fn same_as_sql(engine: &Engine, table: &Table, query: &str) -> Vec<String> {
    assert_eq!(
        job_graph(&table.explain().unwrap()),
        sql_graph(engine, query),
        "job graphs of the table and of {query}"
    );
    let (got, expected) = (
        table_rows(table.execute().unwrap()),
        table_rows(engine.sql(query).unwrap()),
    );
    assert!(!expected.is_empty(), "{query} gives rows");
    assert_eq!(got, expected, "rows of the table and of {query}");
    assert_eq!(
        table
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect::<Vec<_>>(),
        engine
            .sql_query(query)
            .unwrap()
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect::<Vec<_>>(),
        "column names"
    );
    got
}

#[test]
fn filter_and_select_plan_and_run_as_the_same_sql() {
    let e = engine();
    let table = e
        .from("seq")
        .unwrap()
        .filter(col("price").gt(lit(90)))
        .unwrap()
        .select([
            col("id"),
            (col("price") * lit(2)).alias("double"),
            col("auction") + lit(1),
        ])
        .unwrap();
    let got = same_as_sql(
        &e,
        &table,
        "SELECT id, price * 2 AS double, auction + 1 FROM seq WHERE price > 90",
    );
    assert_eq!(got.len(), 99, "{got:?}");
    assert_eq!(table.schema().field(2).name(), "EXPR$2", "named as SQL names it");
}

#[test]
fn columns_are_added_renamed_and_dropped_as_sql_selects_them() {
    let e = engine();
    let table = e
        .from("seq")
        .unwrap()
        .select([col("id"), col("auction"), col("price")])
        .unwrap()
        .add_columns([(col("price") % lit(10)).alias("digit")])
        .unwrap()
        .rename_columns([("auction", "item")])
        .unwrap()
        .drop_columns(["price"])
        .unwrap()
        .where_(col("digit").eq(lit(3)))
        .unwrap();
    same_as_sql(
        &e,
        &table,
        "SELECT id, auction AS item, price % 10 AS digit FROM seq WHERE price % 10 = 3",
    );
    assert!(
        (e.from("seq").unwrap().add_columns([col("id").alias("price")])).is_err(),
        "a name the table has already"
    );
    let replaced = e
        .from("seq")
        .unwrap()
        .select([col("id"), col("price")])
        .unwrap()
        .add_or_replace_columns([(col("price") + lit(1)).alias("price")])
        .unwrap();
    same_as_sql(&e, &replaced, "SELECT id, price + 1 AS price FROM seq");
}

#[test]
fn a_grouped_select_aggregates_as_group_by_does() {
    let e = engine();
    let table = e
        .from("seq")
        .unwrap()
        .group_by([col("auction")])
        .select([
            col("auction"),
            count_star().alias("bids"),
            sum(col("price")),
            max(col("id")),
        ])
        .unwrap();
    let got = same_as_sql(
        &e,
        &table,
        "SELECT auction, COUNT(*) AS bids, SUM(price), MAX(id) FROM seq GROUP BY auction",
    );
    assert_eq!(got.len(), 7);
    assert_eq!(table.schema().field(2).name(), "EXPR$2");
    let global = e
        .from("seq")
        .unwrap()
        .select([count_star().alias("n"), sum(col("price")).alias("s")])
        .unwrap();
    same_as_sql(&e, &global, "SELECT COUNT(*) AS n, SUM(price) AS s FROM seq");
    let distinct = e
        .from("seq")
        .unwrap()
        .select([col("auction")])
        .unwrap()
        .distinct()
        .unwrap();
    same_as_sql(&e, &distinct, "SELECT DISTINCT auction FROM seq");
}

#[test]
fn a_sum_of_the_table_api_is_flinks_as_in_sql() {
    let e = engine();
    e.sql("CREATE TABLE small (v INT) WITH ('connector' = 'datagen', 'number-of-rows' = '3')")
        .unwrap();
    let table = e
        .from("small")
        .unwrap()
        .select([sum(col("v")).alias("s")])
        .unwrap();
    let sql = e.sql_query("SELECT SUM(v) AS s FROM small").unwrap();
    assert_eq!(
        table.schema().field(0).data_type(),
        sql.schema().field(0).data_type(),
        "SUM of an INT is an INT, as Flink types it"
    );
    assert_eq!(
        job_graph(&table.explain().unwrap()),
        sql_graph(&e, "SELECT SUM(v) AS s FROM small")
    );
}

#[test]
fn group_windows_plan_as_window_table_functions() {
    let e = engine();
    let seq = e.from("seq").unwrap();
    let windows = [
        (
            Tumble::over(Duration::from_secs(10)).on("ts").alias("w"),
            "TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '10' SECOND)",
        ),
        (
            Slide::over(Duration::from_secs(10))
                .every(Duration::from_secs(5))
                .on("ts")
                .alias("w"),
            "HOP(TABLE seq, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '10' SECOND)",
        ),
        (
            Cumulate::over(Duration::from_secs(20))
                .every(Duration::from_secs(5))
                .on("ts")
                .alias("w"),
            "CUMULATE(TABLE seq, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '20' SECOND)",
        ),
    ];
    for (window, tvf) in windows {
        let table = seq
            .window(window)
            .group_by([col("auction"), col("w")])
            .select([
                col("auction"),
                window_start("w").alias("ws"),
                window_end("w").alias("we"),
                count_star().alias("n"),
                sum(col("price")).alias("s"),
            ])
            .unwrap();
        same_as_sql(
            &e,
            &table,
            &format!(
                "SELECT auction, window_start AS ws, window_end AS we, COUNT(*) AS n, SUM(price) AS s
                 FROM TABLE({tvf}) GROUP BY auction, window_start, window_end"
            ),
        );
    }
    e.sql("CREATE VIEW early_late AS SELECT * FROM seq WHERE id < 200 OR id > 600")
        .unwrap();
    let sessions = e
        .from("early_late")
        .unwrap()
        .window(Session::with_gap(Duration::from_secs(5)).on("ts").alias("s"))
        .group_by([col("s"), col("auction")])
        .select([
            col("auction"),
            window_start("s").alias("ss"),
            count_star().alias("n"),
        ])
        .unwrap();
    let got = same_as_sql(
        &e,
        &sessions,
        "SELECT auction, window_start AS ss, COUNT(*) AS n
         FROM TABLE(SESSION(TABLE early_late PARTITION BY auction, DESCRIPTOR(ts), INTERVAL '5' SECOND))
         GROUP BY auction, window_start, window_end",
    );
    assert_eq!(got.len(), 14, "two sessions of each auction: {got:?}");
}

#[test]
fn a_table_is_a_view_sql_reads_and_a_query_is_a_table() {
    let e = engine();
    let expensive = e.from("seq").unwrap().filter(col("price").gt(lit(95))).unwrap();
    e.create_temporary_view("expensive", &expensive).unwrap();
    let via_view = e
        .sql("SELECT auction, COUNT(*) AS n FROM expensive GROUP BY auction")
        .unwrap();
    let direct = e
        .sql("SELECT auction, COUNT(*) AS n FROM seq WHERE price > 95 GROUP BY auction")
        .unwrap();
    assert_eq!(table_rows(via_view), table_rows(direct));
    let from_sql = e
        .sql_query("SELECT auction, price FROM seq WHERE id < 100")
        .unwrap()
        .group_by([col("auction")])
        .select([col("auction"), max(col("price")).alias("m")])
        .unwrap();
    same_as_sql(
        &e,
        &from_sql,
        "SELECT auction, MAX(price) AS m FROM (SELECT auction, price FROM seq WHERE id < 100) GROUP BY auction",
    );
    assert!(e.from("expensive").is_ok(), "a view is a table to read");
}

#[test]
fn an_unknown_column_is_named_with_the_closest_one() {
    let e = engine();
    let seq = e.from("seq").unwrap();
    let message = seq.select([col("prise")]).unwrap_err().to_string();
    assert!(
        message.contains("select") && message.contains("'prise'") && message.contains("did you mean 'price'"),
        "{message}"
    );
    let message = seq.filter(col("auctoin").eq(lit(1))).unwrap_err().to_string();
    assert!(
        message.contains("filter") && message.contains("'auction'"),
        "{message}"
    );
    let message = seq.drop_columns(["idd"]).unwrap_err().to_string();
    assert!(
        message.contains("drop_columns") && message.contains("'id'"),
        "{message}"
    );
    let message = e.from("seqs").unwrap_err().to_string();
    assert!(
        message.contains("'seqs'") && message.contains("'seq'"),
        "{message}"
    );
}

#[test]
fn a_type_mismatch_names_the_operation() {
    let e = engine();
    let seq = e.from("seq").unwrap();
    let message = seq.filter(col("price") + lit(1)).unwrap_err().to_string();
    assert!(message.contains("filter"), "{message}");
    let message = seq.select([col("ts") * lit(2)]).unwrap_err().to_string();
    assert!(
        message.starts_with("Plan error: select") || message.contains("select:"),
        "{message}"
    );
}

#[test]
fn a_window_on_a_column_that_is_not_a_time_attribute_is_refused() {
    let e = engine();
    let seq = e.from("seq").unwrap();
    let on_id = seq
        .window(Tumble::over(Duration::from_secs(1)).on("id").alias("w"))
        .group_by([col("w")])
        .select([count_star()])
        .unwrap_err()
        .to_string();
    assert!(
        on_id.contains("window") && on_id.contains("time attribute"),
        "{on_id}"
    );
    let plain_ts = seq.select([col("id"), (col("ts")).alias("t")]).unwrap();
    let _ = plain_ts; // a projection keeps the time attribute, as in SQL
    let no_on = seq
        .window(Tumble::over(Duration::from_secs(1)).alias("w"))
        .group_by([col("w")])
        .select([count_star()])
        .unwrap_err()
        .to_string();
    assert!(no_on.contains("no time attribute"), "{no_on}");
    let ungrouped = seq
        .window(Tumble::over(Duration::from_secs(1)).on("ts").alias("w"))
        .group_by([col("auction")])
        .select([count_star()])
        .unwrap_err()
        .to_string();
    assert!(ungrouped.contains("'w'"), "{ungrouped}");
}

/// Five auctions with names, beside [`SEQ`].
const AUCTIONS: &str = "CREATE TABLE auctions (aid BIGINT, name AS CONCAT('item-', CAST(aid AS STRING)))
  WITH ('connector' = 'datagen', 'fields.aid.kind' = 'sequence',
        'fields.aid.start' = '0', 'fields.aid.end' = '4')";

#[test]
fn joins_plan_and_run_as_sql_joins() {
    let e = engine();
    e.sql(AUCTIONS).unwrap();
    let (seq, auctions) = (e.from("seq").unwrap(), e.from("auctions").unwrap());
    let cases = [
        ("JOIN", seq.join(&auctions, col("auction").eq(col("aid")))),
        (
            "LEFT JOIN",
            seq.left_outer_join(&auctions, col("auction").eq(col("aid"))),
        ),
        (
            "RIGHT JOIN",
            seq.right_outer_join(&auctions, col("auction").eq(col("aid"))),
        ),
        (
            "FULL JOIN",
            seq.full_outer_join(&auctions, col("auction").eq(col("aid"))),
        ),
    ];
    for (join, table) in cases {
        let table = table
            .unwrap()
            .filter(col("id").lt(lit(40)))
            .unwrap()
            .select([col("id"), col("name"), col("price")])
            .unwrap();
        let got = same_as_sql(
            &e,
            &table,
            &format!("SELECT id, name, price FROM seq {join} auctions ON auction = aid WHERE id < 40"),
        );
        assert!(got.len() >= 28, "{join}: {got:?}");
    }
    let message = seq
        .join(&auctions, col("auction").eq(col("aidd")))
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("join") && message.contains("did you mean 'aid'"),
        "{message}"
    );
}

#[test]
fn an_interval_join_of_a_table_with_itself_plans_as_in_sql() {
    let e = engine();
    let (a, b) = (
        e.from("seq").unwrap().alias("a").unwrap(),
        e.from("seq").unwrap().alias("b").unwrap(),
    );
    let within = col("a.ts").between(
        col("b.ts") - lit(datafusion_common::ScalarValue::new_interval_dt(0, 500)),
        col("b.ts"),
    );
    let table = a
        .join(&b, col("a.auction").eq(col("b.auction")).and(within))
        .unwrap()
        .select([col("a.id").alias("x"), col("b.id").alias("y")])
        .unwrap();
    let plan = table.explain().unwrap();
    assert!(plan.contains("IntervalJoin"), "{plan}");
    same_as_sql(
        &e,
        &table,
        "SELECT a.id AS x, b.id AS y FROM seq a JOIN seq b ON a.auction = b.auction
         AND a.ts BETWEEN b.ts - INTERVAL '0.5' SECOND AND b.ts",
    );
}

#[test]
fn union_all_and_a_top_n_plan_as_in_sql() {
    let e = engine();
    let seq = e.from("seq").unwrap();
    let low = seq
        .filter(col("id").lt(lit(10)))
        .unwrap()
        .select([col("id"), col("price")])
        .unwrap();
    let high = seq
        .filter(col("id").gt(lit(990)))
        .unwrap()
        .select([col("id"), col("price")])
        .unwrap();
    let both = low.union_all(&high).unwrap();
    let got = same_as_sql(
        &e,
        &both,
        "SELECT id, price FROM seq WHERE id < 10 UNION ALL SELECT id, price FROM seq WHERE id > 990",
    );
    assert_eq!(got.len(), 19);
    let top = seq
        .select([col("id"), col("price")])
        .unwrap()
        .order_by([col("price").sort(false, true), col("id").sort(true, false)])
        .unwrap()
        .fetch(3)
        .unwrap();
    let got = same_as_sql(
        &e,
        &top,
        "SELECT id, price FROM seq ORDER BY price DESC, id LIMIT 3",
    );
    assert_eq!(got.len(), 3);
    let message = seq.fetch(3).unwrap_err().to_string();
    assert!(message.contains("order_by"), "{message}");
}

#[test]
fn an_over_window_in_a_select_plans_as_sql_over() {
    use datafusion_expr::{ExprFunctionExt, WindowFrame, WindowFrameBound, WindowFrameUnits};
    let e = engine();
    let frame = WindowFrame::new_bounds(
        WindowFrameUnits::Rows,
        WindowFrameBound::Preceding(datafusion_common::ScalarValue::UInt64(Some(2))),
        WindowFrameBound::CurrentRow,
    );
    let over = over(sum(col("price")))
        .partition_by(vec![col("auction")])
        .order_by(vec![col("ts").sort(true, false)])
        .window_frame(frame)
        .build()
        .unwrap();
    let table = e
        .from("seq")
        .unwrap()
        .select([col("id"), col("auction"), over.alias("recent")])
        .unwrap();
    let got = same_as_sql(
        &e,
        &table,
        "SELECT id, auction, SUM(price) OVER (PARTITION BY auction ORDER BY ts
           ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS recent FROM seq",
    );
    assert_eq!(got.len(), 1000);
}

#[test]
fn rows_from_batches_are_a_bounded_table() {
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    let e = engine();
    let schema = std::sync::Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Utf8, true),
    ]));
    let batch = arrow::record_batch::RecordBatch::try_new(
        schema.clone(),
        vec![
            std::sync::Arc::new(Int64Array::from(vec![1, 2, 3, 2])),
            std::sync::Arc::new(StringArray::from(vec![Some("a"), None, Some("c"), Some("d")])),
        ],
    )
    .unwrap();
    let table = e.from_batches(schema, &[batch]).unwrap();
    assert_eq!(table.schema().field(1).name(), "v");
    let counted = table
        .group_by([col("k")])
        .select([col("k"), count_star().alias("n")])
        .unwrap();
    assert_eq!(
        table_rows(counted.execute().unwrap()),
        ["| 1 | 1 |", "| 2 | 2 |", "| 3 | 1 |"]
    );
}

#[test]
fn execute_insert_writes_what_insert_into_writes() {
    let e = engine();
    let dir = tempfile::tempdir().unwrap();
    for sink in ["by_table", "by_sql"] {
        e.sql(&format!(
            "CREATE TABLE {sink} (auction BIGINT, n BIGINT) WITH ('connector' = 'filesystem',
               'path' = '{}', 'format' = 'csv')",
            dir.path().join(sink).display()
        ))
        .unwrap();
    }
    let table = e
        .from("seq")
        .unwrap()
        .window(Tumble::over(Duration::from_secs(30)).on("ts").alias("w"))
        .group_by([col("w"), col("auction")])
        .select([col("auction"), count_star()])
        .unwrap();
    table.execute_insert("by_table").unwrap().wait().unwrap();
    e.sql(
        "INSERT INTO by_sql SELECT auction, COUNT(*) FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts),
           INTERVAL '30' SECOND)) GROUP BY auction, window_start, window_end",
    )
    .unwrap()
    .wait()
    .unwrap();
    let read = |sink: &str| {
        let mut lines = Vec::new();
        for file in std::fs::read_dir(dir.path().join(sink)).unwrap() {
            let path = file.unwrap().path();
            if !path.file_name().unwrap().to_string_lossy().starts_with('.') {
                lines.extend(std::fs::read_to_string(path).unwrap().lines().map(str::to_string));
            }
        }
        lines.sort();
        lines
    };
    let written = read("by_table");
    assert_eq!(written.len(), 28, "7 auctions in 4 windows: {written:?}");
    assert_eq!(written, read("by_sql"));
    assert!(table.execute_insert("no_such").is_err());
}

#[test]
fn a_processing_time_window_plans_as_in_sql() {
    let e = engine();
    e.sql(
        "CREATE TABLE clicks (id BIGINT, pt AS PROCTIME()) WITH ('connector' = 'datagen',
           'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '499')",
    )
    .unwrap();
    let table = e
        .from("clicks")
        .unwrap()
        .window(Tumble::over(Duration::from_secs(1)).on("pt").alias("w"))
        .group_by([col("w")])
        .select([window_start("w").alias("ws"), count_star().alias("n")])
        .unwrap();
    assert_eq!(
        job_graph(&table.explain().unwrap()),
        sql_graph(
            &e,
            "SELECT window_start AS ws, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(pt),
               INTERVAL '1' SECOND)) GROUP BY window_start, window_end"
        )
    );
    let batches = table.execute().unwrap().collect().unwrap();
    let counted: i64 = batches
        .iter()
        .map(|b| {
            arrow::compute::sum(
                arrow::array::AsArray::as_primitive::<arrow::datatypes::Int64Type>(b.column(1)),
            )
            .unwrap_or(0)
        })
        .sum();
    assert_eq!(counted, 500, "every row in some processing-time window");
}

#[test]
fn a_function_is_called_by_its_name_as_sql_calls_it() {
    let e = engine();
    let table = e
        .from("seq")
        .unwrap()
        .filter(col("id").lt(lit(5)))
        .unwrap()
        .select([
            col("id"),
            call("DATE_FORMAT", vec![col("ts"), lit("HH:mm:ss.SSS")]).alias("at"),
            call("upper", vec![lit("x")]).alias("u"),
        ])
        .unwrap();
    same_as_sql(
        &e,
        &table,
        "SELECT id, DATE_FORMAT(ts, 'HH:mm:ss.SSS') AS at, UPPER('x') AS u FROM seq WHERE id < 5",
    );
    let aggregated = e
        .from("seq")
        .unwrap()
        .group_by([col("auction")])
        .select([col("auction"), call("SUM", vec![col("price")]).alias("s")])
        .unwrap();
    same_as_sql(
        &e,
        &aggregated,
        "SELECT auction, SUM(price) AS s FROM seq GROUP BY auction",
    );
    let message = e
        .from("seq")
        .unwrap()
        .select([call("NO_SUCH_FN", vec![col("id")])])
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("select") && message.contains("NO_SUCH_FN"),
        "{message}"
    );
}

/// `rows` rows `k,v` over 10 keys (pseudo-random), written to a CSV file
/// in `dir`: one file, so a source reads it in order at any parallelism.
fn events_file(dir: &std::path::Path, rows: usize) -> (std::path::PathBuf, Vec<(String, i64)>) {
    let mut state = 7u64;
    let events: Vec<(String, i64)> = (0..rows)
        .map(|i| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (format!("k{}", (state >> 33) % 10), i as i64)
        })
        .collect();
    let path = dir.join("events.csv");
    let text: String = events.iter().map(|(k, v)| format!("{k},{v}\n")).collect();
    std::fs::write(&path, text).unwrap();
    (path, events)
}

/// The windows a model of row-count windows gives: per key, in file order,
/// `size` rows every `slide`, each as `| k | sum | count |`.
fn modeled(events: &[(String, i64)], size: usize, slide: usize) -> Vec<String> {
    let mut by_key: std::collections::BTreeMap<&str, Vec<i64>> = Default::default();
    for (k, v) in events {
        by_key.entry(k).or_default().push(*v);
    }
    let mut lines = Vec::new();
    for (k, values) in by_key {
        let mut start = 0;
        while start + size <= values.len() {
            let sum: i64 = values[start..start + size].iter().sum();
            lines.push(format!("| {k} | {sum} | {size} |"));
            start += slide;
        }
    }
    lines.sort();
    lines
}

/// Table cells padded as pretty printing pads them: `| a | 1 |` to
/// compare without widths.
fn unpadded(lines: Vec<String>) -> Vec<String> {
    let mut lines: Vec<String> = lines
        .into_iter()
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).filter(|c| !c.is_empty()).collect();
            format!("| {} |", cells.join(" | "))
        })
        .collect();
    lines.sort();
    lines
}

#[test]
fn row_count_windows_give_the_windows_of_a_model_at_parallelism_1_and_4() {
    let dir = tempfile::tempdir().unwrap();
    let (path, events) = events_file(dir.path(), 3000);
    for (size, slide) in [(25, 25), (40, 15)] {
        for parallelism in [1, 4] {
            let e = Engine::new();
            e.sql(&format!(
                "CREATE TABLE events (k STRING, v BIGINT, pt AS PROCTIME())
                 WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
                path.display()
            ))
            .unwrap();
            e.set("parallelism.default", &parallelism.to_string()).unwrap();
            let window = match size == slide {
                true => Tumble::over(rows(size as u64)),
                false => Slide::over(rows(size as u64)).every(rows(slide as u64)),
            };
            let table = e
                .from("events")
                .unwrap()
                .window(window.on("pt").alias("w"))
                .group_by([col("w"), col("k")])
                .select([col("k"), sum(col("v")).alias("s"), count_star().alias("n")])
                .unwrap();
            let plan = table.explain().unwrap();
            assert!(plan.contains("CountWindowAggregate"), "{plan}");
            let got = unpadded(table_rows(table.execute().unwrap()));
            let expected = modeled(&events, size, slide);
            assert!(expected.len() > 50, "{} windows", expected.len());
            assert_eq!(
                got, expected,
                "size {size}, slide {slide}, parallelism {parallelism}"
            );
        }
    }
}

#[test]
fn row_count_windows_are_on_processing_time_and_have_no_bounds() {
    let e = engine();
    e.sql("CREATE TABLE clicks (k BIGINT, pt AS PROCTIME()) WITH ('connector' = 'datagen', 'number-of-rows' = '10')")
        .unwrap();
    let on_event_time = e
        .from("seq")
        .unwrap()
        .window(Tumble::over(rows(10)).on("ts").alias("w"))
        .group_by([col("w")])
        .select([count_star()])
        .unwrap_err()
        .to_string();
    assert!(
        on_event_time.contains("processing time") && on_event_time.contains("'ts'"),
        "{on_event_time}"
    );
    let clicks = e.from("clicks").unwrap();
    let bounds = clicks
        .window(Tumble::over(rows(10)).on("pt").alias("w"))
        .group_by([col("w")])
        .select([window_start("w"), count_star()])
        .unwrap_err()
        .to_string();
    assert!(bounds.contains("no window_start"), "{bounds}");
    let mixed = clicks
        .window(
            Slide::over(rows(10))
                .every(Duration::from_secs(1))
                .on("pt")
                .alias("w"),
        )
        .group_by([col("w")])
        .select([count_star()])
        .unwrap_err()
        .to_string();
    assert!(mixed.contains("both rows or both time"), "{mixed}");
    let gaps = clicks
        .window(Slide::over(rows(5)).every(rows(10)).on("pt").alias("w"))
        .group_by([col("w")])
        .select([count_star()])
        .unwrap_err()
        .to_string();
    assert!(gaps.contains("at most its size"), "{gaps}");
}

#[test]
fn a_row_count_window_is_refused_under_the_spilling_backend_naming_it() {
    let e = engine();
    e.sql("CREATE TABLE clicks (k BIGINT, pt AS PROCTIME()) WITH ('connector' = 'datagen', 'number-of-rows' = '10')")
        .unwrap();
    e.set("state.backend.type", "spilling").unwrap();
    let table = e
        .from("clicks")
        .unwrap()
        .window(Tumble::over(rows(2)).on("pt").alias("w"))
        .group_by([col("w"), col("k")])
        .select([col("k"), count_star()])
        .unwrap();
    let message = table.execute().and_then(|r| r.collect()).unwrap_err().to_string();
    assert!(message.contains("CountWindowAggregate"), "{message}");
}

#[test]
fn every_group_window_works_on_processing_time() {
    let e = engine();
    e.sql(
        "CREATE TABLE clicks (id BIGINT, k AS id % 3, pt AS PROCTIME()) WITH ('connector' = 'datagen',
           'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '299')",
    )
    .unwrap();
    let clicks = e.from("clicks").unwrap();
    let windows = [
        (
            Tumble::over(Duration::from_secs(3600)).on("pt").alias("w"),
            "TUMBLE(TABLE clicks, DESCRIPTOR(pt), INTERVAL '1' HOUR)",
        ),
        (
            Slide::over(Duration::from_secs(3600))
                .every(Duration::from_secs(1800))
                .on("pt")
                .alias("w"),
            "HOP(TABLE clicks, DESCRIPTOR(pt), INTERVAL '30' MINUTE, INTERVAL '1' HOUR)",
        ),
        (
            Cumulate::over(Duration::from_secs(3600))
                .every(Duration::from_secs(1800))
                .on("pt")
                .alias("w"),
            "CUMULATE(TABLE clicks, DESCRIPTOR(pt), INTERVAL '30' MINUTE, INTERVAL '1' HOUR)",
        ),
        (
            Session::with_gap(Duration::from_secs(3600)).on("pt").alias("w"),
            "SESSION(TABLE clicks PARTITION BY k, DESCRIPTOR(pt), INTERVAL '1' HOUR)",
        ),
    ];
    for (window, tvf) in windows {
        let table = clicks
            .window(window)
            .group_by([col("w"), col("k")])
            .select([col("k"), count_star().alias("n")])
            .unwrap();
        let sql = format!("SELECT k, COUNT(*) AS n FROM TABLE({tvf}) GROUP BY k, window_start, window_end");
        assert_eq!(job_graph(&table.explain().unwrap()), sql_graph(&e, &sql), "{tvf}");
        let batches = table.execute().unwrap().collect().unwrap();
        let counted: i64 = (batches.iter())
            .map(|b| {
                let n = arrow::array::AsArray::as_primitive::<arrow::datatypes::Int64Type>(b.column(1));
                arrow::compute::sum(n).unwrap_or(0)
            })
            .sum();
        // A row is in one tumbling window and one session, two hopping
        // windows, and one or two cumulating ones (two in the first half
        // hour of an hour).
        match &tvf[..3] {
            "TUM" | "SES" => assert_eq!(counted, 300, "{tvf}"),
            "HOP" => assert_eq!(counted, 600, "{tvf}"),
            _ => assert!((300..=600).contains(&counted), "{tvf}: {counted}"),
        }
    }
}
