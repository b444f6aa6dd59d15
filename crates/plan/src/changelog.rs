//! Changelog modes: which row kinds each node of a plan emits, inferred as
//! Flink's planner does, as plain functions over plain data.
//!
//! A node is insert-only (`[I]`), or emits updates: retractions
//! (`[I,UB,UA,D]`: an update is `-U old, +U new`) or upserts on a unique key
//! (`[I,UA,D]`: the old row is implied by the key). Every operator says what
//! it does with the kinds of its inputs ([`ChangelogRole`]); an operator
//! that cannot take updates refuses them when the query is planned, naming
//! the node that produces them, as Flink does.
//!
//! ```text
//!  Source [I] ─► Calc [I] ─► GroupAggregate [I,UB,UA,D] ─► Sink: print (takes updates)
//!                                                       └► Sink: filesystem  ✗ refused
//! ```

use std::fmt;

use arrow::datatypes::Schema;
use serde::{Deserialize, Serialize};

use crate::join::JoinKind;
use crate::spec::{NodeSpec, SinkSpec, SourceSpec};

/// What a stream carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangelogMode {
    /// `[I]`.
    InsertOnly,
    /// `[I,UB,UA,D]`.
    Retract,
    /// `[I,UA,D]`, unique on these output columns.
    Upsert(Vec<usize>),
}

impl ChangelogMode {
    /// Whether the stream carries anything but inserts (and so an op column).
    pub fn is_updating(&self) -> bool {
        !matches!(self, ChangelogMode::InsertOnly)
    }
}

impl fmt::Display for ChangelogMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChangelogMode::InsertOnly => f.write_str("[I]"),
            ChangelogMode::Retract => f.write_str("[I,UB,UA,D]"),
            ChangelogMode::Upsert(_) => f.write_str("[I,UA,D]"),
        }
    }
}

/// What an operator does with the row kinds of its inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangelogRole {
    /// A source: emits inserts.
    Source,
    /// An upsert source (`upsert-kafka`): emits upserts on these columns.
    UpsertSource(Vec<usize>),
    /// Row by row, kind kept (Calc, union): the output carries every kind
    /// its inputs carry.
    PassThrough,
    /// Takes any input and passes its kinds on, joined (an inner join):
    /// insert-only when every input is.
    Forwarding,
    /// Needs insert-only input and emits inserts (window aggregations,
    /// watermark assigners, window TVFs).
    InsertOnly,
    /// Takes any input and emits retractions (non-windowed aggregation).
    Retracting,
    /// Takes any input and emits inserts: partial results of a local
    /// pre-aggregation, which its global phase merges.
    Partial,
    /// Takes updates and emits upserts on these output columns (what a sink
    /// with a primary key takes: `DropUpdateBefore`, `SinkMaterializer`).
    Upserting(Vec<usize>),
    /// A sink that takes any kind.
    SinkOfAnyKind,
    /// A sink that takes inserts only (the filesystem sink).
    SinkOfInserts,
}

/// Why a plan cannot run: node `consumer` cannot take the updates that
/// node `producer` emits (both by their descriptions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The node that cannot take updates.
    pub consumer: String,
    /// Whether it is a sink (Flink words those refusals differently).
    pub sink: bool,
    /// The node the updates come from.
    pub producer: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.sink {
            write!(
                f,
                "Table sink '{}' doesn't support consuming update changes which is produced by node {}",
                self.consumer, self.producer
            )
        } else {
            write!(
                f,
                "{} doesn't support consuming update changes which is produced by node {}",
                self.consumer, self.producer
            )
        }
    }
}

/// The mode of a node with `role`, given its inputs' modes; `producers` are
/// the descriptions of the nodes the updates of each input come from, for
/// the refusal.
pub fn infer(
    role: &ChangelogRole,
    inputs: &[ChangelogMode],
    name: &str,
    producers: &[String],
) -> Result<ChangelogMode, Refusal> {
    let updating = inputs.iter().position(ChangelogMode::is_updating);
    let refuse = |sink: bool| {
        let at = updating.expect("an updating input");
        Refusal {
            consumer: name.to_string(),
            sink,
            producer: producers.get(at).cloned().unwrap_or_default(),
        }
    };
    match role {
        ChangelogRole::Source => Ok(ChangelogMode::InsertOnly),
        ChangelogRole::UpsertSource(key) => Ok(ChangelogMode::Upsert(key.clone())),
        ChangelogRole::PassThrough | ChangelogRole::Forwarding => Ok(union(inputs)),
        ChangelogRole::InsertOnly if updating.is_some() => Err(refuse(false)),
        ChangelogRole::InsertOnly => Ok(ChangelogMode::InsertOnly),
        ChangelogRole::Retracting => Ok(ChangelogMode::Retract),
        ChangelogRole::Partial => Ok(ChangelogMode::InsertOnly),
        ChangelogRole::Upserting(_) if updating.is_none() => Ok(ChangelogMode::InsertOnly),
        ChangelogRole::Upserting(key) => Ok(ChangelogMode::Upsert(key.clone())),
        ChangelogRole::SinkOfInserts if updating.is_some() => Err(refuse(true)),
        ChangelogRole::SinkOfInserts | ChangelogRole::SinkOfAnyKind => Ok(union(inputs)),
    }
}

