//! The streaming planner: DataFusion `LogicalPlan` → [`PlanSpec`] (a plan as data).
//!
//! Every node's output has exactly the columns of the logical node it comes
//! from, in order, so expressions bound against a logical schema evaluate
//! against the stream by position.
//!
//! A GROUP BY over a window TVF becomes a window aggregation that consumes the
//! TVF's *input*: the window columns are never materialized. The projections and
//! filters between the two are planned on the input stream, and the window
//! columns are tracked by origin ([`Origin`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion_common::{DFSchema, DFSchemaRef, TableReference};
use datafusion_expr::execution_props::ExecutionProps;
use datafusion_expr::expr::AggregateFunction;
use datafusion_expr::logical_plan::{Aggregate, Distinct, LogicalPlan, TableScan};
use datafusion_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion_expr::{Expr, WriteOp};
use datafusion_physical_expr::aggregate::AggregateExprBuilder;
use datafusion_physical_expr::expressions::Column as ColumnExpr;
use datafusion_physical_expr::{PhysicalExpr, create_physical_expr, create_physical_sort_exprs};

use crate::binder::{Binder, CatalogTableSource, PHYSICAL_SCHEMA};
use crate::count_window::CountWindowNode;
use crate::planner::interval::{IntervalBounds, interval_bounds};
use crate::temporal::VersionedTableNode;
use crate::window_tvf::WindowTvfNode;
use crate::{Error, Result};
use weir_common::config::{AggPhaseStrategy, SessionConfig, UpsertMaterialize};
use weir_common::key_group::check_key_type;
use weir_common::types::is_ltz;
use weir_common::types::{PROCTIME, ROWTIME, TIME_ATTRIBUTE_KEY};
use weir_plan::NodeId;
use weir_plan::changelog::{self, ChangelogMode, ChangelogRole};
use weir_plan::codec::{BatchesData, DecodeContext, SchemaData, encode_expr, encode_exprs};
use weir_plan::connector::{Connectors, SourceFacts};
use weir_plan::join::JoinKind;
use weir_plan::spec::{
    AggregationData, CountWindowData, ExchangeSpec, IntervalJoinData, JoinData, NodeEntry, NodeSpec,
    OverData, PlanSpec, SinkSpec, SourceSpec, TableData, TopNData, WindowJoinData, encode_aggregation,
    phase_name,
};
use weir_plan::window::{GroupColumn, Phase, TimeShift, TvfWindow, WindowProperty};

pub mod broadcast;
pub mod interval;
pub mod over;
pub mod rank;

/// Where a column of a windowed relation comes from.
#[derive(Debug, Clone, Copy)]
enum Origin {
    /// Column `i` of the stream.
    Stream(usize),
    /// A window column, produced by the window aggregation itself.
    Window(WindowProperty),
}

/// A relation over a window TVF, planned on the TVF's input stream.
struct WindowedInput {
    stream: NodeId,
    /// Schema of the stream (qualified as in the logical plan).
    schema: DFSchemaRef,
    /// For each column of the logical relation, where it comes from.
    origins: Vec<Origin>,
    time_index: usize,
    time_name: String,
    window: TvfWindow,
    /// For a SESSION TVF with PARTITION BY: the partition columns' names.
    partition_by: Option<Vec<String>>,
    /// The time attribute is processing time.
    processing_time: bool,
    shift: TimeShift,
}

/// How rows reach a node from one input, with the keys of a hash exchange
/// as expressions over the input (written out when the node is added).
#[derive(Debug, Clone)]
enum Exchange {
    Forward,
    Hash(Vec<Arc<dyn PhysicalExpr>>),
    Rebalance,
    Broadcast,
    Single,
}

/// A node of the plan being made.
#[derive(Debug, Clone)]
struct PlanNode {
    /// What it does.
    spec: NodeSpec,
    /// Its name (EXPLAIN's).
    name: String,
    /// Its inputs, each with its exchange.
    inputs: Vec<(NodeId, ExchangeSpec)>,
    parallelism: usize,
    schema: SchemaRef,
    mode: ChangelogMode,
    /// A connector source's facts.
    source: Option<SourceFacts>,
}

/// Plans logical plans of one session.
pub struct Planner<'a> {
    binder: &'a Binder,
    config: &'a SessionConfig,
    connectors: &'a dyn Connectors,
    parallelism: usize,
    nodes: Vec<PlanNode>,
    props: ExecutionProps,
    /// Calc nodes with a filter and no projection: a projection planned
    /// directly on one is merged into it (the plan is a tree, so it has no
    /// other consumer).
    filter_only_calcs: std::collections::HashMap<NodeId, Arc<dyn PhysicalExpr>>,
    /// Output columns of updating nodes that are unique among their rows
    /// (an upsert key): a non-windowed aggregation's keys, carried through
    /// projections that keep them.
    upsert_keys: std::collections::HashMap<NodeId, Vec<usize>>,
    /// Planning a temporal join's table side (`FOR SYSTEM_TIME AS OF`).
    temporal_side: bool,
}

fn arrow_schema(schema: &DFSchema) -> SchemaRef {
    Arc::new(schema.as_arrow().clone())
}

fn strip_alias(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => strip_alias(&a.expr),
        other => other,
    }
}

/// What a node is, as the planner adds it: its spec, and for a connector's
/// source or sink what the connector says of it.
enum Kind {
    Operator(NodeSpec),
    Source(SourceSpec, SourceFacts),
    Sink(SinkSpec, weir_plan::connector::SinkFacts),
}

impl<'a> Planner<'a> {
    /// A planner using the session's binder, settings and connectors.
    pub fn new(
        binder: &'a Binder,
        config: &'a SessionConfig,
        connectors: &'a dyn Connectors,
    ) -> Result<Self> {
        Ok(Planner {
            binder,
            config,
            connectors,
            parallelism: config.parallelism()?,
            nodes: Vec::new(),
            props: ExecutionProps::new(),
            filter_only_calcs: Default::default(),
            upsert_keys: Default::default(),
            temporal_side: false,
        })
    }

