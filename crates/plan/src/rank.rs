//! Ranking functions of a TopN, and the rank each row gets.

use serde::{Deserialize, Serialize};

/// The ranking function of a TopN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum RankType {
    /// `ROW_NUMBER()`: 1, 2, 3, 4 (ties in arrival order).
    #[default]
    RowNumber,
    /// `RANK()`: 1, 2, 2, 4.
    Rank,
    /// `DENSE_RANK()`: 1, 2, 2, 3.
    DenseRank,
}

impl RankType {
    /// Flink's name (`rankType=[...]` in EXPLAIN).
    pub fn name(self) -> &'static str {
        match self {
            RankType::RowNumber => "ROW_NUMBER",
            RankType::Rank => "RANK",
            RankType::DenseRank => "DENSE_RANK",
        }
    }

    /// The function of a SQL window function name, if it ranks.
    pub fn of(function: &str) -> Option<RankType> {
        match function.to_lowercase().as_str() {
            "row_number" => Some(RankType::RowNumber),
            "rank" => Some(RankType::Rank),
            "dense_rank" => Some(RankType::DenseRank),
            _ => None,
        }
    }

    /// The rank of the row at `position` (1-based) of a sorted partition,
    /// given the rank of the row before it (0 for the first) and whether
    /// their order keys tie.
    pub fn next(self, position: u64, previous: u64, tie: bool) -> u64 {
        match self {
            RankType::RowNumber => position,
            RankType::Rank if tie => previous,
            RankType::Rank => position,
            RankType::DenseRank if tie => previous,
            RankType::DenseRank => previous + 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranks(kind: RankType, keys: &[u64]) -> Vec<u64> {
        let mut out: Vec<u64> = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let tie = i > 0 && keys[i - 1] == *key;
            out.push(kind.next(i as u64 + 1, out.last().copied().unwrap_or(0), tie));
        }
        out
    }

    #[test]
    fn the_three_ranking_functions_number_ties_as_sql_does() {
        let keys = [10, 20, 20, 30];
        assert_eq!(ranks(RankType::RowNumber, &keys), vec![1, 2, 3, 4]);
        assert_eq!(ranks(RankType::Rank, &keys), vec![1, 2, 2, 4]);
        assert_eq!(ranks(RankType::DenseRank, &keys), vec![1, 2, 2, 3]);
    }
}
