//! What a Kafka table's columns are made of, as in Flink's Kafka connector:
//! the record's value (`format` or `value.format`), its key (`key.format`,
//! `key.fields`), and its metadata (`partition`, `offset`, `timestamp`, ...
//! as `METADATA` columns); and decoding a partition's records into rows.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, Int64Array, StringArray, UInt32Array};
use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::format::records::{RecordDecoder, RecordFormat};
use crate::{Error, Result};
use weir_common::changelog::RowKind;
use weir_common::types::flink_type_name;
use weir_plan::table::TableDef;

/// A Kafka record's metadata that a column can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metadata {
    /// `topic` (STRING).
    Topic,
    /// `partition` (INT).
    Partition,
    /// `offset` (BIGINT).
    Offset,
    /// `timestamp` (TIMESTAMP_LTZ(3)).
    Timestamp,
    /// `timestamp-type` (STRING: NoTimestampType, CreateTime, LogAppendTime).
    TimestampType,
    /// `leader-epoch` (INT, NULL when unknown).
    LeaderEpoch,
}

/// The metadata keys a Kafka source reads, with the type each has.
pub const READABLE_METADATA: &[(&str, Metadata, &str)] = &[
    ("topic", Metadata::Topic, "STRING"),
    ("partition", Metadata::Partition, "INT"),
    ("offset", Metadata::Offset, "BIGINT"),
    ("timestamp", Metadata::Timestamp, "TIMESTAMP_LTZ(3)"),
    ("timestamp-type", Metadata::TimestampType, "STRING"),
    ("leader-epoch", Metadata::LeaderEpoch, "INT"),
];

