//! Regular streaming joins (`INNER`, `LEFT`, `RIGHT`, `FULL OUTER`) on equal
//! keys plus any residual condition, over insert-only or updating inputs,
//! emitting the changes Flink's `StreamingJoinOperator` emits.
//!
//! Each side keeps its rows by join key (keyed state, by key group); a row
//! arriving on one side is matched against the other side's rows of its
//! key, the residual condition evaluated for every candidate pair of a batch
//! at once, and the changes are decided row by row ([`state::decide`]).
//! A row whose key has a NULL matches nothing (SQL's `=`) and is not kept.
//!
//! ```text
//!  left  ──HASH[left keys]──►┐
//!                            Join ──► joined rows (+I; -D/+I of padded rows; kinds passed on)
//!  right ──HASH[right keys]─►┘
//! ```

pub mod interval;
pub mod lookup;
mod spill;
pub mod state;
pub mod temporal;
#[cfg(test)]
mod tests;
pub mod window;

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BinaryBuilder, BooleanArray, Int8Array, Int64Array, UInt32Array,
    new_null_array,
};
use arrow::compute::take;
use arrow::datatypes::{DataType, Field, Int8Type, Int64Type, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, Rows, SortField};
use datafusion_physical_expr::PhysicalExpr;

use crate::join::state::{Bucket, Emit, SideState, Tally, decide};
use crate::waiting::ReadsWaiting;
use crate::{Error, Result};
use weir_common::changelog::{self, RowKind};
use weir_common::ids::CheckpointId;
use weir_plan::join::{JoinKind, Layout, joined_schema};
use weir_runtime::operator::OperatorSnapshot;
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};
use weir_state::incremental::{DeltaKind, deleted_part, replacement_rows};
use weir_state::keyed_map::sweep_slice;
use weir_state::memory_guess::SpillsWhenFull;
use weir_state::snapshot::{KEY_GROUP_COLUMN, key_groups, schema_signature, sorted_state_rows, state_rows};
use weir_state::spilled::SpillSlot;
use weir_state::store::SWEEP;

/// A regular join of two inputs.
#[derive(Debug, Clone)]
pub struct Join {
    /// Inner or which outer.
    pub kind: JoinKind,
    /// Each side's key expressions, over that side's data columns.
    pub keys: [Vec<Arc<dyn PhysicalExpr>>; 2],
    /// The residual condition, over the left and then the right data columns.
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// Each side's data columns (without an op column).
    pub inputs: [SchemaRef; 2],
    /// Whether each input updates.
    pub updating: [bool; 2],
    /// Whether NULL keys are equal (`IS NOT DISTINCT FROM`) rather than
    /// matching nothing.
    pub null_equal: bool,
    /// Each input's unique (upsert) key, when it has one (its columns).
    pub unique_keys: [Option<Vec<usize>>; 2],
    /// Left columns then right ones, with the op column when it updates.
    pub schema: SchemaRef,
    /// `table.exec.state.ttl`: a row not written for this long (by the
    /// wall clock) is forgotten, as Flink's join state.
    pub state_ttl: Option<std::time::Duration>,
    /// Its name in the plan (EXPLAIN's), for errors and logs.
    pub name: String,
}

impl Join {
    /// How side `side` keeps its rows, from what it is unique on: its join
    /// key (one row per join key), another key (one row per unique key), or
    /// nothing (a multiset), as Flink's `JoinInputSideSpec`.
    pub fn layout(&self, side: usize) -> Layout {
        let key_columns: Vec<usize> = self.keys[side]
            .iter()
            .filter_map(|k| {
                k.downcast_ref::<datafusion_physical_expr::expressions::Column>()
                    .map(|c| c.index())
            })
            .collect();
        Layout::of(
            self.unique_keys[side].as_deref(),
            &key_columns,
            self.updating[side],
        )
    }

    /// The key columns' types (the left's; the right's are cast to them).
    /// Without keys (a join on a condition only), one constant key.
    fn key_types(&self) -> Result<Vec<DataType>> {
        key_types(&self.keys, &self.inputs[0])
    }

