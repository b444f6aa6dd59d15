//! Benchmarks run by `weir bench`: the Nexmark queries, checkpointing, backpressure, restore, Kafka and latency.

pub mod backpressure;
pub mod checkpoint;
pub mod kafka;
pub mod latency;
pub mod nexmark;
pub mod restore;
pub mod slow;

use std::path::{Path, PathBuf};

pub use nexmark::{
    NexmarkOptions, Progress, QUERIES, QueryResult, query, query_script, run, run_script, write_side_input,
};
/// Nexmark's q14 UDF, a port of its Java class (see [`weir_functions::ported_udfs`]).
pub use weir_functions::ported_udfs::CountChar;

use crate::{Error, Result};
use weir_connectors::filesystem::random_uuid;

/// The median of `values` (the upper one of an even count; 0 when empty).
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Seconds of CPU this process has used (user + system), from `/proc/self/stat`.
pub(crate) fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which is in parentheses and may hold spaces).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Resets the peak resident memory of this process (Linux `clear_refs`).
pub(crate) fn reset_peak_rss() {
    // The allocator keeps freed memory for a while (see `PURGE_DELAY_MS` in
    // main.rs): give it back first, or the previous query's memory would
    // count as this one's.
    weir_common::alloc::give_back_freed_memory();
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident memory of this process since the last reset, in bytes.
pub(crate) fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// The directory a query writes its files under: the user's, kept, or a
/// temporary one, removed when the query is done.
pub(crate) struct ScratchDir {
    pub(crate) path: PathBuf,
    temporary: bool,
}

impl ScratchDir {
    pub(crate) fn new(user: Option<&Path>) -> Result<Self> {
        match user {
            Some(path) => Ok(ScratchDir {
                path: path.to_path_buf(),
                temporary: false,
            }),
            None => {
                let path = std::env::temp_dir().join(format!("weir-nexmark-{}", random_uuid()));
                std::fs::create_dir_all(&path).map_err(|e| Error::io(&path, e))?;
                Ok(ScratchDir {
                    path,
                    temporary: true,
                })
            }
        }
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
