//! Formats of whole records: one row per record (a Kafka message's key or
//! value), in `json`, `csv` or `raw`, as Flink's formats of the same names.

use std::sync::Arc;

use arrow::array::{ArrayRef, BinaryArray, StringArray, StringBuilder};
use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::format::csv::{CsvOptions, bad_value_message, convert_fields};
use crate::format::json::{Decoded, JsonOptions, Locate, decode_json_records};
use crate::{Error, Result};
use weir_plan::table::{TableDef, TableOptions};

/// A record format and its options.
#[derive(Debug, Clone)]
pub enum RecordFormat {
    /// `json`: one object per record, fields by name.
    Json(JsonOptions),
    /// `csv`: one line per record, fields by position.
    Csv(CsvOptions),
    /// `raw`: the record's bytes are the one column's value.
    Raw,
}

impl RecordFormat {
    /// The format named by option `key` of `table`, with its options, which
    /// are `{prefix}json.*` etc. (`prefix`: `""` for `format`, `key.` for
    /// `key.format`, `value.` for `value.format`).
    pub fn from_table(table: &TableDef, key: &str, prefix: &str) -> Result<Option<RecordFormat>> {
        let Some(name) = table.option(key) else {
            return Ok(None);
        };
        let stripped = TableDef {
            options: TableOptions::new(
                table
                    .options
                    .entries()
                    .iter()
                    .filter_map(|(k, v)| Some((k.strip_prefix(prefix)?.to_string(), v.clone())))
                    .collect(),
            )?,
            ..table.clone()
        };
        Ok(Some(match name {
            "json" => RecordFormat::Json(JsonOptions::from_table(&stripped)?),
            "csv" => RecordFormat::Csv(CsvOptions::from_table(&stripped)?),
            "raw" => RecordFormat::Raw,
            other => {
                return Err(Error::sql(format!(
                    "table '{}': unsupported format '{other}' for option '{key}'; supported: json, csv, raw",
                    table.name
                )));
            }
        }))
    }

    /// The format's name.
    pub fn name(&self) -> &'static str {
        match self {
            RecordFormat::Json(_) => "json",
            RecordFormat::Csv(_) => "csv",
            RecordFormat::Raw => "raw",
        }
    }

    /// Whether records that do not parse are skipped.
    pub fn ignores_parse_errors(&self) -> bool {
        match self {
            RecordFormat::Json(o) => o.ignore_parse_errors,
            RecordFormat::Csv(o) => o.ignore_parse_errors,
            RecordFormat::Raw => false,
        }
    }
}

/// Decodes records of a format into some of its fields.
#[derive(Debug, Clone)]
pub struct RecordDecoder {
    format: RecordFormat,
    /// The fields decoded (named as in the records).
    schema: SchemaRef,
    /// Their positions among the format's fields (csv).
    positions: Vec<usize>,
    /// How many fields each record has (csv).
    field_count: usize,
}

