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
//! The approach is a classic front end:
//!
//! 1. [`refuse_dangerous`] scans the raw text for things no condition may mention in any
//!    language (dunder names, `import`, `eval` and friends);
//! 2. a tokenizer turns the text into Python tokens (string escapes, number forms and
//!    string prefixes are decoded here, f-/b-/triple-quoted strings refused);
//! 3. a recursive-descent parser (precedence climbing over Python's operator levels) builds
//!    a small AST, refusing anything outside the subset; its recursion is bounded by
//!    [`MAX_DEPTH`], and so is the height of the tree it builds;
//! 4. the emitter prints the tree as fully parenthesized Jinja, mapping Python builtins to
//!    minijinja filters (`len(x)` becomes `(x|length)`), `frappe.utils.X(...)` to
//!    `utils.X(...)`, tuples to lists and `is None` to the `none` test. Comparison chains
//!    stay chains (minijinja evaluates `a < b < c` as Python does), and methods such as
//!    `.startswith()` stay method calls: the renderer installs
//!    `minijinja_contrib::pycompat::unknown_method_callback`, which implements them. The
//!    output is checked against minijinja's own nesting limit before it is returned.
//!
//! Text that is not Python but may well be Jinja (a `|` filter, `~`, `is defined`,
//! lowercase `true`, `{{ … }}`, or plain Python syntax errors) is reported as
//! [`PyError::NotPython`], so the caller can compile it as Jinja instead.

use std::fmt::{self, Write as _};

/// How deeply a condition may nest. It bounds the parser's recursion (each bracket, call's
/// arguments, subscript, conditional branch and operator operand is one level, so a hostile
/// `((((…` stops here instead of overflowing the stack) and the height of the parsed tree
/// (the emitter recurses over it). 64 is far above any real condition; at 64 levels the
/// parser needs at most about 110 KiB of stack in a release build (about 500 KiB
/// unoptimized), measured on nested calls, its deepest frames.
pub const MAX_DEPTH: usize = 64;

/// The most links in one chained comparison (`a < b < c` has two): a
/// real condition has one or two; minijinja caps a call's arguments, and a
/// chain is one call ([`python_ops::compare`]).
pub const MAX_COMPARE_LINKS: usize = 100;

/// The Jinja test `is None` becomes: true for none and for a field the
/// document does not have, as a Frappe document answers None for a field it
/// lacks (Jinja's own `none` test is false for an undefined value).
pub const NONE_TEST: &str = "none_or_missing";

/// Registers what translated conditions use beyond minijinja's builtins:
/// the `is None` test and Python's own ordering, division, modulo and
/// rounding ([`python_ops`]). Jinja is lenient where Python raises (`None <
/// 5`, `1 / 0`, `"1" < 2` are values there); a Frappe condition that raises
/// sends nothing, so here it is an error, not a webhook that fires.
pub fn install(env: &mut minijinja::Environment<'static>) {
    env.add_test(NONE_TEST, |v: &minijinja::Value| {
        v.is_none() || v.is_undefined()
    });
    env.add_function(python_ops::COMPARE, python_ops::compare);
    env.add_function(python_ops::DIV, python_ops::div);
    env.add_function(python_ops::FLOORDIV, python_ops::floordiv);
    env.add_function(python_ops::MOD, python_ops::modulo);
    env.add_function(python_ops::ROUND, python_ops::round);
}

/// Python's semantics for the operators where Jinja's differ, as functions
/// the translated conditions call.
pub mod python_ops {
    use std::cmp::Ordering;

    use minijinja::value::{Rest, Value, ValueKind};
    use minijinja::{Error, ErrorKind};

