//! `weir run --rest-port`: Flink's REST API and Prometheus `/metrics` for a running job, read over HTTP as a dashboard or Prometheus would; a savepoint and a stop-with-savepoint asked for over REST.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The status and body of an HTTP/1.1 request to `address`.
pub(crate) fn http(address: &str, method: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}

pub(crate) fn json(address: &str, method: &str, path: &str) -> Value {
    let (status, body) = http(address, method, path);
    assert!((200..300).contains(&status), "{method} {path}: {status} {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

#[test]
fn a_running_job_is_seen_through_flinks_rest_paths_and_prometheus_and_stopped_with_a_savepoint() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("job.sql");
    std::fs::write(
        &script,
        format!(
            "SET 'parallelism.default' = '2';
             SET 'execution.checkpointing.interval' = '200 ms';
             SET 'execution.checkpointing.dir' = '{0}/checkpoints';
             SET 'execution.checkpointing.savepoint-dir' = '{0}/savepoints';
             CREATE TABLE seq (id BIGINT, name AS CAST(id % 13 AS STRING),
                 ts AS TO_TIMESTAMP_LTZ(id * 10, 3), WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
               WITH ('connector' = 'datagen', 'rows-per-second' = '20000',
                     'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '99999999');
             CREATE TABLE `out` (k STRING, ws TIMESTAMP(3), c BIGINT)
               WITH ('connector' = 'filesystem', 'path' = '{0}/out', 'format' = 'csv');
             INSERT INTO `out` SELECT name, window_start, COUNT(*)
               FROM TABLE(TUMBLE(TABLE seq, DESCRIPTOR(ts), INTERVAL '10' SECOND))
               GROUP BY name, window_start, window_end;",
            dir.path().display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["run", "--rest-port", "0", script.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let address = loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "no REST address printed"
        );
        if let Some(url) = line.trim().strip_prefix("[INFO] REST API on http://") {
            break url.to_string();
        }
    };
    // Wait for the job and two checkpoints.
    let deadline = Instant::now() + Duration::from_secs(60);
    let id = loop {
        let jobs = json(&address, "GET", "/jobs");
        if let Some(id) = jobs["jobs"][0]["id"].as_str() {
            let checkpoints = json(&address, "GET", &format!("/jobs/{id}/checkpoints"));
            if checkpoints["counts"]["completed"].as_u64().unwrap_or(0) >= 2 {
                break id.to_string();
            }
        }
        assert!(Instant::now() < deadline, "no job with two checkpoints");
        std::thread::sleep(Duration::from_millis(100));
    };
    let overview = json(&address, "GET", "/overview");
    assert_eq!(overview["jobs-running"], 1);
    let job = json(&address, "GET", &format!("/jobs/{id}"));
    assert_eq!(
        (job["jid"].as_str(), job["state"].as_str()),
        (Some(id.as_str()), Some("RUNNING"))
    );
    let vertices = job["vertices"].as_array().unwrap();
    assert_eq!(vertices.len(), 2);
    assert!(vertices.iter().all(|v| v["parallelism"] == 2));
    assert!(vertices[0]["metrics"]["read-records"].as_u64().unwrap() > 0);
    let checkpoints = json(&address, "GET", &format!("/jobs/{id}/checkpoints"));
    let latest = &checkpoints["latest"]["completed"];
    assert!(
        latest["id"].as_u64().unwrap() >= 2 && latest["external_path"].as_str().unwrap().contains("chk-")
    );
    assert!(latest["alignment_duration"].is_u64(), "{latest}");
    assert_eq!(checkpoints["counts"]["restored"], 0, "nothing restored yet");
    assert!(checkpoints["latest"]["restored"].is_null());
    let backpressure = json(&address, "GET", &format!("/jobs/{id}/vertices/1/backpressure"));
    assert_eq!(backpressure["subtasks"].as_array().unwrap().len(), 2);
    assert_eq!(http(&address, "GET", "/jobs/nope").0, 404);
    assert_eq!(
        http(&address, "GET", &format!("/jobs/{id}/vertices/9/backpressure")).0,
        404
    );

    let (status, metrics) = http(&address, "GET", "/metrics");
    assert_eq!(status, 200);
    let records_in = (metrics.lines())
        .filter(|l| l.starts_with("flink_taskmanager_job_task_operator_numRecordsIn{"))
        .filter(|l| l.contains(&format!("job_id=\"{id}\"")) && l.contains("subtask_index=\""))
        .count();
    assert_eq!(records_in, 4, "two vertices of two subtasks:\n{metrics}");
    assert!(metrics.contains("# TYPE flink_jobmanager_job_lastCheckpointDuration gauge"));
    assert!(metrics.contains("flink_jobmanager_job_numRestarts{"));

    // A savepoint, then stop-with-savepoint.
    let trigger = json(&address, "POST", &format!("/jobs/{id}/savepoints"));
    let trigger = trigger["request-id"].as_str().unwrap().to_string();
    let location = loop {
        let status = json(&address, "GET", &format!("/jobs/{id}/savepoints/{trigger}"));
        if status["status"]["id"] == "COMPLETED" {
            break status["operation"]["location"]
                .as_str()
                .expect("a location")
                .to_string();
        }
        assert!(Instant::now() < deadline, "the savepoint did not complete");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        std::path::Path::new(&location).join("_metadata").exists(),
        "{location}"
    );
    json(&address, "POST", &format!("/jobs/{id}/stop"));
    let status = child.wait().unwrap();
    assert!(status.success(), "stop-with-savepoint ends the run with status 0");
    let savepoints = std::fs::read_dir(dir.path().join("savepoints")).unwrap().count();
    assert_eq!(savepoints, 2, "the savepoint and the stop's");
}