    /// `_key_group`, `_side` (0 left, 1 right), every left column, every
    /// right column (the other side's are NULL), `_count`, `_matches`, and
    /// `_written` with a state TTL.
    fn state_schema(&self) -> SchemaRef {
        let mut fields = two_sided_fields(&self.inputs);
        fields.push(Field::new("_count", DataType::Int64, false));
        fields.push(Field::new("_matches", DataType::Int64, false));
        if self.state_ttl.is_some() {
            fields.push(Field::new("_written", DataType::Int64, false));
        }
        Arc::new(Schema::new(fields))
    }

    fn ttl_ms(&self) -> Option<i64> {
        self.state_ttl.map(|t| t.as_millis() as i64)
    }
}

/// The operator factory of a regular join.
#[derive(Debug, Clone)]
pub struct JoinFactory(pub Arc<Join>);

impl OperatorFactory for JoinFactory {
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        let join = self.0.clone();
        Ok(Box::new(JoinOperator {
            codec: Codec::new(&join, ctx.max_parallelism)?,
            sides: [0, 1].map(|side| {
                let state = SideState::new(
                    join.layout(side),
                    join.kind.counts_matches(side),
                    join.state_ttl.is_some(),
                )
                .with_width(state::row_width(&join.inputs[side]));
                if ctx.incremental {
                    state.tracking_changes()
                } else {
                    state
                }
            }),
            max_parallelism: ctx.max_parallelism,
            swept: 0,
            sweeps: [0, 0],
            spill: ctx
                .spill
                .clone()
                .map(|settings| spill::JoinSpill::new(settings, ctx.incremental, ctx.max_parallelism)),
            join,
        }))
    }

    fn can_spill(&self) -> bool {
        true
    }
}

/// The key columns' types: the left's (the right's are cast to them);
/// without keys (a join on a condition only), one constant key.
pub(crate) fn key_types(keys: &[Vec<Arc<dyn PhysicalExpr>>; 2], left: &Schema) -> Result<Vec<DataType>> {
    if keys[0].is_empty() {
        return Ok(vec![DataType::Int8]);
    }
    keys[0].iter().map(|k| Ok(k.data_type(left)?)).collect()
}

/// `_key_group`, `_side` (0 left, 1 right), then every left and every
/// right column (NULL in the other side's rows): the first columns of a
/// two-input join's state rows.
pub(crate) fn two_sided_fields(inputs: &[SchemaRef; 2]) -> Vec<Field> {
    let mut fields = vec![
        Field::new(KEY_GROUP_COLUMN, DataType::UInt32, false),
        Field::new("_side", DataType::Int8, false),
    ];
    for (prefix, input) in ["left", "right"].iter().zip(inputs) {
        fields.extend(
            input
                .fields()
                .iter()
                .map(|f| Field::new(format!("{prefix}_{}", f.name()), f.data_type().clone(), true)),
        );
    }
    fields
}

/// Both sides' state columns, one side's rows after the other's.
pub(crate) fn concat_sides(sides: [Option<Vec<ArrayRef>>; 2]) -> Result<Option<Vec<ArrayRef>>> {
    let mut columns: Option<Vec<ArrayRef>> = None;
    for side in sides.into_iter().flatten() {
        columns = Some(match columns {
            None => side,
            Some(before) => before
                .iter()
                .zip(&side)
                .map(|(x, y)| Ok(arrow::compute::concat(&[x.as_ref(), y.as_ref()])?))
                .collect::<Result<Vec<_>>>()?,
        });
    }
    Ok(columns)
}

struct JoinOperator {
    join: Arc<Join>,
    /// Rows and keys as bytes, and back.
    codec: Codec,
    sides: [SideState; 2],
    max_parallelism: usize,
    /// When expired rows were last swept (ms).
    swept: i64,
    /// Where each side's next sweep starts (a bucket).
    sweeps: [usize; 2],
    /// The spilling state backend: keys beyond the budget in its store.
    spill: Option<weir_state::spilled::Spilled<spill::JoinSpill>>,
}

/// A regular join's rows and keys as bytes and back, and its state rows
/// from them: owned, so that a snapshot's writer can make state rows on a
/// thread of its own.
struct Codec {
    join: Arc<Join>,
    /// Each side's rows as bytes, and back.
    rows_of: [RowConverter; 2],
    /// Keys as bytes, and back.
    keys_of: RowConverter,
    max_parallelism: usize,
}

