//! The stream plan: a DAG of operator nodes with parallelism and exchanges,
//! built from a DataFusion logical plan, shown by EXPLAIN, and turned into a
//! job graph by chaining.
//!
//! ```text
//!  Source ─► Calc ─► Watermark ─► LocalWindowAggregate ══HASH══► GlobalWindowAggregate ─► Sink
//!  └────────────── one vertex (chained) ──────────────┘          └──────── one vertex ────────┘
//! ```

pub mod broadcast;
pub mod changelog;
pub mod codec;
pub mod interval;
pub mod over;
mod planner;
pub mod rank;
pub mod spec;

use std::fmt::Write;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;

pub use planner::Planner;

use crate::runtime::job::{JobEdge, JobGraph, Vertex};
use crate::runtime::{Exchange, OperatorFactory, SourceFactory};

/// Index of a node in [`StreamPlan::nodes`].
pub type NodeId = usize;

/// What a node does.
#[derive(Debug, Clone)]
pub enum NodeKind {
    /// A source (the head of a chain).
    Source(Arc<dyn SourceFactory>),
    /// An operator.
    Operator(Arc<dyn OperatorFactory>),
}

impl NodeKind {
    /// One line for EXPLAIN.
    pub fn describe(&self) -> String {
        match self {
            NodeKind::Source(s) => s.describe(),
            NodeKind::Operator(o) => o.describe(),
        }
    }
}

/// One node of the plan.
#[derive(Debug, Clone)]
pub struct PlanNode {
    /// Its operator.
    pub kind: NodeKind,
    /// Inputs, each with the exchange that feeds this node.
    pub inputs: Vec<(NodeId, Exchange)>,
    /// Number of subtasks.
    pub parallelism: usize,
    /// Output schema.
    pub schema: SchemaRef,
}

impl PlanNode {
    /// The row kinds it emits: updates when its rows carry an op column.
    pub fn mode(&self) -> changelog::ChangelogMode {
        if crate::changelog::has_op(&self.schema) {
            changelog::ChangelogMode::Retract
        } else {
            changelog::ChangelogMode::InsertOnly
        }
    }
}

/// A planned streaming job: nodes in topological order (inputs first).
#[derive(Debug, Clone)]
pub struct StreamPlan {
    /// The nodes.
    pub nodes: Vec<PlanNode>,
    /// Whether operators connected by forward exchanges share a thread.
    pub chaining: bool,
}

impl StreamPlan {
    fn consumers(&self, node: NodeId) -> usize {
        self.nodes
            .iter()
            .flat_map(|n| n.inputs.iter())
            .filter(|(i, _)| *i == node)
            .count()
    }

    /// Which vertex each node runs in: a node joins its input's vertex when it
    /// has one forward input of equal parallelism that feeds nothing else.
    fn vertex_of_nodes(&self) -> (Vec<usize>, usize) {
        let mut vertex_of = Vec::with_capacity(self.nodes.len());
        let mut vertices = 0;
        for node in &self.nodes {
            let chained = match (&node.kind, node.inputs.as_slice()) {
                (NodeKind::Operator(_), [(input, Exchange::Forward)])
                    if self.chaining
                        && self.nodes[*input].parallelism == node.parallelism
                        && self.consumers(*input) == 1 =>
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

    /// Chains the nodes into vertices and connects them.
    pub fn to_job_graph(&self) -> JobGraph {
        let (vertex_of, count) = self.vertex_of_nodes();
        let mut vertices: Vec<Vertex> = (0..count)
            .map(|_| Vertex {
                source: None,
                operators: vec![],
                parallelism: 1,
            })
            .collect();
        let mut edges = Vec::new();
        for (id, node) in self.nodes.iter().enumerate() {
            let vertex = &mut vertices[vertex_of[id]];
            vertex.parallelism = node.parallelism;
            match &node.kind {
                NodeKind::Source(s) => vertex.source = Some(s.clone()),
                NodeKind::Operator(o) => vertex.operators.push(o.clone()),
            }
            for (input_index, (input, exchange)) in node.inputs.iter().enumerate() {
                if vertex_of[*input] != vertex_of[id] {
                    edges.push(JobEdge {
                        from: vertex_of[*input],
                        to: vertex_of[id],
                        to_input: input_index,
                        exchange: exchange.clone(),
                    });
                }
            }
        }
        JobGraph { vertices, edges }
    }

    /// The changelog mode of each node, inferred from its operator's role
    /// and its inputs' modes (an upsert stream shows as `[I,UA,D]`).
    pub fn modes(&self) -> Vec<changelog::ChangelogMode> {
        let mut modes: Vec<changelog::ChangelogMode> = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let role = match &node.kind {
                NodeKind::Source(s) => match s.upsert_key() {
                    Some(key) => changelog::ChangelogRole::UpsertSource(key),
                    None => changelog::ChangelogRole::Source,
                },
                NodeKind::Operator(o) => o.changelog_role(),
            };
            let inputs: Vec<_> = node.inputs.iter().map(|(i, _)| modes[*i].clone()).collect();
            let mode = changelog::infer(&role, &inputs, "", &[]).unwrap_or_else(|_| node.mode());
            modes.push(mode);
        }
        modes
    }

    /// The job graph as text: one line per vertex (its chained nodes
    /// below it), then its outgoing edges; with `changelog_mode`, each
    /// node's row kinds as Flink shows them (`changelogMode=[I,UB,UA,D]`).
    pub fn explain(&self, changelog_mode: bool) -> String {
        let graph = self.to_job_graph();
        let (vertex_of, _) = self.vertex_of_nodes();
        let modes = self.modes();
        let mut text = String::new();
        for (index, vertex) in graph.vertices.iter().enumerate() {
            let _ = writeln!(text, "[{}] parallelism={}", index + 1, vertex.parallelism);
            let nodes = (0..self.nodes.len()).filter(|n| vertex_of[*n] == index);
            for (i, node) in nodes.enumerate() {
                let arrow = if i == 0 { "   " } else { "-> " };
                let mut line = self.nodes[node].kind.describe();
                if changelog_mode {
                    line = with_changelog_mode(&line, &modes[node]);
                }
                let _ = writeln!(text, "  {arrow}{line}");
            }
            for edge in graph.edges.iter().filter(|e| e.from == index) {
                let _ = writeln!(text, "  => {} => [{}]", edge.exchange.describe(), edge.to + 1);
            }
        }
        text
    }
}

/// `Name(attributes)` with `changelogMode=[...]` as its last attribute.
fn with_changelog_mode(line: &str, mode: &changelog::ChangelogMode) -> String {
    match line.strip_suffix(')') {
        Some(open) if open.ends_with('(') => format!("{open}changelogMode={mode})"),
        Some(open) => format!("{open}, changelogMode={mode})"),
        None => format!("{line}(changelogMode={mode})"),
    }
}
