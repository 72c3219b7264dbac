//! What the API and the pages both show, read through `hookfleet_admin`
//! and shown as the caller may see it (a read-only token sees less, see
//! `redact`), and the delivery list's filters as both take them
//! ([`ListQuery`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use hookfleet_admin::views::{DeliveryView, WebhookView};
use hookfleet_admin::{deliveries, webhooks};
use hookfleet_core::domain::{DeliveryAttempt, DeliveryLog, DeliveryStatus, Webhook};
use hookfleet_core::domain::{
    HEADER_FRAPPE_SIGNATURE, HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP,
};
use hookfleet_core::error::StoreError;
use hookfleet_core::store::deliveries::ListFilter;
use hookfleet_core::store::health::Health;

use crate::auth::Actor;
use crate::redact::for_actor;
use crate::{ApiError, Console, DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT};

/// Every webhook with its health, as `actor` may see them.
pub async fn webhooks(c: &Console, actor: Actor) -> Result<Value, ApiError> {
    let all = webhooks::list(&c.store).await?;
    let views: Vec<_> = all.iter().map(|w| w.view(false)).collect();
    Ok(for_actor(&views, actor))
}

/// The webhook `name` with its health, as `actor` may see it.
pub async fn webhook(c: &Console, name: &str, actor: Actor) -> Result<Value, ApiError> {
    let w = webhooks::show(&c.store, name).await?;
    Ok(for_actor(&w.view(false), actor))
}

/// `w` with its health, as `actor` may see it.
pub async fn webhook_of(c: &Console, w: Webhook, actor: Actor) -> Result<Value, ApiError> {
    let w = webhooks::with_health(&c.store, w).await?;
    Ok(for_actor(&w.view(false), actor))
}

/// A delivery with every attempt, as `actor` may see it.
pub async fn delivery_view(c: &Console, id: i64, actor: Actor) -> Result<Value, ApiError> {
    let (row, attempts) = delivery(c, id).await?;
    Ok(view_of(&row, &attempts, actor))
}

/// `row` with its `attempts`, as `actor` may see it.
pub fn view_of(row: &DeliveryLog, attempts: &[DeliveryAttempt], actor: Actor) -> Value {
    let mut view = DeliveryView::new(row);
    view.attempt_log = Some(attempts.iter().collect());
    for_actor(&view, actor)
}

/// A header a delivery's request carries, as its page shows it.
#[derive(Serialize)]
pub struct SentHeader {
    pub key: String,
    pub value: String,
    /// Where it comes from, when not from the stored request.
    pub from: Option<&'static str>,
}

/// Every header `row`'s request carries: those stored with it (values
/// hidden as its view hides them), the webhook's own, added at each
/// attempt as they are then (so as they are now; values hidden), and those
/// each attempt makes (its id, its time, the signatures).
pub async fn sent_headers(c: &Console, row: &DeliveryLog) -> Vec<SentHeader> {
    let mut out: Vec<SentHeader> = DeliveryView::new(row)
        .headers
        .into_iter()
        .map(|h| SentHeader {
            key: h.key,
            value: h.value,
            from: None,
        })
        .collect();
    // The webhook as it is now, if it is still the one that made the row
    // (not deleted, nor another of that name since). Read failing, the
    // page shows the row's own headers and says so in the log.
    let hook = match row.webhook_id {
        Some(id) => match webhooks::get(&c.store, &row.webhook_name).await {
            Ok(w) => Some(w).filter(|w| w.id == id),
            Err(StoreError::NotFound(_)) => None,
            Err(e) => {
                tracing::warn!(error = %e, delivery = row.id, "the webhook's headers could not be read");
                None
            }
        },
        None => None,
    };
    let signed = hook.as_ref().is_some_and(|w| w.secret.is_some());
    if let Some(w) = &hook {
        let stored: Vec<String> = out.iter().map(|h| h.key.to_ascii_lowercase()).collect();
        out.extend(
            WebhookView::new(w, Health::default(), false)
                .headers
                .into_iter()
                .filter(|h| !stored.contains(&h.key.to_ascii_lowercase()))
                .map(|h| SentHeader {
                    key: h.key,
                    value: h.value,
                    from: Some("the webhook's, at each attempt"),
                }),
        );
    }
    out.push(SentHeader {
        key: HEADER_ID.into(),
        value: row.event_id.clone(),
        from: Some("the event id"),
    });
    let mut per_attempt = vec![HEADER_TIMESTAMP];
    if signed {
        per_attempt.extend([HEADER_SIGNATURE, HEADER_FRAPPE_SIGNATURE]);
    }
    out.extend(per_attempt.into_iter().map(|key| SentHeader {
        key: key.into(),
        value: hookfleet_admin::preview::SET_WHEN_SENT.into(),
        from: Some("made at each attempt"),
    }));
    out
}

