//! An OVER aggregation's state as checkpoint rows: per partition its
//! accumulators and the time of its last released rows (role 0), a bounded frame's rows (role 1) and the rows
//! waiting for the watermark (role 2), in one table keyed by key group.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, Int64Array, UInt8Array, UInt64Array, new_null_array,
};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, UInt8Type};
use arrow::record_batch::RecordBatch;

use crate::over::{OverAggregate, OverOperator, evaluate};
use crate::{Error, Result};
use weir_state::incremental::{ReplacedPart, replacement_rows};
use weir_state::snapshot::{KEY_GROUP_COLUMN, key_groups, sorted_state_rows};

pub(super) const ACCUMULATORS: u8 = 0;
pub(super) const FRAME_ROW: u8 = 1;
pub(super) const WAITING_ROW: u8 = 2;

/// The columns' segments: partition key, input row, arguments, accumulator states.
struct Layout {
    keys: Vec<Field>,
    input: Vec<Field>,
    args: Vec<Field>,
    states: Vec<Vec<Field>>,
}

fn nullable(f: Field) -> Field {
    f.with_nullable(true)
}

fn layout(spec: &OverAggregate) -> Result<Layout> {
    let typed = |prefix: &str, exprs: &[Arc<dyn datafusion_physical_expr::PhysicalExpr>]| {
        exprs
            .iter()
            .enumerate()
            .map(|(i, e)| {
                Ok(Field::new(
                    format!("{prefix}{i}"),
                    e.data_type(&spec.input)?,
                    true,
                ))
            })
            .collect::<Result<Vec<_>>>()
    };
    Ok(Layout {
        keys: typed("_key", &spec.partition)?,
        input: spec
            .input
            .fields()
            .iter()
            .map(|f| nullable(f.as_ref().clone().with_name(format!("in_{}", f.name()))))
            .collect(),
        args: typed("_arg", &spec.arguments())?,
        states: spec
            .accumulators()?
            .iter()
            .enumerate()
            .map(|(i, a)| {
                a.state_fields()
                    .into_iter()
                    .map(|f| nullable(f.clone().with_name(format!("acc{i}_{}", f.name()))))
                    .collect()
            })
            .collect(),
    })
}

/// `_key_group`, `_role`, `_time`, `_seq`, then the segments.
pub(super) fn schema(spec: &OverAggregate) -> Result<SchemaRef> {
    let layout = layout(spec)?;
    let mut fields = vec![
        Field::new(KEY_GROUP_COLUMN, DataType::UInt32, false),
        Field::new("_role", DataType::UInt8, false),
        Field::new("_time", DataType::Int64, true),
        Field::new("_seq", DataType::UInt64, false),
    ];
    fields.extend(layout.keys);
    fields.extend(layout.input);
    fields.extend(layout.args);
    fields.extend(layout.states.into_iter().flatten());
    Ok(Arc::new(Schema::new(fields)))
}

/// One role's rows: its header columns and the segments it has (others NULL).
pub(super) struct Part {
    pub(super) role: u8,
    pub(super) times: Vec<Option<i64>>,
    pub(super) keys: Vec<ArrayRef>,
    pub(super) input: Option<Vec<ArrayRef>>,
    pub(super) args: Option<Vec<ArrayRef>>,
    pub(super) states: Option<Vec<ArrayRef>>,
}

fn columns_of(part: Part, layout: &Layout, max_parallelism: usize) -> Result<Vec<ArrayRef>> {
    let n = part.times.len();
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(key_groups(&part.keys, n, max_parallelism)?),
        Arc::new(UInt8Array::from(vec![part.role; n])),
        Arc::new(Int64Array::from(part.times)),
        Arc::new(UInt64Array::from_iter_values(0..n as u64)),
    ];
    columns.extend(part.keys);
    let fill = |given: Option<Vec<ArrayRef>>, fields: &[Field]| -> Vec<ArrayRef> {
        given.unwrap_or_else(|| fields.iter().map(|f| new_null_array(f.data_type(), n)).collect())
    };
    columns.extend(fill(part.input, &layout.input));
    columns.extend(fill(part.args, &layout.args));
    let states: Vec<Field> = layout.states.iter().flatten().cloned().collect();
    columns.extend(fill(part.states, &states));
    Ok(columns)
}

/// The operator's state as rows; `None` when it holds nothing.
pub(super) fn rows(op: &OverOperator) -> Result<Option<RecordBatch>> {
    let parts = parts(op, &|_| true)?.into_iter().map(|(part, _)| part).collect();
    rows_of_parts(&op.spec, parts, op.max_parallelism)
}

/// Incremental checkpoints: the state rows of the partitions of `groups`
/// (all of a partition's rows, keyed by its key: the newest file with rows
/// of a key holds all of them, [`weir_state::incremental`]), as one file
/// of a replacing chain; `None` without rows.
pub(super) fn delta(op: &OverOperator, groups: &HashSet<usize>, full: bool) -> Result<Option<RecordBatch>> {
    replacement_rows(&schema(&op.spec)?, delta_parts(op, groups, full)?, full)
}

