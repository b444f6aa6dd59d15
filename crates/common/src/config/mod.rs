//! Session configuration: the `SET 'key' = 'value'` settings, with Flink's key names.
//!
//! Every key may be set (Flink accepts any key and keeps it); the keys weir reads
//! are checked when they are set, so a bad value fails at the `SET`, not later:
//! the session's own keys ([`session`]) and the checkpoint's ([`checkpoint`]).

pub mod checkpoint;
mod session;

pub use session::*;

use crate::Result;

impl SessionConfig {
    /// Sets `key` after checking the value of keys weir reads.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let mut next = self.clone();
        next.set_unchecked(key, value);
        next.validate(key)?;
        *self = next;
        Ok(())
    }

    fn validate(&self, key: &str) -> Result<()> {
        match key {
            PARALLELISM => self.parallelism().map(drop),
            MAX_PARALLELISM => self.max_parallelism().map(drop),
            LOCAL_TIME_ZONE => self.local_time_zone().map(drop),
            OPERATOR_CHAINING => self.operator_chaining().map(drop),
            PLAN_FORCE_RECOMPILE => self.plan_force_recompile().map(drop),
            AGG_PHASE_STRATEGY => self.agg_phase_strategy().map(drop),
            SINK_UPSERT_MATERIALIZE => self.sink_upsert_materialize().map(drop),
            BUFFER_TIMEOUT => self.buffer_timeout().map(drop),
            SOURCE_IDLE_TIMEOUT => self.source_idle_timeout().map(drop),
            STATE_TTL => self.state_ttl().map(drop),
            BROADCAST_THRESHOLD => self.broadcast_threshold().map(drop),
            STATE_BACKEND | MANAGED_MEMORY | SPILL_DIR => self.state_backend().map(drop),
            BATCH_SIZE => self.batch_size().map(drop),
            CHANNEL_CAPACITY => self.channel_capacity().map(drop),
            key if checkpoint::KEYS.contains(&key) => checkpoint::validate(self),
            _ => Ok(()),
        }
    }
}
