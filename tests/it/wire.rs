//! Jobs whose every channel goes through the wire encoding (Arrow IPC
//! batches, barriers and watermarks as metadata frames), in memory and over
//! Arrow Flight streams on loopback TCP, as channels between processes do:
//! the rows equal those of in-process channels.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use weir::JobStatus;
use weir::runtime::transport::{Local, Transport, WireLoopback};
use weir_flight::FlightNode;
use weir_flight::loopback::FlightLoopback;

/// 200k rows at 200k rows/s: about 1 s.
const SOURCE: &str = "CREATE TABLE seq (id BIGINT, name AS CAST(id % 13 AS STRING),
    ts AS TO_TIMESTAMP_LTZ(id * 10, 3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
  WITH ('connector' = 'datagen', 'rows-per-second' = '200000',
        'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '199999')";

/// Runs `query` into a CSV directory `out` at parallelism 3 over `transport`
/// with `settings`; the finished job and its rows.
fn run(
    transport: Arc<dyn Transport>,
    out: &Path,
    sink_columns: &str,
    query: &str,
    settings: &[(&str, &str)],
) -> (weir::JobHandle, Vec<String>) {
    let engine = crate::engine(3);
    engine.set_transport(transport);
    for (key, value) in settings {
        engine.set(key, value).unwrap();
    }
    engine.sql(SOURCE).unwrap();
    engine
        .sql(&format!(
            "CREATE TABLE `out` ({sink_columns}) WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            out.display()
        ))
        .unwrap();
    let job = engine.sql(query).unwrap().job().unwrap().clone();
    assert_eq!(
        job.wait_timeout(Duration::from_secs(120)).unwrap(),
        JobStatus::Finished
    );
    (job.clone(), crate::part_file_lines(out))
}

#[test]
fn a_windowed_aggregation_over_wire_and_flight_channels_with_unaligned_checkpoints_writes_the_rows_of_local_channels()
 {
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = dir.path().join("checkpoints").display().to_string();
    let columns = "k STRING, ws TIMESTAMP(3), c BIGINT, s BIGINT";
    let query = "INSERT INTO `out` SELECT name, window_start, COUNT(*), SUM(id)
        FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '10' SECOND))
        GROUP BY name, window_start, window_end";
    let settings = [
        ("execution.checkpointing.interval", "50 ms"),
        ("execution.checkpointing.dir", checkpoints.as_str()),
        ("execution.checkpointing.unaligned.enabled", "true"),
    ];
    let (_, local) = run(Arc::new(Local), &dir.path().join("local"), columns, query, &[]);
    let node = FlightNode::start("127.0.0.1:0").unwrap();
    let transports: [(&str, Arc<dyn Transport>); 2] = [
        ("wire", Arc::new(WireLoopback)),
        ("flight", Arc::new(FlightLoopback::new(node))),
    ];
    assert!(!local.is_empty());
    for (name, transport) in transports {
        let (job, rows) = run(transport, &dir.path().join(name), columns, query, &settings);
        assert_eq!(rows, local, "over {name}");
        assert!(
            !job.completed_checkpoints().is_empty(),
            "barriers crossed the {name} channels and checkpoints completed"
        );
    }
}

#[test]
fn an_updating_aggregation_over_wire_and_flight_channels_ends_with_the_table_of_local_channels() {
    // Counts per name, then how many names have each count: the second
    // aggregation reads retractions (row kinds) from the wire.
    let query = "SELECT c, COUNT(*) AS names FROM
        (SELECT name, COUNT(*) AS c FROM seq GROUP BY name) GROUP BY c";
    let final_table = |transport: Arc<dyn Transport>| {
        let engine = crate::engine(3);
        engine.set_transport(transport);
        engine.sql(SOURCE).unwrap();
        let result = engine.sql(query).unwrap();
        assert!(result.is_updating());
        crate::sorted_rows(&[result.materialize().unwrap()])
    };
    let local = final_table(Arc::new(Local));
    let wire = final_table(Arc::new(WireLoopback));
    let node = FlightNode::start("127.0.0.1:0").unwrap();
    let flight = final_table(Arc::new(FlightLoopback::new(node)));
    assert!(!local.is_empty());
    assert_eq!(wire, local);
    assert_eq!(flight, local, "over Flight streams");
}
