//! TopN (Flink's `Rank` node): per partition, the rows ranked `start..=end`
//! by the ORDER BY of `ROW_NUMBER()`, `RANK()` or `DENSE_RANK() OVER
//! (PARTITION BY ... ORDER BY ...)` filtered on the rank.
//!
//! Over insert-only input (Flink's `AppendOnlyTopNFunction`) a partition
//! keeps only the rows ranked up to `end`: a row ranked after them can never
//! come back up, as nothing leaves. Over updating input (Flink's
//! `RetractableTopNFunction`) it keeps every row, as a retraction can bring
//! any of them up. Each row that enters or leaves changes the ranks after it;
//! what is emitted is the difference of the ranks before and after
//! ([`changes::rank_changes`]). Rows with equal order keys rank by their
//! values, so that a result never depends on the order rows arrive in (nor
//! on the parallelism); ordered by processing time, rows rank by arrival.
//!
//! A window TopN (the partition includes a window TVF's `window_start` and
//! `window_end`) emits nothing until the watermark passes the window's end,
//! then its ranks as inserts, and frees the window (Flink's `WindowRank`).
//!
//! ```text
//!  input ──HASH[partition]──► Rank(rankType=[ROW_NUMBER], rankRange=[rankStart=1, rankEnd=3], ...)
//! ```

pub mod changes;
mod entries;
mod spill;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, UInt32Array, UInt64Array};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt32Type};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use datafusion_physical_expr::PhysicalExpr;

use crate::waiting::ReadsWaiting;
use crate::{Error, Result};
pub use changes::Change;
use weir_common::changelog::{self, RowKind};
use weir_common::ids::CheckpointId;
use weir_common::time::Timestamp;
use weir_plan::rank::RankType;
use weir_runtime::operator::{OperatorSnapshot, TaskMetrics};
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};
use weir_state::incremental::{DeltaKind, ReplacedPart, deleted_part, replacement_rows};
use weir_state::keyed_map::{KeyedMap, sweep_slice};
use weir_state::memory_guess::SpillsWhenFull;
use weir_state::snapshot::{KEY_GROUP_COLUMN, key_groups, schema_signature, sorted_state_rows, state_rows};
use weir_state::store::SWEEP;

/// A TopN: which rows, by what order, which ranks.
#[derive(Debug, Clone)]
pub struct TopN {
    /// `PARTITION BY` expressions over the input.
    pub partition: Vec<Arc<dyn PhysicalExpr>>,
    /// `ORDER BY` expressions over the input, each with its direction.
    pub order: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
    /// The ranking function.
    pub rank_type: RankType,
    /// The first rank kept (1-based).
    pub start: u64,
    /// The last rank kept.
    pub end: u64,
    /// Ordered by processing time (a `PROCTIME()` attribute, Flink's
    /// deduplication): by arrival, not by value; `Some(false)` keeps the
    /// first rows (ascending: insert-only, as nothing can overtake them),
    /// `Some(true)` the last.
    pub arrival: Option<bool>,
    /// Whether the rank number is output (Flink's `outputRankNumber`).
    /// Without it, a row entering the ranks is `+I` and one leaving `-D`:
    /// no updates of the rows whose rank shifted.
    pub rank_output: bool,
    /// Whether the input updates (retractions): every row is then kept.
    pub retract: bool,
    /// A window TopN: the input column of the windows' end (event time);
    /// ranks are emitted when the watermark passes it.
    pub window_end: Option<usize>,
    /// `table.exec.state.ttl` (not for a window TopN, whose windows free
    /// their state): a partition not written for this long is forgotten.
    pub state_ttl: Option<std::time::Duration>,
    /// The input's columns.
    pub input: SchemaRef,
    /// The input's columns, the rank (`UInt64`) when output, and the op column.
    pub schema: SchemaRef,
    /// Its name in the plan (EXPLAIN's), for errors and logs.
    pub name: String,
}

impl TopN {
    /// Its input rows as bytes, and back.
    fn rows_converter(&self) -> Result<RowConverter> {
        let fields = (self.input.fields().iter())
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(RowConverter::new(fields)?)
    }

    /// Whether it emits inserts only: the first rows by arrival, or a window
    /// TopN's final ranks.
    pub fn insert_only(&self) -> bool {
        self.arrival == Some(false) || self.window_end.is_some()
    }

    fn newest_first(&self) -> bool {
        self.arrival == Some(true)
    }

