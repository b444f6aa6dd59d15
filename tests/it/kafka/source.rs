//! The Kafka source against the real broker: keys, values and metadata;
//! startup and bounded modes; malformed records; idle partitions; offsets
//! committed to the group when a checkpoint completes; transactions,
//! compression codecs and deleted records.

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use super::{Rec, broker, create_topic, produce};
use crate::sorted_rows;

/// `CREATE TABLE name (columns) WITH (kafka on topic, options)`.
fn kafka_table(engine: &weir::Engine, name: &str, columns: &str, topic: &str, options: &str) {
    engine
        .sql(&format!(
            "CREATE TABLE {name} ({columns}) WITH ('connector' = 'kafka', 'topic' = '{topic}', \
             'properties.bootstrap.servers' = '{}'{options})",
            broker()
        ))
        .unwrap();
}

fn rows(engine: &weir::Engine, query: &str) -> Vec<String> {
    sorted_rows(&engine.sql(query).unwrap().collect().unwrap())
}

#[test]
fn a_kafka_source_reads_keys_values_and_metadata_to_the_end_of_a_bounded_topic() {
    create_topic("src-kv", 2);
    produce(
        "src-kv",
        &[
            Rec(0, Some(r#"{"id":1}"#), Some(r#"{"name":"a","amount":10}"#), 1_000),
            Rec(1, Some(r#"{"id":2}"#), Some(r#"{"name":"b","amount":20}"#), 2_000),
            Rec(0, Some(r#"{"id":3}"#), Some(r#"{"name":"c","amount":30}"#), 3_000),
            Rec(1, Some(r#"{"id":4}"#), None, 4_000),
            Rec(1, None, Some(r#"{"name":"e","amount":50}"#), 5_000),
        ],
    );
    let engine = crate::engine(2);
    kafka_table(
        &engine,
        "t",
        "id BIGINT, name STRING, amount INT, `partition` INT METADATA VIRTUAL, \
         `offset` BIGINT METADATA VIRTUAL, ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp'",
        "src-kv",
        ", 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset', \
         'key.format' = 'json', 'key.fields' = 'id', 'value.format' = 'json', \
         'value.fields-include' = 'EXCEPT_KEY'",
    );
    // The tombstone (no value) is skipped; a record without a key has NULL key fields.
    assert_eq!(
        rows(
            &engine,
            "SELECT id, name, amount, `partition`, `offset`, ts FROM t"
        ),
        vec![
            "1|a|10|0|0|1970-01-01T00:00:01Z",
            "2|b|20|1|0|1970-01-01T00:00:02Z",
            "3|c|30|0|1|1970-01-01T00:00:03Z",
            "NULL|e|50|1|2|1970-01-01T00:00:05Z",
        ]
    );
    // Only metadata, only the key: what is not selected is not decoded.
    let counts = engine
        .sql("SELECT `partition`, COUNT(*) FROM t GROUP BY `partition`")
        .unwrap()
        .materialize()
        .unwrap();
    assert_eq!(sorted_rows(&[counts]), vec!["0|2", "1|2"]);
    let explain = sorted_rows(&engine.sql("EXPLAIN SELECT id FROM t").unwrap().collect().unwrap()).join("\n");
    assert!(
        explain.contains("kafka, topics=[src-kv], partitions=[src-kv-0, src-kv-1], key=json, value=json"),
        "{explain}"
    );
}

/// Offsets 0..4 of a one-partition topic, at times 1000, 2000, 3000, 4000.
fn four_records(topic: &str) {
    create_topic(topic, 1);
    let values: Vec<String> = (0..4).map(|i| format!(r#"{{"v":{i}}}"#)).collect();
    let records: Vec<Rec> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Rec(0, None, Some(v.as_str()), 1_000 * (i as i64 + 1)))
        .collect();
    produce(topic, &records);
}

fn read_with(topic: &str, options: &str) -> weir::Result<Vec<String>> {
    let engine = crate::engine(1);
    kafka_table(
        &engine,
        "t",
        "v INT",
        topic,
        &format!(", 'format' = 'json'{options}"),
    );
    Ok(sorted_rows(&engine.sql("SELECT v FROM t")?.collect()?))
}

#[test]
fn startup_and_bounded_modes_choose_where_reading_starts_and_stops() {
    four_records("src-modes");
    let to_end = ", 'scan.bounded.mode' = 'latest-offset'";
    let read = |options: &str| read_with("src-modes", options).unwrap();
    assert_eq!(
        read(&format!(", 'scan.startup.mode' = 'earliest-offset'{to_end}")),
        ["0", "1", "2", "3"]
    );
    assert_eq!(
        read(&format!(
            ", 'scan.startup.mode' = 'timestamp', 'scan.startup.timestamp-millis' = '2500'{to_end}"
        )),
        ["2", "3"]
    );
    assert_eq!(
        read(&format!(
            ", 'scan.startup.mode' = 'specific-offsets', \
             'scan.startup.specific-offsets' = 'partition:0,offset:1'{to_end}"
        )),
        ["1", "2", "3"]
    );
    assert_eq!(
        read(
            ", 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'timestamp', \
             'scan.bounded.timestamp-millis' = '3000'"
        ),
        ["0", "1"]
    );
    assert_eq!(
        read(
            ", 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'specific-offsets', \
             'scan.bounded.specific-offsets' = 'partition:0,offset:3'"
        ),
        ["0", "1", "2"]
    );
    // group-offsets: where the group committed, and an error without a commit.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker())
        .set("group.id", "modes-group")
        .create()
        .unwrap();
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset("src-modes", 0, Offset::Offset(2))
        .unwrap();
    consumer.commit(&offsets, CommitMode::Sync).unwrap();
    assert_eq!(
        read(&format!(
            ", 'scan.startup.mode' = 'group-offsets', 'properties.group.id' = 'modes-group'{to_end}"
        )),
        ["2", "3"]
    );
    let error = read_with(
        "src-modes",
        &format!(", 'scan.startup.mode' = 'group-offsets', 'properties.group.id' = 'no-commits'{to_end}"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("no committed offset for src-modes-0") && error.contains("auto.offset.reset"),
        "{error}"
    );
    assert_eq!(
        read(&format!(
            ", 'scan.startup.mode' = 'group-offsets', 'properties.group.id' = 'no-commits', \
             'properties.auto.offset.reset' = 'earliest'{to_end}"
        )),
        ["0", "1", "2", "3"]
    );
}

#[test]
fn latest_offset_reads_only_what_is_written_after_the_job_starts() {
    four_records("src-latest");
    let engine = crate::engine(1);
    kafka_table(
        &engine,
        "t",
        "v INT",
        "src-latest",
        ", 'format' = 'json', 'scan.startup.mode' = 'latest-offset'",
    );
    let mut stream = engine.sql("SELECT v FROM t").unwrap().stream();
    // The reader has started (and found the end) once it has been idle a while.
    assert!(
        stream
            .next_timeout(Duration::from_secs(2))
            .unwrap()
            .unwrap()
            .is_none()
    );
    produce("src-latest", &[Rec(0, None, Some(r#"{"v":42}"#), 9_000)]);
    let batch = stream
        .next_timeout(Duration::from_secs(20))
        .expect("running")
        .unwrap()
        .expect("the new record arrives");
    assert_eq!(sorted_rows(&[batch]), ["42"]);
}

#[test]
fn a_malformed_record_fails_naming_topic_partition_and_offset_unless_ignored() {
    create_topic("src-bad", 1);
    produce(
        "src-bad",
        &[
            Rec(0, None, Some(r#"{"v":1}"#), 1_000),
            Rec(0, None, Some(r#"{"v":"#), 2_000),
            Rec(0, None, Some(r#"{"v":3}"#), 3_000),
        ],
    );
    let bounded = ", 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset'";
    let error = read_with("src-bad", bounded).unwrap_err().to_string();
    assert!(
        error.contains("Kafka topic 'src-bad', partition 0, offset 1"),
        "{error}"
    );
    assert_eq!(
        read_with(
            "src-bad",
            &format!("{bounded}, 'json.ignore-parse-errors' = 'true'")
        )
        .unwrap(),
        ["1", "3"]
    );
}

/// Tumbling one-second windows over records of partition 0 only, of a
/// two-partition topic read by one subtask; `options` for the table.
fn windows_with_an_empty_partition(topic: &str, options: &str) -> weir::ResultStream {
    create_topic(topic, 2);
    produce(
        topic,
        &[
            Rec(0, None, Some(r#"{"v":1}"#), 1_000),
            Rec(0, None, Some(r#"{"v":2}"#), 1_500),
            Rec(0, None, Some(r#"{"v":3}"#), 2_500),
            Rec(0, None, Some(r#"{"v":4}"#), 5_000),
        ],
    );
    let engine = crate::engine(1);
    kafka_table(
        &engine,
        "t",
        "v INT, ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp', WATERMARK FOR ts AS ts",
        topic,
        &format!(", 'format' = 'json', 'scan.startup.mode' = 'earliest-offset'{options}"),
    );
    engine
        .sql(
            "SELECT window_start, COUNT(*), SUM(v) FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND)) \
             GROUP BY window_start, window_end",
        )
        .unwrap()
        .stream()
}

#[test]
fn an_idle_partition_stops_holding_back_the_watermark_after_the_idle_timeout() {
    let mut stream =
        windows_with_an_empty_partition("src-idle", ", 'scan.watermark.idle-timeout' = '300 ms'");
    let mut fired = Vec::new();
    while fired.len() < 2 {
        let batch = stream
            .next_timeout(Duration::from_secs(20))
            .expect("running")
            .unwrap()
            .expect("windows fire once partition 1 is idle");
        fired.extend(sorted_rows(&[batch]));
    }
    fired.sort();
    assert_eq!(fired, ["1970-01-01T00:00:01|2|3", "1970-01-01T00:00:02|1|3"]);
}

#[test]
fn without_an_idle_timeout_an_empty_partition_holds_every_window_back() {
    let mut stream = windows_with_an_empty_partition("src-not-idle", "");
    let next = stream
        .next_timeout(Duration::from_secs(3))
        .expect("running")
        .unwrap();
    assert!(next.is_none(), "a window fired: {next:?}");
}

#[test]
fn offsets_are_committed_to_the_group_when_a_checkpoint_completes() {
    four_records("src-commit");
    let dir = tempfile::tempdir().unwrap();
    let engine = crate::engine(1);
    engine.set("execution.checkpointing.interval", "100 ms").unwrap();
    engine
        .set("execution.checkpointing.dir", &dir.path().display().to_string())
        .unwrap();
    kafka_table(
        &engine,
        "t",
        "v INT",
        "src-commit",
        ", 'format' = 'json', 'scan.startup.mode' = 'earliest-offset', \
         'scan.bounded.mode' = 'latest-offset', 'properties.group.id' = 'commit-group'",
    );
    engine
        .sql("CREATE TABLE sink (v INT) WITH ('connector' = 'blackhole')")
        .unwrap();
    let result = engine.sql("INSERT INTO sink SELECT v FROM t").unwrap();
    result.job().expect("a job").wait().unwrap();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker())
        .set("group.id", "commit-group")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition("src-commit", 0);
    let committed = consumer.committed_offsets(list, Duration::from_secs(10)).unwrap();
    assert_eq!(
        committed.find_partition("src-commit", 0).unwrap().offset(),
        Offset::Offset(4),
        "the final checkpoint's offset: after the last record"
    );
}

#[test]
fn read_committed_leaves_out_aborted_transactions_and_reads_past_their_markers() {
    use rdkafka::producer::{BaseRecord, Producer};
    create_topic("src-txn", 1);
    let producer = super::producer("src-txn-writer");
    let timeout = Duration::from_secs(30);
    producer.init_transactions(timeout).unwrap();
    for (values, commit) in [(&[1, 2][..], true), (&[10, 11][..], false), (&[3][..], true)] {
        producer.begin_transaction().unwrap();
        for v in values {
            let value = format!(r#"{{"v":{v}}}"#);
            producer
                .send(BaseRecord::<str, str>::to("src-txn").payload(&value))
                .map_err(|(e, _)| e)
                .unwrap();
        }
        // Sent before the end: librdkafka's abort drops records not sent yet.
        producer.flush(timeout).unwrap();
        match commit {
            true => producer.commit_transaction(timeout).unwrap(),
            false => producer.abort_transaction(timeout).unwrap(),
        }
    }
    let bounded = ", 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset'";
    let committed = format!("{bounded}, 'properties.isolation.level' = 'read_committed'");
    assert_eq!(read_with("src-txn", &committed).unwrap(), ["1", "2", "3"]);
    // The Java client's default, as Flink's: aborted records are read too.
    assert_eq!(
        read_with("src-txn", bounded).unwrap(),
        ["1", "10", "11", "2", "3"]
    );
}

#[test]
fn records_compressed_with_every_codec_are_read() {
    create_topic("src-codecs", 1);
    // zstd too, but librdkafka is built here without it: the fetcher's
    // unit tests read zstd batches written by kafka-protocol's encoder.
    let codecs = ["none", "gzip", "snappy", "lz4"];
    for (i, codec) in codecs.iter().enumerate() {
        let (producer, failures): (rdkafka::producer::ThreadedProducer<super::Failures>, _) = {
            let failures = super::Failures::default();
            let producer = ClientConfig::new()
                .set("bootstrap.servers", broker())
                .set("compression.type", *codec)
                .create_with_context(failures.clone())
                .unwrap();
            (producer, failures)
        };
        for j in 0..3 {
            let value = format!(r#"{{"v":{}}}"#, i * 10 + j);
            producer
                .send(rdkafka::producer::BaseRecord::<str, str>::to("src-codecs").payload(&value))
                .map_err(|(e, _)| e)
                .unwrap();
        }
        super::flush_checked(&producer, &failures);
    }
    let bounded = ", 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset'";
    let mut read: Vec<i32> = read_with("src-codecs", bounded)
        .unwrap()
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    read.sort_unstable();
    assert_eq!(read, [0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32]);
}

#[test]
fn an_offset_whose_records_were_deleted_resets_by_auto_offset_reset() {
    use rdkafka::admin::{AdminClient, AdminOptions};
    four_records("src-reset");
    // The group's committed offset 0, then the records before offset 2 deleted.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker())
        .set("group.id", "reset-group")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition_offset("src-reset", 0, Offset::Offset(0))
        .unwrap();
    consumer.commit(&list, CommitMode::Sync).unwrap();
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", broker())
        .create()
        .unwrap();
    let mut delete = TopicPartitionList::new();
    delete
        .add_partition_offset("src-reset", 0, Offset::Offset(2))
        .unwrap();
    let deleted = futures::executor::block_on(admin.delete_records(&delete, &AdminOptions::new())).unwrap();
    assert_eq!(
        deleted.find_partition("src-reset", 0).unwrap().offset(),
        Offset::Offset(2)
    );
    let group = ", 'scan.startup.mode' = 'group-offsets', 'scan.bounded.mode' = 'latest-offset', \
                 'properties.group.id' = 'reset-group'";
    assert_eq!(read_with("src-reset", group).unwrap(), ["2", "3"]);
    let error = read_with(
        "src-reset",
        &format!("{group}, 'properties.auto.offset.reset' = 'error'"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("topic 'src-reset', partition 0: offset 0 is out of range"),
        "{error}"
    );
}
