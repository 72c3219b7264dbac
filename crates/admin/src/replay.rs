//! Replays: a delivery made due again (`delivery retry ID`), or every
//! delivery of a webhook in a status since a time (`delivery retry
//! --webhook --status --since`). Postgres decides; Redis only hurries: a
//! replayed row is due, so if pushing it fails the sweeper sends it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_core::error::StoreError;
use hookfleet_core::queue::{Enqueue, RedisQueue};
use hookfleet_core::store::deliveries::{self, Replayed};
use hookfleet_core::store::{webhooks, Store};

use crate::error::OpsError;

/// A replay's note when its rows went on their queues at once (any other
/// note says what happened instead).
pub const QUEUED_NOW: &str = "queued now";

/// Puts replayed rows on their queues now rather than at the next sweep,
/// and says what happened in words (a failure here loses nothing: the rows
/// are due, so the sweeper sends them).
async fn enqueue_now(queue: &RedisQueue, rows: &[Replayed], ttl: Duration) -> String {
    let items: Vec<Enqueue> = rows.iter().map(Enqueue::from).collect();
    match queue.jobs().enqueue(&items, ttl).await {
        Ok(flags) => {
            let n = flags.iter().filter(|f| **f).count();
            if n == rows.len() {
                QUEUED_NOW.into()
            } else {
                format!("{n} queued now; the rest are already on a queue")
            }
        }
        Err(e) => format!("not queued now ({e}); the next sweep sends them"),
    }
}

/// What a replay of one delivery did.
#[derive(Debug, Serialize)]
pub struct ReplayOne {
    pub replayed: Replayed,
    /// Whether it went on its queue now (else the next sweep sends it).
    pub note: String,
}

/// `delivery retry ID`: makes a Failed or Exhausted row (Delivered with
/// `force`) due now and enqueues it.
pub async fn replay(
    store: &Store,
    queue: &RedisQueue,
    ttl: Duration,
    id: i64,
    force: bool,
) -> Result<ReplayOne, StoreError> {
    let replayed = store.run(move |c| deliveries::replay(c, id, force)).await?;
    let note = enqueue_now(queue, std::slice::from_ref(&replayed), ttl).await;
    Ok(ReplayOne { replayed, note })
}

/// What a bulk replay did (or, in a dry run, would do).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReplayBulk {
    pub webhook: String,
    pub status: DeliveryStatus,
    pub since: DateTime<Utc>,
    pub dry_run: bool,
    /// Rows replayed (or that would be).
    pub count: i64,
    /// Whether they were queued now.
    #[schema(required)]
    pub note: Option<String>,
}

/// `delivery retry --webhook W --status S --since T`: every row of the
/// webhook in that status changed since `since`; `dry_run` only counts.
/// It runs on a task of its own: a caller who stops waiting (a console
/// request cut short) does not leave it half done.
pub async fn replay_bulk(
    store: &Store,
    queue: &RedisQueue,
    ttl: Duration,
    webhook: &str,
    status: DeliveryStatus,
    since: DateTime<Utc>,
    dry_run: bool,
) -> Result<ReplayBulk, OpsError> {
    if !matches!(status, DeliveryStatus::Failed | DeliveryStatus::Exhausted) {
        return Err(OpsError::BulkStatus(status));
    }
    let mut out = ReplayBulk {
        webhook: webhook.to_string(),
        status,
        since,
        dry_run,
        count: 0,
        note: None,
    };
    let (store, queue, name) = (store.clone(), queue.clone(), webhook.to_string());
    tokio::spawn(async move {
        if dry_run {
            out.count = store
                .run(move |c| {
                    let hook = webhooks::get(c, &name)?;
                    deliveries::count_bulk(c, hook.id, status, since)
                })
                .await?;
            return Ok(out);
        }
        let rows = store
            .run(move |c| {
                let hook = webhooks::get(c, &name)?;
                deliveries::replay_bulk(c, hook.id, status, since)
            })
            .await?;
        out.count = rows.len() as i64;
        if !rows.is_empty() {
            out.note = Some(enqueue_now(&queue, &rows, ttl).await);
        }
        Ok::<_, OpsError>(out)
    })
    .await?
}
