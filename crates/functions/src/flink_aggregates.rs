//! `SUM` and `AVG` with Flink's result types.
//!
//! Flink keeps the input type: `SUM` of an `INT` is an `INT` (wrapping on
//! overflow, as Java's `int` does), and `AVG` of an integer column is that
//! integer type, truncated toward zero. DataFusion widens `SUM` to `BIGINT` and
//! makes `AVG` a `DOUBLE`. These wrappers run DataFusion's accumulators unchanged
//! (so their state, and checkpoints of it, are DataFusion's) and convert only the
//! final value.

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use arrow::array::{ArrayRef, BooleanArray};
use arrow::compute::CastOptions;
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion_common::{Result, ScalarValue};
use datafusion_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, EmitTo, GroupsAccumulator, Signature, Volatility,
};

/// `sum` and `avg` with Flink's result types.
pub fn flink_typed_aggregates() -> Vec<Arc<AggregateUDF>> {
    vec![
        Arc::new(AggregateUDF::from(FlinkTyped::new(
            datafusion_functions_aggregate::sum::sum_udaf(),
        ))),
        Arc::new(AggregateUDF::from(FlinkTyped::new(
            datafusion_functions_aggregate::average::avg_udaf(),
        ))),
    ]
}

/// An aggregate whose result on integer input is converted back to the input type.
#[derive(Debug)]
struct FlinkTyped {
    inner: Arc<AggregateUDF>,
    signature: Signature,
    /// What accumulators of these argument fields get, once derived: type
    /// coercion took 28% of a spilled session window, which makes an
    /// accumulator per session it reads back.
    coerced: Mutex<Vec<(Vec<FieldRef>, Coerced)>>,
}

/// The inner aggregate's view of some argument fields.
#[derive(Debug, Clone)]
struct Coerced {
    /// Its result field.
    inner_return: FieldRef,
    /// Its argument fields, coerced.
    inner_fields: Vec<FieldRef>,
    /// The type its first argument is cast to.
    wanted_input: DataType,
}

impl PartialEq for FlinkTyped {
    fn eq(&self, other: &Self) -> bool {
        self.inner.name() == other.inner.name()
    }
}

impl Eq for FlinkTyped {}

impl Hash for FlinkTyped {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.name().hash(state);
    }
}

impl FlinkTyped {
    fn new(inner: Arc<AggregateUDF>) -> Self {
        FlinkTyped {
            inner,
            signature: Signature::user_defined(Volatility::Immutable),
            coerced: Mutex::new(Vec::new()),
        }
    }

    /// The integer type the result keeps, if the input is an integer.
    fn flink_type(input: &DataType) -> Option<DataType> {
        input.is_integer().then(|| input.clone())
    }

    fn inner_return_field(&self, input_fields: &[FieldRef]) -> Result<FieldRef> {
        self.inner
            .return_field(&inner_input_fields(&self.inner, input_fields)?)
    }

    /// The inner aggregate's view of `fields`, derived once.
    fn coerced(&self, fields: &[FieldRef]) -> Result<Coerced> {
        let mut cache = self.coerced.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, found)) = cache.iter().find(|(f, _)| f[..] == *fields) {
            return Ok(found.clone());
        }
        let first = fields.first().ok_or_else(|| {
            datafusion_common::DataFusionError::Plan(format!("{} without an argument", self.inner.name()))
        })?;
        let coerced = Coerced {
            inner_return: self.inner_return_field(fields)?,
            inner_fields: inner_input_fields(&self.inner, fields)?,
            wanted_input: inner_input_type(&self.inner, first.data_type())?,
        };
        cache.push((fields.to_vec(), coerced.clone()));
        Ok(coerced)
    }
}

impl AggregateUDFImpl for FlinkTyped {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        // Keep integer inputs as they are so the result type can follow them;
        // the inner accumulator is given the types it wants in `accumulator`.
        if arg_types.len() == 1 && arg_types[0].is_integer() {
            return Ok(arg_types.to_vec());
        }
        let fields: Vec<FieldRef> = arg_types
            .iter()
            .map(|t| Arc::new(Field::new("arg", t.clone(), true)))
            .collect();
        Ok(inner_input_fields(&self.inner, &fields)?
            .iter()
            .map(|f| f.data_type().clone())
            .collect())
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types.first().and_then(Self::flink_type) {
            Some(t) => Ok(t),
            None => self.inner.return_type(arg_types),
        }
    }

    fn return_field(&self, arg_fields: &[FieldRef]) -> Result<FieldRef> {
        match arg_fields.first().and_then(|f| Self::flink_type(f.data_type())) {
            Some(t) => Ok(Arc::new(Field::new(self.name(), t, true))),
            None => self.inner_return_field(arg_fields),
        }
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let coerced = self.coerced(args.expr_fields)?;
        let target = args.return_field.data_type().clone();
        let inner_args = AccumulatorArgs {
            return_field: coerced.inner_return.clone(),
            expr_fields: &coerced.inner_fields,
            ..args
        };
        let inner = self.inner.accumulator(inner_args)?;
        Ok(Box::new(CastingAccumulator {
            inner,
            input_type: args.expr_fields[0].data_type().clone(),
            wanted_input: coerced.wanted_input,
            target,
        }))
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let inner_return = self.inner_return_field(args.input_fields)?;
        let input_fields = inner_input_fields(&self.inner, args.input_fields)?;
        self.inner.state_fields(StateFieldsArgs {
            return_field: inner_return,
            input_fields: &input_fields,
            ..args
        })
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        match self.inner_return_field(args.expr_fields) {
            Ok(inner_return) => match inner_input_fields(&self.inner, args.expr_fields) {
                Ok(inner_fields) => self.inner.groups_accumulator_supported(AccumulatorArgs {
                    return_field: inner_return,
                    expr_fields: &inner_fields,
                    ..args
                }),
                Err(_) => false,
            },
            Err(_) => false,
        }
    }

    fn create_groups_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn GroupsAccumulator>> {
        let inner_return = self.inner_return_field(args.expr_fields)?;
        let target = args.return_field.data_type().clone();
        let inner_fields = inner_input_fields(&self.inner, args.expr_fields)?;
        let inner = self.inner.create_groups_accumulator(AccumulatorArgs {
            return_field: inner_return,
            expr_fields: &inner_fields,
            ..args
        })?;
        Ok(Box::new(CastingGroupsAccumulator {
            inner,
            input_type: args.expr_fields[0].data_type().clone(),
            wanted_input: inner_input_type(&self.inner, args.expr_fields[0].data_type())?,
            target,
        }))
    }

    fn default_value(&self, data_type: &DataType) -> Result<ScalarValue> {
        ScalarValue::try_from(data_type)
    }
}

