//! Request building: Frappe-style Jinja conditions, body templates and dynamic
//! URLs, field selections for JSON and form bodies. A `CompiledWebhook` is
//! compiled once (producers cache it) and renders many documents.
//!
//! Templates see one variable, `doc` (the document as JSON). Every render is
//! bounded: `TEMPLATE_FUEL` caps the work a template may do and
//! `MAX_BODY_BYTES` the size of what it produces.

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

fn environment(lenient_validation: bool) -> Environment<'static> {
    let mut env = Environment::new();
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
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
        let what = match name {
            BODY => "body template",
            URL => "URL template",
            _ => "condition",
        };
        let template = self.env.get_template(name).map_err(template_error(what))?;
        template
            .render(minijinja::context! { doc => JinjaValue::from_serialize(doc) })
            .map_err(template_error(what))
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
    let compiled = CompiledWebhook::compile_with(webhook, true)?;
    if compiled.webhook.body_template.is_some() && compiled.webhook.structure() == Structure::Json {
        let rendered = compiled.render(BODY, sample)?;
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
    Ok(())
}
