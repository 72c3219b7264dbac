//! What the API and the pages both show, read through `hookfleet_admin`
//! and shown as the caller may see it (a read-only token sees less, see
//! `redact`).

use serde_json::Value;

use hookfleet_admin::views::DeliveryView;
use hookfleet_admin::{deliveries, webhooks};
use hookfleet_core::model::{DeliveryAttempt, DeliveryLog, Webhook};

use crate::api::ListQuery;
use crate::auth::Actor;
use crate::redact::for_actor;
use crate::{ApiError, Console};

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
