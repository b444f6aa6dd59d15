//! Join vocabulary: which rows a join keeps unmatched, and how each side
//! keeps its rows (decided from the side's unique key, as Flink's planner
//! decides a `JoinInputSideSpec`).

use arrow::datatypes::{Schema, SchemaRef};
use serde::{Deserialize, Serialize};

/// Which rows of a join without a match are kept, padded with nulls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinKind {
    /// Neither side's.
    Inner,
    /// The left side's.
    Left,
    /// The right side's.
    Right,
    /// Both sides'.
    Full,
    /// Left rows that have a match (`IN`, `EXISTS`), left columns only.
    Semi,
    /// Left rows that have none (`NOT EXISTS`, `NOT IN`), left columns only.
    Anti,
}

impl JoinKind {
    /// Flink's name in EXPLAIN.
    pub fn flink_name(self) -> &'static str {
        match self {
            JoinKind::Inner => "InnerJoin",
            JoinKind::Left => "LeftOuterJoin",
            JoinKind::Right => "RightOuterJoin",
            JoinKind::Full => "FullOuterJoin",
            JoinKind::Semi => "LeftSemiJoin",
            JoinKind::Anti => "LeftAntiJoin",
        }
    }

    /// Whether only the left columns come out.
    pub fn is_semi_or_anti(self) -> bool {
        matches!(self, JoinKind::Semi | JoinKind::Anti)
    }

    /// Whether side `side`'s rows count their matches: an outer side's,
    /// and the left side of a semi or anti join.
    pub fn counts_matches(self, side: usize) -> bool {
        self.outer(side) || (self.is_semi_or_anti() && side == 0)
    }

    /// Whether side `side` (0: left, 1: right) keeps rows without a match.
    pub fn outer(self, side: usize) -> bool {
        match self {
            JoinKind::Inner => false,
            JoinKind::Left => side == 0,
            JoinKind::Right => side == 1,
            JoinKind::Full => true,
            JoinKind::Semi | JoinKind::Anti => false,
        }
    }
}

/// How a side's rows are kept, from what its input is unique on (Flink's
/// `JoinInputSideSpec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// The join key contains a unique key: at most one row per join key. A
    /// new row replaces the key's row; a retraction clears it.
    OneRowPerJoinKey,
    /// The input has a unique key: one row per unique key, no copy counts.
    /// A retraction takes away the row equal to it (for a consistent
    /// changelog, the one of its unique key).
    OneRowPerUniqueKey,
    /// No unique key: a multiset. With `dedupe` (an updating side, whose rows
    /// may be taken away), equal rows share an entry and count copies; an
    /// insert-only side appends without looking.
    Multiset {
        /// Whether equal rows share an entry.
        dedupe: bool,
    },
}

impl Layout {
    /// The layout of a side with `unique_key` (its columns), given its join
    /// key columns and whether it updates.
    pub fn of(unique_key: Option<&[usize]>, join_key: &[usize], updating: bool) -> Layout {
        match unique_key {
            Some(unique) if unique.iter().all(|u| join_key.contains(u)) => Layout::OneRowPerJoinKey,
            Some(_) => Layout::OneRowPerUniqueKey,
            None => Layout::Multiset { dedupe: updating },
        }
    }

    /// Flink's name for it, as EXPLAIN shows (`leftInputSpec=[...]`).
    pub fn flink_name(self) -> &'static str {
        match self {
            Layout::OneRowPerJoinKey => "JoinKeyContainsUniqueKey",
            Layout::OneRowPerUniqueKey => "HasUniqueKey",
            Layout::Multiset { .. } => "NoUniqueKey",
        }
    }
}

/// The left data columns then the right ones.
pub fn joined_schema(inputs: &[SchemaRef; 2]) -> Schema {
    Schema::new(
        inputs
            .iter()
            .flat_map(|s| s.fields().iter().cloned())
            .collect::<Vec<_>>(),
    )
}
