//! A job graph with its operators built: the sources, operators and sinks
//! of each vertex created from their specs in the process that runs them,
//! with the functions and result channels of that process. Deploying an
//! attempt expands it into subtasks.
//!
//! ```text
//!  JobGraph (data) ──build──► ExecutionGraph (factories) ──deploy──► subtasks, channels, threads
//! ```

use std::sync::Arc;

use arrow::datatypes::SchemaRef;

use crate::Result;
use weir_common::config::SessionConfig;
use weir_connectors::build::ResultChannels;
use weir_plan::codec::{DecodeContext, decode_exprs};
use weir_plan::graph::JobGraph;
use weir_plan::spec::{ExchangeSpec, NodeSpec};
use weir_runtime::exchange::Exchange;
use weir_runtime::operator::OperatorFactory;
use weir_runtime::source::SourceFactory;

/// A vertex with its source and operators built.
#[derive(Debug, Clone)]
pub struct ExecutionVertex {
    /// The names of its nodes, in chain order (the source's first).
    pub nodes: Vec<String>,
    /// The source at the head of the chain, if any.
    pub source: Option<Arc<dyn SourceFactory>>,
    /// The chained operators.
    pub operators: Vec<Arc<dyn OperatorFactory>>,
    /// The stable ids of its source and operators (see
    /// [`JobGraph::operator_uids`]), which checkpoints key state by.
    pub uids: (Option<String>, Vec<String>),
    /// Number of subtasks.
    pub parallelism: usize,
}

impl ExecutionVertex {
    /// The chain's name: `Source: ... -> Calc(...) -> ...`.
    pub fn name(&self) -> String {
        self.nodes.join(" -> ")
    }
}

/// An edge between built vertices.
#[derive(Debug, Clone)]
pub struct ExecutionEdge {
    /// Upstream vertex index.
    pub from: usize,
    /// Downstream vertex index.
    pub to: usize,
    /// Logical input of the downstream head operator.
    pub to_input: usize,
    /// How rows are distributed.
    pub exchange: Exchange,
}

/// A job graph, built.
#[derive(Debug, Clone)]
pub struct ExecutionGraph {
    /// Vertices; edges refer to them by index.
    pub vertices: Vec<ExecutionVertex>,
    /// Edges.
    pub edges: Vec<ExecutionEdge>,
}

/// Builds every source, operator and sink of `graph` from its spec:
/// expressions decoded with `ctx`'s functions, connectors configured with
/// the plan's settings, collect sinks feeding `results`.
pub fn build(graph: &JobGraph, ctx: &DecodeContext, results: &ResultChannels) -> Result<ExecutionGraph> {
    let plan = &graph.plan;
    let mut settings = SessionConfig::default();
    for (key, value) in &plan.settings {
        settings.set_unchecked(key, value);
    }
    let schemas: Vec<SchemaRef> = (plan.nodes.iter())
        .map(|n| n.schema.decode())
        .collect::<Result<_>>()?;
    let uids = graph.operator_uids();
    let mut vertices = Vec::with_capacity(graph.vertices.len());
    for (index, vertex) in graph.vertices.iter().enumerate() {
        let mut source = None;
        let mut operators = Vec::new();
        for id in &vertex.nodes {
            let entry = &plan.nodes[*id];
            let inputs: Vec<SchemaRef> = entry.inputs.iter().map(|(i, _)| schemas[*i].clone()).collect();
            match &entry.kind {
                NodeSpec::Source(spec) => source = Some(weir_connectors::build::source(spec, &settings)?),
                NodeSpec::Sink(spec) => {
                    operators.push(weir_connectors::build::sink(spec, &settings, results)?)
                }
                _ => operators.push(weir_operators::build::operator(entry, &inputs, ctx)?),
            }
        }
        vertices.push(ExecutionVertex {
            nodes: graph.node_names(index),
            source,
            operators,
            uids: uids[index].clone(),
            parallelism: vertex.parallelism,
        });
    }
    let edges = (graph.edges.iter())
        .map(|edge| {
            let input = &schemas[edge.from_node];
            Ok(ExecutionEdge {
                from: edge.from,
                to: edge.to,
                to_input: edge.to_input,
                exchange: exchange(&edge.exchange, input, ctx)?,
            })
        })
        .collect::<Result<_>>()?;
    Ok(ExecutionGraph { vertices, edges })
}

/// The exchange a spec describes, its hash keys over `input`.
fn exchange(spec: &ExchangeSpec, input: &SchemaRef, ctx: &DecodeContext) -> Result<Exchange> {
    Ok(match spec {
        ExchangeSpec::Forward => Exchange::Forward,
        ExchangeSpec::Hash(keys) => Exchange::Hash(decode_exprs(keys, input, ctx)?),
        ExchangeSpec::Rebalance => Exchange::Rebalance,
        ExchangeSpec::Broadcast => Exchange::Broadcast,
        ExchangeSpec::Single => Exchange::Single,
    })
}
