//! Channels between processes: one Arrow Flight `DoGet` stream per channel, carrying the frames of `weir_runtime::wire`.
//!
//! A process that runs subtasks runs a [`FlightNode`]: a Flight server, and
//! clients of the other nodes. The upstream subtask of a channel whose
//! downstream runs elsewhere sends on a local bounded channel as always;
//! the node *offers* that channel's receiving end under its [`ChannelKey`].
//! The downstream node *fetches* it: a `DoGet` whose ticket is the key,
//! answered by a stream of `FlightData`, one [`Frame`](weir_runtime::wire::Frame)
//! each (weir's header as `app_metadata`, Arrow IPC as `data_header` and
//! `data_body`), decoded into the downstream subtask's local channel.
//! Batches, watermarks, barriers and end-of-stream share that one stream,
//! so aligned barriers keep their place among the batches. Under unaligned
//! checkpoints a second stream carries the channel's priority lane: its
//! barriers overtake everything in flight, and the sequence number each
//! carries says which messages were sent before it.
//!
//! Backpressure is per channel. A downstream that stops reading leaves its
//! stream unpolled: HTTP/2 stops that stream at its window
//! ([`STREAM_WINDOW`]); the connection's window is as large as HTTP/2
//! allows, so a stalled stream never holds up the others on the same
//! connection. The upstream's bridge then blocks on its small queue, its
//! local channel fills, and only the upstream task that sends on that
//! channel waits.

mod data;
mod key;
pub mod loopback;
mod node;
pub mod transport;

pub use key::{ChannelKey, Lane};
pub use node::{FlightNode, STREAM_WINDOW, runtime};
pub use weir_common::{Error, Result};

#[cfg(test)]
mod tests;
