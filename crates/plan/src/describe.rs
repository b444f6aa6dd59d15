//! How EXPLAIN names a plan node, from its spec: Flink's words where Flink
//! has the node (`GroupAggregate(groupBy=[k], select=[k, COUNT(*) AS c])`).
//!
//! The planner names each node it makes with [`describe`] and the name
//! travels in the spec ([`super::spec::NodeEntry::name`]), so whoever runs a
//! plan shows the same names (tasks, metrics, errors) without planning it.
//! Expressions are decoded to be shown as DataFusion writes them.

use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use datafusion_physical_expr::PhysicalExpr;

use crate::codec::{DecodeContext, decode_expr, decode_exprs};
use crate::join::{JoinKind, Layout};
use crate::spec::{AggregationData, NodeSpec, OverData, SourceSpec, TopNData};
use crate::window::{Phase, WindowSpec, duration_text};
use crate::{Error, Result};
use weir_common::changelog::without_op;

/// The name of a node of kind `spec` over inputs of `inputs` with output
/// `output`; `None` for a connector's source or sink, which its connector
/// names.
pub fn describe(
    spec: &NodeSpec,
    inputs: &[SchemaRef],
    output: &SchemaRef,
    ctx: &DecodeContext,
) -> Result<Option<String>> {
    let input = || {
        inputs
            .first()
            .cloned()
            .ok_or_else(|| Error::Internal("a plan node without input".into()))
    };
    let pair = || match inputs {
        [left, right] => Ok([left.clone(), right.clone()]),
        _ => Err(Error::Internal("a join without two inputs".into())),
    };
    Ok(Some(match spec {
        NodeSpec::Source(source) => return Ok(source_name(source)),
        NodeSpec::Sink(super::spec::SinkSpec::Collect { .. }) => "Sink: collect".to_string(),
        NodeSpec::Sink(_) => return Ok(None),
        NodeSpec::Calc { filter, projection } => {
            let input = input()?;
            let filter = filter.as_ref().map(|f| decode_expr(f, &input, ctx)).transpose()?;
            let projection = projection
                .as_ref()
                .map(|p| decode_exprs(p, &input, ctx))
                .transpose()?;
            calc(filter.as_ref(), projection.as_deref(), output)
        }
        NodeSpec::Watermark {
            rowtime,
            text,
            idle_timeout,
            ..
        } => {
            let idle = idle_timeout
                .map(|ms| format!(", idleTimeout=[{ms} ms]"))
                .unwrap_or_default();
            format!("WatermarkAssigner(rowtime=[{rowtime}], watermark=[{text}]{idle})")
        }
        NodeSpec::WindowAssign {
            window, time_name, ..
        } => {
            format!(
                "WindowTableFunction(window=[{}], time=[{time_name}])",
                WindowSpec::from(*window)
            )
        }
        NodeSpec::WindowAggregate(data) => window_aggregate(data)?,
        NodeSpec::SessionAggregate(data) => session_aggregate(data)?,
        NodeSpec::CountWindowAggregate(data) => count_window_aggregate(data)?,
        NodeSpec::GroupAggregate(data) => group_aggregate(data)?,
        NodeSpec::OverAggregate(data) => over(data, &input()?, ctx)?,
        NodeSpec::TopN(data) => top_n(data, &input()?, ctx)?,
        NodeSpec::TemporalSort { time, then } => {
            let input = input()?;
            let then = super::codec::decode_sort_keys(then, &input, ctx)?;
            let mut keys = vec![match time {
                Some(i) => format!("{} ASC", input.field(*i).name()),
                None => "PROCTIME ASC".to_string(),
            }];
            keys.extend(then.iter().map(|(e, o)| sort_key(e, o.descending)));
            format!("TemporalSort(orderBy=[{}])", keys.join(", "))
        }
        NodeSpec::Union => "Union".to_string(),
        NodeSpec::DropUpdateBefore { .. } => "DropUpdateBefore".to_string(),
        NodeSpec::SinkMaterializer { key } => format!("SinkMaterializer(pk=[{}])", names(output, key)),
        NodeSpec::ChangelogNormalize { key } => format!("ChangelogNormalize(key=[{}])", names(output, key)),
        NodeSpec::Join(data) => {
            let [left, right] = pair()?;
            let sides = [without_op(&left), without_op(&right)];
            let (keys, filter) = data.decode(&sides, &sides, ctx)?;
            let updating = [
                weir_common::changelog::has_op(&left),
                weir_common::changelog::has_op(&right),
            ];
            let layout = |side: usize| {
                let key_columns: Vec<usize> = keys[side].iter().filter_map(column_index).collect();
                Layout::of(data.unique_keys[side].as_deref(), &key_columns, updating[side]).flink_name()
            };
            let ttl = ttl_text(data.state_ttl_ms);
            format!(
                "Join(joinType=[{}], where=[{}], leftInputSpec=[{}], rightInputSpec=[{}]{ttl})",
                data.kind.flink_name(),
                condition_text(&keys, filter.as_ref()),
                layout(0),
                layout(1)
            )
        }
        NodeSpec::IntervalJoin(data) => {
            let inputs = pair()?;
            let (keys, filter) = data.join.decode(&inputs, &inputs, ctx)?;
            format!(
                "IntervalJoin(joinType=[{}], windowBounds=[isRowTime={}, leftLowerBound={}, leftUpperBound={}, \
                 leftTimeIndex={}, rightTimeIndex={}], where=[{}])",
                data.join.kind.flink_name(),
                !data.proctime,
                data.lower,
                data.upper,
                data.times[0],
                data.times[1],
                condition_text(&keys, filter.as_ref())
            )
        }
        NodeSpec::WindowJoin(data) => {
            let inputs = pair()?;
            let (keys, filter) = data.join.decode(&inputs, &inputs, ctx)?;
            join_text("WindowJoin", data.join.kind, &keys, filter.as_ref())
        }
        NodeSpec::LookupJoin(data) => {
            let inputs = pair()?;
            let (keys, filter) = data.decode(&inputs, &inputs, ctx)?;
            join_text("LookupJoin", data.kind, &keys, filter.as_ref())
        }
        NodeSpec::BroadcastJoin { join, table_side } => {
            let inputs = pair()?;
            let sql_inputs = join.sql_inputs(&inputs, *table_side);
            let (keys, filter) = join.decode(&inputs, &sql_inputs, ctx)?;
            let [stream, table] = keys;
            let keys = match table_side {
                0 => [table, stream],
                _ => [stream, table],
            };
            format!(
                "BroadcastJoin(joinType=[{}], where=[{}], broadcast=[{}])",
                join.kind.flink_name(),
                condition_text(&keys, filter.as_ref()),
                ["left", "right"][*table_side]
            )
        }
        NodeSpec::TemporalJoin(data) => {
            let [stream, table] = pair()?;
            let inputs = [without_op(&stream), without_op(&table)];
            let (keys, filter) = data.join.decode(&inputs, &inputs, ctx)?;
            format!(
                "TemporalJoin(joinType=[{}], where=[{}], leftTimeIndex={}, rightTimeIndex={})",
                data.join.kind.flink_name(),
                condition_text(&keys, filter.as_ref()),
                data.times[0],
                data.times[1]
            )
        }
    }))
}

