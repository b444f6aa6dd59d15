//! Window table functions: `TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size))` and kin.
//!
//! The relation planner turns the call into a [`WindowTvfNode`], a logical plan
//! node whose schema is its input's columns plus `window_start`, `window_end`
//! and `window_time`. The streaming planner later either fuses the node into a
//! window aggregation (no rows are copied) or runs it as a window assigner.
//! Views are inlined by the same planner: a view name becomes its query.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, TimeUnit};
use datafusion_common::{Column, DFSchema, DFSchemaRef, Result as DFResult, ScalarValue, plan_err};
use datafusion_expr::Expr;
use datafusion_expr::logical_plan::{Extension, LogicalPlan, UserDefinedLogicalNodeCore};
use datafusion_expr::planner::{PlannedRelation, RelationPlanner, RelationPlannerContext, RelationPlanning};
use sqlparser::ast::{
    self, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, ObjectName, ObjectNamePart, TableAlias,
    TableAliasColumnDef, TableFactor,
};

use crate::catalog::{Catalog, ViewBody};
use crate::dialect::{TABLE_ARG_FUNCTION, table_factor};
use crate::parser::resolve_object_name;
use weir_common::types::TIME_ATTRIBUTE_KEY;
use weir_plan::window::{TvfWindow, WindowSpec};

/// Prefix of the function names the legacy `GROUP BY TUMBLE(...)` rewrite uses;
/// their window columns get hidden names.
pub const LEGACY_PREFIX: &str = "__weir_group_";

/// Names of the three columns a window TVF adds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub struct WindowColumns {
    /// `window_start`.
    pub start: String,
    /// `window_end`.
    pub end: String,
    /// `window_time`.
    pub time: String,
}

impl WindowColumns {
    /// The names Flink's window TVFs use.
    pub fn standard() -> Self {
        WindowColumns {
            start: "window_start".into(),
            end: "window_end".into(),
            time: "window_time".into(),
        }
    }

    /// Hidden names for the legacy group-window rewrite.
    pub fn legacy() -> Self {
        WindowColumns {
            start: "__weir_window_start".into(),
            end: "__weir_window_end".into(),
            time: "__weir_window_time".into(),
        }
    }
}

/// `TUMBLE` / `HOP` / `CUMULATE` applied to an input: adds the window columns.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WindowTvfNode {
    /// The input relation.
    pub input: LogicalPlan,
    /// The time attribute the windows are over.
    pub time_column: Column,
    /// The windows.
    pub window: TvfWindow,
    /// `SESSION(TABLE t PARTITION BY k ...)`: the keys sessions are kept per.
    /// `None` for the legacy `GROUP BY SESSION(...)`, whose sessions are per
    /// grouping key.
    pub partition_by: Option<Vec<Column>>,
    /// Names of the added columns.
    pub columns: WindowColumns,
    /// Input columns followed by the three window columns.
    pub schema: DFSchemaRef,
}

impl PartialOrd for WindowTvfNode {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        match self.window.partial_cmp(&other.window) {
            Some(Ordering::Equal) => self.input.partial_cmp(&other.input),
            ordering => ordering,
        }
    }
}

impl WindowTvfNode {
    /// Builds the node and its schema.
    pub fn try_new(
        input: LogicalPlan,
        time_column: Column,
        window: TvfWindow,
        partition_by: Option<Vec<Column>>,
        columns: WindowColumns,
    ) -> DFResult<Self> {
        let time_field = input
            .schema()
            .field(input.schema().index_of_column(&time_column)?)
            .as_ref()
            .clone();
        for name in [&columns.start, &columns.end, &columns.time] {
            if input.schema().has_column_with_unqualified_name(name) {
                return plan_err!("the input of a window table function already has a column named '{name}'");
            }
        }
        let window_time_type = match time_field.data_type() {
            DataType::Timestamp(_, zone) => DataType::Timestamp(TimeUnit::Millisecond, zone.clone()),
            other => return plan_err!("window time column must be a timestamp, got {other}"),
        };
        let window_time =
            Field::new(&columns.time, window_time_type, false).with_metadata(time_field.metadata().clone());
        let added = DFSchema::from_unqualified_fields(
            vec![
                Field::new(
                    &columns.start,
                    DataType::Timestamp(TimeUnit::Millisecond, None),
                    false,
                ),
                Field::new(
                    &columns.end,
                    DataType::Timestamp(TimeUnit::Millisecond, None),
                    false,
                ),
                window_time,
            ]
            .into(),
            HashMap::new(),
        )?;
        let mut schema = input.schema().as_ref().clone();
        schema.merge(&added);
        Ok(WindowTvfNode {
            input,
            time_column,
            window,
            partition_by,
            columns,
            schema: Arc::new(schema),
        })
    }

