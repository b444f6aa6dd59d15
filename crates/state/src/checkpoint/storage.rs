//! Where checkpoints live on disk, and the file operations on them.
//!
//! ```text
//! <checkpoint dir>/<job name>/<job id>/chk-<n>/_metadata           JSON, written last, atomically
//! <checkpoint dir>/<job name>/<job id>/chk-<n>/<operator id>/<subtask>.parquet
//! <savepoint dir>/savepoint-<job name>-<short job id>-<n>/...     same layout, kept until deleted
//! ```
//!
//! Every run of a job has a job id of its own (as in Flink), so a rerun or a
//! second job with the same name never touches another run's checkpoints. A
//! checkpoint directory without `_metadata` is incomplete (in flight or
//! aborted). Which directories to delete is decided by [`to_delete`], and
//! which checkpoint a restore path means by [`choose`]: plain functions;
//! this module does the I/O. On S3 the same layout holds under the bucket's
//! key prefix; [`remote`] moves the files, and listings come from the bucket.

use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::checkpoint::metadata::{CheckpointMetadata, FORMAT_VERSION};
use crate::checkpoint::remote;
use crate::incremental::{SHARED_DIR, shared_file_checkpoint, shared_files_to_delete};
use crate::{Error, Result};
use weir_common::config::checkpoint::display_path;
use weir_common::ids::CheckpointId;
use weir_common::ids::JobId;

/// The metadata file's name.
pub const METADATA: &str = "_metadata";

/// The directory of one run of job `job`: `<checkpoint dir>/<job>/<job id>`.
pub fn run_dir(checkpoint_root: &Path, job: &str, job_id: &JobId) -> PathBuf {
    checkpoint_root.join(job).join(job_id.as_str())
}

/// The directory of checkpoint `id` under a run directory.
pub fn checkpoint_dir(run_dir: &Path, id: CheckpointId) -> PathBuf {
    run_dir.join(format!("chk-{id}"))
}

/// The directory of savepoint `id` of a run of job `job` under the savepoint
/// directory.
pub fn savepoint_dir(savepoint_root: &Path, job: &str, job_id: &JobId, id: CheckpointId) -> PathBuf {
    savepoint_root.join(format!("savepoint-{job}-{}-{id}", job_id.short()))
}

/// The id of a `chk-<n>` directory name.
pub fn checkpoint_id(name: &str) -> Option<CheckpointId> {
    name.strip_prefix("chk-")?.parse().ok()
}

