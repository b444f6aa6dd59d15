//! The Kafka sink, with Flink's delivery guarantees:
//! - `none`: records are sent, nothing waits for them;
//! - `at-least-once`: at every checkpoint barrier the producer is flushed
//!   (every record acknowledged) before the barrier passes;
//! - `exactly-once`: each subtask writes into a transaction that the next
//!   barrier pre-commits (flushes, and records in the checkpoint by its
//!   transactional id, producer id and epoch) and that is committed when the
//!   checkpoint completes. A restore commits what its checkpoint recorded
//!   ([`super::transactions`]) and aborts what the crashed run left open.
//!
//! Commits run on a committer thread of the writer's, so the task goes on
//! writing the next transaction meanwhile (a commit waits for the
//! coordinator's answer); a failed commit fails the task at its next write
//! or barrier, and a restore then commits the transaction from its
//! record. Once the input has ended, commits are made on the task, so the
//! job finishes only when its last transaction is committed; a writer
//! dropped (the job stopped with a savepoint) waits for the commits under
//! way.
//!
//! Transactional ids are `{prefix}-{subtask}-{n}`, `n` counting the
//! subtask's transactions: an id is never reused for a transaction before
//! the checkpoint that names the next `n`, so a recorded id cannot stand
//! for a later transaction. Each transaction has its own producer (a
//! librdkafka producer has one transactional id for its life).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use arrow::array::Array;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use crossbeam_channel::{Sender, unbounded};
use rdkafka::ClientConfig;
use rdkafka::client::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use serde::{Deserialize, Serialize};

use crate::format::records::RecordFormat;
use crate::kafka::client::kafka_error;
use crate::kafka::options::{Delivery, delivery, properties};
use crate::kafka::transactions::{Recorded, commit_recorded, describe, describe_known};
use crate::{Error, Result};
use crate::{SinkFactory, SinkWriter};
use weir_common::changelog::RowKind;
use weir_common::ids::CheckpointId;
use weir_plan::table::TableDef;
use weir_runtime::TaskContext;

/// How long flushing, committing and starting a transaction may take.
const TIMEOUT: Duration = Duration::from_secs(60);

/// `sink.partitioner`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partitioner {
    /// `default`: by the key's hash (murmur2, as the Java client), records
    /// without a key spread.
    Default,
    /// `fixed`: each subtask writes to one partition (`subtask % partitions`).
    Fixed,
    /// `round-robin`: each subtask cycles through the partitions.
    RoundRobin,
}

/// The Kafka sink of a table.
#[derive(Debug)]
pub struct KafkaSinkFactory {
    table: String,
    topic: String,
    bootstrap: String,
    properties: Vec<(String, String)>,
    delivery: Delivery,
    prefix: Option<String>,
    partitioner: Partitioner,
    encoder: Arc<RowEncoder>,
    /// `upsert-kafka`: takes updates, a delete is a tombstone.
    upsert: bool,
}

/// A row as a Kafka record.
struct OutRecord {
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    timestamp: Option<i64>,
}

/// How rows become records: value and key columns in their formats, and the
/// record's timestamp from a `timestamp` metadata column.
#[derive(Debug)]
struct RowEncoder {
    value: RecordFormat,
    value_columns: Vec<usize>,
    key: Option<(RecordFormat, Vec<usize>)>,
    timestamp: Option<usize>,
}

impl KafkaSinkFactory {
    /// The sink of `table`, receiving rows of `schema` (its write schema).
    pub fn try_new(table: &TableDef, schema: SchemaRef) -> Result<Arc<dyn SinkFactory>> {
        super::validate(table)?;
        let topic = match table.option("topic") {
            Some(t) if !t.contains(';') => t.to_string(),
            _ => {
                return Err(Error::sql(format!(
                    "table '{}': a Kafka sink writes one topic: give it as 'topic'",
                    table.name
                )));
            }
        };
        let (delivery, prefix) = delivery(table)?;
        let partitioner = match table.option("sink.partitioner").unwrap_or("default") {
            "default" => Partitioner::Default,
            "fixed" => Partitioner::Fixed,
            "round-robin" => Partitioner::RoundRobin,
            other => {
                return Err(Error::sql(format!(
                    "table '{}': invalid value '{other}' for option 'sink.partitioner'; expected default, fixed \
                     or round-robin",
                    table.name
                )));
            }
        };
        let encoder = RowEncoder::new(table, &weir_common::changelog::without_op(&schema))?;
        Ok(Arc::new(KafkaSinkFactory {
            table: table.name.clone(),
            topic,
            bootstrap: table
                .option("properties.bootstrap.servers")
                .unwrap_or_default()
                .to_string(),
            properties: properties(table),
            delivery,
            prefix,
            partitioner,
            encoder: Arc::new(encoder),
            upsert: super::layout::is_upsert(table),
        }))
    }
}

