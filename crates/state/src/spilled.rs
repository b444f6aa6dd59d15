//! What every spilling operator keeps beside its memory, written once: its settings, its store once opened, when to measure memory, the keys written to the store since the last snapshot, and its snapshot runs.
//!
//! An operator's spilled state is a [`Spilled`]: this [`SpillCore`] and the
//! operator's own part (what its store keys mean, where its sweeps stand),
//! two fields so that one may be borrowed while the other changes. The operator holds it as `Option<Spilled<_>>`
//! (`None` without the spilling backend); [`SpillSlot`] answers for that
//! option what every spilling operator asks of it.

use crate::Result;
use crate::flushed::FlushedKeys;
use crate::memory_guess::MemoryGuess;
use crate::operator::SpillSettings;
use crate::store::Store;

/// The part of a spilling operator's state that every operator has.
pub struct SpillCore {
    /// Its budget and directory.
    pub settings: SpillSettings,
    /// Opened at the first spill (or restore).
    pub store: Option<Store>,
    /// When memory is measured (a measurement walks every key).
    pub guess: MemoryGuess,
    /// Incremental checkpoints: store keys written to (or removed from)
    /// the store since the last snapshot, in the operator's own terms.
    pub flushed: Option<FlushedKeys>,
    /// Snapshot runs written so far (names the next one).
    pub runs: u64,
    /// Whether its store keeps bloom filters (see [`SpillCore::for_ranges`]).
    blooms: bool,
}

impl SpillCore {
    /// The core of an operator spilling with `settings`, whose memory grows
    /// at least `least_per_row` bytes a row, noting the keys it writes for
    /// `incremental` snapshots.
    pub fn new(settings: SpillSettings, incremental: bool, least_per_row: usize) -> Self {
        SpillCore {
            settings,
            store: None,
            guess: MemoryGuess::new(least_per_row),
            flushed: incremental.then(FlushedKeys::default),
            runs: 0,
            blooms: true,
        }
    }

    /// For an operator that reads its store by ranges of keys and only
    /// looks up keys it knows are there: its store has no bloom filters,
    /// which serve lookups of missing keys only, and took 23 MB of an
    /// interval join's store under a 32 MB budget (8M entries).
    pub fn for_ranges(mut self) -> Self {
        self.blooms = false;
        self
    }

    /// Opens the store, if not open yet (a quarter of the budget is its
    /// cache: [`crate::memory_guess::spill_threshold`]).
    pub fn open_store(&mut self) -> Result<&Store> {
        if self.store.is_none() {
            let cache = self.settings.budget / 4;
            self.store = Some(Store::open_with(&self.settings.dir, cache, self.blooms)?);
        }
        Ok(self.store.as_ref().expect("opened above"))
    }

    /// Notes, for the next incremental snapshot, that the store's `key`
    /// changed (nothing without incremental snapshots).
    pub fn note(&mut self, key: &[u8]) {
        if let Some(flushed) = self.flushed.as_mut() {
            flushed.push(key);
        }
    }

    /// Memory was written to the store and emptied.
    pub fn emptied(&mut self) {
        self.guess.emptied();
    }
}

/// An operator's spilled state: the [`SpillCore`] and its own part `T`.
pub struct Spilled<T> {
    /// What every spilling operator has.
    pub core: SpillCore,
    /// The operator's own.
    pub own: T,
}

impl<T> Spilled<T> {
    /// The core and the operator's own part.
    pub fn new(core: SpillCore, own: T) -> Self {
        Spilled { core, own }
    }
}

/// What an operator asks of its spilled state, which it has only with the
/// spilling backend.
pub trait SpillSlot {
    /// The core, with the spilling backend.
    fn core(&self) -> Option<&SpillCore>;

    /// The core, with the spilling backend.
    fn core_mut(&mut self) -> Option<&mut SpillCore>;

    /// Whether state went to the store (snapshots then read it from there).
    fn has_spilled(&self) -> bool {
        self.store().is_some()
    }

    /// The store, once state went there.
    fn store(&self) -> Option<&Store> {
        self.core().and_then(|c| c.store.as_ref())
    }

    /// A new base of a snapshot chain holds every change so far: none is
    /// left for the next delta.
    fn forget_spilled_changes(&mut self) {
        if let Some(flushed) = self.core_mut().and_then(|c| c.flushed.as_mut()) {
            flushed.clear();
        }
    }
}

impl<T> SpillSlot for Option<Spilled<T>> {
    fn core(&self) -> Option<&SpillCore> {
        self.as_ref().map(|s| &s.core)
    }

    fn core_mut(&mut self) -> Option<&mut SpillCore> {
        self.as_mut().map(|s| &mut s.core)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(dir: &std::path::Path) -> SpillSettings {
        SpillSettings {
            budget: 1 << 20,
            dir: dir.to_path_buf(),
        }
    }

    #[test]
    fn a_slot_has_spilled_only_once_its_store_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        let mut slot = Some(Spilled::new(SpillCore::new(settings(dir.path()), false, 8), 7u8));
        assert!(!slot.has_spilled());
        assert_eq!(slot.as_ref().unwrap().own, 7);
        slot.core_mut().unwrap().open_store().unwrap();
        assert!(slot.has_spilled());
        let none: Option<Spilled<u8>> = None;
        assert!(!none.has_spilled() && none.store().is_none());
    }

    #[test]
    fn noted_keys_are_kept_for_incremental_snapshots_until_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let mut slot = Some(Spilled::new(SpillCore::new(settings(dir.path()), true, 8), ()));
        slot.core_mut().unwrap().note(b"k");
        assert!(!slot.core().unwrap().flushed.as_ref().unwrap().is_empty());
        slot.forget_spilled_changes();
        assert!(slot.core().unwrap().flushed.as_ref().unwrap().is_empty());

        let mut full = SpillCore::new(settings(dir.path()), false, 8);
        full.note(b"k");
        assert!(full.flushed.is_none(), "full snapshots note nothing");
    }
}
