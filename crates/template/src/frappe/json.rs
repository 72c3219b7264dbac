//! The `json` filter (Frappe's `as_json`), and JSON text as Python's `json.dumps` writes
//! it (also `cstr` of a list or a map), bounded in size and depth.

use std::fmt::Write as _;

use minijinja::value::{Value, ValueKind};
use minijinja::Error;

use super::numbers::{cint_of, float_of, number_of, py_float_repr, Num};
use super::signature::{is_none_like, Bound};
use super::MAX_RESULT_BYTES;

/// Deepest nesting `json` and `cstr` write: serde_json itself refuses
/// documents nested deeper than 128, so a real document never reaches it.
const MAX_JSON_DEPTH: usize = 128;

/// Largest indent (in spaces or characters) and longest separator `json`
/// accepts: enough for any layout, and a cap on what one level adds per line.
const MAX_JSON_LAYOUT_CHARS: usize = 16;

/// How [`write_json`] lays JSON out (Python's `json.dumps` options).
pub(super) struct JsonStyle<'a> {
    /// Python's `indent`: `None` for one line, else the text of one level.
    pub(super) indent: Option<&'a str>,
    pub(super) item_separator: &'a str,
    pub(super) key_separator: &'a str,
    pub(super) ensure_ascii: bool,
    pub(super) sort_keys: bool,
}

/// Why [`write_json`] stopped.
enum JsonStop {
    /// A map's keys cannot be sorted (mixed kinds): Python's `TypeError`,
    /// on which `frappe.as_json` writes the whole value again unsorted.
    Unsortable,
    Failed(String),
}

/// The JSON text of `v` as Python's `json.dumps` writes it with `style`.
pub(super) fn json_text(v: &Value, style: &JsonStyle) -> Result<String, String> {
    let mut out = String::new();
    match write_json(&mut out, v, style, 0) {
        Ok(()) => Ok(out),
        Err(JsonStop::Failed(e)) => Err(e),
        Err(JsonStop::Unsortable) => {
            out.clear();
            let unsorted = JsonStyle {
                sort_keys: false,
                ..*style
            };
            match write_json(&mut out, v, &unsorted, 0) {
                Ok(()) => Ok(out),
                Err(JsonStop::Failed(e)) => Err(e),
                Err(JsonStop::Unsortable) => Err("map keys cannot be sorted".into()),
            }
        }
    }
}

/// The error past [`MAX_RESULT_BYTES`].
fn too_long() -> JsonStop {
    JsonStop::Failed(format!("the result would exceed {MAX_RESULT_BYTES} bytes"))
}

/// A newline and `level` indents, when indenting.
fn push_newline(out: &mut String, style: &JsonStyle, level: usize) {
    if let Some(indent) = style.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(indent);
        }
    }
}

/// Python's JSON text of a float: `NaN`, `Infinity`, else `repr`.
fn push_json_float(out: &mut String, f: f64) {
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
    } else {
        out.push_str(&py_float_repr(f));
    }
}

/// A JSON string as Python writes it: `\"`, `\\`, `\n`, `\r`, `\t`, `\b`,
/// `\f`, other controls as `\u00XX` (lower-case hex), and with
/// `ensure_ascii` everything outside space..`~` as `\uXXXX` (surrogate
/// pairs above U+FFFF).
fn push_json_string(out: &mut String, s: &str, ensure_ascii: bool) -> Result<(), JsonStop> {
    hookfleet_core::request::python_json::push_str(out, s, ensure_ascii);
    if out.len() > MAX_RESULT_BYTES {
        return Err(too_long());
    }
    Ok(())
}

/// A map key as Python's json writes it: strings as they are, numbers,
/// `true`/`false`, `null`; other kinds are refused.
fn json_key_text(key: &Value) -> Result<String, JsonStop> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_string(),
        ValueKind::Bool => if key.is_true() { "true" } else { "false" }.into(),
        ValueKind::None | ValueKind::Undefined => "null".into(),
        ValueKind::Number => {
            let mut text = String::new();
            match number_of(key) {
                Some(Num::Int(i)) => text = i.to_string(),
                Some(Num::Float(f)) => push_json_float(&mut text, f),
                None => text = key.to_string(),
            }
            text
        }
        kind => {
            return Err(JsonStop::Failed(format!(
                "keys must be str, int, float, bool or None, not {kind}"
            )));
        }
    })
}

/// Sorts a map's entries as Python's `sorted(d.items())` would, or says it
/// cannot (keys of different kinds).
fn sort_entries(entries: &mut [(Value, String)]) -> Result<(), JsonStop> {
    if entries.len() < 2 {
        return Ok(());
    }
    let all = |kinds: &[ValueKind]| entries.iter().all(|(k, _)| kinds.contains(&k.kind()));
    if all(&[ValueKind::String]) {
        // Byte order of UTF-8 is code point order, as Python compares.
        entries.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(())
    } else if all(&[ValueKind::Number, ValueKind::Bool]) {
        let key = |v: &Value| float_of(v).unwrap_or(f64::NAN);
        entries.sort_by(|a, b| key(&a.0).total_cmp(&key(&b.0)));
        Ok(())
    } else {
        Err(JsonStop::Unsortable)
    }
}

