//! A webhook: a subscription to one event of one entity type, with where
//! its requests go, what they carry and how they are signed; its
//! definition as written (`WebhookSpec`), as stored (`WebhookRow`) and as
//! read back (`Webhook`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use serde::{Deserialize, Serialize};

use crate::domain::at_rest::{self, OpenError, Purpose};
use crate::domain::signing::{Secret, SigningKeys};
use crate::domain::text::named;
use crate::store::schema::webhooks;

/// The HTTP methods a webhook may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Method {
    Post,
    Put,
    Patch,
    Delete,
    Get,
}

impl Method {
    pub const ALL: [Method; 5] = [
        Method::Post,
        Method::Put,
        Method::Patch,
        Method::Delete,
        Method::Get,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
            Method::Get => "GET",
        }
    }
}

impl FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        named(&Method::ALL, Method::as_str, s).ok_or_else(|| {
            format!("unknown request method {s:?} (expected POST, PUT, PATCH, DELETE or GET)")
        })
    }
}

/// How the body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Structure {
    /// `application/json`: a Jinja template, a field selection, or the whole document.
    Json,
    /// `application/x-www-form-urlencoded`: a field selection.
    Form,
}

impl Structure {
    pub const ALL: [Structure; 2] = [Structure::Json, Structure::Form];

    pub fn as_str(self) -> &'static str {
        match self {
            Structure::Json => "json",
            Structure::Form => "form",
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Structure::Json => "application/json",
            Structure::Form => "application/x-www-form-urlencoded",
        }
    }
}

impl FromStr for Structure {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        named(&Structure::ALL, Structure::as_str, s)
            .ok_or_else(|| format!("unknown request structure {s:?} (expected json or form)"))
    }
}

/// One selected document field and the key it is sent under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FieldMapping {
    pub field: String,
    pub key: String,
}

/// A header sent with every request of a webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Header {
    pub key: String,
    pub value: String,
}

/// How every surface shows a header value it hides (see
/// [`display_header_value`]); in a definition sent back it means "keep the
/// stored value".
pub const HIDDEN: &str = "[hidden]";

/// The longest reason a pause may give: a sentence or two for the next
/// operator (list and show print it on one line).
pub(crate) const MAX_PAUSE_REASON_CHARS: usize = 500;

/// How a static header value is shown: hidden, whatever its name (`X-Creds:
/// hunter2` is as secret as `Authorization`), unless the operator asks to
/// see it. `Content-Type`, which hookfleet itself sets from the body, shows.
pub fn display_header_value(key: &str, value: &str, reveal: bool) -> String {
    if reveal || key.eq_ignore_ascii_case("content-type") {
        value.to_string()
    } else {
        HIDDEN.into()
    }
}

/// A webhook as stored.
#[derive(Clone, Queryable, Selectable, Identifiable)]
#[diesel(table_name = webhooks, check_for_backend(diesel::pg::Pg))]
pub struct Webhook {
    pub id: i64,
    pub name: String,
    pub entity_type: String,
    pub event: String,
    pub request_url: String,
    pub dynamic_url: bool,
    pub request_method: String,
    pub request_structure: String,
    pub body_template: Option<String>,
    pub fields: serde_json::Value,
    pub headers: serde_json::Value,
    pub condition: Option<String>,
    pub enabled: bool,
    pub secret: Option<String>,
    pub previous_secret: Option<String>,
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    pub timeout_ms: i32,
    pub queue: String,
    pub max_retries: i32,
    pub max_concurrency: Option<i32>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Hosts (`host` or `host:port`) a dynamic URL may render to; empty:
    /// the host written literally in the URL template.
    pub allowed_hosts: Vec<String>,
    /// Set while the webhook is paused: its events are recorded, nothing is
    /// sent until `webhook resume`.
    pub paused_at: Option<DateTime<Utc>>,
    /// Who paused it and why (an operator, or the auto-pause).
    pub paused_reason: Option<String>,
    /// Requests per second to this webhook from the whole fleet (None: no
    /// limit).
    pub rate_limit: Option<i32>,
    /// The body as Frappe sends it (see [`WebhookSpec::frappe_body`]).
    pub frappe_body: bool,
}

impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhook")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("entity_type", &self.entity_type)
            .field("event", &self.event)
            .field("enabled", &self.enabled)
            .field("signed", &self.secret.is_some())
            .finish_non_exhaustive()
    }
}

impl Webhook {
    pub fn field_mappings(&self) -> Vec<FieldMapping> {
        serde_json::from_value(self.fields.clone()).unwrap_or_default()
    }

    /// The static headers, their values opened (they are stored sealed when
    /// a key is configured, see [`crate::domain::at_rest`]).
    pub fn header_list(&self) -> Result<Vec<Header>, HeaderError> {
        let ring = at_rest::keyring();
        let stored = parse_headers(&self.headers).map_err(HeaderError::Malformed)?;
        stored
            .into_iter()
            .map(|h| {
                let value = ring
                    .open(&h.value, Purpose::HeaderValue)
                    .map_err(|e| HeaderError::Sealed(h.key.clone(), e))?;
                Ok(Header { key: h.key, value })
            })
            .collect()
    }

