//! Flink's names for unnamed select items: `EXPR$<position>`, and the last part
//! of a path (`person.id` is `id`; a second `auction.id` is `id0`).
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
            // Names given explicitly, which derived names must not repeat.
            let mut taken: Vec<String> = select
                .projection
                .iter()
                .filter_map(|item| match item {
                    SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.clone()),
                    SelectItem::UnnamedExpr(Expr::Identifier(ident)) => Some(ident.value.clone()),
                    _ => None,
                })
                .collect();
            for (position, item) in select.projection.iter_mut().enumerate() {
                let SelectItem::UnnamedExpr(expr) = item else {
                    continue;
                };
                let name = match expr {
                    Expr::Identifier(_) => continue,
                    Expr::CompoundIdentifier(parts) => match parts.last() {
                        Some(last) => unique(&last.value, &mut taken),
                        None => continue,
                    },
                    _ => format!("EXPR${position}"),
                };
                *item = SelectItem::ExprWithAlias {
                    expr: expr.clone(),
                    alias: Ident::with_quote('`', name),
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

/// `name`, or as Flink (Calcite) does for a repeated name, `name0`, `name1`, ...
fn unique(name: &str, taken: &mut Vec<String>) -> String {
    let mut candidate = name.to_string();
    let mut suffix = 0;
    while taken.contains(&candidate) {
        candidate = format!("{name}{suffix}");
        suffix += 1;
    }
    taken.push(candidate.clone());
    candidate
}

#[cfg(test)]
mod tests {
    use sqlparser::ast::Statement;
    use sqlparser::parser::Parser;

    use super::*;
    use crate::dialect::FlinkDialect;

    fn names(sql: &str) -> Vec<String> {
        let mut statements = Parser::parse_sql(&FlinkDialect, sql).unwrap();
        let Statement::Query(query) = &mut statements[0] else {
            panic!("not a query: {sql}");
        };
        name_select_items(query);
        let SetExpr::Select(select) = query.body.as_ref() else {
            panic!("not a select: {sql}");
        };
        select
            .projection
            .iter()
            .map(|item| match item {
                SelectItem::ExprWithAlias { alias, .. } => alias.value.clone(),
                SelectItem::UnnamedExpr(Expr::Identifier(ident)) => ident.value.clone(),
                other => panic!("unnamed item {other}"),
            })
            .collect()
    }

    #[test]
    fn unnamed_expressions_are_named_by_their_position() {
        assert_eq!(
            names("SELECT a, COUNT(*), price * 2 FROM t"),
            ["a", "EXPR$1", "EXPR$2"]
        );
    }

    #[test]
    fn a_field_path_is_named_by_its_last_part_and_repeats_get_a_counter() {
        assert_eq!(
            names("SELECT person.id, auction.id, bid.id, t.x AS id1 FROM t"),
            ["id", "id0", "id2", "id1"]
        );
    }

    #[test]
    fn a_derived_name_does_not_take_a_later_column_name() {
        assert_eq!(
            names("SELECT bid.`dateTime`, `dateTime` FROM t"),
            ["dateTime0", "dateTime"]
        );
    }
}
