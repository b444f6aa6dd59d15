//! Reading a source subtask's partitions with Kafka's `Fetch` request, in a
//! thread of its own (Flink's split fetcher): it asks each partition's
//! leader for records from the subtask's offsets and hands them on, one
//! chunk per partition and response, while the task decodes the previous
//! ones. librdkafka's consumer made an object and a queue entry per record
//! on one thread and took a lock per record on the task's (about 0.8M
//! records/s through `weir bench kafka`'s job, 2.19M events/s through
//! this: docs/kafka.md). Record batches are decoded by [`decode_batch`]
//! (`kafka-protocol` decompresses); which batches a reader sees is [`readable`], a plain
//! function: control batches never, and with `read_committed` not those of
//! aborted transactions.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender, bounded};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse, MetadataRequest,
    MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Record, RecordBatchDecoder, TimestampType};

use crate::kafka::wire::Connection;
use crate::{Error, Result};

const FETCH_VERSION: i16 = 11;
const METADATA_VERSION: i16 = 9;
const LIST_OFFSETS_VERSION: i16 = 5;
/// How long a broker may be unreachable, or a partition without a leader,
/// before the task fails (and restarts from its checkpoint).
const RETRY_FOR: Duration = Duration::from_secs(60);
const BACKOFF: Duration = Duration::from_millis(100);

/// Where reading resumes when an offset is out of range (its records were
/// deleted): `properties.auto.offset.reset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reset {
    /// The partition's first offset.
    Earliest,
    /// The partition's end.
    Latest,
    /// Fail the task.
    Fail,
}

/// How the fetcher reads: from the table's `properties.*`.
#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// `host:port` of the bootstrap brokers.
    pub bootstrap: Vec<String>,
    /// `isolation.level` = `read_committed`.
    pub read_committed: bool,
    /// `fetch.wait.max.ms` (librdkafka's name) or `fetch.max.wait.ms`.
    pub max_wait_ms: i32,
    /// `fetch.min.bytes`.
    pub min_bytes: i32,
    /// `fetch.max.bytes`.
    pub max_bytes: i32,
    /// `max.partition.fetch.bytes`.
    pub partition_max_bytes: i32,
    /// `auto.offset.reset`.
    pub reset: Reset,
}

impl FetchConfig {
    /// The configuration of table `table`'s `properties` (the prefix taken
    /// off); `latest` says whether its startup mode is `latest-offset`
    /// (where an out-of-range offset resets to by default, as Flink's
    /// offsets initializers choose: otherwise the earliest).
    pub fn new(table: &str, bootstrap: &str, properties: &[(String, String)], latest: bool) -> Result<Self> {
        let get = |key: &str| properties.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        let bad = |key: &str, value: &str, accepted: &str| {
            Error::sql(format!(
                "table '{table}': invalid value '{value}' for option 'properties.{key}'; {accepted}"
            ))
        };
        let number = |key: &str, default: i32| -> Result<i32> {
            match get(key) {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse()
                    .ok()
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| bad(key, v, "expected a number of milliseconds or bytes")),
            }
        };
        if let Some(protocol) = get("security.protocol")
            && !protocol.eq_ignore_ascii_case("plaintext")
        {
            return Err(Error::sql(format!(
                "table '{table}': the Kafka source reads over PLAINTEXT connections only; \
                 'properties.security.protocol' = '{protocol}' is not supported yet"
            )));
        }
        let read_committed = match get("isolation.level") {
            None | Some("read_uncommitted") => false,
            Some("read_committed") => true,
            Some(other) => {
                return Err(bad(
                    "isolation.level",
                    other,
                    "expected read_committed or read_uncommitted",
                ));
            }
        };
        let reset = match get("auto.offset.reset") {
            None if latest => Reset::Latest,
            None => Reset::Earliest,
            Some("earliest" | "smallest" | "beginning") => Reset::Earliest,
            Some("latest" | "largest" | "end") => Reset::Latest,
            Some("none" | "error") => Reset::Fail,
            Some(other) => {
                return Err(bad(
                    "auto.offset.reset",
                    other,
                    "expected earliest, latest or none",
                ));
            }
        };
        let wait = match get("fetch.wait.max.ms") {
            Some(_) => number("fetch.wait.max.ms", 500)?,
            None => number("fetch.max.wait.ms", 500)?,
        };
        Ok(FetchConfig {
            bootstrap: bootstrap
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            read_committed,
            max_wait_ms: wait,
            min_bytes: number("fetch.min.bytes", 1)?,
            max_bytes: number("fetch.max.bytes", 52_428_800)?,
            partition_max_bytes: number("max.partition.fetch.bytes", 1_048_576)?,
            reset,
        })
    }
}