    fn ttl_ms(&self) -> Option<i64> {
        self.state_ttl.map(|t| t.as_millis() as i64)
    }

    /// `_key_group`, the input's columns, `_position` (0-based rank), and
    /// with a state TTL `_written` (when the partition was last written, ms).
    fn state_schema(&self) -> SchemaRef {
        let mut fields = vec![Field::new(KEY_GROUP_COLUMN, DataType::UInt32, false)];
        fields.extend(self.input.fields().iter().map(|f| f.as_ref().clone()));
        fields.push(Field::new("_position", DataType::UInt32, false));
        if self.state_ttl.is_some() {
            fields.push(Field::new("_written", DataType::Int64, false));
        }
        Arc::new(Schema::new(fields))
    }

    fn evaluate(exprs: &[Arc<dyn PhysicalExpr>], batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        exprs
            .iter()
            .map(|e| Ok(e.evaluate(batch)?.into_array(batch.num_rows())?))
            .collect()
    }
}

impl OperatorFactory for TopN {
    fn can_spill(&self) -> bool {
        true
    }

    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let sort_fields =
            |exprs: &[Arc<dyn PhysicalExpr>], options: Vec<SortOptions>| -> Result<RowConverter> {
                let fields = exprs
                    .iter()
                    .zip(options)
                    .map(|(e, o)| Ok(SortField::new_with_options(e.data_type(&self.input)?, o)))
                    .collect::<Result<Vec<_>>>()?;
                Ok(RowConverter::new(fields)?)
            };
        let order: Vec<Arc<dyn PhysicalExpr>> = self.order.iter().map(|(e, _)| e.clone()).collect();
        Ok(Box::new(TopNOperator {
            partitions_of: sort_fields(
                &self.partition,
                vec![SortOptions::default(); self.partition.len()],
            )?,
            order_of: sort_fields(&order, self.order.iter().map(|(_, o)| *o).collect())?,
            rows_of: self.rows_converter()?,
            partitions: KeyedMap::default(),
            windows: BTreeMap::new(),
            swept: 0,
            sweep: 0,
            watermark: Timestamp::MIN,
            seq: 0,
            no_tie: Arc::from(&[][..]),
            max_parallelism: ctx.max_parallelism,
            metrics: ctx.metrics.clone(),
            spill: (ctx.spill.clone())
                .map(|s| spill::TopNSpill::new(s, ctx.incremental, ctx.max_parallelism)),
            // Deltas of the partitions changed (a window's partitions are
            // deleted when it fires); spilled, of those changed in memory
            // and those written to the store since the last snapshot.
            changed: ctx.incremental.then(HashSet::default),
            spec: Arc::new(self.clone()),
        }))
    }
}

use entries::{Entries, Place};

/// A row of a partition's ranks: its number, its rank, its bytes.
type RankedRow = (u64, u64, Arc<[u8]>);

struct TopNOperator {
    spec: Arc<TopN>,
    partitions_of: RowConverter,
    order_of: RowConverter,
    rows_of: RowConverter,
    partitions: KeyedMap<Box<[u8]>, Partition>,
    /// When expired partitions were last swept (ms), and where the next
    /// sweep starts (a bucket).
    swept: i64,
    sweep: usize,
    /// A window TopN's partitions by the end of their window.
    windows: BTreeMap<Timestamp, Vec<Box<[u8]>>>,
    watermark: Timestamp,
    seq: u64,
    /// The tie breaker of rows ordered by arrival: none.
    no_tie: Arc<[u8]>,
    max_parallelism: usize,
    metrics: Arc<TaskMetrics>,
    /// The spilling state backend: partitions beyond the budget in its store.
    spill: Option<weir_state::spilled::Spilled<spill::TopNSpill>>,
    /// Incremental checkpoints: the partitions changed since the last snapshot.
    changed: Option<HashSet<Box<[u8]>>>,
}

/// A partition's kept rows, and when it was last written (ms: a state TTL
/// forgets it when not written for that long, as Flink's).
#[derive(Default)]
struct Partition {
    rows: Entries,
    written: i64,
}

/// State rows being restored, read as the operator reads its input.
struct Restored {
    partitions: Option<arrow::row::Rows>,
    ends: Vec<Option<Timestamp>>,
    orders: Option<arrow::row::Rows>,
    converted: arrow::row::Rows,
    /// Each row's 0-based rank in its partition.
    positions: arrow::array::UInt32Array,
    /// When each row's partition was last written (`None`: no state TTL).
    written: Option<arrow::array::Int64Array>,
}

