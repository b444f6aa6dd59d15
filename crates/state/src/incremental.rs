//! Incremental checkpoints: a subtask's keyed state as a chain of Parquet
//! files, a full base and the deltas since, shared by the checkpoints that
//! need them.
//!
//! ```text
//! <run dir>/shared/<operator id>/<subtask>-<n>.parquet   written for checkpoint n
//! chk-5/_metadata: base 2-1.parquet, deltas [2-3, 2-4, 2-5]   (files of earlier checkpoints)
//! ```
//!
//! An operator says how its deltas combine ([`DeltaKind`]): rows that replace
//! the row with the same state key (or delete it, by [`DELETED_COLUMN`]), or
//! partial states that merge with what came before. Which snapshot to take
//! next ([`next_step`]), when to compact ([`compaction_due`]), and which
//! shared files no retained checkpoint needs any more
//! ([`shared_files_to_delete`]) are plain functions; the task and the
//! coordinator do the I/O.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BooleanArray, RecordBatch, UInt32Array, new_null_array,
};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use serde::{Deserialize, Serialize};

use crate::snapshot::concat_by_key_group;
use crate::{Error, Result};
use weir_common::ids::CheckpointId;

/// The last column of an upsert delta: true where the row deletes its key.
pub const DELETED_COLUMN: &str = "_deleted";

/// The column of a [`DeltaKind::Replace`] chain's files that says which
/// state key a row belongs to (binary, the operator's choice).
pub const STATE_KEY_COLUMN: &str = "_state_key";

/// The directory of shared (incremental) state files under a run directory,
/// as checkpoint metadata names it (relative to a `chk-<n>` directory).
pub const SHARED_DIR: &str = "shared";

/// How an operator's deltas combine with the state before them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeltaKind {
    /// A delta row replaces the row with the same state key (the first
    /// `key_columns` columns after `_key_group`), or deletes it when its
    /// [`DELETED_COLUMN`] is true.
    Upsert {
        /// Columns after `_key_group` that identify a state row.
        key_columns: usize,
    },
    /// Delta rows are partial states that the operator merges on restore
    /// (an aggregation's accumulators); nothing is replaced.
    Merge,
    /// Rows are grouped by their [`STATE_KEY_COLUMN`]: the newest file that
    /// has rows of a key holds all of them (a join's rows of one join key),
    /// or deletes the key when its row's [`DELETED_COLUMN`] is true.
    Replace,
}

/// The schema of an upsert delta of state rows of `schema`: every column
/// nullable except the key group and the state key, then [`DELETED_COLUMN`].
pub fn delta_schema(schema: &Schema, key_columns: usize) -> SchemaRef {
    let mut fields: Vec<Field> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let field = f.as_ref().clone();
            if i > key_columns {
                field.with_nullable(true)
            } else {
                field
            }
        })
        .collect();
    fields.push(Field::new(DELETED_COLUMN, DataType::Boolean, false));
    Arc::new(Schema::new(fields))
}

/// An upsert delta of state rows of `schema`: `changed` rows (of `schema`)
/// and the keys of `deleted` ones (`_key_group` and the state key columns;
/// the rest is written as nulls), sorted by key group.
pub fn upsert_delta(
    schema: &SchemaRef,
    changed: Option<RecordBatch>,
    deleted: Option<Vec<ArrayRef>>,
    key_columns: usize,
) -> Result<Option<RecordBatch>> {
    let delta = delta_schema(schema, key_columns);
    let mut batches = Vec::new();
    if let Some(rows) = changed.filter(|r| r.num_rows() > 0) {
        let mut columns = rows.columns().to_vec();
        columns.push(Arc::new(BooleanArray::from(vec![false; rows.num_rows()])));
        batches.push(RecordBatch::try_new(delta.clone(), columns)?);
    }
    if let Some(mut columns) = deleted.filter(|k| k.first().is_some_and(|c| !c.is_empty())) {
        let rows = columns[0].len();
        for field in &schema.fields()[columns.len()..] {
            columns.push(arrow::array::new_null_array(field.data_type(), rows));
        }
        columns.push(Arc::new(BooleanArray::from(vec![true; rows])));
        batches.push(RecordBatch::try_new(delta.clone(), columns)?);
    }
    concat_by_key_group(batches)
}

