//! A task's incremental state chains: per operator, the files its
//! checkpoints wrote since its last full snapshot, and their compaction in
//! the background.
//!
//! ```text
//!  barrier n ─► prepare: adopt a finished compaction, choose full or delta
//!            ─► operator.snapshot_delta(n, full) ─► record: a slot for the new file
//!  snapshot writer n: write the file, fill its slot, wait for the chain's
//!                     earlier slots, report base + deltas in the metadata
//!  compaction thread: read base + deltas, restore a fresh operator from them,
//!                     take its full snapshot, write it as the next base
//! ```
//!
//! The decisions (which step, when to compact) are the plain functions of
//! [`weir_state::incremental`]; this module keeps the chain and does the I/O.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use crate::operator::{Operator, OperatorSnapshot};
use crate::{Error, Result};
use weir_common::ids::CheckpointId;
use weir_state::checkpoint::metadata::StateFile;
use weir_state::incremental::{
    ChainShape, DeltaKind, SHARED_DIR, Step, combine, compaction_due, next_step, shared_file_name,
};
use weir_state::snapshot::{read_state_file, write_state_file};

/// Builds a fresh operator of the chain's kind (for compaction).
pub type Compactor = Arc<dyn Fn() -> Result<Box<dyn Operator>> + Send + Sync>;

/// Where one file of a chain stands: being written, written (perhaps with
/// no rows: no file), or failed.
#[derive(Default)]
pub struct FileSlot {
    value: Mutex<Option<std::result::Result<Option<StateFile>, String>>>,
    filled: Condvar,
}

impl FileSlot {
    fn done(file: Option<StateFile>) -> Arc<Self> {
        let slot = Arc::new(FileSlot::default());
        slot.fill(Ok(file));
        slot
    }

    /// Sets the outcome (the first one counts).
    pub fn fill(&self, outcome: std::result::Result<Option<StateFile>, String>) {
        let mut value = self.value.lock().expect("file slot");
        if value.is_none() {
            *value = Some(outcome);
            self.filled.notify_all();
        }
    }

    /// Waits for the outcome.
    pub fn wait(&self) -> std::result::Result<Option<StateFile>, String> {
        let mut value = self.value.lock().expect("file slot");
        while value.is_none() {
            value = self.filled.wait(value).expect("file slot");
        }
        value.clone().expect("filled")
    }

    fn failed(&self) -> bool {
        matches!(*self.value.lock().expect("file slot"), Some(Err(_)))
    }

    /// The file's size once written (0 before, or without a file).
    fn bytes(&self) -> u64 {
        match &*self.value.lock().expect("file slot") {
            Some(Ok(Some(file))) => file.bytes,
            _ => 0,
        }
    }
}

/// A slot that is filled with an error if its writer drops it unfilled (a
/// snapshot writer that failed early), so no later writer waits forever.
pub struct SlotGuard(pub Arc<FileSlot>);

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.0.fill(Err("the state file was not written".into()));
    }
}

/// What a snapshot writer does for one operator with a chain.
pub struct ChainWrite {
    /// Where the new file goes, and how the metadata names it.
    pub path: PathBuf,
    /// `path` relative to the checkpoint directory.
    pub relative: String,
    /// The new file's slot (filled by the writer).
    pub slot: SlotGuard,
    /// The chain the checkpoint refers to, base first (the new file among them).
    pub entries: Vec<Arc<FileSlot>>,
    /// How the deltas combine.
    pub kind: DeltaKind,
}

