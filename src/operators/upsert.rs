//! Changelogs made fit for a sink with a primary key, as Flink's planner
//! makes them: `DropUpdateBefore` when the input's changes are already keyed
//! by the primary key (the key says which row a `+U` replaces), and
//! `SinkMaterializer` when they are not (it keeps each key's rows and turns
//! the input's changes into changes of the row the key holds).
//!
//! ```text
//!  GroupAggregate(group=[a]) ─► DropUpdateBefore ─► Sink(PRIMARY KEY (a))       [I,UA,D]
//!  GroupAggregate(group=[a]) ─HASH[b]─► SinkMaterializer(pk=[b]) ─► Sink(PRIMARY KEY (b))
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BooleanArray, Int64Array};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
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

/// Drops the `-U` rows of a stream whose upsert key is the sink's primary key.
#[derive(Debug, Clone)]
pub struct DropUpdateBefore {
    /// The upsert key (output columns), which the sink's primary key is.
    pub key: Vec<usize>,
}

impl Operator for DropUpdateBefore {
    fn name(&self) -> String {
        "DropUpdateBefore".into()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        let Some(ops) = changelog::ops(&batch) else {
            out.batch(batch);
            return Ok(());
        };
        let keep: BooleanArray = ops
            .values()
            .iter()
            .map(|op| Some(*op != RowKind::UpdateBefore as i8))
            .collect();
        let kept = arrow::compute::filter_record_batch(&batch, &keep)?;
        if kept.num_rows() > 0 {
            out.batch(kept);
        }
        Ok(())
    }
}

impl OperatorFactory for DropUpdateBefore {
    fn describe(&self) -> String {
        "DropUpdateBefore".into()
    }

    fn create(&self, _ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(self.clone()))
    }

    fn changelog_role(&self) -> ChangelogRole {
        ChangelogRole::Upserting(self.key.clone())
    }

    fn spec(&self, _inputs: &[SchemaRef]) -> Result<NodeSpec> {
        Ok(NodeSpec::DropUpdateBefore {
            key: self.key.clone(),
        })
    }
}

/// Adds `row` (an `+I` or `+U` of its key) to the key's rows; the kind to
/// emit it with: `+I` for a key that had none, `+U` otherwise.
pub fn add_row<R>(rows: &mut Vec<R>, row: R) -> RowKind {
    let kind = if rows.is_empty() {
        RowKind::Insert
    } else {
        RowKind::UpdateAfter
    };
    rows.push(row);
    kind
}

/// Takes `row` (a `-U` or `-D`) away from its key's rows, the earliest
/// equal one. What to emit: `-D` of it when the key has no rows left, `+U`
/// of the row now last when it was the last one, nothing when it was an
/// older one (the key still holds the same row) or was not there.
pub fn retract_row<R: PartialEq + Clone>(rows: &mut Vec<R>, row: &R) -> Option<(RowKind, R)> {
    let at = rows.iter().position(|r| r == row)?;
    let removed = rows.remove(at);
    match rows.last() {
        None => Some((RowKind::Delete, removed)),
        Some(last) if at == rows.len() => Some((RowKind::UpdateAfter, last.clone())),
        Some(_) => None,
    }
}

/// `SinkMaterializer(pk=[...])`: the rows of each primary key, in arrival
/// order; the last one is what the sink holds for the key.
#[derive(Debug, Clone)]
pub struct SinkUpsertMaterializer {
    /// The primary key's columns.
    pub key: Vec<usize>,
    /// Its input's and output's schema (with the op column).
    pub schema: SchemaRef,
}

impl SinkUpsertMaterializer {
    fn data_schema(&self) -> SchemaRef {
        changelog::without_op(&self.schema)
    }

    /// `_key_group`, the row's columns, `_position` (its place among its
    /// key's rows).
    fn state_schema(&self) -> SchemaRef {
        let mut fields = vec![Field::new(KEY_GROUP_COLUMN, DataType::UInt32, false)];
        fields.extend(self.data_schema().fields().iter().map(|f| f.as_ref().clone()));
        fields.push(Field::new("_position", DataType::Int64, false));
        Arc::new(Schema::new(fields))
    }
}

