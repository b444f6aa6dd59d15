//! Interval joins: rows of two insert-only inputs with equal keys whose
//! times are within bounds of each other (`lower <= l.time - r.time <=
//! upper`), on event time or processing time, as Flink's
//! `TimeIntervalJoin`. A row is kept while rows of the other side that it
//! could join may still come (by the watermark), and forgotten after; an
//! outer side's row that never joined is then emitted padded with NULLs.
//! The output is insert-only and keeps the time attributes; its watermark
//! is held back by the larger of the two bounds, as Flink's. Under the
//! spilling backend, rows beyond the memory budget go to a store
//! (`interval/spill.rs`).
//!
//! ```text
//!  left  ──HASH──►┐  rows by key and time; watermark w: left rows with
//!                 IntervalJoin   l.time < w + lower and right rows with
//!  right ──HASH──►┘  r.time < w - upper can join nothing more: dropped
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, UInt32Array, new_null_array};
use arrow::compute::take;
use arrow::datatypes::{DataType, Field, Int8Type, Int64Type, Schema, SchemaRef, TimestampMillisecondType};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use datafusion_physical_expr::PhysicalExpr;

use crate::Result;
use crate::join::{key_rows, pair_matches};
use weir_common::ids::CheckpointId;
use weir_common::time::Timestamp;
use weir_common::time::wall_clock_millis;
use weir_common::time::{MAX_WATERMARK, MIN_WATERMARK};
use weir_plan::join::JoinKind;
use weir_runtime::operator::OperatorSnapshot;
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};
use weir_state::memory_guess::SpillsWhenFull;
use weir_state::snapshot::{key_groups, schema_signature, sorted_state_rows};
use weir_state::spilled::SpillSlot;
use weir_state::store::{Entry, in_chunks};

mod delta;
mod spill;

/// An interval join of two inputs.
#[derive(Debug, Clone)]
pub struct IntervalJoin {
    /// Inner or which outer.
    pub kind: JoinKind,
    /// Each side's key expressions, over its columns.
    pub keys: [Vec<Arc<dyn PhysicalExpr>>; 2],
    /// The rest of the condition, over the left and right columns.
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// Each side's columns.
    pub inputs: [SchemaRef; 2],
    /// Each side's time attribute (position).
    pub times: [usize; 2],
    /// Least `l.time - r.time` (ms).
    pub lower: i64,
    /// Greatest `l.time - r.time` (ms).
    pub upper: i64,
    /// Processing time: a row's time is when it arrives.
    pub proctime: bool,
    /// Left columns then right ones.
    pub schema: SchemaRef,
    /// Its name in the plan (EXPLAIN's), for errors and logs.
    pub name: String,
}

impl IntervalJoin {
    /// How far the output watermark is behind the input's (ms).
    fn delay(&self) -> i64 {
        (-self.lower).max(self.upper).max(0)
    }

    /// The other side's times a row of `side` at `time` joins with.
    fn window(&self, side: usize, time: i64) -> (i64, i64) {
        match side {
            0 => (time.saturating_sub(self.upper), time.saturating_sub(self.lower)),
            _ => (time.saturating_add(self.lower), time.saturating_add(self.upper)),
        }
    }

    /// The latest time of a row of `side` that nothing arriving after
    /// watermark `w` can join: rows up to it are dropped.
    fn expired(&self, side: usize, w: i64) -> i64 {
        match side {
            0 => w.saturating_add(self.lower).saturating_sub(1),
            _ => w.saturating_sub(self.upper).saturating_sub(1),
        }
    }

    fn key_types(&self) -> Result<Vec<DataType>> {
        super::key_types(&self.keys, &self.inputs[0])
    }

    /// `_key_group`, `_side`, the left columns, the right ones, `_time`,
    /// `_emitted`.
    fn state_schema(&self) -> SchemaRef {
        let mut fields = super::two_sided_fields(&self.inputs);
        fields.push(Field::new("_time", DataType::Int64, false));
        fields.push(Field::new("_emitted", DataType::Boolean, false));
        Arc::new(Schema::new(fields))
    }
}