/// A partition to read: the reader's index for it, where to start, and
/// (bounded) where to stop.
#[derive(Debug, Clone)]
pub struct Assigned {
    /// The reader's index of the partition (its split).
    pub split: usize,
    /// Its topic.
    pub topic: String,
    /// Its number.
    pub partition: i32,
    /// The offset of the next record to read.
    pub offset: i64,
    /// Bounded: reading stops once the offset reaches it.
    pub stop: Option<i64>,
}

/// Records of one partition from one response, in offset order.
#[derive(Debug)]
pub struct Chunk {
    /// The reader's index of the partition.
    pub split: usize,
    /// The records (control records and, with `read_committed`, aborted
    /// ones left out).
    pub records: Vec<Record>,
    /// Where the partition is after them (past skipped records too).
    pub next_offset: i64,
}

/// The fetcher's thread: chunks arrive on `chunks`; an error ends it.
pub struct FetchThread {
    /// What the thread read, a response's chunks at a time.
    pub chunks: Receiver<Result<Vec<Chunk>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for FetchThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts reading `assigned` in a thread named for `table`.
pub fn spawn(table: &str, config: FetchConfig, assigned: Vec<Assigned>) -> Result<FetchThread> {
    let (sender, chunks) = bounded(4);
    let stop = Arc::new(AtomicBool::new(false));
    let mut fetcher = Fetcher {
        table: table.to_string(),
        config,
        partitions: assigned.into_iter().map(|a| (a, None)).collect(),
        brokers: BTreeMap::new(),
        connections: BTreeMap::new(),
        failing_since: None,
    };
    let stopped = stop.clone();
    std::thread::Builder::new()
        .name(format!("kafka-fetch-{table}"))
        .spawn(move || fetcher.run(&sender, &stopped))
        .map_err(|e| Error::Execution(format!("Kafka table '{table}': cannot start its fetcher: {e}")))?;
    Ok(FetchThread { chunks, stop })
}

struct Fetcher {
    table: String,
    config: FetchConfig,
    /// The partitions not finished, with their leader (node id) once known.
    partitions: Vec<(Assigned, Option<i32>)>,
    /// `host:port` of each node.
    brokers: BTreeMap<i32, String>,
    connections: BTreeMap<i32, Connection>,
    /// Since when brokers or leaders have been failing.
    failing_since: Option<Instant>,
}

impl Fetcher {
    fn run(&mut self, sender: &Sender<Result<Vec<Chunk>>>, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) && !self.partitions.is_empty() {
            match self.round() {
                Ok(chunks) if chunks.is_empty() => {}
                Ok(chunks) => {
                    if sender.send(Ok(chunks)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = sender.send(Err(e));
                    return;
                }
            }
        }
    }

    /// One fetch from every leader: the chunks that came.
    fn round(&mut self) -> Result<Vec<Chunk>> {
        if self.partitions.iter().any(|(_, leader)| leader.is_none()) {
            if let Err(e) = self.refresh_leaders() {
                self.retry(e)?;
                return Ok(Vec::new());
            }
            if let Some((a, _)) = self.partitions.iter().find(|(_, leader)| leader.is_none()) {
                let at = format!("topic '{}', partition {}", a.topic, a.partition);
                self.retry(Error::Execution(format!(
                    "Kafka table '{}': {at} has no leader",
                    self.table
                )))?;
            }
        }
        let nodes: Vec<i32> = {
            let mut nodes: Vec<i32> = self.partitions.iter().filter_map(|(_, l)| *l).collect();
            nodes.sort_unstable();
            nodes.dedup();
            nodes
        };
        let mut sent = Vec::new();
        for node in nodes {
            match self.send_fetch(node) {
                Ok(()) => sent.push(node),
                Err(e) => self.lost(node, e)?,
            }
        }
        let mut chunks = Vec::new();
        for node in sent {
            let response = self
                .connections
                .get_mut(&node)
                .expect("sent on it")
                .receive::<FetchResponse>(ApiKey::Fetch, FETCH_VERSION);
            match response {
                Ok(response) => chunks.extend(self.take_response(node, response)?),
                Err(e) => self.lost(node, e)?,
            }
        }
        if self.partitions.iter().all(|(_, l)| l.is_some()) {
            self.failing_since = None;
        }
        Ok(chunks)
    }