/// The metadata keys a Kafka table accepts: the readable ones (the sink
/// writes `timestamp`).
pub fn metadata_key(table: &TableDef, column: &str, key: &str) -> Result<Metadata> {
    READABLE_METADATA
        .iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, m, _)| *m)
        .ok_or_else(|| {
            Error::sql(format!(
                "table '{}': column '{column}' reads the metadata key '{key}', which Kafka does not have; \
                 available: {}",
                table.name,
                READABLE_METADATA
                    .iter()
                    .map(|(k, _, t)| format!("'{k}' {t}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// Where a column's values come from.
#[derive(Debug, Clone, Copy)]
enum Part {
    /// Field `i` of the decoded key.
    Key(usize),
    /// Field `i` of the decoded value.
    Value(usize),
    Metadata(Metadata),
}

/// One record as the layout reads it.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// Its key, if any.
    pub key: Option<&'a [u8]>,
    /// Its value; `None` (a tombstone) is skipped.
    pub value: Option<&'a [u8]>,
    /// Its offset.
    pub offset: i64,
    /// Its timestamp (ms), if any.
    pub timestamp: Option<i64>,
    /// `CreateTime`, `LogAppendTime` or `NoTimestampType`.
    pub timestamp_type: &'static str,
    /// The partition leader's epoch, if known.
    pub leader_epoch: Option<i32>,
}

/// The columns a Kafka source reads and how to make them from records.
#[derive(Debug, Clone)]
pub struct Layout {
    key: Option<RecordDecoder>,
    value: RecordDecoder,
    parts: Vec<Part>,
    schema: SchemaRef,
    /// `format` or `value.format`, and `key.format`, for EXPLAIN.
    formats: String,
    /// `upsert-kafka`: tombstones are deletes.
    upsert: bool,
}

/// Whether a table is `upsert-kafka`'s: keyed by its primary key, tombstones
/// deleting.
pub fn is_upsert(table: &TableDef) -> bool {
    table.option("connector") == Some("upsert-kafka")
}

/// The columns of a table's key: `key.fields`, or `upsert-kafka`'s primary key.
pub fn key_fields(table: &TableDef) -> Vec<String> {
    if is_upsert(table) {
        return table.primary_key.clone();
    }
    table
        .option("key.fields")
        .map(|v| {
            v.split(';')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The key and value fields of a table: the physical columns named by
/// `key.fields`, and those of the value (all, or the others with
/// `value.fields-include` = `EXCEPT_KEY`).
fn key_and_value_fields(table: &TableDef) -> Result<(Vec<String>, Vec<String>)> {
    let physical: Vec<String> = table
        .physical_schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let key_fields = key_fields(table);
    for key in &key_fields {
        if !physical.contains(key) {
            return Err(Error::sql(format!(
                "table '{}': 'key.fields' names '{key}', which is not a physical column",
                table.name
            )));
        }
    }
    let except_key = match table.option("value.fields-include").unwrap_or("ALL") {
        "ALL" => false,
        "EXCEPT_KEY" => true,
        other => {
            return Err(Error::sql(format!(
                "table '{}': invalid value '{other}' for option 'value.fields-include'; expected ALL or EXCEPT_KEY",
                table.name
            )));
        }
    };
    let value_fields = physical
        .iter()
        .filter(|c| !except_key || !key_fields.contains(c))
        .cloned()
        .collect();
    Ok((key_fields, value_fields))
}

/// The value format and the key format (with `key.fields`) of a table.
fn formats(table: &TableDef) -> Result<(RecordFormat, Option<RecordFormat>)> {
    let value = match (table.option("format"), table.option("value.format")) {
        (Some(_), Some(_)) => {
            return Err(Error::sql(format!(
                "table '{}': give 'format' or 'value.format', not both",
                table.name
            )));
        }
        (Some(_), None) => RecordFormat::from_table(table, "format", "")?,
        (None, Some(_)) => RecordFormat::from_table(table, "value.format", "value.")?,
        (None, None) => None,
    }
    .ok_or_else(|| {
        Error::sql(format!(
            "table '{}': a Kafka table needs 'format' or 'value.format'",
            table.name
        ))
    })?;
    let key = RecordFormat::from_table(table, "key.format", "key.")?;
    if is_upsert(table) {
        if table.primary_key.is_empty() {
            return Err(Error::sql(format!(
                "table '{}': 'upsert-kafka' tables require a PRIMARY KEY (the record key)",
                table.name
            )));
        }
        if key.is_none() || table.option("value.format").is_none() {
            return Err(Error::sql(format!(
                "table '{}': 'upsert-kafka' tables need 'key.format' and 'value.format'",
                table.name
            )));
        }
        return Ok((value, key));
    }
    match (&key, table.option("key.fields")) {
        (Some(_), None) => Err(Error::sql(format!(
            "table '{}': 'key.format' needs 'key.fields' (the columns of the key)",
            table.name
        ))),
        (None, Some(_)) => Err(Error::sql(format!(
            "table '{}': 'key.fields' needs 'key.format'",
            table.name
        ))),
        _ => Ok((value, key)),
    }
}

impl Layout {
    /// The layout of `table`'s columns `projection` (positions in its read
    /// schema: physical and metadata columns), produced as `schema`.
    pub fn new(table: &TableDef, projection: &[usize], schema: SchemaRef) -> Result<Layout> {
        let (value_format, key_format) = formats(table)?;
        let (key_fields, value_fields) = key_and_value_fields(table)?;
        let prefix = table.option("key.fields-prefix").unwrap_or("");
        let read = table.read_schema();
        let physical = table.physical_schema();
        let fields_of = |names: &[String], strip: &str| -> Result<Schema> {
            let fields = names
                .iter()
                .map(|n| {
                    let field = physical.field_with_name(n)?;
                    let name = n.strip_prefix(strip).unwrap_or(n);
                    Ok(field.as_ref().clone().with_name(name))
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(Schema::new(fields))
        };
        let (mut key_wanted, mut value_wanted) = (Vec::new(), Vec::new());
        let mut parts = Vec::new();
        for &i in projection {
            let name = read.field(i).name();
            let column = table
                .columns
                .iter()
                .find(|c| c.name == *name)
                .expect("a table column");
            let from_key = is_upsert(table) && key_fields.contains(name);
            if let Some(metadata) = &column.metadata {
                parts.push(Part::Metadata(metadata_key(table, name, &metadata.key)?));
            } else if let Some(v) = value_fields.iter().position(|f| f == name).filter(|_| !from_key) {
                parts.push(Part::Value(value_wanted.len()));
                value_wanted.push(v);
            } else {
                let k = key_fields.iter().position(|f| f == name).expect("a key field");
                parts.push(Part::Key(key_wanted.len()));
                key_wanted.push(k);
            }
        }
        let formats = match &key_format {
            Some(key) => format!("key={}, value={}", key.name(), value_format.name()),
            None => format!("format={}", value_format.name()),
        };
        let value = RecordDecoder::new(
            value_format,
            &fields_of(&value_fields, "")?,
            &value_wanted,
            &table.name,
        )?;
        let key = match key_format {
            Some(format) => Some(RecordDecoder::new(
                format,
                &fields_of(&key_fields, prefix)?,
                &key_wanted,
                &table.name,
            )?),
            None => None,
        };
        Ok(Layout {
            key: key.filter(|k| !k.schema().fields().is_empty()),
            value,
            parts,
            schema,
            formats,
            upsert: is_upsert(table),
        })
    }

    /// The formats, for EXPLAIN.
    pub fn formats(&self) -> &str {
        &self.formats
    }

    /// The rows of `records` of partition `partition` of `topic`, and how
    /// many did not parse and were skipped. Tombstones (no value) are
    /// skipped, or for an upsert table are the key's `-D` (the other rows
    /// its `+U`, and the batch carries the op column).
    pub fn decode(&self, topic: &str, partition: i32, records: &[Record<'_>]) -> Result<(RecordBatch, u64)> {
        let records: Vec<&Record> = records
            .iter()
            .filter(|r| self.upsert || r.value.is_some())
            .collect();
        let locate = |i: usize| {
            let at = format!(
                "Kafka topic '{topic}', partition {partition}, offset {}",
                records[i].offset
            );
            (at, None)
        };
        let mut dropped = BTreeSet::new();
        let value = decode_part(&self.value, &records, |r| r.value, &locate, &mut dropped)?;
        let key = match &self.key {
            Some(decoder) => Some(decode_part(decoder, &records, |r| r.key, &locate, &mut dropped)?),
            None => None,
        };
        let kept: Vec<usize> = (0..records.len()).filter(|i| !dropped.contains(i)).collect();
        // Every record had a value, and each one parsed: the value's columns as they are.
        let whole = value.0.num_rows() == records.len();
        let columns = self
            .parts
            .iter()
            .zip(self.schema.fields())
            .map(|(part, field)| {
                let column = match part {
                    Part::Value(i) if whole => value.0.column(*i).clone(),
                    Part::Value(i) => take_rows(value.0.column(*i), &value.1, &kept)?,
                    Part::Key(i) => {
                        let (batch, rows) = key.as_ref().expect("a key decoder");
                        take_rows(batch.column(*i), rows, &kept)?
                    }
                    Part::Metadata(m) => metadata_column(*m, topic, partition, &records, &kept),
                };
                conform(column, field.data_type(), field.name())
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let batch = if self.upsert {
            let kinds: Vec<RowKind> = kept
                .iter()
                .map(|i| match records[*i].value {
                    Some(_) => RowKind::UpdateAfter,
                    None => RowKind::Delete,
                })
                .collect();
            weir_common::changelog::with_kinds(
                &weir_common::changelog::with_op(&self.schema),
                columns,
                &kinds,
            )?
        } else {
            RecordBatch::try_new_with_options(
                self.schema.clone(),
                columns,
                &RecordBatchOptions::new().with_row_count(Some(kept.len())),
            )?
        };
        Ok((batch, dropped.len() as u64))
    }
}

/// Decodes the part `part` of each record has (its value or key) with
/// `decoder`: the rows, and for each record its row (`None` where it has
/// none: its fields are NULL). Records that did not parse join `dropped`.
fn decode_part<'a>(
    decoder: &RecordDecoder,
    records: &[&Record<'a>],
    part: impl Fn(&Record<'a>) -> Option<&'a [u8]>,
    locate: &dyn Fn(usize) -> (String, Option<u64>),
    dropped: &mut BTreeSet<usize>,
) -> Result<(RecordBatch, Vec<Option<u32>>)> {
    let present: Vec<usize> = (0..records.len())
        .filter(|i| part(records[*i]).is_some())
        .collect();
    let bytes: Vec<&[u8]> = present
        .iter()
        .map(|i| part(records[*i]).expect("present"))
        .collect();
    let decoded = decoder.decode(&bytes, &|k| locate(present[k]))?;
    dropped.extend(decoded.skipped.iter().map(|k| present[*k]));
    let skipped: BTreeSet<usize> = decoded.skipped.iter().copied().collect();
    let rows = rows_of(
        records.len(),
        present
            .iter()
            .enumerate()
            .filter(|(k, _)| !skipped.contains(k))
            .map(|(_, i)| *i),
    );
    Ok((decoded.batch, rows))
}

/// For each of `n` records, its row in a decoded batch holding the rows of
/// `records` (in order), or `None`.
fn rows_of(n: usize, records: impl Iterator<Item = usize>) -> Vec<Option<u32>> {
    let mut rows = vec![None; n];
    for (row, record) in records.enumerate() {
        rows[record] = Some(row as u32);
    }
    rows
}

/// The values of records `kept` from `column`, whose rows `rows` maps.
fn take_rows(column: &ArrayRef, rows: &[Option<u32>], kept: &[usize]) -> Result<ArrayRef> {
    let indices: UInt32Array = kept.iter().map(|i| rows[*i]).collect();
    Ok(arrow::compute::take(column.as_ref(), &indices, None)?)
}

fn metadata_column(
    m: Metadata,
    topic: &str,
    partition: i32,
    records: &[&Record],
    kept: &[usize],
) -> ArrayRef {
    let each = kept.iter().map(|i| records[*i]);
    match m {
        Metadata::Topic => Arc::new(StringArray::from(vec![topic; kept.len()])),
        Metadata::Partition => Arc::new(Int32Array::from(vec![partition; kept.len()])),
        Metadata::Offset => Arc::new(each.map(|r| r.offset).collect::<Int64Array>()),
        Metadata::Timestamp => Arc::new(each.map(|r| r.timestamp).collect::<Int64Array>()),
        Metadata::TimestampType => Arc::new(each.map(|r| Some(r.timestamp_type)).collect::<StringArray>()),
        Metadata::LeaderEpoch => Arc::new(each.map(|r| r.leader_epoch).collect::<Int32Array>()),
    }
}

/// `column` as the column's declared type.
fn conform(column: ArrayRef, target: &DataType, name: &str) -> Result<ArrayRef> {
    if column.data_type() == target {
        return Ok(column);
    }
    arrow::compute::cast(&column, target).map_err(|e| {
        Error::Execution(format!(
            "column '{name}' cannot be read as {}: {e}",
            flink_type_name(target)
        ))
    })
}
