//! What every layer of weir shares: the one error type, ids, time, Flink's
//! types as Arrow's, row kinds of a changelog, key groups, and the session's
//! settings with their keys.
#![warn(missing_docs)]

pub mod alloc;
pub mod changelog;
pub mod config;
pub mod date_pattern;
pub mod error;
pub mod ids;
pub mod key_group;
pub mod time;
pub mod types;

pub use error::{Error, Result};
