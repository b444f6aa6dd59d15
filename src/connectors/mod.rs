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

pub mod blackhole;
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

use crate::config::SessionConfig;
use crate::frontend::catalog::TableDef;
use crate::runtime::SourceFactory;
use crate::{Error, Result};
pub use sink::{SinkFactory, SinkWriter};

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
    let inner = connector_source(table, projection, schema.clone(), config)?;
    Ok(Arc::new(ConnectorSource {
        spec: crate::plan::spec::SourceSpec::Connector {
            table: crate::plan::spec::TableData::of(table)?,
            projection: projection.to_vec(),
            schema: crate::plan::codec::SchemaData::encode(&schema)?,
        },
        inner,
    }))
}

/// A connector's source, with what created it (so a plan can be written out
/// and the source created again).
#[derive(Debug)]
struct ConnectorSource {
    spec: crate::plan::spec::SourceSpec,
    inner: Arc<dyn SourceFactory>,
}

impl SourceFactory for ConnectorSource {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn is_bounded(&self) -> bool {
        self.inner.is_bounded()
    }

    fn estimated_bytes(&self) -> Option<u64> {
        self.inner.estimated_bytes()
    }

    fn create_reader(
        &self,
        ctx: &crate::runtime::TaskContext,
    ) -> Result<Box<dyn crate::runtime::SourceReader>> {
        self.inner.create_reader(ctx)
    }

    fn supports_checkpoints(&self) -> bool {
        self.inner.supports_checkpoints()
    }

    fn idle_timeout(&self) -> Option<std::time::Duration> {
        self.inner.idle_timeout()
    }

    fn allows_idle_subtasks(&self) -> bool {
        self.inner.allows_idle_subtasks()
    }

    fn upsert_key(&self) -> Option<Vec<usize>> {
        self.inner.upsert_key()
    }

    fn spec(&self) -> Result<crate::plan::spec::SourceSpec> {
        Ok(self.spec.clone())
    }
}

/// A connector's sink, with what created it.
#[derive(Debug)]
struct ConnectorSink {
    spec: crate::plan::spec::SinkSpec,
    inner: Arc<dyn SinkFactory>,
}

impl SinkFactory for ConnectorSink {
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn create_writer(&self, ctx: &crate::runtime::TaskContext) -> Result<Box<dyn SinkWriter>> {
        self.inner.create_writer(ctx)
    }

    fn accepts_updates(&self) -> bool {
        self.inner.accepts_updates()
    }

    fn needs_update_before(&self) -> bool {
        self.inner.needs_update_before()
    }

    fn spec(&self) -> Result<crate::plan::spec::SinkSpec> {
        Ok(self.spec.clone())
    }
}

fn connector_source(
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
    let inner = connector_sink(table, schema.clone(), config)?;
    Ok(Arc::new(ConnectorSink {
        spec: crate::plan::spec::SinkSpec::Connector {
            table: crate::plan::spec::TableData::of(table)?,
            schema: crate::plan::codec::SchemaData::encode(&schema)?,
        },
        inner,
    }))
}

fn connector_sink(
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

/// Parses an option as a number, with a clear error.
pub fn parse_option<T: std::str::FromStr>(table: &TableDef, key: &str) -> Result<Option<T>> {
    match table.option(key) {
        None => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| {
            Error::sql(format!(
                "table '{}': invalid value '{v}' for option '{key}'",
                table.name
            ))
        }),
    }
}

/// Parses a boolean option (`true` / `false`).
pub fn parse_bool_option(table: &TableDef, key: &str, default: bool) -> Result<bool> {
    match table.option(key).map(str::to_ascii_lowercase).as_deref() {
        None => Ok(default),
        Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(v) => Err(Error::sql(format!(
            "table '{}': invalid value '{v}' for option '{key}': expected true or false",
            table.name
        ))),
    }
}

/// `scan.watermark.idle-timeout` of a table, else the session's
/// `table.exec.source.idle-timeout`: how long a source split (or subtask)
/// goes without data before it stops holding the watermark back.
pub fn idle_timeout(table: &TableDef, config: &SessionConfig) -> Result<Option<std::time::Duration>> {
    const KEY: &str = "scan.watermark.idle-timeout";
    match table.option(KEY) {
        None => config.source_idle_timeout(),
        Some(v) => match crate::config::parse_duration(v) {
            Some(d) if d.is_zero() => Ok(None),
            Some(d) => Ok(Some(d)),
            None => Err(Error::sql(format!(
                "table '{}': invalid value '{v}' for option '{KEY}': expected a duration such as '5 s'",
                table.name
            ))),
        },
    }
}
