//! Legacy group windows: `GROUP BY TUMBLE(ts, size)` rewritten to the window TVF.
//!
//! ```text
//! SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE), COUNT(*)
//! FROM t GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)
//!   ⇒
//! SELECT k, __weir_window_start AS "TUMBLE_START(...)", COUNT(*)
//! FROM TABLE(__weir_group_TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) AS t
//! GROUP BY k, __weir_window_start, __weir_window_end
//! ```
//!
//! The result is exactly Flink's semantics for these windows, and one planner
//! path serves both syntaxes.

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, Ident, Query, Select, SelectItem,
    SetExpr, TableAlias, TableFactor, TableWithJoins, VisitMut, VisitorMut,
};

use crate::dialect::{TABLE_ARG_FUNCTION, marker_call};
use crate::window_tvf::{LEGACY_PREFIX, WindowColumns};
use crate::{Error, Result};

/// Rewrites every legacy group window in `query` (including subqueries).
pub fn rewrite_group_windows(query: &mut Query) -> Result<()> {
    let mut visitor = GroupWindowRewriter { error: None };
    let _ = query.visit(&mut visitor);
    match visitor.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

struct GroupWindowRewriter {
    error: Option<Error>,
}

impl VisitorMut for GroupWindowRewriter {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let Err(e) = rewrite_set_expr(&mut query.body) {
            self.error = Some(e);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

fn rewrite_set_expr(body: &mut SetExpr) -> Result<()> {
    match body {
        SetExpr::Select(select) => rewrite_select(select),
        SetExpr::SetOperation { left, right, .. } => {
            rewrite_set_expr(left)?;
            rewrite_set_expr(right)
        }
        _ => Ok(()),
    }
}

/// The kind of a group window call, `TUMBLE`, `HOP` or `SESSION`.
fn group_window_kind(expr: &Expr) -> Option<(String, &sqlparser::ast::Function)> {
    let Expr::Function(f) = expr else { return None };
    let name = f.name.to_string().to_ascii_uppercase();
    matches!(name.as_str(), "TUMBLE" | "HOP" | "SESSION").then_some((name, f))
}

fn plain_args(f: &sqlparser::ast::Function) -> Vec<Expr> {
    match &f.args {
        FunctionArguments::List(list) => list
            .args
            .iter()
            .filter_map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
                _ => None,
            })
            .collect(),
        _ => vec![],
    }
}

fn rewrite_select(select: &mut Select) -> Result<()> {
    let GroupByExpr::Expressions(exprs, _) = &mut select.group_by else {
        return Ok(());
    };
    let Some(position) = exprs.iter().position(|e| group_window_kind(e).is_some()) else {
        return Ok(());
    };
    let window_call = exprs.remove(position);
    if exprs.iter().any(|e| group_window_kind(e).is_some()) {
        return Err(Error::sql("only one group window is allowed in a GROUP BY"));
    }
    let (kind, function) = group_window_kind(&window_call).expect("found above");
    let args = plain_args(function);
    let (expected, intervals) = match kind.as_str() {
        "TUMBLE" => (2..=3, "1-2"),
        "HOP" => (3..=4, "2-3"),
        _ => (2..=2, "1"),
    };
    if !expected.contains(&args.len()) {
        return Err(Error::sql(format!(
            "{kind} group window takes the time attribute and {intervals} interval(s), got {window_call}"
        )));
    }
    let time_column = match &args[0] {
        Expr::Identifier(ident) => ident.clone(),
        Expr::CompoundIdentifier(parts) => parts.last().cloned().expect("non-empty"),
        other => {
            return Err(Error::sql(format!(
                "the first argument of {kind} must be a time attribute column, got {other}"
            )));
        }
    };
    let columns = WindowColumns::legacy();
    exprs.push(Expr::Identifier(Ident::new(&columns.start)));
    exprs.push(Expr::Identifier(Ident::new(&columns.end)));

    // Window properties in the select list, HAVING and QUALIFY.
    let mut properties = PropertyRewriter {
        kind: kind.clone(),
        args: args.clone(),
        columns: columns.clone(),
        error: None,
    };
    for item in &mut select.projection {
        if let SelectItem::UnnamedExpr(expr) = item
            && properties.is_property(expr)
        {
            let alias = Ident::with_quote('"', expr.to_string());
            *item = SelectItem::ExprWithAlias {
                expr: expr.clone(),
                alias,
            };
        }
    }
    let _ = select.projection.visit(&mut properties);
    if let Some(having) = &mut select.having {
        let _ = having.visit(&mut properties);
    }
    if let Some(e) = properties.error {
        return Err(e);
    }

    // FROM t  ⇒  FROM TABLE(__weir_group_KIND(TABLE t, DESCRIPTOR(ts), args...)) AS t
    if select.from.len() != 1 {
        return Err(Error::sql(format!(
            "a {kind} group window needs exactly one relation in FROM (join or subquery first)"
        )));
    }
    let from = select.from.remove(0);
    let (data_arg, alias) = match from {
        TableWithJoins {
            relation:
                TableFactor::Table {
                    name,
                    alias,
                    args: None,
                    ..
                },
            joins,
        } if joins.is_empty() => {
            let parts: Vec<Ident> = name.0.iter().filter_map(|p| p.as_ident().cloned()).collect();
            let alias = alias.unwrap_or_else(|| TableAlias {
                explicit: false,
                name: parts.last().cloned().expect("a table name has a part"),
                columns: vec![],
                at: None,
            });
            let arg = marker_call(
                TABLE_ARG_FUNCTION,
                vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(
                    Expr::CompoundIdentifier(parts),
                ))],
            );
            (arg, Some(alias))
        }
        TableWithJoins {
            relation: TableFactor::Derived { subquery, alias, .. },
            joins,
        } if joins.is_empty() => (Expr::Subquery(subquery), alias),
        other => {
            return Err(Error::sql(format!(
                "a {kind} group window over a join is not supported yet: {other}"
            )));
        }
    };
    let mut call_args = vec![
        FunctionArg::Unnamed(FunctionArgExpr::Expr(data_arg)),
        FunctionArg::Unnamed(FunctionArgExpr::Expr(marker_call(
            "DESCRIPTOR",
            vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Identifier(
                time_column,
            )))],
        ))),
    ];
    call_args.extend(
        args[1..]
            .iter()
            .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a.clone()))),
    );
    select.from.push(TableWithJoins {
        relation: TableFactor::TableFunction {
            expr: marker_call(&format!("{LEGACY_PREFIX}{kind}"), call_args),
            alias,
        },
        joins: vec![],
    });
    Ok(())
}

