//! The pane states of row-count windows between batches: columns appended a batch at a time, a pane's state found by its position, and the superseded ones compacted away.
//!
//! A batch's panes leave its accumulators as state columns (one row per
//! pane), appended here whole as one chunk; a pane's state is then its
//! [`At`]. A pane updated again by a later batch gets a new position and its
//! old row becomes garbage, as does a pane no window needs any more. When
//! the garbage passes the live rows, [`PaneLog::compact`] gathers the live
//! rows into one chunk, so memory stays within twice the live panes (plus a
//! batch or two).

use arrow::array::{Array, ArrayRef};
use arrow::compute::interleave;

use crate::Result;

/// Where a pane's state is: its chunk and row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct At {
    pub chunk: u32,
    pub row: u32,
}

/// Chunks of pane state columns (each aggregate's state fields one after
/// another), with how many of their rows are still referenced.
#[derive(Default)]
pub(super) struct PaneLog {
    chunks: Vec<Vec<ArrayRef>>,
    rows: usize,
    live: usize,
}

/// Garbage rows tolerated before compacting, whatever the live count
/// (few in unit tests, so they compact).
const SLACK: usize = if cfg!(test) { 16 } else { 64 * 1024 };

/// Chunks tolerated before compacting (each gather looks through them all).
const MAX_CHUNKS: usize = 512;

impl PaneLog {
    /// Appends a batch's pane states (`columns`, one row per pane, every
    /// row live); the positions of its rows are `chunk` and `0..rows`.
    pub fn append(&mut self, columns: Vec<ArrayRef>) -> u32 {
        let rows = columns.first().map_or(0, |c| c.len());
        self.rows += rows;
        self.live += rows;
        self.chunks.push(columns);
        (self.chunks.len() - 1) as u32
    }

    /// Marks `n` rows no longer referenced.
    pub fn release(&mut self, n: usize) {
        self.live -= n;
    }

    /// The state columns of the panes at `at`, in that order.
    pub fn gather(&self, at: &[At]) -> Result<Vec<ArrayRef>> {
        let indices: Vec<(usize, usize)> = at.iter().map(|a| (a.chunk as usize, a.row as usize)).collect();
        let width = self.chunks.first().map_or(0, |c| c.len());
        (0..width)
            .map(|column| {
                let arrays: Vec<&dyn Array> = self.chunks.iter().map(|c| c[column].as_ref()).collect();
                Ok(interleave(&arrays, &indices)?)
            })
            .collect()
    }

    /// Whether the garbage is worth gathering the live rows for.
    pub fn wants_compaction(&self) -> bool {
        self.chunks.len() > MAX_CHUNKS || self.rows - self.live > self.live + SLACK
    }

    /// Keeps only the rows at `live` (every live position, each once), as
    /// one chunk; the positions are rewritten to theirs in it.
    pub fn compact<'a>(&mut self, live: impl Iterator<Item = &'a mut At>) -> Result<()> {
        let mut live: Vec<&mut At> = live.collect();
        let positions: Vec<At> = live.iter().map(|a| **a).collect();
        let columns = self.gather(&positions)?;
        for (row, at) in live.iter_mut().enumerate() {
            **at = At {
                chunk: 0,
                row: row as u32,
            };
        }
        self.chunks.clear();
        self.rows = 0;
        self.live = 0;
        if !positions.is_empty() {
            self.append(columns);
        }
        Ok(())
    }

    /// Live rows.
    #[cfg(test)]
    pub fn live(&self) -> usize {
        self.live
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::Int64Type;

    use super::*;

    fn column(values: &[i64]) -> Vec<ArrayRef> {
        vec![Arc::new(Int64Array::from(values.to_vec()))]
    }

    fn values(columns: &[ArrayRef]) -> Vec<i64> {
        columns[0].as_primitive::<Int64Type>().values().to_vec()
    }

    #[test]
    fn a_pane_is_gathered_from_the_chunk_and_row_it_was_appended_at() {
        let mut log = PaneLog::default();
        let first = log.append(column(&[1, 2, 3]));
        let second = log.append(column(&[10, 20]));
        let at = |chunk, row| At { chunk, row };
        let got = log.gather(&[at(second, 1), at(first, 0), at(first, 2)]).unwrap();
        assert_eq!(values(&got), vec![20, 1, 3]);
    }

    #[test]
    fn compaction_keeps_only_the_live_panes_and_rewrites_their_positions() {
        let mut log = PaneLog::default();
        log.append(column(&[1, 2, 3]));
        log.append(column(&[10, 20]));
        log.release(3);
        let mut live = [At { chunk: 1, row: 1 }, At { chunk: 0, row: 2 }];
        log.compact(live.iter_mut()).unwrap();
        assert_eq!(log.live(), 2);
        assert_eq!(live, [At { chunk: 0, row: 0 }, At { chunk: 0, row: 1 }]);
        assert_eq!(values(&log.gather(&live).unwrap()), vec![20, 3]);
    }

    #[test]
    fn a_log_asks_for_compaction_once_its_garbage_passes_its_live_rows() {
        let mut log = PaneLog::default();
        log.append(column(&vec![0; SLACK + 10]));
        log.release(SLACK + 4);
        assert!(
            !log.wants_compaction(),
            "6 live rows, the slack and 4 garbage rows"
        );
        log.release(2);
        assert!(log.wants_compaction());
    }
}
