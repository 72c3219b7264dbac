//! A body template's values written as JSON for where they land.
//!
//! In a body template, what a value becomes depends on where it lands in the
//! template's own text, never on what the document makes it: inside a JSON
//! string literal (`"name": "{{ doc.name }}"`, the way Frappe's templates are
//! written) it is string content (quotes, backslashes and control characters
//! escaped; a list or an object as its JSON, escaped); anywhere else it is
//! one JSON value (numbers, booleans, none as `null`, lists and objects as
//! JSON; a string quoted). A Frappe webhook (`frappe_body`) is read as
//! Frappe reads its rendered text: a string whose text is a JSON number,
//! `true`, `false` or `null` is that value (`{{ doc.pincode }}` with
//! "302001" is 302001, `{{ x | lower }}` with True is true), and inside
//! quotes a value is Python's `str` of it. So no document value can close a
//! string, add a key, add an element or change the body's structure: at
//! most one scalar stands for another.
//!
//! The rewrite ([`rewrite_body`]) reads that position from the template's
//! text and puts one of two filters on every `{{ … }}`; the renderer's
//! formatter then refuses any value in a body that did not pass through one
//! of them.

use minijinja::value::Value as JinjaValue;
use minijinja::Environment;

use hookfleet_core::RenderError;

/// The filter the body template's rewrite puts on an interpolation inside a
/// JSON string: the value as string content.
const AS_STRING_CONTENT: &str = "hookfleet_json_string_content";

/// The filter it puts on an interpolation anywhere else: the value as a JSON
/// value.
const AS_JSON_VALUE: &str = "hookfleet_json_value";

/// Registers the two filters the rewrite puts on a body's interpolations.
/// `lenient`: on a sample document, an undefined value is written as `null`.
/// `python_text`: inside a JSON string a value is what Python's `str`
/// writes (`None`, `True`, `['a']`), as Frappe's template writes it.
pub(crate) fn install(env: &mut Environment<'static>, lenient: bool, python_text: bool) {
    env.add_filter(AS_JSON_VALUE, move |v: JinjaValue| {
        as_json_value(&v, lenient, python_text)
    });
    env.add_filter(AS_STRING_CONTENT, move |v: JinjaValue| {
        as_string_content(&v, python_text)
    });
}

/// Rewrites a body template so that every `{{ … }}` passes through the
/// filter its position calls for: inside a JSON string literal of the
/// template's own text, [`AS_STRING_CONTENT`]; elsewhere, [`AS_JSON_VALUE`].
/// The position is read from the template's text (tags and comments
/// skipped, `{% raw %}` blocks read as text), so it does not depend on
/// what a value turns out to be: a document can choose a value's type, never
/// where it lands.
pub(crate) fn rewrite_body(src: &str) -> Result<String, RenderError> {
    if src.contains("hookfleet_json_") {
        return Err(RenderError::Template(
            "body template: names beginning hookfleet_json_ are reserved".into(),
        ));
    }
    let unterminated =
        |what: &str| RenderError::Template(format!("body template: unterminated {what}"));
    let mut out = String::with_capacity(src.len() + 64);
    let mut text = JsonTextState::default();
    let mut i = 0;
    while i < src.len() {
        let rest = &src[i..];
        if let Some(comment) = rest.strip_prefix("{#") {
            let end = comment.find("#}").ok_or_else(|| unterminated("comment"))? + 4;
            out.push_str(&rest[..end]);
            i += end;
        } else if rest.starts_with("{%") {
            let end = tag_end(rest, "%}").ok_or_else(|| unterminated("tag"))?;
            let tag = &rest[..end];
            out.push_str(tag);
            i += end;
            let inner = tag[2..tag.len() - 2]
                .trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
            if inner == "raw" {
                // Text up to the endraw tag, as it will be output.
                let body = &src[i..];
                let at = find_endraw(body).ok_or_else(|| unterminated("raw block"))?;
                text.read(&body[..at.0]);
                out.push_str(&body[..at.1]);
                i += at.1;
            }
        } else if rest.starts_with("{{") {
            let end = tag_end(rest, "}}").ok_or_else(|| unterminated("expression"))?;
            let inner = &rest[2..end - 2];
            let open = if inner.starts_with(['-', '+']) {
                &inner[..1]
            } else {
                ""
            };
            let close = if inner.len() > open.len() && inner.ends_with(['-', '+']) {
                &inner[inner.len() - 1..]
            } else {
                ""
            };
            let expr = &inner[open.len()..inner.len() - close.len()];
            let filter = if text.in_string {
                AS_STRING_CONTENT
            } else {
                AS_JSON_VALUE
            };
            out.push_str(&format!("{{{{{open} ({expr})|{filter} {close}}}}}"));
            i += end;
        } else {
            let c = rest.chars().next().expect("not at the end");
            text.read(&rest[..c.len_utf8()]);
            out.push(c);
            i += c.len_utf8();
        }
    }
    Ok(out)
}

