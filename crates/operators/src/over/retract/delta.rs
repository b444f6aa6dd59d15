//! Incremental snapshots of an OVER aggregation over an updating input, on the heap: the kept rows of the partitions that changed since the last snapshot, as a replacing delta keyed by partition.
//!
//! A partition changes when a row is added to it or taken from it. The
//! newest file of the chain that has rows of a partition holds all its kept
//! rows, or deletes it when none is left ([`weir_state::incremental`],
//! `DeltaKind::Replace`).

use std::sync::Arc;

use arrow::array::{BinaryArray, RecordBatch, UInt32Array};

use crate::Result;
use crate::over::retract::RetractOverOperator;
use weir_state::incremental::{ReplacedPart, deleted_part, replacement_rows};
use weir_state::snapshot::{key_groups_of_bytes, state_rows};

impl RetractOverOperator {
    /// One file of a replacing chain: every kept row (`full`), or those of
    /// the partitions changed since the last call and a deleting row for
    /// each changed partition left without rows; `None` without rows.
    pub(super) fn delta(&mut self, full: bool) -> Result<Option<RecordBatch>> {
        let changed = self.changed.as_mut().map(std::mem::take).unwrap_or_default();
        let keys: Vec<Box<[u8]>> = match full {
            true => self.partitions.keys().cloned().collect(),
            false => changed.into_iter().collect(),
        };
        let parts = self.partition_parts(keys)?;
        replacement_rows(&self.state_schema(), parts, full)
    }

    /// The parts of a replacing file for the partitions of `keys`: the kept
    /// rows of those memory holds rows of, each keyed by its partition, and
    /// a deleting part for the others.
    pub(super) fn partition_parts(&self, keys: Vec<Box<[u8]>>) -> Result<Vec<ReplacedPart>> {
        let (present, gone): (Vec<_>, Vec<_>) =
            (keys.into_iter()).partition(|k| self.partitions.get(k).is_some_and(|rows| !rows.is_empty()));
        let schema = self.state_schema();
        let mut parts = Vec::new();
        let (mut kept, mut state_keys): (Vec<&Arc<[u8]>>, Vec<&[u8]>) = (Vec::new(), Vec::new());
        for key in &present {
            for place in self.partitions[key].keys() {
                kept.push(&place.1);
                state_keys.push(key);
            }
        }
        if let Some(columns) = self.kept_columns(&kept)? {
            let state_keys = BinaryArray::from_iter_values(state_keys);
            parts.push((state_rows(&schema, columns)?, state_keys, false));
        }
        if !gone.is_empty() {
            let bytes: Vec<&[u8]> = gone.iter().map(|k| &k[..]).collect();
            let groups = match self.spec.partition.is_empty() {
                true => UInt32Array::from(vec![0; bytes.len()]),
                false => key_groups_of_bytes(&self.keys_of, &bytes, self.max_parallelism)?,
            };
            parts.push(deleted_part(
                &schema,
                groups,
                BinaryArray::from_iter_values(bytes),
            )?);
        }
        Ok(parts)
    }
}
