//! Python's semantics for the operators where Jinja's differ, as functions the translated
//! conditions call (the emitter writes calls to them by these names; [`super::install`]
//! registers them). Jinja is lenient where Python raises; these raise, so that a condition
//! Frappe could not evaluate sends nothing here either.

use std::cmp::Ordering;

use minijinja::value::{Rest, Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// `py_compare(a, "<", b, "<=", c)`: a chained ordering comparison.
pub(super) const COMPARE: &str = "py_compare";
/// `a / b`.
pub(super) const DIV: &str = "py_div";
/// `a // b`.
pub(super) const FLOORDIV: &str = "py_floordiv";
/// `a % b`.
pub(super) const MOD: &str = "py_mod";
/// `round(x[, n])`.
pub(super) const ROUND: &str = "py_round";

/// The most digits `round(x, n)` keeps: past 15 a float has none left.
const MAX_ROUND_DIGITS: i64 = 15;

fn fail(msg: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg)
}

/// Python's name for a value's type, for error messages.
fn type_name(v: &Value) -> &'static str {
    match v.kind() {
        ValueKind::Undefined => "a missing field",
        ValueKind::None => "None",
        ValueKind::Bool => "bool",
        ValueKind::Number if v.is_integer() => "int",
        ValueKind::Number => "float",
        ValueKind::String => "str",
        ValueKind::Seq => "list",
        ValueKind::Map => "dict",
        _ => "object",
    }
}

/// A number as Python sees it: an int (bools are ints), or a float.
enum Num {
    Int(i128),
    Float(f64),
}

fn num(v: &Value) -> Option<Num> {
    match v.kind() {
        ValueKind::Bool => Some(Num::Int(i128::from(v.is_true()))),
        ValueKind::Number if v.is_integer() => i128::try_from(v.clone()).ok().map(Num::Int),
        ValueKind::Number => f64::try_from(v.clone()).ok().map(Num::Float),
        _ => None,
    }
}

fn float(n: &Num) -> f64 {
    match n {
        Num::Int(i) => *i as f64,
        Num::Float(f) => *f,
    }
}

fn operands(a: &Value, b: &Value, op: &str) -> Result<(Num, Num), Error> {
    match (num(a), num(b)) {
        (Some(x), Some(y)) => Ok((x, y)),
        _ => Err(fail(format!(
            "unsupported operand types for {op}: {} and {}",
            type_name(a),
            type_name(b)
        ))),
    }
}

/// One ordering comparison with Python's rules: numbers with numbers,
/// strings with strings, lists with lists; anything else (None, a
/// missing field, a number with a string) is an error, as in Python.
fn order(a: &Value, op: &str, b: &Value) -> Result<bool, Error> {
    let ordering = match (num(a), num(b)) {
        (Some(x), Some(y)) => match (x, y) {
            (Num::Int(x), Num::Int(y)) => Some(x.cmp(&y)),
            (x, y) => float(&x).partial_cmp(&float(&y)),
        },
        _ => match (a.kind(), b.kind()) {
            (ValueKind::String, ValueKind::String) | (ValueKind::Seq, ValueKind::Seq) => {
                a.partial_cmp(b)
            }
            _ => {
                return Err(fail(format!(
                    "'{op}' not supported between {} and {}",
                    type_name(a),
                    type_name(b)
                )))
            }
        },
    };
    Ok(match (op, ordering) {
        // NaN compares false with everything, as in Python.
        (_, None) => op == "!=",
        ("<", Some(o)) => o == Ordering::Less,
        ("<=", Some(o)) => o != Ordering::Greater,
        (">", Some(o)) => o == Ordering::Greater,
        (">=", Some(o)) => o != Ordering::Less,
        ("==", Some(o)) => o == Ordering::Equal,
        ("!=", Some(o)) => o != Ordering::Equal,
        (other, _) => return Err(fail(format!("unknown comparison {other:?}"))),
    })
}

/// `a op b op c …` as Python chains it: each operand evaluated once
/// (the caller passed them), stopping at the first false link.
pub(super) fn compare(args: Rest<Value>) -> Result<bool, Error> {
    let args = &args.0;
    // Operands and operators in turn: an odd count, three at least.
    if args.len() < 3 || args.len() & 1 == 0 {
        return Err(fail(
            "py_compare takes operands and operators in turn".into(),
        ));
    }
    for link in args.windows(3).step_by(2) {
        let op = link[1]
            .as_str()
            .ok_or_else(|| fail("py_compare: an operator is not text".into()))?;
        let holds = match op {
            // Equality never raises in Python, whatever the types.
            "==" => link[0] == link[2],
            "!=" => link[0] != link[2],
            _ => order(&link[0], op, &link[2])?,
        };
        if !holds {
            return Ok(false);
        }
    }
    Ok(true)
}

