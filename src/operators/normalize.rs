//! `ChangelogNormalize`: an upsert stream (a row per key that replaces the
//! key's row, a delete naming only the key, as `upsert-kafka` reads them)
//! made a full changelog, as Flink's planner does after an upsert source:
//! the first row of a key is `+I`, a later one `-U old, +U new` (nothing
//! when it equals the old), a delete `-D old` (nothing for an unknown key).
//!
//! ```text
//!  Source: upsert-kafka [UA,D] ─HASH[key]─► ChangelogNormalize(key=[k]) [I,UB,UA,D]
//! ```

use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};

use crate::Result;
use crate::changelog::{self, RowKind};
use crate::runtime::message::CheckpointId;
use crate::runtime::operator::OperatorSnapshot;
use crate::runtime::{Operator, OperatorFactory, Output, TaskContext};
use crate::state::incremental::DeltaKind;
use crate::state::keyed_rows::{
    KeyedRows, columns_of, decode_state_rows, row_converter, rows_snapshot, state_rows_of,
};
use crate::state::snapshot::{KEY_GROUP_COLUMN, schema_signature};
use crate::state::store::{Entry, in_chunks};

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
    /// Its name in the plan (EXPLAIN's), for errors and logs.
    pub name: String,
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
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let data = self.data_schema();
        let key_types: Vec<DataType> = self
            .key
            .iter()
            .map(|k| data.field(*k).data_type().clone())
            .collect();
        Ok(Box::new(NormalizeOperator {
            rows_of: row_converter(&data)?,
            keys_of: RowConverter::new(key_types.iter().map(|t| SortField::new(t.clone())).collect())?,
            held: KeyedRows::new(
                &key_types,
                ctx.max_parallelism,
                ctx.spill.clone(),
                ctx.incremental,
            )?,
            max_parallelism: ctx.max_parallelism,
            spec: self.clone(),
        }))
    }

    fn can_spill(&self) -> bool {
        true
    }
}

struct NormalizeOperator {
    spec: ChangelogNormalize,
    rows_of: RowConverter,
    keys_of: RowConverter,
    /// The row each key holds (a list of at most one).
    held: KeyedRows,
    max_parallelism: usize,
}

impl NormalizeOperator {
    fn key_columns(&self, columns: &[ArrayRef]) -> Vec<ArrayRef> {
        self.spec.key.iter().map(|k| columns[*k].clone()).collect()
    }

    /// The held rows of spilled state as a snapshot, read by its writer.
    fn spilled_snapshot(&mut self) -> Result<OperatorSnapshot> {
        let (schema, rows_of) = (self.spec.state_schema(), row_converter(&self.spec.data_schema())?);
        let decode = move |entries: &[Entry]| -> Result<Option<RecordBatch>> {
            Ok(decode_state_rows(&schema, &rows_of, entries, false)?.map(|(rows, _)| rows))
        };
        Ok(OperatorSnapshot {
            runs: Vec::new(),
            deferred: self.held.spilled_snapshot(decode)?,
            meta: serde_json::Value::Null,
            rows: None,
        })
    }
}

impl Operator for NormalizeOperator {
    fn name(&self) -> String {
        self.spec.name.clone()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        let kinds = changelog::row_kinds(&batch)?;
        let data = changelog::data(&batch);
        let keys = self.keys_of.convert_columns(&self.key_columns(data.columns()))?;
        let rows = self.rows_of.convert_columns(data.columns())?;
        if self.held.has_spilled() {
            let list: Vec<&[u8]> = (0..data.num_rows()).map(|i| keys.row(i).data()).collect();
            self.held.load(&list)?;
        }
        let (mut emitted, mut emitted_kinds) = (Vec::new(), Vec::new());
        for (i, kind) in kinds.into_iter().enumerate() {
            let key = keys.row(i).data();
            let old = self.held.get(key).and_then(|rows| rows.first().cloned());
            let (changes, after) = normalize(old.as_ref(), kind, Box::from(rows.row(i).data()));
            for (kind, row) in changes {
                emitted_kinds.push(kind);
                emitted.push(row);
            }
            let held = self.held.rows_mut(key);
            held.clear();
            held.extend(after);
            self.held.settle(key);
        }
        if !emitted.is_empty() {
            let columns = columns_of(&self.rows_of, emitted.iter().map(|r| &r[..]))?;
            out.batch(changelog::with_kinds(&self.spec.schema, columns, &emitted_kinds)?);
        }
        self.held.spill_if_full(data.num_rows())
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        if self.held.has_spilled() {
            return self.spilled_snapshot().map(Some);
        }
        let held: Vec<(usize, &[u8])> = (self.held.iter())
            .flat_map(|(_, rows)| rows.iter().map(|r| (0, &r[..])))
            .collect();
        let of = (&self.rows_of, &self.spec.key[..]);
        let rows = state_rows_of(&self.spec.state_schema(), of, &held, self.max_parallelism, false)?;
        let rows = rows
            .map(crate::state::snapshot::sorted_by_key_group)
            .transpose()?;
        Ok(rows.map(|rows| rows_snapshot(Some(rows))))
    }

