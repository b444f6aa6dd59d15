//! A transport whose every channel goes through this process's own Flight server over TCP: a job in one process, its data moved as between two.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use weir_runtime::transport::{ChannelId, ReceiveEnd, SendEnd, Transport, local};

use crate::Result;
use crate::key::ChannelKey;
use crate::node::FlightNode;

/// Offers each channel on its node and fetches it back through a `DoGet`.
#[derive(Debug)]
pub struct FlightLoopback {
    node: Arc<FlightNode>,
    /// Makes each channel's key unique across attempts.
    made: AtomicU64,
}

impl FlightLoopback {
    /// Channels through `node`.
    pub fn new(node: Arc<FlightNode>) -> Self {
        FlightLoopback {
            node,
            made: AtomicU64::new(0),
        }
    }
}

impl Transport for FlightLoopback {
    fn channel(&self, id: ChannelId, capacity: usize, lane: bool) -> Result<(SendEnd, ReceiveEnd)> {
        let (send, offered) = local(capacity, lane);
        let key = ChannelKey {
            job: format!("loopback-{}", self.made.fetch_add(1, Ordering::Relaxed)),
            attempt: 0,
            channel: id,
        };
        self.node.offer(key.clone(), offered);
        let receive = self
            .node
            .fetch(&self.node.address().to_string(), &key, capacity, lane)?;
        Ok((send, receive))
    }

    fn name(&self) -> &'static str {
        "flight-loopback"
    }
}