impl OperatorFactory for SinkUpsertMaterializer {
    fn describe(&self) -> String {
        let data = self.data_schema();
        let names: Vec<&str> = self.key.iter().map(|k| data.field(*k).name().as_str()).collect();
        format!("SinkMaterializer(pk=[{}])", names.join(", "))
    }

    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let data = self.data_schema();
        let converter = |fields: Vec<SortField>| RowConverter::new(fields);
        Ok(Box::new(MaterializerOperator {
            rows_of: converter(
                data.fields()
                    .iter()
                    .map(|f| SortField::new(f.data_type().clone()))
                    .collect(),
            )?,
            keys_of: converter(
                self.key
                    .iter()
                    .map(|k| SortField::new(data.field(*k).data_type().clone()))
                    .collect(),
            )?,
            keys: HashMap::new(),
            max_parallelism: ctx.max_parallelism,
            spec: self.clone(),
        }))
    }

    fn changelog_role(&self) -> ChangelogRole {
        ChangelogRole::Upserting(self.key.clone())
    }

    fn spec(&self, _inputs: &[SchemaRef]) -> Result<NodeSpec> {
        Ok(NodeSpec::SinkMaterializer {
            key: self.key.clone(),
        })
    }
}

struct MaterializerOperator {
    spec: SinkUpsertMaterializer,
    /// Whole rows as comparable bytes.
    rows_of: RowConverter,
    /// Primary keys as bytes.
    keys_of: RowConverter,
    /// Each key's rows, oldest first.
    keys: HashMap<OwnedRow, Vec<OwnedRow>>,
    max_parallelism: usize,
}

impl MaterializerOperator {
    fn key_columns(&self, columns: &[ArrayRef]) -> Vec<ArrayRef> {
        self.spec.key.iter().map(|k| columns[*k].clone()).collect()
    }
}