impl ChainWrite {
    /// Writes `rows` (if any), or links the one spilled run a snapshot of
    /// the spilling backend gives instead, then waits for the chain's other
    /// files: the base and the deltas, as the metadata records them.
    pub fn write(
        self,
        rows: Option<&arrow::array::RecordBatch>,
        runs: &[weir_state::runs::Run],
    ) -> Result<(Option<StateFile>, Vec<StateFile>)> {
        let written = match (rows.filter(|r| r.num_rows() > 0), runs) {
            (None, []) => Ok(None),
            (Some(rows), []) => write_state_file(&self.path, &self.relative, rows).map(Some),
            (None, [run]) => run.link(&self.path, &self.relative).map(Some),
            _ => Err(Error::Internal(
                "an incremental snapshot gives its rows or one run, not both".into(),
            )),
        };
        self.slot
            .0
            .fill(written.as_ref().map(Clone::clone).map_err(|e| e.to_string()));
        written?;
        let mut files = Vec::new();
        for entry in &self.entries {
            files.push(
                entry
                    .wait()
                    .map_err(|e| Error::State(format!("an earlier state file of the chain: {e}")))?,
            );
        }
        let mut files = files.into_iter();
        let base = files.next().flatten();
        Ok((base, files.flatten().collect()))
    }
}

/// A compaction running in the background: it covers the base and the
/// first `deltas` deltas.
struct Compaction {
    deltas: usize,
    /// The chain's generation when it started: a full snapshot since makes it stale.
    generation: u64,
    outcome: Arc<FileSlot>,
}

/// One operator's chain in one subtask.
pub struct StateChain {
    operator_id: String,
    kind: DeltaKind,
    /// `<run dir>/shared/<operator id>`.
    dir: PathBuf,
    subtask: usize,
    attempt: u32,
    max_deltas: usize,
    base: Option<Arc<FileSlot>>,
    deltas: Vec<Arc<FileSlot>>,
    generation: u64,
    compaction: Option<Compaction>,
    compactor: Compactor,
    /// The operator's state is spilled (see [`ChainShape::spilled`]).
    spilled: bool,
}

impl StateChain {
    /// An empty chain (its first snapshot is full) for operator
    /// `operator_id` of subtask `subtask`, under run directory `run_dir`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        operator_id: &str,
        kind: DeltaKind,
        run_dir: &Path,
        subtask: usize,
        attempt: u32,
        max_deltas: usize,
        compactor: Compactor,
        spilled: bool,
    ) -> Self {
        StateChain {
            operator_id: operator_id.to_string(),
            kind,
            dir: run_dir.join(SHARED_DIR).join(operator_id),
            subtask,
            attempt,
            max_deltas,
            base: None,
            deltas: Vec::new(),
            generation: 0,
            compaction: None,
            compactor,
            spilled,
        }
    }

    fn shape(&self) -> ChainShape {
        ChainShape {
            has_base: self.base.is_some(),
            deltas: self.deltas.len(),
            broken: self.base.iter().chain(&self.deltas).any(|s| s.failed()),
            base_bytes: self.base.as_ref().map_or(0, |s| s.bytes()),
            last_delta_bytes: self.deltas.last().map_or(0, |s| s.bytes()),
            spilled: self.spilled,
        }
    }

    fn relative(&self, name: &str) -> String {
        format!("../{SHARED_DIR}/{}/{name}", self.operator_id)
    }

    /// Before the snapshot for checkpoint `id`: adopts a compaction that has
    /// finished (its file becomes the base), and says which step comes next.
    pub fn prepare(&mut self, id: CheckpointId) -> Step {
        let finished = self
            .compaction
            .as_ref()
            .is_some_and(|c| c.outcome.value.lock().expect("file slot").is_some());
        if finished && let Some(compaction) = self.compaction.take() {
            match compaction.outcome.wait() {
                Ok(file) if compaction.generation == self.generation => {
                    if let Err(e) = self.adopt(file, compaction.deltas, id) {
                        eprintln!("[WARN] compaction of {}: {e}", self.operator_id);
                    }
                }
                Ok(_) => {}
                Err(e) => eprintln!("[WARN] compaction of {}: {e}", self.operator_id),
            }
        }
        next_step(self.shape(), self.max_deltas)
    }

    /// The compacted file becomes the base, under the name of checkpoint
    /// `id` (the first that refers to it), replacing the base and `deltas` deltas.
    fn adopt(&mut self, file: Option<StateFile>, deltas: usize, id: CheckpointId) -> Result<()> {
        let base = match file {
            Some(file) => {
                let name = format!("{}-{id}-compacted.parquet", self.subtask);
                let (from, to) = (self.dir.join(&file.path), self.dir.join(&name));
                std::fs::rename(&from, &to).map_err(|e| Error::io(&to, e))?;
                Some(StateFile {
                    path: self.relative(&name),
                    ..file
                })
            }
            None => None,
        };
        self.base = Some(FileSlot::done(base));
        self.deltas.drain(..deltas);
        Ok(())
    }

    /// After the operator's snapshot for checkpoint `id` (a `step`, with
    /// rows or not): the write its snapshot writer does. An empty delta
    /// adds nothing to the chain.
    pub fn record(&mut self, id: CheckpointId, step: Step, has_rows: bool) -> ChainWrite {
        let name = shared_file_name(self.subtask, id);
        let slot = Arc::new(FileSlot::default());
        match step {
            Step::Full => {
                self.base = Some(slot.clone());
                self.deltas.clear();
                self.generation += 1;
            }
            Step::Delta if has_rows => self.deltas.push(slot.clone()),
            Step::Delta => {}
        }
        ChainWrite {
            path: self.dir.join(&name),
            relative: self.relative(&name),
            slot: SlotGuard(slot),
            entries: self.base.iter().chain(&self.deltas).cloned().collect(),
            kind: self.kind,
        }
    }

    /// Starts compacting the chain in the background if it is due; `meta`
    /// is the small state of the latest snapshot.
    pub fn maybe_compact(&mut self, meta: &serde_json::Value) -> Result<()> {
        if !compaction_due(self.shape(), self.max_deltas, self.compaction.is_some()) {
            return Ok(());
        }
        let entries: Vec<Arc<FileSlot>> = self.base.iter().chain(&self.deltas).cloned().collect();
        let outcome = Arc::new(FileSlot::default());
        let job = CompactionJob {
            entries,
            kind: self.kind,
            dir: self.dir.clone(),
            temporary: format!("{}.{}.compacting.parquet", self.subtask, self.attempt),
            meta: meta.clone(),
            compactor: self.compactor.clone(),
        };
        let result = outcome.clone();
        std::thread::Builder::new()
            .name(format!("weir-compact-{}-{}", self.operator_id, self.subtask))
            .spawn(move || {
                let guard = SlotGuard(result);
                guard.0.fill(job.run().map_err(|e| e.to_string()));
            })
            .map_err(|e| Error::Execution(format!("could not start a compaction: {e}")))?;
        self.compaction = Some(Compaction {
            deltas: self.deltas.len(),
            generation: self.generation,
            outcome,
        });
        Ok(())
    }
}

