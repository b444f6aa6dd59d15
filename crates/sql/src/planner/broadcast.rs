//! Whether a regular join broadcasts one of its sides: a plain decision
//! from what the planner knows of each side.
//!
//! A side is broadcast when it is small and bounded: every subtask of the
//! join holds all of it, and the other side's rows stay where they are
//! (neither hashed nor kept once the small side is complete). It pays twice:
//! no exchange for the large side, and no state for it. The small side is
//! read again after a restore, so it may hold no operator that keeps rows.

use weir_plan::join::JoinKind;

/// What the planner knows of one side of a regular join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SideFacts {
    /// Whether it updates.
    pub updating: bool,
    /// Its sources' estimated bytes, when every source is bounded and
    /// estimated and every other node keeps no rows (so its sources can be
    /// read again after a restore); `None` otherwise.
    pub replayable_bytes: Option<u64>,
}

/// The side to broadcast (0 left, 1 right), if any: of an insert-only join,
/// a replayable side within `threshold` bytes (`None`: never) that is not an
/// outer side (its rows are on every subtask, so only the other side may be
/// padded), and for a semi or anti join the right. The smaller of two.
pub fn broadcast_side(kind: JoinKind, sides: [SideFacts; 2], threshold: Option<u64>) -> Option<usize> {
    let threshold = threshold?;
    if sides.iter().any(|s| s.updating) {
        return None;
    }
    let allowed = |side: usize| match kind {
        JoinKind::Inner => true,
        JoinKind::Left | JoinKind::Semi | JoinKind::Anti => side == 1,
        JoinKind::Right => side == 0,
        JoinKind::Full => false,
    };
    (0..2)
        .filter(|s| allowed(*s))
        .filter_map(|s| {
            sides[s]
                .replayable_bytes
                .filter(|b| *b <= threshold)
                .map(|b| (b, s))
        })
        .min()
        .map(|(_, s)| s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(bytes: Option<u64>) -> SideFacts {
        SideFacts {
            updating: false,
            replayable_bytes: bytes,
        }
    }

    const MB: Option<u64> = Some(1 << 20);

    #[test]
    fn an_inner_join_broadcasts_its_smaller_small_bounded_side() {
        assert_eq!(
            broadcast_side(JoinKind::Inner, [side(None), side(Some(1000))], MB),
            Some(1)
        );
        assert_eq!(
            broadcast_side(JoinKind::Inner, [side(Some(10)), side(Some(1000))], MB),
            Some(0)
        );
        assert_eq!(
            broadcast_side(JoinKind::Inner, [side(None), side(Some(2 << 20))], MB),
            None,
            "over the threshold"
        );
        assert_eq!(
            broadcast_side(JoinKind::Inner, [side(None), side(Some(10))], None),
            None,
            "a negative threshold turns it off"
        );
    }

    #[test]
    fn an_outer_side_is_never_broadcast() {
        let small_left = [side(Some(10)), side(None)];
        let small_right = [side(None), side(Some(10))];
        assert_eq!(broadcast_side(JoinKind::Left, small_left, MB), None);
        assert_eq!(broadcast_side(JoinKind::Left, small_right, MB), Some(1));
        assert_eq!(broadcast_side(JoinKind::Right, small_left, MB), Some(0));
        assert_eq!(broadcast_side(JoinKind::Right, small_right, MB), None);
        assert_eq!(broadcast_side(JoinKind::Full, small_right, MB), None);
    }

    #[test]
    fn a_semi_or_anti_join_broadcasts_only_its_right_side() {
        for kind in [JoinKind::Semi, JoinKind::Anti] {
            assert_eq!(broadcast_side(kind, [side(Some(10)), side(None)], MB), None);
            assert_eq!(broadcast_side(kind, [side(None), side(Some(10))], MB), Some(1));
        }
    }

    #[test]
    fn an_updating_join_is_not_broadcast() {
        let mut updating = side(None);
        updating.updating = true;
        assert_eq!(
            broadcast_side(JoinKind::Inner, [updating, side(Some(10))], MB),
            None
        );
    }
}
