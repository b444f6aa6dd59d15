//! Checkpoint settings, read from the session with Flink's keys.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::config::session::{SessionConfig, parse_duration};
use crate::{Error, Result};

/// `execution.checkpointing.interval`: checkpoints are on when set.
pub const INTERVAL: &str = "execution.checkpointing.interval";
/// `execution.checkpointing.dir`: where checkpoints go (a path or `file://` URI).
pub const DIR: &str = "execution.checkpointing.dir";
/// `execution.checkpointing.timeout` (default 10 min).
pub const TIMEOUT: &str = "execution.checkpointing.timeout";
/// `execution.checkpointing.min-pause` (default 0).
pub const MIN_PAUSE: &str = "execution.checkpointing.min-pause";
/// `execution.checkpointing.max-concurrent-checkpoints` (default 1).
pub const MAX_CONCURRENT: &str = "execution.checkpointing.max-concurrent-checkpoints";
/// `execution.checkpointing.tolerable-failed-checkpoints` (default 0).
pub const TOLERABLE_FAILURES: &str = "execution.checkpointing.tolerable-failed-checkpoints";
/// `execution.checkpointing.num-retained` (default 1).
pub const NUM_RETAINED: &str = "execution.checkpointing.num-retained";
/// `execution.checkpointing.unaligned.enabled` (default false): barriers
/// overtake the data in front of them, which is saved as channel state.
pub const UNALIGNED: &str = "execution.checkpointing.unaligned.enabled";
/// `execution.checkpointing.aligned-checkpoint-timeout` (default 0): with
/// unaligned checkpoints, align first and switch to unaligned after this long.
pub const ALIGNED_TIMEOUT: &str = "execution.checkpointing.aligned-checkpoint-timeout";
/// `execution.checkpointing.mode` (`EXACTLY_ONCE`, the default).
pub const MODE: &str = "execution.checkpointing.mode";
/// `execution.checkpointing.savepoint-dir` (Flink 2's key): where savepoints
/// go, `savepoint-<job name>-<n>/`; default `<checkpoint dir>/savepoints`.
pub const SAVEPOINT_DIR: &str = "execution.checkpointing.savepoint-dir";
/// `execution.savepoint.path`: restore from this checkpoint, savepoint or job directory.
pub const SAVEPOINT_PATH: &str = "execution.savepoint.path";
/// `execution.checkpointing.incremental` (Flink's key, default false): a
/// checkpoint writes the state that changed since the previous one.
pub const INCREMENTAL: &str = "execution.checkpointing.incremental";
/// `execution.checkpointing.incremental.max-deltas` (weir's, default 8):
/// deltas after which a subtask's state files are compacted into a new base.
pub const MAX_DELTAS: &str = "execution.checkpointing.incremental.max-deltas";
/// `restart-strategy.type`: `fixed-delay` (the default with checkpoints) or `none`.
pub const RESTART_STRATEGY: &str = "restart-strategy.type";
/// `restart-strategy.fixed-delay.attempts` (default: unlimited with checkpoints).
pub const RESTART_ATTEMPTS: &str = "restart-strategy.fixed-delay.attempts";
/// `restart-strategy.fixed-delay.delay` (default 1 s).
pub const RESTART_DELAY: &str = "restart-strategy.fixed-delay.delay";

/// The keys this module reads, for validation at `SET`.
pub const KEYS: [&str; 17] = [
    INTERVAL,
    INCREMENTAL,
    MAX_DELTAS,
    UNALIGNED,
    ALIGNED_TIMEOUT,
    DIR,
    SAVEPOINT_DIR,
    TIMEOUT,
    MIN_PAUSE,
    MAX_CONCURRENT,
    TOLERABLE_FAILURES,
    NUM_RETAINED,
    MODE,
    SAVEPOINT_PATH,
    RESTART_STRATEGY,
    RESTART_ATTEMPTS,
    RESTART_DELAY,
];

