//! Keyed state snapshots as Parquet files: write one, read one back by key group.
//!
//! A file holds the rows an operator returned from `snapshot`: a first column
//! `_key_group` (rows sorted by it), then the operator's own columns (window
//! bounds, grouping keys, accumulator states). Small row groups let a reader
//! skip the key groups it does not own by their statistics.

use std::fs::File;
use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, BooleanArray, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, filter_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt32Type};
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use crate::checkpoint::metadata::StateFile;
use crate::{Error, Result};
use weir_common::key_group::{hash_rows, key_group};

/// The key-group column of every state file.
pub const KEY_GROUP_COLUMN: &str = "_key_group";

/// The key group of each of `rows` rows with these key columns (all in key
/// group 0 when there are no keys).
pub fn key_groups(keys: &[ArrayRef], rows: usize, max_parallelism: usize) -> Result<UInt32Array> {
    if keys.is_empty() {
        return Ok(UInt32Array::from(vec![0; rows]));
    }
    let mut hashes = Vec::new();
    hash_rows(keys, &mut hashes)?;
    Ok(hashes
        .iter()
        .map(|h| key_group(*h, max_parallelism) as u32)
        .collect())
}

/// The schema of keyed window state rows: `_key_group`, the operator's own
/// leading columns, the keys, then each aggregate's state fields (named
/// `<aggregate index>:<field>`, so that names never clash).
pub fn window_state_schema(
    leading: &[&str],
    key_schema: &SchemaRef,
    aggregates: &[Arc<AggregateFunctionExpr>],
) -> Result<SchemaRef> {
    let mut fields = vec![Field::new(KEY_GROUP_COLUMN, DataType::UInt32, false)];
    fields.extend(
        leading
            .iter()
            .map(|name| Field::new(*name, DataType::Int64, false)),
    );
    fields.extend(
        key_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true)),
    );
    for (i, aggregate) in aggregates.iter().enumerate() {
        for field in aggregate.state_fields()? {
            fields.push(Field::new(
                format!("{i}:{}", field.name()),
                field.data_type().clone(),
                true,
            ));
        }
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// The columns and types of a state schema, as text (an operator's state
/// signature): `name TYPE, ...`.
pub fn schema_signature(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The key group of each of `keys`, row bytes of `converter` (as an
/// operator keeps its keys), hashed as the exchange hashed their columns.
pub fn key_groups_of_bytes(
    converter: &arrow::row::RowConverter,
    keys: &[&[u8]],
    max_parallelism: usize,
) -> Result<UInt32Array> {
    if keys.is_empty() {
        return Ok(UInt32Array::from(Vec::<u32>::new()));
    }
    let parser = converter.parser();
    let columns = converter.convert_rows(keys.iter().map(|k| parser.parse(k)))?;
    key_groups(&columns, keys.len(), max_parallelism)
}

/// State rows of `schema` from `columns` (each cast to its field's type),
/// sorted by their first column, the key group.
pub fn sorted_state_rows(schema: &SchemaRef, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
    sorted_by_key_group(state_rows(schema, columns)?)
}

/// `batches` of state rows (one schema, first column `_key_group`) as one
/// batch sorted by key group; none without batches.
pub fn concat_by_key_group(batches: Vec<RecordBatch>) -> Result<Option<RecordBatch>> {
    let all = match batches.len() {
        0 => return Ok(None),
        1 => batches.into_iter().next().expect("one"),
        _ => concat_batches(&batches[0].schema(), &batches)?,
    };
    Ok(Some(sorted_by_key_group(all)?))
}

/// `rows` (first column `_key_group`) sorted by key group: themselves when
/// they are (no copy; a delta of rows sorted already was copied twice, 50 MB
/// of a spilled GROUP BY's checkpoint under 256 MB), else a sorted copy.
pub fn sorted_by_key_group(rows: RecordBatch) -> Result<RecordBatch> {
    let groups = rows
        .column(0)
        .as_primitive_opt::<UInt32Type>()
        .ok_or_else(|| crate::Error::Internal("state rows without a UInt32 _key_group first".into()))?;
    if arrow::array::Array::null_count(groups) == 0 && groups.values().is_sorted() {
        return Ok(rows);
    }
    let counted = (arrow::array::Array::null_count(groups) == 0)
        .then(|| key_group_order(groups.values()))
        .flatten();
    let order = match counted {
        Some(order) => order,
        None => arrow::compute::sort_to_indices(rows.column(0), None, None)?,
    };
    Ok(arrow::compute::take_record_batch(&rows, &order)?)
}

/// The row order that sorts `groups` (key groups, below 2^20): a counting
/// sort, one pass to count and one to place, where a comparison sort took
/// most of a snapshot of a million groups. `None` for a key group out of
/// that range (or too few rows to bother).
fn key_group_order(groups: &[u32]) -> Option<UInt32Array> {
    const MAX_GROUPS: u32 = 1 << 20;
    let max = *groups.iter().max()?;
    if max >= MAX_GROUPS || groups.len() < 1024 || groups.len() > u32::MAX as usize {
        return None;
    }
    let mut starts = vec![0u32; max as usize + 2];
    for &g in groups {
        starts[g as usize + 1] += 1;
    }
    for g in 1..starts.len() {
        starts[g] += starts[g - 1];
    }
    let mut order = vec![0u32; groups.len()];
    for (row, &g) in groups.iter().enumerate() {
        let at = &mut starts[g as usize];
        order[*at as usize] = row as u32;
        *at += 1;
    }
    Some(UInt32Array::from(order))
}

/// State rows of `schema` from `columns` (each cast to its field's type), in
/// their order.
pub fn state_rows(schema: &SchemaRef, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
    let columns = columns
        .into_iter()
        .zip(schema.fields())
        .map(|(c, f)| Ok(arrow::compute::cast(&c, f.data_type())?))
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// Rows per Parquet row group.
const ROW_GROUP_ROWS: usize = 64 * 1024;

/// Writes `rows` to `path` (`relative` is how the checkpoint names it) and syncs it.
pub fn write_state_file(path: &Path, relative: &str, rows: &RecordBatch) -> Result<StateFile> {
    write_state_file_with(path, relative, rows, ROW_GROUP_ROWS, true)
}

/// Rows per Parquet row group of a spilled run: a reader holds one row
/// group of each run it merges.
pub const RUN_ROW_GROUP_ROWS: usize = 8 * 1024;

fn write_state_file_with(
    path: &Path,
    relative: &str,
    rows: &RecordBatch,
    row_group_rows: usize,
    sync: bool,
) -> Result<StateFile> {
    let mut writer = StateFileWriter::create(path, relative, rows.schema(), row_group_rows)?;
    writer.write(rows)?;
    writer.finish(sync)
}

/// Writes a state file batch by batch (rows sorted by key group across
/// batches): a spilled run merged range by range.
pub struct StateFileWriter {
    writer: ArrowWriter<File>,
    path: std::path::PathBuf,
    relative: String,
    rows: u64,
    key_groups: Option<(u32, u32)>,
}

impl StateFileWriter {
    /// A writer of a state file of `schema` at `path` (`relative`: how a
    /// checkpoint names it), `row_group_rows` rows per row group.
    pub fn create(path: &Path, relative: &str, schema: SchemaRef, row_group_rows: usize) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let file = File::create(path).map_err(|e| Error::io(path, e))?;
        // Written every checkpoint, read only on restore: cheap encoding first
        // (no compression, no dictionaries), statistics only where a reader uses
        // them (the key group, to skip row groups it does not own).
        let properties = WriterProperties::builder()
            .set_compression(Compression::UNCOMPRESSED)
            .set_dictionary_enabled(false)
            .set_statistics_enabled(EnabledStatistics::None)
            .set_column_statistics_enabled(ColumnPath::from(KEY_GROUP_COLUMN), EnabledStatistics::Chunk)
            .set_max_row_group_row_count(Some(row_group_rows))
            .build();
        Ok(StateFileWriter {
            writer: ArrowWriter::try_new(file, schema, Some(properties))?,
            path: path.to_path_buf(),
            relative: relative.to_string(),
            rows: 0,
            key_groups: None,
        })
    }

    /// Appends `rows` (their key groups at or after those written so far).
    pub fn write(&mut self, rows: &RecordBatch) -> Result<()> {
        let groups = rows
            .column_by_name(KEY_GROUP_COLUMN)
            .ok_or_else(|| Error::Internal(format!("state rows lack {KEY_GROUP_COLUMN}")))?
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(|| Error::Internal(format!("{KEY_GROUP_COLUMN} must be UInt32")))?;
        if let (Some(first), Some(last)) = (groups.values().first(), groups.values().last()) {
            let (start, _) = self.key_groups.unwrap_or((*first, *last));
            self.key_groups = Some((start, *last));
        }
        self.rows += rows.num_rows() as u64;
        self.writer.write(rows)?;
        Ok(())
    }

    /// Closes the file (synced when `sync`) and describes it.
    pub fn finish(self, sync: bool) -> Result<StateFile> {
        let path = self.path;
        let file = self.writer.into_inner()?;
        if sync {
            file.sync_all().map_err(|e| Error::io(&path, e))?;
        }
        let bytes = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        let (first, last) = self.key_groups.unwrap_or((0, 0));
        Ok(StateFile {
            path: self.relative,
            rows: self.rows,
            bytes,
            key_groups: (first as usize, last as usize),
        })
    }
}

/// The row groups of a state file that may hold key groups `range`, by the
/// `_key_group` statistics (a row group without them is kept).
fn row_groups_overlapping(
    metadata: &parquet::file::metadata::ParquetMetaData,
    range: &RangeInclusive<usize>,
) -> Vec<usize> {
    let column = metadata
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .position(|c| c.name() == KEY_GROUP_COLUMN);
    (0..metadata.num_row_groups())
        .filter(|i| {
            let statistics = column.and_then(|c| metadata.row_group(*i).column(c).statistics());
            match statistics {
                Some(parquet::file::statistics::Statistics::Int32(s)) => {
                    match (s.min_opt(), s.max_opt()) {
                        // UInt32 is stored as INT32: compare as unsigned.
                        (Some(min), Some(max)) => {
                            let (min, max) = (*min as u32 as usize, *max as u32 as usize);
                            min <= *range.end() && *range.start() <= max
                        }
                        _ => true,
                    }
                }
                _ => true,
            }
        })
        .collect()
}

/// Writes `batches` (of one schema) to a Parquet file at `path` and syncs
/// it: channel state. Returns (rows, bytes).
pub fn write_batches(path: &Path, batches: &[RecordBatch]) -> Result<(u64, u64)> {
    let Some(first) = batches.first() else {
        return Err(Error::Internal(format!("no batches for {}", path.display())));
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let file = File::create(path).map_err(|e| Error::io(path, e))?;
    let properties = WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .build();
    let mut writer = ArrowWriter::try_new(file, first.schema(), Some(properties))?;
    let mut rows = 0;
    for batch in batches {
        writer.write(batch)?;
        rows += batch.num_rows() as u64;
    }
    let file = writer.into_inner()?;
    file.sync_all().map_err(|e| Error::io(path, e))?;
    let bytes = file.metadata().map_err(|e| Error::io(path, e))?.len();
    Ok((rows, bytes))
}

/// Runs `read` on a Parquet file, turning a panic of the reader on a
/// damaged file into an error naming the file (arrow-ipc 59 panics on some
/// damaged embedded schemas, found by fuzzing the restore path).
fn guarded<T>(path: &Path, what: &str, read: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(Error::State(format!(
            "cannot read checkpoint {what} {}: the file is damaged ({message})",
            path.display()
        )))
    })
}

/// Reads every batch of a channel-state file; errors name the file.
pub fn read_batches(path: &Path) -> Result<Vec<RecordBatch>> {
    crate::checkpoint::remote::fetch(path)?;
    guarded(path, "channel state", || read_batches_unguarded(path))
}

fn read_batches_unguarded(path: &Path) -> Result<Vec<RecordBatch>> {
    let corrupt = |e: &dyn std::fmt::Display| {
        Error::State(format!(
            "cannot read checkpoint channel state {}: {e}",
            path.display()
        ))
    };
    let file = File::open(path).map_err(|e| corrupt(&e))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| corrupt(&e))?
        .build()
        .map_err(|e| corrupt(&e))?;
    reader.map(|b| b.map_err(|e| corrupt(&e))).collect()
}

/// Reads the rows of key groups `range` from a state file, only from the row
/// groups whose statistics overlap it; errors name the file.
pub fn read_state_file(path: &Path, range: &RangeInclusive<usize>) -> Result<Option<RecordBatch>> {
    crate::checkpoint::remote::fetch(path)?;
    guarded(path, "state file", || read_state_file_unguarded(path, range))
}

fn read_state_file_unguarded(path: &Path, range: &RangeInclusive<usize>) -> Result<Option<RecordBatch>> {
    let corrupt = |e: &dyn std::fmt::Display| {
        Error::State(format!(
            "cannot read checkpoint state file {}: {e}",
            path.display()
        ))
    };
    let file = File::open(path).map_err(|e| corrupt(&e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| corrupt(&e))?;
    let schema = builder.schema().clone();
    let groups = row_groups_overlapping(builder.metadata(), range);
    if groups.is_empty() {
        return Ok(None);
    }
    let reader = builder.with_row_groups(groups).build().map_err(|e| corrupt(&e))?;
    let mut kept = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| corrupt(&e))?;
        let groups = batch
            .column_by_name(KEY_GROUP_COLUMN)
            .and_then(|c| c.as_primitive_opt::<UInt32Type>())
            .ok_or_else(|| corrupt(&format!("no UInt32 column {KEY_GROUP_COLUMN}")))?;
        let mask: BooleanArray = groups
            .values()
            .iter()
            .map(|g| Some(range.contains(&(*g as usize))))
            .collect();
        let batch = filter_record_batch(&batch, &mask)?;
        if batch.num_rows() > 0 {
            kept.push(batch);
        }
    }
    if kept.is_empty() {
        return Ok(None);
    }
    Ok(Some(concat_batches(&schema, &kept)?))
}

