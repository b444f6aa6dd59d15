//! A stream plan as a value: what the planner outputs, what EXPLAIN shows,
//! what a job graph chains into vertices, and what operators, sources and
//! sinks are built from where their tasks run. [`PlanSpec`] serializes
//! (JSON through serde), so a plan can be written out in one process and
//! run in another that never planned it.
//!
//! ```text
//!  SQL ──planner──► PlanSpec ──JSON──► PlanSpec ──chain──► JobGraph ──build──► operators, tasks
//! ```
//!
//! Connector sources and sinks are kept as their table definition and the
//! session's settings, and created by their connector; expressions and
//! aggregates go through [`super::codec`]. A query's result collector is a
//! channel of the process that submits the job: its spec names it by id,
//! and the job is given the channel when it is deployed.

use std::sync::Arc;

use arrow::compute::SortOptions;
use arrow::datatypes::{Schema, SchemaRef};
use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;
use serde::{Deserialize, Serialize};

use crate::NodeId;
use crate::changelog::ChangelogMode;
use crate::codec::{
    AggregateNode, BatchesData, DecodeContext, ExprNode, SchemaData, decode_aggregate, decode_expr,
    decode_exprs, decode_sort_keys, encode_aggregate, encode_expr, encode_exprs, encode_sort_keys,
};
use crate::join::{JoinKind, joined_schema};
use crate::table::{ColumnDef, MetadataColumn, TableDef, TableOptions};
use crate::window::{GroupColumn, Phase, WindowProperty};
use crate::window::{TimeShift, WindowKind, WindowSpec};
use crate::{Error, Result};

/// A serializable stream plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanSpec {
    /// The nodes, inputs first.
    pub nodes: Vec<NodeEntry>,
    /// Operator chaining.
    pub chaining: bool,
    /// The session's settings (connectors read some), as key and value.
    pub settings: Vec<(String, String)>,
    /// The session's time zone when it was planned (resolved): its
    /// functions and `TIMESTAMP_LTZ` types are of this zone, so its
    /// expressions are decoded with it wherever the plan runs.
    pub time_zone: String,
}

/// One node of a [`PlanSpec`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeEntry {
    /// What it does.
    pub kind: NodeSpec,
    /// How EXPLAIN, task names and errors show it (Flink's description of
    /// a node): `GroupAggregate(groupBy=[k], select=[k, COUNT(*) AS c])`.
    pub name: String,
    /// The row kinds it emits, as the planner inferred them.
    pub mode: ChangelogMode,
    /// Its inputs, each with its exchange.
    pub inputs: Vec<(NodeId, ExchangeSpec)>,
    /// Its subtasks.
    pub parallelism: usize,
    /// Its output schema.
    pub schema: SchemaData,
}

/// How rows reach a node from one input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExchangeSpec {
    /// Same subtask.
    Forward,
    /// Hash of these keys (over the input's rows) to a key group.
    Hash(Vec<ExprNode>),
    /// Round robin.
    Rebalance,
    /// To every subtask.
    Broadcast,
    /// Everything to subtask 0.
    Single,
}

