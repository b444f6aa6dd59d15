//! A Kafka table's options, as Flink's Kafka connector names them, parsed
//! into what the source and sink need; a bad value is an error naming the
//! table, the option and what it accepts. Plain functions of the options.

use std::collections::BTreeMap;

use crate::{Error, Result};
use weir_plan::table::TableDef;

/// Where a source starts (`scan.startup.mode`) or stops
/// (`scan.bounded.mode`) in each partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offsets {
    /// `earliest-offset` (start only).
    Earliest,
    /// `latest-offset`: the end of each partition when the job starts.
    Latest,
    /// `group-offsets`: the consumer group's committed offsets.
    Group,
    /// `timestamp`: the first record at or after these ms since the epoch.
    Timestamp(i64),
    /// `specific-offsets`: per partition.
    Specific(BTreeMap<i32, i64>),
}

/// The topics a source reads.
#[derive(Debug, Clone)]
pub enum Topics {
    /// `topic`: these (`;`-separated in the option).
    Names(Vec<String>),
    /// `topic-pattern`: every topic whose whole name matches.
    Pattern(regex::Regex),
}

/// A Kafka source's options.
#[derive(Debug, Clone)]
pub struct SourceOptions {
    /// What it reads.
    pub topics: Topics,
    /// `properties.bootstrap.servers`.
    pub bootstrap: String,
    /// `properties.group.id`.
    pub group_id: Option<String>,
    /// Every `properties.*` option, the prefix taken off (for the client).
    pub properties: Vec<(String, String)>,
    /// `scan.startup.mode` (Flink's default: `group-offsets`).
    pub startup: Offsets,
    /// `scan.bounded.mode`; `None`: unbounded.
    pub bounded: Option<Offsets>,
}

/// `sink.delivery-guarantee`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// `none`.
    None,
    /// `at-least-once` (Flink's default): flushed at every checkpoint.
    AtLeastOnce,
    /// `exactly-once`: a transaction per subtask per checkpoint.
    ExactlyOnce,
}

fn invalid(table: &TableDef, key: &str, value: &str, accepted: &str) -> Error {
    Error::sql(format!(
        "table '{}': invalid value '{value}' for option '{key}'; {accepted}",
        table.name
    ))
}

/// Per-partition offsets of `partition:0,offset:42;partition:1,offset:300`.
pub fn specific_offsets(text: &str) -> Option<BTreeMap<i32, i64>> {
    text.split(';')
        .filter(|s| !s.trim().is_empty())
        .map(|entry| {
            let (partition, offset) = entry.trim().split_once(',')?;
            let partition = partition.trim().strip_prefix("partition:")?.trim().parse().ok()?;
            let offset = offset.trim().strip_prefix("offset:")?.trim().parse().ok()?;
            Some((partition, offset))
        })
        .collect::<Option<BTreeMap<_, _>>>()
        .filter(|offsets| !offsets.is_empty())
}

/// The offsets of mode option `mode` (`scan.startup` or `scan.bounded`),
/// with its `.timestamp-millis` and `.specific-offsets` companions.
fn offsets(table: &TableDef, prefix: &str, mode: &str, earliest: bool) -> Result<Offsets> {
    let key = format!("{prefix}.mode");
    let companion = |name: &str| -> Result<&str> {
        let companion = format!("{prefix}.{name}");
        table.option(&companion).ok_or_else(|| {
            Error::sql(format!(
                "table '{}': '{key}' = '{mode}' needs the option '{companion}'",
                table.name
            ))
        })
    };
    Ok(match mode {
        "earliest-offset" if earliest => Offsets::Earliest,
        "latest-offset" => Offsets::Latest,
        "group-offsets" => Offsets::Group,
        "timestamp" => {
            let text = companion("timestamp-millis")?;
            Offsets::Timestamp(text.trim().parse().map_err(|_| {
                invalid(
                    table,
                    &format!("{prefix}.timestamp-millis"),
                    text,
                    "expected milliseconds since the epoch",
                )
            })?)
        }
        "specific-offsets" => {
            let text = companion("specific-offsets")?;
            Offsets::Specific(specific_offsets(text).ok_or_else(|| {
                invalid(
                    table,
                    &format!("{prefix}.specific-offsets"),
                    text,
                    "expected 'partition:0,offset:42;partition:1,offset:300'",
                )
            })?)
        }
        other => {
            let modes = match earliest {
                true => "earliest-offset, latest-offset, group-offsets, timestamp, specific-offsets",
                false => "unbounded, latest-offset, group-offsets, timestamp, specific-offsets",
            };
            return Err(invalid(table, &key, other, &format!("expected one of {modes}")));
        }
    })
}