fn zero(n: &Num) -> bool {
    match n {
        Num::Int(i) => *i == 0,
        Num::Float(f) => *f == 0.0,
    }
}

/// `a / b`: always a float; division by zero is an error.
pub(super) fn div(a: Value, b: Value) -> Result<Value, Error> {
    let (x, y) = operands(&a, &b, "/")?;
    if zero(&y) {
        return Err(fail("division by zero".into()));
    }
    Ok(Value::from(float(&x) / float(&y)))
}

/// `a // b`: floored toward negative infinity, as Python does.
pub(super) fn floordiv(a: Value, b: Value) -> Result<Value, Error> {
    let (x, y) = operands(&a, &b, "//")?;
    if zero(&y) {
        return Err(fail("integer division or modulo by zero".into()));
    }
    Ok(match (x, y) {
        (Num::Int(x), Num::Int(y)) => {
            let q = x
                .checked_div(y)
                .ok_or_else(|| fail("integer division overflows".into()))?;
            Value::from(if x % y != 0 && ((x < 0) != (y < 0)) {
                q - 1
            } else {
                q
            })
        }
        (x, y) => Value::from((float(&x) / float(&y)).floor()),
    })
}

/// `a % b`: the sign of the divisor, as Python does. A string on the
/// left (formatting) is refused at translation when literal, here
/// otherwise.
pub(super) fn modulo(a: Value, b: Value) -> Result<Value, Error> {
    let (x, y) = operands(&a, &b, "%")?;
    if zero(&y) {
        return Err(fail("integer division or modulo by zero".into()));
    }
    Ok(match (x, y) {
        (Num::Int(x), Num::Int(y)) => {
            let r = x
                .checked_rem(y)
                .ok_or_else(|| fail("integer modulo overflows".into()))?;
            Value::from(if r != 0 && ((r < 0) != (y < 0)) {
                r + y
            } else {
                r
            })
        }
        (x, y) => {
            let (x, y) = (float(&x), float(&y));
            let r = x % y;
            Value::from(if r != 0.0 && ((r < 0.0) != (y < 0.0)) {
                r + y
            } else {
                r
            })
        }
    })
}

/// `round(x)` (an int) and `round(x, n)`, halves to even as Python
/// rounds: Rust's formatting rounds the exact binary value the same way
/// (`round(2.675, 2)` is 2.67 in both).
pub(super) fn round(x: Value, digits: Option<i64>) -> Result<Value, Error> {
    let n =
        num(&x).ok_or_else(|| fail(format!("type {} doesn't define __round__", type_name(&x))))?;
    let f = match n {
        Num::Int(i) if digits.is_none_or(|d| d >= 0) => return Ok(Value::from(i)),
        Num::Int(i) => i as f64,
        Num::Float(f) => f,
    };
    if !f.is_finite() {
        return Err(fail("cannot round an infinite or NaN number".into()));
    }
    match digits {
        None => format!("{f:.0}")
            .parse::<i128>()
            .map(Value::from)
            .map_err(|_| fail("the rounded number is too large".into())),
        Some(d) if (0..=MAX_ROUND_DIGITS).contains(&d) => {
            let text = format!("{f:.*}", d as usize);
            text.parse::<f64>()
                .map(Value::from)
                .map_err(|_| fail("cannot round this number".into()))
        }
        Some(d) => Err(fail(format!(
            "round() takes 0 to {MAX_ROUND_DIGITS} digits here, not {d}"
        ))),
    }
}

