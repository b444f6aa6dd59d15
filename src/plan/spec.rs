//! A stream plan as a value: [`PlanSpec`] serializes (JSON through serde)
//! and builds the plan's operator factories again. Every job is deployed
//! from one (the engine writes the plan out and builds it back before it
//! starts a job), so what runs is always what a plan shipped to another
//! process would run.
//!
//! ```text
//!  StreamPlan ──to_spec──► PlanSpec ──JSON──► PlanSpec ──build──► StreamPlan ──► JobGraph ──► tasks
//! ```
//!
//! Connector sources and sinks are kept as their table definition and the
//! session's settings, and created again by their connector; expressions
//! and aggregates go through [`super::codec`]. A query's result collector
//! is a channel of this process: its spec names an entry of a registry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use crossbeam_channel::Sender;
use serde::{Deserialize, Serialize};

use super::codec::{
    AggregateNode, BatchesData, DecodeContext, ExprNode, SchemaData, decode_aggregate, decode_expr,
    decode_exprs, encode_aggregate, encode_expr, encode_exprs,
};
use super::{NodeId, NodeKind, PlanNode, StreamPlan};
use crate::config::SessionConfig;
use crate::frontend::catalog::{ColumnDef, MetadataColumn, TableDef, TableOptions};
use crate::operators::window::aggregate::{GroupColumn, Phase, WindowProperty};
use crate::operators::window::spec::{TimeShift, WindowKind, WindowSpec};
use crate::runtime::Exchange;
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
}

/// One node of a [`PlanSpec`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeEntry {
    /// What it does.
    pub kind: NodeSpec,
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
    pub rank_type: crate::operators::rank::RankType,
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
    pub frame: crate::operators::over::Frame,
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
    pub kind: crate::operators::join::JoinKind,
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
    fn build(&self) -> Result<TimeShift> {
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
    fn phase(&self) -> Result<Phase> {
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

    /// A table definition with these physical columns (no computed columns
    /// or watermark: connectors read physical columns only).
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
            watermark: None,
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
    /// The result of a query in this process: a channel in [`collectors`].
    Collect {
        /// Its entry.
        id: u64,
    },
}

/// The result channels of the queries of this process, by id: a plan names
/// one, and building the plan takes it out.
fn collectors() -> &'static Mutex<HashMap<u64, Sender<RecordBatch>>> {
    static COLLECTORS: std::sync::OnceLock<Mutex<HashMap<u64, Sender<RecordBatch>>>> =
        std::sync::OnceLock::new();
    COLLECTORS.get_or_init(Default::default)
}

/// Registers a result channel; its id goes into the plan.
pub fn register_collector(sender: Sender<RecordBatch>) -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    collectors()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(id, sender);
    id
}

/// Takes the result channel `id` out of the registry.
pub fn take_collector(id: u64) -> Result<Sender<RecordBatch>> {
    collectors()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&id)
        .ok_or_else(|| Error::State(format!("a plan's result channel {id} is not in this process")))
}

impl StreamPlan {
    /// The plan as data; `config` is the session's settings.
    pub fn to_spec(&self, config: &SessionConfig) -> Result<PlanSpec> {
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let inputs: Vec<SchemaRef> = node
                .inputs
                .iter()
                .map(|(i, _)| self.nodes[*i].schema.clone())
                .collect();
            let kind = match &node.kind {
                NodeKind::Source(source) => NodeSpec::Source(source.spec()?),
                NodeKind::Operator(operator) => operator.spec(&inputs)?,
            };
            let exchanges = node
                .inputs
                .iter()
                .zip(&inputs)
                .map(|((input, exchange), schema)| Ok((*input, exchange_spec(exchange, schema)?)))
                .collect::<Result<Vec<_>>>()?;
            nodes.push(NodeEntry {
                kind,
                inputs: exchanges,
                parallelism: node.parallelism,
                schema: SchemaData::encode(&node.schema)?,
            });
        }
        Ok(PlanSpec {
            nodes,
            chaining: self.chaining,
            settings: config
                .entries()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        })
    }
}

fn exchange_spec(exchange: &Exchange, input: &Schema) -> Result<ExchangeSpec> {
    Ok(match exchange {
        Exchange::Forward => ExchangeSpec::Forward,
        Exchange::Hash(keys) => ExchangeSpec::Hash(encode_exprs(keys, input)?),
        Exchange::Rebalance => ExchangeSpec::Rebalance,
        Exchange::Broadcast => ExchangeSpec::Broadcast,
        Exchange::Single => ExchangeSpec::Single,
    })
}

