//! The filesystem source: reads a subtask's files one after another.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use crate::filesystem::partition::{PartitionSpec, file_schema, partition_column};
use crate::filesystem::{FileFormat, list_files, table_path};
use crate::format::csv::CsvBatchReader;
use crate::format::json::JsonBatchReader;
use crate::{Error, Result};
use weir_common::config::SessionConfig;
use weir_plan::table::TableDef;
use weir_runtime::operator::TaskMetrics;
use weir_runtime::{SourceFactory, SourcePoll, SourceReader, TaskContext};

/// A column of the source's output.
#[derive(Debug, Clone)]
enum OutputColumn {
    /// Column `i` of what the file reader reads.
    File(usize),
    /// The value of partition key `i`, from the file's directories.
    Partition(usize),
}

/// How a partitioned table's rows are assembled: file columns plus partition
/// values from the path.
#[derive(Debug, Clone)]
struct PartitionLayout {
    spec: PartitionSpec,
    root: PathBuf,
    columns: Vec<OutputColumn>,
    /// The output schema (the projection of the table's physical columns).
    schema: SchemaRef,
}

/// How a file source finds its files (each one a split).
pub enum FileList {
    /// The data files under this path (a file or a directory).
    Under(PathBuf),
    /// Computed when first needed, by this function (the `checkpoint`
    /// connector: the state files of an operator).
    Deferred(Box<dyn Fn() -> Result<Vec<PathBuf>> + Send + Sync>),
}

impl std::fmt::Debug for FileList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileList::Under(path) => write!(f, "Under({})", path.display()),
            FileList::Deferred(_) => f.write_str("Deferred"),
        }
    }
}

/// The filesystem source of a table.
#[derive(Debug)]
pub struct FileSourceFactory {
    table: String,
    /// `filesystem` or `checkpoint`.
    kind: &'static str,
    path: PathBuf,
    /// Where the files come from; listed when the job is deployed (planning
    /// reads no file), once, so every subtask and attempt sees one list.
    files: FileList,
    format: FileFormat,
    /// Columns in each file.
    field_count: usize,
    /// The columns read from each file, by position in it.
    projection: Vec<usize>,
    /// The schema of the columns read from the files.
    schema: SchemaRef,
    layout: Option<PartitionLayout>,
    /// The files, once listed.
    listed: std::sync::Mutex<Option<Vec<PathBuf>>>,
}

impl FileSourceFactory {
    /// The files, listed on first use (at deploy time) and kept.
    fn files(&self) -> Result<Vec<PathBuf>> {
        let mut listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(files) = listed.as_ref() {
            return Ok(files.clone());
        }
        let files = match &self.files {
            FileList::Under(path) => list_files(path)?,
            FileList::Deferred(list) => list()?,
        };
        *listed = Some(files.clone());
        Ok(files)
    }

    /// The source of `table`, reading the physical columns `projection`; the
    /// files are listed when the job is deployed (so a missing path still
    /// fails the statement, but EXPLAIN reads nothing).
    pub fn try_new(
        table: &TableDef,
        projection: &[usize],
        schema: SchemaRef,
        _config: &SessionConfig,
    ) -> Result<Arc<dyn SourceFactory>> {
        let format = FileFormat::from_table(table)?;
        if matches!(format, FileFormat::DebeziumJson) {
            return Err(Error::sql(format!(
                "table '{}': reading format 'debezium-json' (a changelog source) is not supported yet; \
                 weir writes it",
                table.name
            )));
        }
        let path = table_path(table)?;
        let physical = table.physical_schema();
        let Some(spec) = PartitionSpec::from_table(table) else {
            return Ok(Arc::new(FileSourceFactory {
                table: table.name.clone(),
                kind: "filesystem",
                files: FileList::Under(path.clone()),
                listed: std::sync::Mutex::new(None),
                path,
                format,
                field_count: physical.fields().len(),
                projection: projection.to_vec(),
                schema,
                layout: None,
            }));
        };
        // The files hold the non-partition columns, in table order.
        let in_file = file_schema(&physical, &spec.keys);
        let mut file_projection = Vec::new();
        let mut columns = Vec::new();
        for &i in projection {
            let name = physical.field(i).name();
            match spec.keys.iter().position(|k| k == name) {
                Some(key) => columns.push(OutputColumn::Partition(key)),
                None => {
                    columns.push(OutputColumn::File(file_projection.len()));
                    file_projection.push(in_file.index_of(name)?);
                }
            }
        }
        let read_schema = Arc::new(in_file.project(&file_projection)?);
        Ok(Arc::new(FileSourceFactory {
            table: table.name.clone(),
            kind: "filesystem",
            path: path.clone(),
            files: FileList::Under(path.clone()),
            listed: std::sync::Mutex::new(None),
            format,
            field_count: in_file.fields().len(),
            projection: file_projection,
            schema: read_schema,
            layout: Some(PartitionLayout {
                spec,
                root: path,
                columns,
                schema,
            }),
        }))
    }
}

