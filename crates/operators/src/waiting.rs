//! Rows of a spilled operator that wait for their key group's state: held per key group, read from its files a key group at a time.
//!
//! Once state is in files per key group ([`weir_state::key_group_files`]),
//! a row whose key is not in memory would need a read of its own. Its rows
//! wait instead, per key group, in arrival order. A key group is read when
//! its waiting rows are a good share of its stored rows ([`due`]): then its
//! files come back to memory whole, and the rows go on at the heap's speed
//! (a non-windowed aggregation takes them as one mini-batch, a join one
//! waiting batch after another). Rows wait at most
//! [`LONGEST_WAIT_MS`], the next checkpoint barrier or the end of input; and
//! while their bytes pass a share of the budget, the key groups with the
//! most rows for their entries are read first ([`to_read`]).
//!
//! Under more than 128 key groups, each "key group" here is a part of
//! consecutive key groups ([`part_width`]).
//!
//! The decisions are plain functions, tested here without files.

use std::collections::BTreeMap;

use arrow::array::UInt32Array;
use arrow::compute::take_record_batch;
use arrow::record_batch::RecordBatch;
use weir_common::time::wall_clock_millis;
use weir_runtime::Output;
use weir_state::key_group_files::{KeyGroupFiles, by_key_group};

use crate::{Error, Result};
use weir_state::memory_guess::SpillsWhenFull;

/// The longest a row waits for its key group's read (ms, wall clock).
pub const LONGEST_WAIT_MS: i64 = 1000;

/// A key group is read once it has a waiting row per this many stored rows.
const ENTRIES_PER_ROW: u64 = 2;

/// Parts (ranges of key groups, each with its files and its waiting rows)
/// a subtask has at most.
pub const PARTS: usize = 128;

/// Key groups per part under `max_parallelism`: one up to [`PARTS`] key
/// groups, so that files and waiting batches stay large (a file per key
/// group made the 5M-key GROUP BY 4.9x slower at 4096 key groups).
pub fn part_width(max_parallelism: usize) -> u32 {
    max_parallelism.div_ceil(PARTS).max(1) as u32
}

/// Whether a key group with `rows` waiting rows since `since`, of `stored`
/// rows in its files, is read at `now`.
pub fn due(rows: usize, stored: u64, since: i64, now: i64) -> bool {
    rows as u64 * ENTRIES_PER_ROW >= stored || now - since >= LONGEST_WAIT_MS
}

/// Of key groups as (key group, waiting rows, bytes, stored rows): those
/// to read so that the waiting rows take at most `target` bytes, the most
/// rows for their stored rows first.
pub fn to_read(held: &[(u32, usize, usize, u64)], target: usize) -> Vec<u32> {
    let total: usize = held.iter().map(|h| h.2).sum();
    let mut by_share: Vec<&(u32, usize, usize, u64)> = held.iter().collect();
    // rows / stored, descending: compare rows_a * stored_b with rows_b * stored_a.
    by_share.sort_by(|a, b| {
        let (left, right) = (a.1 as u128 * b.3.max(1) as u128, b.1 as u128 * a.3.max(1) as u128);
        right.cmp(&left).then(a.0.cmp(&b.0))
    });
    let mut left = total;
    let mut read = Vec::new();
    for &&(key_group, _, bytes, _) in &by_share {
        if left <= target {
            break;
        }
        read.push(key_group);
        left -= bytes;
    }
    read
}

/// One key group's waiting rows.
struct Held<T> {
    batches: Vec<T>,
    rows: usize,
    bytes: usize,
    /// When its oldest row came (ms).
    since: i64,
}

/// Every key group's waiting rows (batches of them, `T`), and its rows in
/// files.
pub struct Waiting<T = RecordBatch> {
    held: BTreeMap<u32, Held<T>>,
    bytes: usize,
    /// Rows the files hold, per key group.
    stored: BTreeMap<u32, u64>,
}

impl<T> Default for Waiting<T> {
    fn default() -> Self {
        Waiting {
            held: BTreeMap::new(),
            bytes: 0,
            stored: BTreeMap::new(),
        }
    }
}

impl<T> Waiting<T> {
    /// `rows`, `count` rows all of `key_group` and `bytes` in memory, wait
    /// from `now`.
    pub fn hold(&mut self, key_group: u32, rows: T, count: usize, bytes: usize, now: i64) {
        let held = self.held.entry(key_group).or_insert(Held {
            batches: Vec::new(),
            rows: 0,
            bytes: 0,
            since: now,
        });
        held.rows += count;
        held.bytes += bytes;
        held.batches.push(rows);
        self.bytes += bytes;
    }

    /// The rows of `key_group`, in arrival order, waiting no more.
    pub fn take(&mut self, key_group: u32) -> Vec<T> {
        match self.held.remove(&key_group) {
            Some(held) => {
                self.bytes -= held.bytes;
                held.batches
            }
            None => Vec::new(),
        }
    }