/// The argument fields the inner (DataFusion) aggregate wants, after the
/// coercion its signature asks for.
fn inner_input_fields(inner: &AggregateUDF, fields: &[FieldRef]) -> Result<Vec<FieldRef>> {
    datafusion_expr::type_coercion::functions::fields_with_udf(fields, inner)
}

/// The input type the inner aggregate expects for an argument of type `input`.
fn inner_input_type(inner: &AggregateUDF, input: &DataType) -> Result<DataType> {
    let field: FieldRef = Arc::new(Field::new("arg", input.clone(), true));
    Ok(inner_input_fields(inner, &[field])?[0].data_type().clone())
}

fn cast_input(values: &[ArrayRef], from: &DataType, to: &DataType) -> Result<Vec<ArrayRef>> {
    if from == to {
        return Ok(values.to_vec());
    }
    values.iter().map(|v| Ok(arrow::compute::cast(v, to)?)).collect()
}

/// Converts an aggregate result to the Flink type: integers wrap (Java semantics),
/// floating-point averages truncate toward zero.
pub(crate) fn to_flink(result: &ArrayRef, target: &DataType) -> Result<ArrayRef> {
    if result.data_type() == target {
        return Ok(result.clone());
    }
    let wide = if result.data_type().is_floating() {
        // Float → Int64 truncates toward zero, like Java's long division does.
        arrow::compute::cast_with_options(
            result,
            &DataType::Int64,
            &CastOptions {
                safe: true,
                ..Default::default()
            },
        )?
    } else {
        arrow::compute::cast(result, &DataType::Int64)?
    };
    let wide = wide
        .as_any()
        .downcast_ref::<arrow::array::Int64Array>()
        .cloned()
        .unwrap_or_else(|| arrow::array::Int64Array::from(vec![None; wide.len()]));
    let narrowed: ArrayRef = match target {
        DataType::Int8 => Arc::new(wide.unary::<_, arrow::datatypes::Int8Type>(|v| v as i8)),
        DataType::Int16 => Arc::new(wide.unary::<_, arrow::datatypes::Int16Type>(|v| v as i16)),
        DataType::Int32 => Arc::new(wide.unary::<_, arrow::datatypes::Int32Type>(|v| v as i32)),
        DataType::Int64 => Arc::new(wide),
        other => arrow::compute::cast(&(Arc::new(wide) as ArrayRef), other)?,
    };
    Ok(narrowed)
}

#[derive(Debug)]
struct CastingAccumulator {
    inner: Box<dyn Accumulator>,
    input_type: DataType,
    wanted_input: DataType,
    target: DataType,
}

impl Accumulator for CastingAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner
            .update_batch(&cast_input(values, &self.input_type, &self.wanted_input)?)
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let value = self.inner.evaluate()?;
        let array = to_flink(&value.to_array()?, &self.target)?;
        ScalarValue::try_from_array(&array, 0)
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.inner.state()
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.inner.merge_batch(states)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner
            .retract_batch(&cast_input(values, &self.input_type, &self.wanted_input)?)
    }

    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }
}

struct CastingGroupsAccumulator {
    inner: Box<dyn GroupsAccumulator>,
    input_type: DataType,
    wanted_input: DataType,
    target: DataType,
}

impl GroupsAccumulator for CastingGroupsAccumulator {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let values = cast_input(values, &self.input_type, &self.wanted_input)?;
        self.inner
            .update_batch(&values, group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        to_flink(&self.inner.evaluate(emit_to)?, &self.target)
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        self.inner.state(emit_to)
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.inner.merge_batch(values, group_indices, total_num_groups)
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        let values = cast_input(values, &self.input_type, &self.wanted_input)?;
        self.inner.convert_to_state(&values, opt_filter)
    }

    fn size(&self) -> usize {
        self.inner.size()
    }
}
