//! The spilling backend's local directory: what a killed process left there is removed when a job starts.
//!
//! Runs (`weir-spill-<pid>-<n>`), stores (`weir-store-<pid>-<n>`, with
//! `weir-store-<pid>-<n>.runs`) and key-group files (`weir-groups-<pid>-<n>`,
//! with `.runs`) are named by the process that made them,
//! and go when it drops them. A process killed with SIGKILL drops nothing:
//! the next job on the same directory removes the directories of processes
//! that are no longer running (a live process's are left alone, whoever it is).

use std::path::{Path, PathBuf};

/// The process that made a spill directory named `name`, if it is one.
fn owner(name: &str) -> Option<u32> {
    let rest = name
        .strip_prefix("weir-spill-")
        .or_else(|| name.strip_prefix("weir-store-"))
        .or_else(|| name.strip_prefix("weir-groups-"))?;
    let (pid, n) = rest.split_once('-')?;
    let n = n.strip_suffix(".runs").unwrap_or(n);
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// Of the entries `names` of a local directory, those a process that is
/// not `alive` made.
pub fn stale(names: &[String], alive: impl Fn(u32) -> bool) -> Vec<&str> {
    names
        .iter()
        .filter(|name| owner(name).is_some_and(|pid| !alive(pid)))
        .map(String::as_str)
        .collect()
}

/// Whether process `pid` runs (Linux: it has a `/proc` entry).
fn running(pid: u32) -> bool {
    pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
}

/// Removes what processes no longer running left under `dir`; returns what
/// was removed. Errors are ignored: another job may be removing the same.
pub fn remove_stale(dir: &Path) -> Vec<PathBuf> {
    if !Path::new("/proc/self").exists() {
        // Without /proc no process can be told to be gone.
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    stale(&names, running)
        .into_iter()
        .map(|name| dir.join(name))
        .filter(|path| std::fs::remove_dir_all(path).is_ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_of_processes_no_longer_running_are_stale_and_others_are_left_alone() {
        let names: Vec<String> = [
            "weir-spill-10-0",
            "weir-store-10-3",
            "weir-store-10-3.runs",
            "weir-groups-10-4",
            "weir-groups-10-4.runs",
            "weir-spill-20-1",
            "weir-spill-x-1",
            "weir-spill-30",
            "weir-store-30-1.tmp",
            "mine",
        ]
        .map(String::from)
        .to_vec();
        let stale = stale(&names, |pid| pid == 20);
        assert_eq!(
            stale,
            [
                "weir-spill-10-0",
                "weir-store-10-3",
                "weir-store-10-3.runs",
                "weir-groups-10-4",
                "weir-groups-10-4.runs"
            ]
        );
    }

    #[test]
    fn a_killed_process_left_directories_are_removed_and_a_live_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        // No process has pid 4294967295 (above Linux's limit).
        let dead = dir.path().join("weir-spill-4294967295-0");
        let live = dir.path().join(format!("weir-store-{}-0", std::process::id()));
        for d in [&dead, &live] {
            std::fs::create_dir_all(d.join("sub")).unwrap();
            std::fs::write(d.join("sub/f"), b"x").unwrap();
        }
        assert_eq!(remove_stale(dir.path()), vec![dead.clone()]);
        assert!(!dead.exists());
        assert!(live.exists());
    }
}
