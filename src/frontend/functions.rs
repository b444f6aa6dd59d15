//! The functions SQL can call: DataFusion's, plus Flink's where they differ.
//!
//! Names are looked up case-insensitively. Flink built-ins that DataFusion lacks
//! are defined here as ordinary DataFusion UDFs; where Flink and DataFusion
//! disagree about a result type (`SUM`, `AVG` of integers), the Flink-typed
//! version replaces DataFusion's (see [`super::flink_aggregates`]).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, FieldRef, TimeUnit};
use datafusion_common::{DataFusionError, Result as DFResult, ScalarValue, exec_err, plan_err};
use datafusion_expr::planner::ExprPlanner;
use datafusion_expr::{
    AggregateUDF, ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use super::flink_aggregates;

/// Scalar and aggregate functions by lower-case name, plus expression planners.
#[derive(Debug, Clone)]
pub struct FunctionRegistry {
    scalars: HashMap<String, Arc<ScalarUDF>>,
    aggregates: HashMap<String, Arc<AggregateUDF>>,
    /// Planners for syntax that maps to functions (`EXTRACT`, `a.b`, `x[1]`, ...).
    pub expr_planners: Vec<Arc<dyn ExprPlanner>>,
}

impl FunctionRegistry {
    /// DataFusion's functions with Flink's built-ins; `time_zone` is the session's.
    pub fn new(time_zone: &str) -> Self {
        let mut registry = FunctionRegistry {
            scalars: HashMap::new(),
            aggregates: HashMap::new(),
            expr_planners: vec![
                Arc::new(datafusion_functions::core::planner::CoreFunctionPlanner::default()),
                Arc::new(datafusion_functions_nested::planner::NestedFunctionPlanner),
                Arc::new(datafusion_functions_nested::planner::FieldAccessPlanner),
                Arc::new(datafusion_functions::datetime::planner::DatetimeFunctionPlanner),
                Arc::new(datafusion_functions::unicode::planner::UnicodeFunctionPlanner),
                Arc::new(datafusion_functions_aggregate::planner::AggregateFunctionPlanner),
            ],
        };
        for f in datafusion_functions::all_default_functions()
            .into_iter()
            .chain(datafusion_functions_nested::all_default_nested_functions())
        {
            registry.register_scalar(f);
        }
        for f in datafusion_functions_aggregate::all_default_aggregate_functions() {
            registry.register_aggregate(f);
        }
        registry.register_scalar(Arc::new(ScalarUDF::from(ToTimestampLtz::new(time_zone))));
        registry.register_scalar(Arc::new(ScalarUDF::from(Proctime::new(time_zone))));
        for f in flink_aggregates::flink_typed_aggregates() {
            registry.register_aggregate(f);
        }
        registry
    }

    /// Adds (or replaces) a scalar function under its name and aliases.
    pub fn register_scalar(&mut self, f: Arc<ScalarUDF>) {
        for name in std::iter::once(f.name()).chain(f.aliases().iter().map(String::as_str)) {
            self.scalars.insert(name.to_lowercase(), f.clone());
        }
    }

    /// Adds (or replaces) an aggregate function under its name and aliases.
    pub fn register_aggregate(&mut self, f: Arc<AggregateUDF>) {
        for name in std::iter::once(f.name()).chain(f.aliases().iter().map(String::as_str)) {
            self.aggregates.insert(name.to_lowercase(), f.clone());
        }
    }

    /// A scalar function by name.
    pub fn scalar(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        self.scalars.get(&name.to_lowercase()).cloned()
    }

    /// An aggregate function by name.
    pub fn aggregate(&self, name: &str) -> Option<Arc<AggregateUDF>> {
        self.aggregates.get(&name.to_lowercase()).cloned()
    }

    /// Names of all scalar functions.
    pub fn scalar_names(&self) -> Vec<String> {
        self.scalars.keys().cloned().collect()
    }

    /// Names of all aggregate functions.
    pub fn aggregate_names(&self) -> Vec<String> {
        self.aggregates.keys().cloned().collect()
    }
}

/// Flink's `TO_TIMESTAMP_LTZ(epoch, precision)`: epoch seconds (precision 0) or
/// milliseconds (precision 3) to a `TIMESTAMP_LTZ(3)` in the session zone.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ToTimestampLtz {
    signature: Signature,
    zone: String,
}

impl ToTimestampLtz {
    /// The function for a session whose zone is `zone`.
    pub fn new(zone: &str) -> Self {
        ToTimestampLtz {
            signature: Signature::user_defined(Volatility::Immutable),
            zone: zone.to_string(),
        }
    }
}

