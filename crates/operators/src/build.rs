//! Operators built from their plan spec: each node of a [`PlanSpec`] is
//! data (expressions and aggregates as [`weir_plan::codec`] values); here
//! it becomes the factory that creates one operator per subtask, its
//! expressions decoded with the functions of the process that runs it.
//!
//! ```text
//!  NodeEntry { kind: NodeSpec::GroupAggregate(..), name, schema } ──decode──► GroupAggregateFactory
//! ```
//!
//! [`PlanSpec`]: weir_plan::spec::PlanSpec

use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;

use crate::calc::Calc;
use crate::group::{GroupAggregate, GroupAggregateFactory};
use crate::join::interval::IntervalJoin;
use crate::join::lookup::LookupJoin;
use crate::join::temporal::TemporalJoin;
use crate::join::window::WindowJoin;
use crate::join::{Join, JoinFactory};
use crate::normalize::ChangelogNormalize;
use crate::over::OverAggregate;
use crate::rank::TopN;
use crate::sort::TemporalSort;
use crate::union::Union;
use crate::upsert::{DropUpdateBefore, SinkUpsertMaterializer};
use crate::watermark::WatermarkAssigner;
use crate::window::aggregate::{WindowAggregate, WindowAggregateFactory};
use crate::window::assign::WindowAssign;
use crate::window::count::{CountWindowAggregate, CountWindowAggregateFactory};
use crate::window::session::{SessionAggregate, SessionAggregateFactory};
use crate::{Error, Result};
use weir_common::changelog::without_op;
use weir_plan::codec::{DecodeContext, decode_expr, decode_exprs, decode_sort_keys};
use weir_plan::spec::{
    AggregationData, IntervalJoinData, JoinData, NodeEntry, NodeSpec, OverData, TopNData, WindowJoinData,
};
use weir_runtime::OperatorFactory;

/// The operator factory of plan node `entry`, whose inputs are of
/// `inputs`: its expressions and aggregates decoded with `ctx`'s
/// functions. Sources and sinks are their connectors' to build.
pub fn operator(
    entry: &NodeEntry,
    inputs: &[SchemaRef],
    ctx: &DecodeContext,
) -> Result<Arc<dyn OperatorFactory>> {
    let output = entry.schema.decode()?;
    let name = entry.name.clone();
    let input = || {
        inputs
            .first()
            .cloned()
            .ok_or_else(|| Error::State(format!("plan node {name} has no input")))
    };
    Ok(match &entry.kind {
        NodeSpec::Source(_) | NodeSpec::Sink(_) => {
            return Err(Error::Internal(format!(
                "{name} is built by its connector, not as an operator"
            )));
        }
        NodeSpec::Calc { filter, projection } => {
            let input = input()?;
            Arc::new(Calc {
                filter: filter.as_ref().map(|f| decode_expr(f, &input, ctx)).transpose()?,
                projection: projection
                    .as_ref()
                    .map(|p| decode_exprs(p, &input, ctx))
                    .transpose()?,
                schema: output,
            })
        }
        NodeSpec::Watermark {
            rowtime,
            rowtime_index,
            expr,
            text,
            fixed_delay,
            idle_timeout,
        } => Arc::new(WatermarkAssigner {
            rowtime: rowtime.clone(),
            rowtime_index: *rowtime_index,
            expr: decode_expr(expr, input()?.as_ref(), ctx)?,
            text: text.clone(),
            fixed_delay: *fixed_delay,
            idle_timeout: *idle_timeout,
        }),
        NodeSpec::WindowAssign {
            window,
            shift,
            time_index,
            time_name,
            processing_time,
        } => Arc::new(WindowAssign {
            window: (*window).into(),
            shift: shift.build()?,
            time_index: *time_index,
            time_name: time_name.clone(),
            processing_time: *processing_time,
            schema: output,
            name,
        }),
        NodeSpec::WindowAggregate(data) => window_aggregate(data, &input()?, output, name, ctx)?,
        NodeSpec::SessionAggregate(data) => session_aggregate(data, &input()?, output, name, ctx)?,
        NodeSpec::CountWindowAggregate(data) => count_window_aggregate(data, &input()?, output, name, ctx)?,
        NodeSpec::GroupAggregate(data) => group_aggregate(data, &input()?, output, name, ctx)?,
        NodeSpec::OverAggregate(data) => over(data, &input()?, output, name, ctx)?,
        NodeSpec::TopN(data) => top_n(data, &input()?, output, name, ctx)?,
        NodeSpec::TemporalSort { time, then } => {
            let input = input()?;
            Arc::new(TemporalSort {
                time: *time,
                then: decode_sort_keys(then, &input, ctx)?,
                schema: input,
                name,
            })
        }
        NodeSpec::Union => Arc::new(Union { schema: output }),
        NodeSpec::DropUpdateBefore { key } => Arc::new(DropUpdateBefore { key: key.clone() }),
        NodeSpec::SinkMaterializer { key } => Arc::new(SinkUpsertMaterializer {
            key: key.clone(),
            schema: output,
            name,
        }),
        NodeSpec::ChangelogNormalize { key } => Arc::new(ChangelogNormalize {
            key: key.clone(),
            schema: output,
            name,
        }),
        NodeSpec::Join(data) => join(data, two(inputs, &name)?, output, name, ctx)?,
        NodeSpec::IntervalJoin(data) => interval_join(data, two(inputs, &name)?, output, name, ctx)?,
        NodeSpec::WindowJoin(data) => window_join(data, two(inputs, &name)?, output, name, ctx)?,
        NodeSpec::LookupJoin(data) => {
            let inputs = two(inputs, &name)?;
            lookup_join(data, (1, false), inputs, output, name, ctx)?
        }
        NodeSpec::BroadcastJoin { join, table_side } => {
            let inputs = two(inputs, &name)?;
            lookup_join(join, (*table_side, true), inputs, output, name, ctx)?
        }
        NodeSpec::TemporalJoin(data) => temporal_join(data, two(inputs, &name)?, output, name, ctx)?,
    })
}

