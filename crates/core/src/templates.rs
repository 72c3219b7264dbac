//! The Jinja side of a webhook: its condition, body template and dynamic URL
//! template, compiled and rendered on one document. This code runs only in
//! the renderer process ([`crate::sandbox`]), where the operating system
//! bounds its memory and the parent its time; what it produces (a verdict, a
//! URL, a body) goes back to the parent, which checks it ([`crate::render`]).
//!
//! Templates see one variable, `doc` (the document as JSON). Inside that
//! process every render is bounded as well: `TEMPLATE_FUEL` caps the
//! instructions, `range` yields at most `RANGE_LIMIT` numbers, and output is
//! cut off as soon as it passes its limit.
//!
//! In a body template, every value written into the output is JSON: a
//! string is written as JSON string content (quotes, backslashes and control
//! characters escaped, no quotes added), so a document value can never close
//! a string and add keys, while `"name": "{{ doc.name }}"`, the way Frappe's
//! templates are written, keeps working; numbers, booleans, none (`null`),
//! lists and objects are written as JSON.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use minijinja::value::Value as JinjaValue;
use minijinja::{Environment, UndefinedBehavior};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::RenderError;

/// Instructions one render may execute. A few thousand cover a template that
/// loops over a document with hundreds of child rows; this bound stops a
/// template that would spin (nested `range`s) in milliseconds.
pub const TEMPLATE_FUEL: u64 = 1_000_000;

/// The largest request body hookfleet builds and stores (1 MiB, the common
/// ceiling among webhook services): a receiver is not a file store.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// The longest URL a dynamic URL template may produce: servers and proxies
/// commonly refuse request lines past 8 KiB.
pub const MAX_URL_BYTES: usize = 8 * 1024;

/// The most numbers `range()` yields in a template (minijinja allows
/// 100,000): enough for any loop a webhook body needs; loops over the
/// document's own rows are not affected.
pub const RANGE_LIMIT: usize = 1_000;

/// The longest template source accepted (each of condition, body, URL): a
/// template is a few hundred bytes; one this size is a mistake or an attack.
pub const MAX_TEMPLATE_BYTES: usize = 64 * 1024;

const BODY: &str = "body";
const URL: &str = "url";
const CONDITION: &str = "condition";

/// A webhook's templates, as stored: what the renderer compiles.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Templates {
    pub condition: Option<String>,
    pub body: Option<String>,
    /// Set when the URL is dynamic.
    pub url: Option<String>,
    /// Validation on a sample document: a missing field renders as `null`,
    /// which keeps a JSON template JSON.
    pub lenient: bool,
}

impl Templates {
    /// Nothing to render: no condition, no body template, a static URL.
    pub fn is_empty(&self) -> bool {
        self.condition.is_none() && self.body.is_none() && self.url.is_none()
    }

    /// A key for the renderer's cache of compiled templates.
    pub fn key(&self) -> u64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.hash(&mut h);
        h.finish()
    }
}

/// What rendering one document produced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rendered {
    /// The condition's verdict (None: the webhook has no condition).
    pub condition: Option<bool>,
    /// The rendered URL (dynamic URLs only; not rendered when the condition
    /// is false).
    pub url: Option<String>,
    /// The rendered body (body templates only; not rendered when the
    /// condition is false).
    pub body: Option<String>,
}

/// `range` as in Jinja, capped at [`RANGE_LIMIT`] numbers.
pub fn capped_range(
    lower: i64,
    upper: Option<i64>,
    step: Option<i64>,
) -> Result<JinjaValue, minijinja::Error> {
    let (start, end) = match upper {
        Some(u) => (lower, u),
        None => (0, lower),
    };
    let step = step.unwrap_or(1);
    if step == 0 {
        return Err(minijinja::Error::new(
            minijinja::ErrorKind::InvalidOperation,
            "range step cannot be 0",
        ));
    }
    let count = if (step > 0 && end > start) || (step < 0 && end < start) {
        ((end - start).unsigned_abs().div_ceil(step.unsigned_abs())) as usize
    } else {
        0
    };
    if count > RANGE_LIMIT {
        return Err(minijinja::Error::new(
            minijinja::ErrorKind::InvalidOperation,
            format!("range of {count} numbers; at most {RANGE_LIMIT}"),
        ));
    }
    Ok(JinjaValue::from(
        (0..count as i64)
            .map(|i| start + i * step)
            .collect::<Vec<i64>>(),
    ))
}

