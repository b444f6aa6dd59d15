//! Java date patterns (`yyyy-MM-dd HH:mm:ss`), as Flink's `DATE_FORMAT` and
//! partition time extractor use them: rendering a timestamp, and parsing one.

use chrono::{NaiveDate, NaiveDateTime};

/// A parsed `SimpleDateFormat` / `DateTimeFormatter` pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct DatePattern {
    items: Vec<PatternItem>,
}

impl DatePattern {
    /// Splits `pattern` into its fields and literals; any text is a pattern.
    pub fn new(pattern: &str) -> Self {
        DatePattern {
            items: split_pattern(pattern),
        }
    }

    /// `t` as text.
    pub fn render(&self, t: &NaiveDateTime) -> String {
        render_items(&self.items, t)
    }

    /// True when the pattern shows fractions of a second (`S`): otherwise
    /// every instant of one second renders the same.
    pub fn shows_fractions(&self) -> bool {
        self.items
            .iter()
            .any(|item| matches!(item, PatternItem::Field('S', _)))
    }

    /// Reads `text` as the pattern describes it, strictly: numeric fields of
    /// width `n > 1` take exactly `n` digits (a year at least 4), width 1 takes
    /// one or two; literals must match. Missing time fields are zero. Only the
    /// numeric fields `y M d H m s S` can be parsed; `None` when `text` does not
    /// match.
    pub fn parse(&self, text: &str) -> Option<NaiveDateTime> {
        let bytes = text.as_bytes();
        let mut at = 0;
        let (mut year, mut month, mut day) = (None, 1, 1);
        let (mut hour, mut minute, mut second, mut milli) = (0, 0, 0, 0);
        for (i, item) in self.items.iter().enumerate() {
            // A field followed directly by another (`yyyyMMdd`) takes its width exactly.
            let adjacent = matches!(self.items.get(i + 1), Some(PatternItem::Field(..)));
            match item {
                PatternItem::Literal(literal) => {
                    if !text[at..].starts_with(literal.as_str()) {
                        return None;
                    }
                    at += literal.len();
                }
                PatternItem::Field(c, n) => {
                    let (min, max) = match (c, n) {
                        (_, n) if adjacent => (*n, *n),
                        ('y', 4) => (4, 9),
                        (_, 1) => (1, 2),
                        (_, n) => (*n, *n),
                    };
                    let digits = bytes[at..]
                        .iter()
                        .take(max)
                        .take_while(|b| b.is_ascii_digit())
                        .count();
                    if digits < min {
                        return None;
                    }
                    let value: u32 = text[at..at + digits].parse().ok()?;
                    at += digits;
                    match c {
                        'y' | 'u' => year = Some(value as i32),
                        'M' => month = value,
                        'd' => day = value,
                        'H' => hour = value,
                        'm' => minute = value,
                        's' => second = value,
                        'S' if digits <= 3 => milli = value * 10u32.pow(3 - digits as u32),
                        'S' => milli = value / 10u32.pow(digits as u32 - 3),
                        _ => return None,
                    }
                }
            }
        }
        if at != text.len() {
            return None;
        }
        NaiveDate::from_ymd_opt(year?, month, day)?.and_hms_milli_opt(hour, minute, second, milli)
    }
}

/// One piece of a Java date pattern: a run of a pattern letter, or literal text.
#[derive(Debug, Clone, PartialEq)]
enum PatternItem {
    Field(char, usize),
    Literal(String),
}

/// Splits a `SimpleDateFormat` pattern into fields and literals (`'text'`, `''`).
fn split_pattern(pattern: &str) -> Vec<PatternItem> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut items = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            let mut literal = String::new();
            i += 1;
            if i < chars.len() && chars[i] == '\'' {
                items.push(PatternItem::Literal("'".into()));
                i += 1;
                continue;
            }
            while i < chars.len() {
                if chars[i] == '\'' {
                    if i + 1 < chars.len() && chars[i + 1] == '\'' {
                        literal.push('\'');
                        i += 2;
                        continue;
                    }
                    i += 1;
                    break;
                }
                literal.push(chars[i]);
                i += 1;
            }
            items.push(PatternItem::Literal(literal));
        } else if c.is_ascii_alphabetic() {
            let start = i;
            while i < chars.len() && chars[i] == c {
                i += 1;
            }
            items.push(PatternItem::Field(c, i - start));
        } else {
            items.push(PatternItem::Literal(c.to_string()));
            i += 1;
        }
    }
    items
}