    /// Indices of window_start, window_end and window_time in the schema.
    pub fn window_column_indices(&self) -> [usize; 3] {
        let n = self.input.schema().fields().len();
        [n, n + 1, n + 2]
    }
}

impl UserDefinedLogicalNodeCore for WindowTvfNode {
    fn name(&self) -> &str {
        "WindowTvf"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        vec![]
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "WindowTvf: {} on {}", self.window, self.time_column)?;
        if let Some(keys) = &self.partition_by {
            let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
            write!(f, " partition by {}", keys.join(", "))?;
        }
        Ok(())
    }

    fn with_exprs_and_inputs(&self, _exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> DFResult<Self> {
        let input = inputs.into_iter().next().expect("window TVF has one input");
        WindowTvfNode::try_new(
            input,
            self.time_column.clone(),
            self.window,
            self.partition_by.clone(),
            self.columns.clone(),
        )
    }

    fn necessary_children_exprs(&self, output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        // Keep every input column the output needs, plus the time column.
        let input_len = self.input.schema().fields().len();
        let time_index = self.input.schema().index_of_column(&self.time_column).ok()?;
        let mut needed: Vec<usize> = output_columns
            .iter()
            .copied()
            .filter(|i| *i < input_len)
            .collect();
        if !needed.contains(&time_index) {
            needed.push(time_index);
        }
        needed.sort_unstable();
        Some(vec![needed])
    }
}

/// Plans window TVFs and inlines views.
#[derive(Debug)]
pub struct FlinkRelationPlanner {
    catalog: Arc<Catalog>,
}

impl FlinkRelationPlanner {
    /// A planner over the session's catalog.
    pub fn new(catalog: Arc<Catalog>) -> Self {
        FlinkRelationPlanner { catalog }
    }
}

fn function_name(f: &ast::Function) -> String {
    f.name.to_string().to_ascii_uppercase()
}

