//! The `nexmark` source: Nexmark's person / auction / bid events, as Flink's
//! nexmark connector declares them (`event_type INT`, three `ROW` columns).
//!
//! Options (Flink's names): `first-event.rate` (events per second of event
//! time, default 10 000), `events.num` (0: unbounded), `person.proportion`,
//! `auction.proportion`, `bid.proportion` (1 / 3 / 46), `person.avg-size`,
//! `auction.avg-size`, `bid.avg-size`, `bid.hot-ratio.auctions`,
//! `bid.hot-ratio.bidders`, `auction.hot-ratio.sellers`, `rate.limited` (emit
//! at `first-event.rate` by the wall clock instead of as fast as possible), and
//! `next-event.rate`, `rate.shape`, `rate.period`, which Flink's port accepts
//! and does not use either. weir adds `base-time` (event time of event 0, ms
//! since the epoch or `yyyy-MM-dd HH:mm:ss`; default 2015-07-15 00:00:00 UTC)
//! and `splits` (default: the source's parallelism when the job is created).
//!
//! Event ids are split by interleaving: split `k` of `n` generates ids `k, k+n,
//! k+2n, ...`, so every split covers the whole timeline; a subtask reads the
//! splits `k` with `k % parallelism == subtask`, merging them in id order.

pub mod generator;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::datatypes::{DataType, Fields, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::OptionSpec;
use crate::nexmark::generator::{
    DEFAULT_BASE_TIME_MS, EventBatchBuilder, GeneratorConfig, auction_fields, bid_fields, person_fields,
};
use crate::{Error, Result};
use weir_common::config::SessionConfig;
use weir_common::types::flink_type_name;
use weir_plan::table::TableDef;
use weir_runtime::source::CountedSplit;
use weir_runtime::{SourceFactory, SourcePoll, SourceReader, TaskContext};

const OPTIONS: OptionSpec = OptionSpec {
    connector: "nexmark",
    keys: &[
        "first-event.rate",
        "next-event.rate",
        "events.num",
        "person.proportion",
        "auction.proportion",
        "bid.proportion",
        "person.avg-size",
        "auction.avg-size",
        "bid.avg-size",
        "bid.hot-ratio.auctions",
        "bid.hot-ratio.bidders",
        "auction.hot-ratio.sellers",
        "rate.shape",
        "rate.period",
        "rate.limited",
        "base-time",
        "splits",
        "scan.parallelism",
    ],
    prefixes: &[],
    required: &[],
};

/// The physical columns a nexmark table may declare, with their types.
fn expected_columns() -> Vec<(&'static str, DataType)> {
    vec![
        ("event_type", DataType::Int32),
        ("person", DataType::Struct(person_fields())),
        ("auction", DataType::Struct(auction_fields())),
        ("bid", DataType::Struct(bid_fields())),
    ]
}

/// Whether two types are the same up to field nullability.
fn same_shape(a: &DataType, b: &DataType) -> bool {
    match (a, b) {
        (DataType::Struct(x), DataType::Struct(y)) => same_fields(x, y),
        _ => a == b,
    }
}

fn same_fields(x: &Fields, y: &Fields) -> bool {
    x.len() == y.len()
        && x.iter()
            .zip(y.iter())
            .all(|(a, b)| a.name() == b.name() && same_shape(a.data_type(), b.data_type()))
}

fn positive(table: &TableDef, key: &str, default: u64) -> Result<u64> {
    match table.parse_option::<u64>(key)? {
        Some(0) => Err(Error::sql(format!(
            "table '{}': '{key}' must be positive",
            table.name
        ))),
        Some(v) => Ok(v),
        None => Ok(default),
    }
}

fn size(table: &TableDef, key: &str, default: usize) -> Result<usize> {
    match table.option(key) {
        None => Ok(default),
        Some(v) => {
            let digits: String = v.chars().take_while(|c| c.is_ascii_digit()).collect();
            let unit = v[digits.len()..].trim().to_ascii_lowercase();
            let n: usize = digits
                .parse()
                .map_err(|_| Error::sql(format!("table '{}': invalid size '{v}' for '{key}'", table.name)))?;
            match unit.as_str() {
                "" | "b" | "bytes" => Ok(n),
                "kb" | "k" => Ok(n * 1024),
                _ => Err(Error::sql(format!(
                    "table '{}': invalid size '{v}' for '{key}'",
                    table.name
                ))),
            }
        }
    }
}

fn base_time(table: &TableDef) -> Result<i64> {
    match table.option("base-time") {
        None => Ok(DEFAULT_BASE_TIME_MS),
        Some(v) => {
            if let Ok(ms) = v.trim().parse::<i64>() {
                return Ok(ms);
            }
            chrono::NaiveDateTime::parse_from_str(v.trim(), "%Y-%m-%d %H:%M:%S")
                .map(|t| t.and_utc().timestamp_millis())
                .map_err(|_| {
                    Error::sql(format!(
                        "table '{}': invalid 'base-time' '{v}': milliseconds since the epoch or yyyy-MM-dd HH:mm:ss (UTC)",
                        table.name
                    ))
                })
        }
    }
}

/// The generator configuration and bounds of a nexmark table.
struct Parsed {
    config: GeneratorConfig,
    events: Option<u64>,
    rate_limited: bool,
    splits: Option<usize>,
}

fn parse(table: &TableDef) -> Result<Parsed> {
    OPTIONS.validate(table, &[], &[])?;
    let expected = expected_columns();
    for field in table.physical_schema().fields() {
        match expected.iter().find(|(name, _)| name == field.name()) {
            None => {
                return Err(Error::sql(format!(
                    "table '{}': the nexmark connector has no column '{}'; its columns are event_type, person, auction, bid",
                    table.name,
                    field.name()
                )));
            }
            Some((name, data_type)) if !same_shape(data_type, field.data_type()) => {
                return Err(Error::sql(format!(
                    "table '{}': column '{name}' must be {}, as in Nexmark's ddl_gen.sql, but is {}",
                    table.name,
                    flink_type_name(data_type),
                    flink_type_name(field.data_type())
                )));
            }
            Some(_) => {}
        }
    }
    if let Some(shape) = table.option("rate.shape")
        && !shape.eq_ignore_ascii_case("SQUARE")
        && !shape.eq_ignore_ascii_case("SINE")
    {
        return Err(Error::sql(format!(
            "table '{}': 'rate.shape' is SQUARE or SINE",
            table.name
        )));
    }
    let config = GeneratorConfig {
        person_proportion: positive(table, "person.proportion", 1)?,
        auction_proportion: positive(table, "auction.proportion", 3)?,
        bid_proportion: positive(table, "bid.proportion", 46)?,
        first_event_rate: positive(table, "first-event.rate", 10_000)?,
        base_time_ms: base_time(table)?,
        avg_person_size: size(table, "person.avg-size", 200)?,
        avg_auction_size: size(table, "auction.avg-size", 500)?,
        avg_bid_size: size(table, "bid.avg-size", 100)?,
        hot_auction_ratio: positive(table, "bid.hot-ratio.auctions", 2)?,
        hot_bidder_ratio: positive(table, "bid.hot-ratio.bidders", 4)?,
        hot_seller_ratio: positive(table, "auction.hot-ratio.sellers", 4)?,
    };
    let events = match table.parse_option::<u64>("events.num")? {
        None | Some(0) => None,
        Some(n) => Some(n),
    };
    let splits = match table.parse_option::<usize>("splits")? {
        Some(0) => {
            return Err(Error::sql(format!(
                "table '{}': 'splits' must be positive",
                table.name
            )));
        }
        other => other,
    };
    Ok(Parsed {
        config,
        events,
        rate_limited: table.parse_bool_option("rate.limited", false)?,
        splits,
    })
}

/// Checks a nexmark table at `CREATE TABLE`.
pub fn validate(table: &TableDef) -> Result<()> {
    parse(table).map(drop)
}

/// The nexmark source of a table.
#[derive(Debug)]
pub struct NexmarkFactory {
    table: String,
    config: Arc<GeneratorConfig>,
    events: Option<u64>,
    rate_limited: bool,
    splits: Option<usize>,
    /// Indices of the projected columns among event_type, person, auction, bid.
    projection: Vec<usize>,
    schema: SchemaRef,
}

impl NexmarkFactory {
    /// The source of `table`, producing the physical columns `projection` as `schema`.
    pub fn try_new(
        table: &TableDef,
        projection: &[usize],
        schema: SchemaRef,
        _config: &SessionConfig,
    ) -> Result<Arc<dyn SourceFactory>> {
        let parsed = parse(table)?;
        let physical = table.physical_schema();
        let names: Vec<&str> = expected_columns().iter().map(|(n, _)| *n).collect();
        let projection = projection
            .iter()
            .map(|i| {
                let name = physical.field(*i).name();
                names.iter().position(|n| n == name).expect("validated column")
            })
            .collect();
        Ok(Arc::new(NexmarkFactory {
            table: table.name.clone(),
            config: Arc::new(parsed.config),
            events: parsed.events,
            rate_limited: parsed.rate_limited,
            splits: parsed.splits,
            projection,
            schema,
        }))
    }
}

impl SourceFactory for NexmarkFactory {
    fn describe(&self) -> String {
        let events = self
            .events
            .map_or("unbounded".to_string(), |n| format!("{n} events"));
        format!(
            "Source: {}[nexmark, {events}, {} events/s of event time]",
            self.table, self.config.first_event_rate
        )
    }