impl Codec {
    fn new(join: &Arc<Join>, max_parallelism: usize) -> Result<Codec> {
        Ok(Codec {
            join: join.clone(),
            rows_of: row_converters(&join.inputs)?,
            keys_of: RowConverter::new(join.key_types()?.into_iter().map(SortField::new).collect())?,
            max_parallelism,
        })
    }

    /// Rows that delete `keys` of one side: key group, side, state key.
    pub(super) fn deleted_keys(&self, side: usize, keys: &[&[u8]]) -> Result<Part> {
        let parser = self.keys_of.parser();
        let key_columns = self.keys_of.convert_rows(keys.iter().map(|k| parser.parse(k)))?;
        let n = keys.len();
        let groups = key_groups(&key_columns, n, self.max_parallelism)?;
        let state_keys = BinaryArray::from_iter_values(keys.iter().map(|k| state_key(side, k)));
        let (rows, state_keys, deleted) = deleted_part(&self.join.state_schema(), groups, state_keys)?;
        // The side column says whose key goes.
        let mut columns = rows.columns().to_vec();
        columns[1] = Arc::new(Int8Array::from(vec![side as i8; n]));
        Ok((RecordBatch::try_new(rows.schema(), columns)?, state_keys, deleted))
    }

    /// The state rows of `buckets` of one side, and each row's state key
    /// (the side and the join key's bytes, for incremental chains).
    pub(super) fn bucket_rows<'a>(
        &self,
        side: usize,
        buckets: impl Iterator<Item = (&'a [u8], &'a Bucket)>,
    ) -> Result<Option<(Vec<ArrayRef>, BinaryArray)>> {
        let (key_parser, row_parser) = (self.keys_of.parser(), self.rows_of[side].parser());
        let mut keys = Vec::new();
        let mut rows = Vec::new();
        let mut tallies = Vec::new();
        let mut written = Vec::new();
        let mut state_keys = BinaryBuilder::new();
        for (key, bucket) in buckets {
            for j in 0..bucket.len() {
                keys.push(key_parser.parse(key));
                rows.push(row_parser.parse(bucket.row(j)));
                tallies.push(bucket.tally(j));
                written.push(bucket.written(j));
                state_keys.append_value(state_key(side, key));
            }
        }
        let n = rows.len();
        if n == 0 {
            return Ok(None);
        }
        let key_columns = self.keys_of.convert_rows(keys)?;
        let data = self.rows_of[side].convert_rows(rows)?;
        let groups = key_groups(&key_columns, n, self.max_parallelism)?;
        let mut columns = one_side_columns(&self.join.inputs, side, groups, &data);
        columns.push(Arc::new(Int64Array::from_iter_values(
            tallies.iter().map(|t| t.count),
        )));
        columns.push(Arc::new(Int64Array::from_iter_values(
            tallies.iter().map(|t| t.matches),
        )));
        if self.join.state_ttl.is_some() {
            columns.push(Arc::new(Int64Array::from(written)));
        }
        Ok(Some((columns, state_keys.finish())))
    }
}

/// The key group of each row of `data` (columns of `schema`), from its
/// key columns `exprs` as the exchange hashed them (a row with a NULL key
/// has one too): for state kept as rows, without their keys' bytes.
fn row_key_groups(
    exprs: &[Arc<dyn PhysicalExpr>],
    schema: &SchemaRef,
    data: &[ArrayRef],
    max_parallelism: usize,
) -> Result<UInt32Array> {
    let n = data.first().map_or(0, |c| c.len());
    let batch = RecordBatch::try_new(schema.clone(), data.to_vec())?;
    let keys: Vec<ArrayRef> = exprs
        .iter()
        .map(|k| Ok(k.evaluate(&batch)?.into_array(n)?))
        .collect::<Result<_>>()?;
    weir_state::snapshot::key_groups(&keys, n, max_parallelism)
}

/// One side's rows as the first columns of a two-sided state table
/// ([`two_sided_fields`]): their key groups, the side, its columns, and the
/// other side's as NULLs.
fn one_side_columns(
    inputs: &[SchemaRef; 2],
    side: usize,
    groups: UInt32Array,
    data: &[ArrayRef],
) -> Vec<ArrayRef> {
    let n = groups.len();
    let mut columns: Vec<ArrayRef> = vec![Arc::new(groups), Arc::new(Int8Array::from(vec![side as i8; n]))];
    for (s, input) in inputs.iter().enumerate() {
        match s == side {
            true => columns.extend(data.iter().cloned()),
            false => columns.extend(input.fields().iter().map(|f| new_null_array(f.data_type(), n))),
        }
    }
    columns
}

