//! Retractable accumulators of non-windowed aggregation: per-group state in
//! vectors indexed by group, updated a batch at a time, rows added or taken
//! away, and evaluated for any set of groups.
//!
//! DataFusion's `GroupsAccumulator` evaluates every group at once and
//! consumes its state, and only some of its accumulators retract; a
//! changelog needs the value of the groups a batch changed, before and after
//! it, with retractions of any row. So the aggregates of a non-windowed
//! GROUP BY (COUNT, SUM, AVG, MIN, MAX, FIRST_VALUE, LAST_VALUE, LISTAGG, and
//! DISTINCT of any of them) are written here, each small. MIN and MAX over
//! an updating input keep the multiset of values, as Flink's
//! `MaxWithRetractAggFunction` does; over insert-only input only the extreme.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Decimal128Array, Float64Array, Int64Array, ListArray, StringArray,
    new_null_array,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{
    ArrowNativeTypeOp, ArrowPrimitiveType, DataType, Decimal128Type, Field, Float64Type, Int64Type, Schema,
};
use arrow::row::{OwnedRow, RowConverter, SortField};

use datafusion_physical_expr::PhysicalExpr;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;

use crate::{Error, Result};

/// One aggregate's state for every group.
pub trait RetractAccumulator: Send {
    /// Adds each row's value to its group (`groups[i]`), or takes it away
    /// where `retract[i]` is set (`None`: every row is added). Rows whose
    /// first argument is null are skipped, as SQL aggregates skip nulls.
    /// `total` is the number of groups there are now.
    fn update(
        &mut self,
        args: &[ArrayRef],
        groups: &[usize],
        retract: Option<&[bool]>,
        total: usize,
    ) -> Result<()>;

    /// Makes room for `total` groups (new ones empty).
    fn resize(&mut self, total: usize);

    /// Bytes its state takes in memory, about (the spilling backend's
    /// budget). Constant time for fixed-width states; accumulators of values
    /// (bags, lists, distinct sets) walk every group.
    fn size(&self) -> usize;

    /// The result of each group in `groups`.
    fn evaluate(&self, groups: &[usize]) -> Result<ArrayRef>;

    /// Forgets the state of `groups` (their last row was taken away).
    fn clear(&mut self, groups: &[usize]);

    /// The columns of its state in a checkpoint (names without a prefix).
    fn state_fields(&self) -> Vec<Field>;

    /// The state of each group in `groups`, as [`RetractAccumulator::state_fields`].
    fn state(&self, groups: &[usize]) -> Result<Vec<ArrayRef>>;

    /// Sets the state of `groups` from checkpoint columns.
    fn restore(&mut self, state: &[ArrayRef], groups: &[usize], total: usize) -> Result<()>;

    /// Whether it reads its arguments (`COUNT(*)` does not: every row counts).
    fn needs_arguments(&self) -> bool {
        true
    }

    /// Whether partial states (what [`RetractAccumulator::state`] gives for
    /// some of the rows) can be merged: a local pre-aggregation is possible.
    fn mergeable(&self) -> bool {
        false
    }

    /// Adds partial states of some rows (a local pre-aggregation's) into
    /// `groups`.
    fn merge(&mut self, _partial: &[ArrayRef], _groups: &[usize], _total: usize) -> Result<()> {
        Err(Error::Internal(
            "this aggregate's partial states cannot be merged".into(),
        ))
    }
}

/// Each valid row (first argument not null) with its group and whether it
/// is taken away.
fn valid_rows<'a>(
    args: &'a [ArrayRef],
    groups: &'a [usize],
    retract: Option<&'a [bool]>,
) -> impl Iterator<Item = (usize, usize, bool)> + 'a {
    let nulls = args.first().and_then(|a| a.logical_nulls());
    groups
        .iter()
        .enumerate()
        .filter(move |(i, _)| nulls.as_ref().is_none_or(|n| n.is_valid(*i)))
        .map(move |(i, g)| (i, *g, retract.is_some_and(|r| r[i])))
}

/// `COUNT(*)` (no arguments) and `COUNT(x)`.
#[derive(Default)]
pub struct Count {
    counts: Vec<i64>,
    /// Every row counts (`COUNT(*)`, or of a literal that is not NULL).
    star: bool,
}

impl Count {
    /// A count of rows whose argument is not NULL; `star`: of every row.
    pub fn new(star: bool) -> Self {
        Count {
            counts: Vec::new(),
            star,
        }
    }
}

impl RetractAccumulator for Count {
    fn size(&self) -> usize {
        vec_bytes(&self.counts)
    }

    fn resize(&mut self, total: usize) {
        self.counts.resize(total, 0);
    }

    fn needs_arguments(&self) -> bool {
        !self.star
    }

