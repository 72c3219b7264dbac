//! What a condition may not say, and how each refusal is worded: the scan for dangerous
//! names that runs on conditions in either language ([`refuse_dangerous`]), the constructs
//! refused wherever they stand in the tokens (comprehensions, `lambda`, `yield`, `await`),
//! and the parser's error for each token its grammar does not take: Python outside the
//! subset is [`PyError::Refused`], text that reads as Jinja is [`PyError::NotPython`] (the
//! caller then compiles it as Jinja).

use super::calls::BUILTINS;
use super::lexer::{Tok, Token, KEYWORDS};
use super::parser::Parser;
use super::{refused, snippet, PyError};

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

/// Python keywords that begin a statement: never part of an expression.
const STATEMENT_KEYWORDS: &[&str] = &[
    "return", "def", "class", "del", "pass", "raise", "global", "nonlocal", "assert", "with",
    "while", "try", "except", "finally", "break", "continue", "elif", "from", "async", "import",
];

/// Refusals that hold whatever the language (run on Jinja conditions too): dunder identifiers anywhere
/// outside string literals, the `import` keyword, names `__import__`, `eval`, `exec`, `open`, `compile`, `getattr`, `setattr`, `globals`, `locals`, `vars`, `breakpoint`.
///
/// Details: an identifier counts as a dunder when it contains `__` (older Frappe's `safe_eval`
/// rejected `__` anywhere; current Frappe refuses names starting with `_`); `delattr` joins the list of names; and those names are refused as
/// names, not as attributes, so a field such as `doc.open` stays usable. String literals
/// (single or double quoted, with backslash escapes) are skipped, so `doc["__x"]` is data.
pub(crate) fn refuse_dangerous(src: &str) -> Result<(), PyError> {
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
pub(super) fn skip_quoted(b: &[u8], start: usize) -> usize {
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

/// Constructs refused wherever they appear, checked on the whole token stream before
/// parsing so the message names them rather than whatever error parsing meets first:
/// comprehensions (named by their brackets), `lambda`, `yield`, `await`.
pub(super) fn refuse_anywhere(src: &str, tokens: &[Token<'_>]) -> Result<(), PyError> {
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

impl<'a> Parser<'a> {
    /// The error for the current token, which the grammar does not expect here. Tokens that
    /// are Python outside the subset are refused; Jinja-looking ones are `NotPython`.
    #[cold]
    #[inline(never)]
    pub(super) fn unexpected(&self) -> PyError {
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

    /// The error for `is` (at `at`) followed by something other than `None`.
    #[cold]
    #[inline(never)]
    pub(super) fn bad_is(&self, at: usize, negated: bool) -> PyError {
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

    /// The error for method `name` (at `name_at`, on what starts at `start`): one a
    /// condition may not call, or (`kwargs`) one called with keyword arguments.
    #[cold]
    #[inline(never)]
    pub(super) fn bad_method(
        &self,
        start: usize,
        name_at: usize,
        name: &str,
        kwargs: bool,
    ) -> PyError {
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
    pub(super) fn not_callable(&self, start: usize) -> PyError {
        let shown = snippet(&self.src[start..self.tokens[self.pos - 1].end]);
        self.refused(
            self.start(),
            format!(
                "`{shown}` cannot be called: a condition calls only builtins such as \
                 `len`, `utils.NAME(...)` and methods such as `.startswith()`"
            ),
        )
    }

    /// The error for a name (at the current token) that is not an operand of the subset.
    #[cold]
    #[inline(never)]
    pub(super) fn bad_name(&self, name: &str, start: usize) -> PyError {
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

    /// The error for `utils` (or `frappe.utils`) not followed by `.NAME(`.
    #[cold]
    #[inline(never)]
    pub(super) fn bad_util(&self, start: usize, shown: &str) -> PyError {
        let msg = match (self.peek(), self.peek_next()) {
            (Tok::Op("."), Tok::Name(name)) if crate::frappe::NAMES.contains(name) => {
                format!("`{shown}.{name}` must be called, as in `{shown}.{name}(...)`")
            }
            (Tok::Op("."), Tok::Name(name)) => {
                format!("`{shown}.{name}` is not one of the Frappe utilities a condition may call")
            }
            _ => format!("`{shown}` can only be called as `{shown}.NAME(...)`"),
        };
        self.refused(start, msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pyexpr::testing::{assert_not_python, assert_refused, tr};

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
        // The rest of the list, each refused in the same words.
        let special = ["__import__", "eval", "exec", "open", "getattr"];
        for name in DANGEROUS_NAMES.iter().filter(|n| !special.contains(n)) {
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
    fn refuse_dangerous_on_any_language() {
        let allowed = [
            "doc.items|length > 0",
            "doc.a is defined and doc.b",
            r#"doc["__class__"] == '__import__'"#,
            r#""it\"s eval" ~ doc.open"#,
            "doc . eval",
            "range(1)|map('eval')",
            "'unterminated eval",
        ];
        for src in allowed {
            assert_eq!(refuse_dangerous(src), Ok(()), "{src}");
        }
        let refused = [
            "doc.__class__",
            "doc|attr('x').__init__",
            "{% import 'x' as y %}",
            "cycler.__init__.__globals__",
            "x | vars",
        ];
        for src in refused {
            assert!(
                matches!(refuse_dangerous(src), Err(PyError::Refused(_))),
                "{src}"
            );
        }
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