/// The ranks from `from` on (up to `end`), continuing after the row ranked
/// `previous` whose order key was `last` at `position` (1-based; 0 for none);
/// and the place of the first row ranked after `end`, if any.
fn ranks_from(
    rows: &Entries,
    from: Bound<&Place>,
    (position, previous, last): (u64, u64, Option<&[u8]>),
    kind: RankType,
    end: u64,
) -> (Vec<RankedRow>, Option<Place>) {
    let mut ranked = Vec::new();
    let (mut position, mut previous, mut last) = (position, previous, last.map(<[u8]>::to_vec));
    for (place, row) in rows.from(from) {
        position += 1;
        let tie = last.as_deref() == Some(&place.0[..]);
        let rank = kind.next(position, previous, tie);
        if rank > end {
            return (ranked, Some(place.clone()));
        }
        ranked.push((place.2, rank, row.clone()));
        (previous, last) = (rank, Some(place.0.to_vec()));
    }
    (ranked, None)
}

/// The position (1-based), rank and order key of a row.
type Preceding = (u64, u64, Option<Box<[u8]>>);

/// The position, rank and order key of the last row before `place`; `None`
/// when that rank is already after `end` (so is every rank from `place`).
fn before(rows: &Entries, place: &Place, kind: RankType, end: u64) -> Option<Preceding> {
    let (mut position, mut previous, mut last): (u64, u64, Option<&[u8]>) = (0, 0, None);
    for (p, _) in rows.before(place) {
        position += 1;
        previous = kind.next(position, previous, last == Some(&p.0[..]));
        if previous > end {
            return None;
        }
        last = Some(&p.0[..]);
    }
    Some((position, previous, last.map(Into::into)))
}

/// What a row entering at `at` (0-based) of a partition holding `held` rows,
/// keeping at most `end`, changes among ranks `start..=end` of a
/// `ROW_NUMBER()`: for each rank whose row changes, the rank and whether a
/// row held it before (an update) or not (an insert). The entering row
/// takes rank `at + 1`; each row after it moves down one. A plain function.
pub fn shifted_ranks(at: usize, held: usize, start: u64, end: u64) -> Vec<(u64, bool)> {
    let filled = (held + 1).min(end as usize);
    (at..filled)
        .map(|i| (i as u64 + 1, i < held))
        .filter(|(rank, _)| *rank >= start)
        .collect()
}

/// A row entering a few rows of an insert-only `ROW_NUMBER()` TopN
/// (Flink's `AppendOnlyTopNFunction`): the ranks it shifts are emitted
/// directly ([`shifted_ranks`]), without comparing the ranks before and
/// after; the same changes as [`changes::rank_changes`], for less work on
/// the most common TopN.
fn append_row_number(
    rows: &mut Vec<(Place, Arc<[u8]>)>,
    (place, row): (Place, Arc<[u8]>),
    (start, end, rank_output): (u64, u64, bool),
    out: &mut Vec<(Arc<[u8]>, u64, RowKind)>,
) {
    let at = rows.partition_point(|(p, _)| *p < place);
    if at as u64 >= end {
        return;
    }
    let (held, first) = (rows.len(), start as usize - 1);
    if rank_output {
        for (rank, was_held) in shifted_ranks(at, held, start, end) {
            let i = rank as usize - 1;
            let new = if i == at { &row } else { &rows[i - 1].1 };
            if was_held {
                out.push((rows[i].1.clone(), rank, RowKind::UpdateBefore));
                out.push((new.clone(), rank, RowKind::UpdateAfter));
            } else {
                out.push((new.clone(), rank, RowKind::Insert));
            }
        }
    } else {
        // The row pushed out of the range leaves; the one shifted into its
        // first rank (or the new row) enters.
        if held as u64 >= end {
            out.push((rows[end as usize - 1].1.clone(), 0, RowKind::Delete));
        }
        match at >= first {
            true => out.push((row.clone(), 0, RowKind::Insert)),
            false if held > first - 1 => out.push((rows[first - 1].1.clone(), 0, RowKind::Insert)),
            false => {}
        }
    }
    rows.insert(at, (place, row));
    rows.truncate(end as usize);
}