    fn update(
        &mut self,
        args: &[ArrayRef],
        groups: &[usize],
        retract: Option<&[bool]>,
        total: usize,
    ) -> Result<()> {
        self.counts.resize(total, 0);
        for (_, g, taken) in valid_rows(args, groups, retract) {
            self.counts[g] += if taken { -1 } else { 1 };
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[usize]) -> Result<ArrayRef> {
        Ok(Arc::new(Int64Array::from_iter_values(
            groups.iter().map(|g| self.counts[*g]),
        )))
    }

    fn clear(&mut self, groups: &[usize]) {
        groups.iter().for_each(|g| self.counts[*g] = 0);
    }

    fn state_fields(&self) -> Vec<Field> {
        vec![Field::new("count", DataType::Int64, false)]
    }

    fn state(&self, groups: &[usize]) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(groups)?])
    }

    fn restore(&mut self, state: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        self.counts.resize(total, 0);
        let counts = state_column(state, 0)?.as_primitive::<Int64Type>();
        for (i, g) in groups.iter().enumerate() {
            self.counts[*g] = counts.value(i);
        }
        Ok(())
    }

    fn mergeable(&self) -> bool {
        true
    }

    fn merge(&mut self, partial: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        self.counts.resize(total, 0);
        let counts = state_column(partial, 0)?.as_primitive::<Int64Type>();
        for (i, g) in groups.iter().enumerate() {
            self.counts[*g] += counts.value(i);
        }
        Ok(())
    }
}

fn state_column(state: &[ArrayRef], i: usize) -> Result<&ArrayRef> {
    state
        .get(i)
        .ok_or_else(|| Error::State(format!("aggregate state lacks its column {i}")))
}

/// The arithmetic a SUM or AVG runs in: 64-bit integers (wrapping, as
/// Java's do), doubles, or 128-bit decimals at the input's scale.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Arithmetic {
    Integer,
    Float,
    Decimal { scale: i8 },
}

impl Arithmetic {
    fn of(input: &DataType) -> Result<Self> {
        Ok(match input {
            t if t.is_integer() => Arithmetic::Integer,
            t if t.is_floating() => Arithmetic::Float,
            DataType::Decimal128(_, scale)
            | DataType::Decimal64(_, scale)
            | DataType::Decimal32(_, scale) => Arithmetic::Decimal { scale: *scale },
            other => return Err(Error::Plan(format!("SUM and AVG take numbers, not {other}"))),
        })
    }

    fn data_type(self) -> DataType {
        match self {
            Arithmetic::Integer => DataType::Int64,
            Arithmetic::Float => DataType::Float64,
            Arithmetic::Decimal { scale } => DataType::Decimal128(38, scale),
        }
    }
}

/// `SUM(x)` and `AVG(x)`: a sum and the number of values summed.
pub struct Sum {
    arithmetic: Arithmetic,
    /// Sums by `arithmetic`: one of these three is used.
    long: Vec<i64>,
    decimal: Vec<i128>,
    float: Vec<f64>,
    counts: Vec<i64>,
    average: bool,
    output: DataType,
}

impl Sum {
    /// A SUM (or, with `average`, an AVG) of `input` values giving `output`.
    pub fn new(input: &DataType, output: &DataType, average: bool) -> Result<Self> {
        Ok(Sum {
            arithmetic: Arithmetic::of(input)?,
            long: Vec::new(),
            decimal: Vec::new(),
            float: Vec::new(),
            counts: Vec::new(),
            average,
            output: output.clone(),
        })
    }

    /// The sums of `groups` in the arithmetic's type (null for no values).
    fn sums(&self, groups: &[usize]) -> Result<ArrayRef> {
        self.sums_where(groups, |g: &usize| self.counts[*g] > 0)
    }

    /// The sums of `groups`, null where `valid` is false.
    fn sums_where(&self, groups: &[usize], valid: impl Fn(&usize) -> bool) -> Result<ArrayRef> {
        Ok(match self.arithmetic {
            Arithmetic::Integer => Arc::new(Int64Array::from_iter(
                groups.iter().map(|g| valid(g).then_some(self.long[*g])),
            )),
            Arithmetic::Float => Arc::new(Float64Array::from_iter(
                groups.iter().map(|g| valid(g).then_some(self.float[*g])),
            )),
            Arithmetic::Decimal { scale } => Arc::new(
                Decimal128Array::from_iter(groups.iter().map(|g| valid(g).then_some(self.decimal[*g])))
                    .with_precision_and_scale(38, scale)?,
            ),
        })
    }

    /// Averages: integers divided as Java divides them (toward zero),
    /// decimals at the output's scale.
    fn averages(&self, groups: &[usize]) -> Result<ArrayRef> {
        let valid = |g: &usize| self.counts[*g] > 0;
        Ok(match (self.arithmetic, &self.output) {
            (Arithmetic::Integer, out) if out.is_integer() => Arc::new(Int64Array::from_iter(
                groups
                    .iter()
                    .map(|g| valid(g).then(|| self.long[*g] / self.counts[*g])),
            )),
            (Arithmetic::Integer, _) => {
                Arc::new(Float64Array::from_iter(groups.iter().map(|g| {
                    valid(g).then(|| self.long[*g] as f64 / self.counts[*g] as f64)
                })))
            }
            (Arithmetic::Float, _) => Arc::new(Float64Array::from_iter(
                groups
                    .iter()
                    .map(|g| valid(g).then(|| self.float[*g] / self.counts[*g] as f64)),
            )),
            (Arithmetic::Decimal { scale }, out) => {
                let out_scale = match out {
                    DataType::Decimal128(_, s) => *s,
                    _ => scale,
                };
                let shift = 10i128.pow((out_scale - scale).max(0) as u32);
                Arc::new(
                    Decimal128Array::from_iter(groups.iter().map(|g| {
                        valid(g).then(|| self.decimal[*g].saturating_mul(shift) / self.counts[*g] as i128)
                    }))
                    .with_precision_and_scale(38, out_scale)?,
                )
            }
        })
    }
}