    /// A retriable failure: fails once it has lasted [`RETRY_FOR`].
    fn retry(&mut self, e: Error) -> Result<()> {
        let since = *self.failing_since.get_or_insert_with(Instant::now);
        if since.elapsed() > RETRY_FOR {
            return Err(e);
        }
        std::thread::sleep(BACKOFF);
        Ok(())
    }

    /// The connection to `node` failed: its partitions look for their
    /// leader again.
    fn lost(&mut self, node: i32, e: Error) -> Result<()> {
        self.connections.remove(&node);
        for (_, leader) in &mut self.partitions {
            if *leader == Some(node) {
                *leader = None;
            }
        }
        self.retry(e)
    }

    fn connection(&mut self, node: i32) -> Result<&mut Connection> {
        if !self.connections.contains_key(&node) {
            let address = self.brokers.get(&node).cloned().unwrap_or_default();
            let timeout = Duration::from_millis(self.config.max_wait_ms as u64) + Duration::from_secs(30);
            self.connections
                .insert(node, Connection::open(&address, timeout)?);
        }
        Ok(self.connections.get_mut(&node).expect("inserted"))
    }

    /// Learns each partition's leader (and the brokers) from a bootstrap
    /// broker.
    fn refresh_leaders(&mut self) -> Result<()> {
        let mut topics: Vec<&str> = self.partitions.iter().map(|(a, _)| a.topic.as_str()).collect();
        topics.sort_unstable();
        topics.dedup();
        let request = MetadataRequest::default().with_topics(Some(
            topics
                .iter()
                .map(|t| MetadataRequestTopic::default().with_name(Some(topic_name(t))))
                .collect(),
        ));
        let mut failure = None;
        for address in &self.config.bootstrap {
            let response: Result<MetadataResponse> = Connection::open(address, Duration::from_secs(30))
                .and_then(|mut c| c.call(ApiKey::Metadata, METADATA_VERSION, &request));
            match response {
                Ok(response) => {
                    self.learn(&response);
                    return Ok(());
                }
                Err(e) => failure = Some(e),
            }
        }
        Err(failure
            .unwrap_or_else(|| Error::sql(format!("Kafka table '{}': no bootstrap servers", self.table))))
    }

    fn learn(&mut self, response: &MetadataResponse) {
        for broker in &response.brokers {
            let address = format!("{}:{}", broker.host.as_str(), broker.port);
            if self.brokers.get(&broker.node_id.0) != Some(&address) {
                self.connections.remove(&broker.node_id.0);
            }
            self.brokers.insert(broker.node_id.0, address);
        }
        for (assigned, leader) in &mut self.partitions {
            let found = response
                .topics
                .iter()
                .filter(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == assigned.topic))
                .flat_map(|t| &t.partitions)
                .find(|p| p.partition_index == assigned.partition && p.error_code == 0);
            *leader = found
                .map(|p| p.leader_id.0)
                .filter(|id| *id >= 0 && self.brokers.contains_key(id));
        }
    }

    fn send_fetch(&mut self, node: i32) -> Result<()> {
        let mut topics: Vec<FetchTopic> = Vec::new();
        for (assigned, _) in self.partitions.iter().filter(|(_, l)| *l == Some(node)) {
            let partition = FetchPartition::default()
                .with_partition(assigned.partition)
                .with_fetch_offset(assigned.offset)
                .with_partition_max_bytes(self.config.partition_max_bytes);
            match topics.iter_mut().find(|t| t.topic.0.as_str() == assigned.topic) {
                Some(topic) => topic.partitions.push(partition),
                None => topics.push(
                    FetchTopic::default()
                        .with_topic(topic_name(&assigned.topic))
                        .with_partitions(vec![partition]),
                ),
            }
        }
        let request = FetchRequest::default()
            .with_max_wait_ms(self.config.max_wait_ms)
            .with_min_bytes(self.config.min_bytes)
            .with_max_bytes(self.config.max_bytes)
            .with_isolation_level(i8::from(self.config.read_committed))
            .with_topics(topics);
        self.connection(node)?
            .send(ApiKey::Fetch, FETCH_VERSION, &request)
    }

