//! The filesystem sink: part files per subtask, hidden until complete.
//!
//! A part file is written as `.part-<uuid>-<subtask>-<n>.inprogress.<job id>-<attempt>`
//! and renamed to `part-<uuid>-<subtask>-<n>` when it is complete (the uuid
//! is new for every writer, so a restarted attempt never reuses a name): when it reaches
//! `sink.rolling-policy.file-size` or `sink.rolling-policy.rollover-interval`, or
//! at the end of input. Readers (weir's own source included) skip hidden files.
//! A partitioned table's rows go to part files in their partition directories
//! (see `partition.rs`), which are committed as `commit.rs` describes.
//!
//! With checkpoints the sink commits in two phases, as Flink's FileSink: a
//! part file that is complete (rolled, or open at a barrier) stays hidden as
//! *pending*; the checkpoint records the pending files, and when it is
//! complete they are renamed to their visible names. A restore renames the
//! files its checkpoint recorded (again, harmlessly, if already done) and
//! deletes the other hidden part files that the checkpoint's subtask wrote
//! in that job run (and this subtask in this run's earlier attempts): never
//! a file of another job writing into the same directory. After the end of
//! a bounded input, the next checkpoint commits everything.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::UInt32Array;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

use crate::filesystem::commit::{CommitPolicy, PartitionCommitter, SavedPartition, should_close};
use crate::filesystem::partition::PartitionSpec;
use crate::filesystem::{FileFormat, table_path};
use crate::format::csv::CsvRowWriter;
use crate::format::json::{write_debezium_json, write_json_lines};
use crate::{Error, Result};
use crate::{SinkFactory, SinkWriter};
use weir_common::config::{SessionConfig, parse_duration};
use weir_common::ids::CheckpointId;
use weir_common::time::wall_clock_millis;
use weir_plan::table::TableDef;
use weir_runtime::TaskContext;

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
            Some(v) => weir_common::config::parse_memory_size(v).ok_or_else(|| {
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

/// How a partitioned table's rows are split into partition directories.
#[derive(Debug)]
struct Partitioning {
    spec: PartitionSpec,
    /// The partition columns' positions in the sink's input.
    key_columns: Vec<usize>,
    /// The other columns' positions: what the part files hold.
    data_columns: Vec<usize>,
    committer: Option<Arc<PartitionCommitter>>,
}

/// The filesystem sink of a table.
#[derive(Debug)]
pub struct FileSinkFactory {
    table: String,
    directory: PathBuf,
    format: FileFormat,
    /// The schema of the part files (without partition columns).
    schema: SchemaRef,
    policy: RollingPolicy,
    partitioning: Option<Arc<Partitioning>>,
}

impl FileSinkFactory {
    /// The sink of `table`. Planning touches no file (EXPLAIN has no side
    /// effects); the output directory is created, and checked to be
    /// writable, when the job's writers are (so that still fails the
    /// statement, before any task runs).
    pub fn try_new(
        table: &TableDef,
        schema: SchemaRef,
        _config: &SessionConfig,
    ) -> Result<Arc<dyn SinkFactory>> {
        let format = FileFormat::from_table(table)?;
        let directory = table_path(table)?;
        let partitioning = match PartitionSpec::from_table(table) {
            None => None,
            Some(_) if matches!(format, FileFormat::DebeziumJson) => {
                return Err(Error::sql(format!(
                    "table '{}': a PARTITIONED BY table with format 'debezium-json' is not supported yet",
                    table.name
                )));
            }
            Some(spec) => {
                let position = |name: &String| {
                    schema.index_of(name).map_err(|_| {
                        Error::Internal(format!("sink input of '{}' lacks column '{name}'", table.name))
                    })
                };
                let key_columns = spec.keys.iter().map(position).collect::<Result<Vec<_>>>()?;
                let data_columns = (0..schema.fields().len())
                    .filter(|i| !key_columns.contains(i))
                    .collect();
                let committer = CommitPolicy::from_table(table)?
                    .map(|policy| Arc::new(PartitionCommitter::new(directory.clone(), spec.clone(), policy)));
                Some(Arc::new(Partitioning {
                    spec,
                    key_columns,
                    data_columns,
                    committer,
                }))
            }
        };
        let schema = match &partitioning {
            Some(p) => Arc::new(schema.project(&p.data_columns)?),
            None => schema,
        };
        Ok(Arc::new(FileSinkFactory {
            table: table.name.clone(),
            directory,
            format,
            schema,
            policy: RollingPolicy::from_table(table)?,
            partitioning,
        }))
    }
}

impl SinkFactory for FileSinkFactory {
    fn accepts_updates(&self) -> bool {
        matches!(self.format, FileFormat::DebeziumJson)
    }

    fn describe(&self) -> String {
        let partitions = match &self.partitioning {
            Some(p) => format!(", partitioned by {}", p.spec.keys.join(", ")),
            None => String::new(),
        };
        format!(
            "Sink: {}[filesystem, {}, {}{partitions}]",
            self.table,
            self.format.name(),
            self.directory.display()
        )
    }

    fn create_writer(&self, ctx: &TaskContext) -> Result<Box<dyn SinkWriter>> {
        let directory = &self.directory;
        std::fs::create_dir_all(directory).map_err(|e| Error::io(directory, e))?;
        let probe = directory.join(format!(".weir-write-probe-{}", random_uuid()));
        File::create(&probe).map_err(|e| Error::io(directory, e))?;
        let _ = std::fs::remove_file(&probe);
        if let Some(committer) = self.partitioning.as_ref().and_then(|p| p.committer.as_ref()) {
            committer.register(ctx.subtask, ctx.parallelism);
        }
        Ok(Box::new(PartFileWriter {
            directory: self.directory.clone(),
            prefix: format!("part-{}-{}-", random_uuid(), ctx.subtask),
            subtask: ctx.subtask,
            job_id: ctx.job_id.to_string(),
            attempt: ctx.attempt,
            format: self.format.clone(),
            schema: self.schema.clone(),
            policy: self.policy,
            partitioning: self.partitioning.clone(),
            next_part: 0,
            open: BTreeMap::new(),
            buffer: Vec::new(),
            two_phase: ctx.checkpointing,
            finished: false,
            pending: Vec::new(),
            pre_committed: BTreeMap::new(),
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
    /// The partition's time, when partitions commit by it.
    partition_time: Option<i64>,
}

struct PartFileWriter {
    directory: PathBuf,
    prefix: String,
    subtask: usize,
    /// The run writing (hidden files carry it, so a restore deletes only its own).
    job_id: String,
    attempt: u32,
    format: FileFormat,
    schema: SchemaRef,
    policy: RollingPolicy,
    partitioning: Option<Arc<Partitioning>>,
    next_part: u64,
    /// Open part files by partition directory (`""` when unpartitioned).
    open: BTreeMap<String, OpenPart>,
    buffer: Vec<u8>,
    /// Commit at checkpoints (two-phase) rather than when a file is complete.
    two_phase: bool,
    /// The input has ended.
    finished: bool,
    /// Complete files not yet assigned to a checkpoint.
    pending: Vec<PendingFile>,
    /// Pending files by the checkpoint whose barrier closed them.
    pre_committed: BTreeMap<CheckpointId, Vec<PendingFile>>,
}

/// A complete part file, hidden until its checkpoint completes.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct PendingFile {
    /// The partition directory (`""` when unpartitioned).
    partition: String,
    /// Its hidden name now.
    hidden: PathBuf,
    /// Its visible name.
    visible: PathBuf,
}

impl PartFileWriter {
    fn committer(&self) -> Option<&PartitionCommitter> {
        self.partitioning.as_ref()?.committer.as_deref()
    }

    fn open_part(&mut self, partition: &str) -> Result<OpenPart> {
        let name = format!("{}{}", self.prefix, self.next_part);
        self.next_part += 1;
        let directory = self.directory.join(partition);
        if !partition.is_empty() {
            std::fs::create_dir_all(&directory).map_err(|e| Error::io(&directory, e))?;
        }
        let visible = directory.join(&name);
        let in_progress = directory.join(format!(".{name}.inprogress.{}-{}", self.job_id, self.attempt));
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
        let partition_time = match self.committer() {
            Some(committer) => committer.opened(self.subtask, partition, wall_clock_millis())?,
            None => None,
        };
        Ok(OpenPart {
            encoder,
            in_progress,
            visible,
            bytes: 0,
            opened: Instant::now(),
            partition_time,
        })
    }

    /// Closes the open part of `partition`: visible at once, or pending until
    /// a checkpoint completes (two-phase).
    fn commit_part(&mut self, partition: &str) -> Result<()> {
        let Some(part) = self.open.remove(partition) else {
            return Ok(());
        };
        let file = match part.encoder {
            Encoder::Text(writer) => writer
                .into_inner()
                .map_err(|e| Error::io(&part.in_progress, e.into_error()))?,
            Encoder::Parquet(writer) => writer.into_inner()?,
        };
        file.sync_all().map_err(|e| Error::io(&part.in_progress, e))?;
        let pending = PendingFile {
            partition: partition.to_string(),
            hidden: part.in_progress,
            visible: part.visible,
        };
        if self.two_phase {
            self.pending.push(pending);
            Ok(())
        } else {
            self.publish(&pending)
        }
    }

    /// Makes a complete file visible (idempotent) and tells the partition committer.
    fn publish(&self, file: &PendingFile) -> Result<()> {
        self.make_visible(file)?;
        if let Some(committer) = self.committer() {
            committer.closed(self.subtask, &file.partition, wall_clock_millis())?;
        }
        Ok(())
    }

    /// Renames a complete file to its visible name, unless that was done.
    fn make_visible(&self, file: &PendingFile) -> Result<()> {
        if file.hidden.exists() {
            commit(&file.hidden, &file.visible)?;
        } else if !file.visible.exists() {
            return Err(Error::State(format!(
                "part file {} to commit is gone (neither it nor {} exists)",
                file.hidden.display(),
                file.visible.display()
            )));
        }
        Ok(())
    }

    /// Deletes the hidden part files that `owners` (job id, subtask) wrote:
    /// what they wrote after the restored checkpoint.
    fn discard_uncommitted(&self, owners: &[(&str, usize)]) -> Result<()> {
        let mut stack = vec![self.directory.clone()];
        while let Some(dir) = stack.pop() {
            let entries = std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))?;
            for entry in entries {
                let entry = entry.map_err(|e| Error::io(&dir, e))?;
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let name = entry.file_name().to_string_lossy().into_owned();
                if hidden_part(&name).is_some_and(|owner| owners.contains(&owner)) {
                    std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
                }
            }
        }
        Ok(())
    }

    /// Appends `batch` (data columns only) to the open part of `partition`.
    fn write_to(&mut self, partition: &str, batch: &RecordBatch) -> Result<()> {
        if !self.open.contains_key(partition) {
            let part = self.open_part(partition)?;
            self.open.insert(partition.to_string(), part);
        }
        let part = self.open.get_mut(partition).expect("opened above");
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
                    FileFormat::DebeziumJson => write_debezium_json(batch, &mut self.buffer)?,
                    _ => write_json_lines(batch, &mut self.buffer)?,
                }
                writer
                    .write_all(&self.buffer)
                    .map_err(|e| Error::io(&part.in_progress, e))?;
                part.bytes += self.buffer.len() as u64;
            }
        }
        if part.bytes >= self.policy.file_size || part.opened.elapsed() >= self.policy.rollover_interval {
            self.commit_part(partition)?;
        }
        Ok(())
    }

    /// Closes the parts matching `close`.
    fn commit_parts_where(&mut self, close: impl Fn(&OpenPart) -> bool) -> Result<()> {
        let closing: Vec<String> = self
            .open
            .iter()
            .filter(|(_, part)| close(part))
            .map(|(name, _)| name.clone())
            .collect();
        for partition in closing {
            self.commit_part(&partition)?;
        }
        Ok(())
    }
}

