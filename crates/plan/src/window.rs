//! Window kinds and their arithmetic: slices (panes), window ends, lateness.
//!
//! Every window kind here is *sliced*: time is cut into slices of equal size and a
//! row is added to exactly one slice; a window is the merge of consecutive slices.
//!
//! ```text
//!  HOP(slide 2s, size 6s)      slices of gcd(2s, 6s) = 2s
//!  time  0    2    4    6    8   10
//!        |----|----|----|----|----|
//!  win   [--------------)             ends at 6: slices 0, 2, 4
//!             [--------------)        ends at 8: slices 2, 4, 6
//!  TUMBLE(size)                 one slice per window
//!  CUMULATE(step, size)         slices of step; windows [cycle, cycle + k*step)
//! ```
//!
//! All values are milliseconds on the window's time axis (UTC for `TIMESTAMP`
//! columns, local wall-clock time for `TIMESTAMP_LTZ`, see [`TimeShift`]).

use std::fmt;
use std::str::FromStr;

use chrono::{NaiveDateTime, Offset, TimeZone};

use crate::{Error, Result};

/// The kind of a window table function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WindowKind {
    /// `TUMBLE(size [, offset])`.
    Tumble,
    /// `HOP(slide, size [, offset])`.
    Hop,
    /// `CUMULATE(step, size [, offset])`.
    Cumulate,
}

/// A window definition, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WindowSpec {
    /// Kind.
    pub kind: WindowKind,
    /// Window size (the largest window for CUMULATE).
    pub size: i64,
    /// Slide for HOP, step for CUMULATE, size for TUMBLE.
    pub slide: i64,
    /// Offset of the window grid from the epoch.
    pub offset: i64,
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

impl WindowSpec {
    /// `TUMBLE(size, offset)`.
    pub fn tumble(size: i64, offset: i64) -> Result<Self> {
        Self::checked(WindowKind::Tumble, size, size, offset)
    }

    /// `HOP(slide, size, offset)`.
    pub fn hop(slide: i64, size: i64, offset: i64) -> Result<Self> {
        Self::checked(WindowKind::Hop, size, slide, offset)
    }

    /// `CUMULATE(step, size, offset)`.
    pub fn cumulate(step: i64, size: i64, offset: i64) -> Result<Self> {
        if step > 0 && size % step != 0 {
            return Err(Error::Plan(format!(
                "CUMULATE requires the size ({size} ms) to be a whole multiple of the step ({step} ms)"
            )));
        }
        Self::checked(WindowKind::Cumulate, size, step, offset)
    }

    fn checked(kind: WindowKind, size: i64, slide: i64, offset: i64) -> Result<Self> {
        if size <= 0 || slide <= 0 {
            return Err(Error::Plan(format!(
                "window size and slide must be positive, got size {size} ms and slide {slide} ms"
            )));
        }
        if kind == WindowKind::Hop && slide > size {
            return Err(Error::Plan(format!(
                "HOP slide ({slide} ms) must not be larger than its size ({size} ms)"
            )));
        }
        Ok(WindowSpec {
            kind,
            size,
            slide,
            offset: offset.rem_euclid(size),
        })
    }

    /// Size of one slice.
    pub fn slice_size(&self) -> i64 {
        match self.kind {
            WindowKind::Tumble => self.size,
            WindowKind::Hop => gcd(self.size, self.slide),
            WindowKind::Cumulate => self.slide,
        }
    }

    /// Start of the slice holding time `ts`.
    #[inline]
    pub fn slice_start(&self, ts: i64) -> i64 {
        let g = self.slice_size();
        ts - (ts - self.offset).rem_euclid(g)
    }

    /// End of the last window that contains the slice starting at `slice`.
    pub fn last_window_end(&self, slice: i64) -> i64 {
        match self.kind {
            WindowKind::Tumble => slice + self.size,
            WindowKind::Hop => slice - (slice - self.offset).rem_euclid(self.slide) + self.size,
            WindowKind::Cumulate => slice - (slice - self.offset).rem_euclid(self.size) + self.size,
        }
    }

    /// Ends of every window containing the slice starting at `slice`, ascending.
    pub fn window_ends(&self, slice: i64) -> impl Iterator<Item = i64> + use<> {
        let last = self.last_window_end(slice);
        let (first, step) = match self.kind {
            WindowKind::Tumble => (last, self.size),
            WindowKind::Hop => {
                let g = self.slice_size();
                let earliest_start = slice + g - self.size;
                let first_start = earliest_start + (self.offset - earliest_start).rem_euclid(self.slide);
                (first_start + self.size, self.slide)
            }
            WindowKind::Cumulate => (slice + self.slide, self.slide),
        };
        (0..)
            .map(move |i| first + i * step)
            .take_while(move |end| *end <= last)
    }

    /// Start of the window ending at `end`.
    pub fn window_start(&self, end: i64) -> i64 {
        match self.kind {
            WindowKind::Tumble | WindowKind::Hop => end - self.size,
            WindowKind::Cumulate => {
                let last = end - 1;
                last - (last - self.offset).rem_euclid(self.size)
            }
        }
    }

