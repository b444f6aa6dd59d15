//! Values as Flink writes them: its CSV/JSON text forms and Java's `toString`.
//!
//! Checked against Flink 2.3 on this machine:
//!
//! | value                     | CSV / JSON                  | print (`toString`)          |
//! |---------------------------|-----------------------------|-----------------------------|
//! | `TIMESTAMP '.. 00:00:00'` | `2020-01-01 00:00:00`       | `2020-01-01T00:00`          |
//! | `.. 00:00:01.5`           | `2020-01-01 00:00:01.5`     | `2020-01-01T00:00:01.500`   |
//! | `TIMESTAMP_LTZ` epoch 0   | `1970-01-01 00:00:00Z`      | `1970-01-01T00:00:00Z`      |
//! | `DOUBLE 1e10`, `1e-4`     | `1.0E10`, `1.0E-4`          | same                        |
//! | `DECIMAL(10,2) 12.50`     | `12.5`                      | `12.50`                     |
//! | NULL                      | empty / `null`              | `null`                      |

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type,
    Int64Type, Time32MillisecondType, Time32SecondType, Time64MicrosecondType, Time64NanosecondType,
    TimeUnit, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use chrono::{DateTime, Datelike, NaiveDateTime, Timelike};

use crate::{Error, Result};

/// Which textual convention to follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextStyle {
    /// Flink's CSV and JSON formats.
    Format,
    /// Java's `toString`, as the `print` sink shows rows.
    Print,
}

/// Java's `Double.toString`.
pub fn java_double(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    java_decimal_text(&format!("{v:e}"), v.abs() >= 1e-3 && v.abs() < 1e7)
}

/// Java's `Float.toString`.
pub fn java_float(v: f32) -> String {
    if v.is_nan() || v.is_infinite() || v == 0.0 {
        return java_double(v as f64);
    }
    java_decimal_text(&format!("{v:e}"), v.abs() >= 1e-3 && v.abs() < 1e7)
}

/// Turns Rust's shortest `d.ddde±x` into Java's plain (`123.4`) or computerized
/// scientific (`1.234E10`) notation.
fn java_decimal_text(scientific: &str, plain: bool) -> String {
    let (mantissa, exponent) = scientific.split_once('e').expect("{:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("exponent is an integer");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if plain {
        let point = exponent + 1; // digits before the decimal point
        let (int_part, frac_part) = if point <= 0 {
            (
                "0".to_string(),
                format!("{}{digits}", "0".repeat((-point) as usize)),
            )
        } else if point as usize >= digits.len() {
            (
                format!("{digits}{}", "0".repeat(point as usize - digits.len())),
                String::new(),
            )
        } else {
            (
                digits[..point as usize].to_string(),
                digits[point as usize..].to_string(),
            )
        };
        let frac_part = if frac_part.is_empty() {
            "0".to_string()
        } else {
            frac_part
        };
        format!("{sign}{int_part}.{frac_part}")
    } else {
        let frac = if digits.len() > 1 { &digits[1..] } else { "0" };
        format!("{sign}{}.{frac}E{exponent}", &digits[..1])
    }
}

/// Splits a timestamp value into a UTC date-time.
pub fn timestamp_to_datetime(value: i64, unit: TimeUnit) -> Option<NaiveDateTime> {
    let dt = match unit {
        TimeUnit::Second => DateTime::from_timestamp(value, 0),
        TimeUnit::Millisecond => DateTime::from_timestamp_millis(value),
        TimeUnit::Microsecond => DateTime::from_timestamp_micros(value),
        TimeUnit::Nanosecond => Some(DateTime::from_timestamp_nanos(value)),
    };
    dt.map(|d| d.naive_utc())
}

/// Fraction digits of nanoseconds, trailing zeros removed (`5` for .5 s).
fn minimal_fraction(nanos: u32) -> String {
    if nanos == 0 {
        return String::new();
    }
    let text = format!("{nanos:09}");
    format!(".{}", text.trim_end_matches('0'))
}

/// Fraction as Java's `toString` prints it: in groups of three digits.
fn java_fraction(nanos: u32) -> String {
    if nanos == 0 {
        String::new()
    } else if nanos.is_multiple_of(1_000_000) {
        format!(".{:03}", nanos / 1_000_000)
    } else if nanos.is_multiple_of(1_000) {
        format!(".{:06}", nanos / 1_000)
    } else {
        format!(".{nanos:09}")
    }
}

/// A `TIMESTAMP` in Flink's SQL text form: `yyyy-MM-dd HH:mm:ss[.f...]`.
pub fn format_timestamp(dt: &NaiveDateTime) -> String {
    let fraction = minimal_fraction(dt.nanosecond());
    if (0..=9999).contains(&dt.year()) {
        // Field by field: several times faster than chrono's `format`, which
        // parses its pattern on every call.
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}{fraction}",
            dt.year(),
            dt.month(),
            dt.day(),
            dt.hour(),
            dt.minute(),
            dt.second()
        )
    } else {
        format!("{}{fraction}", dt.format("%Y-%m-%d %H:%M:%S"))
    }
}

