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
//! Each family has its file: [`signature`] binds a call's arguments to
//! Frappe's parameter names and words the errors; [`numbers`] reads and
//! rounds numbers as `flt`, `cint` and `rounded` do, and [`money`] formats
//! them as `fmt_money` does; [`text`] holds `cstr`, `len` and the HTML
//! helpers; [`json`] the `json` filter; [`dates`] reads and writes dates and
//! answers `now()`, and [`date_arithmetic`] shifts them and measures between
//! them; [`mod@time_zone`] is the site's zone they answer in. This file holds
//! the `utils` and `frappe` objects and the table of every function they
//! offer.
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
//!   is converted into the configured zone ([`time_zone()`]) and the offset
//!   dropped (Frappe keeps an aware datetime, which then fails when compared
//!   with its naive ones). Without a database there is no system setting:
//!   the zone is [`set_time_zone`]'s (UTC unless set), where Frappe falls back
//!   to Asia/Kolkata.
//! - `add_to_date` and its kin treat an ISO `T` date-time as a date-time
//!   (Frappe looks only for a space, so `2024-01-05T10:00` would come back as
//!   a bare date). Fractional days, hours, minutes or seconds are summed in
//!   an f64 and rounded to the microsecond once (Python's timedelta is exact
//!   to the microsecond at every step; only the last digit can differ).
//! - `fmt_money` has no database: the symbol is the one a Frappe site's
//!   Currency records hold for the common currencies (`$ 1,234.50`), else
//!   the code (`RUB 1,234.50`), always on the left and never hidden, a currency's
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

mod date_arithmetic;
mod dates;
mod json;
mod money;
mod numbers;
mod signature;
#[cfg(test)]
mod testing;
mod text;
mod time_zone;

use std::fmt;
use std::sync::Arc;

use minijinja::value::{Object, ObjectRepr, Rest, Value};
use minijinja::{Environment, Error, ErrorKind, State};

use date_arithmetic::{
    add_to_date_with, date_diff, get_first_day, get_last_day, month_diff, time_diff_seconds,
    ADD_TO_DATE_PARAMS, ADD_TO_DATE_SLOTS,
};
use dates::{
    fmt_date, fmt_datetime_full, fmt_time_full, get_datetime, getdate, now_local, required_datetime,
};
use json::as_json;
use money::fmt_money;
use numbers::{cint, floor_or_ceil, flt, py_round, rounded};
use signature::{bind, call, sig, with_first, Signature};
use text::{comma_sep, cstr, escape_html, py_len, strip_html};

pub(crate) use text::python_str;
pub use time_zone::{parse_time_zone, set_time_zone};
pub(crate) use time_zone::{time_zone, TIME_ZONE_ENV};

/// Every function `utils.*` (and `frappe.utils.*`) offers: the names Frappe
/// gives them, for validation and documentation elsewhere.
pub(crate) const NAMES: &[&str] = &[
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
    "comma_and",
    "comma_or",
    "get_date_str",
];

/// Largest string a helper builds (`json`, `cstr` of a list, `escape_html`):
/// four times the largest body a template may render (1 MiB), so whatever
/// could still fit in a body passes, and a template cannot make one call
/// allocate without bound.
const MAX_RESULT_BYTES: usize = 4 * 1024 * 1024;

/// Gives `env` Frappe's template helpers: the `utils` and `frappe` globals
/// (`frappe.utils` is `utils`), the filters Frappe's Jinja environment
/// defines (`json` = `frappe.as_json`, `len`, `int` = `cint`, `str` =
/// `cstr`, `flt`; `int` replaces minijinja's own) and Python's str and dict
/// methods through minijinja-contrib's `pycompat`.
pub(crate) fn install(env: &mut Environment<'static>) {
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

/// The `frappe` global: its `utils` attribute and `bold` (the database,
/// session and translation helpers have no meaning outside Frappe).
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

    /// `frappe.bold(text)`: `<strong>text</strong>`, as Frappe's jinja
    /// method writes it (the text through Python's `str`).
    fn call_method(
        self: &Arc<Self>,
        _state: &State<'_, '_>,
        method: &str,
        args: &[Value],
    ) -> Result<Value, Error> {
        match (method, args) {
            ("bold", [text]) => Ok(Value::from(format!(
                "<strong>{}</strong>",
                python_str(text)?
            ))),
            ("bold", _) => Err(Error::new(
                ErrorKind::TooManyArguments,
                "frappe.bold() takes exactly one argument",
            )),
            _ => Err(Error::new(
                ErrorKind::UnknownMethod,
                format!("frappe has no method named {method}"),
            )),
        }
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

/// Every function of `utils`, with Frappe's parameter names.
/// Whether `utils.<name>` is one of the functions Frappe's safe globals
/// give templates that hookfleet has.
pub(crate) fn has_utils_function(name: &str) -> bool {
    SIGNATURES.iter().any(|s| s.name == name)
}

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
    sig("comma_and", &["some_list", "add_quotes"], 1, |b| {
        comma_sep(b, " and ")
    }),
    sig("comma_or", &["some_list", "add_quotes"], 1, |b| {
        comma_sep(b, " or ")
    }),
    sig("get_date_str", &["date_obj"], 1, |b| {
        Ok(Value::from(fmt_date(required_datetime(b, 0)?.date())))
    }),
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

#[cfg(test)]
mod tests {
    use super::testing::{assert_renders, render};
    use super::*;
    use minijinja::ErrorKind;
    use serde_json::json;

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
                assert!(
                    matches!(
                        e.kind(),
                        ErrorKind::InvalidOperation
                            | ErrorKind::TooManyArguments
                            | ErrorKind::MissingArgument
                    ),
                    "{name}: {e}"
                );
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
