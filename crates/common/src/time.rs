//! Time: event time as milliseconds since the epoch, the watermarks that
//! bound it, the wall clock, and timestamps of any unit read as milliseconds.

use arrow::array::{Array, AsArray, Int64Array};
use arrow::datatypes::{
    DataType, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType,
};

use crate::{Error, Result};

/// Event time in milliseconds since the Unix epoch (UTC), as Flink's watermarks are.
pub type Timestamp = i64;

/// The watermark that closes every window: sent implicitly at the end of bounded input.
pub const MAX_WATERMARK: Timestamp = i64::MAX;

/// The watermark before any has been seen.
pub const MIN_WATERMARK: Timestamp = i64::MIN;

/// Milliseconds since the epoch, by the wall clock.
pub fn wall_clock_millis() -> Timestamp {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as Timestamp)
}

/// The epoch milliseconds of a timestamp column of any unit and zone.
///
/// Arrow stores every timestamp as an instant since the epoch whatever its zone;
/// these raw values are read directly (a cast to a zone-less type would shift
/// them to local time).
pub fn to_epoch_millis(array: &dyn Array) -> Result<Int64Array> {
    let (values, nulls, per_ms) = match array.data_type() {
        DataType::Timestamp(TimeUnit::Second, _) => {
            // Saturating: seconds beyond ±292 million years clamp to the
            // extremes rather than wrap (or panic).
            let a = array.as_primitive::<TimestampSecondType>();
            return Ok(a.unary(|v| v.saturating_mul(1000)));
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            let a = array.as_primitive::<TimestampMillisecondType>();
            (a.values().clone(), a.nulls().cloned(), 1)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            let a = array.as_primitive::<TimestampMicrosecondType>();
            (a.values().clone(), a.nulls().cloned(), 1_000)
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            let a = array.as_primitive::<TimestampNanosecondType>();
            (a.values().clone(), a.nulls().cloned(), 1_000_000)
        }
        other => {
            return Err(Error::Internal(format!(
                "expected a timestamp column, got {other}"
            )));
        }
    };
    let raw = Int64Array::new(values, nulls);
    Ok(if per_ms == 1 {
        raw
    } else {
        raw.unary(|v: i64| v.div_euclid(per_ms))
    })
}

#[cfg(test)]
mod tests {
    use arrow::array::{TimestampMicrosecondArray, TimestampMillisecondArray};

    use super::*;

    #[test]
    fn epoch_millis_ignore_the_zone_and_scale_the_unit() {
        let shanghai = TimestampMillisecondArray::from(vec![0, 1_500]).with_timezone("Asia/Shanghai");
        assert_eq!(to_epoch_millis(&shanghai).unwrap().values(), &[0, 1_500]);
        let micros = TimestampMicrosecondArray::from(vec![-1, 2_500]);
        assert_eq!(to_epoch_millis(&micros).unwrap().values(), &[-1, 2]);
        let seconds = arrow::array::TimestampSecondArray::from(vec![i64::MAX, i64::MIN, 3]);
        assert_eq!(
            to_epoch_millis(&seconds).unwrap().values(),
            &[i64::MAX, i64::MIN, 3_000]
        );
    }
}
