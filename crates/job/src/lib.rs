//! Running a job: its operators built from the plan ([`execution`]), each
//! attempt deployed into subtasks ([`deploy`]), supervised and restarted
//! ([`supervisor`]), and checkpointed by the coordinator ([`coordinator`],
//! [`driver`]) as Flink's (Chandy-Lamport snapshots with aligned barriers):
//! the coordinator asks every source subtask to inject barrier `n`; tasks
//! align barriers on their inputs, snapshot their operators and acknowledge;
//! when every task has acknowledged, `_metadata` is written and the
//! checkpoint is complete, and tasks are told so (sinks then commit).
#![warn(missing_docs)]

pub mod coordinator;
pub mod deploy;
pub mod driver;
pub mod execution;
pub mod metrics;
pub mod placement;
pub mod rescale;
pub mod settings;
pub mod stats;
pub mod supervisor;

pub use execution::ExecutionGraph;
pub use metrics::{BackpressureLevel, JobMetrics, TaskMetricsSnapshot};
pub use settings::{JobSettings, JobStatus};
pub use supervisor::JobHandle;
pub use weir_common::{Error, Result};
