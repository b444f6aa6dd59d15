//! One job deployed as two parts, each with a Flight node of its own, as two TaskManagers run it: every channel between the parts is a Flight stream over TCP, and the rows equal those of the job run whole.

use std::sync::Arc;
use std::time::Duration;

use weir::JobStatus;
use weir::job::deploy::build_attempt_part;
use weir::job::placement::share_slots;
use weir_flight::FlightNode;
use weir_flight::transport::FlightTransport;

const SOURCE: &str = "CREATE TABLE seq (id BIGINT, name AS CAST(id % 13 AS STRING),
    ts AS TO_TIMESTAMP_LTZ(id * 10, 3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
  WITH ('connector' = 'datagen', 'rows-per-second' = '200000',
        'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '99999')";

fn sink(engine: &weir::Engine, name: &str, dir: &std::path::Path) {
    engine
        .sql(&format!(
            "CREATE TABLE `{name}` (k STRING, ws TIMESTAMP(3), c BIGINT, s BIGINT)
             WITH ('connector' = 'filesystem', 'path' = '{}', 'format' = 'csv')",
            dir.display()
        ))
        .unwrap();
}

fn insert(table: &str) -> String {
    format!(
        "INSERT INTO `{table}` SELECT name, window_start, COUNT(*), SUM(id)
         FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '10' SECOND))
         GROUP BY name, window_start, window_end"
    )
}

#[test]
fn a_job_split_over_two_flight_nodes_writes_the_rows_of_the_job_run_whole() {
    let dir = tempfile::tempdir().unwrap();
    let engine = crate::engine(2);
    engine.sql(SOURCE).unwrap();
    sink(&engine, "whole", &dir.path().join("whole"));
    sink(&engine, "split", &dir.path().join("split"));
    let whole = engine.sql(&insert("whole")).unwrap().job().unwrap().clone();
    assert_eq!(
        whole.wait_timeout(Duration::from_secs(120)).unwrap(),
        JobStatus::Finished
    );

    let plan = engine.plan(&insert("split")).unwrap();
    let (graph, settings) = engine.prepare(&plan, "split").unwrap();
    let nodes = [
        FlightNode::start("127.0.0.1:0").unwrap(),
        FlightNode::start("127.0.0.1:0").unwrap(),
    ];
    let addresses: Vec<String> = nodes.iter().map(|n| n.address().to_string()).collect();
    let parallelisms: Vec<usize> = graph.vertices.iter().map(|v| v.parallelism).collect();
    let offered: Vec<(String, usize)> = addresses.iter().map(|a| (a.clone(), 1)).collect();
    let placement = share_slots(&parallelisms, &offered).unwrap();
    assert!(!graph.edges.is_empty() && parallelisms.iter().all(|p| *p == 2));

    let mut threads = Vec::new();
    for (node, address) in nodes.iter().zip(&addresses) {
        let mut settings = settings.clone();
        settings.transport = Arc::new(FlightTransport::new(
            node.clone(),
            &settings.job_id.to_string(),
            0,
        ));
        let part =
            build_attempt_part(&graph, &settings, None, &[], 0, &placement.seen_from(address)).unwrap();
        assert_eq!(
            part.tasks.len(),
            graph.vertices.len(),
            "one subtask of each vertex per part"
        );
        threads.extend(
            part.tasks
                .into_iter()
                .map(|task| std::thread::spawn(move || task.run())),
        );
    }
    for thread in threads {
        thread.join().unwrap().unwrap();
    }
    let rows = crate::part_file_lines(&dir.path().join("split"));
    assert!(!rows.is_empty());
    assert_eq!(rows, crate::part_file_lines(&dir.path().join("whole")));
}