/// What a node does, as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeSpec {
    /// A source.
    Source(SourceSpec),
    /// Filter and projection.
    Calc {
        /// Rows kept where true.
        filter: Option<ExprNode>,
        /// Output columns (`None`: the input's).
        projection: Option<Vec<ExprNode>>,
    },
    /// Watermark generation.
    Watermark {
        /// The rowtime column's name.
        rowtime: String,
        /// Its position in the input.
        rowtime_index: usize,
        /// The watermark expression.
        expr: ExprNode,
        /// Its SQL text.
        text: String,
        /// `rowtime - INTERVAL d`: the delay in ms.
        fixed_delay: Option<i64>,
        /// Split idle timeout in ms.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idle_timeout: Option<i64>,
    },
    /// A window TVF without aggregation.
    WindowAssign {
        /// The windows.
        window: WindowData,
        /// The time zone of `TIMESTAMP_LTZ` windows.
        shift: ShiftData,
        /// The time attribute's position.
        time_index: usize,
        /// Its name.
        time_name: String,
        /// Processing time.
        processing_time: bool,
    },
    /// A window aggregation phase.
    WindowAggregate(Box<AggregationData>),
    /// A session window aggregation.
    SessionAggregate(Box<AggregationData>),
    /// A row-count window aggregation (the Table API's).
    CountWindowAggregate(Box<AggregationData>),
    /// A non-windowed aggregation.
    GroupAggregate(Box<AggregationData>),
    /// A regular join of its two inputs.
    Join(Box<JoinData>),
    /// An interval join of its two inputs.
    IntervalJoin(Box<IntervalJoinData>),
    /// A window join of its two inputs.
    WindowJoin(Box<WindowJoinData>),
    /// A lookup join of a stream (input 0) with a bounded table (input 1).
    LookupJoin(Box<JoinData>),
    /// A regular join whose small bounded side (`table_side` of the SQL
    /// join) is input 1, broadcast; the other side is input 0.
    BroadcastJoin {
        /// Kind, keys (input 0's as `left_keys`), condition.
        join: Box<JoinData>,
        /// Which side of the SQL join input 1 is.
        table_side: usize,
    },
    /// An event-time temporal join (its `times`; no bounds).
    TemporalJoin(Box<IntervalJoinData>),
    /// A TopN (a ranking function filtered on the rank).
    TopN(Box<TopNData>),
    /// An OVER aggregation.
    OverAggregate(Box<OverData>),
    /// A streaming sort by a time attribute.
    TemporalSort {
        /// The event-time column; `None`: processing time.
        time: Option<usize>,
        /// The other keys, each with `descending` and `nulls_first`.
        then: Vec<(ExprNode, bool, bool)>,
    },
    /// Union of the inputs.
    Union,
    /// `-U` rows dropped before an upsert sink keyed by `key`.
    DropUpdateBefore {
        /// The upsert key (output columns).
        key: Vec<usize>,
    },
    /// A sink's input materialized by its primary key.
    SinkMaterializer {
        /// The primary key's columns.
        key: Vec<usize>,
    },
    /// An upsert source's changes made a full changelog.
    ChangelogNormalize {
        /// The key's columns.
        key: Vec<usize>,
    },
    /// A sink.
    Sink(SinkSpec),
}

/// A TopN as data (`NodeSpec::TopN`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopNData {
    /// `PARTITION BY` expressions.
    pub partition: Vec<ExprNode>,
    /// `ORDER BY` expressions, each with `descending` and `nulls_first`.
    pub order: Vec<(ExprNode, bool, bool)>,
    /// First rank kept.
    pub start: u64,
    /// Last rank kept.
    pub end: u64,
    /// Whether the rank number is output.
    #[serde(default)]
    pub rank_output: bool,
    /// Ordered by arrival (processing time): descending or not.
    #[serde(default)]
    pub arrival: Option<bool>,
    /// `ROW_NUMBER`, `RANK` or `DENSE_RANK`.
    #[serde(default)]
    pub rank_type: crate::rank::RankType,
    /// The input updates.
    #[serde(default)]
    pub retract: bool,
    /// A window TopN's window-end input column.
    #[serde(default)]
    pub window_end: Option<usize>,
    /// `table.exec.state.ttl` in ms.
    #[serde(default)]
    pub state_ttl_ms: Option<u64>,
}

/// An OVER aggregation as data (`NodeSpec::OverAggregate`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverData {
    /// `PARTITION BY` expressions.
    pub partition: Vec<ExprNode>,
    /// The event-time column it is ordered by; `None`: processing time.
    pub time: Option<usize>,
    /// The frame.
    pub frame: crate::frame::Frame,
    /// The aggregates.
    pub aggregates: Vec<AggregateNode>,
    /// The input updates.
    #[serde(default)]
    pub retract: bool,
}

/// A regular join: keys over each input's data columns, the residual
/// condition over both side by side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JoinData {
    /// Inner or which outer.
    pub kind: JoinKind,
    /// The left input's key expressions.
    pub left_keys: Vec<ExprNode>,
    /// The right input's key expressions.
    pub right_keys: Vec<ExprNode>,
    /// The residual condition.
    pub filter: Option<ExprNode>,
    /// NULL keys equal each other.
    pub null_equal: bool,
    /// Each input's unique key.
    #[serde(default)]
    pub unique_keys: [Option<Vec<usize>>; 2],
    /// `table.exec.state.ttl` in ms.
    #[serde(default)]
    pub state_ttl_ms: Option<u64>,
}

