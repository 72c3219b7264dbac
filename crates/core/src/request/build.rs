//! Request building: from a document to the request stored on its row. A
//! webhook's templates (condition, body, dynamic URL) are rendered by a
//! [`Renderer`] (the template language's renderer processes); this module
//! checks what came back (a URL that is http(s), allowed and on an allowed
//! host; a body that is JSON and within its limit) and builds field
//! selections for JSON and form bodies itself. What an operator asks of
//! it (a preview, the checks before a definition is stored) is
//! `hookfleet-admin`'s.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::{FieldMapping, Header, Structure, Webhook};
use crate::error::RenderError;

use crate::request::NetworkPolicy;

/// The largest request body hookfleet builds and stores (1 MiB, the common
/// ceiling among webhook services): a receiver is not a file store.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// The longest URL a dynamic URL template may produce: servers and proxies
/// commonly refuse request lines past 8 KiB.
pub const MAX_URL_BYTES: usize = 8 * 1024;

/// The longest template source accepted (each of condition, body, URL): a
/// template is a few hundred bytes; one this size is a mistake or an attack.
pub const MAX_TEMPLATE_BYTES: usize = 64 * 1024;

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
    /// A value inside a body template's quotes is written as Python's
    /// `str` writes it (`None`, `True`, `['a']`), as Frappe's template
    /// would (the webhook's `frappe_body`).
    #[serde(default)]
    pub python_text: bool,
}

impl Templates {
    /// Nothing to render: no condition, no body template, a static URL.
    pub fn is_empty(&self) -> bool {
        self.condition.is_none() && self.body.is_none() && self.url.is_none()
    }

    /// The bytes of its sources.
    pub fn source_len(&self) -> usize {
        [&self.condition, &self.body, &self.url]
            .iter()
            .map(|s| s.as_ref().map_or(0, String::len))
            .sum()
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

/// One render: a webhook's templates on one document.
#[derive(Debug, Clone)]
pub struct RenderJob<'a> {
    pub templates: &'a Arc<Templates>,
    pub doc: &'a Value,
}

/// The seam between request building and the template language: whatever
/// renders a webhook's templates (`hookfleet-template`'s renderer
/// processes; the worker and the sweeper, which never render, link none).
pub trait Renderer: Send + Sync {
    /// One result per job, in order. [`RenderError::Renderer`] means the
    /// renderers, not the template, failed (callers record nothing for it).
    /// Blocking: call it from a blocking thread.
    fn render(&self, jobs: &[RenderJob<'_>]) -> Vec<Result<Rendered, RenderError>>;
}

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
    /// The body's Content-Type (a static header's, else the structure's),
    /// or why the static headers cannot be read.
    content_type: Result<String, RenderError>,
    /// Where a dynamic URL may lead.
    hosts: AllowedHosts,
}

/// The hosts a dynamic URL may render to (DESIGN: secrets and static headers
/// are never sent elsewhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedHosts {
    /// A static URL: nothing rendered, nothing to pin.
    Static,
    /// `host` or `host:port` entries, compared without case, under the
    /// scheme the URL template writes.
    These { scheme: String, hosts: Vec<String> },
    /// The URL template renders its host and names no allowed host: refused
    /// at add, Exhausted at emit.
    Unpinned,
}

impl AllowedHosts {
    /// The hosts `webhook`'s rendered URLs may have.
    pub fn of(webhook: &Webhook) -> AllowedHosts {
        Self::for_template(
            webhook.dynamic_url,
            &webhook.request_url,
            &webhook.allowed_hosts,
        )
    }

    /// The hosts a URL template (`dynamic`) may render to, given the hosts
    /// named for it.
    pub fn for_template(dynamic: bool, url: &str, allowed: &[String]) -> AllowedHosts {
        if !dynamic {
            return AllowedHosts::Static;
        }
        // The scheme must be written: a document choosing it could send the
        // credentials in the clear.
        let Some(scheme) = literal_scheme(url) else {
            return AllowedHosts::Unpinned;
        };
        if !allowed.is_empty() {
            return AllowedHosts::These {
                scheme,
                hosts: allowed.to_vec(),
            };
        }
        match literal_host(url) {
            Some(host) => AllowedHosts::These {
                scheme,
                hosts: vec![host],
            },
            None => AllowedHosts::Unpinned,
        }
    }