/// Each side's rows as bytes, and back.
fn row_converters(inputs: &[SchemaRef; 2]) -> Result<[RowConverter; 2]> {
    let of = |input: &SchemaRef| {
        let fields = (input.fields().iter())
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        RowConverter::new(fields)
    };
    Ok([of(&inputs[0])?, of(&inputs[1])?])
}

/// Part of a file of a join's chain (see [`replacement_rows`]).
type Part = weir_state::incremental::ReplacedPart;

/// The candidate pairs of one input batch: each input row's range of
/// pairs, and per pair the other side's entry it is.
struct Candidates {
    /// Pairs of input row `i` are `starts[i]..starts[i + 1]`.
    starts: Vec<usize>,
    /// The entry of the other side's bucket of the row's key.
    entries: Vec<usize>,
    /// Its tally when the batch came (for sides whose tallies the batch
    /// does not change: no second lookup of the key).
    tallies: Vec<Tally>,
    /// The other side's columns of every pair (None: no pairs).
    columns: Option<Vec<ArrayRef>>,
    /// Whether each pair satisfies the residual condition.
    matched: Vec<bool>,
}

impl JoinOperator {
    /// The key bytes of each row of `data` from side `side`, and which rows
    /// have a NULL key (they match nothing).
    fn keys(&self, side: usize, data: &RecordBatch) -> Result<(Rows, Option<arrow::buffer::NullBuffer>)> {
        key_rows(
            &self.join.keys[side],
            &self.join.key_types()?,
            &self.codec.keys_of,
            data,
            self.join.null_equal,
        )
    }

    /// Every pair of an input row with a stored row of the other side under
    /// the same key, and whether the residual condition holds for it.
    fn candidates(
        &self,
        side: usize,
        data: &RecordBatch,
        keys: &Rows,
        null_keys: Option<&arrow::buffer::NullBuffer>,
    ) -> Result<Candidates> {
        let other = &self.sides[1 - side];
        let mut starts = Vec::with_capacity(data.num_rows() + 1);
        let mut inputs: Vec<u32> = Vec::new();
        let mut entries = Vec::new();
        let mut tallies = Vec::new();
        let mut rows = Vec::new();
        let parser = self.codec.rows_of[1 - side].parser();
        for i in 0..data.num_rows() {
            starts.push(entries.len());
            if null_keys.is_some_and(|n| n.is_null(i)) {
                continue;
            }
            if let Some(bucket) = other.buckets.get(keys.row(i).as_ref()) {
                for j in 0..bucket.len() {
                    inputs.push(i as u32);
                    entries.push(j);
                    tallies.push(bucket.tally(j));
                    rows.push(parser.parse(bucket.row(j)));
                }
            }
        }
        starts.push(entries.len());
        if entries.is_empty() {
            return Ok(Candidates {
                starts,
                entries,
                tallies,
                columns: None,
                matched: Vec::new(),
            });
        }
        let columns = self.codec.rows_of[1 - side].convert_rows(rows)?;
        let indices = UInt32Array::from(inputs);
        let matched = pair_matches(
            self.join.filter.as_ref(),
            &self.join.inputs,
            side,
            data,
            &indices,
            &columns,
        )?;
        Ok(Candidates {
            starts,
            entries,
            tallies,
            columns: Some(columns),
            matched,
        })
    }