#[cfg(test)]
mod tests {
    use arrow::array::Int64Array;

    use super::*;

    fn rows_of_groups(groups: Vec<u32>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new(KEY_GROUP_COLUMN, DataType::UInt32, false),
            Field::new("count", DataType::Int64, true),
        ]));
        let counts = Int64Array::from_iter_values((0..groups.len() as i64).map(|i| i * 10));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(UInt32Array::from(groups)), Arc::new(counts)],
        )
        .unwrap()
    }

    #[test]
    fn rows_sorted_by_key_group_already_are_kept_without_a_copy_and_others_are_sorted() {
        let sorted = rows_of_groups(vec![1, 1, 4, 9]);
        let kept = sorted_by_key_group(sorted.clone()).unwrap();
        assert!(kept.column(1).to_data().ptr_eq(&sorted.column(1).to_data()));
        let unsorted = rows_of_groups(vec![4, 1, 9, 1]);
        let made = sorted_by_key_group(unsorted).unwrap();
        let groups: Vec<u32> = made.column(0).as_primitive::<UInt32Type>().values().to_vec();
        assert_eq!(groups, [1, 1, 4, 9]);
        let counts: Vec<i64> = made
            .column(1)
            .as_primitive::<arrow::datatypes::Int64Type>()
            .values()
            .to_vec();
        assert_eq!(counts[2..], [0, 20], "each row moved whole");
    }

    #[test]
    fn many_rows_are_sorted_by_key_group_in_one_counting_pass_each_row_whole() {
        let groups: Vec<u32> = (0..5000u32).map(|i| (i * 7919) % 300).collect();
        let made = sorted_by_key_group(rows_of_groups(groups.clone())).unwrap();
        let sorted: Vec<u32> = made.column(0).as_primitive::<UInt32Type>().values().to_vec();
        let mut expected = groups.clone();
        expected.sort();
        assert_eq!(sorted, expected);
        let counts = made.column(1).as_primitive::<arrow::datatypes::Int64Type>();
        for (row, group) in sorted.iter().enumerate() {
            let original = counts.value(row) / 10;
            assert_eq!(groups[original as usize], *group, "row {row} moved whole");
        }
        assert!(
            key_group_order(&[1 << 20; 2000]).is_none(),
            "a key group out of range"
        );
    }

    fn rows() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new(KEY_GROUP_COLUMN, DataType::UInt32, false),
            Field::new("count", DataType::Int64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(UInt32Array::from(vec![1, 5, 5, 9])),
                Arc::new(Int64Array::from(vec![10, 50, 51, 90])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn a_state_file_reads_back_only_the_asked_key_groups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("op/0.parquet");
        let file = write_state_file(&path, "op/0.parquet", &rows()).unwrap();
        assert_eq!((file.rows, file.key_groups), (4, (1, 9)));
        assert_eq!(file.bytes, std::fs::metadata(&path).unwrap().len());
        let back = read_state_file(&path, &(2..=5)).unwrap().unwrap();
        let counts = back.column(1).as_primitive::<arrow::datatypes::Int64Type>();
        assert_eq!(counts.values().to_vec(), vec![50, 51]);
        assert!(read_state_file(&path, &(10..=20)).unwrap().is_none());
    }

    #[test]
    fn only_the_row_groups_holding_the_asked_key_groups_are_read() {
        // Key groups 0..100, two rows each, 20 rows per row group: ten row
        // groups of ten key groups each.
        let groups: Vec<u32> = (0..100).flat_map(|g| [g, g]).collect();
        let schema = Arc::new(Schema::new(vec![
            Field::new(KEY_GROUP_COLUMN, DataType::UInt32, false),
            Field::new("count", DataType::Int64, true),
        ]));
        let n = groups.len() as i64;
        let rows = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(UInt32Array::from(groups)),
                Arc::new(Int64Array::from_iter_values(0..n)),
            ],
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.parquet");
        write_state_file_with(&path, "0.parquet", &rows, 20, true).unwrap();
        let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap()).unwrap();
        assert_eq!(builder.metadata().num_row_groups(), 10);
        assert_eq!(
            row_groups_overlapping(builder.metadata(), &(25..=41)),
            vec![2, 3, 4]
        );
        let back = read_state_file(&path, &(25..=41)).unwrap().unwrap();
        assert_eq!(back.num_rows(), 2 * 17);
    }

    #[test]
    fn a_state_file_on_which_the_parquet_reader_panics_is_an_error_naming_it() {
        // Found by the state_file fuzz target: a damaged embedded Arrow schema.
        let crash = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fuzz/corpus/state_file/crash-arrow-schema-type-none.parquet"
        );
        let err = read_state_file(Path::new(crash), &(0..=127))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("crash-arrow-schema-type-none.parquet") && err.contains("damaged"),
            "{err}"
        );
        assert!(read_batches(Path::new(crash)).is_err());
    }

    #[test]
    fn a_corrupt_state_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.parquet");
        std::fs::write(&path, b"not parquet").unwrap();
        let err = read_state_file(&path, &(0..=127)).unwrap_err().to_string();
        assert!(err.contains("0.parquet"), "{err}");
    }
}
