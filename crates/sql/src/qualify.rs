//! A `WHERE` condition on a window function's alias of the same `SELECT`
//! (`SELECT *, ROW_NUMBER() OVER (...) AS rownum FROM t WHERE rownum <= 1`,
//! as Nexmark's q6 is written) filters after the window functions: it is
//! moved to `QUALIFY`, which DataFusion plans as a filter over the window.
//!
//! Standard SQL resolves `WHERE` against the `FROM` relations only, and
//! Flink refuses the statement; weir reads it as the only thing it can
//! mean. Conditions on other columns stay in `WHERE` (before the window). A
//! `FROM` column with the alias's name would be shadowed: the rewrite only
//! sees names, not the relations' columns.

use std::collections::HashSet;
use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, Expr, Query, Select, SelectItem, SetExpr, Visit, VisitMut, Visitor, VisitorMut,
};

/// Moves every `WHERE` conjunct that names a window function's alias of
/// its own `SELECT` to `QUALIFY`, in `query` and the queries within it.
pub fn qualify_window_filters(query: &mut Query) {
    let _ = query.visit(&mut Mover);
}

struct Mover;

impl VisitorMut for Mover {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_mut() {
            move_conjuncts(select);
        }
        ControlFlow::Continue(())
    }
}

fn move_conjuncts(select: &mut Select) {
    let windowed: HashSet<String> = select
        .projection
        .iter()
        .filter_map(|item| match item {
            SelectItem::ExprWithAlias { expr, alias } if has_window(expr) => Some(alias.value.clone()),
            _ => None,
        })
        .collect();
    if windowed.is_empty() {
        return;
    }
    let Some(selection) = select.selection.take() else {
        return;
    };
    let (moved, kept): (Vec<Expr>, Vec<Expr>) = conjuncts(selection)
        .into_iter()
        .partition(|c| names_any(c, &windowed));
    select.selection = conjoin(kept);
    let qualify = select.qualify.take().into_iter().chain(moved).collect();
    select.qualify = conjoin(qualify);
}

fn conjuncts(e: Expr) -> Vec<Expr> {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            let mut all = conjuncts(*left);
            all.extend(conjuncts(*right));
            all
        }
        Expr::Nested(inner)
            if matches!(
                *inner,
                Expr::BinaryOp {
                    op: BinaryOperator::And,
                    ..
                }
            ) =>
        {
            conjuncts(*inner)
        }
        other => vec![other],
    }
}

fn conjoin(exprs: Vec<Expr>) -> Option<Expr> {
    exprs.into_iter().reduce(|a, b| Expr::BinaryOp {
        left: Box::new(a),
        op: BinaryOperator::And,
        right: Box::new(b),
    })
}

/// Whether `e` calls a window function (`... OVER (...)`).
fn has_window(e: &Expr) -> bool {
    struct Finder;
    impl Visitor for Finder {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            match e {
                Expr::Function(f) if f.over.is_some() => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        }
    }
    e.visit(&mut Finder).is_break()
}

/// Whether `e` names one of `names` as an unqualified identifier.
fn names_any(e: &Expr, names: &HashSet<String>) -> bool {
    struct Finder<'a>(&'a HashSet<String>);
    impl Visitor for Finder<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            match e {
                Expr::Identifier(ident) if self.0.contains(&ident.value) => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        }
    }
    e.visit(&mut Finder(names)).is_break()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        let dialect = sqlparser::dialect::GenericDialect {};
        let mut statements = sqlparser::parser::Parser::parse_sql(&dialect, sql).unwrap();
        let sqlparser::ast::Statement::Query(query) = &mut statements[0] else {
            panic!("a query");
        };
        qualify_window_filters(query);
        query.to_string()
    }

    #[test]
    fn a_where_on_a_window_alias_becomes_a_qualify_and_other_conditions_stay() {
        assert_eq!(
            rewritten(
                "SELECT *, ROW_NUMBER() OVER (PARTITION BY a ORDER BY b) AS rn FROM t WHERE rn <= 1 AND c > 2"
            ),
            "SELECT *, ROW_NUMBER() OVER (PARTITION BY a ORDER BY b) AS rn FROM t WHERE c > 2 QUALIFY rn <= 1"
        );
    }

    #[test]
    fn a_where_on_columns_or_an_alias_of_no_window_function_is_left_alone() {
        let plain = "SELECT a + 1 AS rn FROM t WHERE rn <= 1";
        assert_eq!(rewritten(plain), plain);
        let nested = "SELECT * FROM (SELECT *, RANK() OVER (ORDER BY b) AS r FROM t) WHERE r = 1";
        assert_eq!(
            rewritten(nested),
            nested,
            "the alias is a column of the derived table"
        );
    }
}
