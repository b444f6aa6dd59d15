//! Flink's names for unnamed select items: `EXPR$<position>`, and the last part
//! of a path (`person.id` is `id`).
//!
//! `SELECT a, COUNT(*), price * 2` has the columns `a`, `EXPR$1` and `EXPR$2` in
//! Flink, and `SELECT person.id FROM t` (a field of a `ROW` column) has `id`.
//! Naming them the same way keeps results and view schemas identical to
//! Flink's, and avoids DataFusion's rule that two expressions may not share a
//! derived name (it names `AVG(x)` and `AVG(CAST(x AS DOUBLE))` alike).

use std::ops::ControlFlow;

use sqlparser::ast::{Expr, Ident, Query, SelectItem, SetExpr, VisitMut, VisitorMut};

/// Gives every unnamed, non-column select item of `query` its Flink name.
pub fn name_select_items(query: &mut Query) {
    let _ = query.visit(&mut Namer);
}

struct Namer;

impl VisitorMut for Namer {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        name_set_expr(&mut query.body);
        ControlFlow::Continue(())
    }
}

fn name_set_expr(body: &mut SetExpr) {
    match body {
        SetExpr::Select(select) => {
            for (position, item) in select.projection.iter_mut().enumerate() {
                let SelectItem::UnnamedExpr(expr) = item else {
                    continue;
                };
                let alias = match expr {
                    Expr::Identifier(_) => continue,
                    Expr::CompoundIdentifier(parts) => match parts.last() {
                        Some(last) => Ident::with_quote('`', &last.value),
                        None => continue,
                    },
                    _ => Ident::with_quote('`', format!("EXPR${position}")),
                };
                *item = SelectItem::ExprWithAlias {
                    expr: expr.clone(),
                    alias,
                };
            }
        }
        SetExpr::SetOperation { left, right, .. } => {
            name_set_expr(left);
            name_set_expr(right);
        }
        _ => {}
    }
}