impl TopNOperator {
    /// Each row's order key; `None` when ordered by arrival.
    fn order_keys(&self, data: &RecordBatch) -> Result<Option<arrow::row::Rows>> {
        if self.spec.arrival.is_some() {
            return Ok(None);
        }
        let order: Vec<Arc<dyn PhysicalExpr>> = self.spec.order.iter().map(|(e, _)| e.clone()).collect();
        Ok(Some(
            self.order_of.convert_columns(&TopN::evaluate(&order, data)?)?,
        ))
    }

    /// Each row's partition key; `None` without `PARTITION BY` (one
    /// partition, the empty key).
    fn partition_keys(&self, data: &RecordBatch) -> Result<Option<arrow::row::Rows>> {
        if self.spec.partition.is_empty() {
            return Ok(None);
        }
        let keys = TopN::evaluate(&self.spec.partition, data)?;
        Ok(Some(self.partitions_of.convert_columns(&keys)?))
    }

    /// The next row's place number.
    fn next_number(&mut self) -> u64 {
        self.seq += 1;
        match self.spec.newest_first() {
            true => u64::MAX - self.seq,
            false => self.seq,
        }
    }

    /// Adds (`insert`) or retracts `row` (ordered by `order`) in its
    /// partition; the rows to emit, as (bytes, rank, kind), onto `out`.
    /// Whether it created the partition.
    fn change(
        &mut self,
        partition: &[u8],
        (order, row): (&[u8], &[u8]),
        (insert, now): (bool, i64),
        out: &mut Vec<(Arc<[u8]>, u64, RowKind)>,
    ) -> bool {
        if let Some(ttl) = self.spec.ttl_ms()
            && self
                .partitions
                .get(partition)
                .is_some_and(|p| now - p.written >= ttl)
        {
            // Expired: forgotten without a retraction, as Flink's TTL.
            self.partitions.remove(partition);
        }
        let (kind, end) = (self.spec.rank_type, self.spec.end);
        let keep_all = self.spec.retract;
        let number = if insert { self.next_number() } else { 0 };
        let row: Arc<[u8]> = row.into();
        let tie = match self.spec.arrival {
            Some(_) => self.no_tie.clone(),
            None => row.clone(),
        };
        let created = !self.partitions.contains_key(partition);
        if !insert && created {
            return false;
        }
        if let Some(changed) = &mut self.changed
            && !changed.contains(partition)
        {
            changed.insert(partition.into());
        }
        let kept =
            (self.partitions).get_or_insert_with(partition, || (partition.into(), Partition::default()));
        kept.written = now;
        let rows = &mut kept.rows;
        // Insert-only ROW_NUMBER: a row after a full partition never ranks.
        if insert && !keep_all && kind == RankType::RowNumber && rows.len() as u64 >= end {
            let last = rows.last();
            if last.is_some_and(|(o, t, n)| (order, &tie[..], number) > (&o[..], &t[..], *n)) {
                return false;
            }
        }
        let append = insert && !keep_all && kind == RankType::RowNumber && self.spec.window_end.is_none();
        if let (true, Entries::Few(rows)) = (append, &mut *rows) {
            let place = (order.into(), tie, number);
            append_row_number(
                rows,
                (place, row),
                (self.spec.start, end, self.spec.rank_output),
                out,
            );
            return created;
        }
        let place: Place = match insert {
            true => (order.into(), tie, number),
            false => {
                let low = (Box::<[u8]>::from(order), tie.clone(), 0);
                let found = rows
                    .from(Bound::Included(&low))
                    .take_while(|(p, _)| p.0 == low.0 && p.1 == tie)
                    .find(|(_, r)| r[..] == row[..]);
                match found {
                    Some((place, _)) => place.clone(),
                    None => return false,
                }
            }
        };
        let Some((position, previous, last)) = before(rows, &place, kind, end) else {
            // Ranked after `end`: kept only when every row is.
            if keep_all {
                match insert {
                    true => rows.insert(place, row),
                    false => rows.remove(&place),
                };
            }
            return false;
        };
        let context = (position, previous, last.as_deref());
        let (old, _) = ranks_from(rows, Bound::Included(&place), context, kind, end);
        match insert {
            true => rows.insert(place.clone(), row),
            false => rows.remove(&place),
        };
        let (new, after_end) = ranks_from(rows, Bound::Included(&place), context, kind, end);
        if let (false, Some(after_end)) = (keep_all, after_end) {
            rows.truncate_at(&after_end);
        }
        if rows.is_empty() {
            self.partitions.remove(partition);
        }
        if self.spec.window_end.is_some() {
            return created;
        }
        let ids = |ranked: &[RankedRow]| ranked.iter().map(|(n, r, _)| (*n, *r)).collect::<Vec<_>>();
        for change in changes::rank_changes(&ids(&old), &ids(&new), self.spec.start, self.spec.rank_output) {
            match change {
                Change::Update(i, j) => {
                    out.push((old[i].2.clone(), old[i].1, RowKind::UpdateBefore));
                    out.push((new[j].2.clone(), new[j].1, RowKind::UpdateAfter));
                }
                Change::Delete(i) => out.push((old[i].2.clone(), old[i].1, RowKind::Delete)),
                Change::Insert(j) => out.push((new[j].2.clone(), new[j].1, RowKind::Insert)),
            }
        }
        created
    }

