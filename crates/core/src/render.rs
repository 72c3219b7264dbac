//! Request building: from a document to the request stored on its row. A
//! webhook's templates (condition, body, dynamic URL) are rendered in a
//! renderer process ([`crate::sandbox`], [`crate::templates`]); this module
//! checks what came back (a URL that is http(s), allowed and on an allowed
//! host; a body that is JSON and within its limit) and builds field
//! selections for JSON and form bodies itself.

use std::sync::Arc;

use serde_json::Value;

use crate::error::RenderError;
use crate::model::{FieldMapping, Header, Structure, Webhook};
use crate::sandbox;
use crate::ssrf::NetworkPolicy;
pub use crate::templates::{
    Rendered, Templates, MAX_BODY_BYTES, MAX_TEMPLATE_BYTES, MAX_URL_BYTES, RANGE_LIMIT,
    TEMPLATE_FUEL,
};

/// A request built from a document, exactly as it will be stored and sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltRequest {
    pub url: String,
    pub method: String,
    /// Static headers plus Content-Type (signatures are added per attempt).
    pub headers: Vec<Header>,
    pub body: String,
}

/// A webhook ready to build requests: its templates (rendered elsewhere),
/// its field selection and its headers.
pub struct RequestBuilder {
    pub webhook: Arc<Webhook>,
    /// None when there is nothing to render (no condition, no body template,
    /// a static URL).
    pub templates: Option<Arc<Templates>>,
    fields: Vec<FieldMapping>,
    headers: Vec<Header>,
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

impl RequestBuilder {
    /// The builder for `webhook`; `lenient` renders a missing field as
    /// `null` (validation on a sample document).
    pub fn new(webhook: Arc<Webhook>, lenient: bool) -> RequestBuilder {
        let templates = Templates {
            condition: webhook.condition.clone().filter(|c| !c.trim().is_empty()),
            body: webhook
                .body_template
                .clone()
                .filter(|_| webhook.structure() == Structure::Json),
            url: webhook.dynamic_url.then(|| webhook.request_url.clone()),
            lenient,
        };
        RequestBuilder {
            fields: webhook.field_mappings(),
            headers: webhook.header_list(),
            templates: (!templates.is_empty()).then(|| Arc::new(templates)),
            webhook,
        }
    }

    /// Does the webhook's condition hold, as rendered? (No condition: yes.)
    pub fn condition_holds(&self, rendered: Option<&Rendered>) -> bool {
        rendered.and_then(|r| r.condition).unwrap_or(true)
    }

    /// Builds the request for `doc`, from what its templates rendered (None
    /// when the webhook has none).
    pub fn build(
        &self,
        doc: &Value,
        rendered: Option<&Rendered>,
        policy: &NetworkPolicy,
    ) -> Result<BuiltRequest, RenderError> {
        let url = match rendered.and_then(|r| r.url.as_deref()) {
            Some(url) if self.webhook.dynamic_url => url.trim().to_string(),
            _ if self.webhook.dynamic_url => {
                return Err(RenderError::Url("the URL template did not render".into()))
            }
            _ => self.webhook.request_url.clone(),
        };
        check_url(&url, policy)?;
        let structure = self.webhook.structure();
        let body = match structure {
            Structure::Json if self.webhook.body_template.is_some() => {
                let rendered = rendered
                    .and_then(|r| r.body.as_deref())
                    .ok_or_else(|| RenderError::Template("body template did not render".into()))?;
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

    /// Renders (in a renderer) and builds the request for each document:
    /// Ok(None) where the condition is false.
    pub fn build_all(
        builders: &[(&RequestBuilder, &Value)],
        policy: &NetworkPolicy,
    ) -> Vec<Result<Option<BuiltRequest>, RenderError>> {
        let jobs: Vec<sandbox::Job> = builders
            .iter()
            .filter_map(|(b, doc)| {
                b.templates
                    .as_ref()
                    .map(|t| sandbox::Job { templates: t, doc })
            })
            .collect();
        let mut rendered = sandbox::render(&jobs).into_iter();
        builders
            .iter()
            .map(|(b, doc)| {
                let r = match &b.templates {
                    Some(_) => Some(rendered.next().unwrap_or_else(|| {
                        Err(RenderError::Renderer("no answer for this document".into()))
                    })?),
                    None => None,
                };
                if !b.condition_holds(r.as_ref()) {
                    return Ok(None);
                }
                b.build(doc, r.as_ref(), policy).map(Some)
            })
            .collect()
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
/// to an http(s) URL) on `sample`, each within the renderer's time and memory
/// limits. Used before a webhook is stored.
pub fn check_templates(
    webhook: Arc<Webhook>,
    sample: &Value,
    policy: &NetworkPolicy,
) -> Result<(), RenderError> {
    let builder = RequestBuilder::new(webhook, true);
    let Some(templates) = &builder.templates else {
        return Ok(());
    };
    let rendered = sandbox::render(&[sandbox::Job {
        templates,
        doc: sample,
    }])
    .pop()
    .unwrap_or_else(|| Err(RenderError::Renderer("no answer".into())))?;
    if let Some(body) = &rendered.body {
        check_size(body.trim())?;
        serde_json::from_str::<serde::de::IgnoredAny>(body.trim()).map_err(|e| {
            RenderError::NotJson(format!(
                "{e} (rendered on the sample document {sample}: {})",
                body.trim()
            ))
        })?;
    }
    if let Some(url) = &rendered.url {
        check_url(url, policy)?;
    }
    Ok(())
}
