//! The session's settings and the keys weir reads of them (parallelism,
//! time zone, state backend, ...), with Flink's key names.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::{Error, Result};

/// `parallelism.default`: parallelism of every operator.
pub const PARALLELISM: &str = "parallelism.default";
/// `pipeline.max-parallelism`: number of key groups.
pub const MAX_PARALLELISM: &str = "pipeline.max-parallelism";
/// `pipeline.name`: the job's name.
pub const PIPELINE_NAME: &str = "pipeline.name";
/// `table.local-time-zone`: zone of `TIMESTAMP_LTZ` display and window alignment.
pub const LOCAL_TIME_ZONE: &str = "table.local-time-zone";
/// `pipeline.operator-chaining.enabled`: run forward-connected operators in one thread.
pub const OPERATOR_CHAINING: &str = "pipeline.operator-chaining.enabled";
/// `table.optimizer.agg-phase-strategy`: `AUTO`, `ONE_PHASE` or `TWO_PHASE`.
pub const AGG_PHASE_STRATEGY: &str = "table.optimizer.agg-phase-strategy";
/// `execution.buffer-timeout`: how long a source may hold a partial batch.
pub const BUFFER_TIMEOUT: &str = "execution.buffer-timeout";
/// `table.exec.source.idle-timeout`: a source subtask without data for this
/// long turns idle and stops holding back the watermark (0: never).
pub const SOURCE_IDLE_TIMEOUT: &str = "table.exec.source.idle-timeout";
/// `table.exec.state.ttl`: state of a key not updated for this long is
/// forgotten (0: kept for ever).
pub const STATE_TTL: &str = "table.exec.state.ttl";
/// `table.exec.sink.upsert-materialize`: `AUTO`, `FORCE` or `NONE`: whether a
/// sink with a primary key gets its input's changes materialized by that key.
pub const SINK_UPSERT_MATERIALIZE: &str = "table.exec.sink.upsert-materialize";
/// `table.optimizer.join.broadcast-threshold`: a regular join broadcasts
/// a bounded side estimated at most this many bytes (negative: never).
pub const BROADCAST_THRESHOLD: &str = "table.optimizer.join.broadcast-threshold";
/// Flink's default broadcast threshold, 1 MB.
pub const DEFAULT_BROADCAST_THRESHOLD: u64 = 1024 * 1024;
/// `state.backend.type`: `hashmap` (state on the heap, the default) or
/// weir's `spilling` (window aggregation state beyond a memory budget in
/// sorted Parquet runs on local disk).
pub const STATE_BACKEND: &str = "state.backend.type";
/// `taskmanager.memory.managed.size`: the memory the spilling backend's
/// state may take in this process, shared by its operator subtasks.
pub const MANAGED_MEMORY: &str = "taskmanager.memory.managed.size";
/// The spilling backend's budget when `taskmanager.memory.managed.size` is unset.
pub const DEFAULT_MANAGED_MEMORY: u64 = 512 << 20;
/// `state.backend.spilling.local-dir`: where the spilling backend writes its
/// runs (default: the system's temporary directory).
pub const SPILL_DIR: &str = "state.backend.spilling.local-dir";
/// `table.plan.force-recompile`: `COMPILE PLAN` replaces an existing plan
/// file (default false: it refuses to).
pub const PLAN_FORCE_RECOMPILE: &str = "table.plan.force-recompile";
/// `weir.batch-size`: rows per batch that sources aim for.
pub const BATCH_SIZE: &str = "weir.batch-size";
/// `weir.channel-capacity`: batches a channel holds before the sender blocks.
pub const CHANNEL_CAPACITY: &str = "weir.channel-capacity";

/// How window aggregations are split around the hash exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggPhaseStrategy {
    /// Two phases when the aggregation runs in parallel, one otherwise.
    Auto,
    /// Always aggregate after the exchange only.
    OnePhase,
    /// Always pre-aggregate before the exchange.
    TwoPhase,
}

/// When a sink with a primary key gets a `SinkMaterializer` before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpsertMaterialize {
    /// When its updating input is not keyed by (a subset of) the primary key.
    Auto,
    /// Whenever it has a primary key and takes updates.
    Force,
    /// Never.
    None,
}

