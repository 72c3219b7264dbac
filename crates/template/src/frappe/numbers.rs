//! Numbers as Python and Frappe read, round and print them: `flt`, `cint`, `rounded`,
//! `floor` and `ceil`, Frappe's three rounding methods, and Python's `repr` of a float.

use minijinja::value::{Value, ValueKind};
use minijinja::Error;

use super::signature::{describe, Bound};

/// Most decimal places `flt`, `rounded` and `fmt_money` round to: an f64
/// carries 15–17 significant digits, so more places only show binary noise,
/// and 10^15 is still exact.
const MAX_PRECISION: i64 = 15;

/// Powers of ten up to [`MAX_PRECISION`], exact in an f64.
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// Largest magnitude `cint` turns into an integer (just under i128's range);
/// beyond it, the default.
const MAX_INT_FLOAT: f64 = 1.7e38;

/// Magnitude from which every f64 is an integer (2^52): rounding it to any
/// number of places leaves it unchanged.
const INTEGRAL_FLOAT: f64 = 4_503_599_627_370_496.0;

/// A minijinja number as Python would hold it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Num {
    Int(i128),
    Float(f64),
}

/// The number in `v`, if it is one (bools are not: callers decide).
pub(super) fn number_of(v: &Value) -> Option<Num> {
    if v.kind() != ValueKind::Number {
        return None;
    }
    if v.is_integer() {
        if let Ok(i) = i128::try_from(v.clone()) {
            return Some(Num::Int(i));
        }
    }
    f64::try_from(v.clone()).ok().map(Num::Float)
}

/// An integer as a value: i64 when it fits, else i128.
fn int_value(i: i128) -> Value {
    i64::try_from(i).map_or_else(|_| Value::from(i), Value::from)
}

