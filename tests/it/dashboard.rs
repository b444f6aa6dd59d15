//! The web dashboard in a real browser: headless Chromium (Debian's package, installed by `scripts/chromium.sh` where it can be) loads the page a JobManager serves (`weir run --rest-port` serves the same page), its job graph and figures are checked against the REST API, its stop-with-savepoint button stops the job, and a screenshot is left for the test output.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
use headless_chrome::{Browser, LaunchOptions, Tab};
use serde_json::Value;

use crate::cluster::{Process, cluster_with, script_with};
use crate::rest::json;

/// A Chromium binary, installed when it can be; `None` says why not.
fn chromium() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var("WEIR_CHROMIUM") {
        return Ok(PathBuf::from(path));
    }
    let output = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/chromium.sh"))
        .output()
        .map_err(|e| format!("scripts/chromium.sh did not run: {e}"))?;
    match output.status.success() {
        true => Ok(PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())),
        false => Err(String::from_utf8_lossy(&output.stderr).into_owned()),
    }
}

/// `f` of each element `selector` matches (a JavaScript function of the
/// element), in document order, as the page computes it.
fn each(tab: &Tab, selector: &str, f: &str) -> Vec<String> {
    let script = format!(
        "JSON.stringify([...document.querySelectorAll({})].map({f}))",
        serde_json::to_string(selector).unwrap()
    );
    let result = tab.evaluate(&script, false).unwrap();
    let text = result
        .value
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    serde_json::from_str(&text).unwrap_or_default()
}

/// The text of the elements `selector` matches, in document order.
fn texts(tab: &Tab, selector: &str) -> Vec<String> {
    each(tab, selector, "e => e.textContent")
}

