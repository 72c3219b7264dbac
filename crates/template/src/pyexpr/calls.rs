//! What a condition may name and call: `doc` and the constants, Python builtins (each
//! becomes a minijinja filter), methods on values (implemented by pycompat) and Frappe's
//! `utils.NAME(...)` (or `frappe.utils.NAME(...)`), with their argument lists.

use super::ast::{Kind, Kwargs, Node};
use super::lexer::{Tok, KEYWORDS};
use super::parser::{Parsed, Parser};
use super::PyError;

/// Python builtins a condition may call; each becomes a minijinja filter (see
/// `emit::emit_builtin`). (Frappe's own `safe_eval` offers only `int`, `float`, `long` and `round`;
/// the others are a convenience.)
pub(super) const BUILTINS: &[&str] = &[
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

impl<'a> Parser<'a> {
    /// At `.`: an attribute `.name`, or a method call `.name(args)`.
    pub(super) fn parse_member(&mut self, base: Node, start: usize) -> Parsed {
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

    /// A name in operand position: `doc`, a constant, `utils`/`frappe`, a builtin call.
    pub(super) fn parse_name(&mut self, name: &'a str, start: usize) -> Parsed {
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

    /// After `utils` (or `frappe.utils`): `.NAME(args)` with NAME a Frappe utility.
    fn parse_util(&mut self, start: usize, shown: &str) -> Parsed {
        let name = match (self.peek(), self.peek_next(), self.peek_at(2)) {
            (Tok::Op("."), Tok::Name(name), Tok::Op("("))
                if crate::frappe::NAMES.contains(name) =>
            {
                *name
            }
            _ => return Err(self.bad_util(start, shown)),
        };
        self.pos += 2;
        let (args, kwargs) = self.parse_args()?;
        self.node(Kind::Util(name.to_string(), args, kwargs), start)
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
}

#[cfg(test)]
mod tests {
    use super::METHODS;
    use crate::pyexpr::testing::{assert_refused, env, tr, truth};

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
        for name in crate::frappe::NAMES {
            assert_eq!(
                tr(&format!("utils.{name}(doc.a)")),
                format!("utils.{name}(doc.a)")
            );
        }
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
}
