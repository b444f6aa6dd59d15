//! Sources and sinks built from their plan spec, and what the planner asks
//! of a table's connector ([`BuiltinConnectors`]).
//!
//! ```text
//!  SourceSpec::Connector { table, projection, schema } ──create_source──► SourceFactory
//!  SinkSpec::Collect { id } ──the submitter's channel id──► CollectSinkFactory
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;

use crate::collect::CollectSinkFactory;
pub use crate::collect::ResultSender;
use crate::sink::SinkOperatorFactory;
use crate::values::ValuesSourceFactory;
use crate::{Error, Result};
use crate::{create_sink, create_source};
use weir_common::config::SessionConfig;
use weir_plan::connector::{Connectors, SinkFacts, SourceFacts};
use weir_plan::spec::{SinkSpec, SourceSpec};
use weir_plan::table::TableDef;
use weir_runtime::source::Replayed;
use weir_runtime::{OperatorFactory, SourceFactory};

/// The channels a job's collect sinks send their rows to, by the id their
/// spec names: the submitting process's, handed to the job when it starts.
pub type ResultChannels = HashMap<u64, ResultSender>;

/// The source a spec describes, its options read with the plan's `settings`.
pub fn source(spec: &SourceSpec, settings: &SessionConfig) -> Result<Arc<dyn SourceFactory>> {
    match spec {
        SourceSpec::Connector {
            table,
            projection,
            schema,
        } => create_source(&table.build()?, projection, schema.decode()?, settings),
        SourceSpec::Values { batches, .. } => Ok(Arc::new(ValuesSourceFactory::new(batches.decode()?))),
        SourceSpec::Replayed(inner) => Ok(Arc::new(Replayed(source(inner, settings)?))),
    }
}

/// The operator at the end of a chain that hands rows to the sink a spec
/// describes; a collect sink's channel is taken from `results`.
pub fn sink(
    spec: &SinkSpec,
    settings: &SessionConfig,
    results: &ResultChannels,
) -> Result<Arc<dyn OperatorFactory>> {
    let sink: Arc<dyn super::SinkFactory> = match spec {
        SinkSpec::Connector { table, schema } => create_sink(&table.build()?, schema.decode()?, settings)?,
        SinkSpec::Collect { id } => {
            let sender = results.get(id).ok_or_else(|| {
                Error::State(format!(
                    "the plan sends its result to channel {id}, which the job was not given"
                ))
            })?;
            Arc::new(CollectSinkFactory::new(sender.clone()))
        }
    };
    Ok(Arc::new(SinkOperatorFactory { sink }))
}

/// weir's connectors, as the planner asks them about tables.
#[derive(Debug, Clone, Copy, Default)]
pub struct BuiltinConnectors;

impl Connectors for BuiltinConnectors {
    fn source(
        &self,
        table: &TableDef,
        projection: &[usize],
        schema: SchemaRef,
        settings: &SessionConfig,
    ) -> Result<SourceFacts> {
        let source = create_source(table, projection, schema, settings)?;
        Ok(SourceFacts {
            name: source.describe(),
            bounded: source.is_bounded(),
            estimated_bytes: source.estimated_bytes(),
            upsert_key: source.upsert_key(),
        })
    }

    fn sink(&self, table: &TableDef, schema: SchemaRef, settings: &SessionConfig) -> Result<SinkFacts> {
        let sink = create_sink(table, schema, settings)?;
        Ok(SinkFacts {
            name: sink.describe(),
            accepts_updates: sink.accepts_updates(),
            needs_update_before: sink.needs_update_before(),
        })
    }

    fn always_read(&self, table: &TableDef) -> Vec<String> {
        match super::kafka::layout::is_upsert(table) {
            true => table.primary_key.clone(),
            false => Vec::new(),
        }
    }
}
