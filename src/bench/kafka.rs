//! `weir bench kafka`: a pre-filled topic (JSON records over several
//! partitions) read through a tumbling-window aggregate into another topic,
//! against a real broker, at-least-once and exactly-once (interleaved runs,
//! medians): events/s, and the checkpoints' durations. It also writes the
//! same job for Apache Flink, to run side by side on the same broker and
//! topic (`../shared/flink/run_sql.py`).

use std::time::{Duration, Instant};

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, CreateTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use serde::Serialize;

use crate::{Engine, Error, JobStatus, Result};
use weir_connectors::kafka::wire::call;

/// What to measure.
#[derive(Debug, Clone)]
pub struct KafkaBenchOptions {
    /// The broker.
    pub bootstrap: String,
    /// Records in the input topic.
    pub records: u64,
    /// Its partitions.
    pub partitions: i32,
    /// Distinct keys.
    pub keys: u64,
    /// `parallelism.default`.
    pub parallelism: usize,
    /// Checkpoint interval (both guarantees checkpoint; exactly-once commits on them).
    pub interval: Duration,
    /// Runs of each guarantee, interleaved; medians are reported.
    pub runs: usize,
}

/// The figures.
#[derive(Debug, Clone, Serialize)]
pub struct KafkaBenchResult {
    /// Records read per run.
    pub records: u64,
    /// Input partitions.
    pub partitions: i32,
    /// Parallelism.
    pub parallelism: usize,
    /// Checkpoint interval, ms.
    pub interval_ms: u64,
    /// Runs of each guarantee.
    pub runs: usize,
    /// Median events/s at least once.
    pub at_least_once_per_second: f64,
    /// Median events/s exactly once.
    pub exactly_once_per_second: f64,
    /// Checkpoints of the exactly-once runs.
    pub checkpoints: usize,
    /// Their median duration (trigger to complete), ms.
    pub checkpoint_median_ms: f64,
    /// Their 99th percentile duration, ms.
    pub checkpoint_p99_ms: f64,
    /// Rows each run writes.
    pub output_rows: u64,
}

/// The input topic's name for these options (reused when it is full).
pub fn input_topic(options: &KafkaBenchOptions) -> String {
    format!(
        "bench-in-{}-{}-{}",
        options.records, options.partitions, options.keys
    )
}

/// Creates `topic` with `partitions` partitions unless it exists.
pub fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<()> {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_num_partitions(partitions)
                .with_replication_factor(1),
        ]);
    let response: CreateTopicsResponse = call(bootstrap, ApiKey::CreateTopics, 5, &request)?;
    match response.topics.first().map(|t| t.error_code) {
        // 36: TOPIC_ALREADY_EXISTS.
        Some(0 | 36) => Ok(()),
        code => Err(Error::Execution(format!(
            "Kafka: cannot create topic '{topic}': error {code:?}"
        ))),
    }
}

/// Records in `topic` now (the sum of its partitions' end offsets); a
/// topic just created may take a moment to be served.
fn records_in(bootstrap: &str, topic: &str) -> Result<u64> {
    let start = std::time::Instant::now();
    loop {
        match end_offsets(bootstrap, topic) {
            Err(_) if start.elapsed() < Duration::from_secs(30) => {
                std::thread::sleep(Duration::from_millis(200))
            }
            done => return done,
        }
    }
}

fn end_offsets(bootstrap: &str, topic: &str) -> Result<u64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "weir-bench")
        .create()
        .map_err(|e| Error::Execution(format!("Kafka: {e}")))?;
    let timeout = Duration::from_secs(10);
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| Error::Execution(format!("Kafka: {e}")))?;
    let mut list = TopicPartitionList::new();
    for partition in metadata.topics().iter().flat_map(|t| t.partitions()) {
        list.add_partition_offset(topic, partition.id(), Offset::End)
            .map_err(|e| Error::Execution(format!("Kafka: {e}")))?;
    }
    let ends = consumer
        .offsets_for_times(list, timeout)
        .map_err(|e| Error::Execution(format!("Kafka: {e}")))?;
    Ok(ends
        .elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(o) => o.max(0) as u64,
            _ => 0,
        })
        .sum())
}

/// Fills the input topic (unless it holds the records already): record `i`
/// is `{"k": i % keys, "v": i % 1000, "ts": ...}`, ten per millisecond of
/// event time from 2026-01-01, round robin over the partitions. Returns
/// the seconds it took (0 when reused).
pub fn fill(options: &KafkaBenchOptions) -> Result<f64> {
    let topic = input_topic(options);
    create_topic(&options.bootstrap, &topic, options.partitions)?;
    let held = records_in(&options.bootstrap, &topic)?;
    if held == options.records {
        return Ok(0.0);
    }
    if held > 0 {
        return Err(Error::Execution(format!(
            "topic '{topic}' holds {held} records, not {}: delete it first",
            options.records
        )));
    }
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &options.bootstrap)
        .set("linger.ms", "50")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .map_err(|e| Error::Execution(format!("Kafka: {e}")))?;
    let started = Instant::now();
    const BASE: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    for i in 0..options.records {
        let value = format!(
            r#"{{"k":{},"v":{},"ts":{}}}"#,
            i % options.keys,
            i % 1000,
            BASE + (i / 10) as i64
        );
        let mut record = BaseRecord::<str, str>::to(&topic)
            .partition((i % options.partitions as u64) as i32)
            .payload(&value);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
    producer
        .flush(Duration::from_secs(300))
        .map_err(|e| Error::Execution(format!("Kafka: {e}")))?;
    let held = records_in(&options.bootstrap, &topic)?;
    if held != options.records {
        return Err(Error::Execution(format!(
            "filling '{topic}' wrote {held} of {} records",
            options.records
        )));
    }
    Ok(started.elapsed().as_secs_f64())
}

