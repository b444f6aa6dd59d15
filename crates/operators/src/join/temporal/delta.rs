//! Incremental snapshots of an event-time temporal join on the heap: the stream rows and versions that changed since the last snapshot, as a replacing delta.
//!
//! Two kinds of state key share the chain:
//! - stream rows by time, key group and join key (`0 | time | group | key`):
//!   a delta holds every waiting row of each time at which rows came, and a
//!   deleting row for each of those keys that fired and has no rows left
//!   (a late row waits for the next watermark, so a row at or before the
//!   watermark may still be waiting: fired rows are deleted, not inferred);
//! - a versioned key's versions (`1 | key`): every version of each key that
//!   got one or lost some to the watermark, and a deleting row for a key
//!   left without any.
//!
//! The newest file with rows of a state key holds them all
//! ([`weir_state::incremental`], `DeltaKind::Replace`).

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{AsArray, BinaryArray, Int8Array, RecordBatch, UInt32Array};
use arrow::datatypes::UInt32Type;

use crate::Result;
use crate::join::temporal::{Due, TemporalJoinOperator, key_groups_of_rows};
use weir_state::incremental::{ReplacedPart, deleted_part, replacement_rows};
use weir_state::snapshot::{key_groups_of_bytes, state_rows};

/// What changed since the last snapshot.
#[derive(Debug, Default)]
pub(super) struct Changed {
    /// Times at which stream rows came.
    pub times: HashSet<i64>,
    /// Stream rows fired: their time, key group and key.
    pub fired: HashSet<(i64, u32, Box<[u8]>)>,
    /// Versioned keys that got a version or lost some.
    pub keys: HashSet<Box<[u8]>>,
}

impl TemporalJoinOperator {
    /// Notes the state keys of the stream rows `due` fired.
    pub(super) fn mark_fired(&mut self, due: &Due) -> Result<()> {
        if self.changed.is_none() {
            return Ok(());
        }
        let parser = self.rows_of[0].parser();
        let rows = self.rows_of[0].convert_rows(due.iter().map(|(_, (_, row))| parser.parse(row)))?;
        let groups = key_groups_of_rows(&self.spec, 0, &rows, self.max_parallelism)?;
        let changed = self.changed.as_mut().expect("tracked");
        for ((time, (key, _)), group) in due.iter().zip(groups.values()) {
            changed.fired.insert((*time, *group, key.clone()));
        }
        Ok(())
    }

    /// One file of a replacing chain: all the state (`full`), or what
    /// changed since the last call; `None` without rows.
    pub(super) fn delta(&mut self, full: bool) -> Result<Option<RecordBatch>> {
        let changed = self.changed.as_mut().map(std::mem::take).unwrap_or_default();
        let mut parts = Vec::new();
        self.waiting_delta(full, &changed, &mut parts)?;
        self.versions_delta(full, changed.keys, &mut parts)?;
        replacement_rows(&self.spec.state_schema(), parts, full)
    }

    /// The stream rows' parts of [`TemporalJoinOperator::delta`].
    fn waiting_delta(&self, full: bool, changed: &Changed, parts: &mut Vec<ReplacedPart>) -> Result<()> {
        let times: Vec<_> = match full {
            true => self.waiting.iter().collect(),
            false => (changed.times.iter())
                .filter_map(|t| self.waiting.get_key_value(t))
                .collect(),
        };
        let keys: Vec<(i64, &[u8])> = (times.iter())
            .flat_map(|(t, rows)| rows.iter().map(|(k, _)| (**t, &k[..])))
            .collect();
        let mut present = HashSet::new();
        if let Some(columns) = self.waiting_state(times.into_iter())? {
            let groups = columns[0].as_primitive::<UInt32Type>();
            let state_keys: Vec<Vec<u8>> = (keys.iter().zip(groups.values()))
                .map(|((time, key), group)| waiting_key(*time, *group, key))
                .collect();
            present.extend(state_keys.iter().cloned());
            let schema = self.spec.state_schema();
            parts.push((
                state_rows(&schema, columns)?,
                BinaryArray::from_iter_values(state_keys),
                false,
            ));
        }
        let (groups, gone): (Vec<u32>, Vec<Vec<u8>>) = (changed.fired.iter())
            .map(|(time, group, key)| (*group, waiting_key(*time, *group, key)))
            .filter(|(_, state_key)| !present.contains(state_key))
            .unzip();
        // A base deletes nothing: it starts the chain.
        if !full && !gone.is_empty() {
            parts.push(self.deleted(0, UInt32Array::from(groups), gone)?);
        }
        Ok(())
    }

    /// The versions' parts of [`TemporalJoinOperator::delta`].
    fn versions_delta(
        &self,
        full: bool,
        changed: HashSet<Box<[u8]>>,
        parts: &mut Vec<ReplacedPart>,
    ) -> Result<()> {
        let keys: Vec<Box<[u8]>> = match full {
            true => self.versions.keys().map(|k| k[..].into()).collect(),
            false => changed.into_iter().collect(),
        };
        let (present, gone): (Vec<_>, Vec<_>) =
            (keys.into_iter()).partition(|k| self.versions.get(&k[..]).is_some_and(|v| !v.is_empty()));
        let of = present.iter().map(|k| &self.versions[&k[..]]);
        if let Some(columns) = self.versions_state(of)? {
            let state_keys: Vec<Vec<u8>> = (present.iter())
                .flat_map(|k| std::iter::repeat_n(versions_key(k), self.versions[&k[..]].iter().count()))
                .collect();
            let schema = self.spec.state_schema();
            parts.push((
                state_rows(&schema, columns)?,
                BinaryArray::from_iter_values(state_keys),
                false,
            ));
        }
        if !full && !gone.is_empty() {
            let bytes: Vec<&[u8]> = gone.iter().map(|k| &k[..]).collect();
            let groups = key_groups_of_bytes(&self.keys_of, &bytes, self.max_parallelism)?;
            parts.push(self.deleted(1, groups, gone.iter().map(|k| versions_key(k)).collect())?);
        }
        Ok(())
    }

    /// Deleting rows of `side` for `state_keys` in key groups `groups`.
    fn deleted(&self, side: i8, groups: UInt32Array, state_keys: Vec<Vec<u8>>) -> Result<ReplacedPart> {
        deleted_of(&self.spec.state_schema(), side, groups, state_keys)
    }
}

/// Deleting rows (state rows of `schema`) of `side` for `state_keys` in key
/// groups `groups`.
pub(super) fn deleted_of(
    schema: &arrow::datatypes::SchemaRef,
    side: i8,
    groups: UInt32Array,
    state_keys: Vec<Vec<u8>>,
) -> Result<ReplacedPart> {
    let n = state_keys.len();
    let keys = BinaryArray::from_iter_values(state_keys);
    let (rows, keys, deleted) = deleted_part(schema, groups, keys)?;
    // The side column says whose key goes.
    let mut columns = rows.columns().to_vec();
    columns[1] = Arc::new(Int8Array::from(vec![side; n]));
    Ok((RecordBatch::try_new(rows.schema(), columns)?, keys, deleted))
}

/// A stream row's state key: 0, its time, its key group, its join key.
pub(super) fn waiting_key(time: i64, group: u32, key: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(13 + key.len());
    bytes.push(0);
    bytes.extend_from_slice(&time.to_be_bytes());
    bytes.extend_from_slice(&group.to_be_bytes());
    bytes.extend_from_slice(key);
    bytes
}

/// A versioned key's state key: 1, then the key.
pub(super) fn versions_key(key: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(1 + key.len());
    bytes.push(1);
    bytes.extend_from_slice(key);
    bytes
}