/// `execution.checkpointing.mode`: whether tasks align barriers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CheckpointingMode {
    /// Barriers are aligned: a restore neither loses nor repeats a record's effect.
    #[default]
    ExactlyOnce,
    /// Barriers are not aligned: no waiting, but records that arrived behind
    /// an early barrier are in the snapshot and are replayed after a restore.
    AtLeastOnce,
}

/// How checkpoints are taken.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointConfig {
    /// Exactly-once (aligned) or at-least-once.
    pub mode: CheckpointingMode,
    /// Unaligned checkpoints (exactly-once): barriers overtake data.
    pub unaligned: bool,
    /// With `unaligned`: align first, and switch to unaligned when the
    /// alignment has taken this long (zero: unaligned at once).
    pub aligned_timeout: Duration,
    /// Time between triggers of periodic checkpoints; `None`: only savepoints
    /// (and the final checkpoint of a bounded job) are taken.
    pub interval: Option<Duration>,
    /// The checkpoint directory (jobs get a subdirectory each).
    pub dir: PathBuf,
    /// Where savepoints go.
    pub savepoint_dir: PathBuf,
    /// A checkpoint not complete after this long is aborted.
    pub timeout: Duration,
    /// At least this long between the end of one checkpoint and the next trigger.
    pub min_pause: Duration,
    /// Checkpoints in flight at once.
    pub max_concurrent: usize,
    /// Failed checkpoints in a row the job tolerates before it fails.
    pub tolerable_failures: u32,
    /// Complete checkpoints kept.
    pub num_retained: usize,
    /// Incremental checkpoints: operators that can write only what changed.
    pub incremental: bool,
    /// Incremental checkpoints: deltas before a compaction.
    pub max_deltas: usize,
}

/// What happens when a task fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartStrategy {
    /// The job fails with the task's error.
    None,
    /// Restart from the latest complete checkpoint after `delay`, at most
    /// `attempts` times.
    FixedDelay {
        /// Restarts allowed.
        attempts: u32,
        /// Wait before each restart.
        delay: Duration,
    },
}

fn bad_value(key: &str, value: &str, expected: &str) -> Error {
    Error::sql(format!(
        "invalid value '{value}' for '{key}': expected {expected}"
    ))
}

fn duration(config: &SessionConfig, key: &str, default: Duration) -> Result<Duration> {
    match config.get(key) {
        None => Ok(default),
        Some(v) => parse_duration(v).ok_or_else(|| bad_value(key, v, "a duration such as '1 s' or '500 ms'")),
    }
}

fn number<T>(config: &SessionConfig, key: &str, default: T, min: T) -> Result<T>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
{
    match config.get(key) {
        None => Ok(default),
        Some(v) => match v.trim().parse::<T>() {
            Ok(n) if n >= min => Ok(n),
            _ => Err(bad_value(key, v, &format!("an integer of at least {min}"))),
        },
    }
}

/// A path option: a plain path, a `file://` URI, or an `s3://bucket/key`
/// URI. An S3 location maps to a directory of this process's staging root
/// (`<staging root>/s3/<bucket>/<key>`): checkpoint files are written
/// there and uploaded, and read from there once downloaded
/// (`weir_state::checkpoint::remote`).
pub fn path_option(value: &str) -> Result<PathBuf> {
    let value = value.trim();
    if let Some(path) = value.strip_prefix("file://") {
        return Ok(PathBuf::from(path));
    }
    if let Some(location) = value.strip_prefix("s3://") {
        let (bucket, key) = location.split_once('/').unwrap_or((location, ""));
        let key = key.trim_matches('/');
        if bucket.is_empty() || key.split('/').any(|part| part == ".." || part == ".") {
            return Err(Error::sql(format!(
                "invalid S3 location '{value}': expected s3://<bucket>/<key>"
            )));
        }
        return Ok(staging_root().join(S3_DIR).join(bucket).join(key));
    }
    if let Some((scheme, _)) = value.split_once("://") {
        return Err(Error::sql(format!(
            "unsupported file system '{scheme}://' in '{value}': use a path, file:// or s3://"
        )));
    }
    Ok(PathBuf::from(value))
}