    fn is_bounded(&self) -> bool {
        self.events.is_some()
    }

    fn supports_checkpoints(&self) -> bool {
        true
    }

    fn create_reader(&self, ctx: &TaskContext) -> Result<Box<dyn SourceReader>> {
        let splits = self.splits.unwrap_or(ctx.parallelism);
        let owned: Vec<CountedSplit> = (0..splits)
            .filter(|k| k % ctx.parallelism == ctx.subtask)
            .map(|k| CountedSplit {
                index: k as u64,
                count: splits as u64,
                emitted: 0,
            })
            .collect();
        Ok(Box::new(NexmarkReader {
            config: self.config.clone(),
            builder: EventBatchBuilder::new(self.config.clone(), ctx.batch_size),
            events: self.events,
            splits: owned,
            projection: self.projection.clone(),
            schema: self.schema.clone(),
            batch_size: ctx.batch_size,
            rate_limited: self.rate_limited,
            started: Instant::now(),
            resumed_at: Duration::ZERO,
        }))
    }
}

struct NexmarkReader {
    config: Arc<GeneratorConfig>,
    builder: EventBatchBuilder,
    events: Option<u64>,
    /// Event ids `index, index + count, ...` per split; `emitted` is its position.
    splits: Vec<CountedSplit>,
    projection: Vec<usize>,
    schema: SchemaRef,
    batch_size: usize,
    rate_limited: bool,
    started: Instant,
    /// Event time (since the base time) the reader resumed at after a restore:
    /// the rate limit counts from there.
    resumed_at: Duration,
}

impl NexmarkReader {
    /// The split holding the smallest next id, if any event is left.
    fn next_split(&self) -> Option<usize> {
        self.splits
            .iter()
            .enumerate()
            .filter(|(_, s)| self.events.is_none_or(|n| s.next() < n))
            .min_by_key(|(_, s)| s.next())
            .map(|(i, _)| i)
    }
}

impl SourceReader for NexmarkReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        let mut rows = 0;
        while rows < self.batch_size {
            let Some(i) = self.next_split() else { break };
            let id = self.splits[i].next();
            if self.rate_limited {
                // Emit an event no earlier than its event time, counted from the start.
                let due = Duration::from_millis(
                    (self.config.event_time_ms(id) - self.config.base_time_ms).max(0) as u64,
                );
                let elapsed = self.started.elapsed() + self.resumed_at;
                if due > elapsed {
                    if rows == 0 {
                        return Ok(SourcePoll::Idle(due - elapsed));
                    }
                    break;
                }
            }
            self.builder.append(id);
            self.splits[i].emitted += 1;
            rows += 1;
        }
        if rows == 0 {
            return Ok(SourcePoll::End);
        }
        let columns = self.builder.finish();
        let projected = self.projection.iter().map(|i| columns[*i].clone()).collect();
        Ok(SourcePoll::Batch(RecordBatch::try_new_with_options(
            self.schema.clone(),
            projected,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )?))
    }

    fn snapshot_position(
        &mut self,
        _checkpoint: weir_common::ids::CheckpointId,
    ) -> Result<serde_json::Value> {
        Ok(CountedSplit::position(self.splits.iter().copied()))
    }

    fn restore_position(&mut self, position: &serde_json::Value) -> Result<()> {
        // The splits this subtask reads from now on: its own at the same
        // parallelism, others after rescaling (their number never changes).
        self.splits = CountedSplit::parse(position, "nexmark")?;
        if let Some(i) = self.next_split() {
            let id = self.splits[i].next();
            self.resumed_at = Duration::from_millis(
                (self.config.event_time_ms(id) - self.config.base_time_ms).max(0) as u64,
            );
        }
        self.started = Instant::now();
        Ok(())
    }
}
