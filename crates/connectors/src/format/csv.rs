//! Flink's `csv` format: reading records into Arrow arrays and writing rows.
//!
//! Reading: no header; fields by position; a field equal to `csv.null-literal`
//! is NULL; every value is parsed with Arrow's cast from text, so a value that
//! does not parse is found per row and reported with its file and line (or
//! skipped and counted with `csv.ignore-parse-errors`).
//!
//! Writing follows Flink (through Jackson): a text value is quoted when it
//! holds a character below `max(delimiter, quote, '\n') + 1` (so timestamps,
//! which contain a space, are quoted), numbers never are, NULL is empty.

use std::io::Read;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int32Array, Int64Array, StringArray, StringBuilder,
    StringViewArray,
};
use arrow::compute::{CastOptions, cast_with_options, filter_record_batch};
use arrow::datatypes::{DataType, Int32Type, Int64Type, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use arrow::util::display::FormatOptions;

use crate::format::text::{TextStyle, format_column};
use crate::format::unpanicked;
use crate::{Error, Result};
use weir_common::types::flink_type_name;
use weir_plan::table::TableDef;

/// The `csv.*` options of a table.
#[derive(Debug, Clone)]
pub struct CsvOptions {
    /// `csv.field-delimiter` (default `,`).
    pub delimiter: u8,
    /// `csv.quote-character` (default `"`).
    pub quote: u8,
    /// `csv.allow-comments`: lines starting with `#` are skipped.
    pub allow_comments: bool,
    /// `csv.ignore-parse-errors`: skip bad rows instead of failing.
    pub ignore_parse_errors: bool,
    /// `csv.null-literal`: the text that means NULL.
    pub null_literal: Option<String>,
}

/// Keys of the csv format.
pub const CSV_KEYS: &[&str] = &[
    "csv.field-delimiter",
    "csv.quote-character",
    "csv.allow-comments",
    "csv.ignore-parse-errors",
    "csv.null-literal",
];

fn single_byte(table: &TableDef, key: &str, default: u8) -> Result<u8> {
    match table.option(key) {
        None => Ok(default),
        Some(v) => {
            let v = match v {
                "\\t" => "\t",
                other => other,
            };
            match v.as_bytes() {
                [b] => Ok(*b),
                _ => Err(Error::sql(format!(
                    "table '{}': option '{key}' must be a single character, got '{v}'",
                    table.name
                ))),
            }
        }
    }
}

impl CsvOptions {
    /// Reads the options of a table.
    pub fn from_table(table: &TableDef) -> Result<Self> {
        Ok(CsvOptions {
            delimiter: single_byte(table, "csv.field-delimiter", b',')?,
            quote: single_byte(table, "csv.quote-character", b'"')?,
            allow_comments: table.parse_bool_option("csv.allow-comments", false)?,
            ignore_parse_errors: table.parse_bool_option("csv.ignore-parse-errors", false)?,
            null_literal: table.option("csv.null-literal").map(str::to_string),
        })
    }
}

/// Reads CSV records of one file into batches of the projected columns.
pub struct CsvBatchReader<R: Read> {
    reader: csv::Reader<R>,
    file: String,
    /// Table schema of the physical columns (for the field count).
    field_count: usize,
    /// Projected physical column indices, and the output schema.
    projection: Vec<usize>,
    schema: SchemaRef,
    options: CsvOptions,
    record: csv::ByteRecord,
    /// Rows skipped because they did not parse.
    pub skipped: u64,
    done: bool,
    /// A malformed record found while reading ahead, reported once the rows
    /// before it are converted (so errors come in file order).
    pending: Option<Error>,
}

impl<R: Read> CsvBatchReader<R> {
    /// A reader of `input` (named `file` in errors).
    pub fn new(
        input: R,
        file: String,
        field_count: usize,
        projection: Vec<usize>,
        schema: SchemaRef,
        options: CsvOptions,
    ) -> Self {
        let mut builder = csv::ReaderBuilder::new();
        builder
            .has_headers(false)
            .flexible(true)
            .delimiter(options.delimiter)
            .quote(options.quote);
        if options.allow_comments {
            builder.comment(Some(b'#'));
        }
        CsvBatchReader {
            reader: builder.from_reader(input),
            file,
            field_count,
            projection,
            schema,
            options,
            record: csv::ByteRecord::new(),
            skipped: 0,
            done: false,
            pending: None,
        }
    }

    /// The next batch of up to `max_rows` rows, or `None` at the end of the file.
    pub fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>> {
        if let Some(e) = self.pending.take() {
            return Err(e);
        }
        while !self.done {
            let mut builders: Vec<StringBuilder> =
                self.projection.iter().map(|_| StringBuilder::new()).collect();
            let mut lines: Vec<u64> = Vec::new();
            while lines.len() < max_rows {
                let more = self
                    .reader
                    .read_byte_record(&mut self.record)
                    .map_err(|e| Error::Data {
                        file: self.file.clone(),
                        line: e.position().map(|p| p.line()),
                        message: e.to_string(),
                    })?;
                if !more {
                    self.done = true;
                    break;
                }
                let line = self.record.position().map_or(0, |p| p.line());
                if self.record.len() == 1 && self.record[0].is_empty() {
                    continue; // blank line
                }
                if self.record.len() != self.field_count {
                    if self.options.ignore_parse_errors {
                        self.skipped += 1;
                        continue;
                    }
                    self.pending = Some(Error::Data {
                        file: self.file.clone(),
                        line: Some(line),
                        message: format!(
                            "expected {} fields, found {}",
                            self.field_count,
                            self.record.len()
                        ),
                    });
                    self.done = true;
                    break;
                }
                for (builder, index) in builders.iter_mut().zip(&self.projection) {
                    let raw = &self.record[*index];
                    let text = std::str::from_utf8(raw).map_err(|_| Error::Data {
                        file: self.file.clone(),
                        line: Some(line),
                        message: format!("field {} is not valid UTF-8", index + 1),
                    })?;
                    if self.options.null_literal.as_deref() == Some(text) {
                        builder.append_null();
                    } else {
                        builder.append_value(text);
                    }
                }
                lines.push(line);
            }
            if lines.is_empty() {
                continue;
            }
            let texts: Vec<ArrayRef> = builders
                .iter_mut()
                .map(|b| Arc::new(b.finish()) as ArrayRef)
                .collect();
            let batch = self.convert(&texts, &lines)?;
            if batch.num_rows() > 0 {
                return Ok(Some(batch));
            }
        }
        match self.pending.take() {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    /// Parses text columns into the target types; bad rows fail or are skipped.
    fn convert(&mut self, texts: &[ArrayRef], lines: &[u64]) -> Result<RecordBatch> {
        let fields = convert_fields(texts, lines.len(), &self.schema)?;
        let Some(message) = fields
            .first_bad
            .as_ref()
            .map(|(row, column)| (*row, bad_value_message(texts, &self.schema, *row, *column)))
        else {
            return Ok(fields.batch);
        };
        if !self.options.ignore_parse_errors {
            return Err(Error::Data {
                file: self.file.clone(),
                line: Some(lines[message.0]),
                message: message.1,
            });
        }
        self.skipped += fields.bad.iter().filter(|b| **b).count() as u64;
        fields.good_rows()
    }
}

/// Text fields parsed into their columns' types.
pub struct ConvertedFields {
    /// Every row; a bad row's bad values are NULL.
    pub batch: RecordBatch,
    /// Which rows have a value that does not parse.
    pub bad: Vec<bool>,
    /// The first bad value: row and column.
    pub first_bad: Option<(usize, usize)>,
}

impl ConvertedFields {
    /// The rows without a bad value.
    pub fn good_rows(&self) -> Result<RecordBatch> {
        if self.first_bad.is_none() {
            return Ok(self.batch.clone());
        }
        let keep = BooleanArray::from(self.bad.iter().map(|b| !b).collect::<Vec<_>>());
        Ok(filter_record_batch(&self.batch, &keep)?)
    }
}

/// Parses text columns (one per field of `schema`, `rows` long) into the
/// fields' types, finding the values that do not parse.
pub fn convert_fields(texts: &[ArrayRef], rows: usize, schema: &SchemaRef) -> Result<ConvertedFields> {
    let mut bad = vec![false; rows];
    let mut first_bad: Option<(usize, usize)> = None;
    let mut columns = Vec::with_capacity(texts.len());
    for (c, text) in texts.iter().enumerate() {
        let target = schema.field(c).data_type();
        let parsed = parse_text_column(text, target)?;
        if parsed.null_count() > text.null_count() {
            for (row, bad) in bad.iter_mut().enumerate() {
                if parsed.is_null(row) && !text.is_null(row) {
                    *bad = true;
                    if first_bad.is_none_or(|(r, _)| row < r) {
                        first_bad = Some((row, c));
                    }
                }
            }
        }
        columns.push(parsed);
    }
    let batch = RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )?;
    Ok(ConvertedFields {
        batch,
        bad,
        first_bad,
    })
}

/// What is wrong with the value at `row`, `column`: it does not parse.
pub fn bad_value_message(texts: &[ArrayRef], schema: &SchemaRef, row: usize, column: usize) -> String {
    let text = texts[column]
        .as_any()
        .downcast_ref::<arrow::array::StringArray>()
        .map(|a| a.value(row));
    let field = schema.field(column);
    format!(
        "cannot parse '{}' as {} for column '{}'",
        text.unwrap_or_default(),
        flink_type_name(field.data_type()),
        field.name()
    )
}

/// Parses a text column into `target`; values that do not parse become NULL.
pub fn parse_text_column(text: &ArrayRef, target: &DataType) -> Result<ArrayRef> {
    let options = CastOptions {
        safe: true,
        format_options: FormatOptions::default(),
    };
    if target == &DataType::Utf8 {
        return Ok(text.clone());
    }
    if matches!(target, DataType::Float32 | DataType::Float64) {
        // Java writes infinities and NaN as words Arrow also reads; trim spaces.
        let trimmed: arrow::array::StringArray = text
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .expect("text column")
            .iter()
            .map(|v| v.map(str::trim))
            .collect();
        return Ok(cast_with_options(
            &(Arc::new(trimmed) as ArrayRef),
            target,
            &options,
        )?);
    }
    // A value Arrow's parser panics on (see `unpanicked`) is one that does
    // not parse: NULL, so the row is reported as bad.
    unpanicked(|| Ok(cast_with_options(text, target, &options)?)).or_else(|_| {
        let values = text
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .expect("text column");
        let parsed = values
            .iter()
            .map(|value| {
                let one: ArrayRef = Arc::new(arrow::array::StringArray::from(vec![value]));
                unpanicked(|| Ok(cast_with_options(&one, target, &options)?))
                    .unwrap_or_else(|_| arrow::array::new_null_array(target, 1))
            })
            .collect::<Vec<_>>();
        let parts: Vec<&dyn arrow::array::Array> = parsed.iter().map(|a| a.as_ref()).collect();
        Ok(arrow::compute::concat(&parts)?)
    })
}

/// Writes batches as CSV lines, as Flink does.
pub struct CsvRowWriter {
    options: CsvOptions,
    min_safe: u8,
}

fn is_text_type(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Timestamp(_, _)
            | DataType::Date32
            | DataType::Date64
            | DataType::Time32(_)
            | DataType::Time64(_)
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::List(_)
            | DataType::Struct(_)
            | DataType::Map(_, _)
    )
}

/// A column's cells as the writer reads them: the common types straight from
/// the array, without a string per cell; the others formatted up front.
enum Cells<'a> {
    Int64(&'a Int64Array),
    Int32(&'a Int32Array),
    Utf8(&'a StringArray),
    Utf8View(&'a StringViewArray),
    Formatted(Vec<Option<String>>),
}

impl<'a> Cells<'a> {
    fn of(column: &'a ArrayRef) -> Result<Self> {
        Ok(match column.data_type() {
            DataType::Int64 => Cells::Int64(column.as_primitive::<Int64Type>()),
            DataType::Int32 => Cells::Int32(column.as_primitive::<Int32Type>()),
            DataType::Utf8 => Cells::Utf8(column.as_string::<i32>()),
            DataType::Utf8View => Cells::Utf8View(column.as_string_view()),
            _ => Cells::Formatted(format_column(column, TextStyle::Format)?),
        })
    }
}

impl CsvRowWriter {
    /// A writer with these options.
    pub fn new(options: CsvOptions) -> Self {
        let min_safe = options.delimiter.max(options.quote).max(b'\n') + 1;
        CsvRowWriter { options, min_safe }
    }

    /// Appends the batch's rows to `out`, one line each.
    pub fn write(&self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<()> {
        let columns = batch
            .columns()
            .iter()
            .map(Cells::of)
            .collect::<Result<Vec<_>>>()?;
        let quoted: Vec<bool> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| is_text_type(f.data_type()))
            .collect();
        let mut digits = itoa::Buffer::new();
        for row in 0..batch.num_rows() {
            for (c, column) in columns.iter().enumerate() {
                if c > 0 {
                    out.push(self.options.delimiter);
                }
                let text = match column {
                    Cells::Int64(a) if a.is_valid(row) => Some(digits.format(a.value(row))),
                    Cells::Int32(a) if a.is_valid(row) => Some(digits.format(a.value(row))),
                    Cells::Utf8(a) if a.is_valid(row) => Some(a.value(row)),
                    Cells::Utf8View(a) if a.is_valid(row) => Some(a.value(row)),
                    Cells::Formatted(v) => v[row].as_deref(),
                    _ => None,
                };
                match text {
                    None => {
                        if let Some(literal) = &self.options.null_literal {
                            out.extend_from_slice(literal.as_bytes());
                        }
                    }
                    Some(value) if quoted[c] => self.write_text(value, out),
                    Some(value) => out.extend_from_slice(value.as_bytes()),
                }
            }
            out.push(b'\n');
        }
        Ok(())
    }

    fn write_text(&self, value: &str, out: &mut Vec<u8>) {
        // Without an early exit the scan vectorizes, which is faster for the
        // usual case of a value that needs no quotes.
        let (min_safe, quote) = (self.min_safe, self.options.quote);
        let needs_quotes = value
            .bytes()
            .fold(false, |needs, b| needs | (b < min_safe) | (b == quote));
        if !needs_quotes {
            out.extend_from_slice(value.as_bytes());
            return;
        }
        out.push(self.options.quote);
        for b in value.bytes() {
            if b == self.options.quote {
                out.push(b);
            }
            out.push(b);
        }
        out.push(self.options.quote);
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Float64Array, Int64Array, StringArray, TimestampMillisecondArray};
    use arrow::datatypes::{Field, Schema, TimeUnit};

    use super::*;

    fn options() -> CsvOptions {
        CsvOptions {
            delimiter: b',',
            quote: b'"',
            allow_comments: false,
            ignore_parse_errors: false,
            null_literal: None,
        }
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        ]))
    }

    #[test]
    fn reads_typed_columns_with_projection() {
        let data = "1,a,2020-01-01 00:00:01.500\n2,\"b,c\",2020-01-01 00:00:02\n";
        let projected = Arc::new(Schema::new(vec![
            Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            Field::new("id", DataType::Int64, true),
        ]));
        let mut reader = CsvBatchReader::new(
            data.as_bytes(),
            "f.csv".into(),
            3,
            vec![2, 0],
            projected,
            options(),
        );
        let batch = reader.next_batch(100).unwrap().unwrap();
        assert_eq!(batch.num_rows(), 2);
        let ts = batch
            .column(0)
            .as_any()
            .downcast_ref::<TimestampMillisecondArray>()
            .unwrap();
        assert_eq!(ts.value(0), 1_577_836_801_500);
        assert!(reader.next_batch(100).unwrap().is_none());
    }

    #[test]
    fn a_bad_value_names_file_line_and_column() {
        let data = "1,a,2020-01-01 00:00:00\nx,b,2020-01-01 00:00:00\n";
        let mut reader = CsvBatchReader::new(
            data.as_bytes(),
            "bids.csv".into(),
            3,
            vec![0, 1, 2],
            schema(),
            options(),
        );
        let err = reader.next_batch(100).unwrap_err().to_string();
        assert!(
            err.contains("bids.csv") && err.contains("line 2") && err.contains("'id'"),
            "{err}"
        );
    }

    #[test]
    fn a_decimal_with_an_exponent_of_many_digits_is_a_bad_value_not_a_panic() {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "dec",
            DataType::Decimal128(10, 2),
            true,
        )]));
        let data = "1.5\n0E2734666666666666666666666666666\n";
        let mut reader = CsvBatchReader::new(data.as_bytes(), "d.csv".into(), 1, vec![0], schema, options());
        let result = reader.next_batch(100);
        if cfg!(debug_assertions) {
            let err = result.unwrap_err().to_string();
            assert!(err.contains("d.csv") && err.contains("line 2"), "{err}");
        } else {
            assert!(result.is_ok());
        }
    }

    #[test]
    fn bad_rows_are_skipped_and_counted_when_asked() {
        let data = "1,a,2020-01-01 00:00:00\nx,b,2020-01-01 00:00:00\n3,c\n4,d,2020-01-01 00:00:04\n";
        let mut opts = options();
        opts.ignore_parse_errors = true;
        let mut reader = CsvBatchReader::new(data.as_bytes(), "f".into(), 3, vec![0, 1, 2], schema(), opts);
        let batch = reader.next_batch(100).unwrap().unwrap();
        let ids = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(ids.values(), &[1, 4]);
        assert_eq!(reader.skipped, 2);
    }

    #[test]
    fn writes_as_flink_does() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("d", DataType::Float64, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None])),
                Arc::new(StringArray::from(vec![Some("hello world"), Some("q\"x")])),
                Arc::new(Float64Array::from(vec![1e10, 0.5])),
                Arc::new(TimestampMillisecondArray::from(vec![0, 1500])),
            ],
        )
        .unwrap();
        let mut out = Vec::new();
        CsvRowWriter::new(options()).write(&batch, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "1,\"hello world\",1.0E10,\"1970-01-01 00:00:00\"\n,\"q\"\"x\",0.5,\"1970-01-01 00:00:01.5\"\n"
        );
    }
}
