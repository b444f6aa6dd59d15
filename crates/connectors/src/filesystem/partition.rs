//! Partitioned filesystem tables: the directory of each row (`dt=2020-01-01/hm=00%3A00`),
//! the partition values of a file read back, and a partition's time.
//!
//! As in Flink (and Hive), a partition column's value is stored only in the
//! directory name, escaped; NULL and the empty string are `__DEFAULT_PARTITION__`
//! (`partition.default-name`).

use std::collections::HashMap;
use std::path::Path;

use arrow::array::{ArrayRef, new_null_array};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use chrono::NaiveDateTime;

use crate::format::text::{TextStyle, format_column};
use crate::{Error, Result};
use weir_common::date_pattern::DatePattern;
use weir_plan::table::TableDef;
use weir_plan::window::TimeShift;

/// Flink's default for `partition.default-name`.
pub const DEFAULT_PARTITION_NAME: &str = "__DEFAULT_PARTITION__";

/// True for the characters Flink (and Hive) escape in partition directory names.
fn needs_escaping(c: char) -> bool {
    c < ' '
        || matches!(
            c,
            '"' | '#' | '%' | '\'' | '*' | '/' | ':' | '=' | '?' | '\\' | '\u{7f}' | '{' | '[' | ']' | '^'
        )
}

