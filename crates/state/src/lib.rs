//! Keyed state: state snapshots as Parquet, incremental deltas, spilled runs
//! and the spilling store, and a checkpoint's files on disk ([`checkpoint`]).
#![warn(missing_docs)]

pub mod checkpoint;
pub mod deferred;
pub mod entry;
pub mod entry_files;
pub mod flushed;
pub mod incremental;
pub mod key_group_files;
pub mod keyed_map;
pub mod keyed_rows;
pub mod local_dir;
pub mod memory_guess;
pub mod operator;
pub mod runs;
pub mod snapshot;
pub mod spilled;
pub mod store;

pub use weir_common::{Error, Result};
