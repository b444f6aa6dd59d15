//! Formats of the filesystem connector (`csv`, `json`) and Flink's text forms of values.

pub mod csv;
pub mod json;
pub mod text;
