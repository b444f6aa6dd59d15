//! Flink's `json` format: one JSON object per line, fields by name.
//!
//! Reading decodes many lines at once with Arrow's JSON decoder; when a chunk
//! fails, its lines are decoded one by one to find the bad line (reported with
//! file and line, or skipped and counted with `json.ignore-parse-errors`).
//! Missing fields are NULL, unknown fields are ignored, as in Flink.

use std::io::BufRead;

use arrow::array::Array;
use arrow::datatypes::{DataType, FieldRef, SchemaRef};
use arrow::error::ArrowError;
use arrow::json::reader::{Decoder, ReaderBuilder};
use arrow::json::writer::{Encoder, EncoderFactory, EncoderOptions, NullableEncoder};
use arrow::record_batch::RecordBatch;

use crate::format::text::{TextStyle, format_column};
use crate::format::unpanicked;
use crate::{Error, Result};
use weir_plan::table::TableDef;

/// Keys of the json format.
pub const JSON_KEYS: &[&str] = &["json.ignore-parse-errors", "json.fail-on-missing-field"];

/// The `json.*` options of a table.
#[derive(Debug, Clone)]
pub struct JsonOptions {
    /// Skip lines that do not parse.
    pub ignore_parse_errors: bool,
    /// Fail when a field is missing (default: it is NULL).
    pub fail_on_missing_field: bool,
}

impl JsonOptions {
    /// Reads the options of a table.
    pub fn from_table(table: &TableDef) -> Result<Self> {
        Ok(JsonOptions {
            ignore_parse_errors: table.parse_bool_option("json.ignore-parse-errors", false)?,
            fail_on_missing_field: table.parse_bool_option("json.fail-on-missing-field", false)?,
        })
    }
}

/// Reads JSON lines of one file into batches.
pub struct JsonBatchReader<R: BufRead> {
    input: R,
    file: String,
    schema: SchemaRef,
    options: JsonOptions,
    line: u64,
    /// Rows skipped because they did not parse.
    pub skipped: u64,
    done: bool,
}

impl<R: BufRead> JsonBatchReader<R> {
    /// A reader of `input` producing `schema` (the projected physical columns).
    pub fn new(input: R, file: String, schema: SchemaRef, options: JsonOptions) -> Self {
        JsonBatchReader {
            input,
            file,
            schema,
            options,
            line: 0,
            skipped: 0,
            done: false,
        }
    }

    /// The next batch of up to `max_rows` rows, or `None` at the end.
    pub fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>> {
        while !self.done {
            let mut lines: Vec<(u64, String)> = Vec::new();
            while lines.len() < max_rows {
                let mut text = String::new();
                let read = self
                    .input
                    .read_line(&mut text)
                    .map_err(|e| Error::io(&self.file, e))?;
                if read == 0 {
                    self.done = true;
                    break;
                }
                self.line += 1;
                if !text.trim().is_empty() {
                    lines.push((self.line, text));
                }
            }
            if lines.is_empty() {
                continue;
            }
            let records: Vec<&[u8]> = lines.iter().map(|(_, text)| text.as_bytes()).collect();
            let file = &self.file;
            let decoded = decode_json_records(&self.schema, &self.options, &records, &|i| {
                (file.clone(), Some(lines[i].0))
            })?;
            self.skipped += decoded.skipped.len() as u64;
            if decoded.batch.num_rows() > 0 {
                return Ok(Some(decoded.batch));
            }
        }
        Ok(None)
    }
}

/// Rows decoded from whole records (lines of a file, Kafka messages).
#[derive(Debug)]
pub struct Decoded {
    /// The rows of the records that parsed, in order.
    pub batch: RecordBatch,
    /// The records skipped because they did not parse (with
    /// `ignore-parse-errors`), by index.
    pub skipped: Vec<usize>,
}

/// Where record `i` is, for errors: a file (or source) and a line.
pub type Locate<'a> = &'a dyn Fn(usize) -> (String, Option<u64>);

/// Decodes records holding one JSON object each into rows of `schema`.
///
/// All at once with Arrow's decoder; when that fails, or a record is not
/// exactly one object, record by record to find the bad one: an error at
/// `locate(i)`, or skipped with `json.ignore-parse-errors`.
pub fn decode_json_records(
    schema: &SchemaRef,
    options: &JsonOptions,
    records: &[&[u8]],
    locate: Locate<'_>,
) -> Result<Decoded> {
    let whole: Result<Option<RecordBatch>> = unpanicked(|| {
        let mut decoder = json_decoder(schema, records.len())?;
        for (i, record) in records.iter().enumerate() {
            let consumed = decoder.decode(record)?;
            if decoder.len() != i + 1 || decoder.has_partial_record() || !only_space(&record[consumed..]) {
                return Err(Error::Internal("not one object".into()));
            }
        }
        Ok(decoder.flush()?)
    });
    let (batch, skipped) = match whole {
        Ok(batch) => (batch, Vec::new()),
        Err(_) => decode_one_by_one(schema, options, records, locate)?,
    };
    let batch = batch.unwrap_or_else(|| RecordBatch::new_empty(schema.clone()));
    if options.fail_on_missing_field {
        let kept: Vec<usize> = (0..records.len()).filter(|i| !skipped.contains(i)).collect();
        check_missing(schema, &batch, records, &kept, locate)?;
    }
    Ok(Decoded { batch, skipped })
}

