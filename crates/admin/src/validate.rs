//! The checks a webhook definition must pass before it is stored. Each refusal
//! names the field and the rule it breaks ([`ValidationError`]) and says
//! what is wrong in the operator's terms; nothing is written when one
//! fails. The checks run in a fixed order, so a definition with several
//! faults is always refused for the same one.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use hookfleet_core::domain::at_rest::SEALED_PREFIX;
use hookfleet_core::domain::{
    check_secret, HEADER_FRAPPE_SIGNATURE, HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP,
};
use hookfleet_core::domain::{Structure, Webhook, WebhookSpec};
use hookfleet_core::request::NetworkPolicy;
use hookfleet_core::request::{check_url, parse_host_entry};

use crate::error::{Field, Rule, ValidationError};
use crate::limits::{
    MAX_ALLOWED_HOSTS, MAX_ENDPOINT_CONCURRENCY, MAX_NAME_LEN, MAX_RATE_LIMIT, MAX_RETRIES_LIMIT,
    MAX_TIMEOUT,
};
use crate::preview::check_templates;

/// The document events Frappe raises (a webhook may name any other: an
/// application's own event).
pub const FRAPPE_EVENTS: &[&str] = &[
    "after_insert",
    "on_update",
    "on_submit",
    "on_cancel",
    "on_trash",
    "on_update_after_submit",
    "on_change",
    "workflow_transition",
];

/// The most edits (letters added, removed, changed or swapped) between an
/// event and a Frappe event for the one to be taken for a misspelling of
/// the other: `on_sbumit` is one swap from `on_submit`; an application's
/// own event names are further away.
pub const EVENT_TYPO_DISTANCE: usize = 2;

/// For an event that is not Frappe's but within [`EVENT_TYPO_DISTANCE`]
/// edits of one, that one (None for Frappe's own and for names far from
/// all of them).
pub fn likely_meant_event(event: &str) -> Option<&'static str> {
    if FRAPPE_EVENTS.contains(&event) {
        return None;
    }
    FRAPPE_EVENTS
        .iter()
        .map(|known| (strsim::damerau_levenshtein(event, known), *known))
        .filter(|(distance, _)| *distance <= EVENT_TYPO_DISTANCE)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, known)| known)
}

/// Reads a rate limit written `N/s` (requests per second, 1 to
/// [`MAX_RATE_LIMIT`]).
pub fn parse_rate_limit(text: &str) -> Result<i32, ValidationError> {
    let refuse = || ValidationError::invalid(Field::RateLimit, Rule::NotARate);
    let n = text.trim().strip_suffix("/s").ok_or_else(refuse)?;
    match n.trim().parse::<i32>() {
        Ok(n) if (1..=MAX_RATE_LIMIT).contains(&n) => Ok(n),
        _ => Err(refuse()),
    }
}

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

/// Refuses `field` for breaking `rule`.
fn refuse(field: Field, rule: Rule) -> Result<(), ValidationError> {
    Err(ValidationError::invalid(field, rule))
}

fn check_text(field: Field, value: &str) -> Result<(), ValidationError> {
    if value.trim().is_empty() {
        return refuse(field, Rule::Empty);
    }
    if value.chars().count() > MAX_NAME_LEN {
        return refuse(field, Rule::TooLong);
    }
    if value.chars().any(char::is_control) {
        return refuse(field, Rule::ControlCharacters);
    }
    Ok(())
}

/// Names that end up inside Redis keys (queues, with a `{hash tag}`) or on a
/// command line.
fn check_identifier(field: Field, value: &str) -> Result<(), ValidationError> {
    check_text(field, value)?;
    if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
    {
        let value = value.to_string();
        return refuse(field, Rule::NotAnIdentifier { value });
    }
    Ok(())
}

