//! Dates as Frappe's `getdate` and `get_datetime` read them (ISO forms, offsets converted
//! into the site's zone) and as its helpers write them, and `now()`, `nowdate()`,
//! `today()` and `nowtime()` in the site's zone.

use std::fmt::Write as _;

use chrono::{Datelike, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, TimeZone, Timelike, Utc};
use minijinja::value::{Value, ValueKind};
use minijinja::Error;

use super::numbers::is_py_space;
use super::signature::{describe, is_none_like, quote, Bound};
use super::time_zone::time_zone;

/// Python's `datetime.MINYEAR` and `MAXYEAR`: results outside are errors in
/// Frappe too, and four-digit years keep every date string one shape.
pub(super) const MIN_YEAR: i32 = 1;
/// See [`MIN_YEAR`].
pub(super) const MAX_YEAR: i32 = 9999;

/// Now, in the configured zone, to the microsecond (Frappe's
/// `now_datetime()`).
pub(super) fn now_local() -> NaiveDateTime {
    let now = Utc::now().with_timezone(&time_zone()).naive_local();
    now.with_nanosecond(micros(&now) * 1000).unwrap_or(now)
}

/// The microseconds of a time (a leap second's extra second ignored).
fn micros(t: &impl Timelike) -> u32 {
    (t.nanosecond() % 1_000_000_000) / 1000
}

/// `YYYY-MM-DD`.
pub(super) fn fmt_date(d: NaiveDate) -> String {
    format!("{:04}-{:02}-{:02}", d.year(), d.month(), d.day())
}

/// `HH:MM:SS.ffffff` (Frappe's `TIME_FORMAT`).
pub(super) fn fmt_time_full(dt: NaiveDateTime) -> String {
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        dt.hour(),
        dt.minute(),
        dt.second(),
        micros(&dt)
    )
}

/// `YYYY-MM-DD HH:MM:SS.ffffff` (Frappe's `DATETIME_FORMAT`).
pub(super) fn fmt_datetime_full(dt: NaiveDateTime) -> String {
    format!("{} {}", fmt_date(dt.date()), fmt_time_full(dt))
}

/// Python's `str(datetime)`: `YYYY-MM-DD HH:MM:SS`, with `.ffffff` only when
/// there are microseconds.
pub(super) fn fmt_datetime_str(dt: NaiveDateTime) -> String {
    let mut out = format!(
        "{} {:02}:{:02}:{:02}",
        fmt_date(dt.date()),
        dt.hour(),
        dt.minute(),
        dt.second()
    );
    let us = micros(&dt);
    if us != 0 {
        let _ = write!(out, ".{us:06}");
    }
    out
}

/// Whether a date-time lies in Python's years 1–9999.
pub(super) fn in_year_range(dt: &NaiveDateTime) -> bool {
    (MIN_YEAR..=MAX_YEAR).contains(&dt.year())
}

/// A date or date-time read from a string.
#[derive(Debug, Clone, Copy)]
pub(super) struct DateText {
    /// The moment, midnight for a bare date, in the configured zone when the
    /// text had an offset.
    pub(super) at: NaiveDateTime,
    /// Whether the text had a time part.
    pub(super) has_time: bool,
}

/// A byte cursor for [`parse_date_text`].
struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek() == Some(c)).then(|| self.i += 1)
    }

    /// `min..=max` ASCII digits as a number (`max` ≤ 4, so no overflow).
    fn digits(&mut self, min: usize, max: usize) -> Option<u32> {
        let mut n = 0u32;
        let mut count = 0;
        while count < max {
            match self.peek() {
                Some(c) if c.is_ascii_digit() => {
                    n = n * 10 + u32::from(c - b'0');
                    count += 1;
                    self.i += 1;
                }
                _ => break,
            }
        }
        (count >= min).then_some(n)
    }

    /// A fraction of a second's digits as microseconds (further digits
    /// dropped, as dateutil does).
    fn fraction(&mut self) -> Option<u32> {
        let mut us = 0u32;
        let mut count = 0;
        while let Some(c) = self.peek().filter(u8::is_ascii_digit) {
            if count < 6 {
                us = us * 10 + u32::from(c - b'0');
            }
            count += 1;
            self.i += 1;
        }
        if count == 0 {
            return None;
        }
        for _ in count..6 {
            us *= 10;
        }
        Some(us)
    }

    fn skip_spaces(&mut self) -> usize {
        let start = self.i;
        while self.peek() == Some(b' ') {
            self.i += 1;
        }
        self.i - start
    }

    fn done(&self) -> bool {
        self.i == self.s.len()
    }
}

