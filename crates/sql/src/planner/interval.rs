//! Interval-join recognition, as Flink's planner does it: a join condition
//! that bounds one input's time attribute by the other's
//! (`l.ts BETWEEN r.ts - INTERVAL '5' SECOND AND r.ts`, or
//! `l.ts >= r.ts AND l.ts < r.ts + INTERVAL '1' MINUTE`) on both sides,
//! both rowtime or both proctime. A plain function over DataFusion
//! expressions, tested without planning.

use datafusion_common::{DFSchema, ScalarValue};
use datafusion_expr::utils::split_conjunction;
use datafusion_expr::{BinaryExpr, Expr, Operator};

use weir_common::types::{PROCTIME, ROWTIME, TIME_ATTRIBUTE_KEY};

/// The window of an interval join: `lower <= l.time - r.time <= upper`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntervalBounds {
    /// The left input's time attribute (its position).
    pub left_time: usize,
    /// The right input's.
    pub right_time: usize,
    /// Least `l.time - r.time` (ms).
    pub lower: i64,
    /// Greatest `l.time - r.time` (ms).
    pub upper: i64,
    /// Processing time rather than event time.
    pub proctime: bool,
    /// The rest of the condition.
    pub rest: Option<Expr>,
}

/// A time attribute plus a constant: which side, its position, its kind
/// (rowtime or proctime), the offset in ms.
struct Term {
    left: bool,
    index: usize,
    proctime: bool,
    offset: i64,
}

/// `filter`'s interval bounds between the left (`left`) and right
/// (`right`) inputs' time attributes, if it has both a lower and an upper
/// one on the same pair of attributes of the same kind.
pub fn interval_bounds(filter: &Expr, left: &DFSchema, right: &DFSchema) -> Option<IntervalBounds> {
    let (mut lower, mut upper) = (None::<i64>, None::<i64>);
    let mut pair: Option<(usize, usize, bool)> = None;
    let mut rest = Vec::new();
    for conjunct in split_conjunction(filter) {
        let comparisons = match conjunct {
            Expr::Between(b) if !b.negated => vec![
                ((*b.expr).clone(), Operator::GtEq, (*b.low).clone()),
                ((*b.expr).clone(), Operator::LtEq, (*b.high).clone()),
            ],
            Expr::BinaryExpr(BinaryExpr {
                left: l,
                op,
                right: r,
            }) => vec![((**l).clone(), *op, (**r).clone())],
            _ => vec![],
        };
        let bounds: Vec<_> = comparisons
            .iter()
            .map(|(a, op, b)| bound(a, *op, b, left, right))
            .collect();
        if bounds.is_empty() || bounds.iter().any(Option::is_none) {
            rest.push(conjunct.clone());
            continue;
        }
        for (l, r, proctime, op, difference) in bounds.into_iter().flatten() {
            if pair.is_some_and(|p| p != (l, r, proctime)) {
                return None;
            }
            pair = Some((l, r, proctime));
            match op {
                Operator::GtEq => lower = Some(lower.map_or(difference, |x| x.max(difference))),
                Operator::Gt => lower = Some(lower.map_or(difference + 1, |x| x.max(difference + 1))),
                Operator::LtEq => upper = Some(upper.map_or(difference, |x| x.min(difference))),
                _ => upper = Some(upper.map_or(difference - 1, |x| x.min(difference - 1))),
            }
        }
    }
    let ((left_time, right_time, proctime), lower, upper) = (pair?, lower?, upper?);
    Some(IntervalBounds {
        left_time,
        right_time,
        lower,
        upper,
        proctime,
        rest: rest.into_iter().reduce(Expr::and),
    })
}

/// `a op b` as `l.time - r.time op difference`, when it compares a left
/// time attribute with a right one of the same kind.
fn bound(
    a: &Expr,
    op: Operator,
    b: &Expr,
    left: &DFSchema,
    right: &DFSchema,
) -> Option<(usize, usize, bool, Operator, i64)> {
    if !matches!(op, Operator::Gt | Operator::GtEq | Operator::Lt | Operator::LtEq) {
        return None;
    }
    let (a, b) = (term(a, left, right)?, term(b, left, right)?);
    if a.left == b.left || a.proctime != b.proctime {
        return None;
    }
    // (x + a.offset) op (y + b.offset): with x on the left, x - y op b - a.
    let (l, r, op) = if a.left { (a, b, op) } else { (b, a, op.swap()?) };
    Some((l.index, r.index, l.proctime, op, r.offset - l.offset))
}

