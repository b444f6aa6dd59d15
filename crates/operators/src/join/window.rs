//! Window joins: two window TVFs of the same windows joined on
//! `window_start`, `window_end` and keys, as Flink's `WindowJoinOperator`.
//! Each side's rows wait in their window; when the watermark passes the
//! window's end the window's rows are joined (inner, outer, semi or anti)
//! and forgotten. Insert-only; a row whose window has already fired is
//! late and dropped. Under the spilling backend, rows beyond the memory
//! budget go to a store (`window/spill.rs`).
//!
//! ```text
//!  left  TUMBLE ──HASH──►┐  window [00:00, 00:05): rows of both sides wait;
//!                        WindowJoin  watermark >= 00:04:59.999: join them, emit, free
//!  right TUMBLE ──HASH──►┘
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::{DataType, Int8Type, Schema, SchemaRef, TimeUnit, TimestampMillisecondType};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use datafusion_physical_expr::PhysicalExpr;

use crate::Result;
use crate::join::{key_rows, pair_matches};
use weir_common::ids::CheckpointId;
use weir_common::time::Timestamp;
use weir_plan::join::JoinKind;
use weir_runtime::operator::OperatorSnapshot;
use weir_runtime::{Operator, OperatorFactory, Output, TaskContext};
use weir_state::memory_guess::SpillsWhenFull;
use weir_state::snapshot::{schema_signature, sorted_state_rows};
use weir_state::spilled::SpillSlot;
use weir_state::store::in_chunks;

mod delta;
mod spill;

/// A window join of two window TVFs.
#[derive(Debug, Clone)]
pub struct WindowJoin {
    /// Inner, which outer, semi or anti.
    pub kind: JoinKind,
    /// Each side's key expressions (window columns included).
    pub keys: [Vec<Arc<dyn PhysicalExpr>>; 2],
    /// The rest of the condition, over the left and right columns.
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// Each side's columns.
    pub inputs: [SchemaRef; 2],
    /// Each side's `window_end` column.
    pub ends: [usize; 2],
    /// The output (left columns, then right ones unless semi or anti).
    pub schema: SchemaRef,
    /// Its name in the plan (EXPLAIN's), for errors and logs.
    pub name: String,
}

impl WindowJoin {
    fn key_types(&self) -> Result<Vec<DataType>> {
        super::key_types(&self.keys, &self.inputs[0])
    }

    /// `_key_group`, `_side`, the left columns, the right ones.
    fn state_schema(&self) -> SchemaRef {
        let fields = super::two_sided_fields(&self.inputs);
        Arc::new(Schema::new(fields))
    }
}

impl OperatorFactory for WindowJoin {
    fn create(&self, ctx: &TaskContext) -> Result<Box<dyn Operator>> {
        Ok(Box::new(WindowJoinOperator {
            rows_of: super::row_converters(&self.inputs)?,
            keys_of: RowConverter::new(self.key_types()?.into_iter().map(SortField::new).collect())?,
            windows: BTreeMap::new(),
            saved: ctx.incremental.then(HashMap::new),
            watermark: Timestamp::MIN,
            max_parallelism: ctx.max_parallelism,
            spill: (ctx.spill.clone()).map(|s| spill::WindowSpill::new(s, ctx.incremental)),
            spec: Arc::new(self.clone()),
        }))
    }

    fn can_spill(&self) -> bool {
        true
    }
}

/// A waiting row: its key's bytes and its own.
type Waiting = (Box<[u8]>, Box<[u8]>);

struct WindowJoinOperator {
    spec: Arc<WindowJoin>,
    rows_of: [RowConverter; 2],
    keys_of: RowConverter,
    /// Each window (by its end, ms) with each side's rows.
    windows: BTreeMap<i64, [Vec<Waiting>; 2]>,
    /// Incremental checkpoints: how many of each window's rows in memory
    /// (a side each) the snapshots so far hold; rows only ever join a
    /// window (spilled, a window's rows leave memory for the store).
    saved: Option<HashMap<i64, [usize; 2]>>,
    watermark: Timestamp,
    max_parallelism: usize,
    /// The spilling backend: rows beyond the budget in a store.
    spill: Option<weir_state::spilled::Spilled<spill::WindowSpill>>,
}