    fn delta_kind(&self) -> Option<DeltaKind> {
        self.held.is_incremental().then_some(DeltaKind::Replace)
    }

    /// Every key's row (`full`), or those of the keys changed since the
    /// last snapshot and a deleting row for each that holds none now.
    fn snapshot_delta(&mut self, checkpoint: CheckpointId, full: bool) -> Result<Option<OperatorSnapshot>> {
        if !self.held.is_incremental() {
            return self.snapshot(checkpoint);
        }
        let of = (&self.rows_of, &self.spec.key[..]);
        let snapshot = (self.held).snapshot_delta(full, &self.spec.state_schema(), of, false)?;
        Ok(Some(snapshot))
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        let Some(rows) = &snapshot.rows else {
            return Ok(());
        };
        OperatorSnapshot::check_columns(rows, &self.spec.state_schema(), &self.spec.name)?;
        // A key holds one row: none is in the store before its chunk.
        for chunk in in_chunks(rows) {
            let data = &chunk.columns()[1..];
            let keys = self.keys_of.convert_columns(&self.key_columns(data))?;
            let stored = self.rows_of.convert_columns(data)?;
            for i in 0..chunk.num_rows() {
                *self.held.rows_mut(keys.row(i).data()) = vec![Box::from(stored.row(i).data())];
            }
            self.held.spill_if_over()?;
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
            name: "ChangelogNormalize(key=[k])".into(),
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

    fn normalizer() -> crate::operators::harness::Harness {
        let schema = changelog::with_op(&Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Utf8, true),
        ])));
        let factory = Arc::new(ChangelogNormalize {
            key: vec![0],
            schema: schema.clone(),
            name: "ChangelogNormalize(key=[k])".into(),
        });
        crate::operators::harness::Harness::for_operator(factory, vec![schema]).unwrap()
    }

    /// Batches of upserts and deletes of 800 keys, some repeating the row
    /// the key holds, some deleting keys that hold none.
    fn upsert_steps(batches: usize) -> Vec<crate::operators::harness::Step> {
        (0..batches)
            .map(|b| {
                let lines: Vec<String> = (0..50)
                    .map(|r| {
                        let i = b * 50 + r;
                        let k = (i * 7919) % 800;
                        match i % 6 {
                            0 => format!("-D {k} null"),
                            _ => format!("+U {k} v{}", (i / 7) % 5),
                        }
                    })
                    .collect();
                crate::operators::harness::Step::Rows(0, lines.join("\n"))
            })
            .collect()
    }

    #[test]
    fn a_spilled_normalization_emits_the_changes_the_heap_emits() {
        use crate::operators::harness::{emitted, emitted_spilling};
        let steps = upsert_steps(60);
        let expected = emitted(&mut normalizer(), &steps);
        let lines: Vec<&String> = expected.iter().flatten().collect();
        for kind in ["+I", "-U", "-D"] {
            let n = lines.iter().filter(|l| l.starts_with(kind)).count();
            assert!(n > 100, "{n} {kind}");
        }
        for budget in [8 * 1024, 64 * 1024] {
            let got = emitted_spilling(&normalizer, &steps, budget, false);
            assert_eq!(got, expected, "at {budget} bytes");
        }
    }

    #[test]
    fn a_spilled_normalization_restores_as_if_never_stopped() {
        use crate::operators::harness::{
            spilled_restores_as_if_never_stopped, spilled_snapshot_holds_its_barrier,
        };
        spilled_restores_as_if_never_stopped(&normalizer, &upsert_steps(40));
        spilled_snapshot_holds_its_barrier(&normalizer, &upsert_steps(40));
    }

    #[test]
    fn an_incremental_normalization_snapshot_holds_the_keys_changed_since_the_last_one() {
        use crate::operators::harness::deletions;
        let mut h = normalizer().incremental().unwrap();
        h.push("+U 1 a\n+U 2 b\n+U 3 c").unwrap();
        assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 3);
        h.push("+U 1 d\n-D 2 null").unwrap();
        let delta = h.snapshot_delta(false).unwrap().expect("a delta");
        assert_eq!(
            deletions(&delta),
            vec![false, true],
            "1's row as it is now, 2 gone"
        );
        assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");
        h.restart_from_chain().unwrap();
        assert_eq!(
            h.push("+U 1 e\n+U 2 f\n-D 3 null").unwrap(),
            vec!["-U 1 d", "+U 1 e", "+I 2 f", "-D 3 c"]
        );
    }

    #[test]
    fn a_normalization_restored_from_an_incremental_chain_emits_what_it_would_have_on_either_backend() {
        use crate::operators::harness::{emitted, incremental_restores_as_if_never_stopped};
        let steps = upsert_steps(40);
        incremental_restores_as_if_never_stopped(&normalizer, &steps, 1);
        let dir = tempfile::tempdir().unwrap();
        let spilled = || normalizer().spilling(8 * 1024, dir.path()).unwrap();
        let mut first_half = spilled();
        emitted(&mut first_half, &steps[..20]);
        assert!(
            std::fs::read_dir(dir.path()).unwrap().count() > 0,
            "keys go to the store"
        );
        drop(first_half);
        incremental_restores_as_if_never_stopped(&spilled, &steps, 1);
    }
}