    fn process(&mut self, side: usize, batch: &RecordBatch, out: &mut Output) -> Result<()> {
        let kinds = changelog::row_kinds(batch)?;
        let data = changelog::data(batch);
        let (keys, null_keys) = self.keys(side, &data)?;
        let rows = self.codec.rows_of[side].convert_columns(data.columns())?;
        self.decode_read(&keys, null_keys.as_ref())?;
        let now = weir_common::time::wall_clock_millis();
        if let Some(ttl) = self.join.ttl_ms() {
            for i in 0..data.num_rows() {
                self.sides
                    .iter_mut()
                    .for_each(|s| s.expire_key(keys.row(i).as_ref(), now, ttl));
            }
        }
        let candidates = self.candidates(side, &data, &keys, null_keys.as_ref())?;
        let join = self.join.kind;
        let counts = (join.counts_matches(side), join.counts_matches(1 - side));
        let (mine, other) = match side {
            0 => {
                let (a, b) = self.sides.split_at_mut(1);
                (&mut a[0], &mut b[0])
            }
            _ => {
                let (a, b) = self.sides.split_at_mut(1);
                (&mut b[0], &mut a[0])
            }
        };
        let mut emitted = Emitted::default();
        let mut emits = Vec::new();
        // Reused for every row: the matched pairs, and their entries' tallies.
        let (mut pairs, mut tallies) = (Vec::new(), Vec::new());
        for (i, kind) in kinds.iter().enumerate() {
            let key = keys.row(i);
            pairs.clear();
            pairs.extend((candidates.starts[i]..candidates.starts[i + 1]).filter(|p| candidates.matched[*p]));
            emits.clear();
            let copies = if pairs.is_empty() {
                decide_for(join, side, *kind, &mut [], &mut emits)
            } else if !counts.1 {
                // The other side's tallies do not change: as the batch
                // found them, without looking the key up again.
                tallies.clear();
                tallies.extend(pairs.iter().map(|p| candidates.tallies[*p]));
                decide_for(join, side, *kind, &mut tallies, &mut emits)
            } else {
                match other.buckets.get_mut(key.as_ref()) {
                    Some(bucket) => {
                        tallies.clear();
                        tallies.extend(pairs.iter().map(|p| bucket.tally(candidates.entries[*p])));
                        let copies = decide_for(join, side, *kind, &mut tallies, &mut emits);
                        // Their match counts were written.
                        for (p, tally) in pairs.iter().zip(&tallies) {
                            bucket.set_tally(candidates.entries[*p], *tally);
                            bucket.touch(candidates.entries[*p], now);
                        }
                        other.mark(key.as_ref());
                        copies
                    }
                    None => decide_for(join, side, *kind, &mut [], &mut emits),
                }
            };
            for emit in &emits {
                emitted.push(*emit, i as u32, &pairs);
            }
            if null_keys.as_ref().is_some_and(|n| n.is_null(i)) {
                continue;
            }
            if kind.is_retraction() {
                mine.retract(key.as_ref(), rows.row(i).as_ref(), now);
            } else {
                mine.add(
                    key.as_ref(),
                    rows.row(i).as_ref(),
                    if counts.0 { copies } else { 0 },
                    now,
                );
            }
        }
        if !emitted.kinds.is_empty() {
            out.batch(self.output(side, &data, candidates.columns.as_deref(), emitted)?);
        }
        Ok(())
    }

    /// The output rows: the input side's columns taken by row, the other
    /// side's by pair, NULL where padded.
    fn output(
        &self,
        side: usize,
        data: &RecordBatch,
        other: Option<&[ArrayRef]>,
        emitted: Emitted,
    ) -> Result<RecordBatch> {
        let n = emitted.kinds.len();
        let input_indices = UInt32Array::from(emitted.input);
        let mine = data
            .columns()
            .iter()
            .map(|c| Ok(take(c, &input_indices, None)?))
            .collect::<Result<Vec<_>>>()?;
        let theirs = match other {
            Some(columns) => {
                let indices = UInt32Array::from(emitted.other);
                columns
                    .iter()
                    .map(|c| Ok(take(c, &indices, None)?))
                    .collect::<Result<Vec<_>>>()?
            }
            None => self.join.inputs[1 - side]
                .fields()
                .iter()
                .map(|f| new_null_array(f.data_type(), n))
                .collect(),
        };
        let (left, right) = if side == 0 { (mine, theirs) } else { (theirs, mine) };
        let columns: Vec<ArrayRef> = match self.join.kind.is_semi_or_anti() {
            true => left,
            false => left.into_iter().chain(right).collect(),
        };
        if changelog::has_op(&self.join.schema) {
            changelog::with_kinds(&self.join.schema, columns, &emitted.kinds)
        } else {
            Ok(RecordBatch::try_new(self.join.schema.clone(), columns)?)
        }
    }

    /// One side's state rows (see [`Join::state_schema`]).
    fn side_state(&self, side: usize) -> Result<Option<Vec<ArrayRef>>> {
        let buckets = self.sides[side].buckets.iter().map(|(k, b)| (k.as_ref(), b));
        Ok(self.bucket_rows(side, buckets)?.map(|(columns, _)| columns))
    }

