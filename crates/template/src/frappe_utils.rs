//! Frappe's template helpers, so that webhooks written for Frappe/ERPNext run
//! unchanged: the `utils` global (and `frappe.utils`, the same object) with
//! the functions of `frappe/utils/data.py` that webhook templates use, the
//! filters Frappe's Jinja environment adds (`json`, `len`, `int`, `str`,
//! `flt`) and Python's string and dict methods (`doc.get("k", default)`,
//! `s.startswith("x")`) through minijinja-contrib's `pycompat`.
//!
//! Values are JSON-like (documents arrive as JSON), so dates go in and come
//! out as ISO strings: `getdate` answers `"YYYY-MM-DD"` where Frappe answers a
//! `datetime.date`, which Jinja would print the same way.
//!
//! Every helper is bounded: no helper loops on a count the template or the
//! document chooses, date arithmetic is checked (a result outside Python's
//! years 1–9999 is an error, as it is in Python), numbers are clamped where
//! Frappe would compute without end, strings a helper builds stop at
//! `MAX_RESULT_BYTES` (4 MiB), and nothing panics on any input.
//!
//! # Deliberate differences from Frappe
//!
//! - Rounding (`flt` with a precision, `rounded`, `fmt_money` of a string)
//!   follows Frappe's "Banker's Rounding", the default of sites created since
//!   v15 (ties to even after rounding the scaled value to 12 places, so
//!   `flt(0.125, 2)` is `0.12`). Sites that kept "Banker's Rounding (legacy)"
//!   round a tie at a positive precision up (`0.13`); a template can ask for
//!   either, or "Commercial Rounding", with `rounding_method=`. Precision is
//!   clamped to 0..=15 (`MAX_PRECISION`); Frappe accepts negative
//!   precisions (rounding to tens) and any larger one.
//! - `cint` of a number beyond ±1.7e38 (i128) gives the default (0); Python's
//!   integers have no limit. `flt` and `cint` read ASCII digits only (Python
//!   also reads other Unicode decimal digits).
//! - `cstr` of a list or a map is its JSON text (`[1, "a"]`,
//!   `{"k": true}`), not Python's repr (`[1, 'a']`, `{'k': True}`).
//! - Dates: only ISO forms are read (`YYYY-MM-DD`, then optionally `T` or
//!   spaces, `HH:MM[:SS[.ffffff]]` and `Z` or `±HH[:MM]`); Frappe's dateutil
//!   also reads `Jan 5 2024`, `5/1/2024` and the like. A time with an offset
//!   is converted into the configured zone ([`time_zone`]) and the offset
//!   dropped (Frappe keeps an aware datetime, which then fails when compared
//!   with its naive ones). Without a database there is no system setting:
//!   the zone is [`set_time_zone`]'s (UTC unless set), where Frappe falls back
//!   to Asia/Kolkata.
//! - `add_to_date` and its kin treat an ISO `T` date-time as a date-time
//!   (Frappe looks only for a space, so `2024-01-05T10:00` would come back as
//!   a bare date). Fractional days, hours, minutes or seconds are summed in
//!   an f64 and rounded to the microsecond once (Python's timedelta is exact
//!   to the microsecond at every step; only the last digit can differ).
//! - `fmt_money` has no database: the symbol is the currency code given
//!   (`USD 1,234.50`), always on the left and never hidden, a currency's
//!   fraction units are taken as 100, and the number format is `#,###.##`
//!   unless `format=` names another of Frappe's (the site's `number_format`
//!   and `currency_precision` settings are unknown here). A non-finite
//!   amount is an error (Frappe prints `inf.`), and amounts of 1e16 or more
//!   keep their digits (Frappe groups Python's exponent form, `1e,+16.00`).
//! - The `frappe` global offers only `utils`: `frappe.db`, `frappe.session`,
//!   `frappe._` and the like need a Frappe site.
//! - `json` of an undefined value is `null` (hookfleet's undefined values
//!   are lenient; Frappe's `DebugUndefined` is not serializable) and it
//!   refuses nesting deeper than `MAX_JSON_DEPTH` (128).
//! - `strip_html` runs in linear time by scanning, not Python's regex, with
//!   the same result (`<!--…-->` on one line first, else `<` to the next
//!   `>`).

use std::fmt::{self, Write as _};
use std::sync::{Arc, PoisonError, RwLock};

use chrono::{Datelike, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use minijinja::value::{Kwargs, Object, ObjectRepr, Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

/// The environment variable the renderer process reads the site's time zone
/// from (an IANA name); the parent passes its own [`time_zone`] in it.
pub const TIME_ZONE_ENV: &str = "HOOKFLEET_TIME_ZONE";

/// Every function `utils.*` (and `frappe.utils.*`) offers: the names Frappe
/// gives them, for validation and documentation elsewhere.
pub const NAMES: &[&str] = &[
    "now",
    "nowdate",
    "nowtime",
    "today",
    "getdate",
    "get_datetime",
    "add_days",
    "add_months",
    "add_years",
    "add_to_date",
    "date_diff",
    "time_diff_in_seconds",
    "flt",
    "cint",
    "cstr",
    "fmt_money",
    "escape_html",
    "strip_html",
    "time_diff_in_hours",
    "month_diff",
    "get_first_day",
    "get_last_day",
    "rounded",
    "floor",
    "ceil",
];

/// Most decimal places `flt`, `rounded` and `fmt_money` round to: an f64
/// carries 15–17 significant digits, so more places only show binary noise,
/// and 10^15 is still exact.
const MAX_PRECISION: i64 = 15;

/// Powers of ten up to [`MAX_PRECISION`], exact in an f64.
const POW10: [f64; 16] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// Largest string a helper builds (`json`, `cstr` of a list, `escape_html`):
/// four times the largest body a template may render (1 MiB), so whatever
/// could still fit in a body passes, and a template cannot make one call
/// allocate without bound.
const MAX_RESULT_BYTES: usize = 4 * 1024 * 1024;

/// Deepest nesting `json` and `cstr` write: serde_json itself refuses
/// documents nested deeper than 128, so a real document never reaches it.
const MAX_JSON_DEPTH: usize = 128;

/// Largest indent (in spaces or characters) and longest separator `json`
/// accepts: enough for any layout, and a cap on what one level adds per line.
const MAX_JSON_LAYOUT_CHARS: usize = 16;

/// Characters of an offending value quoted in an error message: enough to
/// recognize it, not enough to flood a log.
const QUOTE_CHARS: usize = 64;

/// Python's `datetime.MINYEAR` and `MAXYEAR`: results outside are errors in
/// Frappe too, and four-digit years keep every date string one shape.
const MIN_YEAR: i32 = 1;
/// See [`MIN_YEAR`].
const MAX_YEAR: i32 = 9999;

/// Largest shift `add_to_date` applies, in microseconds: ten thousand years
/// of 366 days, more than the whole 1–9999 range, so any larger shift is out
/// of range whatever the date.
const MAX_SHIFT_MICROS: i128 = 10_000 * 366 * 86_400 * 1_000_000;

/// Largest shift in months (years × 12 + months), for the same reason.
const MAX_SHIFT_MONTHS: i128 = 10_000 * 12;

/// Largest magnitude `cint` turns into an integer (just under i128's range);
/// beyond it, the default.
const MAX_INT_FLOAT: f64 = 1.7e38;

/// Magnitude from which every f64 is an integer (2^52): rounding it to any
/// number of places leaves it unchanged.
const INTEGRAL_FLOAT: f64 = 4_503_599_627_370_496.0;

/// The time zone `now()` and its kin answer in; UTC until [`set_time_zone`].
static TIME_ZONE: RwLock<Tz> = RwLock::new(Tz::UTC);

/// Reads an IANA time zone name (`UTC`, `Asia/Kolkata`), as the
/// `HOOKFLEET_TIME_ZONE` setting and the renderer do; surrounding whitespace
/// is ignored. The error names the zone and says what is expected.
pub fn parse_time_zone(name: &str) -> Result<Tz, String> {
    name.trim().parse::<Tz>().map_err(|_| {
        format!(
            "unknown time zone {}: use an IANA name such as UTC or Asia/Kolkata",
            quote(name)
        )
    })
}

/// Sets the process-wide time zone of `now()`, `nowdate()`, `today()`,
/// `nowtime()` and of offsets converted by the date helpers: Frappe's
/// system time zone.
pub fn set_time_zone(tz: Tz) {
    let mut zone = TIME_ZONE.write().unwrap_or_else(PoisonError::into_inner);
    *zone = tz;
}

/// The process-wide time zone (UTC unless [`set_time_zone`] was called).
pub fn time_zone() -> Tz {
    *TIME_ZONE.read().unwrap_or_else(PoisonError::into_inner)
}

/// Gives `env` Frappe's template helpers: the `utils` and `frappe` globals
/// (`frappe.utils` is `utils`), the filters Frappe's Jinja environment
/// defines (`json` = `frappe.as_json`, `len`, `int` = `cint`, `str` =
/// `cstr`, `flt`; `int` replaces minijinja's own) and Python's str and dict
/// methods through minijinja-contrib's `pycompat`.
pub fn install(env: &mut Environment<'static>) {
    let utils = Value::from_object(Utils);
    env.add_global("utils", utils.clone());
    env.add_global("frappe", Value::from_object(FrappeNamespace { utils }));
    env.add_filter("json", |value: Value, rest: Rest<Value>| {
        as_json(&bind(&JSON_FILTER, &with_first(value, &rest))?)
    });
    env.add_filter("len", |value: Value, rest: Rest<Value>| {
        py_len(&bind(&LEN_FILTER, &with_first(value, &rest))?)
    });
    env.add_filter("int", |value: Value, rest: Rest<Value>| {
        call("cint", &with_first(value, &rest))
    });
    env.add_filter("str", |value: Value, rest: Rest<Value>| {
        call("cstr", &with_first(value, &rest))
    });
    env.add_filter("flt", |value: Value, rest: Rest<Value>| {
        call("flt", &with_first(value, &rest))
    });
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
}

/// A filter's arguments as a function's: the filtered value first.
fn with_first(value: Value, rest: &[Value]) -> Vec<Value> {
    let mut args = Vec::with_capacity(rest.len() + 1);
    args.push(value);
    args.extend(rest.iter().cloned());
    args
}

// ---------------------------------------------------------------------------
// The `utils` object and its functions
// ---------------------------------------------------------------------------

/// The `utils` global: its methods are Frappe's functions.
#[derive(Debug)]
struct Utils;

impl Object for Utils {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    /// `utils.flt` without a call: the function itself, so that
    /// `utils.flt is defined` holds and `{% set f = utils.flt %}` works.
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let name = key.as_str()?;
        let signature = SIGNATURES.iter().find(|s| s.name == name)?;
        Some(Value::from_object(Function(signature)))
    }

    fn call_method(
        self: &Arc<Self>,
        _state: &State<'_, '_>,
        method: &str,
        args: &[Value],
    ) -> Result<Value, Error> {
        call(method, args)
    }

    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<frappe.utils>")
    }
}

