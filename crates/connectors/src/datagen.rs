//! The `datagen` source: sequences and random values, generated as Arrow arrays.
//!
//! Options are Flink's: `rows-per-second` (default 10000, across all subtasks),
//! `number-of-rows`, and per field `fields.<f>.kind` = `random` (default) |
//! `sequence`, `min`, `max`, `max-past`, `length`, `start`, `end`, `null-rate`.
//!
//! Rows are numbered `0..total`; subtask `i` of `p` generates rows `i, i+p, ...`,
//! so a sequence field's values interleave across subtasks as in Flink. Unlike
//! Flink, random values are a function of the row number (a counter-based hash),
//! so a run is reproducible and a replay after recovery yields the same rows.
//! Any sequence field makes the source bounded.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{
    ArrayRef, BinaryBuilder, BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array,
    Int8Array, Int16Array, Int32Array, Int64Array, StringBuilder, TimestampMicrosecondArray,
    TimestampMillisecondArray, TimestampNanosecondArray, TimestampSecondArray,
};
use arrow::datatypes::{DataType, Field, SchemaRef, TimeUnit};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::OptionSpec;
use crate::{Error, Result};
use weir_common::config::{SessionConfig, parse_duration};
use weir_plan::table::TableDef;
use weir_runtime::source::CountedSplit;
use weir_runtime::{SourceFactory, SourcePoll, SourceReader, TaskContext};

const OPTIONS: OptionSpec = OptionSpec {
    connector: "datagen",
    keys: &["rows-per-second", "number-of-rows", "scan.parallelism"],
    prefixes: &["fields."],
    required: &[],
};

const FIELD_KEYS: &[&str] = &[
    "kind",
    "min",
    "max",
    "max-past",
    "length",
    "start",
    "end",
    "null-rate",
    "var-len",
];

/// How one column is generated.
#[derive(Debug, Clone)]
enum FieldGen {
    /// Row `r` gets `start + r`.
    Sequence { start: i64 },
    Random {
        min: Option<f64>,
        max: Option<f64>,
        length: usize,
        max_past_ms: i64,
        null_rate: f64,
    },
}

/// Checks the table's options.
pub fn validate(table: &TableDef) -> Result<()> {
    let schema = table.physical_schema();
    let projection: Vec<usize> = (0..schema.fields().len()).collect();
    parse_table(table, &projection).map(drop)
}

struct Parsed {
    fields: Vec<FieldGen>,
    total: Option<u64>,
    rows_per_second: f64,
}