impl OperatorFactory for IntervalJoin {
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        // Incremental checkpoints track changed keys (spilled: those in
        // memory, until a spill notes them for the next delta).
        let side = || Side {
            changed: ctx.incremental.then(Default::default),
            ..Side::default()
        };
        Ok(Box::new(IntervalJoinOperator {
            rows_of: super::row_converters(&self.inputs)?,
            keys_of: RowConverter::new(self.key_types()?.into_iter().map(SortField::new).collect())?,
            sides: [side(), side()],
            watermark: MIN_WATERMARK,
            max_parallelism: ctx.max_parallelism,
            spill: (ctx.spill.clone()).map(|s| spill::IntervalSpill::new(s, ctx.incremental)),
            spec: Arc::new(self.clone()),
        }))
    }

    fn can_spill(&self) -> bool {
        true
    }
}

/// A kept row's place in time: its time, then its side's count of rows.
type At = (i64, u64);

/// A kept row, and whether it has joined (an outer side's unjoined rows
/// are emitted padded when they expire).
#[derive(Debug, Clone)]
struct Kept {
    row: Box<[u8]>,
    joined: bool,
}

/// One side's rows by key, then by time; and every row's key by time, to
/// drop expired rows in time order. A row is `(time, seq)` in both, `seq`
/// counting the side's rows, so that each is one entry: no vector per time,
/// and the key is shared (`Arc`), not copied, per row.
#[derive(Debug, Default)]
struct Side {
    keys: std::collections::HashMap<Arc<[u8]>, KeyRows, foldhash::fast::FixedState>,
    times: BTreeMap<(i64, u64), Arc<[u8]>>,
    seq: u64,
    /// Bytes its rows and keys take, about (the spilling backend's measure).
    bytes: usize,
    /// Incremental checkpoints: the keys whose rows (or their joined
    /// flags) changed since the last snapshot.
    changed: Option<ChangedKeys>,
}

/// A side's keys changed since the last snapshot.
type ChangedKeys = std::collections::HashSet<Arc<[u8]>, foldhash::fast::FixedState>;

/// Bytes a kept row takes besides its own: its entries in the time index
/// and its key's map (with the slack of their nodes), and its allocation.
const ROW_OVERHEAD: usize = 128;

/// Bytes a key takes besides its own: its slot (with its first row) and
/// its shared allocation.
const KEY_OVERHEAD: usize = 112;

/// One key's rows by `(time, seq)`: the first inline, a map from the
/// second on. A map of its own for every key took a 456-byte node for a
/// key's first row (3 GB on the heap for 2M keys of one row a side); a
/// deque instead made keys of many rows a third slower.
#[derive(Debug)]
struct KeyRows {
    key: Arc<[u8]>,
    rows: Rows,
}

#[derive(Debug)]
enum Rows {
    None,
    One((i64, u64), Kept),
    Many(BTreeMap<(i64, u64), Kept>),
}

impl KeyRows {
    fn insert(&mut self, at: (i64, u64), kept: Kept) {
        if let Rows::Many(map) = &mut self.rows {
            map.insert(at, kept);
            return;
        }
        self.rows = match std::mem::replace(&mut self.rows, Rows::None) {
            Rows::One(first, row) => {
                let mut map = BTreeMap::new();
                map.insert(first, row);
                map.insert(at, kept);
                Rows::Many(map)
            }
            _ => Rows::One(at, kept),
        }
    }

    fn remove(&mut self, at: (i64, u64)) -> Option<Kept> {
        match &mut self.rows {
            Rows::One(first, _) if *first == at => match std::mem::replace(&mut self.rows, Rows::None) {
                Rows::One(_, kept) => Some(kept),
                _ => unreachable!("matched above"),
            },
            Rows::Many(map) => map.remove(&at),
            _ => None,
        }
    }

    fn get_mut(&mut self, at: (i64, u64)) -> Option<&mut Kept> {
        match &mut self.rows {
            Rows::One(first, kept) if *first == at => Some(kept),
            Rows::Many(map) => map.get_mut(&at),
            _ => None,
        }
    }

    fn is_empty(&self) -> bool {
        match &self.rows {
            Rows::None => true,
            Rows::One(..) => false,
            Rows::Many(map) => map.is_empty(),
        }
    }

    /// Its rows with times from `from` to `to`, both included, in order.
    fn range(&self, from: i64, to: i64) -> RowRange<'_> {
        match &self.rows {
            Rows::None => RowRange::One(None),
            Rows::One(at, kept) => RowRange::One((from <= at.0 && at.0 <= to).then_some((at, kept))),
            Rows::Many(map) => RowRange::Many(map.range((from, 0)..=(to, u64::MAX))),
        }
    }

    /// All its rows, in order.
    fn iter(&self) -> impl Iterator<Item = (&(i64, u64), &Kept)> {
        self.range(i64::MIN, i64::MAX)
    }
}