    /// The state rows of `buckets` of one side, and each row's state key.
    fn bucket_rows<'a>(
        &self,
        side: usize,
        buckets: impl Iterator<Item = (&'a [u8], &'a Bucket)>,
    ) -> Result<Option<(Vec<ArrayRef>, BinaryArray)>> {
        self.codec.bucket_rows(side, buckets)
    }

    /// Incremental checkpoints: the rows of every key (`full`), or of the
    /// keys changed since the last snapshot and a deleting row for each of
    /// those that has no rows any more, with their state keys.
    fn delta_rows(&mut self, full: bool) -> Result<Option<RecordBatch>> {
        let mut parts = Vec::new();
        for side in 0..2 {
            self.memory_parts(side, full, &mut parts)?;
        }
        replacement_rows(&self.join.state_schema(), parts, full)
    }

    /// The state rows of side `side` in memory (`full`), or of its keys
    /// changed since the last snapshot and a deleting row for each of those
    /// that has no rows any more, added to `parts`; returns the changed keys.
    fn memory_parts(&mut self, side: usize, full: bool, parts: &mut Vec<Part>) -> Result<Vec<state::Key>> {
        let schema = self.join.state_schema();
        let changed = self.sides[side].take_changed();
        let state = &self.sides[side];
        let (present, gone): (Vec<&[u8]>, Vec<&[u8]>) = match full {
            true => (state.buckets.keys().map(|k| k.as_ref()).collect(), Vec::new()),
            false => changed
                .iter()
                .map(|k| k.as_ref())
                .partition(|k| state.buckets.contains_key(k)),
        };
        let buckets = present.iter().map(|k| (*k, &state.buckets[*k]));
        if let Some((columns, keys)) = self.bucket_rows(side, buckets)? {
            parts.push((state_rows(&schema, columns)?, keys, false));
        }
        if !gone.is_empty() {
            parts.push(self.codec.deleted_keys(side, &gone)?);
        }
        Ok(changed)
    }

    fn restore_side(&mut self, side: usize, rows: &RecordBatch) -> Result<()> {
        let sides = rows.column(1).as_primitive::<Int8Type>();
        let mask: BooleanArray = sides.iter().map(|s| Some(s == Some(side as i8))).collect();
        let rows = arrow::compute::filter_record_batch(rows, &mask)?;
        if rows.num_rows() == 0 {
            return Ok(());
        }
        let widths = [
            self.join.inputs[0].fields().len(),
            self.join.inputs[1].fields().len(),
        ];
        let start = 2 + if side == 0 { 0 } else { widths[0] };
        let data = RecordBatch::try_new(
            self.join.inputs[side].clone(),
            rows.columns()[start..start + widths[side]].to_vec(),
        )?;
        let (keys, _) = self.keys(side, &data)?;
        let converted = self.codec.rows_of[side].convert_columns(data.columns())?;
        let counts = rows.column(2 + widths[0] + widths[1]).as_primitive::<Int64Type>();
        let matches = rows.column(3 + widths[0] + widths[1]).as_primitive::<Int64Type>();
        let written = self.join.state_ttl.map(|_| {
            rows.column(4 + widths[0] + widths[1])
                .as_primitive::<Int64Type>()
                .clone()
        });
        let state = &mut self.sides[side];
        let tallies = state.tallies;
        for i in 0..rows.num_rows() {
            state.bucket(keys.row(i).as_ref()).push(
                converted.row(i).as_ref(),
                Some(Tally {
                    count: counts.value(i),
                    matches: matches.value(i),
                })
                .filter(|_| tallies),
                written.as_ref().map(|w| w.value(i)),
            );
        }
        Ok(())
    }
}

/// A join state row's state key for incremental chains: its side, then its
/// join key's bytes.
fn state_key(side: usize, key: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(key.len() + 1);
    bytes.push(side as u8);
    bytes.extend_from_slice(key);
    bytes
}