/// `00:00` becomes `00%3A00`.
pub fn escape_path_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if needs_escaping(c) {
            out.push_str(&format!("%{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// The inverse of [`escape_path_name`]; a `%` not followed by two hex digits stays.
pub fn unescape_path_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let code = rest
            .get(at + 1..at + 3)
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match code {
            Some(code) => {
                out.push(code as char);
                rest = &rest[at + 3..];
            }
            None => {
                out.push('%');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A table's partition columns and their directory layout.
#[derive(Debug, Clone)]
pub struct PartitionSpec {
    /// The `PARTITIONED BY` columns, in order.
    pub keys: Vec<String>,
    /// `partition.default-name`: the directory value of NULL and ''.
    pub default_name: String,
}

impl PartitionSpec {
    /// The spec of a partitioned table; `None` when it has no partition keys.
    pub fn from_table(table: &TableDef) -> Option<Self> {
        if table.partition_keys.is_empty() {
            return None;
        }
        Some(PartitionSpec {
            keys: table.partition_keys.clone(),
            default_name: table
                .option("partition.default-name")
                .unwrap_or(DEFAULT_PARTITION_NAME)
                .to_string(),
        })
    }

    /// The relative directory of one row's partition values.
    pub fn path(&self, values: &[Option<&str>]) -> String {
        let mut path = String::new();
        for (key, value) in self.keys.iter().zip(values) {
            if !path.is_empty() {
                path.push('/');
            }
            path.push_str(&escape_path_name(key));
            path.push('=');
            match value {
                Some(v) if !v.is_empty() => path.push_str(&escape_path_name(v)),
                _ => path.push_str(&self.default_name),
            }
        }
        path
    }

    /// The rows of `batch` by partition directory, in order of first
    /// appearance; columns `key_columns` hold the partition values, which
    /// become text as Flink prints them.
    pub fn group_rows(&self, batch: &RecordBatch, key_columns: &[usize]) -> Result<Vec<(String, Vec<u32>)>> {
        let texts = key_columns
            .iter()
            .map(|i| format_column(batch.column(*i), TextStyle::Print))
            .collect::<Result<Vec<_>>>()?;
        let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut current = 0;
        for row in 0..batch.num_rows() {
            // Rows of one partition usually come together: compare with the last row first.
            if row == 0 || !same_row(&texts, row - 1, row) {
                let values: Vec<Option<&str>> = texts.iter().map(|c| c[row].as_deref()).collect();
                let path = self.path(&values);
                current = *index.entry(path.clone()).or_insert_with(|| {
                    groups.push((path, Vec::new()));
                    groups.len() - 1
                });
            }
            groups[current].1.push(row as u32);
        }
        Ok(groups)
    }

    /// The partition values of `file`, a data file under `root` in its
    /// partition directories; `None` stands for the default partition name.
    pub fn values_of(&self, root: &Path, file: &Path) -> Result<Vec<Option<String>>> {
        let relative = file.strip_prefix(root).unwrap_or(file);
        let directories: Vec<String> = relative
            .parent()
            .map(|p| {
                p.components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let misplaced = || Error::Data {
            file: file.display().to_string(),
            line: None,
            message: format!(
                "a file of a table partitioned by ({}) must lie in directories {}",
                self.keys.join(", "),
                self.keys
                    .iter()
                    .map(|k| format!("{}=<value>", escape_path_name(k)))
                    .collect::<Vec<_>>()
                    .join("/")
            ),
        };
        if directories.len() != self.keys.len() {
            return Err(misplaced());
        }
        self.keys
            .iter()
            .zip(&directories)
            .map(|(key, directory)| {
                let (name, value) = directory.split_once('=').ok_or_else(misplaced)?;
                if unescape_path_name(name) != *key {
                    return Err(misplaced());
                }
                Ok((value != self.default_name).then(|| unescape_path_name(value)))
            })
            .collect()
    }
}

fn same_row(columns: &[Vec<Option<String>>], a: usize, b: usize) -> bool {
    columns.iter().all(|c| c[a] == c[b])
}

/// A column holding one partition value on every row, typed as the table
/// declares the column.
pub fn partition_column(
    value: Option<&str>,
    data_type: &DataType,
    rows: usize,
    file: &Path,
) -> Result<ArrayRef> {
    let Some(value) = value else {
        return Ok(new_null_array(data_type, rows));
    };
    let text: ArrayRef = std::sync::Arc::new(arrow::array::StringArray::from(vec![value]));
    let options = arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    let one = arrow::compute::cast_with_options(&text, data_type, &options).map_err(|e| Error::Data {
        file: file.display().to_string(),
        line: None,
        message: format!("partition value '{value}' is not a {data_type}: {e}"),
    })?;
    let indices = arrow::array::UInt32Array::from(vec![0u32; rows]);
    Ok(arrow::compute::take(&one, &indices, None)?)
}

/// Reads a partition's time from its values (`partition.time-extractor.*`), for
/// the `partition-time` commit trigger.
#[derive(Debug, Clone)]
pub struct PartitionTimeExtractor {
    /// `partition.time-extractor.timestamp-pattern`, e.g. `$dt $hm:00`; without
    /// it the first partition value is the time.
    pattern: Option<String>,
    /// `partition.time-extractor.timestamp-formatter` (default `yyyy-MM-dd HH:mm:ss`).
    formatter: DatePattern,
    formatter_text: String,
    /// `sink.partition-commit.watermark-time-zone` (default UTC): the zone the
    /// partition time is in, to compare it with watermarks.
    zone: TimeShift,
}

impl PartitionTimeExtractor {
    /// The extractor configured on `table`.
    pub fn from_table(table: &TableDef) -> Result<Self> {
        if let Some(kind) = table.option("partition.time-extractor.kind")
            && !kind.eq_ignore_ascii_case("default")
        {
            return Err(Error::sql(format!(
                "table '{}': 'partition.time-extractor.kind' '{kind}' is not supported; only 'default'",
                table.name
            )));
        }
        let formatter_text = table
            .option("partition.time-extractor.timestamp-formatter")
            .unwrap_or("yyyy-MM-dd HH:mm:ss")
            .to_string();
        let zone_name = table
            .option("sink.partition-commit.watermark-time-zone")
            .unwrap_or("UTC");
        let zone = TimeShift::for_zone(zone_name).map_err(|_| {
            Error::sql(format!(
                "table '{}': unknown 'sink.partition-commit.watermark-time-zone' '{zone_name}'",
                table.name
            ))
        })?;
        Ok(PartitionTimeExtractor {
            pattern: table
                .option("partition.time-extractor.timestamp-pattern")
                .map(str::to_string),
            formatter: DatePattern::new(&formatter_text),
            formatter_text,
            zone,
        })
    }

    /// The partition's time as epoch milliseconds (its local time read in the
    /// watermark time zone).
    pub fn extract(&self, keys: &[String], values: &[Option<String>]) -> Result<i64> {
        let text = match &self.pattern {
            None => values.first().cloned().flatten().unwrap_or_default(),
            Some(pattern) => substitute(pattern, keys, values),
        };
        let local = self
            .formatter
            .parse(&text)
            .or_else(|| default_timestamp(&text))
            .ok_or_else(|| {
                Error::Execution(format!(
                    "cannot read the partition time '{text}' with the pattern '{}' \
                     ('partition.time-extractor.timestamp-formatter')",
                    self.formatter_text
                ))
            })?;
        Ok(self.zone.to_utc(local.and_utc().timestamp_millis()))
    }
}

/// `$dt $hm:00` with each `$key` replaced by its value; longer keys first, so
/// `$hour` is not read as `$h` followed by `our`.
fn substitute(pattern: &str, keys: &[String], values: &[Option<String>]) -> String {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|i| std::cmp::Reverse(keys[*i].len()));
    let mut text = pattern.to_string();
    for i in order {
        let value = values.get(i).cloned().flatten().unwrap_or_default();
        text = text.replace(&format!("${}", keys[i]), &value);
    }
    text
}

/// Flink's lenient fallback: `yyyy-MM-dd`, `yyyy-MM-dd HH:mm:ss[.SSS]`.
fn default_timestamp(text: &str) -> Option<NaiveDateTime> {
    ["yyyy-MM-dd HH:mm:ss.SSS", "yyyy-MM-dd HH:mm:ss", "yyyy-MM-dd"]
        .iter()
        .find_map(|p| DatePattern::new(p).parse(text))
}

/// The schema of the data files of a partitioned table: its physical columns
/// without the partition keys.
pub fn file_schema(physical: &SchemaRef, keys: &[String]) -> SchemaRef {
    std::sync::Arc::new(arrow::datatypes::Schema::new(
        physical
            .fields()
            .iter()
            .filter(|f| !keys.contains(f.name()))
            .cloned()
            .collect::<Vec<_>>(),
    ))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn spec() -> PartitionSpec {
        PartitionSpec {
            keys: vec!["dt".into(), "hm".into()],
            default_name: DEFAULT_PARTITION_NAME.into(),
        }
    }

    #[test]
    fn partition_directories_escape_as_flink_does() {
        assert_eq!(escape_path_name("00:00"), "00%3A00");
        assert_eq!(escape_path_name("a/b=c d"), "a%2Fb%3Dc d");
        assert_eq!(escape_path_name("tab\there"), "tab%09here");
        assert_eq!(unescape_path_name("00%3A00"), "00:00");
        assert_eq!(unescape_path_name("100%"), "100%");
        assert_eq!(
            spec().path(&[Some("2015-07-15"), Some("00:01")]),
            "dt=2015-07-15/hm=00%3A01"
        );
        assert_eq!(
            spec().path(&[None, Some("")]),
            "dt=__DEFAULT_PARTITION__/hm=__DEFAULT_PARTITION__"
        );
    }

    #[test]
    fn partition_values_are_read_back_from_the_file_path() {
        let root = PathBuf::from("/data/out");
        let file = root.join("dt=2015-07-15/hm=00%3A01/part-0");
        assert_eq!(
            spec().values_of(&root, &file).unwrap(),
            [Some("2015-07-15".to_string()), Some("00:01".to_string())]
        );
        let default = root.join("dt=__DEFAULT_PARTITION__/hm=x/part-0");
        assert_eq!(spec().values_of(&root, &default).unwrap()[0], None);
    }

    #[test]
    fn a_file_outside_the_partition_directories_is_an_error_naming_it() {
        let root = PathBuf::from("/data/out");
        for bad in [
            "part-0",
            "dt=2015-07-15/part-0",
            "hm=1/dt=2/part-0",
            "dt=1/x/part-0",
        ] {
            let error = spec().values_of(&root, &root.join(bad)).unwrap_err().to_string();
            assert!(error.contains(bad), "{error}");
            assert!(error.contains("dt=<value>/hm=<value>"), "{error}");
        }
    }

    #[test]
    fn partition_time_comes_from_the_pattern_and_formatter() {
        let extractor = PartitionTimeExtractor {
            pattern: Some("$dt $hm:00".into()),
            formatter: DatePattern::new("yyyy-MM-dd HH:mm:ss"),
            formatter_text: "yyyy-MM-dd HH:mm:ss".into(),
            zone: TimeShift::Utc,
        };
        let keys = spec().keys;
        let time = extractor
            .extract(&keys, &[Some("2015-07-15".into()), Some("00:01".into())])
            .unwrap();
        assert_eq!(time, 1_436_918_460_000);
        let error = extractor
            .extract(&keys, &[Some("yesterday".into()), Some("00:01".into())])
            .unwrap_err();
        assert!(error.to_string().contains("'yesterday 00:01:00'"), "{error}");
        // Without a pattern, the first value; a date alone is midnight.
        let by_day = PartitionTimeExtractor {
            pattern: None,
            zone: TimeShift::Fixed(3_600_000),
            ..extractor
        };
        assert_eq!(
            by_day.extract(&keys, &[Some("2015-07-15".into()), None]).unwrap(),
            1_436_918_400_000 - 3_600_000
        );
    }
}