    /// The chunks of a fetch response from `node`; moves the partitions'
    /// offsets on and handles their errors.
    fn take_response(&mut self, node: i32, response: FetchResponse) -> Result<Vec<Chunk>> {
        if let Some(e) = ResponseError::try_from_code(response.error_code) {
            let failure = Error::Execution(format!("Kafka table '{}': fetching failed: {e:?}", self.table));
            return self.lost(node, failure).map(|()| Vec::new());
        }
        let mut chunks = Vec::new();
        for topic in response.responses {
            for data in topic.partitions {
                let Some(i) = self.partitions.iter().position(|(a, l)| {
                    *l == Some(node)
                        && a.topic == topic.topic.0.as_str()
                        && a.partition == data.partition_index
                }) else {
                    continue;
                };
                if let Some(e) = ResponseError::try_from_code(data.error_code) {
                    self.partition_failed(i, e)?;
                    continue;
                }
                let aborted: Vec<(i64, i64)> = data
                    .aborted_transactions
                    .unwrap_or_default()
                    .iter()
                    .map(|a| (a.producer_id.0, a.first_offset))
                    .collect();
                let (assigned, _) = &self.partitions[i];
                let records = data.records.unwrap_or_default();
                let at = format!("topic '{}', partition {}", assigned.topic, assigned.partition);
                let (records, next) =
                    read_records(&records, assigned.offset, &aborted, self.config.read_committed)
                        .map_err(|e| Error::Execution(format!("Kafka table '{}': {at}: {e}", self.table)))?;
                if next <= assigned.offset {
                    continue;
                }
                let assigned = &mut self.partitions[i].0;
                assigned.offset = next;
                chunks.push(Chunk {
                    split: assigned.split,
                    records,
                    next_offset: next,
                });
            }
        }
        self.partitions
            .retain(|(a, _)| a.stop.is_none_or(|stop| a.offset < stop));
        Ok(chunks)
    }

    /// A partition's error: a moved leader is looked up again, an offset
    /// out of range resets (`auto.offset.reset`), anything else fails.
    fn partition_failed(&mut self, i: usize, e: ResponseError) -> Result<()> {
        let (assigned, leader) = &mut self.partitions[i];
        let at = format!("topic '{}', partition {}", assigned.topic, assigned.partition);
        if e == ResponseError::OffsetOutOfRange {
            let timestamp = match self.config.reset {
                Reset::Earliest => -2,
                Reset::Latest => -1,
                Reset::Fail => {
                    return Err(Error::Execution(format!(
                        "Kafka table '{}': {at}: offset {} is out of range (its records were deleted?), \
                         and 'properties.auto.offset.reset' is none",
                        self.table, assigned.offset
                    )));
                }
            };
            let node = leader.expect("fetched from it");
            let (topic, partition, from) = (assigned.topic.clone(), assigned.partition, assigned.offset);
            let offset = self.list_offset(node, &topic, partition, timestamp)?;
            eprintln!(
                "[WARN] Kafka table '{}': {at}: offset {from} is out of range; reading from {offset} \
                 ('properties.auto.offset.reset')",
                self.table
            );
            self.partitions[i].0.offset = offset;
            return Ok(());
        }
        if e.is_retriable() {
            *leader = None;
            let failure = Error::Execution(format!("Kafka table '{}': {at}: {e:?}", self.table));
            return self.retry(failure);
        }
        Err(Error::Execution(format!(
            "Kafka table '{}': {at}: fetching failed: {e:?}",
            self.table
        )))
    }

    /// The earliest (`-2`) or latest (`-1`) offset of a partition.
    fn list_offset(&mut self, node: i32, topic: &str, partition: i32, timestamp: i64) -> Result<i64> {
        let request = ListOffsetsRequest::default()
            .with_isolation_level(i8::from(self.config.read_committed))
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(vec![
                        ListOffsetsPartition::default()
                            .with_partition_index(partition)
                            .with_timestamp(timestamp),
                    ]),
            ]);
        let response: ListOffsetsResponse =
            self.connection(node)?
                .call(ApiKey::ListOffsets, LIST_OFFSETS_VERSION, &request)?;
        let found = response.topics.iter().flat_map(|t| &t.partitions).next();
        match found {
            Some(p) if p.error_code == 0 => Ok(p.offset),
            other => Err(Error::Execution(format!(
                "Kafka table '{}': topic '{topic}', partition {partition}: cannot list its offsets: {:?}",
                self.table,
                other.and_then(|p| ResponseError::try_from_code(p.error_code))
            ))),
        }
    }
}