/// Reads `YYYY-MM-DD`, optionally followed by `T` or spaces and
/// `HH:MM[:SS[.ffffff]]`, optionally followed by `Z` or `±HH[:MM]`;
/// surrounding whitespace is ignored. An offset converts the moment into the
/// configured zone.
pub(super) fn parse_date_text(text: &str) -> Option<DateText> {
    let mut p = Cursor {
        s: text.trim_matches(is_py_space).as_bytes(),
        i: 0,
    };
    let year = p.digits(4, 4)?;
    p.eat(b'-')?;
    let month = p.digits(1, 2)?;
    p.eat(b'-')?;
    let day = p.digits(1, 2)?;
    let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
    if date.year() < MIN_YEAR {
        return None;
    }
    if p.done() {
        return Some(DateText {
            at: date.and_time(NaiveTime::MIN),
            has_time: false,
        });
    }
    if matches!(p.peek(), Some(b'T' | b't')) {
        p.i += 1;
    } else if p.skip_spaces() == 0 {
        return None;
    }
    let hour = p.digits(1, 2)?;
    p.eat(b':')?;
    let minute = p.digits(2, 2)?;
    let (mut second, mut micro) = (0, 0);
    if p.eat(b':').is_some() {
        second = p.digits(2, 2)?;
        if matches!(p.peek(), Some(b'.' | b',')) {
            p.i += 1;
            micro = p.fraction()?;
        }
    }
    p.skip_spaces();
    let offset_seconds = match p.peek() {
        None => None,
        Some(b'Z' | b'z') => {
            p.i += 1;
            Some(0i64)
        }
        Some(sign @ (b'+' | b'-')) => {
            p.i += 1;
            let hours = p.digits(2, 2)?;
            let minutes = if p.eat(b':').is_some() || p.peek().is_some_and(|c| c.is_ascii_digit()) {
                p.digits(2, 2)?
            } else {
                0
            };
            if hours > 23 || minutes > 59 {
                return None;
            }
            let seconds = i64::from(hours * 3600 + minutes * 60);
            Some(if sign == b'-' { -seconds } else { seconds })
        }
        Some(_) => return None,
    };
    if !p.done() {
        return None;
    }
    let mut at = date.and_time(NaiveTime::from_hms_micro_opt(hour, minute, second, micro)?);
    if let Some(offset) = offset_seconds {
        let utc = at.checked_sub_signed(TimeDelta::seconds(offset))?;
        at = time_zone().from_utc_datetime(&utc).naive_local();
    }
    in_year_range(&at).then_some(DateText { at, has_time: true })
}

/// Frappe refuses these as dates (`is_invalid_date_string`): `getdate` and
/// `get_datetime` answer `None` for them.
fn is_null_date(s: &str) -> bool {
    s.starts_with("0001-01-01") || s.starts_with("0000-00-00")
}

/// Frappe's `getdate(value)` (its `parse_day_first` is accepted and has no
/// effect: ISO dates put the year first): today for a falsy value, `None` for a
/// non-string or a null date, the date of a date string, else an error.
fn date_of(b: &Bound, v: &Value) -> Result<Option<NaiveDate>, Error> {
    if !v.is_true() {
        return Ok(Some(now_local().date()));
    }
    let Some(s) = v.as_str() else {
        return Ok(None);
    };
    if is_null_date(s) {
        return Ok(None);
    }
    parse_date_text(s)
        .map(|d| Some(d.at.date()))
        .ok_or_else(|| b.fail(format!("{} is not a valid date string", quote(s))))
}

