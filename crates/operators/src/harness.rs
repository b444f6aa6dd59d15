//! Operator tests from text: rows in as lines (`+I a 1`), an operator of a
//! planned query runs them, and what it emits comes back as lines (`-U a 1`,
//! `wm 10`), with snapshot and restore in between where a test wants them.
//!
//! ```text
//!  CREATE TABLE ... ; INSERT ... ──plan──► node "GroupAggregate" ──create──► operator
//!  "+I a 1" ──parse (input schema)──► batch ──► operator ──► "+I a 1" lines
//! ```

use std::sync::Arc;

use arrow::array::{ArrayRef, StringArray};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};

use crate::Result;
use weir::Engine;
use weir_common::changelog::{self, RowKind};
use weir_plan::spec::PlanSpec;
use weir_runtime::operator::{Emitted, OperatorSnapshot, SpillSettings};
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};

/// One operator of a planned query, fed and read as text.
pub struct Harness {
    factory: Arc<dyn OperatorFactory>,
    operator: Box<dyn Operator>,
    inputs: Vec<SchemaRef>,
    checkpoint: u64,
    /// Incremental checkpoints on: the operator tracks changes.
    incremental: bool,
    /// Incremental snapshots taken so far (the base first), as a chain of
    /// state files would hold them.
    chain: Vec<OperatorSnapshot>,
    /// The spilling state backend's settings, if on.
    spill: Option<SpillSettings>,
    /// Key groups (the task context's default unless set).
    max_parallelism: Option<usize>,
    /// What the operator emitted ahead of the barriers of the snapshots
    /// taken since [`Harness::take_barrier_output`] was last called.
    barrier_output: Vec<String>,
}

impl Harness {
    /// The `nth` node (0 first) whose name starts with `node` in the plan
    /// of `insert`, after running the `setup` statements.
    pub fn of(setup: &[&str], insert: &str, node: &str, nth: usize) -> Result<Harness> {
        let engine = Engine::new();
        for statement in setup {
            engine.sql(statement)?;
        }
        let plan = engine.plan(insert)?;
        Harness::from_plan(&engine, &plan, node, nth)
    }

    /// The `nth` node whose name starts with `node` in the plan of a
    /// Table API query (as [`Harness::of`] for SQL).
    pub fn of_table(table: &weir::table::Table, node: &str, nth: usize) -> Result<Harness> {
        let engine = table.engine().clone();
        let plan = engine.table_plan(table)?;
        Harness::from_plan(&engine, &plan, node, nth)
    }

    /// The `nth` node of `plan` whose name starts with `node`, built with
    /// `engine`'s functions.
    fn from_plan(engine: &Engine, plan: &PlanSpec, node: &str, nth: usize) -> Result<Harness> {
        let found = plan
            .nodes
            .iter()
            .filter(|n| n.name.starts_with(node))
            .nth(nth)
            .ok_or_else(|| {
                let names: Vec<&str> = plan.nodes.iter().map(|n| n.name.as_str()).collect();
                crate::Error::Internal(format!("no node {node} in\n{}", names.join("\n")))
            })?;
        let inputs = found
            .inputs
            .iter()
            .map(|(i, _)| plan.nodes[*i].schema.decode())
            .collect::<Result<Vec<_>>>()?;
        let factory =
            engine.with_decode_context(&plan.time_zone, |ctx| crate::build::operator(found, &inputs, ctx))?;
        Harness::for_operator(factory, inputs)
    }

    /// An operator built directly, on inputs of these schemas (for one whose
    /// plan needs what a unit test lacks, as an upsert source's broker).
    pub fn for_operator(factory: Arc<dyn OperatorFactory>, inputs: Vec<SchemaRef>) -> Result<Harness> {
        Ok(Harness {
            operator: factory.create(&TaskContext::standalone(1024))?,
            factory,
            inputs,
            checkpoint: 0,
            incremental: false,
            chain: Vec::new(),
            spill: None,
            max_parallelism: None,
            barrier_output: Vec::new(),
        })
    }

    /// Input `input` as a changelog (rows may start with a kind, `-D`): for
    /// an operator that takes updates where the planned source has none.
    pub fn updating_input(mut self, input: usize) -> Harness {
        self.inputs[input] = weir_common::changelog::with_op(&self.inputs[input]);
        self
    }