/// Writes `value` into a body template's output as JSON (see the module
/// docs); values marked safe (`|safe`, `|tojson`) are written as they are.
fn json_formatter(
    out: &mut minijinja::Output,
    state: &minijinja::State,
    value: &JinjaValue,
    lenient: bool,
) -> Result<(), minijinja::Error> {
    use minijinja::value::ValueKind;
    if state.name() != BODY || value.is_safe() {
        if lenient && value.is_undefined() {
            return out.write_str("null").map_err(minijinja::Error::from);
        }
        return minijinja::escape_formatter(out, state, value);
    }
    let text = match value.kind() {
        ValueKind::Undefined if lenient => "null".to_string(),
        ValueKind::Undefined => String::new(),
        ValueKind::String => {
            let s = value.as_str().unwrap_or_default();
            let quoted = serde_json::to_string(s).map_err(json_error)?;
            quoted[1..quoted.len() - 1].to_string()
        }
        // Numbers as JSON writes them (exact: what is parsed is what was
        // sent), none as null, lists and objects as JSON.
        ValueKind::Number
        | ValueKind::Bool
        | ValueKind::None
        | ValueKind::Seq
        | ValueKind::Map
        | ValueKind::Iterable
        | ValueKind::Plain => serde_json::to_string(value).map_err(json_error)?,
        _ => return minijinja::escape_formatter(out, state, value),
    };
    out.write_str(&text).map_err(minijinja::Error::from)
}

fn json_error(e: serde_json::Error) -> minijinja::Error {
    minijinja::Error::new(
        minijinja::ErrorKind::InvalidOperation,
        format!("value cannot be written as JSON: {e}"),
    )
}

fn environment(lenient: bool) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.add_function("range", capped_range);
    env.set_formatter(move |out, state, value| json_formatter(out, state, value, lenient));
    env
}

/// A template error, saying which template (`body template`, `URL
/// template`, `condition`) it is about.
fn template_error(what: &'static str) -> impl Fn(minijinja::Error) -> RenderError {
    move |e| {
        if e.kind() == minijinja::ErrorKind::OutOfFuel {
            return RenderError::Template(format!(
                "{what}: ran out of fuel (its limit of {TEMPLATE_FUEL} instructions)"
            ));
        }
        let mut msg = format!("{what}: {}", describe_template_error(&e));
        msg = msg
            .replace(" (in <expression>:1)", "")
            .replace(" (in body:1)", "")
            .replace(" (in url:1)", "")
            .replace(" (in condition:1)", "");
        RenderError::Template(msg)
    }
}

fn describe_template_error(e: &minijinja::Error) -> String {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}

/// A sink that refuses to grow past `limit` bytes, so a template that would
/// produce gigabytes is stopped at the limit, not after.
struct Capped {
    buf: Vec<u8>,
    limit: usize,
    overflowed: bool,
}

