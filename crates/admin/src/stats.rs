//! What the operator reads about the fleet as a whole: rows by status,
//! queue depths and dead letters (`hookfleet stats`, the console's
//! overview), attempts per minute (its chart), and each webhook's health.

use std::collections::{BTreeMap, HashMap};

use hookfleet_core::domain::Webhook;
use hookfleet_core::error::StoreError;
use hookfleet_core::queue::RedisQueue;
use hookfleet_core::store::deliveries::{self, MinuteCount};
use hookfleet_core::store::health::{self, Health};
use hookfleet_core::store::{webhooks, Store};

use crate::views::{RowCounts, StatsView};

/// Rows by status, queue depths, dead letters, the oldest due retry and the
/// paused webhooks (`hookfleet stats`). Redis not answering is reported in
/// the view, not as an error: the rows still say what they say.
pub async fn stats(store: &Store, queue: &RedisQueue) -> Result<StatsView, StoreError> {
    let (counts, mut queues, paused) = store
        .run(|c| {
            Ok((
                deliveries::counts(c, deliveries::CountLimits::default())?,
                webhooks::queue_names(c)?,
                webhooks::paused_names(c)?,
            ))
        })
        .await?;
    if !queues.iter().any(|q| q == "default") {
        queues.insert(0, "default".into());
    }
    let mut view = StatsView {
        rows: RowCounts {
            queued: counts.queued,
            delivered: counts.delivered,
            failed: counts.failed,
            exhausted: counts.exhausted,
        },
        queues: BTreeMap::new(),
        dead_letters: None,
        rows_estimated: counts.estimated,
        oldest_due_retry: counts.oldest_due,
        next_retry: counts.next_due,
        paused_webhooks: paused,
        redis_error: None,
    };
    for q in &queues {
        match queue.jobs().depth(q).await {
            Ok(n) => {
                view.queues.insert(q.clone(), n);
            }
            Err(e) => {
                view.redis_error = Some(e.to_string());
                break;
            }
        }
    }
    match queue.dead().count().await {
        Ok(n) => view.dead_letters = Some(n),
        Err(e) => {
            view.redis_error.get_or_insert(e.to_string());
        }
    }
    Ok(view)
}

/// The health of `ws`, one read for all of them.
pub(crate) async fn health_of(
    store: &Store,
    ws: &[Webhook],
) -> Result<HashMap<i64, Health>, StoreError> {
    let ids: Vec<i64> = ws.iter().map(|w| w.id).collect();
    store.run(move |c| health::of(c, &ids)).await
}

/// Attempts per minute over the last `minutes`, oldest first (the
/// console's chart).
pub async fn activity(store: &Store, minutes: i32) -> Result<Vec<MinuteCount>, StoreError> {
    store
        .run(move |c| deliveries::attempts_per_minute(c, minutes))
        .await
}
