//! The tokenizer: a condition's text as Python tokens. String escapes, number forms and
//! string prefixes are decoded here, so the parser sees values; f-strings, bytes,
//! triple-quoted strings, complex numbers and literals out of range are refused, and what
//! cannot be Python at all (a `{{`, a `!`, a stray backslash) is `NotPython`.

use super::{not_python, refused, PyError};

/// Python's reserved words (none of them can be a name or an attribute).
pub(super) const KEYWORDS: &[&str] = &[
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

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok<'a> {
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
pub(super) struct Token<'a> {
    pub(super) tok: Tok<'a>,
    pub(super) start: usize,
    pub(super) end: usize,
}

pub(super) fn tokenize(src: &str) -> Result<Vec<Token<'_>>, PyError> {
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

#[cfg(test)]
mod tests {
    use crate::pyexpr::testing::{eval_jinja, tr};

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
    fn whitespace_comments_and_continuations() {
        assert_eq!(tr("  doc.a  # trailing comment"), "doc.a");
        assert_eq!(tr("(doc.a\n  and doc.b)"), "(doc.a and doc.b)");
        assert_eq!(tr("doc.a \\\n and doc.b"), "(doc.a and doc.b)");
        assert_eq!(tr("\tdoc.a\r\n"), "doc.a");
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
}