impl ScalarUDFImpl for ToTimestampLtz {
    fn name(&self) -> &str {
        "to_timestamp_ltz"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DFResult<Vec<DataType>> {
        if arg_types.is_empty() || arg_types.len() > 2 {
            return plan_err!(
                "TO_TIMESTAMP_LTZ takes an epoch value and a precision: TO_TIMESTAMP_LTZ(ms, 3)"
            );
        }
        let first = match &arg_types[0] {
            t if t.is_integer() => DataType::Int64,
            t if t.is_numeric() => DataType::Float64,
            DataType::Null => DataType::Int64,
            other => return plan_err!("TO_TIMESTAMP_LTZ expects a numeric epoch value, got {other}"),
        };
        let mut types = vec![first];
        if arg_types.len() == 2 {
            if !arg_types[1].is_integer() {
                return plan_err!("TO_TIMESTAMP_LTZ precision must be an integer literal (0 or 3)");
            }
            types.push(arg_types[1].clone());
        }
        Ok(types)
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DFResult<DataType> {
        Ok(DataType::Timestamp(
            TimeUnit::Millisecond,
            Some(self.zone.as_str().into()),
        ))
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DFResult<FieldRef> {
        // A literal precision is checked now; anything else when it is evaluated.
        if let Some(Some(precision)) = args.scalar_arguments.get(1) {
            units_per_second(precision)?;
        }
        let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
        Ok(Arc::new(Field::new(
            self.name(),
            self.return_type(&[])?,
            nullable,
        )))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        let per_second = match args.args.get(1) {
            Some(ColumnarValue::Scalar(s)) => units_per_second(s)?,
            Some(_) => return exec_err!("TO_TIMESTAMP_LTZ precision must be a literal"),
            None => 1000,
        };
        let zone: Arc<str> = self.zone.as_str().into();
        let to_millis = |array: &ArrayRef| -> DFResult<ArrayRef> {
            let result: TimestampMillisecondArray = match array.data_type() {
                DataType::Int64 => array
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .iter()
                    .map(|v| v.and_then(|v| v.checked_mul(1000 / per_second)))
                    .collect(),
                DataType::Float64 => array
                    .as_primitive::<arrow::datatypes::Float64Type>()
                    .iter()
                    .map(|v| v.map(|v| (v * (1000 / per_second) as f64) as i64))
                    .collect(),
                other => return exec_err!("TO_TIMESTAMP_LTZ: unexpected argument type {other}"),
            };
            Ok(Arc::new(result.with_timezone(zone.clone())))
        };
        match &args.args[0] {
            ColumnarValue::Array(array) => Ok(ColumnarValue::Array(to_millis(array)?)),
            ColumnarValue::Scalar(scalar) => {
                let array = to_millis(&scalar.to_array()?)?;
                Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?))
            }
        }
    }
}

/// Flink's `PROCTIME()`: the wall-clock time as a `TIMESTAMP_LTZ(3)`; as a
/// computed column it declares a processing-time attribute.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Proctime {
    signature: Signature,
    zone: String,
}

impl Proctime {
    /// The function for a session whose zone is `zone`.
    pub fn new(zone: &str) -> Self {
        Proctime {
            signature: Signature::nullary(Volatility::Volatile),
            zone: zone.to_string(),
        }
    }
}

impl ScalarUDFImpl for Proctime {
    fn name(&self) -> &str {
        "proctime"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DFResult<DataType> {
        Ok(DataType::Timestamp(
            TimeUnit::Millisecond,
            Some(self.zone.as_str().into()),
        ))
    }

    fn return_field_from_args(&self, _args: ReturnFieldArgs) -> DFResult<FieldRef> {
        Ok(Arc::new(Field::new(self.name(), self.return_type(&[])?, false)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        let now = crate::runtime::operator::wall_clock_millis();
        let array =
            TimestampMillisecondArray::from_value(now, args.number_rows).with_timezone(self.zone.as_str());
        Ok(ColumnarValue::Array(Arc::new(array)))
    }
}

/// Epoch units per second for a precision: 1 for 0 (seconds), 1000 for 3 (milliseconds).
fn units_per_second(precision: &ScalarValue) -> DFResult<i64> {
    let p = match precision.cast_to(&DataType::Int64) {
        Ok(ScalarValue::Int64(Some(p))) => p,
        _ => {
            return Err(DataFusionError::Plan(format!(
                "TO_TIMESTAMP_LTZ precision must be 0 or 3, got {precision}"
            )));
        }
    };
    match p {
        0 => Ok(1),
        3 => Ok(1000),
        _ => Err(DataFusionError::Plan(format!(
            "TO_TIMESTAMP_LTZ precision must be 0 or 3, got {p}"
        ))),
    }
}