/// The `frappe` global: only its `utils` attribute (the database, session
/// and translation helpers have no meaning outside Frappe).
#[derive(Debug)]
struct FrappeNamespace {
    utils: Value,
}

impl Object for FrappeNamespace {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        (key.as_str()? == "utils").then(|| self.utils.clone())
    }

    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<frappe>")
    }
}

/// One of `utils`' functions as a value (`utils.flt` read, not called).
#[derive(Debug)]
struct Function(&'static Signature);

impl Object for Function {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn call(self: &Arc<Self>, _state: &State<'_, '_>, args: &[Value]) -> Result<Value, Error> {
        (self.0.run)(&bind(self.0, args)?)
    }

    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<function utils.{}>", self.0.name)
    }
}

/// A function's parameters as Python names them (so keyword arguments work
/// as in Frappe), how many are required, and its body.
#[derive(Debug)]
struct Signature {
    name: &'static str,
    params: &'static [&'static str],
    required: usize,
    run: fn(&Bound) -> Result<Value, Error>,
}

/// The arguments of one call, bound to their parameters: `None` where the
/// caller gave nothing (an explicit `none` is `Some(none)`).
struct Bound {
    name: &'static str,
    values: Vec<Option<Value>>,
}

impl Bound {
    /// The argument as given (an explicit `none` included).
    fn given(&self, i: usize) -> Option<&Value> {
        self.values.get(i).and_then(Option::as_ref)
    }

    /// The argument, with `none` and undefined read as absent: Python's
    /// `param=None` defaults.
    fn opt(&self, i: usize) -> Option<&Value> {
        self.given(i).filter(|v| !is_none_like(v))
    }

    /// The argument, undefined when absent (for required parameters, which
    /// [`bind`] guarantees).
    fn value(&self, i: usize) -> Value {
        self.given(i).cloned().unwrap_or(Value::UNDEFINED)
    }

    /// An error about this call.
    fn fail(&self, msg: impl fmt::Display) -> Error {
        fail(self.name, msg)
    }
}

/// Shorthand for the table below.
const fn sig(
    name: &'static str,
    params: &'static [&'static str],
    required: usize,
    run: fn(&Bound) -> Result<Value, Error>,
) -> Signature {
    Signature {
        name,
        params,
        required,
        run,
    }
}

/// The parameters `add_to_date` takes, in Frappe's order.
const ADD_TO_DATE_PARAMS: &[&str] = &[
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
const ADD_TO_DATE_SLOTS: &[(usize, usize)] = &[
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

/// Every function of `utils`, with Frappe's parameter names.
static SIGNATURES: &[Signature] = &[
    sig("now", &[], 0, |_| {
        Ok(Value::from(fmt_datetime_full(now_local())))
    }),
    sig("nowdate", &[], 0, |_| {
        Ok(Value::from(fmt_date(now_local().date())))
    }),
    sig("today", &[], 0, |_| {
        Ok(Value::from(fmt_date(now_local().date())))
    }),
    sig("nowtime", &[], 0, |_| {
        Ok(Value::from(fmt_time_full(now_local())))
    }),
    sig("getdate", &["string_date", "parse_day_first"], 0, getdate),
    sig("get_datetime", &["datetime_str"], 0, get_datetime),
    sig("add_days", &["date", "days"], 2, |b| {
        add_to_date_with(b, &[(4, 1)])
    }),
    sig("add_months", &["date", "months"], 2, |b| {
        add_to_date_with(b, &[(2, 1)])
    }),
    sig("add_years", &["date", "years"], 2, |b| {
        add_to_date_with(b, &[(1, 1)])
    }),
    sig("add_to_date", ADD_TO_DATE_PARAMS, 1, |b| {
        add_to_date_with(b, ADD_TO_DATE_SLOTS)
    }),
    sig(
        "date_diff",
        &["string_ed_date", "string_st_date"],
        2,
        date_diff,
    ),
    sig(
        "month_diff",
        &["string_ed_date", "string_st_date"],
        2,
        month_diff,
    ),
    sig(
        "time_diff_in_seconds",
        &["string_ed_date", "string_st_date"],
        2,
        |b| Ok(Value::from(time_diff_seconds(b)?)),
    ),
    sig(
        "time_diff_in_hours",
        &["string_ed_date", "string_st_date"],
        2,
        |b| Ok(Value::from(py_round(time_diff_seconds(b)? / 3600.0, 6))),
    ),
    sig(
        "get_first_day",
        &["dt", "d_years", "d_months", "as_str"],
        1,
        get_first_day,
    ),
    sig("get_last_day", &["dt"], 1, get_last_day),
    sig("flt", &["s", "precision", "rounding_method"], 1, flt),
    sig("cint", &["s", "default"], 1, cint),
    sig("cstr", &["s", "encoding"], 1, cstr),
    sig(
        "rounded",
        &["num", "precision", "rounding_method"],
        1,
        rounded,
    ),
    sig("floor", &["s"], 1, |b| {
        Ok(floor_or_ceil(&b.value(0), f64::floor))
    }),
    sig("ceil", &["s"], 1, |b| {
        Ok(floor_or_ceil(&b.value(0), f64::ceil))
    }),
    sig(
        "fmt_money",
        &["amount", "precision", "currency", "format"],
        1,
        fmt_money,
    ),
    sig("escape_html", &["text"], 1, escape_html),
    sig("strip_html", &["text"], 1, |b| match b.value(0).as_str() {
        Some(text) => Ok(Value::from(strip_html(text))),
        None => Err(b.fail(format!("expected a string, not {}", b.value(0).kind()))),
    }),
];

/// The `json` filter: `frappe.as_json(obj, indent=1, separators=None,
/// ensure_ascii=True)`.
static JSON_FILTER: Signature = sig(
    "json",
    &["obj", "indent", "separators", "ensure_ascii"],
    1,
    as_json,
);

/// The `len` filter: Python's `len(obj)`.
static LEN_FILTER: Signature = sig("len", &["obj"], 1, py_len);

/// Calls `utils.<name>(args…)`: an unknown name is an error naming it.
fn call(name: &str, args: &[Value]) -> Result<Value, Error> {
    match SIGNATURES.iter().find(|s| s.name == name) {
        Some(signature) => (signature.run)(&bind(signature, args)?),
        None => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("utils has no function named {}", shorten(name)),
        )),
    }
}