impl RowEncoder {
    fn new(table: &TableDef, schema: &SchemaRef) -> Result<RowEncoder> {
        let position = |name: &str| schema.index_of(name).map_err(Error::from);
        let key_fields = super::layout::key_fields(table);
        let except_key = table.option("value.fields-include") == Some("EXCEPT_KEY");
        let physical = table.physical_schema();
        let value_columns = physical
            .fields()
            .iter()
            .filter(|f| !except_key || !key_fields.contains(f.name()))
            .map(|f| position(f.name()))
            .collect::<Result<Vec<_>>>()?;
        let value = match table.option("value.format") {
            Some(_) => RecordFormat::from_table(table, "value.format", "value.")?,
            None => RecordFormat::from_table(table, "format", "")?,
        }
        .ok_or_else(|| {
            Error::sql(format!(
                "table '{}': a Kafka table needs 'format' or 'value.format'",
                table.name
            ))
        })?;
        let key = match RecordFormat::from_table(table, "key.format", "key.")? {
            Some(format) => Some((
                format,
                key_fields
                    .iter()
                    .map(|k| position(k))
                    .collect::<Result<Vec<_>>>()?,
            )),
            None => None,
        };
        let mut timestamp = None;
        for (name, metadata) in table.metadata_columns() {
            match (metadata.key.as_str(), metadata.is_virtual) {
                (_, true) => {}
                ("timestamp", false) => timestamp = Some(position(name)?),
                (key, false) => {
                    return Err(Error::sql(format!(
                        "table '{}': the Kafka sink writes the metadata 'timestamp' only; declare column '{name}' \
                         ('{key}') VIRTUAL",
                        table.name
                    )));
                }
            }
        }
        Ok(RowEncoder {
            value,
            value_columns,
            key,
            timestamp,
        })
    }

    /// Each row's key, value and timestamp.
    fn encode(&self, batch: &RecordBatch) -> Result<Vec<OutRecord>> {
        let values = self.value.encode(&batch.project(&self.value_columns)?)?;
        let keys = match &self.key {
            Some((format, columns)) => Some(format.encode(&batch.project(columns)?)?),
            None => None,
        };
        let timestamps = match self.timestamp {
            Some(i) => Some(weir_common::time::to_epoch_millis(batch.column(i).as_ref())?),
            None => None,
        };
        Ok((0..batch.num_rows())
            .map(|row| OutRecord {
                key: keys.as_ref().map(|k| k.row(row).to_vec()),
                value: values.row(row).to_vec(),
                timestamp: timestamps
                    .as_ref()
                    .filter(|t| t.is_valid(row))
                    .map(|t| t.value(row)),
            })
            .collect())
    }
}

impl SinkFactory for KafkaSinkFactory {
    fn accepts_updates(&self) -> bool {
        self.upsert
    }

    fn needs_update_before(&self) -> bool {
        false
    }

    fn describe(&self) -> String {
        let delivery = match self.delivery {
            Delivery::None => "none".to_string(),
            Delivery::AtLeastOnce => "at-least-once".to_string(),
            Delivery::ExactlyOnce => format!(
                "exactly-once, transactional-id-prefix={}",
                self.prefix.as_deref().unwrap_or_default()
            ),
        };
        format!(
            "Sink: {}[{}, topic={}, format={}, {delivery}]",
            self.table,
            if self.upsert { "upsert-kafka" } else { "kafka" },
            self.topic,
            self.encoder.value.name()
        )
    }