fn parse_table(table: &TableDef, projection: &[usize]) -> Result<Parsed> {
    OPTIONS.validate(table, &[], &[])?;
    let physical = table.physical_schema();
    // Every fields.<name>.<key> must name a column and a known key.
    for (key, _) in table.options.entries() {
        if let Some(rest) = key.strip_prefix("fields.") {
            let Some((name, option)) = rest.rsplit_once('.') else {
                return Err(Error::sql(format!(
                    "table '{}': malformed option '{key}'",
                    table.name
                )));
            };
            if physical.field_with_name(name).is_err() {
                return Err(Error::sql(format!(
                    "table '{}': option '{key}' refers to unknown column '{name}'",
                    table.name
                )));
            }
            if !FIELD_KEYS.contains(&option) {
                return Err(Error::sql(format!(
                    "table '{}': unsupported option '{key}'; per-field options are {}",
                    table.name,
                    FIELD_KEYS.join(", ")
                )));
            }
        }
    }
    let rows_per_second: f64 = table.parse_option("rows-per-second")?.unwrap_or(10_000.0);
    if rows_per_second <= 0.0 {
        return Err(Error::sql(format!(
            "table '{}': 'rows-per-second' must be positive",
            table.name
        )));
    }
    let number_of_rows: Option<u64> = table.parse_option("number-of-rows")?;
    let mut total = number_of_rows;
    let mut all = Vec::new();
    for field in physical.fields().iter() {
        let name = field.name();
        let opt = |k: &str| format!("fields.{name}.{k}");
        let kind = table.option(&opt("kind")).unwrap_or("random");
        let generator = match kind {
            "sequence" => {
                let (Some(start), Some(end)) = (
                    table.parse_option::<i64>(&opt("start"))?,
                    table.parse_option::<i64>(&opt("end"))?,
                ) else {
                    return Err(Error::sql(format!(
                        "table '{}': a sequence field needs '{}' and '{}'",
                        table.name,
                        opt("start"),
                        opt("end")
                    )));
                };
                if start > end {
                    return Err(Error::sql(format!(
                        "table '{}': sequence start {start} is after end {end} for '{name}'",
                        table.name
                    )));
                }
                if !(field.data_type().is_integer() || field.data_type() == &DataType::Utf8) {
                    return Err(Error::sql(format!(
                        "table '{}': sequence generation supports integer and STRING columns, '{name}' is {}",
                        table.name,
                        weir_common::types::flink_type_name(field.data_type())
                    )));
                }
                let length = (end - start) as u64 + 1;
                total = Some(total.map_or(length, |t| t.min(length)));
                FieldGen::Sequence { start }
            }
            "random" => {
                let max_past_ms = match table.option(&opt("max-past")) {
                    None => 0,
                    Some(v) => parse_duration(v)
                        .ok_or_else(|| {
                            Error::sql(format!(
                                "table '{}': invalid duration '{v}' for '{}'",
                                table.name,
                                opt("max-past")
                            ))
                        })?
                        .as_millis() as i64,
                };
                let null_rate: f64 = table.parse_option(&opt("null-rate"))?.unwrap_or(0.0);
                if !(0.0..=1.0).contains(&null_rate) {
                    return Err(Error::sql(format!(
                        "table '{}': '{}' must be between 0 and 1",
                        table.name,
                        opt("null-rate")
                    )));
                }
                check_random_type(table, field)?;
                FieldGen::Random {
                    min: table.parse_option(&opt("min"))?,
                    max: table.parse_option(&opt("max"))?,
                    length: table.parse_option(&opt("length"))?.unwrap_or(100),
                    max_past_ms,
                    null_rate,
                }
            }
            other => {
                return Err(Error::sql(format!(
                    "table '{}': unknown kind '{other}' for '{name}': expected random or sequence",
                    table.name
                )));
            }
        };
        all.push(generator);
    }
    let fields = projection.iter().map(|i| all[*i].clone()).collect();
    Ok(Parsed {
        fields,
        total,
        rows_per_second,
    })
}

fn check_random_type(table: &TableDef, field: &Field) -> Result<()> {
    match field.data_type() {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal128(_, _)
        | DataType::Boolean
        | DataType::Utf8
        | DataType::Binary
        | DataType::Date32
        | DataType::Timestamp(_, _) => Ok(()),
        other => Err(Error::sql(format!(
            "table '{}': datagen cannot generate random values of type {} for '{}'",
            table.name,
            weir_common::types::flink_type_name(other),
            field.name()
        ))),
    }
}

/// The datagen source of a table.
#[derive(Debug)]
pub struct DatagenFactory {
    table: String,
    schema: SchemaRef,
    fields: Vec<FieldGen>,
    total: Option<u64>,
    rows_per_second: f64,
    buffer_timeout: Duration,
}

impl DatagenFactory {
    /// The source for `table`, generating the physical columns `projection`.
    pub fn try_new(
        table: &TableDef,
        projection: &[usize],
        schema: SchemaRef,
        config: &SessionConfig,
    ) -> Result<Arc<dyn SourceFactory>> {
        let parsed = parse_table(table, projection)?;
        Ok(Arc::new(DatagenFactory {
            table: table.name.clone(),
            schema,
            fields: parsed.fields,
            total: parsed.total,
            rows_per_second: parsed.rows_per_second,
            buffer_timeout: config.buffer_timeout()?,
        }))
    }
}

impl SourceFactory for DatagenFactory {
    fn describe(&self) -> String {
        format!("Source: {}[datagen]", self.table)
    }

    fn is_bounded(&self) -> bool {
        self.total.is_some()
    }

    /// Rows times their width (a string as 100 bytes, datagen's default length).
    fn estimated_bytes(&self) -> Option<u64> {
        let width: u64 = self
            .schema
            .fields()
            .iter()
            .map(|f| f.data_type().primitive_width().unwrap_or(100) as u64)
            .sum();
        Some(self.total?.saturating_mul(width))
    }

    fn supports_checkpoints(&self) -> bool {
        true
    }

