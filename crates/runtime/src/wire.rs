//! `Message`s as bytes, for channels that leave the process.
//!
//! A channel's messages become [`Frame`]s, each the three parts of an Arrow
//! Flight `FlightData`: weir's own `header` (what the frame is, and every
//! field of a watermark, status, barrier or end-of-stream), and for batches
//! the Arrow IPC `ipc_message` and `body`. Batches are Arrow IPC: the schema
//! goes once per channel (again when it changes), dictionaries when they
//! change, then each batch as one IPC record batch message. Everything else
//! is a metadata-only frame, so it keeps its place among the batches: a
//! barrier never overtakes data unless it was sent on the priority lane.
//!
//! [`Encoder`] and [`Decoder`] are stateful, one pair per channel, as an IPC
//! stream is. A malformed frame is an error naming what is wrong, never a
//! panic.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::buffer::Buffer;
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::{read_dictionary, read_record_batch};
use arrow::ipc::writer::{
    DictionaryTracker, EncodedData, IpcDataGenerator, IpcWriteContext, IpcWriteOptions,
};
use arrow::ipc::{MessageHeader, convert::fb_to_schema, root_as_message};

use crate::exchange::PriorityBarrier;
use crate::message::{CheckpointBarrier, Message, WatermarkStatus};
use crate::{Error, Result};
use weir_common::ids::BarrierKind;

/// The version of the header layout; a frame of another version is refused.
const VERSION: u8 = 1;

/// What a frame carries: the header's second byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Schema = 1,
    Dictionary = 2,
    Batch = 3,
    Watermark = 4,
    WatermarkStatus = 5,
    Barrier = 6,
    PriorityBarrier = 7,
    EndOfStream = 8,
}

impl Kind {
    fn of(byte: u8) -> Option<Kind> {
        Some(match byte {
            1 => Kind::Schema,
            2 => Kind::Dictionary,
            3 => Kind::Batch,
            4 => Kind::Watermark,
            5 => Kind::WatermarkStatus,
            6 => Kind::Barrier,
            7 => Kind::PriorityBarrier,
            8 => Kind::EndOfStream,
            _ => return None,
        })
    }
}

/// One unit on the wire: `FlightData`'s `app_metadata`, `data_header` and
/// `data_body`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frame {
    /// weir's header: version, kind, and a non-batch message's fields.
    pub header: Vec<u8>,
    /// The Arrow IPC message (schema, dictionary or record batch); empty otherwise.
    pub ipc_message: Vec<u8>,
    /// The Arrow buffers of a dictionary or record batch; empty otherwise.
    pub body: Vec<u8>,
}

impl Frame {
    fn control(kind: Kind, fields: &[u8]) -> Frame {
        let mut header = vec![VERSION, kind as u8];
        header.extend_from_slice(fields);
        Frame {
            header,
            ..Frame::default()
        }
    }

    fn ipc(kind: Kind, data: EncodedData) -> Frame {
        Frame {
            header: vec![VERSION, kind as u8],
            ipc_message: data.ipc_message,
            body: data.arrow_data,
        }
    }

    /// The frame as one length-prefixed byte string (for transports that
    /// carry bytes rather than `FlightData`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(12 + self.header.len() + self.ipc_message.len() + self.body.len());
        for part in [&self.header, &self.ipc_message, &self.body] {
            out.extend_from_slice(&(part.len() as u32).to_le_bytes());
            out.extend_from_slice(part);
        }
        out
    }

    /// Reads a frame written by [`Frame::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Frame> {
        let mut rest = bytes;
        let mut parts = Vec::with_capacity(3);
        for name in ["header", "IPC message", "body"] {
            let (len, tail) = take(rest, 4, name)?;
            let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
            let (part, tail) = take(tail, len, name)?;
            parts.push(part.to_vec());
            rest = tail;
        }
        if !rest.is_empty() {
            return Err(malformed(format!("{} bytes after the frame's body", rest.len())));
        }
        let body = parts.pop().unwrap_or_default();
        let ipc_message = parts.pop().unwrap_or_default();
        let header = parts.pop().unwrap_or_default();
        Ok(Frame {
            header,
            ipc_message,
            body,
        })
    }
}