impl RelationPlanner for FlinkRelationPlanner {
    fn plan_relation(
        &self,
        relation: TableFactor,
        context: &mut dyn RelationPlannerContext,
    ) -> DFResult<RelationPlanning> {
        match relation {
            TableFactor::TableFunction {
                expr: ast::Expr::Function(f),
                alias,
            } => {
                let name = function_name(&f);
                let (kind_name, columns) = match name.strip_prefix(&LEGACY_PREFIX.to_ascii_uppercase()) {
                    Some(kind) => (kind.to_string(), WindowColumns::legacy()),
                    None => (name.clone(), WindowColumns::standard()),
                };
                match kind_name.as_str() {
                    "TUMBLE" | "HOP" | "CUMULATE" | "SESSION" => {
                        let plan = plan_window_tvf(&kind_name, f, columns, context)?;
                        Ok(RelationPlanning::Planned(Box::new(PlannedRelation::new(
                            plan, alias,
                        ))))
                    }
                    _ => Ok(RelationPlanning::Original(Box::new(TableFactor::TableFunction {
                        expr: ast::Expr::Function(f),
                        alias,
                    }))),
                }
            }
            TableFactor::Table {
                ref name,
                ref alias,
                args: None,
                ..
            } if let Some((view_name, view)) = resolve_object_name(name)
                .and_then(|n| Some((n.clone(), self.catalog.view(&n).cloned()?))) =>
            {
                let columns = match &view.body {
                    ViewBody::Sql(definition) => definition.columns.clone(),
                    ViewBody::Plan(_) => Vec::new(),
                };
                let alias = alias.clone().or_else(|| {
                    Some(TableAlias {
                        explicit: false,
                        name: Ident::new(&view_name),
                        columns: (columns.iter())
                            .map(|c| TableAliasColumnDef::from_name(c.as_str()))
                            .collect(),
                        at: None,
                    })
                });
                let plan = match &view.body {
                    ViewBody::Sql(definition) => context.plan(TableFactor::Derived {
                        lateral: false,
                        subquery: definition.query.clone(),
                        alias: None,
                        sample: None,
                    })?,
                    ViewBody::Plan(plan) => plan.clone(),
                };
                Ok(RelationPlanning::Planned(Box::new(PlannedRelation::new(
                    plan, alias,
                ))))
            }
            TableFactor::Table {
                name,
                alias,
                args,
                with_hints,
                version: Some(ast::TableVersion::ForSystemTimeAsOf(time)),
                with_ordinality,
                partitions,
                json_path,
                sample,
                index_hints,
            } => {
                let time = match time {
                    ast::Expr::Identifier(i) => vec![i.value],
                    ast::Expr::CompoundIdentifier(parts) => parts.into_iter().map(|i| i.value).collect(),
                    other => {
                        return plan_err!("FOR SYSTEM_TIME AS OF needs a time attribute column, not {other}");
                    }
                };
                let table = context.plan(TableFactor::Table {
                    name,
                    alias: None,
                    args,
                    with_hints,
                    version: None,
                    with_ordinality,
                    partitions,
                    json_path,
                    sample,
                    index_hints,
                })?;
                let node = super::temporal::VersionedTableNode { input: table, time };
                let plan = LogicalPlan::Extension(Extension { node: Arc::new(node) });
                Ok(RelationPlanning::Planned(Box::new(PlannedRelation::new(
                    plan, alias,
                ))))
            }
            other => Ok(RelationPlanning::Original(Box::new(other))),
        }
    }
}

/// The arguments of a window TVF by role.
struct TvfArgs {
    data: Option<ast::Expr>,
    descriptor: Option<ast::Expr>,
    durations: Vec<(Option<String>, ast::Expr)>,
}

fn collect_args(f: ast::Function) -> DFResult<TvfArgs> {
    let FunctionArguments::List(list) = f.args else {
        return plan_err!("{} needs arguments", f.name);
    };
    let mut args = TvfArgs {
        data: None,
        descriptor: None,
        durations: vec![],
    };
    for arg in list.args {
        let (name, expr) = match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => (None, e),
            FunctionArg::Named {
                name,
                arg: FunctionArgExpr::Expr(e),
                ..
            } => (Some(name.value.to_ascii_uppercase()), e),
            other => return plan_err!("unsupported argument {other} of {}", f.name),
        };
        match (&name, &expr) {
            (Some(n), _) if n == "DATA" => args.data = Some(expr),
            (Some(n), _) if n == "TIMECOL" => args.descriptor = Some(expr),
            (None, ast::Expr::Function(g)) if function_name(g) == TABLE_ARG_FUNCTION.to_ascii_uppercase() => {
                args.data = Some(expr)
            }
            (None, ast::Expr::Subquery(_)) if args.data.is_none() => args.data = Some(expr),
            (None, ast::Expr::Function(g)) if function_name(g) == "DESCRIPTOR" => {
                args.descriptor = Some(expr)
            }
            _ => args.durations.push((name, expr)),
        }
    }
    Ok(args)
}