/// Replaces `TUMBLE_START(...)` and kin with the hidden window columns.
struct PropertyRewriter {
    kind: String,
    args: Vec<Expr>,
    columns: WindowColumns,
    error: Option<Error>,
}

impl PropertyRewriter {
    /// The window column a property call stands for, if `expr` is one.
    fn column_for(&mut self, expr: &Expr) -> Option<String> {
        let Expr::Function(f) = expr else { return None };
        let name = f.name.to_string().to_ascii_uppercase();
        let (kind, property) = name.split_once('_')?;
        if !matches!(kind, "TUMBLE" | "HOP" | "SESSION") {
            return None;
        }
        let column = match property {
            "START" => &self.columns.start,
            "END" => &self.columns.end,
            "ROWTIME" | "PROCTIME" => &self.columns.time,
            _ => return None,
        };
        if kind != self.kind || plain_args(f) != self.args {
            self.error = Some(Error::sql(format!(
                "{expr} does not match the group window of the GROUP BY clause"
            )));
            return None;
        }
        Some(column.clone())
    }

    fn is_property(&mut self, expr: &Expr) -> bool {
        self.column_for(expr).is_some()
    }
}

impl VisitorMut for PropertyRewriter {
    type Break = ();

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Some(column) = self.column_for(expr) {
            *expr = Expr::Identifier(Ident::new(column));
        }
        ControlFlow::Continue(())
    }
}