    /// Rows as a batch of the output schema, each with its rank and kind.
    fn emit(&self, changes: &[(Arc<[u8]>, u64, RowKind)], out: &mut Output) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let parser = self.rows_of.parser();
        let mut columns = self
            .rows_of
            .convert_rows(changes.iter().map(|(r, _, _)| parser.parse(r)))?;
        if self.spec.rank_output {
            columns.push(Arc::new(UInt64Array::from_iter_values(
                changes.iter().map(|(_, rank, _)| *rank),
            )));
        }
        let kinds: Vec<RowKind> = changes.iter().map(|(_, _, k)| *k).collect();
        match self.spec.insert_only() {
            true => out.batch(RecordBatch::try_new(self.spec.schema.clone(), columns)?),
            false => out.batch(changelog::with_kinds(&self.spec.schema, columns, &kinds)?),
        }
        Ok(())
    }

    /// Each row's window end for a window TopN (`Some(0)` for others);
    /// `None` for a late row (its window fired), which is dropped and counted.
    fn window_ends(&mut self, data: &RecordBatch) -> Result<Vec<Option<Timestamp>>> {
        let Some(column) = self.spec.window_end else {
            return Ok(vec![Some(0); data.num_rows()]);
        };
        let ends = crate::join::window::millis(data.column(column))?;
        let watermark = self.watermark;
        let ends: Vec<Option<Timestamp>> = ends
            .into_iter()
            .map(|end| (end != i64::MIN && end - 1 > watermark).then_some(end))
            .collect();
        let late = ends.iter().filter(|e| e.is_none()).count();
        TaskMetrics::add(&self.metrics.late_records_dropped, late as u64);
        Ok(ends)
    }

    /// State rows of kept rows, each with its 0-based rank in its
    /// partition and its partition's write time, sorted by key group;
    /// `None` for none.
    fn state_rows(&self, kept: &[(usize, &Arc<[u8]>, i64)]) -> Result<Option<RecordBatch>> {
        self.state_batch(kept, true)
    }

    /// [`TopNOperator::state_rows`], in the order of `kept` unless `sorted`.
    fn state_batch(&self, kept: &[(usize, &Arc<[u8]>, i64)], sorted: bool) -> Result<Option<RecordBatch>> {
        state_batch(&self.spec, &self.rows_of, self.max_parallelism, kept, sorted)
    }

    /// State rows read as input rows: their partitions, window ends, order
    /// keys, bytes and ranks.
    fn restored(&mut self, rows: &RecordBatch) -> Result<Restored> {
        let width = self.spec.input.fields().len();
        let data = RecordBatch::try_new(self.spec.input.clone(), rows.columns()[1..1 + width].to_vec())
            .map_err(|e| Error::State(format!("{}: kept rows: {e}", self.spec.name.clone())))?;
        Ok(Restored {
            partitions: self.partition_keys(&data)?,
            ends: self.window_ends(&data)?,
            orders: self.order_keys(&data)?,
            converted: self.rows_of.convert_columns(data.columns())?,
            positions: rows.column(1 + width).as_primitive::<UInt32Type>().clone(),
            written: (self.spec.state_ttl.is_some()).then(|| {
                rows.column(2 + width)
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .clone()
            }),
        })
    }

    /// The parts of a replacing snapshot of the partitions of `keys`: the
    /// kept rows of those memory holds rows of, keyed by partition, and a
    /// deleting part for the others.
    fn partition_parts(&self, keys: Vec<&[u8]>) -> Result<Vec<ReplacedPart>> {
        let (present, gone): (Vec<&[u8]>, Vec<&[u8]>) =
            (keys.into_iter()).partition(|k| self.partitions.get(k).is_some_and(|p| !p.rows.is_empty()));
        let mut kept = Vec::new();
        let mut state_keys = arrow::array::BinaryBuilder::new();
        for key in &present {
            let partition = &self.partitions[*key];
            for (i, (_, row)) in partition.rows.rows().enumerate() {
                kept.push((i, row, partition.written));
                state_keys.append_value(key);
            }
        }
        let mut parts = Vec::new();
        if let Some(rows) = self.state_batch(&kept, false)? {
            parts.push((rows, state_keys.finish(), false));
        }
        if !gone.is_empty() {
            let groups = self.key_groups_of(&gone)?;
            let keys = arrow::array::BinaryArray::from_iter_values(gone.iter());
            parts.push(deleted_part(&self.spec.state_schema(), groups, keys)?);
        }
        Ok(parts)
    }

    /// Ranks a batch's rows (with their op column) and emits the changes.
    fn process(&mut self, batch: &RecordBatch, out: &mut Output) -> Result<()> {
        let kinds = changelog::row_kinds(batch)?;
        let data = changelog::data(batch);
        let partitions = self.partition_keys(&data)?;
        if self.spilled_to_files() {
            let keys: Vec<&[u8]> = (0..data.num_rows())
                .map(|i| partitions.as_ref().map_or(&[][..], |p| p.row(i).data()))
                .collect();
            self.decode_read(&keys)?;
        }
        let ends = self.window_ends(&data)?;
        let orders = self.order_keys(&data)?;
        let rows = self.rows_of.convert_columns(data.columns())?;
        let mut changes = Vec::new();
        let now = weir_common::time::wall_clock_millis();
        for (i, end) in ends.into_iter().enumerate() {
            let Some(end) = end else { continue };
            let partition = partitions.as_ref().map_or(&[][..], |p| p.row(i).data());
            let order = orders.as_ref().map_or(&[][..], |o| o.row(i).data());
            let insert = matches!(kinds[i], RowKind::Insert | RowKind::UpdateAfter);
            if self.change(
                partition,
                (order, rows.row(i).data()),
                (insert, now),
                &mut changes,
            ) {
                self.created(partition, end);
            }
        }
        self.emit(&changes, out)
    }

    /// Emits the ranks of every window that ended by the watermark, whose
    /// partitions go.
    fn fire(&mut self, out: &mut Output) -> Result<()> {
        let mut fired = Vec::new();
        while let Some(entry) = self.windows.first_entry() {
            if entry.key().saturating_sub(1) > self.watermark {
                break;
            }
            let partitions = entry.remove();
            let keys: Vec<&[u8]> = partitions.iter().map(|p| &p[..]).collect();
            self.load_parts_of(&keys)?;
            self.decode_read(&keys)?;
            for partition in partitions {
                let Some(kept) = self.partitions.remove(&partition) else {
                    continue;
                };
                if let Some(changed) = &mut self.changed {
                    changed.insert(partition.clone());
                }
                let (ranked, _) = ranks_from(
                    &kept.rows,
                    Bound::Unbounded,
                    (0, 0, None),
                    self.spec.rank_type,
                    self.spec.end,
                );
                fired.extend(
                    ranked
                        .into_iter()
                        .filter(|(_, rank, _)| *rank >= self.spec.start)
                        .map(|(_, rank, row)| (row, rank, RowKind::Insert)),
                );
            }
        }
        self.emit(&fired, out)
    }

    /// Remembers a window TopN's new partition for firing at `end`.
    fn created(&mut self, partition: &[u8], end: Timestamp) {
        if self.spec.window_end.is_some() {
            self.windows.entry(end).or_default().push(partition.into());
        }
    }
}