impl SourceOptions {
    /// The source options of `table`.
    pub fn parse(table: &TableDef) -> Result<SourceOptions> {
        let topics = match (table.option("topic"), table.option("topic-pattern")) {
            (Some(_), Some(_)) => {
                return Err(Error::sql(format!(
                    "table '{}': give 'topic' or 'topic-pattern', not both",
                    table.name
                )));
            }
            (None, None) => {
                return Err(Error::sql(format!(
                    "table '{}': a Kafka source needs 'topic' or 'topic-pattern'",
                    table.name
                )));
            }
            (Some(names), None) => Topics::Names(
                names
                    .split(';')
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
                    .collect(),
            ),
            (None, Some(pattern)) => {
                Topics::Pattern(regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
                    invalid(
                        table,
                        "topic-pattern",
                        pattern,
                        &format!("not a regular expression: {e}"),
                    )
                })?)
            }
        };
        let bootstrap = table.option("properties.bootstrap.servers").ok_or_else(|| {
            Error::sql(format!(
                "table '{}': a Kafka table needs the option 'properties.bootstrap.servers'",
                table.name
            ))
        })?;
        let group_id = table.option("properties.group.id").map(str::to_string);
        let startup = offsets(
            table,
            "scan.startup",
            // upsert-kafka reads every change of its keys: from the start.
            match table.option("connector") {
                Some("upsert-kafka") => "earliest-offset",
                _ => table.option("scan.startup.mode").unwrap_or("group-offsets"),
            },
            true,
        )?;
        let bounded = match table.option("scan.bounded.mode").unwrap_or("unbounded") {
            "unbounded" => None,
            mode => Some(offsets(table, "scan.bounded", mode, false)?),
        };
        Ok(SourceOptions {
            topics,
            bootstrap: bootstrap.to_string(),
            group_id,
            properties: properties(table),
            startup,
            bounded,
        })
    }
}

impl SourceOptions {
    /// Reading from committed offsets needs a group (checked when the table
    /// is read: a table only written needs none).
    pub fn check_group(&self, table: &TableDef) -> Result<()> {
        let uses_group = self.startup == Offsets::Group || self.bounded == Some(Offsets::Group);
        if self.group_id.is_none() && uses_group {
            return Err(Error::sql(format!(
                "table '{}': 'group-offsets' needs the option 'properties.group.id'",
                table.name
            )));
        }
        Ok(())
    }
}

/// Every `properties.*` option without its prefix.
pub fn properties(table: &TableDef) -> Vec<(String, String)> {
    table
        .options
        .entries()
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("properties.")?.to_string(), v.clone())))
        .collect()
}

