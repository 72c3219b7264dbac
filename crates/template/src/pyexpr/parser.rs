//! The parser: precedence climbing over Python's operator levels, from [`lexer`](super::lexer)
//! tokens to an [`ast`](super::ast) tree. Its recursion and the height of the tree are
//! bounded by [`MAX_DEPTH`], so hostile nesting is refused, never a stack overflow. What a
//! condition may name and call is parsed in [`calls`](super::calls); the message for each
//! token the grammar does not take is worded in [`refuse`](super::refuse).

use std::fmt;

use super::ast::{Kind, Node};
use super::lexer::{Tok, Token};
use super::{not_python, refused, PyError, MAX_COMPARE_LINKS, MAX_DEPTH};

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

/// A condition's tokens being parsed, and how deep the parse has recursed.
pub(super) struct Parser<'a> {
    pub(super) src: &'a str,
    pub(super) tokens: Vec<Token<'a>>,
    pub(super) pos: usize,
    /// Current recursion depth (brackets, arguments, branches, operands); bounded by
    /// [`MAX_DEPTH`].
    pub(super) depth: usize,
}

pub(super) type Parsed = Result<Node, PyError>;

impl<'a> Parser<'a> {
    pub(super) fn peek(&self) -> &Tok<'a> {
        &self.tokens[self.pos].tok
    }

    pub(super) fn peek_next(&self) -> &Tok<'a> {
        self.peek_at(1)
    }

    /// The token `n` places ahead (the final `End` if that is past the end).
    pub(super) fn peek_at(&self, n: usize) -> &Tok<'a> {
        &self.tokens[(self.pos + n).min(self.tokens.len() - 1)].tok
    }

    pub(super) fn start(&self) -> usize {
        self.tokens[self.pos].start
    }

    pub(super) fn bump(&mut self) {
        if self.pos + 1 < self.tokens.len() {
            self.pos += 1;
        }
    }

    pub(super) fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Tok::Op(o) if *o == op)
    }

    pub(super) fn is_name(&self, name: &str) -> bool {
        matches!(self.peek(), Tok::Name(n) if *n == name)
    }

    pub(super) fn eat_op(&mut self, op: &str) -> bool {
        let found = self.is_op(op);
        if found {
            self.bump();
        }
        found
    }

    pub(super) fn expect_op(&mut self, op: &str) -> Result<(), PyError> {
        if self.eat_op(op) {
            Ok(())
        } else {
            Err(self.unexpected())
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn refused(&self, offset: usize, msg: impl fmt::Display) -> PyError {
        refused(self.src, offset, msg)
    }

    #[cold]
    #[inline(never)]
    pub(super) fn not_python(&self, offset: usize, msg: impl fmt::Display) -> PyError {
        not_python(self.src, offset, msg)
    }

    /// Builds a node, refusing trees higher than [`MAX_DEPTH`].
    pub(super) fn node(&self, kind: Kind, start: usize) -> Parsed {
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
    pub(super) fn nested<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, PyError>,
    ) -> Result<T, PyError> {
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

    pub(super) fn parse_condition(mut self) -> Parsed {
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
    pub(super) fn nested_test(&mut self) -> Parsed {
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

#[cfg(test)]
mod tests {
    use crate::pyexpr::testing::{env, eval_jinja, nested, on_small_stack, refusal, tr};
    use crate::pyexpr::{to_jinja, PyError, MAX_COMPARE_LINKS, MAX_DEPTH};
    use std::time::{Duration, Instant};

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
}