/// The state rows a chain of upsert files stands for: `files` in order (the
/// base first, it may lack [`DELETED_COLUMN`]); the last row of each state
/// key wins, deleted keys are left out. The result has the base's columns
/// (without [`DELETED_COLUMN`]), sorted by key group.
pub fn apply_upserts(files: Vec<RecordBatch>, key_columns: usize) -> Result<Option<RecordBatch>> {
    apply_newest(files, Some(key_columns))
}

/// Part of a file of a [`DeltaKind::Replace`] chain: state rows, their
/// state keys, and whether it deletes them (see [`replacement_rows`]).
pub type ReplacedPart = (RecordBatch, BinaryArray, bool);

/// One file of a [`DeltaKind::Replace`] chain from parts of state rows (each with its
/// state keys, and whether it deletes them): the state columns, then
/// [`STATE_KEY_COLUMN`], then (deltas) [`DELETED_COLUMN`]; sorted by key group.
pub fn replacement_rows(
    schema: &SchemaRef,
    parts: Vec<ReplacedPart>,
    full: bool,
) -> Result<Option<RecordBatch>> {
    if parts.is_empty() {
        return Ok(None);
    }
    let mut fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| f.as_ref().clone().with_nullable(!full || f.is_nullable()))
        .collect();
    fields[0] = fields[0].clone().with_nullable(false);
    fields.push(Field::new(STATE_KEY_COLUMN, DataType::Binary, false));
    if !full {
        fields.push(Field::new(DELETED_COLUMN, DataType::Boolean, false));
    }
    let file_schema = Arc::new(Schema::new(fields));
    let batches = parts
        .into_iter()
        .map(|(rows, keys, deleted)| {
            let n = rows.num_rows();
            let mut columns = rows.columns().to_vec();
            columns.push(Arc::new(keys));
            if !full {
                columns.push(Arc::new(BooleanArray::from(vec![deleted; n])));
            }
            Ok(RecordBatch::try_new(file_schema.clone(), columns)?)
        })
        .collect::<Result<Vec<_>>>()?;
    concat_by_key_group(batches)
}

/// A part that deletes `keys` (state keys, in `groups` key groups): the key
/// group, every other state column NULL.
pub fn deleted_part(schema: &SchemaRef, groups: UInt32Array, keys: BinaryArray) -> Result<ReplacedPart> {
    let n = keys.len();
    let nullable = Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ));
    let mut columns: Vec<ArrayRef> = vec![Arc::new(groups)];
    columns.extend(
        schema.fields()[1..]
            .iter()
            .map(|f| new_null_array(f.data_type(), n)),
    );
    Ok((RecordBatch::try_new(nullable, columns)?, keys, true))
}

/// The state rows of a chain of [`DeltaKind::Replace`] files: the rows of
/// each state key from the newest file that has any, deleted keys left out,
/// without [`STATE_KEY_COLUMN`] and [`DELETED_COLUMN`].
pub fn apply_replacements(files: Vec<RecordBatch>) -> Result<Option<RecordBatch>> {
    apply_newest(files, None)
}

/// The state key of each row of `file`: its first `key_columns` columns
/// after the key group, or (`None`) its [`STATE_KEY_COLUMN`].
fn row_keys(
    file: &RecordBatch,
    key_columns: Option<usize>,
    converter: Option<&RowConverter>,
) -> Result<Vec<Vec<u8>>> {
    match (key_columns, converter) {
        (Some(n), Some(converter)) => {
            let rows = converter.convert_columns(&file.columns()[1..1 + n])?;
            Ok(rows.iter().map(|r| r.as_ref().to_vec()).collect())
        }
        _ => {
            let keys = file
                .column_by_name(STATE_KEY_COLUMN)
                .and_then(|c| c.as_binary_opt::<i32>())
                .ok_or_else(|| {
                    Error::State(format!("a state file without a binary {STATE_KEY_COLUMN} column"))
                })?;
            Ok(keys.iter().map(|k| k.unwrap_or_default().to_vec()).collect())
        }
    }
}