/// The two inputs of a two-input node.
fn two(inputs: &[SchemaRef], name: &str) -> Result<[SchemaRef; 2]> {
    match inputs {
        [left, right] => Ok([left.clone(), right.clone()]),
        _ => Err(Error::State(format!(
            "plan node {name} joins two inputs, but has {}",
            inputs.len()
        ))),
    }
}

fn window_aggregate(
    data: &AggregationData,
    input: &SchemaRef,
    output: SchemaRef,
    name: String,
    ctx: &DecodeContext,
) -> Result<Arc<dyn OperatorFactory>> {
    let decoded = data.decode(input, ctx)?;
    let window = data
        .window
        .ok_or_else(|| Error::State(format!("window aggregation {name} has no window")))?;
    Ok(Arc::new(WindowAggregateFactory(Arc::new(WindowAggregate {
        phase: data.phase()?,
        window: window.into(),
        shift: data.shift.build()?,
        time_name: data.time_name.clone(),
        time_index: data.time_index,
        processing_time: data.processing_time,
        keys: decoded.keys,
        key_schema: decoded.key_schema,
        aggregate_input: decoded.aggregate_input,
        aggregates: decoded.aggregates,
        filters: decoded.filters,
        group_columns: decoded.group_columns,
        output_schema: output,
        name,
    }))))
}

fn session_aggregate(
    data: &AggregationData,
    input: &SchemaRef,
    output: SchemaRef,
    name: String,
    ctx: &DecodeContext,
) -> Result<Arc<dyn OperatorFactory>> {
    let decoded = data.decode(input, ctx)?;
    let gap = data
        .gap
        .ok_or_else(|| Error::State(format!("session aggregation {name} has no gap")))?;
    Ok(Arc::new(SessionAggregateFactory(Arc::new(SessionAggregate {
        gap,
        shift: data.shift.build()?,
        time_name: data.time_name.clone(),
        time_index: data.time_index,
        processing_time: data.processing_time,
        keys: decoded.keys,
        key_schema: decoded.key_schema,
        aggregate_input: decoded.aggregate_input,
        aggregates: decoded.aggregates,
        filters: decoded.filters,
        group_columns: decoded.group_columns,
        output_schema: output,
        name,
    }))))
}

fn count_window_aggregate(
    data: &AggregationData,
    input: &SchemaRef,
    output: SchemaRef,
    name: String,
    ctx: &DecodeContext,
) -> Result<Arc<dyn OperatorFactory>> {
    let decoded = data.decode(input, ctx)?;
    let rows = data
        .rows
        .ok_or_else(|| Error::State(format!("count window aggregation {name} has no windows")))?;
    Ok(Arc::new(CountWindowAggregateFactory(Arc::new(
        CountWindowAggregate {
            size: rows.size,
            slide: rows.slide,
            time_name: data.time_name.clone(),
            keys: decoded.keys,
            key_schema: decoded.key_schema,
            aggregate_input: decoded.aggregate_input,
            aggregates: decoded.aggregates,
            filters: decoded.filters,
            output_schema: output,
            name,
        },
    ))))
}

