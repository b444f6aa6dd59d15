//! Operators: one file per operator.
#![warn(missing_docs)]

#[macro_use]
mod spilling;

pub mod build;
pub mod calc;
pub mod group;
pub mod groups;
#[cfg(test)]
pub mod harness;
pub mod join;
pub mod key_store;
pub mod keyed_lists;
pub mod normalize;
pub mod over;
pub mod rank;
pub mod sort;
pub mod split_watermarks;
pub mod union;
pub mod upsert;
pub mod waiting;
pub mod watermark;
pub mod window;

pub use weir_common::{Error, Result};