impl std::io::Write for Capped {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > self.limit {
            self.overflowed = true;
            return Err(std::io::Error::other("output limit reached"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A webhook's templates, compiled.
pub struct Compiled {
    env: Environment<'static>,
    /// Validation: every template is rendered, whatever the condition says.
    validation: bool,
    has_condition: bool,
    has_body: bool,
    has_url: bool,
}

impl Compiled {
    /// Compiles `t`; the error names the template at fault.
    pub fn compile(t: &Templates) -> Result<Compiled, RenderError> {
        for (what, source) in [
            ("condition", &t.condition),
            ("body template", &t.body),
            ("URL template", &t.url),
        ] {
            if source
                .as_ref()
                .is_some_and(|s| s.len() > MAX_TEMPLATE_BYTES)
            {
                return Err(RenderError::Template(format!(
                    "{what}: over {MAX_TEMPLATE_BYTES} bytes"
                )));
            }
        }
        let mut env = environment(t.lenient);
        if let Some(body) = &t.body {
            env.add_template_owned(BODY, body.clone())
                .map_err(template_error("body template"))?;
        }
        if let Some(url) = &t.url {
            env.add_template_owned(URL, url.clone())
                .map_err(template_error("URL template"))?;
        }
        let condition = t.condition.as_deref().filter(|c| !c.trim().is_empty());
        if let Some(c) = condition {
            // Parsed alone first so that a condition is one expression, not a
            // fragment that closes the wrapper below.
            env.compile_expression(c)
                .map_err(template_error("condition"))?;
            env.add_template_owned(CONDITION, format!("{{% if {c} %}}1{{% endif %}}"))
                .map_err(template_error("condition"))?;
        }
        Ok(Compiled {
            env,
            validation: t.lenient,
            has_condition: condition.is_some(),
            has_body: t.body.is_some(),
            has_url: t.url.is_some(),
        })
    }

    fn render(&self, name: &'static str, doc: &JinjaValue) -> Result<String, RenderError> {
        let (what, limit) = match name {
            // Room for the whitespace a template adds around its JSON; the
            // trimmed body is checked against the exact limit.
            BODY => ("body template", 2 * MAX_BODY_BYTES),
            URL => ("URL template", MAX_URL_BYTES),
            _ => ("condition", 16),
        };
        let template = self.env.get_template(name).map_err(template_error(what))?;
        let mut out = Capped {
            buf: Vec::new(),
            limit,
            overflowed: false,
        };
        let result = template
            .render_captured_to(minijinja::context! { doc => doc.clone() }, &mut out)
            .map(|_| ());
        if out.overflowed {
            return Err(match name {
                URL => RenderError::Url(format!(
                    "the URL template renders over {MAX_URL_BYTES} bytes"
                )),
                _ => RenderError::BodyTooLarge {
                    size: out.buf.len() + 1,
                    limit: MAX_BODY_BYTES,
                },
            });
        }
        result.map_err(template_error(what))?;
        String::from_utf8(out.buf)
            .map_err(|_| RenderError::Template(format!("{what}: output is not UTF-8")))
    }

    /// Renders the condition, then (if it holds) the URL and the body.
    pub fn render_all(&self, doc: &Value) -> Result<Rendered, RenderError> {
        let doc = JinjaValue::from_serialize(doc);
        let mut rendered = Rendered::default();
        if self.has_condition {
            let holds = self.render(CONDITION, &doc)? == "1";
            rendered.condition = Some(holds);
            if !holds && !self.validation {
                return Ok(rendered);
            }
        }
        if self.has_url {
            rendered.url = Some(self.render(URL, &doc)?);
        }
        if self.has_body {
            rendered.body = Some(self.render(BODY, &doc)?);
        }
        Ok(rendered)
    }
}

/// Compiled templates by [`Templates::key`], so a renderer compiles each
/// webhook's templates once. Bounded: past [`Self::CAPACITY`] entries it
/// starts afresh.
#[derive(Default)]
pub struct CompiledCache {
    entries: HashMap<u64, Arc<Result<Compiled, RenderError>>>,
}

impl CompiledCache {
    /// Webhooks whose compiled templates are kept at once.
    pub const CAPACITY: usize = 1024;

    pub fn get(&mut self, t: &Templates) -> Arc<Result<Compiled, RenderError>> {
        let key = t.key();
        if let Some(c) = self.entries.get(&key) {
            return c.clone();
        }
        if self.entries.len() >= Self::CAPACITY {
            self.entries.clear();
        }
        let compiled = Arc::new(Compiled::compile(t));
        self.entries.insert(key, compiled.clone());
        compiled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(template: &str, doc: Value) -> Result<String, RenderError> {
        let t = Templates {
            condition: None,
            body: Some(template.into()),
            url: None,
            lenient: false,
        };
        Ok(Compiled::compile(&t)?
            .render_all(&doc)?
            .body
            .unwrap_or_default())
    }

    #[test]
    fn range_is_capped_and_counts_like_jinja() {
        assert_eq!(capped_range(3, None, None).unwrap().len(), Some(3));
        assert_eq!(capped_range(1, Some(10), Some(3)).unwrap().len(), Some(3));
        assert_eq!(capped_range(10, Some(0), Some(-2)).unwrap().len(), Some(5));
        assert_eq!(
            capped_range(0, Some(RANGE_LIMIT as i64), None)
                .unwrap()
                .len(),
            Some(RANGE_LIMIT)
        );
        assert!(capped_range(0, Some(RANGE_LIMIT as i64 + 1), None).is_err());
        assert!(capped_range(0, Some(5), Some(0)).is_err());
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
