//! The spilling state backend of window aggregation: slices beyond the memory budget as sorted runs.
//!
//! When a subtask's in-memory state passes 3/8 of its budget (writing a
//! run takes about as much again), the state of every slice is written out as
//! a run (state rows sorted by key group, see [`weir_state::runs`]) and
//! its tables are dropped; rows go on into fresh ones. A window over slices
//! with runs fires from them one key-group range at a time: each range of
//! every run is merged into a table, evaluated and sent on
//! ([`Operator::emit_more`](weir_runtime::Operator::emit_more)) before the
//! next is read, and the watermark follows the last range. A checkpoint links
//! the runs and writes only what is in memory.
//!
//! A local pre-aggregation does not spill: past the budget, it sends its
//! partial states on early, as at a checkpoint.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow::array::ArrayRef;

use crate::window::aggregate::{Phase, WindowAggregateOperator};
use crate::{Error, Result};
use weir_common::time::Timestamp;
use weir_runtime::Output;
use weir_runtime::operator::SpillSettings;
use weir_state::runs::{Run, RunCursor, RunWriter, bucket_bounds};
use weir_state::snapshot::RUN_ROW_GROUP_ROWS;

/// Spill directories made by this process, numbered.
static SPILL_DIRS: AtomicU64 = AtomicU64::new(0);

/// A window aggregation subtask's spilled state.
pub(super) struct Spill {
    settings: SpillSettings,
    /// This subtask's directory, made at its first run.
    dir: Option<PathBuf>,
    /// Runs of each slice, oldest first.
    pub(super) runs: BTreeMap<i64, Vec<Run>>,
    next_run: u64,
    firing: Option<Firing>,
    /// The watermark that started the firing, sent on after it.
    held_watermark: Option<Timestamp>,
}

/// A window being fired from runs, range by range.
struct Firing {
    start: i64,
    end: i64,
    cursors: Vec<RunCursor>,
    /// Upper key-group bounds of the ranges still to fire.
    bounds: VecDeque<u32>,
}

impl Spill {
    pub(super) fn new(settings: SpillSettings) -> Self {
        Spill {
            settings,
            dir: None,
            runs: BTreeMap::new(),
            next_run: 0,
            firing: None,
            held_watermark: None,
        }
    }

    /// Where the next run of `slice` goes.
    fn run_path(&mut self, slice: i64) -> Result<PathBuf> {
        let dir = match &self.dir {
            Some(dir) => dir.clone(),
            None => {
                let n = SPILL_DIRS.fetch_add(1, Ordering::Relaxed);
                let dir = self
                    .settings
                    .dir
                    .join(format!("weir-spill-{}-{n}", std::process::id()));
                self.dir = Some(dir.clone());
                dir
            }
        };
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        self.next_run += 1;
        Ok(dir.join(format!("{slice}-{}.parquet", self.next_run)))
    }
}

/// The key-group ranges a merge of `runs` reads one at a time: an eighth
/// of `budget` of run bytes each (merged into a table, a key takes about
/// twice its bytes in a run, and its output rows as much again).
fn range_bounds(runs: &[Run], budget: usize) -> Vec<u32> {
    let bytes = runs.iter().map(|r| r.info.bytes).sum();
    let first = runs.iter().map(|r| r.info.key_groups.0).min().unwrap_or(0);
    let last = runs.iter().map(|r| r.info.key_groups.1).max().unwrap_or(0);
    bucket_bounds(first as u32, last as u32, bytes, (budget / 8).max(1) as u64)
}

/// How many runs a slice may have before they are merged into one: a merge
/// or a firing holds a row group and a batch of every run it reads, which
/// should take at most a quarter of `budget` (2 to 64 runs).
fn max_runs(runs: &[Run], budget: usize) -> usize {
    let rows: u64 = runs.iter().map(|r| r.info.rows).sum();
    let bytes: u64 = runs.iter().map(|r| r.info.bytes).sum();
    let per_cursor = 2 * RUN_ROW_GROUP_ROWS as u64 * (bytes / rows.max(1)).max(1);
    ((budget / 4) as u64 / per_cursor).clamp(2, 64) as usize
}

