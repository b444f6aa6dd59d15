//! `ChangelogNormalize`: an upsert stream (a row per key that replaces the
//! key's row, a delete naming only the key, as `upsert-kafka` reads them)
//! made a full changelog, as Flink's planner does after an upsert source:
//! the first row of a key is `+I`, a later one `-U old, +U new` (nothing
//! when it equals the old), a delete `-D old` (nothing for an unknown key).
//!
//! ```text
//!  Source: upsert-kafka [UA,D] ─HASH[key]─► ChangelogNormalize(key=[k]) [I,UB,UA,D]
//! ```

use arrow::datatypes::SchemaRef;

use crate::Result;
use crate::keyed_lists::{ChangeOfKey, KeyedListsOperator};
use weir_common::changelog::RowKind;
use weir_runtime::{Operator, OperatorFactory, TaskContext};
use weir_state::keyed_rows::KeyedRows;

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

impl OperatorFactory for ChangelogNormalize {
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let operator = KeyedListsOperator::<Normalize>::new(&self.name, &self.key, &self.schema, ctx)?;
        Ok(Box::new(operator))
    }

    fn can_spill(&self) -> bool {
        true
    }
}

/// Each key holds its latest row (a list of at most one), see [`normalize`].
struct Normalize;

impl ChangeOfKey for Normalize {
    const POSITIONED: bool = false;

    fn apply(
        lists: &mut KeyedRows,
        key: &[u8],
        kind: RowKind,
        row: Box<[u8]>,
        emitted: &mut Vec<(RowKind, Box<[u8]>)>,
    ) {
        let old = lists.get(key).and_then(|rows| rows.first().cloned());
        let (changes, after) = normalize(old.as_ref(), kind, row);
        emitted.extend(changes);
        let held = lists.rows_mut(key);
        held.clear();
        held.extend(after);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use weir_common::changelog;

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
        let schema = changelog::with_op(&Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Utf8, true),
        ])));
        let factory = Arc::new(ChangelogNormalize {
            key: vec![0],
            schema: schema.clone(),
            name: "ChangelogNormalize(key=[k])".into(),
        });
        let mut h = crate::harness::Harness::for_operator(factory, vec![schema]).unwrap();
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

    fn normalizer() -> crate::harness::Harness {
        let schema = changelog::with_op(&Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Utf8, true),
        ])));
        let factory = Arc::new(ChangelogNormalize {
            key: vec![0],
            schema: schema.clone(),
            name: "ChangelogNormalize(key=[k])".into(),
        });
        crate::harness::Harness::for_operator(factory, vec![schema]).unwrap()
    }

    /// Batches of upserts and deletes of 800 keys, some repeating the row
    /// the key holds, some deleting keys that hold none.
    fn upsert_steps(batches: usize) -> Vec<crate::harness::Step> {
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
                crate::harness::Step::Rows(0, lines.join("\n"))
            })
            .collect()
    }

    #[test]
    fn a_spilled_normalization_emits_the_changes_the_heap_emits() {
        use crate::harness::{emitted, emitted_spilling};
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
        use crate::harness::{spilled_restores_as_if_never_stopped, spilled_snapshot_holds_its_barrier};
        spilled_restores_as_if_never_stopped(&normalizer, &upsert_steps(40));
        spilled_snapshot_holds_its_barrier(&normalizer, &upsert_steps(40));
    }

    #[test]
    fn an_incremental_normalization_snapshot_holds_the_keys_changed_since_the_last_one() {
        use crate::harness::deletions;
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
        use crate::harness::{emitted, incremental_restores_as_if_never_stopped};
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