impl PlanSpec {
    /// The plan again, its operators built with the session's functions.
    pub fn build(&self, ctx: &DecodeContext) -> Result<StreamPlan> {
        let mut config = SessionConfig::default();
        for (key, value) in &self.settings {
            config.set_unchecked(key, value);
        }
        let mut nodes: Vec<PlanNode> = Vec::with_capacity(self.nodes.len());
        for (id, entry) in self.nodes.iter().enumerate() {
            let schema = entry.schema.decode()?;
            let mut inputs = Vec::new();
            let mut input_schemas = Vec::new();
            for (input, exchange) in &entry.inputs {
                let input_schema = nodes.get(*input).map(|n| n.schema.clone()).ok_or_else(|| {
                    Error::State(format!("plan node {id} reads node {input}, not before it"))
                })?;
                let exchange = match exchange {
                    ExchangeSpec::Forward => Exchange::Forward,
                    ExchangeSpec::Hash(keys) => Exchange::Hash(decode_exprs(keys, &input_schema, ctx)?),
                    ExchangeSpec::Rebalance => Exchange::Rebalance,
                    ExchangeSpec::Broadcast => Exchange::Broadcast,
                    ExchangeSpec::Single => Exchange::Single,
                };
                inputs.push((*input, exchange));
                input_schemas.push(input_schema);
            }
            let kind = entry.kind.build(&input_schemas, &schema, &config, ctx)?;
            nodes.push(PlanNode {
                kind,
                inputs,
                parallelism: entry.parallelism,
                schema,
            });
        }
        Ok(StreamPlan {
            nodes,
            chaining: self.chaining,
        })
    }
}

impl PlanSpec {
    /// Builds the plan and writes it out again: the same spec, when every
    /// part of the plan is encoded faithfully (what tests check).
    pub fn rebuilt(&self, ctx: &DecodeContext) -> Result<PlanSpec> {
        let mut config = SessionConfig::default();
        for (key, value) in &self.settings {
            config.set_unchecked(key, value);
        }
        self.build(ctx)?.to_spec(&config)
    }
}