impl Operator for TopNOperator {
    fn name(&self) -> String {
        self.spec.name.clone()
    }

    fn process_batch(&mut self, _input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        if self.spilled_to_files() {
            if let Some(now) = self.hold_unread(&batch)? {
                self.process(&now, out)?;
            }
            self.read_due(weir_common::time::wall_clock_millis(), out)?;
        } else {
            self.process(&batch, out)?;
        }
        self.spill_if_full(batch.num_rows())
    }

    fn process_watermark(&mut self, watermark: Timestamp, out: &mut Output) -> Result<()> {
        let next = self.watermark.max(watermark);
        let fires = (self.windows.first_key_value()).is_some_and(|(end, _)| end.saturating_sub(1) <= next);
        if self.spec.window_end.is_some() && fires {
            // Rows before the watermark rank in the windows it fires: they
            // are not late yet.
            self.read_all_waiting(out)?;
        }
        self.watermark = next;
        if self.spec.window_end.is_some() && fires {
            self.fire(out)?;
        }
        out.watermark(watermark);
        Ok(())
    }

    /// With a state TTL (to sweep), and with spilled state (rows waiting for
    /// their key group's read wait at most [`crate::waiting::LONGEST_WAIT_MS`]).
    fn uses_processing_time(&self) -> bool {
        self.spec.state_ttl.is_some() || self.spill.is_some()
    }