fn apply_newest(files: Vec<RecordBatch>, key_columns: Option<usize>) -> Result<Option<RecordBatch>> {
    let files: Vec<RecordBatch> = files.into_iter().filter(|f| f.num_rows() > 0).collect();
    let Some(first) = files.first() else {
        return Ok(None);
    };
    let extra = [DELETED_COLUMN, STATE_KEY_COLUMN]
        .iter()
        .filter(|c| first.schema().column_with_name(c).is_some())
        .count();
    let width = first.num_columns() - extra;
    let schema = Arc::new(Schema::new(first.schema().fields()[..width].to_vec()));
    let converter = key_columns
        .map(|n| {
            let fields = schema.fields()[1..1 + n]
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect();
            RowConverter::new(fields)
        })
        .transpose()?;
    let keys = files
        .iter()
        .map(|f| row_keys(f, key_columns, converter.as_ref()))
        .collect::<Result<Vec<_>>>()?;
    // The newest file with rows of each key.
    let mut newest: HashMap<&[u8], usize> = HashMap::new();
    for (index, rows) in keys.iter().enumerate() {
        for key in rows {
            newest.insert(key.as_slice(), index);
        }
    }
    let mut parts = Vec::new();
    for (index, file) in files.iter().enumerate() {
        let deleted = file
            .column_by_name(DELETED_COLUMN)
            .map(|c| {
                c.as_boolean_opt()
                    .cloned()
                    .ok_or_else(|| Error::State(format!("{DELETED_COLUMN} is not boolean")))
            })
            .transpose()?;
        let rows: Vec<u32> = (0..file.num_rows())
            .filter(|&row| newest[keys[index][row].as_slice()] == index)
            .filter(|&row| !deleted.as_ref().is_some_and(|d| d.value(row)))
            .map(|row| row as u32)
            .collect();
        if rows.is_empty() {
            continue;
        }
        let rows = UInt32Array::from(rows);
        let columns = file.columns()[..width]
            .iter()
            .map(|c| Ok(arrow::compute::take(c.as_ref(), &rows, None)?))
            .collect::<Result<Vec<_>>>()?;
        parts.push(RecordBatch::try_new(schema.clone(), cast_to(&schema, columns)?)?);
    }
    concat_by_key_group(parts)
}

/// `columns` with the nullability of `schema` (a delta's columns are
/// nullable where the base's are not; the values are the same).
fn cast_to(schema: &SchemaRef, columns: Vec<ArrayRef>) -> Result<Vec<ArrayRef>> {
    columns
        .into_iter()
        .zip(schema.fields())
        .map(|(c, f)| {
            if c.data_type() == f.data_type() {
                Ok(c)
            } else {
                Ok(arrow::compute::cast(&c, f.data_type())?)
            }
        })
        .collect()
}

/// The state rows a chain of merge files stands for: all of them, in order
/// (the operator merges partial states of one key as it restores).
pub fn concat_merges(files: Vec<RecordBatch>) -> Result<Option<RecordBatch>> {
    let files: Vec<RecordBatch> = files.into_iter().filter(|f| f.num_rows() > 0).collect();
    let Some(first) = files.first() else {
        return Ok(None);
    };
    let schema = first.schema();
    let files = files
        .into_iter()
        .map(|f| {
            Ok(RecordBatch::try_new(
                schema.clone(),
                cast_to(&schema, f.columns().to_vec())?,
            )?)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(concat_batches(&schema, &files)?))
}

/// The state rows of a chain of files (base first) of an operator whose
/// deltas combine as `kind` (`None`: a single full snapshot).
pub fn combine(kind: Option<DeltaKind>, files: Vec<RecordBatch>) -> Result<Option<RecordBatch>> {
    match kind {
        Some(DeltaKind::Upsert { key_columns }) => apply_upserts(files, key_columns),
        Some(DeltaKind::Replace) => apply_replacements(files),
        Some(DeltaKind::Merge) | None => concat_merges(files),
    }
}

/// What a subtask's chain of one operator holds: whether it has a base, and
/// how many deltas follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChainShape {
    /// A full snapshot starts the chain.
    pub has_base: bool,
    /// Deltas after the base.
    pub deltas: usize,
    /// A write of the chain failed: its files cannot be trusted.
    pub broken: bool,
    /// Bytes of the base file (0 while it is written, or when empty).
    pub base_bytes: u64,
    /// Bytes of the newest delta (0 while it is written).
    pub last_delta_bytes: u64,
    /// The operator keeps its state with the spilling backend: it is never
    /// compacted (a compaction reads the whole state into memory), and a
    /// full snapshot (which reads it from the store, a batch at a time)
    /// follows `max_deltas` deltas instead.
    pub spilled: bool,
}

/// The snapshot an operator takes for the next checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Every row: a new base (the first checkpoint of a run or after a
    /// restore, after a failed write, or when compaction falls far behind).
    Full,
    /// Only what changed since the previous snapshot.
    Delta,
}

