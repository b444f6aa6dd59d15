//! The control plane's messages on the wire: JSON, through tonic's codec traits.

use std::marker::PhantomData;

use bytes::{Buf, BufMut};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// Sends `T` and receives `U` as JSON.
#[derive(Debug)]
pub struct JsonCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for JsonCodec<T, U> {
    fn default() -> Self {
        JsonCodec(PhantomData)
    }
}

/// Writes one message as JSON.
#[derive(Debug)]
pub struct JsonEncoder<T>(PhantomData<T>);

/// Reads one message from JSON.
#[derive(Debug)]
pub struct JsonDecoder<U>(PhantomData<U>);

impl<T: Serialize> Encoder for JsonEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        serde_json::to_writer(buf.writer(), &item)
            .map_err(|e| Status::internal(format!("cannot write a message: {e}")))
    }
}

impl<U: DeserializeOwned> Decoder for JsonDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        if !buf.has_remaining() {
            return Ok(None);
        }
        serde_json::from_reader(buf.reader())
            .map(Some)
            .map_err(|e| Status::invalid_argument(format!("not a weir cluster message: {e}")))
    }
}

impl<T, U> Codec for JsonCodec<T, U>
where
    T: Serialize + Send + 'static,
    U: DeserializeOwned + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = JsonEncoder<T>;
    type Decoder = JsonDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        JsonEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        JsonDecoder(PhantomData)
    }
}