    /// Sweeps a slice of the partitions (and of the store) for expired
    /// ones: as many buckets as go round memory once every half TTL.
    fn on_processing_time(&mut self, now: Timestamp, out: &mut Output) -> Result<()> {
        self.read_due(now, out)?;
        let Some(ttl) = self.spec.ttl_ms() else {
            return Ok(());
        };
        // The first tick sweeps the floor only.
        let elapsed = if self.swept == 0 { 0 } else { now - self.swept };
        let slice = sweep_slice(self.partitions.buckets(), elapsed, ttl / 2, SWEEP);
        let changed = &mut self.changed;
        (self.partitions).sweep(&mut self.sweep, slice, |key, p| {
            let keep = now - p.written < ttl;
            if let (false, Some(changed)) = (keep, changed.as_mut()) {
                changed.insert(key.clone());
            }
            keep
        });
        self.swept = now;
        self.expire_read(now, ttl)?;
        self.sweep_files(now, ttl)
    }

    /// Rows waiting for spilled state are ranked before the barrier: the
    /// snapshot holds their partitions, and their changes precede it.
    fn prepare_snapshot(&mut self, out: &mut Output) -> Result<()> {
        self.read_all_waiting(out)
    }

    fn finish(&mut self, out: &mut Output) -> Result<()> {
        self.read_all_waiting(out)
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        self.no_rows_wait()?;
        if self.spilled_to_files() {
            let deferred = self.spilled_snapshot(false)?;
            let meta = match self.spec.window_end {
                Some(_) => OperatorSnapshot::with_watermark(self.watermark, None).meta,
                None => serde_json::Value::Null,
            };
            return Ok(Some(OperatorSnapshot {
                meta,
                rows: None,
                runs: Vec::new(),
                deferred,
                rows_later: None,
            }));
        }
        let kept: Vec<(usize, &Arc<[u8]>, i64)> = (self.partitions.values())
            .flat_map(|p| p.rows.rows().enumerate().map(|(i, (_, r))| (i, r, p.written)))
            .collect();
        let rows = self.state_rows(&kept)?;
        match (self.spec.window_end, rows) {
            // A window TopN saves its watermark even without rows: a row of
            // a window that fired stays late after a restore.
            (Some(_), rows) => Ok(Some(OperatorSnapshot::with_watermark(self.watermark, rows))),
            (None, None) => Ok(None),
            (None, Some(rows)) => Ok(Some(OperatorSnapshot {
                runs: Vec::new(),
                deferred: Vec::new(),
                rows_later: None,
                meta: serde_json::Value::Null,
                rows: Some(rows),
            })),
        }
    }

    fn delta_kind(&self) -> Option<DeltaKind> {
        self.changed.is_some().then_some(DeltaKind::Replace)
    }