impl RecordDecoder {
    /// Decodes fields `wanted` (positions) of records holding `fields`;
    /// `table` names the table in errors.
    pub fn new(format: RecordFormat, fields: &Schema, wanted: &[usize], table: &str) -> Result<Self> {
        if matches!(format, RecordFormat::Raw) {
            let types_ok = fields.fields().len() == 1
                && matches!(fields.field(0).data_type(), DataType::Utf8 | DataType::Binary);
            if !types_ok {
                return Err(Error::sql(format!(
                    "table '{table}': the 'raw' format reads one column of type STRING or BYTES, not [{}]",
                    fields
                        .fields()
                        .iter()
                        .map(|f| format!("{} {}", f.name(), f.data_type()))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        Ok(RecordDecoder {
            format,
            schema: Arc::new(fields.project(wanted)?),
            positions: wanted.to_vec(),
            field_count: fields.fields().len(),
        })
    }

    /// The fields it decodes.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The rows of `records` (errors at `locate(i)`).
    pub fn decode(&self, records: &[&[u8]], locate: Locate<'_>) -> Result<Decoded> {
        if self.schema.fields().is_empty() {
            // Nothing to read of them (only metadata columns are selected).
            let batch = RecordBatch::try_new_with_options(
                self.schema.clone(),
                vec![],
                &RecordBatchOptions::new().with_row_count(Some(records.len())),
            )?;
            return Ok(Decoded {
                batch,
                skipped: vec![],
            });
        }
        match &self.format {
            RecordFormat::Json(options) => decode_json_records(&self.schema, options, records, locate),
            RecordFormat::Csv(options) => self.decode_csv(options, records, locate),
            RecordFormat::Raw => self.decode_raw(records, locate),
        }
    }

    fn decode_raw(&self, records: &[&[u8]], locate: Locate<'_>) -> Result<Decoded> {
        let column: ArrayRef = match self.schema.field(0).data_type() {
            DataType::Utf8 => {
                let texts = records
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        std::str::from_utf8(r).map_err(|_| {
                            let (file, line) = locate(i);
                            Error::Data {
                                file,
                                line,
                                message: "the record is not valid UTF-8 text".into(),
                            }
                        })
                    })
                    .collect::<Result<Vec<&str>>>()?;
                Arc::new(StringArray::from(texts))
            }
            _ => Arc::new(BinaryArray::from(records.to_vec())),
        };
        Ok(Decoded {
            batch: RecordBatch::try_new(self.schema.clone(), vec![column])?,
            skipped: vec![],
        })
    }

    fn decode_csv(&self, options: &CsvOptions, records: &[&[u8]], locate: Locate<'_>) -> Result<Decoded> {
        let mut builders: Vec<StringBuilder> = self.positions.iter().map(|_| StringBuilder::new()).collect();
        let mut skipped = Vec::new();
        let mut kept = Vec::new();
        // A malformed record, reported after the values before it are
        // checked (errors come in record order).
        let mut pending = None;
        for (i, record) in records.iter().enumerate() {
            match csv_fields(options, record, self.field_count) {
                Ok(fields) => {
                    for (builder, position) in builders.iter_mut().zip(&self.positions) {
                        match &fields[*position] {
                            Some(text) => builder.append_value(text),
                            None => builder.append_null(),
                        }
                    }
                    kept.push(i);
                }
                Err(_) if options.ignore_parse_errors => skipped.push(i),
                Err(message) => {
                    pending = Some((i, message));
                    break;
                }
            }
        }
        let texts: Vec<ArrayRef> = builders
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef)
            .collect();
        let fields = convert_fields(&texts, kept.len(), &self.schema)?;
        if let Some((row, column)) = fields.first_bad {
            if !options.ignore_parse_errors {
                let (file, line) = locate(kept[row]);
                return Err(Error::Data {
                    file,
                    line,
                    message: bad_value_message(&texts, &self.schema, row, column),
                });
            }
            skipped.extend(
                kept.iter()
                    .zip(&fields.bad)
                    .filter(|(_, bad)| **bad)
                    .map(|(i, _)| *i),
            );
            skipped.sort_unstable();
        }
        if let Some((i, message)) = pending {
            let (file, line) = locate(i);
            return Err(Error::Data { file, line, message });
        }
        Ok(Decoded {
            batch: fields.good_rows()?,
            skipped,
        })
    }
}

/// Encoded rows: row `i`'s bytes are `bytes[ends[i - 1]..ends[i]]`.
#[derive(Debug, Default)]
pub struct Encoded {
    /// Every row's bytes, one after another.
    pub bytes: Vec<u8>,
    /// Where each row ends.
    pub ends: Vec<usize>,
}

impl Encoded {
    /// Row `i`'s bytes.
    pub fn row(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }
}

impl RecordFormat {
    /// Encodes each row of `batch` as one record, as Flink's formats write
    /// them (json: an object of the columns by name).
    pub fn encode(&self, batch: &RecordBatch) -> Result<Encoded> {
        let mut encoded = Encoded::default();
        match self {
            RecordFormat::Json(_) => {
                // One line per row (JSON escapes newlines inside strings).
                super::json::write_json_lines(batch, &mut encoded.bytes)?;
                let lines: Vec<usize> = encoded
                    .bytes
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| **b == b'\n')
                    .map(|(i, _)| i)
                    .collect();
                encoded.ends = lines;
                // Drop the newlines: each record ends where its line does.
                let mut bytes = Vec::with_capacity(encoded.bytes.len());
                let mut start = 0;
                for end in &mut encoded.ends {
                    bytes.extend_from_slice(&encoded.bytes[start..*end]);
                    start = *end + 1;
                    *end = bytes.len();
                }
                encoded.bytes = bytes;
            }
            RecordFormat::Csv(options) => {
                let writer = super::csv::CsvRowWriter::new(options.clone());
                for row in 0..batch.num_rows() {
                    writer.write(&batch.slice(row, 1), &mut encoded.bytes)?;
                    while encoded.bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                        encoded.bytes.pop();
                    }
                    encoded.ends.push(encoded.bytes.len());
                }
            }
            RecordFormat::Raw => {
                let column = batch.column(0);
                for row in 0..batch.num_rows() {
                    match column.data_type() {
                        DataType::Utf8 => {
                            let values = column.as_any().downcast_ref::<StringArray>().expect("utf8");
                            encoded.bytes.extend_from_slice(values.value(row).as_bytes());
                        }
                        _ => {
                            let values = column.as_any().downcast_ref::<BinaryArray>().expect("binary");
                            encoded.bytes.extend_from_slice(values.value(row));
                        }
                    }
                    encoded.ends.push(encoded.bytes.len());
                }
            }
        }
        if encoded.ends.len() != batch.num_rows() {
            return Err(Error::Internal(format!(
                "{} rows encoded as {} records",
                batch.num_rows(),
                encoded.ends.len()
            )));
        }
        Ok(encoded)
    }
}

