//! Request building: Frappe-style Jinja conditions, body templates and dynamic
//! URLs, field selections for JSON and form bodies. A `CompiledWebhook` is
//! compiled once (producers cache it) and renders many documents.
//!
//! Templates see one variable, `doc` (the document as JSON). Every render is
//! bounded: `TEMPLATE_FUEL` caps the instructions a template may execute,
//! `range` yields at most `RANGE_LIMIT` numbers (a filter call is one
//! instruction however much it does, so this bounds the work per instruction
//! for anything not taken from the document), and output is cut off as soon
//! as it passes its limit (`MAX_BODY_BYTES`, `MAX_URL_BYTES`) rather than after
//! it was built.

use std::sync::Arc;

use minijinja::value::Value as JinjaValue;
use minijinja::{Environment, UndefinedBehavior};
use serde_json::Value;

use crate::error::RenderError;
use crate::model::{FieldMapping, Header, Structure, Webhook};
use crate::ssrf::NetworkPolicy;

/// Instructions one render may execute. A few thousand cover a template that
/// loops over a document with hundreds of child rows; this bound stops a
/// template that would spin (nested `range`s) in milliseconds instead of
/// holding a producer.
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

/// The longest a template may take on the sample document when a webhook is
/// added: real templates render in microseconds; one that takes this long on
/// a small sample would stall producers on real documents.
pub const VALIDATION_RENDER_BUDGET: std::time::Duration = std::time::Duration::from_secs(1);

const BODY: &str = "body";
const URL: &str = "url";
const CONDITION: &str = "condition";

/// A request built from a document, exactly as it will be stored and sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltRequest {
    pub url: String,
    pub method: String,
    /// Static headers plus Content-Type (signatures are added per attempt).
    pub headers: Vec<Header>,
    pub body: String,
}

/// A webhook with its templates compiled.
pub struct CompiledWebhook {
    pub webhook: Arc<Webhook>,
    env: Environment<'static>,
    fields: Vec<FieldMapping>,
    headers: Vec<Header>,
}

/// `range` as in Jinja, capped at [`RANGE_LIMIT`] numbers.
fn capped_range(
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

fn environment(lenient_validation: bool) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.add_function("range", capped_range);
    if lenient_validation {
        // Validation renders on a sample document that lacks most fields: an
        // undefined value prints as `null`, which keeps a JSON template JSON.
        env.set_formatter(|out, state, value| {
            if value.is_undefined() {
                out.write_str("null").map_err(minijinja::Error::from)
            } else {
                minijinja::escape_formatter(out, state, value)
            }
        });
    }
    env
}

/// A template error, saying which template (`body template`, `URL
/// template`, `condition`) it is about.
fn template_error(what: &'static str) -> impl Fn(minijinja::Error) -> RenderError {
    move |e| {
        let mut msg = format!("{what}: {}", describe_template_error(&e));
        msg = msg
            .replace(" (in <expression>:1)", "")
            .replace(" (in body:1)", "")
            .replace(" (in url:1)", "");
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

fn check_size(body: &str) -> Result<(), RenderError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(RenderError::BodyTooLarge {
            size: body.len(),
            limit: MAX_BODY_BYTES,
        });
    }
    Ok(())
}