    /// Starts of the slices that make up the window ending at `end`.
    pub fn slices_of_window(&self, end: i64) -> impl Iterator<Item = i64> + use<> {
        let g = self.slice_size();
        let start = self.window_start(end);
        (0..).map(move |i| start + i * g).take_while(move |s| *s < end)
    }
}

impl fmt::Display for WindowSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let offset = if self.offset != 0 {
            format!(", offset={}", duration_text(self.offset))
        } else {
            String::new()
        };
        match self.kind {
            WindowKind::Tumble => write!(f, "TUMBLE(size={}{offset})", duration_text(self.size)),
            WindowKind::Hop => write!(
                f,
                "HOP(slide={}, size={}{offset})",
                duration_text(self.slide),
                duration_text(self.size)
            ),
            WindowKind::Cumulate => write!(
                f,
                "CUMULATE(step={}, size={}{offset})",
                duration_text(self.slide),
                duration_text(self.size)
            ),
        }
    }
}

/// The windows a window table function assigns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TvfWindow {
    /// Tumbling, hopping or cumulating windows, computed in slices.
    Sliced(WindowSpec),
    /// Session windows with this inactivity gap (ms), merged per key.
    Session {
        /// The gap.
        gap: i64,
    },
}

impl fmt::Display for TvfWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TvfWindow::Sliced(spec) => write!(f, "{spec}"),
            TvfWindow::Session { gap } => write!(f, "SESSION(gap={})", duration_text(*gap)),
        }
    }
}

