//! Apache Kafka, as Flink's `kafka` connector: the source ([`source`]) reads
//! partitions as splits with offsets in checkpoints; the table's columns
//! come from the records' keys, values and metadata ([`layout`]). The
//! exactly-once sink's hard part, committing after a restore a transaction
//! that a completed checkpoint recorded ([`transactions`]), is in place; the
//! sink follows.

pub mod client;
pub mod fetch;
pub mod layout;
pub mod options;
pub mod sink;
pub mod source;
pub mod transactions;
pub mod wire;

use crate::OptionSpec;
use crate::Result;
use weir_plan::table::TableDef;

/// The options of the `kafka` connector.
const OPTIONS: OptionSpec = OptionSpec {
    connector: "kafka",
    keys: &[
        "topic",
        "topic-pattern",
        "format",
        "key.format",
        "key.fields",
        "key.fields-prefix",
        "value.format",
        "value.fields-include",
        "scan.startup.mode",
        "scan.startup.timestamp-millis",
        "scan.startup.specific-offsets",
        "scan.bounded.mode",
        "scan.bounded.timestamp-millis",
        "scan.bounded.specific-offsets",
        "scan.watermark.idle-timeout",
        "sink.delivery-guarantee",
        "sink.transactional-id-prefix",
        "sink.partitioner",
        "sink.parallelism",
    ],
    prefixes: &[
        "properties.",
        "json.",
        "csv.",
        "key.json.",
        "key.csv.",
        "value.json.",
        "value.csv.",
    ],
    required: &["properties.bootstrap.servers"],
};

/// The options of the `upsert-kafka` connector: no startup mode (it reads
/// from the earliest offset), no `key.fields` (the key is the primary key).
const UPSERT_OPTIONS: OptionSpec = OptionSpec {
    connector: "upsert-kafka",
    keys: &[
        "topic",
        "topic-pattern",
        "key.format",
        "key.fields-prefix",
        "value.format",
        "value.fields-include",
        "scan.bounded.mode",
        "scan.bounded.timestamp-millis",
        "scan.bounded.specific-offsets",
        "scan.watermark.idle-timeout",
        "sink.delivery-guarantee",
        "sink.transactional-id-prefix",
        "sink.parallelism",
    ],
    prefixes: OPTIONS.prefixes,
    required: &["properties.bootstrap.servers", "key.format", "value.format"],
};

/// Checks a Kafka (or upsert-Kafka) table's options and columns at `CREATE TABLE`.
pub fn validate(table: &TableDef) -> Result<()> {
    match layout::is_upsert(table) {
        true => UPSERT_OPTIONS.validate(table, &[], &[])?,
        false => OPTIONS.validate(table, &[], &[])?,
    }
    for (name, metadata) in table.metadata_columns() {
        layout::metadata_key(table, name, &metadata.key)?;
    }
    let all: Vec<usize> = (0..table.read_schema().fields().len()).collect();
    layout::Layout::new(table, &all, table.read_schema())?;
    options::SourceOptions::parse(table).map(drop)
}