/// Frappe's `get_datetime(value)`: now for none, `None` for a non-string,
/// an empty string or a null date, the moment of a date string, else an
/// error.
fn datetime_of(b: &Bound, v: &Value) -> Result<Option<NaiveDateTime>, Error> {
    if is_none_like(v) {
        return Ok(Some(now_local()));
    }
    if v.kind() == ValueKind::Seq {
        return Err(b.fail(format!("expected a date-time string, not {}", v.kind())));
    }
    let Some(s) = v.as_str() else {
        return Ok(None);
    };
    if s.is_empty() || is_null_date(s) {
        return Ok(None);
    }
    parse_date_text(s)
        .map(|d| Some(d.at))
        .ok_or_else(|| b.fail(format!("{} is not a valid date-time string", quote(s))))
}

/// A date both arguments of a difference need.
pub(super) fn required_date(b: &Bound, i: usize) -> Result<NaiveDate, Error> {
    let v = b.value(i);
    date_of(b, &v)?.ok_or_else(|| b.fail(format!("{} is not a date", describe(&v))))
}

/// A date-time both arguments of a difference need.
pub(super) fn required_datetime(b: &Bound, i: usize) -> Result<NaiveDateTime, Error> {
    let v = b.value(i);
    datetime_of(b, &v)?.ok_or_else(|| b.fail(format!("{} is not a date-time", describe(&v))))
}

/// `getdate(string_date=None)`: `YYYY-MM-DD`, or none.
pub(super) fn getdate(b: &Bound) -> Result<Value, Error> {
    Ok(date_of(b, &b.value(0))?.map_or(Value::from(()), |d| Value::from(fmt_date(d))))
}

