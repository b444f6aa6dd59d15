//! The Kafka source: each partition is a split, spread over the subtasks
//! (partition `i` of the sorted list to subtask `i % parallelism`); a
//! split's position is the offset of its next record, saved in every
//! checkpoint and restored exactly, at any parallelism. Batches hold one
//! partition's records each, so watermarks are per partition (see
//! the operators' `split_watermarks`). When a checkpoint completes, its
//! offsets are committed to the consumer group, for monitoring only.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use crossbeam_channel::RecvTimeoutError;
use kafka_protocol::records::TimestampType;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::kafka::client::{self, Partition};
use crate::kafka::fetch::{self, Assigned, Chunk, FetchConfig, FetchThread};
use crate::kafka::layout::{Layout, Record};
use crate::kafka::options::{Offsets, SourceOptions, Topics};
use crate::{Error, Result};
use weir_common::config::SessionConfig;
use weir_common::ids::CheckpointId;
use weir_plan::table::TableDef;
use weir_runtime::operator::TaskMetrics;
use weir_runtime::{SourceFactory, SourcePoll, SourceReader, SplitId, TaskContext};

/// How long a poll waits for records when none are there (the task checks
/// for barriers between polls); the fetcher reads meanwhile.
const POLL_WAIT: Duration = Duration::from_millis(10);

/// The Kafka source of a table.
#[derive(Debug)]
pub struct KafkaSourceFactory {
    table: String,
    options: Arc<SourceOptions>,
    fetch: FetchConfig,
    layout: Arc<Layout>,
    /// The topics' partitions when the query was planned.
    partitions: Vec<Partition>,
    idle_timeout: Option<Duration>,
    /// `upsert-kafka`: the key's columns in the output.
    upsert_key: Option<Vec<usize>>,
}

impl KafkaSourceFactory {
    /// The source of `table`'s columns `projection` (of its read schema),
    /// produced as `schema`; lists the topics' partitions.
    pub fn try_new(
        table: &TableDef,
        projection: &[usize],
        schema: SchemaRef,
        config: &SessionConfig,
    ) -> Result<Arc<dyn SourceFactory>> {
        super::validate(table)?;
        let options = SourceOptions::parse(table)?;
        options.check_group(table)?;
        let upsert_key = match super::layout::is_upsert(table) {
            true => Some(
                table
                    .primary_key
                    .iter()
                    .map(|k| schema.index_of(k))
                    .collect::<std::result::Result<Vec<_>, _>>()?,
            ),
            false => None,
        };
        let layout = Layout::new(table, projection, schema)?;
        let latest = options.startup == Offsets::Latest;
        let fetch = FetchConfig::new(&table.name, &options.bootstrap, &options.properties, latest)?;
        let consumer = client::consumer(&table.name, &options)?;
        let partitions = client::list_partitions(&table.name, &consumer, &options.topics)?;
        Ok(Arc::new(KafkaSourceFactory {
            table: table.name.clone(),
            options: Arc::new(options),
            fetch,
            layout: Arc::new(layout),
            partitions,
            idle_timeout: table.idle_timeout(config)?,
            upsert_key,
        }))
    }
}