fn topic_name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// What a record batch's header says (magic 2; older message sets hold
/// neither transactions nor control records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Where it starts in the response's bytes.
    pub start: usize,
    /// Where it ends (exclusive).
    pub end: usize,
    /// Its last offset (the wrapper's offset for older message sets).
    pub last_offset: i64,
    /// -1 without one.
    pub producer_id: i64,
    /// It belongs to a transaction.
    pub transactional: bool,
    /// It holds a transaction marker.
    pub control: bool,
    /// The broker's append time stands for every record's timestamp.
    pub log_append_time: bool,
    /// Its largest timestamp (the append time, with `log_append_time`).
    pub max_timestamp: i64,
    /// Its format: 2 for record batches, 0 or 1 for older message sets.
    pub magic: i8,
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The headers of the whole batches in `records` (a partial batch at the
/// end, cut by the response's size limit, is left for the next fetch).
pub fn scan_batches(records: &[u8]) -> std::result::Result<Vec<BatchHeader>, String> {
    let mut batches = Vec::new();
    let mut at = 0;
    while records.len() - at >= 17 {
        let base = be_i64(records, at);
        let length = be_i32(records, at + 8);
        let end = at + 12 + usize::try_from(length).map_err(|_| format!("a batch of length {length}"))?;
        if end > records.len() {
            break;
        }
        let magic = records[at + 16];
        let header = if magic >= 2 {
            if length < 49 {
                return Err(format!("a record batch of {length} bytes at offset {base}"));
            }
            let attributes = i16::from_be_bytes([records[at + 21], records[at + 22]]);
            BatchHeader {
                start: at,
                end,
                last_offset: base + i64::from(be_i32(records, at + 23)),
                producer_id: be_i64(records, at + 43),
                transactional: attributes & (1 << 4) != 0,
                control: attributes & (1 << 5) != 0,
                log_append_time: attributes & (1 << 3) != 0,
                max_timestamp: be_i64(records, at + 35),
                magic: magic as i8,
            }
        } else {
            BatchHeader {
                start: at,
                end,
                last_offset: base,
                producer_id: -1,
                transactional: false,
                control: false,
                log_append_time: false,
                max_timestamp: -1,
                magic: magic as i8,
            }
        };
        batches.push(header);
        at = end;
    }
    Ok(batches)
}

/// Which of `batches` a reader sees: never control batches, and with
/// `read_committed` not the batches of the transactions the broker lists
/// as aborted (`aborted`: producer id and first offset), as Kafka's own
/// consumer decides: a producer's transaction is aborted from its first
/// offset until that producer's next control batch (the abort marker).
pub fn readable(batches: &[BatchHeader], aborted: &[(i64, i64)], read_committed: bool) -> Vec<bool> {
    let mut aborted: Vec<(i64, i64)> = aborted.to_vec();
    aborted.sort_by_key(|(_, first)| *first);
    let mut pending = aborted.into_iter().peekable();
    let mut open: HashSet<i64> = HashSet::new();
    batches
        .iter()
        .map(|batch| {
            if read_committed && batch.producer_id >= 0 {
                while let Some((producer, _)) = pending.next_if(|(_, first)| *first <= batch.last_offset) {
                    open.insert(producer);
                }
                if batch.control {
                    open.remove(&batch.producer_id);
                } else if batch.transactional && open.contains(&batch.producer_id) {
                    return false;
                }
            }
            !batch.control
        })
        .collect()
}

/// A zigzag varint (Kafka's `varint` and `varlong` alike) at `*at`.
fn varlong(b: &[u8], at: &mut usize) -> std::result::Result<i64, String> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at).ok_or("a record cut short")?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
        }
    }
    Err("a varint of more than ten bytes".into())
}

