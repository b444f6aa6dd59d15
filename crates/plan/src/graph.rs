//! The job graph: a plan's nodes chained into vertices, each vertex run by
//! one thread per subtask, and the edges (exchanges) between vertices. It
//! is data, as the plan is: whoever deploys it builds the operators.
//!
//! ```text
//!  Source ─► Calc ─► Watermark ─► LocalWindowAggregate ══HASH══► GlobalWindowAggregate ─► Sink
//!  └────────────── one vertex (chained) ──────────────┘          └──────── one vertex ────────┘
//! ```
//!
//! A node joins its input's vertex when its only input is a forward
//! exchange at its own parallelism from a node that feeds nothing else.

use std::collections::HashMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use crate::NodeId;
use crate::Result;
use crate::changelog::ChangelogMode;
use crate::codec::{DecodeContext, decode_exprs};
use crate::spec::{ExchangeSpec, NodeSpec, PlanSpec};

/// A chain of plan nodes that runs in one thread per subtask: a source
/// (or the head operator) and the operators chained after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Vertex {
    /// Its nodes, in chain order.
    pub nodes: Vec<NodeId>,
    /// Number of subtasks.
    pub parallelism: usize,
}

/// An edge between vertices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobEdge {
    /// Upstream vertex index.
    pub from: usize,
    /// Downstream vertex index.
    pub to: usize,
    /// The plan node whose rows it carries (the exchange's keys are over
    /// its output).
    pub from_node: NodeId,
    /// Logical input of the downstream head operator.
    pub to_input: usize,
    /// How rows are distributed.
    pub exchange: ExchangeSpec,
}

/// A plan chained into vertices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobGraph {
    /// The plan.
    pub plan: PlanSpec,
    /// Vertices; edges refer to them by index.
    pub vertices: Vec<Vertex>,
    /// Edges.
    pub edges: Vec<JobEdge>,
}

impl JobGraph {
    /// Chains `plan`'s nodes into vertices (when the plan chains) and connects them.
    pub fn of(plan: PlanSpec) -> JobGraph {
        let (vertex_of, count) = vertex_of_nodes(&plan);
        let mut vertices: Vec<Vertex> = (0..count)
            .map(|_| Vertex {
                nodes: Vec::new(),
                parallelism: 1,
            })
            .collect();
        let mut edges = Vec::new();
        for (id, node) in plan.nodes.iter().enumerate() {
            let vertex = &mut vertices[vertex_of[id]];
            vertex.parallelism = node.parallelism;
            vertex.nodes.push(id);
            for (to_input, (input, exchange)) in node.inputs.iter().enumerate() {
                if vertex_of[*input] != vertex_of[id] {
                    edges.push(JobEdge {
                        from: vertex_of[*input],
                        to: vertex_of[id],
                        from_node: *input,
                        to_input,
                        exchange: exchange.clone(),
                    });
                }
            }
        }
        JobGraph {
            plan,
            vertices,
            edges,
        }
    }

    /// The node names of vertex `vertex`, in chain order.
    pub fn node_names(&self, vertex: usize) -> Vec<String> {
        (self.vertices[vertex].nodes.iter())
            .map(|n| self.plan.nodes[*n].name.clone())
            .collect()
    }

    /// A vertex's name: its nodes' names, `Source: t -> Calc(...) -> ...`.
    pub fn vertex_name(&self, vertex: usize) -> String {
        self.node_names(vertex).join(" -> ")
    }

    /// Whether vertex `vertex` starts with a source.
    pub fn has_source(&self, vertex: usize) -> bool {
        (self.vertices[vertex].nodes.first())
            .is_some_and(|n| matches!(self.plan.nodes[*n].kind, NodeSpec::Source(_)))
    }

    /// Stable ids of the job's sources and operators (Flink's `uid`):
    /// `<kind>-<n>`, the n-th operator of that kind in plan order, so that
    /// they do not depend on how operators are chained into vertices (which
    /// changes with the parallelism). Per vertex: the source's id, if any,
    /// and one id per chained operator.
    pub fn operator_uids(&self) -> Vec<(Option<String>, Vec<String>)> {
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut next = |kind: String| {
            let n = seen.entry(kind.clone()).or_default();
            *n += 1;
            format!("{kind}-{}", *n - 1)
        };
        (0..self.vertices.len())
            .map(|v| {
                let names = self.node_names(v);
                let (source, operators) = match self.has_source(v) {
                    true => (Some(next("Source".to_string())), &names[1..]),
                    false => (None, &names[..]),
                };
                (source, operators.iter().map(|n| next(operator_kind(n))).collect())
            })
            .collect()
    }

