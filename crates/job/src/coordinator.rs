//! The checkpoint coordinator's decisions, as plain functions over plain data.
//!
//! When to trigger, when a checkpoint is complete, which ones expired, and
//! whether a failure fails the job: no threads, clocks or files here (the
//! caller supplies the time and does the I/O), so every rule is tested directly.
//!
//! ```text
//!   trigger(n) ──► pending n {awaiting: every task} ──ack──► … ──► all acked ──► complete
//!                        │                                          (subsumes older pending)
//!                        └── timeout / decline ──► aborted (counts toward tolerable failures)
//! ```
//!
//! Checkpoints go on after tasks finish, as in Flink 2 (FLIP-147): a
//! finished task gets no barriers any more, so the coordinator asks it
//! directly and it acknowledges with its final state; its downstream tasks
//! count its ended channels as aligned. Once every task has finished, a
//! final checkpoint is due at once; its completion ends the job (tasks
//! commit their last output only then).

use std::collections::{BTreeMap, BTreeSet};

use weir_common::ids::CheckpointId;

/// The coordinator's timing and failure settings, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Between periodic triggers; `None`: savepoints only.
    pub interval: Option<u64>,
    /// A checkpoint older than this is aborted.
    pub timeout: u64,
    /// Between the completion of one checkpoint and the next trigger.
    pub min_pause: u64,
    /// Checkpoints in flight at once.
    pub max_concurrent: usize,
    /// Failures in a row tolerated.
    pub tolerable_failures: u32,
}

/// A checkpoint in flight, collecting acknowledgements of type `A`.
#[derive(Debug)]
pub struct PendingCheckpoint<A> {
    /// Its id.
    pub id: CheckpointId,
    /// When it was triggered (ms).
    pub triggered_at: u64,
    /// A savepoint the user asked for (not a periodic checkpoint).
    pub savepoint: bool,
    /// Triggered when every task had finished: its completion ends the job.
    pub is_final: bool,
    /// Tasks that have not acknowledged yet.
    pub awaiting: BTreeSet<usize>,
    /// Acknowledgements so far, by task.
    pub acks: BTreeMap<usize, A>,
}

/// What an acknowledgement did.
#[derive(Debug)]
pub enum AckOutcome<A> {
    /// The checkpoint is unknown (aborted or subsumed): drop the acknowledgement.
    Unknown,
    /// More tasks must acknowledge.
    Pending,
    /// Every task has acknowledged: persist it, then call [`CoordinatorState::completed`].
    AllAcknowledged(PendingCheckpoint<A>),
}

/// Whether the job survives a failed checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureVerdict {
    /// Within `tolerable-failed-checkpoints`: go on.
    Continue,
    /// Too many failures in a row: fail the job.
    FailJob,
}

/// The state of the coordinator of one job attempt.
#[derive(Debug)]
pub struct CoordinatorState<A> {
    timing: Timing,
    tasks: usize,
    next_id: CheckpointId,
    pending: BTreeMap<CheckpointId, PendingCheckpoint<A>>,
    last_trigger: Option<u64>,
    last_completion: Option<u64>,
    consecutive_failures: u32,
    started_at: u64,
    stopped: bool,
    /// Tasks that have processed all their input (and wait for checkpoints).
    finished: BTreeSet<usize>,
}

impl<A> CoordinatorState<A> {
    /// A coordinator for `tasks` tasks whose next checkpoint is `next_id`
    /// (one past the restored checkpoint), started at `now`.
    pub fn new(timing: Timing, tasks: usize, next_id: CheckpointId, now: u64) -> Self {
        CoordinatorState {
            timing,
            tasks,
            next_id,
            pending: BTreeMap::new(),
            last_trigger: None,
            last_completion: None,
            consecutive_failures: 0,
            started_at: now,
            stopped: false,
            finished: BTreeSet::new(),
        }
    }

    /// No more checkpoints (the job is ending).
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// Task `task` processed all its input. It gets no barriers from now on:
    /// the checkpoints in flight that still await it are returned, for the
    /// caller to ask it directly (as every later one).
    pub fn task_finished(&mut self, task: usize) -> Vec<CheckpointId> {
        self.finished.insert(task);
        self.pending
            .values()
            .filter(|p| p.awaiting.contains(&task))
            .map(|p| p.id)
            .collect()
    }

    /// Whether task `task` has finished.
    pub fn is_finished(&self, task: usize) -> bool {
        self.finished.contains(&task)
    }

    /// Whether every task has finished: the final checkpoint is due.
    pub fn all_finished(&self) -> bool {
        self.finished.len() == self.tasks
    }

