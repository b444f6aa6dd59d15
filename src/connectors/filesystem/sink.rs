//! The filesystem sink: part files per subtask, hidden until complete.
//!
//! A part file is written as `.part-<uuid>-<subtask>-<n>.inprogress.<uuid>` and
//! renamed to `part-<uuid>-<subtask>-<n>` when it is complete: when it reaches
//! `sink.rolling-policy.file-size` or `sink.rolling-policy.rollover-interval`, or
//! at the end of input. Readers (weir's own source included) skip hidden files.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use super::{FileFormat, table_path};
use crate::config::{SessionConfig, parse_duration};
use crate::connectors::format::csv::CsvRowWriter;
use crate::connectors::format::json::write_json_lines;
use crate::connectors::{SinkFactory, SinkWriter};
use crate::frontend::catalog::TableDef;
use crate::runtime::TaskContext;
use crate::{Error, Result};

/// When a part file is closed and a new one started.
#[derive(Debug, Clone, Copy)]
pub struct RollingPolicy {
    /// `sink.rolling-policy.file-size` (default 128 MB).
    pub file_size: u64,
    /// `sink.rolling-policy.rollover-interval` (default 30 min).
    pub rollover_interval: Duration,
}

impl RollingPolicy {
    /// Reads the policy of a table.
    pub fn from_table(table: &TableDef) -> Result<Self> {
        let file_size = match table.option("sink.rolling-policy.file-size") {
            None => 128 << 20,
            Some(v) => parse_size(v).ok_or_else(|| {
                Error::sql(format!(
                    "table '{}': invalid 'sink.rolling-policy.file-size' '{v}' (examples: 128MB, 1gb, 4096)",
                    table.name
                ))
            })?,
        };
        let rollover_interval = match table.option("sink.rolling-policy.rollover-interval") {
            None => Duration::from_secs(30 * 60),
            Some(v) => parse_duration(v).ok_or_else(|| {
                Error::sql(format!(
                    "table '{}': invalid 'sink.rolling-policy.rollover-interval' '{v}'",
                    table.name
                ))
            })?,
        };
        Ok(RollingPolicy {
            file_size,
            rollover_interval,
        })
    }
}

/// Parses Flink memory sizes: `128mb`, `1 gb`, `512kb`, `4096` (bytes).
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim().to_ascii_lowercase();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let factor = match unit.trim() {
        "" | "b" | "bytes" => 1,
        "k" | "kb" | "kibibytes" => 1 << 10,
        "m" | "mb" | "mebibytes" => 1 << 20,
        "g" | "gb" | "gibibytes" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(factor)
}