/// `result` in type `target`: integers narrowed by wrapping (Java's casts),
/// anything else by Arrow's cast.
pub fn to_output(result: &ArrayRef, target: &DataType) -> Result<ArrayRef> {
    if result.data_type() == target {
        return Ok(result.clone());
    }
    if let (DataType::Int64, true) = (result.data_type(), target.is_integer()) {
        return Ok(crate::flink_aggregates::to_flink(result, target)?);
    }
    Ok(arrow::compute::cast(result, target)?)
}

impl RetractAccumulator for Sum {
    fn size(&self) -> usize {
        vec_bytes(&self.counts) + vec_bytes(&self.long) + vec_bytes(&self.decimal) + vec_bytes(&self.float)
    }

    fn resize(&mut self, total: usize) {
        self.counts.resize(total, 0);
        match self.arithmetic {
            Arithmetic::Float => self.float.resize(total, 0.0),
            Arithmetic::Integer => self.long.resize(total, 0),
            Arithmetic::Decimal { .. } => self.decimal.resize(total, 0),
        }
    }

    fn update(
        &mut self,
        args: &[ArrayRef],
        groups: &[usize],
        retract: Option<&[bool]>,
        total: usize,
    ) -> Result<()> {
        self.resize(total);
        let values = arrow::compute::cast(&args[0], &self.arithmetic.data_type())?;
        match self.arithmetic {
            Arithmetic::Integer => {
                let values = values.as_primitive::<Int64Type>().values();
                for (i, g, taken) in valid_rows(args, groups, retract) {
                    let v = values[i];
                    let (sum, count) = (&mut self.long[g], &mut self.counts[g]);
                    if taken {
                        *sum = sum.wrapping_sub(v);
                        *count -= 1;
                    } else {
                        *sum = sum.wrapping_add(v);
                        *count += 1;
                    }
                }
            }
            Arithmetic::Float => {
                let values = values.as_primitive::<Float64Type>().values();
                for (i, g, taken) in valid_rows(args, groups, retract) {
                    let sign = if taken { -1.0 } else { 1.0 };
                    self.float[g] += sign * values[i];
                    self.counts[g] += if taken { -1 } else { 1 };
                }
            }
            Arithmetic::Decimal { .. } => {
                let values = values.as_primitive::<Decimal128Type>().values();
                for (i, g, taken) in valid_rows(args, groups, retract) {
                    let sign: i128 = if taken { -1 } else { 1 };
                    self.decimal[g] = self.decimal[g].wrapping_add(sign * values[i]);
                    self.counts[g] += sign as i64;
                }
            }
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[usize]) -> Result<ArrayRef> {
        let result = if self.average {
            self.averages(groups)?
        } else {
            self.sums(groups)?
        };
        to_output(&result, &self.output)
    }

    fn clear(&mut self, groups: &[usize]) {
        for g in groups {
            self.counts[*g] = 0;
            match self.arithmetic {
                Arithmetic::Float => self.float[*g] = 0.0,
                Arithmetic::Integer => self.long[*g] = 0,
                Arithmetic::Decimal { .. } => self.decimal[*g] = 0,
            }
        }
    }

    fn state_fields(&self) -> Vec<Field> {
        vec![
            Field::new("sum", self.arithmetic.data_type(), true),
            Field::new("count", DataType::Int64, false),
        ]
    }

    fn state(&self, groups: &[usize]) -> Result<Vec<ArrayRef>> {
        // Every sum is saved, also where no value is counted: a partial state
        // of rows added and taken away counts 0 and may still sum to some.
        let counts: ArrayRef = Arc::new(Int64Array::from_iter_values(
            groups.iter().map(|g| self.counts[*g]),
        ));
        Ok(vec![self.sums_where(groups, |_| true)?, counts])
    }

    fn restore(&mut self, state: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        self.resize(total);
        let sums = state_column(state, 0)?;
        let counts = state_column(state, 1)?.as_primitive::<Int64Type>();
        for (i, g) in groups.iter().enumerate() {
            self.counts[*g] = counts.value(i);
            if sums.is_null(i) {
                continue;
            }
            match self.arithmetic {
                Arithmetic::Integer => self.long[*g] = sums.as_primitive::<Int64Type>().value(i),
                Arithmetic::Float => self.float[*g] = sums.as_primitive::<Float64Type>().value(i),
                Arithmetic::Decimal { .. } => {
                    self.decimal[*g] = sums.as_primitive::<Decimal128Type>().value(i)
                }
            }
        }
        Ok(())
    }

    fn mergeable(&self) -> bool {
        true
    }

    fn merge(&mut self, partial: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        self.resize(total);
        let sums = state_column(partial, 0)?;
        let counts = state_column(partial, 1)?.as_primitive::<Int64Type>();
        for (i, g) in groups.iter().enumerate() {
            self.counts[*g] += counts.value(i);
            if sums.is_null(i) {
                continue;
            }
            match self.arithmetic {
                Arithmetic::Integer => {
                    let sum = sums.as_primitive::<Int64Type>().value(i);
                    self.long[*g] = self.long[*g].wrapping_add(sum);
                }
                Arithmetic::Float => self.float[*g] += sums.as_primitive::<Float64Type>().value(i),
                Arithmetic::Decimal { .. } => {
                    let sum = sums.as_primitive::<Decimal128Type>().value(i);
                    self.decimal[*g] = self.decimal[*g].wrapping_add(sum);
                }
            }
        }
        Ok(())
    }
}

/// Bytes a vector's buffer takes.
fn vec_bytes<T>(v: &Vec<T>) -> usize {
    v.capacity() * size_of::<T>()
}

/// Bytes an owned row takes: its bytes, and its allocation's header, about.
fn row_bytes(row: &OwnedRow) -> usize {
    row.as_ref().len() + 2 * size_of::<usize>()
}

/// Values of one type as comparable byte rows (Arrow's row format), and back.
struct Values {
    converter: RowConverter,
    data_type: DataType,
    null: OwnedRow,
}

impl Values {
    fn new(data_type: &DataType) -> Result<Self> {
        let converter = RowConverter::new(vec![SortField::new(data_type.clone())])?;
        let null = converter
            .convert_columns(&[new_null_array(data_type, 1)])?
            .row(0)
            .owned();
        Ok(Values {
            converter,
            data_type: data_type.clone(),
            null,
        })
    }

