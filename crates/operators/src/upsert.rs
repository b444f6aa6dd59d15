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

use arrow::array::BooleanArray;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::Result;
use crate::keyed_lists::{ChangeOfKey, KeyedListsOperator};
use weir_common::changelog::{self, RowKind};
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};
use weir_state::keyed_rows::KeyedRows;

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

impl OperatorFactory for SinkUpsertMaterializer {
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let operator = KeyedListsOperator::<Materialize>::new(&self.name, &self.key, &self.schema, ctx)?;
        Ok(Box::new(operator))
    }

    fn can_spill(&self) -> bool {
        true
    }
}

/// Each key holds its rows in arrival order, see [`add_row`] and
/// [`retract_row`].
struct Materialize;

impl ChangeOfKey for Materialize {
    const POSITIONED: bool = true;

    fn apply(
        lists: &mut KeyedRows,
        key: &[u8],
        kind: RowKind,
        row: Box<[u8]>,
        emitted: &mut Vec<(RowKind, Box<[u8]>)>,
    ) {
        if !kind.is_retraction() {
            emitted.push((add_row(lists.rows_mut(key), row.clone()), row));
        } else if lists.get(key).is_some() {
            emitted.extend(retract_row(lists.rows_mut(key), &row));
        }
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
        let mut h = crate::harness::Harness::of(
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
        let mut h = crate::harness::Harness::of(
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

    fn materializer() -> crate::harness::Harness {
        crate::harness::Harness::of(
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
    fn materializer_steps(batches: usize) -> Vec<crate::harness::Step> {
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
            steps.push(crate::harness::Step::Rows(0, lines.join("\n")));
        }
        steps
    }

    #[test]
    fn a_spilled_materializer_emits_the_changes_the_heap_emits() {
        use crate::harness::{emitted, emitted_spilling};
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
        use crate::harness::{spilled_restores_as_if_never_stopped, spilled_snapshot_holds_its_barrier};
        spilled_restores_as_if_never_stopped(&materializer, &materializer_steps(40));
        spilled_snapshot_holds_its_barrier(&materializer, &materializer_steps(40));
    }

    #[test]
    fn a_materializer_restores_a_keys_rows_in_their_order_from_rows_in_any_order() {
        use crate::harness::emitted;
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
        use crate::harness::deletions;
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
        crate::harness::incremental_restores_as_if_never_stopped(&materializer, &materializer_steps(40), 1);
    }

    #[test]
    fn a_spilled_materializer_restored_from_an_incremental_chain_emits_what_it_would_have() {
        use crate::harness::{emitted, incremental_restores_as_if_never_stopped};
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
        use crate::harness::deletions;
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
