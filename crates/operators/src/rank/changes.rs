//! What a TopN emits when one row enters or leaves a partition: plain
//! functions of the ranks before and after, for the three ranking functions.

/// One output row of a change: a row of the ranks before (`Before(i)`), of
/// the ranks after (`After(i)`), with its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// `-U` of `before[i]`, followed by the `+U` of `after[j]` at the same rank.
    Update(usize, usize),
    /// `-D` of `before[i]`.
    Delete(usize),
    /// `+I` of `after[j]`.
    Insert(usize),
}

/// What to emit when a partition's rows ranked within `start..` change from
/// `before` to `after` (each `(row id, rank)`, in rank order; ranks after
/// the range already cut off). With the rank in the output a row is its id
/// and rank: pairs gone and pairs new of the same rank are updates (`-U`,
/// `+U`), the rest deletes and inserts; without it a row is its id alone,
/// so rows whose rank shifted are not emitted. Updates come first, then
/// deletes, then inserts, so an upsert key (partition, rank) never sees an
/// insert before the delete of the same rank.
pub fn rank_changes(
    before: &[(u64, u64)],
    after: &[(u64, u64)],
    start: u64,
    rank_output: bool,
) -> Vec<Change> {
    let same = |a: &(u64, u64), b: &(u64, u64)| a.0 == b.0 && (!rank_output || a.1 == b.1);
    let gone: Vec<usize> = (0..before.len())
        .filter(|&i| before[i].1 >= start && !after.iter().any(|a| same(a, &before[i])))
        .collect();
    let new: Vec<usize> = (0..after.len())
        .filter(|&j| after[j].1 >= start && !before.iter().any(|b| same(b, &after[j])))
        .collect();
    let mut changes = Vec::new();
    let mut inserts: Vec<usize> = new.clone();
    let mut deletes = Vec::new();
    for i in gone {
        let paired = rank_output
            .then(|| inserts.iter().position(|&j| after[j].1 == before[i].1))
            .flatten();
        match paired {
            Some(at) => changes.push(Change::Update(i, inserts.remove(at))),
            None => deletes.push(Change::Delete(i)),
        }
    }
    changes.extend(deletes);
    changes.extend(inserts.into_iter().map(Change::Insert));
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_entering_a_full_top_3_updates_each_shifted_rank() {
        // Rows 1, 2, 3 ranked; row 9 enters at rank 2, row 3 falls out.
        let before = [(1, 1), (2, 2), (3, 3)];
        let after = [(1, 1), (9, 2), (2, 3)];
        assert_eq!(
            rank_changes(&before, &after, 1, true),
            vec![Change::Update(1, 1), Change::Update(2, 2)]
        );
        assert_eq!(
            rank_changes(&before, &after, 1, false),
            vec![Change::Delete(2), Change::Insert(1)],
            "without the rank only the rows entering and leaving"
        );
        assert_eq!(
            rank_changes(&before, &after, 3, true),
            vec![Change::Update(2, 2)],
            "only ranks from start"
        );
    }

    #[test]
    fn a_retracted_row_moves_the_next_one_up_and_an_emptied_rank_is_deleted() {
        let before = [(1, 1), (2, 2)];
        let after = [(2, 1)];
        assert_eq!(
            rank_changes(&before, &after, 1, true),
            vec![Change::Update(0, 0), Change::Delete(1)]
        );
        assert_eq!(rank_changes(&before, &after, 1, false), vec![Change::Delete(0)]);
    }

    #[test]
    fn a_tie_under_rank_adds_a_row_at_the_same_rank_and_pushes_the_next_down() {
        // RANK: 10 (1), 20 (2), 30 (3); another 20 arrives: 1, 2, 2, 4.
        let before = [(1, 1), (2, 2), (3, 3)];
        let after = [(1, 1), (2, 2), (4, 2), (3, 4)];
        assert_eq!(
            rank_changes(&before, &after, 1, true),
            vec![Change::Delete(2), Change::Insert(2), Change::Insert(3)]
        );
    }
}
