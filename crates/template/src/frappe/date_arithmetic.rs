//! Date arithmetic as Frappe does it: `add_to_date` and its kin (`add_days`,
//! `add_months`, `add_years`), `date_diff`, `month_diff`, the time differences and the
//! first and last day of a month; every result checked against Python's years 1–9999.

use chrono::{Datelike, NaiveDate, TimeDelta};
use minijinja::value::{Value, ValueKind};
use minijinja::Error;

use super::dates::{
    fmt_date, fmt_datetime_full, fmt_datetime_str, in_year_range, now_local, parse_date_text,
    required_date, required_datetime, MAX_YEAR, MIN_YEAR,
};
use super::numbers::{number_of, Num};
use super::signature::{describe, is_none_like, quote, Bound};

/// Largest shift `add_to_date` applies, in microseconds: ten thousand years
/// of 366 days, more than the whole 1–9999 range, so any larger shift is out
/// of range whatever the date.
const MAX_SHIFT_MICROS: i128 = 10_000 * 366 * 86_400 * 1_000_000;

/// Largest shift in months (years × 12 + months), for the same reason.
const MAX_SHIFT_MONTHS: i128 = 10_000 * 12;

/// The parameters `add_to_date` takes, in Frappe's order.
pub(super) const ADD_TO_DATE_PARAMS: &[&str] = &[
    "date",
    "years",
    "months",
    "weeks",
    "days",
    "hours",
    "minutes",
    "seconds",
    "as_string",
    "as_datetime",
];

/// `add_to_date`'s own arguments, each in its own place (see
/// [`add_to_date_with`]).
pub(super) const ADD_TO_DATE_SLOTS: &[(usize, usize)] = &[
    (1, 1),
    (2, 2),
    (3, 3),
    (4, 4),
    (5, 5),
    (6, 6),
    (7, 7),
    (8, 8),
    (9, 9),
];

/// `date_diff(a, b)`: whole days from `b` to `a`.
pub(super) fn date_diff(b: &Bound) -> Result<Value, Error> {
    let (end, start) = (required_date(b, 0)?, required_date(b, 1)?);
    Ok(Value::from(end.signed_duration_since(start).num_days()))
}

/// `month_diff(a, b)`: months from `b` to `a`, counting both ends.
pub(super) fn month_diff(b: &Bound) -> Result<Value, Error> {
    let (end, start) = (required_date(b, 0)?, required_date(b, 1)?);
    let months = (i64::from(end.year()) - i64::from(start.year())) * 12 + i64::from(end.month())
        - i64::from(start.month())
        + 1;
    Ok(Value::from(months))
}

/// Seconds from `b` to `a`, as Python's `timedelta.total_seconds()`.
pub(super) fn time_diff_seconds(b: &Bound) -> Result<f64, Error> {
    let (end, start) = (required_datetime(b, 0)?, required_datetime(b, 1)?);
    let us = end
        .signed_duration_since(start)
        .num_microseconds()
        .ok_or_else(|| b.fail("difference out of range"))?;
    Ok(us as f64 / 1e6)
}

/// An integer count argument (`d_years`, `d_months`): ints and bools only.
fn int_arg(b: &Bound, i: usize, what: &str) -> Result<i128, Error> {
    let Some(v) = b.given(i) else {
        return Ok(0);
    };
    match (v.kind(), number_of(v)) {
        (ValueKind::Bool, _) => Ok(i128::from(v.is_true())),
        (_, Some(Num::Int(n))) => Ok(n),
        _ => Err(b.fail(format!("{what} must be an integer, not {}", describe(v)))),
    }
}

/// `get_first_day(dt, d_years=0, d_months=0, as_str=False)`: the first of
/// the month, shifted by whole years and months.
pub(super) fn get_first_day(b: &Bound) -> Result<Value, Error> {
    let date = required_date(b, 0)?;
    let (years, months) = (int_arg(b, 1, "d_years")?, int_arg(b, 2, "d_months")?);
    first_of_month(b, date, years, months).map(|d| Value::from(fmt_date(d)))
}