/// The environment variable that sets a process's staging root (Flink's
/// `io.tmp.dirs`); by default a directory of its own under the system's
/// temporary directory, so that processes on one machine never read each
/// other's copies.
pub const STAGING_ROOT_ENV: &str = "WEIR_WORKING_DIR";

/// The staging root's subdirectory that mirrors S3 buckets.
const S3_DIR: &str = "s3";

/// Where this process stages the files of `s3://` locations.
pub fn staging_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| match std::env::var_os(STAGING_ROOT_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => std::env::temp_dir().join(format!("weir-working-{}", std::process::id())),
    })
}

/// The S3 bucket and key a staged path stands for (the inverse of
/// [`path_option`]); `None` for a path outside the staging root's `s3/`.
pub fn s3_location(path: &Path) -> Option<(String, String)> {
    s3_location_in(staging_root(), path)
}

fn s3_location_in(root: &Path, path: &Path) -> Option<(String, String)> {
    let rest = path.strip_prefix(root.join(S3_DIR)).ok()?;
    let mut parts = rest
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned());
    let bucket = parts.next()?;
    Some((bucket, parts.collect::<Vec<_>>().join("/")))
}

/// A path as the user gave it: `s3://bucket/key` for a staged S3 location,
/// else the path itself.
pub fn display_path(path: &Path) -> String {
    match s3_location(path) {
        Some((bucket, key)) if key.is_empty() => format!("s3://{bucket}"),
        Some((bucket, key)) => format!("s3://{bucket}/{key}"),
        None => path.display().to_string(),
    }
}

impl CheckpointConfig {
    /// The checkpoint settings of a session; `None` when the job cannot
    /// snapshot at all. Periodic checkpoints need an interval and a
    /// directory; a checkpoint or savepoint directory alone lets the job take
    /// savepoints.
    pub fn from_session(config: &SessionConfig) -> Result<Option<Self>> {
        // Validate every key even when checkpoints are off, so a typo is caught at SET.
        let timeout = duration(config, TIMEOUT, Duration::from_secs(600))?;
        let min_pause = duration(config, MIN_PAUSE, Duration::ZERO)?;
        let max_concurrent = number(config, MAX_CONCURRENT, 1usize, 1)?;
        let tolerable_failures = number(config, TOLERABLE_FAILURES, 0u32, 0)?;
        let num_retained = number(config, NUM_RETAINED, 1usize, 1)?;
        let mode = match config.get(MODE).map(|m| m.trim().to_ascii_uppercase()) {
            None => CheckpointingMode::ExactlyOnce,
            Some(m) if m == "EXACTLY_ONCE" => CheckpointingMode::ExactlyOnce,
            Some(m) if m == "AT_LEAST_ONCE" => CheckpointingMode::AtLeastOnce,
            Some(m) => return Err(bad_value(MODE, &m, "EXACTLY_ONCE or AT_LEAST_ONCE")),
        };
        let unaligned = match config.get(UNALIGNED).map(|v| v.trim().to_ascii_lowercase()) {
            None => false,
            Some(v) if v == "true" => true,
            Some(v) if v == "false" => false,
            Some(v) => return Err(bad_value(UNALIGNED, &v, "true or false")),
        };
        if unaligned && mode == CheckpointingMode::AtLeastOnce {
            return Err(Error::sql(format!(
                "'{UNALIGNED}' needs '{MODE}' = 'EXACTLY_ONCE' (at-least-once checkpoints are never aligned)"
            )));
        }
        let aligned_timeout = duration(config, ALIGNED_TIMEOUT, Duration::ZERO)?;
        let incremental = match config.get(INCREMENTAL).map(|v| v.trim().to_ascii_lowercase()) {
            None => false,
            Some(v) if v == "true" => true,
            Some(v) if v == "false" => false,
            Some(v) => return Err(bad_value(INCREMENTAL, &v, "true or false")),
        };
        let max_deltas = number(config, MAX_DELTAS, 8usize, 1)?;
        let interval = match config.get(INTERVAL) {
            None => None,
            Some(interval) => Some(
                parse_duration(interval)
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| bad_value(INTERVAL, interval, "a positive duration such as '1 s'"))?,
            ),
        };
        let path = |key: &str| {
            config
                .get(key)
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(path_option)
                .transpose()
        };
        let (dir, savepoint_dir) = match (path(DIR)?, path(SAVEPOINT_DIR)?) {
            (Some(dir), savepoints) => {
                let savepoints = savepoints.unwrap_or_else(|| dir.join("savepoints"));
                (dir, savepoints)
            }
            (None, _) if interval.is_some() => {
                return Err(Error::sql(format!(
                    "'{INTERVAL}' is set but '{DIR}' is not: say where checkpoints go, \
                     e.g. SET '{DIR}' = 'file:///tmp/checkpoints'"
                )));
            }
            // Savepoints only: the final checkpoint of a bounded job goes there too.
            (None, Some(savepoints)) => (savepoints.clone(), savepoints),
            (None, None) => return Ok(None),
        };
        Ok(Some(CheckpointConfig {
            mode,
            unaligned,
            aligned_timeout,
            interval,
            dir,
            savepoint_dir,
            timeout,
            min_pause,
            max_concurrent,
            tolerable_failures,
            num_retained,
            incremental,
            max_deltas,
        }))
    }
}