    fn create_reader(&self, ctx: &TaskContext) -> Result<Box<dyn SourceReader>> {
        // One split per subtask of the job as created; a restore may hand a
        // subtask other splits (rescaling).
        let split = DatagenSplit::new(
            CountedSplit {
                index: ctx.subtask as u64,
                count: ctx.parallelism as u64,
                emitted: 0,
            },
            self.total,
        );
        let mut reader = DatagenReader {
            schema: self.schema.clone(),
            fields: self.fields.clone(),
            total: self.total,
            rows_per_second: self.rows_per_second,
            buffer_timeout: self.buffer_timeout,
            batch_size: ctx.batch_size,
            splits: vec![split],
            resumed_from: 0,
            rate: 0.0,
            per_batch: 1,
            started: Instant::now(),
            anchor_ms: ctx.job_id.started_millis(),
        };
        reader.pace();
        Ok(Box::new(reader))
    }
}

/// A split (the global rows `index, index + count, ...`) and how many rows
/// it has in all, if bounded.
#[derive(Debug, Clone, Copy)]
struct DatagenSplit {
    split: CountedSplit,
    rows: Option<u64>,
}

impl DatagenSplit {
    fn new(split: CountedSplit, total: Option<u64>) -> Self {
        let CountedSplit { index, count, .. } = split;
        DatagenSplit {
            split,
            rows: total.map(|t| if index < t { (t - index).div_ceil(count) } else { 0 }),
        }
    }

    fn done(&self) -> bool {
        self.rows.is_some_and(|rows| self.split.emitted >= rows)
    }
}

struct DatagenReader {
    schema: SchemaRef,
    fields: Vec<FieldGen>,
    total: Option<u64>,
    rows_per_second: f64,
    buffer_timeout: Duration,
    batch_size: usize,
    /// The splits this subtask reads, merged in global row order.
    splits: Vec<DatagenSplit>,
    /// Rows emitted when the reader started (after a restore): the rate
    /// limit counts from here.
    resumed_from: u64,
    rate: f64,
    per_batch: usize,
    started: Instant,
    /// "Now" for random times and dates: when the run began, kept in the
    /// position so that a restored run replays the same values.
    anchor_ms: i64,
}

impl DatagenReader {
    fn emitted(&self) -> u64 {
        self.splits.iter().map(|s| s.split.emitted).sum()
    }

    /// This subtask's share of `rows-per-second` (by the splits it reads) and its batch size.
    fn pace(&mut self) {
        let count = self.splits.first().map_or(1, |s| s.split.count) as f64;
        self.rate = self.rows_per_second * self.splits.len() as f64 / count;
        self.per_batch =
            ((self.rate * self.buffer_timeout.as_secs_f64()).ceil() as usize).clamp(1, self.batch_size);
        self.resumed_from = self.emitted();
        self.started = Instant::now();
    }

    /// The global row numbers of the next `n` rows, taking the unfinished
    /// split with the lowest next row each time.
    fn next_rows(&mut self, n: usize) -> Vec<u64> {
        if let [DatagenSplit { split, .. }] = self.splits.as_mut_slice() {
            let first = split.emitted;
            split.emitted += n as u64;
            return (first..first + n as u64)
                .map(|m| split.index + m * split.count)
                .collect();
        }
        let mut rows = Vec::with_capacity(n);
        while rows.len() < n {
            let Some(split) = self
                .splits
                .iter_mut()
                .filter(|s| !s.done())
                .min_by_key(|s| s.split.next())
            else {
                break;
            };
            rows.push(split.split.next());
            split.split.emitted += 1;
        }
        rows
    }
}