/// `get_datetime(datetime_str=None)`: `YYYY-MM-DD HH:MM:SS[.ffffff]`, or
/// none.
pub(super) fn get_datetime(b: &Bound) -> Result<Value, Error> {
    Ok(datetime_of(b, &b.value(0))?.map_or(Value::from(()), |d| Value::from(fmt_datetime_str(d))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frappe::set_time_zone;
    use crate::frappe::testing::{assert_fails, assert_renders, render, render_err, zone_guard};
    use chrono_tz::Tz;

    #[test]
    fn getdate_and_get_datetime() {
        assert_renders(&[
            (r#"{{ utils.getdate("2024-01-31") }}"#, "2024-01-31"),
            (
                r#"{{ utils.getdate("2024-01-31 10:00:00") }}"#,
                "2024-01-31",
            ),
            (r#"{{ utils.getdate(" 2024-1-5 ") }}"#, "2024-01-05"),
            (
                r#"{{ utils.getdate("2024-01-31T10:00:00.5") }}"#,
                "2024-01-31",
            ),
            (r#"{{ utils.getdate("0000-00-00") is none }}"#, "True"),
            ("{{ utils.getdate(20240101) is none }}", "True"),
            (
                r#"{{ utils.get_datetime("2024-01-31") }}"#,
                "2024-01-31 00:00:00",
            ),
            (
                r#"{{ utils.get_datetime("2024-01-31 10:00:00.123") }}"#,
                "2024-01-31 10:00:00.123000",
            ),
            (
                r#"{{ utils.get_datetime("2024-01-31 10:00:00.1234567") }}"#,
                "2024-01-31 10:00:00.123456",
            ),
            (
                r#"{{ utils.get_datetime("2024-01-31T10:00") }}"#,
                "2024-01-31 10:00:00",
            ),
            (r#"{{ utils.get_datetime("") is none }}"#, "True"),
            (
                r#"{{ utils.get_datetime(" 2024-01-31  10:00:05,5 ") }}"#,
                "2024-01-31 10:00:05.500000",
            ),
        ]);
        assert_fails(
            r#"{{ utils.getdate("garbage") }}"#,
            r#"getdate(): "garbage" is not a valid date string"#,
        );
        assert_fails(
            r#"{{ utils.getdate("2024-02-30") }}"#,
            "not a valid date string",
        );
        for bad in [
            "2024-01-31 25:00",
            "2024-01-31 10",
            "2024-01-31T10:00+05:",
            "20245-01-01",
            "2024-01-31 10:00:60",
        ] {
            assert_fails(
                &format!("{{{{ utils.get_datetime({bad:?}) }}}}"),
                "not a valid date-time string",
            );
        }
        let long = "x".repeat(200);
        let e = render_err(&format!("{{{{ utils.getdate({long:?}) }}}}")).to_string();
        assert!(e.contains(&format!("\"{}\"…", "x".repeat(64))), "{e}");
        assert!(!e.contains(&"x".repeat(65)), "{e}");
    }

    #[test]
    fn offsets_convert_into_the_configured_zone() {
        let _guard = zone_guard();
        set_time_zone(Tz::UTC);
        assert_renders(&[
            (
                r#"{{ utils.get_datetime("2024-01-31T23:30:00Z") }}"#,
                "2024-01-31 23:30:00",
            ),
            (
                r#"{{ utils.get_datetime("2024-01-31T23:30:00-05:30") }}"#,
                "2024-02-01 05:00:00",
            ),
            (
                r#"{{ utils.get_datetime("2024-01-31 23:30 +0100") }}"#,
                "2024-01-31 22:30:00",
            ),
            (
                r#"{{ utils.get_datetime("2024-01-31T23:30:00.25-01") }}"#,
                "2024-02-01 00:30:00.250000",
            ),
        ]);
        set_time_zone(Tz::Asia__Kolkata);
        assert_renders(&[
            (
                r#"{{ utils.get_datetime("2024-01-31T23:30:00Z") }}"#,
                "2024-02-01 05:00:00",
            ),
            (
                r#"{{ utils.getdate("2024-01-31T23:30:00+00:00") }}"#,
                "2024-02-01",
            ),
            (
                r#"{{ utils.get_datetime("2024-01-31 23:30:00") }}"#,
                "2024-01-31 23:30:00",
            ),
        ]);
        set_time_zone(Tz::UTC);
    }

    /// Whether `s` has the shape `shape`, where `9` stands for a digit.
    fn has_shape(s: &str, shape: &str) -> bool {
        s.len() == shape.len()
            && s.bytes().zip(shape.bytes()).all(|(c, p)| {
                if p == b'9' {
                    c.is_ascii_digit()
                } else {
                    c == p
                }
            })
    }

    #[test]
    fn now_and_today_in_the_configured_zone() {
        let _guard = zone_guard();
        set_time_zone(Tz::Asia__Kolkata);
        let zone_date = || fmt_date(Utc::now().with_timezone(&Tz::Asia__Kolkata).date_naive());
        let before = zone_date();
        let out = render("{{ utils.nowdate() }}|{{ utils.today() }}|{{ utils.now() }}|{{ utils.nowtime() }}|{{ utils.getdate() }}|{{ utils.get_datetime() }}");
        let after = zone_date();
        set_time_zone(Tz::UTC);
        let parts: Vec<&str> = out.split('|').collect();
        assert_eq!(parts.len(), 6, "{out}");
        // Around midnight the date may change between the two readings.
        for date in [
            parts[0],
            parts[1],
            &parts[2][..10.min(parts[2].len())],
            parts[4],
        ] {
            assert!(
                date == before || date == after,
                "{date} is neither {before} nor {after}"
            );
        }
        assert!(
            has_shape(parts[2], "9999-99-99 99:99:99.999999"),
            "now() = {}",
            parts[2]
        );
        assert!(
            has_shape(parts[3], "99:99:99.999999"),
            "nowtime() = {}",
            parts[3]
        );
        assert!(
            has_shape(parts[5], "9999-99-99 99:99:99.999999")
                || has_shape(parts[5], "9999-99-99 99:99:99"),
            "get_datetime() = {}",
            parts[5]
        );
    }
}