/// An interval join: [`JoinData`]'s keys and condition, and the bounds of
/// `l.time - r.time`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalJoinData {
    /// Keys, condition (the rest, without the bounds), kind.
    pub join: JoinData,
    /// Each side's time attribute (position).
    pub times: [usize; 2],
    /// Least `l.time - r.time` (ms).
    pub lower: i64,
    /// Greatest `l.time - r.time` (ms).
    pub upper: i64,
    /// Processing time.
    pub proctime: bool,
}

/// A window join: [`JoinData`]'s keys (window columns among them) and
/// condition, and each side's `window_end` column.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowJoinData {
    /// Keys, condition, kind.
    pub join: JoinData,
    /// Each side's `window_end` (position).
    pub ends: [usize; 2],
}

/// Tumbling, hopping or cumulating windows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WindowData {
    /// `tumble`, `hop` or `cumulate`.
    pub kind: WindowKindData,
    /// Size (ms).
    pub size: i64,
    /// Slide or step (ms).
    pub slide: i64,
    /// Offset (ms).
    pub offset: i64,
}

/// [`WindowKind`] as data.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowKindData {
    /// TUMBLE.
    Tumble,
    /// HOP.
    Hop,
    /// CUMULATE.
    Cumulate,
}

impl From<WindowSpec> for WindowData {
    fn from(w: WindowSpec) -> Self {
        WindowData {
            kind: match w.kind {
                WindowKind::Tumble => WindowKindData::Tumble,
                WindowKind::Hop => WindowKindData::Hop,
                WindowKind::Cumulate => WindowKindData::Cumulate,
            },
            size: w.size,
            slide: w.slide,
            offset: w.offset,
        }
    }
}

impl From<WindowData> for WindowSpec {
    fn from(w: WindowData) -> Self {
        WindowSpec {
            kind: match w.kind {
                WindowKindData::Tumble => WindowKind::Tumble,
                WindowKindData::Hop => WindowKind::Hop,
                WindowKindData::Cumulate => WindowKind::Cumulate,
            },
            size: w.size,
            slide: w.slide,
            offset: w.offset,
        }
    }
}

/// [`TimeShift`] as data: a zone by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShiftData {
    /// UTC.
    Utc,
    /// A fixed offset (ms).
    Fixed(i64),
    /// An IANA zone.
    Zone(String),
}

impl From<&TimeShift> for ShiftData {
    fn from(shift: &TimeShift) -> Self {
        match shift {
            TimeShift::Utc => ShiftData::Utc,
            TimeShift::Fixed(ms) => ShiftData::Fixed(*ms),
            TimeShift::Zone(tz) => ShiftData::Zone(tz.name().to_string()),
        }
    }
}

impl ShiftData {
    /// The shift it names.
    pub fn build(&self) -> Result<TimeShift> {
        match self {
            ShiftData::Utc => Ok(TimeShift::Utc),
            ShiftData::Fixed(ms) => Ok(TimeShift::Fixed(*ms)),
            ShiftData::Zone(name) => TimeShift::for_zone(name),
        }
    }
}

/// A grouping column of an aggregation's output.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupColumnData {
    /// The i-th key.
    Key(usize),
    /// `window_start`.
    WindowStart,
    /// `window_end`.
    WindowEnd,
    /// `window_time`.
    WindowTime,
}

impl From<GroupColumn> for GroupColumnData {
    fn from(g: GroupColumn) -> Self {
        match g {
            GroupColumn::Key(i) => GroupColumnData::Key(i),
            GroupColumn::Window(WindowProperty::Start) => GroupColumnData::WindowStart,
            GroupColumn::Window(WindowProperty::End) => GroupColumnData::WindowEnd,
            GroupColumn::Window(WindowProperty::Time) => GroupColumnData::WindowTime,
        }
    }
}

impl From<GroupColumnData> for GroupColumn {
    fn from(g: GroupColumnData) -> Self {
        match g {
            GroupColumnData::Key(i) => GroupColumn::Key(i),
            GroupColumnData::WindowStart => GroupColumn::Window(WindowProperty::Start),
            GroupColumnData::WindowEnd => GroupColumn::Window(WindowProperty::End),
            GroupColumnData::WindowTime => GroupColumn::Window(WindowProperty::Time),
        }
    }
}

