//! Apache Kafka (issue 15, in progress): what exists so far is the part of
//! the exactly-once sink that other engines leave out, committing after a
//! restore a transaction that a completed checkpoint recorded but that was
//! never committed ([`transactions`]), and the table options as Flink names
//! them ([`options`]). The source and sink follow.

pub mod options;
pub mod transactions;
pub mod wire;
