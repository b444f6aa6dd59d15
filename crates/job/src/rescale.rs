//! Which saved state a subtask restores, at the parallelism of the checkpoint
//! or another one (rescaling). Plain functions over plain data.
//!
//! - Keyed state (window slices, open sessions) moves by key group: a new
//!   subtask reads the state files of every old subtask whose key-group range
//!   overlaps its own, keeping only its key groups (Flink's model).
//! - Other operator state (a sink's pending files, a watermark) goes round
//!   robin: old subtask `k` to new subtask `k % parallelism`.
//! - Source positions are kept per split; the number of splits is fixed when
//!   the job is created, and split `i` is read by subtask `i % parallelism`.
//!   An unbounded source cannot run at a parallelism above its number of
//!   splits (a subtask without splits would end, and an ended source stops
//!   periodic checkpoints); a bounded one can (such subtasks end at once).
//!
//! ```text
//!  key groups 0..128, 4 → 2:   old 0 [0,31] old 1 [32,63] old 2 [64,95] old 3 [96,127]
//!                               new 0 [0,63] ◄── old 0, old 1    new 1 [64,127] ◄── old 2, old 3
//! ```

use std::ops::RangeInclusive;

use crate::{Error, Result};
use weir_common::key_group::key_group_range;

/// The old subtasks (of `old_parallelism`) whose key groups overlap those of
/// new subtask `subtask` of `parallelism`.
pub fn keyed_sources(
    old_parallelism: usize,
    subtask: usize,
    parallelism: usize,
    max_parallelism: usize,
) -> Vec<usize> {
    let range = key_group_range(subtask, parallelism, max_parallelism);
    (0..old_parallelism)
        .filter(|old| overlaps(&key_group_range(*old, old_parallelism, max_parallelism), &range))
        .collect()
}

/// The old subtasks whose non-keyed state new subtask `subtask` takes over.
pub fn round_robin_sources(old_parallelism: usize, subtask: usize, parallelism: usize) -> Vec<usize> {
    (0..old_parallelism)
        .filter(|old| old % parallelism == subtask)
        .collect()
}

/// Whether two inclusive ranges share a value.
pub fn overlaps(a: &RangeInclusive<usize>, b: &RangeInclusive<usize>) -> bool {
    a.start() <= b.end() && b.start() <= a.end()
}

