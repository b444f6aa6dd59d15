//! A channel's two bridges: its local receiving end drained into a Flight stream (upstream), and a Flight stream decoded into a local sending end (downstream).

use std::thread;

use arrow_flight::FlightData;
use crossbeam_channel::{Receiver, Sender};
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};
use weir_runtime::exchange::PriorityBarrier;
use weir_runtime::message::Message;
use weir_runtime::wire::{Decoded, Decoder, Encoder, Frame};

use crate::node::LostConnections;
use crate::{Error, Result};

/// Frames queued between a channel's bridge thread and its stream: few, so
/// that a stalled stream soon stops the bridge and then the sender.
const QUEUED_FRAMES: usize = 4;

/// The stream a `DoGet` answers with.
pub(crate) type FrameStream = ReceiverStream<std::result::Result<FlightData, Status>>;

fn to_flight(frame: Frame) -> FlightData {
    FlightData {
        flight_descriptor: None,
        data_header: frame.ipc_message.into(),
        app_metadata: frame.header.into(),
        data_body: frame.body.into(),
    }
}

fn from_flight(data: FlightData) -> Frame {
    Frame {
        header: data.app_metadata.into(),
        ipc_message: data.data_header.into(),
        body: data.data_body.into(),
    }
}

fn spawn(name: String, work: impl FnOnce() + Send + 'static) -> Result<()> {
    thread::Builder::new()
        .name(name.clone())
        .spawn(work)
        .map(|_| ())
        .map_err(|e| Error::Execution(format!("cannot start thread {name}: {e}")))
}

/// Upstream: a thread encodes every message of `data` onto the stream
/// returned, until the sender hangs up (the stream then ends) or the reader
/// goes away (the receiving end is then dropped, and the sender sees its
/// downstream gone).
pub(crate) fn serve_data(name: String, data: Receiver<Message>) -> Result<FrameStream> {
    let (frames, stream) = mpsc::channel(QUEUED_FRAMES);
    spawn(name, move || {
        let mut encoder = Encoder::default();
        for message in data.iter() {
            let encoded = match encoder.encode(&message) {
                Ok(encoded) => encoded.into_iter().map(|f| Ok(to_flight(f))).collect(),
                Err(e) => vec![Err(Status::internal(e.to_string()))],
            };
            for frame in encoded {
                if frames.blocking_send(frame).is_err() {
                    return;
                }
            }
        }
    })?;
    Ok(ReceiverStream::new(stream))
}

/// Upstream: as [`serve_data`], for the priority lane's barriers.
pub(crate) fn serve_priority(name: String, lane: Receiver<PriorityBarrier>) -> Result<FrameStream> {
    let (frames, stream) = mpsc::channel(QUEUED_FRAMES);
    spawn(name, move || {
        let mut encoder = Encoder::default();
        for barrier in lane.iter() {
            if frames
                .blocking_send(Ok(to_flight(encoder.encode_priority(&barrier))))
                .is_err()
            {
                return;
            }
        }
    })?;
    Ok(ReceiverStream::new(stream))
}

/// Where a downstream bridge puts what it decodes.
pub(crate) enum Target {
    Data(Sender<Message>),
    Priority(Sender<PriorityBarrier>),
}

/// Downstream: a thread reads `stream` (the answer `open` gives, on
/// `runtime`, from the node at `peer`) and puts what it decodes into
/// `into`, blocking while that is full, which stops reading the stream:
/// the channel's backpressure. When the stream ends, `into` is dropped and
/// the reading task sees its upstream gone unless an end-of-stream came
/// first; when it fails, a data lane gets a [`Message::Broken`] naming the
/// peer first, so that the task fails with the root cause.
pub(crate) fn receive<F>(name: String, peer: Peer, runtime: Handle, open: F, into: Target) -> Result<()>
where
    F: Future<Output = std::result::Result<tonic::Response<Streaming<FlightData>>, Status>> + Send + 'static,
{
    spawn(name.clone(), move || {
        if let Err(e) = pump_in(&runtime, open, &into) {
            eprintln!("weir: channel {name} stopped: {e}");
            let detail = match &e {
                Error::Execution(detail) => detail.clone(),
                other => other.to_string(),
            };
            let cause = format!("lost the connection to {}: {detail}", peer.name);
            let mut lost = peer.lost.lock().unwrap_or_else(|e| e.into_inner());
            lost.entry(peer.attempt).or_insert_with(|| cause.clone());
            drop(lost);
            if let Target::Data(to) = into {
                // The reader may be gone already: then nobody needs the cause.
                let _ = to.send(Message::Broken(cause));
            }
        }
    })
}

/// The other end of a channel a node reads, and where the node notes a
/// lost connection of the channel's attempt.
#[derive(Clone)]
pub(crate) struct Peer {
    /// "the node at host:port".
    pub(crate) name: String,
    /// The channel's job and attempt.
    pub(crate) attempt: (String, u32),
    pub(crate) lost: LostConnections,
}

fn pump_in<F>(runtime: &Handle, open: F, into: &Target) -> Result<()>
where
    F: Future<Output = std::result::Result<tonic::Response<Streaming<FlightData>>, Status>>,
{
    let mut stream = runtime.block_on(open).map_err(status_error)?.into_inner();
    let mut decoder = Decoder::default();
    while let Some(data) = runtime.block_on(stream.message()).map_err(status_error)? {
        let sent = match (decoder.decode(&from_flight(data))?, into) {
            (Decoded::Setup, _) => true,
            (Decoded::Message(message), Target::Data(to)) => to.send(message).is_ok(),
            (Decoded::Priority(barrier), Target::Priority(to)) => to.send(barrier).is_ok(),
            _ => return Err(Error::Execution("a frame on the wrong lane".into())),
        };
        if !sent {
            // The reading task is gone: dropping the stream cancels it.
            return Ok(());
        }
    }
    Ok(())
}

fn status_error(status: Status) -> Error {
    Error::Execution(format!("{}: {}", status.code(), status.message()))
}