/// A window or session aggregation, as data. Keys and filters are over the
/// node's input; aggregate arguments over `aggregate_input` (the raw rows,
/// which the global phase of a two-phase aggregation does not see).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AggregationData {
    /// `single`, `local` or `global` (window aggregations).
    pub phase: Option<String>,
    /// The windows (window aggregations).
    pub window: Option<WindowData>,
    /// The gap in ms (session aggregations).
    pub gap: Option<i64>,
    /// The time zone of `TIMESTAMP_LTZ` windows.
    pub shift: ShiftData,
    /// The time attribute's name.
    pub time_name: String,
    /// Its position in the input.
    pub time_index: usize,
    /// Processing time.
    pub processing_time: bool,
    /// Grouping keys.
    pub keys: Vec<ExprNode>,
    /// Their columns.
    pub key_schema: SchemaData,
    /// What the aggregate arguments are over.
    pub aggregate_input: SchemaData,
    /// The aggregate calls.
    pub aggregates: Vec<AggregateNode>,
    /// Their `FILTER (WHERE ...)`.
    pub filters: Vec<Option<ExprNode>>,
    /// Output grouping columns.
    pub group_columns: Vec<GroupColumnData>,
    /// `table.exec.state.ttl` in ms (non-windowed aggregations).
    #[serde(default)]
    pub state_ttl_ms: Option<u64>,
    /// Row-count windows (count window aggregations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<CountWindowData>,
}

/// Row-count windows: `size` rows of a key, one every `slide` rows.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct CountWindowData {
    /// Rows a window holds.
    pub size: u64,
    /// Rows from one window's start to the next's.
    pub slide: u64,
}

impl AggregationData {
    /// Its phase.
    pub fn phase(&self) -> Result<Phase> {
        match self.phase.as_deref() {
            Some("single") | None => Ok(Phase::Single),
            Some("local") => Ok(Phase::Local),
            Some("global") => Ok(Phase::Global),
            Some(other) => Err(Error::State(format!(
                "a serialized plan holds unknown phase '{other}'"
            ))),
        }
    }
}

/// The name of an aggregation phase in a spec.
pub fn phase_name(phase: Phase) -> String {
    match phase {
        Phase::Single => "single",
        Phase::Local => "local",
        Phase::Global => "global",
    }
    .to_string()
}

/// A table's definition as a connector needs it: physical columns and options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableData {
    /// Its name.
    pub name: String,
    /// Its physical and metadata columns (types and nullability).
    pub columns: SchemaData,
    /// The metadata columns among them: name, key, virtual.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metadata: Vec<(String, String, bool)>,
    /// `PRIMARY KEY`.
    pub primary_key: Vec<String>,
    /// `PARTITIONED BY`.
    pub partition_keys: Vec<String>,
    /// `WITH (...)`.
    pub options: Vec<(String, String)>,
}

impl TableData {
    /// The data of `table`.
    pub fn of(table: &TableDef) -> Result<Self> {
        Ok(TableData {
            name: table.name.clone(),
            columns: SchemaData::encode(&table.read_schema())?,
            metadata: table
                .metadata_columns()
                .map(|(name, m)| (name.to_string(), m.key.clone(), m.is_virtual))
                .collect(),
            primary_key: table.primary_key.clone(),
            partition_keys: table.partition_keys.clone(),
            options: table.options.entries().to_vec(),
        })
    }

    /// The table definition it describes.
    pub fn build(&self) -> Result<TableDef> {
        let columns = self.columns.decode()?;
        Ok(TableDef {
            name: self.name.clone(),
            columns: columns
                .fields()
                .iter()
                .map(|f| ColumnDef {
                    metadata: self.metadata.iter().find(|(name, _, _)| name == f.name()).map(
                        |(_, key, is_virtual)| MetadataColumn {
                            key: key.clone(),
                            is_virtual: *is_virtual,
                        },
                    ),
                    ..ColumnDef::physical(f.name().clone(), f.data_type().clone(), f.is_nullable())
                })
                .collect(),
            primary_key: self.primary_key.clone(),
            partition_keys: self.partition_keys.clone(),
            options: TableOptions::new(self.options.clone())?,
        })
    }
}

