//! Against a real Apache Kafka broker (KRaft, single node), started once per
//! test run by `scripts/kafka.sh` (its jars fetched from Maven Central into
//! a cache on first use), or the one `WEIR_KAFKA_BOOTSTRAP` names. If the
//! broker cannot start, the tests fail and say why: Kafka is part of what
//! weir does, not an optional extra.

use std::sync::OnceLock;
use std::time::Duration;

use rdkafka::Message;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use weir::connectors::kafka::transactions::{Recorded, describe_known};

mod sink;
mod source;
mod transactions;
mod upsert;

/// The broker's bootstrap address; the broker stops when this process ends.
/// Starting it is tried three times, each in a directory of its own: on a
/// loaded machine a JVM may miss its deadline once, and every Kafka test
/// would fail with it.
pub fn broker() -> &'static str {
    static BROKER: OnceLock<String> = OnceLock::new();
    BROKER.get_or_init(|| {
        if let Ok(bootstrap) = std::env::var("WEIR_KAFKA_BOOTSTRAP") {
            return bootstrap;
        }
        let mut failures = Vec::new();
        for attempt in 1..=3 {
            match start_broker(attempt) {
                Ok(bootstrap) => return bootstrap,
                Err(why) => {
                    eprintln!("starting the Kafka broker, attempt {attempt} of 3, failed: {why}");
                    failures.push(format!("attempt {attempt}: {why}"));
                }
            }
        }
        panic!(
            "THE KAFKA BROKER DID NOT START, so the Kafka tests cannot run:\n{}",
            failures.join("\n")
        )
    })
}

/// One run of `scripts/kafka.sh start`: the bootstrap address, or its error.
fn start_broker(attempt: usize) -> Result<String, String> {
    let dir = std::env::temp_dir().join(format!("weir-kafka-{}-{attempt}", std::process::id()));
    let output = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/kafka.sh"))
        .arg("start")
        .arg(&dir)
        .env("WEIR_KAFKA_WATCH", std::process::id().to_string())
        .output()
        .map_err(|e| format!("scripts/kafka.sh did not run: {e}"))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

pub fn producer(transactional_id: &str) -> ThreadedProducer<DefaultProducerContext> {
    ClientConfig::new()
        .set("bootstrap.servers", broker())
        .set("transactional.id", transactional_id)
        .create()
        .unwrap()
}

/// Opens a transaction of `rows` into `topic` and flushes it, without
/// committing; returns its record, as the sink records it at a barrier.
pub fn open_transaction(transactional_id: &str, topic: &str, rows: &[&str]) -> Recorded {
    let producer = producer(transactional_id);
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    producer.begin_transaction().unwrap();
    for row in rows {
        producer
            .send(BaseRecord::<str, str>::to(topic).payload(*row))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let described = describe_known(broker(), transactional_id).unwrap();
    assert_eq!(described.state, "Ongoing");
    // As after a crash: the producer neither commits nor aborts.
    std::mem::forget(producer);
    Recorded {
        transactional_id: transactional_id.into(),
        producer_id: described.producer_id,
        epoch: described.epoch,
    }
}

/// What a `read_committed` consumer reads of `topic` within `wait`.
pub fn read_committed(topic: &str, wait: Duration) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker())
        .set("group.id", format!("check-{topic}"))
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let mut rows = Vec::new();
    let start = std::time::Instant::now();
    while start.elapsed() < wait {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            rows.push(message.payload_view::<str>().unwrap().unwrap().to_string());
        }
    }
    rows
}

/// Creates `topic` with `partitions` partitions.
pub fn create_topic(topic: &str, partitions: i32) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", broker())
        .create()
        .unwrap();
    let topics = [NewTopic::new(topic, partitions, TopicReplication::Fixed(1))];
    let results = futures::executor::block_on(admin.create_topics(&topics, &AdminOptions::new())).unwrap();
    for result in results {
        result.unwrap();
    }
    // Wait until the broker serves every partition (a producer writing
    // before then may fail its records).
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker())
        .create()
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .unwrap();
        let ready = metadata.topics().first().is_some_and(|t| {
            t.error().is_none()
                && t.partitions().len() == partitions as usize
                && t.partitions().iter().all(|p| p.leader() >= 0)
        });
        if ready {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "topic {topic} is not served after 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Records delivery failures of a test producer.
#[derive(Clone, Default)]
pub struct Failures(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl rdkafka::client::ClientContext for Failures {}

impl rdkafka::producer::ProducerContext for Failures {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::producer::DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.0.lock().unwrap().push(e.to_string());
        }
    }
}

/// A producer whose failed deliveries [`Failures`] keeps.
pub fn checked_producer() -> (ThreadedProducer<Failures>, Failures) {
    let failures = Failures::default();
    let producer = ClientConfig::new()
        .set("bootstrap.servers", broker())
        .set("linger.ms", "20")
        .create_with_context(failures.clone())
        .unwrap();
    (producer, failures)
}

/// Flushes `producer` and fails the test if a record was not delivered.
pub fn flush_checked(producer: &ThreadedProducer<Failures>, failures: &Failures) {
    producer.flush(Duration::from_secs(60)).unwrap();
    let failed = failures.0.lock().unwrap();
    assert!(
        failed.is_empty(),
        "records were not delivered: {:?}",
        &failed[..failed.len().min(3)]
    );
}

/// A record to produce: partition, key, value, timestamp (ms).
pub struct Rec<'a>(pub i32, pub Option<&'a str>, pub Option<&'a str>, pub i64);

/// Writes `records` into `topic` (not transactional) and waits until they are acknowledged.
pub fn produce(topic: &str, records: &[Rec]) {
    let (producer, failures) = checked_producer();
    for Rec(partition, key, value, timestamp) in records {
        let mut record = BaseRecord::<str, str>::to(topic)
            .partition(*partition)
            .timestamp(*timestamp);
        if let Some(key) = key {
            record = record.key(*key);
        }
        if let Some(value) = value {
            record = record.payload(*value);
        }
        producer.send(record).map_err(|(e, _)| e).unwrap();
    }
    flush_checked(&producer, &failures);
}