fn plan_window_tvf(
    kind: &str,
    f: ast::Function,
    columns: WindowColumns,
    context: &mut dyn RelationPlannerContext,
) -> DFResult<LogicalPlan> {
    let args = collect_args(f)?;
    let mut partition_keys: Option<Vec<String>> = None;
    let input = match args.data {
        Some(ast::Expr::Function(table_arg)) => {
            let FunctionArguments::List(list) = table_arg.args else {
                return plan_err!("malformed table argument");
            };
            let mut args = list.args.into_iter();
            let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(ast::Expr::CompoundIdentifier(parts)))) =
                args.next()
            else {
                return plan_err!("malformed table argument");
            };
            if let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(ast::Expr::Function(keys)))) = args.next()
            {
                if kind != "SESSION" {
                    return plan_err!("PARTITION BY is only allowed in SESSION windows");
                }
                let FunctionArguments::List(keys) = keys.args else {
                    return plan_err!("malformed PARTITION BY");
                };
                partition_keys = Some(
                    keys.args
                        .into_iter()
                        .map(|k| match k {
                            FunctionArg::Unnamed(FunctionArgExpr::Expr(ast::Expr::Identifier(i))) => {
                                Ok(i.value)
                            }
                            other => plan_err!("PARTITION BY takes column names, got {other}"),
                        })
                        .collect::<DFResult<Vec<_>>>()?,
                );
            }
            context.plan(table_factor(ObjectName(
                parts.into_iter().map(ObjectNamePart::Identifier).collect(),
            )))?
        }
        Some(ast::Expr::Subquery(query)) => context.plan(TableFactor::Derived {
            lateral: false,
            subquery: query,
            alias: None,
            sample: None,
        })?,
        _ => return plan_err!("{kind} needs a table argument: {kind}(TABLE t, DESCRIPTOR(ts), ...)"),
    };
    let Some(ast::Expr::Function(descriptor)) = args.descriptor else {
        return plan_err!("{kind} needs a time column: DESCRIPTOR(ts)");
    };
    let time_column = descriptor_column(&descriptor, &input, context)?;
    let mut durations = Vec::new();
    for (name, expr) in args.durations {
        durations.push((name, interval_millis(expr, context)?));
    }
    let take = |role: &str, position: usize, durations: &[(Option<String>, i64)]| -> Option<i64> {
        durations
            .iter()
            .find(|(n, _)| n.as_deref() == Some(role))
            .or_else(|| durations.iter().filter(|(n, _)| n.is_none()).nth(position))
            .map(|(_, v)| *v)
    };
    let spec = match kind {
        "TUMBLE" => {
            let Some(size) = take("SIZE", 0, &durations) else {
                return plan_err!(
                    "TUMBLE needs a size: TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND)"
                );
            };
            WindowSpec::tumble(size, take("OFFSET", 1, &durations).unwrap_or(0))
        }
        "HOP" => {
            let (Some(slide), Some(size)) = (take("SLIDE", 0, &durations), take("SIZE", 1, &durations))
            else {
                return plan_err!(
                    "HOP needs a slide and a size, in that order: HOP(TABLE t, DESCRIPTOR(ts), slide, size)"
                );
            };
            WindowSpec::hop(slide, size, take("OFFSET", 2, &durations).unwrap_or(0))
        }
        "CUMULATE" => {
            let (Some(step), Some(size)) = (take("STEP", 0, &durations), take("SIZE", 1, &durations)) else {
                return plan_err!(
                    "CUMULATE needs a step and a size: CUMULATE(TABLE t, DESCRIPTOR(ts), step, size)"
                );
            };
            WindowSpec::cumulate(step, size, take("OFFSET", 2, &durations).unwrap_or(0))
        }
        _ => {
            let Some(gap) = take("GAP", 0, &durations) else {
                return plan_err!(
                    "SESSION needs a gap: SESSION(TABLE t [PARTITION BY k], DESCRIPTOR(ts), gap)"
                );
            };
            if gap <= 0 {
                return plan_err!("the SESSION gap must be positive");
            }
            let partition_by = match (columns == WindowColumns::legacy(), partition_keys) {
                (true, _) => None,
                (false, keys) => Some(
                    keys.unwrap_or_default()
                        .iter()
                        .map(
                            |k| match input.schema().qualified_field_with_unqualified_name(k) {
                                Ok((q, _)) => Ok(Column::new(q.cloned(), k)),
                                Err(_) => plan_err!("PARTITION BY column '{k}' not found"),
                            },
                        )
                        .collect::<DFResult<Vec<_>>>()?,
                ),
            };
            let node = WindowTvfNode::try_new(
                input,
                time_column,
                TvfWindow::Session { gap },
                partition_by,
                columns,
            )?;
            return Ok(LogicalPlan::Extension(Extension { node: Arc::new(node) }));
        }
    }
    .map_err(|e| datafusion_common::DataFusionError::Plan(e.to_string()))?;
    let node = WindowTvfNode::try_new(input, time_column, TvfWindow::Sliced(spec), None, columns)?;
    Ok(LogicalPlan::Extension(Extension { node: Arc::new(node) }))
}