/// The key bytes of each row of `data` by `exprs` (cast to `types`; one
/// constant key when there are none), and which rows have a NULL key
/// (unless NULLs are equal).
pub(crate) fn key_rows(
    exprs: &[Arc<dyn PhysicalExpr>],
    types: &[DataType],
    converter: &RowConverter,
    data: &RecordBatch,
    null_equal: bool,
) -> Result<(Rows, Option<arrow::buffer::NullBuffer>)> {
    let mut arrays = Vec::with_capacity(types.len());
    for (expr, wanted) in exprs.iter().zip(types) {
        let array = expr.evaluate(data)?.into_array(data.num_rows())?;
        arrays.push(arrow::compute::cast(&array, wanted)?);
    }
    if arrays.is_empty() {
        arrays.push(Arc::new(Int8Array::from(vec![0; data.num_rows()])));
    }
    let nulls = match null_equal {
        true => None,
        false => arrays.iter().fold(None, |acc, a| {
            arrow::buffer::NullBuffer::union(acc.as_ref(), a.logical_nulls().as_ref())
        }),
    };
    Ok((converter.convert_columns(&arrays)?, nulls))
}

/// Whether `filter` holds for each candidate pair: input row
/// `rows[p]` of side `side` (columns of `data`) with the other side's row
/// `p` (`other` columns). All pairs hold without a filter.
pub(crate) fn pair_matches(
    filter: Option<&Arc<dyn PhysicalExpr>>,
    inputs: &[SchemaRef; 2],
    side: usize,
    data: &RecordBatch,
    rows: &UInt32Array,
    other: &[ArrayRef],
) -> Result<Vec<bool>> {
    let Some(filter) = filter else {
        return Ok(vec![true; rows.len()]);
    };
    let mine = data
        .columns()
        .iter()
        .map(|c| Ok(take(c, rows, None)?))
        .collect::<Result<Vec<_>>>()?;
    let (left, right) = if side == 0 {
        (mine, other.to_vec())
    } else {
        (other.to_vec(), mine)
    };
    let both = left.into_iter().chain(right).collect();
    let pairs = RecordBatch::try_new(Arc::new(joined_schema(inputs)), both)?;
    let result = filter.evaluate(&pairs)?.into_array(pairs.num_rows())?;
    let result = result
        .as_any()
        .downcast_ref::<BooleanArray>()
        .ok_or_else(|| Error::Internal("a join condition is not boolean".into()))?;
    Ok((0..result.len())
        .map(|p| result.is_valid(p) && result.value(p))
        .collect())
}

/// What one input row of side `side` emits in a `join` join (see
/// [`state::decide`] and [`state::semi_right`]); the matches it is stored
/// with.
fn decide_for(join: JoinKind, side: usize, kind: RowKind, matched: &mut [Tally], out: &mut Vec<Emit>) -> i64 {
    let anti = join == JoinKind::Anti;
    match (join.is_semi_or_anti(), side) {
        (true, 0) => {
            let copies = matched.iter().map(|t| t.count).sum();
            if (copies > 0) != anti {
                out.push(Emit::InputPadded(kind));
            }
            copies
        }
        (true, _) => {
            state::semi_right(kind, anti, matched, out);
            0
        }
        (false, _) => decide(kind, join.outer(side), join.outer(1 - side), matched, out),
    }
}

/// The rows to emit for one input batch, as indices.
#[derive(Default)]
struct Emitted {
    kinds: Vec<RowKind>,
    /// The input row, or None (padded).
    input: Vec<Option<u32>>,
    /// The candidate pair of the other side's row, or None (padded).
    other: Vec<Option<u32>>,
}

impl Emitted {
    fn push(&mut self, emit: Emit, row: u32, pairs: &[usize]) {
        let (kind, input, other) = match emit {
            Emit::Joined(kind, k) => (kind, Some(row), Some(pairs[k] as u32)),
            Emit::InputPadded(kind) => (kind, Some(row), None),
            Emit::OtherPadded(kind, k) => (kind, None, Some(pairs[k] as u32)),
        };
        self.kinds.push(kind);
        self.input.push(input);
        self.other.push(other);
    }
}

impl Operator for JoinOperator {
    fn name(&self) -> String {
        self.join.name.clone()
    }

    fn process_batch(&mut self, input: usize, batch: RecordBatch, out: &mut Output) -> Result<()> {
        let side = input.min(1);
        if self.spilled_to_files() {
            if let Some(now) = self.hold_unread(side, &batch)? {
                self.process(side, &now, out)?;
            }
            self.read_due(weir_common::time::wall_clock_millis(), out)?;
        } else {
            self.process(side, &batch, out)?;
        }
        self.spill_if_full(batch.num_rows())
    }