/// `earliest-offset` etc., for EXPLAIN.
fn mode_name(offsets: &Offsets) -> String {
    match offsets {
        Offsets::Earliest => "earliest-offset".into(),
        Offsets::Latest => "latest-offset".into(),
        Offsets::Group => "group-offsets".into(),
        Offsets::Timestamp(ts) => format!("timestamp({ts})"),
        Offsets::Specific(o) => format!(
            "specific-offsets({})",
            o.iter()
                .map(|(p, o)| format!("{p}:{o}"))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

impl SourceFactory for KafkaSourceFactory {
    fn describe(&self) -> String {
        let topics = match &self.options.topics {
            Topics::Names(names) => format!("topics=[{}]", names.join(", ")),
            Topics::Pattern(p) => format!("topic-pattern=[{}]", p.as_str()),
        };
        let partitions: Vec<String> = self.partitions.iter().map(|(t, p)| format!("{t}-{p}")).collect();
        let bounded = self
            .options
            .bounded
            .as_ref()
            .map(|b| format!(", bounded={}", mode_name(b)))
            .unwrap_or_default();
        format!(
            "Source: {}[{}, {topics}, partitions=[{}], {}, startup={}{bounded}]",
            self.table,
            if self.upsert_key.is_some() {
                "upsert-kafka"
            } else {
                "kafka"
            },
            partitions.join(", "),
            self.layout.formats(),
            mode_name(&self.options.startup)
        )
    }

    fn is_bounded(&self) -> bool {
        self.options.bounded.is_some()
    }

    fn allows_idle_subtasks(&self) -> bool {
        true
    }

    fn upsert_key(&self) -> Option<Vec<usize>> {
        self.upsert_key.clone()
    }

    fn idle_timeout(&self) -> Option<Duration> {
        self.idle_timeout
    }

    fn supports_checkpoints(&self) -> bool {
        true
    }

    fn create_reader(&self, ctx: &TaskContext) -> Result<Box<dyn SourceReader>> {
        let count = self.partitions.len() as u64;
        let splits = self
            .partitions
            .iter()
            .enumerate()
            .filter(|(i, _)| i % ctx.parallelism == ctx.subtask)
            .map(|(i, (topic, partition))| Split::fresh(i as u64, count, topic, *partition))
            .collect();
        Ok(Box::new(KafkaReader {
            table: self.table.clone(),
            options: self.options.clone(),
            fetch_config: self.fetch.clone(),
            layout: self.layout.clone(),
            listed: self.partitions.clone(),
            splits,
            consumer: None,
            fetch: None,
            announce: false,
            ready: VecDeque::new(),
            commits: BTreeMap::new(),
            batch_size: ctx.batch_size,
            metrics: ctx.metrics.clone(),
            subtask: ctx.subtask,
            parallelism: ctx.parallelism,
            restored: false,
        }))
    }
}

/// One partition a subtask reads.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Split {
    /// Its place in the source's sorted partitions (when the job was
    /// created, then partitions found later after them).
    index: u64,
    /// How many partitions the source has.
    count: u64,
    topic: String,
    partition: i32,
    /// The offset of its next record; `None` until the startup mode is
    /// resolved.
    offset: Option<i64>,
    /// Bounded: where it ends (exclusive), once resolved.
    stop: Option<i64>,
    /// Read to its end (bounded).
    done: bool,
}

impl Split {
    fn fresh(index: u64, count: u64, topic: &str, partition: i32) -> Split {
        Split {
            index,
            count,
            topic: topic.to_string(),
            partition,
            offset: None,
            stop: None,
            done: false,
        }
    }

    fn id(&self) -> SplitId {
        self.index as SplitId
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "index": self.index,
            "count": self.count,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "stop": self.stop,
            "done": self.done,
        })
    }

    fn from_json(value: &serde_json::Value) -> Option<Split> {
        Some(Split {
            index: value["index"].as_u64()?,
            count: value["count"].as_u64()?,
            topic: value["topic"].as_str()?.to_string(),
            partition: i32::try_from(value["partition"].as_i64()?).ok()?,
            offset: Some(value["offset"].as_i64()?),
            stop: value["stop"].as_i64(),
            done: value["done"].as_bool()?,
        })
    }
}

/// A decoded batch waiting to be emitted, with where its split is after it.
struct Ready {
    split: usize,
    batch: RecordBatch,
    next_offset: i64,
    /// The split reached its end with it.
    done: bool,
}

struct KafkaReader {
    table: String,
    options: Arc<SourceOptions>,
    layout: Arc<Layout>,
    /// Every partition of the source now (to find new ones after a restore).
    listed: Vec<Partition>,
    splits: Vec<Split>,
    fetch_config: FetchConfig,
    /// Created on the first poll (or snapshot): for offsets and commits.
    consumer: Option<BaseConsumer>,
    /// Reads the unfinished splits (from the first poll).
    fetch: Option<FetchThread>,
    /// The set of active splits changed: tell the task.
    announce: bool,
    ready: VecDeque<Ready>,
    /// Offsets saved per checkpoint, committed to the group when it completes.
    commits: BTreeMap<CheckpointId, Vec<(String, i32, i64)>>,
    batch_size: usize,
    metrics: Arc<TaskMetrics>,
    subtask: usize,
    parallelism: usize,
    /// Restored from a checkpoint: splits without an offset are partitions
    /// found since, read from their earliest offset.
    restored: bool,
}

