//! Checkpoints on S3: files are written under this process's staging
//! directory for the bucket, uploaded, and downloaded again where a reader
//! needs them.
//!
//! `path_option("s3://bucket/key")` maps an S3 location to
//! `<staging root>/s3/bucket/key`, so the rest of weir keeps working with
//! paths. A task uploads the files of its snapshot before it acknowledges
//! (so a complete checkpoint's files are all in the bucket), the
//! coordinator uploads `_metadata` last, and a restore downloads the
//! metadata and then each file as it is read. Every function here is a
//! no-op for paths outside the staging root: local and shared file systems
//! need none of it.
//!
//! The S3 client is configured from the environment as the AWS tools are
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ENDPOINT` for an S3-compatible server, `AWS_ALLOW_HTTP`).

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::buffered::BufWriter;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt};
use tokio::io::AsyncWriteExt;
use weir_common::config::checkpoint::{display_path, s3_location};

use crate::{Error, Result};

/// The S3 object a staged path stands for.
struct Remote {
    store: Arc<AmazonS3>,
    key: Key,
}

/// `path` with its `..` components resolved without the file system:
/// checkpoints name shared files as `chk-<n>/../shared/...`, and `chk-<n>`
/// need not exist here.
fn normalize(path: &Path) -> PathBuf {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::ParentDir => {
                normal.pop();
            }
            std::path::Component::CurDir => {}
            other => normal.push(other),
        }
    }
    normal
}

/// The remote object of `path` (normalized), if it is a staged S3 location.
fn remote_of(path: &Path) -> Result<Option<Remote>> {
    let Some((bucket, key)) = s3_location(path) else {
        return Ok(None);
    };
    static CLIENTS: OnceLock<Mutex<HashMap<String, Arc<AmazonS3>>>> = OnceLock::new();
    let mut clients = CLIENTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let store = match clients.get(&bucket) {
        Some(store) => store.clone(),
        None => {
            let store = AmazonS3Builder::from_env()
                .with_bucket_name(&bucket)
                .build()
                .map_err(|e| Error::State(format!("S3 bucket '{bucket}': {e}")))?;
            let store = Arc::new(store);
            clients.insert(bucket, store.clone());
            store
        }
    };
    // The key as it is (not percent-encoded as `Key::from` would): job
    // names may hold characters such as '`', and listings give keys back
    // as stored.
    let key = Key::parse(&key).map_err(|e| Error::State(format!("S3 key for {}: {e}", path.display())))?;
    Ok(Some(Remote { store, key }))
}

/// Runs `future` to completion on weir's I/O runtime, from any thread
/// (inside another runtime too: then from a scoped thread of its own).
fn block_on<F>(future: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("weir-s3")
            .enable_all()
            .build()
            .expect("the S3 I/O runtime starts")
    });
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|scope| {
            scope
                .spawn(|| runtime.block_on(future))
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    } else {
        runtime.block_on(future)
    }
}

fn failed(what: &str, path: &Path, e: impl std::fmt::Display) -> Error {
    Error::State(format!("cannot {what} {}: {e}", display_path(path)))
}

/// Uploads the file at `path` when it is a staged S3 location: read in
/// chunks, one PUT for a small file and a multipart upload for a large one.
pub fn upload(path: &Path) -> Result<()> {
    let path = &normalize(path);
    let Some(remote) = remote_of(path)? else {
        return Ok(());
    };
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let store: Arc<dyn ObjectStore> = remote.store.clone();
    block_on(async move {
        let mut writer = BufWriter::new(store, remote.key);
        let mut chunk = vec![0; UPLOAD_CHUNK];
        loop {
            let read = std::io::Read::read(&mut file, &mut chunk).map_err(|e| e.to_string())?;
            if read == 0 {
                break;
            }
            let put = writer.put(Bytes::copy_from_slice(&chunk[..read])).await;
            if let Err(e) = put {
                let _ = writer.abort().await;
                return Err(e.to_string());
            }
        }
        writer.shutdown().await.map_err(|e| e.to_string())
    })
    .map_err(|e| failed("upload", path, e))
}

/// How much of a file is read at a time for an upload.
const UPLOAD_CHUNK: usize = 8 << 20;

/// The files this process knows to be in the bucket: shared files of
/// incremental chains, uploaded or downloaded once.
fn known() -> std::sync::MutexGuard<'static, std::collections::HashSet<PathBuf>> {
    static KNOWN: OnceLock<Mutex<std::collections::HashSet<PathBuf>>> = OnceLock::new();
    KNOWN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Uploads a shared file of an incremental chain unless this process has