fn commit(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to).map_err(|e| Error::io(to, e))
}

/// The job id and subtask of a hidden part file
/// `.part-<uuid>-<subtask>-<n>.inprogress.<job id>-<attempt>`.
fn hidden_part(name: &str) -> Option<(&str, usize)> {
    let rest = name.strip_prefix(".part-")?;
    let (part, writer) = rest.split_once(".inprogress.")?;
    let subtask = part.get(37..)?.split('-').next()?.parse().ok()?; // after the uuid and its dash
    let (job, attempt) = writer.split_once('-')?;
    let job = weir_common::ids::JobId::parse(job)?;
    attempt.parse::<u32>().ok()?;
    Some((&writer[..job.as_str().len()], subtask))
}

impl SinkWriter for PartFileWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let Some(partitioning) = self.partitioning.clone() else {
            return self.write_to("", batch);
        };
        let groups = partitioning.spec.group_rows(batch, &partitioning.key_columns)?;
        let data = batch.project(&partitioning.data_columns)?;
        if let [(partition, _)] = groups.as_slice() {
            return self.write_to(partition, &data);
        }
        for (partition, rows) in groups {
            let rows = UInt32Array::from(rows);
            let columns = data
                .columns()
                .iter()
                .map(|c| arrow::compute::take(c, &rows, None))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let part = RecordBatch::try_new_with_options(
                data.schema(),
                columns,
                &RecordBatchOptions::new().with_row_count(Some(rows.len())),
            )?;
            self.write_to(&partition, &part)?;
        }
        Ok(())
    }

    fn on_watermark(&mut self, watermark: i64) -> Result<()> {
        let Some(committer) = self.partitioning.as_ref().and_then(|p| p.committer.clone()) else {
            return Ok(());
        };
        let delay = committer.delay();
        self.commit_parts_where(|part| should_close(part.partition_time, delay, watermark))?;
        committer.watermark(self.subtask, watermark, wall_clock_millis())
    }

    fn uses_processing_time(&self) -> bool {
        // Rolling by `sink.rolling-policy.rollover-interval` also while no rows arrive.
        true
    }

    fn on_processing_time(&mut self, now: i64) -> Result<()> {
        let interval = self.policy.rollover_interval;
        self.commit_parts_where(|part| part.opened.elapsed() >= interval)?;
        match self.committer() {
            Some(committer) if committer.uses_processing_time() => committer.tick(now),
            _ => Ok(()),
        }
    }

    fn finish(&mut self) -> Result<()> {
        self.commit_parts_where(|_| true)?;
        self.finished = true;
        if self.two_phase {
            // The final checkpoint records what is pending; its completion commits it.
            return Ok(());
        }
        match self.committer() {
            Some(committer) => committer.finished(self.subtask, wall_clock_millis()),
            None => Ok(()),
        }
    }

    fn pre_commit(&mut self, checkpoint: CheckpointId) -> Result<serde_json::Value> {
        self.commit_parts_where(|_| true)?;
        let closed = std::mem::take(&mut self.pending);
        self.pre_committed.insert(checkpoint, closed);
        let recorded: Vec<&PendingFile> = self.pre_committed.values().flatten().collect();
        let partitions = self
            .committer()
            .map(PartitionCommitter::snapshot)
            .unwrap_or_default();
        Ok(serde_json::json!({
            "pending": recorded,
            "subtask": self.subtask,
            "job": self.job_id,
            "partitions": partitions,
        }))
    }

    fn commit(&mut self, checkpoint: CheckpointId) -> Result<()> {
        let later = match checkpoint.checked_add(1) {
            Some(next) => self.pre_committed.split_off(&next),
            None => BTreeMap::new(),
        };
        let done = std::mem::replace(&mut self.pre_committed, later);
        for file in done.values().flatten() {
            self.publish(file)?;
        }
        if self.finished
            && self.pre_committed.is_empty()
            && self.pending.is_empty()
            && let Some(committer) = self.committer()
        {
            committer.finished(self.subtask, wall_clock_millis())?;
        }
        Ok(())
    }

    fn restore(&mut self, recorded: &serde_json::Value) -> Result<()> {
        let files: Vec<PendingFile> = match recorded.get("pending") {
            Some(list) => serde_json::from_value(list.clone())
                .map_err(|e| Error::State(format!("file sink state {recorded}: {e}")))?,
            None => Vec::new(),
        };
        if let (Some(committer), Some(saved)) = (self.committer(), recorded.get("partitions")) {
            let saved: Vec<SavedPartition> = serde_json::from_value(saved.clone())
                .map_err(|e| Error::State(format!("file sink state {recorded}: partitions: {e}")))?;
            committer.restore(saved);
        }
        // Partitions commit later (at a tick, watermark or the end), once
        // every restored subtask has made its files visible.
        for file in &files {
            self.make_visible(file)?;
        }
        // The hidden files the saving subtask wrote after the checkpoint are
        // not part of it (after rescaling, that may be another subtask
        // number), nor are those of this run's earlier attempts.
        let subtask = match recorded.get("subtask") {
            Some(s) => s
                .as_u64()
                .ok_or_else(|| Error::State(format!("file sink state {recorded}: bad subtask")))?
                as usize,
            None => self.subtask,
        };
        let mut owners = vec![(self.job_id.as_str(), self.subtask)];
        if let Some(job) = recorded.get("job").and_then(|j| j.as_str()) {
            owners.push((job, subtask));
        }
        self.discard_uncommitted(&owners)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table `(id BIGINT, dt STRING) PARTITIONED BY (dt)` at `path`
    /// committing partitions with a success file at once (process time).
    fn partitioned(path: &Path) -> TableDef {
        use weir_plan::table::{ColumnDef, TableOptions};
        let column = |name: &str, data_type| ColumnDef::physical(name, data_type, true);
        let options = [
            ("connector", "filesystem"),
            ("path", path.to_str().unwrap()),
            ("format", "csv"),
            ("sink.partition-commit.policy.kind", "success-file"),
        ];
        TableDef {
            name: "t".into(),
            columns: vec![
                column("id", arrow::datatypes::DataType::Int64),
                column("dt", arrow::datatypes::DataType::Utf8),
            ],
            primary_key: vec![],
            partition_keys: vec!["dt".into()],
            options: TableOptions::new(
                options
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
            .unwrap(),
        }
    }

    #[test]
    fn a_partition_pending_at_a_checkpoint_is_committed_after_a_crash_and_restore() {
        let dir = tempfile::tempdir().unwrap();
        let table = partitioned(dir.path());
        let schema = table.physical_schema();
        let mut ctx = TaskContext::standalone(1024);
        ctx.checkpointing = true;
        let rows = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(arrow::array::Int64Array::from(vec![1, 2])),
                Arc::new(arrow::array::StringArray::from(vec!["a", "a"])),
            ],
        )
        .unwrap();
        let config = SessionConfig::default();
        let factory = FileSinkFactory::try_new(&table, schema.clone(), &config).unwrap();
        let mut writer = factory.create_writer(&ctx).unwrap();
        writer.write(&rows).unwrap();
        // Checkpoint 1 holds the file of partition dt=a, hidden; the process
        // dies before the checkpoint's completion commits it.
        let saved = writer.pre_commit(1).unwrap();
        drop(writer);
        let success = dir.path().join("dt=a/_SUCCESS");
        assert!(!success.exists());
        // A new process restores checkpoint 1; no row of dt=a comes again.
        let factory = FileSinkFactory::try_new(&table, schema, &config).unwrap();
        let mut writer = factory.create_writer(&ctx).unwrap();
        writer.restore(&saved).unwrap();
        writer.on_processing_time(wall_clock_millis()).unwrap();
        assert!(success.is_file(), "the restored partition was committed");
        let visible: Vec<_> = std::fs::read_dir(dir.path().join("dt=a"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("part-"))
            .collect();
        assert_eq!(visible.len(), 1, "{visible:?}");
    }

    #[test]
    fn sizes_parse_with_flink_units() {
        assert_eq!(weir_common::config::parse_memory_size("128MB"), Some(128 << 20));
        assert_eq!(weir_common::config::parse_memory_size("1 gb"), Some(1 << 30));
        assert_eq!(weir_common::config::parse_memory_size("4096"), Some(4096));
        assert_eq!(weir_common::config::parse_memory_size("lots"), None);
    }

    #[test]
    fn hidden_part_files_name_their_job_and_subtask() {
        let uuid = random_uuid();
        let job = weir_common::ids::JobId::new();
        let name = format!(".part-{uuid}-3-17.inprogress.{job}-2");
        assert_eq!(hidden_part(&name), Some((job.as_str(), 3)));
        assert_eq!(hidden_part(&format!("part-{uuid}-3-17")), None);
        assert_eq!(hidden_part(".weir-write-probe-x"), None);
        // Another writer's naming (no job id) is never taken for ours.
        assert_eq!(
            hidden_part(&format!(".part-{uuid}-3-17.inprogress.{}", random_uuid())),
            None
        );
    }

    #[test]
    fn uuids_have_the_version_4_shape() {
        let id = random_uuid();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_ne!(id, random_uuid());
    }
}
