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

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray};
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
    fn create(&self, _ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(self.clone()))
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
    /// Its name in the plan (EXPLAIN's), for errors and logs.
    pub name: String,
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
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let data = self.data_schema();
        let key_types: Vec<DataType> = self
            .key
            .iter()
            .map(|k| data.field(*k).data_type().clone())
            .collect();
        Ok(Box::new(MaterializerOperator {
            rows_of: row_converter(&data)?,
            keys_of: RowConverter::new(key_types.iter().map(|t| SortField::new(t.clone())).collect())?,
            keys: KeyedRows::new(
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

struct MaterializerOperator {
    spec: SinkUpsertMaterializer,
    /// Whole rows as comparable bytes.
    rows_of: RowConverter,
    /// Primary keys as bytes.
    keys_of: RowConverter,
    /// Each key's rows, oldest first.
    keys: KeyedRows,
    max_parallelism: usize,
}

impl MaterializerOperator {
    fn key_columns(&self, columns: &[ArrayRef]) -> Vec<ArrayRef> {
        self.spec.key.iter().map(|k| columns[*k].clone()).collect()
    }

    /// The keys' rows of spilled state as a snapshot, read by its writer.
    fn spilled_snapshot(&mut self) -> Result<OperatorSnapshot> {
        let (schema, rows_of) = (self.spec.state_schema(), row_converter(&self.spec.data_schema())?);
        let decode = move |entries: &[Entry]| -> Result<Option<RecordBatch>> {
            Ok(decode_state_rows(&schema, &rows_of, entries, true)?.map(|(rows, _)| rows))
        };
        Ok(OperatorSnapshot {
            runs: Vec::new(),
            deferred: self.keys.spilled_snapshot(decode)?,
            meta: serde_json::Value::Null,
            rows: None,
        })
    }
}

impl Operator for MaterializerOperator {
    fn name(&self) -> String {
        self.spec.name.clone()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        let kinds = changelog::row_kinds(&batch)?;
        let data = changelog::data(&batch);
        let keys = self.keys_of.convert_columns(&self.key_columns(data.columns()))?;
        let rows = self.rows_of.convert_columns(data.columns())?;
        if self.keys.has_spilled() {
            let list: Vec<&[u8]> = (0..data.num_rows()).map(|i| keys.row(i).data()).collect();
            self.keys.load(&list)?;
        }
        let mut emitted: Vec<Box<[u8]>> = Vec::new();
        let mut emitted_kinds = Vec::new();
        for (i, kind) in kinds.into_iter().enumerate() {
            let (key, row): (&[u8], Box<[u8]>) = (keys.row(i).data(), rows.row(i).data().into());
            if kind.is_retraction() {
                if self.keys.get(key).is_none() {
                    continue;
                }
                if let Some((kind, row)) = retract_row(self.keys.rows_mut(key), &row) {
                    emitted.push(row);
                    emitted_kinds.push(kind);
                }
            } else {
                emitted_kinds.push(add_row(self.keys.rows_mut(key), row.clone()));
                emitted.push(row);
            }
            self.keys.settle(key);
        }
        if !emitted.is_empty() {
            let columns = columns_of(&self.rows_of, emitted.iter().map(|r| &r[..]))?;
            out.batch(changelog::with_kinds(&self.spec.schema, columns, &emitted_kinds)?);
        }
        self.keys.spill_if_full(data.num_rows())
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        if self.keys.has_spilled() {
            return self.spilled_snapshot().map(Some);
        }
        let stored: Vec<(usize, &[u8])> = (self.keys.iter())
            .flat_map(|(_, list)| list.iter().map(|r| &r[..]).enumerate())
            .collect();
        let of = (&self.rows_of, &self.spec.key[..]);
        let rows = state_rows_of(&self.spec.state_schema(), of, &stored, self.max_parallelism, true)?;
        let rows = rows
            .map(crate::state::snapshot::sorted_by_key_group)
            .transpose()?;
        Ok(rows.map(|rows| rows_snapshot(Some(rows))))
    }

    fn delta_kind(&self) -> Option<DeltaKind> {
        self.keys.is_incremental().then_some(DeltaKind::Replace)
    }

    /// Every key's rows (`full`), or those of the keys changed since the
    /// last snapshot and a deleting row for each that has none now.
    fn snapshot_delta(&mut self, checkpoint: CheckpointId, full: bool) -> Result<Option<OperatorSnapshot>> {
        if !self.keys.is_incremental() {
            return self.snapshot(checkpoint);
        }
        let of = (&self.rows_of, &self.spec.key[..]);
        let snapshot = (self.keys).snapshot_delta(full, &self.spec.state_schema(), of, true)?;
        Ok(Some(snapshot))
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        let Some(rows) = &snapshot.rows else {
            return Ok(());
        };
        let name = self.spec.name.clone();
        OperatorSnapshot::check_columns(rows, &self.spec.state_schema(), &name)?;
        // In order of key group and position: a key's rows in their order,
        // a chunk at a time (the rows before a chunk may be in the store).
        let width = rows.num_columns();
        let sort = |i: usize| arrow::compute::SortColumn {
            values: rows.column(i).clone(),
            options: None,
        };
        let order = arrow::compute::lexsort_to_indices(&[sort(0), sort(width - 1)], None)?;
        let rows = arrow::compute::take_record_batch(rows, &order)?;
        for chunk in in_chunks(&rows) {
            let data = &chunk.columns()[1..width - 1];
            let keys = self.keys_of.convert_columns(&self.key_columns(data))?;
            let stored = self.rows_of.convert_columns(data)?;
            let list: Vec<&[u8]> = (0..chunk.num_rows()).map(|i| keys.row(i).data()).collect();
            self.keys.load(&list)?;
            for (i, key) in list.iter().enumerate() {
                self.keys.rows_mut(key).push(stored.row(i).data().into());
            }
            self.keys.spill_if_over()?;
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

    fn materializer() -> crate::operators::harness::Harness {
        crate::operators::harness::Harness::of(
            SETUP,
            "INSERT INTO by_v SELECT SUM(v), k FROM t GROUP BY k",
            "SinkMaterializer",
            0,
        )
        .unwrap()
    }

    /// Batches of a GROUP BY's changes of 600 groups whose sums (the sink's
    /// key) fall among 450 values: a key holds one group's row or several,
    /// which come, change and go (and a key's last row goes often).
    fn materializer_steps(batches: usize) -> Vec<crate::operators::harness::Step> {
        let mut sums: Vec<Option<usize>> = vec![None; 600];
        let mut steps = Vec::new();
        for b in 0..batches {
            let mut lines = Vec::new();
            for r in 0..40 {
                let i = b * 40 + r;
                let g = (i * 7919) % 600;
                let new = (i * 17) % 450;
                match (sums[g].take(), i % 7) {
                    (None, _) => {
                        lines.push(format!("+I {new} g{g}"));
                        sums[g] = Some(new);
                    }
                    (Some(old), 0) => lines.push(format!("-D {old} g{g}")),
                    (Some(old), _) => {
                        lines.push(format!("-U {old} g{g}"));
                        lines.push(format!("+U {new} g{g}"));
                        sums[g] = Some(new);
                    }
                }
            }
            steps.push(crate::operators::harness::Step::Rows(0, lines.join("\n")));
        }
        steps
    }

    #[test]
    fn a_spilled_materializer_emits_the_changes_the_heap_emits() {
        use crate::operators::harness::{emitted, emitted_spilling};
        let steps = materializer_steps(60);
        let expected = emitted(&mut materializer(), &steps);
        for kind in ["+U", "-D"] {
            let n = expected.iter().flatten().filter(|l| l.starts_with(kind)).count();
            assert!(n > 100, "{n} {kind}: a key's row replaced, a key's last row gone");
        }
        for budget in [8 * 1024, 64 * 1024] {
            let got = emitted_spilling(&materializer, &steps, budget, false);
            assert_eq!(got, expected, "at {budget} bytes");
        }
    }

    #[test]
    fn a_spilled_materializer_restores_as_if_never_stopped() {
        use crate::operators::harness::{
            spilled_restores_as_if_never_stopped, spilled_snapshot_holds_its_barrier,
        };
        spilled_restores_as_if_never_stopped(&materializer, &materializer_steps(40));
        spilled_snapshot_holds_its_barrier(&materializer, &materializer_steps(40));
    }

    #[test]
    fn a_materializer_restores_a_keys_rows_in_their_order_from_rows_in_any_order() {
        use crate::operators::harness::emitted;
        let steps = materializer_steps(40);
        let (before, after) = steps.split_at(20);
        let mut heap = materializer();
        emitted(&mut heap, before);
        let mut snapshot = heap.snapshot_only().unwrap().expect("state");
        let expected = emitted(&mut heap, after);
        let kept = snapshot.rows.take().expect("rows");
        let reversed = arrow::array::UInt32Array::from_iter_values((0..kept.num_rows() as u32).rev());
        snapshot.rows = Some(arrow::compute::take_record_batch(&kept, &reversed).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let mut h = materializer().spilling(8 * 1024, dir.path()).unwrap();
        h.restart_from(snapshot).unwrap();
        assert_eq!(emitted(&mut h, after), expected);
    }

    #[test]
    fn an_incremental_materializer_snapshot_holds_the_keys_changed_since_the_last_one() {
        use crate::operators::harness::deletions;
        let mut h = materializer().incremental().unwrap();
        // Rows are (v, k), keyed by v: key 5 holds a's and b's rows.
        h.push("+I 5 a\n+I 5 b\n+I 7 c").unwrap();
        assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 3);
        h.push("-U 7 c\n+U 5 c").unwrap();
        let delta = h.snapshot_delta(false).unwrap().expect("a delta");
        assert_eq!(
            deletions(&delta),
            vec![false, false, false, true],
            "key 5's three rows, key 7 gone"
        );
        assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");
        h.restart_from_chain().unwrap();
        assert_eq!(
            h.push("-U 5 c").unwrap(),
            lines(&["+U 5 b"]),
            "b's row is key 5's again"
        );
        assert_eq!(
            h.push("+I 7 d").unwrap(),
            lines(&["+I 7 d"]),
            "key 7 starts empty"
        );
    }

    #[test]
    fn a_materializer_restored_from_an_incremental_chain_emits_what_it_would_have() {
        crate::operators::harness::incremental_restores_as_if_never_stopped(
            &materializer,
            &materializer_steps(40),
            1,
        );
    }

    #[test]
    fn a_spilled_materializer_restored_from_an_incremental_chain_emits_what_it_would_have() {
        use crate::operators::harness::{emitted, incremental_restores_as_if_never_stopped};
        let dir = tempfile::tempdir().unwrap();
        let steps = materializer_steps(40);
        let spilled = || materializer().spilling(8 * 1024, dir.path()).unwrap();
        let mut first_half = spilled();
        emitted(&mut first_half, &steps[..20]);
        assert!(
            std::fs::read_dir(dir.path()).unwrap().count() > 0,
            "keys go to the store"
        );
        drop(first_half);
        incremental_restores_as_if_never_stopped(&spilled, &steps, 1);
    }

    #[test]
    fn incremental_snapshots_of_a_spilled_materializer_hold_the_keys_changed_in_memory_and_in_the_store() {
        use crate::operators::harness::deletions;
        let dir = tempfile::tempdir().unwrap();
        let mut h = materializer()
            .incremental()
            .unwrap()
            .spilling(8 * 1024, dir.path())
            .unwrap();
        let first: Vec<String> = (0..600).map(|k| format!("+I {k} a{k}")).collect();
        h.push(&first.join("\n")).unwrap();
        assert!(
            std::fs::read_dir(dir.path()).unwrap().count() > 0,
            "keys went to the store"
        );
        assert_eq!(h.snapshot_delta(true).unwrap().expect("a base").num_rows(), 600);
        // Key 5 gets a second row and goes to the store again with 300 new
        // keys; key 6's only row goes (its entry is removed at the next
        // spill: here, none), key 7 gets a second row in memory.
        h.push("+I 5 b5").unwrap();
        let new: Vec<String> = (0..300).map(|k| format!("+I {} n{k}", 1000 + k)).collect();
        h.push(&new.join("\n")).unwrap();
        h.push("-D 6 a6\n+I 7 b7").unwrap();
        let delta = h.snapshot_delta(false).unwrap().expect("a delta");
        let deleted = deletions(&delta);
        assert_eq!(
            deleted.len(),
            305,
            "two rows of 5 and of 7, 300 new keys, 6 deleted"
        );
        assert_eq!(deleted.iter().filter(|d| **d).count(), 1, "key 6 deleted");
        assert!(h.snapshot_delta(false).unwrap().is_none(), "nothing since");
        h.restart_from_chain().unwrap();
        assert_eq!(
            h.push("-D 5 b5").unwrap(),
            lines(&["+U 5 a5"]),
            "key 5's rows from the delta"
        );
        assert_eq!(
            h.push("+I 6 c6").unwrap(),
            lines(&["+I 6 c6"]),
            "key 6 starts empty"
        );
        assert_eq!(
            h.push("-D 7 b7").unwrap(),
            lines(&["+U 7 a7"]),
            "key 7's rows from memory's part"
        );
        assert_eq!(
            h.push("-D 8 a8").unwrap(),
            lines(&["-D 8 a8"]),
            "key 8 from the base"
        );
    }
}
