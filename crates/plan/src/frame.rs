//! An OVER window's frame and the plain decisions it makes: which rows of a
//! partition enter together (a step), and which leave the frame when a row
//! enters.

use serde::{Deserialize, Serialize};

/// `ROWS|RANGE BETWEEN ... PRECEDING AND CURRENT ROW`; `None` is UNBOUNDED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Frame {
    /// `ROWS BETWEEN n PRECEDING AND CURRENT ROW`: the row and the `n` before it.
    Rows(Option<u64>),
    /// `RANGE BETWEEN INTERVAL '...' PRECEDING AND CURRENT ROW` (ms): the rows
    /// whose time is at most that much before the row's; rows of equal time
    /// are peers, with one result.
    Range(Option<i64>),
}

impl Frame {
    /// Whether rows ever leave it (it needs its rows kept).
    pub fn bounded(self) -> bool {
        matches!(self, Frame::Rows(Some(_)) | Frame::Range(Some(_)))
    }

    /// The SQL of the frame, as EXPLAIN shows it.
    pub fn describe(self) -> String {
        match self {
            Frame::Rows(None) => "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW".into(),
            Frame::Rows(Some(n)) => format!("ROWS BETWEEN {n} PRECEDING AND CURRENT ROW"),
            Frame::Range(None) => "RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW".into(),
            Frame::Range(Some(ms)) => format!("RANGE BETWEEN {ms} ms PRECEDING AND CURRENT ROW"),
        }
    }

    /// How many of a partition's frame rows (oldest first, `times`; `len`
    /// of them) leave once the rows at `time` have entered.
    pub fn leaving(self, times: impl Iterator<Item = i64>, len: usize, time: i64) -> usize {
        match self {
            Frame::Rows(None) | Frame::Range(None) => 0,
            Frame::Rows(Some(n)) => len.saturating_sub(n as usize + 1),
            Frame::Range(Some(ms)) => times.take_while(|t| *t < time.saturating_sub(ms)).count(),
        }
    }

    /// Each row's step, for rows in order (`groups[i]` its partition,
    /// `times[i]` its time): the rows of a step enter together, at most one
    /// unit per partition. A unit is a row for ROWS, the rows of one time
    /// (peers) for RANGE.
    pub fn steps(self, groups: &[usize], times: &[i64]) -> Vec<usize> {
        let mut last: std::collections::HashMap<usize, (usize, i64)> = Default::default();
        groups
            .iter()
            .zip(times)
            .map(|(g, t)| {
                let step = match (last.get(g), self) {
                    (None, _) => 0,
                    (Some((step, time)), Frame::Range(_)) if time == t => *step,
                    (Some((step, _)), _) => step + 1,
                };
                last.insert(*g, (step, *t));
                step
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_enter_one_at_a_time_and_peers_of_a_range_together() {
        let groups = [0, 1, 0, 0, 1];
        let times = [1, 1, 2, 2, 5];
        assert_eq!(Frame::Rows(Some(2)).steps(&groups, &times), vec![0, 0, 1, 2, 1]);
        assert_eq!(Frame::Range(None).steps(&groups, &times), vec![0, 0, 1, 1, 1]);
    }

    #[test]
    fn a_bounded_frame_lets_go_of_the_rows_before_its_start() {
        let rows = Frame::Rows(Some(2));
        assert_eq!(
            rows.leaving([1, 2, 3].into_iter(), 3, 3),
            0,
            "the row and two before"
        );
        assert_eq!(rows.leaving([1, 2, 3, 4].into_iter(), 4, 4), 1);
        let range = Frame::Range(Some(10));
        assert_eq!(
            range.leaving([1, 5, 10, 20].into_iter(), 4, 20),
            2,
            "the frame of 20 starts at 10, inclusive"
        );
        assert_eq!(Frame::Rows(None).leaving([1, 2].into_iter(), 2, 2), 0);
    }
}