    fn rows(&self, column: &ArrayRef) -> Result<arrow::row::Rows> {
        Ok(self.converter.convert_columns(std::slice::from_ref(column))?)
    }

    /// One value per row (`None`: null).
    fn array<'a>(&self, rows: impl Iterator<Item = Option<&'a OwnedRow>>) -> Result<ArrayRef> {
        let rows: Vec<arrow::row::Row<'_>> = rows.map(|r| r.unwrap_or(&self.null).row()).collect();
        if rows.is_empty() {
            return Ok(new_null_array(&self.data_type, 0));
        }
        Ok(self.converter.convert_rows(rows)?.remove(0))
    }

    /// Lists of values per group (one list per entry of `lists`).
    fn lists<'a>(&self, lists: impl Iterator<Item = Vec<&'a OwnedRow>>) -> Result<ArrayRef> {
        let mut lengths = Vec::new();
        let mut all = Vec::new();
        for list in lists {
            lengths.push(list.len());
            all.extend(list.into_iter().map(Some));
        }
        let values = self.array(all.into_iter())?;
        let field = Arc::new(Field::new_list_field(self.data_type.clone(), true));
        Ok(Arc::new(ListArray::new(
            field,
            OffsetBuffer::from_lengths(lengths),
            values,
            None,
        )))
    }

    /// The rows of each list of a list column.
    fn rows_of_lists(&self, column: &ArrayRef) -> Result<Vec<Vec<OwnedRow>>> {
        let lists = column
            .as_list_opt::<i32>()
            .ok_or_else(|| Error::State(format!("aggregate state is {}, not a list", column.data_type())))?;
        let rows = self.rows(lists.values())?;
        Ok(lists
            .offsets()
            .windows(2)
            .map(|w| {
                (w[0] as usize..w[1] as usize)
                    .map(|i| rows.row(i).owned())
                    .collect()
            })
            .collect())
    }

    fn list_type(&self) -> DataType {
        DataType::List(Arc::new(Field::new_list_field(self.data_type.clone(), true)))
    }
}

/// A multiset of values per group: each value with how often it is there.
type Bag = BTreeMap<OwnedRow, i64>;

fn bag_change(bag: &mut Bag, value: OwnedRow, taken: bool) -> i64 {
    let count = bag.entry(value.clone()).or_insert(0);
    *count += if taken { -1 } else { 1 };
    let now = *count;
    if now <= 0 {
        bag.remove(&value);
    }
    now
}

/// `MIN(x)` and `MAX(x)` of a primitive type over insert-only input: the
/// extreme as a native value per group, compared in Arrow's total order (the
/// common case, and the one the GROUP BY benchmark measures).
pub struct PrimitiveExtreme<T: ArrowPrimitiveType> {
    max: bool,
    data_type: DataType,
    values: Vec<T::Native>,
    set: Vec<bool>,
}

impl<T: ArrowPrimitiveType> PrimitiveExtreme<T> {
    fn new(data_type: &DataType, max: bool) -> Self {
        PrimitiveExtreme {
            max,
            data_type: data_type.clone(),
            values: Vec::new(),
            set: Vec::new(),
        }
    }
}

/// The insert-only MIN or MAX of `data_type` values: native for primitive
/// types, byte rows for any other.
pub fn extreme(data_type: &DataType, max: bool, retracting: bool) -> Result<Box<dyn RetractAccumulator>> {
    use arrow::datatypes::*;
    if retracting {
        return Ok(Box::new(Extreme::new(data_type, max, true)?));
    }
    macro_rules! native {
        ($t:ty) => {
            Box::new(PrimitiveExtreme::<$t>::new(data_type, max)) as Box<dyn RetractAccumulator>
        };
    }
    Ok(match data_type {
        DataType::Int8 => native!(Int8Type),
        DataType::Int16 => native!(Int16Type),
        DataType::Int32 => native!(Int32Type),
        DataType::Int64 => native!(Int64Type),
        DataType::UInt8 => native!(UInt8Type),
        DataType::UInt16 => native!(UInt16Type),
        DataType::UInt32 => native!(UInt32Type),
        DataType::UInt64 => native!(UInt64Type),
        DataType::Float32 => native!(Float32Type),
        DataType::Float64 => native!(Float64Type),
        DataType::Date32 => native!(Date32Type),
        DataType::Date64 => native!(Date64Type),
        DataType::Decimal128(_, _) => native!(Decimal128Type),
        DataType::Timestamp(TimeUnit::Second, _) => native!(TimestampSecondType),
        DataType::Timestamp(TimeUnit::Millisecond, _) => native!(TimestampMillisecondType),
        DataType::Timestamp(TimeUnit::Microsecond, _) => native!(TimestampMicrosecondType),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => native!(TimestampNanosecondType),
        other => Box::new(Extreme::new(other, max, false)?),
    })
}

