//! Connectors: sources and sinks, chosen by a table's `'connector'` option.
//!
//! | connector    | source | sink | options module            |
//! |--------------|--------|------|---------------------------|
//! | `datagen`    | yes    |      | [`datagen`]               |
//! | `filesystem` | yes    | yes  | [`filesystem`]            |
//! | `nexmark`    | yes    |      | [`nexmark`]               |
//! | `print`      |        | yes  | [`print`]                 |
//! | `blackhole`  |        | yes  | [`blackhole`]             |
//! | `checkpoint` | yes    |      | [`checkpoint`]            |
//! | `kafka`      | yes    | yes  | [`kafka`]                 |
//! | `upsert-kafka` | yes  | yes  | [`kafka`]                 |
//!
//! The embedded API's results go through [`collect`], an internal sink, and
//! constant queries (`SELECT 1`, `VALUES`) through [`values`].
#![warn(missing_docs)]

pub mod blackhole;
pub mod build;
pub mod checkpoint;
pub mod collect;
pub mod datagen;
pub mod filesystem;
pub mod format;
pub mod kafka;
pub mod nexmark;
pub mod print;
pub mod sink;
pub mod values;

use std::sync::Arc;

use arrow::datatypes::SchemaRef;

pub use build::BuiltinConnectors;
pub use sink::{SinkFactory, SinkWriter};
use weir_common::config::SessionConfig;
use weir_plan::table::TableDef;
use weir_runtime::SourceFactory;

/// The options a connector accepts: exact keys and key prefixes.
pub struct OptionSpec {
    /// The connector's name.
    pub connector: &'static str,
    /// Keys it accepts.
    pub keys: &'static [&'static str],
    /// Prefixes of keys it accepts (`fields.`).
    pub prefixes: &'static [&'static str],
    /// Keys it requires.
    pub required: &'static [&'static str],
}

impl OptionSpec {
    /// Checks a table's options: every required key present, no unknown key.
    pub fn validate(&self, table: &TableDef, extra_keys: &[&str], extra_prefixes: &[&str]) -> Result<()> {
        for key in self.required {
            if table.option(key).is_none() {
                return Err(Error::sql(format!(
                    "table '{}': connector '{}' requires the option '{key}'",
                    table.name, self.connector
                )));
            }
        }
        let unknown: Vec<&str> = table
            .options
            .entries()
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| *k != "connector")
            .filter(|k| !self.keys.contains(k) && !extra_keys.contains(k))
            .filter(|k| {
                !self
                    .prefixes
                    .iter()
                    .chain(extra_prefixes)
                    .any(|p| k.starts_with(p))
            })
            .collect();
        if !unknown.is_empty() {
            let mut supported: Vec<String> = self
                .keys
                .iter()
                .chain(extra_keys)
                .map(|k| k.to_string())
                .chain(
                    self.prefixes
                        .iter()
                        .chain(extra_prefixes)
                        .map(|p| format!("{p}*")),
                )
                .collect();
            supported.sort();
            return Err(Error::sql(format!(
                "table '{}': unsupported options for connector '{}': {}. Supported options: {}",
                table.name,
                self.connector,
                unknown.join(", "),
                supported.join(", ")
            )));
        }
        Ok(())
    }
}

/// The source of a table, reading the physical columns `projection` (indices
/// into the table's physical schema) as `schema` (their types as bound in the
/// session, e.g. `TIMESTAMP_LTZ` in the session's zone).
pub fn create_source(
    table: &TableDef,
    projection: &[usize],
    schema: SchemaRef,
    config: &SessionConfig,
) -> Result<Arc<dyn SourceFactory>> {
    match table.connector()? {
        "datagen" => datagen::DatagenFactory::try_new(table, projection, schema, config),
        "filesystem" => filesystem::FileSourceFactory::try_new(table, projection, schema, config),
        "nexmark" => nexmark::NexmarkFactory::try_new(table, projection, schema, config),
        "checkpoint" => checkpoint::create_source(table, projection, schema),
        "kafka" | "upsert-kafka" => {
            kafka::source::KafkaSourceFactory::try_new(table, projection, schema, config)
        }
        "print" | "blackhole" => Err(Error::sql(format!(
            "table '{}' uses connector '{}', which can only be written to",
            table.name,
            table.connector()?
        ))),
        other => Err(unknown_connector(table, other)),
    }
}

/// The sink writing a table's physical columns, receiving rows of `schema`.
pub fn create_sink(
    table: &TableDef,
    schema: SchemaRef,
    config: &SessionConfig,
) -> Result<Arc<dyn SinkFactory>> {
    match table.connector()? {
        "filesystem" => filesystem::FileSinkFactory::try_new(table, schema, config),
        "print" => print::PrintSinkFactory::try_new(table, schema, config),
        "blackhole" => blackhole::BlackholeSinkFactory::try_new(table),
        "kafka" | "upsert-kafka" => kafka::sink::KafkaSinkFactory::try_new(table, schema),
        "datagen" | "nexmark" | "checkpoint" => Err(Error::sql(format!(
            "table '{}' uses connector '{}', which can only be read",
            table.name,
            table.connector()?
        ))),
        other => Err(unknown_connector(table, other)),
    }
}

/// Validates a table's connector options at `CREATE TABLE` time.
pub fn validate_table(table: &TableDef, config: &SessionConfig) -> Result<()> {
    let connector = table.connector()?;
    if !matches!(connector, "kafka" | "upsert-kafka")
        && let Some((name, metadata)) = table.metadata_columns().next()
    {
        return Err(Error::sql(format!(
            "table '{}': connector '{connector}' has no metadata, but column '{name}' reads the metadata key '{}'",
            table.name, metadata.key
        )));
    }
    match connector {
        "datagen" => datagen::validate(table),
        "filesystem" => filesystem::validate(table, config),
        "nexmark" => nexmark::validate(table),
        "print" => print::validate(table),
        "blackhole" => blackhole::validate(table),
        "checkpoint" => checkpoint::validate(table),
        "kafka" | "upsert-kafka" => kafka::validate(table),
        other => Err(unknown_connector(table, other)),
    }
}

fn unknown_connector(table: &TableDef, name: &str) -> Error {
    Error::sql(format!(
        "table '{}': unknown connector '{name}'; available: blackhole, checkpoint, datagen, filesystem, kafka, nexmark, print, upsert-kafka",
        table.name
    ))
}

pub use weir_common::{Error, Result};
