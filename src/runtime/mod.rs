//! The runtime: messages, operators, exchanges, tasks and jobs.

pub mod control;
pub mod deploy;
pub mod exchange;
pub mod execution;
pub mod incremental;
pub mod input;
pub mod job;
pub mod message;
pub mod metrics;
pub mod operator;
pub mod settings;
pub mod source;
pub mod task;

pub use exchange::Exchange;
pub use execution::ExecutionGraph;
pub use job::{JobHandle, JobSettings, JobStatus};
pub use message::{Message, Timestamp};
pub use metrics::{BackpressureLevel, JobMetrics, TaskMetricsSnapshot};
pub use operator::{Operator, OperatorFactory, Output, TaskContext};
pub use source::{SourceFactory, SourcePoll, SourceReader, SplitId};