fn descriptor_column(
    descriptor: &ast::Function,
    input: &LogicalPlan,
    _context: &mut dyn RelationPlannerContext,
) -> DFResult<Column> {
    let FunctionArguments::List(list) = &descriptor.args else {
        return plan_err!("DESCRIPTOR needs a column name");
    };
    let name = match list.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(ast::Expr::Identifier(ident)))] => ident.value.clone(),
        _ => return plan_err!("DESCRIPTOR takes exactly one column name"),
    };
    if input
        .schema()
        .qualified_field_with_unqualified_name(&name)
        .is_err()
    {
        return plan_err!("column '{name}' of DESCRIPTOR({name}) not found in the window's input");
    }
    time_attribute(input, &name)
}

/// The column `name` of `input` as the time attribute windows are over: an
/// error unless it is one (a timestamp with a watermark or `PROCTIME()`,
/// not out of a regular join).
pub fn time_attribute(input: &LogicalPlan, name: &str) -> DFResult<Column> {
    let (qualifier, field) = input.schema().qualified_field_with_unqualified_name(name)?;
    if !matches!(field.data_type(), DataType::Timestamp(_, _)) {
        return plan_err!(
            "the window time column must be a time attribute, but '{name}' is {}",
            weir_common::types::flink_type_name(field.data_type())
        );
    }
    // A regular join's output has no time attributes; an interval join's
    // keeps them.
    let joined = datafusion_common::tree_node::TreeNode::exists(input, |p| {
        Ok(matches!(p, LogicalPlan::Join(join) if !is_interval_join(join)))
    })?;
    if joined {
        return plan_err!(
            "the window time column '{name}' must be a time attribute, but it comes out of a regular \
             join, whose output has none (as in Flink: a regular join turns time attributes into \
             plain timestamps)"
        );
    }
    if !field.metadata().contains_key(TIME_ATTRIBUTE_KEY) {
        return plan_err!(
            "the window time column '{name}' must be a time attribute: declare a WATERMARK FOR {name} \
             in its table, or use a PROCTIME() column"
        );
    }
    Ok(Column::new(qualifier.cloned(), name))
}

/// Evaluates a constant interval argument to milliseconds.
fn interval_millis(expr: ast::Expr, context: &mut dyn RelationPlannerContext) -> DFResult<i64> {
    let text = expr.to_string();
    let planned = context.sql_to_expr(expr, &DFSchema::empty())?;
    let value = match planned {
        Expr::Literal(v, _) => v,
        other => return plan_err!("window sizes must be interval literals, got {other}"),
    };
    let ms = match value {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 && v.nanoseconds % 1_000_000 == 0 => {
            v.days as i64 * 86_400_000 + v.nanoseconds / 1_000_000
        }
        ScalarValue::IntervalDayTime(Some(v)) => v.days as i64 * 86_400_000 + v.milliseconds as i64,
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months != 0 => {
            return plan_err!("windows of months or years are not supported: {text}");
        }
        other => return plan_err!("window sizes must be whole milliseconds, got {text} ({other})"),
    };
    Ok(ms)
}

/// Whether a join is planned as an interval or window join (its output
/// keeps the time attributes).
fn is_interval_join(join: &datafusion_expr::logical_plan::Join) -> bool {
    use datafusion_common::JoinType;
    let interval = matches!(
        join.join_type,
        JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full
    ) && join.filter.as_ref().is_some_and(|f| {
        crate::planner::interval::interval_bounds(f, join.left.schema(), join.right.schema()).is_some()
    });
    interval || window_join_ends(join).is_some()
}