/// Deliveries as `actor` may see them.
pub fn delivery_views(rows: &[DeliveryLog], actor: Actor) -> Value {
    let views: Vec<DeliveryView> = rows.iter().map(DeliveryView::new).collect();
    for_actor(&views, actor)
}

/// The deliveries `q` asks for, within the list's time limit.
pub async fn deliveries(c: &Console, q: &ListQuery) -> Result<Vec<DeliveryLog>, ApiError> {
    let (webhook, filter) = q.filter()?;
    let limit = Some(crate::LIST_STATEMENT_TIMEOUT);
    Ok(deliveries::list(&c.store, webhook, filter, limit).await?)
}

pub async fn delivery(
    c: &Console,
    id: i64,
) -> Result<(DeliveryLog, Vec<DeliveryAttempt>), ApiError> {
    Ok(deliveries::show(&c.store, id).await?)
}

/// A list's `limit`: [`DEFAULT_LIST_LIMIT`] when not given, else 1 to
/// [`MAX_LIST_LIMIT`] or a 400.
pub fn page_limit(given: Option<i64>) -> Result<i64, ApiError> {
    let limit = given.unwrap_or(DEFAULT_LIST_LIMIT);
    if (1..=MAX_LIST_LIMIT).contains(&limit) {
        Ok(limit)
    } else {
        Err(ApiError::bad_request(format!(
            "limit is 1 to {MAX_LIST_LIMIT}"
        )))
    }
}

/// The delivery list's filters, as query parameters.
#[derive(Deserialize, Default, Clone, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// The webhook's name (rows of a deleted webhook of that name too).
    pub webhook: Option<String>,
    /// Queued, Delivered, Failed or Exhausted.
    #[param(pattern = "^(Queued|Delivered|Failed|Exhausted)?$")]
    pub status: Option<String>,
    /// The document's name, exactly (e.g. SO-0001).
    pub document: Option<String>,
    /// The event, e.g. on_submit.
    pub event: Option<String>,
    /// The event id (the `webhook-id` header a receiver saw).
    pub event_id: Option<String>,
    /// Recorded at or after: RFC 3339, or a duration ago (`2h`, `1h30m`).
    pub since: Option<String>,
    /// Recorded before: RFC 3339, or a duration ago.
    pub until: Option<String>,
    /// The next page: rows older than this id (the previous page's
    /// `next_before`).
    pub before: Option<i64>,
    /// Rows per page (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
}

impl ListQuery {
    /// The filter, or a 400 saying which parameter is wrong. Empty
    /// parameters (a form's blank fields) count as absent.
    pub fn filter(&self) -> Result<(Option<String>, ListFilter), ApiError> {
        let given = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let limit = page_limit(self.limit)?;
        let time = |name: &str, v: &Option<String>| {
            given(v)
                .map(|t| hookfleet_core::domain::parse_time_or_ago(&t))
                .transpose()
                .map_err(|e| ApiError::bad_request(format!("{name}: {e}")))
        };
        let status = given(&self.status)
            .map(|s| s.parse::<DeliveryStatus>())
            .transpose()
            .map_err(|e| ApiError::bad_request(format!("status: {e}")))?;
        Ok((
            given(&self.webhook),
            ListFilter {
                status,
                webhook: None,
                document: given(&self.document),
                event: given(&self.event),
                event_id: given(&self.event_id),
                since: time("since", &self.since)?,
                until: time("until", &self.until)?,
                before_id: self.before,
                limit,
            },
        ))
    }
}