    fn create_writer(&self, ctx: &TaskContext) -> Result<Box<dyn SinkWriter>> {
        let mut config = ClientConfig::new();
        // Transactions must outlive a crash and restart: the broker's default
        // largest timeout (15 minutes) unless the table says otherwise.
        config
            .set("transaction.timeout.ms", "900000")
            .set("partitioner", "murmur2_random");
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        let mut writer = KafkaWriter {
            table: self.table.clone(),
            topic: self.topic.clone(),
            bootstrap: self.bootstrap.clone(),
            config,
            delivery: self.delivery,
            prefix: self.prefix.clone().unwrap_or_default(),
            subtask: ctx.subtask,
            parallelism: ctx.parallelism,
            checkpointing: ctx.checkpointing,
            encoder: self.encoder.clone(),
            partitioner: self.partitioner,
            partitions: None,
            sent: 0,
            current: None,
            pending: BTreeMap::new(),
            next: 0,
            to_probe: Vec::new(),
            started: false,
            plain: None,
            prepared: None,
            committer: None,
            finished: false,
        };
        if self.delivery != Delivery::ExactlyOnce {
            writer.plain = Some(writer.producer(None)?);
        }
        Ok(Box::new(writer))
    }
}

/// Records the first failed delivery, which fails the task at the next write
/// or flush (a record must never be lost silently).
#[derive(Clone, Default)]
struct Deliveries {
    failed: Arc<Mutex<Option<String>>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
            failed.get_or_insert_with(|| e.to_string());
        }
    }
}

type KafkaProducer = ThreadedProducer<Deliveries>;

/// A producer with what records its failed deliveries.
type ReadyProducer = (KafkaProducer, Deliveries);

/// A transaction of the exactly-once sink.
struct Transaction {
    producer: KafkaProducer,
    deliveries: Deliveries,
    id: String,
}

/// What a checkpoint records of an exactly-once writer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct WriterState {
    subtask: usize,
    /// The number of its next transaction: ids from it on are after the checkpoint.
    next: u64,
    /// Pre-committed transactions not known to be committed, by checkpoint.
    pending: Vec<(CheckpointId, Recorded)>,
}

struct KafkaWriter {
    table: String,
    topic: String,
    bootstrap: String,
    config: ClientConfig,
    delivery: Delivery,
    prefix: String,
    subtask: usize,
    parallelism: usize,
    checkpointing: bool,
    encoder: Arc<RowEncoder>,
    partitioner: Partitioner,
    /// The topic's partition count (fixed and round-robin partitioners).
    partitions: Option<i32>,
    /// Records sent (round robin).
    sent: u64,
    /// Exactly-once: the open transaction.
    current: Option<Transaction>,
    /// Exactly-once: pre-committed transactions, by the checkpoint that
    /// recorded them (their producers commit them).
    pending: BTreeMap<CheckpointId, Vec<(Recorded, Transaction)>>,
    /// Exactly-once: the number of the next transaction.
    next: u64,
    /// Exactly-once: (subtask, first number) of ids a crashed run may have
    /// left open, to abort before the first transaction.
    to_probe: Vec<(usize, u64)>,
    started: bool,
    /// `none` and `at-least-once`: the one producer.
    plain: Option<(KafkaProducer, Deliveries)>,
    /// Exactly-once: the next transaction's producer, being created.
    prepared: Option<(String, JoinHandle<Result<ReadyProducer>>)>,
    /// Exactly-once: commits transactions off the task (from the first).
    committer: Option<Committer>,
    /// The input has ended: commits are made on the task.
    finished: bool,
}

/// A thread that commits the transactions handed to it, in turn; the first
/// failure is kept for the task to fail on.
struct Committer {
    sender: Option<Sender<Transaction>>,
    failed: Arc<Mutex<Option<Error>>>,
    thread: Option<JoinHandle<()>>,
}

impl Committer {
    fn spawn(table: &str, subtask: usize) -> Result<Committer> {
        let (sender, receiver) = unbounded::<Transaction>();
        let failed = Arc::new(Mutex::new(None));
        let (name, record) = (table.to_string(), failed.clone());
        let thread = std::thread::Builder::new()
            .name(format!("kafka-commit-{subtask}"))
            .spawn(move || {
                for t in receiver {
                    if let Err(e) = commit_transaction(&name, &t) {
                        let mut failed = record.lock().unwrap_or_else(|e| e.into_inner());
                        failed.get_or_insert(e);
                    }
                }
            })
            .map_err(|e| kafka_error(table, "cannot start a committer thread", e))?;
        Ok(Committer {
            sender: Some(sender),
            failed,
            thread: Some(thread),
        })
    }