/// Which snapshot comes next. `max_deltas` bounds the chain: compaction
/// starts at `max_deltas` deltas, and a chain twice that long (compaction
/// has not kept up) starts again with a full snapshot, so a restore reads at
/// most `1 + 2 * max_deltas` files per subtask and operator. A delta half
/// the size of its base says most of the state changes between checkpoints:
/// deltas that large cost more to keep and compact than a full snapshot.
/// A chain of spilled state is not compacted: it starts again after
/// `max_deltas` deltas.
pub fn next_step(chain: ChainShape, max_deltas: usize) -> Step {
    // Below a megabyte, Parquet's own overhead makes sizes say little.
    const MIN_BASE_BYTES: u64 = 1 << 20;
    let dense = chain.base_bytes >= MIN_BASE_BYTES && chain.last_delta_bytes * 2 >= chain.base_bytes;
    let longest = match chain.spilled {
        true => max_deltas.max(1),
        false => 2 * max_deltas.max(1),
    };
    if !chain.has_base || chain.broken || dense || chain.deltas >= longest {
        Step::Full
    } else {
        Step::Delta
    }
}

/// Whether to start compacting the chain (its base and every delta so far)
/// into a new base in the background.
pub fn compaction_due(chain: ChainShape, max_deltas: usize, compacting: bool) -> bool {
    !compacting && !chain.spilled && !chain.broken && chain.has_base && chain.deltas >= max_deltas.max(1)
}

/// The name of the shared file subtask `subtask` writes for checkpoint `id`
/// (a compacted base is named by the checkpoint that first refers to it).
pub fn shared_file_name(subtask: usize, id: CheckpointId) -> String {
    format!("{subtask}-{id}.parquet")
}

/// The checkpoint a shared file was written for, from its name.
/// (`<subtask>-<n>.parquet`, or `<subtask>-<n>-compacted.parquet`; a
/// compaction's temporary file has none).
pub fn shared_file_checkpoint(name: &str) -> Option<CheckpointId> {
    let stem = name.strip_suffix(".parquet")?;
    let stem = stem.strip_suffix("-compacted").unwrap_or(stem);
    let (subtask, id) = stem.split_once('-')?;
    subtask.parse::<usize>().ok()?;
    id.parse().ok()
}

