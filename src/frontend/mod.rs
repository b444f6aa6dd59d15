//! The SQL front end: parsing (Flink dialect), the catalog, and binding through DataFusion.

pub mod accumulator;
pub mod binder;
pub mod catalog;
pub mod count_window;
pub mod dialect;
pub mod flink_aggregates;
pub mod flink_functions;
pub mod functions;
pub mod group_window;
pub mod legacy_options;
pub mod listagg;
pub mod naming;
pub mod parser;
pub mod placeholders;
pub mod ported_udfs;
pub mod qualify;
pub mod temporal;
pub mod types;
pub mod window_tvf;