/// The name of a source that is not a connector's (whose connector names it).
fn source_name(source: &SourceSpec) -> Option<String> {
    match source {
        SourceSpec::Connector { .. } => None,
        SourceSpec::Replayed(inner) => source_name(inner),
        SourceSpec::Values { batches, .. } => {
            let rows: usize = batches.decode().ok()?.iter().map(|b| b.num_rows()).sum();
            Some(format!("Values({rows} rows)"))
        }
    }
}

/// `Calc(select=[...], where=[...])`.
pub fn calc(
    filter: Option<&Arc<dyn PhysicalExpr>>,
    projection: Option<&[Arc<dyn PhysicalExpr>]>,
    output: &Schema,
) -> String {
    let mut parts = Vec::new();
    if let Some(projection) = projection {
        let items: Vec<String> = projection
            .iter()
            .zip(output.fields())
            .map(|(e, f)| {
                let text = expr_text(e.as_ref());
                if text == *f.name() {
                    text
                } else {
                    format!("{text} AS {}", f.name())
                }
            })
            .collect();
        parts.push(format!("select=[{}]", items.join(", ")));
    }
    if let Some(filter) = filter {
        parts.push(format!("where=[{}]", expr_text(filter.as_ref())));
    }
    format!("Calc({})", parts.join(", "))
}