/// Which shared files to delete once checkpoint `completed` is complete:
/// those written for it or an earlier checkpoint (`files`: path and the
/// checkpoint it was written for) that no retained checkpoint refers to.
///
/// Safe because a subtask's chains only ever drop files: a checkpoint still
/// in flight refers to files of `completed`'s chains (retained) or to files
/// written after `completed`'s snapshot, whose numbers are higher.
pub fn shared_files_to_delete(
    files: &[(String, CheckpointId)],
    completed: CheckpointId,
    referenced: &HashSet<String>,
) -> Vec<String> {
    files
        .iter()
        .filter(|(path, id)| *id <= completed && !referenced.contains(path))
        .map(|(path, _)| path.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};

    fn state(rows: &[(u32, &str, i64)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("_key_group", DataType::UInt32, false),
            Field::new("k", DataType::Utf8, false),
            Field::new("v", DataType::Int64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap()
    }

    fn rows(batch: &RecordBatch) -> Vec<(u32, String, i64)> {
        let groups = batch.column(0).as_primitive::<arrow::datatypes::UInt32Type>();
        let keys = batch.column(1).as_string::<i32>();
        let values = batch.column(2).as_primitive::<arrow::datatypes::Int64Type>();
        let mut out: Vec<_> = (0..batch.num_rows())
            .map(|i| (groups.value(i), keys.value(i).to_string(), values.value(i)))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn the_newest_row_of_a_key_wins_and_a_deleted_key_is_gone() {
        let base = state(&[(1, "a", 1), (2, "b", 2), (3, "c", 3)]);
        let schema = base.schema();
        let gone = state(&[(2, "b", 0)]);
        let first = upsert_delta(
            &schema,
            Some(state(&[(1, "a", 10)])),
            Some(gone.columns()[..2].to_vec()),
            1,
        )
        .unwrap()
        .unwrap();
        assert_eq!(first.column(2).null_count(), 1, "a deleted key has no state");
        let second = upsert_delta(
            &schema,
            Some(state(&[(1, "a", 100), (2, "b", 20), (4, "d", 4)])),
            None,
            1,
        )
        .unwrap()
        .unwrap();
        let merged = apply_upserts(vec![base, first, second], 1).unwrap().unwrap();
        assert_eq!(merged.schema().fields().len(), 3, "no {DELETED_COLUMN} column");
        assert_eq!(
            rows(&merged),
            vec![
                (1, "a".into(), 100),
                (2, "b".into(), 20),
                (3, "c".into(), 3),
                (4, "d".into(), 4)
            ]
        );
        let key_groups = merged.column(0).as_primitive::<arrow::datatypes::UInt32Type>();
        assert!(
            key_groups.values().windows(2).all(|w| w[0] <= w[1]),
            "sorted by key group"
        );
    }

    #[test]
    fn a_key_deleted_after_its_last_update_is_left_out() {
        let base = state(&[(1, "a", 1)]);
        let gone = state(&[(1, "a", 0)]).columns()[..2].to_vec();
        let delta = upsert_delta(&base.schema(), None, Some(gone), 1)
            .unwrap()
            .unwrap();
        assert!(apply_upserts(vec![base, delta], 1).unwrap().is_none());
    }

    #[test]
    fn an_empty_delta_is_none() {
        assert!(
            upsert_delta(&state(&[]).schema(), None, None, 1)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn the_first_snapshot_a_broken_chain_and_a_runaway_chain_are_full() {
        let chain = |has_base, deltas, broken| ChainShape {
            has_base,
            deltas,
            broken,
            ..ChainShape::default()
        };
        assert_eq!(next_step(chain(false, 0, false), 4), Step::Full);
        assert_eq!(next_step(chain(true, 3, false), 4), Step::Delta);
        assert_eq!(next_step(chain(true, 7, false), 4), Step::Delta);
        assert_eq!(next_step(chain(true, 8, false), 4), Step::Full);
        assert_eq!(next_step(chain(true, 1, true), 4), Step::Full);
    }

    #[test]
    fn a_chain_of_spilled_state_is_never_compacted_and_starts_again_after_max_deltas() {
        let chain = |deltas| ChainShape {
            has_base: true,
            deltas,
            spilled: true,
            ..ChainShape::default()
        };
        assert_eq!(next_step(chain(3), 4), Step::Delta);
        assert_eq!(next_step(chain(4), 4), Step::Full);
        assert!(!compaction_due(chain(4), 4, false));
        let heap = ChainShape {
            spilled: false,
            ..chain(4)
        };
        assert!(compaction_due(heap, 4, false));
        assert_eq!(next_step(heap, 4), Step::Delta);
    }

    #[test]
    fn a_delta_half_the_size_of_its_base_is_followed_by_a_full_snapshot() {
        let chain = |base_bytes, last_delta_bytes| ChainShape {
            has_base: true,
            deltas: 1,
            broken: false,
            base_bytes,
            last_delta_bytes,
            spilled: false,
        };
        assert_eq!(next_step(chain(36_000_000, 400_000), 8), Step::Delta);
        assert_eq!(next_step(chain(36_000_000, 18_000_000), 8), Step::Full);
        assert_eq!(
            next_step(chain(0, 5_000), 8),
            Step::Delta,
            "an empty base says nothing"
        );
    }

    #[test]
    fn compaction_starts_at_max_deltas_once_at_a_time() {
        let chain = ChainShape {
            has_base: true,
            deltas: 4,
            ..ChainShape::default()
        };
        assert!(compaction_due(chain, 4, false));
        assert!(!compaction_due(chain, 4, true));
        assert!(!compaction_due(ChainShape { deltas: 3, ..chain }, 4, false));
    }

    #[test]
    fn shared_files_go_when_no_retained_checkpoint_refers_to_them_and_newer_ones_stay() {
        let files: Vec<(String, CheckpointId)> = [1, 2, 3, 4, 5]
            .iter()
            .map(|n| (format!("shared/op/0-{n}.parquet"), *n))
            .collect();
        // Checkpoint 4 completed: its chain is base 2 and delta 4; 3 was
        // compacted away; 5 is written for a checkpoint still in flight.
        let referenced: HashSet<String> = ["shared/op/0-2.parquet", "shared/op/0-4.parquet"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            shared_files_to_delete(&files, 4, &referenced),
            vec![
                "shared/op/0-1.parquet".to_string(),
                "shared/op/0-3.parquet".to_string()
            ]
        );
    }

    #[test]
    fn a_shared_file_name_gives_back_its_checkpoint() {
        assert_eq!(shared_file_checkpoint(&shared_file_name(3, 17)), Some(17));
        assert_eq!(shared_file_checkpoint("3-17-compacted.parquet"), Some(17));
        assert_eq!(shared_file_checkpoint("0-x.parquet"), None);
        assert_eq!(shared_file_checkpoint("0.2.compacting.parquet"), None);
    }
}
