//! Embedding weir: run Flink SQL from Rust and read the results as Arrow batches.
//!
//!     cargo run --example embedded

use arrow::util::pretty::print_batches;
use weir::Engine;

fn main() -> weir::Result<()> {
    let engine = Engine::new();
    engine.set("parallelism.default", "2")?;
    engine.set("table.local-time-zone", "UTC")?;

    // One bid every 10 ms of event time, from weir's built-in generator.
    engine.sql(
        "CREATE TABLE bids (
           id BIGINT,
           auction AS id % 5,
           price AS (id * 7919) % 1000,
           ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
         ) WITH ('connector' = 'datagen', 'rows-per-second' = '1000000',
                 'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '5999')",
    )?;

    // A bounded query: collect every row once the input is done.
    let batches = engine
        .sql(
            "SELECT auction, window_start, COUNT(*) AS bids, MAX(price) AS max_price
             FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '20' SECOND))
             GROUP BY auction, window_start, window_end",
        )?
        .collect()?;
    print_batches(&batches)?;

    // The same rows one batch at a time, as each window fires.
    let result = engine.sql(
        "SELECT window_end, SUM(price) AS revenue
         FROM TABLE(HOP(TABLE bids, DESCRIPTOR(ts), INTERVAL '10' SECOND, INTERVAL '30' SECOND))
         GROUP BY window_start, window_end",
    )?;
    for batch in result.stream() {
        let batch = batch?;
        println!("{} window(s) fired", batch.num_rows());
    }
    Ok(())
}