fn only_space(rest: &[u8]) -> bool {
    rest.iter().all(u8::is_ascii_whitespace)
}

fn json_decoder(schema: &SchemaRef, batch_size: usize) -> Result<Decoder> {
    Ok(ReaderBuilder::new(schema.clone())
        .with_batch_size(batch_size.max(1))
        .with_strict_mode(false)
        .build_decoder()?)
}

fn decode_one_by_one(
    schema: &SchemaRef,
    options: &JsonOptions,
    records: &[&[u8]],
    locate: Locate<'_>,
) -> Result<(Option<RecordBatch>, Vec<usize>)> {
    let mut good = Vec::new();
    let mut skipped = Vec::new();
    for (i, record) in records.iter().enumerate() {
        let mut decoder = json_decoder(schema, 1)?;
        let result = unpanicked(|| {
            let consumed = decoder.decode(record)?;
            if decoder.len() != 1 || decoder.has_partial_record() || !only_space(&record[consumed..]) {
                return Err(Error::Execution("not one JSON object".into()));
            }
            Ok(decoder.flush()?)
        });
        match result {
            Ok(Some(batch)) => good.push(batch),
            Ok(None) => {}
            Err(_) if options.ignore_parse_errors => skipped.push(i),
            Err(e) => {
                let (file, line) = locate(i);
                let message = match e {
                    Error::Arrow(e) => e.to_string(),
                    Error::Execution(m) => m,
                    other => other.to_string(),
                };
                return Err(Error::Data { file, line, message });
            }
        }
    }
    if good.is_empty() {
        return Ok((None, skipped));
    }
    Ok((Some(arrow::compute::concat_batches(schema, &good)?), skipped))
}

/// With `json.fail-on-missing-field`: a NULL from a field the record lacks
/// is an error. `kept[row]` is the record of each row.
fn check_missing(
    schema: &SchemaRef,
    batch: &RecordBatch,
    records: &[&[u8]],
    kept: &[usize],
    locate: Locate<'_>,
) -> Result<()> {
    for (c, field) in schema.fields().iter().enumerate() {
        if batch.column(c).null_count() == 0 {
            continue;
        }
        for (row, record) in kept.iter().enumerate().take(batch.num_rows()) {
            let value: serde_json::Value = serde_json::from_slice(records[*record]).unwrap_or_default();
            if batch.column(c).is_null(row) && value.get(field.name()).is_none() {
                let (file, line) = locate(*record);
                return Err(Error::Data {
                    file,
                    line,
                    message: format!("field '{}' is missing", field.name()),
                });
            }
        }
    }
    Ok(())
}

/// Writes batches as JSON lines, as Flink does: arrow-json's writer (nested
/// `ROW`, `ARRAY` and `MAP` values as JSON objects and arrays), with
/// Flink's text for times, dates, timestamps, bytes and decimals, doubles as
/// Java prints them, and `NaN`/`Infinity` as strings (as Jackson writes
/// them; bare, they would not be JSON).
pub fn write_json_lines(batch: &RecordBatch, out: &mut Vec<u8>) -> Result<()> {
    let mut writer = arrow::json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .with_encoder_factory(std::sync::Arc::new(FlinkJsonEncoders))
        .build::<_, arrow::json::writer::LineDelimited>(out);
    writer.write(batch)?;
    writer.finish()?;
    Ok(())
}

/// Writes a changelog batch as Debezium JSON lines, as Flink's
/// `debezium-json` format does: `+I` and `+U` rows as `{"before":null,
/// "after":{...},"op":"c"}`, `-U` and `-D` rows as `{"before":{...},
/// "after":null,"op":"d"}`.
pub fn write_debezium_json(batch: &RecordBatch, out: &mut Vec<u8>) -> Result<()> {
    let kinds = weir_common::changelog::row_kinds(batch)?;
    let mut rows = Vec::new();
    write_json_lines(&weir_common::changelog::data(batch), &mut rows)?;
    for (row, kind) in rows.split(|b| *b == b'\n').zip(kinds) {
        let (before, after, op): (&[u8], &[u8], &str) = if kind.is_retraction() {
            (row, b"null", "d")
        } else {
            (b"null", row, "c")
        };
        out.extend_from_slice(b"{\"before\":");
        out.extend_from_slice(before);
        out.extend_from_slice(b",\"after\":");
        out.extend_from_slice(after);
        out.extend_from_slice(format!(",\"op\":\"{op}\"}}\n").as_bytes());
    }
    Ok(())
}

/// The encoders where Flink's JSON differs from arrow-json's defaults.
#[derive(Debug)]
struct FlinkJsonEncoders;

/// A column's values as weir's text formatting gives them: bare (numbers)
/// or quoted (JSON strings).
struct TextEncoder {
    values: Vec<Option<String>>,
    quoted: bool,
}