/// Java's `LocalDateTime.toString`: seconds omitted when they and the fraction are 0.
pub fn java_local_datetime(dt: &NaiveDateTime) -> String {
    if dt.second() == 0 && dt.nanosecond() == 0 {
        dt.format("%Y-%m-%dT%H:%M").to_string()
    } else {
        format!(
            "{}{}",
            dt.format("%Y-%m-%dT%H:%M:%S"),
            java_fraction(dt.nanosecond())
        )
    }
}

/// Java's `Instant.toString` (always UTC, seconds always shown).
pub fn java_instant(dt: &NaiveDateTime) -> String {
    format!(
        "{}{}Z",
        dt.format("%Y-%m-%dT%H:%M:%S"),
        java_fraction(dt.nanosecond())
    )
}

/// A decimal's digits at `scale` (`1250`, 2 → `12.50`).
fn decimal_plain(value: i128, scale: i8) -> String {
    if scale <= 0 {
        return format!("{}{}", value, "0".repeat((-scale) as usize));
    }
    let negative = value < 0;
    let digits = value.unsigned_abs().to_string();
    let scale = scale as usize;
    let padded = if digits.len() <= scale {
        format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
    } else {
        digits
    };
    let (int_part, frac) = padded.split_at(padded.len() - scale);
    format!("{}{int_part}.{frac}", if negative { "-" } else { "" })
}

/// Java's `BigDecimal.stripTrailingZeros().toString()`, as Flink's CSV writer
/// (through Jackson) prints decimals.
fn decimal_stripped(value: i128, scale: i8) -> String {
    if value == 0 {
        return "0".into();
    }
    let (mut unscaled, mut scale) = (value, scale as i32);
    while unscaled % 10 == 0 {
        unscaled /= 10;
        scale -= 1;
    }
    let digits = unscaled.unsigned_abs().to_string();
    let adjusted = digits.len() as i32 - 1 - scale;
    let sign = if unscaled < 0 { "-" } else { "" };
    if scale >= 0 && adjusted >= -6 {
        format!("{sign}{}", decimal_plain(unscaled.abs(), scale as i8))
    } else {
        let frac = if digits.len() > 1 {
            format!(".{}", &digits[1..])
        } else {
            String::new()
        };
        let exp_sign = if adjusted >= 0 { "+" } else { "" };
        format!("{sign}{}{frac}E{exp_sign}{adjusted}", &digits[..1])
    }
}

