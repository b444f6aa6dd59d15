//! Incremental snapshots of a window join on the heap: the rows that joined their windows since the last snapshot, as a merging delta.
//!
//! Rows only ever join a window until it fires, and then all of them go,
//! so a delta is the rows added since the last snapshot; a restore reads
//! the base and every delta after it and drops the rows of windows its
//! watermark says have fired ([`weir_state::incremental`],
//! `DeltaKind::Merge`).

use std::collections::HashMap;

use arrow::record_batch::RecordBatch;

use crate::Result;
use crate::join::window::WindowJoinOperator;
use weir_state::snapshot::sorted_state_rows;

impl WindowJoinOperator {
    /// One file of a merging chain: every waiting row (`full`), or those
    /// that came since the last call; `None` without rows.
    pub(super) fn delta(&mut self, full: bool) -> Result<Option<RecordBatch>> {
        let saved = match full {
            true => HashMap::new(),
            false => self.saved.take().unwrap_or_default(),
        };
        let from = |end: i64, side: usize| saved.get(&end).map_or(0, |n| n[side]);
        let sides = [
            self.side_state_from(0, |end| from(end, 0))?,
            self.side_state_from(1, |end| from(end, 1))?,
        ];
        // From now on the snapshots hold every row waiting (the windows
        // that fired are left out).
        let now = (self.windows.iter())
            .map(|(end, w)| (*end, [w[0].len(), w[1].len()]))
            .collect();
        self.saved = Some(now);
        let columns = crate::join::concat_sides(sides)?;
        columns
            .map(|c| sorted_state_rows(&self.spec.state_schema(), c))
            .transpose()
    }
}
