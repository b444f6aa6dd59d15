//! A process's end of the data plane: its Flight server, which serves the channels it offers, and its clients of the other processes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest,
    HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use crossbeam_channel::Receiver;
use tokio::runtime::Runtime;
use tokio::sync::Notify;
use tonic::codegen::BoxStream;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status, Streaming};
use weir_runtime::exchange::PriorityBarrier;
use weir_runtime::message::Message;
use weir_runtime::transport::{Delivered, ReceiveEnd, local};

use crate::data::{self, FrameStream, Target};
use crate::key::{ChannelKey, Lane};
use crate::{Error, Result};

/// Bytes a channel's stream may have in flight beyond what its reader
/// took: HTTP/2's window of one stream. Its backpressure starts there.
pub const STREAM_WINDOW: u32 = 2 << 20;

/// The window of a whole connection: as large as HTTP/2 allows, so that
/// streams stalled at their own windows never use up the connection's.
const CONNECTION_WINDOW: u32 = (1 << 31) - 1;

/// How long a `DoGet` waits for its channel to be offered (the upstream
/// subtask may be deployed after its downstream asks).
const OFFER_WAIT: Duration = Duration::from_secs(60);

/// A lane of a channel offered, waiting for its reader.
enum Offered {
    Data(Receiver<Message>),
    Priority(Receiver<PriorityBarrier>),
}

/// The channels offered and not yet fetched.
#[derive(Default)]
struct Outbox {
    offered: Mutex<HashMap<(ChannelKey, Lane), Offered>>,
    changed: Notify,
}

impl Outbox {
    fn offer(&self, key: ChannelKey, end: ReceiveEnd) {
        let mut offered = self.offered.lock().expect("outbox lock");
        if let Some(lane) = end.lane {
            offered.insert((key.clone(), Lane::Priority), Offered::Priority(lane));
        }
        offered.insert((key, Lane::Data), Offered::Data(end.data));
        drop(offered);
        self.changed.notify_waiters();
    }

    /// Takes `lane` of channel `key`, waiting up to `wait` for it.
    async fn take(&self, key: &ChannelKey, lane: Lane, wait: Duration) -> Option<Offered> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let mut changed = pin!(self.changed.notified());
            changed.as_mut().enable();
            let found = self
                .offered
                .lock()
                .expect("outbox lock")
                .remove(&(key.clone(), lane));
            if found.is_some() {
                return found;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return None;
            }
        }
    }

    /// Drops the channels of `job` offered by attempts before `attempt`
    /// that no reader took: their senders see them gone.
    fn withdraw(&self, job: &str, attempt: u32) {
        let mut offered = self.offered.lock().expect("outbox lock");
        offered.retain(|(key, _), _| key.job != job || key.attempt >= attempt);
    }
}

/// What the readers of this node's result channels confirmed, by channel.
type Confirmations = Arc<Mutex<HashMap<ChannelKey, Arc<Delivered>>>>;

/// The action by which a result channel's reader confirms a barrier; its
/// body is the checkpoint id, a space, and the channel's data ticket.
const CONFIRM: &str = "weir-confirm";

/// The Flight service of a node: `DoGet` of an offered channel, and the
/// `DoAction` that confirms what a result channel's reader holds.
struct ChannelService {
    outbox: Arc<Outbox>,
    confirmations: Confirmations,
}

impl ChannelService {
    fn confirm(&self, action: &Action) -> std::result::Result<(), Status> {
        let bad = |why: &str| Status::invalid_argument(format!("{CONFIRM}: {why}"));
        if action.r#type != CONFIRM {
            return Err(Status::unimplemented(format!(
                "weir's Flight service has one action, {CONFIRM}, not {:?}",
                action.r#type
            )));
        }
        let body = std::str::from_utf8(&action.body).map_err(|_| bad("not UTF-8"))?;
        let (checkpoint, ticket) = body.split_once(' ').ok_or_else(|| bad("no ticket"))?;
        let checkpoint: u64 = checkpoint.parse().map_err(|_| bad("not a checkpoint id"))?;
        let (key, _) = ChannelKey::from_ticket(ticket.as_bytes()).map_err(|e| bad(&e.to_string()))?;
        let confirmations = self.confirmations.lock().expect("confirmations lock");
        let delivered = confirmations
            .get(&key)
            .ok_or_else(|| Status::not_found(format!("no result channel {ticket}")))?;
        delivered.confirm(checkpoint);
        Ok(())
    }
}

fn only_do_get<T>() -> std::result::Result<T, Status> {
    Err(Status::unimplemented(
        "weir's Flight service serves channel streams (DoGet) only",
    ))
}