    /// The first commit that failed, if one did.
    fn failure(&self) -> Result<()> {
        match self.failed.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Waits for every commit handed over; the first failure.
    fn wait(&mut self) -> Result<()> {
        drop(self.sender.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.failure()
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        if let Err(e) = self.wait() {
            eprintln!("[WARN] {e} (the checkpoint recorded it: a restore from it commits it)");
        }
    }
}

/// Commits `t` (its records were flushed at the barrier).
fn commit_transaction(table: &str, t: &Transaction) -> Result<()> {
    t.producer
        .commit_transaction(TIMEOUT)
        .map_err(|e| kafka_error(table, &format!("cannot commit '{}'", t.id), e))
}

impl KafkaWriter {
    fn transactional_id(&self, subtask: usize, n: u64) -> String {
        format!("{}-{subtask}-{n}", self.prefix)
    }

    /// A producer (transactional with `id`), initialized.
    fn producer(&self, id: Option<&str>) -> Result<(KafkaProducer, Deliveries)> {
        new_producer(&self.config, &self.table, id)
    }

    /// Starts creating the next transaction's producer in the background
    /// (initializing transactions takes the coordinator a while; the task
    /// goes on meanwhile).
    fn prepare_next(&mut self) {
        let id = self.transactional_id(self.subtask, self.next);
        let (config, table, for_thread) = (self.config.clone(), self.table.clone(), id.clone());
        let handle = std::thread::Builder::new()
            .name(format!("kafka-producer-{}", self.subtask))
            .spawn(move || new_producer(&config, &table, Some(&for_thread)));
        self.prepared = handle.ok().map(|h| (id, h));
    }

    /// Before the first transaction: aborts what a crashed run left open (a
    /// producer initialized with an id aborts its open transaction). The
    /// subtasks a restored checkpoint recorded are probed from the number
    /// it recorded; then this subtask and those a lower parallelism leaves
    /// to it (`s`, `s + p`, `s + 2p`, ...: Flink's `TransactionAborter`)
    /// from their first number, until one never had a transaction.
    fn start(&mut self) -> Result<()> {
        if self.started || self.delivery != Delivery::ExactlyOnce {
            self.started = true;
            return Ok(());
        }
        let recorded = std::mem::take(&mut self.to_probe);
        for (subtask, first) in &recorded {
            self.abort_from(*subtask, *first)?;
        }
        for subtask in (self.subtask..).step_by(self.parallelism.max(1)) {
            if recorded.iter().any(|(s, _)| *s == subtask) {
                continue;
            }
            if !self.abort_from(subtask, 0)? {
                break;
            }
        }
        self.started = true;
        Ok(())
    }

    /// Aborts the open transactions of `subtask` from number `first` on,
    /// until a number never used; returns whether `first` was used.
    fn abort_from(&self, subtask: usize, first: u64) -> Result<bool> {
        for n in first.. {
            let id = self.transactional_id(subtask, n);
            match describe(&self.bootstrap, &id)? {
                Some(described) if lingering(&described.state) => drop(self.producer(Some(&id))?),
                Some(_) => {}
                None => return Ok(n > first),
            }
        }
        unreachable!("the numbers are unbounded")
    }

    fn begin(&mut self) -> Result<()> {
        let id = self.transactional_id(self.subtask, self.next);
        self.next += 1;
        let (producer, deliveries) = match self.prepared.take() {
            Some((prepared, handle)) if prepared == id => handle
                .join()
                .map_err(|_| Error::Execution(format!("creating the producer '{id}' panicked")))??,
            _ => self.producer(Some(&id))?,
        };
        producer
            .begin_transaction()
            .map_err(|e| kafka_error(&self.table, &format!("cannot begin a transaction as '{id}'"), e))?;
        self.current = Some(Transaction {
            producer,
            deliveries,
            id,
        });
        Ok(())
    }

    /// The partition of the next record, when the partitioner chooses it.
    fn partition_of(&mut self) -> Result<Option<i32>> {
        if self.partitioner == Partitioner::Default {
            return Ok(None);
        }
        let count = match self.partitions {
            Some(count) => count,
            None => {
                let (producer, _) = self.producer(None)?;
                let metadata = producer
                    .client()
                    .fetch_metadata(Some(&self.topic), TIMEOUT)
                    .map_err(|e| kafka_error(&self.table, "cannot read the topic's metadata", e))?;
                let count = metadata.topics().first().map_or(0, |t| t.partitions().len()) as i32;
                if count == 0 {
                    return Err(kafka_error(
                        &self.table,
                        &format!("topic '{}'", self.topic),
                        "it has no partitions",
                    ));
                }
                *self.partitions.insert(count)
            }
        };
        Ok(Some(match self.partitioner {
            Partitioner::Fixed => self.subtask as i32 % count,
            _ => {
                self.sent += 1;
                (self.sent % count as u64) as i32
            }
        }))
    }

    /// Fails when a commit handed to the committer failed.
    fn committed_so_far(&self) -> Result<()> {
        self.committer.as_ref().map_or(Ok(()), Committer::failure)
    }

    fn flush(&self, producer: &KafkaProducer, deliveries: &Deliveries) -> Result<()> {
        producer
            .flush(TIMEOUT)
            .map_err(|e| kafka_error(&self.table, "flushing the records failed", e))?;
        failed(&self.table, deliveries)
    }
}

/// A producer (transactional with `id`, initialized) from `config`.
fn new_producer(config: &ClientConfig, table: &str, id: Option<&str>) -> Result<(KafkaProducer, Deliveries)> {
    let deliveries = Deliveries::default();
    let mut config = config.clone();
    if let Some(id) = id {
        config.set("transactional.id", id);
    }
    let producer: KafkaProducer = config
        .create_with_context(deliveries.clone())
        .map_err(|e| kafka_error(table, "cannot create a producer from its properties", e))?;
    if let Some(id) = id {
        producer
            .init_transactions(TIMEOUT)
            .map_err(|e| kafka_error(table, &format!("cannot start transactions as '{id}'"), e))?;
    }
    Ok((producer, deliveries))
}

/// Whether a transaction in this state was left open by a crashed run.
fn lingering(state: &str) -> bool {
    matches!(state, "Ongoing" | "PrepareAbort")
}

fn failed(table: &str, deliveries: &Deliveries) -> Result<()> {
    match deliveries.failed.lock().unwrap_or_else(|e| e.into_inner()).take() {
        Some(e) => Err(kafka_error(table, "a record could not be delivered", e)),
        None => Ok(()),
    }
}

/// Sends one record, waiting while the producer's queue is full.
fn send(producer: &KafkaProducer, mut record: BaseRecord<'_, [u8], [u8]>, table: &str) -> Result<()> {
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((e, _)) => return Err(kafka_error(table, "cannot send a record", e)),
        }
    }
}