impl KafkaReader {
    /// Creates the consumer, resolves the startup and bounded offsets of
    /// splits that have none, and assigns the unfinished splits.
    fn start(&mut self) -> Result<()> {
        let consumer = client::consumer(&self.table, &self.options)?;
        let reset = self
            .options
            .properties
            .iter()
            .find(|(k, _)| k == "auto.offset.reset")
            .map(|(_, v)| v.as_str());
        let unresolved: Vec<usize> = (0..self.splits.len())
            .filter(|i| self.splits[*i].offset.is_none())
            .collect();
        let partitions: Vec<Partition> = unresolved
            .iter()
            .map(|i| (self.splits[*i].topic.clone(), self.splits[*i].partition))
            .collect();
        if !partitions.is_empty() {
            let startup = match self.restored {
                true => &Offsets::Earliest,
                false => &self.options.startup,
            };
            let starts = client::resolve(&self.table, &consumer, &partitions, startup, reset, false)?;
            for (i, start) in unresolved.iter().zip(starts) {
                self.splits[*i].offset = Some(start);
            }
        }
        if let Some(bounded) = &self.options.bounded {
            let open: Vec<usize> = (0..self.splits.len())
                .filter(|i| self.splits[*i].stop.is_none())
                .collect();
            let partitions: Vec<Partition> = open
                .iter()
                .map(|i| (self.splits[*i].topic.clone(), self.splits[*i].partition))
                .collect();
            if !partitions.is_empty() {
                let stops = client::resolve(&self.table, &consumer, &partitions, bounded, reset, true)?;
                for (i, stop) in open.iter().zip(stops) {
                    self.splits[*i].stop = Some(stop);
                }
            }
        }
        for split in &mut self.splits {
            if split
                .stop
                .is_some_and(|stop| split.offset.is_some_and(|o| o >= stop))
            {
                split.done = true;
            }
        }
        let assigned = (0..self.splits.len())
            .filter(|i| !self.splits[*i].done)
            .map(|i| Assigned {
                split: i,
                topic: self.splits[i].topic.clone(),
                partition: self.splits[i].partition,
                offset: self.splits[i].offset.expect("resolved above"),
                stop: self.splits[i].stop,
            })
            .collect();
        self.fetch = Some(fetch::spawn(&self.table, self.fetch_config.clone(), assigned)?);
        self.consumer = Some(consumer);
        self.announce = true;
        Ok(())
    }

    fn active_splits(&self) -> Vec<SplitId> {
        self.splits.iter().filter(|s| !s.done).map(Split::id).collect()
    }

    /// Takes what the fetcher has read (waiting a little for the first
    /// chunk), decoded into batches of one partition each; returns whether
    /// anything came.
    fn fill(&mut self) -> Result<bool> {
        let fetch = self.fetch.as_ref().expect("started");
        let first = match fetch.chunks.recv_timeout(POLL_WAIT) {
            Ok(chunks) => chunks?,
            Err(RecvTimeoutError::Timeout) => return Ok(false),
            // It ends when every split is read to its end (bounded), after
            // handing everything over; otherwise it died.
            Err(RecvTimeoutError::Disconnected) if self.splits.iter().all(|s| s.done) => return Ok(false),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Error::Execution(format!(
                    "Kafka table '{}': its fetcher thread ended unexpectedly",
                    self.table
                )));
            }
        };
        let mut chunks = first;
        let mut count: usize = chunks.iter().map(|c| c.records.len()).sum();
        while count < self.batch_size {
            match fetch.chunks.try_recv() {
                Ok(more) => {
                    let more = more?;
                    count += more.iter().map(|c| c.records.len()).sum::<usize>();
                    chunks.extend(more);
                }
                Err(_) => break,
            }
        }
        for chunk in chunks {
            self.decode_chunk(chunk)?;
        }
        Ok(true)
    }

    /// A chunk's records as batches of at most a batch size, up to the
    /// split's stop.
    fn decode_chunk(&mut self, chunk: Chunk) -> Result<()> {
        let split = chunk.split;
        let stop = self.splits[split].stop;
        let within = chunk
            .records
            .iter()
            .take_while(|r| stop.is_none_or(|stop| r.offset < stop))
            .count();
        let end = stop.map_or(chunk.next_offset, |stop| chunk.next_offset.min(stop));
        let pieces: Vec<&[kafka_protocol::records::Record]> = match within {
            0 => vec![&[]],
            _ => chunk.records[..within].chunks(self.batch_size.max(1)).collect(),
        };
        let last = pieces.len() - 1;
        for (n, piece) in pieces.into_iter().enumerate() {
            let records: Vec<Record> = piece.iter().map(record_of).collect();
            let (topic, partition) = (&self.splits[split].topic, self.splits[split].partition);
            let (batch, skipped) = self.layout.decode(topic, partition, &records)?;
            TaskMetrics::add(&self.metrics.parse_errors_skipped, skipped);
            let next_offset = match n == last {
                true => end,
                false => piece.last().map_or(end, |r| r.offset + 1),
            };
            self.ready.push_back(Ready {
                split,
                batch,
                next_offset,
                done: n == last && stop.is_some_and(|stop| end >= stop),
            });
        }
        Ok(())
    }
}