impl WindowAggregateOperator {
    /// Bytes of state in memory.
    fn memory_size(&self) -> usize {
        self.slices
            .values()
            .map(|s| {
                let tables: usize = s.live.iter().map(|l| l.size()).sum();
                let frozen: usize = s.frozen.iter().flatten().map(|a| a.get_array_memory_size()).sum();
                tables + frozen
            })
            .sum()
    }

    /// Past 3/8 of the budget: a spill then takes about as much again for
    /// a moment (the tables' rows as arrays, sorted by key group), and the
    /// allocator still holds what the tables left behind as they grew.
    fn over_budget(&self) -> bool {
        self.spill
            .as_ref()
            .is_some_and(|spill| self.memory_size() > spill.settings.budget / 8 * 3)
    }

    /// After input: past the budget, the state goes to runs (the local
    /// phase sends its partial states on instead).
    pub(super) fn check_budget(&mut self, out: &mut Output) -> Result<()> {
        if !self.over_budget() {
            return Ok(());
        }
        if self.spec.phase == Phase::Local {
            let all: Vec<i64> = self.slices.keys().copied().collect();
            return self.emit_slices(all, out);
        }
        self.spill_all()
    }

    /// On restore: past the budget, the state goes to runs.
    pub(super) fn spill_if_over_budget(&mut self) -> Result<()> {
        if self.spec.phase != Phase::Local && self.over_budget() {
            self.spill_all()?;
        }
        Ok(())
    }

    fn spill_all(&mut self) -> Result<()> {
        let slices: Vec<i64> = self.slices.keys().copied().collect();
        for slice in slices {
            self.spill_slice(slice)?;
        }
        // The tables just dropped are the budget's size: give them back now.
        weir_common::alloc::give_back_freed_memory();
        Ok(())
    }

    /// Writes what `slice` holds in memory as a run and drops its tables.
    fn spill_slice(&mut self, slice: i64) -> Result<()> {
        let Some(entry) = self.slices.get_mut(&slice) else {
            return Ok(());
        };
        let mut chunks: Vec<(i64, Vec<ArrayRef>)> = std::mem::take(&mut entry.frozen)
            .into_iter()
            .map(|c| (slice, c))
            .collect();
        if let Some(state) = entry.live.take().filter(|s| !s.groups.is_empty()) {
            chunks.push((slice, state.into_chunk()?));
        }
        let Some(rows) = self.chunks_to_rows(chunks)? else {
            return Ok(());
        };
        let spill = self.spill.as_mut().expect("spilling");
        let run = Run::write(spill.run_path(slice)?, &rows)?;
        let runs = spill.runs.entry(slice).or_default();
        runs.push(run);
        if runs.len() > max_runs(runs, spill.settings.budget) {
            self.merge_runs(slice)?;
        }
        Ok(())
    }

    /// Merges the runs of `slice` into one, a key-group range at a time
    /// (the partial states of a key in several runs become one).
    fn merge_runs(&mut self, slice: i64) -> Result<()> {
        let schema = self.state_schema()?;
        let spill = self.spill.as_mut().expect("spilling");
        let runs = spill.runs.remove(&slice).unwrap_or_default();
        let mut writer = RunWriter::create(spill.run_path(slice)?, schema)?;
        let bounds = range_bounds(&runs, spill.settings.budget);
        let mut cursors = runs.iter().map(|r| r.cursor()).collect::<Result<Vec<_>>>()?;
        for bound in bounds {
            let mut merged = self.spec.new_state()?;
            let mut group_indices = std::mem::take(&mut self.group_indices);
            for cursor in &mut cursors {
                for batch in cursor.take_below(bound)? {
                    merged.merge(&batch.columns()[2..], &self.state_widths, &mut group_indices)?;
                }
            }
            self.group_indices = group_indices;
            if merged.groups.is_empty() {
                continue;
            }
            let chunk = merged.into_chunk()?;
            if let Some(rows) = self.chunks_to_rows(vec![(slice, chunk)])? {
                writer.write(&rows)?;
            }
            weir_common::alloc::give_back_freed_memory();
        }
        let merged = writer.finish()?;
        self.spill
            .as_mut()
            .expect("spilling")
            .runs
            .insert(slice, vec![merged]);
        weir_common::alloc::give_back_freed_memory();
        Ok(())
    }

