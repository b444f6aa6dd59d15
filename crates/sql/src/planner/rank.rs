//! Which ranks a filter on `ROW_NUMBER()` keeps: a plain function of the
//! predicate, as Flink's planner reads a TopN's rank range.

use datafusion_common::ScalarValue;
use datafusion_expr::{BinaryExpr, Expr, Operator};

/// The ranks `start..=end` (1-based) that `predicate` keeps of the column
/// `rank`, and its other conjuncts (a filter after the TopN): each conjunct
/// on the rank is `rank <= n`, `< n`, `= n`, `>= n`, `> n` (either way
/// round) or `BETWEEN a AND b`, and together they bound it above. `None`
/// when no conjunct bounds the rank above, one on the rank is of another
/// form, or the range is empty.
pub fn rank_range(predicate: &Expr, rank: &str) -> Option<((u64, u64), Vec<Expr>)> {
    let is_rank = |e: &Expr| matches!(e, Expr::Column(c) if c.name == rank);
    let (mut start, mut end) = (1u64, None::<u64>);
    let mut rest = Vec::new();
    for conjunct in datafusion_expr::utils::split_conjunction(predicate) {
        let mut bound = |low: u64, high: Option<u64>| {
            start = start.max(low);
            end = match (end, high) {
                (Some(e), Some(h)) => Some(e.min(h)),
                (e, h) => e.or(h),
            };
        };
        match conjunct {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) if is_rank(left) || is_rank(right) => {
                let (op, n) = match (is_rank(left), is_rank(right)) {
                    (true, false) => (*op, literal(right)?),
                    (false, true) => (op.swap()?, literal(left)?),
                    _ => return None,
                };
                match op {
                    Operator::LtEq => bound(1, Some(n)),
                    Operator::Lt => bound(1, Some(n.checked_sub(1)?)),
                    Operator::Eq => bound(n, Some(n)),
                    Operator::GtEq => bound(n, None),
                    Operator::Gt => bound(n + 1, None),
                    _ => return None,
                }
            }
            Expr::Between(between) if is_rank(&between.expr) => {
                if between.negated {
                    return None;
                }
                bound(literal(&between.low)?, Some(literal(&between.high)?));
            }
            other => rest.push(other.clone()),
        }
    }
    let range = (start.max(1), end?);
    (range.0 <= range.1).then_some((range, rest))
}

/// A non-negative integer literal.
fn literal(e: &Expr) -> Option<u64> {
    let Expr::Literal(value, _) = e else {
        return None;
    };
    match value.cast_to(&arrow::datatypes::DataType::UInt64).ok()? {
        ScalarValue::UInt64(Some(n)) => Some(n),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use datafusion_expr::{col, lit};

    use super::*;

    fn range(e: Expr) -> Option<(u64, u64)> {
        rank_range(&e, "rn").map(|(r, _)| r)
    }

    #[test]
    fn comparisons_and_between_on_the_rank_give_its_range() {
        assert_eq!(range(col("rn").lt_eq(lit(3u64))), Some((1, 3)));
        assert_eq!(range(col("rn").lt(lit(3i64))), Some((1, 2)));
        assert_eq!(range(col("rn").eq(lit(2))), Some((2, 2)));
        assert_eq!(range(lit(5).gt_eq(col("rn"))), Some((1, 5)));
        assert_eq!(range(col("rn").between(lit(2), lit(4))), Some((2, 4)));
        assert_eq!(
            range(col("rn").gt_eq(lit(2)).and(col("rn").lt_eq(lit(4)))),
            Some((2, 4))
        );
    }

    #[test]
    fn other_conjuncts_are_kept_as_a_filter_after_the_top_n() {
        let (r, rest) = rank_range(&col("rn").lt_eq(lit(3)).and(col("x").eq(lit(1))), "rn").unwrap();
        assert_eq!((r, rest), ((1, 3), vec![col("x").eq(lit(1))]));
    }

    #[test]
    fn a_rank_without_an_upper_bound_or_with_an_empty_range_is_no_top_n() {
        assert_eq!(range(col("rn").gt(lit(3))), None);
        assert_eq!(range(col("x").lt_eq(lit(3))), None);
        assert_eq!(range(col("rn").lt(lit(1))), None);
        assert_eq!(range(col("rn").between(lit(4), lit(2))), None);
    }
}