/// A range of a key's rows ([`KeyRows::range`]).
enum RowRange<'a> {
    One(Option<(&'a (i64, u64), &'a Kept)>),
    Many(std::collections::btree_map::Range<'a, (i64, u64), Kept>),
}

impl<'a> Iterator for RowRange<'a> {
    type Item = (&'a (i64, u64), &'a Kept);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            RowRange::One(row) => row.take(),
            RowRange::Many(range) => range.next(),
        }
    }
}

impl Side {
    fn keep(&mut self, key: &[u8], time: i64, kept: Kept) {
        // Look up before `entry`, which would copy the key every time.
        let by_time = match self.keys.get_mut(key) {
            Some(by_time) => by_time,
            None => {
                self.bytes += key.len() + KEY_OVERHEAD;
                let key: Arc<[u8]> = key.into();
                self.keys.entry(key.clone()).or_insert(KeyRows {
                    key,
                    rows: Rows::None,
                })
            }
        };
        self.seq += 1;
        self.bytes += kept.row.len() + ROW_OVERHEAD;
        by_time.insert((time, self.seq), kept);
        self.times.insert((time, self.seq), by_time.key.clone());
        if let Some(changed) = &mut self.changed {
            changed.insert(by_time.key.clone());
        }
    }

    /// Notes that `key`'s rows changed (when changes are tracked).
    fn mark(&mut self, key: &Arc<[u8]>) {
        if let Some(changed) = &mut self.changed {
            changed.insert(key.clone());
        }
    }

    /// Drops the rows up to `time`; returns those that never joined.
    fn expire(&mut self, time: i64) -> Vec<Box<[u8]>> {
        let mut unjoined = Vec::new();
        while let Some(entry) = self.times.first_entry() {
            if entry.key().0 > time {
                break;
            }
            let (at, key) = entry.remove_entry();
            if let Some(changed) = &mut self.changed {
                changed.insert(key.clone());
            }
            let Some(by_time) = self.keys.get_mut(&key[..]) else {
                continue;
            };
            if let Some(kept) = by_time.remove(at) {
                self.bytes -= kept.row.len() + ROW_OVERHEAD;
                if !kept.joined {
                    unjoined.push(kept.row);
                }
            }
            if by_time.is_empty() {
                self.bytes -= key.len() + KEY_OVERHEAD;
                self.keys.remove(&key[..]);
            }
        }
        unjoined
    }
}

struct IntervalJoinOperator {
    spec: Arc<IntervalJoin>,
    rows_of: [RowConverter; 2],
    keys_of: RowConverter,
    sides: [Side; 2],
    /// The input watermark (event time) or the wall clock (processing time).
    watermark: Timestamp,
    max_parallelism: usize,
    /// The spilling backend: rows beyond the budget in a store.
    spill: Option<weir_state::spilled::Spilled<spill::IntervalSpill>>,
}

/// Where a candidate row of the other side is kept: in memory (by its
/// `(time, seq)`) or in the store (its entry among those read for the
/// batch: input row, then place).
#[derive(Debug, Clone, Copy)]
enum Place {
    Memory((i64, u64)),
    Store(usize, usize),
}

/// Output rows as indices: the input row and the other side's candidate
/// pair (None: padded).
#[derive(Default)]
struct Pairs {
    input: Vec<Option<u32>>,
    other: Vec<Option<u32>>,
}