impl<T: ArrowPrimitiveType> RetractAccumulator for PrimitiveExtreme<T> {
    fn size(&self) -> usize {
        vec_bytes(&self.values) + vec_bytes(&self.set)
    }

    fn resize(&mut self, total: usize) {
        self.values.resize(total, T::Native::default());
        self.set.resize(total, false);
    }

    fn update(
        &mut self,
        args: &[ArrayRef],
        groups: &[usize],
        retract: Option<&[bool]>,
        total: usize,
    ) -> Result<()> {
        self.resize(total);
        let values = args[0]
            .as_primitive_opt::<T>()
            .ok_or_else(|| {
                Error::Internal(format!(
                    "MIN/MAX of {} got {}",
                    self.data_type,
                    args[0].data_type()
                ))
            })?
            .values();
        for (i, g, _) in valid_rows(args, groups, retract) {
            let v = values[i];
            let better = !self.set[g]
                || if self.max {
                    v.is_gt(self.values[g])
                } else {
                    v.is_lt(self.values[g])
                };
            if better {
                self.values[g] = v;
                self.set[g] = true;
            }
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[usize]) -> Result<ArrayRef> {
        let array = arrow::array::PrimitiveArray::<T>::from_iter(
            groups.iter().map(|g| self.set[*g].then_some(self.values[*g])),
        )
        .with_data_type(self.data_type.clone());
        Ok(Arc::new(array))
    }

    fn clear(&mut self, groups: &[usize]) {
        groups.iter().for_each(|g| self.set[*g] = false);
    }

    fn state_fields(&self) -> Vec<Field> {
        vec![Field::new("value", self.data_type.clone(), true)]
    }

    fn state(&self, groups: &[usize]) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(groups)?])
    }

    fn restore(&mut self, state: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        self.resize(total);
        let column = state_column(state, 0)?;
        let values = column
            .as_primitive_opt::<T>()
            .ok_or_else(|| Error::State(format!("MIN/MAX state is {}", column.data_type())))?;
        for (i, g) in groups.iter().enumerate() {
            self.set[*g] = values.is_valid(i);
            if values.is_valid(i) {
                self.values[*g] = values.value(i);
            }
        }
        Ok(())
    }

    fn mergeable(&self) -> bool {
        true
    }

    fn merge(&mut self, partial: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        // A partial extreme is the extreme of some rows: taken like a row.
        self.update(&partial[..1], groups, None, total)
    }
}

/// `MIN(x)` and `MAX(x)`.
pub struct Extreme {
    max: bool,
    values: Values,
    /// Insert-only input: the extreme so far.
    best: Vec<Option<OwnedRow>>,
    /// Updating input: every value, so a retracted extreme has a successor.
    bags: Option<Vec<Bag>>,
}

impl Extreme {
    /// A MIN (or MAX) of `data_type` values; `retracting` when the input updates.
    pub fn new(data_type: &DataType, max: bool, retracting: bool) -> Result<Self> {
        Ok(Extreme {
            max,
            values: Values::new(data_type)?,
            best: Vec::new(),
            bags: retracting.then(Vec::new),
        })
    }

    fn extreme(&self, g: usize) -> Option<&OwnedRow> {
        match &self.bags {
            Some(bags) if self.max => bags[g].keys().next_back(),
            Some(bags) => bags[g].keys().next(),
            None => self.best[g].as_ref(),
        }
    }
}

impl RetractAccumulator for Extreme {
    fn size(&self) -> usize {
        match &self.bags {
            Some(bags) => {
                let entries: usize = bags
                    .iter()
                    .flat_map(|b| b.keys())
                    .map(|r| row_bytes(r) + size_of::<i64>())
                    .sum();
                vec_bytes(bags) + entries
            }
            None => vec_bytes(&self.best) + self.best.iter().flatten().map(row_bytes).sum::<usize>(),
        }
    }

    fn resize(&mut self, total: usize) {
        match &mut self.bags {
            Some(bags) => bags.resize_with(total, Bag::new),
            None => self.best.resize(total, None),
        }
    }

