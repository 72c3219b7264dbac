//! What every surface shows: the JSON the CLI prints with `--json`, the
//! management API returns and the console's pages render are these views,
//! built in one place so the three cannot drift apart. None holds a secret;
//! header values that look like credentials are hidden unless asked for.

use chrono::{DateTime, Utc};
use serde::Serialize;

use hookfleet_core::domain::format_duration;
use hookfleet_core::domain::{
    display_header_value, DeliveryAttempt, DeliveryLog, DeliveryStatus, FieldMapping, Webhook,
};
use hookfleet_core::store::deliveries::held_until;
use hookfleet_core::store::health::Health;

/// A header as shown: the value hidden when it looks like a credential.
#[derive(Serialize, utoipa::ToSchema)]
pub struct HeaderView {
    pub key: String,
    pub value: String,
}

/// The webhook as shown to people and scripts (`webhook list|show --json`):
/// never the secret, and header values that look like credentials hidden.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Webhook)]
pub struct WebhookView<'a> {
    pub name: &'a str,
    pub entity_type: &'a str,
    pub event: &'a str,
    pub request_url: &'a str,
    pub dynamic_url: bool,
    pub request_method: &'a str,
    pub request_structure: &'a str,
    #[schema(required)]
    pub body_template: Option<&'a str>,
    pub fields: Vec<FieldMapping>,
    pub headers: Vec<HeaderView>,
    #[schema(required)]
    pub condition: Option<&'a str>,
    pub allowed_hosts: &'a [String],
    pub enabled: bool,
    pub signed: bool,
    #[schema(required)]
    pub secret_rotation_until: Option<DateTime<Utc>>,
    pub timeout: String,
    pub queue: &'a str,
    pub max_retries: i32,
    #[schema(required)]
    pub max_concurrency: Option<i32>,
    /// `N/s`, or null.
    #[schema(required)]
    pub rate_limit: Option<String>,
    /// The body is sent as Frappe sends it (Python's text for values in
    /// quotes, `json.dumps`'s bytes).
    pub frappe_body: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub paused: bool,
    #[schema(required)]
    pub paused_at: Option<DateTime<Utc>>,
    #[schema(required)]
    pub paused_reason: Option<&'a str>,
    #[serde(flatten)]
    pub health: Health,
}

impl<'a> WebhookView<'a> {
    /// The view of `w` with its `health`; header values are opened and
    /// shown only with `reveal`.
    pub fn new(w: &'a Webhook, health: Health, reveal: bool) -> WebhookView<'a> {
        let now = Utc::now();
        let headers: Vec<HeaderView> = if reveal {
            match w.header_list() {
                Ok(list) => list
                    .into_iter()
                    .map(|h| HeaderView {
                        value: display_header_value(&h.key, &h.value, true),
                        key: h.key,
                    })
                    .collect(),
                Err(e) => vec![HeaderView {
                    key: "(error)".into(),
                    value: e.to_string(),
                }],
            }
        } else {
            let content_type = w.content_type().ok().flatten().unwrap_or_default();
            w.header_names()
                .into_iter()
                .map(|key| HeaderView {
                    value: display_header_value(&key, &content_type, false),
                    key,
                })
                .collect()
        };
        WebhookView {
            name: &w.name,
            entity_type: &w.entity_type,
            event: &w.event,
            request_url: &w.request_url,
            dynamic_url: w.dynamic_url,
            request_method: &w.request_method,
            request_structure: &w.request_structure,
            body_template: w.body_template.as_deref(),
            fields: w.field_mappings(),
            headers,
            condition: w.condition.as_deref(),
            allowed_hosts: &w.allowed_hosts,
            enabled: w.enabled,
            signed: w.secret.is_some(),
            secret_rotation_until: w.previous_secret_expires_at.filter(|_| w.rotating(now)),
            timeout: format_duration(w.timeout()),
            queue: &w.queue,
            max_retries: w.max_retries,
            max_concurrency: w.max_concurrency,
            rate_limit: w.rate_limit.map(|n| format!("{n}/s")),
            frappe_body: w.frappe_body,
            created_at: w.created_at,
            updated_at: w.updated_at,
            paused: w.paused_at.is_some(),
            paused_at: w.paused_at,
            paused_reason: w.paused_reason.as_deref(),
            health,
        }
    }
}

/// A delivery as `delivery list|show --json` print it (field names as the
/// columns); never a secret.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Delivery)]
pub struct DeliveryView<'a> {
    pub id: i64,
    pub event_id: &'a str,
    pub webhook: &'a str,
    #[schema(required)]
    pub webhook_id: Option<i64>,
    pub entity_type: &'a str,
    pub entity_name: &'a str,
    pub event: &'a str,
    pub url: &'a str,
    pub method: &'a str,
    pub headers: Vec<HeaderView>,
    /// Set when the stored headers cannot be read (they are not sent then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers_error: Option<String>,
    pub body: &'a str,
    pub queue: &'a str,
    pub status: DeliveryStatus,
    pub attempts: i32,
    pub max_attempts: i32,
    #[schema(required)]
    pub next_retry: Option<DateTime<Utc>>,
    /// Held while its webhook is paused (next_retry is then 9999-01-01).
    pub held: bool,
    #[schema(required)]
    pub in_flight_until: Option<DateTime<Utc>>,
    #[schema(required)]
    pub response_code: Option<i32>,
    /// The receiver's answer as text (bytes that are not UTF-8 as U+FFFD).
    #[schema(required)]
    pub response_body: Option<String>,
    #[schema(required)]
    pub error: Option<&'a str>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The W3C trace context the event was emitted in (its trace id is the
    /// one to look up in a tracing backend), or null.
    #[schema(required)]
    pub traceparent: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<DeliveryAttempt>>)]
    pub attempt_log: Option<Vec<&'a DeliveryAttempt>>,
}