/// The split positions of new source subtask `subtask` of `parallelism`,
/// from every old subtask's position (`{"splits": [{"index": i, "count": n,
/// ...}, ...]}`): the splits `i` with `i % parallelism == subtask`, in index
/// order, as one position. `source` names the source in errors; unless
/// `idle_subtasks` (a bounded source, Kafka), more subtasks than splits is
/// an error.
pub fn assign_splits(
    old_positions: &[&serde_json::Value],
    subtask: usize,
    parallelism: usize,
    source: &str,
    idle_subtasks: bool,
) -> Result<serde_json::Value> {
    let bad = |position: &serde_json::Value| {
        Error::State(format!(
            "the checkpoint's position of {source} is not a list of splits: {position}"
        ))
    };
    let mut all = Vec::new();
    let mut count = None;
    for position in old_positions {
        let splits = position["splits"].as_array().ok_or_else(|| bad(position))?;
        for split in splits {
            let index = split["index"].as_u64().ok_or_else(|| bad(position))?;
            let n = split["count"].as_u64().ok_or_else(|| bad(position))?;
            if *count.get_or_insert(n) != n {
                return Err(Error::State(format!(
                    "the checkpoint's splits of {source} disagree on their number ({n} and {})",
                    count.unwrap_or_default()
                )));
            }
            all.push((index, split.clone()));
        }
    }
    all.sort_by_key(|(index, _)| *index);
    if let Some(n) = count {
        let indices: Vec<u64> = all.iter().map(|(i, _)| *i).collect();
        if indices != (0..n).collect::<Vec<_>>() {
            return Err(Error::State(format!(
                "the checkpoint holds splits {indices:?} of {source}, expected each of 0..{n} once"
            )));
        }
        if !idle_subtasks && parallelism as u64 > n {
            return Err(Error::State(format!(
                "{source} has {n} split(s), fixed when the job was created: it cannot run at \
                 parallelism {parallelism} (at most {n})"
            )));
        }
    }
    let mine: Vec<serde_json::Value> = all
        .into_iter()
        .filter(|(index, _)| *index as usize % parallelism == subtask)
        .map(|(_, split)| split)
        .collect();
    // Other fields (a Kafka source's list of known partitions) are the same
    // in every subtask's position: kept from the first.
    let mut position = old_positions
        .first()
        .and_then(|p| p.as_object().cloned())
        .unwrap_or_default();
    position.insert("splits".into(), serde_json::Value::Array(mine));
    Ok(serde_json::Value::Object(position))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn scaling_down_merges_neighbouring_key_group_ranges() {
        assert_eq!(keyed_sources(4, 0, 2, 128), vec![0, 1]);
        assert_eq!(keyed_sources(4, 1, 2, 128), vec![2, 3]);
    }

    #[test]
    fn scaling_up_splits_ranges_and_an_old_subtask_may_feed_two_new_ones() {
        // 2 → 3: [0,63] [64,127] → [0,42] [43,85] [86,127].
        assert_eq!(keyed_sources(2, 0, 3, 128), vec![0]);
        assert_eq!(keyed_sources(2, 1, 3, 128), vec![0, 1]);
        assert_eq!(keyed_sources(2, 2, 3, 128), vec![1]);
    }

    #[test]
    fn the_same_parallelism_restores_each_subtask_from_itself() {
        for s in 0..4 {
            assert_eq!(keyed_sources(4, s, 4, 128), vec![s]);
            assert_eq!(round_robin_sources(4, s, 4), vec![s]);
        }
    }

    #[test]
    fn non_keyed_state_goes_round_robin_and_none_is_lost() {
        let mut taken: Vec<usize> = (0..3).flat_map(|s| round_robin_sources(7, s, 3)).collect();
        taken.sort();
        assert_eq!(taken, (0..7).collect::<Vec<_>>());
        assert_eq!(round_robin_sources(2, 2, 3), Vec::<usize>::new());
    }

    fn split(index: u64, emitted: u64) -> serde_json::Value {
        json!({ "index": index, "count": 4, "emitted": emitted })
    }

    #[test]
    fn splits_move_to_subtask_index_modulo_parallelism_with_their_positions() {
        let old = [
            json!({ "splits": [split(0, 10), split(2, 12)] }),
            json!({ "splits": [split(1, 11), split(3, 13)] }),
        ];
        let old: Vec<&serde_json::Value> = old.iter().collect();
        assert_eq!(
            assign_splits(&old, 1, 3, "s", false).unwrap(),
            json!({ "splits": [split(1, 11)] })
        );
        assert_eq!(
            assign_splits(&old, 0, 3, "s", false).unwrap(),
            json!({ "splits": [split(0, 10), split(3, 13)] })
        );
    }

    #[test]
    fn more_subtasks_than_splits_or_a_missing_split_is_refused_for_an_unbounded_source() {
        let old = [json!({ "splits": [split(0, 1), split(1, 1), split(2, 1), split(3, 1)] })];
        let old: Vec<&serde_json::Value> = old.iter().collect();
        let err = assign_splits(&old, 0, 5, "Source: seq", false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("Source: seq has 4 split(s)"), "{err}");
        // A bounded source's fifth subtask simply has nothing to read.
        assert_eq!(
            assign_splits(&old, 4, 5, "s", true).unwrap(),
            json!({ "splits": [] })
        );
        let partial = [json!({ "splits": [split(0, 1), split(2, 1)] })];
        let partial: Vec<&serde_json::Value> = partial.iter().collect();
        assert!(assign_splits(&partial, 0, 2, "s", true).is_err());
        let old_style = [json!({ "emitted": 3 })];
        let old_style: Vec<&serde_json::Value> = old_style.iter().collect();
        assert!(assign_splits(&old_style, 0, 1, "s", true).is_err());
    }
}
