//! Checkpoints: settings, the coordinator, the on-disk layout, and metadata.
//!
//! The protocol is Flink's (Chandy-Lamport snapshots with aligned barriers):
//! the coordinator asks every source subtask to inject barrier `n`; tasks align
//! barriers on their inputs (see `runtime::input`), snapshot their operators and
//! acknowledge; when every task has acknowledged, `_metadata` is written and the
//! checkpoint is complete, and tasks are told so (sinks then commit).

pub mod coordinator;
pub mod driver;
pub mod inspect;
pub mod metadata;
pub mod rescale;
pub mod stats;
pub mod storage;

pub use crate::config::checkpoint::{CheckpointConfig, CheckpointingMode, RestartStrategy};
pub use metadata::{ChannelSide, ChannelStateFile, CheckpointMetadata, OperatorState, StateFile, TaskState};
pub use stats::CheckpointStats;