impl FileSourceFactory {
    /// A source reading the Parquet files `files` gives (by column name),
    /// described as `kind` at `path`: how the `checkpoint` connector reads
    /// state files.
    pub fn parquet_files(
        table: &TableDef,
        kind: &'static str,
        path: PathBuf,
        files: FileList,
        projection: &[usize],
        schema: SchemaRef,
    ) -> Arc<dyn SourceFactory> {
        Arc::new(FileSourceFactory {
            table: table.name.clone(),
            kind,
            path,
            files,
            listed: std::sync::Mutex::new(None),
            format: FileFormat::Parquet {
                compression: parquet::basic::Compression::UNCOMPRESSED,
            },
            field_count: table.physical_schema().fields().len(),
            projection: projection.to_vec(),
            schema,
            layout: None,
        })
    }
}

impl SourceFactory for FileSourceFactory {
    fn describe(&self) -> String {
        format!(
            "Source: {}[{}, {}, {}]",
            self.table,
            self.kind,
            self.format.name(),
            self.path.display()
        )
    }

    fn is_bounded(&self) -> bool {
        true
    }

    /// The files' sizes, where they are known when planning.
    fn estimated_bytes(&self) -> Option<u64> {
        let FileList::Under(path) = &self.files else {
            return None;
        };
        let files = list_files(path).ok()?;
        files
            .iter()
            .map(|f| std::fs::metadata(f).ok().map(|m| m.len()))
            .sum()
    }

    fn create_reader(&self, ctx: &TaskContext) -> Result<Box<dyn SourceReader>> {
        // Each file is a split; subtask `s` reads the files `i % parallelism == s`.
        let files = self.files()?;
        let count = files.len() as u64;
        let splits = files
            .iter()
            .enumerate()
            .filter(|(i, _)| i % ctx.parallelism == ctx.subtask)
            .map(|(i, path)| FileSplit {
                index: i as u64,
                count,
                path: path.clone(),
                rows: 0,
                done: false,
            })
            .collect();
        Ok(Box::new(FileReader {
            all_files: files.clone(),
            splits,
            cursor: 0,
            current: None,
            layout: self.layout.clone(),
            partition_values: Vec::new(),
            format: self.format.clone(),
            field_count: self.field_count,
            projection: self.projection.clone(),
            schema: self.schema.clone(),
            batch_size: ctx.batch_size,
            metrics: ctx.metrics.clone(),
            skip_rows: 0,
        }))
    }

    fn supports_checkpoints(&self) -> bool {
        true
    }
}

enum OpenFile {
    Csv(Box<CsvBatchReader<BufReader<File>>>),
    Json(Box<JsonBatchReader<BufReader<File>>>),
    Parquet {
        reader: ParquetRecordBatchReader,
        /// For each output column, its index in the reader's batches.
        order: Vec<usize>,
        file: String,
    },
}