    fn update(
        &mut self,
        args: &[ArrayRef],
        groups: &[usize],
        retract: Option<&[bool]>,
        total: usize,
    ) -> Result<()> {
        let rows = self.values.rows(&args[0])?;
        match &mut self.bags {
            Some(bags) => {
                bags.resize_with(total, Bag::new);
                for (i, g, taken) in valid_rows(args, groups, retract) {
                    bag_change(&mut bags[g], rows.row(i).owned(), taken);
                }
            }
            None => {
                self.best.resize(total, None);
                for (i, g, _) in valid_rows(args, groups, retract) {
                    let row = rows.row(i);
                    let better = match &self.best[g] {
                        None => true,
                        Some(best) if self.max => row > best.row(),
                        Some(best) => row < best.row(),
                    };
                    if better {
                        self.best[g] = Some(row.owned());
                    }
                }
            }
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[usize]) -> Result<ArrayRef> {
        self.values.array(groups.iter().map(|g| self.extreme(*g)))
    }

    fn clear(&mut self, groups: &[usize]) {
        for g in groups {
            match &mut self.bags {
                Some(bags) => bags[*g].clear(),
                None => self.best[*g] = None,
            }
        }
    }

    fn state_fields(&self) -> Vec<Field> {
        match self.bags {
            None => vec![Field::new("value", self.values.data_type.clone(), true)],
            Some(_) => bag_fields(&self.values),
        }
    }

    fn state(&self, groups: &[usize]) -> Result<Vec<ArrayRef>> {
        match &self.bags {
            None => Ok(vec![self.evaluate(groups)?]),
            Some(bags) => bag_state(&self.values, groups.iter().map(|g| &bags[*g])),
        }
    }

    fn restore(&mut self, state: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        match &mut self.bags {
            None => {
                self.best.resize(total, None);
                let column = state_column(state, 0)?;
                let rows = self.values.rows(column)?;
                for (i, g) in groups.iter().enumerate() {
                    self.best[*g] = column.is_valid(i).then(|| rows.row(i).owned());
                }
            }
            Some(bags) => {
                bags.resize_with(total, Bag::new);
                for (bag, g) in restore_bags(&self.values, state)?.into_iter().zip(groups) {
                    bags[*g] = bag;
                }
            }
        }
        Ok(())
    }
}

fn bag_fields(values: &Values) -> Vec<Field> {
    vec![
        Field::new("values", values.list_type(), false),
        Field::new(
            "counts",
            DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true))),
            false,
        ),
    ]
}

/// Bags as two list columns: the values and how often each is there.
fn bag_state<'a>(values: &Values, bags: impl Iterator<Item = &'a Bag> + Clone) -> Result<Vec<ArrayRef>> {
    let lists = values.lists(bags.clone().map(|b| b.keys().collect()))?;
    let mut lengths = Vec::new();
    let mut counts = Vec::new();
    for bag in bags {
        lengths.push(bag.len());
        counts.extend(bag.values().copied());
    }
    let field = Arc::new(Field::new_list_field(DataType::Int64, true));
    let counts = ListArray::new(
        field,
        OffsetBuffer::from_lengths(lengths),
        Arc::new(Int64Array::from(counts)),
        None,
    );
    Ok(vec![lists, Arc::new(counts)])
}

fn restore_bags(values: &Values, state: &[ArrayRef]) -> Result<Vec<Bag>> {
    let lists = values.rows_of_lists(state_column(state, 0)?)?;
    let counts = state_column(state, 1)?
        .as_list_opt::<i32>()
        .ok_or_else(|| Error::State("aggregate state's counts are not a list".into()))?;
    let mut bags = Vec::with_capacity(lists.len());
    for (i, list) in lists.into_iter().enumerate() {
        let list_counts = counts.value(i);
        let list_counts = list_counts.as_primitive::<Int64Type>();
        if list_counts.len() != list.len() {
            return Err(Error::State(
                "aggregate state has values and counts of different lengths".into(),
            ));
        }
        bags.push(
            list.into_iter()
                .zip(list_counts.values().iter().copied())
                .collect(),
        );
    }
    Ok(bags)
}

/// `AGG(DISTINCT x)`: each value counts once, however often it is there;
/// the inner aggregate sees a value when it first appears and when its last
/// copy is taken away.
pub struct Distinct {
    inner: Box<dyn RetractAccumulator>,
    values: Values,
    /// Per group, each value (its row bytes) and how often it is there.
    seen: Vec<HashMap<Box<[u8]>, i64, foldhash::fast::FixedState>>,
}

impl Distinct {
    /// DISTINCT values of `data_type` into `inner`.
    pub fn new(inner: Box<dyn RetractAccumulator>, data_type: &DataType) -> Result<Self> {
        Ok(Distinct {
            inner,
            values: Values::new(data_type)?,
            seen: Vec::new(),
        })
    }
}

impl RetractAccumulator for Distinct {
    fn size(&self) -> usize {
        let entries: usize = self
            .seen
            .iter()
            .map(|m| {
                m.capacity() * (size_of::<(Box<[u8]>, i64)>() + 1) + m.keys().map(|k| k.len()).sum::<usize>()
            })
            .sum();
        self.inner.size() + vec_bytes(&self.seen) + entries
    }

    fn resize(&mut self, total: usize) {
        self.seen.resize_with(total, HashMap::default);
        self.inner.resize(total);
    }

    fn update(
        &mut self,
        args: &[ArrayRef],
        groups: &[usize],
        retract: Option<&[bool]>,
        total: usize,
    ) -> Result<()> {
        self.seen.resize_with(total, HashMap::default);
        let rows = self.values.rows(&args[0])?;
        let mut changed = Vec::new();
        let mut changed_groups = Vec::new();
        let mut changed_retract = Vec::new();
        for (i, g, taken) in valid_rows(args, groups, retract) {
            let seen = &mut self.seen[g];
            let value = rows.row(i);
            let delta = if taken { -1 } else { 1 };
            let now = match seen.get_mut(value.as_ref()) {
                Some(count) => {
                    *count += delta;
                    *count
                }
                None => {
                    seen.insert(value.as_ref().into(), delta);
                    delta
                }
            };
            if now <= 0 {
                seen.remove(value.as_ref());
            }
            if (taken && now == 0) || (!taken && now == 1) {
                changed.push(i as u32);
                changed_groups.push(g);
                changed_retract.push(taken);
            }
        }
        if changed.is_empty() {
            self.inner.resize(total);
            return Ok(());
        }
        let indices = arrow::array::UInt32Array::from(changed);
        let taken_args = args
            .iter()
            .map(|a| Ok(arrow::compute::take(a, &indices, None)?))
            .collect::<Result<Vec<_>>>()?;
        let retract = changed_retract
            .iter()
            .any(|r| *r)
            .then_some(changed_retract.as_slice());
        self.inner.update(&taken_args, &changed_groups, retract, total)
    }