impl NodeSpec {
    /// The factory this spec describes, with inputs of `inputs` and output `output`.
    fn build(
        &self,
        inputs: &[SchemaRef],
        output: &SchemaRef,
        config: &SessionConfig,
        ctx: &DecodeContext,
    ) -> Result<NodeKind> {
        use crate::operators::calc::Calc;
        use crate::operators::union::Union;
        use crate::operators::watermark::WatermarkAssigner;
        use crate::operators::window::assign::WindowAssign;
        let input = || {
            inputs
                .first()
                .cloned()
                .ok_or_else(|| Error::State("a serialized plan has an operator without input".into()))
        };
        Ok(match self {
            NodeSpec::Source(source) => NodeKind::Source(source.build(config)?),
            NodeSpec::Calc { filter, projection } => {
                let input = input()?;
                NodeKind::Operator(Arc::new(Calc {
                    filter: filter.as_ref().map(|f| decode_expr(f, &input, ctx)).transpose()?,
                    projection: projection
                        .as_ref()
                        .map(|p| decode_exprs(p, &input, ctx))
                        .transpose()?,
                    schema: output.clone(),
                }))
            }
            NodeSpec::Watermark {
                rowtime,
                rowtime_index,
                expr,
                text,
                fixed_delay,
                idle_timeout,
            } => NodeKind::Operator(Arc::new(WatermarkAssigner {
                rowtime: rowtime.clone(),
                rowtime_index: *rowtime_index,
                expr: decode_expr(expr, input()?.as_ref(), ctx)?,
                text: text.clone(),
                fixed_delay: *fixed_delay,
                idle_timeout: *idle_timeout,
            })),
            NodeSpec::WindowAssign {
                window,
                shift,
                time_index,
                time_name,
                processing_time,
            } => NodeKind::Operator(Arc::new(WindowAssign {
                window: (*window).into(),
                shift: shift.build()?,
                time_index: *time_index,
                time_name: time_name.clone(),
                processing_time: *processing_time,
                schema: output.clone(),
            })),
            NodeSpec::WindowAggregate(data) => {
                NodeKind::Operator(build_window_aggregate(data, &input()?, output, ctx)?)
            }
            NodeSpec::SessionAggregate(data) => {
                NodeKind::Operator(build_session_aggregate(data, &input()?, output, ctx)?)
            }
            NodeSpec::CountWindowAggregate(data) => {
                NodeKind::Operator(build_count_window_aggregate(data, &input()?, output, ctx)?)
            }
            NodeSpec::OverAggregate(data) => NodeKind::Operator(build_over(data, &input()?, output, ctx)?),
            NodeSpec::TemporalSort { time, then } => {
                let input = input()?;
                let then = crate::plan::codec::decode_sort_keys(then, &input, ctx)?;
                NodeKind::Operator(Arc::new(crate::operators::sort::TemporalSort {
                    time: *time,
                    then,
                    schema: input,
                }))
            }
            NodeSpec::Union => NodeKind::Operator(Arc::new(Union {
                schema: output.clone(),
            })),
            NodeSpec::DropUpdateBefore { key } => {
                NodeKind::Operator(Arc::new(crate::operators::upsert::DropUpdateBefore {
                    key: key.clone(),
                }))
            }
            NodeSpec::TopN(data) => NodeKind::Operator(build_top_n(data, &input()?, output, ctx)?),
            NodeSpec::SinkMaterializer { key } => {
                NodeKind::Operator(Arc::new(crate::operators::upsert::SinkUpsertMaterializer {
                    key: key.clone(),
                    schema: output.clone(),
                }))
            }
            NodeSpec::ChangelogNormalize { key } => {
                NodeKind::Operator(Arc::new(crate::operators::normalize::ChangelogNormalize {
                    key: key.clone(),
                    schema: output.clone(),
                }))
            }
            NodeSpec::GroupAggregate(data) => {
                NodeKind::Operator(build_group_aggregate(data, &input()?, output, ctx)?)
            }
            NodeSpec::Join(data) => NodeKind::Operator(build_join(data, inputs, output, ctx)?),
            NodeSpec::IntervalJoin(data) => {
                NodeKind::Operator(build_interval_join(data, inputs, output, ctx)?)
            }
            NodeSpec::WindowJoin(data) => NodeKind::Operator(build_window_join(data, inputs, output, ctx)?),
            NodeSpec::LookupJoin(data) => {
                NodeKind::Operator(build_lookup_join(data, (1, false), inputs, output, ctx)?)
            }
            NodeSpec::BroadcastJoin { join, table_side } => {
                NodeKind::Operator(build_lookup_join(join, (*table_side, true), inputs, output, ctx)?)
            }
            NodeSpec::TemporalJoin(data) => {
                NodeKind::Operator(build_temporal_join(data, inputs, output, ctx)?)
            }
            NodeSpec::Sink(sink) => {
                NodeKind::Operator(Arc::new(crate::connectors::sink::SinkOperatorFactory {
                    sink: sink.build(config)?,
                }))
            }
        })
    }
}

impl SourceSpec {
    fn build(&self, config: &SessionConfig) -> Result<Arc<dyn crate::runtime::SourceFactory>> {
        match self {
            SourceSpec::Connector {
                table,
                projection,
                schema,
            } => crate::connectors::create_source(&table.build()?, projection, schema.decode()?, config),
            SourceSpec::Values { batches, .. } => Ok(Arc::new(
                crate::connectors::values::ValuesSourceFactory::new(batches.decode()?),
            )),
            SourceSpec::Replayed(inner) => {
                Ok(Arc::new(crate::runtime::source::Replayed(inner.build(config)?)))
            }
        }
    }
}

impl SinkSpec {
    fn build(&self, config: &SessionConfig) -> Result<Arc<dyn crate::connectors::SinkFactory>> {
        match self {
            SinkSpec::Connector { table, schema } => {
                crate::connectors::create_sink(&table.build()?, schema.decode()?, config)
            }
            SinkSpec::Collect { id } => Ok(Arc::new(crate::connectors::collect::CollectSinkFactory::new(
                take_collector(*id)?,
            ))),
        }
    }
}

/// The parts of an aggregation spec both kinds share, decoded.
struct Decoded {
    keys: Vec<Arc<dyn datafusion_physical_expr::PhysicalExpr>>,
    key_schema: SchemaRef,
    aggregates: Vec<Arc<datafusion_physical_expr::aggregate::AggregateFunctionExpr>>,
    filters: Vec<Option<Arc<dyn datafusion_physical_expr::PhysicalExpr>>>,
    group_columns: Vec<GroupColumn>,
}