impl IntervalJoinOperator {
    /// Each row's time: its time attribute, or now on processing time.
    fn times(&self, side: usize, data: &RecordBatch, now: i64) -> Result<Vec<i64>> {
        if self.spec.proctime {
            return Ok(vec![now; data.num_rows()]);
        }
        let column = arrow::compute::cast(
            data.column(self.spec.times[side]),
            &DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, None),
        )?;
        let column = column.as_primitive::<TimestampMillisecondType>();
        Ok((0..column.len())
            .map(|i| {
                if column.is_valid(i) {
                    column.value(i)
                } else {
                    MIN_WATERMARK
                }
            })
            .collect())
    }

    fn process(&mut self, side: usize, data: &RecordBatch, out: &mut Output) -> Result<()> {
        let now = wall_clock_millis();
        if self.spec.proctime {
            self.advance(now, out)?;
        }
        let spec = self.spec.clone();
        let times = self.times(side, data, now)?;
        let (keys, null_keys) = key_rows(&spec.keys[side], &spec.key_types()?, &self.keys_of, data, false)?;
        let rows = self.rows_of[side].convert_columns(data.columns())?;
        let skip: Vec<bool> = (times.iter().enumerate())
            .map(|(i, t)| null_keys.as_ref().is_some_and(|n| n.is_null(i)) || *t == MIN_WATERMARK)
            .collect();
        // Candidate pairs: the other side's rows of the key within the
        // window, in memory and in the store.
        let stored = self.stored_candidates(side, &keys, &times, &skip)?;
        let (mut inputs, mut places, mut found) = (Vec::new(), Vec::new(), Vec::new());
        let parser = self.rows_of[1 - side].parser();
        for (i, time) in times.iter().enumerate() {
            if !skip[i] {
                let window = spec.window(side, *time);
                let memory = self.sides[1 - side].keys.get(keys.row(i).as_ref());
                let stored = stored.get(i).map_or(&[][..], |s| &s[..]);
                candidates(i, window, memory, stored, |place, row| {
                    inputs.push(i as u32);
                    places.push(place);
                    found.push(parser.parse(row));
                })?;
            }
        }
        let other = match found.is_empty() {
            true => None,
            false => Some(self.rows_of[1 - side].convert_rows(found)?),
        };
        let indices = UInt32Array::from(inputs.clone());
        let matched = match &other {
            Some(columns) => pair_matches(spec.filter.as_ref(), &spec.inputs, side, data, &indices, columns)?,
            None => Vec::new(),
        };
        let mut pairs = Pairs::default();
        let mut joined = vec![false; data.num_rows()];
        let mut stored_joined = Vec::new();
        for (p, ok) in matched.iter().enumerate() {
            if !ok {
                continue;
            }
            let i = inputs[p] as usize;
            joined[i] = true;
            pairs.input.push(Some(i as u32));
            pairs.other.push(Some(p as u32));
            if !spec.kind.outer(1 - side) {
                continue;
            }
            match places[p] {
                Place::Memory(at) => {
                    let other = &mut self.sides[1 - side];
                    let memory = other.keys.get_mut(keys.row(i).as_ref());
                    if let Some(rows) = memory
                        && let Some(kept) = rows.get_mut(at)
                        && !kept.joined
                    {
                        kept.joined = true;
                        let key = rows.key.clone();
                        other.mark(&key);
                    }
                }
                Place::Store(i, j) => stored_joined.push(&stored[i][j]),
            }
        }
        self.mark_stored_joined(&stored_joined)?;
        for (i, time) in times.iter().enumerate() {
            // Kept while rows of the other side it could join may still come.
            let (_, last) = spec.window(side, *time);
            if !skip[i] && self.watermark < last {
                let kept = Kept {
                    row: rows.row(i).as_ref().into(),
                    joined: joined[i],
                };
                self.sides[side].keep(keys.row(i).as_ref(), *time, kept);
            } else if !joined[i] && spec.kind.outer(side) {
                pairs.input.push(Some(i as u32));
                pairs.other.push(None);
            }
        }
        if !pairs.input.is_empty() {
            out.batch(self.output(side, data, other.as_deref(), pairs)?);
        }
        self.spill_if_full(data.num_rows())
    }

    /// Joined rows: the input side's taken by row, the other's by pair.
    fn output(
        &self,
        side: usize,
        data: &RecordBatch,
        other: Option<&[ArrayRef]>,
        pairs: Pairs,
    ) -> Result<RecordBatch> {
        let n = pairs.input.len();
        let mine_indices = UInt32Array::from(pairs.input);
        let mine = data
            .columns()
            .iter()
            .map(|c| Ok(take(c, &mine_indices, None)?))
            .collect::<Result<Vec<_>>>()?;
        let theirs = match other {
            Some(columns) => {
                let indices = UInt32Array::from(pairs.other);
                columns
                    .iter()
                    .map(|c| Ok(take(c, &indices, None)?))
                    .collect::<Result<Vec<_>>>()?
            }
            None => nulls(&self.spec.inputs[1 - side], n),
        };
        let (left, right) = if side == 0 { (mine, theirs) } else { (theirs, mine) };
        Ok(RecordBatch::try_new(
            self.spec.schema.clone(),
            left.into_iter().chain(right).collect(),
        )?)
    }

    /// Time reached `w`: drops what can join nothing more, emitting an
    /// outer side's unjoined rows padded.
    fn advance(&mut self, w: Timestamp, out: &mut Output) -> Result<()> {
        self.watermark = self.watermark.max(w);
        for side in 0..2 {
            let expired = self.spec.expired(side, self.watermark);
            let unjoined = self.sides[side].expire(expired);
            self.pad(side, &unjoined, out)?;
            while let Some(unjoined) = self.expire_stored(side, expired)? {
                self.pad(side, &unjoined, out)?;
            }
        }
        Ok(())
    }

    /// Emits `unjoined` rows of `side` padded with NULLs, if it is outer.
    fn pad<R: AsRef<[u8]>>(&self, side: usize, unjoined: &[R], out: &mut Output) -> Result<()> {
        if unjoined.is_empty() || !self.spec.kind.outer(side) {
            return Ok(());
        }
        let parser = self.rows_of[side].parser();
        let mine = self.rows_of[side].convert_rows(unjoined.iter().map(|r| parser.parse(r.as_ref())))?;
        let theirs = nulls(&self.spec.inputs[1 - side], unjoined.len());
        let (left, right) = if side == 0 { (mine, theirs) } else { (theirs, mine) };
        out.batch(RecordBatch::try_new(
            self.spec.schema.clone(),
            left.into_iter().chain(right).collect(),
        )?);
        Ok(())
    }

    /// One side's kept rows as state columns.
    fn side_state(&self, side: usize) -> Result<Option<Vec<ArrayRef>>> {
        self.rows_state(side, self.sides[side].keys.values())
    }

    /// The kept rows of `side` of the keys `of` as state columns.
    fn rows_state<'a>(
        &self,
        side: usize,
        of: impl Iterator<Item = &'a KeyRows>,
    ) -> Result<Option<Vec<ArrayRef>>> {
        let (key_parser, row_parser) = (self.keys_of.parser(), self.rows_of[side].parser());
        let mut keys = Vec::new();
        let mut kept = SideRows::default();
        for by_time in of {
            let key = &by_time.key;
            for ((t, _), k) in by_time.iter() {
                keys.push(key_parser.parse(key));
                kept.rows.push(row_parser.parse(&k.row));
                kept.times.push(*t);
                kept.joined.push(k.joined);
            }
        }
        if keys.is_empty() {
            return Ok(None);
        }
        let n = keys.len();
        let key_columns = self.keys_of.convert_rows(keys)?;
        let groups = key_groups(&key_columns, n, self.max_parallelism)?;
        side_columns(&self.spec, &self.rows_of[side], side, groups, kept).map(Some)
    }

    fn restore_side(&mut self, side: usize, rows: &RecordBatch) -> Result<()> {
        let sides = rows.column(1).as_primitive::<Int8Type>();
        let mask: BooleanArray = sides.iter().map(|s| Some(s == Some(side as i8))).collect();
        let rows = arrow::compute::filter_record_batch(rows, &mask)?;
        let widths = [
            self.spec.inputs[0].fields().len(),
            self.spec.inputs[1].fields().len(),
        ];
        let start = 2 + if side == 0 { 0 } else { widths[0] };
        let data = RecordBatch::try_new(
            self.spec.inputs[side].clone(),
            rows.columns()[start..start + widths[side]].to_vec(),
        )?;
        let (keys, _) = key_rows(
            &self.spec.keys[side],
            &self.spec.key_types()?,
            &self.keys_of,
            &data,
            true,
        )?;
        let converted = self.rows_of[side].convert_columns(data.columns())?;
        let times = rows.column(2 + widths[0] + widths[1]).as_primitive::<Int64Type>();
        let joined = rows.column(3 + widths[0] + widths[1]).as_boolean();
        for i in 0..rows.num_rows() {
            let kept = Kept {
                row: converted.row(i).as_ref().into(),
                joined: joined.value(i),
            };
            self.sides[side].keep(keys.row(i).as_ref(), times.value(i), kept);
        }
        Ok(())
    }
}