    /// The operator afresh, with incremental checkpoints on.
    pub fn incremental(mut self) -> Result<Harness> {
        self.incremental = true;
        self.operator = self.factory.create(&self.context())?;
        Ok(self)
    }

    /// The operator afresh, with the spilling state backend: `budget` bytes
    /// in memory, runs under `dir`.
    pub fn spilling(mut self, budget: usize, dir: &std::path::Path) -> Result<Harness> {
        self.spill = Some(SpillSettings {
            budget,
            dir: dir.to_path_buf(),
        });
        self.operator = self.factory.create(&self.context())?;
        Ok(self)
    }

    /// The operator afresh, its state in `n` key groups.
    pub fn max_parallelism(mut self, n: usize) -> Result<Harness> {
        self.max_parallelism = Some(n);
        self.operator = self.factory.create(&self.context())?;
        Ok(self)
    }

    fn context(&self) -> TaskContext {
        let mut ctx = TaskContext::standalone(1024);
        if let Some(n) = self.max_parallelism {
            ctx.max_parallelism = n;
        }
        ctx.incremental = self.incremental;
        ctx.spill = self.spill.clone();
        ctx
    }

    /// What the operator emitted, then all it held back (see
    /// [`Operator::emit_more`]), as lines.
    fn drain(&mut self, mut out: Output) -> Result<Vec<String>> {
        while self.operator.emit_more(&mut out)? {}
        render(out)
    }

    /// An incremental snapshot (`full`: a new base, which starts the chain
    /// again); returns its rows, and keeps it as the chain's next file.
    pub fn snapshot_delta(&mut self, full: bool) -> Result<Option<RecordBatch>> {
        self.snapshot_delta_while(full, |_| Ok(()))
    }

    /// [`Harness::snapshot_delta`], its deferred state read only after
    /// `go_on` has given the operator more input, as a snapshot's writer
    /// reads it while the task goes on.
    pub fn snapshot_delta_while(
        &mut self,
        full: bool,
        go_on: impl FnOnce(&mut Harness) -> Result<()>,
    ) -> Result<Option<RecordBatch>> {
        self.before_barrier()?;
        self.checkpoint += 1;
        let snapshot = self
            .operator
            .snapshot_delta(self.checkpoint, full)?
            .unwrap_or_default();
        go_on(self)?;
        if full {
            self.chain.clear();
        }
        let snapshot = with_runs_read(&snapshot.written(&|| true)?)?;
        let rows = snapshot.rows.clone();
        self.chain.push(snapshot);
        Ok(rows)
    }

    /// A plain snapshot (as for a savepoint), the operator left as it is.
    pub fn snapshot_only(&mut self) -> Result<Option<OperatorSnapshot>> {
        self.before_barrier()?;
        self.checkpoint += 1;
        let snapshot = self.operator.snapshot(self.checkpoint)?;
        snapshot.map(|s| s.written(&|| true)).transpose()
    }

    /// Replaces the operator with a new one restored from the chain (base
    /// and deltas combined as a restore from a checkpoint combines them);
    /// returns the rows it was restored from.
    pub fn restart_from_chain(&mut self) -> Result<Option<RecordBatch>> {
        let kind = self.operator.delta_kind();
        let meta = self
            .chain
            .last()
            .map_or(serde_json::Value::Null, |s| s.meta.clone());
        let files = self.chain.iter().filter_map(|s| s.rows.clone()).collect();
        let rows = weir_state::incremental::combine(kind, files)?;
        self.operator = self.factory.create(&self.context())?;
        self.operator.restore(OperatorSnapshot {
            runs: Vec::new(),
            deferred: Vec::new(),
            rows_later: None,
            meta,
            rows: rows.clone(),
        })?;
        Ok(rows)
    }

    /// [`Harness::restart_from_chain`] on the heap backend: a chain the
    /// spilling backend wrote, restored where it fits in memory (a larger
    /// budget, a rescale).
    pub fn restart_from_chain_on_the_heap(&mut self) -> Result<Option<RecordBatch>> {
        self.spill = None;
        self.restart_from_chain()
    }

