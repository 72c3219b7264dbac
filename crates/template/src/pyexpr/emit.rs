//! The emitter: a tree as one fully parenthesized Jinja expression.
//!
//! Every compound is wrapped in parentheses, so each emitted operand is self-delimiting and
//! Jinja's precedence never matters. (It differs from Python's: in minijinja `-x.y` is
//! `(-x).y`, `-2 ** 2` is `(-2) ** 2`, and `**` is left-associative.) Long `and`/`or`
//! chains are grouped, and the output's bracket depth is measured, so that minijinja's own
//! recursion and nesting limits are never met by a condition this crate accepted.

use std::fmt::Write as _;

use super::ast::MAX_FLAT_CHAIN;
use super::ast::{Kind, Node};
use super::ops;
use super::refuse::skip_quoted;
use super::NONE_TEST;

/// The deepest bracket nesting the emitted Jinja may have. minijinja 2.24's parser refuses
/// expressions nested more than 150 levels and spends two per bracket (the bracket and the
/// expression inside it); a few levels are kept in reserve. Only pathological conditions
/// (e.g. `any()` nested thirty deep, which emits three brackets per level) come near it.
pub(super) const MAX_JINJA_BRACKETS: usize = 72;

/// The deepest nesting of brackets in emitted Jinja (string literals skipped).
pub(super) fn bracket_depth(jinja: &str) -> usize {
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

pub(super) fn emit(node: &Node, out: &mut String) {
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
                "/" => ops::DIV,
                "//" => ops::FLOORDIV,
                _ => ops::MOD,
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
            let _ = write!(out, "{}(", ops::COMPARE);
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
            let _ = write!(out, "{}(", ops::ROUND);
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
    use crate::pyexpr::testing::{env, nested, tr};
    use minijinja::context;

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

    #[test]
    fn output_size_is_linear_in_the_input() {
        // Nested chained comparisons must not duplicate operands (no exponential blowup).
        // Linear: doubling the depth at most doubles the output (and more).
        let small = tr(&nested("0 < (", "doc.a", ") < 1", 15)).len();
        let large = tr(&nested("0 < (", "doc.a", ") < 1", 30)).len();
        assert!(large < small * 3, "{small} → {large}");
    }
}