fn render_items(items: &[PatternItem], t: &NaiveDateTime) -> String {
    use chrono::{Datelike, Timelike};
    let mut out = String::new();
    let number = |out: &mut String, v: i64, width: usize| out.push_str(&format!("{v:0width$}"));
    for item in items {
        match item {
            PatternItem::Literal(text) => out.push_str(text),
            PatternItem::Field(c, n) => {
                let n = *n;
                match c {
                    'y' | 'u' if *c == 'y' && n == 2 => number(&mut out, (t.year() % 100) as i64, 2),
                    'y' => number(&mut out, t.year() as i64, n),
                    'M' if n >= 4 => out.push_str(&t.format("%B").to_string()),
                    'M' if n == 3 => out.push_str(&t.format("%b").to_string()),
                    'M' => number(&mut out, t.month() as i64, n),
                    'd' => number(&mut out, t.day() as i64, n),
                    'D' => number(&mut out, t.ordinal() as i64, n),
                    'H' => number(&mut out, t.hour() as i64, n),
                    'k' => number(&mut out, if t.hour() == 0 { 24 } else { t.hour() as i64 }, n),
                    'K' => number(&mut out, (t.hour() % 12) as i64, n),
                    'h' => number(
                        &mut out,
                        if t.hour().is_multiple_of(12) {
                            12
                        } else {
                            (t.hour() % 12) as i64
                        },
                        n,
                    ),
                    'm' => number(&mut out, t.minute() as i64, n),
                    's' => number(&mut out, t.second() as i64, n),
                    'S' => number(&mut out, (t.nanosecond() / 1_000_000) as i64, n),
                    'E' if n >= 4 => out.push_str(&t.format("%A").to_string()),
                    'E' => out.push_str(&t.format("%a").to_string()),
                    'u' => number(&mut out, t.weekday().number_from_monday() as i64, n),
                    'a' => out.push_str(if t.hour() < 12 { "AM" } else { "PM" }),
                    'w' => number(&mut out, t.iso_week().week() as i64, n),
                    'G' => out.push_str("AD"),
                    other => out.extend(std::iter::repeat_n(*other, n)),
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_date_patterns_render_as_simple_date_format_does() {
        let t = chrono::NaiveDate::from_ymd_opt(2020, 3, 7)
            .unwrap()
            .and_hms_milli_opt(14, 5, 9, 42)
            .unwrap();
        let render = |p: &str| DatePattern::new(p).render(&t);
        assert_eq!(render("yyyy-MM-dd"), "2020-03-07");
        assert_eq!(render("HH:mm"), "14:05");
        assert_eq!(render("yyyy-MM-dd HH:mm:ss.SSS"), "2020-03-07 14:05:09.042");
        assert_eq!(render("yy/M/d h:m a"), "20/3/7 2:5 PM");
        assert_eq!(render("EEE, dd MMM yyyy"), "Sat, 07 Mar 2020");
        assert_eq!(render("'at' HH 'o''clock'"), "at 14 o'clock");
    }

    #[test]
    fn java_date_patterns_parse_what_they_render() {
        let parse = |p: &str, text: &str| DatePattern::new(p).parse(text);
        let t = NaiveDate::from_ymd_opt(2015, 7, 15).unwrap();
        assert_eq!(
            parse("yyyy-MM-dd HH:mm:ss", "2015-07-15 13:05:00"),
            Some(t.and_hms_opt(13, 5, 0).unwrap())
        );
        assert_eq!(
            parse("yyyy-MM-dd", "2015-07-15"),
            Some(t.and_hms_opt(0, 0, 0).unwrap())
        );
        assert_eq!(
            parse("yyyyMMdd HH", "20150715 07"),
            Some(t.and_hms_opt(7, 0, 0).unwrap())
        );
        assert_eq!(
            parse("yyyy-MM-dd HH:mm:ss.SSS", "2015-07-15 00:00:01.250"),
            Some(t.and_hms_milli_opt(0, 0, 1, 250).unwrap())
        );
    }

    #[test]
    fn java_date_patterns_refuse_text_that_does_not_match() {
        let pattern = DatePattern::new("yyyy-MM-dd HH:mm:ss");
        assert_eq!(pattern.parse("2015-07-15 13:05"), None);
        assert_eq!(pattern.parse("2015-7-15 13:05:00"), None);
        assert_eq!(pattern.parse("2015-07-15 13:05:00 extra"), None);
        assert_eq!(pattern.parse("2015-02-30 00:00:00"), None);
        assert_eq!(DatePattern::new("MMM yyyy").parse("Jul 2015"), None);
    }
}