/// What a node of kind `spec` (emitting `output`) does with the row kinds
/// of its inputs; `None` for a connector's source or sink, which say it
/// themselves (an upsert source, a sink that takes updates).
pub fn role_of(spec: &NodeSpec, output: &Schema) -> Option<ChangelogRole> {
    Some(match spec {
        NodeSpec::Source(SourceSpec::Values { .. }) => ChangelogRole::Source,
        NodeSpec::Source(SourceSpec::Replayed(inner)) => {
            return role_of(&NodeSpec::Source((**inner).clone()), output);
        }
        NodeSpec::Source(SourceSpec::Connector { .. }) | NodeSpec::Sink(SinkSpec::Connector { .. }) => {
            return None;
        }
        NodeSpec::Sink(SinkSpec::Collect { .. }) => ChangelogRole::SinkOfAnyKind,
        NodeSpec::Calc { .. } | NodeSpec::Union => ChangelogRole::PassThrough,
        NodeSpec::Watermark { .. }
        | NodeSpec::WindowAssign { .. }
        | NodeSpec::WindowAggregate(_)
        | NodeSpec::SessionAggregate(_)
        | NodeSpec::CountWindowAggregate(_)
        | NodeSpec::IntervalJoin(_)
        | NodeSpec::WindowJoin(_)
        | NodeSpec::TemporalSort { .. } => ChangelogRole::InsertOnly,
        NodeSpec::GroupAggregate(data) => match data.phase.as_deref() {
            Some("local") => ChangelogRole::Partial,
            _ => ChangelogRole::Retracting,
        },
        NodeSpec::Join(data) => match data.kind {
            JoinKind::Inner | JoinKind::Semi => ChangelogRole::Forwarding,
            _ => ChangelogRole::Retracting,
        },
        // A broadcast outer or anti join keeps the regular join's mode.
        NodeSpec::LookupJoin(_) | NodeSpec::BroadcastJoin { .. } => {
            match weir_common::changelog::has_op(output) {
                true => ChangelogRole::Retracting,
                false => ChangelogRole::InsertOnly,
            }
        }
        NodeSpec::TemporalJoin(_) => ChangelogRole::Partial,
        NodeSpec::TopN(data) => match data.arrival == Some(false) || data.window_end.is_some() {
            true => ChangelogRole::InsertOnly,
            false => ChangelogRole::Retracting,
        },
        NodeSpec::OverAggregate(data) => match data.retract {
            true => ChangelogRole::Retracting,
            false => ChangelogRole::InsertOnly,
        },
        NodeSpec::DropUpdateBefore { key } | NodeSpec::SinkMaterializer { key } => {
            ChangelogRole::Upserting(key.clone())
        }
        NodeSpec::ChangelogNormalize { .. } => ChangelogRole::Retracting,
    })
}

/// The mode of a union of streams: insert-only when all are, otherwise
/// retractions (an upsert key of one input is not unique in the union).
fn union(inputs: &[ChangelogMode]) -> ChangelogMode {
    match inputs {
        [single] => single.clone(),
        _ if inputs.iter().all(|m| !m.is_updating()) => ChangelogMode::InsertOnly,
        _ => ChangelogMode::Retract,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn producers(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node{i}")).collect()
    }

    #[test]
    fn window_aggregates_over_insert_only_input_stay_insert_only() {
        let mode = infer(
            &ChangelogRole::InsertOnly,
            &[ChangelogMode::InsertOnly],
            "WindowAggregate",
            &producers(1),
        );
        assert_eq!(mode, Ok(ChangelogMode::InsertOnly));
    }

    #[test]
    fn a_non_windowed_aggregate_retracts_and_a_calc_passes_its_kinds_on() {
        let aggregate = infer(
            &ChangelogRole::Retracting,
            &[ChangelogMode::InsertOnly],
            "GroupAggregate",
            &producers(1),
        )
        .unwrap();
        assert_eq!(aggregate.to_string(), "[I,UB,UA,D]");
        let calc = infer(&ChangelogRole::PassThrough, &[aggregate], "Calc", &producers(1)).unwrap();
        assert_eq!(calc, ChangelogMode::Retract);
    }

    #[test]
    fn a_union_updates_when_one_input_does() {
        let union = infer(
            &ChangelogRole::PassThrough,
            &[ChangelogMode::InsertOnly, ChangelogMode::Upsert(vec![0])],
            "Union",
            &producers(2),
        );
        assert_eq!(union, Ok(ChangelogMode::Retract));
        let inserts = infer(
            &ChangelogRole::PassThrough,
            &[ChangelogMode::InsertOnly, ChangelogMode::InsertOnly],
            "Union",
            &producers(2),
        );
        assert_eq!(inserts, Ok(ChangelogMode::InsertOnly));
    }

    #[test]
    fn an_insert_only_sink_refuses_updates_naming_the_producer_as_flink_does() {
        let refusal = infer(
            &ChangelogRole::SinkOfInserts,
            &[ChangelogMode::Retract],
            "default_catalog.default_database.out",
            &["GroupAggregate(groupBy=[k], select=[k, COUNT(*)])".to_string()],
        )
        .unwrap_err();
        assert_eq!(
            refusal.to_string(),
            "Table sink 'default_catalog.default_database.out' doesn't support consuming update changes \
             which is produced by node GroupAggregate(groupBy=[k], select=[k, COUNT(*)])"
        );
        let window = infer(
            &ChangelogRole::InsertOnly,
            &[ChangelogMode::Retract],
            "WindowAggregate",
            &producers(1),
        );
        assert!(
            window
                .unwrap_err()
                .to_string()
                .starts_with("WindowAggregate doesn't support")
        );
    }
}
