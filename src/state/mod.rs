//! Keyed state: key groups and (with checkpoints) state snapshots.

pub mod incremental;
pub mod key_group;
pub mod snapshot;