impl Operator for MaterializerOperator {
    fn name(&self) -> String {
        self.spec.describe()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        let kinds = changelog::row_kinds(&batch)?;
        let data = changelog::data(&batch);
        let keys = self.keys_of.convert_columns(&self.key_columns(data.columns()))?;
        let rows = self.rows_of.convert_columns(data.columns())?;
        let mut emitted: Vec<OwnedRow> = Vec::new();
        let mut emitted_kinds = Vec::new();
        for (i, kind) in kinds.into_iter().enumerate() {
            let row = rows.row(i).owned();
            if kind.is_retraction() {
                let key = keys.row(i).owned();
                let Some(list) = self.keys.get_mut(&key) else {
                    continue;
                };
                if let Some((kind, row)) = retract_row(list, &row) {
                    emitted.push(row);
                    emitted_kinds.push(kind);
                }
                if list.is_empty() {
                    self.keys.remove(&key);
                }
            } else {
                let list = self.keys.entry(keys.row(i).owned()).or_default();
                emitted_kinds.push(add_row(list, row.clone()));
                emitted.push(row);
            }
        }
        if emitted.is_empty() {
            return Ok(());
        }
        let columns = self.rows_of.convert_rows(emitted.iter().map(|r| r.row()))?;
        out.batch(changelog::with_kinds(&self.spec.schema, columns, &emitted_kinds)?);
        Ok(())
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        let stored: Vec<(usize, &OwnedRow)> = self
            .keys
            .values()
            .flat_map(|list| list.iter().enumerate())
            .collect();
        if stored.is_empty() {
            return Ok(None);
        }
        let data = self.rows_of.convert_rows(stored.iter().map(|(_, r)| r.row()))?;
        let groups = key_groups(&self.key_columns(&data), stored.len(), self.max_parallelism)?;
        let mut columns: Vec<ArrayRef> = vec![Arc::new(groups)];
        columns.extend(data);
        columns.push(Arc::new(Int64Array::from_iter_values(
            stored.iter().map(|(p, _)| *p as i64),
        )));
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
        let name = self.spec.describe();
        OperatorSnapshot::check_columns(rows, &self.spec.state_schema(), &name)?;
        let width = rows.num_columns();
        let data = &rows.columns()[1..width - 1];
        let positions = rows.column(width - 1).as_primitive::<Int64Type>();
        let keys = self.keys_of.convert_columns(&self.key_columns(data))?;
        let stored = self.rows_of.convert_columns(data)?;
        let mut placed: HashMap<OwnedRow, Vec<(i64, OwnedRow)>> = HashMap::new();
        for i in 0..rows.num_rows() {
            placed
                .entry(keys.row(i).owned())
                .or_default()
                .push((positions.value(i), stored.row(i).owned()));
        }
        for (key, mut list) in placed {
            list.sort_by_key(|(p, _)| *p);
            self.keys
                .entry(key)
                .or_default()
                .extend(list.into_iter().map(|(_, r)| r));
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
    fn the_first_row_of_a_key_is_inserted_and_later_ones_update_it() {
        let mut rows = Vec::new();
        assert_eq!(add_row(&mut rows, "a"), RowKind::Insert);
        assert_eq!(add_row(&mut rows, "b"), RowKind::UpdateAfter);
    }

    #[test]
    fn retracting_the_last_row_updates_to_the_one_before_and_the_only_row_deletes() {
        let mut rows = vec!["a", "b", "c"];
        assert_eq!(retract_row(&mut rows, &"c"), Some((RowKind::UpdateAfter, "b")));
        assert_eq!(
            retract_row(&mut rows, &"a"),
            None,
            "an older row: the key still holds b"
        );
        assert_eq!(retract_row(&mut rows, &"b"), Some((RowKind::Delete, "b")));
        assert!(rows.is_empty());
    }

    #[test]
    fn retracting_a_row_that_is_not_there_emits_nothing() {
        let mut rows = vec!["a"];
        assert_eq!(retract_row(&mut rows, &"z"), None);
        assert_eq!(rows, vec!["a"]);
    }

    const SETUP: &[&str] = &[
        "CREATE TABLE t (k STRING, v BIGINT) WITH ('connector' = 'datagen')",
        "CREATE TABLE by_v (v BIGINT, k STRING, PRIMARY KEY (v) NOT ENFORCED) WITH ('connector' = 'blackhole')",
        "CREATE TABLE by_k (k STRING, v BIGINT, PRIMARY KEY (k) NOT ENFORCED) WITH ('connector' = 'blackhole')",
    ];

    fn lines(expected: &[&str]) -> Vec<String> {
        expected.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_materializer_keeps_each_keys_rows_across_a_restore() {
        let mut h = crate::operators::harness::Harness::of(
            SETUP,
            "INSERT INTO by_v SELECT SUM(v), k FROM t GROUP BY k",
            "SinkMaterializer",
            0,
        )
        .unwrap();
        // Rows are (v, k): two groups whose sums are both 5 share the key 5.
        assert_eq!(h.push("+I 5 a\n+I 5 b").unwrap(), lines(&["+I 5 a", "+U 5 b"]));
        let snapshot = h.restart().unwrap().expect("state");
        assert_eq!(snapshot.rows.unwrap().num_rows(), 2);
        assert_eq!(h.push("-U 5 b\n+U 7 b").unwrap(), lines(&["+U 5 a", "+I 7 b"]));
        assert_eq!(h.push("-U 5 a").unwrap(), lines(&["-D 5 a"]));
    }

    #[test]
    fn drop_update_before_keeps_everything_but_update_befores() {
        let mut h = crate::operators::harness::Harness::of(
            SETUP,
            "INSERT INTO by_k SELECT k, SUM(v) FROM t GROUP BY k",
            "DropUpdateBefore",
            0,
        )
        .unwrap();
        assert_eq!(
            h.push("+I a 1\n-U a 1\n+U a 2\n-D a 2").unwrap(),
            lines(&["+I a 1", "+U a 2", "-D a 2"])
        );
    }
}