/// Kept rows of one side, as state columns take them.
#[derive(Default)]
struct SideRows<'a> {
    rows: Vec<arrow::row::Row<'a>>,
    times: Vec<i64>,
    joined: Vec<bool>,
}

/// State columns of rows of `side` (bytes of `converter`) in key groups
/// `groups`: `_key_group`, `_side`, the left columns, the right ones (NULL
/// on the other side), `_time`, `_emitted`.
fn side_columns(
    spec: &IntervalJoin,
    converter: &RowConverter,
    side: usize,
    groups: arrow::array::UInt32Array,
    kept: SideRows,
) -> Result<Vec<ArrayRef>> {
    let data = converter.convert_rows(kept.rows)?;
    let mut columns = super::one_side_columns(&spec.inputs, side, groups, &data);
    columns.push(Arc::new(Int64Array::from(kept.times)));
    columns.push(Arc::new(BooleanArray::from(kept.joined)));
    Ok(columns)
}

/// The rows of one key of the other side within `window` (times, both
/// included) for input row `input`, given to `take`: those `memory` keeps
/// and those read from the store (`stored`), merged in `(time, seq)` order
/// as one map would hold them.
fn candidates<'a>(
    input: usize,
    (from, to): (i64, i64),
    memory: Option<&'a KeyRows>,
    stored: &'a [Entry],
    mut take: impl FnMut(Place, &'a [u8]),
) -> Result<()> {
    let mut memory = match memory {
        Some(rows) => rows.range(from, to),
        None => RowRange::One(None),
    }
    .peekable();
    for (j, (key, value)) in stored.iter().enumerate() {
        let at = spill::row_time(key)?;
        while let Some((earlier, kept)) = memory.next_if(|(a, _)| **a < at) {
            take(Place::Memory(*earlier), &kept.row);
        }
        take(Place::Store(input, j), spill::row_bytes(value)?);
    }
    for (at, kept) in memory {
        take(Place::Memory(*at), &kept.row);
    }
    Ok(())
}

