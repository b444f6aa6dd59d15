//! What the planner learns of a table's connector without running it: a
//! source's name, whether it ends and how large it is, its upsert key; a
//! sink's name and which row kinds it takes. Connectors answer through
//! [`Connectors`], so the planner needs none of their code.

use arrow::datatypes::SchemaRef;

use crate::Result;
use crate::table::TableDef;
use weir_common::config::SessionConfig;

/// A source as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFacts {
    /// How EXPLAIN shows it (`Source: bids[filesystem, csv, ...]`).
    pub name: String,
    /// It ends by itself.
    pub bounded: bool,
    /// Roughly how many bytes it reads in all, when bounded and known
    /// (whether a join broadcasts it).
    pub estimated_bytes: Option<u64>,
    /// For an upsert source (`upsert-kafka`), the key's columns: its rows
    /// carry `+U` for a key's new row and `-D` for its delete.
    pub upsert_key: Option<Vec<usize>>,
}

/// A sink as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkFacts {
    /// How EXPLAIN shows it (`Sink: out[print]`).
    pub name: String,
    /// It takes updates (rows of every kind).
    pub accepts_updates: bool,
    /// It needs the `-U` row of each update (an upsert sink does not).
    pub needs_update_before: bool,
}

/// The connectors a planner plans with.
pub trait Connectors: Send + Sync {
    /// The source of `table` reading its physical columns `projection` as
    /// `schema`; an error when the table cannot be read or its options are
    /// wrong.
    fn source(
        &self,
        table: &TableDef,
        projection: &[usize],
        schema: SchemaRef,
        settings: &SessionConfig,
    ) -> Result<SourceFacts>;

    /// The sink of `table` receiving rows of `schema`; an error when the
    /// table cannot be written or its options are wrong.
    fn sink(&self, table: &TableDef, schema: SchemaRef, settings: &SessionConfig) -> Result<SinkFacts>;

    /// Columns a source of `table` reads whatever a query selects (an
    /// upsert source's key).
    fn always_read(&self, table: &TableDef) -> Vec<String>;
}