/// `sink.delivery-guarantee`, and the transactional id prefix exactly-once
/// needs (`sink.transactional-id-prefix`, required then, as in Flink).
pub fn delivery(table: &TableDef) -> Result<(Delivery, Option<String>)> {
    let key = "sink.delivery-guarantee";
    let delivery = match table.option(key).unwrap_or("at-least-once") {
        "none" => Delivery::None,
        "at-least-once" => Delivery::AtLeastOnce,
        "exactly-once" => Delivery::ExactlyOnce,
        other => {
            return Err(invalid(
                table,
                key,
                other,
                "expected one of none, at-least-once, exactly-once",
            ));
        }
    };
    let prefix = table.option("sink.transactional-id-prefix").map(str::to_string);
    if delivery == Delivery::ExactlyOnce && prefix.is_none() {
        return Err(Error::sql(format!(
            "table '{}': 'sink.delivery-guarantee' = 'exactly-once' needs 'sink.transactional-id-prefix' \
             (unique to the job: its transactions are named by it)",
            table.name
        )));
    }
    Ok((delivery, prefix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_plan::table::{ColumnDef, TableOptions};

    fn table(options: &[(&str, &str)]) -> TableDef {
        let mut entries = vec![
            ("connector".to_string(), "kafka".to_string()),
            (
                "properties.bootstrap.servers".to_string(),
                "localhost:9092".to_string(),
            ),
        ];
        entries.extend(options.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        TableDef {
            name: "t".into(),
            columns: vec![ColumnDef::physical("v", arrow::datatypes::DataType::Utf8, true)],
            primary_key: vec![],
            partition_keys: vec![],
            options: TableOptions::new(entries).unwrap(),
        }
    }

    fn source(options: &[(&str, &str)]) -> Result<SourceOptions> {
        SourceOptions::parse(&table(options))
    }

    #[test]
    fn topics_startup_and_bounded_modes_are_read_as_flink_names_them() {
        let parsed = source(&[
            ("topic", "a;b"),
            ("scan.startup.mode", "specific-offsets"),
            (
                "scan.startup.specific-offsets",
                "partition:0,offset:42;partition:1,offset:300",
            ),
            ("scan.bounded.mode", "latest-offset"),
        ])
        .unwrap();
        assert!(matches!(&parsed.topics, Topics::Names(n) if n == &["a", "b"]));
        assert_eq!(
            parsed.startup,
            Offsets::Specific(BTreeMap::from([(0, 42), (1, 300)]))
        );
        assert_eq!(parsed.bounded, Some(Offsets::Latest));
        let parsed = source(&[
            ("topic-pattern", "in-[0-9]+"),
            ("scan.startup.mode", "earliest-offset"),
        ])
        .unwrap();
        let Topics::Pattern(pattern) = parsed.topics else {
            panic!("a pattern")
        };
        assert!(
            pattern.is_match("in-12") && !pattern.is_match("in-12x"),
            "the whole name matches"
        );
        assert_eq!(parsed.bounded, None);
        let parsed = source(&[
            ("topic", "a"),
            ("scan.startup.mode", "timestamp"),
            ("scan.startup.timestamp-millis", "1700"),
        ]);
        assert_eq!(parsed.unwrap().startup, Offsets::Timestamp(1700));
    }

    #[test]
    fn bad_or_missing_options_are_named() {
        let error = |options: &[(&str, &str)]| source(options).unwrap_err().to_string();
        assert!(error(&[]).contains("needs 'topic' or 'topic-pattern'"));
        assert!(error(&[("topic", "a"), ("topic-pattern", "b")]).contains("not both"));
        let t = table(&[("topic", "a")]);
        let group = SourceOptions::parse(&t)
            .unwrap()
            .check_group(&t)
            .unwrap_err()
            .to_string();
        assert!(
            group.contains("'group-offsets' needs the option 'properties.group.id'"),
            "{group}"
        );
        assert!(
            error(&[("topic", "a"), ("scan.startup.mode", "newest")])
                .contains("expected one of earliest-offset")
        );
        let bad = error(&[
            ("topic", "a"),
            ("scan.startup.mode", "specific-offsets"),
            ("scan.startup.specific-offsets", "p0"),
        ]);
        assert!(bad.contains("expected 'partition:0,offset:42"), "{bad}");
        let missing = error(&[
            ("topic", "a"),
            ("properties.group.id", "g"),
            ("scan.bounded.mode", "timestamp"),
        ]);
        assert!(
            missing.contains("needs the option 'scan.bounded.timestamp-millis'"),
            "{missing}"
        );
    }

    #[test]
    fn exactly_once_needs_a_transactional_id_prefix() {
        assert_eq!(delivery(&table(&[])).unwrap(), (Delivery::AtLeastOnce, None));
        let error = delivery(&table(&[("sink.delivery-guarantee", "exactly-once")])).unwrap_err();
        assert!(error.to_string().contains("needs 'sink.transactional-id-prefix'"));
        let (guarantee, prefix) = delivery(&table(&[
            ("sink.delivery-guarantee", "exactly-once"),
            ("sink.transactional-id-prefix", "job-1"),
        ]))
        .unwrap();
        assert_eq!(
            (guarantee, prefix.as_deref()),
            (Delivery::ExactlyOnce, Some("job-1"))
        );
        assert_eq!(
            properties(&table(&[("properties.acks", "all")])),
            vec![
                ("bootstrap.servers".to_string(), "localhost:9092".to_string()),
                ("acks".to_string(), "all".to_string())
            ]
        );
    }
}