impl SourceReader for DatagenReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        let remaining = match self.total {
            Some(_) => self
                .splits
                .iter()
                .map(|s| s.rows.map_or(0, |r| r.saturating_sub(s.split.emitted)))
                .sum(),
            None => u64::MAX,
        };
        if remaining == 0 {
            return Ok(SourcePoll::End);
        }
        let emitted = self.emitted();
        let allowed = self.resumed_from + (self.rate * self.started.elapsed().as_secs_f64()) as u64 + 1;
        if allowed <= emitted {
            let wait =
                (emitted - self.resumed_from + 1) as f64 / self.rate - self.started.elapsed().as_secs_f64();
            return Ok(SourcePoll::Idle(Duration::from_secs_f64(wait.max(0.0))));
        }
        let n = (allowed - emitted).min(self.per_batch as u64).min(remaining) as usize;
        let rows = self.next_rows(n);
        let columns = self
            .schema
            .fields()
            .iter()
            .zip(&self.fields)
            .enumerate()
            .map(|(index, (field, generator))| {
                generate(
                    field,
                    generator,
                    index as u64,
                    rows.iter().copied(),
                    self.anchor_ms,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        // No columns at all when a query reads only computed columns: keep the count.
        Ok(SourcePoll::Batch(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows.len())),
        )?))
    }

    fn snapshot_position(
        &mut self,
        _checkpoint: weir_common::ids::CheckpointId,
    ) -> Result<serde_json::Value> {
        let mut position = CountedSplit::position(self.splits.iter().map(|s| s.split));
        // Each split carries the anchor, so that it survives rescaling.
        if let Some(splits) = position["splits"].as_array_mut() {
            for split in splits {
                split["anchor"] = self.anchor_ms.into();
            }
        }
        Ok(position)
    }

    fn restore_position(&mut self, position: &serde_json::Value) -> Result<()> {
        if let Some(anchor) = position["splits"]
            .as_array()
            .and_then(|splits| splits.iter().find_map(|s| s["anchor"].as_i64()))
        {
            self.anchor_ms = anchor;
        }
        let mut splits = Vec::new();
        for saved in CountedSplit::parse(position, "datagen")? {
            let restored = DatagenSplit::new(saved, self.total);
            if restored.rows.is_some_and(|rows| saved.emitted > rows) {
                return Err(Error::State(format!(
                    "datagen position {} of split {} is beyond its {} rows",
                    saved.emitted,
                    saved.index,
                    restored.rows.unwrap_or_default()
                )));
            }
            splits.push(restored);
        }
        self.splits = splits;
        self.pace();
        Ok(())
    }
}

