//! `ChangelogNormalize`: an upsert stream (a row per key that replaces the
//! key's row, a delete naming only the key, as `upsert-kafka` reads them)
//! made a full changelog, as Flink's planner does after an upsert source:
//! the first row of a key is `+I`, a later one `-U old, +U new` (nothing
//! when it equals the old), a delete `-D old` (nothing for an unknown key).
//!
//! ```text
//!  Source: upsert-kafka [UA,D] ─HASH[key]─► ChangelogNormalize(key=[k]) [I,UB,UA,D]
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{OwnedRow, RowConverter, SortField};

use crate::Result;
use crate::changelog::{self, RowKind};
use crate::plan::changelog::ChangelogRole;
use crate::plan::spec::NodeSpec;
use crate::runtime::message::CheckpointId;
use crate::runtime::operator::OperatorSnapshot;
use crate::runtime::{Operator, OperatorFactory, Output, TaskContext};
use crate::state::snapshot::{KEY_GROUP_COLUMN, key_groups, schema_signature, sorted_state_rows};

/// What a change of a key does, given the row the key holds: the rows to
/// emit, and the row it holds after.
pub fn normalize<R: PartialEq + Clone>(
    held: Option<&R>,
    kind: RowKind,
    row: R,
) -> (Vec<(RowKind, R)>, Option<R>) {
    match (kind.is_retraction(), held) {
        (true, Some(old)) => (vec![(RowKind::Delete, old.clone())], None),
        (true, None) => (vec![], None),
        (false, Some(old)) if *old == row => (vec![], Some(row)),
        (false, Some(old)) => (
            vec![
                (RowKind::UpdateBefore, old.clone()),
                (RowKind::UpdateAfter, row.clone()),
            ],
            Some(row),
        ),
        (false, None) => (vec![(RowKind::Insert, row.clone())], Some(row)),
    }
}

/// `ChangelogNormalize(key=[...])`.
#[derive(Debug, Clone)]
pub struct ChangelogNormalize {
    /// The key's columns.
    pub key: Vec<usize>,
    /// Its input's and output's schema (with the op column).
    pub schema: SchemaRef,
}

impl ChangelogNormalize {
    fn data_schema(&self) -> SchemaRef {
        changelog::without_op(&self.schema)
    }

    /// `_key_group` and the row each key holds.
    fn state_schema(&self) -> SchemaRef {
        let mut fields = vec![Field::new(KEY_GROUP_COLUMN, DataType::UInt32, false)];
        fields.extend(self.data_schema().fields().iter().map(|f| f.as_ref().clone()));
        Arc::new(Schema::new(fields))
    }
}

impl OperatorFactory for ChangelogNormalize {
    fn describe(&self) -> String {
        let data = self.data_schema();
        let names: Vec<&str> = self.key.iter().map(|k| data.field(*k).name().as_str()).collect();
        format!("ChangelogNormalize(key=[{}])", names.join(", "))
    }

    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let data = self.data_schema();
        let fields = |columns: &mut dyn Iterator<Item = usize>| {
            RowConverter::new(
                columns
                    .map(|i| SortField::new(data.field(i).data_type().clone()))
                    .collect(),
            )
        };
        Ok(Box::new(NormalizeOperator {
            rows_of: fields(&mut (0..data.fields().len()))?,
            keys_of: fields(&mut self.key.iter().copied())?,
            held: HashMap::new(),
            max_parallelism: ctx.max_parallelism,
            spec: self.clone(),
        }))
    }

    fn changelog_role(&self) -> ChangelogRole {
        ChangelogRole::Retracting
    }

    fn spec(&self, _inputs: &[SchemaRef]) -> Result<NodeSpec> {
        Ok(NodeSpec::ChangelogNormalize {
            key: self.key.clone(),
        })
    }
}

struct NormalizeOperator {
    spec: ChangelogNormalize,
    rows_of: RowConverter,
    keys_of: RowConverter,
    /// The row each key holds.
    held: HashMap<OwnedRow, OwnedRow>,
    max_parallelism: usize,
}

impl NormalizeOperator {
    fn key_columns(&self, columns: &[ArrayRef]) -> Vec<ArrayRef> {
        self.spec.key.iter().map(|k| columns[*k].clone()).collect()
    }
}