fn group_aggregate(
    data: &AggregationData,
    input: &SchemaRef,
    output: SchemaRef,
    name: String,
    ctx: &DecodeContext,
) -> Result<Arc<dyn OperatorFactory>> {
    let decoded = data.decode(input, ctx)?;
    Ok(Arc::new(GroupAggregateFactory(Arc::new(GroupAggregate {
        phase: data.phase()?,
        keys: decoded.keys,
        key_schema: decoded.key_schema,
        aggregate_input: decoded.aggregate_input,
        aggregates: decoded.aggregates,
        filters: decoded.filters,
        output_schema: output,
        state_ttl: data.state_ttl_ms.map(Duration::from_millis),
        name,
    }))))
}

fn over(
    data: &OverData,
    input: &SchemaRef,
    output: SchemaRef,
    name: String,
    ctx: &DecodeContext,
) -> Result<Arc<dyn OperatorFactory>> {
    let (partition, aggregates) = data.decode(input, ctx)?;
    Ok(Arc::new(OverAggregate {
        partition,
        time: data.time,
        frame: data.frame,
        retract: data.retract,
        aggregates,
        input: without_op(input),
        schema: output,
        name,
    }))
}

fn top_n(
    data: &TopNData,
    input: &SchemaRef,
    output: SchemaRef,
    name: String,
    ctx: &DecodeContext,
) -> Result<Arc<dyn OperatorFactory>> {
    let (partition, order) = data.decode(input, ctx)?;
    Ok(Arc::new(TopN {
        partition,
        order,
        start: data.start,
        end: data.end,
        rank_output: data.rank_output,
        arrival: data.arrival,
        rank_type: data.rank_type,
        retract: data.retract,
        window_end: data.window_end,
        state_ttl: data.state_ttl_ms.map(Duration::from_millis),
        input: without_op(input),
        schema: output,
        name,
    }))
}

fn join(
    data: &JoinData,
    [left, right]: [SchemaRef; 2],
    output: SchemaRef,
    name: String,
    ctx: &DecodeContext,
) -> Result<Arc<dyn OperatorFactory>> {
    let inputs = [without_op(&left), without_op(&right)];
    let (keys, filter) = data.decode(&inputs, &inputs, ctx)?;
    Ok(Arc::new(JoinFactory(Arc::new(Join {
        kind: data.kind,
        keys,
        filter,
        updating: [
            weir_common::changelog::has_op(&left),
            weir_common::changelog::has_op(&right),
        ],
        inputs,
        null_equal: data.null_equal,
        unique_keys: data.unique_keys.clone(),
        schema: output,
        state_ttl: data.state_ttl_ms.map(Duration::from_millis),
        name,
    }))))
}

fn interval_join(
    data: &IntervalJoinData,
    inputs: [SchemaRef; 2],
    output: SchemaRef,
    name: String,
    ctx: &DecodeContext,
) -> Result<Arc<dyn OperatorFactory>> {
    let (keys, filter) = data.join.decode(&inputs, &inputs, ctx)?;
    Ok(Arc::new(IntervalJoin {
        kind: data.join.kind,
        keys,
        filter,
        inputs,
        times: data.times,
        lower: data.lower,
        upper: data.upper,
        proctime: data.proctime,
        schema: output,
        name,
    }))
}

fn window_join(
    data: &WindowJoinData,
    inputs: [SchemaRef; 2],
    output: SchemaRef,
    name: String,
    ctx: &DecodeContext,
) -> Result<Arc<dyn OperatorFactory>> {
    let (keys, filter) = data.join.decode(&inputs, &inputs, ctx)?;
    Ok(Arc::new(WindowJoin {
        kind: data.join.kind,
        keys,
        filter,
        inputs,
        ends: data.ends,
        schema: output,
        name,
    }))
}

/// A lookup join (`broadcast`: a regular join with its table side
/// broadcast), the table being side `table_side` of the SQL join.
fn lookup_join(
    data: &JoinData,
    (table_side, broadcast): (usize, bool),
    inputs: [SchemaRef; 2],
    output: SchemaRef,
    name: String,
    ctx: &DecodeContext,
) -> Result<Arc<dyn OperatorFactory>> {
    let sql_inputs = data.sql_inputs(&inputs, table_side);
    let (keys, filter) = data.decode(&inputs, &sql_inputs, ctx)?;
    Ok(Arc::new(LookupJoin {
        kind: data.kind,
        keys,
        filter,
        inputs,
        schema: output,
        table_side,
        broadcast,
        name,
    }))
}

fn temporal_join(
    data: &IntervalJoinData,
    [stream, table]: [SchemaRef; 2],
    output: SchemaRef,
    name: String,
    ctx: &DecodeContext,
) -> Result<Arc<dyn OperatorFactory>> {
    let inputs = [without_op(&stream), without_op(&table)];
    let (keys, filter) = data.join.decode(&inputs, &inputs, ctx)?;
    Ok(Arc::new(TemporalJoin {
        kind: data.join.kind,
        keys,
        filter,
        inputs,
        times: data.times,
        schema: output,
        name,
    }))
}