/// SplitMix64: a counter-based generator, one 64-bit value per (field, row).
#[inline]
fn random_u64(field: u64, row: u64) -> u64 {
    let mut z = row
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(field.wrapping_mul(0xD1B5_4A32_D192_ED03))
        .wrapping_add(0x2545_F491_4F6C_DD1D);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[inline]
fn unit_f64(field: u64, row: u64) -> f64 {
    (random_u64(field, row) >> 11) as f64 / (1u64 << 53) as f64
}

fn int_in(field: u64, row: u64, min: i64, max: i64) -> i64 {
    let span = (max as i128 - min as i128 + 1) as u128;
    (min as i128 + (random_u64(field, row) as u128 % span) as i128) as i64
}

/// The values of column `index` for global rows `rows`; random times count
/// back from `anchor_ms` (the run's start), so replays give the same rows.
fn generate(
    field: &Field,
    generator: &FieldGen,
    index: u64,
    rows: impl Iterator<Item = u64> + Clone,
    anchor_ms: i64,
) -> Result<ArrayRef> {
    let data_type = field.data_type();
    let (min, max, length, max_past_ms, null_rate) = match generator {
        FieldGen::Sequence { start } => return sequence(data_type, *start, rows),
        FieldGen::Random {
            min,
            max,
            length,
            max_past_ms,
            null_rate,
        } => (*min, *max, *length, *max_past_ms, *null_rate),
    };
    let valid = move |row: u64| null_rate == 0.0 || unit_f64(index ^ 0xABCD, row) >= null_rate;
    macro_rules! ints {
        ($array:ty, $t:ty) => {{
            let lo = min.map_or(<$t>::MIN as i64, |v| v as i64);
            let hi = max.map_or(<$t>::MAX as i64, |v| v as i64);
            if lo > hi {
                return Err(Error::sql(format!(
                    "min is above max for field '{}'",
                    field.name()
                )));
            }
            Arc::new(
                rows.map(|r| valid(r).then(|| int_in(index, r, lo, hi) as $t))
                    .collect::<$array>(),
            ) as ArrayRef
        }};
    }
    let (lo, hi) = (min.unwrap_or(0.0), max.unwrap_or(f64::MAX));
    Ok(match data_type {
        DataType::Int8 => ints!(Int8Array, i8),
        DataType::Int16 => ints!(Int16Array, i16),
        DataType::Int32 => ints!(Int32Array, i32),
        DataType::Int64 => ints!(Int64Array, i64),
        DataType::Float64 => Arc::new(
            rows.map(|r| valid(r).then(|| lo + unit_f64(index, r) * (hi - lo)))
                .collect::<Float64Array>(),
        ),
        DataType::Float32 => {
            let hi = max.unwrap_or(f32::MAX as f64);
            Arc::new(
                rows.map(|r| valid(r).then(|| (lo + unit_f64(index, r) * (hi - lo)) as f32))
                    .collect::<Float32Array>(),
            )
        }
        DataType::Decimal128(p, s) => {
            let scale = 10f64.powi(*s as i32);
            let limit = 10f64.powi((*p - *s as u8) as i32) - 1.0 / scale;
            let (lo, hi) = (min.unwrap_or(0.0), max.unwrap_or(limit));
            let array: Decimal128Array = rows
                .map(|r| valid(r).then(|| ((lo + unit_f64(index, r) * (hi - lo)) * scale).round() as i128))
                .collect();
            Arc::new(array.with_precision_and_scale(*p, *s)?)
        }
        DataType::Boolean => Arc::new(
            rows.map(|r| valid(r).then(|| random_u64(index, r) & 1 == 1))
                .collect::<BooleanArray>(),
        ),
        DataType::Utf8 | DataType::Binary => random_bytes(data_type, length, index, rows, valid),
        DataType::Date32 => {
            let today = anchor_ms.div_euclid(86_400_000) as i32;
            let past_days = (max_past_ms / 86_400_000).max(0);
            Arc::new(
                rows.map(|r| valid(r).then(|| today - int_in(index, r, 0, past_days) as i32))
                    .collect::<Date32Array>(),
            )
        }
        DataType::Timestamp(unit, zone) => {
            // As in Flink: the current time (the run's start) minus a
            // random amount up to max-past.
            let values = rows.map(|r| valid(r).then(|| anchor_ms - int_in(index, r, 0, max_past_ms)));
            let array = timestamps_of_millis(*unit, values);
            arrow::compute::cast(&array, &DataType::Timestamp(*unit, zone.clone()))?
        }
        other => return Err(Error::Internal(format!("random {other}"))),
    })
}

/// Row `r` gets `start + r`.
fn sequence(data_type: &DataType, start: i64, rows: impl Iterator<Item = u64>) -> Result<ArrayRef> {
    let values = rows.map(|r| start + r as i64);
    Ok(match data_type {
        DataType::Int8 => Arc::new(Int8Array::from_iter_values(values.map(|v| v as i8))),
        DataType::Int16 => Arc::new(Int16Array::from_iter_values(values.map(|v| v as i16))),
        DataType::Int32 => Arc::new(Int32Array::from_iter_values(values.map(|v| v as i32))),
        DataType::Int64 => Arc::new(Int64Array::from_iter_values(values)),
        DataType::Utf8 => {
            let mut b = StringBuilder::new();
            for v in values {
                b.append_value(v.to_string());
            }
            Arc::new(b.finish())
        }
        other => return Err(Error::Internal(format!("sequence of {other}"))),
    })
}

/// Random strings of `length` hex digits (`Utf8`) or random bytes
/// (`Binary`), null where `valid` says.
fn random_bytes(
    data_type: &DataType,
    length: usize,
    index: u64,
    rows: impl Iterator<Item = u64>,
    valid: impl Fn(u64) -> bool,
) -> ArrayRef {
    let byte = |r: u64, k: u64| random_u64(index, r.wrapping_mul(31).wrapping_add(k));
    if *data_type == DataType::Binary {
        let mut b = BinaryBuilder::new();
        for r in rows {
            match valid(r) {
                true => b.append_value((0..length as u64).map(|k| byte(r, k) as u8).collect::<Vec<u8>>()),
                false => b.append_null(),
            }
        }
        return Arc::new(b.finish());
    }
    let mut b = StringBuilder::new();
    for r in rows {
        if valid(r) {
            let text: String = (0..length as u64)
                .map(|k| char::from_digit((byte(r, k) % 16) as u32, 16).expect("hex digit"))
                .collect();
            b.append_value(text);
        } else {
            b.append_null();
        }
    }
    Arc::new(b.finish())
}

/// Milliseconds since the epoch as timestamps of `unit` (no zone).
fn timestamps_of_millis(unit: TimeUnit, values: impl Iterator<Item = Option<i64>>) -> ArrayRef {
    match unit {
        TimeUnit::Second => Arc::new(
            values
                .map(|v| v.map(|v| v / 1000))
                .collect::<TimestampSecondArray>(),
        ),
        TimeUnit::Millisecond => Arc::new(values.collect::<TimestampMillisecondArray>()),
        TimeUnit::Microsecond => Arc::new(
            values
                .map(|v| v.map(|v| v * 1_000))
                .collect::<TimestampMicrosecondArray>(),
        ),
        TimeUnit::Nanosecond => Arc::new(
            values
                .map(|v| v.map(|v| v * 1_000_000))
                .collect::<TimestampNanosecondArray>(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequence_of_nearly_every_long_estimates_its_size_without_overflowing() {
        use weir_plan::table::{ColumnDef, TableOptions};
        let table = TableDef {
            name: "t".into(),
            columns: vec![ColumnDef::physical("id", DataType::Int64, false)],
            primary_key: vec![],
            partition_keys: vec![],
            options: TableOptions::new(vec![
                ("connector".into(), "datagen".into()),
                ("fields.id.kind".into(), "sequence".into()),
                ("fields.id.start".into(), "0".into()),
                ("fields.id.end".into(), "9223372036854775806".into()),
            ])
            .unwrap(),
        };
        let schema = table.physical_schema();
        let factory = DatagenFactory::try_new(&table, &[0], schema, &SessionConfig::default()).unwrap();
        assert!(factory.is_bounded());
        assert_eq!(factory.estimated_bytes(), Some(u64::MAX));
    }

    #[test]
    fn random_times_replay_the_same_after_a_restore_in_a_later_run() {
        use weir_plan::table::{ColumnDef, TableOptions};
        let table = TableDef {
            name: "t".into(),
            columns: vec![ColumnDef::physical(
                "at",
                DataType::Timestamp(TimeUnit::Millisecond, None),
                true,
            )],
            primary_key: vec![],
            partition_keys: vec![],
            options: TableOptions::new(vec![
                ("connector".into(), "datagen".into()),
                ("number-of-rows".into(), "20".into()),
            ])
            .unwrap(),
        };
        let schema = table.physical_schema();
        let factory = DatagenFactory::try_new(&table, &[0], schema, &SessionConfig::default()).unwrap();
        // Every value until the end (the rate limit decides the batch sizes).
        let rest = |reader: &mut Box<dyn SourceReader>| {
            let mut values = Vec::new();
            loop {
                match reader.poll_next().unwrap() {
                    SourcePoll::Batch(b) => {
                        let column = b
                            .column(0)
                            .as_any()
                            .downcast_ref::<TimestampMillisecondArray>()
                            .unwrap();
                        values.extend(column.iter());
                    }
                    SourcePoll::Idle(wait) => std::thread::sleep(wait.min(Duration::from_millis(5))),
                    SourcePoll::End => return values,
                    other => panic!("datagen reads no splits: {other:?}"),
                }
            }
        };
        let mut first = factory.create_reader(&TaskContext::standalone(5)).unwrap();
        let head = match first.poll_next().unwrap() {
            SourcePoll::Batch(b) => b.num_rows(),
            _ => 0,
        };
        let position = first.snapshot_position(1).unwrap();
        let expected = rest(&mut first);
        assert_eq!(head + expected.len(), 20);
        // A later run (another job id, another "now") restores the position.
        std::thread::sleep(Duration::from_millis(5));
        let mut later = factory.create_reader(&TaskContext::standalone(5)).unwrap();
        later.restore_position(&position).unwrap();
        assert_eq!(rest(&mut later), expected);
    }

    #[test]
    fn random_values_are_a_function_of_the_row() {
        assert_eq!(random_u64(3, 17), random_u64(3, 17));
        assert_ne!(random_u64(3, 17), random_u64(3, 18));
        assert_ne!(random_u64(3, 17), random_u64(4, 17));
        for row in 0..1000 {
            let v = int_in(1, row, -5, 5);
            assert!((-5..=5).contains(&v));
        }
    }
}
