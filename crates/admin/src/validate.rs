//! The checks a webhook definition must pass before it is stored. Each refusal
//! says what is wrong in the operator's terms; nothing is written when one
//! fails.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use hookfleet_core::at_rest::SEALED_PREFIX;
use hookfleet_core::model::{Structure, Webhook, WebhookSpec};
use hookfleet_core::render::{check_url, parse_host_entry};
use hookfleet_core::sign::{
    check_secret, HEADER_FRAPPE_SIGNATURE, HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP,
};
use hookfleet_core::ssrf::NetworkPolicy;

use crate::error::ValidationError;
use crate::preview::check_templates;

/// The longest a receiver may take: a worker slot held longer than a minute
/// by one receiver is a slot stolen from all the others.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// The most retries a webhook may ask for: 50 at the last interval of the
/// default schedule (10 h) is three weeks, longer than anyone waits.
pub const MAX_RETRIES_LIMIT: i32 = 50;

/// The most requests a webhook may have in flight across the fleet: a
/// worker's own concurrency is capped at 10,000.
pub const MAX_ENDPOINT_CONCURRENCY: i32 = 10_000;

/// The highest rate limit, requests per second: above this a limit protects
/// no receiver, and each request still costs a Redis round trip.
pub const MAX_RATE_LIMIT: i32 = 100_000;

/// Reads a rate limit written `N/s` (requests per second, 1 to
/// [`MAX_RATE_LIMIT`]).
pub fn parse_rate_limit(text: &str) -> Result<i32, ValidationError> {
    let refuse = || {
        ValidationError(format!(
            "a rate limit is written N/s, N from 1 to {MAX_RATE_LIMIT} (e.g. 100/s)"
        ))
    };
    let n = text.trim().strip_suffix("/s").ok_or_else(refuse)?;
    match n.trim().parse::<i32>() {
        Ok(n) if (1..=MAX_RATE_LIMIT).contains(&n) => Ok(n),
        _ => Err(refuse()),
    }
}

/// The most hosts a dynamic URL may be allowed to reach: a webhook talks to
/// a service, not to a list of them.
pub const MAX_ALLOWED_HOSTS: usize = 32;

/// Longest name, entity type, event or queue name accepted.
pub const MAX_NAME_LEN: usize = 140;

/// Headers hookfleet sets itself (signing, framing), and hop-by-hop headers
/// that belong to one connection: a static header with one of these names
/// would be overwritten, break the request or smuggle another one.
const RESERVED_HEADERS: &[&str] = &[
    HEADER_ID,
    HEADER_TIMESTAMP,
    HEADER_SIGNATURE,
    HEADER_FRAPPE_SIGNATURE,
    "content-length",
    "host",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "expect",
];

/// Header name prefixes that are hop-by-hop (`Proxy-Authorization`,
/// `Proxy-Connection`, …).
const RESERVED_HEADER_PREFIXES: &[&str] = &["proxy-"];

fn refuse(msg: impl Into<String>) -> Result<(), ValidationError> {
    Err(ValidationError(msg.into()))
}

fn check_text(what: &str, value: &str) -> Result<(), ValidationError> {
    if value.trim().is_empty() {
        return refuse(format!("{what} is empty"));
    }
    if value.chars().count() > MAX_NAME_LEN {
        return refuse(format!("{what} is longer than {MAX_NAME_LEN} characters"));
    }
    if value.chars().any(char::is_control) {
        return refuse(format!("{what} contains control characters"));
    }
    Ok(())
}

/// Names that end up inside Redis keys (queues, with a `{hash tag}`) or on a
/// command line.
fn check_identifier(what: &str, value: &str) -> Result<(), ValidationError> {
    check_text(what, value)?;
    if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
    {
        return refuse(format!(
            "{what} {value:?} may only use letters, digits, '_', '-', '.' and ':'"
        ));
    }
    Ok(())
}

