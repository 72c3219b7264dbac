//! The domain: webhooks (subscriptions), delivery logs (one row per event per
//! webhook) and attempts, with the statuses and enums they use.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::deserialize::{self, FromSql, FromSqlRow};
use diesel::expression::AsExpression;
use diesel::pg::{Pg, PgValue};
use diesel::prelude::*;
use diesel::serialize::{self, IsNull, Output, ToSql};
use serde::{Deserialize, Serialize};

use crate::at_rest::{self, OpenError, Purpose};
use crate::schema::{sql_types, webhook_delivery_attempts, webhook_request_logs, webhooks};
use crate::sign::{Secret, SigningKeys};

/// Where a delivery stands. "next_retry is set ⇔ Queued or Failed" holds on
/// every row (a CHECK constraint). Stored as the Postgres enum
/// `delivery_status`, so no row can hold anything else.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, AsExpression, FromSqlRow,
)]
#[diesel(sql_type = sql_types::DeliveryStatus)]
pub enum DeliveryStatus {
    /// Recorded at emit; the first attempt is on a queue.
    Queued,
    /// The receiver answered 2xx.
    Delivered,
    /// A retry is scheduled (never "failed and forgotten").
    Failed,
    /// Terminal: no further attempt; the reason is on the row.
    Exhausted,
}

impl DeliveryStatus {
    pub const ALL: [DeliveryStatus; 4] = [
        DeliveryStatus::Queued,
        DeliveryStatus::Delivered,
        DeliveryStatus::Failed,
        DeliveryStatus::Exhausted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Queued => "Queued",
            DeliveryStatus::Delivered => "Delivered",
            DeliveryStatus::Failed => "Failed",
            DeliveryStatus::Exhausted => "Exhausted",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, DeliveryStatus::Delivered | DeliveryStatus::Exhausted)
    }
}

impl ToSql<sql_types::DeliveryStatus, Pg> for DeliveryStatus {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
        use std::io::Write;
        out.write_all(self.as_str().as_bytes())?;
        Ok(IsNull::No)
    }
}

impl FromSql<sql_types::DeliveryStatus, Pg> for DeliveryStatus {
    fn from_sql(value: PgValue<'_>) -> deserialize::Result<Self> {
        let label = std::str::from_utf8(value.as_bytes())?;
        DeliveryStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == label)
            .ok_or_else(|| format!("unknown delivery status {label:?}").into())
    }
}

impl fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DeliveryStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DeliveryStatus::ALL
            .into_iter()
            .find(|st| st.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown status {s:?} (expected Queued, Delivered, Failed or Exhausted)")
            })
    }
}

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
        match s.to_ascii_uppercase().as_str() {
            "POST" => Ok(Method::Post),
            "PUT" => Ok(Method::Put),
            "PATCH" => Ok(Method::Patch),
            "DELETE" => Ok(Method::Delete),
            "GET" => Ok(Method::Get),
            _ => Err(format!(
                "unknown request method {s:?} (expected POST, PUT, PATCH, DELETE or GET)"
            )),
        }
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
        match s.to_ascii_lowercase().as_str() {
            "json" => Ok(Structure::Json),
            "form" => Ok(Structure::Form),
            _ => Err(format!(
                "unknown request structure {s:?} (expected json or form)"
            )),
        }
    }
}

/// One selected document field and the key it is sent under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldMapping {
    pub field: String,
    pub key: String,
}

/// A header sent with every request of a webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub key: String,
    pub value: String,
}

/// The largest document accepted: bodies are capped at 1 MiB, and a
/// document is rarely more than a few times its body.
pub const MAX_DOCUMENT_BYTES: usize = 4 * 1024 * 1024;

/// Reads one document (a JSON object) from `reader`, at most
/// [`MAX_DOCUMENT_BYTES`] of it: what `--doc FILE|-` takes. `source` names
/// the reader in errors.
pub fn read_document(
    reader: impl std::io::Read,
    source: &str,
) -> Result<serde_json::Value, String> {
    use std::io::Read;
    let mut text = String::new();
    reader
        .take(MAX_DOCUMENT_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {source}: {e}"))?;
    if text.len() > MAX_DOCUMENT_BYTES {
        return Err(format!("the document is over {MAX_DOCUMENT_BYTES} bytes"));
    }
    let doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{source} is not JSON: {e}"))?;
    if !doc.is_object() {
        return Err("the document is not a JSON object".into());
    }
    Ok(doc)
}

/// How every surface shows a header value it hides (see
/// [`display_header_value`]); in a definition sent back it means "keep the
/// stored value".
pub const HIDDEN: &str = "[hidden]";

/// The longest reason a pause may give: a sentence or two for the next
/// operator (list and show print it on one line).
pub const MAX_PAUSE_REASON_CHARS: usize = 500;

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
    /// a key is configured, see [`crate::at_rest`]).
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

    /// The secrets that sign now (the previous one only while the rotation
    /// is open), opened.
    pub fn signing_keys(&self, now: DateTime<Utc>) -> Result<SigningKeys, OpenError> {
        open_signing_keys(
            self.secret.as_deref(),
            self.previous_secret
                .as_deref()
                .filter(|_| self.rotating(now)),
        )
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
        })
    }
}