    /// Every partition's rows (`full`), or those of the partitions changed
    /// since the last snapshot and a deleting row for each one gone; each
    /// row's state key is its partition key.
    fn snapshot_delta(&mut self, _checkpoint: CheckpointId, full: bool) -> Result<Option<OperatorSnapshot>> {
        // A window TopN's watermark: a row of a window that fired stays late.
        let meta = match self.spec.window_end {
            Some(_) => OperatorSnapshot::with_watermark(self.watermark, None).meta,
            None => serde_json::Value::Null,
        };
        self.no_rows_wait()?;
        if self.spilled_to_files() {
            let deferred = match full {
                true => self.spilled_snapshot(true)?,
                false => self.spilled_delta()?.into_iter().collect(),
            };
            return Ok(Some(OperatorSnapshot {
                meta,
                deferred,
                rows_later: None,
                ..OperatorSnapshot::default()
            }));
        }
        let changed = self.changed.as_mut().map(std::mem::take).unwrap_or_default();
        let keys: Vec<&[u8]> = match full {
            true => self.partitions.keys().map(|k| &k[..]).collect(),
            false => changed.iter().map(|k| &k[..]).collect(),
        };
        let parts = self.partition_parts(keys)?;
        Ok(Some(OperatorSnapshot {
            meta,
            rows: replacement_rows(&self.spec.state_schema(), parts, full)?,
            ..OperatorSnapshot::default()
        }))
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        if self.spec.window_end.is_some() {
            self.watermark = snapshot.watermark(&self.spec.name)?;
        }
        let Some(rows) = &snapshot.rows else {
            return Ok(());
        };
        OperatorSnapshot::check_columns(rows, &self.spec.state_schema(), &self.spec.name)?;
        if self
            .spill
            .as_ref()
            .is_some_and(|s| spill::holds_more_than_memory(s, rows))
        {
            return self.restore_spilled(rows);
        }
        let Restored {
            partitions,
            ends,
            orders,
            converted,
            positions,
            written,
        } = self.restored(rows)?;
        let mut by_position: Vec<usize> = (0..rows.num_rows()).collect();
        by_position.sort_by_key(|i| positions.value(*i));
        // Numbers that keep each partition's order and rank before any new
        // row's (after it, when ties rank newest first).
        let base = self.seq;
        self.seq += by_position.len() as u64 + 1;
        for (n, i) in by_position.into_iter().enumerate() {
            let number = match self.spec.newest_first() {
                true => u64::MAX - self.seq + 1 + n as u64,
                false => base + 1 + n as u64,
            };
            let partition = partitions.as_ref().map_or(&[][..], |p| p.row(i).data());
            let order = orders.as_ref().map_or(&[][..], |o| o.row(i).data());
            let row: Arc<[u8]> = converted.row(i).data().into();
            let tie = match self.spec.arrival {
                Some(_) => self.no_tie.clone(),
                None => row.clone(),
            };
            match self.partitions.get_mut(partition) {
                Some(kept) => {
                    kept.rows.insert((order.into(), tie, number), row);
                }
                None => {
                    let mut kept = Partition {
                        rows: Entries::default(),
                        written: written.as_ref().map_or(0, |w| w.value(i)),
                    };
                    kept.rows.insert((order.into(), tie, number), row);
                    self.partitions.insert(partition.into(), kept);
                    self.created(partition, ends[i].unwrap_or(i64::MIN));
                }
            }
        }
        self.spill_if_over()
    }

    fn restore_rescaled(&mut self, snapshots: Vec<OperatorSnapshot>) -> Result<()> {
        if self.spec.window_end.is_none() {
            for snapshot in snapshots {
                self.restore(snapshot)?;
            }
            return Ok(());
        }
        match OperatorSnapshot::merge_by_watermark(snapshots, &self.spec.name)? {
            Some(merged) => self.restore(merged),
            None => Ok(()),
        }
    }

    fn state_signature(&self) -> Result<Option<String>> {
        Ok(Some(schema_signature(&self.spec.state_schema())))
    }

    fn is_keyed(&self) -> bool {
        true
    }
}

/// The state rows of a TopN's `kept` rows (each with its rank's place in
/// its partition, its bytes as `rows_of` makes them and its write time),
/// sorted by key group if `sorted`, in the order of `kept` otherwise.
fn state_batch(
    spec: &TopN,
    rows_of: &RowConverter,
    max_parallelism: usize,
    kept: &[(usize, &Arc<[u8]>, i64)],
    sorted: bool,
) -> Result<Option<RecordBatch>> {
    if kept.is_empty() {
        return Ok(None);
    }
    let parser = rows_of.parser();
    let data = rows_of.convert_rows(kept.iter().map(|(_, r, _)| parser.parse(r)))?;
    let batch = RecordBatch::try_new(spec.input.clone(), data.clone())?;
    let partition = TopN::evaluate(&spec.partition, &batch)?;
    let mut columns: Vec<ArrayRef> = vec![Arc::new(key_groups(&partition, kept.len(), max_parallelism)?)];
    columns.extend(data);
    columns.push(Arc::new(UInt32Array::from_iter_values(
        kept.iter().map(|(p, _, _)| *p as u32),
    )));
    if spec.state_ttl.is_some() {
        columns.push(Arc::new(arrow::array::Int64Array::from_iter_values(
            kept.iter().map(|(_, _, w)| *w),
        )));
    }
    let schema = spec.state_schema();
    Ok(Some(match sorted {
        true => sorted_state_rows(&schema, columns)?,
        false => state_rows(&schema, columns)?,
    }))
}