fn nulls(schema: &SchemaRef, n: usize) -> Vec<ArrayRef> {
    schema
        .fields()
        .iter()
        .map(|f| new_null_array(f.data_type(), n))
        .collect()
}

impl Operator for IntervalJoinOperator {
    fn name(&self) -> String {
        self.spec.name.clone()
    }

    fn process_batch(&mut self, input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        self.process(input.min(1), &batch, out)
    }

    fn process_watermark(&mut self, watermark: Timestamp, out: &mut Output) -> Result<()> {
        if !self.spec.proctime {
            self.advance(watermark, out)?;
        }
        let held = match watermark {
            MAX_WATERMARK => MAX_WATERMARK,
            w => w.saturating_sub(self.spec.delay()),
        };
        out.watermark(held);
        Ok(())
    }

    fn uses_processing_time(&self) -> bool {
        self.spec.proctime
    }

    fn on_processing_time(&mut self, now: Timestamp, out: &mut Output) -> Result<()> {
        self.advance(now, out)
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        if self.spill.has_spilled() {
            return self.spilled_snapshot().map(Some);
        }
        let columns = super::concat_sides([self.side_state(0)?, self.side_state(1)?])?;
        // The watermark is saved too: which rows are kept depends on it.
        let rows = columns
            .map(|c| sorted_state_rows(&self.spec.state_schema(), c))
            .transpose()?;
        Ok(Some(OperatorSnapshot::with_watermark(self.watermark, rows)))
    }

    fn delta_kind(&self) -> Option<weir_state::incremental::DeltaKind> {
        (self.sides[0].changed.is_some()).then_some(weir_state::incremental::DeltaKind::Replace)
    }

    fn snapshot_delta(&mut self, checkpoint: CheckpointId, full: bool) -> Result<Option<OperatorSnapshot>> {
        if self.sides[0].changed.is_none() {
            return self.snapshot(checkpoint);
        }
        if self.spill.has_spilled() {
            return self.spilled_delta(full).map(Some);
        }
        let rows = self.delta(full)?;
        Ok(Some(OperatorSnapshot::with_watermark(self.watermark, rows)))
    }

    fn restore_rescaled(&mut self, snapshots: Vec<OperatorSnapshot>) -> Result<()> {
        match OperatorSnapshot::merge_by_watermark(snapshots, &self.spec.name)? {
            Some(merged) => self.restore(merged),
            None => Ok(()),
        }
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        if !self.spec.proctime {
            self.watermark = snapshot.watermark(&self.spec.name)?;
        }
        let Some(rows) = &snapshot.rows else {
            return Ok(());
        };
        OperatorSnapshot::check_columns(rows, &self.spec.state_schema(), &self.spec.name)?;
        // A chunk at a time: with the spilling backend, memory goes to the
        // store whenever it holds more than its share.
        for chunk in in_chunks(rows) {
            self.restore_side(0, &chunk)?;
            self.restore_side(1, &chunk)?;
            self.spill_if_over()?;
        }
        Ok(())
    }

    fn state_signature(&self) -> Result<Option<String>> {
        Ok(Some(schema_signature(&self.spec.state_schema())))
    }

    fn is_keyed(&self) -> bool {
        true
    }
}
