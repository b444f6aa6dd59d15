//! `upsert-kafka` against the real broker: an updating query written as a
//! row per key and a tombstone per delete, read back as a changelog.

use std::time::Duration;

use rdkafka::Message;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use weir::common::changelog::row_kinds;

use super::{Rec, broker, create_topic, produce};
use crate::sorted_rows;

/// Every record of partition 0 of `topic` as `key|value` (`NULL` for a tombstone).
fn records(topic: &str) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker())
        .set("group.id", "upsert-check")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    consumer.assign(&list).unwrap();
    let mut out = Vec::new();
    let mut quiet = std::time::Instant::now();
    while quiet.elapsed() < Duration::from_secs(2) {
        if let Some(message) = consumer.poll(Duration::from_millis(50)) {
            let message = message.unwrap();
            let text =
                |b: Option<&[u8]>| b.map_or("NULL".to_string(), |b| String::from_utf8_lossy(b).to_string());
            out.push(format!("{}|{}", text(message.key()), text(message.payload())));
            quiet = std::time::Instant::now();
        }
    }
    out
}

/// `CREATE TABLE name` on the upsert topic `topic`, keyed by `k`.
fn totals(name: &str, topic: &str, bounded: bool) -> String {
    let bounded = if bounded {
        ", 'scan.bounded.mode' = 'latest-offset'"
    } else {
        ""
    };
    format!(
        "CREATE TABLE {name} (k BIGINT, total BIGINT, PRIMARY KEY (k) NOT ENFORCED) WITH ( \
         'connector' = 'upsert-kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{b}', \
         'key.format' = 'json', 'value.format' = 'json'{bounded})",
        b = broker()
    )
}