    /// The static Content-Type header's value, if the webhook sets one (it is
    /// stored as it is; opened if an older version sealed it).
    pub fn content_type(&self) -> Result<Option<String>, HeaderError> {
        let stored = parse_headers(&self.headers).map_err(HeaderError::Malformed)?;
        stored
            .into_iter()
            .find(|h| h.key.eq_ignore_ascii_case("content-type"))
            .map(|h| {
                at_rest::keyring()
                    .open(&h.value, Purpose::HeaderValue)
                    .map_err(|e| HeaderError::Sealed(h.key.clone(), e))
            })
            .transpose()
    }

    /// The static headers' names (no value is opened).
    pub fn header_names(&self) -> Vec<String> {
        parse_headers(&self.headers)
            .map(|hs| hs.into_iter().map(|h| h.key).collect())
            .unwrap_or_default()
    }

    pub fn method(&self) -> Method {
        self.request_method.parse().unwrap_or(Method::Post)
    }

    pub fn structure(&self) -> Structure {
        self.request_structure.parse().unwrap_or(Structure::Json)
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1) as u64)
    }

    /// Whether a secret rotation is open at `now`: the previous secret still
    /// signs (and signs the Frappe header).
    pub fn rotating(&self, now: DateTime<Utc>) -> bool {
        self.previous_secret.is_some() && self.previous_secret_expires_at.is_some_and(|t| t > now)
    }

    /// The definition this row was built from, for `webhook update` (the
    /// secret and header values opened).
    pub fn to_spec(&self) -> Result<WebhookSpec, HeaderError> {
        let secret = self
            .secret
            .as_deref()
            .map(|s| at_rest::keyring().open(s, Purpose::SigningSecret))
            .transpose()
            .map_err(HeaderError::Secret)?;
        Ok(WebhookSpec {
            name: self.name.clone(),
            entity_type: self.entity_type.clone(),
            event: self.event.clone(),
            request_url: self.request_url.clone(),
            dynamic_url: self.dynamic_url,
            method: self.method(),
            structure: self.structure(),
            body_template: self.body_template.clone(),
            fields: self.field_mappings(),
            headers: self.header_list()?,
            condition: self.condition.clone(),
            enabled: self.enabled,
            secret: secret.map(Secret::new),
            timeout: self.timeout(),
            queue: self.queue.clone(),
            max_retries: self.max_retries,
            max_concurrency: self.max_concurrency,
            rate_limit: self.rate_limit,
            allowed_hosts: self.allowed_hosts.clone(),
            frappe_body: self.frappe_body,
        })
    }
}

/// Opens a webhook's stored signing secrets (current, and previous while a
/// rotation is open).
pub(crate) fn open_signing_keys(
    current: Option<&str>,
    previous: Option<&str>,
) -> Result<SigningKeys, OpenError> {
    let ring = at_rest::keyring();
    let open = |s: &str| ring.open(s, Purpose::SigningSecret).map(Secret::new);
    Ok(SigningKeys {
        current: current.map(open).transpose()?,
        previous: previous.map(open).transpose()?,
    })
}

/// Why a webhook's stored headers or secret cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("{0}")]
    Malformed(String),
    #[error("the value of header {0:?} cannot be opened: {1}")]
    Sealed(String, OpenError),
    #[error("the signing secret cannot be opened: {0}")]
    Secret(OpenError),
}

impl Webhook {
    /// The webhook `spec` would be once stored (no id, no secret): what its
    /// templates are tried on before it is.
    pub fn preview(spec: &WebhookSpec) -> Webhook {
        let row = WebhookRow::from(spec);
        let now = Utc::now();
        Webhook {
            id: 0,
            name: row.name,
            entity_type: row.entity_type,
            event: row.event,
            request_url: row.request_url,
            dynamic_url: row.dynamic_url,
            request_method: row.request_method,
            request_structure: row.request_structure,
            body_template: row.body_template,
            fields: row.fields,
            headers: row.headers,
            condition: row.condition,
            enabled: row.enabled,
            secret: None,
            previous_secret: None,
            previous_secret_expires_at: None,
            timeout_ms: row.timeout_ms,
            queue: row.queue,
            max_retries: row.max_retries,
            max_concurrency: row.max_concurrency,
            rate_limit: row.rate_limit,
            created_at: now,
            updated_at: now,
            allowed_hosts: row.allowed_hosts,
            paused_at: None,
            paused_reason: None,
            frappe_body: row.frappe_body,
        }
    }
}

/// The timeout a webhook gets unless it says otherwise (Frappe's default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Retries after the first attempt unless a webhook says otherwise.
pub(crate) const DEFAULT_MAX_RETRIES: i32 = 3;