#[tonic::async_trait]
impl FlightService for ChannelService {
    type HandshakeStream = BoxStream<HandshakeResponse>;
    type ListFlightsStream = BoxStream<FlightInfo>;
    type DoGetStream = FrameStream;
    type DoPutStream = BoxStream<PutResult>;
    type DoExchangeStream = BoxStream<FlightData>;
    type DoActionStream = BoxStream<arrow_flight::Result>;
    type ListActionsStream = BoxStream<ActionType>;

    async fn do_get(&self, request: Request<Ticket>) -> std::result::Result<Response<FrameStream>, Status> {
        let (key, lane) = ChannelKey::from_ticket(&request.get_ref().ticket)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let ChannelKey { attempt, channel, .. } = &key;
        let name = format!("flight-out-{}-{}-{}", channel.edge, channel.from, channel.to);
        let stream = match self.outbox.take(&key, lane, OFFER_WAIT).await {
            Some(Offered::Data(data)) => data::serve_data(name, data),
            Some(Offered::Priority(lane)) => data::serve_priority(name, lane),
            None => {
                return Err(Status::not_found(format!(
                    "channel {channel:?} of attempt {attempt} of job {} was not offered within {OFFER_WAIT:?}",
                    key.job
                )));
            }
        };
        stream
            .map(Response::new)
            .map_err(|e| Status::internal(e.to_string()))
    }

    async fn handshake(
        &self,
        _: Request<Streaming<HandshakeRequest>>,
    ) -> std::result::Result<Response<Self::HandshakeStream>, Status> {
        only_do_get()
    }
    async fn list_flights(
        &self,
        _: Request<Criteria>,
    ) -> std::result::Result<Response<Self::ListFlightsStream>, Status> {
        only_do_get()
    }
    async fn get_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        only_do_get()
    }
    async fn poll_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<PollInfo>, Status> {
        only_do_get()
    }
    async fn get_schema(
        &self,
        _: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<SchemaResult>, Status> {
        only_do_get()
    }
    async fn do_put(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoPutStream>, Status> {
        only_do_get()
    }
    async fn do_exchange(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> std::result::Result<Response<Self::DoExchangeStream>, Status> {
        only_do_get()
    }
    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> std::result::Result<Response<Self::DoActionStream>, Status> {
        self.confirm(request.get_ref())?;
        Ok(Response::new(Box::pin(futures::stream::empty())))
    }
    async fn list_actions(
        &self,
        _: Request<Empty>,
    ) -> std::result::Result<Response<Self::ListActionsStream>, Status> {
        only_do_get()
    }
}

/// A runtime of two worker threads named `name`, for a server and its
/// clients (the Flight node's, the JobManager's, a TaskManager's).
pub fn runtime(name: &str) -> Result<Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
        .map_err(|e| Error::Execution(format!("cannot start the {name} runtime: {e}")))
}

/// The first lost connection of each attempt (job, attempt) whose
/// channels this node reads: the cause its part reports when its tasks
/// only saw each other stop.
pub(crate) type LostConnections = Arc<Mutex<HashMap<(String, u32), String>>>;

/// One process's Flight server and clients, on a runtime of their own.
pub struct FlightNode {
    runtime: Option<Runtime>,
    address: SocketAddr,
    outbox: Arc<Outbox>,
    clients: Mutex<HashMap<String, FlightServiceClient<Channel>>>,
    lost: LostConnections,
    confirmations: Confirmations,
}

impl std::fmt::Debug for FlightNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FlightNode({})", self.address)
    }
}