/// The parts of [`delta`]'s file.
pub(super) fn delta_parts(
    op: &OverOperator,
    groups: &HashSet<usize>,
    full: bool,
) -> Result<Vec<ReplacedPart>> {
    let wanted = |g: usize| full || groups.contains(&g);
    let keyed = (parts(op, &wanted)?.into_iter())
        .map(|(part, owners)| (part, owners.iter().map(|g| &op.keys[*g][..]).collect()))
        .collect();
    replaced_parts(&op.spec, keyed, op.max_parallelism)
}

/// A part of the state and the partition key of each of its rows.
pub(super) type KeyedPart<'a> = (Part, Vec<&'a [u8]>);

/// Parts of a replacing file: each part's rows, keyed by the partition
/// key of each of them.
pub(super) fn replaced_parts(
    spec: &OverAggregate,
    parts: Vec<KeyedPart<'_>>,
    max_parallelism: usize,
) -> Result<Vec<ReplacedPart>> {
    let (layout, schema) = (layout(spec)?, schema(spec)?);
    (parts.into_iter())
        .map(|(part, keys)| {
            let columns = cast_all(columns_of(part, &layout, max_parallelism)?, &schema)?;
            let keys = BinaryArray::from_iter_values(keys);
            Ok((RecordBatch::try_new(schema.clone(), columns)?, keys, false))
        })
        .collect()
}

/// The parts of the state of the partitions `wanted` says, each with the
/// group of each of its rows.
fn parts(op: &OverOperator, wanted: &dyn Fn(usize) -> bool) -> Result<Vec<(Part, Vec<usize>)>> {
    let keys_of = |groups: &[usize]| -> Result<Vec<ArrayRef>> {
        let parser = op.keys_of.parser();
        match op.spec.partition.is_empty() {
            true => Ok(Vec::new()),
            false => Ok(op
                .keys_of
                .convert_rows(groups.iter().map(|g| parser.parse(&op.keys[*g])))?),
        }
    };
    let mut parts = Vec::new();
    let groups: Vec<usize> = (0..op.keys.len()).filter(|g| wanted(*g)).collect();
    if !groups.is_empty() {
        let mut states = Vec::new();
        for acc in &op.accumulators {
            states.extend(acc.state(&groups)?);
        }
        let last = groups
            .iter()
            .map(|g| (op.last[*g] != i64::MIN).then_some(op.last[*g]));
        let part = Part {
            role: ACCUMULATORS,
            times: last.collect(),
            keys: keys_of(&groups)?,
            input: None,
            args: None,
            states: Some(states),
        };
        parts.push((part, groups.clone()));
    }
    let framed: Vec<(usize, &super::FrameRow)> = (groups.iter())
        .flat_map(|g| op.frames[*g].iter().map(move |r| (*g, r)))
        .collect();
    if !framed.is_empty() {
        let parser = op.args_of.parser();
        let owners: Vec<usize> = framed.iter().map(|(g, _)| *g).collect();
        let part = Part {
            role: FRAME_ROW,
            times: framed.iter().map(|(_, (t, _))| Some(*t)).collect(),
            keys: keys_of(&owners)?,
            input: None,
            args: Some(
                op.args_of
                    .convert_rows(framed.iter().map(|(_, (_, r))| parser.parse(r)))?,
            ),
            states: None,
        };
        parts.push((part, owners));
    }
    let waiting: Vec<(i64, &[u8], usize)> = (op.pending.iter())
        .filter(|(_, (_, g))| wanted(*g))
        .map(|((t, _), (row, g))| (*t, &row[..], *g))
        .collect();
    if !waiting.is_empty() {
        let parser = op.rows_of.parser();
        let input = op
            .rows_of
            .convert_rows(waiting.iter().map(|(_, r, _)| parser.parse(r)))?;
        let batch = RecordBatch::try_new(op.spec.input.clone(), input.clone())?;
        let part = Part {
            role: WAITING_ROW,
            times: waiting.iter().map(|(t, _, _)| Some(*t)).collect(),
            keys: evaluate(&op.spec.partition, &batch)?,
            input: Some(input),
            args: None,
            states: None,
        };
        parts.push((part, waiting.iter().map(|(_, _, g)| *g).collect()));
    }
    Ok(parts)
}

/// The state rows of `parts`, sorted by key group; `None` without parts.
pub(super) fn rows_of_parts(
    spec: &OverAggregate,
    parts: Vec<Part>,
    max_parallelism: usize,
) -> Result<Option<RecordBatch>> {
    if parts.is_empty() {
        return Ok(None);
    }
    let (layout, schema) = (layout(spec)?, schema(spec)?);
    let batches = parts
        .into_iter()
        .map(|p| {
            let columns = cast_all(columns_of(p, &layout, max_parallelism)?, &schema)?;
            Ok(RecordBatch::try_new(schema.clone(), columns)?)
        })
        .collect::<Result<Vec<_>>>()?;
    let all = arrow::compute::concat_batches(&schema, &batches)?;
    Ok(Some(sorted_state_rows(&schema, all.columns().to_vec())?))
}