    /// The key groups due at `now` ([`due`]), and then, while the rows take
    /// more than `limit` bytes, those [`to_read`] to bring them to half.
    pub fn due_at(&self, now: i64, limit: usize) -> Vec<u32> {
        let mut due_now: Vec<u32> = (self.held.iter())
            .filter(|(kg, h)| due(h.rows, self.stored_in(**kg), h.since, now))
            .map(|(kg, _)| *kg)
            .collect();
        let left = self.bytes - due_now.iter().map(|kg| self.held[kg].bytes).sum::<usize>();
        if left > limit {
            let rest: Vec<(u32, usize, usize, u64)> = (self.held.iter())
                .filter(|(kg, _)| !due_now.contains(kg))
                .map(|(kg, h)| (*kg, h.rows, h.bytes, self.stored_in(*kg)))
                .collect();
            due_now.extend(to_read(&rest, limit / 2));
        }
        due_now
    }

    /// The least `key` of each key group's first waiting batch (its
    /// oldest, when `key` grows with arrival); `None` when nothing waits.
    pub fn least_first<K: Ord>(&self, key: impl Fn(&T) -> K) -> Option<K> {
        self.held
            .values()
            .filter_map(|h| h.batches.first())
            .map(key)
            .min()
    }

    /// Whether `key_group` has something waiting.
    pub fn holds(&self, key_group: u32) -> bool {
        self.held.contains_key(&key_group)
    }

    /// What `key_group` had held last, to change in place.
    pub fn last_mut(&mut self, key_group: u32) -> Option<&mut T> {
        self.held.get_mut(&key_group)?.batches.last_mut()
    }

    /// Every key group with waiting rows.
    pub fn key_groups(&self) -> Vec<u32> {
        self.held.keys().copied().collect()
    }

    /// Whether no row waits.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Bytes the waiting rows take.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Rows the files hold for `key_group`.
    pub fn stored_in(&self, key_group: u32) -> u64 {
        self.stored.get(&key_group).copied().unwrap_or(0)
    }

    /// The files gained (`delta` > 0) or lost rows of `key_group`.
    pub fn stored_changed(&mut self, key_group: u32, delta: i64) {
        let n = self.stored.entry(key_group).or_insert(0);
        *n = n.saturating_add_signed(delta);
    }
}

/// An operator whose rows wait for their part's files: when it reads
/// them, written once.
pub(crate) trait ReadsWaiting: SpillsWhenFull {
    /// What one batch of waiting rows is.
    type Rows;

    /// Its waiting rows and its budget (bytes), under the spilling backend.
    fn waiting(&self) -> Option<(&Waiting<Self::Rows>, usize)>;

    /// Its waiting rows, under the spilling backend.
    fn waiting_mut(&mut self) -> Option<&mut Waiting<Self::Rows>>;

    /// Brings `part`'s files to memory (the files go); returns the rows read.
    fn load_part(&mut self, part: u32) -> Result<usize>;

    /// Takes a part's waiting `rows`, in arrival order, now that its state
    /// is in memory; returns how many rows they were.
    fn take_waiting(&mut self, rows: Vec<Self::Rows>, out: &mut Output) -> Result<usize>;

    /// Its name in the plan, for errors.
    fn operator_name(&self) -> &str;

    /// The share of the budget waiting rows may take before the parts with
    /// the most rows for their stored rows are read: one in this many.
    fn waiting_share(&self) -> usize {
        8
    }

    /// For each of `parts`: brings its files to memory and takes its
    /// waiting rows, emitting their changes; memory is spilled in between
    /// when full.
    fn read_parts(&mut self, parts: Vec<u32>, out: &mut Output) -> Result<()> {
        for part in parts {
            let rows = self.waiting_mut().map(|w| w.take(part)).unwrap_or_default();
            if rows.is_empty() {
                continue;
            }
            let loaded = self.load_part(part)?;
            let taken = self.take_waiting(rows, out)?;
            self.spill_if_full(taken + loaded)?;
        }
        Ok(())
    }

    /// Reads the parts whose waiting rows are due at `now`, or take more
    /// than their share of the budget ([`ReadsWaiting::waiting_share`]).
    fn read_due(&mut self, now: i64, out: &mut Output) -> Result<()> {
        let share = self.waiting_share();
        let Some((waiting, budget)) = self.waiting() else {
            return Ok(());
        };
        let due = waiting.due_at(now, budget / share);
        self.read_parts(due, out)
    }

    /// Reads every part with waiting rows (at a barrier, or at the end).
    fn read_all_waiting(&mut self, out: &mut Output) -> Result<()> {
        let Some((waiting, _)) = self.waiting() else {
            return Ok(());
        };
        let all = waiting.key_groups();
        self.read_parts(all, out)
    }

    /// An error when rows wait for their part's read: a snapshot follows
    /// [`Operator::prepare_snapshot`](weir_runtime::Operator::prepare_snapshot), which reads them all.
    fn no_rows_wait(&self) -> Result<()> {
        match self.waiting().is_some_and(|(w, _)| !w.is_empty()) {
            true => Err(Error::Internal(format!(
                "{}: a snapshot while rows wait for spilled state (prepare_snapshot reads them first)",
                self.operator_name()
            ))),
            false => Ok(()),
        }
    }
}