    /// Runs one batch of `rows` (a line each: the kind, when the input
    /// updates, then the values; `null` for NULL); returns what it emitted.
    pub fn push(&mut self, rows: &str) -> Result<Vec<String>> {
        self.push_to(0, rows)
    }

    /// [`Harness::push`] into input `input` of an operator of several.
    pub fn push_to(&mut self, input: usize, rows: &str) -> Result<Vec<String>> {
        let schema = self
            .inputs
            .get(input)
            .ok_or_else(|| crate::Error::Internal(format!("the operator has no input {input}")))?;
        let batch = parse(schema, rows)?;
        let mut out = Output::default();
        self.operator.process_batch(input, batch, &mut out)?;
        self.drain(out)
    }

    /// Runs one batch of `rows` of source split `split`; returns what it emitted.
    pub fn push_split(&mut self, split: weir_runtime::SplitId, rows: &str) -> Result<Vec<String>> {
        let batch = parse(&self.inputs[0], rows)?;
        let mut out = Output::default();
        self.operator.process_split_batch(split, batch, &mut out)?;
        self.drain(out)
    }

    /// Tells the operator the source reads `splits` now; returns what it emitted.
    pub fn set_splits(&mut self, splits: &[weir_runtime::SplitId]) -> Result<Vec<String>> {
        let mut out = Output::default();
        self.operator.set_splits(splits, &mut out)?;
        self.drain(out)
    }

    /// A barrier is about to pass: returns what the operator emits ahead of
    /// it ([`Operator::prepare_snapshot`]).
    pub fn barrier(&mut self) -> Result<Vec<String>> {
        let mut out = Output::default();
        self.operator.prepare_snapshot(&mut out)?;
        self.drain(out)
    }

    /// As the task does before a snapshot: what the operator emits ahead of
    /// the barrier is kept for [`Harness::take_barrier_output`].
    fn before_barrier(&mut self) -> Result<()> {
        let lines = self.barrier()?;
        self.barrier_output.extend(lines);
        Ok(())
    }

    /// What the operator emitted ahead of the barriers of snapshots taken
    /// since the last call.
    pub fn take_barrier_output(&mut self) -> Vec<String> {
        std::mem::take(&mut self.barrier_output)
    }

    /// All input is done; returns what the operator emitted
    /// ([`Operator::finish`]).
    pub fn finish(&mut self) -> Result<Vec<String>> {
        let mut out = Output::default();
        self.operator.finish(&mut out)?;
        self.drain(out)
    }

    /// The wall clock reached `now`; returns what it emitted.
    pub fn processing_time(&mut self, now: i64) -> Result<Vec<String>> {
        let mut out = Output::default();
        self.operator.on_processing_time(now, &mut out)?;
        self.drain(out)
    }

    /// Ends input `input` (all its channels ended); returns what it emitted.
    pub fn end_input(&mut self, input: usize) -> Result<Vec<String>> {
        let mut out = Output::default();
        self.operator.end_input(input, &mut out)?;
        self.drain(out)
    }

    /// Passes a watermark; returns what it emitted.
    pub fn watermark(&mut self, watermark: i64) -> Result<Vec<String>> {
        let mut out = Output::default();
        self.operator.process_watermark(watermark, &mut out)?;
        self.drain(out)
    }

    /// A snapshot as the task takes it at a barrier: its deferred runs are
    /// not written yet, and the operator goes on.
    pub fn snapshot_unwritten(&mut self) -> Result<Option<OperatorSnapshot>> {
        self.before_barrier()?;
        self.checkpoint += 1;
        self.operator.snapshot(self.checkpoint)
    }

    /// An incremental snapshot as the task takes it at a barrier (not
    /// written, and not kept in the chain).
    pub fn snapshot_delta_unwritten(&mut self, full: bool) -> Result<Option<OperatorSnapshot>> {
        self.before_barrier()?;
        self.checkpoint += 1;
        self.operator.snapshot_delta(self.checkpoint, full)
    }

    /// Writes `snapshot` (its deferred runs) and replaces the operator with
    /// a new one restored from it, as after a crash.
    pub fn restart_from(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        let restored = with_runs_read(&snapshot.written(&|| true)?)?;
        self.operator = self.factory.create(&self.context())?;
        self.operator.restore(restored)
    }

