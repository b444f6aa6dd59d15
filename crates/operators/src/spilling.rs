//! How a spilling operator joins the spilling backend, written once: [`spills_when_full!`].

/// Makes `$operator` [`weir_state::memory_guess::SpillsWhenFull`]: its
/// field `spill` (an `Option<Spilled<_>>`) holds the core, its method
/// `memory_size` measures its memory and `spill_all` writes it to the store.
macro_rules! spills_when_full {
    ($operator:ty) => {
        impl weir_state::memory_guess::SpillsWhenFull for $operator {
            fn spill_core(&mut self) -> Option<&mut weir_state::spilled::SpillCore> {
                weir_state::spilled::SpillSlot::core_mut(&mut self.spill)
            }

            fn measure(&self) -> usize {
                self.memory_size()
            }

            fn spill(&mut self) -> $crate::Result<()> {
                self.spill_all()
            }
        }
    };
}