/// Writes `bytes` to `path` atomically: a temporary file, fsync, rename, fsync
/// of the directory. A crash leaves either the old file or the new one.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| Error::Internal(format!("{} has no parent", path.display())))?;
    let temporary = dir.join(format!(
        ".{}.inprogress",
        path.file_name().map_or("file".into(), |n| n.to_string_lossy())
    ));
    let mut file = File::create(&temporary).map_err(|e| Error::io(&temporary, e))?;
    file.write_all(bytes).map_err(|e| Error::io(&temporary, e))?;
    file.sync_all().map_err(|e| Error::io(&temporary, e))?;
    drop(file);
    std::fs::rename(&temporary, path).map_err(|e| Error::io(path, e))?;
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Writes the metadata of a complete checkpoint into its directory (and
/// uploads it, on S3: the checkpoint is complete once it is there).
pub fn write_metadata(dir: &Path, metadata: &CheckpointMetadata) -> Result<()> {
    let json = serde_json::to_vec_pretty(metadata)
        .map_err(|e| Error::Internal(format!("checkpoint metadata: {e}")))?;
    write_atomically(&dir.join(METADATA), &json)?;
    remote::upload(&dir.join(METADATA))
}

/// Reads and checks a checkpoint's metadata; errors name the file.
pub fn read_metadata(dir: &Path) -> Result<CheckpointMetadata> {
    let path = dir.join(METADATA);
    remote::fetch(&path)?;
    let bytes = std::fs::read(&path)
        .map_err(|e| Error::State(format!("cannot read checkpoint metadata {}: {e}", path.display())))?;
    let metadata: CheckpointMetadata = serde_json::from_slice(&bytes)
        .map_err(|e| Error::State(format!("corrupt checkpoint metadata {}: {e}", path.display())))?;
    if metadata.format != FORMAT_VERSION {
        return Err(Error::State(format!(
            "checkpoint metadata {} has format {}, this weir reads format {FORMAT_VERSION}",
            path.display(),
            metadata.format
        )));
    }
    Ok(metadata)
}

/// Checks that every state file a checkpoint names exists with its recorded size.
pub fn verify(dir: &Path, metadata: &CheckpointMetadata) -> Result<()> {
    for task in &metadata.tasks {
        let files = task
            .operators
            .iter()
            .flat_map(|o| o.files().map(|f| (&f.path, f.bytes)))
            .chain(task.channel_state.iter().map(|c| (&c.path, c.bytes)));
        for (path, recorded) in files {
            let path = dir.join(path);
            let size = remote::size(&path)
                .map_err(|e| Error::State(format!("checkpoint state file {}: {e}", path.display())))?;
            if size != recorded {
                return Err(Error::State(format!(
                    "checkpoint state file {} has {size} bytes, the checkpoint recorded {recorded}",
                    path.display()
                )));
            }
        }
    }
    Ok(())
}

/// The `chk-<n>` directories of a job directory: id, and whether complete.
pub fn list_checkpoints(job_dir: &Path) -> Result<Vec<(CheckpointId, bool)>> {
    let entries = match std::fs::read_dir(job_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(Error::io(job_dir, e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(job_dir, e))?;
        if let Some(id) = checkpoint_id(&entry.file_name().to_string_lossy()) {
            found.push((id, entry.path().join(METADATA).is_file()));
        }
    }
    found.sort();
    Ok(found)
}

/// Which checkpoint directories to delete: complete ones beyond the newest
/// `keep`, and incomplete ones that are not in flight.
pub fn to_delete(
    checkpoints: &[(CheckpointId, bool)],
    keep: usize,
    in_flight: &[CheckpointId],
) -> Vec<CheckpointId> {
    let complete: Vec<CheckpointId> = checkpoints.iter().filter(|c| c.1).map(|c| c.0).collect();
    let kept = &complete[complete.len().saturating_sub(keep)..];
    checkpoints
        .iter()
        .map(|c| c.0)
        .filter(|id| !kept.contains(id) && !in_flight.contains(id))
        .collect()
}

/// Deletes what [`to_delete`] says, then the shared files of incremental
/// checkpoints that no retained checkpoint needs
/// ([`shared_files_to_delete`]); failures are reported, not fatal.
pub fn clean_up(job_dir: &Path, keep: usize, in_flight: &[CheckpointId]) -> Result<()> {
    if let Some(objects) = remote::list(job_dir)? {
        return clean_up_remote(job_dir, &objects, keep, in_flight);
    }
    let checkpoints = list_checkpoints(job_dir)?;
    for id in to_delete(&checkpoints, keep, in_flight) {
        let dir = checkpoint_dir(job_dir, id);
        std::fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    }
    clean_shared(job_dir)
}

/// [`clean_up`] of a run directory on S3, whose `objects` (paths relative
/// to it) are listed from the bucket: the same decisions, on the objects.
fn clean_up_remote(
    job_dir: &Path,
    objects: &[String],
    keep: usize,
    in_flight: &[CheckpointId],
) -> Result<()> {
    let checkpoints = remote_checkpoints(objects);
    let deleted = to_delete(&checkpoints, keep, in_flight);
    let mut doomed: Vec<PathBuf> = Vec::new();
    for object in objects {
        let chk = object.split('/').next().and_then(checkpoint_id);
        if chk.is_some_and(|id| deleted.contains(&id)) {
            doomed.push(job_dir.join(object));
        }
    }
    for id in &deleted {
        let _ = std::fs::remove_dir_all(checkpoint_dir(job_dir, *id));
    }
    let complete: Vec<CheckpointId> = checkpoints
        .iter()
        .filter(|c| c.1 && !deleted.contains(&c.0))
        .map(|c| c.0)
        .collect();
    let shared: Vec<(String, CheckpointId)> = objects
        .iter()
        .filter(|o| o.starts_with(&format!("{SHARED_DIR}/")))
        .filter_map(|o| Some((o.clone(), shared_file_checkpoint(o.rsplit('/').next()?)?)))
        .collect();
    if let Some(&newest) = complete.last()
        && !shared.is_empty()
    {
        let referenced = referenced_shared_files(job_dir, &complete)?;
        doomed.extend(
            shared_files_to_delete(&shared, newest, &referenced)
                .into_iter()
                .map(|p| job_dir.join(p)),
        );
    }
    remote::delete(&doomed)
}

/// The `chk-<n>` directories among a run directory's objects: id, and
/// whether complete (its `_metadata` is there).
fn remote_checkpoints(objects: &[String]) -> Vec<(CheckpointId, bool)> {
    let mut found: std::collections::BTreeMap<CheckpointId, bool> = Default::default();
    for object in objects {
        let mut parts = object.splitn(2, '/');
        if let Some(id) = parts.next().and_then(checkpoint_id) {
            *found.entry(id).or_default() |= parts.next() == Some(METADATA);
        }
    }
    found.into_iter().collect()
}

/// The shared files (paths relative to the run directory) that the
/// complete checkpoints `complete` of `job_dir` refer to.
fn referenced_shared_files(job_dir: &Path, complete: &[CheckpointId]) -> Result<HashSet<String>> {
    let mut referenced = HashSet::new();
    for &id in complete {
        let metadata = read_metadata(&checkpoint_dir(job_dir, id))?;
        for task in &metadata.tasks {
            for file in task.operators.iter().flat_map(|o| o.files()) {
                if let Some(path) = file.path.strip_prefix("../") {
                    referenced.insert(path.to_string());
                }
            }
        }
    }
    Ok(referenced)
}

/// The shared files under `<run dir>/shared/<operator>/`: path relative to
/// the run directory, and the checkpoint each was written for.
fn shared_files(job_dir: &Path) -> Result<Vec<(String, CheckpointId)>> {
    let mut found = Vec::new();
    for operator in subdirectories(&job_dir.join(SHARED_DIR))? {
        let entries = std::fs::read_dir(&operator).map_err(|e| Error::io(&operator, e))?;
        for entry in entries {
            let name = entry.map_err(|e| Error::io(&operator, e))?.file_name();
            let name = name.to_string_lossy();
            if let (Some(id), Some(dir)) = (shared_file_checkpoint(&name), operator.file_name()) {
                found.push((format!("{SHARED_DIR}/{}/{name}", dir.to_string_lossy()), id));
            }
        }
    }
    Ok(found)
}

/// Deletes the shared files that no complete checkpoint left in `job_dir`
/// refers to, up to the newest of them. Nothing is deleted when a
/// checkpoint's metadata cannot be read.
fn clean_shared(job_dir: &Path) -> Result<()> {
    let files = shared_files(job_dir)?;
    if files.is_empty() {
        return Ok(());
    }
    let complete: Vec<CheckpointId> = list_checkpoints(job_dir)?
        .into_iter()
        .filter(|c| c.1)
        .map(|c| c.0)
        .collect();
    let Some(&newest) = complete.last() else {
        return Ok(());
    };
    let referenced = referenced_shared_files(job_dir, &complete)?;
    for path in shared_files_to_delete(&files, newest, &referenced) {
        let path = job_dir.join(path);
        std::fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}

/// What `--restore <path>` resolved to.
#[derive(Debug)]
pub enum RestorePoint {
    /// This checkpoint.
    Checkpoint {
        /// Its directory.
        dir: PathBuf,
        /// Its metadata.
        metadata: Box<CheckpointMetadata>,
        /// How it was chosen, for the user: among how many, from which run.
        chosen: String,
        /// Newer checkpoints that were skipped as damaged, with why.
        skipped: Vec<String>,
    },
    /// A job directory with no complete checkpoint: start afresh.
    Nothing {
        /// Damaged checkpoints that were skipped, with why.
        skipped: Vec<String>,
    },
}

/// A complete checkpoint found under a restore path.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Its directory.
    pub dir: PathBuf,
    /// Its id.
    pub id: CheckpointId,
    /// When it completed (ms since the epoch), from its metadata.
    pub completion_time: i64,
}

/// The order in which a restore path's complete checkpoints are tried: the
/// most recently completed first (whatever run wrote it), then the highest
/// id. Ids alone would mislead: a rerun starts counting again.
pub fn choose(mut candidates: Vec<Candidate>) -> Vec<Candidate> {
    candidates.sort_by_key(|c| std::cmp::Reverse((c.completion_time, c.id)));
    candidates
}

/// The `chk-<n>` directories right under `dir` (complete or not).
fn checkpoints_in(dir: &Path) -> Result<Vec<(PathBuf, CheckpointId, bool)>> {
    Ok(list_checkpoints(dir)?
        .into_iter()
        .map(|(id, complete)| (checkpoint_dir(dir, id), id, complete))
        .collect())
}

/// The directories right under `dir`.
fn subdirectories(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for entry in entries {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if path.is_dir() {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// The checkpoints (directory, id, whether complete) a restore path holds:
/// a run directory's own, else those
/// of every run in a job directory, else (a checkpoint root) those of job
/// `job`'s runs.
pub fn checkpoints_under(path: &Path, job: &str) -> Result<Vec<(PathBuf, CheckpointId, bool)>> {
    let here = checkpoints_in(path)?;
    if !here.is_empty() {
        return Ok(here);
    }
    let runs = |dir: &Path| -> Result<Vec<(PathBuf, CheckpointId, bool)>> {
        let mut all = Vec::new();
        for run in subdirectories(dir)? {
            all.extend(checkpoints_in(&run)?);
        }
        Ok(all)
    };
    let in_runs = runs(path)?;
    if !in_runs.is_empty() {
        return Ok(in_runs);
    }
    let named = path.join(job);
    if named.is_dir() {
        return runs(&named);
    }
    Ok(Vec::new())
}

/// Resolves a restore path for job `job`: a checkpoint or savepoint
/// directory (it must be intact); or a run directory, a job directory (all
/// its runs) or the checkpoint directory itself (the runs of `job`): the
/// most recently completed intact checkpoint there. None means starting
/// afresh.
pub fn resolve_restore(path: &Path, job: &str) -> Result<RestorePoint> {
    remote::fetch_metadata_under(path)?;
    if !path.exists() {
        return Err(Error::State(format!(
            "restore path {} does not exist",
            display_path(path)
        )));
    }
    let is_checkpoint = path.join(METADATA).exists()
        || path
            .file_name()
            .and_then(|n| checkpoint_id(&n.to_string_lossy()))
            .is_some()
        || path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("savepoint-"));
    if is_checkpoint {
        let metadata = read_metadata(path)?;
        verify(path, &metadata)?;
        return Ok(RestorePoint::Checkpoint {
            chosen: format!(
                "checkpoint {} from {}",
                metadata.checkpoint_id,
                display_path(path)
            ),
            dir: path.to_path_buf(),
            metadata: Box::new(metadata),
            skipped: vec![],
        });
    }
    let mut skipped = Vec::new();
    let mut candidates = Vec::new();
    for (dir, id, complete) in checkpoints_under(path, job)? {
        if !complete {
            continue;
        }
        match read_metadata(&dir) {
            Ok(metadata) => candidates.push(Candidate {
                dir,
                id,
                completion_time: metadata.completion_time,
            }),
            Err(e) => skipped.push(e.to_string()),
        }
    }
    let runs: std::collections::BTreeSet<&Path> = candidates.iter().filter_map(|c| c.dir.parent()).collect();
    let among = format!(
        "the most recently completed of {} complete checkpoint(s) in {} run(s) under {}",
        candidates.len(),
        runs.len(),
        display_path(path)
    );
    for candidate in choose(candidates.clone()) {
        match read_metadata(&candidate.dir).and_then(|m| verify(&candidate.dir, &m).map(|()| m)) {
            Ok(metadata) => {
                return Ok(RestorePoint::Checkpoint {
                    chosen: format!(
                        "checkpoint {} from {}, {among}",
                        metadata.checkpoint_id,
                        display_path(&candidate.dir)
                    ),
                    dir: candidate.dir,
                    metadata: Box::new(metadata),
                    skipped,
                });
            }
            Err(e) => skipped.push(e.to_string()),
        }
    }
    Ok(RestorePoint::Nothing { skipped })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_on_s3_are_found_among_the_objects_of_a_run() {
        let objects = [
            "chk-3/_metadata",
            "chk-3/op/0.parquet",
            "chk-4/op/0.parquet",
            "shared/op/x",
            "chk-x/y",
        ]
        .map(String::from);
        assert_eq!(remote_checkpoints(&objects), vec![(3, true), (4, false)]);
    }

    #[test]
    fn retention_keeps_the_newest_complete_and_the_in_flight_ones() {
        let checkpoints = [(1, true), (2, false), (3, true), (4, true), (5, false)];
        assert_eq!(to_delete(&checkpoints, 1, &[5]), vec![1, 2, 3]);
        assert_eq!(to_delete(&checkpoints, 2, &[]), vec![1, 2, 5]);
        assert_eq!(to_delete(&[], 1, &[]), Vec::<CheckpointId>::new());
    }

    #[test]
    fn a_missing_state_file_makes_the_checkpoint_damaged_naming_the_file() {
        use crate::checkpoint::metadata::{OperatorState, StateFile, TaskState};
        let job = tempfile::tempdir().unwrap();
        let dir = checkpoint_dir(job.path(), 7);
        std::fs::create_dir_all(&dir).unwrap();
        let metadata = CheckpointMetadata {
            format: FORMAT_VERSION,
            job: "j".into(),
            job_id: None,
            checkpoint_id: 7,
            kind: weir_common::ids::BarrierKind::Checkpoint,
            trigger_time: 0,
            completion_time: 0,
            max_parallelism: 128,
            tasks: vec![TaskState {
                channel_state: Vec::new(),
                source_id: None,
                vertex: 0,
                subtask: 0,
                parallelism: 1,
                source: None,
                operators: vec![OperatorState {
                    signature: None,
                    operator_id: "0-1-WindowAggregate".into(),
                    meta: serde_json::Value::Null,
                    file: Some(StateFile {
                        path: "0-1-WindowAggregate/0.parquet".into(),
                        rows: 1,
                        bytes: 10,
                        key_groups: (0, 0),
                    }),
                    deltas: vec![],
                    delta_kind: None,
                }],
            }],
        };
        write_metadata(&dir, &metadata).unwrap();
        assert_eq!(read_metadata(&dir).unwrap(), metadata);
        let err = verify(&dir, &metadata).unwrap_err().to_string();
        assert!(err.contains("0-1-WindowAggregate/0.parquet"), "{err}");
        match resolve_restore(job.path(), "j").unwrap() {
            RestorePoint::Nothing { skipped } => assert!(skipped[0].contains("0.parquet"), "{skipped:?}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_restore_chooses_the_most_recently_completed_checkpoint_not_the_highest_id() {
        let candidate = |run: &str, id, completion_time| Candidate {
            dir: PathBuf::from(run).join(format!("chk-{id}")),
            id,
            completion_time,
        };
        // The first run ended at chk-15; a rerun got to chk-4 before a crash.
        let order = choose(vec![candidate("first", 15, 1_000), candidate("rerun", 4, 2_000)]);
        assert_eq!(order[0].dir, PathBuf::from("rerun/chk-4"));
        // Same completion time: the higher id.
        let order = choose(vec![candidate("r", 3, 5), candidate("r", 4, 5)]);
        assert_eq!(order[0].id, 4);
    }

    #[test]
    fn savepoint_and_run_directories_name_the_job_id() {
        let id = JobId::parse("0123456789abcdef0123456789abcdef").unwrap();
        assert_eq!(
            run_dir(Path::new("/c"), "job", &id),
            PathBuf::from("/c/job/0123456789abcdef0123456789abcdef")
        );
        assert_eq!(
            savepoint_dir(Path::new("/s"), "job", &id, 7),
            PathBuf::from("/s/savepoint-job-cdef0123-7")
        );
    }

    #[test]
    fn checkpoint_directory_names_parse() {
        assert_eq!(checkpoint_id("chk-12"), Some(12));
        assert_eq!(checkpoint_id("chk-x"), None);
        assert_eq!(checkpoint_id("shared"), None);
    }
}
