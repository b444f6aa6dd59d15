//! Partition commit: when a partition of a filesystem sink is complete, a
//! success file (`_SUCCESS`) is written into it, as Flink's
//! `sink.partition-commit.policy.kind = 'success-file'` does.
//!
//! A partition is committed once no subtask has an open part file in it and its
//! trigger holds: `partition-time`, the watermark of every sink subtask is past
//! the partition's time plus `sink.partition-commit.delay`; `process-time`, the
//! wall clock is past the partition's creation plus the delay. At the end of
//! the input every partition written is committed. Data arriving later reopens
//! a partition, which is then committed again (Flink does the same).
//!
//! Part files close by the rolling policy, when the watermark passes their
//! partition's time (`partition-time`), at the end of the input, and (two
//! phase) at each checkpoint, becoming visible when it completes. The
//! partitions not yet committed are part of every checkpoint
//! ([`PartitionCommitter::snapshot`]), so a restore commits them when their
//! trigger holds and never misses a `_SUCCESS`; one written after the
//! restored checkpoint may be written again (the same empty file, as in
//! Flink).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::filesystem::partition::{PartitionSpec, PartitionTimeExtractor, unescape_path_name};
use crate::{Error, Result};
use weir_common::config::parse_duration;
use weir_plan::table::TableDef;

/// When a partition may be committed (`sink.partition-commit.trigger`).
#[derive(Debug, Clone)]
pub enum CommitTrigger {
    /// By the partition's time (from its values) against the watermark.
    PartitionTime(PartitionTimeExtractor),
    /// By the wall clock against the partition's creation.
    ProcessTime,
}

/// A table's commit configuration; only tables with a
/// `sink.partition-commit.policy.kind` have one.
#[derive(Debug, Clone)]
pub struct CommitPolicy {
    /// The trigger.
    pub trigger: CommitTrigger,
    /// `sink.partition-commit.delay` in milliseconds.
    pub delay: i64,
    /// `sink.partition-commit.success-file.name` (default `_SUCCESS`).
    pub success_file: String,
}

impl CommitPolicy {
    /// Reads the commit options of `table`; `None` when it names no policy.
    pub fn from_table(table: &TableDef) -> Result<Option<Self>> {
        let trigger = match table.option("sink.partition-commit.trigger") {
            None | Some("process-time") => None,
            Some("partition-time") => Some(CommitTrigger::PartitionTime(PartitionTimeExtractor::from_table(
                table,
            )?)),
            Some(other) => {
                return Err(Error::sql(format!(
                    "table '{}': 'sink.partition-commit.trigger' is 'process-time' or 'partition-time', not '{other}'",
                    table.name
                )));
            }
        };
        let delay = match table.option("sink.partition-commit.delay") {
            None => 0,
            Some(v) => parse_duration(v)
                .ok_or_else(|| {
                    Error::sql(format!(
                        "table '{}': invalid 'sink.partition-commit.delay' '{v}' (examples: 0 s, 1 min, 1 h)",
                        table.name
                    ))
                })?
                .as_millis() as i64,
        };
        let Some(kinds) = table.option("sink.partition-commit.policy.kind") else {
            return Ok(None);
        };
        if table.partition_keys.is_empty() {
            return Err(Error::sql(format!(
                "table '{}': 'sink.partition-commit.policy.kind' needs a partitioned table (PARTITIONED BY)",
                table.name
            )));
        }
        let mut success_file = false;
        for kind in kinds.split(',').map(str::trim) {
            match kind {
                "success-file" => success_file = true,
                "metastore" | "custom" => {
                    return Err(Error::sql(format!(
                        "table '{}': partition commit policy '{kind}' is not supported (weir has no \
                         metastore and no custom policies); use 'success-file'",
                        table.name
                    )));
                }
                other => {
                    return Err(Error::sql(format!(
                        "table '{}': unknown partition commit policy '{other}'; use 'success-file'",
                        table.name
                    )));
                }
            }
        }
        debug_assert!(success_file);
        Ok(Some(CommitPolicy {
            trigger: trigger.unwrap_or(CommitTrigger::ProcessTime),
            delay,
            success_file: table
                .option("sink.partition-commit.success-file.name")
                .unwrap_or("_SUCCESS")
                .to_string(),
        }))
    }
}