/// The names of the key columns of an aggregation spec.
fn key_names(data: &AggregationData) -> Result<Vec<String>> {
    Ok(data
        .key_schema
        .decode()?
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect())
}

fn phase_prefix(phase: Phase) -> &'static str {
    match phase {
        Phase::Single => "",
        Phase::Local => "Local",
        Phase::Global => "Global",
    }
}

fn window_aggregate(data: &AggregationData) -> Result<String> {
    let keys = key_names(data)?;
    let aggregates: Vec<&str> = data.aggregates.iter().map(|a| a.alias.as_str()).collect();
    let group_by = match keys.is_empty() {
        true => String::new(),
        false => format!(", groupBy=[{}]", keys.join(", ")),
    };
    let window = data
        .window
        .ok_or_else(|| Error::State("a window aggregation without its window".into()))?;
    Ok(format!(
        "{}WindowAggregate(window=[{}], time=[{}]{group_by}, aggregates=[{}])",
        phase_prefix(data.phase()?),
        WindowSpec::from(window),
        data.time_name,
        aggregates.join(", ")
    ))
}

fn session_aggregate(data: &AggregationData) -> Result<String> {
    let keys = key_names(data)?;
    let aggregates: Vec<&str> = data.aggregates.iter().map(|a| a.alias.as_str()).collect();
    let partition = match keys.is_empty() {
        true => String::new(),
        false => format!(", partitionBy=[{}]", keys.join(", ")),
    };
    let gap = data
        .gap
        .ok_or_else(|| Error::State("a session aggregation without its gap".into()))?;
    Ok(format!(
        "SessionWindowAggregate(window=[SESSION(gap={})], time=[{}]{partition}, aggregates=[{}])",
        duration_text(gap),
        data.time_name,
        aggregates.join(", ")
    ))
}

fn count_window_aggregate(data: &AggregationData) -> Result<String> {
    let rows = data
        .rows
        .ok_or_else(|| Error::State("a count window aggregation without its windows".into()))?;
    let aggregates: Vec<&str> = data.aggregates.iter().map(|a| a.alias.as_str()).collect();
    let window = match rows.size == rows.slide {
        true => format!("TUMBLE({} rows)", rows.size),
        false => format!("SLIDE({} rows, every {})", rows.size, rows.slide),
    };
    Ok(format!(
        "CountWindowAggregate(window=[{window}], time=[{}], groupBy=[{}], aggregates=[{}])",
        data.time_name,
        key_names(data)?.join(", "),
        aggregates.join(", ")
    ))
}

fn group_aggregate(data: &AggregationData) -> Result<String> {
    let keys = key_names(data)?;
    let aggregates = data.aggregates.iter().map(|a| {
        let display = a.human_display.clone().unwrap_or_default();
        match display.is_empty() || display == a.alias {
            true => a.alias.clone(),
            false => format!("{display} AS {}", a.alias),
        }
    });
    let select: Vec<String> = keys.iter().cloned().chain(aggregates).collect();
    let group_by = match keys.is_empty() {
        true => String::new(),
        false => format!("groupBy=[{}], ", keys.join(", ")),
    };
    Ok(format!(
        "{}GroupAggregate({group_by}select=[{}]{})",
        phase_prefix(data.phase()?),
        select.join(", "),
        ttl_text(data.state_ttl_ms)
    ))
}