/// A source, as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceSpec {
    /// A table's connector, reading physical columns `projection` as `schema`.
    Connector {
        /// The table.
        table: TableData,
        /// Physical columns read.
        projection: Vec<usize>,
        /// Their bound types.
        schema: SchemaData,
    },
    /// A bounded source read again from its start after a restore (a
    /// lookup join's table).
    Replayed(Box<SourceSpec>),
    /// Constant rows.
    Values {
        /// Their schema.
        schema: SchemaData,
        /// The rows.
        batches: BatchesData,
    },
}

/// A sink, as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkSpec {
    /// A table's connector, receiving rows of `schema`.
    Connector {
        /// The table.
        table: TableData,
        /// The rows it receives.
        schema: SchemaData,
    },
    /// The result of a query: a channel of the process that submits the
    /// job, handed to the job with it (see [`super::graph::ResultChannels`]).
    Collect {
        /// Its id among the submitter's channels.
        id: u64,
    },
}

/// The shared part of encoding an aggregation: keys over `input`, the
/// aggregates and their filters over `aggregate_input`.
#[allow(clippy::too_many_arguments)]
pub fn encode_aggregation(
    input: &Schema,
    keys: &[Arc<dyn PhysicalExpr>],
    key_schema: &Schema,
    aggregate_input: &Schema,
    aggregates: &[Arc<AggregateFunctionExpr>],
    filters: &[Option<Arc<dyn PhysicalExpr>>],
    group_columns: &[GroupColumn],
    shift: &TimeShift,
) -> Result<AggregationData> {
    Ok(AggregationData {
        phase: None,
        window: None,
        gap: None,
        shift: shift.into(),
        time_name: String::new(),
        time_index: 0,
        processing_time: false,
        keys: encode_exprs(keys, input)?,
        key_schema: SchemaData::encode(key_schema)?,
        aggregate_input: SchemaData::encode(aggregate_input)?,
        aggregates: aggregates
            .iter()
            .map(|a| encode_aggregate(a, aggregate_input))
            .collect::<Result<_>>()?,
        filters: filters
            .iter()
            .map(|f| f.as_ref().map(|f| encode_expr(f, aggregate_input)).transpose())
            .collect::<Result<_>>()?,
        group_columns: group_columns.iter().map(|g| (*g).into()).collect(),
        state_ttl_ms: None,
        rows: None,
    })
}

/// An aggregation spec's parts, decoded.
pub struct DecodedAggregation {
    /// Grouping keys, over the node's input.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// Their columns.
    pub key_schema: SchemaRef,
    /// What the aggregate arguments are over.
    pub aggregate_input: SchemaRef,
    /// The aggregate calls.
    pub aggregates: Vec<Arc<AggregateFunctionExpr>>,
    /// Their filters.
    pub filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    /// Output grouping columns.
    pub group_columns: Vec<GroupColumn>,
}

impl AggregationData {
    /// Its expressions and aggregates, decoded over `input`.
    pub fn decode(&self, input: &SchemaRef, ctx: &DecodeContext) -> Result<DecodedAggregation> {
        let aggregate_input = self.aggregate_input.decode()?;
        Ok(DecodedAggregation {
            keys: decode_exprs(&self.keys, input, ctx)?,
            key_schema: self.key_schema.decode()?,
            aggregates: (self.aggregates.iter())
                .map(|a| decode_aggregate(a, &aggregate_input, ctx).map(Arc::new))
                .collect::<Result<_>>()?,
            filters: (self.filters.iter())
                .map(|f| {
                    f.as_ref()
                        .map(|f| decode_expr(f, &aggregate_input, ctx))
                        .transpose()
                })
                .collect::<Result<_>>()?,
            group_columns: self.group_columns.iter().map(|g| (*g).into()).collect(),
            aggregate_input,
        })
    }
}

/// A join's key expressions and residual condition, decoded.
pub type DecodedJoin = ([Vec<Arc<dyn PhysicalExpr>>; 2], Option<Arc<dyn PhysicalExpr>>);

impl JoinData {
    /// A join of `kind` on `keys` (each over its side of `key_inputs`) and
    /// `filter` (over `filter_inputs` side by side); no unique keys, NULL
    /// keys match nothing, no state TTL.
    pub fn encode(
        kind: JoinKind,
        keys: &[Vec<Arc<dyn PhysicalExpr>>; 2],
        key_inputs: &[SchemaRef; 2],
        filter: Option<&Arc<dyn PhysicalExpr>>,
        filter_inputs: &[SchemaRef; 2],
    ) -> Result<JoinData> {
        let joined = joined_schema(filter_inputs);
        Ok(JoinData {
            kind,
            left_keys: encode_exprs(&keys[0], &key_inputs[0])?,
            right_keys: encode_exprs(&keys[1], &key_inputs[1])?,
            filter: filter.map(|f| encode_expr(f, &joined)).transpose()?,
            null_equal: false,
            unique_keys: [None, None],
            state_ttl_ms: None,
        })
    }