fn take<'a>(bytes: &'a [u8], len: usize, what: &str) -> Result<(&'a [u8], &'a [u8])> {
    if bytes.len() < len {
        return Err(malformed(format!(
            "its {what} needs {len} bytes, {} are left",
            bytes.len()
        )));
    }
    Ok(bytes.split_at(len))
}

fn malformed(detail: String) -> Error {
    Error::Execution(format!("malformed channel frame: {detail}"))
}

/// What a decoded frame was.
#[derive(Debug, Clone)]
pub enum Decoded {
    /// A message for the channel's data lane.
    Message(Message),
    /// A barrier for the channel's priority lane (unaligned checkpoints).
    Priority(PriorityBarrier),
    /// A schema or dictionary, kept for the batches after it.
    Setup,
}

/// Turns one channel's messages into frames.
pub struct Encoder {
    generator: IpcDataGenerator,
    dictionaries: DictionaryTracker,
    options: IpcWriteOptions,
    context: IpcWriteContext,
    schema: Option<SchemaRef>,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder {
            generator: IpcDataGenerator::default(),
            dictionaries: DictionaryTracker::new(false),
            options: IpcWriteOptions::default(),
            context: IpcWriteContext::default(),
            schema: None,
        }
    }
}

impl Encoder {
    /// The frames of `message`, in order: for a batch, a schema frame when
    /// the schema is new to the channel and a frame per changed dictionary
    /// come before it.
    pub fn encode(&mut self, message: &Message) -> Result<Vec<Frame>> {
        Ok(match message {
            Message::Batch(batch) => {
                let mut frames = Vec::new();
                if self.schema.as_ref() != Some(&batch.schema()) {
                    self.dictionaries = DictionaryTracker::new(false);
                    let schema = self.generator.schema_to_bytes_with_dictionary_tracker(
                        &batch.schema(),
                        &mut self.dictionaries,
                        &self.options,
                    );
                    frames.push(Frame::ipc(Kind::Schema, schema));
                    self.schema = Some(batch.schema());
                }
                let (dictionaries, data) =
                    self.generator
                        .encode(batch, &mut self.dictionaries, &self.options, &mut self.context)?;
                frames.extend(dictionaries.into_iter().map(|d| Frame::ipc(Kind::Dictionary, d)));
                frames.push(Frame::ipc(Kind::Batch, data));
                frames
            }
            Message::Watermark(ts) => vec![Frame::control(Kind::Watermark, &ts.to_le_bytes())],
            Message::WatermarkStatus(status) => vec![Frame::control(
                Kind::WatermarkStatus,
                &[matches!(status, WatermarkStatus::Idle) as u8],
            )],
            Message::Barrier(barrier) => vec![Frame::control(Kind::Barrier, &barrier_fields(barrier))],
            Message::EndOfStream => vec![Frame::control(Kind::EndOfStream, &[])],
            Message::Broken(cause) => {
                return Err(Error::Execution(format!(
                    "a broken channel's notice is not sent on: {cause}"
                )));
            }
        })
    }

    /// The frame of a barrier sent ahead of the data (unaligned checkpoints).
    pub fn encode_priority(&mut self, priority: &PriorityBarrier) -> Frame {
        let mut fields = barrier_fields(&priority.barrier).to_vec();
        fields.extend_from_slice(&priority.sequence.to_le_bytes());
        Frame::control(Kind::PriorityBarrier, &fields)
    }
}

/// A barrier's id, kind and timestamp: 17 bytes.
fn barrier_fields(barrier: &CheckpointBarrier) -> [u8; 17] {
    let mut fields = [0u8; 17];
    fields[..8].copy_from_slice(&barrier.id.to_le_bytes());
    fields[8] = match barrier.kind {
        BarrierKind::Checkpoint => 0,
        BarrierKind::Savepoint => 1,
    };
    fields[9..].copy_from_slice(&barrier.timestamp.to_le_bytes());
    fields
}

/// Turns one channel's frames back into messages.
#[derive(Default)]
pub struct Decoder {
    schema: Option<SchemaRef>,
    dictionaries: HashMap<i64, ArrayRef>,
}

