//! The transport of one attempt of a job whose subtasks run in several processes: channels within this process stay crossbeam, the others are Flight streams.

use std::sync::Arc;

use weir_runtime::transport::{ChannelId, ReceiveEnd, SendEnd, Transport, local};

use crate::Result;
use crate::key::ChannelKey;
use crate::node::FlightNode;

/// Channels of attempt `attempt` of job `job`, through `node`.
#[derive(Debug)]
pub struct FlightTransport {
    node: Arc<FlightNode>,
    job: String,
    attempt: u32,
}

impl FlightTransport {
    /// The channels of one attempt of a job, made through `node`.
    pub fn new(node: Arc<FlightNode>, job: &str, attempt: u32) -> Self {
        FlightTransport {
            node,
            job: job.to_string(),
            attempt,
        }
    }

    fn key(&self, channel: ChannelId) -> ChannelKey {
        ChannelKey {
            job: self.job.clone(),
            attempt: self.attempt,
            channel,
        }
    }
}

impl Transport for FlightTransport {
    fn channel(&self, _id: ChannelId, capacity: usize, lane: bool) -> Result<(SendEnd, ReceiveEnd)> {
        Ok(local(capacity, lane))
    }

    fn send_end(&self, id: ChannelId, capacity: usize, lane: bool) -> Result<SendEnd> {
        let (send, offered) = local(capacity, lane);
        self.node.offer(self.key(id), offered);
        Ok(send)
    }

    fn receive_end(&self, id: ChannelId, upstream: &str, capacity: usize, lane: bool) -> Result<ReceiveEnd> {
        self.node.fetch(upstream, &self.key(id), capacity, lane)
    }

    fn name(&self) -> &'static str {
        "flight"
    }
}
