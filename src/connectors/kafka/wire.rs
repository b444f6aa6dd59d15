//! A few Kafka protocol requests over a plain TCP connection, for what the
//! client library does not offer (describing and ending another producer's
//! transaction). Messages are `kafka-protocol`'s; this is only the framing.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

use crate::{Error, Result};

/// One request to the broker at `address` (`host:port`) and its response.
pub fn call<Req, Resp>(address: &str, api: ApiKey, version: i16, request: &Req) -> Result<Resp>
where
    Req: Encodable + HeaderVersion,
    Resp: Decodable + HeaderVersion,
{
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        Error::Execution(format!("Kafka broker {address}: {api:?} request: {what}: {e}"))
    };
    let mut stream = TcpStream::connect(address).map_err(|e| failed("cannot connect", &e))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| failed("socket", &e))?;
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("weir")));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, Req::header_version(version))
        .map_err(|e| failed("encoding", &e))?;
    request
        .encode(&mut body, version)
        .map_err(|e| failed("encoding", &e))?;
    let mut framed = (body.len() as i32).to_be_bytes().to_vec();
    framed.extend_from_slice(&body);
    stream.write_all(&framed).map_err(|e| failed("sending", &e))?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).map_err(|e| failed("reading", &e))?;
    let size = usize::try_from(i32::from_be_bytes(size)).map_err(|e| failed("a negative size", &e))?;
    let mut response = vec![0u8; size];
    stream
        .read_exact(&mut response)
        .map_err(|e| failed("reading", &e))?;
    let mut response = bytes::Bytes::from(response);
    ResponseHeader::decode(&mut response, Resp::header_version(version))
        .map_err(|e| failed("decoding", &e))?;
    Resp::decode(&mut response, version).map_err(|e| failed("decoding", &e))
}