/// `rows` in the order a restore a chunk at a time needs: by key group,
/// role and sequence, so that a partition's accumulators come before its
/// frame rows, which keep their order.
pub(super) fn in_restore_order(rows: &RecordBatch) -> Result<RecordBatch> {
    let sort = |i: usize| arrow::compute::SortColumn {
        values: rows.column(i).clone(),
        options: None,
    };
    let order = arrow::compute::lexsort_to_indices(&[sort(0), sort(1), sort(3)], None)?;
    Ok(arrow::compute::take_record_batch(rows, &order)?)
}

pub(super) fn cast_all(columns: Vec<ArrayRef>, schema: &Schema) -> Result<Vec<ArrayRef>> {
    columns
        .into_iter()
        .zip(schema.fields())
        .map(|(c, f)| Ok(arrow::compute::cast(&c, f.data_type())?))
        .collect()
}

/// Restores the rows of [`rows`] (this subtask's key groups).
pub(super) fn restore(op: &mut OverOperator, rows: &RecordBatch) -> Result<()> {
    let schema = schema(&op.spec)?;
    weir_runtime::operator::OperatorSnapshot::check_columns(rows, &schema, &op.spec.name)?;
    let layout = layout(&op.spec)?;
    let (k, i, a) = (layout.keys.len(), layout.input.len(), layout.args.len());
    // Rows in (role, seq) order: frames keep their order.
    let order = arrow::compute::lexsort_to_indices(
        &[
            arrow::compute::SortColumn {
                values: rows.column(1).clone(),
                options: None,
            },
            arrow::compute::SortColumn {
                values: rows.column(3).clone(),
                options: None,
            },
        ],
        None,
    )?;
    let rows = arrow::compute::take_record_batch(rows, &order)?;
    let roles = rows.column(1).as_primitive::<UInt8Type>();
    let times = rows.column(2).as_primitive::<Int64Type>();
    let segment = |from: usize, len: usize| rows.columns()[4 + from..4 + from + len].to_vec();
    let keys = segment(0, k);
    let key_rows = match k {
        0 => None,
        _ => Some(op.keys_of.convert_columns(&keys)?),
    };
    let groups: Vec<usize> = (0..rows.num_rows())
        .map(|r| {
            let key = key_rows.as_ref().map_or(&[][..], |rows| rows.row(r).data());
            match op.groups.get(key) {
                Some(g) => *g,
                None => op.add_group(key),
            }
        })
        .collect();
    let with_role =
        |role: u8| -> Vec<usize> { (0..rows.num_rows()).filter(|r| roles.value(*r) == role).collect() };
    let take = |columns: Vec<ArrayRef>, which: &[usize]| -> Result<Vec<ArrayRef>> {
        let indices = arrow::array::UInt32Array::from_iter_values(which.iter().map(|r| *r as u32));
        columns
            .iter()
            .map(|c| Ok(arrow::compute::take(c, &indices, None)?))
            .collect()
    };
    let total = op.keys.len();
    let owners = with_role(ACCUMULATORS);
    let owner_groups: Vec<usize> = owners.iter().map(|r| groups[*r]).collect();
    for r in &owners {
        if times.is_valid(*r) {
            op.last[groups[*r]] = times.value(*r);
        }
    }
    let mut offset = k + i + a;
    for (acc, fields) in op.accumulators.iter_mut().zip(&layout.states) {
        let state = take(segment(offset, fields.len()), &owners)?;
        let state = cast_all(state, &Schema::new(acc.state_fields()))?;
        acc.restore(&state, &owner_groups, total)?;
        offset += fields.len();
    }
    let framed = with_role(FRAME_ROW);
    let args = op
        .args_of
        .convert_columns(&cast_all(take(segment(k + i, a), &framed)?, &arg_schema(op)?)?)?;
    for (n, r) in framed.iter().enumerate() {
        op.frames[groups[*r]].push_back((times.value(*r), args.row(n).as_ref().into()));
    }
    let waiting = with_role(WAITING_ROW);
    let input = cast_all(take(segment(k, i), &waiting)?, &op.spec.input)?;
    let input = op.rows_of.convert_columns(&input)?;
    for (n, r) in waiting.iter().enumerate() {
        if times.is_null(*r) {
            return Err(Error::State(format!(
                "{}: a waiting row without a time",
                op.spec.name.clone()
            )));
        }
        op.seq += 1;
        op.pending.insert(
            (times.value(*r), op.seq),
            (input.row(n).as_ref().into(), groups[*r]),
        );
    }
    Ok(())
}

fn arg_schema(op: &OverOperator) -> Result<Schema> {
    let fields = op
        .spec
        .arguments()
        .iter()
        .enumerate()
        .map(|(i, e)| Ok(Field::new(format!("{i}"), e.data_type(&op.spec.input)?, true)))
        .collect::<Result<Vec<_>>>()?;
    Ok(Schema::new(fields))
}
