//! Keyed state: key groups, state snapshots (with checkpoints) and spilled runs.

pub mod incremental;
pub mod key_group;
pub mod runs;
pub mod snapshot;