/// Whether the template's own text so far leaves us inside a JSON string.
#[derive(Default)]
struct JsonTextState {
    in_string: bool,
    escaped: bool,
}

impl JsonTextState {
    fn read(&mut self, text: &str) {
        for c in text.chars() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if c == '\\' {
                    self.escaped = true;
                } else if c == '"' {
                    self.in_string = false;
                }
            } else if c == '"' {
                self.in_string = true;
            }
        }
    }
}

/// The length of the tag starting at `rest` (which begins with its opening
/// delimiter), up to and including `close`, skipping string literals
/// inside it.
fn tag_end(rest: &str, close: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut i = 2;
    while i < rest.len() {
        let c = rest[i..].chars().next()?;
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
            }
            None if c == '"' || c == '\'' => quote = Some(c),
            None if rest[i..].starts_with(close) => return Some(i + close.len()),
            None => {}
        }
        i += c.len_utf8();
    }
    None
}

/// Where the content of a raw block (starting at `body`) ends, and where
/// its endraw tag ends.
fn find_endraw(body: &str) -> Option<(usize, usize)> {
    let mut from = 0;
    while let Some(at) = body[from..].find("{%") {
        let start = from + at;
        let end = start + tag_end(&body[start..], "%}")?;
        let inner = body[start + 2..end - 2]
            .trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        if inner == "endraw" {
            return Some((start, end));
        }
        from = end;
    }
    None
}

fn safe(text: String) -> JinjaValue {
    JinjaValue::from_safe_string(text)
}

fn json_error(e: serde_json::Error) -> minijinja::Error {
    minijinja::Error::new(
        minijinja::ErrorKind::InvalidOperation,
        format!("value cannot be written as JSON: {e}"),
    )
}

/// A value where a JSON value goes: a string quoted, a number, boolean,
/// none (`null`), list or object as JSON; text marked safe (`|safe`,
/// `|tojson`) as it is if it is one JSON value, else quoted. Undefined is
/// `null` on a sample document, else nothing (and the body is not JSON).
fn as_json_value(
    value: &JinjaValue,
    lenient: bool,
    python_text: bool,
) -> Result<JinjaValue, minijinja::Error> {
    use minijinja::value::ValueKind;
    if value.is_safe() {
        let text = value.as_str().unwrap_or_default();
        if serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok() {
            return Ok(safe(text.to_string()));
        }
        return Ok(safe(serde_json::to_string(text).map_err(json_error)?));
    }
    Ok(safe(match value.kind() {
        ValueKind::Undefined if lenient => "null".into(),
        ValueKind::Undefined => String::new(),
        // As Frappe reads its rendered text: a string that spells a JSON
        // scalar is that scalar (a Frappe webhook's writing only: elsewhere
        // a document's string stays a string).
        ValueKind::String if python_text => {
            let text = value.as_str().unwrap_or_default();
            match json_scalar(text) {
                Some(literal) => literal.to_string(),
                None => serde_json::to_string(text).map_err(json_error)?,
            }
        }
        _ => serde_json::to_string(value).map_err(json_error)?,
    }))
}

/// `text` as the one JSON scalar it spells (a number as JSON writes one,
/// `true`, `false` or `null`, JSON's whitespace around it ignored), as
/// Python's `json.loads` would read it in Frappe's rendered body; None for
/// any other text (`007`, `+91`, `NaN`, `"a"`), which stays a string.
fn json_scalar(text: &str) -> Option<&str> {
    let t = text.trim_matches([' ', '\t', '\n', '\r']);
    match t {
        "true" | "false" | "null" => Some(t),
        _ if t.starts_with(['-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'])
            && serde_json::from_str::<serde_json::Number>(t).is_ok() =>
        {
            Some(t)
        }
        _ => None,
    }
}