fn decode_aggregation(data: &AggregationData, input: &SchemaRef, ctx: &DecodeContext) -> Result<Decoded> {
    let aggregate_input = data.aggregate_input.decode()?;
    Ok(Decoded {
        keys: decode_exprs(&data.keys, input, ctx)?,
        key_schema: data.key_schema.decode()?,
        aggregates: data
            .aggregates
            .iter()
            .map(|a| decode_aggregate(a, &aggregate_input, ctx).map(Arc::new))
            .collect::<Result<_>>()?,
        filters: data
            .filters
            .iter()
            .map(|f| {
                f.as_ref()
                    .map(|f| decode_expr(f, &aggregate_input, ctx))
                    .transpose()
            })
            .collect::<Result<_>>()?,
        group_columns: data.group_columns.iter().map(|g| (*g).into()).collect(),
    })
}

fn build_window_aggregate(
    data: &AggregationData,
    input: &SchemaRef,
    output: &SchemaRef,
    ctx: &DecodeContext,
) -> Result<Arc<dyn crate::runtime::OperatorFactory>> {
    use crate::operators::window::aggregate::{WindowAggregate, WindowAggregateFactory};
    let decoded = decode_aggregation(data, input, ctx)?;
    let window = data
        .window
        .ok_or_else(|| Error::State("a serialized window aggregation has no window".into()))?;
    Ok(Arc::new(WindowAggregateFactory(Arc::new(WindowAggregate {
        phase: data.phase()?,
        window: window.into(),
        shift: data.shift.build()?,
        time_name: data.time_name.clone(),
        time_index: data.time_index,
        processing_time: data.processing_time,
        keys: decoded.keys,
        key_schema: decoded.key_schema,
        aggregate_input: data.aggregate_input.decode()?,
        aggregates: decoded.aggregates,
        filters: decoded.filters,
        group_columns: decoded.group_columns,
        output_schema: output.clone(),
    }))))
}

fn build_session_aggregate(
    data: &AggregationData,
    input: &SchemaRef,
    output: &SchemaRef,
    ctx: &DecodeContext,
) -> Result<Arc<dyn crate::runtime::OperatorFactory>> {
    use crate::operators::window::session::{SessionAggregate, SessionAggregateFactory};
    let decoded = decode_aggregation(data, input, ctx)?;
    let gap = data
        .gap
        .ok_or_else(|| Error::State("a serialized session aggregation has no gap".into()))?;
    Ok(Arc::new(SessionAggregateFactory(Arc::new(SessionAggregate {
        gap,
        shift: data.shift.build()?,
        time_name: data.time_name.clone(),
        time_index: data.time_index,
        processing_time: data.processing_time,
        keys: decoded.keys,
        key_schema: decoded.key_schema,
        aggregate_input: data.aggregate_input.decode()?,
        aggregates: decoded.aggregates,
        filters: decoded.filters,
        group_columns: decoded.group_columns,
        output_schema: output.clone(),
    }))))
}

fn build_count_window_aggregate(
    data: &AggregationData,
    input: &SchemaRef,
    output: &SchemaRef,
    ctx: &DecodeContext,
) -> Result<Arc<dyn crate::runtime::OperatorFactory>> {
    use crate::operators::window::count::{CountWindowAggregate, CountWindowAggregateFactory};
    let decoded = decode_aggregation(data, input, ctx)?;
    let rows = data
        .rows
        .ok_or_else(|| Error::State("a serialized count window aggregation has no windows".into()))?;
    Ok(Arc::new(CountWindowAggregateFactory(Arc::new(
        CountWindowAggregate {
            size: rows.size,
            slide: rows.slide,
            time_name: data.time_name.clone(),
            keys: decoded.keys,
            key_schema: decoded.key_schema,
            aggregate_input: data.aggregate_input.decode()?,
            aggregates: decoded.aggregates,
            filters: decoded.filters,
            output_schema: output.clone(),
        },
    ))))
}