    /// Snapshots the operator and replaces it with a new one restored from
    /// the snapshot (as after a crash); returns the snapshot.
    pub fn restart(&mut self) -> Result<Option<OperatorSnapshot>> {
        self.before_barrier()?;
        self.checkpoint += 1;
        let snapshot = self.operator.snapshot(self.checkpoint)?;
        let snapshot = snapshot.map(|s| s.written(&|| true)).transpose()?;
        let restored = snapshot.as_ref().map(with_runs_read).transpose()?;
        self.operator = self.factory.create(&self.context())?;
        if let Some(restored) = restored {
            self.operator.restore(restored)?;
        }
        Ok(snapshot)
    }
}

/// A snapshot as a restore reads it back from a checkpoint: the rows of its
/// spilled runs (linked as deltas that merge) joined to its rows.
fn with_runs_read(snapshot: &OperatorSnapshot) -> Result<OperatorSnapshot> {
    if snapshot.runs.is_empty() {
        let (meta, rows) = (snapshot.meta.clone(), snapshot.rows.clone());
        return Ok(OperatorSnapshot {
            meta,
            rows,
            ..Default::default()
        });
    }
    let mut files: Vec<RecordBatch> = snapshot.rows.iter().cloned().collect();
    for run in &snapshot.runs {
        files.extend(weir_state::snapshot::read_state_file(
            run.path(),
            &(0..=usize::MAX),
        )?);
    }
    Ok(OperatorSnapshot {
        meta: snapshot.meta.clone(),
        rows: weir_state::incremental::combine(Some(weir_state::incremental::DeltaKind::Merge), files)?,
        runs: Vec::new(),
        deferred: Vec::new(),
        rows_later: None,
    })
}

/// A batch of `schema` from lines of values.
pub fn parse(schema: &SchemaRef, rows: &str) -> Result<RecordBatch> {
    let updating = changelog::has_op(schema);
    let data = changelog::without_op(schema);
    let mut kinds = Vec::new();
    let mut cells: Vec<Vec<Option<String>>> = vec![Vec::new(); data.fields().len()];
    for line in rows.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut tokens: Vec<&str> = line.split_whitespace().collect();
        let kind = RowKind::parse(tokens[0]);
        if kind.is_some() {
            tokens.remove(0);
        }
        kinds.push(kind.unwrap_or(RowKind::Insert));
        if tokens.len() != cells.len() {
            return Err(crate::Error::Internal(format!(
                "'{line}' has {} values, the input has {} columns",
                tokens.len(),
                cells.len()
            )));
        }
        for (column, token) in cells.iter_mut().zip(tokens) {
            column.push((token != "null").then(|| token.to_string()));
        }
    }
    let columns = cells
        .into_iter()
        .zip(data.fields())
        .map(|(values, field)| {
            let text: ArrayRef = Arc::new(StringArray::from(values));
            Ok(arrow::compute::cast(&text, field.data_type())?)
        })
        .collect::<Result<Vec<_>>>()?;
    if updating {
        changelog::with_kinds(&data, columns, &kinds)
    } else {
        Ok(RecordBatch::try_new(data, columns)?)
    }
}

/// What an operator emitted, as lines: `+I a 1` per row, `wm 10` per watermark.
pub fn render(mut out: Output) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    let options = FormatOptions::default().with_null("null");
    for item in out.take() {
        match item {
            Emitted::Watermark(w) => lines.push(format!("wm {w}")),
            Emitted::Batch(batch) => {
                let kinds = changelog::row_kinds(&batch)?;
                let data = changelog::data(&batch);
                let formatters = data
                    .columns()
                    .iter()
                    .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                for (row, kind) in kinds.iter().enumerate() {
                    let values: Vec<String> = formatters.iter().map(|f| f.value(row).to_string()).collect();
                    lines.push(format!("{} {}", kind.short(), values.join(" ")));
                }
            }
        }
    }
    Ok(lines)
}

/// One step of an operator's input: rows of an input, or a watermark.
pub enum Step {
    /// Rows (as lines) into an input.
    Rows(usize, String),
    /// A watermark.
    Watermark(i64),
    /// A barrier about to pass ([`Harness::barrier`]).
    Barrier,
}