/// A webhook's name: any text Frappe's prompt-named webhooks use ("Orders
/// to ERP (EU)", "Ventes/Factures", "Bestellungen für Müller"), without
/// control characters, invisible or direction-changing characters (a name
/// that reads as another), or spaces at either end. It never reaches a
/// Redis key or a header.
fn check_webhook_name(value: &str) -> Result<(), ValidationError> {
    check_text(Field::Name, value)?;
    if value.trim() != value {
        let value = value.to_string();
        return refuse(Field::Name, Rule::SpaceAtEnds { value });
    }
    let invisible = |c: char| {
        matches!(c, '\u{061C}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
    };
    if value.chars().any(invisible) {
        let value = value.to_string();
        return refuse(Field::Name, Rule::InvisibleCharacters { value });
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
    check_text(Field::EntityType, &spec.entity_type)?;
    check_text(Field::Event, &spec.event)?;
    check_identifier(Field::Queue, &spec.queue)?;
    if spec.dynamic_url {
        if spec.request_url.trim().is_empty() {
            return refuse(Field::Url, Rule::Empty);
        }
    } else if let Err(e) = check_url(&spec.request_url, policy) {
        return refuse(Field::Url, Rule::Refused(e));
    }
    check_body(spec)?;
    check_fields(spec)?;
    check_headers(spec)?;
    check_secret_and_sealing(spec)?;
    check_allowed_hosts(spec)?;
    check_limits(spec)?;
    check_templates(Arc::new(Webhook::preview(spec)), sample, policy)
        .or_else(|e| refuse(Field::Templates, Rule::Refused(e)))
}

/// A form body is a field selection; a JSON body a template, a field
/// selection or the whole document.
fn check_body(spec: &WebhookSpec) -> Result<(), ValidationError> {
    let template = spec.body_template.is_some();
    match spec.structure {
        Structure::Form if template => return refuse(Field::BodyTemplate, Rule::TemplateInForm),
        Structure::Form if spec.fields.is_empty() => {
            return refuse(Field::Fields, Rule::FormWithoutFields)
        }
        Structure::Json if template && !spec.fields.is_empty() => {
            return refuse(Field::Fields, Rule::TemplateAndFields)
        }
        _ => {}
    }
    match &spec.body_template {
        Some(t) if t.trim().is_empty() => refuse(Field::BodyTemplate, Rule::Empty),
        _ => Ok(()),
    }
}

/// Each selected document field once, each key once.
fn check_fields(spec: &WebhookSpec) -> Result<(), ValidationError> {
    let mut doc_fields = HashSet::new();
    let mut keys = HashSet::new();
    for f in &spec.fields {
        if f.field.trim().is_empty() || f.key.trim().is_empty() {
            return refuse(Field::Fields, Rule::SelectionIncomplete);
        }
        if !doc_fields.insert(f.field.as_str()) {
            let field = f.field.clone();
            return refuse(Field::Fields, Rule::FieldTwice { field });
        }
        if !keys.insert(f.key.as_str()) {
            let key = f.key.clone();
            return refuse(Field::Fields, Rule::KeyTwice { key });
        }
    }
    Ok(())
}

/// Static headers a client can send, none of hookfleet's own or of one
/// connection's, each once.
fn check_headers(spec: &WebhookSpec) -> Result<(), ValidationError> {
    let mut header_names = HashSet::new();
    for h in &spec.headers {
        let header = || h.key.clone();
        if h.key.trim().is_empty() {
            return refuse(Field::Headers, Rule::HeaderWithoutKey);
        }
        if h.value.trim().is_empty() {
            let header = header();
            return refuse(Field::Headers, Rule::HeaderWithoutValue { header });
        }
        if reqwest::header::HeaderName::from_bytes(h.key.as_bytes()).is_err() {
            let header = header();
            return refuse(Field::Headers, Rule::NotAHeaderName { header });
        }
        if reqwest::header::HeaderValue::from_str(&h.value).is_err() {
            let header = header();
            return refuse(Field::Headers, Rule::NotAHeaderValue { header });
        }
        let lower = h.key.to_ascii_lowercase();
        if RESERVED_HEADERS
            .iter()
            .any(|r| r.eq_ignore_ascii_case(&lower))
            || RESERVED_HEADER_PREFIXES
                .iter()
                .any(|p| lower.starts_with(p))
        {
            let header = header();
            return refuse(Field::Headers, Rule::ReservedHeader { header });
        }
        if !header_names.insert(lower) {
            let header = header();
            return refuse(Field::Headers, Rule::HeaderTwice { header });
        }
    }
    Ok(())
}

/// A secret the signer can use; no secret or header value that reads as
/// one already sealed.
fn check_secret_and_sealing(spec: &WebhookSpec) -> Result<(), ValidationError> {
    if let Some(secret) = &spec.secret {
        if let Err(reason) = check_secret(secret.expose()) {
            return refuse(Field::Secret, Rule::UnusableSecret(reason));
        }
        if secret.expose().starts_with(SEALED_PREFIX) {
            return refuse(Field::Secret, Rule::SealedPrefix);
        }
    }
    if spec
        .headers
        .iter()
        .any(|h| h.value.starts_with(SEALED_PREFIX))
    {
        return refuse(Field::Headers, Rule::SealedPrefix);
    }
    Ok(())
}

/// A few `HOST[:PORT]` entries, for a dynamic URL only.
fn check_allowed_hosts(spec: &WebhookSpec) -> Result<(), ValidationError> {
    if spec.allowed_hosts.len() > MAX_ALLOWED_HOSTS {
        return refuse(Field::AllowedHosts, Rule::TooManyHosts);
    }
    if let Some(h) = spec
        .allowed_hosts
        .iter()
        .find(|h| parse_host_entry(h).is_none())
    {
        let host = h.clone();
        return refuse(Field::AllowedHosts, Rule::NotAHost { host });
    }
    if !spec.allowed_hosts.is_empty() && !spec.dynamic_url {
        return refuse(Field::AllowedHosts, Rule::HostsWithoutDynamicUrl);
    }
    Ok(())
}

/// The timeout, the retries, the concurrency and the rate limit within
/// their bounds.
fn check_limits(spec: &WebhookSpec) -> Result<(), ValidationError> {
    if spec.timeout.is_zero() {
        return refuse(Field::Timeout, Rule::TooSmall);
    }
    if spec.timeout > MAX_TIMEOUT {
        return refuse(Field::Timeout, Rule::TooLarge);
    }
    if spec.max_retries < 0 {
        return refuse(Field::MaxRetries, Rule::TooSmall);
    }
    if let Some(n) = spec.max_concurrency {
        if !(1..=MAX_ENDPOINT_CONCURRENCY).contains(&n) {
            return refuse(Field::MaxConcurrency, Rule::OutOfRange);
        }
    }
    if let Some(n) = spec.rate_limit {
        if !(1..=MAX_RATE_LIMIT).contains(&n) {
            return refuse(Field::RateLimit, Rule::OutOfRange);
        }
    }
    if spec.max_retries > MAX_RETRIES_LIMIT {
        return refuse(Field::MaxRetries, Rule::TooLarge);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_frappe_event_names_the_one_meant_and_other_events_pass() {
        assert_eq!(likely_meant_event("on_sbumit"), Some("on_submit"));
        assert_eq!(likely_meant_event("on_cancle"), Some("on_cancel"));
        assert_eq!(likely_meant_event("after_insrt"), Some("after_insert"));
        assert_eq!(likely_meant_event("on_submit"), None);
        assert_eq!(likely_meant_event("invoice_paid"), None);
        assert_eq!(likely_meant_event("order.created"), None);
    }
}