    fn evaluate(&self, groups: &[usize]) -> Result<ArrayRef> {
        self.inner.evaluate(groups)
    }

    fn clear(&mut self, groups: &[usize]) {
        groups.iter().for_each(|g| self.seen[*g].clear());
        self.inner.clear(groups);
    }

    fn state_fields(&self) -> Vec<Field> {
        let mut fields = bag_fields(&self.values);
        fields.extend(self.inner.state_fields());
        fields
    }

    fn state(&self, groups: &[usize]) -> Result<Vec<ArrayRef>> {
        let parser = self.values.converter.parser();
        let bags: Vec<Bag> = groups
            .iter()
            .map(|g| {
                self.seen[*g]
                    .iter()
                    .map(|(k, v)| (parser.parse(k).owned(), *v))
                    .collect()
            })
            .collect();
        let mut state = bag_state(&self.values, bags.iter())?;
        state.extend(self.inner.state(groups)?);
        Ok(state)
    }

    fn restore(&mut self, state: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        self.seen.resize_with(total, HashMap::default);
        for (bag, g) in restore_bags(&self.values, state)?.into_iter().zip(groups) {
            self.seen[*g] = bag
                .into_iter()
                .map(|(k, v)| (k.row().as_ref().into(), v))
                .collect();
        }
        self.inner.restore(&state[2.min(state.len())..], groups, total)
    }
}

/// Which value of a group's arrival order `FIRST_VALUE` / `LAST_VALUE` give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// The earliest value still there.
    First,
    /// The latest value still there.
    Last,
}

/// `FIRST_VALUE(x)` and `LAST_VALUE(x)`: over updating input, every value in
/// arrival order (a retraction takes away the earliest equal value, as
/// Flink's `FirstValueWithRetractAggFunction` does); over insert-only input
/// only the one value needed.
pub struct Ordered {
    position: Position,
    values: Values,
    retracting: bool,
    lists: Vec<Vec<OwnedRow>>,
}

impl Ordered {
    /// FIRST_VALUE or LAST_VALUE of `data_type` values.
    pub fn new(data_type: &DataType, position: Position, retracting: bool) -> Result<Self> {
        Ok(Ordered {
            position,
            values: Values::new(data_type)?,
            retracting,
            lists: Vec::new(),
        })
    }
}

impl RetractAccumulator for Ordered {
    fn size(&self) -> usize {
        let rows: usize = self
            .lists
            .iter()
            .map(|l| vec_bytes(l) + l.iter().map(row_bytes).sum::<usize>())
            .sum();
        vec_bytes(&self.lists) + rows
    }

    fn resize(&mut self, total: usize) {
        self.lists.resize_with(total, Vec::new);
    }

    fn update(
        &mut self,
        args: &[ArrayRef],
        groups: &[usize],
        retract: Option<&[bool]>,
        total: usize,
    ) -> Result<()> {
        self.lists.resize_with(total, Vec::new);
        let rows = self.values.rows(&args[0])?;
        for (i, g, taken) in valid_rows(args, groups, retract) {
            let list = &mut self.lists[g];
            let row = rows.row(i);
            if taken {
                if let Some(at) = list.iter().position(|v| v.row() == row) {
                    list.remove(at);
                }
            } else if self.retracting {
                list.push(row.owned());
            } else if self.position == Position::Last || list.is_empty() {
                *list = vec![row.owned()];
            }
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[usize]) -> Result<ArrayRef> {
        self.values.array(groups.iter().map(|g| match self.position {
            Position::First => self.lists[*g].first(),
            Position::Last => self.lists[*g].last(),
        }))
    }

    fn clear(&mut self, groups: &[usize]) {
        groups.iter().for_each(|g| self.lists[*g].clear());
    }

    fn state_fields(&self) -> Vec<Field> {
        vec![Field::new("values", self.values.list_type(), false)]
    }

    fn state(&self, groups: &[usize]) -> Result<Vec<ArrayRef>> {
        Ok(vec![
            self.values
                .lists(groups.iter().map(|g| self.lists[*g].iter().collect()))?,
        ])
    }

    fn restore(&mut self, state: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        self.lists.resize_with(total, Vec::new);
        for (list, g) in self
            .values
            .rows_of_lists(state_column(state, 0)?)?
            .into_iter()
            .zip(groups)
        {
            self.lists[*g] = list;
        }
        Ok(())
    }
}

/// `LISTAGG(x [, separator])`: every value in arrival order, joined when
/// evaluated; a retraction takes away the earliest equal value, as Flink's
/// `ListAggWithRetractAggFunction` does.
pub struct ListAgg {
    separator: String,
    lists: Vec<Vec<String>>,
}

impl ListAgg {
    /// LISTAGG joining by `separator`.
    pub fn new(separator: String) -> Self {
        ListAgg {
            separator,
            lists: Vec::new(),
        }
    }
}

impl RetractAccumulator for ListAgg {
    fn size(&self) -> usize {
        let strings: usize = self
            .lists
            .iter()
            .map(|l| vec_bytes(l) + l.iter().map(String::capacity).sum::<usize>())
            .sum();
        vec_bytes(&self.lists) + strings
    }