/// The values of a timestamp column in ms (NULL: `i64::MIN`).
pub(crate) fn millis(column: &ArrayRef) -> Result<Vec<i64>> {
    let column = arrow::compute::cast(column, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
    let column = column.as_primitive::<TimestampMillisecondType>();
    Ok((0..column.len())
        .map(|i| {
            if column.is_valid(i) {
                column.value(i)
            } else {
                i64::MIN
            }
        })
        .collect())
}

impl WindowJoinOperator {
    fn process(&mut self, side: usize, data: &RecordBatch) -> Result<()> {
        let ends = millis(data.column(self.spec.ends[side]))?;
        let (keys, nulls) = key_rows(
            &self.spec.keys[side],
            &self.spec.key_types()?,
            &self.keys_of,
            data,
            false,
        )?;
        let rows = self.rows_of[side].convert_columns(data.columns())?;
        for (i, end) in ends.iter().enumerate() {
            // Late: its window has fired.
            if *end == i64::MIN || end - 1 <= self.watermark {
                continue;
            }
            let key: Box<[u8]> = match nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                // Matches nothing; kept (empty key bytes never equal a
                // real key's) for an outer or anti side.
                true => Box::new([]),
                false => keys.row(i).as_ref().into(),
            };
            self.windows.entry(*end).or_default()[side].push((key, rows.row(i).as_ref().into()));
        }
        Ok(())
    }

    /// Joins the rows of one window.
    fn fire(&self, rows: &[Vec<Waiting>; 2]) -> Result<Option<RecordBatch>> {
        let kind = self.spec.kind;
        let [left, right] = rows;
        let mut by_key: HashMap<&[u8], Vec<usize>> = HashMap::new();
        for (j, (key, _)) in right.iter().enumerate() {
            if !key.is_empty() {
                by_key.entry(key).or_default().push(j);
            }
        }
        let (mut pair_left, mut pair_right) = (Vec::new(), Vec::new());
        for (i, (key, _)) in left.iter().enumerate() {
            for j in by_key.get(&**key).into_iter().flatten() {
                pair_left.push(i as u32);
                pair_right.push(*j as u32);
            }
        }
        let columns = |side: usize| -> Result<Vec<ArrayRef>> {
            let parser = self.rows_of[side].parser();
            Ok(self.rows_of[side].convert_rows(rows[side].iter().map(|(_, r)| parser.parse(r)))?)
        };
        let (left_columns, right_columns) = (columns(0)?, columns(1)?);
        let data = |side: usize, columns: &[ArrayRef]| {
            RecordBatch::try_new(self.spec.inputs[side].clone(), columns.to_vec())
        };
        let left_data = data(0, &left_columns)?;
        let taken_right = take_all(&right_columns, &UInt32Array::from(pair_right.clone()))?;
        let matched = pair_matches(
            self.spec.filter.as_ref(),
            &self.spec.inputs,
            0,
            &left_data,
            &UInt32Array::from(pair_left.clone()),
            &taken_right,
        )?;
        let (mut out_left, mut out_right): (Vec<Option<u32>>, Vec<Option<u32>>) = (Vec::new(), Vec::new());
        let (mut left_hit, mut right_hit) = (vec![false; left.len()], vec![false; right.len()]);
        for (p, ok) in matched.iter().enumerate() {
            if *ok {
                left_hit[pair_left[p] as usize] = true;
                right_hit[pair_right[p] as usize] = true;
                if !kind.is_semi_or_anti() {
                    out_left.push(Some(pair_left[p]));
                    out_right.push(Some(pair_right[p]));
                }
            }
        }
        for (i, hit) in left_hit.iter().enumerate() {
            let keep = match kind {
                JoinKind::Semi => *hit,
                JoinKind::Anti => !*hit,
                _ => !*hit && kind.outer(0),
            };
            if keep {
                out_left.push(Some(i as u32));
                out_right.push(None);
            }
        }
        if kind.outer(1) {
            for (j, hit) in right_hit.iter().enumerate() {
                if !*hit {
                    out_left.push(None);
                    out_right.push(Some(j as u32));
                }
            }
        }
        if out_left.is_empty() {
            return Ok(None);
        }
        let mut output = take_all(&left_columns, &UInt32Array::from(out_left))?;
        if !kind.is_semi_or_anti() {
            output.extend(take_all(&right_columns, &UInt32Array::from(out_right))?);
        }
        Ok(Some(RecordBatch::try_new(self.spec.schema.clone(), output)?))
    }

    /// One side's waiting rows as state columns.
    fn side_state(&self, side: usize) -> Result<Option<Vec<ArrayRef>>> {
        self.side_state_from(side, |_| 0)
    }

    /// One side's waiting rows as state columns, of each window those from
    /// the `from(end)`th on.
    fn side_state_from(&self, side: usize, from: impl Fn(i64) -> usize) -> Result<Option<Vec<ArrayRef>>> {
        let parser = self.rows_of[side].parser();
        let rows: Vec<_> = (self.windows.iter())
            .flat_map(|(end, w)| w[side].iter().skip(from(*end)).map(|(_, r)| parser.parse(r)))
            .collect();
        side_columns(&self.spec, &self.rows_of[side], self.max_parallelism, side, rows)
    }

    /// Joins the rows of the window ending at `end`: memory's alone, or,
    /// when the store has rows of it, memory's written there too and the
    /// window joined a key group at a time from the store.
    fn fire_window(&mut self, end: i64, memory: Option<[Vec<Waiting>; 2]>, out: &mut Output) -> Result<()> {
        if !self.has_stored(end) {
            if let Some(batch) = memory.map(|rows| self.fire(&rows)).transpose()?.flatten() {
                out.batch(batch);
            }
            return Ok(());
        }
        if let Some(rows) = memory {
            self.spill_window(end, rows)?;
        }
        for group in self.take_stored_groups(end) {
            let rows = self.take_stored(group, end)?;
            if let Some(batch) = self.fire(&rows)? {
                out.batch(batch);
            }
        }
        Ok(())
    }

    /// Bytes its waiting rows take in memory, about (a walk of them).
    fn memory_size(&self) -> usize {
        const ENTRY: usize = 48;
        (self.windows.values().flatten().flatten())
            .map(|(k, r)| ENTRY + k.len() + r.len())
            .sum::<usize>()
            + self.windows.len() * ENTRY
    }
}