/// Where keyed state lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateBackend {
    /// On the heap (Flink's `hashmap`).
    Heap,
    /// Aggregation state beyond `budget` bytes (for the whole process) in
    /// sorted runs (windows) and a key-value store (GROUP BY) under `dir`.
    Spilling {
        /// Bytes of state in memory, for all spilling subtasks together.
        budget: u64,
        /// Directory of the runs and stores.
        dir: std::path::PathBuf,
    },
}

/// The settings of a session.
#[derive(Debug, Clone, Default)]
pub struct SessionConfig {
    values: BTreeMap<String, String>,
}

impl SessionConfig {
    /// Sets `key` without checking it (for probes that check a combination).
    pub fn set_unchecked(&mut self, key: &str, value: &str) {
        self.values.insert(key.to_string(), value.to_string());
    }

    /// Removes `key`, back to its default.
    pub fn reset(&mut self, key: &str) {
        self.values.remove(key);
    }

    /// Removes every setting.
    pub fn reset_all(&mut self) {
        self.values.clear();
    }

    /// The raw value of a key, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// All explicitly set keys and values.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    fn positive(&self, key: &str, default: usize) -> Result<usize> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => match v.trim().parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(bad_value(key, v, "a positive integer")),
            },
        }
    }

    /// `parallelism.default` (default 1).
    pub fn parallelism(&self) -> Result<usize> {
        self.positive(PARALLELISM, 1)
    }

    /// `pipeline.max-parallelism`: Flink's default is
    /// `min(max(roundUpPow2(1.5 * p), 128), 32768)`.
    pub fn max_parallelism(&self) -> Result<usize> {
        let p = self.parallelism()?;
        let default = ((p + p / 2).next_power_of_two()).clamp(128, 32768);
        let max = self.positive(MAX_PARALLELISM, default)?;
        if max > 32768 {
            return Err(bad_value(MAX_PARALLELISM, &max.to_string(), "at most 32768"));
        }
        Ok(max)
    }

    /// `table.local-time-zone`, resolved: the system's zone when unset.
    pub fn local_time_zone(&self) -> Result<String> {
        match self.get(LOCAL_TIME_ZONE) {
            None | Some("default") => Ok(system_time_zone()),
            Some(zone) => {
                if zone.parse::<chrono_tz::Tz>().is_ok() {
                    Ok(zone.to_string())
                } else if let Some(offset) = normalize_offset(zone) {
                    Ok(offset)
                } else {
                    Err(bad_value(
                        LOCAL_TIME_ZONE,
                        zone,
                        "a zone id such as 'UTC', 'Europe/Berlin' or 'GMT+08:00'",
                    ))
                }
            }
        }
    }

    /// `pipeline.operator-chaining.enabled` (default true).
    pub fn operator_chaining(&self) -> Result<bool> {
        self.boolean(OPERATOR_CHAINING, true)
    }

    /// `table.plan.force-recompile` (default false).
    pub fn plan_force_recompile(&self) -> Result<bool> {
        self.boolean(PLAN_FORCE_RECOMPILE, false)
    }

    fn boolean(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key).map(str::to_ascii_lowercase).as_deref() {
            None => Ok(default),
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(v) => Err(bad_value(key, v, "true or false")),
        }
    }

    /// `table.exec.sink.upsert-materialize` (default AUTO).
    pub fn sink_upsert_materialize(&self) -> Result<UpsertMaterialize> {
        match self
            .get(SINK_UPSERT_MATERIALIZE)
            .map(str::to_ascii_uppercase)
            .as_deref()
        {
            None | Some("AUTO") => Ok(UpsertMaterialize::Auto),
            Some("FORCE") => Ok(UpsertMaterialize::Force),
            Some("NONE") => Ok(UpsertMaterialize::None),
            Some(v) => Err(bad_value(SINK_UPSERT_MATERIALIZE, v, "AUTO, FORCE or NONE")),
        }
    }

    /// `table.optimizer.agg-phase-strategy` (default AUTO).
    pub fn agg_phase_strategy(&self) -> Result<AggPhaseStrategy> {
        match self
            .get(AGG_PHASE_STRATEGY)
            .map(str::to_ascii_uppercase)
            .as_deref()
        {
            None | Some("AUTO") => Ok(AggPhaseStrategy::Auto),
            Some("ONE_PHASE") => Ok(AggPhaseStrategy::OnePhase),
            Some("TWO_PHASE") => Ok(AggPhaseStrategy::TwoPhase),
            Some(v) => Err(bad_value(AGG_PHASE_STRATEGY, v, "AUTO, ONE_PHASE or TWO_PHASE")),
        }
    }

    /// `execution.buffer-timeout` (default 10 ms).
    pub fn buffer_timeout(&self) -> Result<Duration> {
        match self.get(BUFFER_TIMEOUT) {
            None => Ok(Duration::from_millis(10)),
            Some(v) => {
                parse_duration(v).ok_or_else(|| bad_value(BUFFER_TIMEOUT, v, "a duration such as '10 ms'"))
            }
        }
    }

    /// `table.exec.source.idle-timeout` (default 0: sources never turn idle).
    pub fn source_idle_timeout(&self) -> Result<Option<Duration>> {
        match self.get(SOURCE_IDLE_TIMEOUT) {
            None => Ok(None),
            Some(v) => match parse_duration(v) {
                Some(d) if d.is_zero() => Ok(None),
                Some(d) => Ok(Some(d)),
                None => Err(bad_value(
                    SOURCE_IDLE_TIMEOUT,
                    v,
                    "a duration such as '5 s' (0 turns it off)",
                )),
            },
        }
    }

    /// `table.optimizer.join.broadcast-threshold` in bytes (default 1 MB);
    /// `None` when negative (no join is broadcast).
    pub fn broadcast_threshold(&self) -> Result<Option<u64>> {
        match self.get(BROADCAST_THRESHOLD) {
            None => Ok(Some(DEFAULT_BROADCAST_THRESHOLD)),
            Some(v) => match v.trim().parse::<i64>() {
                Ok(n) if n < 0 => Ok(None),
                Ok(n) => Ok(Some(n as u64)),
                Err(_) => Err(bad_value(
                    BROADCAST_THRESHOLD,
                    v,
                    "a number of bytes (-1: never broadcast)",
                )),
            },
        }
    }

    /// `table.exec.state.ttl` (default 0: state is kept for ever).
    pub fn state_ttl(&self) -> Result<Option<Duration>> {
        match self.get(STATE_TTL) {
            None => Ok(None),
            Some(v) => match parse_duration(v) {
                Some(d) if d.is_zero() => Ok(None),
                Some(d) => Ok(Some(d)),
                None => Err(bad_value(
                    STATE_TTL,
                    v,
                    "a duration such as '1 h' (0 keeps state for ever)",
                )),
            },
        }
    }

    /// `state.backend.type` with its budget and directory (default: the heap).
    pub fn state_backend(&self) -> Result<StateBackend> {
        let budget = match self.get(MANAGED_MEMORY) {
            None => DEFAULT_MANAGED_MEMORY,
            Some(v) => match parse_memory_size(v) {
                Some(n) if n > 0 => n,
                _ => {
                    return Err(bad_value(
                        MANAGED_MEMORY,
                        v,
                        "a memory size such as '1 gb' or '512mb'",
                    ));
                }
            },
        };
        let kind = self.get(STATE_BACKEND).map(|v| v.trim().to_ascii_lowercase());
        match kind.as_deref() {
            None | Some("hashmap") => Ok(StateBackend::Heap),
            Some("spilling") => Ok(StateBackend::Spilling {
                budget,
                dir: self
                    .get(SPILL_DIR)
                    .map(std::path::PathBuf::from)
                    .unwrap_or_else(std::env::temp_dir),
            }),
            Some("rocksdb" | "forst") => Err(bad_value(
                STATE_BACKEND,
                kind.as_deref().unwrap_or_default(),
                "'hashmap' or 'spilling': weir has no RocksDB; 'spilling' keeps window \
                 aggregation state beyond 'taskmanager.memory.managed.size' on local disk",
            )),
            Some(v) => Err(bad_value(STATE_BACKEND, v, "'hashmap' or 'spilling'")),
        }
    }

    /// `weir.batch-size` (default 8192).
    pub fn batch_size(&self) -> Result<usize> {
        self.positive(BATCH_SIZE, 8192)
    }

    /// `weir.channel-capacity` (default 8 batches).
    pub fn channel_capacity(&self) -> Result<usize> {
        self.positive(CHANNEL_CAPACITY, 8)
    }

    /// `pipeline.name`, if set.
    pub fn pipeline_name(&self) -> Option<&str> {
        self.get(PIPELINE_NAME)
    }
}