/// Opens a webhook's stored signing secrets (current, and previous while a
/// rotation is open).
pub fn open_signing_keys(
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
        }
    }
}

/// The timeout a webhook gets unless it says otherwise (Frappe's default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Retries after the first attempt unless a webhook says otherwise.
pub const DEFAULT_MAX_RETRIES: i32 = 3;

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
        }
    }
}

/// Column values for inserting or updating a webhook: the secret and header
/// values sealed (see [`crate::at_rest`]). An update leaves the secret to
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
        }
    }
}

/// A delivery record as stored.
#[derive(Debug, Clone, Queryable, Selectable, Identifiable)]
#[diesel(table_name = webhook_request_logs, check_for_backend(diesel::pg::Pg))]
pub struct DeliveryLog {
    pub id: i64,
    pub event_id: String,
    pub webhook_id: Option<i64>,
    pub webhook_name: String,
    pub entity_type: String,
    pub entity_name: String,
    pub event: String,
    pub url: String,
    pub method: String,
    pub headers: serde_json::Value,
    pub body: String,
    pub queue: String,
    pub status: DeliveryStatus,
    pub attempts: i32,
    pub max_attempts: i32,
    pub next_retry: Option<DateTime<Utc>>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub response_code: Option<i32>,
    /// The receiver's answer as it came (bytes: it may be binary), cut at
    /// [`crate::attempt::RESPONSE_BODY_LIMIT`].
    pub response_body: Option<Vec<u8>>,
    pub error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The fencing token of the latest claim or replay.
    pub claim_token: i64,
}

impl DeliveryLog {
    /// The stored static headers; an error says the stored value is not a
    /// header list (it never is unless written by hand).
    pub fn header_list(&self) -> Result<Vec<Header>, String> {
        parse_headers(&self.headers)
    }

    /// The response body as text for people: invalid UTF-8 shown as U+FFFD.
    pub fn response_text(&self) -> Option<String> {
        self.response_body
            .as_deref()
            .map(|b| String::from_utf8_lossy(b).into_owned())
    }
}

/// Reads a stored header list (`[{"key": …, "value": …}, …]`).
pub fn parse_headers(value: &serde_json::Value) -> Result<Vec<Header>, String> {
    serde_json::from_value(value.clone())
        .map_err(|e| format!("the stored headers are not a list of key/value pairs: {e}"))
}

/// A row to insert at emit time.
#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = webhook_request_logs)]
pub struct NewDelivery {
    pub event_id: String,
    pub webhook_id: Option<i64>,
    pub webhook_name: String,
    pub entity_type: String,
    pub entity_name: String,
    pub event: String,
    pub url: String,
    pub method: String,
    pub headers: serde_json::Value,
    pub body: String,
    pub queue: String,
    pub status: DeliveryStatus,
    pub attempts: i32,
    pub max_attempts: i32,
    pub next_retry: Option<DateTime<Utc>>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub error: Option<String>,
    /// 1 for a row recorded already claimed (workflow_transition), else 0.
    pub claim_token: i64,
}

/// A fresh event id, sent as `webhook-id`: `msg_` and a time-ordered UUID.
pub fn new_event_id() -> String {
    format!("msg_{}", uuid::Uuid::now_v7().simple())
}

/// Checks an event id chosen by the caller (for idempotent emits).
pub fn check_event_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 128 {
        return Err("an event id has 1 to 128 characters".into());
    }
    if !id.chars().all(|c| c.is_ascii_graphic()) {
        return Err(format!(
            "event id {id:?} may only use printable ASCII without spaces"
        ));
    }
    Ok(())
}

/// `role:host:pid`: who holds a key or wrote an attempt.
pub fn process_identity(role: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{role}:{host}:{}", std::process::id())
}

/// One attempt of a delivery.
#[derive(Debug, Clone, Queryable, Selectable, Serialize)]
#[diesel(table_name = webhook_delivery_attempts, check_for_backend(diesel::pg::Pg))]
pub struct DeliveryAttempt {
    pub log_id: i64,
    pub attempt: i32,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i32,
    pub response_code: Option<i32>,
    pub error: Option<String>,
    pub worker: String,
}