/// What `h` emits for each step, in its order.
pub fn emitted(h: &mut Harness, steps: &[Step]) -> Vec<Vec<String>> {
    steps
        .iter()
        .map(|step| match step {
            Step::Rows(input, rows) => h.push_to(*input, rows).unwrap(),
            Step::Watermark(w) => h.watermark(*w).unwrap(),
            Step::Barrier => h.barrier().unwrap(),
        })
        .collect()
}

/// Each step's lines sorted: after a restore, rows of one time fire in
/// the order of the saved state, not of their arrival.
pub fn sorted(mut steps: Vec<Vec<String>>) -> Vec<Vec<String>> {
    steps.iter_mut().for_each(|lines| lines.sort());
    steps
}

/// What an operator made by `make` emits for each of `steps` under the
/// spilling backend at `budget` bytes, each step's lines sorted when `sort`
/// (rows of one time may come in another order); asserts that its state
/// went to the store.
pub fn emitted_spilling(
    make: &dyn Fn() -> Harness,
    steps: &[Step],
    budget: usize,
    sort: bool,
) -> Vec<Vec<String>> {
    let dir = tempfile::tempdir().unwrap();
    let mut h = make().spilling(budget, dir.path()).unwrap();
    let mut got = Vec::new();
    let mut store_seen = false;
    for step in steps {
        let lines = emitted(&mut h, std::slice::from_ref(step));
        got.extend(if sort { sorted(lines) } else { lines });
        store_seen |= entries_in(dir.path()) > 0;
    }
    assert!(store_seen, "state went to the store at {budget} bytes");
    got
}

/// Whether each row of an incremental snapshot's file deletes its key, sorted.
pub fn deletions(file: &RecordBatch) -> Vec<bool> {
    use arrow::array::AsArray;
    let deleted = file
        .column_by_name(weir_state::incremental::DELETED_COLUMN)
        .expect("a delta");
    let mut flags: Vec<bool> = deleted.as_boolean().iter().map(|d| d.unwrap()).collect();
    flags.sort();
    flags
}

/// The rows of a snapshot written, in its rows or its one run.
pub fn state_rows_of(snapshot: &OperatorSnapshot) -> usize {
    let runs: u64 = snapshot.runs.iter().map(|r| r.info.rows).sum();
    snapshot.rows.as_ref().map_or(0, |r| r.num_rows()) + runs as usize
}

/// The key group of every row of a snapshot's first run, in order.
pub fn run_key_groups(snapshot: &OperatorSnapshot) -> Vec<u32> {
    use arrow::array::AsArray;
    let rows = snapshot.runs[0].cursor().unwrap().take_below(u32::MAX).unwrap();
    (rows.iter())
        .flat_map(|b| {
            b.column(0)
                .as_primitive::<arrow::datatypes::UInt32Type>()
                .values()
                .to_vec()
        })
        .collect()
}

/// Entries in a spilling operator's directory (its store's, once made).
pub fn entries_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

/// An operator (made by `make`) spilling under 16 kB, stopped halfway
/// through `steps` and restored from its snapshot: the snapshot is one run
/// of the rows the heap keeps, and the rest of the steps emit what the
/// heap's do (each step's lines sorted: a restore changes the order of one
/// time's).
pub fn spilled_restores_as_if_never_stopped(make: &dyn Fn() -> Harness, steps: &[Step]) {
    spilled_restores_as_if_never_stopped_by(make, steps, &same_sorted);
}

/// What one run emitted (each step's lines) against what another did
/// (`expected`), asserting they agree; `what` says which runs.
pub type Compare = dyn Fn(Vec<Vec<String>>, Vec<Vec<String>>, &str);

/// Each step's lines, sorted, are the same.
pub fn same_sorted(got: Vec<Vec<String>>, expected: Vec<Vec<String>>, what: &str) {
    assert_eq!(sorted(got), sorted(expected), "{what}");
}