fn bad_value(key: &str, value: &str, expected: &str) -> Error {
    Error::sql(format!(
        "invalid value '{value}' for '{key}': expected {expected}"
    ))
}

/// The zone of this machine: `TZ`, else `/etc/timezone`, else the
/// `/etc/localtime` link, else UTC.
pub fn system_time_zone() -> String {
    let candidates = [
        std::env::var("TZ")
            .ok()
            .map(|z| z.trim_start_matches(':').to_string()),
        std::fs::read_to_string("/etc/timezone")
            .ok()
            .map(|z| z.trim().to_string()),
        std::fs::read_link("/etc/localtime").ok().and_then(|p| {
            let p = p.to_string_lossy().to_string();
            p.split("zoneinfo/").nth(1).map(str::to_string)
        }),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|z| z.parse::<chrono_tz::Tz>().is_ok())
        .unwrap_or_else(|| "UTC".to_string())
}

/// Turns Flink's `GMT+08:00` / `UTC-5` / `+08:00` into Arrow's `+08:00`.
fn normalize_offset(zone: &str) -> Option<String> {
    let rest = zone
        .strip_prefix("GMT")
        .or_else(|| zone.strip_prefix("UTC"))
        .unwrap_or(zone);
    let (sign, rest) = match rest.chars().next()? {
        '+' => ('+', &rest[1..]),
        '-' => ('-', &rest[1..]),
        _ => return None,
    };
    let (hours, minutes) = match rest.split_once(':') {
        Some((h, m)) => (h.parse::<u32>().ok()?, m.parse::<u32>().ok()?),
        None => (rest.parse::<u32>().ok()?, 0),
    };
    (hours <= 18 && minutes < 60).then(|| format!("{sign}{hours:02}:{minutes:02}"))
}