    /// Whether a slice in `[start, end)` has runs.
    pub(super) fn has_runs(&self, start: i64, end: i64) -> bool {
        self.spill
            .as_ref()
            .is_some_and(|s| s.runs.range(start..end).any(|(_, runs)| !runs.is_empty()))
    }

    pub(super) fn is_firing(&self) -> bool {
        self.spill.as_ref().is_some_and(|s| s.firing.is_some())
    }

    /// Every run, for a snapshot.
    pub(super) fn all_runs(&self) -> Vec<Run> {
        self.spill
            .as_ref()
            .map(|s| s.runs.values().flatten().cloned().collect())
            .unwrap_or_default()
    }

    /// Sends `watermark` on, or holds it until a firing in progress is done.
    pub(super) fn watermark_after_firing(&mut self, watermark: Timestamp, out: &mut Output) {
        match &mut self.spill {
            Some(spill) if spill.firing.is_some() => spill.held_watermark = Some(watermark),
            _ => out.watermark(watermark),
        }
    }

    /// Starts firing window `end` from runs: the member slices' state in
    /// memory goes to runs too, and the key groups are cut into ranges (see
    /// [`range_bounds`]).
    pub(super) fn start_spilled_firing(&mut self, end: i64) -> Result<()> {
        let start = self.spec.window.window_start(end);
        let members: Vec<i64> = self.slices.range(start..end).map(|(s, _)| *s).collect();
        for member in &members {
            self.spill_slice(*member)?;
        }
        let spill = self.spill.as_mut().expect("spilling");
        let runs: Vec<Run> = members
            .iter()
            .filter_map(|m| spill.runs.get(m))
            .flatten()
            .cloned()
            .collect();
        let bounds = range_bounds(&runs, spill.settings.budget);
        let cursors = runs.iter().map(|r| r.cursor()).collect::<Result<Vec<_>>>()?;
        spill.firing = Some(Firing {
            start,
            end,
            cursors,
            bounds: bounds.into(),
        });
        Ok(())
    }

    /// Fires the next key-group range of the window being fired; once the
    /// window is done, its slices go, the next windows due fire, and the
    /// held watermark follows. True while a firing goes on.
    pub(super) fn go_on_firing(&mut self, out: &mut Output) -> Result<bool> {
        let Some(mut firing) = self.spill.as_mut().and_then(|s| s.firing.take()) else {
            return Ok(false);
        };
        if let Some(bound) = firing.bounds.pop_front() {
            let mut merged = self.spec.new_state()?;
            let mut group_indices = std::mem::take(&mut self.group_indices);
            for cursor in &mut firing.cursors {
                for batch in cursor.take_below(bound)? {
                    merged.merge(&batch.columns()[2..], &self.state_widths, &mut group_indices)?;
                }
            }
            self.group_indices = group_indices;
            if let Some(batch) = self.window_output(merged, firing.start, firing.end)? {
                self.emit_sized(batch, out);
            }
            weir_common::alloc::give_back_freed_memory();
        }
        if !firing.bounds.is_empty() {
            self.spill.as_mut().expect("spilling").firing = Some(firing);
            return Ok(true);
        }
        self.drop_fired_slices(firing.end);
        self.fire_windows(out)?;
        if self.is_firing() {
            return Ok(true);
        }
        if let Some(watermark) = self.spill.as_mut().and_then(|s| s.held_watermark.take()) {
            out.watermark(watermark);
        }
        Ok(false)
    }
}