    /// With a state TTL (to sweep), and with spilled state (rows waiting for
    /// their key group's read wait at most [`crate::waiting::LONGEST_WAIT_MS`]).
    fn uses_processing_time(&self) -> bool {
        self.join.state_ttl.is_some() || self.spill.is_some()
    }

    /// Sweeps a slice of each side for expired rows, so memory is given
    /// back for keys that never come again: as many buckets as go round
    /// the side once every half TTL, never the whole side at once.
    fn on_processing_time(&mut self, now: weir_common::time::Timestamp, out: &mut Output) -> Result<()> {
        self.read_due(now, out)?;
        if let Some(ttl) = self.join.ttl_ms() {
            // The first tick sweeps the floor only.
            let elapsed = if self.swept == 0 { 0 } else { now - self.swept };
            for (side, cursor) in self.sides.iter_mut().zip(&mut self.sweeps) {
                let slice = sweep_slice(side.buckets.buckets(), elapsed, ttl / 2, SWEEP);
                side.expire_some(cursor, slice, now, ttl);
            }
            self.swept = now;
        }
        if let Some(ttl) = self.join.ttl_ms() {
            self.expire_read(now, ttl)?;
        }
        self.sweep_files(now)
    }

    /// Rows waiting for spilled state are joined before the barrier: the
    /// snapshot holds their keys' rows, and their changes precede it.
    fn prepare_snapshot(&mut self, out: &mut Output) -> Result<()> {
        self.read_all_waiting(out)
    }

    fn finish(&mut self, out: &mut Output) -> Result<()> {
        self.read_all_waiting(out)
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        self.no_rows_wait()?;
        if let Some(ttl) = self.join.ttl_ms() {
            // Expired rows are not saved.
            let now = weir_common::time::wall_clock_millis();
            self.sides.iter_mut().for_each(|s| s.expire(now, ttl));
        }
        if self.spilled_to_files() {
            return Ok(Some(OperatorSnapshot {
                runs: Vec::new(),
                deferred: self.spilled_snapshot(false)?,
                rows_later: None,
                meta: serde_json::Value::Null,
                rows: None,
            }));
        }
        let schema = self.join.state_schema();
        let columns = concat_sides([self.side_state(0)?, self.side_state(1)?])?;
        let Some(columns) = columns else {
            return Ok(None);
        };
        Ok(Some(OperatorSnapshot {
            runs: Vec::new(),
            deferred: Vec::new(),
            rows_later: None,
            meta: serde_json::Value::Null,
            rows: Some(sorted_state_rows(&schema, columns)?),
        }))
    }

    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        let Some(rows) = &snapshot.rows else {
            return Ok(());
        };
        OperatorSnapshot::check_columns(rows, &self.join.state_schema(), &self.join.name)?;
        if self.spill.is_some() {
            return self.restore_spilled(rows);
        }
        self.restore_side(0, rows)?;
        self.restore_side(1, rows)
    }

    fn delta_kind(&self) -> Option<DeltaKind> {
        self.sides[0].changed.is_some().then_some(DeltaKind::Replace)
    }

    fn snapshot_delta(&mut self, _checkpoint: CheckpointId, full: bool) -> Result<Option<OperatorSnapshot>> {
        self.no_rows_wait()?;
        if full && let Some(ttl) = self.join.ttl_ms() {
            // Expired rows are not saved in a base.
            let now = weir_common::time::wall_clock_millis();
            self.sides.iter_mut().for_each(|s| s.expire(now, ttl));
        }
        if self.spilled_to_files() {
            let deferred = match full {
                true => self.spilled_snapshot(true)?,
                false => self.spilled_delta()?.into_iter().collect(),
            };
            if full {
                self.spill.forget_spilled_changes();
            }
            return Ok(Some(OperatorSnapshot {
                deferred,
                ..OperatorSnapshot::default()
            }));
        }
        Ok(Some(OperatorSnapshot {
            runs: Vec::new(),
            deferred: Vec::new(),
            rows_later: None,
            meta: serde_json::Value::Null,
            rows: self.delta_rows(full)?,
        }))
    }

    fn state_signature(&self) -> Result<Option<String>> {
        Ok(Some(schema_signature(&self.join.state_schema())))
    }

    fn is_keyed(&self) -> bool {
        true
    }
}