fn build_group_aggregate(
    data: &AggregationData,
    input: &SchemaRef,
    output: &SchemaRef,
    ctx: &DecodeContext,
) -> Result<Arc<dyn crate::runtime::OperatorFactory>> {
    use crate::operators::group::{GroupAggregate, GroupAggregateFactory};
    let decoded = decode_aggregation(data, input, ctx)?;
    Ok(Arc::new(GroupAggregateFactory(Arc::new(GroupAggregate {
        phase: data.phase()?,
        keys: decoded.keys,
        key_schema: decoded.key_schema,
        aggregate_input: data.aggregate_input.decode()?,
        aggregates: decoded.aggregates,
        filters: decoded.filters,
        output_schema: output.clone(),
        state_ttl: data.state_ttl_ms.map(std::time::Duration::from_millis),
    }))))
}

/// The shared part of encoding an aggregation: keys over `input`, the
/// aggregates and their filters over `aggregate_input`.
#[allow(clippy::too_many_arguments)]
pub fn encode_aggregation(
    input: &Schema,
    keys: &[Arc<dyn datafusion_physical_expr::PhysicalExpr>],
    key_schema: &Schema,
    aggregate_input: &Schema,
    aggregates: &[Arc<datafusion_physical_expr::aggregate::AggregateFunctionExpr>],
    filters: &[Option<Arc<dyn datafusion_physical_expr::PhysicalExpr>>],
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

/// A field list's schema, for specs that hold fields.
pub fn schema_of(fields: Vec<Field>) -> SchemaRef {
    Arc::new(Schema::new(fields))
}

/// The join a [`JoinData`] describes, between inputs of `inputs`.
fn build_join(
    data: &JoinData,
    inputs: &[SchemaRef],
    output: &SchemaRef,
    ctx: &DecodeContext,
) -> Result<Arc<dyn crate::runtime::OperatorFactory>> {
    use crate::operators::join::{Join, JoinFactory};
    let [left, right] = inputs else {
        return Err(Error::State("a serialized join does not have two inputs".into()));
    };
    let data_inputs = [
        crate::changelog::without_op(left),
        crate::changelog::without_op(right),
    ];
    Ok(Arc::new(JoinFactory(Arc::new(Join {
        kind: data.kind,
        keys: decode_join_keys(data, &data_inputs, ctx)?,
        filter: decode_join_filter(data, &data_inputs, ctx)?,
        updating: [crate::changelog::has_op(left), crate::changelog::has_op(right)],
        inputs: data_inputs,
        null_equal: data.null_equal,
        unique_keys: data.unique_keys.clone(),
        schema: output.clone(),
        state_ttl: data.state_ttl_ms.map(std::time::Duration::from_millis),
    }))))
}

/// The interval join an [`IntervalJoinData`] describes.
fn build_interval_join(
    data: &IntervalJoinData,
    inputs: &[SchemaRef],
    output: &SchemaRef,
    ctx: &DecodeContext,
) -> Result<Arc<dyn crate::runtime::OperatorFactory>> {
    use crate::operators::join::interval::IntervalJoin;
    let [left, right] = inputs else {
        return Err(Error::State(
            "a serialized interval join does not have two inputs".into(),
        ));
    };
    let inputs = [left.clone(), right.clone()];
    Ok(Arc::new(IntervalJoin {
        kind: data.join.kind,
        keys: decode_join_keys(&data.join, &inputs, ctx)?,
        filter: decode_join_filter(&data.join, &inputs, ctx)?,
        inputs,
        times: data.times,
        lower: data.lower,
        upper: data.upper,
        proctime: data.proctime,
        schema: output.clone(),
    }))
}

fn build_top_n(
    data: &TopNData,
    input: &SchemaRef,
    output: &SchemaRef,
    ctx: &DecodeContext,
) -> Result<Arc<dyn crate::runtime::OperatorFactory>> {
    let input = crate::changelog::without_op(input);
    Ok(Arc::new(crate::operators::rank::TopN {
        partition: decode_exprs(&data.partition, &input, ctx)?,
        order: crate::plan::codec::decode_sort_keys(&data.order, &input, ctx)?,
        start: data.start,
        end: data.end,
        rank_output: data.rank_output,
        arrival: data.arrival,
        rank_type: data.rank_type,
        retract: data.retract,
        window_end: data.window_end,
        state_ttl: data.state_ttl_ms.map(std::time::Duration::from_millis),
        input,
        schema: output.clone(),
    }))
}

fn build_over(
    data: &OverData,
    input: &SchemaRef,
    output: &SchemaRef,
    ctx: &DecodeContext,
) -> Result<Arc<dyn crate::runtime::OperatorFactory>> {
    let input = crate::changelog::without_op(input);
    Ok(Arc::new(crate::operators::over::OverAggregate {
        partition: decode_exprs(&data.partition, &input, ctx)?,
        time: data.time,
        frame: data.frame,
        retract: data.retract,
        aggregates: data
            .aggregates
            .iter()
            .map(|a| decode_aggregate(a, &input, ctx).map(Arc::new))
            .collect::<Result<Vec<_>>>()?,
        input,
        schema: output.clone(),
    }))
}

/// The window join a [`WindowJoinData`] describes.
fn build_window_join(
    data: &WindowJoinData,
    inputs: &[SchemaRef],
    output: &SchemaRef,
    ctx: &DecodeContext,
) -> Result<Arc<dyn crate::runtime::OperatorFactory>> {
    use crate::operators::join::window::WindowJoin;
    let [left, right] = inputs else {
        return Err(Error::State(
            "a serialized window join does not have two inputs".into(),
        ));
    };
    let inputs = [left.clone(), right.clone()];
    Ok(Arc::new(WindowJoin {
        kind: data.join.kind,
        keys: decode_join_keys(&data.join, &inputs, ctx)?,
        filter: decode_join_filter(&data.join, &inputs, ctx)?,
        inputs,
        ends: data.ends,
        schema: output.clone(),
    }))
}

/// The lookup join a [`JoinData`] describes.
fn build_lookup_join(
    data: &JoinData,
    (table_side, broadcast): (usize, bool),
    inputs: &[SchemaRef],
    output: &SchemaRef,
    ctx: &DecodeContext,
) -> Result<Arc<dyn crate::runtime::OperatorFactory>> {
    use crate::operators::join::lookup::LookupJoin;
    let [stream, table] = inputs else {
        return Err(Error::State(
            "a serialized lookup join does not have two inputs".into(),
        ));
    };
    let inputs = [stream.clone(), table.clone()];
    let sql_inputs = match table_side {
        0 => [table.clone(), stream.clone()],
        _ => inputs.clone(),
    };
    Ok(Arc::new(LookupJoin {
        kind: data.kind,
        keys: decode_join_keys(data, &inputs, ctx)?,
        filter: decode_join_filter(data, &sql_inputs, ctx)?,
        inputs,
        schema: output.clone(),
        table_side,
        broadcast,
    }))
}

/// The temporal join an [`IntervalJoinData`] (without bounds) describes.
fn build_temporal_join(
    data: &IntervalJoinData,
    inputs: &[SchemaRef],
    output: &SchemaRef,
    ctx: &DecodeContext,
) -> Result<Arc<dyn crate::runtime::OperatorFactory>> {
    use crate::operators::join::temporal::TemporalJoin;
    let [stream, table] = inputs else {
        return Err(Error::State(
            "a serialized temporal join does not have two inputs".into(),
        ));
    };
    let inputs = [
        crate::changelog::without_op(stream),
        crate::changelog::without_op(table),
    ];
    Ok(Arc::new(TemporalJoin {
        kind: data.join.kind,
        keys: decode_join_keys(&data.join, &inputs, ctx)?,
        filter: decode_join_filter(&data.join, &inputs, ctx)?,
        inputs,
        times: data.times,
        schema: output.clone(),
    }))
}

/// A join's key expressions, over its inputs `inputs`.
fn decode_join_keys(
    data: &JoinData,
    inputs: &[SchemaRef; 2],
    ctx: &DecodeContext,
) -> Result<[Vec<Arc<dyn datafusion_physical_expr::PhysicalExpr>>; 2]> {
    Ok([
        decode_exprs(&data.left_keys, &inputs[0], ctx)?,
        decode_exprs(&data.right_keys, &inputs[1], ctx)?,
    ])
}

/// A join's residual condition, over both inputs side by side.
fn decode_join_filter(
    data: &JoinData,
    inputs: &[SchemaRef; 2],
    ctx: &DecodeContext,
) -> Result<Option<Arc<dyn datafusion_physical_expr::PhysicalExpr>>> {
    let joined = crate::operators::join::joined_schema(inputs);
    data.filter
        .as_ref()
        .map(|f| decode_expr(f, &joined, ctx))
        .transpose()
}
