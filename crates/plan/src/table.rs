//! A table as its connector sees it: its physical and metadata columns,
//! primary key, partition keys and `WITH (...)` options. Computed columns
//! and the watermark are the SQL layer's (they are planned into operators),
//! so a connector never sees them.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::{Error, Result};
use weir_common::config::SessionConfig;

/// A column a connector reads or writes.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnDef {
    /// Name.
    pub name: String,
    /// Type.
    pub data_type: DataType,
    /// Whether NULL is allowed.
    pub nullable: bool,
    /// For a metadata column (`METADATA [FROM 'key'] [VIRTUAL]`), what it is.
    pub metadata: Option<MetadataColumn>,
}

impl ColumnDef {
    /// A physical column.
    pub fn physical(name: impl Into<String>, data_type: DataType, nullable: bool) -> Self {
        ColumnDef {
            name: name.into(),
            data_type,
            nullable,
            metadata: None,
        }
    }
}

/// A metadata column: a value the connector reads (or writes) beside the
/// record's fields, such as a Kafka record's partition, offset or timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataColumn {
    /// The connector's metadata key (`FROM 'key'`, or the column's name).
    pub key: String,
    /// `VIRTUAL`: read only, not written by an `INSERT`.
    pub is_virtual: bool,
}

/// Connector options, `WITH ('key' = 'value', ...)`, in declaration order.
#[derive(Debug, Clone, Default)]
pub struct TableOptions {
    entries: Vec<(String, String)>,
}

impl TableOptions {
    /// Options from key/value pairs; a key given twice is an error.
    pub fn new(entries: Vec<(String, String)>) -> Result<Self> {
        for (i, (key, _)) in entries.iter().enumerate() {
            if entries[..i].iter().any(|(k, _)| k == key) {
                return Err(Error::sql(format!("option '{key}' is given twice")));
            }
        }
        Ok(TableOptions { entries })
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// All options in declaration order.
    pub fn entries(&self) -> &[(String, String)] {
        &self.entries
    }
}

/// A table, as its connector sees it.
#[derive(Debug, Clone)]
pub struct TableDef {
    /// Name.
    pub name: String,
    /// Physical and metadata columns, in declaration order.
    pub columns: Vec<ColumnDef>,
    /// Primary key columns (not enforced, as in Flink).
    pub primary_key: Vec<String>,
    /// `PARTITIONED BY` columns: the filesystem connector stores their values in
    /// the directory names (`dt=2020-01-01/hm=00%3A00`), not in the files.
    pub partition_keys: Vec<String>,
    /// Connector options.
    pub options: TableOptions,
}

impl TableDef {
    /// The physical columns: the fields of the connector's records.
    pub fn physical_schema(&self) -> SchemaRef {
        self.schema_of(|c| c.metadata.is_none())
    }

    /// The columns a source reads: physical and metadata columns, in order.
    pub fn read_schema(&self) -> SchemaRef {
        self.schema_of(|_| true)
    }

    /// The columns an `INSERT` writes: physical and non-virtual metadata columns.
    pub fn write_schema(&self) -> SchemaRef {
        self.schema_of(|c| !c.metadata.as_ref().is_some_and(|m| m.is_virtual))
    }

    /// The metadata columns, by name.
    pub fn metadata_columns(&self) -> impl Iterator<Item = (&str, &MetadataColumn)> {
        self.columns
            .iter()
            .filter_map(|c| c.metadata.as_ref().map(|m| (c.name.as_str(), m)))
    }

    fn schema_of(&self, keep: impl Fn(&ColumnDef) -> bool) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns
                .iter()
                .filter(|c| keep(c))
                .map(|c| Field::new(&c.name, c.data_type.clone(), c.nullable))
                .collect::<Vec<_>>(),
        ))
    }

    /// The value of a connector option.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options.get(key)
    }

    /// Parses an option as a number, with a clear error.
    pub fn parse_option<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>> {
        match self.option(key) {
            None => Ok(None),
            Some(v) => v.trim().parse().map(Some).map_err(|_| {
                Error::sql(format!(
                    "table '{}': invalid value '{v}' for option '{key}'",
                    self.name
                ))
            }),
        }
    }

    /// Parses a boolean option (`true` / `false`).
    pub fn parse_bool_option(&self, key: &str, default: bool) -> Result<bool> {
        match self.option(key).map(str::to_ascii_lowercase).as_deref() {
            None => Ok(default),
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(v) => Err(Error::sql(format!(
                "table '{}': invalid value '{v}' for option '{key}': expected true or false",
                self.name
            ))),
        }
    }

    /// `scan.watermark.idle-timeout` of a table, else the session's
    /// `table.exec.source.idle-timeout`: how long a source split (or subtask)
    /// goes without data before it stops holding the watermark back.
    pub fn idle_timeout(&self, config: &SessionConfig) -> Result<Option<std::time::Duration>> {
        const KEY: &str = "scan.watermark.idle-timeout";
        match self.option(KEY) {
            None => config.source_idle_timeout(),
            Some(v) => match weir_common::config::parse_duration(v) {
                Some(d) if d.is_zero() => Ok(None),
                Some(d) => Ok(Some(d)),
                None => Err(Error::sql(format!(
                    "table '{}': invalid value '{v}' for option '{KEY}': expected a duration such as '5 s'",
                    self.name
                ))),
            },
        }
    }

    /// The connector name (`'connector'` option).
    pub fn connector(&self) -> Result<&str> {
        self.option("connector").ok_or_else(|| {
            Error::sql(format!(
                "table '{}' has no 'connector' option; add WITH ('connector' = '...')",
                self.name
            ))
        })
    }
}
