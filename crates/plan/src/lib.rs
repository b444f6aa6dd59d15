//! Plans as data: the stream plan the planner outputs ([`spec::PlanSpec`]),
//! its vocabulary (windows, joins, ranks, frames, changelog modes), how its
//! expressions are written out ([`codec`]), named ([`describe`]) and chained
//! into a job graph ([`graph`]). Nothing here runs an operator: operators,
//! sources and sinks are built from these values where their tasks run.
#![warn(missing_docs)]

pub mod changelog;
pub mod codec;
pub mod connector;
pub mod describe;
pub mod frame;
pub mod graph;
pub mod join;
pub mod rank;
pub mod spec;
pub mod table;
pub mod window;

/// Index of a node in [`spec::PlanSpec::nodes`].
pub type NodeId = usize;

pub use weir_common::{Error, Result};