    /// Checkpoints in flight.
    pub fn pending_ids(&self) -> Vec<CheckpointId> {
        self.pending.keys().copied().collect()
    }

    /// When the next trigger is due (ms), or `None` when none will be.
    /// Once every task has finished, the final checkpoint is due at once,
    /// with or without an interval.
    pub fn next_trigger_at(&self) -> Option<u64> {
        // No periodic checkpoint while a savepoint is taken.
        if self.stopped
            || self.pending.len() >= self.timing.max_concurrent
            || self.pending.values().any(|p| p.savepoint)
        {
            return None;
        }
        if self.all_finished() {
            return Some(0);
        }
        let interval = self.timing.interval?;
        let after_interval = self.last_trigger.unwrap_or(self.started_at) + interval;
        let after_pause = self
            .last_completion
            .map_or(0, |done| done + self.timing.min_pause);
        // With a minimum pause, Flink never overlaps checkpoints.
        if self.timing.min_pause > 0 && !self.pending.is_empty() {
            return None;
        }
        Some(after_interval.max(after_pause))
    }

    /// Triggers the next checkpoint if it is due at `now`; returns its id.
    pub fn trigger_if_due(&mut self, now: u64) -> Option<CheckpointId> {
        if self.next_trigger_at()? > now {
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.last_trigger = Some(now);
        self.insert(id, now, false);
        Some(id)
    }

    /// Triggers a savepoint at `now`, whatever the periodic schedule and
    /// concurrency limit say; returns its id (from the checkpoints' sequence)
    /// and the periodic checkpoints in flight, which it aborts without
    /// counting them as failures (its barriers overtake theirs).
    pub fn trigger_savepoint(&mut self, now: u64) -> (CheckpointId, Vec<CheckpointId>) {
        let aborted: Vec<CheckpointId> = self
            .pending
            .values()
            .filter(|p| !p.savepoint)
            .map(|p| p.id)
            .collect();
        for id in &aborted {
            self.pending.remove(id);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.insert(id, now, true);
        (id, aborted)
    }

    fn insert(&mut self, id: CheckpointId, now: u64, savepoint: bool) {
        let is_final = !savepoint && self.all_finished();
        self.pending.insert(
            id,
            PendingCheckpoint {
                id,
                triggered_at: now,
                savepoint,
                is_final,
                awaiting: (0..self.tasks).collect(),
                acks: BTreeMap::new(),
            },
        );
    }

    /// Whether pending checkpoint `id` is a savepoint.
    pub fn is_savepoint(&self, id: CheckpointId) -> bool {
        self.pending.get(&id).is_some_and(|p| p.savepoint)
    }

    /// Task `task` acknowledged checkpoint `id` with `ack`.
    pub fn acknowledge(&mut self, id: CheckpointId, task: usize, ack: A) -> AckOutcome<A> {
        let Some(pending) = self.pending.get_mut(&id) else {
            return AckOutcome::Unknown;
        };
        if !pending.awaiting.remove(&task) {
            return AckOutcome::Pending;
        }
        pending.acks.insert(task, ack);
        if !pending.awaiting.is_empty() {
            return AckOutcome::Pending;
        }
        let done = self.pending.remove(&id).expect("present above");
        AckOutcome::AllAcknowledged(done)
    }

    /// Checkpoint `id` was persisted at `now`: it is complete. Older pending
    /// checkpoints are subsumed (aborted without counting as failures); their
    /// ids are returned so their files can be removed. Savepoints are never
    /// subsumed: the user waits for each.
    pub fn completed(&mut self, id: CheckpointId, now: u64) -> Vec<CheckpointId> {
        self.last_completion = Some(now);
        self.consecutive_failures = 0;
        let older: Vec<CheckpointId> = self
            .pending
            .range(..id)
            .filter(|(_, p)| !p.savepoint)
            .map(|(k, _)| *k)
            .collect();
        for k in &older {
            self.pending.remove(k);
        }
        older
    }

    /// The checkpoints that timed out by `now`, removed from the pending set.
    pub fn expired(&mut self, now: u64) -> Vec<CheckpointId> {
        let expired: Vec<CheckpointId> = self
            .pending
            .values()
            .filter(|p| now >= p.triggered_at + self.timing.timeout)
            .map(|p| p.id)
            .collect();
        for id in &expired {
            self.pending.remove(id);
        }
        expired
    }

    /// Checkpoint `id` failed (expired, declined by a task, or not persisted);
    /// it is removed. Whether the job goes on: a failed savepoint is the
    /// user's to retry and never fails the job (as in Flink).
    pub fn failed(&mut self, id: CheckpointId) -> FailureVerdict {
        if self.pending.remove(&id).is_some_and(|p| p.savepoint) {
            return FailureVerdict::Continue;
        }
        self.consecutive_failures += 1;
        if self.consecutive_failures > self.timing.tolerable_failures {
            FailureVerdict::FailJob
        } else {
            FailureVerdict::Continue
        }
    }

    /// When the oldest pending checkpoint expires (ms), if any.
    pub fn next_expiry_at(&self) -> Option<u64> {
        self.pending
            .values()
            .map(|p| p.triggered_at + self.timing.timeout)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing {
            interval: Some(100),
            timeout: 1_000,
            min_pause: 0,
            max_concurrent: 1,
            tolerable_failures: 1,
        }
    }

    #[test]
    fn the_first_trigger_comes_one_interval_after_start_with_increasing_ids() {
        let mut c: CoordinatorState<()> = CoordinatorState::new(timing(), 2, 5, 1_000);
        assert_eq!(c.trigger_if_due(1_050), None);
        assert_eq!(c.trigger_if_due(1_100), Some(5));
        // One in flight at most.
        assert_eq!(c.trigger_if_due(1_300), None);
        c.acknowledge(5, 0, ());
        assert!(matches!(c.acknowledge(5, 1, ()), AckOutcome::AllAcknowledged(_)));
        c.completed(5, 1_310);
        assert_eq!(c.trigger_if_due(1_310), Some(6));
    }

    #[test]
    fn a_checkpoint_is_complete_only_when_every_task_acknowledged() {
        let mut c: CoordinatorState<&str> = CoordinatorState::new(timing(), 3, 1, 0);
        let id = c.trigger_if_due(100).unwrap();
        assert!(matches!(c.acknowledge(id, 0, "a"), AckOutcome::Pending));
        assert!(matches!(c.acknowledge(id, 0, "again"), AckOutcome::Pending));
        assert!(matches!(c.acknowledge(id, 2, "c"), AckOutcome::Pending));
        match c.acknowledge(id, 1, "b") {
            AckOutcome::AllAcknowledged(p) => {
                assert_eq!(p.acks.values().copied().collect::<Vec<_>>(), vec!["a", "b", "c"])
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(c.acknowledge(id, 1, "late"), AckOutcome::Unknown));
    }

    #[test]
    fn min_pause_counts_from_the_last_completion() {
        let mut c: CoordinatorState<()> = CoordinatorState::new(
            Timing {
                min_pause: 500,
                max_concurrent: 3,
                ..timing()
            },
            1,
            1,
            0,
        );
        assert_eq!(c.trigger_if_due(100), Some(1));
        assert_eq!(c.trigger_if_due(250), None, "no overlap with a minimum pause");
        c.acknowledge(1, 0, ());
        c.completed(1, 300);
        assert_eq!(c.next_trigger_at(), Some(800));
        assert_eq!(c.trigger_if_due(799), None);
        assert_eq!(c.trigger_if_due(800), Some(2));
    }

    #[test]
    fn concurrent_checkpoints_up_to_the_maximum_and_completion_subsumes_older_ones() {
        let mut c: CoordinatorState<()> = CoordinatorState::new(
            Timing {
                max_concurrent: 2,
                ..timing()
            },
            1,
            1,
            0,
        );
        assert_eq!(c.trigger_if_due(100), Some(1));
        assert_eq!(c.trigger_if_due(200), Some(2));
        assert_eq!(c.trigger_if_due(300), None);
        assert!(matches!(c.acknowledge(2, 0, ()), AckOutcome::AllAcknowledged(_)));
        assert_eq!(c.completed(2, 310), vec![1]);
        assert!(c.pending_ids().is_empty());
    }

    #[test]
    fn expired_checkpoints_are_aborted_and_failures_beyond_the_tolerance_fail_the_job() {
        let mut c: CoordinatorState<()> = CoordinatorState::new(timing(), 1, 1, 0);
        c.trigger_if_due(100);
        assert_eq!(c.next_expiry_at(), Some(1_100));
        assert!(c.expired(1_099).is_empty());
        assert_eq!(c.expired(1_100), vec![1]);
        assert_eq!(c.failed(1), FailureVerdict::Continue);
        c.trigger_if_due(1_200);
        assert_eq!(
            c.failed(2),
            FailureVerdict::FailJob,
            "two in a row, one tolerated"
        );
    }

    #[test]
    fn a_completed_checkpoint_resets_the_failure_count() {
        let mut c: CoordinatorState<()> = CoordinatorState::new(timing(), 1, 1, 0);
        c.trigger_if_due(100);
        assert_eq!(c.failed(1), FailureVerdict::Continue);
        c.trigger_if_due(200);
        c.acknowledge(2, 0, ());
        c.completed(2, 210);
        c.trigger_if_due(310);
        assert_eq!(c.failed(3), FailureVerdict::Continue);
    }

    #[test]
    fn a_savepoint_aborts_the_checkpoint_in_flight_and_holds_back_periodic_ones_until_done() {
        let mut c: CoordinatorState<()> = CoordinatorState::new(timing(), 1, 1, 0);
        assert_eq!(c.trigger_if_due(100), Some(1));
        assert_eq!(c.trigger_savepoint(120), (2, vec![1]));
        assert!(c.is_savepoint(2));
        assert!(
            matches!(c.acknowledge(1, 0, ()), AckOutcome::Unknown),
            "1 was aborted"
        );
        assert_eq!(c.trigger_if_due(10_000), None, "not while the savepoint is taken");
        assert!(matches!(c.acknowledge(2, 0, ()), AckOutcome::AllAcknowledged(_)));
        c.completed(2, 10_010);
        assert_eq!(c.trigger_if_due(10_010), Some(3));
        // A savepoint's failure is not the job's.
        let (id, _) = c.trigger_savepoint(10_020);
        assert_eq!(c.failed(id), FailureVerdict::Continue);
        c.trigger_if_due(20_000);
        assert_eq!(c.failed(5), FailureVerdict::Continue);
    }

    #[test]
    fn without_an_interval_only_savepoints_are_taken() {
        let mut c: CoordinatorState<()> = CoordinatorState::new(
            Timing {
                interval: None,
                ..timing()
            },
            1,
            1,
            0,
        );
        assert_eq!(c.next_trigger_at(), None);
        assert_eq!(c.trigger_if_due(1_000_000), None);
        assert_eq!(c.trigger_savepoint(5), (1, vec![]));
    }

    #[test]
    fn a_finished_task_is_asked_directly_for_the_checkpoints_that_await_it() {
        let mut c: CoordinatorState<()> = CoordinatorState::new(timing(), 2, 1, 0);
        assert_eq!(c.trigger_if_due(100), Some(1));
        c.acknowledge(1, 0, ());
        // Task 0 acknowledged 1 before finishing: only task 1's finish is asked for it.
        assert_eq!(c.task_finished(0), Vec::<CheckpointId>::new());
        assert_eq!(c.task_finished(1), vec![1]);
        assert!(c.is_finished(1));
        assert!(matches!(c.acknowledge(1, 1, ()), AckOutcome::AllAcknowledged(p) if !p.is_final));
    }

    #[test]
    fn checkpoints_go_on_while_some_tasks_have_finished() {
        let mut c: CoordinatorState<()> = CoordinatorState::new(timing(), 3, 1, 0);
        c.task_finished(2);
        assert_eq!(c.trigger_if_due(100), Some(1));
        for task in 0..3 {
            c.acknowledge(1, task, ());
        }
        c.completed(1, 110);
        assert_eq!(c.trigger_if_due(150), None, "the interval still holds");
        assert_eq!(c.trigger_if_due(210), Some(2));
    }

    #[test]
    fn once_every_task_has_finished_the_final_checkpoint_is_due_at_once_even_without_an_interval() {
        let mut c: CoordinatorState<()> = CoordinatorState::new(
            Timing {
                interval: None,
                tolerable_failures: 1,
                ..timing()
            },
            2,
            4,
            0,
        );
        c.task_finished(0);
        assert_eq!(c.next_trigger_at(), None);
        c.task_finished(1);
        assert!(c.all_finished());
        assert_eq!(c.trigger_if_due(7), Some(4));
        // A failed final checkpoint (within the tolerance) is taken again.
        assert_eq!(c.failed(4), FailureVerdict::Continue);
        assert_eq!(c.trigger_if_due(8), Some(5));
        c.acknowledge(5, 0, ());
        match c.acknowledge(5, 1, ()) {
            AckOutcome::AllAcknowledged(p) => assert!(p.is_final),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_final_checkpoint_failing_beyond_the_tolerance_fails_the_job() {
        let mut c: CoordinatorState<()> = CoordinatorState::new(
            Timing {
                tolerable_failures: 0,
                ..timing()
            },
            1,
            1,
            0,
        );
        c.task_finished(0);
        assert_eq!(c.trigger_if_due(0), Some(1));
        assert_eq!(c.failed(1), FailureVerdict::FailJob);
    }

    #[test]
    fn a_stopped_coordinator_triggers_nothing() {
        let mut c: CoordinatorState<()> = CoordinatorState::new(timing(), 1, 1, 0);
        c.stop();
        assert_eq!(c.trigger_if_due(10_000), None);
    }
}