/// A partition not yet committed, as a checkpoint records it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SavedPartition {
    /// Its directory under the table's (`dt=x/hm=y`).
    pub name: String,
    /// Its time in epoch ms (`partition-time` trigger only).
    pub time: Option<i64>,
    /// When it was first written since its last commit (wall clock, ms).
    pub created: i64,
}

/// A partition written since its last commit.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingPartition {
    /// The partition's time in epoch ms (`partition-time` trigger only).
    pub time: Option<i64>,
    /// When it was first written since its last commit (wall clock, ms).
    pub created: i64,
    /// Subtasks with an open part file in it.
    pub writers: BTreeSet<usize>,
}

/// What the committer knows of the sink's subtasks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// The smallest watermark over the sink's subtasks.
    pub watermark: i64,
    /// The wall clock, ms.
    pub now: i64,
    /// Every subtask has finished its input.
    pub all_finished: bool,
}

/// Whether `partition` can be committed now: no subtask has an open file in
/// it, and its trigger holds (or the input has ended).
pub fn is_committable(
    partition: &PendingPartition,
    trigger: &CommitTrigger,
    delay: i64,
    progress: Progress,
) -> bool {
    if !partition.writers.is_empty() {
        return false;
    }
    if progress.all_finished {
        return true;
    }
    match trigger {
        CommitTrigger::PartitionTime(_) => partition
            .time
            .is_some_and(|t| progress.watermark > t.saturating_add(delay)),
        CommitTrigger::ProcessTime => delay == 0 || progress.now > partition.created.saturating_add(delay),
    }
}

/// Whether a subtask at `watermark` should close its open file in a partition
/// of time `time`: its own input for that partition is complete.
pub fn should_close(time: Option<i64>, delay: i64, watermark: i64) -> bool {
    time.is_some_and(|t| watermark > t.saturating_add(delay))
}

#[derive(Debug, Default)]
struct State {
    watermarks: Vec<i64>,
    finished: Vec<bool>,
    pending: BTreeMap<String, PendingPartition>,
}

/// The commit state of one sink, shared by its subtasks' writers.
#[derive(Debug)]
pub struct PartitionCommitter {
    directory: PathBuf,
    spec: PartitionSpec,
    policy: CommitPolicy,
    state: Mutex<State>,
}

impl PartitionCommitter {
    /// A committer for the partitions under `directory`.
    pub fn new(directory: PathBuf, spec: PartitionSpec, policy: CommitPolicy) -> Self {
        PartitionCommitter {
            directory,
            spec,
            policy,
            state: Mutex::new(State::default()),
        }
    }

    /// The policy's delay in ms.
    pub fn delay(&self) -> i64 {
        self.policy.delay
    }