/// Waits until `ready` holds of the page, up to 30 s.
fn wait_until(tab: &Tab, what: &str, ready: impl Fn(&Tab) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready(tab) {
        assert!(Instant::now() < deadline, "the page never showed {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_dashboard_shows_a_running_jobs_graph_and_figures_as_the_rest_api_stops_it_with_a_savepoint_and_cancels_another()
 {
    let chromium = match chromium() {
        Ok(path) => path,
        Err(why) => {
            eprintln!(
                "\n*** SKIPPED: the dashboard test needs Chromium, and none could be installed: {why}\n"
            );
            return;
        }
    };
    // A JobManager and two TaskManagers: the page stays up after the job
    // ends (a `weir run --rest-port` process ends with its job).
    let dir = tempfile::tempdir().unwrap();
    let cluster = cluster_with(2, |_| Vec::new());
    let settings = format!(
        "SET 'execution.checkpointing.interval' = '200 ms';
         SET 'execution.checkpointing.dir' = '{0}/checkpoints';
         SET 'execution.checkpointing.savepoint-dir' = '{0}/savepoints';",
        dir.path().display()
    );
    // 10M rows at 20k rows/s: far longer than the test.
    let job = script_with(dir.path(), "out", 10_000_000, 20_000, &settings);
    let client = Process::start(&["run", "--jobmanager", &cluster.address, job.to_str().unwrap()]);
    cluster.jobmanager.wait_for("deployed on 2 TaskManager(s)");
    let address = cluster.rest.clone();
    let id = json(&address, "GET", "/jobs")["jobs"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();

    let options = LaunchOptions::default_builder()
        .path(Some(chromium))
        .sandbox(false)
        .window_size(Some((1280, 1400)))
        .build()
        .unwrap();
    let browser = Browser::new(options).unwrap();
    let tab = browser.new_tab().unwrap();
    tab.navigate_to(&format!("http://{address}/#/jobs/{id}")).unwrap();
    tab.wait_until_navigated().unwrap();

    // The job graph: a box per vertex with its name and parallelism, an
    // arrow per exchange with its strategy, as the REST API's plan says.
    let job: Value = json(&address, "GET", &format!("/jobs/{id}"));
    let nodes = job["plan"]["nodes"].as_array().unwrap().clone();
    assert_eq!(nodes.len(), 2, "{job}");
    wait_until(&tab, "the job graph", |t| {
        texts(t, "#graph-svg .vertex").len() == nodes.len()
    });
    for node in &nodes {
        let selector = format!(
            "#graph-svg .vertex[data-vertex-id=\"{}\"]",
            node["id"].as_str().unwrap()
        );
        let shown = texts(&tab, &selector).join(" ");
        assert!(
            shown.contains(&format!("parallelism {}", node["parallelism"])),
            "{shown}"
        );
        let name = node["description"].as_str().unwrap();
        let prefix: String = name.chars().take(20).collect();
        assert!(shown.contains(&prefix), "{shown} shows {name}");
    }
    let edges: usize = nodes.iter().map(|n| n["inputs"].as_array().unwrap().len()).sum();
    assert_eq!(texts(&tab, "#graph-svg .edge").len(), edges);
    assert_eq!(texts(&tab, "#graph-svg .edge").concat(), "HASH");
    let classes = each(&tab, "#graph-svg .vertex", "e => e.getAttribute('class')");
    assert!(
        classes.iter().all(|c| c.contains("bp-")),
        "each vertex coloured by its backpressure: {classes:?}"
    );

    // The figures: records grow between two readings of the page, and stay
    // within what the REST API says before and after.
    let records = |t: &Tab| -> u64 {
        texts(t, "#vertices .vertex-row .records-out")
            .iter()
            .map(|v| v.parse::<u64>().unwrap_or(0))
            .sum()
    };
    let rest_records = || -> u64 {
        let job = json(&address, "GET", &format!("/jobs/{id}"));
        (job["vertices"].as_array().unwrap().iter())
            .map(|v| v["metrics"]["write-records"].as_u64().unwrap())
            .sum()
    };
    let before = rest_records();
    wait_until(&tab, "records beyond the REST API's earlier figure", |t| {
        records(t) > before
    });
    let shown = records(&tab);
    assert!(
        shown <= rest_records(),
        "{shown} records shown, more than the REST API counts"
    );
    wait_until(&tab, "a watermark", |t| {
        texts(t, "#vertices .watermark")
            .iter()
            .any(|w| w.starts_with("19"))
    });

    // The checkpoint history: the ids the REST API lists.
    wait_until(&tab, "three checkpoints", |t| {
        texts(t, "#checkpoints .checkpoint-row").len() >= 3
    });
    let listed = json(&address, "GET", &format!("/jobs/{id}/checkpoints"));
    let rest_ids: Vec<String> = (listed["history"].as_array().unwrap().iter())
        .map(|c| c["id"].to_string())
        .collect();
    let shown_ids = texts(&tab, "#checkpoints .checkpoint-row .id");
    assert!(
        shown_ids.iter().all(|id| rest_ids.contains(id)),
        "{shown_ids:?} in {rest_ids:?}"
    );

    let screenshot = tab
        .capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true)
        .unwrap();
    let path = std::env::temp_dir().join(format!("weir-dashboard-{}.png", std::process::id()));
    std::fs::write(&path, &screenshot).unwrap();
    eprintln!(
        "dashboard screenshot ({} bytes): {}",
        screenshot.len(),
        path.display()
    );
    assert!(screenshot.len() > 10_000, "a screenshot of a drawn page");

    // Stop with a savepoint: the page shows where, the job ends, and the
    // savepoint is there.
    tab.find_element("#stop-savepoint").unwrap().click().unwrap();
    wait_until(&tab, "the savepoint's location", |t| {
        texts(t, "#message").concat().contains("savepoint at")
    });
    let message = texts(&tab, "#message").concat();
    let location = message.rsplit("savepoint at ").next().unwrap().trim().to_string();
    assert!(
        std::path::Path::new(&location).join("_metadata").exists(),
        "{message}"
    );
    assert!(
        location.starts_with(&dir.path().join("savepoints").display().to_string()),
        "{location}"
    );
    wait_until(&tab, "the job finished", |t| {
        texts(t, "#job-state").concat() == "FINISHED"
    });
    let ended = client.wait_for("ended:");
    assert!(ended.contains("Finished"), "{ended}");

    // Cancel: a second job, cancelled from its page.
    let second = script_with(dir.path(), "out2", 10_000_000, 20_000, &settings);
    let client = Process::start(&["run", "--jobmanager", &cluster.address, second.to_str().unwrap()]);
    let second_id = loop {
        let jobs = json(&address, "GET", "/jobs/overview");
        let running = (jobs["jobs"].as_array().unwrap().iter())
            .find(|j| j["jid"] != id.as_str() && j["state"] == "RUNNING")
            .map(|j| j["jid"].as_str().unwrap().to_string());
        if let Some(running) = running {
            break running;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    tab.navigate_to(&format!("http://{address}/#/jobs/{second_id}"))
        .unwrap();
    wait_until(&tab, "the second job running", |t| {
        texts(t, "#job-state").concat() == "RUNNING"
    });
    tab.find_element("#cancel").unwrap().click().unwrap();
    wait_until(&tab, "the second job cancelled", |t| {
        texts(t, "#job-state").concat() == "CANCELED"
    });
    let state = json(&address, "GET", &format!("/jobs/{second_id}"))["state"].clone();
    assert_eq!(state, "CANCELED");
    let ended = client.wait_for("ended:");
    assert!(ended.to_lowercase().contains("cancel"), "{ended}");
}