    /// Refuses a rendered URL whose host (and port) is not allowed. An
    /// entry without a port allows the scheme's own port only.
    pub fn check(&self, url: &url::Url) -> Result<(), RenderError> {
        let host = url
            .host_str()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        match self {
            AllowedHosts::Static => Ok(()),
            AllowedHosts::Unpinned => Err(RenderError::Url(
                "the URL template renders its scheme, or its host with no allowed host named (--allowed-host)".into(),
            )),
            AllowedHosts::These { scheme, .. } if url.scheme() != scheme => {
                Err(RenderError::Url(format!(
                    "the URL renders to scheme {}, not the template's {scheme}",
                    url.scheme()
                )))
            }
            AllowedHosts::These { hosts: entries, .. } => {
                let allowed = entries.iter().filter_map(|e| parse_host_entry(e)).any(
                    |(h, port)| {
                        h == host
                            && match port {
                                None => url.port().is_none(),
                                Some(p) => url.port_or_known_default() == Some(p),
                            }
                    },
                );
                if allowed {
                    Ok(())
                } else {
                    Err(RenderError::Url(format!(
                        "the URL renders to {}, which this webhook does not allow",
                        match url.port() {
                            Some(p) => format!("{host}:{p}"),
                            None => host,
                        }
                    )))
                }
            }
        }
    }
}

/// Reads `host`, `host:port`, `[v6]` or `[v6]:port` (lower-cased host
/// without brackets); None if it is none of these.
pub fn parse_host_entry(entry: &str) -> Option<(String, Option<u16>)> {
    let entry = entry.trim();
    let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (host, port)
    } else {
        match entry.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (entry, None),
        }
    };
    if host.is_empty()
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '_'))
    {
        return None;
    }
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p > 0)?),
        None => None,
    };
    Some((host.to_ascii_lowercase(), port))
}

/// The scheme (`http` or `https`) a URL template writes literally, if it
/// does.
pub(crate) fn literal_scheme(template: &str) -> Option<String> {
    let scheme = template.trim().split_once("://")?.0.to_ascii_lowercase();
    matches!(scheme.as_str(), "http" | "https").then_some(scheme)
}

/// The host (and port, if written) of a URL template whose authority is
/// written literally, or None when the template renders it.
pub(crate) fn literal_host(template: &str) -> Option<String> {
    let rest = template.trim().split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty()
        || authority.contains("{{")
        || authority.contains("{%")
        || authority.contains('@')
    {
        return None;
    }
    let scheme = template.trim().split_once("://")?.0.to_ascii_lowercase();
    let url = url::Url::parse(&format!("{scheme}://{authority}/")).ok()?;
    let host = url.host_str()?.to_ascii_lowercase();
    Some(match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host,
    })
}

/// Refuses a body over [`MAX_BODY_BYTES`].
pub fn check_body_size(body: &str) -> Result<(), RenderError> {
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
    policy
        .check_url(&url)
        .map_err(|b| RenderError::Url(b.to_string()))?;
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
            python_text: webhook.frappe_body,
        };
        RequestBuilder {
            fields: webhook.field_mappings(),
            content_type: webhook
                .content_type()
                .map(|ct| ct.unwrap_or_else(|| webhook.structure().content_type().into()))
                .map_err(|e| RenderError::Template(e.to_string())),
            hosts: AllowedHosts::of(&webhook),
            templates: (!templates.is_empty()).then(|| Arc::new(templates)),
            webhook,
        }
    }

    /// Where the webhook's rendered URLs may lead.
    pub fn allowed_hosts(&self) -> &AllowedHosts {
        &self.hosts
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
        let parsed = check_url(&url, policy)?;
        self.hosts.check(&parsed)?;
        // A rendered URL is stored as it will be sent: parsed and
        // serialised, so a control character a document put in it (a NUL,
        // which Postgres's text refuses) is percent-encoded as on the wire.
        let url = if self.webhook.dynamic_url {
            parsed.as_str().to_string()
        } else {
            url
        };
        let structure = self.webhook.structure();
        let body = match structure {
            Structure::Json if self.webhook.body_template.is_some() => {
                let rendered = rendered
                    .and_then(|r| r.body.as_deref())
                    .ok_or_else(|| RenderError::Template("body template did not render".into()))?;
                let trimmed = rendered.trim();
                check_body_size(trimmed)?;
                // A Frappe body is read (and so checked) as JSON once, when
                // it is written again below.
                if !self.webhook.frappe_body {
                    serde_json::from_str::<serde::de::IgnoredAny>(trimmed)
                        .map_err(|e| RenderError::NotJson(e.to_string()))?;
                }
                trimmed.to_string()
            }
            Structure::Json if !self.fields.is_empty() => json_selection(&self.fields, doc),
            Structure::Json => doc.to_string(),
            Structure::Form => form_selection(&self.fields, doc),
        };
        // Frappe's sender writes the JSON again (`json.dumps`): so do we,
        // for a webhook that asks for Frappe's bytes.
        let body = if self.webhook.frappe_body && structure == Structure::Json {
            super::python_json::dumps(&body).map_err(|e| RenderError::NotJson(e.to_string()))?
        } else {
            body
        };
        check_body_size(&body)?;
        // Only the body's type is frozen on the row; the static headers
        // (credentials among them) are read from the webhook at send time.
        let headers = vec![Header {
            key: "Content-Type".into(),
            value: self.content_type.clone()?,
        }];
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
        renderer: &dyn Renderer,
    ) -> Vec<Result<Option<BuiltRequest>, RenderError>> {
        let jobs: Vec<RenderJob> = builders
            .iter()
            .filter_map(|(b, doc)| {
                b.templates
                    .as_ref()
                    .map(|t| RenderJob { templates: t, doc })
            })
            .collect();
        let mut rendered = renderer.render(&jobs).into_iter();
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