/// A window join, as Flink recognises it: the join's equal keys include
/// `window_start = window_start` and `window_end = window_end` of window
/// TVFs of the same windows on both sides. Each side's `window_end` column.
pub fn window_join_ends(join: &datafusion_expr::logical_plan::Join) -> Option<[usize; 2]> {
    use weir_plan::window::WindowProperty;
    let column = |plan: &LogicalPlan, e: &Expr| match e {
        Expr::Column(c) => {
            let index = plan.schema().index_of_column(c).ok()?;
            window_column(plan, index).map(|(window, property, _)| (window, property, index))
        }
        _ => None,
    };
    let (mut start, mut end) = (false, None);
    for (l, r) in &join.on {
        let (Some(l), Some(r)) = (column(&join.left, l), column(&join.right, r)) else {
            continue;
        };
        if l.0 != r.0 || l.1 != r.1 {
            continue;
        }
        match l.1 {
            WindowProperty::Start => start = true,
            WindowProperty::End => end = Some([l.2, r.2]),
            WindowProperty::Time => {}
        }
    }
    end.filter(|_| start)
}

/// A window TopN's partition, as Flink recognises it: `partition_by`
/// (over `plan`) includes `window_start` and `window_end` of the same
/// windows. The `window_end` column, and whether the windows are over
/// processing time.
pub fn window_partition_end(plan: &LogicalPlan, partition_by: &[Expr]) -> Option<(usize, bool)> {
    use weir_plan::window::WindowProperty;
    let columns: Vec<(TvfWindow, WindowProperty, bool, usize)> = partition_by
        .iter()
        .filter_map(|e| match e {
            Expr::Column(c) => {
                let index = plan.schema().index_of_column(c).ok()?;
                let (window, property, proctime) = window_column(plan, index)?;
                Some((window, property, proctime, index))
            }
            _ => None,
        })
        .collect();
    columns.iter().find_map(|(window, property, proctime, index)| {
        let start = columns
            .iter()
            .any(|(w, p, _, _)| w == window && *p == WindowProperty::Start);
        (*property == WindowProperty::End && start).then_some((*index, *proctime))
    })
}

/// The window TVF column that column `index` of `plan` is, through
/// aliases, filters, projections and grouping (a window aggregation's
/// `window_start`, `window_end`), with whether the windows are over
/// processing time.
fn window_column(
    plan: &LogicalPlan,
    index: usize,
) -> Option<(TvfWindow, weir_plan::window::WindowProperty, bool)> {
    use weir_plan::window::WindowProperty;
    match plan {
        LogicalPlan::Extension(e) => {
            let node = e.node.as_any().downcast_ref::<WindowTvfNode>()?;
            let property = match index.checked_sub(node.input.schema().fields().len())? {
                0 => WindowProperty::Start,
                1 => WindowProperty::End,
                2 => WindowProperty::Time,
                _ => return None,
            };
            let proctime = node
                .input
                .schema()
                .qualified_field_from_column(&node.time_column)
                .is_ok_and(|(_, f)| {
                    f.metadata()
                        .get(weir_common::types::TIME_ATTRIBUTE_KEY)
                        .map(String::as_str)
                        == Some(weir_common::types::PROCTIME)
                });
            Some((node.window, property, proctime))
        }
        LogicalPlan::Aggregate(a) => match a.group_expr.get(index)? {
            Expr::Column(c) => window_column(&a.input, a.input.schema().index_of_column(c).ok()?),
            _ => None,
        },
        LogicalPlan::SubqueryAlias(a) => window_column(&a.input, index),
        LogicalPlan::Filter(f) => window_column(&f.input, index),
        LogicalPlan::Projection(p) => match p.expr.get(index)? {
            Expr::Column(c) => window_column(&p.input, p.input.schema().index_of_column(c).ok()?),
            Expr::Alias(a) => match a.expr.as_ref() {
                Expr::Column(c) => window_column(&p.input, p.input.schema().index_of_column(c).ok()?),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}
