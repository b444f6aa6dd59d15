//! Incremental snapshots of session windows: the sessions of the keys that changed since the last snapshot, as a replacing delta keyed by the session key.
//!
//! A key changes when a row enters one of its sessions (which may merge
//! some) and when one of them fires. The newest file of the chain that has
//! rows of a key holds all its open sessions, or deletes the key when none
//! is left ([`weir_state::incremental`], `DeltaKind::Replace`).

use arrow::array::{BinaryArray, RecordBatch, UInt32Array};

use crate::Result;
use crate::window::session::SessionOperator;
use weir_state::incremental::{ReplacedPart, deleted_part, replacement_rows};
use weir_state::snapshot::{key_groups_of_bytes, state_rows};

impl SessionOperator {
    /// Notes that `key`'s sessions changed (incremental checkpoints).
    pub(super) fn mark_changed(&mut self, key: &[u8]) {
        if let Some(changed) = self.changed.as_mut()
            && !changed.contains(key)
        {
            changed.insert(key.into());
        }
    }

    /// One file of a replacing chain: every key's sessions (`full`), or
    /// those of the keys changed since the last call and a deleting row for
    /// each changed key without sessions; `None` without rows.
    pub(super) fn delta(&mut self, full: bool) -> Result<Option<RecordBatch>> {
        let changed = self.changed.as_mut().map(std::mem::take).unwrap_or_default();
        let keys: Vec<Box<[u8]>> = match full {
            true => self.by_key.keys().cloned().collect(),
            false => changed.into_iter().collect(),
        };
        let parts = self.key_parts(&keys)?;
        replacement_rows(&self.state_schema()?, parts, full)
    }

    /// The parts of a replacing file for `keys`: the open sessions of those
    /// memory holds, each keyed by its key, and a deleting part for the
    /// others.
    pub(super) fn key_parts(&mut self, keys: &[Box<[u8]>]) -> Result<Vec<ReplacedPart>> {
        let (present, gone): (Vec<_>, Vec<_>) = keys.iter().partition(|k| self.by_key.contains_key(*k));
        let ids: Vec<usize> = present
            .iter()
            .flat_map(|k| self.by_key[*k].iter().copied())
            .collect();
        let schema = self.state_schema()?;
        let mut parts = Vec::new();
        if !ids.is_empty() {
            let state_keys = BinaryArray::from_iter_values(
                ids.iter()
                    .map(|id| self.sessions[*id].as_ref().expect("open session").key.to_vec()),
            );
            let columns = self.state_columns(&ids, true)?;
            parts.push((state_rows(&schema, columns)?, state_keys, false));
        }
        if !gone.is_empty() {
            let bytes: Vec<&[u8]> = gone.iter().map(|k| &k[..]).collect();
            parts.push(deleted_part(
                &schema,
                self.key_groups_of(&bytes)?,
                BinaryArray::from_iter_values(bytes),
            )?);
        }
        Ok(parts)
    }

    /// The key group of each key's bytes.
    pub(super) fn key_groups_of(&self, keys: &[&[u8]]) -> Result<UInt32Array> {
        match self.spec.key_schema.fields().is_empty() {
            true => Ok(UInt32Array::from(vec![0; keys.len()])),
            false => key_groups_of_bytes(&self.converter, keys, self.max_parallelism),
        }
    }
}