/// Binds positional and keyword arguments to `signature`'s parameters the
/// way Python does: too many positional arguments, an unknown keyword, a
/// parameter given twice or a required one missing is an error.
fn bind(signature: &'static Signature, args: &[Value]) -> Result<Bound, Error> {
    let name = signature.name;
    let (positional, kwargs) = match args.split_last() {
        Some((last, rest)) if last.is_kwargs() => (rest, Some(Kwargs::try_from(last.clone())?)),
        _ => (args, None),
    };
    let params = signature.params;
    if positional.len() > params.len() {
        return Err(fail(
            name,
            format!(
                "takes at most {} argument{} ({} given)",
                params.len(),
                if params.len() == 1 { "" } else { "s" },
                positional.len()
            ),
        ));
    }
    let mut values: Vec<Option<Value>> = vec![None; params.len()];
    for (slot, value) in values.iter_mut().zip(positional) {
        *slot = Some(value.clone());
    }
    if let Some(kwargs) = kwargs {
        for key in kwargs.args() {
            let Some(i) = params.iter().position(|p| *p == key) else {
                return Err(fail(
                    name,
                    format!("got an unexpected keyword argument {}", quote(key)),
                ));
            };
            if values[i].is_some() {
                return Err(fail(
                    name,
                    format!("got multiple values for argument {}", quote(key)),
                ));
            }
            values[i] = Some(kwargs.get::<Value>(key)?);
        }
    }
    if let Some(missing) = values
        .iter()
        .take(signature.required)
        .position(Option::is_none)
    {
        return Err(fail(
            name,
            format!("missing required argument {}", quote(params[missing])),
        ));
    }
    Ok(Bound { name, values })
}

/// An `InvalidOperation` error whose message starts with the function's name.
fn fail(name: &str, msg: impl fmt::Display) -> Error {
    Error::new(ErrorKind::InvalidOperation, format!("{name}(): {msg}"))
}

/// A string for an error message: quoted and escaped, cut at [`QUOTE_CHARS`].
fn quote(s: &str) -> String {
    let mut chars = s.chars();
    let head: String = chars.by_ref().take(QUOTE_CHARS).collect();
    if chars.next().is_some() {
        format!("{head:?}…")
    } else {
        format!("{head:?}")
    }
}

/// A name for an error message, cut at [`QUOTE_CHARS`] but not quoted.
fn shorten(s: &str) -> String {
    let mut chars = s.chars();
    let head: String = chars.by_ref().take(QUOTE_CHARS).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

/// A value for an error message: strings quoted, others by kind or text.
fn describe(v: &Value) -> String {
    match v.kind() {
        ValueKind::String => quote(v.as_str().unwrap_or_default()),
        ValueKind::Number | ValueKind::Bool => v.to_string(),
        kind => kind.to_string(),
    }
}

/// `none` or undefined: what Python sees as `None`.
fn is_none_like(v: &Value) -> bool {
    v.is_none() || v.is_undefined()
}

// ---------------------------------------------------------------------------
// Numbers
// ---------------------------------------------------------------------------

/// A minijinja number as Python would hold it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    Int(i128),
    Float(f64),
}