/// A duration in the largest unit that divides it: `10 s`, `1500 ms`, `5 min`.
pub fn duration_text(ms: i64) -> String {
    for (unit, name) in [(86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s")] {
        if ms % unit == 0 && ms != 0 {
            return format!("{} {name}", ms / unit);
        }
    }
    format!("{ms} ms")
}

/// Converts between UTC instants and the local wall-clock time that windows over a
/// `TIMESTAMP_LTZ` align to (Flink's "shift time zone").
#[derive(Debug, Clone, PartialEq)]
pub enum TimeShift {
    /// Windows align in UTC: `TIMESTAMP` columns, or the zone is UTC.
    Utc,
    /// A fixed offset from UTC, in milliseconds.
    Fixed(i64),
    /// A zone with daylight-saving rules.
    Zone(chrono_tz::Tz),
}

impl TimeShift {
    /// The shift for a zone name (an IANA id or `+hh:mm`).
    pub fn for_zone(zone: &str) -> Result<Self> {
        if let Ok(tz) = chrono_tz::Tz::from_str(zone) {
            if matches!(
                tz,
                chrono_tz::Tz::UTC | chrono_tz::Tz::Etc__UTC | chrono_tz::Tz::GMT
            ) {
                return Ok(TimeShift::Utc);
            }
            return Ok(TimeShift::Zone(tz));
        }
        let offset: chrono::FixedOffset = zone
            .parse()
            .map_err(|_| Error::Plan(format!("unknown time zone '{zone}'")))?;
        let ms = offset.local_minus_utc() as i64 * 1000;
        Ok(if ms == 0 {
            TimeShift::Utc
        } else {
            TimeShift::Fixed(ms)
        })
    }

    /// True when no conversion is needed.
    pub fn is_utc(&self) -> bool {
        matches!(self, TimeShift::Utc)
    }

    /// Local wall-clock milliseconds of a UTC instant.
    #[inline]
    pub fn to_local(&self, utc: i64) -> i64 {
        match self {
            TimeShift::Utc => utc,
            TimeShift::Fixed(offset) => utc + offset,
            TimeShift::Zone(tz) => {
                let offset = chrono::DateTime::from_timestamp_millis(utc)
                    .map(|t| {
                        tz.offset_from_utc_datetime(&t.naive_utc())
                            .fix()
                            .local_minus_utc()
                    })
                    .unwrap_or(0);
                utc + offset as i64 * 1000
            }
        }
    }

    /// The UTC instant of a local wall-clock time; in a gap or overlap of a
    /// daylight-saving change, the earliest instant that maps at or after it.
    #[inline]
    pub fn to_utc(&self, local: i64) -> i64 {
        match self {
            TimeShift::Utc => local,
            TimeShift::Fixed(offset) => local - offset,
            TimeShift::Zone(tz) => {
                let Some(naive) = chrono::DateTime::from_timestamp_millis(local).map(|t| t.naive_utc())
                else {
                    return local;
                };
                local_to_utc(tz, naive).unwrap_or(local)
            }
        }
    }
}

fn local_to_utc(tz: &chrono_tz::Tz, naive: NaiveDateTime) -> Option<i64> {
    use chrono::LocalResult;
    match tz.from_local_datetime(&naive) {
        LocalResult::Single(t) => Some(t.timestamp_millis()),
        LocalResult::Ambiguous(earliest, _) => Some(earliest.timestamp_millis()),
        // A skipped local time (spring forward): the instant the clock jumps over it.
        LocalResult::None => {
            let later = naive + chrono::Duration::hours(1);
            match tz.from_local_datetime(&later) {
                LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => {
                    Some(t.timestamp_millis() - 3_600_000)
                }
                LocalResult::None => None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tumble_slices_are_windows() {
        let w = WindowSpec::tumble(10_000, 0).unwrap();
        assert_eq!(w.slice_start(12_345), 10_000);
        assert_eq!(w.slice_start(-1), -10_000);
        assert_eq!(w.window_ends(10_000).collect::<Vec<_>>(), vec![20_000]);
        assert_eq!(w.slices_of_window(20_000).collect::<Vec<_>>(), vec![10_000]);
    }

    #[test]
    fn hop_slice_belongs_to_size_over_slide_windows() {
        let w = WindowSpec::hop(2_000, 10_000, 0).unwrap();
        assert_eq!(w.slice_size(), 2_000);
        assert_eq!(
            w.window_ends(4_000).collect::<Vec<_>>(),
            vec![6_000, 8_000, 10_000, 12_000, 14_000]
        );
        assert_eq!(w.last_window_end(4_000), 14_000);
        assert_eq!(w.window_start(14_000), 4_000);
        assert_eq!(
            w.slices_of_window(14_000).collect::<Vec<_>>(),
            vec![4_000, 6_000, 8_000, 10_000, 12_000]
        );
    }

    #[test]
    fn hop_with_slide_not_dividing_size_uses_gcd_slices() {
        let w = WindowSpec::hop(4_000, 10_000, 0).unwrap();
        assert_eq!(w.slice_size(), 2_000);
        // Slice [2s, 4s) lies in windows [-4s, 6s), [0s, 10s): ends 6s and 10s.
        assert_eq!(w.window_ends(2_000).collect::<Vec<_>>(), vec![6_000, 10_000]);
        for end in w.window_ends(2_000) {
            assert!(w.slices_of_window(end).any(|s| s == 2_000));
        }
    }

    #[test]
    fn every_hop_window_of_a_slice_contains_it() {
        for (slide, size) in [(2, 10), (3, 7), (5, 5), (4, 6)] {
            let w = WindowSpec::hop(slide, size, 1).unwrap();
            let g = w.slice_size();
            for t in -30..30 {
                let s = w.slice_start(t);
                assert!(s <= t && t < s + g);
                let ends: Vec<i64> = w.window_ends(s).collect();
                // Brute force: windows [st, st+size) with st ≡ offset mod slide containing t.
                let expected: Vec<i64> = (-60i64..60)
                    .filter(|st| (st - w.offset).rem_euclid(slide) == 0)
                    .filter(|st| *st <= t && t < st + size)
                    .map(|st| st + size)
                    .collect();
                assert_eq!(ends, expected, "slide {slide} size {size} t {t}");
            }
        }
    }

    #[test]
    fn cumulate_windows_grow_from_the_cycle_start() {
        let w = WindowSpec::cumulate(1_000, 3_000, 0).unwrap();
        assert_eq!(w.window_ends(1_000).collect::<Vec<_>>(), vec![2_000, 3_000]);
        assert_eq!(w.window_start(2_000), 0);
        assert_eq!(
            w.slices_of_window(3_000).collect::<Vec<_>>(),
            vec![0, 1_000, 2_000]
        );
        assert!(WindowSpec::cumulate(2_000, 3_000, 0).is_err());
    }

    #[test]
    fn offsets_shift_the_grid() {
        let w = WindowSpec::tumble(10_000, 3_000).unwrap();
        assert_eq!(w.slice_start(12_000), 3_000);
        assert_eq!(w.slice_start(13_000), 13_000);
    }

    #[test]
    fn time_shift_round_trips_outside_dst_changes() {
        let shift = TimeShift::for_zone("Asia/Shanghai").unwrap();
        assert_eq!(shift.to_local(0), 8 * 3_600_000);
        assert_eq!(shift.to_utc(8 * 3_600_000), 0);
        assert_eq!(TimeShift::for_zone("UTC").unwrap(), TimeShift::Utc);
        assert_eq!(
            TimeShift::for_zone("+05:30").unwrap(),
            TimeShift::Fixed(19_800_000)
        );
    }
}

/// Where in the two-phase scheme an aggregation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Raw rows in, final rows out.
    Single,
    /// Raw rows in, partial states per slice out (before the exchange).
    Local,
    /// Partial states in, final rows out (after the exchange).
    Global,
}

/// A window column of the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowProperty {
    /// `window_start`.
    Start,
    /// `window_end`.
    End,
    /// `window_time` (= end - 1 ms).
    Time,
}

/// A grouping column of the output, in GROUP BY order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupColumn {
    /// The i-th grouping key.
    Key(usize),
    /// A window column.
    Window(WindowProperty),
}
