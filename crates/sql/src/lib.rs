//! The SQL layer: parsing (Flink's dialect), the catalog, binding through
//! DataFusion, and the streaming planner, whose output is a plan as data
//! (`weir_plan::spec::PlanSpec`). It builds no operator.
#![warn(missing_docs)]

pub mod binder;
pub mod catalog;
pub mod count_window;
pub mod dialect;
pub mod group_window;
pub mod legacy_options;
pub mod naming;
pub mod parser;
pub mod placeholders;
pub mod planner;
pub mod qualify;
pub mod temporal;
pub mod types;
pub mod window_tvf;

pub use planner::Planner;
pub use weir_common::{Error, Result};