/// A random UUID (version 4) in the usual text form.
pub fn random_uuid() -> String {
    let mut bytes: [u8; 16] = rand::random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The filesystem sink of a table.
#[derive(Debug)]
pub struct FileSinkFactory {
    table: String,
    directory: PathBuf,
    format: FileFormat,
    schema: SchemaRef,
    policy: RollingPolicy,
    uuid: String,
}

impl FileSinkFactory {
    /// The sink of `table`; creates the output directory now, so an unwritable
    /// location fails the statement.
    pub fn try_new(
        table: &TableDef,
        schema: SchemaRef,
        _config: &SessionConfig,
    ) -> Result<Arc<dyn SinkFactory>> {
        let format = FileFormat::from_table(table)?;
        let directory = table_path(table)?;
        std::fs::create_dir_all(&directory).map_err(|e| Error::io(&directory, e))?;
        let probe = directory.join(format!(".weir-write-probe-{}", random_uuid()));
        File::create(&probe).map_err(|e| Error::io(&directory, e))?;
        let _ = std::fs::remove_file(&probe);
        Ok(Arc::new(FileSinkFactory {
            table: table.name.clone(),
            directory,
            format,
            schema,
            policy: RollingPolicy::from_table(table)?,
            uuid: random_uuid(),
        }))
    }
}

impl SinkFactory for FileSinkFactory {
    fn describe(&self) -> String {
        format!(
            "Sink: {}[filesystem, {}, {}]",
            self.table,
            self.format.name(),
            self.directory.display()
        )
    }

    fn create_writer(&self, ctx: &TaskContext) -> Result<Box<dyn SinkWriter>> {
        Ok(Box::new(PartFileWriter {
            directory: self.directory.clone(),
            prefix: format!("part-{}-{}-", self.uuid, ctx.subtask),
            format: self.format.clone(),
            schema: self.schema.clone(),
            policy: self.policy,
            next_part: 0,
            open: None,
            buffer: Vec::new(),
        }))
    }
}

enum Encoder {
    Text(BufWriter<File>),
    Parquet(Box<ArrowWriter<File>>),
}

struct OpenPart {
    encoder: Encoder,
    in_progress: PathBuf,
    visible: PathBuf,
    bytes: u64,
    opened: Instant,
}

struct PartFileWriter {
    directory: PathBuf,
    prefix: String,
    format: FileFormat,
    schema: SchemaRef,
    policy: RollingPolicy,
    next_part: u64,
    open: Option<OpenPart>,
    buffer: Vec<u8>,
}

impl PartFileWriter {
    fn open_part(&mut self) -> Result<OpenPart> {
        let name = format!("{}{}", self.prefix, self.next_part);
        self.next_part += 1;
        let visible = self.directory.join(&name);
        let in_progress = self
            .directory
            .join(format!(".{name}.inprogress.{}", random_uuid()));
        let file = File::create(&in_progress).map_err(|e| Error::io(&in_progress, e))?;
        let encoder = match &self.format {
            FileFormat::Parquet { compression } => {
                let properties = WriterProperties::builder().set_compression(*compression).build();
                Encoder::Parquet(Box::new(ArrowWriter::try_new(
                    file,
                    self.schema.clone(),
                    Some(properties),
                )?))
            }
            _ => Encoder::Text(BufWriter::with_capacity(1 << 20, file)),
        };
        Ok(OpenPart {
            encoder,
            in_progress,
            visible,
            bytes: 0,
            opened: Instant::now(),
        })
    }

    /// Closes the open part and makes it visible.
    fn commit_open_part(&mut self) -> Result<()> {
        let Some(part) = self.open.take() else {
            return Ok(());
        };
        let file = match part.encoder {
            Encoder::Text(writer) => writer
                .into_inner()
                .map_err(|e| Error::io(&part.in_progress, e.into_error()))?,
            Encoder::Parquet(writer) => writer.into_inner()?,
        };
        file.sync_all().map_err(|e| Error::io(&part.in_progress, e))?;
        commit(&part.in_progress, &part.visible)
    }
}

fn commit(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to).map_err(|e| Error::io(to, e))
}

impl SinkWriter for PartFileWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if self.open.is_none() {
            self.open = Some(self.open_part()?);
        }
        let part = self.open.as_mut().expect("opened above");
        match (&mut part.encoder, &self.format) {
            (Encoder::Parquet(writer), _) => {
                writer.write(batch)?;
                part.bytes = writer.bytes_written() as u64 + writer.in_progress_size() as u64;
            }
            (Encoder::Text(writer), format) => {
                self.buffer.clear();
                match format {
                    FileFormat::Csv(options) => {
                        CsvRowWriter::new(options.clone()).write(batch, &mut self.buffer)?
                    }
                    _ => write_json_lines(batch, &mut self.buffer)?,
                }
                writer
                    .write_all(&self.buffer)
                    .map_err(|e| Error::io(&part.in_progress, e))?;
                part.bytes += self.buffer.len() as u64;
            }
        }
        if part.bytes >= self.policy.file_size || part.opened.elapsed() >= self.policy.rollover_interval {
            self.commit_open_part()?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        self.commit_open_part()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_flink_units() {
        assert_eq!(parse_size("128MB"), Some(128 << 20));
        assert_eq!(parse_size("1 gb"), Some(1 << 30));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("lots"), None);
    }

    #[test]
    fn uuids_have_the_version_4_shape() {
        let id = random_uuid();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_ne!(id, random_uuid());
    }
}