/// `get_last_day(dt)`: the last day of the month.
pub(super) fn get_last_day(b: &Bound) -> Result<Value, Error> {
    let date = required_date(b, 0)?;
    let next = first_of_month(b, date, 0, 1)?;
    next.pred_opt()
        .map(|d| Value::from(fmt_date(d)))
        .ok_or_else(|| b.fail("date out of range"))
}

/// The first day of `date`'s month shifted by `years` and `months`.
fn first_of_month(
    b: &Bound,
    date: NaiveDate,
    years: i128,
    months: i128,
) -> Result<NaiveDate, Error> {
    let index = i128::from(date.year())
        .checked_add(years)
        .and_then(|y| y.checked_mul(12))
        .and_then(|m| m.checked_add(i128::from(date.month0())))
        .and_then(|m| m.checked_add(months))
        .ok_or_else(|| b.fail("date out of range"))?;
    let year = i32::try_from(index.div_euclid(12)).ok();
    let month = u32::try_from(index.rem_euclid(12)).ok();
    match (year, month) {
        (Some(y), Some(m)) if (MIN_YEAR..=MAX_YEAR).contains(&y) => {
            NaiveDate::from_ymd_opt(y, m + 1, 1)
        }
        _ => None,
    }
    .ok_or_else(|| b.fail("date out of range"))
}

/// A shift argument of `add_to_date`: an integer, a float or a bool.
fn shift_arg(b: &Bound, v: Option<&Value>, what: &str) -> Result<Num, Error> {
    let Some(v) = v else {
        return Ok(Num::Int(0));
    };
    match v.kind() {
        ValueKind::Bool => Ok(Num::Int(i128::from(v.is_true()))),
        ValueKind::Number => number_of(v).ok_or_else(|| b.fail(format!("{what} is not a number"))),
        kind => Err(b.fail(format!("{what} must be a number, not {kind}"))),
    }
}