impl RestartStrategy {
    /// The restart strategy of a session: Flink's default is `fixed-delay` with
    /// unlimited attempts and 1 s delay when checkpoints are on, `none` otherwise.
    pub fn from_session(config: &SessionConfig, checkpointing: bool) -> Result<Self> {
        let delay = duration(config, RESTART_DELAY, Duration::from_secs(1))?;
        let attempts = number(config, RESTART_ATTEMPTS, u32::MAX, 0)?;
        let kind = config
            .get(RESTART_STRATEGY)
            .map(|k| k.trim().to_ascii_lowercase().replace('_', "-"));
        match kind.as_deref() {
            None if checkpointing => Ok(RestartStrategy::FixedDelay { attempts, delay }),
            None | Some("none" | "off" | "disable") => Ok(RestartStrategy::None),
            Some("fixed-delay" | "fixeddelay") => Ok(RestartStrategy::FixedDelay { attempts, delay }),
            Some(other) => Err(bad_value(RESTART_STRATEGY, other, "fixed-delay or none")),
        }
    }
}

/// Checks the value of a checkpoint or restart key at `SET`.
pub fn validate(config: &SessionConfig) -> Result<()> {
    if config.get(INTERVAL).is_some() && config.get(DIR).is_none() {
        // The directory may be set next; check the interval alone.
        let mut probe = config.clone();
        probe.set_unchecked(DIR, "/");
        CheckpointConfig::from_session(&probe)?;
    } else {
        CheckpointConfig::from_session(config)?;
    }
    RestartStrategy::from_session(config, true).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(pairs: &[(&str, &str)]) -> SessionConfig {
        let mut config = SessionConfig::default();
        for (k, v) in pairs {
            config.set(k, v).unwrap();
        }
        config
    }

    #[test]
    fn checkpoints_are_off_without_an_interval() {
        assert_eq!(CheckpointConfig::from_session(&session(&[])).unwrap(), None);
    }

    #[test]
    fn flink_keys_and_defaults_are_read() {
        let config = session(&[
            (INTERVAL, "200 ms"),
            (DIR, "file:///tmp/ckpt"),
            (NUM_RETAINED, "3"),
        ]);
        let c = CheckpointConfig::from_session(&config).unwrap().unwrap();
        assert_eq!(c.interval, Some(Duration::from_millis(200)));
        assert_eq!(c.dir, PathBuf::from("/tmp/ckpt"));
        assert_eq!(c.savepoint_dir, PathBuf::from("/tmp/ckpt/savepoints"));
        assert_eq!(c.timeout, Duration::from_secs(600));
        assert_eq!(
            (c.max_concurrent, c.tolerable_failures, c.num_retained),
            (1, 0, 3)
        );
        assert_eq!(
            RestartStrategy::from_session(&config, true).unwrap(),
            RestartStrategy::FixedDelay {
                attempts: u32::MAX,
                delay: Duration::from_secs(1)
            }
        );
        assert_eq!(
            RestartStrategy::from_session(&config, false).unwrap(),
            RestartStrategy::None
        );
    }

    #[test]
    fn bad_values_are_refused_at_set() {
        let mut config = SessionConfig::default();
        let err = config.set(INTERVAL, "soon").unwrap_err().to_string();
        assert!(err.contains(INTERVAL), "{err}");
        assert!(config.set(MAX_CONCURRENT, "0").is_err());
        assert!(config.set(RESTART_STRATEGY, "exponential-backoff").is_err());
        assert!(config.set(MODE, "at_least_once").is_ok());
        assert!(config.set(MODE, "AT_MOST_ONCE").is_err());
        assert!(config.set(UNALIGNED, "yes").is_err());
        assert!(config.set(UNALIGNED, "true").is_err(), "not with at-least-once");
        config.set(MODE, "EXACTLY_ONCE").unwrap();
        assert!(config.set(UNALIGNED, "true").is_ok());
        assert!(config.set(ALIGNED_TIMEOUT, "30 s").is_ok());
    }

    #[test]
    fn a_savepoint_directory_alone_allows_savepoints_without_periodic_checkpoints() {
        let c = CheckpointConfig::from_session(&session(&[(SAVEPOINT_DIR, "/tmp/sp")]))
            .unwrap()
            .unwrap();
        assert_eq!(c.interval, None);
        assert_eq!(c.savepoint_dir, PathBuf::from("/tmp/sp"));
        let c = CheckpointConfig::from_session(&session(&[(DIR, "/tmp/ck"), (SAVEPOINT_DIR, "/tmp/sp")]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.dir, c.savepoint_dir),
            (PathBuf::from("/tmp/ck"), PathBuf::from("/tmp/sp"))
        );
    }

    #[test]
    fn an_interval_without_a_directory_is_an_error_naming_the_key() {
        let err = CheckpointConfig::from_session(&session(&[(INTERVAL, "1 s")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(DIR), "{err}");
    }

    #[test]
    fn an_s3_location_maps_to_the_staging_root_and_back() {
        let staged = path_option("s3://bucket/ckpt/").unwrap();
        assert_eq!(staged, staging_root().join("s3/bucket/ckpt"));
        assert_eq!(
            s3_location(&staged.join("job/chk-1")),
            Some(("bucket".into(), "ckpt/job/chk-1".into()))
        );
        assert_eq!(display_path(&staged), "s3://bucket/ckpt");
        assert_eq!(
            s3_location_in(Path::new("/w"), Path::new("/w/s3/b")),
            Some(("b".into(), String::new()))
        );
        assert_eq!(s3_location(Path::new("/tmp/ckpt")), None);
        assert_eq!(display_path(Path::new("/tmp/ckpt")), "/tmp/ckpt");
    }

    #[test]
    fn unknown_file_systems_and_bad_s3_locations_are_refused_naming_the_value() {
        assert_eq!(path_option("file:///tmp/c").unwrap(), PathBuf::from("/tmp/c"));
        let err = path_option("hdfs://nn/ckpt").unwrap_err().to_string();
        assert!(err.contains("hdfs://") && err.contains("s3://"), "{err}");
        assert!(path_option("s3:///key").is_err());
        assert!(path_option("s3://b/a/../c").is_err());
        let mut config = SessionConfig::default();
        assert!(config.set(DIR, "gs://bucket/ckpt").is_err());
    }
}