/// Jinja's `round` filter as Jinja (in Python) rounds: `common` is
/// Python's `round(value, precision)` (ties to even, on the number's exact
/// binary value: `2.5 | round` is 2.0, `0.125 | round(2)` is 0.12), `ceil`
/// and `floor` round up or down at `precision` digits. A float comes back
/// a float, as in Jinja; an integer rounded `common` stays one.
pub(crate) fn round_filter(
    value: Value,
    precision: Option<i64>,
    method: Option<String>,
) -> Result<Value, Error> {
    let digits = precision.unwrap_or(0);
    if !(0..=MAX_ROUND_DIGITS).contains(&digits) {
        return Err(fail(format!(
            "round takes 0 to {MAX_ROUND_DIGITS} digits here, not {digits}"
        )));
    }
    let n = num(&value).ok_or_else(|| fail(format!("cannot round {}", type_name(&value))))?;
    match method.as_deref().unwrap_or("common") {
        "common" => match n {
            Num::Int(i) => Ok(Value::from(i)),
            Num::Float(_) => round(value, Some(digits)),
        },
        m @ ("ceil" | "floor") => {
            let f = match n {
                Num::Int(i) => i as f64,
                Num::Float(f) => f,
            };
            let scale = 10f64.powi(digits as i32);
            let scaled = f * scale;
            let r = if m == "ceil" {
                scaled.ceil()
            } else {
                scaled.floor()
            };
            Ok(Value::from(r / scale))
        }
        other => Err(fail(format!(
            "round's method must be common, ceil or floor, not {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use crate::pyexpr::testing::truth;

    /// Where minijinja's result differs from Python's, found while writing the corpus. Each
    /// row: the condition, what Python (3.11, same `doc`) gives, and what the translation
    /// gives in minijinja 2.24 (`None` = an evaluation error).
    const DIFFERENCES: &[(&str, &str, Option<bool>)] = &[
        // Integer powers: no negative exponents, no results beyond 128 bits.
        ("2 ** -1 == 0.5", "True", None),
        ("2 ** 200 > 0", "True", None),
        // A field absent from the JSON is undefined: `is None` holds (as in
        // Frappe), `== None` does not.
        ("doc.missing_field == None", "True", Some(false)),
        // Tuples become lists.
        ("(1, 2) == [1, 2]", "False", Some(true)),
        // minijinja is lenient where Python raises.
        (r#"int("3.5") == 3"#, "ValueError", Some(true)),
        ("doc.items[5]", "IndexError", Some(false)),
        (r#""x" in doc.missing_field"#, "TypeError", Some(false)),
        // `0 and 5` is folded to the constant `false` at compile time (Python: 0).
        (r#"str(0 and 5) == "0""#, "True", Some(false)),
        // ... but on runtime values `and`/`or` return an operand, as in Python.
        (r#"str(doc.items[1].qty and 5) == "0""#, "True", Some(true)),
        // `isdigit` is Unicode `is_numeric` in pycompat.
        (r#""½".isdigit()"#, "False", Some(true)),
        // `%` on a non-literal string: Python formats, minijinja fails.
        ("doc.tags % ()", "'a,b'", None),
        // Both fail here, differently.
        ("len(doc.discount) == 0", "TypeError", None),
    ];

    #[test]
    fn known_differences_from_python() {
        let mut surprises = Vec::new();
        for (src, python, jinja_expected) in DIFFERENCES {
            let got = truth(src).ok();
            if got != *jinja_expected {
                surprises.push(format!(
                    "{src} (Python: {python}): expected {jinja_expected:?}, got {got:?}"
                ));
            }
        }
        assert!(surprises.is_empty(), "{}", surprises.join("\n"));
        // And the things that look risky but agree with Python:
        for src in [
            r#"str(None) == "None" and str(True) == "True""#,
            "(doc.discount or 5) == 5",
            r#""they're".title() == "They'Re""#,
            "int(-2.5) == -2",
            r#""ab" * 2 == "abab" and [1] * 2 == [1, 1]"#,
            "7 / 2 == 3.5 and -7 // 2 == -4 and -7 % 3 == 2",
            "doc.docstatus == True",
            "doc.missing_field is None and doc.discount is None",
            // Python's rounding (halves to even) and floored division.
            "round(doc.grand_total) == 1500 and round(2.5) == 2 and round(2.675, 2) == 2.67",
            "7 // -2 == -4 and 7 % -3 == -2 and 7.5 // -2 == -4 and -7 % 3 == 2",
            "1 < 2 < 3 and not (3 < 2 < 1) and \"a\" < \"b\" and [1, 2] < [1, 3]",
            "not (doc.missing_field is not None)",
        ] {
            assert_eq!(truth(src).ok(), Some(true), "{src}");
        }
    }

    #[test]
    fn what_raises_in_python_is_an_error_not_a_truth() {
        // Frappe sends nothing when its condition raises; so here the
        // condition is an error, never a webhook that fires.
        for src in [
            r#""1" < 2"#,
            r#"1 < "a" or True"#,
            "doc.grand_total > None",
            "doc.discount < 5",
            "doc.missing_field >= 1",
            "10 / 0 > 1",
            "doc.grand_total / doc.items[1].qty > 100",
            "7 // 0 == 0",
            "7 % 0.0 == 0",
            "round(None) == 0",
            "round(doc.grand_total, 99) > 0",
        ] {
            let err = truth(src).expect_err(src);
            assert_eq!(
                err.kind(),
                minijinja::ErrorKind::InvalidOperation,
                "{src}: {err}"
            );
        }
        // Equality never raises, whatever the types, as in Python.
        assert_eq!(truth(r#"doc.discount == 5 or "1" == 1"#).ok(), Some(false));
    }
}
