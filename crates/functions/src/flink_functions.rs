//! Flink built-in functions DataFusion lacks or defines differently, as UDFs.
//!
//! | function | Flink semantics |
//! |---|---|
//! | `TO_TIMESTAMP_LTZ(epoch, 0 \| 3)` | epoch seconds or milliseconds to a `TIMESTAMP_LTZ(3)` |
//! | `PROCTIME()` | the wall clock; as a computed column, a processing-time attribute |
//! | `SPLIT_INDEX(s, sep, i)` | the `i`-th (from 0) piece of `s` split at `sep`; NULL when out of range |
//! | `REGEXP_EXTRACT(s, re [, group])` | group `group` (default 0, the whole match) of the first match; NULL when none |
//! | `DATE_FORMAT(ts, 'yyyy-MM-dd HH:mm')` | a timestamp as text, Java `SimpleDateFormat` patterns, in the session zone for `TIMESTAMP_LTZ` |
//! | `HOUR(ts)`, `MINUTE(ts)`, `SECOND(ts)` | the field of the (local) time, as `BIGINT` |
//! | `MOD(a, b)` | the remainder, with the sign of `a` |
//!
//! Regular expressions are Rust's `regex` syntax, which is Java's without
//! look-around and back-references.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, StringArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, FieldRef, TimeUnit};
use datafusion_common::{DataFusionError, Result as DFResult, ScalarValue, exec_err, plan_err};
use datafusion_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use weir_common::date_pattern::DatePattern;
use weir_common::time::to_epoch_millis;
use weir_common::types::{PROCTIME, TIME_ATTRIBUTE_KEY};
use weir_plan::window::TimeShift;

/// Flink's scalar built-ins, for a session whose zone is `zone`.
pub fn flink_scalar_functions(zone: &str) -> Vec<Arc<ScalarUDF>> {
    vec![
        Arc::new(ScalarUDF::from(ToTimestampLtz::new(zone))),
        Arc::new(ScalarUDF::from(Proctime::new(zone))),
        Arc::new(ScalarUDF::from(SplitIndex::new())),
        Arc::new(ScalarUDF::from(RegexpExtract::new())),
        Arc::new(ScalarUDF::from(DateFormat::new(zone))),
        Arc::new(ScalarUDF::from(TimeField::new("hour", zone))),
        Arc::new(ScalarUDF::from(TimeField::new("minute", zone))),
        Arc::new(ScalarUDF::from(TimeField::new("second", zone))),
        Arc::new(ScalarUDF::from(Mod::new())),
    ]
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
        // Wherever it is selected, PROCTIME() is a processing-time attribute.
        let metadata = [(TIME_ATTRIBUTE_KEY.to_string(), PROCTIME.to_string())].into();
        Ok(Arc::new(
            Field::new(self.name(), self.return_type(&[])?, false).with_metadata(metadata),
        ))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        let now = weir_common::time::wall_clock_millis();
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

/// The argument arrays of a call, all of the call's length.
fn arrays(args: &ScalarFunctionArgs) -> DFResult<Vec<ArrayRef>> {
    ColumnarValue::values_to_arrays(&args.args)
}

/// A scalar result when every argument was a scalar, else an array.
fn result(args: &ScalarFunctionArgs, array: ArrayRef) -> DFResult<ColumnarValue> {
    if args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_))) {
        Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&array, 0)?))
    } else {
        Ok(ColumnarValue::Array(array))
    }
}

fn string_type(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null
    )
}

/// `SPLIT_INDEX(string, separator, index)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SplitIndex {
    signature: Signature,
}

