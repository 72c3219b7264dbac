//! Text: Python's `str()` as `cstr` and the `str` filter write it, `len`, and the HTML
//! helpers `escape_html` and `strip_html` (in linear time, whatever the input).

use minijinja::value::{Value, ValueKind};
use minijinja::Error;

use super::json::{json_text, JsonStyle};
use super::numbers::{number_of, py_float_repr, Num};
use super::signature::Bound;
use super::MAX_RESULT_BYTES;

/// `cstr(s)`: Python's `str()` (None is ""); lists and maps as JSON text.
pub(super) fn cstr(b: &Bound) -> Result<Value, Error> {
    let v = b.value(0);
    Ok(match v.kind() {
        ValueKind::Undefined | ValueKind::None => Value::from(""),
        // Python returns the string itself: a safe string stays safe.
        ValueKind::String => v,
        _ => Value::from(py_str(b, &v)?),
    })
}

/// `cstr`'s `str(v)` for a non-string: none is "", a list or dict its JSON
/// text (see the module's differences), anything else [`python_str`].
fn py_str(b: &Bound, v: &Value) -> Result<String, Error> {
    Ok(match v.kind() {
        ValueKind::Undefined | ValueKind::None => String::new(),
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => {
            let style = JsonStyle {
                indent: None,
                item_separator: ", ",
                key_separator: ": ",
                ensure_ascii: false,
                sort_keys: false,
            };
            json_text(v, &style).map_err(|e| b.fail(e))?
        }
        _ => python_str(v)?,
    })
}

/// What Python's `str(v)` writes where Frappe's template puts a value in
/// its text: `None` (for a field the document lacks too), `True`, `5.0`, a
/// string as it is, a list or dict as Python's `repr` (`['A', 'B']`,
/// `{'a': 1}`); at most [`MAX_RESULT_BYTES`].
pub(crate) fn python_str(v: &Value) -> Result<String, Error> {
    let mut out = String::new();
    match v.as_str() {
        Some(s) => out.push_str(s),
        None => py_repr(&mut out, v, 0)?,
    }
    Ok(out)
}

/// Containers nested deeper than this are refused (a document's JSON is
/// at most 128 deep already).
const MAX_REPR_DEPTH: usize = 128;

/// Python's `repr(v)` appended to `out`.
fn py_repr(out: &mut String, v: &Value, depth: usize) -> Result<(), Error> {
    let fail = |m: &str| Error::new(minijinja::ErrorKind::InvalidOperation, m.to_string());
    if depth > MAX_REPR_DEPTH || out.len() > MAX_RESULT_BYTES {
        return Err(fail(
            "the value is too large or too deep to write as Python does",
        ));
    }
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number => match number_of(v) {
            Some(Num::Int(i)) => out.push_str(&i.to_string()),
            Some(Num::Float(f)) => out.push_str(&py_float_repr(f)),
            None => out.push_str(&v.to_string()),
        },
        ValueKind::String => py_str_repr(out, v.as_str().unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in v.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(out, &item, depth + 1)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in v.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(out, &key, depth + 1)?;
                out.push_str(": ");
                py_repr(out, &v.get_item(&key)?, depth + 1)?;
            }
            out.push('}');
        }
        _ => out.push_str(&v.to_string()),
    }
    Ok(())
}

/// Python's `repr` of a string: single quotes unless it holds one and no
/// double quote; backslash, the quote, `\n`, `\r`, `\t` and other control
/// characters escaped.
fn py_str_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Frappe's `comma_and(list, add_quotes=True)` (and `comma_or`, `last`
/// being " or "): the items as Python's `str` writes them, each in single
/// quotes when `add_quotes`, joined by ", " but the last by `last`; one
/// item alone, unquoted; an empty list, ""; anything not a list, as it is.
pub(super) fn comma_sep(b: &Bound, last: &str) -> Result<Value, Error> {
    let v = b.value(0);
    if !matches!(v.kind(), ValueKind::Seq) {
        return Ok(v);
    }
    let items: Vec<String> = v
        .try_iter()?
        .map(|item| python_str(&item))
        .collect::<Result<_, _>>()?;
    let quoted = b.opt(1).is_none_or(Value::is_true);
    Ok(Value::from(match items.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [head @ .., tail] => {
            let q = |s: &String| if quoted { format!("'{s}'") } else { s.clone() };
            let head: Vec<String> = head.iter().map(q).collect();
            let text = format!("{}{last}{}", head.join(", "), q(tail));
            if text.len() > MAX_RESULT_BYTES {
                return Err(b.fail(format!("the result would exceed {MAX_RESULT_BYTES} bytes")));
            }
            text
        }
    }))
}

