//! The Table API: weir's queries written as Rust code, beside the same query in SQL.
//!
//!     cargo run --example table_api
//!
//! A stream of bids (weir's generator), filtered, counted per auction in
//! 10-second tumbling windows, joined with auction names, read from SQL
//! through a view, and counted in row-count windows (which SQL lacks).

use std::time::Duration;

use arrow::util::pretty::print_batches;
use datafusion_expr::{col, lit};
use datafusion_functions_aggregate::expr_fn::{avg, max};
use weir::Engine;
use weir::table::{Tumble, count_star, rows, window_end, window_start};

fn main() -> weir::Result<()> {
    let engine = Engine::new();
    engine.set("table.local-time-zone", "UTC")?;
    engine.set("parallelism.default", "2")?;
    engine.sql(
        "CREATE TABLE bids (
           id BIGINT,
           auction AS id % 5,
           price AS (id * 7919) % 1000,
           ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
           pt AS PROCTIME(),
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
         ) WITH ('connector' = 'datagen', 'fields.id.kind' = 'sequence',
                 'fields.id.start' = '0', 'fields.id.end' = '5999')",
    )?;
    engine.sql(
        "CREATE TABLE auctions (aid BIGINT, name AS CONCAT('item-', CAST(aid AS STRING)))
         WITH ('connector' = 'datagen', 'fields.aid.kind' = 'sequence',
               'fields.aid.start' = '0', 'fields.aid.end' = '4')",
    )?;

    // Bids over 100, counted per auction in 10-second windows.
    let expensive = engine.from("bids")?.filter(col("price").gt(lit(100)))?;
    engine.create_temporary_view("expensive", &expensive)?;
    let per_window = engine
        .from("expensive")?
        .window(Tumble::over(Duration::from_secs(10)).on("ts").alias("w"))
        .group_by([col("w"), col("auction")])
        .select([
            col("auction"),
            window_start("w").alias("ws"),
            window_end("w").alias("we"),
            count_star().alias("bids"),
            max(col("price")).alias("top"),
        ])?;
    // The same query in SQL plans to the same job graph.
    let sql = "SELECT auction, window_start AS ws, window_end AS we, COUNT(*) AS bids, MAX(price) AS top
               FROM TABLE(TUMBLE(TABLE expensive, DESCRIPTOR(ts), INTERVAL '10' SECOND))
               GROUP BY auction, window_start, window_end";
    let explained = engine.sql(&format!("EXPLAIN {sql}"))?.collect()?;
    let sql_plan = arrow::array::AsArray::as_string::<i32>(explained[0].column(0))
        .value(0)
        .to_string();
    let job_graph = |plan: &str| plan.split("== Job Graph ==").nth(1).map(|g| g.trim().to_string());
    let table_plan = per_window.explain()?;
    assert_eq!(
        job_graph(&table_plan),
        job_graph(&sql_plan),
        "one job graph, both ways"
    );
    println!("{table_plan}");

    // Named auctions, as a view SQL reads.
    let named = per_window
        .join(&engine.from("auctions")?, col("auction").eq(col("aid")))?
        .select([col("name"), col("ws"), col("bids"), col("top")])?;
    engine.create_temporary_view("named_windows", &named)?;
    let busiest = engine
        .sql("SELECT name, MAX(bids) AS most FROM named_windows GROUP BY name")?
        .materialize()?;
    print_batches(&[busiest])?;

    // Row-count windows: the average price of every 100 bids of an auction,
    // counted as the bids arrive (processing time).
    let every_hundred = engine
        .from("bids")?
        .window(Tumble::over(rows(100)).on("pt").alias("w"))
        .group_by([col("w"), col("auction")])
        .select([col("auction"), avg(col("price")).alias("avg_price")])?
        .execute()?
        .collect()?;
    let windows: usize = every_hundred.iter().map(|b| b.num_rows()).sum();
    println!("{windows} windows of 100 bids");
    Ok(())
}