impl SplitIndex {
    fn new() -> Self {
        SplitIndex {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for SplitIndex {
    fn name(&self) -> &str {
        "split_index"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DFResult<Vec<DataType>> {
        match arg_types {
            [s, sep, i] if string_type(s) && string_type(sep) && (i.is_integer() || i == &DataType::Null) => {
                Ok(vec![DataType::Utf8, DataType::Utf8, DataType::Int64])
            }
            _ => plan_err!("SPLIT_INDEX takes (STRING, STRING, INT), got {arg_types:?}"),
        }
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DFResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        let a = arrays(&args)?;
        let (s, sep, index) = (
            a[0].as_string::<i32>(),
            a[1].as_string::<i32>(),
            a[2].as_primitive::<arrow::datatypes::Int64Type>(),
        );
        let out: StringArray = (0..s.len())
            .map(|row| {
                if s.is_null(row) || sep.is_null(row) || index.is_null(row) {
                    return None;
                }
                let (text, separator, i) = (s.value(row), sep.value(row), index.value(row));
                if separator.is_empty() || i < 0 {
                    return None;
                }
                text.split(separator).nth(i as usize).map(str::to_string)
            })
            .collect();
        result(&args, Arc::new(out))
    }
}

/// `REGEXP_EXTRACT(string, regex [, group])`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct RegexpExtract {
    signature: Signature,
}

impl RegexpExtract {
    fn new() -> Self {
        RegexpExtract {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for RegexpExtract {
    fn name(&self) -> &str {
        "regexp_extract"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DFResult<Vec<DataType>> {
        match arg_types {
            [s, re] if string_type(s) && string_type(re) => Ok(vec![DataType::Utf8, DataType::Utf8]),
            [s, re, g] if string_type(s) && string_type(re) && (g.is_integer() || g == &DataType::Null) => {
                Ok(vec![DataType::Utf8, DataType::Utf8, DataType::Int64])
            }
            _ => plan_err!("REGEXP_EXTRACT takes (STRING, STRING [, INT]), got {arg_types:?}"),
        }
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DFResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        let a = arrays(&args)?;
        let (s, re) = (a[0].as_string::<i32>(), a[1].as_string::<i32>());
        let groups = a
            .get(2)
            .map(|g| g.as_primitive::<arrow::datatypes::Int64Type>().clone());
        let mut compiled: Option<(String, regex::Regex)> = None;
        let mut out = arrow::array::StringBuilder::new();
        for row in 0..s.len() {
            let group = match &groups {
                Some(g) if g.is_null(row) => None,
                Some(g) => Some(g.value(row)),
                None => Some(0),
            };
            let (Some(group), false, false) = (group, s.is_null(row), re.is_null(row)) else {
                out.append_null();
                continue;
            };
            let pattern = re.value(row);
            if compiled.as_ref().is_none_or(|(p, _)| p != pattern) {
                let regex = regex::Regex::new(pattern).map_err(|e| {
                    DataFusionError::Execution(format!(
                        "REGEXP_EXTRACT: invalid regular expression '{pattern}': {e}"
                    ))
                })?;
                compiled = Some((pattern.to_string(), regex));
            }
            let (_, regex) = compiled.as_ref().expect("compiled above");
            if group < 0 || group as usize >= regex.captures_len() {
                out.append_null();
                continue;
            }
            match regex.captures(s.value(row)).and_then(|c| c.get(group as usize)) {
                Some(m) => out.append_value(m.as_str()),
                None => out.append_null(),
            }
        }
        result(&args, Arc::new(out.finish()))
    }
}

/// Local date-times of a timestamp column: its wall-clock value for a
/// `TIMESTAMP`, the time in the session zone for a `TIMESTAMP_LTZ`.
fn local_datetimes(array: &ArrayRef, shift: &TimeShift) -> DFResult<Vec<Option<chrono::NaiveDateTime>>> {
    let millis = to_epoch_millis(array.as_ref()).map_err(|e| DataFusionError::Execution(e.to_string()))?;
    let ltz = matches!(array.data_type(), DataType::Timestamp(_, Some(_)));
    Ok(millis
        .iter()
        .map(|v| {
            v.and_then(|ms| {
                let local = if ltz { shift.to_local(ms) } else { ms };
                chrono::DateTime::from_timestamp_millis(local).map(|d| d.naive_utc())
            })
        })
        .collect())
}

fn timestamp_argument(t: &DataType) -> DFResult<DataType> {
    match t {
        DataType::Timestamp(_, _) => Ok(t.clone()),
        DataType::Date32 | DataType::Date64 => Ok(DataType::Timestamp(TimeUnit::Millisecond, None)),
        t if string_type(t) => Ok(DataType::Timestamp(TimeUnit::Millisecond, None)),
        other => plan_err!("expected a timestamp, got {other}"),
    }
}

/// `DATE_FORMAT(timestamp, format)` with Java `SimpleDateFormat` patterns.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DateFormat {
    signature: Signature,
    zone: String,
}

impl DateFormat {
    fn new(zone: &str) -> Self {
        DateFormat {
            signature: Signature::user_defined(Volatility::Immutable),
            zone: zone.to_string(),
        }
    }
}

impl ScalarUDFImpl for DateFormat {
    fn name(&self) -> &str {
        "date_format"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DFResult<Vec<DataType>> {
        match arg_types {
            [t, f] if string_type(f) => Ok(vec![timestamp_argument(t)?, DataType::Utf8]),
            _ => plan_err!("DATE_FORMAT takes (TIMESTAMP, STRING), got {arg_types:?}"),
        }
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DFResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        let a = arrays(&args)?;
        let shift = TimeShift::for_zone(&self.zone).map_err(|e| DataFusionError::Execution(e.to_string()))?;
        let times = local_datetimes(&a[0], &shift)?;
        let formats = a[1].as_string::<i32>();
        let mut parsed: Option<(String, DatePattern)> = None;
        // The last rendering: consecutive rows in one second (for a pattern
        // without fractions) share it, which saves most of the work on
        // time-ordered input.
        use chrono::Timelike;
        let mut last: Option<(chrono::NaiveDateTime, String)> = None;
        let mut out = arrow::array::StringBuilder::new();
        for (row, time) in times.iter().enumerate() {
            let (Some(time), false) = (time, formats.is_null(row)) else {
                out.append_null();
                continue;
            };
            let format = formats.value(row);
            if parsed.as_ref().is_none_or(|(f, _)| f != format) {
                parsed = Some((format.to_string(), DatePattern::new(format)));
                last = None;
            }
            let (_, pattern) = parsed.as_ref().expect("parsed above");
            let key = if pattern.shows_fractions() {
                *time
            } else {
                time.with_nanosecond(0).unwrap_or(*time)
            };
            if last.as_ref().is_none_or(|(k, _)| *k != key) {
                last = Some((key, pattern.render(time)));
            }
            out.append_value(&last.as_ref().expect("rendered above").1);
        }
        result(&args, Arc::new(out.finish()))
    }
}

/// `HOUR(ts)`, `MINUTE(ts)`, `SECOND(ts)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct TimeField {
    signature: Signature,
    name: &'static str,
    zone: String,
}

impl TimeField {
    fn new(name: &'static str, zone: &str) -> Self {
        TimeField {
            signature: Signature::user_defined(Volatility::Immutable),
            name,
            zone: zone.to_string(),
        }
    }
}

impl ScalarUDFImpl for TimeField {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DFResult<Vec<DataType>> {
        match arg_types {
            [t] => Ok(vec![timestamp_argument(t)?]),
            _ => plan_err!("{} takes one timestamp", self.name.to_uppercase()),
        }
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DFResult<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        use chrono::Timelike;
        let a = arrays(&args)?;
        let shift = TimeShift::for_zone(&self.zone).map_err(|e| DataFusionError::Execution(e.to_string()))?;
        let values: Int64Array = local_datetimes(&a[0], &shift)?
            .iter()
            .map(|t| {
                t.map(|t| match self.name {
                    "hour" => t.hour() as i64,
                    "minute" => t.minute() as i64,
                    _ => t.second() as i64,
                })
            })
            .collect();
        result(&args, Arc::new(values))
    }
}

/// `MOD(a, b)`: the remainder of `a / b`, with the sign of `a` (Java's `%`).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Mod {
    signature: Signature,
}

impl Mod {
    fn new() -> Self {
        Mod {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for Mod {
    fn name(&self) -> &str {
        "mod"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DFResult<Vec<DataType>> {
        match arg_types {
            [a, b] if a.is_integer() && b.is_integer() => Ok(vec![DataType::Int64, DataType::Int64]),
            [a, b] if a.is_numeric() && b.is_numeric() => Ok(vec![DataType::Float64, DataType::Float64]),
            _ => plan_err!("MOD takes two numbers, got {arg_types:?}"),
        }
    }

    fn return_type(&self, arg_types: &[DataType]) -> DFResult<DataType> {
        Ok(arg_types[0].clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DFResult<ColumnarValue> {
        let a = arrays(&args)?;
        let remainder = arrow::compute::kernels::numeric::rem(&a[0], &a[1])?;
        result(&args, remainder)
    }
}