/// Python's `len(obj)`: characters of a string, items of a list or map; 0
/// for undefined (Jinja's `Undefined` has length 0).
pub(super) fn py_len(b: &Bound) -> Result<Value, Error> {
    let v = b.value(0);
    let len = match v.kind() {
        ValueKind::Undefined => Some(0),
        ValueKind::String => v.as_str().map(|s| s.chars().count()),
        ValueKind::Bytes => v.as_bytes().map(<[u8]>::len),
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => v.len(),
        _ => None,
    };
    len.map(Value::from)
        .ok_or_else(|| b.fail(format!("object of type {} has no len()", v.kind())))
}

/// Python's `str(v)` for any value (strings as they are).
pub(super) fn py_str_any(b: &Bound, v: &Value) -> Result<String, Error> {
    match v.as_str() {
        Some(s) => Ok(s.to_string()),
        None => py_str(b, v),
    }
}

/// `escape_html(text)`: `& " ' > <` as entities; anything but a string is
/// returned as it is (as Frappe does).
pub(super) fn escape_html(b: &Bound) -> Result<Value, Error> {
    let v = b.value(0);
    let Some(text) = v.as_str() else {
        return Ok(v);
    };
    let extra: usize = text
        .bytes()
        .map(|c| match c {
            b'&' | b'<' | b'>' => 3,
            b'"' | b'\'' => 5,
            _ => 0,
        })
        .sum();
    if text.len().saturating_add(extra) > MAX_RESULT_BYTES {
        return Err(b.fail(format!("the result would exceed {MAX_RESULT_BYTES} bytes")));
    }
    let mut out = String::with_capacity(text.len() + extra);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '>' => out.push_str("&gt;"),
            '<' => out.push_str("&lt;"),
            c => out.push(c),
        }
    }
    Ok(Value::from(out))
}

/// Finds a pattern in a text at or after positions that only grow, scanning
/// each byte at most once: the memory of the last answer makes a run of
/// failed searches linear instead of quadratic.
struct ForwardFinder {
    /// The last answer: where the pattern was found, or `None` when it does
    /// not occur at or after `searched_from`.
    found: Option<usize>,
    searched_from: usize,
    fresh: bool,
}

impl ForwardFinder {
    fn new() -> Self {
        ForwardFinder {
            found: None,
            searched_from: 0,
            fresh: true,
        }
    }

    /// The first occurrence of `pattern` in `text` at or after `from`;
    /// `from` must not decrease between calls.
    fn find(&mut self, text: &[u8], pattern: &[u8], from: usize) -> Option<usize> {
        if !self.fresh {
            match self.found {
                Some(at) if at >= from => return Some(at),
                None if self.searched_from <= from => return None,
                _ => {}
            }
        }
        self.fresh = false;
        self.searched_from = from;
        self.found = text
            .get(from..)
            .and_then(|rest| rest.windows(pattern.len()).position(|w| w == pattern))
            .map(|at| at + from);
        self.found
    }
}