/// One file of the source: its position is the rows read from it.
#[derive(Debug, Clone)]
struct FileSplit {
    /// The file's index in the source's sorted file list.
    index: u64,
    /// The number of files when the job was created.
    count: u64,
    path: PathBuf,
    /// Rows read from the file (emitted, or skipped after a restore).
    rows: u64,
    /// Read to its end.
    done: bool,
}

struct FileReader {
    /// The source's files as listed now, to check a restored split against.
    all_files: Vec<PathBuf>,
    /// The files this subtask reads, in order: with their rows read, the
    /// position a checkpoint saves.
    splits: Vec<FileSplit>,
    /// The split being read: every one before it is done.
    cursor: usize,
    current: Option<OpenFile>,
    layout: Option<PartitionLayout>,
    /// The partition values of the open file.
    partition_values: Vec<Option<String>>,
    format: FileFormat,
    field_count: usize,
    projection: Vec<usize>,
    schema: SchemaRef,
    batch_size: usize,
    metrics: Arc<TaskMetrics>,
    /// Rows of the open file still to skip after a restore.
    skip_rows: u64,
}

impl FileReader {
    fn open(&self, path: &PathBuf) -> Result<OpenFile> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let name = path.display().to_string();
        Ok(match &self.format {
            FileFormat::Csv(options) => OpenFile::Csv(Box::new(CsvBatchReader::new(
                BufReader::with_capacity(1 << 20, file),
                name,
                self.field_count,
                self.projection.clone(),
                self.schema.clone(),
                options.clone(),
            ))),
            FileFormat::Json(options) => OpenFile::Json(Box::new(JsonBatchReader::new(
                BufReader::with_capacity(1 << 20, file),
                name,
                self.schema.clone(),
                options.clone(),
            ))),
            FileFormat::DebeziumJson => {
                return Err(Error::Internal(
                    "a debezium-json source was planned (it is refused when planned)".into(),
                ));
            }
            FileFormat::Parquet { .. } => {
                let data_error = |message: String| Error::Data {
                    file: name.clone(),
                    line: None,
                    message,
                };
                let builder = ParquetRecordBatchReaderBuilder::try_new(file)
                    .map_err(|e| data_error(format!("not a readable Parquet file: {e}")))?;
                let file_schema = builder.schema().clone();
                let mut roots = Vec::new();
                for field in self.schema.fields() {
                    let index = file_schema
                        .index_of(field.name())
                        .map_err(|_| data_error(format!("the file has no column '{}'", field.name())))?;
                    roots.push(index);
                }
                let mut sorted = roots.clone();
                sorted.sort_unstable();
                sorted.dedup();
                let order = roots
                    .iter()
                    .map(|r| sorted.iter().position(|s| s == r).expect("present"))
                    .collect();
                let mask = ProjectionMask::roots(builder.parquet_schema(), sorted);
                let reader = builder
                    .with_projection(mask)
                    .with_batch_size(self.batch_size)
                    .build()
                    .map_err(|e| data_error(e.to_string()))?;
                OpenFile::Parquet {
                    reader,
                    order,
                    file: name,
                }
            }
        })
    }

    fn conform(&self, batch: RecordBatch, order: &[usize], file: &str) -> Result<RecordBatch> {
        let columns = order
            .iter()
            .zip(self.schema.fields())
            .map(|(i, field)| {
                let column = batch.column(*i);
                if column.data_type() == field.data_type() {
                    Ok(column.clone())
                } else {
                    arrow::compute::cast(column, field.data_type()).map_err(|e| Error::Data {
                        file: file.to_string(),
                        line: None,
                        message: format!(
                            "column '{}' cannot be read as {}: {e}",
                            field.name(),
                            field.data_type()
                        ),
                    })
                }
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        Ok(RecordBatch::try_new_with_options(
            Arc::new(Schema::new(self.schema.fields().clone())),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
        )?)
    }
}

impl FileReader {
    /// Adds the open file's partition values to `batch` (partitioned tables).
    fn with_partition_values(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let Some(layout) = &self.layout else {
            return Ok(batch);
        };
        let rows = batch.num_rows();
        let columns = layout
            .columns
            .iter()
            .zip(layout.schema.fields())
            .map(|(column, field)| match column {
                OutputColumn::File(i) => Ok(batch.column(*i).clone()),
                OutputColumn::Partition(key) => partition_column(
                    self.partition_values[*key].as_deref(),
                    field.data_type(),
                    rows,
                    &self.splits[self.cursor].path,
                ),
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        Ok(RecordBatch::try_new_with_options(
            layout.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )?)
    }
}

impl SourceReader for FileReader {
    fn poll_next(&mut self) -> Result<SourcePoll> {
        loop {
            if self.current.is_none() {
                while self.splits.get(self.cursor).is_some_and(|s| s.done) {
                    self.cursor += 1;
                }
                let Some(split) = self.splits.get_mut(self.cursor) else {
                    return Ok(SourcePoll::End);
                };
                // Rows read before a restore are read again and skipped.
                self.skip_rows = std::mem::take(&mut split.rows);
                let path = split.path.clone();
                if let Some(layout) = &self.layout {
                    self.partition_values = layout.spec.values_of(&layout.root, &path)?;
                }
                self.current = Some(self.open(&path)?);
            }
            let batch_size = self.batch_size;
            let next = match self.current.as_mut().expect("opened above") {
                OpenFile::Csv(reader) => {
                    let before = reader.skipped;
                    let next = reader.next_batch(batch_size)?;
                    TaskMetrics::add(&self.metrics.parse_errors_skipped, reader.skipped - before);
                    next
                }
                OpenFile::Json(reader) => {
                    let before = reader.skipped;
                    let next = reader.next_batch(batch_size)?;
                    TaskMetrics::add(&self.metrics.parse_errors_skipped, reader.skipped - before);
                    next
                }
                OpenFile::Parquet { reader, order, file } => match reader.next() {
                    Some(batch) => {
                        let batch = batch.map_err(|e| Error::Data {
                            file: file.clone(),
                            line: None,
                            message: e.to_string(),
                        })?;
                        let (order, file) = (order.clone(), file.clone());
                        Some(self.conform(batch, &order, &file)?)
                    }
                    None => None,
                },
            };
            let split = &mut self.splits[self.cursor];
            match next {
                Some(batch) if batch.num_rows() > 0 => {
                    let rows = batch.num_rows() as u64;
                    split.rows += rows;
                    if self.skip_rows >= rows {
                        // Before the restored position: read again, not emitted.
                        self.skip_rows -= rows;
                        continue;
                    }
                    let skip = std::mem::take(&mut self.skip_rows);
                    let batch = batch.slice(skip as usize, (rows - skip) as usize);
                    return Ok(SourcePoll::Batch(self.with_partition_values(batch)?));
                }
                Some(_) => {}
                None => {
                    if self.skip_rows > 0 {
                        return Err(Error::State(format!(
                            "{} has fewer rows than the checkpoint read from it; was it changed?",
                            split.path.display()
                        )));
                    }
                    split.done = true;
                    self.current = None;
                }
            }
        }
    }

    fn snapshot_position(
        &mut self,
        _checkpoint: weir_common::ids::CheckpointId,
    ) -> Result<serde_json::Value> {
        let skip = self.skip_rows;
        let splits: Vec<serde_json::Value> = self
            .splits
            .iter()
            .enumerate()
            .map(|(i, s)| {
                // A file opened after a restore and still skipping: its position
                // is where the checkpoint left it.
                let rows = if i == self.cursor { s.rows + skip } else { s.rows };
                serde_json::json!({
                    "index": s.index,
                    "count": s.count,
                    "path": s.path.display().to_string(),
                    "rows": rows,
                    "done": s.done,
                })
            })
            .collect();
        Ok(serde_json::json!({ "splits": splits }))
    }

    fn restore_position(&mut self, position: &serde_json::Value) -> Result<()> {
        let bad = || {
            Error::State(format!(
                "filesystem position {position} is not one this source wrote"
            ))
        };
        let saved = position["splits"].as_array().ok_or_else(bad)?;
        let mut splits = Vec::with_capacity(saved.len());
        for split in saved {
            let number = |name: &str| split[name].as_u64().ok_or_else(bad);
            let index = number("index")?;
            let path = split["path"].as_str().ok_or_else(bad)?;
            // The file must still be there, at the same place in the listing.
            let now = self.all_files.get(index as usize);
            if now.is_none_or(|p| p.display().to_string() != path) {
                return Err(Error::State(format!(
                    "the checkpoint read {path} as file {index} of the source, but that file now is {}",
                    now.map_or("missing".to_string(), |p| p.display().to_string())
                )));
            }
            splits.push(FileSplit {
                index,
                count: number("count")?,
                path: PathBuf::from(path),
                rows: number("rows")?,
                done: split["done"].as_bool().ok_or_else(bad)?,
            });
        }
        self.splits = splits;
        self.cursor = 0;
        self.current = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::AsArray;
    use std::path::Path;

    use arrow::datatypes::{DataType, Field, Int64Type};

    use super::*;
    use weir_plan::table::{ColumnDef, TableDef, TableOptions};

    fn reader(dir: &Path, batch_size: usize) -> Box<dyn SourceReader> {
        let table = TableDef {
            name: "t".into(),
            columns: vec![ColumnDef::physical("v", DataType::Int64, true)],
            primary_key: vec![],
            partition_keys: vec![],
            options: TableOptions::new(vec![
                ("connector".into(), "filesystem".into()),
                ("path".into(), dir.display().to_string()),
                ("format".into(), "csv".into()),
            ])
            .unwrap(),
        };
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]));
        let factory = FileSourceFactory::try_new(&table, &[0], schema, &SessionConfig::default()).unwrap();
        factory
            .create_reader(&TaskContext::standalone(batch_size))
            .unwrap()
    }

    fn drain(reader: &mut dyn SourceReader, limit: usize) -> Vec<i64> {
        let mut values = vec![];
        for _ in 0..limit {
            match reader.poll_next().unwrap() {
                SourcePoll::Batch(b) => {
                    values.extend(b.column(0).as_primitive::<Int64Type>().values().iter().copied())
                }
                SourcePoll::End => break,
                SourcePoll::Idle(_) => {}
                other => panic!("files are read without splits: {other:?}"),
            }
        }
        values
    }

    #[test]
    fn a_restored_reader_continues_at_the_saved_file_and_row() {
        let dir = tempfile::tempdir().unwrap();
        for (name, range) in [("a.csv", 0..10), ("b.csv", 10..25), ("c.csv", 25..30)] {
            let text: String = range.map(|v| format!("{v}\n")).collect();
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        // Batches of 4 rows: after 4 polls the reader is inside b.csv.
        let mut first = reader(dir.path(), 4);
        let before = drain(first.as_mut(), 4);
        let position = first.snapshot_position(1).unwrap();
        let mut second = reader(dir.path(), 4);
        second.restore_position(&position).unwrap();
        let after = drain(second.as_mut(), 100);
        let all: Vec<i64> = before.into_iter().chain(after).collect();
        assert_eq!(all, (0..30).collect::<Vec<_>>(), "position {position}");
    }

    #[test]
    fn a_position_in_a_file_that_is_gone_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.csv"), "1\n2\n").unwrap();
        let mut r = reader(dir.path(), 8);
        let position = serde_json::json!({"files_done": 0, "file": "/elsewhere/x.csv", "rows": 1});
        let err = r.restore_position(&position).unwrap_err().to_string();
        assert!(err.contains("/elsewhere/x.csv"), "{err}");
    }
}