fn over(data: &OverData, input: &SchemaRef, ctx: &DecodeContext) -> Result<String> {
    let (partition, aggregates) = data.decode(input, ctx)?;
    let partition: Vec<String> = partition.iter().map(|e| e.to_string()).collect();
    let order = match data.time {
        Some(i) => format!("{} ASC", input.field(i).name()),
        None => "PROCTIME ASC".to_string(),
    };
    let aggregates: Vec<String> = aggregates
        .iter()
        .map(|a| a.human_display().unwrap_or(a.name()).to_string())
        .collect();
    Ok(format!(
        "{}OverAggregate(partitionBy=[{}], orderBy=[{order}], window=[{}], select=[*, {}])",
        if data.retract { "Retract" } else { "" },
        partition.join(", "),
        data.frame.describe(),
        aggregates.join(", ")
    ))
}

fn top_n(data: &TopNData, input: &SchemaRef, ctx: &DecodeContext) -> Result<String> {
    let (partition, order) = data.decode(input, ctx)?;
    let key: Vec<String> = partition.iter().map(|e| e.to_string()).collect();
    let key = key.join(", ");
    let ttl = ttl_text(data.state_ttl_ms);
    if let (Some(last), (1, 1)) = (data.arrival, (data.start, data.end)) {
        let keep = if last { "LastRow" } else { "FirstRow" };
        return Ok(format!(
            "Deduplicate(keep=[{keep}], key=[{key}], order=[PROCTIME]{ttl})"
        ));
    }
    let order: Vec<String> = order.iter().map(|(e, o)| sort_key(e, o.descending)).collect();
    let (node, strategy) = match (data.window_end, data.retract) {
        (Some(_), _) => ("WindowRank(", ""),
        (None, true) => ("Rank(", "strategy=[RetractStrategy], "),
        (None, false) => ("Rank(", "strategy=[AppendFastStrategy], "),
    };
    Ok(format!(
        "{node}{strategy}rankType=[{}], rankRange=[rankStart={}, rankEnd={}], \
         partitionBy=[{key}], orderBy=[{}], select=[*{}]{ttl})",
        data.rank_type.name(),
        data.start,
        data.end,
        order.join(", "),
        if data.rank_output { ", w0$o0" } else { "" }
    ))
}

/// `Name(joinType=[...], where=[...])`.
fn join_text(
    node: &str,
    kind: JoinKind,
    keys: &[Vec<Arc<dyn PhysicalExpr>>; 2],
    filter: Option<&Arc<dyn PhysicalExpr>>,
) -> String {
    format!(
        "{node}(joinType=[{}], where=[{}])",
        kind.flink_name(),
        condition_text(keys, filter)
    )
}

/// `l = r AND ... AND filter`, as EXPLAIN shows a join's condition.
pub fn condition_text(
    keys: &[Vec<Arc<dyn PhysicalExpr>>; 2],
    filter: Option<&Arc<dyn PhysicalExpr>>,
) -> String {
    keys[0]
        .iter()
        .zip(&keys[1])
        .map(|(l, r)| format!("{} = {}", expr_text(l.as_ref()), expr_text(r.as_ref())))
        .chain(filter.map(|f| expr_text(f.as_ref())))
        .collect::<Vec<_>>()
        .join(" AND ")
}

fn sort_key(expr: &Arc<dyn PhysicalExpr>, descending: bool) -> String {
    format!("{expr} {}", if descending { "DESC" } else { "ASC" })
}

fn ttl_text(ttl_ms: Option<u64>) -> String {
    ttl_ms
        .map(|ms| format!(", stateTtl=[{ms} ms]"))
        .unwrap_or_default()
}

/// The names of columns `key` of `schema`.
fn names(schema: &Schema, key: &[usize]) -> String {
    let names: Vec<&str> = key.iter().map(|k| schema.field(*k).name().as_str()).collect();
    names.join(", ")
}

fn column_index(expr: &Arc<dyn PhysicalExpr>) -> Option<usize> {
    expr.as_ref()
        .downcast_ref::<datafusion_physical_expr::expressions::Column>()
        .map(|c| c.index())
}

/// A physical expression as SQL-like text: column references without their
/// `@index` suffixes.
pub fn expr_text(expr: &dyn PhysicalExpr) -> String {
    let text = expr.to_string();
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '@' && chars.peek().is_some_and(|d| d.is_ascii_digit()) {
            while chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                chars.next();
            }
        } else {
            out.push(c);
        }
    }
    out
}
