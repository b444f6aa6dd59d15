//! Per-split watermarks: a source subtask reading several splits (Kafka
//! partitions) holds each split's watermark, and its own is the lowest of
//! the splits that are not idle, as Flink's per-split watermarks
//! (`WatermarkOutputMultiplexer`).
//!
//! A split idle (without data) for the idle timeout stops holding time back
//! until it has data again. A split without data yet holds it back at its
//! start, as in Flink: without an idle timeout, an empty partition stops the
//! watermark.

use std::collections::BTreeMap;

use weir_common::time::MIN_WATERMARK;
use weir_common::time::Timestamp;
use weir_runtime::SplitId;

#[derive(Debug, Clone, Copy)]
struct SplitState {
    /// The split's watermark (the largest value of the watermark
    /// expression among its rows).
    watermark: Timestamp,
    /// When it last had data (or was added), in wall-clock ms.
    last_data: Timestamp,
    /// The order of that event among all splits' (the wall clock is coarse).
    sequence: u64,
    idle: bool,
}

/// The watermarks of one subtask's splits.
#[derive(Debug, Clone)]
pub struct SplitWatermarks {
    splits: BTreeMap<SplitId, SplitState>,
    /// After this long without data a split is idle (ms); never when `None`.
    idle_timeout: Option<i64>,
    /// Counts data and additions, to order splits active at one instant.
    events: u64,
}

impl SplitWatermarks {
    /// No splits yet; `idle_timeout` in ms.
    pub fn new(idle_timeout: Option<i64>) -> Self {
        SplitWatermarks {
            splits: BTreeMap::new(),
            idle_timeout,
            events: 0,
        }
    }

    /// The subtask now reads `splits` (at wall-clock time `now`): new ones
    /// start without a watermark, ones no longer read (ended) stop counting.
    pub fn set_splits(&mut self, splits: &[SplitId], now: Timestamp) {
        self.splits.retain(|id, _| splits.contains(id));
        for id in splits {
            self.events += 1;
            let sequence = self.events;
            self.splits.entry(*id).or_insert(SplitState {
                watermark: MIN_WATERMARK,
                last_data: now,
                sequence,
                idle: false,
            });
        }
    }

    /// Split `split` had rows at `now`, whose watermark is `candidate` (none
    /// for rows without a rowtime to take).
    pub fn on_data(&mut self, split: SplitId, candidate: Option<Timestamp>, now: Timestamp) {
        self.events += 1;
        let state = self.splits.entry(split).or_insert(SplitState {
            watermark: MIN_WATERMARK,
            last_data: now,
            sequence: 0,
            idle: false,
        });
        state.last_data = now;
        state.sequence = self.events;
        state.idle = false;
        if let Some(candidate) = candidate {
            state.watermark = state.watermark.max(candidate);
        }
    }

    /// The wall clock reached `now`: splits without data for the idle
    /// timeout turn idle, the longest silent first, as if each had turned
    /// idle at its own time. Returns the highest watermark the splits
    /// reached on the way: when the last active ones turn idle together, the
    /// watermark has first advanced to theirs, as it would have had the
    /// others turned idle earlier.
    pub fn on_time(&mut self, now: Timestamp) -> Option<Timestamp> {
        let timeout = self.idle_timeout?;
        let mut turning: Vec<(Timestamp, u64, SplitId)> = self
            .splits
            .iter()
            .filter(|(_, s)| !s.idle && now.saturating_sub(s.last_data) >= timeout)
            .map(|(id, s)| (s.last_data, s.sequence, *id))
            .collect();
        turning.sort_unstable();
        let mut highest = self.combined();
        for (_, _, id) in turning {
            self.splits.get_mut(&id).expect("listed").idle = true;
            highest = highest.max(self.combined());
        }
        highest
    }

    /// The subtask's watermark: the lowest of its active splits'; `None`
    /// when it has no active split (every one idle, or none).
    pub fn combined(&self) -> Option<Timestamp> {
        self.splits
            .values()
            .filter(|s| !s.idle)
            .map(|s| s.watermark)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_is_the_lowest_of_the_splits() {
        let mut w = SplitWatermarks::new(None);
        w.set_splits(&[0, 1], 0);
        w.on_data(0, Some(100), 1);
        assert_eq!(w.combined(), Some(MIN_WATERMARK), "split 1 has no data yet");
        w.on_data(1, Some(40), 2);
        assert_eq!(w.combined(), Some(40));
        w.on_data(1, Some(300), 3);
        assert_eq!(w.combined(), Some(100));
    }

    #[test]
    fn an_idle_split_stops_holding_the_watermark_back_until_it_has_data() {
        let mut w = SplitWatermarks::new(Some(1_000));
        w.set_splits(&[0, 1], 0);
        w.on_data(0, Some(500), 900);
        w.on_time(999);
        assert_eq!(
            w.combined(),
            Some(MIN_WATERMARK),
            "split 1 not idle before the timeout"
        );
        w.on_time(1_000);
        assert_eq!(w.combined(), Some(500), "split 1 idle after the timeout");
        w.on_time(1_900);
        assert_eq!(w.combined(), None, "both idle");
        w.on_data(1, Some(200), 2_000);
        assert_eq!(
            w.combined(),
            Some(200),
            "split 1 active again, split 0 still idle"
        );
    }

    #[test]
    fn splits_turning_idle_together_first_advance_to_the_last_active_one() {
        let mut w = SplitWatermarks::new(Some(1_000));
        w.set_splits(&[0, 1], 0);
        w.on_data(0, Some(500), 10);
        assert_eq!(w.on_time(5_000), Some(500), "split 1 was silent longer");
        assert_eq!(w.combined(), None);
    }

    #[test]
    fn of_splits_silent_since_one_instant_the_one_with_data_turns_idle_last() {
        let mut w = SplitWatermarks::new(Some(1_000));
        w.set_splits(&[0, 1], 10);
        // Data at the instant the splits were added (the clock ticks coarsely).
        w.on_data(0, Some(500), 10);
        assert_eq!(w.on_time(5_000), Some(500));
    }

    #[test]
    fn without_an_idle_timeout_an_empty_split_holds_the_watermark() {
        let mut w = SplitWatermarks::new(None);
        w.set_splits(&[0, 1], 0);
        w.on_data(0, Some(500), 1);
        w.on_time(1_000_000);
        assert_eq!(w.combined(), Some(MIN_WATERMARK));
    }

    #[test]
    fn an_ended_split_no_longer_counts() {
        let mut w = SplitWatermarks::new(None);
        w.set_splits(&[0, 1], 0);
        w.on_data(0, Some(500), 1);
        w.on_data(1, Some(50), 1);
        w.set_splits(&[0], 2);
        assert_eq!(w.combined(), Some(500));
        w.set_splits(&[], 3);
        assert_eq!(w.combined(), None);
    }
}