/// Parses and checks a rendered URL: http or https, with a host, and not an
/// internal address unless the policy allows it.
pub fn check_url(raw: &str, policy: &NetworkPolicy) -> Result<url::Url, RenderError> {
    let url = url::Url::parse(raw.trim()).map_err(|e| RenderError::Url(format!("{e}")))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(RenderError::Url(format!(
            "scheme {:?} is not http or https",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(RenderError::Url("the URL has no host".into()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(RenderError::Url(
            "credentials in the URL would be shown wherever the URL is; send them in a header"
                .into(),
        ));
    }
    policy.check_url(&url).map_err(RenderError::Url)?;
    Ok(url)
}

impl CompiledWebhook {
    /// Compiles the webhook's templates. Fails only for a webhook stored
    /// without validation (edited by hand); the error is recorded on its rows.
    pub fn compile(webhook: Arc<Webhook>) -> Result<Self, RenderError> {
        Self::compile_with(webhook, false)
    }

    fn compile_with(webhook: Arc<Webhook>, validation: bool) -> Result<Self, RenderError> {
        let mut env = environment(validation);
        if let Some(t) = &webhook.body_template {
            env.add_template_owned(BODY, t.clone())
                .map_err(template_error("body template"))?;
        }
        if webhook.dynamic_url {
            env.add_template_owned(URL, webhook.request_url.clone())
                .map_err(template_error("URL template"))?;
        }
        if let Some(c) = webhook
            .condition
            .as_deref()
            .filter(|c| !c.trim().is_empty())
        {
            // Parsed alone first so that a condition is one expression, not a
            // fragment that closes the wrapper below.
            env.compile_expression(c)
                .map_err(template_error("condition"))?;
            env.add_template_owned(CONDITION, format!("{{% if {c} %}}1{{% endif %}}"))
                .map_err(template_error("condition"))?;
        }
        Ok(CompiledWebhook {
            fields: webhook.field_mappings(),
            headers: webhook.header_list(),
            webhook,
            env,
        })
    }

    fn render(&self, name: &'static str, doc: &Value) -> Result<String, RenderError> {
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
            .render_captured_to(
                minijinja::context! { doc => JinjaValue::from_serialize(doc) },
                &mut out,
            )
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

    /// Does the webhook's condition hold for `doc`? (No condition: yes.)
    pub fn condition_holds(&self, doc: &Value) -> Result<bool, RenderError> {
        if self.env.get_template(CONDITION).is_err() {
            return Ok(true);
        }
        Ok(self.render(CONDITION, doc)? == "1")
    }

    /// Builds the request for `doc`.
    pub fn build_request(
        &self,
        doc: &Value,
        policy: &NetworkPolicy,
    ) -> Result<BuiltRequest, RenderError> {
        let url = if self.webhook.dynamic_url {
            self.render(URL, doc)?.trim().to_string()
        } else {
            self.webhook.request_url.clone()
        };
        check_url(&url, policy)?;
        let structure = self.webhook.structure();
        let body = match structure {
            Structure::Json if self.webhook.body_template.is_some() => {
                let rendered = self.render(BODY, doc)?;
                let trimmed = rendered.trim();
                check_size(trimmed)?;
                serde_json::from_str::<serde::de::IgnoredAny>(trimmed)
                    .map_err(|e| RenderError::NotJson(e.to_string()))?;
                trimmed.to_string()
            }
            Structure::Json if !self.fields.is_empty() => json_selection(&self.fields, doc),
            Structure::Json => doc.to_string(),
            Structure::Form => form_selection(&self.fields, doc),
        };
        check_size(&body)?;
        let mut headers = Vec::with_capacity(self.headers.len() + 1);
        if !self
            .headers
            .iter()
            .any(|h| h.key.eq_ignore_ascii_case("content-type"))
        {
            headers.push(Header {
                key: "Content-Type".into(),
                value: structure.content_type().into(),
            });
        }
        headers.extend(self.headers.iter().cloned());
        Ok(BuiltRequest {
            url,
            method: self.webhook.method().as_str().into(),
            headers,
            body,
        })
    }
}

/// `{"key": doc[field], ...}` in selection order (a missing field is null).
fn json_selection(fields: &[FieldMapping], doc: &Value) -> String {
    let mut out = String::from("{");
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::String(f.key.clone()).to_string());
        out.push(':');
        out.push_str(&doc.get(&f.field).unwrap_or(&Value::Null).to_string());
    }
    out.push('}');
    out
}

/// `key=value&...` in selection order: strings as they are, numbers and
/// booleans as text, null or missing as empty, objects and arrays as JSON.
fn form_selection(fields: &[FieldMapping], doc: &Value) -> String {
    let mut ser = url::form_urlencoded::Serializer::new(String::new());
    for f in fields {
        let value = match doc.get(&f.field) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        ser.append_pair(&f.key, &value);
    }
    ser.finish()
}

/// The document templates are tried on when a webhook is added without
/// `--sample-doc`.
pub fn default_sample_doc(entity_type: &str) -> Value {
    serde_json::json!({ "doctype": entity_type, "name": "SAMPLE-0001" })
}

/// Checks that the webhook's templates compile, that its condition is one
/// expression, and that its body template renders to JSON (and its dynamic URL
/// to an http(s) URL) on `sample`. Used before a webhook is stored.
pub fn check_templates(
    webhook: Arc<Webhook>,
    sample: &Value,
    policy: &NetworkPolicy,
) -> Result<(), RenderError> {
    check_templates_within(webhook, sample, policy, VALIDATION_RENDER_BUDGET)
}

fn check_templates_within(
    webhook: Arc<Webhook>,
    sample: &Value,
    policy: &NetworkPolicy,
    budget: std::time::Duration,
) -> Result<(), RenderError> {
    let compiled = CompiledWebhook::compile_with(webhook, true)?;
    let started = std::time::Instant::now();
    if compiled.env.get_template(CONDITION).is_ok() {
        compiled.render(CONDITION, sample)?;
    }
    if compiled.webhook.body_template.is_some() && compiled.webhook.structure() == Structure::Json {
        let rendered = compiled.render(BODY, sample)?;
        check_size(rendered.trim())?;
        serde_json::from_str::<serde::de::IgnoredAny>(rendered.trim()).map_err(|e| {
            RenderError::NotJson(format!(
                "{e} (rendered on the sample document {sample}: {})",
                rendered.trim()
            ))
        })?;
    }
    if compiled.webhook.dynamic_url {
        let url = compiled.render(URL, sample)?;
        check_url(&url, policy)?;
    }
    let took = started.elapsed();
    if took > budget {
        return Err(RenderError::Template(format!(
            "the templates took {} ms on the sample document (at most {} ms): too expensive to run per event",
            took.as_millis(),
            budget.as_millis()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WebhookSpec;

    fn hook(url: &str, dynamic: bool, template: Option<&str>) -> Arc<Webhook> {
        let mut spec = WebhookSpec::new("t", "Sales Order", "on_submit", url);
        spec.dynamic_url = dynamic;
        spec.body_template = template.map(str::to_string);
        Arc::new(Webhook::preview(&spec))
    }

    #[test]
    fn a_dynamic_url_over_eight_kibibytes_is_refused_and_one_at_the_limit_is_built() {
        let policy = NetworkPolicy::default();
        let base = "https://example.com/";
        let doc = |n: usize| serde_json::json!({ "path": "a".repeat(n) });
        let compiled =
            CompiledWebhook::compile(hook(&format!("{base}{{{{ doc.path }}}}"), true, None))
                .unwrap();
        let err = compiled
            .build_request(&doc(MAX_URL_BYTES - base.len() + 1), &policy)
            .unwrap_err();
        assert!(
            matches!(err, RenderError::Url(ref m) if m.contains("8192")),
            "{err}"
        );
        let ok = compiled
            .build_request(&doc(MAX_URL_BYTES - base.len()), &policy)
            .unwrap();
        assert_eq!(ok.url.len(), MAX_URL_BYTES);
    }

    #[test]
    fn a_template_over_the_validation_budget_is_refused() {
        let policy = NetworkPolicy::default();
        let sample = default_sample_doc("Sales Order");
        let w = hook("https://example.com/x", false, Some(r#"{"a": 1}"#));
        assert!(
            check_templates_within(w.clone(), &sample, &policy, VALIDATION_RENDER_BUDGET).is_ok()
        );
        let err =
            check_templates_within(w, &sample, &policy, std::time::Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("too expensive"), "{err}");
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
}