/// The fields of one CSV record (`None`: the null literal).
fn csv_fields(
    options: &CsvOptions,
    record: &[u8],
    field_count: usize,
) -> std::result::Result<Vec<Option<String>>, String> {
    let mut reader = ::csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(options.delimiter)
        .quote(options.quote)
        .buffer_capacity(record.len().max(16) + 1)
        .from_reader(record);
    let mut row = ::csv::ByteRecord::new();
    let read = reader.read_byte_record(&mut row).map_err(|e| e.to_string())?;
    if !read || row.len() != field_count {
        return Err(format!(
            "expected {field_count} fields, found {}",
            if read { row.len() } else { 0 }
        ));
    }
    if reader
        .read_byte_record(&mut ::csv::ByteRecord::new())
        .map_err(|e| e.to_string())?
    {
        return Err("the record holds more than one line".into());
    }
    row.iter()
        .enumerate()
        .map(|(i, raw)| {
            let text = std::str::from_utf8(raw).map_err(|_| format!("field {} is not valid UTF-8", i + 1))?;
            Ok((options.null_literal.as_deref() != Some(text)).then(|| text.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use arrow::array::AsArray;
    use arrow::datatypes::{Field, Int64Type};

    use super::*;

    fn fields() -> Schema {
        Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ])
    }

    fn at(i: usize) -> (String, Option<u64>) {
        (format!("Kafka topic 't', partition 0, offset {}", 10 + i), None)
    }

    fn json(ignore: bool) -> RecordFormat {
        RecordFormat::Json(JsonOptions {
            ignore_parse_errors: ignore,
            fail_on_missing_field: false,
        })
    }

    #[test]
    fn json_records_decode_the_wanted_fields_by_name() {
        let decoder = RecordDecoder::new(json(false), &fields(), &[1], "t").unwrap();
        let records: Vec<&[u8]> = vec![br#"{"id": 1, "name": "a"}"#, br#"{"name": "b", "x": 3}"#];
        let decoded = decoder.decode(&records, &at).unwrap();
        let names: Vec<_> = decoded.batch.column(0).as_string::<i32>().iter().collect();
        assert_eq!(names, vec![Some("a"), Some("b")]);
    }

    #[test]
    fn a_bad_json_record_is_reported_with_its_offset_or_skipped() {
        let records: Vec<&[u8]> = vec![br#"{"id": 1}"#, br#"{"id": "#, br#"{"id": 3}"#];
        let decoder = RecordDecoder::new(json(false), &fields(), &[0], "t").unwrap();
        let err = decoder.decode(&records, &at).unwrap_err().to_string();
        assert!(err.contains("partition 0, offset 11"), "{err}");
        let decoder = RecordDecoder::new(json(true), &fields(), &[0], "t").unwrap();
        let decoded = decoder.decode(&records, &at).unwrap();
        assert_eq!(decoded.skipped, vec![1]);
        let ids: Vec<_> = decoded
            .batch
            .column(0)
            .as_primitive::<Int64Type>()
            .values()
            .to_vec();
        assert_eq!(ids, vec![1, 3]);
    }

    #[test]
    fn two_objects_in_one_record_are_a_bad_record() {
        let records: Vec<&[u8]> = vec![br#"{"id": 1} {"id": 2}"#];
        let decoder = RecordDecoder::new(json(false), &fields(), &[0], "t").unwrap();
        let err = decoder.decode(&records, &at).unwrap_err().to_string();
        assert!(err.contains("offset 10"), "{err}");
    }

    #[test]
    fn csv_records_decode_by_position_and_report_bad_values() {
        let csv = |ignore| {
            RecordFormat::Csv(CsvOptions {
                delimiter: b',',
                quote: b'"',
                allow_comments: false,
                ignore_parse_errors: ignore,
                null_literal: None,
            })
        };
        let records: Vec<&[u8]> = vec![b"1,a", b"x,b", b"3,\"c,d\"", b"4"];
        let decoder = RecordDecoder::new(csv(true), &fields(), &[0, 1], "t").unwrap();
        let decoded = decoder.decode(&records, &at).unwrap();
        assert_eq!(decoded.skipped, vec![1, 3]);
        let names: Vec<_> = decoded.batch.column(1).as_string::<i32>().iter().collect();
        assert_eq!(names, vec![Some("a"), Some("c,d")]);
        let decoder = RecordDecoder::new(csv(false), &fields(), &[0, 1], "t").unwrap();
        let err = decoder.decode(&records, &at).unwrap_err().to_string();
        assert!(
            err.contains("offset 11") && err.contains("cannot parse 'x'"),
            "{err}"
        );
    }

    #[test]
    fn rows_encode_as_one_record_each_and_decode_back() {
        let batch = RecordBatch::try_new(
            Arc::new(fields()),
            vec![
                Arc::new(arrow::array::Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a\nb"), Some("c,d")])),
            ],
        )
        .unwrap();
        let csv = RecordFormat::Csv(CsvOptions {
            delimiter: b',',
            quote: b'"',
            allow_comments: false,
            ignore_parse_errors: false,
            null_literal: None,
        });
        for format in [json(false), csv] {
            let encoded = format.encode(&batch).unwrap();
            let records: Vec<&[u8]> = (0..2).map(|i| encoded.row(i)).collect();
            let decoder = RecordDecoder::new(format.clone(), &fields(), &[0, 1], "t").unwrap();
            let decoded = decoder.decode(&records, &at).unwrap();
            assert_eq!(decoded.batch, batch, "{}", format.name());
        }
        let encoded = json(false).encode(&batch.slice(1, 1)).unwrap();
        assert_eq!(encoded.row(0), br#"{"id":2,"name":"c,d"}"#);
    }

    #[test]
    fn raw_records_are_the_value_of_one_column() {
        let one = Schema::new(vec![Field::new("line", DataType::Utf8, true)]);
        let decoder = RecordDecoder::new(RecordFormat::Raw, &one, &[0], "t").unwrap();
        let records: Vec<&[u8]> = vec![b"hello", b"", &[0xff]];
        let err = decoder.decode(&records, &at).unwrap_err().to_string();
        assert!(err.contains("offset 12") && err.contains("UTF-8"), "{err}");
        let decoded = decoder.decode(&records[..2], &at).unwrap();
        assert_eq!(decoded.batch.num_rows(), 2);
        let err = RecordDecoder::new(RecordFormat::Raw, &fields(), &[0], "t").unwrap_err();
        assert!(err.to_string().contains("one column"), "{err}");
    }
}