    /// True when partitions are committed by the wall clock.
    pub fn uses_processing_time(&self) -> bool {
        matches!(self.policy.trigger, CommitTrigger::ProcessTime)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A writer that panicked mid-update leaves a usable state: every update is one assignment.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subtask `subtask` of `parallelism` starts (again): it has no open files.
    pub fn register(&self, subtask: usize, parallelism: usize) {
        let mut state = self.lock();
        state.watermarks.resize(parallelism, i64::MIN);
        state.finished.resize(parallelism, false);
        state.watermarks[subtask] = i64::MIN;
        state.finished[subtask] = false;
        for partition in state.pending.values_mut() {
            partition.writers.remove(&subtask);
        }
    }

    /// The partitions not yet committed, for a checkpoint.
    pub fn snapshot(&self) -> Vec<SavedPartition> {
        self.lock()
            .pending
            .iter()
            .map(|(name, p)| SavedPartition {
                name: name.clone(),
                time: p.time,
                created: p.created,
            })
            .collect()
    }

    /// Adds the partitions a checkpoint had not committed yet (the union of
    /// what the restored subtasks saved); they commit when their trigger
    /// holds and no restored file in them is still hidden.
    pub fn restore(&self, saved: Vec<SavedPartition>) {
        let mut state = self.lock();
        for partition in saved {
            let pending = state.pending.entry(partition.name).or_insert(PendingPartition {
                time: partition.time,
                created: partition.created,
                writers: BTreeSet::new(),
            });
            pending.created = pending.created.min(partition.created);
        }
    }

    /// `subtask` opened a part file in `partition`; returns the partition's time
    /// (`partition-time` trigger), for the writer to know when to close it.
    pub fn opened(&self, subtask: usize, partition: &str, now: i64) -> Result<Option<i64>> {
        let mut state = self.lock();
        if let Some(pending) = state.pending.get_mut(partition) {
            pending.writers.insert(subtask);
            return Ok(pending.time);
        }
        let time = match &self.policy.trigger {
            CommitTrigger::PartitionTime(extractor) => {
                let values = partition_values(partition);
                Some(
                    extractor
                        .extract(&self.spec.keys, &values)
                        .map_err(|e| Error::Execution(format!("partition '{partition}': {e}")))?,
                )
            }
            CommitTrigger::ProcessTime => None,
        };
        state.pending.insert(
            partition.to_string(),
            PendingPartition {
                time,
                created: now,
                writers: BTreeSet::from([subtask]),
            },
        );
        Ok(time)
    }

    /// `subtask` closed its part file in `partition`.
    pub fn closed(&self, subtask: usize, partition: &str, now: i64) -> Result<()> {
        let mut state = self.lock();
        if let Some(pending) = state.pending.get_mut(partition) {
            pending.writers.remove(&subtask);
        }
        self.commit_ready(&mut state, now)
    }

    /// `subtask`'s watermark advanced (after it closed the files it completes).
    pub fn watermark(&self, subtask: usize, watermark: i64, now: i64) -> Result<()> {
        let mut state = self.lock();
        if let Some(w) = state.watermarks.get_mut(subtask) {
            *w = (*w).max(watermark);
        }
        self.commit_ready(&mut state, now)
    }

    /// The wall clock advanced (`process-time` trigger).
    pub fn tick(&self, now: i64) -> Result<()> {
        let mut state = self.lock();
        self.commit_ready(&mut state, now)
    }

    /// `subtask` finished its input and closed all its files.
    pub fn finished(&self, subtask: usize, now: i64) -> Result<()> {
        let mut state = self.lock();
        if let Some(f) = state.finished.get_mut(subtask) {
            *f = true;
        }
        if let Some(w) = state.watermarks.get_mut(subtask) {
            *w = i64::MAX;
        }
        self.commit_ready(&mut state, now)
    }

    fn commit_ready(&self, state: &mut State, now: i64) -> Result<()> {
        let progress = Progress {
            watermark: state.watermarks.iter().copied().min().unwrap_or(i64::MIN),
            now,
            all_finished: !state.finished.is_empty() && state.finished.iter().all(|f| *f),
        };
        let ready: Vec<String> = state
            .pending
            .iter()
            .filter(|(_, p)| is_committable(p, &self.policy.trigger, self.policy.delay, progress))
            .map(|(name, _)| name.clone())
            .collect();
        for name in ready {
            write_success_file(&self.directory.join(&name), &self.policy.success_file)?;
            state.pending.remove(&name);
        }
        Ok(())
    }
}

/// The values of a partition directory path (`dt=x/hm=y`), unescaped.
fn partition_values(partition: &str) -> Vec<Option<String>> {
    partition
        .split('/')
        .map(|part| part.split_once('=').map(|(_, v)| unescape_path_name(v)))
        .collect()
}

fn write_success_file(directory: &Path, name: &str) -> Result<()> {
    let path = directory.join(name);
    std::fs::File::create(&path)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(&path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(time: Option<i64>, writers: &[usize]) -> PendingPartition {
        PendingPartition {
            time,
            created: 1_000,
            writers: writers.iter().copied().collect(),
        }
    }

    fn progress(watermark: i64, now: i64) -> Progress {
        Progress {
            watermark,
            now,
            all_finished: false,
        }
    }

    fn partition_time() -> CommitTrigger {
        let table = weir_plan::table::TableDef {
            name: "t".into(),
            columns: vec![],
            primary_key: vec![],
            partition_keys: vec!["dt".into()],
            options: weir_plan::table::TableOptions::new(vec![]).unwrap(),
        };
        CommitTrigger::PartitionTime(PartitionTimeExtractor::from_table(&table).unwrap())
    }

    #[test]
    fn partition_time_commits_once_every_watermark_is_past_time_plus_delay() {
        let trigger = partition_time();
        let p = pending(Some(60_000), &[]);
        assert!(!is_committable(&p, &trigger, 60_000, progress(120_000, 0)));
        assert!(is_committable(&p, &trigger, 60_000, progress(120_001, 0)));
        assert!(is_committable(&p, &trigger, 0, progress(60_001, 0)));
        assert!(!is_committable(&p, &trigger, 0, progress(i64::MIN, i64::MAX)));
    }

    #[test]
    fn a_partition_with_an_open_file_is_never_committed() {
        let p = pending(Some(0), &[1]);
        let ended = Progress {
            watermark: i64::MAX,
            now: i64::MAX,
            all_finished: true,
        };
        assert!(!is_committable(&p, &partition_time(), 0, ended));
        assert!(!is_committable(&p, &CommitTrigger::ProcessTime, 0, ended));
    }

    #[test]
    fn process_time_commits_after_the_delay_from_creation() {
        let p = pending(None, &[]);
        let trigger = CommitTrigger::ProcessTime;
        assert!(!is_committable(&p, &trigger, 500, progress(i64::MIN, 1_500)));
        assert!(is_committable(&p, &trigger, 500, progress(i64::MIN, 1_501)));
        assert!(is_committable(&p, &trigger, 0, progress(i64::MIN, 0)));
    }

    #[test]
    fn the_end_of_input_commits_every_closed_partition() {
        let p = pending(Some(i64::MAX - 1), &[]);
        let ended = Progress {
            watermark: i64::MIN,
            now: 0,
            all_finished: true,
        };
        assert!(is_committable(&p, &partition_time(), 60_000, ended));
    }

    #[test]
    fn a_subtask_closes_its_file_when_its_own_watermark_passes_the_partition() {
        assert!(!should_close(Some(60_000), 1_000, 61_000));
        assert!(should_close(Some(60_000), 1_000, 61_001));
        assert!(!should_close(None, 0, i64::MAX));
    }

    #[test]
    fn uncommitted_partitions_survive_a_snapshot_and_restore_and_then_commit() {
        let dir = tempfile::tempdir().unwrap();
        let policy = CommitPolicy {
            trigger: CommitTrigger::ProcessTime,
            delay: 1_000,
            success_file: "_SUCCESS".into(),
        };
        let spec = PartitionSpec {
            keys: vec!["dt".into()],
            default_name: "__DEFAULT_PARTITION__".into(),
        };
        let before = PartitionCommitter::new(dir.path().to_path_buf(), spec.clone(), policy.clone());
        before.register(0, 1);
        before.opened(0, "dt=a", 5_000).unwrap();
        let saved = before.snapshot();
        assert_eq!(saved.len(), 1);
        // The process dies before the partition's commit; a new one restores.
        let after = PartitionCommitter::new(dir.path().to_path_buf(), spec, policy);
        after.register(0, 1);
        after.restore(saved);
        std::fs::create_dir_all(dir.path().join("dt=a")).unwrap();
        after.tick(5_500).unwrap();
        assert!(!dir.path().join("dt=a/_SUCCESS").exists(), "the delay holds");
        after.tick(6_001).unwrap();
        assert!(dir.path().join("dt=a/_SUCCESS").exists());
        assert!(after.snapshot().is_empty());
    }

    #[test]
    fn partition_values_are_unescaped_from_the_path() {
        assert_eq!(
            partition_values("dt=2015-07-15/hm=00%3A01"),
            [Some("2015-07-15".to_string()), Some("00:01".to_string())]
        );
    }
}