/// The number in `v`, if it is one (bools are not: callers decide).
fn number_of(v: &Value) -> Option<Num> {
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
fn is_py_space(c: char) -> bool {
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
fn float_of(v: &Value) -> Option<f64> {
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
fn cint_of(v: &Value) -> Option<i128> {
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
fn precision_of(v: &Value) -> usize {
    // The clamp makes the cast exact.
    cint_of(v).unwrap_or(0).clamp(0, i128::from(MAX_PRECISION)) as usize
}

/// Python's `round(x, places)`: the nearest value with that many decimals,
/// ties to even on the exact binary value (as Rust's formatting rounds).
fn py_round(x: f64, places: usize) -> f64 {
    if !x.is_finite() || x == 0.0 || x.abs() >= INTEGRAL_FLOAT {
        return x;
    }
    format!("{x:.places$}").parse().unwrap_or(x)
}

/// Python's `repr(float)`: the shortest text that reads back as `x`, in
/// positional form for exponents −5..16 and scientific form (`1e+16`,
/// `1.5e-07`) outside.
fn py_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // `{:e}` is the shortest round-trip form: `-1.2345e-5`.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i64 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::with_capacity(digits.len() + 8);
    if x < 0.0 {
        out.push('-');
    }
    let point = exponent + 1; // digits before the decimal point
    if -4 < point && point <= 16 {
        if point <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', point.unsigned_abs() as usize));
            out.push_str(&digits);
        } else {
            let point = point as usize;
            if point >= digits.len() {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', point - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..point]);
                out.push('.');
                out.push_str(&digits[point..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let sign = if exponent < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exponent.unsigned_abs());
    }
    out
}

/// The rounding methods of Frappe's System Settings.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rounding {
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
fn round_with(method: Rounding, num: f64, precision: usize) -> Option<(f64, bool)> {
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
fn flt(b: &Bound) -> Result<Value, Error> {
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
fn rounded(b: &Bound) -> Result<Value, Error> {
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
fn cint(b: &Bound) -> Result<Value, Error> {
    Ok(match cint_of(&b.value(0)) {
        Some(i) => int_value(i),
        None => b.given(1).cloned().unwrap_or(Value::from(0)),
    })
}

/// `floor(s)` / `ceil(s)`: `cint(math.floor(flt(s)))`, 0 where Python raises.
fn floor_or_ceil(v: &Value, op: fn(f64) -> f64) -> Value {
    int_value(float_of(v).map(op).and_then(float_to_int).unwrap_or(0))
}

/// `cstr(s)`: Python's `str()` (None is ""); lists and maps as JSON text.
fn cstr(b: &Bound) -> Result<Value, Error> {
    let v = b.value(0);
    Ok(match v.kind() {
        ValueKind::Undefined | ValueKind::None => Value::from(""),
        // Python returns the string itself: a safe string stays safe.
        ValueKind::String => v,
        _ => Value::from(py_str(b, &v)?),
    })
}

/// Python's `str(v)` for a non-string: `True`, `5`, `5.0`, JSON text for
/// containers.
fn py_str(b: &Bound, v: &Value) -> Result<String, Error> {
    Ok(match v.kind() {
        ValueKind::Undefined | ValueKind::None => String::new(),
        ValueKind::Bool => if v.is_true() { "True" } else { "False" }.into(),
        ValueKind::Number => match number_of(v) {
            Some(Num::Int(i)) => i.to_string(),
            Some(Num::Float(f)) => py_float_repr(f),
            None => v.to_string(),
        },
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => {
            let style = JsonStyle {
                indent: None,
                item_separator: ", ",
                key_separator: ": ",
                ensure_ascii: false,
                sort_keys: false,
            };
            json_text(v, &style).map_err(|e| b.fail(e))?
        }
        _ => v.to_string(),
    })
}

/// Python's `len(obj)`: characters of a string, items of a list or map; 0
/// for undefined (Jinja's `Undefined` has length 0).
fn py_len(b: &Bound) -> Result<Value, Error> {
    let v = b.value(0);
    let len = match v.kind() {
        ValueKind::Undefined => Some(0),
        ValueKind::String => v.as_str().map(|s| s.chars().count()),
        ValueKind::Bytes => v.as_bytes().map(<[u8]>::len),
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => v.len(),
        _ => None,
    };
    len.map(Value::from)
        .ok_or_else(|| b.fail(format!("object of type {} has no len()", v.kind())))
}

// ---------------------------------------------------------------------------
// fmt_money
// ---------------------------------------------------------------------------

/// Frappe's number formats: (decimal mark, group separator, precision).
fn number_format_info(format: &str) -> (&'static str, &'static str, usize) {
    match format {
        "#.###,##" => (",", ".", 2),
        "# ###.##" => (".", " ", 2),
        "# ###,##" => (",", " ", 2),
        "#'###.##" => (".", "'", 2),
        "#, ###.##" => (".", ", ", 2),
        "#,###.###" => (".", ",", 3),
        "#.###" => ("", ".", 0),
        "#,###" => ("", ",", 0),
        "#.########" => (".", "", 8),
        // "#,###.##", "#,##,###.##" and anything unknown.
        _ => (".", ",", 2),
    }
}

/// Python's `x % 1.0` (the result takes the divisor's sign).
fn py_mod1(x: f64) -> f64 {
    let m = x % 1.0;
    if m != 0.0 && m < 0.0 {
        m + 1.0
    } else {
        m
    }
}

/// `fmt_money(amount, precision=None, currency=None, format=None)`: the
/// amount with group separators (`1,234.50`), the currency code in front
/// when given.
fn fmt_money(b: &Bound) -> Result<Value, Error> {
    let number_format = match b.given(3).filter(|v| v.is_true()) {
        Some(v) => py_str_any(b, v)?,
        None => "#,###.##".to_string(),
    };
    let (decimal_mark, group_separator, format_precision) = number_format_info(&number_format);
    let mut precision = b.opt(1).map_or(format_precision, precision_of);
    let currency = match b.given(2).filter(|v| v.is_true()) {
        Some(v) => Some(py_str_any(b, v)?),
        None => None,
    };

    let v = b.value(0);
    let amount = match v.kind() {
        ValueKind::Undefined | ValueKind::None => 0.0,
        ValueKind::String => float_of(&v)
            .and_then(|x| round_with(Rounding::Bankers, x, precision))
            .map_or(0.0, |(x, _)| x),
        ValueKind::Bool | ValueKind::Number => float_of(&v).unwrap_or(0.0),
        kind => return Err(b.fail(format!("expected a number, not {kind}"))),
    };
    if !amount.is_finite() {
        return Err(b.fail(format!("cannot format {}", py_float_repr(amount))));
    }

    // Above two places Frappe drops trailing zeros, down to two.
    if !decimal_mark.is_empty() && precision > 2 {
        let fraction = py_float_repr(py_round(py_mod1(amount), precision));
        let decimals = fraction
            .split_once('.')
            .map_or(fraction.as_str(), |(_, d)| d);
        let count = decimals.chars().count();
        if count < 3 {
            // Frappe reads the currency's fraction units from its database;
            // without one, 100 (two places).
            precision = if currency.is_some() {
                2
            } else {
                format_precision
            };
        } else if count < precision {
            precision = count;
        }
    }

    let fixed = format!("{:.*}", precision, py_round(amount, precision));
    let negative = fixed.parse::<f64>().is_ok_and(|x| x < 0.0);
    let unsigned = fixed.trim_start_matches('-');
    let (integer, decimals) = unsigned.split_once('.').unwrap_or((unsigned, ""));

    let group = if number_format == "#,##,###.##" { 2 } else { 3 };
    let mut groups: Vec<&str> = Vec::new();
    let mut rest = integer;
    if rest.len() > 3 {
        groups.push(&rest[rest.len() - 3..]);
        rest = &rest[..rest.len() - 3];
        while rest.len() > group {
            groups.push(&rest[rest.len() - group..]);
            rest = &rest[..rest.len() - group];
        }
    }
    groups.push(rest);
    groups.reverse();

    let mut text = groups.join(group_separator);
    if precision > 0 && !decimal_mark.is_empty() {
        text.push_str(decimal_mark);
        text.push_str(decimals);
    }
    if negative && text != "0" {
        text.insert(0, '-');
    }
    if let Some(currency) = currency {
        text = format!("{currency} {text}");
    }
    Ok(Value::from(text))
}

/// Python's `str(v)` for any value (strings as they are).
fn py_str_any(b: &Bound, v: &Value) -> Result<String, Error> {
    match v.as_str() {
        Some(s) => Ok(s.to_string()),
        None => py_str(b, v),
    }
}

// ---------------------------------------------------------------------------
// HTML
// ---------------------------------------------------------------------------

/// `escape_html(text)`: `& " ' > <` as entities; anything but a string is
/// returned as it is (as Frappe does).
fn escape_html(b: &Bound) -> Result<Value, Error> {
    let v = b.value(0);
    let Some(text) = v.as_str() else {
        return Ok(v);
    };
    let extra: usize = text
        .bytes()
        .map(|c| match c {
            b'&' | b'<' | b'>' => 3,
            b'"' | b'\'' => 5,
            _ => 0,
        })
        .sum();
    if text.len().saturating_add(extra) > MAX_RESULT_BYTES {
        return Err(b.fail(format!("the result would exceed {MAX_RESULT_BYTES} bytes")));
    }
    let mut out = String::with_capacity(text.len() + extra);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '>' => out.push_str("&gt;"),
            '<' => out.push_str("&lt;"),
            c => out.push(c),
        }
    }
    Ok(Value::from(out))
}

/// Finds a pattern in a text at or after positions that only grow, scanning
/// each byte at most once: the memory of the last answer makes a run of
/// failed searches linear instead of quadratic.
struct ForwardFinder {
    /// The last answer: where the pattern was found, or `None` when it does
    /// not occur at or after `searched_from`.
    found: Option<usize>,
    searched_from: usize,
    fresh: bool,
}

impl ForwardFinder {
    fn new() -> Self {
        ForwardFinder {
            found: None,
            searched_from: 0,
            fresh: true,
        }
    }

    /// The first occurrence of `pattern` in `text` at or after `from`;
    /// `from` must not decrease between calls.
    fn find(&mut self, text: &[u8], pattern: &[u8], from: usize) -> Option<usize> {
        if !self.fresh {
            match self.found {
                Some(at) if at >= from => return Some(at),
                None if self.searched_from <= from => return None,
                _ => {}
            }
        }
        self.fresh = false;
        self.searched_from = from;
        self.found = text
            .get(from..)
            .and_then(|rest| rest.windows(pattern.len()).position(|w| w == pattern))
            .map(|at| at + from);
        self.found
    }
}

/// `strip_html(text)`: Python's `re.sub(r"(<!--.*?-->|<[^>]*>)", "", text)`
/// in one linear scan: at each `<`, a comment closed on the same line, else
/// everything up to the next `>`; a `<` with no `>` after it stays.
fn strip_html(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut gt, mut close, mut newline) = (
        ForwardFinder::new(),
        ForwardFinder::new(),
        ForwardFinder::new(),
    );
    let mut copied = 0;
    let mut at = 0;
    while let Some(offset) = bytes
        .get(at..)
        .and_then(|rest| rest.iter().position(|&c| c == b'<'))
    {
        let lt = at + offset;
        let mut end = None;
        if bytes[lt..].starts_with(b"<!--") {
            let body = lt + 4;
            if let Some(c) = close.find(bytes, b"-->", body) {
                // `.` does not match a newline.
                if newline.find(bytes, b"\n", body).is_none_or(|n| n > c) {
                    end = Some(c + 3);
                }
            }
        }
        let end = match end {
            Some(end) => end,
            None => match gt.find(bytes, b">", lt + 1) {
                Some(g) => g + 1,
                // No `>` anywhere after: nothing further can match.
                None => break,
            },
        };
        out.push_str(&text[copied..lt]);
        copied = end;
        at = end;
    }
    out.push_str(&text[copied..]);
    out
}

// ---------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------

/// How [`write_json`] lays JSON out (Python's `json.dumps` options).
struct JsonStyle<'a> {
    /// Python's `indent`: `None` for one line, else the text of one level.
    indent: Option<&'a str>,
    item_separator: &'a str,
    key_separator: &'a str,
    ensure_ascii: bool,
    sort_keys: bool,
}

/// Why [`write_json`] stopped.
enum JsonStop {
    /// A map's keys cannot be sorted (mixed kinds): Python's `TypeError`,
    /// on which `frappe.as_json` writes the whole value again unsorted.
    Unsortable,
    Failed(String),
}

/// The JSON text of `v` as Python's `json.dumps` writes it with `style`.
fn json_text(v: &Value, style: &JsonStyle) -> Result<String, String> {
    let mut out = String::new();
    match write_json(&mut out, v, style, 0) {
        Ok(()) => Ok(out),
        Err(JsonStop::Failed(e)) => Err(e),
        Err(JsonStop::Unsortable) => {
            out.clear();
            let unsorted = JsonStyle {
                sort_keys: false,
                ..*style
            };
            match write_json(&mut out, v, &unsorted, 0) {
                Ok(()) => Ok(out),
                Err(JsonStop::Failed(e)) => Err(e),
                Err(JsonStop::Unsortable) => Err("map keys cannot be sorted".into()),
            }
        }
    }
}

/// The error past [`MAX_RESULT_BYTES`].
fn too_long() -> JsonStop {
    JsonStop::Failed(format!("the result would exceed {MAX_RESULT_BYTES} bytes"))
}

/// A newline and `level` indents, when indenting.
fn push_newline(out: &mut String, style: &JsonStyle, level: usize) {
    if let Some(indent) = style.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(indent);
        }
    }
}

/// Python's JSON text of a float: `NaN`, `Infinity`, else `repr`.
fn push_json_float(out: &mut String, f: f64) {
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
    } else {
        out.push_str(&py_float_repr(f));
    }
}

/// A JSON string as Python writes it: `\"`, `\\`, `\n`, `\r`, `\t`, `\b`,
/// `\f`, other controls as `\u00XX` (lower-case hex), and with
/// `ensure_ascii` everything outside space..`~` as `\uXXXX` (surrogate
/// pairs above U+FFFF).
fn push_json_string(out: &mut String, s: &str, ensure_ascii: bool) -> Result<(), JsonStop> {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 || (ensure_ascii && u32::from(c) > 0x7e) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
        if out.len() > MAX_RESULT_BYTES {
            return Err(too_long());
        }
    }
    out.push('"');
    Ok(())
}