/// One compaction: the chain's files into one full snapshot.
struct CompactionJob {
    entries: Vec<Arc<FileSlot>>,
    kind: DeltaKind,
    dir: PathBuf,
    temporary: String,
    meta: serde_json::Value,
    compactor: Compactor,
}

impl CompactionJob {
    /// The compacted file (named `temporary`, renamed when adopted), or
    /// none when the state is empty.
    fn run(self) -> Result<Option<StateFile>> {
        let mut batches = Vec::new();
        for entry in &self.entries {
            let file = entry
                .wait()
                .map_err(|e| Error::State(format!("a state file to compact: {e}")))?;
            if let Some(file) = file {
                let name = Path::new(&file.path)
                    .file_name()
                    .ok_or_else(|| Error::Internal(format!("state file {} has no name", file.path)))?;
                batches.extend(read_state_file(&self.dir.join(name), &(0..=usize::MAX))?);
            }
        }
        let rows = combine(Some(self.kind), batches)?;
        let mut operator = (self.compactor)()?;
        operator.restore(OperatorSnapshot {
            runs: Vec::new(),
            deferred: Vec::new(),
            rows_later: None,
            meta: self.meta,
            rows,
        })?;
        let full = (operator.snapshot_delta(0, true)?)
            .map(|s| s.written(&|| true))
            .transpose()?
            .and_then(|s| s.rows);
        match full.filter(|r| r.num_rows() > 0) {
            Some(rows) => Ok(Some(write_state_file(
                &self.dir.join(&self.temporary),
                &self.temporary,
                &rows,
            )?)),
            None => Ok(None),
        }
    }
}