/// Parses Flink memory sizes: `128mb`, `1 gb`, `512kb`, `4096` (bytes).
pub fn parse_memory_size(text: &str) -> Option<u64> {
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

/// Parses Flink durations: `10 s`, `200ms`, `1 min`, `5000` (milliseconds).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let millis = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => n,
        "s" | "sec" | "secs" | "second" | "seconds" => n.checked_mul(1000)?,
        "m" | "min" | "mins" | "minute" | "minutes" => n.checked_mul(60_000)?,
        "h" | "hour" | "hours" => n.checked_mul(3_600_000)?,
        "d" | "day" | "days" => n.checked_mul(86_400_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_fail_at_set_and_leave_the_config_unchanged() {
        let mut config = SessionConfig::default();
        config.set(PARALLELISM, "4").unwrap();
        let err = config.set(PARALLELISM, "zero").unwrap_err().to_string();
        assert!(err.contains("parallelism.default"), "{err}");
        assert_eq!(config.parallelism().unwrap(), 4);
        assert!(config.set(LOCAL_TIME_ZONE, "Mars/Olympus").is_err());
        config.set("some.unknown.key", "anything").unwrap();
    }

    #[test]
    fn max_parallelism_follows_flinks_default() {
        let mut config = SessionConfig::default();
        assert_eq!(config.max_parallelism().unwrap(), 128);
        config.set(PARALLELISM, "200").unwrap();
        assert_eq!(config.max_parallelism().unwrap(), 512);
    }

    #[test]
    fn time_zones_accept_ids_and_offsets() {
        let mut config = SessionConfig::default();
        config.set(LOCAL_TIME_ZONE, "Asia/Shanghai").unwrap();
        assert_eq!(config.local_time_zone().unwrap(), "Asia/Shanghai");
        config.set(LOCAL_TIME_ZONE, "GMT+08:00").unwrap();
        assert_eq!(config.local_time_zone().unwrap(), "+08:00");
    }

    #[test]
    fn durations_parse_with_flink_units() {
        assert_eq!(parse_duration("200 ms"), Some(Duration::from_millis(200)));
        assert_eq!(parse_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_duration("2 min"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("5000"), Some(Duration::from_millis(5000)));
        assert_eq!(parse_duration("soon"), None);
    }
}