/// Writes `v` as JSON: none and undefined as `null`, strings, numbers,
/// bools, lists (and other iterables) and maps; anything else is refused.
fn write_json(
    out: &mut String,
    v: &Value,
    style: &JsonStyle,
    level: usize,
) -> Result<(), JsonStop> {
    if out.len() > MAX_RESULT_BYTES {
        return Err(too_long());
    }
    if level > MAX_JSON_DEPTH {
        return Err(JsonStop::Failed(format!(
            "nested deeper than {MAX_JSON_DEPTH} levels"
        )));
    }
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => match number_of(v) {
            Some(Num::Int(i)) => {
                let _ = write!(out, "{i}");
            }
            Some(Num::Float(f)) => push_json_float(out, f),
            None => out.push_str(&v.to_string()),
        },
        ValueKind::String => {
            push_json_string(out, v.as_str().unwrap_or_default(), style.ensure_ascii)?
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items = v.try_iter().map_err(|e| JsonStop::Failed(e.to_string()))?;
            let mut empty = true;
            for item in items {
                if empty {
                    out.push('[');
                    empty = false;
                } else {
                    out.push_str(style.item_separator);
                }
                push_newline(out, style, level + 1);
                write_json(out, &item, style, level + 1)?;
            }
            if empty {
                out.push_str("[]");
            } else {
                push_newline(out, style, level);
                out.push(']');
            }
        }
        ValueKind::Map => {
            let keys = v.try_iter().map_err(|e| JsonStop::Failed(e.to_string()))?;
            let mut entries = Vec::new();
            for key in keys {
                // Each entry writes at least `""` and a digit: a map that
                // could not fit is refused before its keys fill memory.
                if (entries.len() + 1) * 3 > MAX_RESULT_BYTES {
                    return Err(too_long());
                }
                let text = json_key_text(&key)?;
                entries.push((key, text));
            }
            if style.sort_keys {
                sort_entries(&mut entries)?;
            }
            if entries.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (key, text)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(style.item_separator);
                }
                push_newline(out, style, level + 1);
                push_json_string(out, text, style.ensure_ascii)?;
                out.push_str(style.key_separator);
                let item = v
                    .get_item(key)
                    .map_err(|e| JsonStop::Failed(e.to_string()))?;
                write_json(out, &item, style, level + 1)?;
            }
            push_newline(out, style, level);
            out.push('}');
        }
        kind => {
            return Err(JsonStop::Failed(format!(
                "values of kind {kind} are not JSON serializable"
            )));
        }
    }
    Ok(())
}

/// The `json` filter: `frappe.as_json(obj, indent=1, separators=None,
/// ensure_ascii=True)`, i.e. `json.dumps` with sorted keys, as a safe
/// string.
pub(super) fn as_json(b: &Bound) -> Result<Value, Error> {
    // Python's indent: an int (negative is 0), a string, or None.
    let indent_text;
    let indent = match b.given(1) {
        None => Some(" "),
        Some(v) if is_none_like(v) => None,
        Some(v) => {
            let text = match v.as_str() {
                Some(s) => s.to_string(),
                None => {
                    let n = match v.kind() {
                        ValueKind::Bool | ValueKind::Number => cint_of(v),
                        _ => None,
                    }
                    .ok_or_else(|| {
                        b.fail(format!(
                            "indent must be a number or a string, not {}",
                            v.kind()
                        ))
                    })?;
                    let n = usize::try_from(n.max(0)).unwrap_or(usize::MAX);
                    if n > MAX_JSON_LAYOUT_CHARS {
                        return Err(b.fail(format!("indent over {MAX_JSON_LAYOUT_CHARS}")));
                    }
                    " ".repeat(n)
                }
            };
            if text.chars().count() > MAX_JSON_LAYOUT_CHARS {
                return Err(b.fail(format!("indent over {MAX_JSON_LAYOUT_CHARS} characters")));
            }
            indent_text = text;
            Some(indent_text.as_str())
        }
    };
    let (item_separator, key_separator) = match b.opt(2) {
        None => (",".to_string(), ": ".to_string()),
        Some(v) => {
            let pair: Vec<Value> = match v.kind() {
                ValueKind::Seq => v.try_iter().map(Iterator::collect).unwrap_or_default(),
                _ => Vec::new(),
            };
            match pair.as_slice() {
                [item, key]
                    if item
                        .as_str()
                        .is_some_and(|s| s.chars().count() <= MAX_JSON_LAYOUT_CHARS)
                        && key
                            .as_str()
                            .is_some_and(|s| s.chars().count() <= MAX_JSON_LAYOUT_CHARS) =>
                {
                    (
                        item.as_str().unwrap_or_default().to_string(),
                        key.as_str().unwrap_or_default().to_string(),
                    )
                }
                _ => {
                    return Err(b.fail(format!(
                        "separators must be two strings of at most {MAX_JSON_LAYOUT_CHARS} characters"
                    )));
                }
            }
        }
    };
    let style = JsonStyle {
        indent,
        item_separator: &item_separator,
        key_separator: &key_separator,
        ensure_ascii: b.given(3).is_none_or(Value::is_true),
        sort_keys: true,
    };
    json_text(&b.value(0), &style)
        .map(Value::from_safe_string)
        .map_err(|e| b.fail(e))
}