/// One side's rows as state columns (`_key_group`, `_side`, the left
/// columns, the right ones); `None` without rows.
fn side_columns(
    spec: &WindowJoin,
    converter: &RowConverter,
    max_parallelism: usize,
    side: usize,
    rows: Vec<arrow::row::Row>,
) -> Result<Option<Vec<ArrayRef>>> {
    if rows.is_empty() {
        return Ok(None);
    }
    let data = converter.convert_rows(rows)?;
    let groups = super::row_key_groups(&spec.keys[side], &spec.inputs[side], &data, max_parallelism)?;
    Ok(Some(super::one_side_columns(&spec.inputs, side, groups, &data)))
}

fn take_all(columns: &[ArrayRef], indices: &UInt32Array) -> Result<Vec<ArrayRef>> {
    columns.iter().map(|c| Ok(take(c, indices, None)?)).collect()
}

impl Operator for WindowJoinOperator {
    fn name(&self) -> String {
        self.spec.name.clone()
    }

    fn process_batch(&mut self, input: usize, batch: RecordBatch, _out: &mut Output) -> Result<()> {
        self.process(input.min(1), &batch)?;
        self.spill_if_full(batch.num_rows())
    }

    fn process_watermark(&mut self, watermark: Timestamp, out: &mut Output) -> Result<()> {
        self.watermark = self.watermark.max(watermark);
        // Windows in time order, whether their rows are in memory or stored.
        loop {
            let first = self.windows.keys().next().copied();
            let end = match (first, self.first_stored()) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(end) => end,
                    None => break,
                },
            };
            if end.saturating_sub(1) > self.watermark {
                break;
            }
            let rows = self.windows.remove(&end);
            self.fire_window(end, rows, out)?;
        }
        out.watermark(watermark);
        Ok(())
    }

    fn snapshot(&mut self, _checkpoint: CheckpointId) -> Result<Option<OperatorSnapshot>> {
        if self.spill.has_spilled() {
            return self.spilled_snapshot().map(Some);
        }
        let columns = super::concat_sides([self.side_state(0)?, self.side_state(1)?])?;
        // The watermark is saved even without rows: after a restore, a row
        // of a window that had fired is late, as it was before.
        let rows = columns
            .map(|c| sorted_state_rows(&self.spec.state_schema(), c))
            .transpose()?;
        Ok(Some(OperatorSnapshot::with_watermark(self.watermark, rows)))
    }

    fn delta_kind(&self) -> Option<weir_state::incremental::DeltaKind> {
        (self.saved.is_some()).then_some(weir_state::incremental::DeltaKind::Merge)
    }

    fn snapshot_delta(&mut self, checkpoint: CheckpointId, full: bool) -> Result<Option<OperatorSnapshot>> {
        if self.saved.is_none() {
            return self.snapshot(checkpoint);
        }
        if self.spill.has_spilled() {
            return self.spilled_delta(full).map(Some);
        }
        let rows = self.delta(full)?;
        Ok(Some(OperatorSnapshot::with_watermark(self.watermark, rows)))
    }

    /// Each subtask's rows under its own watermark (a chain's rows of
    /// windows that subtask fired are dropped as late), then the least
    /// watermark, as a merged snapshot's.
    fn restore_rescaled(&mut self, snapshots: Vec<OperatorSnapshot>) -> Result<()> {
        let mut least: Option<Timestamp> = None;
        for snapshot in snapshots {
            let w = snapshot.watermark(&self.spec.name)?;
            least = Some(least.map_or(w, |l| l.min(w)));
            self.restore(snapshot)?;
        }
        if let Some(w) = least {
            self.watermark = w;
        }
        Ok(())
    }

    /// The watermark first: a row of a window that fired before the
    /// snapshot (an incremental chain still holds those) is late.
    fn restore(&mut self, snapshot: OperatorSnapshot) -> Result<()> {
        let watermark = snapshot.watermark(&self.spec.name)?;
        self.watermark = watermark;
        let Some(rows) = &snapshot.rows else {
            return Ok(());
        };
        OperatorSnapshot::check_columns(rows, &self.spec.state_schema(), &self.spec.name)?;
        let widths = [
            self.spec.inputs[0].fields().len(),
            self.spec.inputs[1].fields().len(),
        ];
        // A chunk at a time: with the spilling backend, memory goes to the
        // store whenever it holds more than its share.
        for chunk in in_chunks(rows) {
            for side in 0..2 {
                let sides = chunk.column(1).as_primitive::<Int8Type>();
                let mask: BooleanArray = sides.iter().map(|s| Some(s == Some(side as i8))).collect();
                let rows = arrow::compute::filter_record_batch(&chunk, &mask)?;
                let start = 2 + if side == 0 { 0 } else { widths[0] };
                let data = RecordBatch::try_new(
                    self.spec.inputs[side].clone(),
                    rows.columns()[start..start + widths[side]].to_vec(),
                )?;
                self.process(side, &data)?;
            }
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