#[test]
fn upserts_and_tombstones_are_read_back_as_a_changelog() {
    create_topic("upsert-read", 1);
    produce(
        "upsert-read",
        &[
            Rec(0, Some(r#"{"k":1}"#), Some(r#"{"k":1,"total":3}"#), 1_000),
            Rec(0, Some(r#"{"k":2}"#), Some(r#"{"k":2,"total":5}"#), 1_000),
            Rec(0, Some(r#"{"k":1}"#), Some(r#"{"k":1,"total":7}"#), 1_000),
            Rec(0, Some(r#"{"k":1}"#), Some(r#"{"k":1,"total":7}"#), 1_000),
            Rec(0, Some(r#"{"k":2}"#), None, 1_000),
            Rec(0, Some(r#"{"k":9}"#), None, 1_000),
        ],
    );
    let engine = crate::engine(1);
    engine.sql(&totals("totals", "upsert-read", true)).unwrap();
    let explain = sorted_rows(
        &engine
            .sql("EXPLAIN SELECT * FROM totals")
            .unwrap()
            .collect()
            .unwrap(),
    )
    .join("\n");
    assert!(explain.contains("ChangelogNormalize(key=[k])"), "{explain}");
    assert_eq!(
        changelog_of(&engine, "totals"),
        vec!["+I 3|1", "+I 5|2", "-U 3|1", "+U 7|1", "-D 5|2"],
        "a repeated row changes nothing; a tombstone deletes the key's row; one of an unknown key is nothing"
    );
    let table = engine
        .sql("SELECT k, total FROM totals")
        .unwrap()
        .materialize()
        .unwrap();
    assert_eq!(sorted_rows(&[table]), vec!["1|7"]);
}

/// The rows a compacted topic keeps: each key's last value, none after a tombstone.
fn compacted(records: &[String]) -> Vec<String> {
    let mut latest = std::collections::BTreeMap::new();
    for record in records {
        let (key, value) = record.split_once('|').unwrap();
        match value {
            "NULL" => latest.remove(key),
            value => latest.insert(key.to_string(), value.to_string()),
        };
    }
    latest.into_iter().map(|(k, v)| format!("{k}|{v}")).collect()
}

#[test]
fn an_updating_query_written_to_upsert_kafka_leaves_each_keys_latest_row() {
    create_topic("upsert-in", 1);
    create_topic("upsert-out", 1);
    let engine = crate::engine(1);
    engine
        .sql(&format!(
            "CREATE TABLE src (k BIGINT, v BIGINT) WITH ('connector' = 'kafka', 'topic' = 'upsert-in', \
             'properties.bootstrap.servers' = '{}', 'format' = 'json', 'scan.startup.mode' = 'earliest-offset')",
            broker()
        ))
        .unwrap();
    engine.sql(&totals("totals", "upsert-out", false)).unwrap();
    // Keys whose total passes 10 are deleted.
    let insert = "INSERT INTO totals SELECT k, SUM(v) FROM src GROUP BY k HAVING SUM(v) < 10";
    let plan = sorted_rows(
        &engine
            .sql(&format!("EXPLAIN {insert}"))
            .unwrap()
            .collect()
            .unwrap(),
    )
    .join("\n");
    assert!(
        plan.contains("SinkMaterializer(pk=[k])"),
        "the filter on the total hides which row an update replaces: {plan}"
    );
    let job = engine.sql(insert).unwrap();
    let send = |pairs: &[(i64, i64)]| {
        let texts: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!(r#"{{"k":{k},"v":{v}}}"#))
            .collect();
        let records: Vec<Rec> = texts
            .iter()
            .map(|t| Rec(0, None, Some(t.as_str()), 1_000))
            .collect();
        produce("upsert-in", &records);
    };
    let wait_for = |expected: Vec<&str>| {
        let start = std::time::Instant::now();
        loop {
            let got = compacted(&records("upsert-out"));
            if got == expected {
                return;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "{got:?}");
        }
    };
    send(&[(1, 3), (2, 5)]);
    wait_for(vec![
        r#"{"k":1}|{"k":1,"total":3}"#,
        r#"{"k":2}|{"k":2,"total":5}"#,
    ]);
    send(&[(1, 4), (2, 6), (3, 20)]);
    wait_for(vec![r#"{"k":1}|{"k":1,"total":7}"#]);
    let all = records("upsert-out");
    assert!(
        all.contains(&r#"{"k":2}|NULL"#.to_string()),
        "key 2's tombstone: {all:?}"
    );
    job.job().unwrap().cancel();
}

/// The changelog `SELECT total, k` of `table` gives, row by row.
fn changelog_of(engine: &weir::Engine, table: &str) -> Vec<String> {
    let batches = engine
        .sql(&format!("SELECT total, k FROM {table}"))
        .unwrap()
        .collect()
        .unwrap();
    let mut changes = Vec::new();
    for batch in &batches {
        let kinds = row_kinds(batch).unwrap();
        for (row, kind) in kinds.iter().enumerate() {
            let one = sorted_rows(&[weir::common::changelog::data(&batch.slice(row, 1))]);
            changes.push(format!("{} {}", kind.short(), one[0]));
        }
    }
    changes
}

#[test]
fn an_upsert_topic_normalized_under_the_spilling_backend_gives_the_heaps_changelog() {
    // 3000 records over 400 keys: upserts (some repeating a key's row) and
    // tombstones (some of keys that hold none). Under 1 kB and batches of
    // 16 rows the keys go to the store and come back.
    create_topic("upsert-spill", 1);
    let (keys, values): (Vec<String>, Vec<Option<String>>) = (0..3000)
        .map(|i| {
            let k = (i * 7919) % 400;
            let value = (i % 6 != 0).then(|| format!(r#"{{"k":{k},"total":{}}}"#, (i / 7) % 5));
            (format!(r#"{{"k":{k}}}"#), value)
        })
        .unzip();
    let records: Vec<Rec> = (keys.iter().zip(&values))
        .map(|(k, v)| Rec(0, Some(k), v.as_deref(), 1_000))
        .collect();
    produce("upsert-spill", &records);
    let heap = crate::engine(1);
    heap.sql(&totals("totals", "upsert-spill", true)).unwrap();
    let expected = changelog_of(&heap, "totals");
    for kind in ["+I", "-U", "-D"] {
        let n = expected.iter().filter(|c| c.starts_with(kind)).count();
        assert!(n > 100, "{n} {kind}");
    }
    let dir = tempfile::tempdir().unwrap();
    let spilling = crate::engine(1);
    spilling.set("state.backend.type", "spilling").unwrap();
    spilling.set("taskmanager.memory.managed.size", "1 kb").unwrap();
    spilling
        .set(
            "state.backend.spilling.local-dir",
            &dir.path().display().to_string(),
        )
        .unwrap();
    spilling.set("weir.batch-size", "16").unwrap();
    spilling.sql(&totals("totals", "upsert-spill", true)).unwrap();
    assert_eq!(changelog_of(&spilling, "totals"), expected);
}