fn record_of(record: &kafka_protocol::records::Record) -> Record<'_> {
    let (timestamp, timestamp_type) = match record.timestamp_type {
        _ if record.timestamp < 0 => (None, "NoTimestampType"),
        TimestampType::Creation => (Some(record.timestamp), "CreateTime"),
        TimestampType::LogAppend => (Some(record.timestamp), "LogAppendTime"),
    };
    Record {
        key: record.key.as_deref(),
        value: record.value.as_deref(),
        offset: record.offset,
        timestamp,
        timestamp_type,
        leader_epoch: (record.partition_leader_epoch >= 0).then_some(record.partition_leader_epoch),
    }
}

impl SourceReader for KafkaReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        if self.consumer.is_none() {
            self.start()?;
        }
        loop {
            if std::mem::take(&mut self.announce) {
                return Ok(SourcePoll::Splits(self.active_splits()));
            }
            if let Some(ready) = self.ready.pop_front() {
                let split = &mut self.splits[ready.split];
                split.offset = Some(ready.next_offset);
                if ready.done && !split.done {
                    split.done = true;
                    self.announce = true;
                }
                if ready.batch.num_rows() > 0 {
                    return Ok(SourcePoll::SplitBatch(split.id(), ready.batch));
                }
                continue;
            }
            if self.splits.iter().all(|s| s.done) && self.options.bounded.is_some() {
                return Ok(SourcePoll::End);
            }
            if self.splits.iter().all(|s| s.done) {
                return Ok(SourcePoll::Idle(Duration::from_millis(100)));
            }
            if !self.fill()? {
                return Ok(SourcePoll::Idle(Duration::ZERO));
            }
        }
    }

    fn snapshot_position(&mut self, checkpoint: CheckpointId) -> Result<serde_json::Value> {
        if self.consumer.is_none() {
            self.start()?;
        }
        if self.options.group_id.is_some() {
            let offsets = self
                .splits
                .iter()
                .filter_map(|s| Some((s.topic.clone(), s.partition, s.offset?)))
                .collect();
            self.commits.insert(checkpoint, offsets);
        }
        let partitions: Vec<serde_json::Value> = self
            .listed
            .iter()
            .map(|(t, p)| serde_json::json!([t, p]))
            .collect();
        Ok(serde_json::json!({
            "splits": self.splits.iter().map(Split::to_json).collect::<Vec<_>>(),
            "partitions": partitions,
        }))
    }

    fn restore_position(&mut self, position: &serde_json::Value) -> Result<()> {
        let bad = || Error::State(format!("Kafka position {position} is not one this source wrote"));
        let saved = position["splits"].as_array().ok_or_else(bad)?;
        let mut splits = saved
            .iter()
            .map(Split::from_json)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad)?;
        let known: Vec<Partition> = position["partitions"]
            .as_array()
            .ok_or_else(bad)?
            .iter()
            .map(|p| Some((p[0].as_str()?.to_string(), i32::try_from(p[1].as_i64()?).ok()?)))
            .collect::<Option<_>>()
            .ok_or_else(bad)?;
        // Partitions created since the checkpoint follow the known ones, and
        // are read from their earliest offset (as Flink reads partitions it
        // discovers).
        let new: Vec<Partition> = self
            .listed
            .iter()
            .filter(|p| !known.contains(p))
            .cloned()
            .collect();
        let count = (known.len() + new.len()) as u64;
        for split in &mut splits {
            split.count = count;
        }
        for (j, (topic, partition)) in new.iter().enumerate() {
            let index = (known.len() + j) as u64;
            if index as usize % self.parallelism == self.subtask {
                splits.push(Split::fresh(index, count, topic, *partition));
            }
        }
        // The partitions in the order of their indices.
        self.listed = known.into_iter().chain(new).collect();
        self.splits = splits;
        self.restored = true;
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<()> {
        let Some(offsets) = self.commits.remove(&checkpoint) else {
            return Ok(());
        };
        self.commits.retain(|id, _| *id > checkpoint);
        let (Some(consumer), false) = (&self.consumer, offsets.is_empty()) else {
            return Ok(());
        };
        let mut list = TopicPartitionList::new();
        for (topic, partition, offset) in &offsets {
            let _ = list.add_partition_offset(topic, *partition, Offset::Offset(*offset));
        }
        // For monitoring only: a failure is reported, never a task failure.
        if let Err(e) = consumer.commit(&list, CommitMode::Sync) {
            eprintln!(
                "[WARN] Kafka table '{}': committing the offsets of checkpoint {checkpoint} failed: {e}",
                self.table
            );
        }
        Ok(())
    }
}
