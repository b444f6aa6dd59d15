//! The Kafka client calls the connector makes through librdkafka: creating
//! a consumer from a table's `properties.*`, listing the partitions of its
//! topics, and finding the offsets a startup or bounded mode names.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::kafka::options::{Offsets, SourceOptions, Topics};
use crate::{Error, Result};

/// How long a metadata or offsets request may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A Kafka partition: topic and partition number.
pub type Partition = (String, i32);

/// The error of a Kafka client call: what was being done, for table `table`.
pub fn kafka_error(table: &str, doing: &str, e: impl std::fmt::Display) -> Error {
    Error::Execution(format!("Kafka table '{table}': {doing}: {e}"))
}

/// A consumer with the source's properties, for offsets and the group's
/// commits (records are read by [`super::fetch`]): offsets are never
/// committed automatically (only when a checkpoint completes), and the
/// latest offset is that of `read_uncommitted` (the Java client's default)
/// unless `properties.isolation.level` says otherwise.
pub fn consumer(table: &str, options: &SourceOptions) -> Result<BaseConsumer> {
    let mut config = ClientConfig::new();
    // librdkafka's consumer needs a group even for assigned partitions;
    // without `properties.group.id` nothing is ever committed to it.
    config
        .set("isolation.level", "read_uncommitted")
        .set("enable.partition.eof", "false")
        .set("group.id", format!("weir-{table}"));
    for (key, value) in &options.properties {
        config.set(key, value);
    }
    config
        .set("bootstrap.servers", &options.bootstrap)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false");
    config
        .create()
        .map_err(|e| kafka_error(table, "cannot create a consumer from its properties", e))
}

/// The partitions of the source's topics, sorted.
pub fn list_partitions(table: &str, consumer: &BaseConsumer, topics: &Topics) -> Result<Vec<Partition>> {
    let metadata = match topics {
        Topics::Names(names) if names.len() == 1 => consumer.fetch_metadata(Some(&names[0]), TIMEOUT),
        _ => consumer.fetch_metadata(None, TIMEOUT),
    }
    .map_err(|e| kafka_error(table, "cannot read the topics' metadata", e))?;
    let mut partitions = Vec::new();
    for topic in metadata.topics() {
        let wanted = match topics {
            Topics::Names(names) => names.iter().any(|n| n == topic.name()),
            Topics::Pattern(pattern) => pattern.is_match(topic.name()),
        };
        if !wanted {
            continue;
        }
        if let Some(e) = topic.error() {
            return Err(kafka_error(
                table,
                &format!("topic '{}'", topic.name()),
                rdkafka::types::RDKafkaErrorCode::from(e),
            ));
        }
        partitions.extend(
            topic
                .partitions()
                .iter()
                .map(|p| (topic.name().to_string(), p.id())),
        );
    }
    if let Topics::Names(names) = topics {
        for name in names {
            if !partitions.iter().any(|(t, _)| t == name) {
                return Err(kafka_error(
                    table,
                    &format!("topic '{name}'"),
                    "it does not exist",
                ));
            }
        }
    }
    partitions.sort();
    Ok(partitions)
}

/// The offset in each of `partitions` that `offsets` names: where reading
/// starts, or with `stop` where it ends (a specific end may lie beyond what
/// the partition holds now; partitions a specific end does not name end at
/// their latest offset). `reset` is `properties.auto.offset.reset`, for
/// partitions without a committed offset under `group-offsets`.
pub fn resolve(
    table: &str,
    consumer: &BaseConsumer,
    partitions: &[Partition],
    offsets: &Offsets,
    reset: Option<&str>,
    stop: bool,
) -> Result<Vec<i64>> {
    // The first (0) or next (1) offset of each partition: one ListOffsets
    // request for them all, with the earliest and latest timestamps.
    let ends = |which: usize| -> Result<Vec<i64>> {
        let end = if which == 0 {
            Offset::Beginning
        } else {
            Offset::End
        };
        let mut list = TopicPartitionList::new();
        for (topic, p) in partitions {
            list.add_partition_offset(topic, *p, end)
                .map_err(|e| kafka_error(table, "bad partition", e))?;
        }
        let found = consumer
            .offsets_for_times(list, TIMEOUT)
            .map_err(|e| kafka_error(table, "cannot read the partitions' offsets", e))?;
        partitions
            .iter()
            .map(
                |(topic, p)| match found.find_partition(topic, *p).map(|e| e.offset()) {
                    Some(Offset::Offset(o)) => Ok(o),
                    other => Err(kafka_error(
                        table,
                        &format!("the offsets of {topic}-{p}"),
                        format!("{other:?}"),
                    )),
                },
            )
            .collect()
    };
    match offsets {
        Offsets::Earliest => ends(0),
        Offsets::Latest => ends(1),
        Offsets::Specific(given) => {
            let earliest = ends(0)?;
            let latest = ends(1)?;
            Ok(partitions
                .iter()
                .enumerate()
                .map(|(i, (_, p))| match (given.get(p), stop) {
                    (Some(o), true) => *o,
                    (None, true) => latest[i],
                    (Some(o), false) => (*o).clamp(earliest[i], latest[i]),
                    (None, false) => earliest[i],
                })
                .collect())
        }
        Offsets::Timestamp(ts) => {
            let mut list = TopicPartitionList::new();
            for (topic, p) in partitions {
                list.add_partition_offset(topic, *p, Offset::Offset(*ts))
                    .map_err(|e| kafka_error(table, "bad partition", e))?;
            }
            let found = consumer
                .offsets_for_times(list, TIMEOUT)
                .map_err(|e| kafka_error(table, "cannot find the offsets of the timestamp", e))?;
            let latest = ends(1)?;
            Ok(partitions
                .iter()
                .enumerate()
                .map(
                    |(i, (topic, p))| match found.find_partition(topic, *p).map(|e| e.offset()) {
                        Some(Offset::Offset(o)) => o,
                        _ => latest[i],
                    },
                )
                .collect())
        }
        Offsets::Group => committed(table, consumer, partitions, reset, &ends),
    }
}

fn committed(
    table: &str,
    consumer: &BaseConsumer,
    partitions: &[Partition],
    reset: Option<&str>,
    ends: &dyn Fn(usize) -> Result<Vec<i64>>,
) -> Result<Vec<i64>> {
    let mut list = TopicPartitionList::new();
    for (topic, p) in partitions {
        list.add_partition(topic, *p);
    }
    let found = consumer
        .committed_offsets(list, TIMEOUT)
        .map_err(|e| kafka_error(table, "cannot read the group's committed offsets", e))?;
    let fallback = match reset {
        Some("earliest" | "smallest" | "beginning") => Some(ends(0)?),
        Some("latest" | "largest" | "end") => Some(ends(1)?),
        _ => None,
    };
    partitions
        .iter()
        .enumerate()
        .map(
            |(i, (topic, p))| match found.find_partition(topic, *p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => Ok(o),
                _ => fallback.as_ref().map(|f| f[i]).ok_or_else(|| {
                    kafka_error(
                        table,
                        "'group-offsets'",
                        format!(
                            "the group has no committed offset for {topic}-{p}; set \
                         'properties.auto.offset.reset' to 'earliest' or 'latest' to start there"
                        ),
                    )
                }),
            },
        )
        .collect()
}