/// A key or value of `length` bytes at `*at` (`-1`: none).
fn field(b: &Bytes, at: &mut usize, end: usize) -> std::result::Result<Option<Bytes>, String> {
    let length = varlong(b, at)?;
    if length < 0 {
        return match length {
            -1 => Ok(None),
            _ => Err(format!("a record field of length {length}")),
        };
    }
    let stop = *at + length as usize;
    if stop > end {
        return Err("a record field past its record".into());
    }
    let bytes = b.slice(*at..stop);
    *at = stop;
    Ok(Some(bytes))
}

/// The records of a record batch (magic 2), its CRC checked and its
/// records decompressed. Decoded here rather than by `kafka-protocol`,
/// which reads a record's timestamp delta as a 32-bit varint where Kafka
/// writes a `varlong`: a batch whose timestamps span more than 24 days
/// (librdkafka stamps a record given timestamp 0 with the current time)
/// was misread.
fn decode_batch(bytes: &Bytes, batch: &BatchHeader) -> std::result::Result<Vec<Record>, String> {
    use kafka_protocol::compression::{Decompressor, Gzip, Lz4, Snappy, Zstd};
    let b = &bytes[batch.start..batch.end];
    let crc = u32::from_be_bytes(b[17..21].try_into().expect("4 bytes"));
    if crc32c::crc32c(&b[21..]) != crc {
        return Err(format!(
            "Cyclic redundancy check failed in the batch at offset {}",
            be_i64(b, 0)
        ));
    }
    let attributes = i16::from_be_bytes([b[21], b[22]]);
    let (base_offset, leader_epoch) = (be_i64(b, 0), be_i32(b, 12));
    let (first_timestamp, producer_id) = (be_i64(b, 27), be_i64(b, 43));
    let (producer_epoch, base_sequence) = (i16::from_be_bytes([b[51], b[52]]), be_i32(b, 53));
    let count = usize::try_from(be_i32(b, 57)).map_err(|_| "a negative record count".to_string())?;
    let mut body = bytes.slice(batch.start + 61..batch.end);
    let take = |b: &mut Bytes| Ok(std::mem::take(b));
    let records: Bytes = match attributes & 0x7 {
        0 => Ok(body),
        1 => Gzip::decompress(&mut body, take),
        2 => Snappy::decompress(&mut body, take),
        3 => Lz4::decompress(&mut body, take),
        4 => Zstd::decompress(&mut body, take),
        other => return Err(format!("unknown compression {other}")),
    }
    .map_err(|e| format!("cannot decompress the batch at offset {base_offset}: {e}"))?;
    let mut decoded = Vec::with_capacity(count);
    let mut at = 0;
    for _ in 0..count {
        let length = varlong(&records, &mut at)?;
        let end = at + usize::try_from(length).map_err(|_| format!("a record of length {length}"))?;
        if end > records.len() {
            return Err(format!(
                "a record past the end of the batch at offset {base_offset}"
            ));
        }
        at += 1; // attributes
        let timestamp_delta = varlong(&records, &mut at)?;
        let offset_delta = varlong(&records, &mut at)?;
        let key = field(&records, &mut at, end)?;
        let value = field(&records, &mut at, end)?;
        at = end; // headers: not read
        decoded.push(Record {
            transactional: attributes & (1 << 4) != 0,
            control: attributes & (1 << 5) != 0,
            partition_leader_epoch: leader_epoch,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: base_offset + offset_delta,
            sequence: base_sequence.wrapping_add(offset_delta as i32),
            timestamp: first_timestamp + timestamp_delta,
            key,
            value,
            headers: Default::default(),
        });
    }
    Ok(decoded)
}