    /// The graph as text: one line per vertex (its chained nodes below it),
    /// then its outgoing edges; with `changelog_mode`, each node's row kinds
    /// as Flink shows them (`changelogMode=[I,UB,UA,D]`). Hash keys are
    /// decoded with `ctx` to be shown as DataFusion writes them.
    pub fn explain(&self, changelog_mode: bool, ctx: &DecodeContext) -> Result<String> {
        let mut text = String::new();
        for (index, vertex) in self.vertices.iter().enumerate() {
            let _ = writeln!(text, "[{}] parallelism={}", index + 1, vertex.parallelism);
            for (i, node) in vertex.nodes.iter().enumerate() {
                let arrow = if i == 0 { "   " } else { "-> " };
                let entry = &self.plan.nodes[*node];
                let mut line = entry.name.clone();
                if changelog_mode {
                    line = with_changelog_mode(&line, &entry.mode);
                }
                let _ = writeln!(text, "  {arrow}{line}");
            }
            for edge in self.edges.iter().filter(|e| e.from == index) {
                let exchange = self.exchange_text(edge, ctx)?;
                let _ = writeln!(text, "  => {exchange} => [{}]", edge.to + 1);
            }
        }
        Ok(text)
    }

    /// `FORWARD`, `HASH[k@0]`, ...
    fn exchange_text(&self, edge: &JobEdge, ctx: &DecodeContext) -> Result<String> {
        Ok(match &edge.exchange {
            ExchangeSpec::Forward => "FORWARD".into(),
            ExchangeSpec::Hash(keys) => {
                let input = self.plan.nodes[edge.from_node].schema.decode()?;
                let keys: Vec<String> = decode_exprs(keys, &input, ctx)?
                    .iter()
                    .map(|k| k.to_string())
                    .collect();
                format!("HASH[{}]", keys.join(", "))
            }
            ExchangeSpec::Rebalance => "REBALANCE".into(),
            ExchangeSpec::Broadcast => "BROADCAST".into(),
            ExchangeSpec::Single => "SINGLE".into(),
        })
    }
}

/// How many nodes read node `node`'s output.
fn consumers(plan: &PlanSpec, node: NodeId) -> usize {
    (plan.nodes.iter())
        .flat_map(|n| n.inputs.iter())
        .filter(|(i, _)| *i == node)
        .count()
}

/// Which vertex each node runs in, and how many vertices there are.
fn vertex_of_nodes(plan: &PlanSpec) -> (Vec<usize>, usize) {
    let mut vertex_of = Vec::with_capacity(plan.nodes.len());
    let mut vertices = 0;
    for node in &plan.nodes {
        let chained = match (&node.kind, node.inputs.as_slice()) {
            (NodeSpec::Source(_), _) => None,
            (_, [(input, ExchangeSpec::Forward)])
                if plan.chaining
                    && plan.nodes[*input].parallelism == node.parallelism
                    && consumers(plan, *input) == 1 =>
            {
                Some(vertex_of[*input])
            }
            _ => None,
        };
        match chained {
            Some(v) => vertex_of.push(v),
            None => {
                vertex_of.push(vertices);
                vertices += 1;
            }
        }
    }
    (vertex_of, vertices)
}

/// What an operator is, for its id: `WindowAggregate` for a
/// `GlobalWindowAggregate(...)` too (the phases of an aggregation keep the
/// same state, and parallelism 1 plans a single phase).
fn operator_kind(description: &str) -> String {
    let kind: String = description
        .split(['(', '[', ':'])
        .next()
        .unwrap_or("operator")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    kind.strip_prefix("Global").unwrap_or(&kind).to_string()
}

/// `Name(attributes)` with `changelogMode=[...]` as its last attribute.
fn with_changelog_mode(line: &str, mode: &ChangelogMode) -> String {
    match line.strip_suffix(')') {
        Some(open) if open.ends_with('(') => format!("{open}changelogMode={mode})"),
        Some(open) => format!("{open}, changelogMode={mode})"),
        None => format!("{line}(changelogMode={mode})"),
    }
}