impl Operator for NormalizeOperator {
    fn name(&self) -> String {
        self.spec.describe()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        let kinds = changelog::row_kinds(&batch)?;
        let data = changelog::data(&batch);
        let keys = self.keys_of.convert_columns(&self.key_columns(data.columns()))?;
        let rows = self.rows_of.convert_columns(data.columns())?;
        let (mut emitted, mut emitted_kinds) = (Vec::new(), Vec::new());
        for (i, kind) in kinds.into_iter().enumerate() {
            let key = keys.row(i).owned();
            let (changes, after) = normalize(self.held.get(&key), kind, rows.row(i).owned());
            for (kind, row) in changes {
                emitted_kinds.push(kind);
                emitted.push(row);
            }
            match after {
                Some(row) => self.held.insert(key, row),
                None => self.held.remove(&key),
            };
        }
        if emitted.is_empty() {
            return Ok(());
        }
        let columns = self.rows_of.convert_rows(emitted.iter().map(|r| r.row()))?;
        out.batch(changelog::with_kinds(&self.spec.schema, columns, &emitted_kinds)?);
        Ok(())
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        if self.held.is_empty() {
            return Ok(None);
        }
        let data = self.rows_of.convert_rows(self.held.values().map(|r| r.row()))?;
        let groups = key_groups(&self.key_columns(&data), self.held.len(), self.max_parallelism)?;
        let mut columns: Vec<ArrayRef> = vec![Arc::new(groups)];
        columns.extend(data);
        Ok(Some(OperatorSnapshot {
            runs: Vec::new(),
            deferred: Vec::new(),
            meta: serde_json::Value::Null,
            rows: Some(sorted_state_rows(&self.spec.state_schema(), columns)?),
        }))
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        let Some(rows) = &snapshot.rows else {
            return Ok(());
        };
        OperatorSnapshot::check_columns(rows, &self.spec.state_schema(), &self.spec.describe())?;
        let data = &rows.columns()[1..];
        let keys = self.keys_of.convert_columns(&self.key_columns(data))?;
        let stored = self.rows_of.convert_columns(data)?;
        for i in 0..rows.num_rows() {
            self.held.insert(keys.row(i).owned(), stored.row(i).owned());
        }
        Ok(())
    }

    fn state_signature(&self) -> Result<Option<String>> {
        Ok(Some(schema_signature(&self.spec.state_schema())))
    }

    fn is_keyed(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keys_first_row_inserts_a_new_one_updates_and_a_delete_deletes_the_held_row() {
        assert_eq!(
            normalize(None, RowKind::UpdateAfter, "a1"),
            (vec![(RowKind::Insert, "a1")], Some("a1"))
        );
        assert_eq!(
            normalize(Some(&"a1"), RowKind::UpdateAfter, "a2"),
            (
                vec![(RowKind::UpdateBefore, "a1"), (RowKind::UpdateAfter, "a2")],
                Some("a2")
            )
        );
        assert_eq!(
            normalize(Some(&"a2"), RowKind::Delete, "a-"),
            (vec![(RowKind::Delete, "a2")], None),
            "the held row is deleted, not the tombstone's"
        );
    }

    #[test]
    fn the_operator_normalizes_upserts_and_keeps_the_held_rows_across_a_restore() {
        use arrow::datatypes::Field;
        let schema = changelog::with_op(&Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Utf8, true),
        ])));
        let factory = Arc::new(ChangelogNormalize {
            key: vec![0],
            schema: schema.clone(),
        });
        let mut h = crate::operators::harness::Harness::for_operator(factory, vec![schema]).unwrap();
        assert_eq!(
            h.push("+U 1 a\n+U 2 b\n+U 1 c\n+U 1 c").unwrap(),
            vec!["+I 1 a", "+I 2 b", "-U 1 a", "+U 1 c"]
        );
        let snapshot = h.restart().unwrap().expect("state");
        assert_eq!(snapshot.rows.unwrap().num_rows(), 2);
        assert_eq!(
            h.push("-D 1 null\n-D 7 null\n+U 2 d").unwrap(),
            vec!["-D 1 c", "-U 2 b", "+U 2 d"]
        );
    }

    #[test]
    fn an_unchanged_row_and_a_delete_of_an_unknown_key_emit_nothing() {
        assert_eq!(
            normalize(Some(&"a1"), RowKind::UpdateAfter, "a1"),
            (vec![], Some("a1"))
        );
        assert_eq!(normalize::<&str>(None, RowKind::Delete, "a-"), (vec![], None));
    }
}
