//! Frappe's Python-expression webhook conditions, translated to Jinja.
//!
//! A Frappe/ERPNext webhook carries a `condition` written as a Python expression, which
//! Frappe evaluates with `safe_eval` and `doc` and `utils` in scope. hookfleet does not run
//! Python: every condition, whatever language it was written in, is evaluated by one
//! evaluator, minijinja inside the sandboxed, fuel-limited renderer process. So this module
//! *translates* the small Python subset such conditions use into one equivalent Jinja
//! expression, and refuses everything else with a message naming the construct. It
//! evaluates nothing itself.
//!
//! The approach is a classic front end, one phase per file:
//!
//! 1. [`refuse_dangerous`] ([`refuse`]) scans the raw text for things no condition may
//!    mention in any language (dunder names, `import`, `eval` and friends);
//! 2. a tokenizer ([`lexer`]) turns the text into Python tokens (string escapes, number
//!    forms and string prefixes are decoded here, f-/b-/triple-quoted strings refused);
//! 3. a recursive-descent parser ([`parser`], with [`calls`] for what a condition may name
//!    and call; precedence climbing over Python's operator levels) builds a small AST
//!    ([`ast`]), refusing anything outside the subset with the messages of [`refuse`]; its
//!    recursion is bounded by [`MAX_DEPTH`], and so is the height of the tree it builds;
//! 4. the emitter ([`emit`](mod@emit)) prints the tree as fully parenthesized Jinja,
//!    mapping Python builtins to minijinja filters (`len(x)` becomes `(x|length)`),
//!    `frappe.utils.X(...)` to `utils.X(...)`, tuples to lists and `is None` to the `none`
//!    test. Comparison chains stay chains (minijinja evaluates `a < b < c` as Python does),
//!    and methods such as `.startswith()` stay method calls: the renderer installs
//!    `minijinja_contrib::pycompat::unknown_method_callback`, which implements them. The
//!    output is checked against minijinja's own nesting limit before it is returned.
//!
//! Where Python's operators differ from Jinja's (ordering, division, modulo, rounding), the
//! translation calls functions of [`ops`], which [`install`] registers.
//!
//! Text that is not Python but may well be Jinja (a `|` filter, `~`, `is defined`,
//! lowercase `true`, `{{ … }}`, or plain Python syntax errors) is reported as
//! [`PyError::NotPython`], so the caller can compile it as Jinja instead.

mod ast;
mod calls;
mod emit;
mod lexer;
mod ops;
mod parser;
mod refuse;
#[cfg(test)]
mod testing;

use std::fmt;

use emit::{bracket_depth, emit, MAX_JINJA_BRACKETS};
use lexer::tokenize;
use parser::Parser;
use refuse::refuse_anywhere;

pub(crate) use refuse::refuse_dangerous;

/// How deeply a condition may nest. It bounds the parser's recursion (each bracket, call's
/// arguments, subscript, conditional branch and operator operand is one level, so a hostile
/// `((((…` stops here instead of overflowing the stack) and the height of the parsed tree
/// (the emitter recurses over it). 64 is far above any real condition; at 64 levels the
/// parser needs at most about 110 KiB of stack in a release build (about 500 KiB
/// unoptimized), measured on nested calls, its deepest frames.
const MAX_DEPTH: usize = 64;

/// The most links in one chained comparison (`a < b < c` has two): a
/// real condition has one or two; minijinja caps a call's arguments, and a
/// chain is one call ([`ops::compare`]).
const MAX_COMPARE_LINKS: usize = 100;

/// The Jinja test `is None` becomes: true for none and for a field the
/// document does not have, as a Frappe document answers None for a field it
/// lacks (Jinja's own `none` test is false for an undefined value).
const NONE_TEST: &str = "none_or_missing";

/// Registers what translated conditions use beyond minijinja's builtins:
/// the `is None` test and Python's own ordering, division, modulo and
/// rounding ([`ops`]). Jinja is lenient where Python raises (`None <
/// 5`, `1 / 0`, `"1" < 2` are values there); a Frappe condition that raises
/// sends nothing, so here it is an error, not a webhook that fires.
pub(crate) fn install(env: &mut minijinja::Environment<'static>) {
    env.add_test(NONE_TEST, |v: &minijinja::Value| {
        v.is_none() || v.is_undefined()
    });
    env.add_function(ops::COMPARE, ops::compare);
    env.add_function(ops::DIV, ops::div);
    env.add_function(ops::FLOORDIV, ops::floordiv);
    env.add_function(ops::MOD, ops::modulo);
    env.add_function(ops::ROUND, ops::round);
    env.add_filter("round", ops::round_filter);
}