/// The `add_to_date` family: `slots` maps add_to_date's parameter indices
/// (1 = years … 9 = as_datetime) to this function's argument indices; the
/// date is always argument 0. Follows Frappe: years and months first
/// (clamping the day to the month's end, as dateutil's relativedelta does),
/// then the weeks, days, hours, minutes and seconds; a string comes back as
/// a string, a date-time string (or any shift in hours, or as_datetime) as
/// `YYYY-MM-DD HH:MM:SS.ffffff`.
pub(super) fn add_to_date_with(b: &Bound, slots: &[(usize, usize)]) -> Result<Value, Error> {
    let arg = |param: usize| {
        slots
            .iter()
            .find(|(p, _)| *p == param)
            .and_then(|(_, i)| b.given(*i))
    };
    let mut amounts = [Num::Int(0); 8];
    for (param, slot) in amounts.iter_mut().enumerate().skip(1) {
        *slot = shift_arg(b, arg(param), ADD_TO_DATE_PARAMS[param])?;
    }
    let [_, years, months, weeks, days, hours, minutes, seconds] = amounts;
    let mut as_string = arg(8).is_some_and(Value::is_true);
    let mut as_datetime =
        arg(9).is_some_and(Value::is_true) || (hours != Num::Int(0) && hours != Num::Float(0.0));

    let date = b.value(0);
    let start = if is_none_like(&date) {
        now_local()
    } else if let Some(s) = date.as_str() {
        as_string = true;
        let parsed = parse_date_text(s)
            .ok_or_else(|| b.fail(format!("{} is not a valid date", quote(s))))?;
        as_datetime |= s.contains(' ') || parsed.has_time;
        parsed.at
    } else {
        return Err(b.fail(format!("expected a date string, not {}", date.kind())));
    };

    // Years and months: Python refuses fractions of them.
    let out_of_range = || b.fail("date out of range");
    let whole = |n: Num, what: &str| match n {
        Num::Int(i) => Ok(i),
        Num::Float(f) if f.fract() != 0.0 || !f.is_finite() => {
            Err(b.fail(format!("{what} must be a whole number")))
        }
        // Bounded first, so the cast is exact.
        Num::Float(f) if f.abs() <= MAX_SHIFT_MONTHS as f64 => Ok(f as i128),
        Num::Float(_) => Err(out_of_range()),
    };
    let (years, months) = (whole(years, "years")?, whole(months, "months")?);
    let month_shift = years
        .checked_mul(12)
        .and_then(|m| m.checked_add(months))
        .filter(|m| m.unsigned_abs() <= MAX_SHIFT_MONTHS.unsigned_abs())
        .ok_or_else(out_of_range)?;
    let mut at = start;
    if month_shift != 0 {
        let first = first_of_month(b, start.date(), 0, month_shift)?;
        let last_day = (28..=31)
            .rev()
            .find(|&d| first.with_day(d).is_some())
            .unwrap_or(28);
        let date = first
            .with_day(start.day().min(last_day))
            .ok_or_else(out_of_range)?;
        at = date.and_time(start.time());
    }

    // Weeks, days, hours, minutes and seconds, to the microsecond.
    let units: [(Num, i128); 5] = [
        (weeks, 7 * 86_400_000_000),
        (days, 86_400_000_000),
        (hours, 3_600_000_000),
        (minutes, 60_000_000),
        (seconds, 1_000_000),
    ];
    let shift = if units.iter().all(|(n, _)| matches!(n, Num::Int(_))) {
        units
            .iter()
            .try_fold(0i128, |sum, (n, unit)| match n {
                Num::Int(i) => i.checked_mul(*unit).and_then(|x| sum.checked_add(x)),
                Num::Float(_) => None,
            })
            .ok_or_else(out_of_range)?
    } else {
        let total: f64 = units
            .iter()
            .map(|(n, unit)| {
                let n = match n {
                    Num::Int(i) => *i as f64,
                    Num::Float(f) => *f,
                };
                n * (*unit as f64)
            })
            .sum::<f64>()
            .round_ties_even();
        if !total.is_finite() || total.abs() > MAX_SHIFT_MICROS as f64 {
            return Err(out_of_range());
        }
        total as i128
    };
    if shift.unsigned_abs() > MAX_SHIFT_MICROS.unsigned_abs() {
        return Err(out_of_range());
    }
    let shift = i64::try_from(shift).map_err(|_| out_of_range())?;
    let at = at
        .checked_add_signed(TimeDelta::microseconds(shift))
        .filter(in_year_range)
        .ok_or_else(out_of_range)?;

    Ok(Value::from(match (as_string, as_datetime) {
        (true, true) => fmt_datetime_full(at),
        (true, false) => fmt_date(at.date()),
        // No string in: Frappe returns the datetime, which prints as str().
        (false, _) => fmt_datetime_str(at),
    }))
}

#[cfg(test)]
mod tests {
    use crate::frappe::testing::{assert_fails, assert_renders};

