//! The runtime: messages between tasks (and their wire encoding), the
//! operator and source traits, exchanges and the transports under them,
//! barrier alignment at a task's inputs, and the task loop that drives a
//! chain of operators.
#![warn(missing_docs)]

pub mod control;
pub mod exchange;
pub mod incremental;
pub mod input;
pub mod message;
pub mod operator;
pub mod source;
pub mod task;
pub mod transport;
pub mod wire;

pub use exchange::Exchange;
pub use message::Message;
pub use operator::{Operator, OperatorFactory, Output, TaskContext};
pub use source::{SourceFactory, SourcePoll, SourceReader, SplitId};
pub use weir_common::{Error, Result};
