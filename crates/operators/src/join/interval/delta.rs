//! Incremental snapshots of an interval join on the heap: the kept rows of the keys that changed since the last snapshot, as a replacing delta keyed by side and key.
//!
//! A side's key changes when a row is kept under it, when one of its rows
//! first joins (an outer side's row is padded at expiry only if it never
//! joined), and when rows expire. The newest file of the chain that has
//! rows of a side's key holds all its kept rows, or deletes it when none is
//! left ([`weir_state::incremental`], `DeltaKind::Replace`).

use std::sync::Arc;

use arrow::array::{BinaryArray, RecordBatch};

use crate::Result;
use crate::join::interval::IntervalJoinOperator;
use weir_state::incremental::{ReplacedPart, deleted_part, replacement_rows};
use weir_state::snapshot::{key_groups_of_bytes, state_rows};

impl IntervalJoinOperator {
    /// One file of a replacing chain: every kept row (`full`), or those of
    /// the keys changed since the last call and a deleting row for each
    /// changed key left without rows; `None` without rows.
    pub(super) fn delta(&mut self, full: bool) -> Result<Option<RecordBatch>> {
        let mut parts = Vec::new();
        for side in 0..2 {
            self.side_delta(side, full, &mut parts)?;
        }
        replacement_rows(&self.spec.state_schema(), parts, full)
    }

    /// [`IntervalJoinOperator::delta`]'s parts of one side, added to `parts`.
    fn side_delta(&mut self, side: usize, full: bool, parts: &mut Vec<ReplacedPart>) -> Result<()> {
        let changed = self.sides[side].changed.as_mut().map(std::mem::take);
        let keys: Vec<Arc<[u8]>> = match full {
            true => self.sides[side].keys.keys().cloned().collect(),
            false => changed.unwrap_or_default().into_iter().collect(),
        };
        let state = &self.sides[side];
        let (present, gone): (Vec<_>, Vec<_>) = keys.iter().partition(|k| state.keys.contains_key(&k[..]));
        let schema = self.spec.state_schema();
        let of = present.iter().map(|k| &state.keys[&k[..]]);
        if let Some(columns) = self.rows_state(side, of)? {
            // One state key per kept row, in the order rows_state gives them.
            let state_keys: Vec<Vec<u8>> = present
                .iter()
                .flat_map(|k| std::iter::repeat_n(state_key(side, k), state.keys[&k[..]].iter().count()))
                .collect();
            let state_keys = BinaryArray::from_iter_values(state_keys);
            parts.push((state_rows(&schema, columns)?, state_keys, false));
        }
        if !gone.is_empty() {
            let bytes: Vec<&[u8]> = gone.iter().map(|k| &k[..]).collect();
            let groups = key_groups_of_bytes(&self.keys_of, &bytes, self.max_parallelism)?;
            let state_keys = BinaryArray::from_iter_values(gone.iter().map(|k| state_key(side, k)));
            parts.push(deleted_part(&schema, groups, state_keys)?);
        }
        Ok(())
    }
}

/// A side's key as the chain knows it: the side, then the key's bytes.
fn state_key(side: usize, key: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(key.len() + 1);
    bytes.push(side as u8);
    bytes.extend_from_slice(key);
    bytes
}