/// The records from offset `from` on in a partition's fetched bytes, and
/// the offset after the last whole batch.
pub fn read_records(
    bytes: &Bytes,
    from: i64,
    aborted: &[(i64, i64)],
    read_committed: bool,
) -> std::result::Result<(Vec<Record>, i64), String> {
    let batches = scan_batches(bytes)?;
    let keep = readable(&batches, aborted, read_committed);
    let mut records = Vec::new();
    let mut next = from;
    for (batch, keep) in batches.iter().zip(keep) {
        if keep {
            let batch_records = match batch.magic {
                2.. => decode_batch(bytes, batch)?,
                _ => {
                    let mut buffer = bytes.slice(batch.start..batch.end);
                    RecordBatchDecoder::decode(&mut buffer)
                        .map_err(|e| e.to_string())?
                        .records
                }
            };
            for mut record in batch_records.into_iter().filter(|r| r.offset >= from) {
                if batch.log_append_time {
                    record.timestamp = batch.max_timestamp;
                    record.timestamp_type = TimestampType::LogAppend;
                }
                next = next.max(record.offset + 1);
                records.push(record);
            }
        }
        next = next.max(batch.last_offset + 1);
    }
    Ok((records, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(last_offset: i64, producer_id: i64, transactional: bool, control: bool) -> BatchHeader {
        BatchHeader {
            start: 0,
            end: 0,
            last_offset,
            producer_id,
            transactional,
            control,
            log_append_time: false,
            max_timestamp: -1,
            magic: 2,
        }
    }

    #[test]
    fn control_batches_are_never_read() {
        let batches = [
            batch(4, 7, true, false),
            batch(5, 7, true, true),
            batch(9, -1, false, false),
        ];
        assert_eq!(readable(&batches, &[], false), [true, false, true]);
        assert_eq!(readable(&batches, &[], true), [true, false, true]);
    }

    #[test]
    fn aborted_transactions_are_skipped_only_when_reading_committed() {
        // Producer 7 aborts its transaction at 0..=4 (marker at 5), producer
        // 8 commits one at 6..=8 (marker at 9), producer 7 commits at 10.
        let batches = [
            batch(4, 7, true, false),
            batch(5, 7, true, true),
            batch(8, 8, true, false),
            batch(9, 8, true, true),
            batch(10, 7, true, false),
            batch(11, 7, true, true),
        ];
        let aborted = [(7, 0)];
        assert_eq!(
            readable(&batches, &aborted, true),
            [false, false, true, false, true, false]
        );
        assert_eq!(
            readable(&batches, &aborted, false),
            [true, false, true, false, true, false]
        );
    }

    #[test]
    fn an_aborted_transaction_counts_from_its_first_offset() {
        // Producer 7's first transaction commits (0..=1, marker 2); its
        // second, from 3, is aborted (marker 5).
        let batches = [
            batch(1, 7, true, false),
            batch(2, 7, true, true),
            batch(4, 7, true, false),
            batch(5, 7, true, true),
        ];
        assert_eq!(readable(&batches, &[(7, 3)], true), [true, false, false, false]);
    }

    fn encoded(offsets: std::ops::Range<i64>) -> Vec<u8> {
        encoded_with(offsets, kafka_protocol::records::Compression::None)
    }

    fn encoded_with(
        offsets: std::ops::Range<i64>,
        compression: kafka_protocol::records::Compression,
    ) -> Vec<u8> {
        use kafka_protocol::records::{RecordBatchEncoder, RecordEncodeOptions};
        let records: Vec<Record> = offsets
            .map(|offset| Record {
                transactional: false,
                control: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset,
                sequence: -1,
                timestamp: 1000 + offset,
                key: None,
                value: Some(Bytes::from(format!("v{offset}"))),
                headers: Default::default(),
            })
            .collect();
        let mut buffer = bytes::BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression,
        };
        RecordBatchEncoder::encode(&mut buffer, &records, &options).expect("encodes");
        buffer.to_vec()
    }

    #[test]
    fn records_before_the_fetch_offset_and_a_cut_batch_are_left_out() {
        let mut bytes = encoded(0..5);
        bytes.extend(encoded(5..8));
        let whole = bytes.len();
        bytes.extend(&encoded(8..10)[..20]);
        let bytes = Bytes::from(bytes);
        let (records, next) = read_records(&bytes, 2, &[], false).expect("reads");
        let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [2, 3, 4, 5, 6, 7]);
        assert_eq!(next, 8);
        assert_eq!(records[0].value.as_deref(), Some(&b"v2"[..]));
        // The encoder may write a batch per record: what counts is that the
        // scan stops at the last whole batch, wherever the cut falls.
        let scanned = scan_batches(&bytes).expect("scans");
        assert_eq!(scanned.last().map(|b| (b.end, b.last_offset)), Some((whole, 7)));
    }

    fn put_varlong(out: &mut Vec<u8>, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8 & 0x7f) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }

    /// A record batch written by hand: Kafka's encoders refuse timestamp
    /// deltas beyond 32 bits, which Kafka itself allows (and librdkafka
    /// writes).
    fn batch_with_timestamps(base_offset: i64, timestamps: &[i64]) -> Vec<u8> {
        let mut records = Vec::new();
        for (i, ts) in timestamps.iter().enumerate() {
            let mut body = vec![0u8];
            put_varlong(&mut body, ts - timestamps[0]);
            put_varlong(&mut body, i as i64);
            put_varlong(&mut body, -1);
            let value = format!("v{i}");
            put_varlong(&mut body, value.len() as i64);
            body.extend(value.as_bytes());
            put_varlong(&mut body, 0);
            put_varlong(&mut records, body.len() as i64);
            records.extend(body);
        }
        let mut after_crc = Vec::new();
        after_crc.extend(0i16.to_be_bytes());
        after_crc.extend((timestamps.len() as i32 - 1).to_be_bytes());
        after_crc.extend(timestamps[0].to_be_bytes());
        after_crc.extend(timestamps.iter().max().unwrap().to_be_bytes());
        after_crc.extend((-1i64).to_be_bytes());
        after_crc.extend((-1i16).to_be_bytes());
        after_crc.extend((-1i32).to_be_bytes());
        after_crc.extend((timestamps.len() as i32).to_be_bytes());
        after_crc.extend(records);
        let mut batch = Vec::new();
        batch.extend(base_offset.to_be_bytes());
        batch.extend((after_crc.len() as i32 + 9).to_be_bytes());
        batch.extend(0i32.to_be_bytes());
        batch.push(2);
        batch.extend(crc32c::crc32c(&after_crc).to_be_bytes());
        batch.extend(after_crc);
        batch
    }

    #[test]
    fn timestamps_further_apart_than_32_bits_of_milliseconds_are_read() {
        // librdkafka's stamp of "now" for a record given timestamp 0, then
        // records stamped near the epoch: deltas of minus 56 years.
        let now = 1_796_167_097_828;
        let bytes = Bytes::from(batch_with_timestamps(40, &[now, 4, 8]));
        let (records, next) = read_records(&bytes, 0, &[], false).expect("reads");
        let read: Vec<(i64, i64)> = records.iter().map(|r| (r.offset, r.timestamp)).collect();
        assert_eq!(read, [(40, now), (41, 4), (42, 8)]);
        assert_eq!(records[2].value.as_deref(), Some(&b"v2"[..]));
        assert_eq!(next, 43);
    }

    #[test]
    fn batches_in_every_compression_are_read() {
        use kafka_protocol::records::Compression;
        for compression in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let bytes = Bytes::from(encoded_with(10..14, compression));
            let (records, next) = read_records(&bytes, 11, &[], false).expect("reads");
            let read: Vec<(i64, Option<&[u8]>)> =
                records.iter().map(|r| (r.offset, r.value.as_deref())).collect();
            assert_eq!(
                read,
                [
                    (11, Some(&b"v11"[..])),
                    (12, Some(&b"v12"[..])),
                    (13, Some(&b"v13"[..]))
                ],
                "{compression:?}"
            );
            assert_eq!(next, 14);
        }
    }

    #[test]
    fn a_corrupt_batch_is_an_error() {
        let mut bytes = encoded(0..3);
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        let error = read_records(&Bytes::from(bytes), 0, &[], false).expect_err("CRC");
        assert!(error.contains("Cyclic redundancy check"), "{error}");
    }

    #[test]
    fn fetch_settings_come_from_the_properties() {
        let props = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let config = FetchConfig::new(
            "t",
            "a:1, b:2",
            &props(&[("isolation.level", "read_committed")]),
            false,
        )
        .expect("valid");
        assert_eq!(config.bootstrap, ["a:1", "b:2"]);
        assert!(config.read_committed);
        assert_eq!(config.reset, Reset::Earliest);
        let latest = FetchConfig::new("t", "a:1", &[], true).expect("valid");
        assert_eq!(latest.reset, Reset::Latest);
        let ssl = FetchConfig::new("t", "a:1", &props(&[("security.protocol", "SSL")]), false);
        assert!(ssl.expect_err("refused").to_string().contains("PLAINTEXT"));
        let bad = FetchConfig::new("t", "a:1", &props(&[("fetch.min.bytes", "-3")]), false);
        assert!(bad.expect_err("refused").to_string().contains("fetch.min.bytes"));
    }
}
