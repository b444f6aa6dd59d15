//! Checkpoints and savepoints on S3 (`s3://`), against a real S3-protocol server (moto's, started once per test run by `scripts/s3.sh`): a cluster job whose TaskManager is killed restores from the bucket on another process and leaves only its retained checkpoint there; a savepoint on S3 resumes in another process; both write the rows of a local run.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::OnceLock;

use crate::cluster::{Process, cluster_with, local_rows, poll, run_ok, script_with};

const BUCKET: &str = "weir";

/// The S3 server's endpoint; it stops when this process ends. If it cannot
/// start, the test fails and says why.
fn endpoint() -> &'static str {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("weir-s3-{}", std::process::id()));
        let output = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/s3.sh"))
            .arg("start")
            .arg(&dir)
            .arg(BUCKET)
            .env("WEIR_S3_WATCH", std::process::id().to_string())
            .output()
            .expect("scripts/s3.sh runs");
        assert!(
            output.status.success(),
            "THE S3 SERVER DID NOT START, so the S3 tests cannot run:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    })
}

/// The environment of a weir process that reaches the S3 server, with a
/// staging directory of its own under `dir`.
fn s3_env(dir: &Path, role: &str) -> Vec<(String, String)> {
    [
        ("AWS_ENDPOINT", endpoint()),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
        (
            "WEIR_WORKING_DIR",
            &dir.join(format!("work-{role}")).display().to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The keys of the bucket's objects under `prefix`, read over S3's REST API.
fn keys(prefix: &str) -> Vec<String> {
    let address = endpoint().trim_start_matches("http://");
    let (status, body) = crate::rest::http(address, "GET", &format!("/{BUCKET}?list-type=2&prefix={prefix}"));
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains("<IsTruncated>true"), "more than one page of keys");
    let key = regex::Regex::new("<Key>([^<]*)</Key>").unwrap();
    key.captures_iter(&body).map(|c| c[1].to_string()).collect()
}

#[test]
fn a_job_checkpointing_to_s3_restores_from_the_bucket_after_a_task_manager_is_killed_and_keeps_only_its_retained_checkpoint()
 {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = cluster_with(3, |role| s3_env(dir.path(), role));
    let checkpoints = format!(
        "SET 'execution.checkpointing.interval' = '300 ms';
         SET 'execution.checkpointing.dir' = 's3://{BUCKET}/checkpoints';
         SET 'execution.checkpointing.incremental' = 'true';
         SET 'execution.checkpointing.incremental.max-deltas' = '2';"
    );
    // 800k rows at 100k rows/s: about 8 s.
    let job = script_with(dir.path(), "remote", 800_000, 100_000, &checkpoints);
    let client = Process::start_with(
        &["run", "--jobmanager", &cluster.address, job.to_str().unwrap()],
        &s3_env(dir.path(), "client"),
    );
    let jobmanager = &cluster.jobmanager;
    jobmanager.wait_for("attempt 0 deployed on 2 TaskManager(s)");
    let complete = jobmanager.wait_for("Checkpoint 3 of job");
    assert!(
        complete.contains(&format!("s3://{BUCKET}/checkpoints/")),
        "{complete}"
    );
    // The first TaskManager registered runs a part; the third is spare.
    let mut victim = cluster.task_managers.remove(0);
    victim.child.kill().unwrap(); // SIGKILL
    let restored = jobmanager.wait_for("restores");
    assert!(
        restored.contains(&format!("s3://{BUCKET}/checkpoints/")) && restored.contains("chk-"),
        "{restored}"
    );
    jobmanager.wait_for("deployed on 2 TaskManager(s)");
    let ended = client.wait_for("ended:");
    assert!(ended.contains("Finished"), "{ended}");

    let rows = crate::part_file_lines(&dir.path().join("remote"));
    assert!(!rows.is_empty());
    assert_eq!(rows, local_rows(dir.path(), 800_000), "each row once");

    // Left in the bucket: the retained checkpoint, complete, and the shared
    // files it needs; no other checkpoint and no unreferenced shared file of
    // an older one.
    // (The JobManager cleans up as the job ends: allow it a moment.)
    let chk = regex::Regex::new("^checkpoints/[^/]+/([0-9a-f]+)/chk-([0-9]+)/").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (objects, retained) = loop {
        let objects = keys("checkpoints/");
        let retained: BTreeSet<(String, u64)> = objects
            .iter()
            .filter_map(|k| chk.captures(k).map(|c| (c[1].to_string(), c[2].parse().unwrap())))
            .collect();
        if retained.len() == 1 || std::time::Instant::now() > deadline {
            break (objects, retained);
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(retained.len(), 1, "{objects:#?}");
    let (run, id) = retained.first().unwrap();
    let metadata_key = objects
        .iter()
        .find(|k| k.ends_with(&format!("chk-{id}/_metadata")));
    let metadata_key = metadata_key.unwrap_or_else(|| panic!("chk-{id} has no _metadata: {objects:#?}"));
    // Its content, from the JobManager's staged copy (the server wants
    // signed requests for objects; the listing above shows it is there).
    let staged = dir
        .path()
        .join("work-jobmanager/s3")
        .join(BUCKET)
        .join(metadata_key);
    let metadata: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&staged).unwrap()).unwrap();
    let run_prefix = metadata_key
        .split(&format!("chk-{id}/"))
        .next()
        .unwrap()
        .to_string();
    assert!(run_prefix.contains(run.as_str()));
    let mut named = 0;
    for task in metadata["tasks"].as_array().unwrap() {
        for operator in task["operators"].as_array().unwrap() {
            let files = operator["file"].as_object().into_iter().chain(
                operator["deltas"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|d| d.as_object()),
            );
            for file in files {
                let path = file["path"].as_str().unwrap();
                let key = match path.strip_prefix("../") {
                    Some(shared) => format!("{run_prefix}{shared}"),
                    None => format!("{run_prefix}chk-{id}/{path}"),
                };
                assert!(objects.contains(&key), "{key} is not in the bucket: {objects:#?}");
                named += 1;
            }
        }
    }
    assert!(named > 0, "{metadata}");
    let shared_of_older = objects.iter().filter(|k| {
        k.contains("/shared/")
            && k.rsplit('/')
                .next()
                .and_then(|n| n.strip_suffix(".parquet")?.split('-').nth(1)?.parse::<u64>().ok())
                < Some(*id)
    });
    for key in shared_of_older {
        let referenced = metadata.to_string().contains(key.rsplit('/').next().unwrap());
        assert!(
            referenced,
            "{key} is left in the bucket but no retained checkpoint needs it"
        );
    }
}

#[test]
fn a_job_stopped_with_a_savepoint_on_s3_resumes_from_it_in_another_process_and_writes_each_row_once() {
    let dir = tempfile::tempdir().unwrap();
    let settings = format!(
        "SET 'execution.checkpointing.interval' = '200 ms';
         SET 'execution.checkpointing.dir' = 's3://{BUCKET}/single';
         SET 'execution.checkpointing.savepoint-dir' = 's3://{BUCKET}/savepoints';"
    );
    // 400k rows at 100k rows/s: about 4 s.
    let first = script_with(dir.path(), "first", 400_000, 100_000, &settings);
    let job = Process::start_with(
        &["run", "--rest-port", "0", first.to_str().unwrap()],
        &s3_env(dir.path(), "first"),
    );
    let rest = job.wait_for("REST API on http://");
    let rest = rest.rsplit("http://").next().unwrap().to_string();
    let jobs = poll(&rest, "/jobs", |j| j["jobs"][0]["status"] == "RUNNING");
    let id = jobs["jobs"][0]["id"].as_str().unwrap().to_string();
    poll(&rest, &format!("/jobs/{id}/checkpoints"), |c| {
        c["counts"]["completed"].as_u64().unwrap_or(0) >= 2
    });
    crate::rest::json(&rest, "POST", &format!("/jobs/{id}/stop"));
    // The run ends with the savepoint (and its REST API with it): the
    // savepoint is the one in the bucket.
    job.wait_for("Done in");
    let metadata: Vec<String> = keys("savepoints/")
        .into_iter()
        .filter(|k| k.ends_with("/_metadata"))
        .collect();
    assert_eq!(metadata.len(), 1, "{metadata:?}");
    let key = metadata[0].trim_end_matches("/_metadata");
    assert!(key.starts_with("savepoints/savepoint-"), "{key}");
    let location = format!("s3://{BUCKET}/{key}");
    let stopped = crate::part_file_lines(&dir.path().join("first"));
    assert!(
        !stopped.is_empty(),
        "the windows before the savepoint were written"
    );

    // Another process, with a staging directory of its own, resumes it.
    let resume = format!("{settings}\nSET 'execution.savepoint.path' = '{location}';");
    let second = script_with(dir.path(), "second", 400_000, 1_000_000, &resume);
    run_ok(&["run", second.to_str().unwrap()], &s3_env(dir.path(), "second"));
    let mut rows = stopped;
    rows.extend(crate::part_file_lines(&dir.path().join("second")));
    rows.sort();
    assert_eq!(rows, local_rows(dir.path(), 400_000), "each row once");
}
