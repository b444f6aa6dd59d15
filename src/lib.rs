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

pub mod alloc;
pub mod bench;
pub mod changelog;
pub mod checkpoint;
pub mod config;
pub mod connectors;
pub mod date_pattern;
pub mod engine;
pub mod error;
pub mod frontend;
#[doc(hidden)]
pub mod fuzz;
pub mod ids;
pub mod key_group;
pub mod operators;
pub mod plan;
pub mod repl;
pub mod runtime;
pub mod state;
pub mod table;
pub mod time;
pub mod types;

pub use engine::{Engine, ResultStream, TableResult};
pub use error::{Error, Result};
pub use runtime::{BackpressureLevel, JobHandle, JobMetrics, JobStatus, TaskMetricsSnapshot};
pub use table::Table;