/// A webhook's name: any text Frappe's prompt-named webhooks use ("Orders
/// to ERP (EU)", "Ventes/Factures", "Bestellungen für Müller"), without
/// control characters, invisible or direction-changing characters (a name
/// that reads as another), or spaces at either end. It never reaches a
/// Redis key or a header.
fn check_webhook_name(value: &str) -> Result<(), ValidationError> {
    check_text("the webhook name", value)?;
    if value.trim() != value {
        return refuse(format!(
            "the webhook name {value:?} starts or ends with a space"
        ));
    }
    let invisible = |c: char| {
        matches!(c, '\u{061C}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
    };
    if value.chars().any(invisible) {
        return refuse(format!(
            "the webhook name {value:?} contains invisible or direction-changing characters"
        ));
    }
    Ok(())
}

/// Validates `spec`: `policy` is where its requests may go, `sample` the
/// document its templates are tried on (in the template renderer
/// processes).
pub fn validate(
    spec: &WebhookSpec,
    policy: &NetworkPolicy,
    sample: &Value,
) -> Result<(), ValidationError> {
    check_webhook_name(&spec.name)?;
    check_text("the entity type", &spec.entity_type)?;
    check_text("the event", &spec.event)?;
    check_identifier("the queue name", &spec.queue)?;

    if spec.dynamic_url {
        if spec.request_url.trim().is_empty() {
            return refuse("the URL template is empty");
        }
    } else {
        check_url(&spec.request_url, policy).map_err(|e| ValidationError(format!("{e}")))?;
    }

    match spec.structure {
        Structure::Form if spec.body_template.is_some() => return refuse(
            "a form body is a field selection (--field); a body template needs --structure json",
        ),
        Structure::Form if spec.fields.is_empty() => {
            return refuse("a form body needs at least one --field DOCFIELD[:KEY]")
        }
        Structure::Json if spec.body_template.is_some() && !spec.fields.is_empty() => {
            return refuse("choose a body template or a field selection, not both")
        }
        _ => {}
    }
    if let Some(t) = &spec.body_template {
        if t.trim().is_empty() {
            return refuse("the body template is empty");
        }
    }

    let mut doc_fields = HashSet::new();
    let mut keys = HashSet::new();
    for f in &spec.fields {
        if f.field.trim().is_empty() || f.key.trim().is_empty() {
            return refuse("a field selection needs a document field and a key (DOCFIELD:KEY)");
        }
        if !doc_fields.insert(f.field.as_str()) {
            return refuse(format!(
                "the document field {:?} is selected twice",
                f.field
            ));
        }
        if !keys.insert(f.key.as_str()) {
            return refuse(format!(
                "the key {:?} is used by two selected fields",
                f.key
            ));
        }
    }

    let mut header_names = HashSet::new();
    for h in &spec.headers {
        if h.key.trim().is_empty() {
            return refuse("a header has no key (expected KEY:VALUE)");
        }
        if h.value.trim().is_empty() {
            return refuse(format!(
                "the header {:?} has no value (expected KEY:VALUE)",
                h.key
            ));
        }
        if reqwest::header::HeaderName::from_bytes(h.key.as_bytes()).is_err() {
            return refuse(format!("{:?} is not a valid header name", h.key));
        }
        if reqwest::header::HeaderValue::from_str(&h.value).is_err() {
            return refuse(format!(
                "the value of header {:?} is not a valid header value",
                h.key
            ));
        }
        let lower = h.key.to_ascii_lowercase();
        if RESERVED_HEADERS
            .iter()
            .any(|r| r.eq_ignore_ascii_case(&lower))
            || RESERVED_HEADER_PREFIXES
                .iter()
                .any(|p| lower.starts_with(p))
        {
            return refuse(format!(
                "the header {:?} is set by hookfleet itself or belongs to one connection",
                h.key
            ));
        }
        if !header_names.insert(lower) {
            return refuse(format!("the header {:?} is given twice", h.key));
        }
    }

    if let Some(secret) = &spec.secret {
        check_secret(secret.expose()).map_err(ValidationError)?;
        if secret.expose().starts_with(SEALED_PREFIX) {
            return refuse(format!(
                "a secret may not begin with {SEALED_PREFIX:?} (it marks sealed values)"
            ));
        }
    }
    if spec
        .headers
        .iter()
        .any(|h| h.value.starts_with(SEALED_PREFIX))
    {
        return refuse(format!(
            "a header value may not begin with {SEALED_PREFIX:?} (it marks sealed values)"
        ));
    }
    if spec.allowed_hosts.len() > MAX_ALLOWED_HOSTS {
        return refuse(format!("at most {MAX_ALLOWED_HOSTS} allowed hosts"));
    }
    for h in &spec.allowed_hosts {
        if parse_host_entry(h).is_none() {
            return refuse(format!(
                "allowed host {h:?} is not HOST or HOST:PORT (e.g. api.example.com or api.example.com:8443)"
            ));
        }
    }
    if !spec.allowed_hosts.is_empty() && !spec.dynamic_url {
        return refuse("--allowed-host applies to a dynamic URL (--dynamic-url) only");
    }
    if spec.timeout.is_zero() {
        return refuse("the timeout must be more than 0");
    }
    if spec.timeout > MAX_TIMEOUT {
        return refuse(format!(
            "the timeout must be at most {}s",
            MAX_TIMEOUT.as_secs()
        ));
    }
    if spec.max_retries < 0 {
        return refuse("max retries cannot be negative (0 means one attempt only)");
    }
    if let Some(n) = spec.max_concurrency {
        if !(1..=MAX_ENDPOINT_CONCURRENCY).contains(&n) {
            return refuse(format!(
                "max concurrency is 1 to {MAX_ENDPOINT_CONCURRENCY}"
            ));
        }
    }
    if let Some(n) = spec.rate_limit {
        if !(1..=MAX_RATE_LIMIT).contains(&n) {
            return refuse(format!("the rate limit is 1/s to {MAX_RATE_LIMIT}/s"));
        }
    }
    if spec.max_retries > MAX_RETRIES_LIMIT {
        return refuse(format!("max retries is at most {MAX_RETRIES_LIMIT}"));
    }

    check_templates(Arc::new(Webhook::preview(spec)), sample, policy)
        .map_err(|e| ValidationError(e.to_string()))
}