/// [`spilled_restores_as_if_never_stopped`], the rest of the steps
/// compared by `same`.
pub fn spilled_restores_as_if_never_stopped_by(make: &dyn Fn() -> Harness, steps: &[Step], same: &Compare) {
    let dir = tempfile::tempdir().unwrap();
    let (before, after) = steps.split_at(steps.len() / 2);
    let mut heap = make();
    emitted(&mut heap, before);
    let kept = state_rows_of(&heap.snapshot_only().unwrap().expect("state"));
    let expected = emitted(&mut heap, after);
    let mut h = make().spilling(16 * 1024, dir.path()).unwrap();
    emitted(&mut h, before);
    let snapshot = h.restart().unwrap().expect("a snapshot");
    assert_eq!(snapshot.runs.len(), 1, "the store as one run");
    assert_eq!(state_rows_of(&snapshot), kept, "the rows the heap keeps");
    same(emitted(&mut h, after), expected, "restored");
}

/// An operator (made by `make`) spilling under 16 kB snapshotted halfway
/// through `steps`, its store read by the snapshot's writer only after the
/// operator went on to the end: restored from it, the rest of the steps
/// emit what the heap's do.
pub fn spilled_snapshot_holds_its_barrier(make: &dyn Fn() -> Harness, steps: &[Step]) {
    spilled_snapshot_holds_its_barrier_by(make, steps, &same_sorted);
}

/// [`spilled_snapshot_holds_its_barrier`], the rest of the steps compared
/// by `same`.
pub fn spilled_snapshot_holds_its_barrier_by(make: &dyn Fn() -> Harness, steps: &[Step], same: &Compare) {
    let dir = tempfile::tempdir().unwrap();
    let (before, after) = steps.split_at(steps.len() / 2);
    let mut heap = make();
    emitted(&mut heap, before);
    let expected = emitted(&mut heap, after);
    let mut h = make().spilling(16 * 1024, dir.path()).unwrap();
    emitted(&mut h, before);
    let snapshot = h.snapshot_unwritten().unwrap().expect("a snapshot");
    assert_eq!(
        snapshot.deferred.len(),
        1,
        "the store, read by the snapshot's writer"
    );
    emitted(&mut h, after);
    h.restart_from(snapshot).unwrap();
    same(
        emitted(&mut h, after),
        expected,
        "the state as it was at the barrier",
    );
}

/// An operator (made by `make`) with incremental checkpoints on the heap,
/// a snapshot taken after every `every` steps of the first half of `steps`
/// (the first full, the rest deltas), restored from that chain: the rest of
/// the steps emit what an operator never stopped emits (each step's lines
/// sorted), and some delta held fewer rows than the state had then.
pub fn incremental_restores_as_if_never_stopped(make: &dyn Fn() -> Harness, steps: &[Step], every: usize) {
    incremental_restores_as_if_never_stopped_by(make, make, steps, every, &same_sorted);
}

/// [`incremental_restores_as_if_never_stopped`], the operator never
/// stopped made by `never`, the rest of the steps compared by `same`.
pub fn incremental_restores_as_if_never_stopped_by(
    make: &dyn Fn() -> Harness,
    never: &dyn Fn() -> Harness,
    steps: &[Step],
    every: usize,
    same: &Compare,
) {
    let (before, after) = steps.split_at(steps.len() / 2);
    let mut never_stopped = never();
    emitted(&mut never_stopped, before);
    // The barrier the chain's last snapshot had: what it lets out before
    // it (a spilled operator's waiting rows) is not in what follows.
    never_stopped.barrier().unwrap();
    let expected = emitted(&mut never_stopped, after);
    let mut h = make().incremental().unwrap();
    let mut smaller = false;
    for (n, chunk) in before.chunks(every.max(1)).enumerate() {
        emitted(&mut h, chunk);
        let state = h.snapshot_only().unwrap().map_or(0, |s| state_rows_of(&s));
        let file = h.snapshot_delta(n == 0).unwrap();
        let rows = file.as_ref().map_or(0, |f| f.num_rows());
        if n > 0 {
            // A replacing delta's deleting rows are not state.
            let deleting = (file.as_ref())
                .filter(|f| {
                    f.column_by_name(weir_state::incremental::DELETED_COLUMN)
                        .is_some()
                })
                .map_or(0, |f| deletions(f).iter().filter(|d| **d).count());
            smaller |= rows - deleting < state;
        }
    }
    assert!(smaller, "a delta holds what changed, not the whole state");
    h.restart_from_chain().unwrap();
    same(emitted(&mut h, after), expected, "restored from the chain");
}
