//! When a spilling operator measures the memory its state takes: when a guess from the growth last measured says it may have passed its threshold.
//!
//! Measuring walks every key in memory, too slow for every batch of a large
//! budget; measuring every n batches lets memory pass the threshold by n
//! batches of growth (twice the budget in the join's first test). The guess
//! adds a cost per row to the last measurement: twice the growth per row
//! seen between the last two measurements, at least an operator's floor
//! (growth is lumpy: a hash table grows its slots twofold at once).

/// Bytes a row is guessed to add before anything was measured.
const FIRST_GUESS_PER_ROW: usize = 1024;

/// The guess of one operator subtask.
#[derive(Debug, Clone)]
pub struct MemoryGuess {
    /// Bytes at the last measurement (0 after memory was emptied).
    measured: usize,
    /// Rows processed since.
    rows_since: usize,
    /// Bytes a row is guessed to add.
    per_row: usize,
    /// The least a row is guessed to add.
    least_per_row: usize,
}

impl MemoryGuess {
    /// A guess whose cost per row is never below `least_per_row` bytes.
    pub fn new(least_per_row: usize) -> Self {
        MemoryGuess {
            measured: 0,
            rows_since: 0,
            per_row: FIRST_GUESS_PER_ROW.max(least_per_row),
            least_per_row,
        }
    }

    /// After `rows` more rows: whether memory may have passed `threshold`
    /// bytes (then measure it, and say so with [`MemoryGuess::measured`]).
    pub fn may_pass(&mut self, rows: usize, threshold: usize) -> bool {
        self.rows_since += rows;
        self.measured + self.rows_since * self.per_row > threshold
    }

    /// Memory was measured at `size` bytes.
    pub fn measured(&mut self, size: usize) {
        let grown = size.saturating_sub(self.measured);
        if let Some(per_row) = (2 * grown).checked_div(self.rows_since) {
            self.per_row = per_row.max(self.least_per_row);
        }
        (self.measured, self.rows_since) = (size, 0);
    }

    /// Memory was emptied (its state written out).
    pub fn emptied(&mut self) {
        (self.measured, self.rows_since) = (0, 0);
    }
}

/// The bytes of state in memory past which an operator with `budget` bytes
/// writes it to its store: a quarter. Its hash tables grow their slots
/// twofold at once, holding old and new slots while they move, so a state
/// just under a quarter may take three quarters for a moment; the store
/// has the last quarter ([`crate::spilled::SpillCore::open_store`]).
pub fn spill_threshold(budget: usize) -> usize {
    budget / 4
}

/// An operator that writes its state to its store when memory passes
/// [`spill_threshold`]: when to measure and when to spill, decided here once.
pub trait SpillsWhenFull {
    /// Its spilled state's core; `None` without the spilling backend.
    fn spill_core(&mut self) -> Option<&mut crate::spilled::SpillCore>;

    /// Bytes its state takes in memory (a measurement, which may walk it).
    fn measure(&self) -> usize;

    /// Writes memory to the store and empties it.
    fn spill(&mut self) -> crate::Result<()>;

    /// After a batch of `rows` rows: spills when memory holds more than
    /// [`spill_threshold`], measured only when the guess says it may.
    fn spill_if_full(&mut self, rows: usize) -> crate::Result<()> {
        match (self.spill_core())
            .is_some_and(|core| core.guess.may_pass(rows, spill_threshold(core.settings.budget)))
        {
            true => self.spill_if_over(),
            false => Ok(()),
        }
    }

    /// Measures memory, and spills when it holds more than [`spill_threshold`].
    fn spill_if_over(&mut self) -> crate::Result<()> {
        if self.spill_core().is_none() {
            return Ok(());
        }
        let size = self.measure();
        let Some(core) = self.spill_core() else {
            return Ok(());
        };
        core.guess.measured(size);
        match size > spill_threshold(core.settings.budget) {
            true => self.spill(),
            false => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_measured_again_only_when_the_growth_seen_could_reach_the_threshold() {
        let mut guess = MemoryGuess::new(10);
        assert!(!guess.may_pass(900, 1_000_000), "900 rows at 1 kB each");
        assert!(guess.may_pass(100, 1_000_000));
        // 1000 rows took 100 kB: a row is guessed at 200 bytes from now on.
        guess.measured(100_000);
        assert!(!guess.may_pass(4_000, 1_000_000));
        assert!(guess.may_pass(600, 1_000_000), "100 kB + 4600 * 200 B");
    }

    #[test]
    fn lumpy_growth_is_guessed_at_no_less_than_the_floor_and_emptied_memory_starts_from_nothing() {
        let mut guess = MemoryGuess::new(100);
        guess.may_pass(1_000, 1_000_000);
        guess.measured(500_000);
        // 8192 rows that filled slots grown before: nearly nothing added.
        guess.may_pass(8_192, 1_000_000);
        guess.measured(500_100);
        assert!(
            guess.may_pass(5_000, 1_000_000),
            "still 100 B a row: 500 kB + 5000 * 100 B"
        );
        guess.emptied();
        assert!(!guess.may_pass(9_000, 1_000_000));
    }

    /// State of a given size that counts its measurements and spills.
    struct Growing {
        core: crate::spilled::SpillCore,
        size: usize,
        measurements: std::cell::Cell<usize>,
        spills: usize,
    }

    impl SpillsWhenFull for Growing {
        fn spill_core(&mut self) -> Option<&mut crate::spilled::SpillCore> {
            Some(&mut self.core)
        }

        fn measure(&self) -> usize {
            self.measurements.set(self.measurements.get() + 1);
            self.size
        }

        fn spill(&mut self) -> crate::Result<()> {
            self.spills += 1;
            self.size = 0;
            self.core.emptied();
            Ok(())
        }
    }

    #[test]
    fn state_spills_when_a_measurement_finds_it_past_a_quarter_of_the_budget_and_is_measured_only_when_it_may_be()
     {
        let settings = crate::operator::SpillSettings {
            budget: 100_000,
            dir: Default::default(),
        };
        let mut state = Growing {
            core: crate::spilled::SpillCore::new(settings, false, 10),
            size: 0,
            measurements: Default::default(),
            spills: 0,
        };
        let mut largest = 0;
        // 200 batches of 10 rows of 100 bytes: 200 kB in all.
        for _ in 0..200 {
            state.size += 1000;
            largest = largest.max(state.size);
            state.spill_if_full(10).unwrap();
        }
        assert!(
            (7..=8).contains(&state.spills),
            "{} spills of about 25 kB",
            state.spills
        );
        assert!(
            largest <= 26_000,
            "never a batch past a quarter of the budget: {largest}"
        );
        assert!(
            state.measurements.get() < 50,
            "{} measurements in 200 batches",
            state.measurements.get()
        );
    }
}