/// A time attribute column, maybe plus or minus an interval literal.
fn term(e: &Expr, left: &DFSchema, right: &DFSchema) -> Option<Term> {
    match e {
        Expr::Column(c) => {
            let (is_left, schema) = match left.index_of_column(c) {
                Ok(_) => (true, left),
                Err(_) => (false, right),
            };
            let index = schema.index_of_column(c).ok()?;
            let kind = schema.field(index).metadata().get(TIME_ATTRIBUTE_KEY)?;
            if kind != ROWTIME && kind != PROCTIME {
                return None;
            }
            Some(Term {
                left: is_left,
                index,
                proctime: kind == PROCTIME,
                offset: 0,
            })
        }
        Expr::BinaryExpr(BinaryExpr {
            left: l,
            op,
            right: r,
        }) => {
            let sign = match op {
                Operator::Plus => 1,
                Operator::Minus => -1,
                _ => return None,
            };
            let mut t = term(l, left, right)?;
            t.offset += sign * interval_ms(r)?;
            Some(t)
        }
        Expr::Alias(a) => term(&a.expr, left, right),
        _ => None,
    }
}

fn interval_ms(e: &Expr) -> Option<i64> {
    match e {
        Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) if v.months == 0 => {
            Some(v.days as i64 * 86_400_000 + v.nanoseconds.div_euclid(1_000_000))
        }
        Expr::Literal(ScalarValue::IntervalDayTime(Some(v)), _) => {
            Some(v.days as i64 * 86_400_000 + v.milliseconds as i64)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use datafusion_expr::{col, lit};

    fn schema(table: &str, kind: &str) -> DFSchema {
        let ts = Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true)
            .with_metadata([(TIME_ATTRIBUTE_KEY.to_string(), kind.to_string())].into());
        let schema = Schema::new(vec![Field::new("k", DataType::Int64, true), ts]);
        DFSchema::try_from_qualified_schema(table, &schema).unwrap()
    }

    fn seconds(s: i64) -> Expr {
        lit(ScalarValue::new_interval_mdn(0, 0, s * 1_000_000_000))
    }

    #[test]
    fn a_between_on_two_rowtimes_is_an_interval_and_the_rest_stays() {
        let (l, r) = (schema("l", ROWTIME), schema("r", ROWTIME));
        let filter = col("l.ts")
            .between(col("r.ts") - seconds(5), col("r.ts"))
            .and(col("l.k").gt(lit(1)));
        let bounds = interval_bounds(&filter, &l, &r).unwrap();
        assert_eq!((bounds.lower, bounds.upper, bounds.proctime), (-5000, 0, false));
        assert_eq!(bounds.rest, Some(col("l.k").gt(lit(1))));
    }

    #[test]
    fn strict_bounds_written_either_way_round_are_shifted_by_a_millisecond() {
        let (l, r) = (schema("l", ROWTIME), schema("r", ROWTIME));
        // r.ts < l.ts  and  l.ts < r.ts + 1 s
        let filter = col("r.ts")
            .lt(col("l.ts"))
            .and(col("l.ts").lt(col("r.ts") + seconds(1)));
        let bounds = interval_bounds(&filter, &l, &r).unwrap();
        assert_eq!((bounds.lower, bounds.upper), (1, 999));
        assert_eq!(bounds.rest, None);
    }

    #[test]
    fn one_bound_or_mixed_time_kinds_are_not_an_interval() {
        let (l, r) = (schema("l", ROWTIME), schema("r", ROWTIME));
        assert!(interval_bounds(&col("l.ts").gt_eq(col("r.ts")), &l, &r).is_none());
        let p = schema("r", PROCTIME);
        let filter = col("l.ts").between(col("r.ts") - seconds(5), col("r.ts"));
        assert!(interval_bounds(&filter, &l, &p).is_none());
    }
}