/// The job, as weir and Flink both read it: the input topic to its end,
/// counted and summed per key in one-second tumbling windows, into
/// `output` with `guarantee`.
pub fn job_sql(options: &KafkaBenchOptions, output: &str, guarantee: &str, prefix: &str) -> String {
    format!(
        "CREATE TABLE src (k BIGINT, v BIGINT, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
           WATERMARK FOR rt AS rt - INTERVAL '1' SECOND)
         WITH ('connector' = 'kafka', 'topic' = '{input}', 'properties.bootstrap.servers' = '{b}',
               'properties.group.id' = '{prefix}', 'format' = 'json',
               'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset');
         CREATE TABLE dst (k BIGINT, window_start TIMESTAMP(3), c BIGINT, s BIGINT)
         WITH ('connector' = 'kafka', 'topic' = '{output}', 'properties.bootstrap.servers' = '{b}',
               'format' = 'json', 'sink.delivery-guarantee' = '{guarantee}',
               'sink.transactional-id-prefix' = '{prefix}',
               'properties.transaction.timeout.ms' = '900000');
         INSERT INTO dst SELECT k, window_start, COUNT(*), SUM(v)
         FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(rt), INTERVAL '1' SECOND))
         GROUP BY k, window_start, window_end",
        input = input_topic(options),
        b = options.bootstrap,
    )
}

/// One run in this process: seconds, and the checkpoints' durations (ms).
fn run_once(
    options: &KafkaBenchOptions,
    guarantee: &str,
    run: usize,
    dir: &std::path::Path,
) -> Result<(f64, Vec<f64>)> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let name = format!("bench-{guarantee}-{run}-{stamp}");
    create_topic(&options.bootstrap, &name, options.partitions)?;
    let engine = Engine::new();
    engine.set("parallelism.default", &options.parallelism.to_string())?;
    engine.set("table.local-time-zone", "UTC")?;
    engine.set(
        "execution.checkpointing.interval",
        &format!("{} ms", options.interval.as_millis()),
    )?;
    engine.set("execution.checkpointing.dir", &dir.display().to_string())?;
    engine.set("pipeline.name", &name)?;
    let started = Instant::now();
    let result = engine.sql(&job_sql(options, &name, guarantee, &name))?;
    let job = result
        .job()
        .cloned()
        .ok_or_else(|| Error::Internal("the benchmark started no job".into()))?;
    let status = job.wait()?;
    if status != JobStatus::Finished {
        return Err(Error::Execution(format!("the benchmark job ended {status:?}")));
    }
    let seconds = started.elapsed().as_secs_f64();
    let durations = job
        .completed_checkpoints()
        .iter()
        .map(|c| c.duration.as_secs_f64() * 1e3)
        .collect();
    Ok((seconds, durations))
}

/// The `p` quantile of `values`.
fn quantile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    super::checkpoint::percentile(values, p)
}

/// Runs the benchmark (the input topic filled first).
pub fn run(options: &KafkaBenchOptions) -> Result<KafkaBenchResult> {
    let scratch = super::ScratchDir::new(None)?;
    let (mut alo, mut eo, mut checkpoints) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..options.runs.max(1) {
        let (seconds, _) = run_once(
            options,
            "at-least-once",
            run,
            &scratch.path.join(format!("alo-{run}")),
        )?;
        alo.push(options.records as f64 / seconds);
        let (seconds, durations) = run_once(
            options,
            "exactly-once",
            run,
            &scratch.path.join(format!("eo-{run}")),
        )?;
        eo.push(options.records as f64 / seconds);
        checkpoints.extend(durations);
    }
    let windows = options.records / 10_000;
    Ok(KafkaBenchResult {
        records: options.records,
        partitions: options.partitions,
        parallelism: options.parallelism,
        interval_ms: options.interval.as_millis() as u64,
        runs: options.runs.max(1),
        at_least_once_per_second: quantile(&mut alo, 0.5),
        exactly_once_per_second: quantile(&mut eo, 0.5),
        checkpoints: checkpoints.len(),
        checkpoint_median_ms: quantile(&mut checkpoints, 0.5),
        checkpoint_p99_ms: quantile(&mut checkpoints, 0.99),
        output_rows: windows.max(1) * options.keys.min(options.records),
    })
}
