//! A few Kafka protocol requests over a plain TCP connection, for what the
//! client library does not offer (describing and ending another producer's
//! transaction, and reading partitions fast: [`super::fetch`]). Messages
//! are `kafka-protocol`'s; this is only the framing.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

use crate::{Error, Result};

/// One request to the broker at `address` (`host:port`) and its response,
/// on a connection of its own.
pub fn call<Req, Resp>(address: &str, api: ApiKey, version: i16, request: &Req) -> Result<Resp>
where
    Req: Encodable + HeaderVersion,
    Resp: Decodable + HeaderVersion,
{
    Connection::open(address, Duration::from_secs(30))?.call(api, version, request)
}

/// A connection to one broker, for requests one after another.
pub struct Connection {
    address: String,
    stream: TcpStream,
    correlation: i32,
}

impl Connection {
    /// Connects to `address` (`host:port`); a response may take `timeout`.
    pub fn open(address: &str, timeout: Duration) -> Result<Connection> {
        let failed =
            |e: std::io::Error| Error::Execution(format!("Kafka broker {address}: cannot connect: {e}"));
        let stream = TcpStream::connect(address).map_err(failed)?;
        stream.set_read_timeout(Some(timeout)).map_err(failed)?;
        stream.set_nodelay(true).map_err(failed)?;
        Ok(Connection {
            address: address.to_string(),
            stream,
            correlation: 0,
        })
    }

    /// Sends `request` and reads its response.
    pub fn call<Req, Resp>(&mut self, api: ApiKey, version: i16, request: &Req) -> Result<Resp>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable + HeaderVersion,
    {
        self.send(api, version, request)?;
        self.receive(api, version)
    }

    /// Sends `request`; [`Connection::receive`] reads its response (so
    /// several brokers can work on requests at once).
    pub fn send<Req>(&mut self, api: ApiKey, version: i16, request: &Req) -> Result<()>
    where
        Req: Encodable + HeaderVersion,
    {
        self.correlation = self.correlation.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("weir")));
        let mut body = BytesMut::new();
        body.extend_from_slice(&[0; 4]);
        header
            .encode(&mut body, Req::header_version(version))
            .map_err(|e| self.failed(api, "encoding", &e))?;
        request
            .encode(&mut body, version)
            .map_err(|e| self.failed(api, "encoding", &e))?;
        let size = (body.len() - 4) as i32;
        body[..4].copy_from_slice(&size.to_be_bytes());
        self.stream
            .write_all(&body)
            .map_err(|e| self.failed(api, "sending", &e))
    }

    /// Reads the response to the request sent last.
    pub fn receive<Resp>(&mut self, api: ApiKey, version: i16) -> Result<Resp>
    where
        Resp: Decodable + HeaderVersion,
    {
        let mut size = [0u8; 4];
        self.stream
            .read_exact(&mut size)
            .map_err(|e| self.failed(api, "reading", &e))?;
        let size =
            usize::try_from(i32::from_be_bytes(size)).map_err(|e| self.failed(api, "a negative size", &e))?;
        let mut response = vec![0u8; size];
        self.stream
            .read_exact(&mut response)
            .map_err(|e| self.failed(api, "reading", &e))?;
        let mut response = bytes::Bytes::from(response);
        let header = ResponseHeader::decode(&mut response, Resp::header_version(version))
            .map_err(|e| self.failed(api, "decoding", &e))?;
        if header.correlation_id != self.correlation {
            let ids = format!(
                "correlation id {} for {}",
                header.correlation_id, self.correlation
            );
            return Err(self.failed(api, "a response out of order", &ids));
        }
        Resp::decode(&mut response, version).map_err(|e| self.failed(api, "decoding", &e))
    }

    fn failed(&self, api: ApiKey, what: &str, e: &dyn std::fmt::Display) -> Error {
        Error::Execution(format!(
            "Kafka broker {}: {api:?} request: {what}: {e}",
            self.address
        ))
    }
}
