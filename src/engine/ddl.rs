//! `CREATE TABLE`: a table's columns, computed columns bound over its
//! physical ones, its watermark checked, its connector's options validated.

use arrow::datatypes::DataType;
use datafusion_expr::ExprSchemable;

use crate::engine::Session;
use crate::{Error, Result};
use weir_common::types::{flink_type_name, is_ltz};
use weir_plan::table::{MetadataColumn, TableOptions};
use weir_sql::catalog::{CatalogColumn, CatalogTable, WatermarkDef};
use weir_sql::parser::{ColumnSpec, CreateTable};

impl Session {
    /// Builds a table from `CREATE TABLE`: types of computed columns come from
    /// binding them over the physical columns; the watermark is checked.
    pub(super) fn table_from_ddl(&self, create: CreateTable) -> Result<CatalogTable> {
        let mut columns = Vec::new();
        for column in &create.columns {
            if columns.iter().any(|c: &CatalogColumn| c.name == column.name()) {
                return Err(Error::sql(format!(
                    "column '{}' is declared twice in table '{}'",
                    column.name(),
                    create.name
                )));
            }
            columns.push(match column {
                ColumnSpec::Physical {
                    name,
                    data_type,
                    nullable,
                    metadata,
                } => CatalogColumn {
                    metadata: metadata.as_ref().map(|(key, is_virtual)| MetadataColumn {
                        key: key.clone(),
                        is_virtual: *is_virtual,
                    }),
                    ..CatalogColumn::physical(name.clone(), data_type.clone(), *nullable)
                },
                ColumnSpec::Computed { name, expr } => CatalogColumn {
                    name: name.clone(),
                    data_type: DataType::Null,
                    nullable: true,
                    computed: Some(expr.as_ref().clone()),
                    computed_text: Some(expr.to_string()),
                    metadata: None,
                },
            });
        }
        let mut table = CatalogTable {
            name: create.name.clone(),
            columns,
            watermark: None,
            primary_key: create.primary_key.clone(),
            partition_keys: create.partition_keys.clone(),
            options: TableOptions::new(weir_sql::legacy_options::translate(
                &create.name,
                create.options.clone(),
            )?)?,
        };
        // Type the computed columns by binding them over the physical columns.
        let computed: Vec<usize> = (0..table.columns.len())
            .filter(|i| table.columns[*i].computed.is_some())
            .collect();
        if !computed.is_empty() {
            let exprs = computed
                .iter()
                .map(|i| table.columns[*i].computed.clone().expect("computed"))
                .collect();
            let (bound, schema) = self
                .with_table(&table)?
                .bind_table_exprs(&table.name, true, exprs)?;
            for (i, expr) in computed.iter().zip(bound) {
                let field = expr.to_field(schema.as_ref())?.1;
                let (data_type, nullable) = (field.data_type().clone(), field.is_nullable());
                // The catalog keeps TIMESTAMP_LTZ in its own zone; binding gives it the session's.
                let data_type = if is_ltz(&data_type) {
                    weir_common::types::with_zone(&data_type, weir_common::types::LTZ_CATALOG_ZONE)
                } else {
                    data_type
                };
                table.columns[*i].data_type = data_type;
                table.columns[*i].nullable = nullable;
            }
        }
        if let Some(w) = &create.watermark {
            let Some(column) = table.columns.iter().find(|c| c.name == w.column) else {
                return Err(Error::sql(format!(
                    "the watermark column '{}' is not a column of table '{}'",
                    w.column, create.name
                )));
            };
            if !matches!(
                &column.data_type,
                DataType::Timestamp(
                    arrow::datatypes::TimeUnit::Millisecond | arrow::datatypes::TimeUnit::Second,
                    _
                )
            ) {
                return Err(Error::sql(format!(
                    "the watermark column '{}' must be TIMESTAMP(p) or TIMESTAMP_LTZ(p) with p at most 3, but is {}",
                    w.column,
                    flink_type_name(&column.data_type)
                )));
            }
            table.watermark = Some(WatermarkDef {
                column: w.column.clone(),
                expr: w.expr.clone(),
                text: w.text.clone(),
            });
            let (bound, schema) =
                self.with_table(&table)?
                    .bind_table_exprs(&table.name, false, vec![w.expr.clone()])?;
            let data_type = bound[0].get_type(schema.as_ref())?;
            if !matches!(data_type, DataType::Timestamp(_, _)) {
                return Err(Error::sql(format!(
                    "the watermark expression '{}' must return a timestamp, but returns {}",
                    w.text,
                    flink_type_name(&data_type)
                )));
            }
        }
        if let Some(key) = table
            .primary_key
            .iter()
            .find(|k| !table.columns.iter().any(|c| &c.name == *k))
        {
            return Err(Error::sql(format!(
                "primary key column '{key}' is not a column of table '{}'",
                table.name
            )));
        }
        for (i, key) in table.partition_keys.iter().enumerate() {
            match table.columns.iter().find(|c| &c.name == key) {
                None => {
                    return Err(Error::sql(format!(
                        "partition key '{key}' is not a column of table '{}'",
                        table.name
                    )));
                }
                Some(c) if c.computed.is_some() => {
                    return Err(Error::sql(format!(
                        "partition key '{key}' of table '{}' is a computed column; partition keys must be physical columns",
                        table.name
                    )));
                }
                Some(_) if table.partition_keys[..i].contains(key) => {
                    return Err(Error::sql(format!(
                        "partition key '{key}' is listed twice in table '{}'",
                        table.name
                    )));
                }
                Some(_) => {}
            }
        }
        weir_connectors::validate_table(&table.connector_table(), &self.config)?;
        Ok(table)
    }
}
