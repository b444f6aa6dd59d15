//! The runtime: messages, operators, exchanges, tasks and jobs.

pub mod control;
pub mod deploy;
pub mod exchange;
pub mod incremental;
pub mod input;
pub mod job;
pub mod job_id;
pub mod message;
pub mod metrics;
pub mod operator;
pub mod source;
pub mod task;

pub use exchange::Exchange;
pub use job::{JobGraph, JobHandle, JobSettings, JobStatus};
pub use message::{Message, Timestamp};
pub use metrics::{BackpressureLevel, JobMetrics, TaskMetricsSnapshot};
pub use operator::{Operator, OperatorFactory, Output, TaskContext};
pub use source::{SourceFactory, SourcePoll, SourceReader, SplitId};
