//! What the API and the pages both show, read through `hookfleet_admin`
//! and shown as the caller may see it (a read-only token sees less, see
//! `redact`), and the delivery list's filters as both take them
//! ([`ListQuery`]).

use serde::Deserialize;
use serde_json::Value;

use hookfleet_admin::views::DeliveryView;
use hookfleet_admin::{deliveries, webhooks};
use hookfleet_core::domain::{DeliveryAttempt, DeliveryLog, DeliveryStatus, Webhook};
use hookfleet_core::store::deliveries::ListFilter;

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
    let mut view = DeliveryView::new(&row);
    view.attempt_log = Some(attempts.iter().collect());
    Ok(for_actor(&view, actor))
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