impl<'a> DeliveryView<'a> {
    pub fn new(d: &'a DeliveryLog) -> DeliveryView<'a> {
        let (headers, headers_error) = match d.header_list() {
            Ok(list) => (
                list.iter()
                    .map(|h| HeaderView {
                        key: h.key.clone(),
                        value: display_header_value(&h.key, &h.value, false),
                    })
                    .collect(),
                None,
            ),
            Err(e) => (Vec::new(), Some(e)),
        };
        DeliveryView {
            id: d.id,
            event_id: &d.event_id,
            webhook: &d.webhook_name,
            webhook_id: d.webhook_id,
            entity_type: &d.entity_type,
            entity_name: &d.entity_name,
            event: &d.event,
            url: &d.url,
            method: &d.method,
            headers,
            headers_error,
            body: &d.body,
            queue: &d.queue,
            status: d.status,
            attempts: d.attempts,
            max_attempts: d.max_attempts,
            next_retry: d.next_retry,
            held: d.next_retry == Some(held_until()),
            in_flight_until: d.lease_expires_at,
            response_code: d.response_code,
            response_body: d.response_text(),
            error: d.error.as_deref(),
            created_at: d.created_at,
            updated_at: d.updated_at,
            traceparent: d.traceparent.as_deref(),
            attempt_log: None,
        }
    }
}

/// Rows per status, as `stats --json` prints them.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "PascalCase")]
pub struct RowCounts {
    pub queued: i64,
    pub delivered: i64,
    pub failed: i64,
    pub exhausted: i64,
}

/// What `hookfleet stats --json` prints.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Stats)]
pub struct StatsView {
    pub rows: RowCounts,
    /// Jobs waiting, per queue.
    pub queues: std::collections::BTreeMap<String, i64>,
    /// None when Redis did not answer.
    #[schema(required)]
    pub dead_letters: Option<i64>,
    /// Delivered and Exhausted are estimates from the table's statistics
    /// (a table of a million rows or more), or the pending counts reached
    /// their cap.
    pub rows_estimated: bool,
    #[schema(required)]
    pub oldest_due_retry: Option<DateTime<Utc>>,
    #[schema(required)]
    pub next_retry: Option<DateTime<Utc>>,
    /// Paused webhooks (their deliveries wait for `webhook resume`).
    pub paused_webhooks: Vec<String>,
    #[schema(required)]
    pub redis_error: Option<String>,
}