impl SinkWriter for KafkaWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.start()?;
        self.committed_so_far()?;
        if self.delivery == Delivery::ExactlyOnce && self.current.is_none() {
            self.begin()?;
        }
        // Updates (upsert-kafka): a row per key, and a tombstone for a delete
        // or for the row before an update that arrives (when the key alone
        // cannot say which row an update replaces), as Flink writes them.
        let kinds = match weir_common::changelog::has_op(&batch.schema()) {
            true => Some(weir_common::changelog::row_kinds(batch)?),
            false => None,
        };
        let rows = self.encoder.encode(&weir_common::changelog::data(batch))?;
        let partitions = (0..rows.len())
            .map(|_| self.partition_of())
            .collect::<Result<Vec<_>>>()?;
        let (producer, deliveries) = match (&self.plain, &self.current) {
            (Some((p, d)), _) => (p, d),
            (None, Some(t)) => (&t.producer, &t.deliveries),
            (None, None) => return Err(Error::Internal("a Kafka sink without a producer".into())),
        };
        failed(&self.table, deliveries)?;
        for (i, (record_of_row, partition)) in rows.iter().zip(partitions).enumerate() {
            let OutRecord {
                key,
                value,
                timestamp,
            } = record_of_row;
            let mut record = BaseRecord::<[u8], [u8]>::to(&self.topic);
            match kinds.as_ref().map_or(RowKind::Insert, |k| k[i]) {
                RowKind::UpdateBefore | RowKind::Delete => {}
                RowKind::Insert | RowKind::UpdateAfter => record = record.payload(value.as_slice()),
            }
            if let Some(key) = key {
                record = record.key(key.as_slice());
            }
            if let Some(timestamp) = timestamp {
                record = record.timestamp(*timestamp);
            }
            if let Some(partition) = partition {
                record = record.partition(partition);
            }
            send(producer, record, &self.table)?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        self.start()?;
        self.finished = true;
        self.committed_so_far()?;
        if let Some((producer, deliveries)) = &self.plain {
            return self.flush(producer, deliveries);
        }
        if let Some(t) = &self.current {
            self.flush(&t.producer, &t.deliveries)?;
            if !self.checkpointing {
                // No checkpoint will commit it: the end of the input does.
                let t = self.current.take().expect("present");
                commit_transaction(&self.table, &t)?;
            }
        }
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<serde_json::Value> {
        self.start()?;
        self.committed_so_far()?;
        if let Some((producer, deliveries)) = &self.plain {
            if self.delivery == Delivery::AtLeastOnce {
                self.flush(producer, deliveries)?;
            }
            return Ok(serde_json::Value::Null);
        }
        if let Some(t) = self.current.take() {
            self.flush(&t.producer, &t.deliveries)?;
            let described = describe_known(&self.bootstrap, &t.id)?;
            let recorded = Recorded {
                transactional_id: t.id.clone(),
                producer_id: described.producer_id,
                epoch: described.epoch,
            };
            self.pending.entry(checkpoint).or_default().push((recorded, t));
            self.prepare_next();
        }
        let state = WriterState {
            subtask: self.subtask,
            next: self.next,
            pending: self
                .pending
                .iter()
                .flat_map(|(id, ts)| ts.iter().map(|(r, _)| (*id, r.clone())))
                .collect(),
        };
        serde_json::to_value(state).map_err(|e| Error::Internal(e.to_string()))
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<()> {
        let later = self.pending.split_off(&(checkpoint + 1));
        let done = std::mem::replace(&mut self.pending, later);
        let done = done.into_values().flatten().map(|(_, t)| t);
        if self.finished {
            // Nothing more to write: the job ends once these are committed.
            if let Some(committer) = &mut self.committer {
                committer.wait()?;
            }
            return done
                .into_iter()
                .try_for_each(|t| commit_transaction(&self.table, &t));
        }
        let committer = match &mut self.committer {
            Some(committer) => committer,
            None => self
                .committer
                .insert(Committer::spawn(&self.table, self.subtask)?),
        };
        committer.failure()?;
        for t in done {
            let sender = committer
                .sender
                .as_ref()
                .expect("open until the writer is dropped");
            sender
                .send(t)
                .map_err(|_| Error::Internal(format!("Kafka table '{}': its committer ended", self.table)))?;
        }
        Ok(())
    }

    fn restore(&mut self, recorded: &serde_json::Value) -> Result<()> {
        if self.delivery != Delivery::ExactlyOnce || recorded.is_null() {
            return Ok(());
        }
        let state: WriterState = serde_json::from_value(recorded.clone()).map_err(|e| {
            Error::State(format!(
                "Kafka sink state {recorded} is not one this sink wrote: {e}"
            ))
        })?;
        // The checkpoint is complete: what it recorded is committed now.
        for (_, transaction) in &state.pending {
            commit_recorded(&self.bootstrap, transaction)?;
        }
        if state.subtask == self.subtask {
            self.next = self.next.max(state.next);
        }
        self.to_probe.push((state.subtask, state.next));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_open_transactions_are_left_to_abort() {
        for state in ["Ongoing", "PrepareAbort"] {
            assert!(lingering(state), "{state}");
        }
        for state in [
            "Empty",
            "CompleteCommit",
            "CompleteAbort",
            "PrepareCommit",
            "Dead",
        ] {
            assert!(!lingering(state), "{state}");
        }
    }
}