    /// `py_compare(a, "<", b, "<=", c)`: a chained ordering comparison.
    pub const COMPARE: &str = "py_compare";
    /// `a / b`.
    pub const DIV: &str = "py_div";
    /// `a // b`.
    pub const FLOORDIV: &str = "py_floordiv";
    /// `a % b`.
    pub const MOD: &str = "py_mod";
    /// `round(x[, n])`.
    pub const ROUND: &str = "py_round";

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
    pub fn compare(args: Rest<Value>) -> Result<bool, Error> {
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
    pub fn div(a: Value, b: Value) -> Result<Value, Error> {
        let (x, y) = operands(&a, &b, "/")?;
        if zero(&y) {
            return Err(fail("division by zero".into()));
        }
        Ok(Value::from(float(&x) / float(&y)))
    }

    /// `a // b`: floored toward negative infinity, as Python does.
    pub fn floordiv(a: Value, b: Value) -> Result<Value, Error> {
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
    pub fn modulo(a: Value, b: Value) -> Result<Value, Error> {
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
    pub fn round(x: Value, digits: Option<i64>) -> Result<Value, Error> {
        let n = num(&x)
            .ok_or_else(|| fail(format!("type {} doesn't define __round__", type_name(&x))))?;
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
}

/// An `and`/`or` chain is emitted flat in groups of at most this many operands, and longer
/// chains as a tree of such groups: minijinja compiles a flat chain into a left-nested tree
/// and recurses over it, so a 7,000-term `a or b or …` emitted flat overflows its stack.
const MAX_FLAT_CHAIN: usize = 8;

/// The deepest bracket nesting the emitted Jinja may have. minijinja 2.24's parser refuses
/// expressions nested more than 150 levels and spends two per bracket (the bracket and the
/// expression inside it); a few levels are kept in reserve. Only pathological conditions
/// (e.g. `any()` nested thirty deep, which emits three brackets per level) come near it.
const MAX_JINJA_BRACKETS: usize = 72;

/// At most this many characters of source are quoted back in an error message.
const MAX_SNIPPET: usize = 60;

/// Names no condition may use, in Python or Jinja (`__import__` is also caught as a dunder).
const DANGEROUS_NAMES: &[&str] = &[
    "__import__",
    "eval",
    "exec",
    "open",
    "compile",
    "getattr",
    "setattr",
    "delattr",
    "globals",
    "locals",
    "vars",
    "breakpoint",
];

/// Python builtins a condition may call; each becomes a minijinja filter (see
/// `emit_builtin`). (Frappe's own `safe_eval` offers only `int`, `float`, `long` and `round`;
/// the others are a convenience.)
const BUILTINS: &[&str] = &[
    "len", "int", "long", "float", "str", "bool", "abs", "round", "min", "max", "sum", "any", "all",
];

/// Methods a condition may call on a value. Each is implemented by minijinja-contrib's
/// `pycompat::unknown_method_callback` (2.24: string methods, `keys`/`values`/`items`/`get`
/// on maps, `count` on lists); `format` is deliberately absent.
const METHODS: &[&str] = &[
    "get",
    "keys",
    "values",
    "items",
    "startswith",
    "endswith",
    "lower",
    "upper",
    "strip",
    "lstrip",
    "rstrip",
    "split",
    "replace",
    "count",
    "find",
    "title",
    "capitalize",
    "isdigit",
    "isalpha",
    "isalnum",
    "join",
];

/// Python keywords that begin a statement: never part of an expression.
const STATEMENT_KEYWORDS: &[&str] = &[
    "return", "def", "class", "del", "pass", "raise", "global", "nonlocal", "assert", "with",
    "while", "try", "except", "finally", "break", "continue", "elif", "from", "async", "import",
];

/// Python's reserved words (none of them can be a name or an attribute).
const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// Python operators and delimiters, longest first so the tokenizer matches greedily.
const OPERATORS: &[&str] = &[
    "**=", "//=", ">>=", "<<=", "...", "**", "//", "==", "!=", "<=", ">=", "<>", "<<", ">>", ":=",
    "->", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "@=", "+", "-", "*", "/", "%", "<", ">",
    "=", "(", ")", "[", "]", "{", "}", ",", ":", ".", ";", "@", "&", "|", "^", "~",
];

/// Why a condition could not be translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PyError {
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
pub fn to_jinja(src: &str) -> Result<String, PyError> {
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

/// Constructs refused wherever they appear, checked on the whole token stream before
/// parsing so the message names them rather than whatever error parsing meets first:
/// comprehensions (named by their brackets), `lambda`, `yield`, `await`.
fn refuse_anywhere(src: &str, tokens: &[Token<'_>]) -> Result<(), PyError> {
    // Open brackets, each with whether a `:` was seen directly inside it (a dict).
    let mut open: Vec<(&str, bool)> = Vec::new();
    for token in tokens {
        match &token.tok {
            Tok::Op(bracket @ ("(" | "[" | "{")) => open.push((bracket, false)),
            Tok::Op(")" | "]" | "}") => {
                open.pop();
            }
            Tok::Op(":") => {
                if let Some(top) = open.last_mut() {
                    top.1 = true;
                }
            }
            Tok::Name("for") => {
                let what = match open.last() {
                    Some(("[", _)) => "a list comprehension",
                    Some(("(", _)) => "a generator expression",
                    Some((_, true)) => "a dict comprehension",
                    Some((_, false)) => "a set comprehension",
                    None => "a comprehension (`for` inside an expression)",
                };
                return Err(refused(src, token.start, format!("{what} is not allowed")));
            }
            Tok::Name(word @ ("lambda" | "yield" | "await")) => {
                return Err(refused(src, token.start, format!("{word} is not allowed")));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The deepest nesting of brackets in emitted Jinja (string literals skipped).
fn bracket_depth(jinja: &str) -> usize {
    let b = jinja.as_bytes();
    let (mut depth, mut deepest, mut i) = (0usize, 0usize, 0);
    while i < b.len() {
        match b[i] {
            b'"' => {
                i = skip_quoted(b, i);
                continue;
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    deepest
}

/// Refusals that hold whatever the language (run on Jinja conditions too): dunder identifiers anywhere
/// outside string literals, the `import` keyword, names `__import__`, `eval`, `exec`, `open`, `compile`, `getattr`, `setattr`, `globals`, `locals`, `vars`, `breakpoint`.
///
/// Details: an identifier counts as a dunder when it contains `__` (older Frappe's `safe_eval`
/// rejected `__` anywhere; current Frappe refuses names starting with `_`); `delattr` joins the list of names; and those names are refused as
/// names, not as attributes, so a field such as `doc.open` stays usable. String literals
/// (single or double quoted, with backslash escapes) are skipped, so `doc["__x"]` is data.
pub fn refuse_dangerous(src: &str) -> Result<(), PyError> {
    let b = src.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'\'' || c == b'"' {
            i = skip_quoted(b, i);
        } else if c.is_ascii_alphanumeric() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let word = &src[start..i];
            if word == "import" {
                return Err(refused(src, start, "an import is not allowed"));
            }
            if DANGEROUS_NAMES.contains(&word) && !follows_dot(b, start) {
                return Err(refused(
                    src,
                    start,
                    format!("`{word}` is not a function a condition may call"),
                ));
            }
            if word.contains("__") {
                return Err(refused(
                    src,
                    start,
                    format!(
                        "`{}`: dunder names such as `__class__` are not allowed",
                        snippet(word)
                    ),
                ));
            }
        } else {
            i += 1;
        }
    }
    Ok(())
}

/// Index just past the string literal opening at `b[start]` (or the end of the input).
fn skip_quoted(b: &[u8], start: usize) -> usize {
    let quote = b[start];
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// Whether the word at `b[start]` is an attribute, i.e. follows a `.` (spaces allowed).
fn follows_dot(b: &[u8], start: usize) -> bool {
    b[..start].iter().rev().find(|c| !c.is_ascii_whitespace()) == Some(&b'.')
}

// ---------------------------------------------------------------------------------------
// Errors and positions
// ---------------------------------------------------------------------------------------

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

fn refused(src: &str, offset: usize, msg: impl fmt::Display) -> PyError {
    PyError::Refused(format!("{}: {msg}", position(src, offset)))
}

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

// ---------------------------------------------------------------------------------------
// Tokenizer
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Tok<'a> {
    Name(&'a str),
    /// An integer, already in decimal without underscores.
    Int(String),
    /// A float, already in the form minijinja's lexer reads back (`1.0`, `1e300`).
    Float(String),
    /// A string literal's value (escapes decoded).
    Str(String),
    Op(&'static str),
    End,
}

#[derive(Debug, Clone)]
struct Token<'a> {
    tok: Tok<'a>,
    start: usize,
    end: usize,
}

fn tokenize(src: &str) -> Result<Vec<Token<'_>>, PyError> {
    let mut lexer = Lexer {
        src,
        b: src.as_bytes(),
        i: 0,
    };
    let mut tokens = Vec::new();
    loop {
        lexer.skip_trivia()?;
        let start = lexer.i;
        if start >= lexer.b.len() {
            tokens.push(Token {
                tok: Tok::End,
                start,
                end: start,
            });
            return Ok(tokens);
        }
        let tok = lexer.token()?;
        tokens.push(Token {
            tok,
            start,
            end: lexer.i,
        });
    }
}

struct Lexer<'a> {
    src: &'a str,
    b: &'a [u8],
    i: usize,
}

fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

impl<'a> Lexer<'a> {
    fn at(&self, i: usize) -> u8 {
        self.b.get(i).copied().unwrap_or(0)
    }

    /// Skips whitespace, `#` comments and backslash line continuations.
    fn skip_trivia(&mut self) -> Result<(), PyError> {
        while self.i < self.b.len() {
            match self.b[self.i] {
                b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' => self.i += 1,
                b'#' => {
                    while self.i < self.b.len() && self.b[self.i] != b'\n' {
                        self.i += 1;
                    }
                }
                b'\\' if self.at(self.i + 1) == b'\n' => self.i += 2,
                b'\\' if self.at(self.i + 1) == b'\r' => {
                    self.i += if self.at(self.i + 2) == b'\n' { 3 } else { 2 };
                }
                b'\\' => {
                    return Err(not_python(self.src, self.i, "a backslash outside a string"));
                }
                _ => break,
            }
        }
        Ok(())
    }

    fn token(&mut self) -> Result<Tok<'a>, PyError> {
        let start = self.i;
        let c = self.b[start];
        if c.is_ascii_digit() || (c == b'.' && self.at(start + 1).is_ascii_digit()) {
            return self.number();
        }
        if c == b'\'' || c == b'"' {
            return self.string(start, "");
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while self.i < self.b.len() && is_ident_byte(self.b[self.i]) {
                self.i += 1;
            }
            let word = &self.src[start..self.i];
            let quote = self.at(self.i);
            if (quote == b'\'' || quote == b'"')
                && matches!(
                    word.to_ascii_lowercase().as_str(),
                    "r" | "u" | "f" | "b" | "br" | "rb" | "fr" | "rf"
                )
            {
                return self.string(start, word);
            }
            return Ok(Tok::Name(word));
        }
        if c == b'{' && matches!(self.at(start + 1), b'{' | b'%' | b'#') {
            let tag = &self.src[start..start + 2];
            return Err(not_python(
                self.src,
                start,
                format!("`{tag}` opens a Jinja tag; a condition is a bare expression"),
            ));
        }
        if c >= 0x80 {
            return Err(refused(
                self.src,
                start,
                "non-ASCII characters are allowed only inside strings",
            ));
        }
        let rest = &self.src[start..];
        if let Some(op) = OPERATORS.iter().find(|op| rest.starts_with(**op)) {
            self.i += op.len();
            return Ok(Tok::Op(op));
        }
        let hint = if c == b'!' {
            "; Python negates with `not`"
        } else {
            ""
        };
        Err(not_python(
            self.src,
            start,
            format!("unexpected character `{}`{hint}", c as char),
        ))
    }

    /// Digits of `radix` with single underscores between them; returns them without the
    /// underscores, or `None` when the underscores are misplaced.
    fn digits(&mut self, radix: u32, allow_leading_underscore: bool) -> Option<String> {
        let mut out = String::new();
        let mut last_underscore = false;
        let mut first = true;
        while self.i < self.b.len() {
            let c = self.b[self.i];
            if c == b'_' {
                if last_underscore || (first && !allow_leading_underscore) {
                    return None;
                }
                last_underscore = true;
            } else if (c as char).is_digit(radix) {
                out.push(c as char);
                last_underscore = false;
            } else {
                break;
            }
            first = false;
            self.i += 1;
        }
        (!last_underscore).then_some(out)
    }

    fn number(&mut self) -> Result<Tok<'a>, PyError> {
        let start = self.i;
        let bad = |lx: &Self| not_python(lx.src, start, "invalid number literal");
        let radix = match (self.b[start], self.at(start + 1)) {
            (b'0', b'x' | b'X') => 16,
            (b'0', b'o' | b'O') => 8,
            (b'0', b'b' | b'B') => 2,
            _ => 10,
        };
        if radix != 10 {
            self.i += 2;
            let digits = self.digits(radix, true).ok_or_else(|| bad(self))?;
            if digits.is_empty() || is_ident_byte(self.at(self.i)) {
                return Err(bad(self));
            }
            return match u128::from_str_radix(&digits, radix) {
                Ok(v) => Ok(Tok::Int(v.to_string())),
                Err(_) => Err(refused(self.src, start, "integer literal too large")),
            };
        }
        let int_part = self.digits(10, false).ok_or_else(|| bad(self))?;
        let mut text = int_part.clone();
        let mut is_float = false;
        if self.at(self.i) == b'.' {
            is_float = true;
            self.i += 1;
            let frac = self.digits(10, false).ok_or_else(|| bad(self))?;
            text.push('.');
            text.push_str(&frac);
        }
        let exp_sign = matches!(self.at(self.i + 1), b'+' | b'-');
        let exp_digit = self.at(self.i + if exp_sign { 2 } else { 1 });
        if matches!(self.at(self.i), b'e' | b'E') && exp_digit.is_ascii_digit() {
            is_float = true;
            text.push('e');
            if exp_sign {
                text.push(self.b[self.i + 1] as char);
            }
            self.i += if exp_sign { 2 } else { 1 };
            let exp = self.digits(10, false).ok_or_else(|| bad(self))?;
            text.push_str(&exp);
        }
        if matches!(self.at(self.i), b'j' | b'J') {
            return Err(refused(self.src, start, "complex numbers are not allowed"));
        }
        if self.at(self.i) == b'_' {
            return Err(bad(self));
        }
        if !is_float {
            if int_part.len() > 1
                && int_part.starts_with('0')
                && int_part.bytes().any(|c| c != b'0')
            {
                return Err(not_python(
                    self.src,
                    start,
                    "leading zeros in a decimal integer are not allowed in Python",
                ));
            }
            return match int_part.parse::<u128>() {
                Ok(v) => Ok(Tok::Int(v.to_string())),
                Err(_) => Err(refused(self.src, start, "integer literal too large")),
            };
        }
        // Rust's float parser wants digits on both sides of the point.
        if text.starts_with('.') {
            text.insert(0, '0');
        }
        if let Some(p) = text.find('.') {
            if !text[p + 1..].starts_with(|c: char| c.is_ascii_digit()) {
                text.insert(p + 1, '0');
            }
        }
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Tok::Float(format!("{v:?}"))),
            _ => Err(refused(self.src, start, "float literal out of range")),
        }
    }

    /// A string literal whose prefix (possibly empty) starts at `start` and whose quote is
    /// at `self.i`.
    fn string(&mut self, start: usize, prefix: &str) -> Result<Tok<'a>, PyError> {
        let prefix = prefix.to_ascii_lowercase();
        if prefix.contains('f') {
            return Err(refused(self.src, start, "an f-string is not allowed"));
        }
        if prefix.contains('b') {
            return Err(refused(
                self.src,
                start,
                "a bytes literal (b\"…\") is not allowed",
            ));
        }
        let raw = prefix.contains('r');
        let quote = self.b[self.i];
        if self.at(self.i + 1) == quote && self.at(self.i + 2) == quote {
            return Err(refused(
                self.src,
                start,
                "a triple-quoted string is not allowed",
            ));
        }
        self.i += 1;
        let mut out = String::new();
        loop {
            let Some(&c) = self.b.get(self.i) else {
                return Err(not_python(self.src, start, "unterminated string"));
            };
            if c == quote {
                self.i += 1;
                return Ok(Tok::Str(out));
            }
            if c == b'\n' || c == b'\r' {
                return Err(not_python(
                    self.src,
                    start,
                    "unterminated string (a line ends inside it)",
                ));
            }
            if c == b'\\' {
                if raw {
                    // A raw string keeps the backslash and the character after it, which
                    // therefore cannot end the string.
                    out.push('\\');
                    self.i += 1;
                    if let Some(ch) = self.src[self.i..].chars().next() {
                        out.push(ch);
                        self.i += ch.len_utf8();
                    }
                } else {
                    self.escape(&mut out)?;
                }
                continue;
            }
            let ch = self.src[self.i..].chars().next().unwrap_or('\0');
            out.push(ch);
            self.i += ch.len_utf8();
        }
    }

    /// Decodes the escape sequence at `self.i` (a backslash) into `out`.
    fn escape(&mut self, out: &mut String) -> Result<(), PyError> {
        let start = self.i;
        self.i += 1;
        let Some(&c) = self.b.get(self.i) else {
            return Err(not_python(self.src, start, "unterminated string"));
        };
        self.i += 1;
        let simple = match c {
            b'\n' => Some(None),
            b'\r' => {
                if self.at(self.i) == b'\n' {
                    self.i += 1;
                }
                Some(None)
            }
            b'\\' => Some(Some('\\')),
            b'\'' => Some(Some('\'')),
            b'"' => Some(Some('"')),
            b'a' => Some(Some('\x07')),
            b'b' => Some(Some('\x08')),
            b'f' => Some(Some('\x0c')),
            b'n' => Some(Some('\n')),
            b'r' => Some(Some('\r')),
            b't' => Some(Some('\t')),
            b'v' => Some(Some('\x0b')),
            _ => None,
        };
        if let Some(ch) = simple {
            out.extend(ch);
            return Ok(());
        }
        let hex = |lx: &mut Self, n: usize, what: &str| -> Result<u32, PyError> {
            let digits = lx.src.get(lx.i..lx.i + n).unwrap_or("");
            if digits.len() != n || !digits.bytes().all(|d| d.is_ascii_hexdigit()) {
                return Err(not_python(
                    lx.src,
                    start,
                    format!("truncated `\\{what}` escape"),
                ));
            }
            lx.i += n;
            Ok(u32::from_str_radix(digits, 16).unwrap_or(0))
        };
        let code = match c {
            b'0'..=b'7' => {
                let mut v = u32::from(c - b'0');
                for _ in 0..2 {
                    match self.at(self.i) {
                        d @ b'0'..=b'7' => {
                            v = v * 8 + u32::from(d - b'0');
                            self.i += 1;
                        }
                        _ => break,
                    }
                }
                v
            }
            b'x' => hex(self, 2, "x")?,
            b'u' => hex(self, 4, "u")?,
            b'U' => hex(self, 8, "U")?,
            b'N' => {
                return Err(refused(
                    self.src,
                    start,
                    "named escapes (`\\N{…}`) are not supported",
                ));
            }
            _ => {
                // Python keeps unknown escapes verbatim.
                self.i -= 1;
                let ch = self.src[self.i..].chars().next().unwrap_or('\0');
                self.i += ch.len_utf8();
                out.push('\\');
                out.push(ch);
                return Ok(());
            }
        };
        match char::from_u32(code) {
            Some(ch) => {
                out.push(ch);
                Ok(())
            }
            None if (0xD800..0xE000).contains(&code) => Err(refused(
                self.src,
                start,
                "a surrogate escape is not allowed (it is not a character)",
            )),
            None => Err(not_python(
                self.src,
                start,
                "escape beyond the last Unicode character",
            )),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Syntax tree
// ---------------------------------------------------------------------------------------

#[derive(Debug)]
struct Node {
    /// Boxed to keep `Node` (and so each recursive parser frame) small.
    kind: Box<Kind>,
    /// Height of the tree under this node (leaves are 0); bounded by [`MAX_DEPTH`].
    height: usize,
}

#[derive(Debug)]
enum Kind {
    Doc,
    Int(String),
    Float(String),
    Str(String),
    Bool(bool),
    NoneLit,
    /// A list, or a tuple (minijinja has no tuples).
    List(Vec<Node>),
    Dict(Vec<(Node, Node)>),
    Attr(Box<Node>, String),
    Index(Box<Node>, Box<Node>),
    Slice(Box<Node>, [Option<Box<Node>>; 3]),
    Method(Box<Node>, String, Vec<Node>),
    /// `utils.NAME(args, key=value)`.
    Util(String, Vec<Node>, Kwargs),
    Builtin(&'static str, Vec<Node>),
    Not(Box<Node>),
    Neg(Box<Node>),
    Pos(Box<Node>),
    /// Arithmetic: `+ - * / // % **`.
    Binary(&'static str, Box<Node>, Box<Node>),
    /// A (possibly chained) comparison: `a < b <= c`.
    Compare(Box<Node>, Vec<(&'static str, Node)>),
    /// `x is None` (false) / `x is not None` (true).
    IsNone(Box<Node>, bool),
    /// `and` / `or` over two or more operands.
    BoolOp(&'static str, Vec<Node>),
    /// `body if test else orelse`.
    IfElse(Box<Node>, Box<Node>, Box<Node>),
}

/// Levels of brackets an `and`/`or` chain of `n` operands is emitted with.
fn chain_levels(n: usize) -> usize {
    let mut levels = 1;
    let mut capacity = MAX_FLAT_CHAIN;
    while capacity < n {
        capacity = capacity.saturating_mul(MAX_FLAT_CHAIN);
        levels += 1;
    }
    levels
}

impl Kind {
    /// Height of a node of this kind, from its direct children's heights.
    fn height(&self) -> usize {
        fn max<'n>(nodes: impl IntoIterator<Item = &'n Node>) -> usize {
            nodes.into_iter().map(|n| n.height).max().unwrap_or(0)
        }
        match self {
            Kind::Doc
            | Kind::Int(_)
            | Kind::Float(_)
            | Kind::Str(_)
            | Kind::Bool(_)
            | Kind::NoneLit => 0,
            Kind::List(items) | Kind::Builtin(_, items) => 1 + max(items),
            Kind::Dict(pairs) => 1 + max(pairs.iter().flat_map(|(k, v)| [k, v])),
            Kind::Attr(x, _) | Kind::Not(x) | Kind::Neg(x) | Kind::Pos(x) | Kind::IsNone(x, _) => {
                1 + x.height
            }
            Kind::Index(a, b) | Kind::Binary(_, a, b) => 1 + a.height.max(b.height),
            Kind::Slice(x, parts) => 1 + x.height.max(max(parts.iter().flatten().map(|b| &**b))),
            Kind::Method(x, _, args) => 1 + x.height.max(max(args)),
            Kind::Util(_, args, kwargs) => 1 + max(args).max(max(kwargs.iter().map(|(_, v)| v))),
            Kind::Compare(x, ops) => 1 + x.height.max(max(ops.iter().map(|(_, v)| v))),
            Kind::BoolOp(_, items) => chain_levels(items.len()) + max(items),
            Kind::IfElse(a, b, c) => 1 + a.height.max(b.height).max(c.height),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Parser: precedence climbing over Python's operator levels
// ---------------------------------------------------------------------------------------

/// Binding levels of Python's operators, loosest first (`not` is a prefix operator that
/// binds between `and` and the comparisons; unary `-`/`+` bind tighter than `*` but looser
/// than `**`).
mod level {
    pub const OR: u8 = 1;
    pub const AND: u8 = 2;
    pub const NOT: u8 = 3;
    pub const CMP: u8 = 4;
    pub const ARITH: u8 = 5;
    pub const TERM: u8 = 6;
    pub const UNARY: u8 = 7;
}

struct Parser<'a> {
    src: &'a str,
    tokens: Vec<Token<'a>>,
    pos: usize,
    /// Current recursion depth (brackets, arguments, branches, operands); bounded by
    /// [`MAX_DEPTH`].
    depth: usize,
}

type Parsed = Result<Node, PyError>;

/// Keyword arguments of a call, in order.
type Kwargs = Vec<(String, Node)>;

impl<'a> Parser<'a> {
    fn peek(&self) -> &Tok<'a> {
        &self.tokens[self.pos].tok
    }

    fn peek_next(&self) -> &Tok<'a> {
        self.peek_at(1)
    }

    /// The token `n` places ahead (the final `End` if that is past the end).
    fn peek_at(&self, n: usize) -> &Tok<'a> {
        &self.tokens[(self.pos + n).min(self.tokens.len() - 1)].tok
    }

    fn start(&self) -> usize {
        self.tokens[self.pos].start
    }

    fn bump(&mut self) {
        if self.pos + 1 < self.tokens.len() {
            self.pos += 1;
        }
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Tok::Op(o) if *o == op)
    }

    fn is_name(&self, name: &str) -> bool {
        matches!(self.peek(), Tok::Name(n) if *n == name)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        let found = self.is_op(op);
        if found {
            self.bump();
        }
        found
    }

    fn expect_op(&mut self, op: &str) -> Result<(), PyError> {
        if self.eat_op(op) {
            Ok(())
        } else {
            Err(self.unexpected())
        }
    }

    #[cold]
    #[inline(never)]
    fn refused(&self, offset: usize, msg: impl fmt::Display) -> PyError {
        refused(self.src, offset, msg)
    }

    #[cold]
    #[inline(never)]
    fn not_python(&self, offset: usize, msg: impl fmt::Display) -> PyError {
        not_python(self.src, offset, msg)
    }

    /// Builds a node, refusing trees higher than [`MAX_DEPTH`].
    fn node(&self, kind: Kind, start: usize) -> Parsed {
        let height = kind.height();
        if height > MAX_DEPTH {
            return Err(self.refused(start, format!("nested deeper than {MAX_DEPTH} levels")));
        }
        Ok(Node {
            kind: Box::new(kind),
            height,
        })
    }

    /// Runs `f` one nesting level deeper, refusing beyond [`MAX_DEPTH`].
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, PyError>) -> Result<T, PyError> {
        if self.depth >= MAX_DEPTH {
            return Err(self.refused(
                self.start(),
                format!("nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        self.depth += 1;
        let result = f(self);
        self.depth -= 1;
        result
    }

    /// The error for the current token, which the grammar does not expect here. Tokens that
    /// are Python outside the subset are refused; Jinja-looking ones are `NotPython`.
    #[cold]
    #[inline(never)]
    fn unexpected(&self) -> PyError {
        let at = self.start();
        match self.peek() {
            Tok::End => self.not_python(at, "unexpected end of the condition"),
            Tok::Op("=") => {
                self.refused(at, "assignment with `=` is not allowed (compare with `==`)")
            }
            Tok::Op(
                op @ ("+=" | "-=" | "*=" | "/=" | "//=" | "%=" | "**=" | "&=" | "|=" | "^=" | "<<="
                | ">>=" | "@="),
            ) => self.refused(
                at,
                format!("the augmented assignment `{op}` is not allowed"),
            ),
            Tok::Op(";") => self.refused(
                at,
                "a semicolon is not allowed: a condition is one expression",
            ),
            Tok::Op(":=") => self.refused(at, "the walrus operator `:=` is not allowed"),
            Tok::Op(op @ ("&" | "^" | "<<" | ">>")) => {
                self.refused(at, format!("the bitwise operator `{op}` is not allowed"))
            }
            Tok::Op("@") => self.refused(at, "the `@` operator is not allowed"),
            Tok::Op("<>") => self.refused(at, "`<>` is not allowed; use `!=`"),
            Tok::Op("...") => self.refused(at, "`...` (Ellipsis) is not allowed"),
            Tok::Op("*" | "**") => self.refused(
                at,
                "starred expressions such as `*args` and `**kwargs` are not allowed",
            ),
            Tok::Op("|") => self.not_python(
                at,
                "`|` is a Jinja filter here (Python would read a bitwise or)",
            ),
            Tok::Op("~") => self.not_python(at, "`~` is Jinja string concatenation"),
            Tok::Op(op) => self.not_python(at, format!("unexpected `{op}`")),
            Tok::Name(name) => match keyword_refusal(name) {
                Some(msg) => self.refused(at, msg),
                None => self.not_python(at, format!("unexpected `{name}`")),
            },
            Tok::Int(_) | Tok::Float(_) | Tok::Str(_) => self.not_python(at, "unexpected literal"),
        }
    }

    fn parse_condition(mut self) -> Parsed {
        if matches!(self.peek(), Tok::End) {
            return Err(PyError::Refused("empty condition".into()));
        }
        let tree = self.parse_test()?;
        match self.peek() {
            Tok::End => Ok(tree),
            Tok::Op(",") => Err(self.refused(
                self.start(),
                "multiple expressions separated by `,` are not allowed: a condition is one expression",
            )),
            _ => Err(self.unexpected()),
        }
    }

    /// A full expression inside brackets, arguments or a branch: one level deeper.
    fn nested_test(&mut self) -> Parsed {
        self.nested(Self::parse_test)
    }

    /// `body if test else orelse`, or just `body`.
    fn parse_test(&mut self) -> Parsed {
        let start = self.start();
        let body = self.parse_binary(level::OR)?;
        if !self.is_name("if") {
            return Ok(body);
        }
        self.bump();
        let test = self.nested(|p| p.parse_binary(level::OR))?;
        if !self.is_name("else") {
            return Err(self.not_python(
                self.start(),
                "a conditional expression needs `else` in Python (`x if c else y`)",
            ));
        }
        self.bump();
        let orelse = self.nested_test()?;
        self.node(
            Kind::IfElse(Box::new(body), Box::new(test), Box::new(orelse)),
            start,
        )
    }

    /// The binding level of the infix operator at the current token, if it is one.
    fn infix_level(&self) -> Option<u8> {
        Some(match self.peek() {
            Tok::Name("or") => level::OR,
            Tok::Name("and") => level::AND,
            Tok::Name("in" | "is") => level::CMP,
            Tok::Name("not") if matches!(self.peek_next(), Tok::Name("in")) => level::CMP,
            Tok::Op("==" | "!=" | "<" | ">" | "<=" | ">=" | "<>") => level::CMP,
            Tok::Op("+" | "-") => level::ARITH,
            Tok::Op("*" | "/" | "//" | "%") => level::TERM,
            _ => return None,
        })
    }

    /// Precedence climbing: an operand, then every infix operator binding at least as
    /// tightly as `min`. Each operator's right-hand side counts as one nesting level, so
    /// the stack used per level stays a handful of frames whatever the operators.
    fn parse_binary(&mut self, min: u8) -> Parsed {
        let start = self.start();
        let mut lhs = self.parse_unary(min)?;
        while let Some(level) = self.infix_level() {
            if level < min {
                break;
            }
            lhs = self.nested(|p| p.parse_infix(lhs, level, start))?;
        }
        Ok(lhs)
    }

    /// The operator at the current token (of `level`) and its right-hand side(s).
    fn parse_infix(&mut self, lhs: Node, level: u8, start: usize) -> Parsed {
        match level {
            level::OR | level::AND => {
                // `a or b or c` is one n-ary node, collected in a loop.
                let op = if level == level::OR { "or" } else { "and" };
                let mut items = vec![lhs];
                while self.is_name(op) {
                    self.bump();
                    items.push(self.parse_binary(level + 1)?);
                }
                self.node(Kind::BoolOp(op, items), start)
            }
            level::CMP => self.parse_comparison(lhs, start),
            _ => {
                let at = self.start();
                let op = match self.peek() {
                    Tok::Op(op) => *op,
                    _ => return Err(self.unexpected()),
                };
                if op == "%" && matches!(*lhs.kind, Kind::Str(_)) {
                    return Err(self.refused(at, "string formatting with `%` is not allowed"));
                }
                self.bump();
                let rhs = self.parse_binary(level + 1)?;
                self.node(Kind::Binary(op, Box::new(lhs), Box::new(rhs)), start)
            }
        }
    }

    /// A comparison chain starting at the current operator: `a < b <= c`, `a in b`,
    /// `a is None`.
    fn parse_comparison(&mut self, first: Node, start: usize) -> Parsed {
        // (operator, its offset, right operand; `None` for `is None` / `is not None`)
        let mut ops: Vec<(&'static str, usize, Option<Node>)> = Vec::new();
        loop {
            let at = self.start();
            let op = match self.peek() {
                Tok::Op(op @ ("==" | "!=" | "<" | ">" | "<=" | ">=")) => *op,
                Tok::Op("<>") => return Err(self.unexpected()),
                Tok::Name("in") => "in",
                Tok::Name("not") if matches!(self.peek_next(), Tok::Name("in")) => {
                    self.bump();
                    "not in"
                }
                Tok::Name("is") => {
                    self.bump();
                    let negated = self.is_name("not");
                    if negated {
                        self.bump();
                    }
                    if !self.is_name("None") {
                        return Err(self.bad_is(at, negated));
                    }
                    self.bump();
                    ops.push((if negated { "is not" } else { "is" }, at, None));
                    continue;
                }
                _ => break,
            };
            self.bump();
            let rhs = self.parse_binary(level::ARITH)?;
            ops.push((op, at, Some(rhs)));
        }
        if ops.len() > 1 {
            if let Some((_, at, _)) = ops.iter().find(|(_, _, rhs)| rhs.is_none()) {
                return Err(self.refused(
                    *at,
                    "`is None` cannot be chained with other comparisons; join them with `and`",
                ));
            }
        }
        if ops.len() > MAX_COMPARE_LINKS {
            return Err(self.refused(
                start,
                format!("a comparison chain of more than {MAX_COMPARE_LINKS} links"),
            ));
        }
        if let [(op, _, None)] = ops.as_slice() {
            return self.node(Kind::IsNone(Box::new(first), *op == "is not"), start);
        }
        let ops = ops
            .into_iter()
            .filter_map(|(op, _, rhs)| Some((op, rhs?)))
            .collect();
        self.node(Kind::Compare(Box::new(first), ops), start)
    }

    /// The error for `is` (at `at`) followed by something other than `None`.
    #[cold]
    #[inline(never)]
    fn bad_is(&self, at: usize, negated: bool) -> PyError {
        let shown = if negated { "is not" } else { "is" };
        match self.peek() {
            Tok::Name(test)
                if test.starts_with(|c: char| c.is_ascii_lowercase())
                    && !matches!(*test, "doc" | "utils" | "frappe")
                    && !KEYWORDS.contains(test) =>
            {
                self.not_python(at, format!("`{shown} {test}` is a Jinja test, not Python"))
            }
            _ => self.refused(at, "`is` compares only with None here; use `==`"),
        }
    }

    /// Prefix operators: `not` (when `min` allows it), then unary `-`/`+` (loops, so long
    /// runs cost no recursion), then a power `base ** exponent`.
    fn parse_unary(&mut self, min: u8) -> Parsed {
        if min <= level::NOT && self.is_name("not") {
            let mut nots = Vec::new();
            while self.is_name("not") {
                nots.push(self.start());
                self.bump();
            }
            let mut expr = self.nested(|p| p.parse_binary(level::CMP))?;
            for start in nots.into_iter().rev() {
                expr = self.node(Kind::Not(Box::new(expr)), start)?;
            }
            return Ok(expr);
        }
        let mut signs = Vec::new();
        loop {
            match self.peek() {
                Tok::Op(op @ ("-" | "+")) => signs.push((*op == "-", self.start())),
                Tok::Op("~") => {
                    return Err(
                        self.refused(self.start(), "the bitwise operator `~` is not allowed")
                    );
                }
                _ => break,
            }
            self.bump();
        }
        let start = self.start();
        let mut expr = self.parse_postfix()?;
        if self.eat_op("**") {
            // Right-associative, and the exponent may carry a sign: `2 ** -1`.
            let exponent = self.nested(|p| p.parse_unary(level::UNARY))?;
            expr = self.node(
                Kind::Binary("**", Box::new(expr), Box::new(exponent)),
                start,
            )?;
        }
        for (negative, start) in signs.into_iter().rev() {
            let kind = if negative {
                Kind::Neg(Box::new(expr))
            } else {
                Kind::Pos(Box::new(expr))
            };
            expr = self.node(kind, start)?;
        }
        Ok(expr)
    }

    /// An atom followed by `.name`, `.method(…)` and `[…]`.
    fn parse_postfix(&mut self) -> Parsed {
        let start = self.start();
        let mut expr = self.parse_atom()?;
        loop {
            expr = match self.peek() {
                Tok::Op(".") => self.parse_member(expr, start)?,
                Tok::Op("[") => self.parse_subscript(expr, start)?,
                Tok::Op("(") => return Err(self.not_callable(start)),
                _ => return Ok(expr),
            };
        }
    }

    /// At `.`: an attribute `.name`, or a method call `.name(args)`.
    fn parse_member(&mut self, base: Node, start: usize) -> Parsed {
        self.bump();
        let name_at = self.start();
        let name = match self.peek() {
            Tok::Name(name) if !KEYWORDS.contains(name) => *name,
            _ => return Err(self.unexpected()),
        };
        self.bump();
        if !self.is_op("(") {
            return self.node(Kind::Attr(Box::new(base), name.to_string()), start);
        }
        if !METHODS.contains(&name) {
            return Err(self.bad_method(start, name_at, name, false));
        }
        let (args, kwargs) = self.parse_args()?;
        if !kwargs.is_empty() {
            return Err(self.bad_method(start, name_at, name, true));
        }
        self.node(Kind::Method(Box::new(base), name.to_string(), args), start)
    }

    /// The error for method `name` (at `name_at`, on what starts at `start`): one a
    /// condition may not call, or (`kwargs`) one called with keyword arguments.
    #[cold]
    #[inline(never)]
    fn bad_method(&self, start: usize, name_at: usize, name: &str, kwargs: bool) -> PyError {
        if kwargs {
            return self.refused(
                name_at,
                format!(
                    "`{name}(…=…)`: keyword arguments are allowed only in `utils.NAME(...)` calls"
                ),
            );
        }
        let shown = snippet(&self.src[start..self.tokens[self.pos - 1].end]);
        self.refused(
            name_at,
            format!("`{shown}()`: {name} is not a method a condition may call"),
        )
    }

    /// The error for calling what starts at `start` and ends before the current `(`.
    #[cold]
    #[inline(never)]
    fn not_callable(&self, start: usize) -> PyError {
        let shown = snippet(&self.src[start..self.tokens[self.pos - 1].end]);
        self.refused(
            self.start(),
            format!(
                "`{shown}` cannot be called: a condition calls only builtins such as \
                 `len`, `utils.NAME(...)` and methods such as `.startswith()`"
            ),
        )
    }

    /// At `[`: an index or a slice, up to and including `]`.
    fn parse_subscript(&mut self, base: Node, start: usize) -> Parsed {
        self.bump();
        let mut parts: [Option<Box<Node>>; 3] = [None, None, None];
        let mut is_slice = false;
        if !self.is_op(":") {
            parts[0] = Some(Box::new(self.nested_test()?));
        }
        if self.eat_op(":") {
            is_slice = true;
            if !self.is_op(":") && !self.is_op("]") {
                parts[1] = Some(Box::new(self.nested_test()?));
            }
            if self.eat_op(":") && !self.is_op("]") {
                parts[2] = Some(Box::new(self.nested_test()?));
            }
        }
        if self.is_op(",") {
            return Err(self.refused(
                self.start(),
                "a tuple subscript such as `x[a, b]` is not allowed",
            ));
        }
        self.expect_op("]")?;
        if is_slice {
            return self.node(Kind::Slice(Box::new(base), parts), start);
        }
        match parts[0].take() {
            Some(index) => self.node(Kind::Index(Box::new(base), index), start),
            None => Err(self.unexpected()),
        }
    }

    /// `( args )` at the current `(`: positional arguments, then keyword arguments.
    fn parse_args(&mut self) -> Result<(Vec<Node>, Kwargs), PyError> {
        self.expect_op("(")?;
        let mut args = Vec::new();
        let mut kwargs: Kwargs = Vec::new();
        loop {
            if self.eat_op(")") {
                return Ok((args, kwargs));
            }
            let at = self.start();
            if self.is_op("*") || self.is_op("**") {
                return Err(self.refused(
                    at,
                    "starred arguments such as `*args` and `**kwargs` are not allowed",
                ));
            }
            match (self.peek(), self.peek_next()) {
                (Tok::Name(key), Tok::Op("=")) => {
                    let key = *key;
                    if let Some(err) = self.check_kwarg(key, &kwargs) {
                        return Err(err);
                    }
                    self.bump();
                    self.bump();
                    let value = self.nested_test()?;
                    kwargs.push((key.to_string(), value));
                }
                _ => {
                    if !kwargs.is_empty() {
                        return Err(
                            self.not_python(at, "a positional argument follows a keyword argument")
                        );
                    }
                    args.push(self.nested_test()?);
                }
            }
            if !self.eat_op(",") && !self.is_op(")") {
                return Err(self.unexpected());
            }
        }
    }

    /// Why keyword argument `key` (at the current token) cannot follow `kwargs`, if it cannot.
    fn check_kwarg(&self, key: &str, kwargs: &Kwargs) -> Option<PyError> {
        let at = self.start();
        if KEYWORDS.contains(&key) {
            Some(self.unexpected())
        } else if kwargs.iter().any(|(k, _)| k == key) {
            Some(self.not_python(at, format!("keyword argument `{key}` repeated")))
        } else if matches!(key, "true" | "false" | "none") {
            Some(self.refused(
                at,
                format!("a keyword argument named `{key}` cannot be written in Jinja"),
            ))
        } else {
            None
        }
    }

    fn parse_atom(&mut self) -> Parsed {
        let start = self.start();
        let name = match self.peek() {
            Tok::Name(name) => *name,
            Tok::Int(v) => {
                let kind = Kind::Int(v.clone());
                self.bump();
                return self.node(kind, start);
            }
            Tok::Float(v) => {
                let kind = Kind::Float(v.clone());
                self.bump();
                return self.node(kind, start);
            }
            Tok::Str(_) => {
                // Adjacent literals concatenate: "a" 'b' is "ab".
                let mut value = String::new();
                while let Tok::Str(s) = self.peek() {
                    value.push_str(s);
                    self.bump();
                }
                return self.node(Kind::Str(value), start);
            }
            Tok::Op("(") => return self.parse_parens(start),
            Tok::Op("[") => return self.parse_list(start),
            Tok::Op("{") => return self.parse_braces(start),
            _ => return Err(self.unexpected()),
        };
        self.parse_name(name, start)
    }

    /// A name in operand position: `doc`, a constant, `utils`/`frappe`, a builtin call.
    fn parse_name(&mut self, name: &'a str, start: usize) -> Parsed {
        let kind = match name {
            "doc" => Kind::Doc,
            "True" => Kind::Bool(true),
            "False" => Kind::Bool(false),
            "None" => Kind::NoneLit,
            "utils" => {
                self.bump();
                return self.parse_util(start, "utils");
            }
            "frappe"
                if matches!(
                    (self.peek_at(1), self.peek_at(2)),
                    (Tok::Op("."), Tok::Name("utils"))
                ) =>
            {
                self.pos += 3;
                return self.parse_util(start, "frappe.utils");
            }
            _ if BUILTINS.contains(&name) && matches!(self.peek_next(), Tok::Op("(")) => {
                self.bump();
                let (args, kwargs) = self.parse_args()?;
                return self.builtin(name, args, kwargs, start);
            }
            _ => return Err(self.bad_name(name, start)),
        };
        self.bump();
        self.node(kind, start)
    }

    /// The error for a name (at the current token) that is not an operand of the subset.
    #[cold]
    #[inline(never)]
    fn bad_name(&self, name: &str, start: usize) -> PyError {
        if let Some(msg) = keyword_refusal(name) {
            return self.refused(start, msg);
        }
        match name {
            "true" | "false" | "none" => {
                let python = format!("{}{}", name[..1].to_ascii_uppercase(), &name[1..]);
                self.not_python(
                    start,
                    format!("`{name}` is Jinja; Python spells it `{python}`"),
                )
            }
            "frappe" => {
                let attr = match (self.peek_at(1), self.peek_at(2)) {
                    (Tok::Op("."), Tok::Name(attr)) => format!(".{attr}"),
                    _ => String::new(),
                };
                self.refused(
                    start,
                    format!(
                        "`frappe{attr}` is not available: a condition may use only \
                         `frappe.utils.NAME(...)`"
                    ),
                )
            }
            _ if KEYWORDS.contains(&name) => self.unexpected(),
            _ if BUILTINS.contains(&name) => self.refused(
                start,
                format!("`{name}` must be called here, as in `{name}(x)`"),
            ),
            _ if DANGEROUS_NAMES.contains(&name) || matches!(self.peek_next(), Tok::Op("(")) => {
                self.refused(
                    start,
                    format!("`{name}` is not a function a condition may call"),
                )
            }
            _ => self.refused(
                start,
                format!("unknown name `{name}`: a condition sees `doc` and `utils`"),
            ),
        }
    }

    /// After `utils` (or `frappe.utils`): `.NAME(args)` with NAME a Frappe utility.
    fn parse_util(&mut self, start: usize, shown: &str) -> Parsed {
        let name = match (self.peek(), self.peek_next(), self.peek_at(2)) {
            (Tok::Op("."), Tok::Name(name), Tok::Op("("))
                if crate::frappe_utils::NAMES.contains(name) =>
            {
                *name
            }
            _ => return Err(self.bad_util(start, shown)),
        };
        self.pos += 2;
        let (args, kwargs) = self.parse_args()?;
        self.node(Kind::Util(name.to_string(), args, kwargs), start)
    }

    /// The error for `utils` (or `frappe.utils`) not followed by `.NAME(`.
    #[cold]
    #[inline(never)]
    fn bad_util(&self, start: usize, shown: &str) -> PyError {
        let msg = match (self.peek(), self.peek_next()) {
            (Tok::Op("."), Tok::Name(name)) if crate::frappe_utils::NAMES.contains(name) => {
                format!("`{shown}.{name}` must be called, as in `{shown}.{name}(...)`")
            }
            (Tok::Op("."), Tok::Name(name)) => {
                format!("`{shown}.{name}` is not one of the Frappe utilities a condition may call")
            }
            _ => format!("`{shown}` can only be called as `{shown}.NAME(...)`"),
        };
        self.refused(start, msg)
    }

    fn builtin(&self, name: &str, args: Vec<Node>, kwargs: Kwargs, start: usize) -> Parsed {
        let name = BUILTINS
            .iter()
            .copied()
            .find(|b| *b == name)
            .unwrap_or("len");
        if !kwargs.is_empty() {
            return Err(self.refused(start, format!("`{name}()` takes no keyword arguments here")));
        }
        let (ok, wanted) = match name {
            "round" => ((1..=2).contains(&args.len()), "one or two arguments"),
            "min" | "max" => (!args.is_empty(), "at least one argument"),
            _ => (args.len() == 1, "exactly one argument"),
        };
        if !ok {
            return Err(self.refused(start, format!("`{name}()` takes {wanted} here")));
        }
        self.node(Kind::Builtin(name, args), start)
    }

    /// After `(`: a parenthesized expression, or a tuple (emitted as a list).
    fn parse_parens(&mut self, start: usize) -> Parsed {
        self.bump();
        if self.eat_op(")") {
            return self.node(Kind::List(Vec::new()), start);
        }
        let first = self.nested_test()?;
        if !self.is_op(",") {
            self.expect_op(")")?;
            return Ok(first);
        }
        let mut items = vec![first];
        while self.eat_op(",") {
            if self.is_op(")") {
                break;
            }
            items.push(self.nested_test()?);
        }
        self.expect_op(")")?;
        self.node(Kind::List(items), start)
    }

    /// After `[`: a list display.
    fn parse_list(&mut self, start: usize) -> Parsed {
        self.bump();
        let mut items = Vec::new();
        loop {
            if self.eat_op("]") {
                break;
            }
            items.push(self.nested_test()?);
            if !self.eat_op(",") {
                self.expect_op("]")?;
                break;
            }
        }
        self.node(Kind::List(items), start)
    }

    /// After `{`: a dict display (set displays are refused).
    fn parse_braces(&mut self, start: usize) -> Parsed {
        self.bump();
        let mut pairs = Vec::new();
        loop {
            if self.eat_op("}") {
                break;
            }
            if self.is_op("**") {
                return Err(self.refused(self.start(), "dict unpacking `**x` is not allowed"));
            }
            let key = self.nested_test()?;
            if !self.is_op(":") {
                return Err(self.refused(
                    start,
                    "a set literal `{…}` is not allowed; use a list `[…]`",
                ));
            }
            self.bump();
            let value = self.nested_test()?;
            pairs.push((key, value));
            if !self.eat_op(",") {
                self.expect_op("}")?;
                break;
            }
        }
        self.node(Kind::Dict(pairs), start)
    }
}

/// The refusal message for a Python keyword that cannot start an operand, if any.
fn keyword_refusal(name: &str) -> Option<String> {
    match name {
        "lambda" => Some("lambda is not allowed".into()),
        "yield" => Some("yield is not allowed".into()),
        "await" => Some("await is not allowed".into()),
        "import" => Some("an import is not allowed".into()),
        "for" => Some("a comprehension (`for` inside an expression) is not allowed".into()),
        _ if STATEMENT_KEYWORDS.contains(&name) => Some(format!(
            "`{name}` starts a statement; a condition is one expression"
        )),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// Emitter: fully parenthesized Jinja
// ---------------------------------------------------------------------------------------
//
// Every compound is wrapped in parentheses, so each emitted operand is self-delimiting and
// Jinja's precedence never matters. (It differs from Python's: in minijinja `-x.y` is
// `(-x).y`, `-2 ** 2` is `(-2) ** 2`, and `**` is left-associative.)

fn emit(node: &Node, out: &mut String) {
    match &*node.kind {
        Kind::Doc => out.push_str("doc"),
        Kind::Int(v) | Kind::Float(v) => out.push_str(v),
        Kind::Str(s) => emit_string(s, out),
        Kind::Bool(true) => out.push_str("true"),
        Kind::Bool(false) => out.push_str("false"),
        Kind::NoneLit => out.push_str("none"),
        Kind::List(items) => {
            out.push('[');
            emit_list(items, out);
            out.push(']');
        }
        Kind::Dict(pairs) => {
            out.push('{');
            for (i, (key, value)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                emit(key, out);
                out.push_str(": ");
                emit(value, out);
            }
            out.push('}');
        }
        Kind::Attr(base, name) => {
            emit_base(base, out);
            out.push('.');
            out.push_str(name);
        }
        Kind::Index(base, index) => {
            emit_base(base, out);
            out.push('[');
            emit(index, out);
            out.push(']');
        }
        Kind::Slice(base, [lower, upper, step]) => {
            emit_base(base, out);
            out.push('[');
            if let Some(lower) = lower {
                emit(lower, out);
            }
            out.push(':');
            if let Some(upper) = upper {
                emit(upper, out);
            }
            if let Some(step) = step {
                out.push(':');
                emit(step, out);
            }
            out.push(']');
        }
        Kind::Method(base, name, args) => {
            emit_base(base, out);
            let _ = write!(out, ".{name}(");
            emit_list(args, out);
            out.push(')');
        }
        Kind::Util(name, args, kwargs) => {
            let _ = write!(out, "utils.{name}(");
            emit_list(args, out);
            for (i, (key, value)) in kwargs.iter().enumerate() {
                if i > 0 || !args.is_empty() {
                    out.push_str(", ");
                }
                let _ = write!(out, "{key}=");
                emit(value, out);
            }
            out.push(')');
        }
        Kind::Builtin(name, args) => emit_builtin(name, args, out),
        Kind::Not(x) => {
            out.push_str("(not ");
            emit(x, out);
            out.push(')');
        }
        Kind::Neg(x) => {
            // `(-(doc.x))`: minijinja would read `-doc.x` as `(-doc).x`.
            if is_postfix(x) {
                out.push_str("(-(");
                emit(x, out);
                out.push_str("))");
            } else {
                out.push_str("(-");
                emit(x, out);
                out.push(')');
            }
        }
        Kind::Pos(x) => {
            // Jinja has no unary plus; `0 + x` keeps numbers and still fails on strings.
            out.push_str("(0 + ");
            emit(x, out);
            out.push(')');
        }
        Kind::Binary(op @ ("/" | "//" | "%"), a, b) => {
            let f = match *op {
                "/" => python_ops::DIV,
                "//" => python_ops::FLOORDIV,
                _ => python_ops::MOD,
            };
            let _ = write!(out, "{f}(");
            emit(a, out);
            out.push_str(", ");
            emit(b, out);
            out.push(')');
        }
        Kind::Binary(op, a, b) => {
            out.push('(');
            emit(a, out);
            let _ = write!(out, " {op} ");
            emit(b, out);
            out.push(')');
        }
        Kind::Compare(first, ops)
            if ops
                .iter()
                .any(|(op, _)| matches!(*op, "<" | "<=" | ">" | ">="))
                && ops.iter().all(|(op, _)| !op.contains("in")) =>
        {
            // Python's ordering (errors on None, a missing field, mixed
            // types), each operand once.
            let _ = write!(out, "{}(", python_ops::COMPARE);
            emit(first, out);
            for (op, rhs) in ops {
                let _ = write!(out, ", \"{op}\", ");
                emit(rhs, out);
            }
            out.push(')');
        }
        Kind::Compare(first, ops) => {
            // minijinja 2.24 chains comparisons natively, evaluating each operand once.
            out.push('(');
            emit(first, out);
            for (op, rhs) in ops {
                let _ = write!(out, " {op} ");
                emit(rhs, out);
            }
            out.push(')');
        }
        Kind::IsNone(x, negated) => {
            out.push('(');
            emit(x, out);
            out.push_str(if *negated { " is not " } else { " is " });
            out.push_str(NONE_TEST);
            out.push(')');
        }
        Kind::BoolOp(op, items) => emit_chain(op, items, out),
        Kind::IfElse(body, test, orelse) => {
            out.push('(');
            emit(body, out);
            out.push_str(" if ");
            emit(test, out);
            out.push_str(" else ");
            emit(orelse, out);
            out.push(')');
        }
    }
}

/// Whether `node` is emitted as a postfix chain (`a.b`, `a[i]`, `a.m()`), which a prefix
/// operator in Jinja would bind to only its first part.
fn is_postfix(node: &Node) -> bool {
    matches!(
        *node.kind,
        Kind::Attr(..) | Kind::Index(..) | Kind::Slice(..) | Kind::Method(..) | Kind::Util(..)
    )
}

/// Comma-separated operands.
fn emit_list(items: &[Node], out: &mut String) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        emit(item, out);
    }
}

/// The object of `.attr`, `[…]` or `.method()`; a number is parenthesized so that the
/// lexer does not read `1.x` as a float.
fn emit_base(base: &Node, out: &mut String) {
    if matches!(*base.kind, Kind::Int(_) | Kind::Float(_)) {
        out.push('(');
        emit(base, out);
        out.push(')');
    } else {
        emit(base, out);
    }
}

/// `(a or b or c)` for up to [`MAX_FLAT_CHAIN`] operands; longer chains become a tree of
/// such groups (`and`/`or` are associative, values and short-circuit included).
fn emit_chain(op: &str, items: &[Node], out: &mut String) {
    if items.len() == 1 {
        emit(&items[0], out);
        return;
    }
    out.push('(');
    let group = items.len().div_ceil(MAX_FLAT_CHAIN).max(1);
    for (i, chunk) in items.chunks(group).enumerate() {
        if i > 0 {
            let _ = write!(out, " {op} ");
        }
        emit_chain(op, chunk, out);
    }
    out.push(')');
}

/// A Python builtin call as minijinja filters.
fn emit_builtin(name: &str, args: &[Node], out: &mut String) {
    let filter = |out: &mut String, arg: &Node, filters: &str| {
        out.push('(');
        emit(arg, out);
        out.push_str(filters);
        out.push(')');
    };
    match (name, args) {
        ("len", [x]) => filter(out, x, "|length"),
        ("int" | "long", [x]) => filter(out, x, "|int"),
        ("float", [x]) => filter(out, x, "|float"),
        ("str", [x]) => filter(out, x, "|string"),
        ("bool", [x]) => filter(out, x, "|bool"),
        ("abs", [x]) => filter(out, x, "|abs"),
        ("sum", [x]) => filter(out, x, "|sum"),
        // Python's round: halves to even; one argument gives an int.
        ("round", _) => {
            let _ = write!(out, "{}(", python_ops::ROUND);
            emit_list(args, out);
            out.push(')');
        }
        ("min" | "max", [x]) => filter(out, x, if name == "min" { "|min" } else { "|max" }),
        ("min" | "max", _) => {
            out.push_str("([");
            emit_list(args, out);
            let _ = write!(out, "]|{name})");
        }
        ("any", [x]) => {
            out.push('(');
            filter(out, x, "|select|list|length");
            out.push_str(" > 0)");
        }
        ("all", [x]) => {
            out.push('(');
            filter(out, x, "|reject|list|length");
            out.push_str(" == 0)");
        }
        // `Parser::builtin` checked the arity; nothing else reaches here.
        _ => out.push_str("none"),
    }
}

/// A double-quoted Jinja string literal. minijinja's lexer reads `\"`, `\\`, `\n`, `\r`,
/// `\t` and `\uXXXX`; everything else printable is written as is.
fn emit_string(s: &str, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\x7f' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::value::Value;
    use minijinja::{context, Environment};
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};

    // ---- helpers -----------------------------------------------------------------------

    fn tr(src: &str) -> String {
        to_jinja(src).unwrap_or_else(|e| panic!("{src:?} should translate, got {e:?}"))
    }

    fn refusal(src: &str) -> String {
        match to_jinja(src) {
            Err(PyError::Refused(msg)) => msg,
            other => panic!("{src:?} should be refused, got {other:?}"),
        }
    }

    fn not_py(src: &str) -> String {
        match to_jinja(src) {
            Err(PyError::NotPython(msg)) => msg,
            other => panic!("{src:?} should be NotPython, got {other:?}"),
        }
    }

    fn assert_refused(src: &str, needle: &str) {
        let msg = refusal(src);
        assert!(
            msg.contains(needle),
            "{src:?}: {msg:?} should mention {needle:?}"
        );
    }

    fn assert_not_python(src: &str, needle: &str) {
        let msg = not_py(src);
        assert!(
            msg.contains(needle),
            "{src:?}: {msg:?} should mention {needle:?}"
        );
    }

    /// Test stand-ins for Frappe's `flt` and `cint`.
    fn flt(v: Value) -> f64 {
        match v.as_str() {
            Some(s) => s.trim().parse().unwrap_or(0.0),
            None => f64::try_from(v).unwrap_or(0.0),
        }
    }

    fn cint(v: Value) -> i64 {
        flt(v) as i64
    }

    /// The renderer's environment, with a stub `utils` (a map of functions).
    fn env() -> Environment<'static> {
        let mut env = Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        super::install(&mut env);
        let mut utils = BTreeMap::new();
        utils.insert("flt", Value::from_function(flt));
        utils.insert("cint", Value::from_function(cint));
        env.add_global("utils", Value::from(utils));
        env
    }

    /// A Sales Order, as the webhook's `doc`.
    fn doc() -> serde_json::Value {
        serde_json::json!({
            "name": "SO-0001",
            "status": "Approved",
            "grand_total": 1500.5,
            "customer": "ACME",
            "items": [{"item_code": "I-1", "qty": 2}, {"item_code": "I-2", "qty": 0}],
            "discount": null,
            "docstatus": 1,
            "tags": "a,b",
        })
    }

    fn eval_jinja(jinja: &str) -> Result<Value, minijinja::Error> {
        let env = env();
        let expr = env.compile_expression(jinja)?;
        expr.eval(context! { doc => doc() })
    }

    /// Translates `src` and evaluates it for its truth value.
    fn truth(src: &str) -> Result<bool, minijinja::Error> {
        eval_jinja(&tr(src)).map(|v| v.is_true())
    }

    /// Runs `f` on a thread with a small stack, to show the recursion is bounded.
    fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::Builder::new()
            .stack_size(1 << 20)
            .spawn(f)
            .expect("spawn")
            .join()
            .expect("no panic or overflow")
    }

    // ---- translation: exact output -----------------------------------------------------

    #[test]
    fn comparisons_and_boolean_operators() {
        assert_eq!(
            tr(r#"doc.status == "Approved""#),
            r#"(doc.status == "Approved")"#
        );
        assert_eq!(
            tr("doc.a and doc.b or not doc.c"),
            "((doc.a and doc.b) or (not doc.c))"
        );
        assert_eq!(tr("doc.a or doc.b or doc.c"), "(doc.a or doc.b or doc.c)");
        assert_eq!(tr("not not doc.a"), "(not (not doc.a))");
        assert_eq!(
            tr("doc.a != 1 and doc.b <= 2.5"),
            "((doc.a != 1) and py_compare(doc.b, \"<=\", 2.5))"
        );
        assert_eq!(tr("doc.a in doc.b"), "(doc.a in doc.b)");
        assert_eq!(tr("doc.a not in doc.b"), "(doc.a not in doc.b)");
        assert_eq!(tr("not doc.a in doc.b"), "(not (doc.a in doc.b))");
        assert_eq!(
            tr("doc.discount is None"),
            "(doc.discount is none_or_missing)"
        );
        assert_eq!(
            tr("doc.discount is not None"),
            "(doc.discount is not none_or_missing)"
        );
        // Ordering goes through Python's rules, each operand evaluated once.
        assert_eq!(
            tr("0 < doc.grand_total < 2000"),
            "py_compare(0, \"<\", doc.grand_total, \"<\", 2000)"
        );
        assert_eq!(tr("1 < doc.a not in doc.b"), "(1 < doc.a not in doc.b)");
        assert_eq!(
            tr("doc.a if doc.c else doc.b"),
            "(doc.a if doc.c else doc.b)"
        );
        assert_eq!(
            tr("1 if doc.a else 2 if doc.b else 3"),
            "(1 if doc.a else (2 if doc.b else 3))"
        );
    }

    #[test]
    fn arithmetic_is_parenthesized_by_python_precedence() {
        assert_eq!(tr("doc.a + doc.b * 2"), "(doc.a + (doc.b * 2))");
        assert_eq!(tr("doc.a - doc.b - 1"), "((doc.a - doc.b) - 1)");
        assert_eq!(
            tr("doc.a // 2 % 3 / 4"),
            "py_div(py_mod(py_floordiv(doc.a, 2), 3), 4)"
        );
        assert_eq!(tr("2 ** 3 ** 2"), "(2 ** (3 ** 2))");
        assert_eq!(tr("-2 ** 2"), "(-(2 ** 2))");
        assert_eq!(tr("2 ** -1"), "(2 ** (-1))");
        assert_eq!(tr("-doc.x"), "(-(doc.x))");
        assert_eq!(tr("- - 1"), "(-(-1))");
        assert_eq!(tr("+doc.x"), "(0 + doc.x)");
        assert_eq!(tr("(doc.a + 1) * 2"), "((doc.a + 1) * 2)");
    }

    #[test]
    fn literals() {
        assert_eq!(tr("True"), "true");
        assert_eq!(tr("False or None"), "(false or none)");
        assert_eq!(tr("1_000"), "1000");
        assert_eq!(tr("0x1F + 0o17 + 0b101"), "((31 + 15) + 5)");
        assert_eq!(tr("1e3"), "1000.0");
        assert_eq!(tr("1.5"), "1.5");
        assert_eq!(tr(".5"), "0.5");
        assert_eq!(tr("1."), "1.0");
        assert_eq!(tr("1e300"), "1e300");
        assert_eq!(tr("2.5e-7"), "2.5e-7");
        assert_eq!(tr("00"), "0");
        assert_eq!(
            tr("340282366920938463463374607431768211455"),
            u128::MAX.to_string()
        );
        assert_eq!(tr(r#""a" 'b' "c""#), r#""abc""#);
        assert_eq!(tr(r#"'say "hi"'"#), r#""say \"hi\"""#);
        assert_eq!(
            tr(r#""tab\there\nnl \\ \' \x41 \u00e9 \101""#),
            r#""tab\there\nnl \\ ' A é A""#
        );
        assert_eq!(tr(r#"r"C:\new\d" "#), r#""C:\\new\\d""#);
        assert_eq!(tr(r#"r"a\"b""#), r#""a\\\"b""#);
        assert_eq!(tr(r#"u"x""#), r#""x""#);
        assert_eq!(
            tr(r#""\d""#),
            r#""\\d""#,
            "unknown escapes keep their backslash"
        );
        assert_eq!(tr(r#""\x00\x7f""#), r#""\u0000\u007f""#);
        assert_eq!(tr("\"line\\\ncontinued\""), r#""linecontinued""#);
        assert_eq!(tr("[1, 2, ]"), "[1, 2]");
        assert_eq!(tr("(1, 2)"), "[1, 2]");
        assert_eq!(tr("(doc.a,)"), "[doc.a]");
        assert_eq!(tr("()"), "[]");
        assert_eq!(tr("[]"), "[]");
        assert_eq!(tr(r#"{"k": doc.a, 1: [2]}"#), r#"{"k": doc.a, 1: [2]}"#);
        assert_eq!(tr("{}"), "{}");
    }

    #[test]
    fn subscripts_attributes_and_slices() {
        assert_eq!(tr(r#"doc.items[0]["qty"]"#), r#"doc.items[0]["qty"]"#);
        assert_eq!(tr("doc.items[-1].qty"), "doc.items[(-1)].qty");
        assert_eq!(tr("doc.name[1:3]"), "doc.name[1:3]");
        assert_eq!(tr("doc.name[::-1]"), "doc.name[::(-1)]");
        assert_eq!(tr("doc.name[1:]"), "doc.name[1:]");
        assert_eq!(tr("doc.name[:2]"), "doc.name[:2]");
        assert_eq!(tr("doc.name[:]"), "doc.name[:]");
        assert_eq!(tr("doc.name[1:5:2]"), "doc.name[1:5:2]");
        assert_eq!(tr("(1).real"), "(1).real", "a number base is parenthesized");
        assert_eq!(tr(r#""a,b".split(",")"#), r#""a,b".split(",")"#);
        assert_eq!(
            tr(r#"doc["__class__"]"#),
            r#"doc["__class__"]"#,
            "a dunder *string* is data"
        );
        assert_eq!(
            tr("doc.open and doc.vars"),
            "(doc.open and doc.vars)",
            "fields may share a dangerous name"
        );
        assert_eq!(tr("doc.true"), "doc.true");
    }

    #[test]
    fn builtins_become_filters() {
        assert_eq!(tr("len(doc.items)"), "(doc.items|length)");
        assert_eq!(tr("int(doc.a)"), "(doc.a|int)");
        assert_eq!(tr("long(doc.a)"), "(doc.a|int)");
        assert_eq!(tr("float(doc.a)"), "(doc.a|float)");
        assert_eq!(tr("str(doc.a)"), "(doc.a|string)");
        assert_eq!(tr("bool(doc.a)"), "(doc.a|bool)");
        assert_eq!(tr("abs(doc.a)"), "(doc.a|abs)");
        assert_eq!(tr("round(doc.a)"), "py_round(doc.a)");
        assert_eq!(tr("round(doc.a, 2)"), "py_round(doc.a, 2)");
        assert_eq!(tr("min(doc.a, doc.b, 3)"), "([doc.a, doc.b, 3]|min)");
        assert_eq!(tr("max(doc.items)"), "(doc.items|max)");
        assert_eq!(tr("sum(doc.a)"), "(doc.a|sum)");
        assert_eq!(tr("any(doc.a)"), "((doc.a|select|list|length) > 0)");
        assert_eq!(tr("all(doc.a)"), "((doc.a|reject|list|length) == 0)");
        assert_eq!(tr("len(doc.a) + 1"), "((doc.a|length) + 1)");
        assert_eq!(tr("-len(doc.a)"), "(-(doc.a|length))");
        assert_eq!(tr("-utils.flt(doc.a)"), "(-(utils.flt(doc.a)))");
    }

    #[test]
    fn methods_and_utils() {
        assert_eq!(
            tr(r#"doc.name.startswith("SO-")"#),
            r#"doc.name.startswith("SO-")"#
        );
        assert_eq!(tr(r#"doc.get("a", 1)"#), r#"doc.get("a", 1)"#);
        assert_eq!(
            tr(r#"", ".join(doc.tags.split(","))"#),
            r#"", ".join(doc.tags.split(","))"#
        );
        for method in METHODS {
            assert_eq!(
                tr(&format!("doc.x.{method}()")),
                format!("doc.x.{method}()")
            );
        }
        assert_eq!(tr("utils.flt(doc.a)"), "utils.flt(doc.a)");
        assert_eq!(tr("frappe.utils.cint(\"3\")"), "utils.cint(\"3\")");
        assert_eq!(
            tr("frappe.utils.add_to_date(doc.posting_date, days=1, months=-2)"),
            "utils.add_to_date(doc.posting_date, days=1, months=(-2))"
        );
        assert_eq!(tr("utils.now()"), "utils.now()");
        assert_eq!(tr("utils.today(days=1)"), "utils.today(days=1)");
        for name in crate::frappe_utils::NAMES {
            assert_eq!(
                tr(&format!("utils.{name}(doc.a)")),
                format!("utils.{name}(doc.a)")
            );
        }
    }

    #[test]
    fn whitespace_comments_and_continuations() {
        assert_eq!(tr("  doc.a  # trailing comment"), "doc.a");
        assert_eq!(tr("(doc.a\n  and doc.b)"), "(doc.a and doc.b)");
        assert_eq!(tr("doc.a \\\n and doc.b"), "(doc.a and doc.b)");
        assert_eq!(tr("\tdoc.a\r\n"), "doc.a");
    }

    #[test]
    fn long_and_or_chains_are_grouped() {
        let src = (0..9)
            .map(|i| format!("doc.a{i}"))
            .collect::<Vec<_>>()
            .join(" or ");
        assert_eq!(
            tr(&src),
            "((doc.a0 or doc.a1) or (doc.a2 or doc.a3) or (doc.a4 or doc.a5) or (doc.a6 or doc.a7) or doc.a8)"
        );
        let src = (0..8)
            .map(|i| format!("doc.a{i}"))
            .collect::<Vec<_>>()
            .join(" and ");
        assert_eq!(tr(&src).matches('(').count(), 1, "eight operands stay flat");
    }

    // ---- translation: refusals and NotPython ----------------------------------------------

    #[test]
    fn refuses_dangerous_things() {
        assert_refused(
            "doc.__class__",
            "dunder names such as `__class__` are not allowed",
        );
        assert_refused("doc.name.__len__()", "dunder");
        assert_refused(
            "__import__(\"os\")",
            "`__import__` is not a function a condition may call",
        );
        assert_refused("import os", "an import is not allowed");
        assert_refused("doc.a and import", "an import is not allowed");
        assert_refused(
            "eval(\"1\")",
            "`eval` is not a function a condition may call",
        );
        assert_refused("exec", "`exec` is not a function");
        assert_refused(
            "open(\"/etc/passwd\")",
            "`open` is not a function a condition may call",
        );
        assert_refused("getattr(doc, \"x\")", "`getattr` is not a function");
        for name in [
            "compile",
            "setattr",
            "delattr",
            "globals",
            "locals",
            "vars",
            "breakpoint",
        ] {
            assert_refused(&format!("{name}()"), &format!("`{name}` is not a function"));
        }
        assert_refused("doc.custom__x", "dunder");
        // A comment cannot hide a name from the parser either.
        assert_refused("doc.a # '\n or eval(\"1\")", "`eval` is not a function");
    }

    #[test]
    fn refuses_python_outside_the_subset() {
        assert_refused("(lambda: 1)()", "lambda is not allowed");
        assert_refused("lambda: 1", "lambda is not allowed");
        assert_refused(
            "[x for x in doc.items]",
            "a list comprehension is not allowed",
        );
        assert_refused(
            "any(x for x in doc.items)",
            "a generator expression is not allowed",
        );
        assert_refused(
            "(x for x in doc.items)",
            "a generator expression is not allowed",
        );
        assert_refused(
            "{k: 1 for k in doc.items}",
            "a dict comprehension is not allowed",
        );
        assert_refused(
            "{k for k in doc.items}",
            "a set comprehension is not allowed",
        );
        assert_refused("{1, 2}", "a set literal");
        assert_refused("f\"{doc.name}\"", "an f-string is not allowed");
        assert_refused("rf'x'", "an f-string is not allowed");
        assert_refused("b\"x\"", "a bytes literal");
        assert_refused("\"\"\"x\"\"\"", "a triple-quoted string is not allowed");
        assert_refused("'''x'''", "a triple-quoted string");
        assert_refused(
            "doc.name.format()",
            "`doc.name.format()`: format is not a method a condition may call",
        );
        assert_refused("doc.items.append(1)", "append is not a method");
        assert_refused("(doc.a := 1)", "the walrus operator `:=` is not allowed");
        assert_refused("yield doc", "yield is not allowed");
        assert_refused("await doc.a", "await is not allowed");
        assert_refused("utils.flt(*doc.a)", "starred arguments");
        assert_refused("utils.flt(**doc.a)", "starred arguments");
        assert_refused("[*doc.a]", "starred");
        assert_refused("{**doc.a}", "dict unpacking");
        assert_refused("doc.a & 1", "the bitwise operator `&` is not allowed");
        assert_refused("doc.a ^ 1", "bitwise operator `^`");
        assert_refused("doc.a << 1", "bitwise operator `<<`");
        assert_refused("doc.a >> 1", "bitwise operator `>>`");
        assert_refused("~doc.a", "bitwise operator `~`");
        assert_refused("doc.a @ doc.b", "the `@` operator is not allowed");
        assert_refused("doc.a; doc.b", "a semicolon is not allowed");
        assert_refused("doc.a = 1", "assignment with `=` is not allowed");
        assert_refused("doc.a += 1", "augmented assignment `+=`");
        assert_refused("doc.a, doc.b", "multiple expressions");
        assert_refused("doc.a <> 1", "`<>` is not allowed; use `!=`");
        assert_refused(
            "doc.a is True",
            "`is` compares only with None here; use `==`",
        );
        assert_refused("doc.a is doc.b", "`is` compares only with None");
        assert_refused("doc.a is None is None", "cannot be chained");
        assert_refused("doc.a == doc.b is not None", "cannot be chained");
        assert_refused("...", "Ellipsis");
        assert_refused("1j", "complex numbers");
        assert_refused("1e999", "float literal out of range");
        assert_refused(
            "340282366920938463463374607431768211456",
            "integer literal too large",
        );
        assert_refused(
            "\"%s\" % doc.name",
            "string formatting with `%` is not allowed",
        );
        assert_refused("\"\\N{BULLET}\"", "named escapes");
        assert_refused("\"\\ud800\"", "surrogate");
        assert_refused("doc.é", "non-ASCII");
        assert_refused("return doc.a", "`return` starts a statement");
        assert_refused("del doc.a", "`del` starts a statement");
        assert_refused("doc.a[1, 2]", "tuple subscript");
    }

    #[test]
    fn refuses_names_and_calls_outside_the_subset() {
        assert_refused("x", "unknown name `x`: a condition sees `doc` and `utils`");
        assert_refused("doc.a == user", "unknown name `user`");
        assert_refused(
            "sorted(doc.items)",
            "`sorted` is not a function a condition may call",
        );
        assert_refused("len", "`len` must be called");
        assert_refused("len(doc.a, doc.b)", "`len()` takes exactly one argument");
        assert_refused("round(doc.a, 1, 2)", "one or two arguments");
        assert_refused("min()", "at least one argument");
        assert_refused("int(doc.a, base=16)", "`int()` takes no keyword arguments");
        assert_refused("doc.items[0]()", "`doc.items[0]` cannot be called");
        assert_refused("doc()", "`doc` cannot be called");
        assert_refused("len(doc.a)(1)", "cannot be called");
        assert_refused(
            "doc.name.split(sep=\",\")",
            "keyword arguments are allowed only in `utils.NAME(...)` calls",
        );
        assert_refused(
            "utils.sql(\"x\")",
            "`utils.sql` is not one of the Frappe utilities",
        );
        assert_refused("utils.now", "`utils.now` must be called");
        assert_refused("utils", "`utils` can only be called as `utils.NAME(...)`");
        assert_refused("utils[0]", "can only be called");
        assert_refused(
            "frappe.db.get_value(\"X\", 1)",
            "`frappe.db` is not available",
        );
        assert_refused("frappe.session.user", "`frappe.session` is not available");
        assert_refused("frappe", "`frappe` is not available");
        assert_refused(
            "frappe.utils.nope(1)",
            "`frappe.utils.nope` is not one of the Frappe utilities",
        );
        assert_refused("utils.flt(x=1, none=2)", "cannot be written in Jinja");
    }

    #[test]
    fn jinja_is_not_python() {
        assert_not_python("doc.items|length > 0", "`|` is a Jinja filter");
        assert_not_python("doc.name ~ \"x\"", "`~` is Jinja string concatenation");
        assert_not_python("doc.a is defined", "`is defined` is a Jinja test");
        assert_not_python("doc.a is not defined", "`is not defined` is a Jinja test");
        assert_not_python("doc.a is number", "Jinja test");
        assert_not_python("doc.a is none", "`is none` is a Jinja test");
        assert_not_python("{{ doc.a }}", "`{{` opens a Jinja tag");
        assert_not_python("{% if doc.a %}1{% endif %}", "`{%` opens a Jinja tag");
        assert_not_python("true", "`true` is Jinja; Python spells it `True`");
        assert_not_python("doc.a == false", "`false` is Jinja");
        assert_not_python("doc.a == none", "`none` is Jinja; Python spells it `None`");
        assert_not_python("1 if doc.a", "needs `else`");
        assert_not_python("doc.items.0", "unexpected literal");
        // Plain syntax errors: not Python either (the caller may try Jinja).
        assert_not_python("doc.a doc.b", "unexpected `doc`");
        assert_not_python("(doc.a", "unexpected end");
        assert_not_python("doc.a)", "unexpected `)`");
        assert_not_python("doc.a and", "unexpected end");
        assert_not_python("\"abc", "unterminated string");
        assert_not_python("'a\nb'", "unterminated string");
        assert_not_python("!doc.a", "Python negates with `not`");
        assert_not_python("doc.a $ 1", "unexpected character `$`");
        assert_not_python("0123", "leading zeros");
        assert_not_python("1_", "invalid number literal");
        assert_not_python("1_.5", "invalid number literal");
        assert_not_python("\"\\x4\"", "truncated `\\x` escape");
        assert_not_python(
            "utils.flt(a=1, 2)",
            "positional argument follows a keyword argument",
        );
        assert_not_python("utils.flt(a=1, a=2)", "repeated");
        assert_not_python("doc.a \\ doc.b", "backslash outside a string");
    }

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

    #[test]
    fn refuse_dangerous_on_any_language() {
        assert_eq!(refuse_dangerous("doc.items|length > 0"), Ok(()));
        assert_eq!(refuse_dangerous("doc.a is defined and doc.b"), Ok(()));
        assert_eq!(
            refuse_dangerous(r#"doc["__class__"] == '__import__'"#),
            Ok(())
        );
        assert_eq!(refuse_dangerous(r#""it\"s eval" ~ doc.open"#), Ok(()));
        assert_eq!(refuse_dangerous("doc . eval"), Ok(()));
        assert!(matches!(
            refuse_dangerous("doc.__class__"),
            Err(PyError::Refused(_))
        ));
        assert!(matches!(
            refuse_dangerous("doc|attr('x').__init__"),
            Err(PyError::Refused(_))
        ));
        assert!(matches!(
            refuse_dangerous("{% import 'x' as y %}"),
            Err(PyError::Refused(_))
        ));
        assert!(matches!(refuse_dangerous("range(1)|map('eval')"), Ok(())));
        assert!(matches!(
            refuse_dangerous("cycler.__init__.__globals__"),
            Err(PyError::Refused(_))
        ));
        assert!(matches!(
            refuse_dangerous("x | vars"),
            Err(PyError::Refused(_))
        ));
        assert!(matches!(refuse_dangerous("'unterminated eval"), Ok(())));
    }

    // ---- semantics: the translated Jinja agrees with Python ---------------------------------

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
    fn strings_survive_the_round_trip() {
        // Each Python literal must evaluate, through Jinja, to exactly the string Python gives.
        let cases: &[(&str, &str)] = &[
            (r#""plain""#, "plain"),
            (r#""q\"uote's""#, "q\"uote's"),
            (r#"'back\\slash'"#, "back\\slash"),
            (r#""\n\t\r\a\b\f\v\0""#, "\n\t\r\x07\x08\x0c\x0b\0"),
            (r#""\x7f\x1b\u00e9\U0001F600\101""#, "\x7f\x1bé😀A"),
            (
                r#""é 😀 {{ x }} {% y %} \u2028""#,
                "é 😀 {{ x }} {% y %} \u{2028}",
            ),
            (r#"r"\d+\.\"x""#, "\\d+\\.\\\"x"),
            (r#""tail\\""#, "tail\\"),
        ];
        for (src, want) in cases {
            let jinja = tr(src);
            let got = eval_jinja(&jinja).unwrap_or_else(|e| panic!("{src} -> {jinja}: {e}"));
            assert_eq!(got.as_str(), Some(*want), "{src} -> {jinja}");
        }
    }

    #[test]
    fn translations_survive_the_if_wrapper() {
        // hookfleet compiles a condition as `{% if <jinja> %}1{% endif %}`: nothing the
        // translation emits (strings holding tag delimiters, nested dicts) may end the tag.
        for src in [
            r##""%}" == "%" + "}""##,
            r##""{{" == "{" + "{" and "}}" == "}" + "}""##,
            r##""{#" != "x" and "#}" != "y""##,
            r##"{1: {2: 3}}[1][2] == 3"##,
            r##""-%}" == '-%}'"##,
            r##"[[1]] != [[2]]"##,
        ] {
            let jinja = tr(src);
            let mut env = env();
            env.add_template_owned("c", format!("{{% if {jinja} %}}1{{% endif %}}"))
                .unwrap_or_else(|e| panic!("{jinja}: {e}"));
            let out = env.get_template("c").and_then(|t| t.render(context! {}));
            assert_eq!(out.ok().as_deref(), Some("1"), "{src} -> {jinja}");
        }
    }

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

    #[test]
    fn stub_utils_and_kwargs_compile() {
        let jinja = tr("utils.add_to_date(doc.posting_date, days=1, as_string=True)");
        env()
            .compile_expression(&jinja)
            .expect("kwargs are valid Jinja");
        assert_eq!(
            truth("utils.cint(doc.docstatus) + utils.flt(\"0.5\") == 1.5").ok(),
            Some(true)
        );
    }

    // ---- hostile input -----------------------------------------------------------------

    fn nested(open: &str, inner: &str, close: &str, n: usize) -> String {
        format!("{}{inner}{}", open.repeat(n), close.repeat(n))
    }

    #[test]
    fn deep_parentheses_are_refused_without_overflow() {
        let src = nested("(", "doc", ")", 100_000);
        let msg = on_small_stack(move || refusal(&src));
        assert!(msg.contains("nested deeper than 64 levels"), "{msg}");
        for (open, close) in [
            ("[", "]"),
            ("{1: ", "}"),
            ("utils.flt(", ")"),
            ("doc[", "]"),
            ("len(", ")"),
        ] {
            let src = nested(open, "1", close, 100_000);
            let msg = on_small_stack(move || refusal(&src));
            assert!(
                msg.contains("nested deeper than 64 levels"),
                "{open}: {msg}"
            );
        }
    }

    #[test]
    fn deep_prefix_postfix_and_binary_chains_are_refused() {
        for src in [
            "not ".repeat(100_000) + "doc",
            "-".repeat(100_000) + "1",
            "doc".to_string() + &".a".repeat(100_000),
            "doc".to_string() + &"[0]".repeat(100_000),
            "1".to_string() + &" + 1".repeat(100_000),
            "2".to_string() + &" ** 2".repeat(100_000),
            "doc.a if doc.b else ".repeat(100_000) + "doc.c",
        ] {
            let started = Instant::now();
            let msg = on_small_stack(move || refusal(&src));
            assert!(msg.contains("nested deeper than 64 levels"), "{msg}");
            assert!(started.elapsed() < Duration::from_secs(5), "too slow");
        }
    }

    #[test]
    fn the_deepest_accepted_conditions_still_compile_in_minijinja() {
        // At the limits, a condition either translates to Jinja that minijinja compiles, or
        // is refused: never Jinja that minijinja's own nesting limit rejects.
        let translated = [
            nested("(", "doc.a", ")", MAX_DEPTH),
            nested("[", "1", "]", MAX_DEPTH),
            nested("utils.flt(", "1", ")", MAX_DEPTH),
            nested("len(", "1", ")", MAX_DEPTH),
            nested("doc[", "0", "]", MAX_DEPTH),
            nested("{1: ", "1", "}", MAX_DEPTH),
            nested("-(", "doc", ")", MAX_DEPTH),
            "-".repeat(MAX_DEPTH) + "1",
            "not ".repeat(MAX_DEPTH) + "1",
            "doc".to_string() + &".a".repeat(MAX_DEPTH),
            nested("min(1, ", "1", ")", MAX_DEPTH / 2),
            nested("(1 + ", "1", ")", MAX_DEPTH / 2),
        ];
        for src in translated {
            let jinja = on_small_stack({
                let src = src.clone();
                move || to_jinja(&src)
            })
            .unwrap_or_else(|e| panic!("{src:.40}: {e}"));
            env()
                .compile_expression(&jinja)
                .unwrap_or_else(|e| panic!("{jinja:.60}: {e}"));
        }
        let too_deep_for_jinja = nested("any([", "1", "])", MAX_DEPTH / 2);
        assert_eq!(
            to_jinja(&too_deep_for_jinja),
            Err(PyError::Refused(
                "nested too deeply: the Jinja translation would exceed the evaluator's nesting limit".into()
            ))
        );
        assert!(refusal(&nested("(", "doc.a", ")", MAX_DEPTH + 1))
            .contains("nested deeper than 64 levels"));
        assert!(
            refusal(&("-".repeat(MAX_DEPTH + 1) + "1")).contains("nested deeper than 64 levels")
        );
        assert!(
            refusal(&("doc".to_string() + &".a".repeat(MAX_DEPTH + 1))).contains("nested deeper")
        );
    }

    #[test]
    fn long_flat_chains_stay_fast() {
        // 64 KiB of `a or `: refused at the first unknown name, quickly.
        let src = "a or ".repeat(64 * 1024 / 5) + "a";
        let started = Instant::now();
        assert!(refusal(&src).contains("unknown name `a`"));
        assert!(started.elapsed() < Duration::from_secs(2));

        // 64 KiB of `doc.a or `: translated in linear time, and minijinja (which would
        // overflow its stack on a flat 7,000-term chain) compiles and evaluates the tree.
        for op in ["or", "and"] {
            let src = format!("doc.a {op} ").repeat(64 * 1024 / 9) + "doc.grand_total";
            let started = Instant::now();
            let jinja = tr(&src);
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "translation too slow"
            );
            assert!(jinja.len() < src.len() * 2);
            let value = on_small_stack(move || eval_jinja(&jinja).map(|v| v.is_true()).ok());
            assert_eq!(value, Some(op == "or"), "{op}");
        }

        // A chained comparison is one call: up to its limit it runs, past
        // it the chain is refused, not handed to minijinja.
        let longest = "1".to_string() + &" < doc.grand_total".repeat(MAX_COMPARE_LINKS);
        let jinja = tr(&longest);
        assert_eq!(
            on_small_stack(move || eval_jinja(&jinja).map(|v| v.is_true()).ok()),
            Some(false)
        );
        let src = longest + " < 1";
        assert!(matches!(
            to_jinja(&src),
            Err(PyError::Refused(m)) if m.contains("comparison chain")
        ));
    }

    #[test]
    fn output_size_is_linear_in_the_input() {
        // Nested chained comparisons must not duplicate operands (no exponential blowup).
        // Linear: doubling the depth at most doubles the output (and more).
        let small = tr(&nested("0 < (", "doc.a", ") < 1", 15)).len();
        let large = tr(&nested("0 < (", "doc.a", ") < 1", 30)).len();
        assert!(large < small * 3, "{small} → {large}");
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

    #[test]
    fn hostile_classics() {
        assert_refused("doc.__class__", "dunder");
        assert_eq!(tr(r#"doc["__class__"]"#), r#"doc["__class__"]"#);
        assert_refused(r#"__import__("os")"#, "__import__");
        assert_refused("import os", "an import is not allowed");
        assert_refused(r#"eval("1")"#, "`eval` is not a function");
        assert_refused("(lambda: 1)()", "lambda is not allowed");
        assert_refused(
            "[x for x in doc.items]",
            "a list comprehension is not allowed",
        );
        assert_refused(r#"f"{doc.name}""#, "an f-string is not allowed");
        assert_refused("doc.name.format()", "format is not a method");
        assert_refused(r#"open("/etc/passwd")"#, "`open` is not a function");
        assert_refused(r#"getattr(doc, "x")"#, "`getattr` is not a function");
        assert_refused("doc.items.__getitem__(0)", "dunder");
        assert_refused("().__class__.__bases__[0].__subclasses__()", "dunder");
        assert_refused("doc.name.format_map(doc)", "format_map is not a method");
        assert_refused("ｅｖａｌ('1')", "non-ASCII");
    }
}