#[cfg(test)]
mod tests {
    use crate::frappe::testing::{assert_fails, assert_renders, env};
    use serde_json::json;

    /// Expected texts produced by python3's
    /// `json.dumps(v, indent=1, sort_keys=True, separators=(",", ": "))`.
    #[test]
    fn json_filter_matches_frappe_as_json() {
        assert_renders(&[
            (
                "{{ doc.items|json }}",
                "[\n {\n  \"item\": \"Caf\\u00e9 \\u20ac \\ud83d\\ude00\",\n  \"qty\": 2,\n  \"rate\": 10.5\n },\n {\n  \"item\": \"a\\\"b\\\\c\\nd\\u0001\\u007f\",\n  \"qty\": 1,\n  \"rate\": 1e+16\n }\n]",
            ),
            (
                "{{ doc|json }}",
                "{\n \"big\": 12345678901234567890,\n \"empty\": [],\n \"flag\": true,\n \"items\": [\n  {\n   \"item\": \"Caf\\u00e9 \\u20ac \\ud83d\\ude00\",\n   \"qty\": 2,\n   \"rate\": 10.5\n  },\n  {\n   \"item\": \"a\\\"b\\\\c\\nd\\u0001\\u007f\",\n   \"qty\": 1,\n   \"rate\": 1e+16\n  }\n ],\n \"name\": \"SO-0001\",\n \"neg\": -0.0,\n \"none\": null,\n \"obj\": {},\n \"small\": 1e-07\n}",
            ),
            (
                r#"{{ {"b": [1, 2], "a": "é"}|json(indent=none, ensure_ascii=false) }}"#,
                "{\"a\": \"é\",\"b\": [1,2]}",
            ),
            (
                r#"{{ {"b": [1, 2], "a": {"c": []}}|json(0) }}"#,
                "{\n\"a\": {\n\"c\": []\n},\n\"b\": [\n1,\n2\n]\n}",
            ),
            (
                "{{ {\"a\": [1, {\"b\": none}]}|json(indent=\"\\t\") }}",
                "{\n\t\"a\": [\n\t\t1,\n\t\t{\n\t\t\t\"b\": null\n\t\t}\n\t]\n}",
            ),
            // Keys Python cannot sort: the whole value again, unsorted.
            (r#"{{ {1: "a", "b": 2}|json }}"#, "{\n \"1\": \"a\",\n \"b\": 2\n}"),
            (r#"{{ {10: 1, 9: 2}|json }}"#, "{\n \"9\": 2,\n \"10\": 1\n}"),
            (r#"{{ "x"|json }} {{ none|json }} {{ missing|json }}"#, "\"x\" null null"),
        ]);
        assert_fails(
            "{{ utils|json }}",
            "json(): values of kind plain object are not JSON serializable",
        );
        assert_fails("{{ doc|json(indent=99) }}", "json(): indent over 16");
        assert_fails(
            r#"{{ doc|json(separators=[","]) }}"#,
            "json(): separators must be two strings",
        );
        assert_fails(
            "{{ doc|json(sort=true) }}",
            "json(): got an unexpected keyword argument \"sort\"",
        );
    }

    #[test]
    fn json_filter_output_is_safe() {
        let mut env = env();
        env.add_template("page.html", "{{ v|json }} {{ v.a }}")
            .unwrap();
        let out = env
            .get_template("page.html")
            .unwrap()
            .render(json!({"v": {"a": "<b>"}}))
            .unwrap();
        assert_eq!(out, "{\n \"a\": \"<b>\"\n} &lt;b&gt;");
    }

    #[test]
    fn deep_nesting_is_refused() {
        let mut deep = json!(1);
        for _ in 0..200 {
            deep = json!([deep]);
        }
        let e = env()
            .render_str("{{ v|json }}", json!({"v": deep}))
            .unwrap_err();
        assert!(
            e.to_string().contains("nested deeper than 128 levels"),
            "{e}"
        );
        let e = env()
            .render_str("{{ v|str }}", json!({"v": deep}))
            .unwrap_err();
        assert!(
            e.to_string().contains("nested deeper than 128 levels"),
            "{e}"
        );
    }
}