/// Why a condition could not be translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PyError {
    /// Python, but outside the subset (or dangerous): refused; the message names the construct,
    /// e.g. "an import is not allowed", "dunder names such as `__class__` are not allowed",
    /// "`eval` is not a function a condition may call", "lambda is not allowed", "a list comprehension is not allowed".
    Refused(String),
    /// Not Python at all but maybe a Jinja expression (the caller then compiles it as Jinja).
    NotPython(String),
}

impl fmt::Display for PyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PyError::Refused(msg) | PyError::NotPython(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for PyError {}

/// Translates a Python condition into one Jinja expression.
///
/// The result is fully parenthesized and meant for `Environment::compile_expression` with
/// `doc` and `utils` in the context and pycompat's unknown-method callback installed.
/// Calls [`refuse_dangerous`] first.
pub(crate) fn to_jinja(src: &str) -> Result<String, PyError> {
    if src.trim().is_empty() {
        return Err(PyError::Refused("empty condition".into()));
    }
    refuse_dangerous(src)?;
    let tokens = tokenize(src)?;
    refuse_anywhere(src, &tokens)?;
    let tree = Parser {
        src,
        tokens,
        pos: 0,
        depth: 0,
    }
    .parse_condition()?;
    let mut out = String::with_capacity(src.len() + 16);
    emit(&tree, &mut out);
    if bracket_depth(&out) > MAX_JINJA_BRACKETS {
        return Err(PyError::Refused(
            "nested too deeply: the Jinja translation would exceed the evaluator's nesting limit"
                .into(),
        ));
    }
    Ok(out)
}

/// At most this many characters of source are quoted back in an error message.
const MAX_SNIPPET: usize = 60;

/// "at column N" (or "at line L, column N") for a byte offset into `src`.
fn position(src: &str, offset: usize) -> String {
    let mut offset = offset.min(src.len());
    while !src.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &src[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    match before.matches('\n').count() {
        0 => format!("at column {column}"),
        n => format!("at line {}, column {column}", n + 1),
    }
}

/// A refusal, saying where in `src` it is.
fn refused(src: &str, offset: usize, msg: impl fmt::Display) -> PyError {
    PyError::Refused(format!("{}: {msg}", position(src, offset)))
}

/// Not Python, saying where in `src` it stops being Python.
fn not_python(src: &str, offset: usize, msg: impl fmt::Display) -> PyError {
    PyError::NotPython(format!("{}: {msg}", position(src, offset)))
}

/// `text`, cut to [`MAX_SNIPPET`] characters, for quoting in a message.
fn snippet(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() <= MAX_SNIPPET {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(MAX_SNIPPET).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{doc, env, eval_jinja, not_py, refusal, tr};
    use super::*;
    use minijinja::context;

    #[test]
    fn empty_conditions_are_refused() {
        assert_eq!(
            to_jinja(""),
            Err(PyError::Refused("empty condition".into()))
        );
        assert_eq!(
            to_jinja("  \n\t"),
            Err(PyError::Refused("empty condition".into()))
        );
        assert_eq!(
            to_jinja("# only a comment"),
            Err(PyError::Refused("empty condition".into()))
        );
    }

    #[test]
    fn errors_name_the_position() {
        assert_eq!(
            to_jinja("doc.a and x"),
            Err(PyError::Refused(
                "at column 11: unknown name `x`: a condition sees `doc` and `utils`".into()
            ))
        );
        assert_eq!(
            to_jinja("doc.status == 1 and doc.x.__class__"),
            Err(PyError::Refused(
                "at column 27: `__class__`: dunder names such as `__class__` are not allowed"
                    .into()
            ))
        );
        assert!(refusal("(doc.a and\n  lambda: 1)").starts_with("at line 2, column 3: lambda"));
        assert!(not_py("doc.a |x").starts_with("at column 7: "));
        let err = to_jinja("eval(1)").unwrap_err();
        assert_eq!(
            err.to_string(),
            "at column 1: `eval` is not a function a condition may call"
        );
    }

    /// Frappe-style conditions and their truth value in Python.
    ///
    /// The expected values were generated once by running python3 (3.11) on each expression
    /// with `doc` a Frappe-Document-like object (fields as attributes, `None` for missing
    /// ones, a `.get(key, default)` method and `[key]` access, child rows alike), the same
    /// Sales Order as `doc()`, and `utils`/`frappe.utils` offering `flt` and `cint`.
    const CORPUS: &[(&str, bool)] = &[
        (r#"doc.get("status") == "Approved""#, true),
        (r#"doc.get("missing", "x") == "x""#, true),
        ("len(doc.items) > 0", true),
        (r#"doc.status in ("Approved", "Open")"#, true),
        (r#"doc.status not in ["Cancelled"]"#, true),
        ("doc.discount is None", true),
        ("doc.customer is not None and doc.grand_total >= 1000", true),
        (r#"doc.name.startswith("SO-")"#, true),
        (r#"doc.customer.lower() == "acme""#, true),
        (r#"doc.items[0].item_code == "I-1""#, true),
        ("doc.items[-1].qty == 0", true),
        ("0 < doc.grand_total < 2000", true),
        ("not doc.discount", true),
        (r#"doc.docstatus == 1 and doc.status != "Draft""#, true),
        ("doc.grand_total * 2 > 3000", true),
        ("doc.grand_total // 1 == 1500", true),
        (r#""a" in doc.tags.split(",")"#, true),
        (r#"doc.name[:3] == "SO-""#, true),
        (r#"doc.get("items")[0]["qty"] == 2"#, true),
        ("utils.flt(doc.grand_total) > 1", true),
        (r#"frappe.utils.cint("3") == 3"#, true),
        ("any([doc.items[1].qty, doc.discount])", false),
        ("any([doc.items[1].qty, doc.docstatus])", true),
        ("all([doc.items[0].qty, doc.docstatus])", true),
        ("all([doc.items[0].qty, doc.items[1].qty])", false),
        ("any([])", false),
        ("all([])", true),
        (
            r#"("big" if doc.grand_total > 1000 else "small") == "big""#,
            true,
        ),
        ("1 if doc.discount else 0", false),
        (
            r#"doc.status == "Approved" if doc.docstatus == 1 else False"#,
            true,
        ),
        (r#"doc.status == "Draft""#, false),
        ("doc.grand_total < 1000 or doc.docstatus == 2", false),
        ("doc.items[1].qty", false),
        (r#"doc.name.endswith("-0002")"#, false),
        (r#"doc.customer.upper() == "acme""#, false),
        ("len(doc.tags) == 3", true),
        (r#"doc.tags.count(",") == 1"#, true),
        (r#"doc.name.find("-") == 2"#, true),
        (r#"doc.name.replace("-", "") == "SO0001""#, true),
        (r#""-".join(doc.tags.split(",")) == "a-b""#, true),
        (r#"doc.status.title() == "Approved""#, true),
        (r#""acme".capitalize() == doc.customer.capitalize()"#, true),
        ("doc.name[3:].isdigit()", true),
        ("doc.customer.isalpha()", true),
        ("doc.name.isalnum()", false),
        (
            r#"" x ".strip() == "x" and "xxaxx".lstrip("x") == "axx" and "a  ".rstrip() == "a""#,
            true,
        ),
        (
            r#""a" in {"a": 1, "b": 2}.keys() and 2 in {"a": 1, "b": 2}.values()"#,
            true,
        ),
        (r#"len({"a": 1}.items()) == 1"#, true),
        ("min(doc.items[0].qty, doc.grand_total) == 2", true),
        (
            "max([1, 5, 3]) == 5 and abs(-3) == 3 and sum([1, 2, 3]) == 6",
            true,
        ),
        ("round(doc.grand_total, 1) == 1500.5", true),
        (r#"int("3") + 1 == 4 and float("1.5") == 1.5"#, true),
        (r#"str(doc.docstatus) == "1""#, true),
        ("bool(doc.discount)", false),
        ("int(doc.grand_total) == 1500", true),
        ("doc.grand_total / 2 == 750.25", true),
        ("doc.docstatus % 2 == 1 and 2 ** 3 == 8", true),
        (
            "-doc.grand_total < 0 and +doc.docstatus == 1 and - - 1 == 1",
            true,
        ),
        (r#"doc.name + "-x" == "SO-0001-x""#, true),
        ("[1] + [2] == [1, 2]", true),
        (
            r#"{"k": doc.status}["k"] == "Approved" and {"k": 1}.get("k") == 1"#,
            true,
        ),
        (
            r#"(1, 2)[1] == 2 and len(()) == 0 and (doc.status,)[0] == "Approved""#,
            true,
        ),
        (
            r#"doc.name[::-1] == "1000-OS" and doc.tags[0:1] == "a""#,
            true,
        ),
        (
            r#"r"a\b" == "a\\b" and "a" "b" == "ab" and "\x41\u00e9\n" == "Aé\n" and 'it\'s' == "it's""#,
            true,
        ),
        (
            "1_000 < doc.grand_total and 1e3 < doc.grand_total and 0x10 == 16",
            true,
        ),
        (
            r#"not (doc.status == "Approved" and doc.docstatus == 1)"#,
            false,
        ),
        (r#"doc.discount or doc.customer == "ACME""#, true),
        (
            "(doc.discount or 5) == 5 and (doc.items[1].qty and 5) == 0",
            true,
        ),
        (
            r#"doc.get("status", "x") != "x" and doc.status.startswith(("Ap", "Op"))"#,
            true,
        ),
        ("-2 ** 2 == -4 and 2 ** 3 ** 2 == 512", true),
        ("doc.grand_total > 1000 > doc.docstatus", true),
        ("doc.docstatus == 1 == True", true),
        (
            r#"doc.tags.split(",")[1] == "b" and doc.tags.split(",", 1) == ["a", "b"]"#,
            true,
        ),
        (r#"str(None) == "None" and str(True) == "True""#, true),
        (r#"doc.items[0].get("qty") == 2"#, true),
    ];

    #[test]
    fn corpus_agrees_with_python() {
        assert!(CORPUS.len() >= 40);
        let mut failures = Vec::new();
        for (src, python) in CORPUS {
            let jinja = tr(src);
            match eval_jinja(&jinja) {
                Ok(v) if v.is_true() == *python => {}
                Ok(v) => failures.push(format!(
                    "{src}\n  -> {jinja}\n  = {v:?}, Python says {python}"
                )),
                Err(e) => failures.push(format!("{src}\n  -> {jinja}\n  failed: {e}")),
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn fragment_soup_never_panics_and_translations_compile() {
        // A deterministic fuzz: random sequences of Python/Jinja fragments. Translation must
        // never panic, and whatever it accepts must compile (and run, within fuel) in
        // minijinja.
        const FRAGMENTS: &[&str] = &[
            "doc",
            ".a",
            ".get(",
            ".split(",
            "(",
            ")",
            "[",
            "]",
            "{",
            "}",
            ",",
            ":",
            " not ",
            " and ",
            " or ",
            " in ",
            " is ",
            "None",
            "True",
            "1",
            "2.5",
            "'x'",
            "\"y\"",
            "-",
            "+",
            "*",
            "**",
            "//",
            "%",
            "==",
            "<",
            " if ",
            " else ",
            "len(",
            "any(",
            "min(",
            "round(",
            "utils.flt(",
            "frappe.utils.cint(",
            "=",
            "|",
            "~",
            "\\",
            "é",
            "\n",
            "#",
            "lambda",
            " for ",
            "__",
            "r'",
            "f'",
            "'''",
            "0x1F",
            "1_0",
            "...",
            ";",
            "@",
        ];
        let mut env = env();
        env.set_fuel(Some(10_000));
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut accepted = 0;
        for _ in 0..100_000 {
            let len = 1 + next() % 12;
            let src: String = (0..len)
                .map(|_| FRAGMENTS[(next() % FRAGMENTS.len() as u64) as usize])
                .collect();
            if let Ok(jinja) = to_jinja(&src) {
                accepted += 1;
                let expr = env
                    .compile_expression(&jinja)
                    .unwrap_or_else(|e| panic!("{src:?} -> {jinja:?} does not compile: {e}"));
                let _ = expr.eval(context! { doc => doc() });
            }
        }
        assert!(
            accepted > 1000,
            "the soup should hit the subset sometimes ({accepted})"
        );
    }
}