    fn finish(self) -> Result<PlanSpec> {
        let nodes = (self.nodes.into_iter())
            .map(|n| {
                Ok(NodeEntry {
                    kind: n.spec,
                    name: n.name,
                    mode: n.mode,
                    inputs: n.inputs,
                    parallelism: n.parallelism,
                    schema: SchemaData::encode(&n.schema)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(PlanSpec {
            nodes,
            chaining: self.config.operator_chaining()?,
            settings: (self.config.entries())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            time_zone: self.binder.zone().to_string(),
        })
    }

    /// Plans `INSERT INTO` (a DML plan) into a job ending in the table's sink.
    pub fn plan_insert(mut self, plan: &LogicalPlan) -> Result<PlanSpec> {
        let LogicalPlan::Dml(dml) = plan else {
            return Err(Error::Internal(format!(
                "expected an INSERT plan, got {}",
                plan.display()
            )));
        };
        if !matches!(dml.op, WriteOp::Insert(_)) {
            return Err(Error::sql(format!(
                "{} is not supported; only INSERT INTO is",
                dml.op
            )));
        }
        let table = dml
            .target
            .as_ref()
            .downcast_ref::<CatalogTableSource>()
            .ok_or_else(|| Error::Internal("INSERT target is not a catalog table".into()))?
            .table
            .clone();
        let input = self.plan(&dml.input)?;
        let schema = self.nodes[input].schema.clone();
        let rows = weir_common::changelog::without_op(&schema);
        let connector_table = table.connector_table();
        let facts = self
            .connectors
            .sink(&connector_table, rows.clone(), self.config)?;
        let parallelism = match connector_table.parse_option::<usize>("sink.parallelism")? {
            Some(0) => return Err(Error::sql("'sink.parallelism' must be positive")),
            Some(p) => p,
            None => self.nodes[input].parallelism,
        };
        let (input, exchange) = self.sink_input(input, &table, &facts, parallelism)?;
        let sink = SinkSpec::Connector {
            table: TableData::of(&connector_table)?,
            schema: SchemaData::encode(&rows)?,
        };
        self.push_named(
            Kind::Sink(sink, facts),
            vec![(input, exchange)],
            parallelism,
            schema,
            &table.name,
        )?;
        self.finish()
    }

    /// Plans a query whose rows go to the submitter's result channel
    /// `collect` (the embedded API's collector).
    pub fn plan_query(mut self, plan: &LogicalPlan, collect: u64) -> Result<PlanSpec> {
        let input = self.plan(plan)?;
        let exchange = if self.nodes[input].parallelism == 1 {
            Exchange::Forward
        } else {
            Exchange::Single
        };
        let sink = NodeSpec::Sink(SinkSpec::Collect { id: collect });
        self.push(sink, vec![(input, exchange)], 1, self.nodes[input].schema.clone())?;
        self.finish()
    }

    /// The functions and settings expressions are decoded with (names).
    fn decode_context(&self) -> DecodeContext<'_> {
        DecodeContext::new(self.binder.functions(), self.binder.zone())
    }

    /// Adds an operator node.
    fn push(
        &mut self,
        spec: NodeSpec,
        inputs: Vec<(NodeId, Exchange)>,
        parallelism: usize,
        schema: SchemaRef,
    ) -> Result<NodeId> {
        let input_schemas: Vec<SchemaRef> = inputs
            .iter()
            .map(|(i, _)| self.nodes[*i].schema.clone())
            .collect();
        let name = weir_plan::describe::describe(&spec, &input_schemas, &schema, &self.decode_context())?
            .ok_or_else(|| Error::Internal("a connector node added as an operator".into()))?;
        self.push_named(Kind::Operator(spec), inputs, parallelism, schema, &name)
    }

    /// Adds a connector's source.
    fn push_source(
        &mut self,
        source: SourceSpec,
        facts: SourceFacts,
        parallelism: usize,
        schema: SchemaRef,
    ) -> Result<NodeId> {
        let name = facts.name.clone();
        self.push_named(Kind::Source(source, facts), vec![], parallelism, schema, &name)
    }

    /// Adds a node after inferring its changelog mode: refuses updates it
    /// cannot take, naming it `name` (a table sink by its table's name).
    fn push_named(
        &mut self,
        kind: Kind,
        inputs: Vec<(NodeId, Exchange)>,
        parallelism: usize,
        schema: SchemaRef,
        name: &str,
    ) -> Result<NodeId> {
        let (spec, role, source, node_name) = match kind {
            Kind::Operator(spec) => {
                let role = changelog::role_of(&spec, &schema)
                    .ok_or_else(|| Error::Internal(format!("{name} has no changelog role")))?;
                (spec, role, None, name.to_string())
            }
            Kind::Source(spec, facts) => {
                let role = match &facts.upsert_key {
                    Some(key) => ChangelogRole::UpsertSource(key.clone()),
                    None => ChangelogRole::Source,
                };
                let name = facts.name.clone();
                (NodeSpec::Source(spec), role, Some(facts), name)
            }
            Kind::Sink(spec, facts) => {
                let role = match facts.accepts_updates {
                    true => ChangelogRole::SinkOfAnyKind,
                    false => ChangelogRole::SinkOfInserts,
                };
                (NodeSpec::Sink(spec), role, None, facts.name)
            }
        };
        let modes: Vec<ChangelogMode> = inputs.iter().map(|(i, _)| self.nodes[*i].mode.clone()).collect();
        let producers: Vec<String> = inputs
            .iter()
            .map(|(i, _)| self.nodes[self.update_origin(*i)].name.clone())
            .collect();
        let mode = changelog::infer(&role, &modes, name, &producers)
            .map_err(|refusal| Error::Plan(refusal.to_string()))?;
        if mode.is_updating() != weir_common::changelog::has_op(&schema) {
            return Err(Error::Internal(format!(
                "{name} emits {mode}, but its schema disagrees: {schema}"
            )));
        }
        let inputs = inputs
            .into_iter()
            .map(|(i, exchange)| Ok((i, self.exchange_spec(exchange, i)?)))
            .collect::<Result<Vec<_>>>()?;
        self.nodes.push(PlanNode {
            spec,
            name: node_name,
            inputs,
            parallelism,
            schema,
            mode,
            source,
        });
        Ok(self.nodes.len() - 1)
    }

    /// An exchange as data, its hash keys over node `input`'s rows.
    fn exchange_spec(&self, exchange: Exchange, input: NodeId) -> Result<ExchangeSpec> {
        Ok(match exchange {
            Exchange::Forward => ExchangeSpec::Forward,
            Exchange::Hash(keys) => ExchangeSpec::Hash(encode_exprs(&keys, &self.nodes[input].schema)?),
            Exchange::Rebalance => ExchangeSpec::Rebalance,
            Exchange::Broadcast => ExchangeSpec::Broadcast,
            Exchange::Single => ExchangeSpec::Single,
        })
    }

    /// Adds a source of constant rows.
    fn push_values(&mut self, batches: Vec<RecordBatch>, schema: SchemaRef) -> Result<NodeId> {
        let values = SourceSpec::Values {
            schema: SchemaData::encode(&schema)?,
            batches: BatchesData::encode(&schema, &batches)?,
        };
        let facts = SourceFacts {
            name: format!(
                "Values({} rows)",
                batches.iter().map(|b| b.num_rows()).sum::<usize>()
            ),
            bounded: true,
            estimated_bytes: Some(batches.iter().map(|b| b.get_array_memory_size() as u64).sum()),
            upsert_key: None,
        };
        self.push_source(values, facts, 1, schema)
    }

    /// Whether node `id`, when it is a source, ends by itself.
    fn bounded_source(&self, id: NodeId) -> Option<bool> {
        let node = &self.nodes[id];
        match &node.spec {
            NodeSpec::Source(SourceSpec::Connector { .. }) => node.source.as_ref().map(|f| f.bounded),
            NodeSpec::Source(_) => Some(true),
            _ => None,
        }
    }

    /// Marks the sources among `nodes` to be read again from their start
    /// after a restore (a lookup or broadcast join's table side).
    fn replay_sources(&mut self, nodes: impl IntoIterator<Item = NodeId>) {
        for id in nodes {
            if let NodeSpec::Source(source) = &mut self.nodes[id].spec
                && !matches!(source, SourceSpec::Replayed(_))
            {
                *source = SourceSpec::Replayed(Box::new(source.clone()));
            }
        }
    }

    /// The node whose updates node `id` emits: itself, or, through nodes
    /// that pass their input's kinds on (Calc, union), the node they come
    /// from, which a refusal names, as Flink's does.
    fn update_origin(&self, mut id: NodeId) -> NodeId {
        loop {
            let node = &self.nodes[id];
            let passes = matches!(
                changelog::role_of(&node.spec, &node.schema),
                Some(ChangelogRole::PassThrough | ChangelogRole::Upserting(_))
            );
            match node
                .inputs
                .iter()
                .find(|(i, _)| self.nodes[*i].mode.is_updating())
            {
                Some((input, _)) if passes => id = *input,
                _ => return id,
            }
        }
    }

    /// `schema` as node `input`'s rows carry it: with the op column when
    /// that node updates.
    fn like_input(&self, input: NodeId, schema: SchemaRef) -> SchemaRef {
        if self.nodes[input].mode.is_updating() {
            weir_common::changelog::with_op(&schema)
        } else {
            schema
        }
    }

    fn physical(&self, e: &Expr, schema: &DFSchema) -> Result<Arc<dyn PhysicalExpr>> {
        use datafusion_common::tree_node::TreeNode;
        let subquery = e.exists(|e| {
            Ok(matches!(
                e,
                Expr::InSubquery(_) | Expr::Exists(_) | Expr::ScalarSubquery(_)
            ))
        })?;
        if subquery {
            return Err(unsupported("a subquery (IN, EXISTS or a scalar subquery)"));
        }
        Ok(create_physical_expr(
            e,
            schema,
            &self.props,
            &PhysicalPlanningContext::default(),
        )?)
    }

    /// Adds a Calc after `input`; a projection directly over a filter-only Calc
    /// is merged into it.
    fn add_calc(
        &mut self,
        input: NodeId,
        filter: Option<Arc<dyn PhysicalExpr>>,
        projection: Option<Vec<Arc<dyn PhysicalExpr>>>,
        schema: SchemaRef,
    ) -> Result<NodeId> {
        let schema = self.like_input(input, schema);
        // A filter on other columns than the key may drop a key's `+U` and
        // keep its `-U`: the key no longer says which row a change replaces
        // (Flink then needs the `-U` rows too).
        let upsert_key = self
            .upsert_keys
            .get(&input)
            .filter(|key| filter.as_ref().is_none_or(|f| filters_only(f, key)))
            .and_then(|key| key_through(key, projection.as_deref()));
        if filter.is_none()
            && let Some(previous) = self.filter_only_calcs.remove(&input)
        {
            self.upsert_keys.remove(&input);
            if let Some(key) = upsert_key {
                self.upsert_keys.insert(input, key);
            }
            // The merged Calc reads what the filter-only one read.
            let below = self.nodes[input].inputs[0].0;
            let below_schema = self.nodes[below].schema.clone();
            let spec = NodeSpec::calc(Some(&previous), projection.as_deref(), &below_schema)?;
            let name = weir_plan::describe::calc(Some(&previous), projection.as_deref(), &schema);
            let node = &mut self.nodes[input];
            node.spec = spec;
            node.name = name;
            node.schema = schema;
            return Ok(input);
        }
        let parallelism = self.nodes[input].parallelism;
        let spec = NodeSpec::calc(filter.as_ref(), projection.as_deref(), &self.nodes[input].schema)?;
        let id = self.push(spec, vec![(input, Exchange::Forward)], parallelism, schema)?;
        if let (Some(f), None) = (filter, &projection) {
            self.filter_only_calcs.insert(id, f);
        }
        if let Some(key) = upsert_key {
            self.upsert_keys.insert(id, key);
        }
        Ok(id)
    }

    /// How `input` reaches a sink at `parallelism`, as Flink's planner
    /// decides it: an updating input of a sink with a primary key is
    /// materialized by that key when its own upsert key is not within it
    /// (`table.exec.sink.upsert-materialize`), or has its `-U` rows dropped
    /// when its upsert key is the primary key and the sink upserts; a sink at
    /// another parallelism gets updates hashed by its primary key.
    fn sink_input(
        &mut self,
        input: NodeId,
        table: &crate::catalog::CatalogTable,
        sink: &weir_plan::connector::SinkFacts,
        parallelism: usize,
    ) -> Result<(NodeId, Exchange)> {
        let schema = self.nodes[input].schema.clone();
        let pk = table
            .primary_key
            .iter()
            .map(|name| Ok(schema.index_of(name)?))
            .collect::<Result<Vec<usize>>>()?;
        let pk_hash = Exchange::Hash(
            pk.iter()
                .map(|i| Arc::new(ColumnExpr::new(schema.field(*i).name(), *i)) as Arc<dyn PhysicalExpr>)
                .collect(),
        );
        let updating = self.nodes[input].mode.is_updating();
        let key = self.upsert_keys.get(&input).cloned();
        let within = key.as_ref().is_some_and(|k| k.iter().all(|c| pk.contains(c)));
        let materialize = updating
            && !pk.is_empty()
            && sink.accepts_updates
            && match self.config.sink_upsert_materialize()? {
                UpsertMaterialize::Auto => !within,
                UpsertMaterialize::Force => true,
                UpsertMaterialize::None => false,
            };
        if materialize {
            let edge = match parallelism == 1 && self.nodes[input].parallelism == 1 {
                true => Exchange::Forward,
                false => pk_hash,
            };
            let materializer = NodeSpec::SinkMaterializer { key: pk };
            let id = self.push(materializer, vec![(input, edge)], parallelism, schema)?;
            return Ok((id, Exchange::Forward));
        }
        let input = match key {
            Some(key) if updating && within && key.len() == pk.len() && !sink.needs_update_before => {
                let parallelism = self.nodes[input].parallelism;
                let drop = NodeSpec::DropUpdateBefore { key };
                self.push(drop, vec![(input, Exchange::Forward)], parallelism, schema)?
            }
            _ => input,
        };
        let from = self.nodes[input].parallelism;
        Ok((
            input,
            match () {
                _ if parallelism == from => Exchange::Forward,
                _ if !updating => Exchange::Rebalance,
                _ if !pk.is_empty() => pk_hash,
                _ => {
                    return Err(Error::Plan(format!(
                        "The sink for table '{}' has a configured parallelism of {parallelism}, while the input \
                     parallelism is {from}. Since the configured parallelism is different from the input's \
                     parallelism and the changelog mode is not insert-only, a primary key is required but \
                     could not be found.",
                        table.name
                    )));
                }
            },
        ))
    }

    fn plan(&mut self, plan: &LogicalPlan) -> Result<NodeId> {
        match plan {
            LogicalPlan::Projection(p) => {
                // A TopN whose rank the projection drops outputs no rank.
                let top_n = match p.input.as_ref() {
                    LogicalPlan::Filter(f) if !uses_rank(&p.expr, f) => self.plan_top_n(f, false)?,
                    _ => None,
                };
                let input = match top_n {
                    Some(node) => node,
                    None => self.plan(&p.input)?,
                };
                let exprs = p
                    .expr
                    .iter()
                    .map(|e| self.physical(e, p.input.schema()))
                    .collect::<Result<Vec<_>>>()?;
                self.add_calc(input, None, Some(exprs), arrow_schema(plan.schema()))
            }
            LogicalPlan::Filter(f) => {
                if let Some(top_n) = self.plan_top_n(f, true)? {
                    return Ok(top_n);
                }
                let input = self.plan(&f.input)?;
                // The optimizer copies a temporal join's column-keeping
                // condition below the join too: it is no filter.
                let Some(predicate) = without_keep_columns(&f.predicate) else {
                    return Ok(input);
                };
                let predicate = self.physical(&predicate, f.input.schema())?;
                self.add_calc(input, Some(predicate), None, arrow_schema(plan.schema()))
            }
            LogicalPlan::SubqueryAlias(a) => self.plan(&a.input),
            LogicalPlan::TableScan(scan) => self.plan_scan(scan),
            LogicalPlan::Aggregate(aggregate) => self.plan_aggregate(aggregate),
            LogicalPlan::Extension(extension) => {
                let any = extension.node.as_any();
                if let Some(node) = any.downcast_ref::<WindowTvfNode>() {
                    return self.plan_window_assign(node);
                }
                if any.is::<CountWindowNode>() {
                    return Err(Error::Plan(
                        "a row-count window is grouped by its alias and aggregated".into(),
                    ));
                }
                if let Some(node) = any.downcast_ref::<VersionedTableNode>() {
                    return match self.temporal_side {
                        true => self.plan(&node.input),
                        false => Err(Error::Plan(
                            "FOR SYSTEM_TIME AS OF is only supported on the right side of a join".into(),
                        )),
                    };
                }
                Err(Error::Internal(format!(
                    "unknown plan node {}",
                    extension.node.name()
                )))
            }
            LogicalPlan::Values(values) => {
                let schema = arrow_schema(&values.schema);
                let empty = Arc::new(DFSchema::empty());
                let one_row = RecordBatch::try_new_with_options(
                    Arc::new(Schema::empty()),
                    vec![],
                    &RecordBatchOptions::new().with_row_count(Some(1)),
                )?;
                let mut rows = Vec::new();
                for row in &values.values {
                    let columns = row
                        .iter()
                        .map(|e| Ok(self.physical(e, &empty)?.evaluate(&one_row)?.into_array(1)?))
                        .collect::<Result<Vec<_>>>()?;
                    let columns = columns
                        .into_iter()
                        .zip(schema.fields())
                        .map(|(c, f)| Ok(arrow::compute::cast(&c, f.data_type())?))
                        .collect::<Result<Vec<_>>>()?;
                    rows.push(RecordBatch::try_new(schema.clone(), columns)?);
                }
                let batch = arrow::compute::concat_batches(&schema, &rows)?;
                self.push_values(vec![batch], schema)
            }
            LogicalPlan::EmptyRelation(empty) => {
                let schema = arrow_schema(&empty.schema);
                let batches = if empty.produce_one_row {
                    vec![RecordBatch::try_new_with_options(
                        schema.clone(),
                        vec![],
                        &RecordBatchOptions::new().with_row_count(Some(1)),
                    )?]
                } else {
                    vec![]
                };
                self.push_values(batches, schema)
            }
            LogicalPlan::Union(union) => {
                let inputs = union
                    .inputs
                    .iter()
                    .map(|i| self.plan(i))
                    .collect::<Result<Vec<_>>>()?;
                let parallelism = self.parallelism;
                let edges: Vec<(NodeId, Exchange)> = inputs
                    .into_iter()
                    .map(|i| {
                        let exchange = if self.nodes[i].parallelism == parallelism {
                            Exchange::Forward
                        } else {
                            Exchange::Rebalance
                        };
                        (i, exchange)
                    })
                    .collect();
                let updating = edges.iter().any(|(i, _)| self.nodes[*i].mode.is_updating());
                let mut schema = arrow_schema(plan.schema());
                if updating {
                    schema = weir_common::changelog::with_op(&schema);
                }
                self.push(NodeSpec::Union, edges, parallelism, schema)
            }
            LogicalPlan::Join(join) => self.plan_join(join),
            LogicalPlan::Sort(_) | LogicalPlan::Limit(_) => self.plan_sort_or_limit(plan),
            LogicalPlan::Window(window) => self.plan_over(window),
            LogicalPlan::Distinct(Distinct::All(input)) => self.plan_distinct(input, plan),
            LogicalPlan::Distinct(Distinct::On(_)) => Err(unsupported("SELECT DISTINCT ON")),
            LogicalPlan::Unnest(_) => Err(unsupported("UNNEST")),
            other => Err(Error::Plan(format!(
                "{} is not supported in a streaming query",
                other.display()
            ))),
        }
    }

    /// A regular join: both inputs hashed on their join keys (to one
    /// subtask when there are none), the residual condition evaluated on
    /// candidate pairs. Time attributes of the inputs become plain
    /// timestamps in its output, as in Flink.
    fn plan_join(&mut self, join: &datafusion_expr::logical_plan::Join) -> Result<NodeId> {
        use datafusion_expr::JoinType;
        let kind = match join.join_type {
            JoinType::Inner => JoinKind::Inner,
            JoinType::Left => JoinKind::Left,
            JoinType::Right => JoinKind::Right,
            JoinType::Full => JoinKind::Full,
            JoinType::LeftSemi => JoinKind::Semi,
            JoinType::LeftAnti => JoinKind::Anti,
            other => return Err(unsupported(&format!("a {other} join"))),
        };
        if let Some(versioned) = crate::temporal::versioned_table(&join.right) {
            return self.plan_temporal_join(join, kind, &versioned.time);
        }
        let left = self.plan(&join.left)?;
        let right = self.plan(&join.right)?;
        // The condition sees both sides (a semi join outputs the left only).
        let both = join.left.schema().join(join.right.schema())?;
        if join.null_aware {
            // NOT IN: a pair matches unless its keys are known to differ
            // (`(l = r) IS NOT FALSE`), so a NULL on either side matches
            // everything; as Flink, without keys (one subtask).
            return self.plan_null_aware_anti_join(join, left, right, &both);
        }
        let keys = self.join_keys(join)?;
        let insert_only = !self.nodes[left].mode.is_updating() && !self.nodes[right].mode.is_updating();
        if let Some(ends) = crate::window_tvf::window_join_ends(join).filter(|_| insert_only) {
            let filter = join
                .filter
                .as_ref()
                .map(|f| self.physical(f, &both))
                .transpose()?;
            let edges = self.join_edges([left, right], &keys, self.parallelism, false);
            let schema = arrow_schema(&join.schema);
            let inputs = [self.nodes[left].schema.clone(), self.nodes[right].schema.clone()];
            let join = JoinData::encode(kind, &keys, &inputs, filter.as_ref(), &inputs)?;
            let spec = NodeSpec::WindowJoin(Box::new(WindowJoinData { join, ends }));
            return self.push(spec, edges, self.parallelism, schema);
        }
        let bounds = match (&join.filter, insert_only && !kind.is_semi_or_anti()) {
            (Some(filter), true) => interval_bounds(filter, join.left.schema(), join.right.schema()),
            _ => None,
        };
        if let Some(bounds) = bounds {
            let filter = bounds
                .rest
                .as_ref()
                .map(|f| self.physical(f, &both))
                .transpose()?;
            return self.push_interval_join(kind, left, right, keys, filter, &bounds, join);
        }
        let filter = join
            .filter
            .as_ref()
            .map(|f| self.physical(f, &both))
            .transpose()?;
        self.push_join(kind, left, right, keys, filter, join)
    }

    /// Adds an interval join (insert-only inputs, time bounds between them).
    #[allow(clippy::too_many_arguments)]
    fn push_interval_join(
        &mut self,
        kind: JoinKind,
        left: NodeId,
        right: NodeId,
        keys: [Vec<Arc<dyn PhysicalExpr>>; 2],
        filter: Option<Arc<dyn PhysicalExpr>>,
        bounds: &IntervalBounds,
        join: &datafusion_expr::logical_plan::Join,
    ) -> Result<NodeId> {
        // Unlike a regular join's, its output keeps the time attributes.
        let schema = arrow_schema(&join.schema);
        let keyless = keys[0].is_empty();
        let parallelism = if keyless { 1 } else { self.parallelism };
        let edges = self.join_edges([left, right], &keys, parallelism, keyless);
        let inputs = [self.nodes[left].schema.clone(), self.nodes[right].schema.clone()];
        let spec = NodeSpec::IntervalJoin(Box::new(IntervalJoinData {
            join: JoinData::encode(kind, &keys, &inputs, filter.as_ref(), &inputs)?,
            times: [bounds.left_time, bounds.right_time],
            lower: bounds.lower,
            upper: bounds.upper,
            proctime: bounds.proctime,
        }));
        self.push(spec, edges, parallelism, schema)
    }

    /// `JOIN t FOR SYSTEM_TIME AS OF s.time`: on processing time, a lookup
    /// join against a bounded table (broadcast to every subtask, read again
    /// after a restore); on event time, not yet.
    fn plan_temporal_join(
        &mut self,
        join: &datafusion_expr::logical_plan::Join,
        kind: JoinKind,
        time: &[String],
    ) -> Result<NodeId> {
        let (name, qualifier) = match time {
            [name] => (name, None),
            [.., qualifier, name] => (name, Some(qualifier.as_str())),
            [] => return Err(Error::Internal("FOR SYSTEM_TIME AS OF without a column".into())),
        };
        let field = time_field(&join.left, name, qualifier).ok_or_else(|| {
            Error::sql(format!(
                "FOR SYSTEM_TIME AS OF {}: no such column on the join's left side",
                time.join(".")
            ))
        })?;
        match field.metadata().get(TIME_ATTRIBUTE_KEY).map(String::as_str) {
            Some(PROCTIME) => {}
            Some(_) => return self.plan_event_time_temporal_join(join, kind, time),
            None => {
                return Err(Error::Plan(format!(
                    "FOR SYSTEM_TIME AS OF {} needs a time attribute; '{name}' is a plain column",
                    time.join(".")
                )));
            }
        }
        if !matches!(kind, JoinKind::Inner | JoinKind::Left) {
            return Err(Error::Plan(format!(
                "a temporal join supports only INNER JOIN and LEFT JOIN, not {}",
                join.join_type
            )));
        }
        let left = self.plan(&join.left)?;
        let first_right = self.nodes.len();
        self.temporal_side = true;
        let right = self.plan(&join.right);
        self.temporal_side = false;
        let right = right?;
        // The table side: every source bounded, read again after a restore.
        if (first_right..=right).any(|id| self.bounded_source(id) == Some(false)) {
            return Err(unsupported(
                "a processing-time temporal join against an unbounded table (Flink: only lookup sources)",
            ));
        }
        self.replay_sources(first_right..=right);
        let keys = self.join_keys(join)?;
        let both = join.left.schema().join(join.right.schema())?;
        let filter = without_as_of(join, time)
            .map(|f| self.physical(&f, &both))
            .transpose()?;
        let parallelism = self.nodes[left].parallelism;
        let table_edge = match parallelism == 1 && self.nodes[right].parallelism == 1 {
            true => Exchange::Forward,
            false => Exchange::Broadcast,
        };
        let schema = arrow_schema(&join.schema);
        let inputs = [self.nodes[left].schema.clone(), self.nodes[right].schema.clone()];
        let spec = NodeSpec::LookupJoin(Box::new(JoinData::encode(
            kind,
            &keys,
            &inputs,
            filter.as_ref(),
            &inputs,
        )?));
        self.push(
            spec,
            vec![(left, Exchange::Forward), (right, table_edge)],
            parallelism,
            schema,
        )
    }

    /// `JOIN versioned FOR SYSTEM_TIME AS OF s.rowtime`: an event-time
    /// temporal join against a table with a primary key (within the join
    /// keys) and a rowtime, as Flink requires.
    fn plan_event_time_temporal_join(
        &mut self,
        join: &datafusion_expr::logical_plan::Join,
        kind: JoinKind,
        time: &[String],
    ) -> Result<NodeId> {
        use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
        let mut primary_key = Vec::new();
        join.right.apply(|p| {
            if let LogicalPlan::TableScan(scan) = p
                && let Some(source) = scan.source.as_ref().downcast_ref::<CatalogTableSource>()
            {
                primary_key = source.table.primary_key.clone();
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        if primary_key.is_empty() {
            return Err(Error::Plan(
                "Temporal Table Join requires primary key in versioned table, but no primary key can be found".into(),
            ));
        }
        let joined_on: Vec<String> = join
            .on
            .iter()
            .filter_map(|(_, r)| match strip_alias(r) {
                Expr::Column(c) => Some(c.name.clone()),
                _ => None,
            })
            .collect();
        if !primary_key.iter().all(|k| joined_on.contains(k)) {
            return Err(Error::Plan(format!(
                "Temporal table's primary key [{}] must be included in the equivalence condition of Temporal Join",
                primary_key.join(", ")
            )));
        }
        let right_time = join
            .right
            .schema()
            .fields()
            .iter()
            .position(|f| f.metadata().get(TIME_ATTRIBUTE_KEY).map(String::as_str) == Some(ROWTIME))
            .ok_or_else(|| {
                Error::Plan(
                    "Event-Time Temporal Table Join requires both primary key and row time attribute in \
                     versioned table, but no row time attribute can be found"
                        .into(),
                )
            })?;
        let left_time = join
            .left
            .schema()
            .index_of_column(&crate::temporal::as_of_column(time))?;
        let left = self.plan(&join.left)?;
        if self.nodes[left].mode.is_updating() {
            return Err(unsupported("an event-time temporal join of an updating stream"));
        }
        self.temporal_side = true;
        let right = self.plan(&join.right);
        self.temporal_side = false;
        let right = right?;
        let keys = self.join_keys(join)?;
        let both = join.left.schema().join(join.right.schema())?;
        let filter = without_as_of(join, time)
            .map(|f| self.physical(&f, &both))
            .transpose()?;
        let edges = self.join_edges([left, right], &keys, self.parallelism, false);
        let schema = arrow_schema(&join.schema);
        let inputs = [
            weir_common::changelog::without_op(&self.nodes[left].schema),
            weir_common::changelog::without_op(&self.nodes[right].schema),
        ];
        let spec = NodeSpec::TemporalJoin(Box::new(IntervalJoinData {
            join: JoinData::encode(kind, &keys, &inputs, filter.as_ref(), &inputs)?,
            times: [left_time, right_time],
            lower: 0,
            upper: 0,
            proctime: false,
        }));
        self.push(spec, edges, self.parallelism, schema)
    }

    /// `x NOT IN (subquery)` as an anti join without keys whose condition
    /// also matches pairs whose equality is NULL (SQL's three-valued logic).
    fn plan_null_aware_anti_join(
        &mut self,
        join: &datafusion_expr::logical_plan::Join,
        left: NodeId,
        right: NodeId,
        both: &DFSchema,
    ) -> Result<NodeId> {
        use datafusion_expr::{BinaryExpr, Operator};
        let equal = join
            .on
            .iter()
            .map(|(l, r)| {
                Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(l.clone()),
                    Operator::Eq,
                    Box::new(r.clone()),
                ))
            })
            .reduce(|a, b| a.and(b))
            .ok_or_else(|| Error::Internal("a NOT IN join without keys".into()))?;
        let mut condition = equal.is_not_false();
        if let Some(filter) = &join.filter {
            condition = condition.and(filter.clone());
        }
        let filter = Some(self.physical(&condition, both)?);
        self.push_join(JoinKind::Anti, left, right, [vec![], vec![]], filter, join)
    }

    /// Adds a join node of `kind` between `left` and `right`.
    fn push_join(
        &mut self,
        kind: JoinKind,
        left: NodeId,
        right: NodeId,
        keys: [Vec<Arc<dyn PhysicalExpr>>; 2],
        filter: Option<Arc<dyn PhysicalExpr>>,
        join: &datafusion_expr::logical_plan::Join,
    ) -> Result<NodeId> {
        use datafusion_common::NullEquality;
        let updating = [
            self.nodes[left].mode.is_updating(),
            self.nodes[right].mode.is_updating(),
        ];
        let mut schema = without_time_attributes(&arrow_schema(&join.schema));
        let insert_only = matches!(kind, JoinKind::Inner | JoinKind::Semi) && !updating.contains(&true);
        if !insert_only {
            schema = weir_common::changelog::with_op(&schema);
        }
        let facts = self.side_facts([left, right]);
        let threshold = self.config.broadcast_threshold()?;
        if let Some(table_side) = broadcast::broadcast_side(kind, facts, threshold) {
            return self.push_broadcast_join(kind, [left, right], table_side, keys, filter, schema);
        }
        let keyless = keys[0].is_empty();
        let parallelism = if keyless { 1 } else { self.parallelism };
        let edges = self.join_edges([left, right], &keys, parallelism, keyless);
        let inputs = [
            weir_common::changelog::without_op(&self.nodes[left].schema),
            weir_common::changelog::without_op(&self.nodes[right].schema),
        ];
        let mut data = JoinData::encode(kind, &keys, &inputs, filter.as_ref(), &inputs)?;
        data.null_equal = join.null_equality == NullEquality::NullEqualsNull;
        data.unique_keys = [
            self.upsert_keys.get(&left).cloned(),
            self.upsert_keys.get(&right).cloned(),
        ];
        data.state_ttl_ms = self.config.state_ttl()?.map(|d| d.as_millis() as u64);
        self.push(NodeSpec::Join(Box::new(data)), edges, parallelism, schema)
    }

    /// `Filter(rank <= N)` right over `WindowAggr(ROW_NUMBER() OVER
    /// (PARTITION BY ... ORDER BY ...))`: a TopN, as Flink's planner
    /// recognises it. `None` when the filter is not over a window.
    fn plan_top_n(
        &mut self,
        filter: &datafusion_expr::logical_plan::Filter,
        rank_output: bool,
    ) -> Result<Option<NodeId>> {
        // The optimizer may leave a projection of columns between the two.
        let (window, middle) = match filter.input.as_ref() {
            LogicalPlan::Window(window) => (window, None),
            LogicalPlan::Projection(p) => match p.input.as_ref() {
                LogicalPlan::Window(window) if p.expr.iter().all(|e| matches!(e, Expr::Column(_))) => {
                    (window, Some(p))
                }
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        let [Expr::WindowFunction(function)] = window.window_expr.as_slice() else {
            return Ok(None);
        };
        let rank_output = rank_output || middle.is_some();
        let name = function.fun.name();
        // A filter over another window function (an OVER aggregate) is a
        // filter of its rows, as in Flink: planned as one.
        let Some(rank_type) = weir_plan::rank::RankType::of(name) else {
            return Ok(None);
        };
        let rank_column = window.schema.field(window.input.schema().fields().len()).name();
        let Some(((start, end), rest)) = rank::rank_range(&filter.predicate, rank_column) else {
            return Err(unsupported(
                "a filter on a rank that does not bound it above (rn <= N, rn < N, rn = N, rn BETWEEN a AND b)",
            ));
        };
        let params = &function.params;
        if params.order_by.is_empty() {
            return Err(Error::Plan("a TopN needs ORDER BY in its OVER clause".into()));
        }
        let data = match rank_output {
            true => arrow_schema(&window.schema),
            false => arrow_schema(window.input.schema()),
        };
        let mut top_n = self.push_top_n(
            &window.input,
            &params.partition_by,
            &params.order_by,
            (rank_type, start, end, rank_output),
            data.clone(),
        )?;
        // What the TopN (and the projection after it) outputs.
        let data = match rank_output {
            true => arrow_schema(filter.input.schema()),
            false => data,
        };
        if let Some(middle) = middle {
            let exprs = middle
                .expr
                .iter()
                .map(|e| self.physical(e, &window.schema))
                .collect::<Result<Vec<_>>>()?;
            top_n = self.add_calc(top_n, None, Some(exprs), data.clone())?;
        }
        // The filter's other conditions, on the TopN's rows.
        let Some(rest) = datafusion_expr::utils::conjunction(rest) else {
            return Ok(Some(top_n));
        };
        let rest = self.physical(&rest, filter.input.schema())?;
        Ok(Some(self.add_calc(top_n, Some(rest), None, data)?))
    }

    /// A window aggregation of aggregate functions over one window: an
    /// OVER aggregation, ordered by a time attribute, as Flink's.
    fn plan_over(&mut self, window: &datafusion_expr::logical_plan::Window) -> Result<NodeId> {
        use datafusion_expr::WindowFunctionDefinition;
        let in_schema = window.input.schema();
        let output = arrow_schema(&window.schema);
        let mut calls = Vec::new();
        for e in &window.window_expr {
            let Expr::WindowFunction(f) = strip_alias(e) else {
                return Err(Error::Internal(format!("not a window function: {e}")));
            };
            let WindowFunctionDefinition::AggregateUDF(function) = &f.fun else {
                return Err(unsupported(&format!(
                    "{}() OVER (...) other than in a TopN (a filter on its rank)",
                    f.fun.name().to_uppercase()
                )));
            };
            if f.params.filter.is_some() {
                return Err(unsupported("FILTER (WHERE ...) in an OVER aggregate"));
            }
            calls.push((e, function.clone(), &f.params));
        }
        let Some((_, _, first)) = calls.first() else {
            return Err(Error::Internal("a window aggregation without functions".into()));
        };
        let window_of = |p: &datafusion_expr::expr::WindowFunctionParams| {
            (p.partition_by.clone(), p.order_by.clone(), p.window_frame.clone())
        };
        if calls.iter().any(|(_, _, p)| window_of(p) != window_of(first)) {
            return Err(Error::Plan(
                "all aggregates of an OVER query must be computed over the same window, as in Flink".into(),
            ));
        }
        let time = over_order(&first.order_by, in_schema)?;
        let frame = over::frame_of(&first.window_frame)?;
        let input = self.plan(&window.input)?;
        let retract = self.nodes[input].mode.is_updating();
        if retract && (time.is_none() || !frame.bounded()) {
            return Err(unsupported(
                "an OVER aggregation over an updating input on processing time or with an unbounded frame \
                 (every later row would change with each update)",
            ));
        }
        let stream_schema = weir_common::changelog::without_op(&self.nodes[input].schema);
        let mut aggregates = Vec::new();
        for (i, (e, function, params)) in calls.iter().enumerate() {
            // COUNT(*) OVER (...) keeps its `*`: count a constant instead.
            #[allow(deprecated)]
            let star = |a: &Expr| matches!(a, Expr::Wildcard { .. });
            let args = params
                .args
                .iter()
                .map(|a| match star(a) {
                    true => self.physical(&datafusion_expr::lit(1i64), in_schema),
                    false => self.physical(a, in_schema),
                })
                .collect::<Result<Vec<_>>>()?;
            let name = output.field(in_schema.fields().len() + i).name().clone();
            let built = AggregateExprBuilder::new(function.clone(), args)
                .schema(stream_schema.clone())
                .alias(name)
                .human_display(e.human_display().to_string())
                .with_distinct(params.distinct)
                .build()?;
            aggregates.push(Arc::new(built));
        }
        let partition = first
            .partition_by
            .iter()
            .map(|e| self.physical(e, in_schema))
            .collect::<Result<Vec<_>>>()?;
        let keyless = partition.is_empty();
        let parallelism = if keyless { 1 } else { self.parallelism };
        let edge = join_edge(&self.nodes[input], &partition, parallelism, keyless);
        let spec = NodeSpec::OverAggregate(Box::new(OverData {
            partition: encode_exprs(&partition, &stream_schema)?,
            time,
            frame,
            retract,
            aggregates: (aggregates.iter())
                .map(|a| weir_plan::codec::encode_aggregate(a, &stream_schema))
                .collect::<Result<_>>()?,
        }));
        let schema = match retract {
            true => weir_common::changelog::with_op(&output),
            false => output.clone(),
        };
        self.push(spec, vec![(input, edge)], parallelism, schema)
    }

    /// A `Sort` with a fetch, or a `Limit` over a `Sort`: a global TopN;
    /// anything else of the two is refused.
    fn plan_sort_or_limit(&mut self, plan: &LogicalPlan) -> Result<NodeId> {
        match plan {
            LogicalPlan::Sort(sort) => match sort.fetch {
                Some(fetch) => self.plan_sort_limit(sort, 0, fetch),
                None => self.plan_temporal_sort(sort),
            },
            LogicalPlan::Limit(limit) => {
                use datafusion_expr::logical_plan::{FetchType, SkipType};
                let (
                    LogicalPlan::Sort(sort),
                    Ok(SkipType::Literal(skip)),
                    Ok(FetchType::Literal(Some(fetch))),
                ) = (
                    limit.input.as_ref(),
                    limit.get_skip_type(),
                    limit.get_fetch_type(),
                )
                else {
                    return Err(unsupported("LIMIT on a stream without ORDER BY"));
                };
                self.plan_sort_limit(sort, skip, fetch)
            }
            _ => Err(Error::Internal("not a sort or limit".into())),
        }
    }

    /// `ORDER BY` without `LIMIT`: on a stream only by a time attribute,
    /// ascending, first (Flink's `TemporalSort`).
    fn plan_temporal_sort(&mut self, sort: &datafusion_expr::logical_plan::Sort) -> Result<NodeId> {
        let in_schema = sort.input.schema();
        let refuse = || {
            Error::Plan(
                "Sort on a non-time-attribute field is not supported: ORDER BY on a stream must start with a \
                 time attribute, ascending (add LIMIT for a TopN)"
                    .into(),
            )
        };
        let first = sort.expr.first().ok_or_else(refuse)?;
        let Expr::Column(c) = &first.expr else {
            return Err(refuse());
        };
        let index = in_schema.index_of_column(c)?;
        let kind = in_schema.field(index).metadata().get(TIME_ATTRIBUTE_KEY).cloned();
        let time = match (first.asc, kind.as_deref()) {
            (true, Some(ROWTIME)) => Some(index),
            (true, Some(PROCTIME)) => None,
            _ => return Err(refuse()),
        };
        let then = self.sort_keys(&sort.expr[1..], in_schema)?;
        let input = self.plan(&sort.input)?;
        if self.nodes[input].mode.is_updating() {
            return Err(unsupported("ORDER BY on an updating stream"));
        }
        let schema = self.nodes[input].schema.clone();
        let edge = join_edge(&self.nodes[input], &[], 1, true);
        let spec = NodeSpec::temporal_sort(time, &then, &schema)?;
        self.push(spec, vec![(input, edge)], 1, schema)
    }

    /// `ORDER BY ... LIMIT n [OFFSET m]` (a `Sort` with a fetch, under a
    /// `Limit` with a skip or not): a global TopN without the rank, as Flink.
    fn plan_sort_limit(
        &mut self,
        sort: &datafusion_expr::logical_plan::Sort,
        skip: usize,
        fetch: usize,
    ) -> Result<NodeId> {
        if fetch == 0 {
            return Err(unsupported("LIMIT 0 on a stream"));
        }
        use weir_plan::rank::RankType;
        let range = (RankType::RowNumber, skip as u64 + 1, (skip + fetch) as u64, false);
        self.push_top_n(
            &sort.input,
            &[],
            &sort.expr,
            range,
            arrow_schema(sort.input.schema()),
        )
    }

    /// A TopN of `input` (`data`: its output columns without the op column).
    fn push_top_n(
        &mut self,
        input_plan: &LogicalPlan,
        partition_by: &[Expr],
        order_by: &[datafusion_expr::SortExpr],
        (rank_type, start, end, rank_output): (weir_plan::rank::RankType, u64, u64, bool),
        data: SchemaRef,
    ) -> Result<NodeId> {
        let in_schema = input_plan.schema();
        let input = self.plan(input_plan)?;
        let retract = self.nodes[input].mode.is_updating();
        let partition = partition_by
            .iter()
            .map(|e| self.physical(e, in_schema))
            .collect::<Result<Vec<_>>>()?;
        let order = self.sort_keys(order_by, in_schema)?;
        // One processing-time order key: Flink's deduplication, by arrival.
        let arrival = match order_by {
            [only] if is_proctime_column(&only.expr, in_schema) => Some(!only.asc),
            _ => None,
        };
        if arrival.is_some() && retract {
            return Err(unsupported(
                "a deduplication on processing time over an updating input (Flink's Deduplicate takes inserts only)",
            ));
        }
        // PARTITION BY window_start, window_end of event-time windows over
        // insert-only input: a window TopN.
        let window_end = crate::window_tvf::window_partition_end(input_plan, partition_by)
            .filter(|(_, proctime)| !proctime && !retract && arrival.is_none())
            .map(|(column, _)| column);
        let stream_schema = weir_common::changelog::without_op(&self.nodes[input].schema);
        let spec = TopNData {
            partition: encode_exprs(&partition, &stream_schema)?,
            order: weir_plan::codec::encode_sort_keys(&order, &stream_schema)?,
            rank_type,
            start,
            end,
            rank_output,
            arrival,
            retract,
            window_end,
            // A window TopN's windows free its state.
            state_ttl_ms: match window_end {
                Some(_) => None,
                None => self.config.state_ttl()?.map(|d| d.as_millis() as u64),
            },
        };
        // The first rows by arrival, or a window TopN's final ranks.
        let insert_only = arrival == Some(false) || window_end.is_some();
        let schema = match insert_only {
            true => data,
            false => weir_common::changelog::with_op(&data),
        };
        let keyless = partition.is_empty();
        let parallelism = if keyless { 1 } else { self.parallelism };
        let edge = join_edge(&self.nodes[input], &partition, parallelism, keyless);
        self.push(
            NodeSpec::TopN(Box::new(spec)),
            vec![(input, edge)],
            parallelism,
            schema,
        )
    }

    /// `ORDER BY` keys as physical expressions with their sort options.
    fn sort_keys(
        &self,
        keys: &[datafusion_expr::SortExpr],
        schema: &DFSchema,
    ) -> Result<Vec<(Arc<dyn PhysicalExpr>, arrow::compute::SortOptions)>> {
        keys.iter()
            .map(|s| {
                let options = arrow::compute::SortOptions {
                    descending: !s.asc,
                    nulls_first: s.nulls_first,
                };
                Ok((self.physical(&s.expr, schema)?, options))
            })
            .collect()
    }

    /// Each side's equi-join key expressions, over that side's columns.
    fn join_keys(
        &self,
        join: &datafusion_expr::logical_plan::Join,
    ) -> Result<[Vec<Arc<dyn PhysicalExpr>>; 2]> {
        let side = |pick: fn(&(Expr, Expr)) -> &Expr, schema: &DFSchema| {
            join.on
                .iter()
                .map(|pair| self.physical(pick(pair), schema))
                .collect::<Result<Vec<_>>>()
        };
        Ok([
            side(|(l, _)| l, join.left.schema())?,
            side(|(_, r)| r, join.right.schema())?,
        ])
    }

    /// Both inputs of a two-input join, each hashed on its keys (see [`join_edge`]).
    fn join_edges(
        &self,
        sides: [NodeId; 2],
        keys: &[Vec<Arc<dyn PhysicalExpr>>; 2],
        parallelism: usize,
        keyless: bool,
    ) -> Vec<(NodeId, Exchange)> {
        (0..2)
            .map(|s| {
                (
                    sides[s],
                    join_edge(&self.nodes[sides[s]], &keys[s], parallelism, keyless),
                )
            })
            .collect()
    }

    /// The nodes `node` reads from, itself included.
    fn ancestors(&self, node: NodeId) -> std::collections::BTreeSet<NodeId> {
        let mut seen = std::collections::BTreeSet::new();
        let mut stack = vec![node];
        while let Some(n) = stack.pop() {
            if seen.insert(n) {
                stack.extend(self.nodes[n].inputs.iter().map(|(i, _)| *i));
            }
        }
        seen
    }

    /// What the broadcast decision needs of each side of a join: whether it
    /// updates, and its sources' size when it could be read again after a
    /// restore (bounded sources, no node keeping rows, none shared with the
    /// other side).
    fn side_facts(&self, sides: [NodeId; 2]) -> [broadcast::SideFacts; 2] {
        let ancestors = sides.map(|s| self.ancestors(s));
        let shared = !ancestors[0].is_disjoint(&ancestors[1]);
        [0, 1].map(|side| {
            let mut bytes = Some(0u64).filter(|_| !shared);
            for id in &ancestors[side] {
                let node = &self.nodes[*id];
                match (&node.spec, &node.source) {
                    (NodeSpec::Source(_), Some(source)) if source.bounded => {
                        bytes = bytes.zip(source.estimated_bytes).map(|(a, b)| a + b);
                    }
                    (spec, _) if spec.keeps_no_rows() => {}
                    _ => bytes = None,
                }
            }
            broadcast::SideFacts {
                updating: self.nodes[sides[side]].mode.is_updating(),
                replayable_bytes: bytes,
            }
        })
    }

    /// A regular join with side `table_side` broadcast to every subtask (its
    /// sources read again after a restore) and the other side forwarded.
    fn push_broadcast_join(
        &mut self,
        kind: JoinKind,
        sides: [NodeId; 2],
        table_side: usize,
        keys: [Vec<Arc<dyn PhysicalExpr>>; 2],
        filter: Option<Arc<dyn PhysicalExpr>>,
        schema: SchemaRef,
    ) -> Result<NodeId> {
        let (stream, table) = (sides[1 - table_side], sides[table_side]);
        self.replay_sources(self.ancestors(table));
        let parallelism = self.nodes[stream].parallelism;
        let table_edge = match parallelism == 1 && self.nodes[table].parallelism == 1 {
            true => Exchange::Forward,
            false => Exchange::Broadcast,
        };
        let [left_keys, right_keys] = keys;
        let keys = match table_side {
            0 => [right_keys, left_keys],
            _ => [left_keys, right_keys],
        };
        let inputs = [
            self.nodes[stream].schema.clone(),
            self.nodes[table].schema.clone(),
        ];
        // The condition is over the SQL join's sides, the table on its side.
        let sql_inputs = match table_side {
            0 => [inputs[1].clone(), inputs[0].clone()],
            _ => inputs.clone(),
        };
        let join = Box::new(JoinData::encode(
            kind,
            &keys,
            &inputs,
            filter.as_ref(),
            &sql_inputs,
        )?);
        self.push(
            NodeSpec::BroadcastJoin { join, table_side },
            vec![(stream, Exchange::Forward), (table, table_edge)],
            parallelism,
            schema,
        )
    }

    fn plan_scan(&mut self, scan: &TableScan) -> Result<NodeId> {
        let source = scan
            .source
            .as_ref()
            .downcast_ref::<CatalogTableSource>()
            .ok_or_else(|| Error::Internal(format!("unknown table source for {}", scan.table_name)))?;
        let table = source.table.clone();
        let connector_table = table.connector_table();
        let full = source.schema.clone();
        let projection: Vec<usize> = scan
            .projection
            .clone()
            .unwrap_or_else(|| (0..full.fields().len()).collect());
        let parallelism = match connector_table.parse_option::<usize>("scan.parallelism")? {
            Some(0) => return Err(Error::sql("'scan.parallelism' must be positive")),
            Some(p) => p,
            None => self.parallelism,
        };

        // Which full-schema columns must be computed: the projected ones, and the
        // rowtime column and watermark inputs (the watermark is always generated).
        let computed: Vec<(usize, &crate::catalog::CatalogColumn)> = table
            .columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.computed.is_some())
            .collect();
        let computed_exprs = if computed.is_empty() {
            vec![]
        } else {
            let exprs = computed
                .iter()
                .map(|(_, c)| c.computed.clone().expect("computed"))
                .collect();
            self.binder.bind_table_exprs(&table.name, true, exprs)?.0
        };
        let watermark = match &table.watermark {
            Some(w) => {
                let (mut bound, schema) =
                    self.binder
                        .bind_table_exprs(&table.name, false, vec![w.expr.clone()])?;
                Some((w, bound.remove(0), schema))
            }
            None => None,
        };
        let mut needed: BTreeSet<usize> = projection.iter().copied().collect();
        // An upsert source reads its key, whatever the query selects.
        for name in self.connectors.always_read(&connector_table) {
            needed.insert(full.index_of(&name)?);
        }
        if let Some((w, expr, _)) = &watermark {
            needed.insert(full.index_of(&w.column)?);
            for c in expr.column_refs() {
                needed.insert(full.index_of(&c.name)?);
            }
        }
        let (physical_projection, bound_physical) =
            read_columns(&connector_table, &full, &needed, &computed, &computed_exprs);
        let source_schema = Arc::new(Schema::new(bound_physical.clone()));
        let facts = self.connectors.source(
            &connector_table,
            &physical_projection,
            source_schema.clone(),
            self.config,
        )?;
        let upsert_key = facts.upsert_key.clone();
        let node_schema = match upsert_key {
            Some(_) => weir_common::changelog::with_op(&source_schema),
            None => source_schema.clone(),
        };
        let spec = SourceSpec::Connector {
            table: TableData::of(&connector_table)?,
            projection: physical_projection,
            schema: SchemaData::encode(&source_schema)?,
        };
        let mut node = self.push_source(spec, facts, parallelism, node_schema)?;
        if let Some(key) = upsert_key {
            node = self.push_normalize(node, key)?;
        }

        // The needed full columns in table order: physical ones by reference,
        // computed ones by their expressions.
        let needed: Vec<usize> = needed.into_iter().collect();
        let is_plain = needed.iter().all(|i| !computed.iter().any(|(ci, _)| ci == i));
        let table_ref = TableReference::bare(table.name.as_str());
        let calc_schema = Arc::new(Schema::new(
            needed.iter().map(|i| full.field(*i).clone()).collect::<Vec<_>>(),
        ));
        if !is_plain {
            let physical_df = DFSchema::try_from_qualified_schema(
                TableReference::partial(PHYSICAL_SCHEMA, table.name.as_str()),
                &source_schema,
            )?;
            let exprs = needed
                .iter()
                .map(|i| match computed.iter().position(|(ci, _)| ci == i) {
                    Some(k) => self.physical(&computed_exprs[k], &physical_df),
                    None => {
                        let name = full.field(*i).name();
                        let index = source_schema.index_of(name)?;
                        Ok(Arc::new(ColumnExpr::new(name, index)) as Arc<dyn PhysicalExpr>)
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            node = self.add_calc(node, None, Some(exprs), calc_schema.clone())?;
        }
        if let Some((w, expr, _)) = &watermark {
            let calc_df = DFSchema::try_from_qualified_schema(table_ref.clone(), &calc_schema)?;
            let physical = self.physical(expr, &calc_df)?;
            let assigner = NodeSpec::Watermark {
                rowtime: w.column.clone(),
                rowtime_index: calc_schema.index_of(&w.column)?,
                expr: encode_expr(&physical, &calc_schema)?,
                text: w.text.clone(),
                fixed_delay: fixed_watermark_delay(expr, &w.column),
                idle_timeout: connector_table
                    .idle_timeout(self.config)?
                    .map(|d| d.as_millis() as i64),
            };
            node = self.push(
                assigner,
                vec![(node, Exchange::Forward)],
                parallelism,
                calc_schema.clone(),
            )?;
        }
        if needed != projection {
            let exprs = projection
                .iter()
                .map(|i| {
                    let name = full.field(*i).name();
                    let index = needed
                        .iter()
                        .position(|n| n == i)
                        .expect("projected column is needed");
                    Arc::new(ColumnExpr::new(name, index)) as Arc<dyn PhysicalExpr>
                })
                .collect();
            node = self.add_calc(node, None, Some(exprs), arrow_schema(&scan.projected_schema))?;
        }
        Ok(node)
    }

    /// After an upsert source: its changes hashed by key and normalized into
    /// a full changelog (Flink's `ChangelogNormalize`), whose upsert key is
    /// the source's.
    fn push_normalize(&mut self, source: NodeId, key: Vec<usize>) -> Result<NodeId> {
        let schema = self.nodes[source].schema.clone();
        let hash = Exchange::Hash(
            key.iter()
                .map(|i| Arc::new(ColumnExpr::new(schema.field(*i).name(), *i)) as Arc<dyn PhysicalExpr>)
                .collect(),
        );
        let normalize = NodeSpec::ChangelogNormalize { key: key.clone() };
        let parallelism = self.nodes[source].parallelism;
        let id = self.push(normalize, vec![(source, hash)], parallelism, schema)?;
        self.upsert_keys.insert(id, key);
        Ok(id)
    }

    fn plan_window_assign(&mut self, node: &WindowTvfNode) -> Result<NodeId> {
        let TvfWindow::Sliced(window) = node.window else {
            return Err(unsupported(
                "a SESSION window table function without a window aggregation",
            ));
        };
        let input = self.plan(&node.input)?;
        let time_index = node.input.schema().index_of_column(&node.time_column)?;
        let time_type = node.input.schema().field(time_index).data_type().clone();
        let processing_time = is_proctime(node.input.schema().field(time_index));
        let assign = NodeSpec::WindowAssign {
            window: window.into(),
            shift: (&self.shift_for(&time_type)?).into(),
            time_index,
            time_name: node.time_column.name.clone(),
            processing_time,
        };
        let parallelism = self.nodes[input].parallelism;
        self.push(
            assign,
            vec![(input, Exchange::Forward)],
            parallelism,
            arrow_schema(&node.schema),
        )
    }

    fn shift_for(&self, time_type: &DataType) -> Result<TimeShift> {
        if is_ltz(time_type) {
            TimeShift::for_zone(self.binder.zone())
        } else {
            Ok(TimeShift::Utc)
        }
    }

    /// Plans the input of an aggregation when it is a window TVF, possibly under
    /// projections, filters and aliases; `None` when it is not windowed.
    fn plan_windowed_input(&mut self, plan: &LogicalPlan) -> Result<Option<WindowedInput>> {
        match plan {
            LogicalPlan::Extension(extension) => {
                let Some(node) = extension.node.as_any().downcast_ref::<WindowTvfNode>() else {
                    return Ok(None);
                };
                let stream = self.plan(&node.input)?;
                let input_schema = node.input.schema();
                let width = input_schema.fields().len();
                let mut origins: Vec<Origin> = (0..width).map(Origin::Stream).collect();
                origins.extend([
                    Origin::Window(WindowProperty::Start),
                    Origin::Window(WindowProperty::End),
                    Origin::Window(WindowProperty::Time),
                ]);
                let time_index = input_schema.index_of_column(&node.time_column)?;
                let time_type = input_schema.field(time_index).data_type().clone();
                Ok(Some(WindowedInput {
                    stream,
                    schema: input_schema.clone(),
                    origins,
                    time_index,
                    time_name: node.time_column.name.clone(),
                    window: node.window,
                    processing_time: is_proctime(input_schema.field(time_index)),
                    partition_by: node
                        .partition_by
                        .as_ref()
                        .map(|keys| keys.iter().map(|k| k.name.clone()).collect()),
                    shift: self.shift_for(&time_type)?,
                }))
            }
            LogicalPlan::SubqueryAlias(alias) => {
                let Some(mut inner) = self.plan_windowed_input(&alias.input)? else {
                    return Ok(None);
                };
                let arrow = arrow_schema(&inner.schema);
                inner.schema = Arc::new(DFSchema::try_from_qualified_schema(alias.alias.clone(), &arrow)?);
                Ok(Some(inner))
            }
            LogicalPlan::Filter(filter) => {
                let Some(inner) = self.plan_windowed_input(&filter.input)? else {
                    return Ok(None);
                };
                check_no_window_refs(&filter.predicate, filter.input.schema(), &inner.origins)?;
                let predicate = self.physical(&filter.predicate, &inner.schema)?;
                let schema = arrow_schema(&inner.schema);
                let stream = self.add_calc(inner.stream, Some(predicate), None, schema)?;
                Ok(Some(WindowedInput { stream, ..inner }))
            }
            LogicalPlan::Projection(projection) => {
                let Some(inner) = self.plan_windowed_input(&projection.input)? else {
                    return Ok(None);
                };
                let input_schema = projection.input.schema();
                let mut exprs: Vec<Arc<dyn PhysicalExpr>> = Vec::new();
                let mut fields: Vec<(Option<TableReference>, Arc<Field>)> = Vec::new();
                let mut origins = Vec::new();
                let mut time_index = None;
                for (i, e) in projection.expr.iter().enumerate() {
                    if let Expr::Column(c) = strip_alias(e) {
                        let index = input_schema.index_of_column(c)?;
                        match inner.origins[index] {
                            Origin::Window(property) => {
                                origins.push(Origin::Window(property));
                                continue;
                            }
                            Origin::Stream(s) if s == inner.time_index && time_index.is_none() => {
                                time_index = Some(exprs.len());
                            }
                            Origin::Stream(_) => {}
                        }
                    } else {
                        check_no_window_refs(e, input_schema, &inner.origins)?;
                    }
                    origins.push(Origin::Stream(exprs.len()));
                    exprs.push(self.physical(e, &inner.schema)?);
                    let (qualifier, field) = projection.schema.qualified_field(i);
                    fields.push((qualifier.cloned(), field.clone()));
                }
                let time_index = match time_index {
                    Some(t) => t,
                    None => {
                        // Keep the time attribute for the window: under its own name
                        // when that is free, else under a hidden one.
                        let (qualifier, field) = inner.schema.qualified_field(inner.time_index);
                        let taken = fields.iter().any(|(_, f)| f.name() == field.name());
                        let (qualifier, field) = if taken {
                            (
                                None,
                                Arc::new(field.as_ref().clone().with_name("__weir_window_time_attribute")),
                            )
                        } else {
                            (qualifier.cloned(), field.clone())
                        };
                        exprs.push(Arc::new(ColumnExpr::new(field.name(), inner.time_index)));
                        fields.push((qualifier, field));
                        exprs.len() - 1
                    }
                };
                let schema = Arc::new(DFSchema::new_with_metadata(fields, Default::default())?);
                // A projection that keeps the stream's columns as they are needs no Calc.
                let identity = exprs.len() == inner.schema.fields().len()
                    && exprs.iter().enumerate().all(|(i, e)| {
                        e.as_ref()
                            .downcast_ref::<ColumnExpr>()
                            .is_some_and(|c| c.index() == i)
                    });
                let stream = if identity {
                    inner.stream
                } else {
                    self.add_calc(inner.stream, None, Some(exprs), arrow_schema(&schema))?
                };
                Ok(Some(WindowedInput {
                    stream,
                    schema,
                    origins,
                    time_index,
                    ..inner
                }))
            }
            _ => Ok(None),
        }
    }

    fn plan_aggregate(&mut self, aggregate: &Aggregate) -> Result<NodeId> {
        if let LogicalPlan::Extension(extension) = aggregate.input.as_ref()
            && let Some(node) = extension.node.as_any().downcast_ref::<CountWindowNode>()
        {
            return self.plan_count_window(aggregate, node);
        }
        let Some(input) = self.plan_windowed_input(&aggregate.input)? else {
            return self.plan_group_aggregate(aggregate);
        };
        let output = arrow_schema(&aggregate.schema);
        let grouping = self.window_grouping(aggregate, &input, &output)?;
        let stream_schema = arrow_schema(&input.schema);
        for e in &aggregate.aggr_expr {
            check_no_window_refs(e, aggregate.input.schema(), &input.origins)?;
        }
        let (aggregates, filters) = self.aggregate_calls(aggregate, &input.schema, &stream_schema)?;
        let mut data = encode_aggregation(
            &stream_schema,
            &grouping.keys,
            &Schema::new(grouping.key_fields.clone()),
            &stream_schema,
            &aggregates,
            &filters,
            &grouping.columns,
            &input.shift,
        )?;
        data.time_name = input.time_name.clone();
        data.time_index = input.time_index;
        data.processing_time = input.processing_time;
        let parallelism = if grouping.keys.is_empty() {
            1
        } else {
            self.parallelism
        };
        match input.window {
            TvfWindow::Session { gap } => {
                self.check_session_partition(aggregate, &input, &grouping.columns)?;
                data.gap = Some(gap);
                let exchange = self.aggregate_exchange(input.stream, parallelism, &grouping.keys);
                let spec = NodeSpec::SessionAggregate(Box::new(data));
                self.push(spec, vec![(input.stream, exchange)], parallelism, output)
            }
            TvfWindow::Sliced(window) => {
                data.window = Some(window.into());
                let states = (aggregates.iter())
                    .map(|a| {
                        Ok(a.state_fields()?
                            .iter()
                            .map(|f| f.as_ref().clone())
                            .collect::<Vec<_>>())
                    })
                    .collect::<Result<Vec<_>>>()?
                    .concat();
                self.push_window_aggregate(&input, data, &grouping, states, output)
            }
        }
    }

    /// The grouping of a window aggregation: each GROUP BY column a window
    /// column or a key, the keys as expressions over the stream.
    fn window_grouping(
        &self,
        aggregate: &Aggregate,
        input: &WindowedInput,
        output: &SchemaRef,
    ) -> Result<Grouping> {
        let input_schema = aggregate.input.schema();
        let mut grouping = Grouping::default();
        for (i, e) in aggregate.group_expr.iter().enumerate() {
            if matches!(e, Expr::GroupingSet(_)) {
                return Err(unsupported("GROUPING SETS, CUBE and ROLLUP"));
            }
            if let Expr::Column(c) = strip_alias(e)
                && let Origin::Window(property) = input.origins[input_schema.index_of_column(c)?]
            {
                grouping.columns.push(GroupColumn::Window(property));
                continue;
            }
            check_no_window_refs(e, input_schema, &input.origins)?;
            let field = output.field(i).clone();
            check_key_type(field.data_type())?;
            grouping.columns.push(GroupColumn::Key(grouping.keys.len()));
            grouping.keys.push(self.physical(e, &input.schema)?);
            grouping.key_fields.push(field);
        }
        if !grouping
            .columns
            .iter()
            .any(|g| matches!(g, GroupColumn::Window(_)))
        {
            return Err(Error::Plan(
                "a window aggregation must group by window_start and window_end".into(),
            ));
        }
        Ok(grouping)
    }

    /// A SESSION window with PARTITION BY is grouped by exactly its
    /// partition columns (and the window).
    fn check_session_partition(
        &self,
        aggregate: &Aggregate,
        input: &WindowedInput,
        columns: &[GroupColumn],
    ) -> Result<()> {
        let Some(partition) = &input.partition_by else {
            return Ok(());
        };
        let grouped: Vec<String> = aggregate
            .group_expr
            .iter()
            .zip(columns)
            .filter(|(_, g)| matches!(g, GroupColumn::Key(_)))
            .map(|(e, _)| match strip_alias(e) {
                Expr::Column(c) => c.name.clone(),
                other => other.to_string(),
            })
            .collect();
        let (mut a, mut b) = (grouped.clone(), partition.clone());
        a.sort();
        b.sort();
        if a != b {
            return Err(Error::Plan(format!(
                "a SESSION window aggregation must group by exactly its PARTITION BY columns \
                 ({}), got {}",
                partition.join(", "),
                grouped.join(", ")
            )));
        }
        Ok(())
    }

    /// How an aggregation at `parallelism` reads `input`: forward when both
    /// are one subtask, all to one without keys, else hashed by `keys`.
    fn aggregate_exchange(
        &self,
        input: NodeId,
        parallelism: usize,
        keys: &[Arc<dyn PhysicalExpr>],
    ) -> Exchange {
        if parallelism == 1 && self.nodes[input].parallelism == 1 {
            Exchange::Forward
        } else if keys.is_empty() {
            Exchange::Single
        } else {
            Exchange::Hash(keys.to_vec())
        }
    }

    /// Adds a window aggregation of TUMBLE, HOP or CUMULATE windows
    /// (`data`, its single phase): in one phase after the exchange, or in
    /// a local phase before it (emitting `__slice`, the keys and each
    /// aggregate's partial `states`) and a global phase after it.
    fn push_window_aggregate(
        &mut self,
        input: &WindowedInput,
        mut data: AggregationData,
        grouping: &Grouping,
        states: Vec<Field>,
        output: SchemaRef,
    ) -> Result<NodeId> {
        let (keys, key_fields) = (&grouping.keys, &grouping.key_fields);
        let parallelism = if keys.is_empty() { 1 } else { self.parallelism };
        let input_parallelism = self.nodes[input.stream].parallelism;
        // Processing-time windows fire by each operator's own clock, so partial
        // results could reach the global phase after its window fired: one phase.
        let two_phase = !input.processing_time && self.two_phase(parallelism, input_parallelism)?;
        if !two_phase {
            data.phase = Some(phase_name(Phase::Single));
            let exchange = self.aggregate_exchange(input.stream, parallelism, keys);
            let spec = NodeSpec::WindowAggregate(Box::new(data));
            return self.push(spec, vec![(input.stream, exchange)], parallelism, output);
        }
        let mut local_fields = vec![Field::new("__slice", DataType::Int64, false)];
        local_fields.extend(key_fields.iter().cloned());
        local_fields.extend(states);
        let local_schema = Arc::new(Schema::new(local_fields));
        let mut local = data.clone();
        local.phase = Some(phase_name(Phase::Local));
        let local_node = self.push(
            NodeSpec::WindowAggregate(Box::new(local)),
            vec![(input.stream, Exchange::Forward)],
            input_parallelism,
            local_schema.clone(),
        )?;
        // The global phase: keys are the local output's columns after `__slice`.
        let global_keys = key_columns(key_fields, 1);
        data.phase = Some(phase_name(Phase::Global));
        data.keys = encode_exprs(&global_keys, &local_schema)?;
        data.filters = vec![None; data.aggregates.len()];
        let exchange = match global_keys.is_empty() {
            true => Exchange::Single,
            false => Exchange::Hash(global_keys),
        };
        let spec = NodeSpec::WindowAggregate(Box::new(data));
        self.push(spec, vec![(local_node, exchange)], parallelism, output)
    }

    /// Whether an aggregation at `parallelism` over an input at
    /// `input_parallelism` runs in two phases, by `table.optimizer.agg-phase-strategy`.
    fn two_phase(&self, parallelism: usize, input_parallelism: usize) -> Result<bool> {
        Ok(match self.config.agg_phase_strategy()? {
            AggPhaseStrategy::Auto => !(parallelism == 1 && input_parallelism == 1),
            AggPhaseStrategy::TwoPhase => true,
            AggPhaseStrategy::OnePhase => false,
        })
    }
}

/// The GROUP BY of a window aggregation.
#[derive(Default)]
struct Grouping {
    /// Each output grouping column, in GROUP BY order.
    columns: Vec<GroupColumn>,
    /// The keys (the columns that are not window columns).
    keys: Vec<Arc<dyn PhysicalExpr>>,
    /// Their output fields.
    key_fields: Vec<Field>,
}

/// Column references to `fields`, which start at column `first`.
fn key_columns(fields: &[Field], first: usize) -> Vec<Arc<dyn PhysicalExpr>> {
    (fields.iter().enumerate())
        .map(|(i, f)| Arc::new(ColumnExpr::new(f.name(), i + first)) as Arc<dyn PhysicalExpr>)
        .collect()
}

impl Planner<'_> {
    /// The aggregate calls of `aggregate` (with their filters), over a
    /// stream of `stream_schema` whose logical schema is `schema`.
    fn aggregate_calls(
        &self,
        aggregate: &Aggregate,
        schema: &DFSchema,
        stream_schema: &SchemaRef,
    ) -> Result<AggregateCalls> {
        let output = arrow_schema(&aggregate.schema);
        let mut aggregates = Vec::new();
        let mut filters = Vec::new();
        for (i, e) in aggregate.aggr_expr.iter().enumerate() {
            let Expr::AggregateFunction(AggregateFunction { func, params }) = strip_alias(e) else {
                return Err(Error::Internal(format!("not an aggregate: {e}")));
            };
            let args = params
                .args
                .iter()
                .map(|a| self.physical(a, schema))
                .collect::<Result<Vec<_>>>()?;
            let order_by = create_physical_sort_exprs(
                &params.order_by,
                schema,
                &self.props,
                &PhysicalPlanningContext::default(),
            )?;
            let name = output.field(aggregate.group_expr.len() + i).name().clone();
            let built = AggregateExprBuilder::new(func.clone(), args)
                .schema(stream_schema.clone())
                .alias(name)
                .human_display(e.human_display().to_string())
                .with_distinct(params.distinct)
                .with_ignore_nulls(
                    params.null_treatment == Some(datafusion_expr::expr::NullTreatment::IgnoreNulls),
                )
                .order_by(order_by)
                .build()?;
            aggregates.push(Arc::new(built));
            filters.push(match &params.filter {
                Some(f) => Some(self.physical(f, schema)?),
                None => None,
            });
        }
        Ok((aggregates, filters))
    }

    /// An aggregation over row-count windows (the Table API's): keyed by its
    /// grouping keys, each key's rows in arrival order.
    fn plan_count_window(&mut self, aggregate: &Aggregate, node: &CountWindowNode) -> Result<NodeId> {
        let input = self.plan(&node.input)?;
        let schema = node.input.schema();
        let output = arrow_schema(&aggregate.schema);
        let (keys, key_schema) = self.grouping_keys(aggregate, schema, &output)?;
        let stream_schema = arrow_schema(schema);
        if self.nodes[input].mode.is_updating() {
            return Err(Error::Plan(
                "a row-count window aggregation takes insert-only rows, but its input updates".into(),
            ));
        }
        let (aggregates, filters) = self.aggregate_calls(aggregate, schema, &stream_schema)?;
        let parallelism = if keys.is_empty() { 1 } else { self.parallelism };
        let exchange = self.aggregate_exchange(input, parallelism, &keys);
        let group_columns: Vec<GroupColumn> = (0..keys.len()).map(GroupColumn::Key).collect();
        let mut data = encode_aggregation(
            &stream_schema,
            &keys,
            &key_schema,
            &stream_schema,
            &aggregates,
            &filters,
            &group_columns,
            &TimeShift::Utc,
        )?;
        data.time_name = node.time_column.name.clone();
        data.rows = Some(CountWindowData {
            size: node.size,
            slide: node.slide,
        });
        let spec = NodeSpec::CountWindowAggregate(Box::new(data));
        self.push(spec, vec![(input, exchange)], parallelism, output)
    }

    /// The grouping keys of an aggregation over `schema` (physical, and
    /// the schema of their fields of `output`).
    fn grouping_keys(
        &self,
        aggregate: &Aggregate,
        schema: &DFSchema,
        output: &SchemaRef,
    ) -> Result<(Vec<Arc<dyn PhysicalExpr>>, SchemaRef)> {
        let (mut keys, mut key_fields) = (Vec::new(), Vec::new());
        for (i, e) in aggregate.group_expr.iter().enumerate() {
            if matches!(e, Expr::GroupingSet(_)) {
                return Err(unsupported("GROUPING SETS, CUBE and ROLLUP"));
            }
            let field = output.field(i).clone();
            check_key_type(field.data_type())?;
            keys.push(self.physical(e, schema)?);
            key_fields.push(field);
        }
        Ok((keys, Arc::new(Schema::new(key_fields))))
    }

    /// A GROUP BY without a window: an updating aggregation.
    fn plan_group_aggregate(&mut self, aggregate: &Aggregate) -> Result<NodeId> {
        let input = self.plan(&aggregate.input)?;
        let schema = aggregate.input.schema();
        let output = arrow_schema(&aggregate.schema);
        let (keys, key_schema) = self.grouping_keys(aggregate, schema, &output)?;
        let stream_schema = self.nodes[input].schema.clone();
        let (aggregates, filters) = self.aggregate_calls(aggregate, schema, &stream_schema)?;
        let group = GroupParts {
            keys,
            key_schema,
            aggregates,
            filters,
            output: weir_common::changelog::with_op(&output),
        };
        self.push_group_aggregate(input, group)
    }

    /// `SELECT DISTINCT` (and `UNION`): a GROUP BY of every column.
    fn plan_distinct(&mut self, input: &LogicalPlan, plan: &LogicalPlan) -> Result<NodeId> {
        let node = self.plan(input)?;
        let output = arrow_schema(plan.schema());
        for field in output.fields() {
            check_key_type(field.data_type())?;
        }
        let keys = key_columns(
            &output
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect::<Vec<_>>(),
            0,
        );
        let group = GroupParts {
            keys,
            key_schema: output.clone(),
            aggregates: vec![],
            filters: vec![],
            output: weir_common::changelog::with_op(&output),
        };
        self.push_group_aggregate(node, group)
    }

    /// Adds a non-windowed aggregation after `input`: in two phases around
    /// the exchange when the strategy asks for it and every aggregate's
    /// partial states merge, else in one after it.
    fn push_group_aggregate(&mut self, input: NodeId, group: GroupParts) -> Result<NodeId> {
        let keyless = group.keys.is_empty();
        let parallelism = if keyless { 1 } else { self.parallelism };
        let input_parallelism = self.nodes[input].parallelism;
        let input_schema = self.nodes[input].schema.clone();
        let retracting = weir_common::changelog::has_op(&input_schema);
        // The accumulators tell which aggregates weir runs without a window
        // (an error names one it does not) and whether partial states merge.
        let accumulators = (group.aggregates.iter())
            .map(|a| weir_functions::accumulator::accumulator_for(a, &input_schema, retracting))
            .collect::<Result<Vec<_>>>()?;
        let two_phase =
            accumulators.iter().all(|a| a.mergeable()) && self.two_phase(parallelism, input_parallelism)?;
        let group_columns: Vec<GroupColumn> = (0..group.keys.len()).map(GroupColumn::Key).collect();
        let mut data = encode_aggregation(
            &input_schema,
            &group.keys,
            &group.key_schema,
            &input_schema,
            &group.aggregates,
            &group.filters,
            &group_columns,
            &TimeShift::Utc,
        )?;
        let key_count = group.keys.len();
        if !two_phase {
            data.phase = Some(phase_name(Phase::Single));
            data.state_ttl_ms = self.config.state_ttl()?.map(|d| d.as_millis() as u64);
            let edge = self.aggregate_exchange(input, parallelism, &group.keys);
            let id = self.push(
                NodeSpec::GroupAggregate(Box::new(data)),
                vec![(input, edge)],
                parallelism,
                group.output,
            )?;
            self.upsert_keys.insert(id, (0..key_count).collect());
            return Ok(id);
        }
        // Local: keys, `_delta` (rows added minus rows taken away), then
        // each aggregate's partial state columns.
        let mut partial: Vec<Field> = group
            .key_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        partial.push(Field::new("_delta", DataType::Int64, false));
        partial.extend(weir_functions::accumulator::state_fields(&accumulators));
        let partial = Arc::new(Schema::new(partial));
        let mut local = data.clone();
        local.phase = Some(phase_name(Phase::Local));
        let local = self.push(
            NodeSpec::GroupAggregate(Box::new(local)),
            vec![(input, Exchange::Forward)],
            input_parallelism,
            partial.clone(),
        )?;
        let key_fields: Vec<Field> = group
            .key_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        let global_keys = key_columns(&key_fields, 0);
        let edge = self.aggregate_exchange(local, parallelism, &global_keys);
        data.phase = Some(phase_name(Phase::Global));
        data.keys = encode_exprs(&global_keys, &partial)?;
        data.filters = vec![None; group.aggregates.len()];
        data.state_ttl_ms = self.config.state_ttl()?.map(|d| d.as_millis() as u64);
        let id = self.push(
            NodeSpec::GroupAggregate(Box::new(data)),
            vec![(local, edge)],
            parallelism,
            group.output,
        )?;
        self.upsert_keys.insert(id, (0..key_count).collect());
        Ok(id)
    }
}

/// A non-windowed aggregation as the planner makes it.
struct GroupParts {
    /// Grouping keys, over the input.
    keys: Vec<Arc<dyn PhysicalExpr>>,
    /// Their columns (the first of the output).
    key_schema: SchemaRef,
    /// The aggregate calls.
    aggregates: Vec<Arc<datafusion_physical_expr::aggregate::AggregateFunctionExpr>>,
    /// Their filters.
    filters: Vec<Option<Arc<dyn PhysicalExpr>>>,
    /// Keys, aggregates and the op column.
    output: SchemaRef,
}

/// Where the columns `key` of a Calc's input are in its output: the same
/// without a projection, else where the projection selects each plainly
/// (`None` when one is not selected).
/// The columns of `table` a scan reads (positions in its read schema, and
/// their fields as bound in `full`): the `needed` full-schema columns that
/// are read, and those the needed computed columns (`computed`, bound as
/// `computed_exprs`) refer to.
fn read_columns(
    table: &weir_plan::table::TableDef,
    full: &SchemaRef,
    needed: &BTreeSet<usize>,
    computed: &[(usize, &crate::catalog::CatalogColumn)],
    computed_exprs: &[Expr],
) -> (Vec<usize>, Vec<Field>) {
    let read_names: Vec<String> = table
        .read_schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let position = |name: &str| read_names.iter().position(|n| n == name).expect("a read column");
    let mut read: BTreeSet<usize> = BTreeSet::new();
    for &i in needed {
        match computed.iter().position(|(ci, _)| *ci == i) {
            None => {
                read.insert(position(full.field(i).name()));
            }
            Some(k) => read.extend(computed_exprs[k].column_refs().iter().map(|c| position(&c.name))),
        }
    }
    let projection: Vec<usize> = read.into_iter().collect();
    let fields = projection
        .iter()
        .map(|i| {
            full.field_with_name(&read_names[*i])
                .expect("read column in full schema")
                .clone()
        })
        .collect();
    (projection, fields)
}

/// Whether `filter` reads only the columns `key`.
fn filters_only(filter: &Arc<dyn PhysicalExpr>, key: &[usize]) -> bool {
    datafusion_physical_expr::utils::collect_columns(filter)
        .iter()
        .all(|c| key.contains(&c.index()))
}

fn key_through(key: &[usize], projection: Option<&[Arc<dyn PhysicalExpr>]>) -> Option<Vec<usize>> {
    let Some(projection) = projection else {
        return Some(key.to_vec());
    };
    key.iter()
        .map(|k| {
            projection.iter().position(|e| {
                e.as_ref()
                    .downcast_ref::<ColumnExpr>()
                    .is_some_and(|c| c.index() == *k)
            })
        })
        .collect()
}

type AggregateCalls = (
    Vec<Arc<datafusion_physical_expr::aggregate::AggregateFunctionExpr>>,
    Vec<Option<Arc<dyn PhysicalExpr>>>,
);

/// True for a processing-time attribute (a `PROCTIME()` column or a window
/// time derived from one).
fn is_proctime(field: &Field) -> bool {
    field.metadata().get(TIME_ATTRIBUTE_KEY).map(String::as_str) == Some(PROCTIME)
}

/// The delay of a watermark expression of the form `rowtime - INTERVAL '...'`
/// (or `rowtime` itself), in milliseconds.
fn fixed_watermark_delay(expr: &Expr, rowtime: &str) -> Option<i64> {
    use datafusion_common::ScalarValue;
    use datafusion_expr::{BinaryExpr, Operator};
    match strip_alias(expr) {
        Expr::Column(c) if c.name == rowtime => Some(0),
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Minus,
            right,
        }) => {
            let Expr::Column(c) = strip_alias(left) else {
                return None;
            };
            if c.name != rowtime {
                return None;
            }
            match strip_alias(right) {
                Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) if v.months == 0 => {
                    Some(v.days as i64 * 86_400_000 + v.nanoseconds.div_euclid(1_000_000))
                }
                Expr::Literal(ScalarValue::IntervalDayTime(Some(v)), _) => {
                    Some(v.days as i64 * 86_400_000 + v.milliseconds as i64)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

fn unsupported(what: &str) -> Error {
    Error::Plan(format!("{what} is not supported yet"))
}

/// Fails when `e` uses a window column other than as a plain column.
fn check_no_window_refs(e: &Expr, schema: &DFSchema, origins: &[Origin]) -> Result<()> {
    for column in e.column_refs() {
        let index = schema.index_of_column(column)?;
        if let Origin::Window(_) = origins[index] {
            return Err(Error::Plan(format!(
                "the window column '{}' can only be grouped by or selected as it is, not used in {e}",
                column.name
            )));
        }
    }
    Ok(())
}

/// `schema` with no column marked as a time attribute (a regular join's
/// output, as Flink turns its inputs' time attributes into plain timestamps).
fn without_time_attributes(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let mut metadata = f.metadata().clone();
            metadata.remove(TIME_ATTRIBUTE_KEY);
            f.as_ref().clone().with_metadata(metadata)
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Whether `e` is a column that is a processing-time attribute.
fn is_proctime_column(e: &Expr, schema: &DFSchema) -> bool {
    let Expr::Column(column) = e else {
        return false;
    };
    schema
        .qualified_field_from_column(column)
        .is_ok_and(|(_, f)| is_proctime(f))
}

/// The event-time column an OVER window is ordered by (`None`: processing
/// time): one time attribute, ascending, as Flink requires.
fn over_order(order_by: &[datafusion_expr::SortExpr], schema: &DFSchema) -> Result<Option<usize>> {
    let refuse = || {
        Error::Plan(
            "OVER windows' ordering in stream mode must be defined on a time attribute, ascending \
             (one ORDER BY column, a rowtime or a PROCTIME())"
                .into(),
        )
    };
    let [only] = order_by else {
        return Err(refuse());
    };
    let Expr::Column(c) = &only.expr else {
        return Err(refuse());
    };
    let index = schema.index_of_column(c)?;
    match (
        only.asc,
        schema
            .field(index)
            .metadata()
            .get(TIME_ATTRIBUTE_KEY)
            .map(String::as_str),
    ) {
        (true, Some(ROWTIME)) => Ok(Some(index)),
        (true, Some(PROCTIME)) => Ok(None),
        _ => Err(refuse()),
    }
}

/// Whether `exprs` (a projection over `filter`) read the rank column of a
/// TopN pattern (`filter` over a window); true when it is no such pattern.
fn uses_rank(exprs: &[Expr], filter: &datafusion_expr::logical_plan::Filter) -> bool {
    let LogicalPlan::Window(window) = filter.input.as_ref() else {
        return true;
    };
    let Some(rank) = window.schema.fields().get(window.input.schema().fields().len()) else {
        return true;
    };
    exprs
        .iter()
        .any(|e| e.column_refs().iter().any(|c| c.name == *rank.name()))
}

/// How a join input reaches a join at `parallelism`: hashed by its keys,
/// all to one subtask without keys, forward when both are one subtask.
fn join_edge(node: &PlanNode, keys: &[Arc<dyn PhysicalExpr>], parallelism: usize, keyless: bool) -> Exchange {
    match () {
        _ if parallelism == 1 && node.parallelism == 1 => Exchange::Forward,
        _ if keyless => Exchange::Single,
        _ => Exchange::Hash(keys.to_vec()),
    }
}

/// The field `qualifier.name` of `plan`, or, when the optimizer pruned it
/// (an `AS OF` column is read by no expression), of the plan's inputs and
/// tables.
fn time_field(plan: &LogicalPlan, name: &str, qualifier: Option<&str>) -> Option<Arc<Field>> {
    let found = plan
        .schema()
        .iter()
        .find(|(q, f)| {
            f.name() == name && qualifier.is_none_or(|wanted| q.is_some_and(|q| q.table() == wanted))
        })
        .map(|(_, f)| f.clone());
    if found.is_some() {
        return found;
    }
    if let LogicalPlan::TableScan(scan) = plan {
        return scan
            .source
            .schema()
            .fields()
            .iter()
            .find(|f| f.name() == name)
            .cloned();
    }
    // Below an alias the qualifier is the alias's; look by name only.
    let qualifier = match plan {
        LogicalPlan::SubqueryAlias(_) => None,
        _ => qualifier,
    };
    plan.inputs()
        .into_iter()
        .find_map(|input| time_field(input, name, qualifier))
}

/// A temporal join's condition without the `weir_keep_columns(...)` the
/// binder added to keep its time columns.
fn without_as_of(join: &datafusion_expr::logical_plan::Join, _time: &[String]) -> Option<Expr> {
    without_keep_columns(join.filter.as_ref()?)
}

/// `predicate` without its `weir_keep_columns(...)` conjuncts (`None`:
/// nothing else).
fn without_keep_columns(predicate: &Expr) -> Option<Expr> {
    datafusion_expr::utils::split_conjunction(predicate)
        .into_iter()
        .filter(|c| !matches!(c, Expr::ScalarFunction(f) if f.name() == crate::temporal::KEEP_COLUMNS))
        .cloned()
        .reduce(Expr::and)
}