/// Formats every value of a column; `None` for NULL.
pub fn format_column(array: &ArrayRef, style: TextStyle) -> Result<Vec<Option<String>>> {
    macro_rules! each {
        ($array:expr, $f:expr) => {{
            let f = $f;
            $array.iter().map(|v| v.map(&f)).collect()
        }};
    }
    let out: Vec<Option<String>> = match array.data_type() {
        DataType::Null => vec![None; array.len()],
        DataType::Boolean => each!(array.as_boolean(), |v: bool| v.to_string()),
        DataType::Int8 => each!(array.as_primitive::<Int8Type>(), |v: i8| v.to_string()),
        DataType::Int16 => each!(array.as_primitive::<Int16Type>(), |v: i16| v.to_string()),
        DataType::Int32 => each!(array.as_primitive::<Int32Type>(), |v: i32| v.to_string()),
        DataType::Int64 => each!(array.as_primitive::<Int64Type>(), |v: i64| v.to_string()),
        DataType::UInt8 => each!(array.as_primitive::<UInt8Type>(), |v: u8| v.to_string()),
        DataType::UInt16 => each!(array.as_primitive::<UInt16Type>(), |v: u16| v.to_string()),
        DataType::UInt32 => each!(array.as_primitive::<UInt32Type>(), |v: u32| v.to_string()),
        DataType::UInt64 => each!(array.as_primitive::<UInt64Type>(), |v: u64| v.to_string()),
        DataType::Float32 => each!(array.as_primitive::<Float32Type>(), java_float),
        DataType::Float64 => each!(array.as_primitive::<Float64Type>(), java_double),
        DataType::Decimal128(_, scale) => {
            let scale = *scale;
            match style {
                TextStyle::Format => each!(array.as_primitive::<Decimal128Type>(), |v| decimal_stripped(
                    v, scale
                )),
                TextStyle::Print => each!(array.as_primitive::<Decimal128Type>(), |v| decimal_plain(
                    v, scale
                )),
            }
        }
        DataType::Utf8 => each!(array.as_string::<i32>(), |v: &str| v.to_string()),
        DataType::LargeUtf8 => each!(array.as_string::<i64>(), |v: &str| v.to_string()),
        DataType::Utf8View => each!(array.as_string_view(), |v: &str| v.to_string()),
        DataType::Binary => each!(array.as_binary::<i32>(), hex_text),
        DataType::LargeBinary => each!(array.as_binary::<i64>(), hex_text),
        DataType::Date32 => each!(array.as_primitive::<Date32Type>(), |d: i32| {
            chrono::NaiveDate::from_num_days_from_ce_opt(d + 719_163)
                .map(|d| d.format("%Y-%m-%d").to_string())
                .unwrap_or_default()
        }),
        DataType::Time32(TimeUnit::Second) => {
            each!(array.as_primitive::<Time32SecondType>(), |v: i32| time_text(
                v as i64 * 1_000_000_000,
                style
            ))
        }
        DataType::Time32(_) => {
            each!(array.as_primitive::<Time32MillisecondType>(), |v: i32| time_text(
                v as i64 * 1_000_000,
                style
            ))
        }
        DataType::Time64(TimeUnit::Microsecond) => {
            each!(array.as_primitive::<Time64MicrosecondType>(), |v: i64| time_text(
                v * 1000,
                style
            ))
        }
        DataType::Time64(_) => each!(array.as_primitive::<Time64NanosecondType>(), |v: i64| time_text(
            v, style
        )),
        DataType::Timestamp(unit, zone) => {
            let ltz = zone.is_some();
            let unit = *unit;
            let values = arrow::compute::cast(array, &DataType::Timestamp(unit, None))?;
            let values = arrow::compute::cast(&values, &DataType::Int64)?;
            let values = values.as_primitive::<Int64Type>();
            values
                .iter()
                .map(|v| {
                    v.and_then(|v| timestamp_to_datetime(v, unit))
                        .map(|dt| match (style, ltz) {
                            (TextStyle::Format, false) => format_timestamp(&dt),
                            (TextStyle::Format, true) => format!("{}Z", format_timestamp(&dt)),
                            (TextStyle::Print, false) => java_local_datetime(&dt),
                            (TextStyle::Print, true) => java_instant(&dt),
                        })
                })
                .collect()
        }
        DataType::List(_) | DataType::LargeList(_) | DataType::Struct(_) | DataType::Map(_, _) => {
            let formatter =
                arrow::util::display::ArrayFormatter::try_new(array.as_ref(), &Default::default())?;
            (0..array.len())
                .map(|i| (!array.is_null(i)).then(|| formatter.value(i).to_string()))
                .collect()
        }
        other => {
            return Err(Error::Execution(format!(
                "cannot write values of type {other} as text"
            )));
        }
    };
    Ok(out)
}

fn hex_text(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn time_text(nanos_of_day: i64, style: TextStyle) -> String {
    let secs = nanos_of_day.div_euclid(1_000_000_000);
    let nanos = nanos_of_day.rem_euclid(1_000_000_000) as u32;
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    match style {
        TextStyle::Format => format!("{h:02}:{m:02}:{s:02}{}", minimal_fraction(nanos)),
        TextStyle::Print if s == 0 && nanos == 0 => format!("{h:02}:{m:02}"),
        TextStyle::Print => format!("{h:02}:{m:02}:{s:02}{}", java_fraction(nanos)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_as_java_does() {
        assert_eq!(java_double(1.5), "1.5");
        assert_eq!(java_double(1e10), "1.0E10");
        assert_eq!(java_double(1e-4), "1.0E-4");
        assert_eq!(java_double(100.0), "100.0");
        assert_eq!(java_double(-0.001), "-0.001");
        assert_eq!(java_double(1234567.0), "1234567.0");
        assert_eq!(java_double(12345678.9), "1.23456789E7");
        assert_eq!(java_float(2.5), "2.5");
    }

    #[test]
    fn decimals_follow_jackson_and_big_decimal() {
        assert_eq!(decimal_stripped(1250, 2), "12.5");
        assert_eq!(decimal_plain(1250, 2), "12.50");
        assert_eq!(decimal_stripped(10000, 2), "1E+2");
        assert_eq!(decimal_plain(-5, 2), "-0.05");
        assert_eq!(decimal_stripped(-5, 2), "-0.05");
    }

    #[test]
    fn timestamps_use_minimal_fractions_in_text_and_java_forms_in_print() {
        let dt = timestamp_to_datetime(1_577_836_801_500, TimeUnit::Millisecond).unwrap();
        assert_eq!(format_timestamp(&dt), "2020-01-01 00:00:01.5");
        assert_eq!(java_local_datetime(&dt), "2020-01-01T00:00:01.500");
        let midnight = timestamp_to_datetime(1_577_836_800_000, TimeUnit::Millisecond).unwrap();
        assert_eq!(format_timestamp(&midnight), "2020-01-01 00:00:00");
        assert_eq!(java_local_datetime(&midnight), "2020-01-01T00:00");
        let epoch = timestamp_to_datetime(0, TimeUnit::Millisecond).unwrap();
        assert_eq!(java_instant(&epoch), "1970-01-01T00:00:00Z");
    }
}
