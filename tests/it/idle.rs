//! `table.exec.source.idle-timeout`: a source without data turns idle and
//! stops holding back the watermark of what it feeds.

use std::time::Duration;

/// A union of a source at 1000 rows/s and one that emits a single row (at
/// event time 0) and then nothing for a thousand seconds.
fn windows_of_a_union(idle_timeout: Option<&str>) -> weir::ResultStream {
    let engine = crate::engine(2);
    if let Some(timeout) = idle_timeout {
        engine.set("table.exec.source.idle-timeout", timeout).unwrap();
    }
    for (name, rate) in [("fast", "1000"), ("slow", "0.001")] {
        engine
            .sql(&format!(
                "CREATE TABLE {name} (id BIGINT, ts AS TO_TIMESTAMP_LTZ(id * 10, 3),
                   WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
                 WITH ('connector' = 'datagen', 'rows-per-second' = '{rate}',
                       'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '100000000')"
            ))
            .unwrap();
    }
    engine
        .sql("CREATE VIEW both_ AS SELECT id, ts FROM fast UNION ALL SELECT id, ts FROM slow")
        .unwrap();
    engine
        .sql(
            "SELECT window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE both_, DESCRIPTOR(ts), INTERVAL '1' SECOND))
             GROUP BY window_start, window_end",
        )
        .unwrap()
        .stream()
}

#[test]
fn an_idle_source_stops_holding_back_the_watermark_of_a_union() {
    let mut stream = windows_of_a_union(Some("300 ms"));
    let first = stream
        .next_timeout(Duration::from_secs(30))
        .expect("the query runs")
        .unwrap()
        .expect("a window fired within 30 s");
    assert!(first.num_rows() > 0);
}

#[test]
fn without_an_idle_timeout_a_silent_source_holds_every_window_back() {
    // The silent source's watermark stays at its one row's time: no window
    // of the union can fire, however long the job runs.
    let mut stream = windows_of_a_union(None);
    let next = stream
        .next_timeout(Duration::from_secs(2))
        .expect("the query runs")
        .unwrap();
    assert!(next.is_none(), "a window fired: {next:?}");
}