/// A map key as Python's json writes it: strings as they are, numbers,
/// `true`/`false`, `null`; other kinds are refused.
fn json_key_text(key: &Value) -> Result<String, JsonStop> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_string(),
        ValueKind::Bool => if key.is_true() { "true" } else { "false" }.into(),
        ValueKind::None | ValueKind::Undefined => "null".into(),
        ValueKind::Number => {
            let mut text = String::new();
            match number_of(key) {
                Some(Num::Int(i)) => text = i.to_string(),
                Some(Num::Float(f)) => push_json_float(&mut text, f),
                None => text = key.to_string(),
            }
            text
        }
        kind => {
            return Err(JsonStop::Failed(format!(
                "keys must be str, int, float, bool or None, not {kind}"
            )));
        }
    })
}

/// Sorts a map's entries as Python's `sorted(d.items())` would, or says it
/// cannot (keys of different kinds).
fn sort_entries(entries: &mut [(Value, String)]) -> Result<(), JsonStop> {
    if entries.len() < 2 {
        return Ok(());
    }
    let all = |kinds: &[ValueKind]| entries.iter().all(|(k, _)| kinds.contains(&k.kind()));
    if all(&[ValueKind::String]) {
        // Byte order of UTF-8 is code point order, as Python compares.
        entries.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(())
    } else if all(&[ValueKind::Number, ValueKind::Bool]) {
        let key = |v: &Value| float_of(v).unwrap_or(f64::NAN);
        entries.sort_by(|a, b| key(&a.0).total_cmp(&key(&b.0)));
        Ok(())
    } else {
        Err(JsonStop::Unsortable)
    }
}

/// Writes `v` as JSON: none and undefined as `null`, strings, numbers,
/// bools, lists (and other iterables) and maps; anything else is refused.
fn write_json(
    out: &mut String,
    v: &Value,
    style: &JsonStyle,
    level: usize,
) -> Result<(), JsonStop> {
    if out.len() > MAX_RESULT_BYTES {
        return Err(too_long());
    }
    if level > MAX_JSON_DEPTH {
        return Err(JsonStop::Failed(format!(
            "nested deeper than {MAX_JSON_DEPTH} levels"
        )));
    }
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => match number_of(v) {
            Some(Num::Int(i)) => {
                let _ = write!(out, "{i}");
            }
            Some(Num::Float(f)) => push_json_float(out, f),
            None => out.push_str(&v.to_string()),
        },
        ValueKind::String => {
            push_json_string(out, v.as_str().unwrap_or_default(), style.ensure_ascii)?
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items = v.try_iter().map_err(|e| JsonStop::Failed(e.to_string()))?;
            let mut empty = true;
            for item in items {
                if empty {
                    out.push('[');
                    empty = false;
                } else {
                    out.push_str(style.item_separator);
                }
                push_newline(out, style, level + 1);
                write_json(out, &item, style, level + 1)?;
            }
            if empty {
                out.push_str("[]");
            } else {
                push_newline(out, style, level);
                out.push(']');
            }
        }
        ValueKind::Map => {
            let keys = v.try_iter().map_err(|e| JsonStop::Failed(e.to_string()))?;
            let mut entries = Vec::new();
            for key in keys {
                // Each entry writes at least `""` and a digit: a map that
                // could not fit is refused before its keys fill memory.
                if (entries.len() + 1) * 3 > MAX_RESULT_BYTES {
                    return Err(too_long());
                }
                let text = json_key_text(&key)?;
                entries.push((key, text));
            }
            if style.sort_keys {
                sort_entries(&mut entries)?;
            }
            if entries.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (key, text)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(style.item_separator);
                }
                push_newline(out, style, level + 1);
                push_json_string(out, text, style.ensure_ascii)?;
                out.push_str(style.key_separator);
                let item = v
                    .get_item(key)
                    .map_err(|e| JsonStop::Failed(e.to_string()))?;
                write_json(out, &item, style, level + 1)?;
            }
            push_newline(out, style, level);
            out.push('}');
        }
        kind => {
            return Err(JsonStop::Failed(format!(
                "values of kind {kind} are not JSON serializable"
            )));
        }
    }
    Ok(())
}

