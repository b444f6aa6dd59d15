//! The catalog: tables declared with `CREATE TABLE` and views from `CREATE VIEW`.
//!
//! Names are case-sensitive, as in Flink.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::parser::CreateView;
use crate::config::SessionConfig;
use crate::types::{PROCTIME, ROWTIME, TIME_ATTRIBUTE_KEY};
use crate::{Error, Result};

/// A column of a table.
#[derive(Debug, Clone)]
pub struct ColumnDef {
    /// Name.
    pub name: String,
    /// Type (a `TIMESTAMP_LTZ` carries the catalog zone, see [`super::types`]).
    pub data_type: DataType,
    /// Whether NULL is allowed.
    pub nullable: bool,
    /// For a computed column, its expression.
    pub computed: Option<sqlparser::ast::Expr>,
    /// Source text of the computed expression, for DESCRIBE and EXPLAIN.
    pub computed_text: Option<String>,
    /// For a metadata column (`METADATA [FROM 'key'] [VIRTUAL]`), what it is.
    pub metadata: Option<MetadataColumn>,
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

impl ColumnDef {
    /// A physical column.
    pub fn physical(name: impl Into<String>, data_type: DataType, nullable: bool) -> Self {
        ColumnDef {
            name: name.into(),
            data_type,
            nullable,
            computed: None,
            computed_text: None,
            metadata: None,
        }
    }
}

/// `WATERMARK FOR column AS expr`.
#[derive(Debug, Clone)]
pub struct WatermarkDef {
    /// The rowtime column.
    pub column: String,
    /// The watermark expression.
    pub expr: sqlparser::ast::Expr,
    /// Its source text.
    pub text: String,
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

/// A table: schema, watermark and connector options.
#[derive(Debug, Clone)]
pub struct TableDef {
    /// Name.
    pub name: String,
    /// Columns in declaration order, physical and computed.
    pub columns: Vec<ColumnDef>,
    /// The watermark, if any.
    pub watermark: Option<WatermarkDef>,
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
        self.schema_of(|c| c.computed.is_none() && c.metadata.is_none())
    }

    /// The columns a source reads: physical and metadata columns, in order.
    pub fn read_schema(&self) -> SchemaRef {
        self.schema_of(|c| c.computed.is_none())
    }

    /// The columns an `INSERT` writes: physical and non-virtual metadata columns.
    pub fn write_schema(&self) -> SchemaRef {
        self.schema_of(|c| c.computed.is_none() && !c.metadata.as_ref().is_some_and(|m| m.is_virtual))
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

    /// Every column, with time attributes marked in the field metadata.
    pub fn full_schema(&self) -> SchemaRef {
        Arc::new(Schema::new(
            self.columns
                .iter()
                .map(|c| {
                    let field = Field::new(&c.name, c.data_type.clone(), c.nullable);
                    match self.time_attribute(&c.name) {
                        Some(kind) => {
                            field.with_metadata([(TIME_ATTRIBUTE_KEY.to_string(), kind.to_string())].into())
                        }
                        None => field,
                    }
                })
                .collect::<Vec<_>>(),
        ))
    }

    /// `rowtime` for the watermark column, `proctime` for a `PROCTIME()` column.
    pub fn time_attribute(&self, column: &str) -> Option<&'static str> {
        if self.watermark.as_ref().is_some_and(|w| w.column == column) {
            return Some(ROWTIME);
        }
        let c = self.columns.iter().find(|c| c.name == column)?;
        match &c.computed {
            Some(sqlparser::ast::Expr::Function(f))
                if f.name.to_string().eq_ignore_ascii_case("PROCTIME") =>
            {
                Some(PROCTIME)
            }
            _ => None,
        }
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
            Some(v) => match crate::config::parse_duration(v) {
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

/// A view: a named query, planned where it is used.
#[derive(Debug, Clone)]
pub struct ViewDef {
    /// What it is made of.
    pub body: ViewBody,
    /// Its text, for SHOW CREATE VIEW (a Table API view's: its plan).
    pub text: String,
    /// The schema it had when it was created.
    pub schema: SchemaRef,
}

/// What a view is made of.
#[derive(Debug, Clone)]
pub enum ViewBody {
    /// `CREATE VIEW`: its query, bound where the view is used.
    Sql(CreateView),
    /// A Table API value (`Engine::create_temporary_view`): its logical
    /// plan, bound already.
    Plan(datafusion_expr::LogicalPlan),
}

/// Tables and views by name.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    tables: BTreeMap<String, Arc<TableDef>>,
    views: BTreeMap<String, Arc<ViewDef>>,
}

impl Catalog {
    /// A table by name.
    pub fn table(&self, name: &str) -> Option<&Arc<TableDef>> {
        self.tables.get(name)
    }

    /// A view by name.
    pub fn view(&self, name: &str) -> Option<&Arc<ViewDef>> {
        self.views.get(name)
    }

    /// True when a table or view has this name.
    pub fn contains(&self, name: &str) -> bool {
        self.tables.contains_key(name) || self.views.contains_key(name)
    }

    /// Adds a table; the name must be free.
    pub fn add_table(&mut self, table: TableDef) -> Result<()> {
        self.check_free(&table.name)?;
        self.tables.insert(table.name.clone(), Arc::new(table));
        Ok(())
    }

    /// Adds a view; the name must be free.
    pub fn add_view(&mut self, name: String, view: ViewDef) -> Result<()> {
        self.check_free(&name)?;
        self.views.insert(name, Arc::new(view));
        Ok(())
    }

    fn check_free(&self, name: &str) -> Result<()> {
        if self.contains(name) {
            return Err(Error::sql(format!(
                "a table or view named '{name}' already exists"
            )));
        }
        Ok(())
    }

    /// Removes a table; false when there was none.
    pub fn drop_table(&mut self, name: &str) -> bool {
        self.tables.remove(name).is_some()
    }

    /// Removes a view; false when there was none.
    pub fn drop_view(&mut self, name: &str) -> bool {
        self.views.remove(name).is_some()
    }

    /// Table names, sorted.
    pub fn table_names(&self) -> Vec<String> {
        self.tables.keys().cloned().collect()
    }

    /// View names, sorted.
    pub fn view_names(&self) -> Vec<String> {
        self.views.keys().cloned().collect()
    }

    /// A name close to `name`, for "did you mean" hints.
    pub fn similar_name(&self, name: &str) -> Option<String> {
        self.tables
            .keys()
            .chain(self.views.keys())
            .find(|candidate| candidate.eq_ignore_ascii_case(name))
            .cloned()
    }
}