/// The parts (of `width` key groups each) of `groups`, each once, in order.
pub(crate) fn parts_of(groups: &[u32], width: u32) -> Vec<u32> {
    let mut parts: Vec<u32> = groups.iter().map(|g| g / width).collect();
    parts.sort_unstable();
    parts.dedup();
    parts
}

/// Each key group of `groups`' part (`width` key groups each, of
/// `max_parallelism`) when that part has files, `None` when it has none:
/// which part a row waits in, if any.
pub(crate) fn parts_with_files(
    files: &KeyGroupFiles,
    width: u32,
    max_parallelism: usize,
    groups: &UInt32Array,
) -> Vec<Option<u32>> {
    let holds = files.holding((max_parallelism as u32).div_ceil(width));
    (groups.values().iter())
        .map(|group| holds[(group / width) as usize].then_some(group / width))
        .collect()
}

/// Of `batch`: the rows with a part in `parts` (`None`: the row does not
/// wait) wait there, in arrival order, each part's as `wrap(rows)`.
/// Returns the other rows, to take now (`None` when all wait).
pub(crate) fn hold_rows<T>(
    waiting: &mut Waiting<T>,
    batch: &RecordBatch,
    parts: &[Option<u32>],
    wrap: impl Fn(RecordBatch) -> T,
) -> Result<Option<RecordBatch>> {
    let wait: Vec<u32> = (0..batch.num_rows() as u32)
        .filter(|i| parts[*i as usize].is_some())
        .collect();
    if wait.is_empty() {
        return Ok(Some(batch.clone()));
    }
    let of: Vec<u32> = wait.iter().map(|i| parts[*i as usize].expect("waits")).collect();
    let by_part = by_key_group(&of, |i| wait[i]);
    let picks = UInt32Array::from_iter_values(by_part.iter().flat_map(|(_, rows)| rows.iter().copied()));
    let held = take_record_batch(batch, &picks)?;
    let per_row = held.get_array_memory_size() / held.num_rows().max(1);
    let (mut start, now) = (0, wall_clock_millis());
    for (part, rows) in by_part {
        let len = rows.len();
        waiting.hold(part, wrap(held.slice(start, len)), len, per_row * len, now);
        start += len;
    }
    let rest: Vec<u32> = (0..batch.num_rows() as u32)
        .filter(|i| parts[*i as usize].is_none())
        .collect();
    match rest.is_empty() {
        true => Ok(None),
        false => Ok(Some(take_record_batch(batch, &UInt32Array::from(rest))?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use std::sync::Arc;

    fn rows(n: i64) -> RecordBatch {
        RecordBatch::try_from_iter([("v", Arc::new(Int64Array::from_iter_values(0..n)) as _)]).unwrap()
    }

    #[test]
    fn a_key_group_is_read_once_its_rows_are_half_its_entries_or_the_oldest_waited_a_second() {
        assert!(!due(499, 1000, 0, 999));
        assert!(due(500, 1000, 0, 10));
        assert!(due(1, 1000, 0, LONGEST_WAIT_MS));
        assert!(due(1, 0, 0, 0), "nothing stored: nothing to wait for");
    }

    #[test]
    fn past_the_limit_the_key_groups_with_the_most_rows_for_their_entries_are_read_first() {
        // (key group, rows, bytes, stored)
        let held = [(1, 10, 100, 1000), (2, 40, 400, 1000), (3, 20, 200, 100)];
        assert_eq!(to_read(&held, 600), vec![3]);
        assert_eq!(to_read(&held, 300), vec![3, 2]);
        assert!(to_read(&held, 700 + 1000).is_empty());
    }

    #[test]
    fn rows_wait_per_key_group_in_arrival_order_until_taken() {
        let mut w = Waiting::default();
        w.stored_changed(7, 100);
        w.hold(7, rows(3), 3, 30, 0);
        w.hold(9, rows(1), 1, 10, 5);
        w.hold(7, rows(2), 2, 20, 8);
        assert_eq!(w.bytes(), 60);
        assert_eq!(w.key_groups(), vec![7, 9]);
        assert_eq!(w.due_at(10, 1000), vec![9], "key group 9 has nothing stored");
        assert_eq!(w.due_at(LONGEST_WAIT_MS, 1000), vec![7, 9]);
        assert_eq!(w.due_at(10, 20), vec![9, 7], "over the limit");
        let taken: Vec<usize> = w.take(7).iter().map(RecordBatch::num_rows).collect();
        assert_eq!(taken, [3, 2]);
        assert_eq!(w.bytes(), 10);
        assert!(w.take(7).is_empty());
        w.stored_changed(7, -150);
        assert_eq!(w.stored_in(7), 0);
    }

    #[test]
    fn a_part_is_one_key_group_up_to_128_and_a_range_beyond() {
        assert_eq!(part_width(1), 1);
        assert_eq!(part_width(128), 1);
        assert_eq!(part_width(129), 2);
        assert_eq!(part_width(4096), 32);
        assert_eq!(32768_usize.div_ceil(part_width(32768) as usize), PARTS);
    }
}
