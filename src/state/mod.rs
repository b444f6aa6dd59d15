//! Keyed state: key groups, state snapshots (with checkpoints), spilled runs and the spilling store.

pub mod deferred;
pub mod entry;
pub mod flushed;
pub mod incremental;
pub mod keyed_map;
pub mod keyed_rows;
pub mod local_dir;
pub mod memory_guess;
pub mod operator;
pub mod runs;
pub mod snapshot;
pub mod store;