impl Encoder for TextEncoder {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let text = self.values[idx].as_deref().unwrap_or_default();
        let number = text
            .bytes()
            .next()
            .is_some_and(|b| b == b'-' || b.is_ascii_digit())
            && text.bytes().last().is_some_and(|b| b.is_ascii_digit());
        if self.quoted || !number {
            out.extend_from_slice(
                serde_json::to_string(text)
                    .expect("a string serializes")
                    .as_bytes(),
            );
        } else {
            out.extend_from_slice(text.as_bytes());
        }
    }
}

impl EncoderFactory for FlinkJsonEncoders {
    fn make_default_encoder<'a>(
        &self,
        _field: &'a FieldRef,
        array: &'a dyn Array,
        _options: &'a EncoderOptions,
    ) -> std::result::Result<Option<NullableEncoder<'a>>, ArrowError> {
        let quoted = match array.data_type() {
            DataType::Float16 | DataType::Float32 | DataType::Float64 | DataType::Decimal128(_, _) => false,
            DataType::Timestamp(_, _)
            | DataType::Date32
            | DataType::Time32(_)
            | DataType::Time64(_)
            | DataType::Binary
            | DataType::LargeBinary => true,
            _ => return Ok(None),
        };
        let values = format_column(&arrow::array::make_array(array.to_data()), TextStyle::Format)
            .map_err(|e| ArrowError::JsonError(e.to_string()))?;
        let encoder = Box::new(TextEncoder { values, quoted }) as Box<dyn Encoder + 'a>;
        Ok(Some(NullableEncoder::new(encoder, array.nulls().cloned())))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::Int64Array;
    use arrow::datatypes::{Field, Schema};

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]))
    }

    fn options(ignore: bool) -> JsonOptions {
        JsonOptions {
            ignore_parse_errors: ignore,
            fail_on_missing_field: false,
        }
    }

    #[test]
    fn nested_values_are_json_and_nan_is_a_string() {
        use arrow::array::{Float64Array, Int64Builder, ListBuilder, StructArray};
        let mut list = ListBuilder::new(Int64Builder::new());
        list.values().append_value(1);
        list.values().append_value(2);
        list.append(true);
        let list = list.finish();
        let row = StructArray::from(vec![
            (
                Arc::new(Field::new("id", DataType::Int64, true)),
                Arc::new(Int64Array::from(vec![1000])) as arrow::array::ArrayRef,
            ),
            (
                Arc::new(Field::new("d", DataType::Float64, true)),
                Arc::new(Float64Array::from(vec![f64::NAN])) as arrow::array::ArrayRef,
            ),
        ]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("r", row.data_type().clone(), true),
            Field::new("l", list.data_type().clone(), true),
            Field::new("x", DataType::Float64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(row),
                Arc::new(list),
                Arc::new(Float64Array::from(vec![f64::INFINITY])),
            ],
        )
        .unwrap();
        let mut out = Vec::new();
        write_json_lines(&batch, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "{\"r\":{\"id\":1000,\"d\":\"NaN\"},\"l\":[1,2],\"x\":\"Infinity\"}\n"
        );
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["r"]["id"], 1000);
    }

    #[test]
    fn a_decimal_with_an_exponent_of_many_digits_is_a_bad_line_not_a_panic() {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "dec",
            DataType::Decimal128(10, 2),
            true,
        )]));
        let data = "{\"dec\":1.5}\n{\"dec\":0E2734666666666666666666666666666}\n";
        let mut reader = JsonBatchReader::new(data.as_bytes(), "f.json".into(), schema, options(false));
        let result = reader.next_batch(10);
        if cfg!(debug_assertions) {
            // Overflow is checked (as in tests): the line is reported.
            let err = result.unwrap_err().to_string();
            assert!(err.contains("f.json") && err.contains("line 2"), "{err}");
        } else {
            // Arrow's exponent wraps: no panic, whatever the value.
            assert!(result.is_ok());
        }
    }

    #[test]
    fn reads_lines_by_field_name_with_missing_and_extra_fields() {
        let data = "{\"s\":\"x\",\"a\":1,\"extra\":true}\n\n{\"a\":2}\n";
        let mut reader = JsonBatchReader::new(data.as_bytes(), "f.json".into(), schema(), options(false));
        let batch = reader.next_batch(10).unwrap().unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert!(batch.column(1).is_null(1));
    }

    #[test]
    fn a_bad_line_is_reported_with_its_number_or_skipped() {
        let data = "{\"a\":1}\n{\"a\":\"oops\"}\n{\"a\":3}\n";
        let mut reader = JsonBatchReader::new(data.as_bytes(), "f.json".into(), schema(), options(false));
        let err = reader.next_batch(10).unwrap_err().to_string();
        assert!(err.contains("f.json") && err.contains("line 2"), "{err}");
        let mut reader = JsonBatchReader::new(data.as_bytes(), "f.json".into(), schema(), options(true));
        let batch = reader.next_batch(10).unwrap().unwrap();
        let a = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(a.values(), &[1, 3]);
        assert_eq!(reader.skipped, 1);
    }
}