/// `strip_html(text)`: Python's `re.sub(r"(<!--.*?-->|<[^>]*>)", "", text)`
/// in one linear scan: at each `<`, a comment closed on the same line, else
/// everything up to the next `>`; a `<` with no `>` after it stays.
pub(super) fn strip_html(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut gt, mut close, mut newline) = (
        ForwardFinder::new(),
        ForwardFinder::new(),
        ForwardFinder::new(),
    );
    let mut copied = 0;
    let mut at = 0;
    while let Some(offset) = bytes
        .get(at..)
        .and_then(|rest| rest.iter().position(|&c| c == b'<'))
    {
        let lt = at + offset;
        let mut end = None;
        if bytes[lt..].starts_with(b"<!--") {
            let body = lt + 4;
            if let Some(c) = close.find(bytes, b"-->", body) {
                // `.` does not match a newline.
                if newline.find(bytes, b"\n", body).is_none_or(|n| n > c) {
                    end = Some(c + 3);
                }
            }
        }
        let end = match end {
            Some(end) => end,
            None => match gt.find(bytes, b">", lt + 1) {
                Some(g) => g + 1,
                // No `>` anywhere after: nothing further can match.
                None => break,
            },
        };
        out.push_str(&text[copied..lt]);
        copied = end;
        at = end;
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frappe::testing::{assert_fails, assert_renders, env, render_with};

    /// As Frappe v15's `comma_sep` (frappe/utils/data.py) writes them: each
    /// item through `str`, quoted, one alone unquoted; the oracle's
    /// `utils_comma_and*` cases check two against Frappe itself.
    #[test]
    fn comma_and_or_and_get_date_str_match_frappe() {
        assert_renders(&[
            (
                r#"{{ utils.comma_and(["a", "b", "c"]) }}"#,
                "'a', 'b' and 'c'",
            ),
            (
                r#"{{ utils.comma_and(["a", 2, 2.5, none]) }}"#,
                "'a', '2', '2.5' and 'None'",
            ),
            (r#"{{ utils.comma_or(["a", "b"], False) }}"#, "a or b"),
            (r#"{{ utils.comma_and(["only"]) }}"#, "only"),
            ("{{ utils.comma_and([]) }}", ""),
            (r#"{{ utils.comma_and("as it is") }}"#, "as it is"),
            (
                r#"{{ utils.get_date_str("2026-11-30 10:02:11.654321") }}"#,
                "2026-11-30",
            ),
            (r#"{{ utils.get_date_str("2026-11-30") }}"#, "2026-11-30"),
            (
                r#"{{ frappe.bold("SO-1") }} {{ frappe.bold(none) }}"#,
                "<strong>SO-1</strong> <strong>None</strong>",
            ),
        ]);
    }
    use serde_json::json;
    use std::time::{Duration, Instant};

    #[test]
    fn str_filter_is_cstr() {
        let ctx = json!({"big": 1e16, "small": 1e-7, "list": [1, "a", true, null, 2.0], "map": {"k": "\u{e9}"}});
        let cases = [
            ("{{ none|str }}", ""),
            ("{{ missing|str }}", ""),
            ("{{ true|str }}", "True"),
            ("{{ 5|str }}", "5"),
            ("{{ 5.0|str }}", "5.0"),
            ("{{ big|str }}", "1e+16"),
            ("{{ small|str }}", "1e-07"),
            ("{{ list|str }}", r#"[1, "a", true, null, 2.0]"#),
            ("{{ utils.cstr(map) }}", "{\"k\": \"\u{e9}\"}"),
            (r#"{{ utils.cstr("as is") }}"#, "as is"),
        ];
        for (src, expected) in cases {
            assert_eq!(render_with(src, ctx.clone()), expected, "{src}");
        }
    }

    #[test]
    fn len_filter() {
        assert_renders(&[
            ("{{ doc.items|len }}", "2"),
            (r#"{{ "héllo"|len }}"#, "5"),
            ("{{ doc|len }}", "9"),
            ("{{ doc.missing|len }}", "0"),
        ]);
        assert_fails("{{ 5|len }}", "len(): object of type number has no len()");
    }

    #[test]
    fn html_helpers() {
        assert_renders(&[
            (
                r#"{{ utils.escape_html("<a href=\"x\">'&'</a>") }}"#,
                "&lt;a href=&quot;x&quot;&gt;&apos;&amp;&apos;&lt;/a&gt;",
            ),
            ("{{ utils.escape_html(5) }}", "5"),
        ]);
        // Expected values from python3's re.sub(r"(<!--.*?-->|<[^>]*>)", "", t).
        let cases = [
            ("<b>bold</b> text", "bold text"),
            ("a <!-- c > d --> b", "a  b"),
            ("a <!-- c \n > d --> b", "a  d --> b"),
            ("x < y", "x < y"),
            ("<<a>", ""),
            ("a<!-->b", "ab"),
            ("<!--a--><b>c", "c"),
            ("1 < 2 > 3", "1  3"),
            ("<p>\n<br/>\n</p>x<", "\n\nx<"),
            ("<!--a>b<!--c-->", ""),
            ("héllo <i>wörld</i>", "héllo wörld"),
        ];
        for (text, expected) in cases {
            assert_eq!(strip_html(text), expected, "strip_html({text:?})");
            let out = render_with("{{ utils.strip_html(t) }}", json!({"t": text}));
            assert_eq!(out, expected, "utils.strip_html({text:?})");
        }
    }

    #[test]
    fn hostile_strings_are_linear_and_capped() {
        let lts = "<".repeat(1 << 20);
        let started = Instant::now();
        assert_eq!(strip_html(&lts), lts);
        let comments = "<!--a>".repeat(1 << 18);
        assert_eq!(strip_html(&comments), "");
        let open_comments = "<!--".repeat(1 << 18);
        assert_eq!(strip_html(&open_comments), open_comments);
        let out = render_with("{{ utils.strip_html(t)|length }}", json!({"t": lts}));
        assert_eq!(out, (1 << 20).to_string());
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );

        let quotes = json!({"t": "\"".repeat(1 << 20)});
        let e = env()
            .render_str("{{ utils.escape_html(t) }}", quotes)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("escape_html(): the result would exceed"),
            "{e}"
        );
        let accents = json!({"t": "é".repeat(1 << 20)});
        let e = env().render_str("{{ t|json }}", accents).unwrap_err();
        assert!(
            e.to_string().contains("json(): the result would exceed"),
            "{e}"
        );
    }
}