/// A value inside a JSON string: its text (a string's own, anything else's
/// JSON) escaped as string content. None and undefined are empty. With
/// `python_text`, the text is Python's `str` of it (`None`, `True`,
/// `['a']`).
fn as_string_content(
    value: &JinjaValue,
    python_text: bool,
) -> Result<JinjaValue, minijinja::Error> {
    use minijinja::value::ValueKind;
    let text = match value.kind() {
        _ if python_text => crate::frappe::python_str(value)?,
        ValueKind::Undefined | ValueKind::None => String::new(),
        ValueKind::String => value.as_str().unwrap_or_default().to_string(),
        _ => serde_json::to_string(value).map_err(json_error)?,
    };
    let quoted = serde_json::to_string(&text).map_err(json_error)?;
    Ok(safe(quoted[1..quoted.len() - 1].to_string()))
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use hookfleet_core::request::Templates;
    use hookfleet_core::RenderError;

    use crate::jinja::Compiled;

    fn body(template: &str, doc: Value) -> Result<String, RenderError> {
        body_as(template, doc, false)
    }

    /// As a Frappe webhook (`frappe_body`) writes it.
    fn frappe_body(template: &str, doc: Value) -> Result<String, RenderError> {
        body_as(template, doc, true)
    }

    fn body_as(template: &str, doc: Value, python_text: bool) -> Result<String, RenderError> {
        let t = Templates {
            condition: None,
            body: Some(template.into()),
            url: None,
            lenient: false,
            python_text,
        };
        Ok(Compiled::compile(&t)?
            .render_all(&doc)?
            .body
            .unwrap_or_default())
    }

    #[test]
    fn a_document_string_cannot_add_keys_to_a_json_body() {
        let template = r#"{"customer": "{{ doc.customer }}", "total": {{ doc.total }}}"#;
        let evil = r#"ACME", "refund_to": "attacker", "total": "0"#;
        let out = body(
            template,
            serde_json::json!({"customer": evil, "total": 12.5}),
        )
        .unwrap();
        let parsed: serde_json::Map<String, Value> = serde_json::from_str(&out).unwrap();
        assert_eq!(parsed.len(), 2, "{out}");
        assert_eq!(parsed["customer"], evil);
        assert_eq!(parsed["total"], 12.5);
    }

    #[test]
    fn with_python_text_a_value_in_quotes_is_what_pythons_str_writes() {
        let t = Templates {
            condition: None,
            body: Some(
                r#"{"a": "{{ doc.none }}", "b": "{{ doc.yes }}", "c": "{{ doc.skus }}",
                "d": "{{ doc.map }}", "e": "{{ doc.total }}", "f": "{{ doc.missing }}",
                "g": "{{ doc.quote }}", "h": {{ doc.yes }}}"#
                    .into(),
            ),
            url: None,
            lenient: false,
            python_text: true,
        };
        let doc = serde_json::json!({
            "none": null, "yes": true, "skus": ["A", "it's"], "map": {"a": 1, "b": [1.5, null]},
            "total": 14750.0, "quote": "say \"hi\"",
        });
        let out = Compiled::compile(&t)
            .unwrap()
            .render_all(&doc)
            .unwrap()
            .body
            .unwrap();
        let v: Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(v["a"], "None");
        assert_eq!(v["b"], "True");
        assert_eq!(v["c"], r#"['A', "it's"]"#);
        assert_eq!(v["d"], "{'a': 1, 'b': [1.5, None]}");
        assert_eq!(v["e"], "14750.0");
        assert_eq!(v["f"], "None");
        assert_eq!(v["g"], r#"say "hi""#);
        // Outside quotes a value is still one JSON value.
        assert_eq!(v["h"], true);
    }

    #[test]
    fn text_that_spells_a_json_scalar_is_that_scalar_where_frappe_reads_json() {
        // A webhook of our own keeps a document's string a string.
        let ours = body(
            r#"{"zip": {{ doc.pincode }}}"#,
            serde_json::json!({"pincode": "302001"}),
        );
        assert_eq!(ours.unwrap(), r#"{"zip": "302001"}"#);
        let parse = |t: &str, doc: Value| -> Value {
            serde_json::from_str(&frappe_body(t, doc).unwrap()).expect("JSON")
        };
        let doc = serde_json::json!({
            "pincode": "302001", "rate": " 12.50 ", "big": true, "huge": "123456789012345678901234567890",
            "zip": "007001", "phone": "+91 98290", "nan": "NaN", "word": "true story",
        });
        let out = parse(
            r#"{"zip": {{ doc.pincode }}, "rate": {{ doc.rate }}, "big": {{ doc.big | lower }},
            "on": {{ "true" if doc.big else "false" }}, "none": {{ "null" }},
            "huge": {{ doc.huge }}, "z": {{ doc.zip }}, "p": {{ doc.phone }}, "n": {{ doc.nan }},
            "w": {{ doc.word }}, "q": "{{ doc.pincode }}"}"#,
            doc,
        );
        assert_eq!(out["zip"], 302001);
        assert_eq!(out["rate"], 12.5);
        assert_eq!(out["big"], true);
        assert_eq!(out["on"], true);
        assert_eq!(out["none"], Value::Null);
        assert!(out["huge"].is_number(), "{out}");
        // Not JSON scalars: strings still (Frappe would send nothing).
        assert_eq!(out["z"], "007001");
        assert_eq!(out["p"], "+91 98290");
        assert_eq!(out["n"], "NaN");
        assert_eq!(out["w"], "true story");
        // Inside quotes, text is text.
        assert_eq!(out["q"], "302001");
        assert_eq!(out.as_object().unwrap().len(), 11, "{out}");
    }

    #[test]
    fn a_document_value_of_another_type_cannot_change_the_structure_either() {
        let parse = |t: &str, doc: Value| -> Value {
            serde_json::from_str(&body(t, doc).unwrap()).expect("JSON")
        };
        // A list where a string was quoted: it stays one string.
        let out = parse(
            r#"{"customer": "{{ doc.customer }}", "total": {{ doc.total }}}"#,
            serde_json::json!({"customer": [",", ": 100, ", ":"], "total": 12.5}),
        );
        assert_eq!(out.as_object().unwrap().len(), 2, "{out}");
        assert_eq!(out["customer"], r#"[",",": 100, ",":"]"#);
        // An object where a string was quoted.
        let out = parse(
            r#"{"x": "{{ doc.obj }}"}"#,
            serde_json::json!({"obj": {",": ":"}}),
        );
        assert_eq!(out, serde_json::json!({"x": r#"{",":":"}"#}));
        // A string where a number or a list element stood bare: quoted.
        let out = parse(
            r#"{"a": [{{ doc.a }}, {{ doc.b }}], "t": {{ doc.t }}}"#,
            serde_json::json!({"a": "1, 2, 3", "b": 4, "t": "{}"}),
        );
        assert_eq!(out, serde_json::json!({"a": ["1, 2, 3", 4], "t": "{}"}));
        // Text marked safe stands bare only if it is one JSON value.
        let out = parse(
            r#"{"a": {{ doc.a|safe }}, "b": {{ doc.b|safe }}}"#,
            serde_json::json!({"a": "1, \"k\": 2", "b": "[1, 2]"}),
        );
        assert_eq!(out, serde_json::json!({"a": "1, \"k\": 2", "b": [1, 2]}));
    }

    #[test]
    fn the_position_is_read_from_the_templates_own_text() {
        let t = r#"{# "a comment with a quote #}{"q": "a \" {{ doc.v }}", {% raw %}"r": "{{ not rendered }}",{% endraw %} "k": {{ doc.v }}, "s": '{{ doc.v }}'}"#;
        let out = body(t, serde_json::json!({"v": "x"})).unwrap();
        assert_eq!(
            out,
            r#"{"q": "a \" x", "r": "{{ not rendered }}", "k": "x", "s": '"x"'}"#
        );
        assert!(body(
            r#"{"a": {{ doc.v|hookfleet_json_value }}}"#,
            serde_json::json!({})
        )
        .is_err());
    }

    #[test]
    fn lists_and_objects_are_written_as_json() {
        let out = body(
            r#"{"items": {{ doc.items }}}"#,
            serde_json::json!({"items": [{"code": "A\"1", "qty": 2}]}),
        )
        .unwrap();
        let parsed: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(parsed["items"][0]["code"], "A\"1");
    }
}
