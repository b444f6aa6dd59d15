//! The catalog: tables declared with `CREATE TABLE` and views from `CREATE VIEW`.
//!
//! Names are case-sensitive, as in Flink.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::parser::CreateView;
use crate::{Error, Result};
use weir_common::types::{PROCTIME, ROWTIME, TIME_ATTRIBUTE_KEY};
use weir_plan::table::{ColumnDef, MetadataColumn, TableDef, TableOptions};

/// A column of a catalog table: physical, metadata or computed.
#[derive(Debug, Clone)]
pub struct CatalogColumn {
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

impl CatalogColumn {
    /// A physical column.
    pub fn physical(name: impl Into<String>, data_type: DataType, nullable: bool) -> Self {
        CatalogColumn {
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

/// A table of the catalog: its columns (computed ones too), watermark
/// and connector options.
#[derive(Debug, Clone)]
pub struct CatalogTable {
    /// Name.
    pub name: String,
    /// Columns in declaration order, physical and computed.
    pub columns: Vec<CatalogColumn>,
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

impl CatalogTable {
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

    /// The table as its connector sees it: its physical and metadata
    /// columns (no computed columns, no watermark).
    pub fn connector_table(&self) -> TableDef {
        TableDef {
            name: self.name.clone(),
            columns: (self.columns.iter())
                .filter(|c| c.computed.is_none())
                .map(|c| ColumnDef {
                    name: c.name.clone(),
                    data_type: c.data_type.clone(),
                    nullable: c.nullable,
                    metadata: c.metadata.clone(),
                })
                .collect(),
            primary_key: self.primary_key.clone(),
            partition_keys: self.partition_keys.clone(),
            options: self.options.clone(),
        }
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
    tables: BTreeMap<String, Arc<CatalogTable>>,
    views: BTreeMap<String, Arc<ViewDef>>,
}

impl Catalog {
    /// A table by name.
    pub fn table(&self, name: &str) -> Option<&Arc<CatalogTable>> {
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
    pub fn add_table(&mut self, table: CatalogTable) -> Result<()> {
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
