//! The functions SQL can call: DataFusion's, plus Flink's where they differ
//! ([`registry`]), and the retracting accumulators a non-windowed
//! aggregation runs Flink's aggregates with ([`accumulator`]).
#![warn(missing_docs)]

pub mod accumulator;
pub mod flink_aggregates;
pub mod flink_functions;
pub mod listagg;
pub mod ported_udfs;
pub mod registry;

pub use weir_common::{Error, Result};
