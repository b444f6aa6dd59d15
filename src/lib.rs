//! weir: a streaming SQL engine in the line of Apache Flink's SQL, on Apache Arrow.
//!
//! SQL (Flink's dialect) is bound with DataFusion, planned into a graph of
//! operators over Arrow record batches, and run with one thread per subtask,
//! event time driven by watermarks.
//!
//! ```
//! use weir::Engine;
//!
//! let engine = Engine::new();
//! engine.sql(
//!     "CREATE TABLE bids (auction BIGINT, price BIGINT, ts TIMESTAMP(3),
//!        WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
//!      WITH ('connector' = 'datagen', 'number-of-rows' = '100',
//!            'fields.auction.min' = '1', 'fields.auction.max' = '3')",
//! ).unwrap();
//! let batches = engine
//!     .sql("SELECT auction, COUNT(*) FROM TABLE(TUMBLE(TABLE bids, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
//!           GROUP BY auction, window_start, window_end")
//!     .unwrap()
//!     .collect()
//!     .unwrap();
//! let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
//! assert!(rows >= 1);
//! ```
#![warn(missing_docs)]

pub mod bench;
pub mod cluster;
pub mod engine;
#[doc(hidden)]
pub mod fuzz;
pub mod repl;
pub mod rest;
pub mod table;

pub use engine::{Engine, ResultStream, TableResult};
pub use table::Table;
pub use weir_common::{Error, Result};
pub use weir_job::{BackpressureLevel, JobHandle, JobMetrics, JobStatus, TaskMetricsSnapshot};

// The layers of weir, each a crate of its own (docs/architecture.md), as
// modules of this one: what a program embedding weir reaches beyond `Engine`.
pub use weir_common as common;
pub use weir_connectors as connectors;
pub use weir_functions as functions;
pub use weir_job as job;
pub use weir_operators as operators;
pub use weir_plan as plan;
pub use weir_runtime as runtime;
pub use weir_sql as sql;
pub use weir_state as state;