/// The `json` filter: `frappe.as_json(obj, indent=1, separators=None,
/// ensure_ascii=True)`, i.e. `json.dumps` with sorted keys, as a safe
/// string.
fn as_json(b: &Bound) -> Result<Value, Error> {
    // Python's indent: an int (negative is 0), a string, or None.
    let indent_text;
    let indent = match b.given(1) {
        None => Some(" "),
        Some(v) if is_none_like(v) => None,
        Some(v) => {
            let text = match v.as_str() {
                Some(s) => s.to_string(),
                None => {
                    let n = match v.kind() {
                        ValueKind::Bool | ValueKind::Number => cint_of(v),
                        _ => None,
                    }
                    .ok_or_else(|| {
                        b.fail(format!(
                            "indent must be a number or a string, not {}",
                            v.kind()
                        ))
                    })?;
                    let n = usize::try_from(n.max(0)).unwrap_or(usize::MAX);
                    if n > MAX_JSON_LAYOUT_CHARS {
                        return Err(b.fail(format!("indent over {MAX_JSON_LAYOUT_CHARS}")));
                    }
                    " ".repeat(n)
                }
            };
            if text.chars().count() > MAX_JSON_LAYOUT_CHARS {
                return Err(b.fail(format!("indent over {MAX_JSON_LAYOUT_CHARS} characters")));
            }
            indent_text = text;
            Some(indent_text.as_str())
        }
    };
    let (item_separator, key_separator) = match b.opt(2) {
        None => (",".to_string(), ": ".to_string()),
        Some(v) => {
            let pair: Vec<Value> = match v.kind() {
                ValueKind::Seq => v.try_iter().map(Iterator::collect).unwrap_or_default(),
                _ => Vec::new(),
            };
            match pair.as_slice() {
                [item, key]
                    if item
                        .as_str()
                        .is_some_and(|s| s.chars().count() <= MAX_JSON_LAYOUT_CHARS)
                        && key
                            .as_str()
                            .is_some_and(|s| s.chars().count() <= MAX_JSON_LAYOUT_CHARS) =>
                {
                    (
                        item.as_str().unwrap_or_default().to_string(),
                        key.as_str().unwrap_or_default().to_string(),
                    )
                }
                _ => {
                    return Err(b.fail(format!(
                        "separators must be two strings of at most {MAX_JSON_LAYOUT_CHARS} characters"
                    )));
                }
            }
        }
    };
    let style = JsonStyle {
        indent,
        item_separator: &item_separator,
        key_separator: &key_separator,
        ensure_ascii: b.given(3).is_none_or(Value::is_true),
        sort_keys: true,
    };
    json_text(&b.value(0), &style)
        .map(Value::from_safe_string)
        .map_err(|e| b.fail(e))
}

// ---------------------------------------------------------------------------
// Dates
// ---------------------------------------------------------------------------

/// Now, in the configured zone, to the microsecond (Frappe's
/// `now_datetime()`).
fn now_local() -> NaiveDateTime {
    let now = Utc::now().with_timezone(&time_zone()).naive_local();
    now.with_nanosecond(micros(&now) * 1000).unwrap_or(now)
}

/// The microseconds of a time (a leap second's extra second ignored).
fn micros(t: &impl Timelike) -> u32 {
    (t.nanosecond() % 1_000_000_000) / 1000
}

/// `YYYY-MM-DD`.
fn fmt_date(d: NaiveDate) -> String {
    format!("{:04}-{:02}-{:02}", d.year(), d.month(), d.day())
}

/// `HH:MM:SS.ffffff` (Frappe's `TIME_FORMAT`).
fn fmt_time_full(dt: NaiveDateTime) -> String {
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        dt.hour(),
        dt.minute(),
        dt.second(),
        micros(&dt)
    )
}

/// `YYYY-MM-DD HH:MM:SS.ffffff` (Frappe's `DATETIME_FORMAT`).
fn fmt_datetime_full(dt: NaiveDateTime) -> String {
    format!("{} {}", fmt_date(dt.date()), fmt_time_full(dt))
}

