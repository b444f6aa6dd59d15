//! Ids: a job's (one per run of a job, unique across processes, as Flink's
//! `JobID`), a checkpoint's, and what kind of snapshot a barrier is for.
//!
//! A run's checkpoints live under `<checkpoint dir>/<job name>/<job id>/`, so
//! a rerun, or a second job with the same name, never shares, overwrites or
//! cleans another run's checkpoints.

use serde::{Deserialize, Serialize};

/// Identifies one checkpoint of a job; increases with every trigger.
pub type CheckpointId = u64;

/// Whether a barrier belongs to a periodic checkpoint or a user-triggered savepoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BarrierKind {
    /// A periodic checkpoint.
    Checkpoint,
    /// A savepoint the user asked for.
    Savepoint,
}

/// 32 lowercase hex digits: 12 of milliseconds since the epoch, so that ids
/// sort by start time, then 20 random ones.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct JobId(String);

impl JobId {
    /// A new id for a run starting now.
    pub fn new() -> Self {
        let millis = crate::time::wall_clock_millis().max(0) as u64 & 0xffff_ffff_ffff;
        let random: u128 = rand::random::<u128>() & ((1 << 80) - 1);
        JobId(format!("{millis:012x}{random:020x}"))
    }

    /// The id written as [`JobId::new`] writes it; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        (text.len() == 32
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| JobId(text.to_string()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// When the run started (ms since the epoch), from the id.
    pub fn started_millis(&self) -> i64 {
        i64::from_str_radix(&self.0[..12], 16).unwrap_or_default()
    }

    /// Eight random digits of the id: short, and still unique in practice
    /// (savepoint directory names carry it).
    pub fn short(&self) -> &str {
        &self.0[12..20]
    }
}

impl Default for JobId {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_are_unique_hex_and_sort_by_start_time() {
        let first = JobId::new();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = JobId::new();
        assert_ne!(first, second);
        assert!(first < second, "{first} then {second}");
        assert_eq!(JobId::parse(first.as_str()), Some(first.clone()));
        assert_eq!(first.short().len(), 8);
        let now = crate::time::wall_clock_millis();
        assert!((now - first.started_millis()).abs() < 60_000);
    }

    #[test]
    fn only_job_id_shaped_names_parse() {
        assert_eq!(JobId::parse("chk-3"), None);
        assert_eq!(JobId::parse(&"G".repeat(32)), None);
        assert_eq!(JobId::parse(&"a".repeat(31)), None);
        assert!(JobId::parse(&"0a".repeat(16)).is_some());
    }
}