/// Python's whitespace for `str.strip()`, `int()` and `float()`: Unicode's
/// White_Space plus the separators U+001C–U+001F.
pub(super) fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `s` without the underscores Python allows between two digits (`1_000`),
/// or `None` when an underscore stands anywhere else.
fn without_digit_underscores(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    for (i, c) in s.char_indices() {
        if c == '_' {
            let before = i.checked_sub(1).and_then(|j| bytes.get(j));
            let after = bytes.get(i + 1);
            if !before.is_some_and(u8::is_ascii_digit) || !after.is_some_and(u8::is_ascii_digit) {
                return None;
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

/// Python's `float(s)` for a string: surrounding whitespace, a sign,
/// digit-separating underscores, exponents, `inf`, `infinity` and `nan` in
/// any case.
fn parse_py_float(s: &str) -> Option<f64> {
    let text = without_digit_underscores(s.trim_matches(is_py_space))?;
    if text.is_empty() {
        return None;
    }
    text.parse::<f64>().ok()
}

/// Python's `int(s)` for a string, in base 10 (`None` past i128's range).
fn parse_py_int(s: &str) -> Option<i128> {
    let text = without_digit_underscores(s.trim_matches(is_py_space))?;
    let digits = text.strip_prefix(['+', '-']).unwrap_or(&text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<i128>().ok()
}

/// Python's `int(f)` for a float: truncation; `None` for inf, nan and
/// magnitudes past i128.
fn float_to_int(f: f64) -> Option<i128> {
    // The cast is exact: |f| < 1.7e38 < i128::MAX after truncation.
    (f.is_finite() && f.abs() < MAX_INT_FLOAT).then(|| f.trunc() as i128)
}

/// Python's `float(v)` as `flt` uses it (commas dropped from strings), or
/// `None` where Python would raise.
pub(super) fn float_of(v: &Value) -> Option<f64> {
    match v.kind() {
        ValueKind::Bool => Some(if v.is_true() { 1.0 } else { 0.0 }),
        ValueKind::Number => match number_of(v)? {
            Num::Int(i) => Some(i as f64),
            Num::Float(f) => Some(f),
        },
        ValueKind::String => parse_py_float(&v.as_str()?.replace(',', "")),
        _ => None,
    }
}

/// Frappe's `cint(v)`: `int(v)`, else `int(float(v))`, else `None` (the
/// caller's default).
pub(super) fn cint_of(v: &Value) -> Option<i128> {
    match v.kind() {
        ValueKind::Bool => Some(i128::from(v.is_true())),
        ValueKind::Number => match number_of(v)? {
            Num::Int(i) => Some(i),
            Num::Float(f) => float_to_int(f),
        },
        ValueKind::String => {
            let s = v.as_str()?;
            parse_py_int(s).or_else(|| parse_py_float(s).and_then(float_to_int))
        }
        _ => None,
    }
}

/// A precision argument: `cint` of it clamped to 0..=[`MAX_PRECISION`].
pub(super) fn precision_of(v: &Value) -> usize {
    // The clamp makes the cast exact.
    cint_of(v).unwrap_or(0).clamp(0, i128::from(MAX_PRECISION)) as usize
}

/// Python's `round(x, places)`: the nearest value with that many decimals,
/// ties to even on the exact binary value (as Rust's formatting rounds).
pub(super) fn py_round(x: f64, places: usize) -> f64 {
    if !x.is_finite() || x == 0.0 || x.abs() >= INTEGRAL_FLOAT {
        return x;
    }
    format!("{x:.places$}").parse().unwrap_or(x)
}

/// Python's `repr(float)` (`hookfleet_core::request::python_json`, which
/// writes Frappe's bodies too).
pub(super) fn py_float_repr(x: f64) -> String {
    hookfleet_core::request::python_json::float_repr(x)
}

/// The rounding methods of Frappe's System Settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Rounding {
    /// "Banker's Rounding": ties to even (the default of sites since v15,
    /// and ours).
    Bankers,
    /// "Banker's Rounding (legacy)": ties to even at precision 0, up at
    /// larger precisions.
    BankersLegacy,
    /// "Commercial Rounding": ties away from zero.
    Commercial,
}

/// A `rounding_method` argument: absent or falsy means the default.
fn rounding_of(b: &Bound, i: usize) -> Result<Rounding, Error> {
    let Some(v) = b.given(i).filter(|v| v.is_true()) else {
        return Ok(Rounding::Bankers);
    };
    match v.as_str() {
        Some("Banker's Rounding") => Ok(Rounding::Bankers),
        Some("Banker's Rounding (legacy)") => Ok(Rounding::BankersLegacy),
        Some("Commercial Rounding") => Ok(Rounding::Commercial),
        _ => Err(b.fail(format!("unknown rounding method {}", describe(v)))),
    }
}

/// The natural logarithm base 2 as Python's `math.log(x, 2)` computes it
/// (`ln x / ln 2`, not `log2`), for Frappe's epsilon.
fn py_log2(x: f64) -> f64 {
    x.ln() / std::f64::consts::LN_2
}

/// Frappe's `rounded(num, precision, method)`: the rounded number, and
/// whether Python would hold it as an int (the legacy method at precision
/// 0); `None` where Frappe raises (`math.floor` of inf or nan).
pub(super) fn round_with(method: Rounding, num: f64, precision: usize) -> Option<(f64, bool)> {
    let multiplier = POW10[precision.min(POW10.len() - 1)];
    match method {
        Rounding::Bankers => {
            let x = py_round(num * multiplier, 12);
            if x == 0.0 {
                return Some((0.0, false));
            }
            if !x.is_finite() {
                return None;
            }
            let floor = x.floor();
            let epsilon = 2f64.powf(py_log2(x.abs()) - 52.0);
            let r = if ((x - floor) - 0.5).abs() < epsilon {
                if floor % 2.0 == 0.0 {
                    floor
                } else {
                    floor + 1.0
                }
            } else {
                x.round_ties_even()
            };
            Some((r / multiplier, false))
        }
        Rounding::BankersLegacy => {
            let x = py_round(if precision > 0 { num * multiplier } else { num }, 8);
            if !x.is_finite() {
                return None;
            }
            let floor = x.floor();
            let tie = x - floor == 0.5;
            let r = if tie && precision == 0 {
                if floor % 2.0 == 0.0 {
                    floor
                } else {
                    floor + 1.0
                }
            } else if tie {
                floor + 1.0
            } else {
                x.round_ties_even()
            };
            Some(if precision > 0 {
                (r / multiplier, false)
            } else {
                (r, true)
            })
        }
        Rounding::Commercial => {
            if num == 0.0 {
                return Some((0.0, false));
            }
            let epsilon = 2f64.powf(py_log2(num.abs()) - 52.0);
            Some((py_round(num + epsilon.copysign(num), precision), false))
        }
    }
}

/// A rounded number as a value: an int where Python would hold one.
fn rounded_value((x, is_int): (f64, bool)) -> Value {
    match float_to_int(x) {
        Some(i) if is_int => int_value(i),
        _ => Value::from(x),
    }
}

/// `flt(s, precision=None, rounding_method=None)`: `float(s)` with commas
/// dropped from strings, 0.0 where Python would raise, rounded when a
/// precision is given.
pub(super) fn flt(b: &Bound) -> Result<Value, Error> {
    let Some(num) = float_of(&b.value(0)) else {
        return Ok(Value::from(0.0));
    };
    let Some(precision) = b.opt(1) else {
        return Ok(Value::from(num));
    };
    // As in Frappe, the method is only read when there is rounding to do.
    let method = rounding_of(b, 2)?;
    Ok(round_with(method, num, precision_of(precision)).map_or(Value::from(0.0), rounded_value))
}

/// `rounded(num, precision=0, rounding_method=None)`: numbers only, as in
/// Python.
pub(super) fn rounded(b: &Bound) -> Result<Value, Error> {
    let method = rounding_of(b, 2)?;
    let v = b.value(0);
    let num = match v.kind() {
        ValueKind::Bool | ValueKind::Number => float_of(&v),
        _ => None,
    }
    .ok_or_else(|| b.fail(format!("expected a number, not {}", v.kind())))?;
    let precision = b.opt(1).map_or(0, precision_of);
    round_with(method, num, precision)
        .map(rounded_value)
        .ok_or_else(|| b.fail(format!("cannot round {}", py_float_repr(num))))
}

/// `cint(s, default=0)`.
pub(super) fn cint(b: &Bound) -> Result<Value, Error> {
    Ok(match cint_of(&b.value(0)) {
        Some(i) => int_value(i),
        None => b.given(1).cloned().unwrap_or(Value::from(0)),
    })
}

/// `floor(s)` / `ceil(s)`: `cint(math.floor(flt(s)))`, 0 where Python raises.
pub(super) fn floor_or_ceil(v: &Value, op: fn(f64) -> f64) -> Value {
    int_value(float_of(v).map(op).and_then(float_to_int).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frappe::testing::{assert_fails, assert_renders, render, render_with};
    use serde_json::json;

    #[test]
    fn flt_filter_and_function() {
        assert_renders(&[
            (r#"{{ "5.5"|flt }}"#, "5.5"),
            ("{{ 5|flt }}", "5.0"),
            (r#"{{ "1,234.5"|flt }}"#, "1234.5"),
            (r#"{{ utils.flt("1,234.5") }}"#, "1234.5"),
            (r#"{{ utils.flt("abc") }}"#, "0.0"),
            ("{{ utils.flt(none) }}", "0.0"),
            ("{{ utils.flt(doc.missing) }}", "0.0"),
            ("{{ utils.flt(true) }}", "1.0"),
            (r#"{{ utils.flt(" 1_000.5 ") }}"#, "1000.5"),
            (r#"{{ utils.flt("1__0") }}"#, "0.0"),
            (r#"{{ "2.675"|flt(2) }}"#, "2.68"),
            (r#"{{ "2.675"|flt(precision=2) }}"#, "2.68"),
            ("{{ utils.flt(0.125, 2) }}", "0.12"),
            ("{{ utils.flt(2.5, 0) }}", "2.0"),
            ("{{ utils.flt(3.5, precision=0) }}", "4.0"),
            (r#"{{ utils.flt("10,500.5666", "2") }}"#, "10500.57"),
            ("{{ utils.flt(5, none) }}", "5.0"),
        ]);
    }

    /// Expected values computed with python3 running Frappe's three
    /// rounding functions.
    #[test]
    fn rounding_methods_match_frappe() {
        let cases: &[(f64, i64, &str, &str, &str)] = &[
            (2.675, 2, "2.68", "2.68", "2.68"),
            (0.125, 2, "0.12", "0.13", "0.13"),
            (0.375, 2, "0.38", "0.38", "0.38"),
            (-0.125, 2, "-0.12", "-0.12", "-0.13"),
            (2.5, 0, "2.0", "2", "3.0"),
            (3.5, 0, "4.0", "4", "4.0"),
            (-2.5, 0, "-2.0", "-2", "-3.0"),
            (1.005, 2, "1.0", "1.01", "1.01"),
            (10500.5666, 2, "10500.57", "10500.57", "10500.57"),
            (123456.785, 2, "123456.78", "123456.79", "123456.79"),
            (0.045, 2, "0.04", "0.05", "0.05"),
            (1.0000000000000002, 15, "1.0", "1.0", "1.0"),
            (1e308, 2, "0.0", "0.0", "1.0000000000000002e+308"),
        ];
        for &(x, p, bankers, legacy, commercial) in cases {
            let ctx = json!({"x": x, "p": p});
            for (method, expected) in [
                ("Banker's Rounding", bankers),
                ("Banker's Rounding (legacy)", legacy),
                ("Commercial Rounding", commercial),
            ] {
                let src =
                    format!(r#"{{{{ utils.cstr(utils.flt(x, p, rounding_method="{method}")) }}}}"#);
                assert_eq!(
                    render_with(&src, ctx.clone()),
                    expected,
                    "flt({x}, {p}) by {method}"
                );
            }
            let src = "{{ utils.cstr(utils.flt(x, p)) }}";
            assert_eq!(render_with(src, ctx), bankers, "flt({x}, {p}) by default");
        }
        assert_renders(&[
            ("{{ utils.rounded(2.5) }}", "2.0"),
            ("{{ utils.rounded(2.675, 2) }}", "2.68"),
            (
                "{{ utils.floor(-1.5) }} {{ utils.ceil(\"1.2\") }} {{ utils.floor(\"x\") }}",
                "-2 2 0",
            ),
        ]);
        assert_fails(
            r#"{{ utils.rounded("2.5") }}"#,
            "rounded(): expected a number",
        );
        assert_fails(
            r#"{{ utils.flt(1, 2, "Up") }}"#,
            "unknown rounding method \"Up\"",
        );
        // Frappe reads the method only when rounding.
        assert_renders(&[(
            r#"{{ utils.flt("x", 2, "Up") }} {{ utils.flt(1, none, "Up") }}"#,
            "0.0 1.0",
        )]);
    }

    #[test]
    fn int_filter_is_cint() {
        assert_renders(&[
            (r#"{{ ""|int }}"#, "0"),
            (r#"{{ "5.9"|int }}"#, "5"),
            (r#"{{ "1,000"|int }}"#, "0"),
            (r#"{{ "1_000"|int }}"#, "1000"),
            (r#"{{ " 12 "|int }}"#, "12"),
            (r#"{{ "-5.9"|int }}"#, "-5"),
            (r#"{{ "1e3"|int }}"#, "1000"),
            (r#"{{ "inf"|int }}"#, "0"),
            (r#"{{ "nan"|int }}"#, "0"),
            (r#"{{ "0x10"|int }}"#, "0"),
            (r#"{{ "True"|int }}"#, "0"),
            ("{{ 5.9|int }}", "5"),
            ("{{ -5.9|int }}", "-5"),
            ("{{ true|int }}", "1"),
            ("{{ none|int }}", "0"),
            (r#"{{ "x"|int(7) }}"#, "7"),
            (r#"{{ utils.cint("") }}"#, "0"),
            (r#"{{ utils.cint("x", default=-1) }}"#, "-1"),
            (
                r#"{{ utils.cint("99999999999999999999") }}"#,
                "99999999999999999999",
            ),
            (r#"{{ utils.cint("1e50") }}"#, "0"),
        ]);
    }

    #[test]
    fn python_float_repr() {
        let cases = [
            (1e16, "1e+16"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e22, "1e+22"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (0.0001, "0.0001"),
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (9999999999999998.0, "9999999999999998.0"),
            (-0.0, "-0.0"),
            (123456789.123, "123456789.123"),
            (-2.5, "-2.5"),
            (f64::INFINITY, "inf"),
            (f64::NAN, "nan"),
        ];
        for (x, expected) in cases {
            assert_eq!(py_float_repr(x), expected, "repr of {x:e}");
        }
    }

    #[test]
    fn hostile_numbers_are_bounded() {
        assert_renders(&[
            ("{{ utils.flt(1e308, 2) }}", "0.0"),
            (r#"{{ utils.cstr(utils.flt("1e400")) }}"#, "inf"),
            (r#"{{ utils.cint("99999999999999999999999999999999999999999999999999") }}"#, "0"),
            ("{{ utils.flt(1.23456789, 100) }}", "1.23456789"),
            ("{{ utils.flt(1.5, -3) }}", "2.0"),
            ("{{ utils.fmt_money(1e300) }}", "1,000,000,000,000,000,052,504,760,255,204,420,248,704,468,581,108,159,154,915,854,115,511,802,457,988,908,195,786,371,375,080,447,864,043,704,443,832,883,878,176,942,523,235,360,430,575,644,792,184,786,706,982,848,387,200,926,575,803,737,830,233,794,788,090,059,368,953,234,970,799,945,081,119,038,967,640,880,074,652,742,780,142,494,579,258,788,820,056,842,838,115,669,472,196,386,865,459,400,540,160.00"),
            ("{{ utils.fmt_money(-1e308, 15)|length > 300 }}", "True"),
        ]);
        // As in Frappe, a string is read by flt with a precision: inf is 0.
        assert_eq!(render(r#"{{ utils.fmt_money("inf") }}"#), "0.00");
        assert_fails(
            r#"{{ utils.fmt_money(utils.flt("-inf")) }}"#,
            "fmt_money(): cannot format -inf",
        );
    }
}