    /// Expected values computed with python3, dateutil and Frappe's
    /// add_to_date.
    #[test]
    fn date_arithmetic_matches_frappe() {
        assert_renders(&[
            (r#"{{ utils.add_days("2024-01-31", 1) }}"#, "2024-02-01"),
            (
                r#"{{ utils.add_days(date="2024-01-31", days=-31) }}"#,
                "2023-12-31",
            ),
            (
                r#"{{ utils.add_days("2024-01-31 10:00:00", 1) }}"#,
                "2024-02-01 10:00:00.000000",
            ),
            (r#"{{ utils.add_months("2024-01-31", 1) }}"#, "2024-02-29"),
            (r#"{{ utils.add_months("2023-01-31", 1) }}"#, "2023-02-28"),
            (r#"{{ utils.add_years("2024-02-29", 1) }}"#, "2025-02-28"),
            (
                r#"{{ utils.add_to_date("2024-01-31", months=1, days=1) }}"#,
                "2024-03-01",
            ),
            (
                r#"{{ utils.add_to_date("2024-01-31", hours=5) }}"#,
                "2024-01-31 05:00:00.000000",
            ),
            (
                r#"{{ utils.add_to_date("2024-01-31", minutes=5) }}"#,
                "2024-01-31",
            ),
            (
                r#"{{ utils.add_to_date("2024-01-31", as_datetime=true) }}"#,
                "2024-01-31 00:00:00.000000",
            ),
            (
                r#"{{ utils.add_to_date("2024-03-31 23:59:59.5", months=-1, seconds=1) }}"#,
                "2024-03-01 00:00:00.500000",
            ),
            (
                r#"{{ utils.add_to_date("2024-01-31", weeks=2, days=-1) }}"#,
                "2024-02-13",
            ),
            (
                r#"{{ utils.add_to_date("2024-01-01", days=1.5) }}"#,
                "2024-01-02",
            ),
            (
                r#"{{ utils.add_to_date("2024-01-01 00:00:00", days=1.5) }}"#,
                "2024-01-02 12:00:00.000000",
            ),
            (
                r#"{{ utils.add_to_date("2024-12-31", months=14) }}"#,
                "2026-02-28",
            ),
            (
                r#"{{ utils.add_to_date("2024-01-01", months=-13) }}"#,
                "2022-12-01",
            ),
            (
                r#"{{ utils.add_to_date("2024-01-01T08:00:00", days=1) }}"#,
                "2024-01-02 08:00:00.000000",
            ),
            (
                r#"{{ utils.date_diff("2024-03-01", "2024-02-01 23:00") }}"#,
                "29",
            ),
            (
                r#"{{ utils.date_diff("2024-02-01", "2024-03-01") }}"#,
                "-29",
            ),
            (
                r#"{{ utils.time_diff_in_seconds("2024-01-01 00:01:00.5", "2024-01-01") }}"#,
                "60.5",
            ),
            (
                r#"{{ utils.time_diff_in_hours("2024-01-02 01:00:00", "2024-01-01 00:20:00") }}"#,
                "24.666667",
            ),
            (r#"{{ utils.month_diff("2024-03-05", "2024-01-31") }}"#, "3"),
            (r#"{{ utils.get_first_day("2024-02-15") }}"#, "2024-02-01"),
            (
                r#"{{ utils.get_first_day("2024-02-15", d_months=-2) }}"#,
                "2023-12-01",
            ),
            (r#"{{ utils.get_last_day("2024-02-15") }}"#, "2024-02-29"),
        ]);
        assert_fails(
            r#"{{ utils.date_diff("0000-00-00", "2024-01-01") }}"#,
            "date_diff(): \"0000-00-00\" is not a date",
        );
    }

    #[test]
    fn hostile_dates_are_errors() {
        for src in [
            r#"{{ utils.add_days("2024-01-01", 1000000000000000) }}"#,
            r#"{{ utils.add_days("2024-01-01", -1000000000000000) }}"#,
            r#"{{ utils.add_months("2024-01-01", 1000000000000000) }}"#,
            r#"{{ utils.add_years("2024-01-01", -1000000000000000) }}"#,
            r#"{{ utils.add_to_date("2024-01-01", seconds=1e308) }}"#,
            r#"{{ utils.add_to_date("2024-01-01", years=1e300) }}"#,
            r#"{{ utils.add_to_date("2024-01-01", weeks=170141183460469231731687303715884105727) }}"#,
            r#"{{ utils.add_days("9999-12-31", 1) }}"#,
            r#"{{ utils.add_days("0001-01-01", -1) }}"#,
            r#"{{ utils.add_years("9999-01-01", 1) }}"#,
            r#"{{ utils.get_last_day("9999-12-05") }}"#,
        ] {
            assert_fails(src, "date out of range");
        }
    }
}