    fn resize(&mut self, total: usize) {
        self.lists.resize_with(total, Vec::new);
    }

    fn update(
        &mut self,
        args: &[ArrayRef],
        groups: &[usize],
        retract: Option<&[bool]>,
        total: usize,
    ) -> Result<()> {
        self.lists.resize_with(total, Vec::new);
        let values = arrow::compute::cast(&args[0], &DataType::Utf8)?;
        let values = values.as_string::<i32>();
        for (i, g, taken) in valid_rows(args, groups, retract) {
            let list = &mut self.lists[g];
            let value = values.value(i);
            if !taken {
                list.push(value.to_string());
            } else if let Some(at) = list.iter().position(|v| v == value) {
                list.remove(at);
            }
        }
        Ok(())
    }

    fn evaluate(&self, groups: &[usize]) -> Result<ArrayRef> {
        let joined: StringArray = groups
            .iter()
            .map(|g| {
                let list = &self.lists[*g];
                (!list.is_empty()).then(|| list.join(&self.separator))
            })
            .collect();
        Ok(Arc::new(joined))
    }

    fn clear(&mut self, groups: &[usize]) {
        groups.iter().for_each(|g| self.lists[*g].clear());
    }

    fn state_fields(&self) -> Vec<Field> {
        let item = Arc::new(Field::new_list_field(DataType::Utf8, true));
        vec![Field::new("values", DataType::List(item), false)]
    }

    fn state(&self, groups: &[usize]) -> Result<Vec<ArrayRef>> {
        let lengths = groups.iter().map(|g| self.lists[*g].len());
        let values: StringArray = groups
            .iter()
            .flat_map(|g| self.lists[*g].iter().map(Some))
            .collect();
        let item = Arc::new(Field::new_list_field(DataType::Utf8, true));
        let lists = ListArray::new(item, OffsetBuffer::from_lengths(lengths), Arc::new(values), None);
        Ok(vec![Arc::new(lists)])
    }

    fn restore(&mut self, state: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        self.lists.resize_with(total, Vec::new);
        let column = state_column(state, 0)?;
        let lists = column
            .as_list_opt::<i32>()
            .ok_or_else(|| Error::State(format!("LISTAGG state is {}, not a list", column.data_type())))?;
        let values = lists
            .values()
            .as_string_opt::<i32>()
            .ok_or_else(|| Error::State("LISTAGG state holds no strings".into()))?;
        for (w, g) in lists.offsets().windows(2).zip(groups) {
            self.lists[*g] = (w[0] as usize..w[1] as usize)
                .map(|i| values.value(i).to_string())
                .collect();
        }
        Ok(())
    }
}

/// Every accumulator's state columns, each name prefixed by its position.
pub fn state_fields(accumulators: &[Box<dyn RetractAccumulator>]) -> Vec<Field> {
    accumulators
        .iter()
        .enumerate()
        .flat_map(|(i, acc)| {
            acc.state_fields()
                .into_iter()
                .map(move |f| f.clone().with_name(format!("{i}_{}", f.name())))
        })
        .collect()
}

/// The accumulator of one aggregate call; `input` is the schema its
/// arguments are over.
pub fn accumulator_for(
    aggregate: &AggregateFunctionExpr,
    input: &Schema,
    retracting: bool,
) -> Result<Box<dyn RetractAccumulator>> {
    let function = aggregate.fun().name().to_ascii_lowercase();
    let args = aggregate.expressions();
    let argument = match args.first() {
        Some(a) => Some(a.data_type(input)?),
        None => None,
    };
    let output = aggregate.field().data_type().clone();
    let typed = || {
        argument
            .clone()
            .ok_or_else(|| Error::Plan(format!("{function} needs an argument")))
    };
    if !aggregate.order_bys().is_empty() {
        return Err(Error::Plan(format!(
            "{function}(... ORDER BY ...) is not supported in a non-windowed aggregation yet"
        )));
    }
    let base: Box<dyn RetractAccumulator> = match function.as_str() {
        "count" => Box::new(Count::new(
            args.first().is_some_and(|a| is_non_null_literal(a.as_ref())),
        )),
        "sum" => Box::new(Sum::new(&typed()?, &output, false)?),
        "avg" | "mean" => Box::new(Sum::new(&typed()?, &output, true)?),
        "min" | "max" => extreme(&typed()?, function == "max", retracting)?,
        "first_value" => Box::new(Ordered::new(&typed()?, Position::First, retracting)?),
        "last_value" => Box::new(Ordered::new(&typed()?, Position::Last, retracting)?),
        "listagg" => Box::new(ListAgg::new(crate::listagg::separator(&args)?)),
        other => {
            return Err(Error::Plan(format!(
                "the aggregate function {} is not supported in a non-windowed aggregation yet",
                other.to_ascii_uppercase()
            )));
        }
    };
    if !aggregate.is_distinct() {
        return Ok(base);
    }
    if args.len() != 1 {
        return Err(Error::Plan(format!(
            "{}(DISTINCT ...) takes one argument in a non-windowed aggregation",
            function.to_ascii_uppercase()
        )));
    }
    Ok(Box::new(Distinct::new(base, &typed()?)?))
}

/// True for a literal that is not NULL (`COUNT(*)` is `count(1)`).
fn is_non_null_literal(e: &dyn PhysicalExpr) -> bool {
    e.downcast_ref::<datafusion_physical_expr::expressions::Literal>()
        .is_some_and(|l| !l.value().is_null())
}