/// uploaded or downloaded it before (a chain names a file in every
/// checkpoint until it is compacted away). The local copy stays: this
/// process's later checkpoints compact it.
pub fn upload_shared(path: &Path) -> Result<()> {
    let path = &normalize(path);
    if s3_location(path).is_none() || known().contains(path) {
        return Ok(());
    }
    upload(path)?;
    known().insert(path.to_path_buf());
    Ok(())
}

/// Makes the file at `path` local: downloads it when it is a staged S3
/// location not here yet. An object that is not there is an error naming it.
pub fn fetch(path: &Path) -> Result<()> {
    let path = &normalize(path);
    if path.exists() {
        return Ok(());
    }
    let Some(remote) = remote_of(path)? else {
        return Ok(());
    };
    let bytes = block_on(async { remote.store.get(&remote.key).await?.bytes().await })
        .map_err(|e| failed("download", path, e))?;
    write_local(path, &bytes)?;
    known().insert(path.to_path_buf());
    Ok(())
}

/// Writes a downloaded file: a temporary file of its own (two subtasks may
/// download the same file at once) renamed into place, so a concurrent
/// reader sees the whole file or none.
fn write_local(path: &Path, bytes: &[u8]) -> Result<()> {
    static DOWNLOADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = path
        .parent()
        .ok_or_else(|| Error::Internal(format!("{} has no parent", path.display())))?;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let temporary = dir.join(format!(
        ".{}.{}.download",
        path.file_name().map_or("file".into(), |n| n.to_string_lossy()),
        DOWNLOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::write(&temporary, bytes).map_err(|e| Error::io(&temporary, e))?;
    std::fs::rename(&temporary, path).map_err(|e| Error::io(path, e))
}

/// The size of the file at `path`: the local copy's, else the S3 object's.
pub fn size(path: &Path) -> Result<u64> {
    let path = &normalize(path);
    match std::fs::metadata(path) {
        Ok(metadata) => Ok(metadata.len()),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(path, e)),
        Err(e) => {
            let Some(remote) = remote_of(path)? else {
                return Err(Error::io(path, e));
            };
            let meta = block_on(remote.store.head(&remote.key)).map_err(|e| failed("find", path, e))?;
            Ok(meta.size)
        }
    }
}

/// The objects under the directory `dir` (a staged S3 location): each
/// one's path relative to `dir`. `None` when `dir` is not on S3.
pub fn list(dir: &Path) -> Result<Option<Vec<String>>> {
    let Some(remote) = remote_of(dir)? else {
        return Ok(None);
    };
    let prefix = remote.key.clone();
    let objects: Vec<_> =
        block_on(remote.store.list(Some(&prefix)).try_collect()).map_err(|e| failed("list", dir, e))?;
    let relative = objects
        .into_iter()
        .filter_map(|o| {
            let parts: Vec<_> = o
                .location
                .prefix_match(&prefix)?
                .map(|p| p.as_ref().to_string())
                .collect();
            Some(parts.join("/"))
        })
        .filter(|p| !p.is_empty())
        .collect();
    Ok(Some(relative))
}

/// Downloads every checkpoint's `_metadata` under the directory `dir` (a
/// staged S3 location), so that finding checkpoints there works as on a
/// local disk; does nothing elsewhere.
pub fn fetch_metadata_under(dir: &Path) -> Result<()> {
    let Some(objects) = list(dir)? else {
        return Ok(());
    };
    let metadata = crate::checkpoint::storage::METADATA;
    for object in objects {
        if object == metadata || object.ends_with(&format!("/{metadata}")) {
            let path = dir.join(&object);
            // A checkpoint's metadata never changes once written.
            fetch(&path)?;
        }
    }
    Ok(())
}

/// Deletes the objects at `paths` (staged S3 locations) and their local
/// copies; objects already gone are no error.
pub fn delete(paths: &[PathBuf]) -> Result<()> {
    for path in paths {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Error::io(path, e)),
            _ => {}
        }
        if let Some(remote) = remote_of(path)? {
            match block_on(remote.store.delete(&remote.key)) {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(failed("delete", path, e)),
            }
        }
    }
    Ok(())
}

/// Deletes the directory `dir`: its local copy, and on S3 every object
/// under it.
pub fn remove_dir_all(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Error::io(dir, e)),
        _ => {}
    }
    if let Some(objects) = list(dir)? {
        let paths: Vec<PathBuf> = objects.iter().map(|o| dir.join(o)).collect();
        delete(&paths)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_file_paths_resolve_without_their_checkpoint_directory() {
        assert_eq!(
            normalize(Path::new("/w/s3/b/run/chk-1/../shared/op/1-1.parquet")),
            PathBuf::from("/w/s3/b/run/shared/op/1-1.parquet")
        );
        assert_eq!(normalize(Path::new("/w/./x")), PathBuf::from("/w/x"));
    }
}
