//! Where Tables come from: an engine's catalog (`from`), a SQL query
//! (`sql_query`), rows in memory (`from_batches`); and a Table made a view
//! SQL reads (`create_temporary_view`). These are `Engine` methods, as
//! Flink's are `TableEnvironment`'s.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use datafusion_expr::{Expr, LogicalPlanBuilder};

use crate::engine::Engine;
use crate::table::Table;
use crate::{Error, Result};
use weir_plan::spec::PlanSpec;

impl Engine {
    /// A catalog table or view as a [`Table`] (Flink's `from`): its
    /// columns, computed ones included, as `SELECT * FROM name` has them.
    pub fn from(&self, name: &str) -> Result<Table> {
        if let Err(closest) = self.find_relation(name) {
            let hint = closest
                .map(|n| format!("; did you mean '{n}'?"))
                .unwrap_or_default();
            return Err(Error::Plan(format!(
                "from: no table or view named '{name}'{hint}"
            )));
        }
        self.sql_query(&format!("SELECT * FROM `{}`", name.replace('`', "``")))
    }

    /// A SQL query as a [`Table`] to go on with in code (Flink's
    /// `sqlQuery`); its views and tables are this session's.
    pub fn sql_query(&self, query: &str) -> Result<Table> {
        Ok(Table::new(self.clone(), self.query_plan(query)?))
    }

    /// Rows given as record batches as a bounded [`Table`] (Flink's
    /// `fromValues`); `schema` names and types its columns.
    pub fn from_batches(&self, schema: SchemaRef, batches: &[RecordBatch]) -> Result<Table> {
        let mut rows = Vec::new();
        for batch in batches {
            if batch.schema().fields() != schema.fields() {
                return Err(Error::Plan(format!(
                    "from_batches: a batch's columns ({}) are not the schema's ({})",
                    batch.schema(),
                    schema
                )));
            }
            for row in 0..batch.num_rows() {
                let values = (batch.columns().iter())
                    .map(|column| {
                        Ok(datafusion_expr::lit(
                            datafusion_common::ScalarValue::try_from_array(column, row)?,
                        ))
                    })
                    .collect::<Result<Vec<Expr>>>()?;
                rows.push(values);
            }
        }
        if rows.is_empty() {
            return Err(Error::Plan(
                "from_batches: no rows (a table needs at least one)".into(),
            ));
        }
        let plan = LogicalPlanBuilder::values(rows)
            .and_then(|b| {
                let names = (b.schema().columns().into_iter().zip(schema.fields()))
                    .map(|(c, f)| Expr::Column(c).alias(f.name()));
                b.project(names)
            })
            .and_then(|b| b.build())
            .map_err(|e| Error::Plan(format!("from_batches: {}", e.strip_backtrace())))?;
        Ok(Table::new(self.clone(), plan))
    }

    /// Registers `table` as a temporary view SQL (and [`Engine::from`]) can
    /// read by `name` (Flink's `createTemporaryView`).
    pub fn create_temporary_view(&self, name: &str, table: &Table) -> Result<()> {
        self.add_plan_view(name, table.logical_plan())
    }

    /// The plan of `table`'s query into a collect sink (operator tests take
    /// their operators from it).
    pub fn table_plan(&self, table: &Table) -> Result<PlanSpec> {
        self.query_spec(table.logical_plan().clone())
    }
}
