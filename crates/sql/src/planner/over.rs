//! An OVER window's frame from SQL: a plain function of DataFusion's
//! `WindowFrame`, refusing what Flink's streaming OVER refuses.

use datafusion_common::ScalarValue;
use datafusion_expr::{WindowFrame, WindowFrameBound, WindowFrameUnits};

use crate::{Error, Result};
use weir_plan::frame::Frame;

/// The frame of `ROWS|RANGE BETWEEN <n>|INTERVAL|UNBOUNDED PRECEDING AND
/// CURRENT ROW` (or `CURRENT ROW AND CURRENT ROW`).
pub fn frame_of(frame: &WindowFrame) -> Result<Frame> {
    if frame.end_bound != WindowFrameBound::CurrentRow {
        return Err(Error::Plan(
            "an OVER window must end at the CURRENT ROW in a stream (FOLLOWING is not supported, as in Flink)".into(),
        ));
    }
    let start = match &frame.start_bound {
        WindowFrameBound::Preceding(v) if v.is_null() => None,
        WindowFrameBound::Preceding(v) => Some(v.clone()),
        WindowFrameBound::CurrentRow => Some(ScalarValue::UInt64(Some(0))),
        WindowFrameBound::Following(_) => {
            return Err(Error::Plan(
                "an OVER window cannot start after the current row".into(),
            ));
        }
    };
    match frame.units {
        WindowFrameUnits::Rows => Ok(Frame::Rows(start.map(|v| rows(&v)).transpose()?)),
        WindowFrameUnits::Range => Ok(Frame::Range(start.map(|v| millis(&v)).transpose()?)),
        WindowFrameUnits::Groups => Err(Error::Plan("GROUPS frames are not supported in a stream".into())),
    }
}

fn rows(v: &ScalarValue) -> Result<u64> {
    let n = match v {
        ScalarValue::UInt64(Some(n)) => Some(*n),
        ScalarValue::Int64(Some(n)) => u64::try_from(*n).ok(),
        ScalarValue::UInt32(Some(n)) => Some(*n as u64),
        ScalarValue::Int32(Some(n)) => u64::try_from(*n).ok(),
        _ => None,
    };
    n.ok_or_else(|| {
        Error::Plan(format!(
            "ROWS {v} PRECEDING: the row count must be a non-negative integer"
        ))
    })
}

fn millis(v: &ScalarValue) -> Result<i64> {
    let ms = match v {
        ScalarValue::IntervalMonthDayNano(Some(i)) if i.months == 0 => {
            Some(i.days as i64 * 86_400_000 + i.nanoseconds.div_euclid(1_000_000))
        }
        ScalarValue::IntervalDayTime(Some(i)) => Some(i.days as i64 * 86_400_000 + i.milliseconds as i64),
        ScalarValue::UInt64(Some(0)) => Some(0),
        _ => None,
    };
    ms.filter(|ms| *ms >= 0).ok_or_else(|| {
        Error::Plan(format!(
            "RANGE {v} PRECEDING: a RANGE frame on a time attribute needs an interval of days or less \
             (INTERVAL '10' SECOND)"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(units: WindowFrameUnits, start: WindowFrameBound, end: WindowFrameBound) -> Result<Frame> {
        frame_of(&WindowFrame::new_bounds(units, start, end))
    }

    #[test]
    fn rows_and_range_frames_preceding_the_current_row_are_read() {
        use WindowFrameBound::*;
        assert_eq!(
            frame(
                WindowFrameUnits::Rows,
                Preceding(ScalarValue::UInt64(Some(10))),
                CurrentRow
            )
            .unwrap(),
            Frame::Rows(Some(10))
        );
        assert_eq!(
            frame(
                WindowFrameUnits::Rows,
                Preceding(ScalarValue::UInt64(None)),
                CurrentRow
            )
            .unwrap(),
            Frame::Rows(None)
        );
        let ten_seconds = ScalarValue::new_interval_mdn(0, 0, 10_000_000_000);
        assert_eq!(
            frame(WindowFrameUnits::Range, Preceding(ten_seconds), CurrentRow).unwrap(),
            Frame::Range(Some(10_000))
        );
    }

    #[test]
    fn following_rows_months_and_groups_are_refused() {
        use WindowFrameBound::*;
        let following = frame(
            WindowFrameUnits::Rows,
            CurrentRow,
            Following(ScalarValue::UInt64(Some(1))),
        );
        assert!(following.unwrap_err().to_string().contains("FOLLOWING"));
        let month = ScalarValue::new_interval_mdn(1, 0, 0);
        assert!(frame(WindowFrameUnits::Range, Preceding(month), CurrentRow).is_err());
        assert!(frame(WindowFrameUnits::Groups, CurrentRow, CurrentRow).is_err());
    }
}