/// Python's `str(datetime)`: `YYYY-MM-DD HH:MM:SS`, with `.ffffff` only when
/// there are microseconds.
fn fmt_datetime_str(dt: NaiveDateTime) -> String {
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
fn in_year_range(dt: &NaiveDateTime) -> bool {
    (MIN_YEAR..=MAX_YEAR).contains(&dt.year())
}

/// A date or date-time read from a string.
#[derive(Debug, Clone, Copy)]
struct DateText {
    /// The moment, midnight for a bare date, in the configured zone when the
    /// text had an offset.
    at: NaiveDateTime,
    /// Whether the text had a time part.
    has_time: bool,
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
fn parse_date_text(text: &str) -> Option<DateText> {
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
fn required_date(b: &Bound, i: usize) -> Result<NaiveDate, Error> {
    let v = b.value(i);
    date_of(b, &v)?.ok_or_else(|| b.fail(format!("{} is not a date", describe(&v))))
}

/// A date-time both arguments of a difference need.
fn required_datetime(b: &Bound, i: usize) -> Result<NaiveDateTime, Error> {
    let v = b.value(i);
    datetime_of(b, &v)?.ok_or_else(|| b.fail(format!("{} is not a date-time", describe(&v))))
}

/// `getdate(string_date=None)`: `YYYY-MM-DD`, or none.
fn getdate(b: &Bound) -> Result<Value, Error> {
    Ok(date_of(b, &b.value(0))?.map_or(Value::from(()), |d| Value::from(fmt_date(d))))
}

/// `get_datetime(datetime_str=None)`: `YYYY-MM-DD HH:MM:SS[.ffffff]`, or
/// none.
fn get_datetime(b: &Bound) -> Result<Value, Error> {
    Ok(datetime_of(b, &b.value(0))?.map_or(Value::from(()), |d| Value::from(fmt_datetime_str(d))))
}

/// `date_diff(a, b)`: whole days from `b` to `a`.
fn date_diff(b: &Bound) -> Result<Value, Error> {
    let (end, start) = (required_date(b, 0)?, required_date(b, 1)?);
    Ok(Value::from(end.signed_duration_since(start).num_days()))
}

/// `month_diff(a, b)`: months from `b` to `a`, counting both ends.
fn month_diff(b: &Bound) -> Result<Value, Error> {
    let (end, start) = (required_date(b, 0)?, required_date(b, 1)?);
    let months = (i64::from(end.year()) - i64::from(start.year())) * 12 + i64::from(end.month())
        - i64::from(start.month())
        + 1;
    Ok(Value::from(months))
}

/// Seconds from `b` to `a`, as Python's `timedelta.total_seconds()`.
fn time_diff_seconds(b: &Bound) -> Result<f64, Error> {
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
fn get_first_day(b: &Bound) -> Result<Value, Error> {
    let date = required_date(b, 0)?;
    let (years, months) = (int_arg(b, 1, "d_years")?, int_arg(b, 2, "d_months")?);
    first_of_month(b, date, years, months).map(|d| Value::from(fmt_date(d)))
}

/// `get_last_day(dt)`: the last day of the month.
fn get_last_day(b: &Bound) -> Result<Value, Error> {
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
fn add_to_date_with(b: &Bound, slots: &[(usize, usize)]) -> Result<Value, Error> {
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
    use super::*;
    use minijinja::UndefinedBehavior;
    use serde_json::json;
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    /// Serializes the tests that set or depend on the process-wide zone.
    static ZONE_LOCK: Mutex<()> = Mutex::new(());

    fn zone_guard() -> std::sync::MutexGuard<'static, ()> {
        ZONE_LOCK.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An environment like hookfleet's: lenient undefined, helpers installed.
    fn env() -> Environment<'static> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        install(&mut env);
        env
    }

    fn doc() -> serde_json::Value {
        json!({
            "doc": {
                "name": "SO-0001",
                "items": [
                    {"qty": 2, "rate": 10.5, "item": "Caf\u{e9} \u{20ac} \u{1F600}"},
                    {"qty": 1, "rate": 1e16, "item": "a\"b\\c\nd\u{1}\u{7f}"}
                ],
                "empty": [], "obj": {}, "flag": true, "none": null,
                "big": 12345678901234567890u64, "small": 1e-7, "neg": -0.0
            }
        })
    }

    fn render_with(src: &str, ctx: serde_json::Value) -> String {
        env()
            .render_str(src, ctx)
            .unwrap_or_else(|e| panic!("{src}: {e:#}"))
    }

    fn render(src: &str) -> String {
        render_with(src, doc())
    }

    fn render_err(src: &str) -> Error {
        match env().render_str(src, doc()) {
            Ok(out) => panic!("{src}: rendered {out:?}, expected an error"),
            Err(e) => e,
        }
    }

    fn assert_renders(cases: &[(&str, &str)]) {
        for (src, expected) in cases {
            assert_eq!(render(src), *expected, "template {src}");
        }
    }

    fn assert_fails(src: &str, needle: &str) {
        let e = render_err(src);
        assert_eq!(e.kind(), ErrorKind::InvalidOperation, "{src}: {e:#}");
        assert!(
            e.to_string().contains(needle),
            "{src}: {e} lacks {needle:?}"
        );
    }

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
    fn str_filter_is_cstr() {
        let ctx = json!({"big": 1e16, "small": 1e-7, "list": [1, "a", true, null, 2.0], "map": {"k": "\u{e9}"}});
        let cases = [
            ("{{ none|str }}", ""),
            ("{{ missing|str }}", ""),
            ("{{ true|str }}", "True"),
            ("{{ 5|str }}", "5"),
            ("{{ 5.0|str }}", "5.0"),
            ("{{ big|str }}", "1e+16"),
            ("{{ small|str }}", "1e-07"),
            ("{{ list|str }}", r#"[1, "a", true, null, 2.0]"#),
            ("{{ utils.cstr(map) }}", "{\"k\": \"\u{e9}\"}"),
            (r#"{{ utils.cstr("as is") }}"#, "as is"),
        ];
        for (src, expected) in cases {
            assert_eq!(render_with(src, ctx.clone()), expected, "{src}");
        }
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
    fn len_filter() {
        assert_renders(&[
            ("{{ doc.items|len }}", "2"),
            (r#"{{ "héllo"|len }}"#, "5"),
            ("{{ doc|len }}", "9"),
            ("{{ doc.missing|len }}", "0"),
        ]);
        assert_fails("{{ 5|len }}", "len(): object of type number has no len()");
    }

    /// Expected texts produced by python3's
    /// `json.dumps(v, indent=1, sort_keys=True, separators=(",", ": "))`.
    #[test]
    fn json_filter_matches_frappe_as_json() {
        assert_renders(&[
            (
                "{{ doc.items|json }}",
                "[\n {\n  \"item\": \"Caf\\u00e9 \\u20ac \\ud83d\\ude00\",\n  \"qty\": 2,\n  \"rate\": 10.5\n },\n {\n  \"item\": \"a\\\"b\\\\c\\nd\\u0001\\u007f\",\n  \"qty\": 1,\n  \"rate\": 1e+16\n }\n]",
            ),
            (
                "{{ doc|json }}",
                "{\n \"big\": 12345678901234567890,\n \"empty\": [],\n \"flag\": true,\n \"items\": [\n  {\n   \"item\": \"Caf\\u00e9 \\u20ac \\ud83d\\ude00\",\n   \"qty\": 2,\n   \"rate\": 10.5\n  },\n  {\n   \"item\": \"a\\\"b\\\\c\\nd\\u0001\\u007f\",\n   \"qty\": 1,\n   \"rate\": 1e+16\n  }\n ],\n \"name\": \"SO-0001\",\n \"neg\": -0.0,\n \"none\": null,\n \"obj\": {},\n \"small\": 1e-07\n}",
            ),
            (
                r#"{{ {"b": [1, 2], "a": "é"}|json(indent=none, ensure_ascii=false) }}"#,
                "{\"a\": \"é\",\"b\": [1,2]}",
            ),
            (
                r#"{{ {"b": [1, 2], "a": {"c": []}}|json(0) }}"#,
                "{\n\"a\": {\n\"c\": []\n},\n\"b\": [\n1,\n2\n]\n}",
            ),
            (
                "{{ {\"a\": [1, {\"b\": none}]}|json(indent=\"\\t\") }}",
                "{\n\t\"a\": [\n\t\t1,\n\t\t{\n\t\t\t\"b\": null\n\t\t}\n\t]\n}",
            ),
            // Keys Python cannot sort: the whole value again, unsorted.
            (r#"{{ {1: "a", "b": 2}|json }}"#, "{\n \"1\": \"a\",\n \"b\": 2\n}"),
            (r#"{{ {10: 1, 9: 2}|json }}"#, "{\n \"9\": 2,\n \"10\": 1\n}"),
            (r#"{{ "x"|json }} {{ none|json }} {{ missing|json }}"#, "\"x\" null null"),
        ]);
        assert_fails(
            "{{ utils|json }}",
            "json(): values of kind plain object are not JSON serializable",
        );
        assert_fails("{{ doc|json(indent=99) }}", "json(): indent over 16");
        assert_fails(
            r#"{{ doc|json(separators=[","]) }}"#,
            "json(): separators must be two strings",
        );
        assert_fails(
            "{{ doc|json(sort=true) }}",
            "json(): got an unexpected keyword argument \"sort\"",
        );
    }

    #[test]
    fn json_filter_output_is_safe() {
        let mut env = env();
        env.add_template("page.html", "{{ v|json }} {{ v.a }}")
            .unwrap();
        let out = env
            .get_template("page.html")
            .unwrap()
            .render(json!({"v": {"a": "<b>"}}))
            .unwrap();
        assert_eq!(out, "{\n \"a\": \"<b>\"\n} &lt;b&gt;");
    }

    #[test]
    fn python_methods_through_pycompat() {
        assert_renders(&[
            (r#"{{ doc.get("x", "d") }}"#, "d"),
            (r#"{{ doc.get("name") }}"#, "SO-0001"),
            (r#"{{ doc.name.startswith("SO") }}"#, "True"),
            (r#"{{ doc.name.startswith("PO") }}"#, "False"),
            (r#"{{ "  AbC ".strip().lower() }}"#, "abc"),
        ]);
    }

    #[test]
    fn frappe_utils_alias_and_function_values() {
        assert_renders(&[
            (r#"{{ frappe.utils.flt("2") }}"#, "2.0"),
            (r#"{{ frappe.utils.cint("3") }}"#, "3"),
            (
                "{{ frappe.utils.add_days(\"2024-01-31\", 1) }}",
                "2024-02-01",
            ),
            (
                "{{ utils.flt is defined }} {{ frappe.utils.cint is defined }}",
                "True True",
            ),
            (r#"{% set f = utils.cint %}{{ f("4") }}"#, "4"),
            ("{{ utils.nosuch is defined }}", "False"),
        ]);
    }

    #[test]
    fn unknown_function_is_named() {
        for src in ["{{ utils.foo() }}", "{{ frappe.utils.foo(1, x=2) }}"] {
            assert_fails(src, "utils has no function named foo");
        }
    }

    #[test]
    fn names_match_the_functions() {
        for name in NAMES {
            assert!(
                SIGNATURES.iter().any(|s| s.name == *name),
                "{name} has no function"
            );
            let src = format!("{{{{ utils.{name} is defined }}}}");
            assert_eq!(render(&src), "True", "{name}");
        }
        for signature in SIGNATURES {
            assert!(
                NAMES.contains(&signature.name),
                "{} missing from NAMES",
                signature.name
            );
        }
    }

    #[test]
    fn arguments_are_checked() {
        assert_fails(
            "{{ utils.flt() }}",
            "flt(): missing required argument \"s\"",
        );
        assert_fails(
            "{{ utils.cint(1, 2, 3) }}",
            "cint(): takes at most 2 arguments (3 given)",
        );
        assert_fails(
            "{{ utils.flt(1, precision=2, bogus=1) }}",
            "flt(): got an unexpected keyword argument \"bogus\"",
        );
        assert_fails(
            "{{ utils.flt(1, 2, precision=3) }}",
            "flt(): got multiple values for argument \"precision\"",
        );
        assert_fails(
            "{{ utils.now(1) }}",
            "now(): takes at most 0 arguments (1 given)",
        );
        assert_fails(
            r#"{{ utils.add_days("2024-01-01", "5") }}"#,
            "add_days(): days must be a number, not string",
        );
        assert_fails(
            r#"{{ utils.add_to_date("2024-01-01", day=1) }}"#,
            "add_to_date(): got an unexpected keyword argument \"day\"",
        );
        assert_fails(
            r#"{{ utils.add_months("2024-01-01", 1.5) }}"#,
            "add_months(): months must be a whole number",
        );
        assert_fails(
            "{{ utils.add_days(5, 1) }}",
            "add_days(): expected a date string, not number",
        );
        assert_fails(
            "{{ utils.strip_html(none) }}",
            "strip_html(): expected a string, not none",
        );
        assert_fails(
            "{{ utils.fmt_money([1]) }}",
            "fmt_money(): expected a number, not sequence",
        );
        assert_fails(
            r#"{{ utils.get_first_day("2024-01-01", 1.5) }}"#,
            "get_first_day(): d_years must be an integer, not 1.5",
        );
    }

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

    #[test]
    fn time_zone_setting() {
        assert_eq!(parse_time_zone("Asia/Kolkata"), Ok(Tz::Asia__Kolkata));
        assert_eq!(parse_time_zone(" UTC\n"), Ok(Tz::UTC));
        assert_eq!(
            parse_time_zone("Mars/Base"),
            Err(
                r#"unknown time zone "Mars/Base": use an IANA name such as UTC or Asia/Kolkata"#
                    .to_string()
            )
        );
        assert!(parse_time_zone("").is_err());
        let _guard = zone_guard();
        set_time_zone(Tz::Europe__Berlin);
        assert_eq!(time_zone(), Tz::Europe__Berlin);
        set_time_zone(Tz::UTC);
        assert_eq!(time_zone(), Tz::UTC);
    }

    /// Expected values computed with python3 running Frappe's fmt_money
    /// (fraction units 100, no symbol table).
    #[test]
    fn fmt_money_matches_frappe() {
        assert_renders(&[
            ("{{ utils.fmt_money(1234.5) }}", "1,234.50"),
            (r#"{{ utils.fmt_money(1234.5, currency="USD") }}"#, "USD 1,234.50"),
            ("{{ utils.fmt_money(-1234.5) }}", "-1,234.50"),
            ("{{ utils.fmt_money(0) }} {{ utils.fmt_money(none) }} {{ utils.fmt_money(-0.001) }}", "0.00 0.00 0.00"),
            (r##"{{ utils.fmt_money(1234567.891, format="#,##,###.##") }}"##, "12,34,567.89"),
            (r##"{{ utils.fmt_money(1234567.891, format="#.###,##") }}"##, "1.234.567,89"),
            ("{{ utils.fmt_money(1.5, 3) }}", "1.50"),
            ("{{ utils.fmt_money(1.2345, 3) }}", "1.234"),
            ("{{ utils.fmt_money(1.23456, 5) }}", "1.23456"),
            ("{{ utils.fmt_money(1.234, 5) }}", "1.234"),
            ("{{ utils.fmt_money(1.00001, 5) }}", "1.00001"),
            (r#"{{ utils.fmt_money(1.5, 3, "KWD") }}"#, "KWD 1.50"),
            (r#"{{ utils.fmt_money("1,234.567") }}"#, "1,234.57"),
            ("{{ utils.fmt_money(999.999) }}", "1,000.00"),
            ("{{ utils.fmt_money(1234.5, 0) }}", "1,234"),
            (r##"{{ utils.fmt_money(1234567.5, format="#,###") }}"##, "1,234,568"),
            (r##"{{ utils.fmt_money(12.5, 8, format="#.########") }}"##, "12.50000000"),
        ]);
    }

    #[test]
    fn html_helpers() {
        assert_renders(&[
            (
                r#"{{ utils.escape_html("<a href=\"x\">'&'</a>") }}"#,
                "&lt;a href=&quot;x&quot;&gt;&apos;&amp;&apos;&lt;/a&gt;",
            ),
            ("{{ utils.escape_html(5) }}", "5"),
        ]);
        // Expected values from python3's re.sub(r"(<!--.*?-->|<[^>]*>)", "", t).
        let cases = [
            ("<b>bold</b> text", "bold text"),
            ("a <!-- c > d --> b", "a  b"),
            ("a <!-- c \n > d --> b", "a  d --> b"),
            ("x < y", "x < y"),
            ("<<a>", ""),
            ("a<!-->b", "ab"),
            ("<!--a--><b>c", "c"),
            ("1 < 2 > 3", "1  3"),
            ("<p>\n<br/>\n</p>x<", "\n\nx<"),
            ("<!--a>b<!--c-->", ""),
            ("héllo <i>wörld</i>", "héllo wörld"),
        ];
        for (text, expected) in cases {
            assert_eq!(strip_html(text), expected, "strip_html({text:?})");
            let out = render_with("{{ utils.strip_html(t) }}", json!({"t": text}));
            assert_eq!(out, expected, "utils.strip_html({text:?})");
        }
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

    #[test]
    fn hostile_strings_are_linear_and_capped() {
        let lts = "<".repeat(1 << 20);
        let started = Instant::now();
        assert_eq!(strip_html(&lts), lts);
        let comments = "<!--a>".repeat(1 << 18);
        assert_eq!(strip_html(&comments), "");
        let open_comments = "<!--".repeat(1 << 18);
        assert_eq!(strip_html(&open_comments), open_comments);
        let out = render_with("{{ utils.strip_html(t)|length }}", json!({"t": lts}));
        assert_eq!(out, (1 << 20).to_string());
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );

        let quotes = json!({"t": "\"".repeat(1 << 20)});
        let e = env()
            .render_str("{{ utils.escape_html(t) }}", quotes)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("escape_html(): the result would exceed"),
            "{e}"
        );
        let accents = json!({"t": "é".repeat(1 << 20)});
        let e = env().render_str("{{ t|json }}", accents).unwrap_err();
        assert!(
            e.to_string().contains("json(): the result would exceed"),
            "{e}"
        );
    }

    #[test]
    fn deep_nesting_is_refused() {
        let mut deep = json!(1);
        for _ in 0..200 {
            deep = json!([deep]);
        }
        let e = env()
            .render_str("{{ v|json }}", json!({"v": deep}))
            .unwrap_err();
        assert!(
            e.to_string().contains("nested deeper than 128 levels"),
            "{e}"
        );
        let e = env()
            .render_str("{{ v|str }}", json!({"v": deep}))
            .unwrap_err();
        assert!(
            e.to_string().contains("nested deeper than 128 levels"),
            "{e}"
        );
    }

    /// Every function and filter on every combination of awkward arguments:
    /// none panics, every failure is an `InvalidOperation` naming the
    /// function, and every result stays within `MAX_RESULT_BYTES`.
    #[test]
    fn no_input_panics() {
        let pool: Vec<Value> = vec![
            Value::from(()),
            Value::UNDEFINED,
            Value::from(true),
            Value::from(0),
            Value::from(-1),
            Value::from(i64::MAX),
            Value::from(i128::MIN),
            Value::from(0.5),
            Value::from(1e308),
            Value::from(-1e308),
            Value::from(f64::NAN),
            Value::from(f64::NEG_INFINITY),
            Value::from(""),
            Value::from("x"),
            Value::from("2024-02-29"),
            Value::from("2024-01-31 10:00:00.5+05:30"),
            Value::from("9999-12-31"),
            Value::from("0001-01-01 00:00:00"),
            Value::from("1,234.5"),
            Value::from("<!--<a>"),
            Value::from("-inf"),
            Value::from(vec![Value::from(1), Value::from("a")]),
            Value::from_serialize(json!({"k": 1})),
            Value::from_object(Utils),
        ];
        let check = |name: &str, result: Result<Value, Error>| match result {
            Ok(v) => assert!(v.to_string().len() <= MAX_RESULT_BYTES, "{name}"),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::InvalidOperation, "{name}: {e}");
                assert!(e.to_string().contains(&format!("{name}()")), "{name}: {e}");
            }
        };
        let mut calls = 0;
        for signature in SIGNATURES.iter().chain([&JSON_FILTER, &LEN_FILTER]) {
            let run = |args: &[Value]| bind(signature, args).and_then(|b| (signature.run)(&b));
            check(signature.name, run(&[]));
            for a in &pool {
                check(signature.name, run(std::slice::from_ref(a)));
                for b in &pool {
                    check(signature.name, run(&[a.clone(), b.clone()]));
                    for c in &pool[..6] {
                        check(signature.name, run(&[a.clone(), b.clone(), c.clone()]));
                        calls += 1;
                    }
                }
            }
        }
        assert!(calls > 50_000, "{calls} calls");
    }
}
