//! A call's arguments bound to Frappe's parameter names, the way Python binds them (so
//! `utils.flt(x, precision=2)` works as in Frappe and a wrong call is an error naming the
//! function), and the wording of the errors every helper raises.

use std::fmt;

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind};

use super::SIGNATURES;

/// Characters of an offending value quoted in an error message: enough to
/// recognize it, not enough to flood a log.
const QUOTE_CHARS: usize = 64;

/// A function's parameters as Python names them (so keyword arguments work
/// as in Frappe), how many are required, and its body.
#[derive(Debug)]
pub(super) struct Signature {
    pub(super) name: &'static str,
    params: &'static [&'static str],
    required: usize,
    pub(super) run: fn(&Bound) -> Result<Value, Error>,
}

/// The arguments of one call, bound to their parameters: `None` where the
/// caller gave nothing (an explicit `none` is `Some(none)`).
pub(super) struct Bound {
    name: &'static str,
    values: Vec<Option<Value>>,
}

impl Bound {
    /// The argument as given (an explicit `none` included).
    pub(super) fn given(&self, i: usize) -> Option<&Value> {
        self.values.get(i).and_then(Option::as_ref)
    }

    /// The argument, with `none` and undefined read as absent: Python's
    /// `param=None` defaults.
    pub(super) fn opt(&self, i: usize) -> Option<&Value> {
        self.given(i).filter(|v| !is_none_like(v))
    }

    /// The argument, undefined when absent (for required parameters, which
    /// [`bind`] guarantees).
    pub(super) fn value(&self, i: usize) -> Value {
        self.given(i).cloned().unwrap_or(Value::UNDEFINED)
    }

    /// An error about this call.
    pub(super) fn fail(&self, msg: impl fmt::Display) -> Error {
        fail(self.name, msg)
    }
}

/// Shorthand for the table of every function ([`SIGNATURES`]).
pub(super) const fn sig(
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

/// A filter's arguments as a function's: the filtered value first.
pub(super) fn with_first(value: Value, rest: &[Value]) -> Vec<Value> {
    let mut args = Vec::with_capacity(rest.len() + 1);
    args.push(value);
    args.extend(rest.iter().cloned());
    args
}

/// Calls `utils.<name>(args…)`: an unknown name is an error naming it.
pub(super) fn call(name: &str, args: &[Value]) -> Result<Value, Error> {
    match SIGNATURES.iter().find(|s| s.name == name) {
        Some(signature) => (signature.run)(&bind(signature, args)?),
        None => Err(Error::new(
            ErrorKind::UnknownFunction,
            format!("utils has no function named {}", shorten(name)),
        )),
    }
}

/// Binds positional and keyword arguments to `signature`'s parameters the
/// way Python does: too many positional arguments, an unknown keyword, a
/// parameter given twice or a required one missing is an error.
pub(super) fn bind(signature: &'static Signature, args: &[Value]) -> Result<Bound, Error> {
    let name = signature.name;
    let (positional, kwargs) = match args.split_last() {
        Some((last, rest)) if last.is_kwargs() => (rest, Some(Kwargs::try_from(last.clone())?)),
        _ => (args, None),
    };
    let params = signature.params;
    if positional.len() > params.len() {
        return Err(wrong_arguments(
            ErrorKind::TooManyArguments,
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
                return Err(wrong_arguments(
                    ErrorKind::TooManyArguments,
                    name,
                    format!("got an unexpected keyword argument {}", quote(key)),
                ));
            };
            if values[i].is_some() {
                return Err(wrong_arguments(
                    ErrorKind::TooManyArguments,
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
        return Err(wrong_arguments(
            ErrorKind::MissingArgument,
            name,
            format!("missing required argument {}", quote(params[missing])),
        ));
    }
    Ok(Bound { name, values })
}

/// A call's arguments that do not fit the function (`kind`: too many or
/// unknown, or missing): the template's own fault, refused when a webhook
/// is added, whatever the document.
fn wrong_arguments(kind: ErrorKind, name: &str, msg: impl fmt::Display) -> Error {
    Error::new(kind, format!("{name}(): {msg}"))
}

/// An `InvalidOperation` error whose message starts with the function's name.
fn fail(name: &str, msg: impl fmt::Display) -> Error {
    Error::new(ErrorKind::InvalidOperation, format!("{name}(): {msg}"))
}

/// A string for an error message: quoted and escaped, cut at [`QUOTE_CHARS`].
pub(super) fn quote(s: &str) -> String {
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
pub(super) fn describe(v: &Value) -> String {
    match v.kind() {
        ValueKind::String => quote(v.as_str().unwrap_or_default()),
        ValueKind::Number | ValueKind::Bool => v.to_string(),
        kind => kind.to_string(),
    }
}

/// `none` or undefined: what Python sees as `None`.
pub(super) fn is_none_like(v: &Value) -> bool {
    v.is_none() || v.is_undefined()
}

#[cfg(test)]
mod tests {
    use minijinja::ErrorKind;

    use crate::frappe::testing::assert_fails;

    #[test]
    fn unknown_function_is_named() {
        // An unknown function, not a value the document lacks: refused
        // when a webhook is added, whatever the sample document holds.
        for src in ["{{ utils.foo() }}", "{{ frappe.utils.foo(1, x=2) }}"] {
            let e = crate::frappe::testing::render_err(src);
            assert_eq!(
                e.kind(),
                minijinja::ErrorKind::UnknownFunction,
                "{src}: {e:#}"
            );
            assert!(
                e.to_string().contains("utils has no function named foo"),
                "{e}"
            );
        }
    }

    #[test]
    fn arguments_are_checked() {
        // The template's own fault, whatever the document: refused when a
        // webhook is added (not taken for a value the sample lacks).
        for (src, kind) in [
            ("{{ utils.cint(1, 2, 3) }}", ErrorKind::TooManyArguments),
            ("{{ utils.flt(1, bogus=1) }}", ErrorKind::TooManyArguments),
            ("{{ utils.flt() }}", ErrorKind::MissingArgument),
        ] {
            assert_eq!(
                crate::frappe::testing::render_err(src).kind(),
                kind,
                "{src}"
            );
        }
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
}
