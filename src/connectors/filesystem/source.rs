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

use super::partition::{PartitionSpec, file_schema, partition_column};
use super::{FileFormat, list_files, table_path};
use crate::config::SessionConfig;
use crate::connectors::format::csv::CsvBatchReader;
use crate::connectors::format::json::JsonBatchReader;
use crate::frontend::catalog::TableDef;
use crate::runtime::operator::TaskMetrics;
use crate::runtime::{SourceFactory, SourcePoll, SourceReader, TaskContext};
use crate::{Error, Result};

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

/// The filesystem source of a table.
#[derive(Debug)]
pub struct FileSourceFactory {
    table: String,
    path: PathBuf,
    files: Vec<PathBuf>,
    format: FileFormat,
    /// Columns in each file.
    field_count: usize,
    /// The columns read from each file, by position in it.
    projection: Vec<usize>,
    /// The schema of the columns read from the files.
    schema: SchemaRef,
    layout: Option<PartitionLayout>,
}

impl FileSourceFactory {
    /// The source of `table`, reading the physical columns `projection`; the
    /// files are listed now, so a missing path fails the statement.
    pub fn try_new(
        table: &TableDef,
        projection: &[usize],
        schema: SchemaRef,
        _config: &SessionConfig,
    ) -> Result<Arc<dyn SourceFactory>> {
        let format = FileFormat::from_table(table)?;
        let path = table_path(table)?;
        let files = list_files(&path)?;
        let physical = table.physical_schema();
        let Some(spec) = PartitionSpec::from_table(table) else {
            return Ok(Arc::new(FileSourceFactory {
                table: table.name.clone(),
                path,
                files,
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
            path: path.clone(),
            files,
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

impl SourceFactory for FileSourceFactory {
    fn describe(&self) -> String {
        format!(
            "Source: {}[filesystem, {}, {}]",
            self.table,
            self.format.name(),
            self.path.display()
        )
    }

    fn is_bounded(&self) -> bool {
        true
    }

    fn create_reader(&self, ctx: &TaskContext) -> Result<Box<dyn SourceReader>> {
        let files: Vec<PathBuf> = self
            .files
            .iter()
            .skip(ctx.subtask)
            .step_by(ctx.parallelism)
            .cloned()
            .collect();
        Ok(Box::new(FileReader {
            files: files.into_iter(),
            current: None,
            layout: self.layout.clone(),
            partition_values: Vec::new(),
            current_path: PathBuf::new(),
            format: self.format.clone(),
            field_count: self.field_count,
            projection: self.projection.clone(),
            schema: self.schema.clone(),
            batch_size: ctx.batch_size,
            metrics: ctx.metrics.clone(),
        }))
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

struct FileReader {
    files: std::vec::IntoIter<PathBuf>,
    current: Option<OpenFile>,
    layout: Option<PartitionLayout>,
    /// The partition values of the open file.
    partition_values: Vec<Option<String>>,
    current_path: PathBuf,
    format: FileFormat,
    field_count: usize,
    projection: Vec<usize>,
    schema: SchemaRef,
    batch_size: usize,
    metrics: Arc<TaskMetrics>,
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
                    &self.current_path,
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
                match self.files.next() {
                    Some(path) => {
                        if let Some(layout) = &self.layout {
                            self.partition_values = layout.spec.values_of(&layout.root, &path)?;
                        }
                        self.current = Some(self.open(&path)?);
                        self.current_path = path;
                    }
                    None => return Ok(SourcePoll::End),
                }
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
            match next {
                Some(batch) if batch.num_rows() > 0 => {
                    return Ok(SourcePoll::Batch(self.with_partition_values(batch)?));
                }
                Some(_) => {}
                None => self.current = None,
            }
        }
    }
}