impl Decoder {
    /// What `frame` carries; schemas and dictionaries are kept for the
    /// batches after them.
    pub fn decode(&mut self, frame: &Frame) -> Result<Decoded> {
        let (kind, fields) = match frame.header.as_slice() {
            [VERSION, kind, fields @ ..] => match Kind::of(*kind) {
                Some(kind) => (kind, fields),
                None => return Err(malformed(format!("unknown kind {kind}"))),
            },
            [version, ..] => {
                return Err(malformed(format!(
                    "header version {version}, this weir reads version {VERSION}"
                )));
            }
            [] => return Err(malformed("empty header".into())),
        };
        Ok(match kind {
            Kind::Schema | Kind::Dictionary | Kind::Batch => self.decode_ipc(kind, frame)?,
            Kind::Watermark => Decoded::Message(Message::Watermark(i64::from_le_bytes(fixed(
                fields,
                "watermark",
            )?))),
            Kind::WatermarkStatus => Decoded::Message(Message::WatermarkStatus(
                match fixed::<1>(fields, "watermark status")?[0] {
                    0 => WatermarkStatus::Active,
                    1 => WatermarkStatus::Idle,
                    other => return Err(malformed(format!("watermark status {other}"))),
                },
            )),
            Kind::Barrier => Decoded::Message(Message::Barrier(barrier(&fixed::<17>(fields, "barrier")?)?)),
            Kind::PriorityBarrier => {
                let fields = fixed::<25>(fields, "priority barrier")?;
                Decoded::Priority(PriorityBarrier {
                    barrier: barrier(&fields[..17])?,
                    sequence: u64::from_le_bytes(fields[17..].try_into().expect("8 bytes")),
                })
            }
            Kind::EndOfStream => {
                fixed::<0>(fields, "end of stream")?;
                Decoded::Message(Message::EndOfStream)
            }
        })
    }

    fn decode_ipc(&mut self, kind: Kind, frame: &Frame) -> Result<Decoded> {
        let message = root_as_message(&frame.ipc_message)
            .map_err(|e| malformed(format!("its Arrow IPC message does not parse: {e}")))?;
        let version = message.version();
        let body = Buffer::from(frame.body.as_slice());
        match (kind, message.header_type()) {
            (Kind::Schema, MessageHeader::Schema) => {
                let schema = message.header_as_schema().expect("schema header");
                self.schema = Some(Arc::new(fb_to_schema(schema)));
                self.dictionaries.clear();
                Ok(Decoded::Setup)
            }
            (Kind::Dictionary, MessageHeader::DictionaryBatch) => {
                let dictionary = message.header_as_dictionary_batch().expect("dictionary header");
                let schema = self.schema()?.clone();
                read_dictionary(&body, dictionary, &schema, &mut self.dictionaries, &version)?;
                Ok(Decoded::Setup)
            }
            (Kind::Batch, MessageHeader::RecordBatch) => {
                let batch = message.header_as_record_batch().expect("record batch header");
                let schema = self.schema()?.clone();
                let batch = read_record_batch(&body, batch, schema, &self.dictionaries, None, &version)?;
                Ok(Decoded::Message(Message::Batch(batch)))
            }
            (kind, header) => Err(malformed(format!(
                "a {kind:?} frame holds an Arrow IPC {} message",
                header.variant_name().unwrap_or("unknown")
            ))),
        }
    }

    fn schema(&self) -> Result<&SchemaRef> {
        self.schema
            .as_ref()
            .ok_or_else(|| malformed("a batch or dictionary before the channel's schema".into()))
    }
}

fn fixed<const N: usize>(fields: &[u8], what: &str) -> Result<[u8; N]> {
    fields.try_into().map_err(|_| {
        malformed(format!(
            "a {what} has {N} bytes of fields, this one {}",
            fields.len()
        ))
    })
}

fn barrier(fields: &[u8]) -> Result<CheckpointBarrier> {
    Ok(CheckpointBarrier {
        id: u64::from_le_bytes(fields[..8].try_into().expect("8 bytes")),
        kind: match fields[8] {
            0 => BarrierKind::Checkpoint,
            1 => BarrierKind::Savepoint,
            other => return Err(malformed(format!("barrier kind {other}"))),
        },
        timestamp: i64::from_le_bytes(fields[9..17].try_into().expect("8 bytes")),
    })
}

#[cfg(test)]
mod tests;