/// A webhook definition as typed by an operator, before it is validated and
/// stored (see `validate`).
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookSpec {
    pub name: String,
    pub entity_type: String,
    pub event: String,
    pub request_url: String,
    pub dynamic_url: bool,
    pub method: Method,
    pub structure: Structure,
    pub body_template: Option<String>,
    pub fields: Vec<FieldMapping>,
    pub headers: Vec<Header>,
    pub condition: Option<String>,
    pub enabled: bool,
    pub secret: Option<Secret>,
    pub timeout: Duration,
    pub queue: String,
    pub max_retries: i32,
    pub max_concurrency: Option<i32>,
    /// Requests per second from the whole fleet (None: no limit).
    pub rate_limit: Option<i32>,
    /// Hosts a dynamic URL may render to (see [`Webhook::allowed_hosts`]).
    pub allowed_hosts: Vec<String>,
    /// Send the body as Frappe would: values inside a template's quotes
    /// written as Python's `str` writes them (`None`, `True`, `['a']`), and
    /// the JSON as Python's `json.dumps` writes it (`", "` and `": "`,
    /// `\uXXXX` past ASCII). `webhook import` sets it.
    pub frappe_body: bool,
}

impl WebhookSpec {
    /// A definition with the defaults: POST, a JSON body of the whole
    /// document, no condition, unsigned, enabled, 5 s timeout, queue
    /// `default`, 3 retries, the worker's default concurrency.
    pub fn new(name: &str, entity_type: &str, event: &str, url: &str) -> WebhookSpec {
        WebhookSpec {
            name: name.into(),
            entity_type: entity_type.into(),
            event: event.into(),
            request_url: url.into(),
            dynamic_url: false,
            method: Method::Post,
            structure: Structure::Json,
            body_template: None,
            fields: Vec::new(),
            headers: Vec::new(),
            condition: None,
            enabled: true,
            secret: None,
            timeout: DEFAULT_TIMEOUT,
            queue: "default".into(),
            max_retries: DEFAULT_MAX_RETRIES,
            max_concurrency: None,
            rate_limit: None,
            allowed_hosts: Vec::new(),
            frappe_body: false,
        }
    }
}

/// Column values for inserting or updating a webhook: the secret and header
/// values sealed (see [`crate::domain::at_rest`]). An update leaves the secret to
/// [`crate::store::webhooks::update`]'s rotation rules.
#[derive(Insertable, AsChangeset)]
#[diesel(table_name = webhooks, treat_none_as_null = true)]
pub struct WebhookRow {
    pub name: String,
    pub entity_type: String,
    pub event: String,
    pub request_url: String,
    pub dynamic_url: bool,
    pub request_method: String,
    pub request_structure: String,
    pub body_template: Option<String>,
    pub fields: serde_json::Value,
    pub headers: serde_json::Value,
    pub condition: Option<String>,
    pub enabled: bool,
    #[diesel(skip_update)]
    pub secret: Option<String>,
    pub timeout_ms: i32,
    pub queue: String,
    pub max_retries: i32,
    pub max_concurrency: Option<i32>,
    pub rate_limit: Option<i32>,
    pub allowed_hosts: Vec<String>,
    pub frappe_body: bool,
}

impl From<&WebhookSpec> for WebhookRow {
    fn from(s: &WebhookSpec) -> Self {
        let ring = at_rest::keyring();
        let sealed_headers: Vec<Header> = s
            .headers
            .iter()
            .map(|h| Header {
                key: h.key.clone(),
                // The body's type is no credential, and emitters read it.
                value: if h.key.eq_ignore_ascii_case("content-type") {
                    h.value.clone()
                } else {
                    ring.seal(&h.value, Purpose::HeaderValue)
                },
            })
            .collect();
        WebhookRow {
            name: s.name.clone(),
            entity_type: s.entity_type.clone(),
            event: s.event.clone(),
            request_url: s.request_url.clone(),
            dynamic_url: s.dynamic_url,
            request_method: s.method.as_str().into(),
            request_structure: s.structure.as_str().into(),
            body_template: s.body_template.clone(),
            fields: serde_json::to_value(&s.fields).unwrap_or_default(),
            headers: serde_json::to_value(&sealed_headers).unwrap_or_default(),
            condition: s.condition.clone(),
            enabled: s.enabled,
            secret: s
                .secret
                .as_ref()
                .map(|x| ring.seal(x.expose(), Purpose::SigningSecret)),
            timeout_ms: s.timeout.as_millis().min(i32::MAX as u128) as i32,
            queue: s.queue.clone(),
            max_retries: s.max_retries,
            max_concurrency: s.max_concurrency,
            rate_limit: s.rate_limit,
            allowed_hosts: s.allowed_hosts.clone(),
            frappe_body: s.frappe_body,
        }
    }
}

/// Reads a stored header list (`[{"key": …, "value": …}, …]`).
pub fn parse_headers(value: &serde_json::Value) -> Result<Vec<Header>, String> {
    serde_json::from_value(value.clone())
        .map_err(|e| format!("the stored headers are not a list of key/value pairs: {e}"))
}