impl FlightNode {
    /// Starts a node serving on `bind` (`host:port`; port 0 picks a free one).
    pub fn start(bind: &str) -> Result<Arc<FlightNode>> {
        let runtime = runtime("weir-flight")?;
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(bind))
            .map_err(|e| Error::Execution(format!("cannot listen on {bind}: {e}")))?;
        let address = listener
            .local_addr()
            .map_err(|e| Error::Execution(format!("no address for {bind}: {e}")))?;
        let outbox = Arc::new(Outbox::default());
        let confirmations = Confirmations::default();
        let service = FlightServiceServer::new(ChannelService {
            outbox: outbox.clone(),
            confirmations: confirmations.clone(),
        })
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
        let server = Server::builder()
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .tcp_nodelay(true)
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
        runtime.spawn(async move {
            if let Err(e) = server.await {
                eprintln!("weir: the Flight server on {address} stopped: {e}");
            }
        });
        Ok(Arc::new(FlightNode {
            runtime: Some(runtime),
            address,
            outbox,
            clients: Mutex::default(),
            lost: LostConnections::default(),
            confirmations,
        }))
    }

    /// Where other nodes reach this one.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    fn runtime(&self) -> &Runtime {
        self.runtime.as_ref().expect("running until dropped")
    }

    /// Offers the receiving end of channel `key` to the node that runs its
    /// reader, which fetches it ([`FlightNode::fetch`]).
    pub fn offer(&self, key: ChannelKey, end: ReceiveEnd) {
        self.outbox.offer(key, end);
    }

    /// Drops the channels of `job` offered by attempts before `attempt`
    /// and never fetched, and what was noted of their lost connections.
    pub fn withdraw(&self, job: &str, attempt: u32) {
        self.outbox.withdraw(job, attempt);
        let mut lost = self.lost.lock().expect("lost connections lock");
        lost.retain(|(j, a), _| j != job || *a >= attempt);
        let mut confirmations = self.confirmations.lock().expect("confirmations lock");
        confirmations.retain(|key, _| key.job != job || key.attempt >= attempt);
    }

    /// Offers the receiving end of result channel `key` (a query's rows,
    /// read by the process that submitted it), with what its reader
    /// confirms ([`FlightNode::confirm`]) going to `delivered`.
    pub fn offer_result(&self, key: ChannelKey, end: ReceiveEnd, delivered: Arc<Delivered>) {
        let mut confirmations = self.confirmations.lock().expect("confirmations lock");
        confirmations.insert(key.clone(), delivered);
        drop(confirmations);
        self.outbox.offer(key, end);
    }

    /// Tells the node at `address` that the reader of its result channel
    /// `key` holds everything up to the barrier of `checkpoint`.
    pub fn confirm(&self, address: &str, key: &ChannelKey, checkpoint: u64) -> Result<()> {
        let mut client = self.client(address)?;
        let ticket = String::from_utf8_lossy(&key.ticket(Lane::Data)).into_owned();
        let action = Action {
            r#type: CONFIRM.to_string(),
            body: format!("{checkpoint} {ticket}").into(),
        };
        self.runtime()
            .block_on(client.do_action(action))
            .map(drop)
            .map_err(|s| {
                Error::Execution(format!(
                    "confirming checkpoint {checkpoint} to {address}: {}",
                    s.message()
                ))
            })
    }

    /// The first connection lost by a channel of attempt `attempt` of
    /// `job` that this node reads (its peer and the transport's error),
    /// waiting up to `wait` for one: the two ends of a connection to a
    /// process that died break at about the same time, and a sending
    /// task may see its end gone before the reading bridge names the peer.
    pub fn lost_connection(&self, job: &str, attempt: u32, wait: Duration) -> Option<String> {
        let deadline = std::time::Instant::now() + wait;
        loop {
            let key = (job.to_string(), attempt);
            if let Some(cause) = self.lost.lock().expect("lost connections lock").get(&key) {
                return Some(cause.clone());
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The receiving end of channel `key`, offered by the node at
    /// `address`: a local channel of `capacity` messages (and a lane when
    /// `lane`) that threads fill from the channel's streams.
    pub fn fetch(&self, address: &str, key: &ChannelKey, capacity: usize, lane: bool) -> Result<ReceiveEnd> {
        let client = self.client(address)?;
        let (send, receive) = local(capacity, lane);
        let ChannelKey { channel, .. } = key;
        let name = |lane: &str| {
            format!(
                "flight-in-{lane}-{}-{}-{}",
                channel.edge, channel.from, channel.to
            )
        };
        let open = |lane: Lane| {
            let mut client = client.clone();
            let ticket = Ticket {
                ticket: key.ticket(lane),
            };
            async move { client.do_get(ticket).await }
        };
        let handle = self.runtime().handle().clone();
        let peer = data::Peer {
            name: format!("the node at {address}"),
            attempt: (key.job.clone(), key.attempt),
            lost: self.lost.clone(),
        };
        data::receive(
            name("data"),
            peer.clone(),
            handle.clone(),
            open(Lane::Data),
            Target::Data(send.data),
        )?;
        if let Some(priority) = send.lane {
            data::receive(
                name("priority"),
                peer,
                handle,
                open(Lane::Priority),
                Target::Priority(priority),
            )?;
        }
        Ok(receive)
    }

    /// The client of the node at `address`: one HTTP/2 connection, made at
    /// the first call, that every channel from there shares.
    fn client(&self, address: &str) -> Result<FlightServiceClient<Channel>> {
        let mut clients = self.clients.lock().expect("clients lock");
        if let Some(client) = clients.get(address) {
            return Ok(client.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{address}"))
            .map_err(|e| Error::Execution(format!("not an address: {address}: {e}")))?
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .tcp_nodelay(true);
        let _context = self.runtime().enter();
        let client = FlightServiceClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        clients.insert(address.to_string(), client.clone());
        Ok(client)
    }
}

impl Drop for FlightNode {
    /// Stops at once: open streams break, as when the process dies.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