    /// Its keys (each over its side of `key_inputs`) and condition (over
    /// `filter_inputs` side by side), decoded.
    pub fn decode(
        &self,
        key_inputs: &[SchemaRef; 2],
        filter_inputs: &[SchemaRef; 2],
        ctx: &DecodeContext,
    ) -> Result<DecodedJoin> {
        let keys = [
            decode_exprs(&self.left_keys, &key_inputs[0], ctx)?,
            decode_exprs(&self.right_keys, &key_inputs[1], ctx)?,
        ];
        let joined = joined_schema(filter_inputs);
        let filter = self
            .filter
            .as_ref()
            .map(|f| decode_expr(f, &joined, ctx))
            .transpose()?;
        Ok((keys, filter))
    }

    /// A lookup join's inputs (stream, table) in the SQL join's order, the
    /// table being side `table_side` of it: what its condition is over.
    pub fn sql_inputs(&self, inputs: &[SchemaRef; 2], table_side: usize) -> [SchemaRef; 2] {
        match table_side {
            0 => [inputs[1].clone(), inputs[0].clone()],
            _ => inputs.clone(),
        }
    }
}

/// An OVER aggregation's partition keys and aggregates, decoded.
pub type DecodedOver = (Vec<Arc<dyn PhysicalExpr>>, Vec<Arc<AggregateFunctionExpr>>);

impl OverData {
    /// Its partition keys and aggregates, over its input (`input`, without
    /// its op column).
    pub fn decode(&self, input: &SchemaRef, ctx: &DecodeContext) -> Result<DecodedOver> {
        let input = weir_common::changelog::without_op(input);
        let aggregates = (self.aggregates.iter())
            .map(|a| decode_aggregate(a, &input, ctx).map(Arc::new))
            .collect::<Result<_>>()?;
        Ok((decode_exprs(&self.partition, &input, ctx)?, aggregates))
    }
}

/// Sort keys, each with its direction.
pub type SortKeys = Vec<(Arc<dyn PhysicalExpr>, SortOptions)>;

impl TopNData {
    /// Its partition and order keys, over its input (`input`, without its
    /// op column).
    pub fn decode(
        &self,
        input: &SchemaRef,
        ctx: &DecodeContext,
    ) -> Result<(Vec<Arc<dyn PhysicalExpr>>, SortKeys)> {
        let input = weir_common::changelog::without_op(input);
        Ok((
            decode_exprs(&self.partition, &input, ctx)?,
            decode_sort_keys(&self.order, &input, ctx)?,
        ))
    }
}

impl NodeSpec {
    /// A filter and projection over `input`.
    pub fn calc(
        filter: Option<&Arc<dyn PhysicalExpr>>,
        projection: Option<&[Arc<dyn PhysicalExpr>]>,
        input: &Schema,
    ) -> Result<NodeSpec> {
        Ok(NodeSpec::Calc {
            filter: filter.map(|f| encode_expr(f, input)).transpose()?,
            projection: projection.map(|p| encode_exprs(p, input)).transpose()?,
        })
    }

    /// A temporal sort of `input` by its time attribute `time` (`None`:
    /// processing time), then by `then`.
    pub fn temporal_sort(time: Option<usize>, then: &SortKeys, input: &Schema) -> Result<NodeSpec> {
        Ok(NodeSpec::TemporalSort {
            time,
            then: encode_sort_keys(then, input)?,
        })
    }

    /// Whether its operator keeps no rows in its state (at most a
    /// watermark), so that its input may be read again from the start
    /// after a restore: what a broadcast join's table side may hold.
    pub fn keeps_no_rows(&self) -> bool {
        matches!(
            self,
            NodeSpec::Calc { .. }
                | NodeSpec::Watermark { .. }
                | NodeSpec::WindowAssign { .. }
                | NodeSpec::Union
        )
    }
}
