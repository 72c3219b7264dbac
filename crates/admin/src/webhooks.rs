//! A webhook's life as the operator changes it: pause and resume, enable
//! and disable, finish a secret rotation, delete; and the webhooks as the
//! surfaces list and show them, each with its health.

use std::time::Duration;

use serde::Serialize;

use hookfleet_core::domain::Webhook;
use hookfleet_core::error::StoreError;
use hookfleet_core::queue::{Enqueue, RedisQueue};
use hookfleet_core::store::deliveries::{self, DueRow};
use hookfleet_core::store::health::Health;
use hookfleet_core::store::webhooks::{self, Paused};
use hookfleet_core::store::Store;

use crate::error::OpsError;
use crate::stats::health_of;
use crate::views::WebhookView;

/// A webhook with its health, as list and show read them.
pub struct WithHealth {
    pub webhook: Webhook,
    pub health: Health,
}

impl WithHealth {
    /// The view every surface shows; header values are opened and shown
    /// only with `reveal`.
    pub fn view(&self, reveal: bool) -> WebhookView<'_> {
        WebhookView::new(&self.webhook, self.health.clone(), reveal)
    }
}

/// The webhook `name` as stored.
pub async fn get(store: &Store, name: &str) -> Result<Webhook, StoreError> {
    let name = name.to_string();
    store.run(move |c| webhooks::get(c, &name)).await
}

/// Every webhook, by name, with its health (one read for all of them).
pub async fn list(store: &Store) -> Result<Vec<WithHealth>, StoreError> {
    let all = store.run(webhooks::list).await?;
    let mut health = health_of(store, &all).await?;
    Ok(all
        .into_iter()
        .map(|webhook| WithHealth {
            health: health.remove(&webhook.id).unwrap_or_default(),
            webhook,
        })
        .collect())
}

/// The webhook `name` with its health.
pub async fn show(store: &Store, name: &str) -> Result<WithHealth, StoreError> {
    with_health(store, get(store, name).await?).await
}

/// `webhook` with its health.
pub async fn with_health(store: &Store, webhook: Webhook) -> Result<WithHealth, StoreError> {
    let health = health_of(store, std::slice::from_ref(&webhook))
        .await?
        .remove(&webhook.id)
        .unwrap_or_default();
    Ok(WithHealth { webhook, health })
}

/// The reason a pause gives when the operator gives none.
pub const DEFAULT_PAUSE_REASON: &str = "paused by an operator";

/// `webhook pause NAME`: its events are still recorded, nothing is sent
/// and nothing becomes Exhausted until [`resume`]. A webhook paused
/// already keeps the reason and time of its first pause.
pub async fn pause(store: &Store, name: &str, reason: &str) -> Result<Paused, StoreError> {
    let (name, reason) = (name.to_string(), reason.to_string());
    store.run(move |c| webhooks::pause(c, &name, &reason)).await
}

/// `webhook enable|disable NAME`. A disabled webhook makes no new
/// deliveries; its pending ones become Exhausted when their attempt comes,
/// without a request.
pub async fn set_enabled(store: &Store, name: &str, enabled: bool) -> Result<Webhook, StoreError> {
    let name = name.to_string();
    store
        .run(move |c| webhooks::set_enabled(c, &name, enabled))
        .await
}

/// `webhook rotate-finish NAME`: the old secret stops signing and the
/// Frappe header moves to the new one.
pub async fn rotate_finish(store: &Store, name: &str) -> Result<Webhook, StoreError> {
    let name = name.to_string();
    store.run(move |c| webhooks::rotate_finish(c, &name)).await
}

/// `webhook delete NAME`. Its delivery rows stay; pending ones become
/// Exhausted when their attempt comes, without a request.
pub async fn delete(store: &Store, name: &str) -> Result<(), StoreError> {
    let name = name.to_string();
    store.run(move |c| webhooks::delete(c, &name)).await
}

/// Rows `resume` releases or enqueues per statement: the sweeper's shipped
/// batch size, one enqueue script call each, so a statement takes
/// milliseconds however long the backlog that waited.
pub const RESUME_BATCH: i64 = 1_000;

/// What `resume` did.
#[derive(Debug, Serialize)]
pub struct Resumed {
    pub webhook: String,
    /// It was paused (else resume only released rows a cut-short resume
    /// left held, if any).
    pub was_paused: bool,
    /// Held rows made due.
    pub released: usize,
    /// Due rows found (the released ones included).
    pub due: usize,
    /// Of those, pushed now (the rest were already on their way, or wait
    /// for the sweeper: see `note`).
    pub enqueued: usize,
    /// Why some due rows were not pushed now (Redis did not answer); they
    /// are due, so the sweeper sends them.
    pub note: Option<String>,
}

/// `webhook resume NAME`: unpauses the webhook, enqueues its due rows
/// (each with its in-flight key, so a job already on its way is not sent
/// twice), then releases its held rows a batch at a time, oldest first,
/// and enqueues them.
///
/// Postgres decides; Redis only hurries: a row released is due, so if
/// pushing fails the sweeper sends it, and the release goes on. Resuming a
/// webhook that is not paused releases rows an interrupted resume left
/// held, so running it again always finishes the job. It runs on a task of
/// its own: a caller who stops waiting (a console request cut short) does
/// not cut the release of a long backlog short.
pub async fn resume(
    store: &Store,
    queue: &RedisQueue,
    ttl: Duration,
    name: &str,
) -> Result<Resumed, OpsError> {
    let (store, queue, name) = (store.clone(), queue.clone(), name.to_string());
    Ok(tokio::spawn(async move { resume_now(&store, &queue, ttl, &name).await }).await??)
}

async fn resume_now(
    store: &Store,
    queue: &RedisQueue,
    ttl: Duration,
    name: &str,
) -> Result<Resumed, StoreError> {
    let owned = name.to_string();
    let (w, was_paused) = store
        .run(move |c| match webhooks::resume(c, &owned)? {
            Some(w) => Ok((w, true)),
            None => Ok((webhooks::get(c, &owned)?, false)),
        })
        .await?;
    let mut done = Resumed {
        webhook: w.name.clone(),
        was_paused,
        released: 0,
        due: 0,
        enqueued: 0,
        note: None,
    };
    // After one failure nothing more is pushed (each push would wait for
    // Redis's timeout); the rows stay due for the sweeper.
    let send = async |rows: &[DueRow], done: &mut Resumed| {
        done.due += rows.len();
        if done.note.is_some() {
            return;
        }
        let items: Vec<Enqueue> = rows.iter().map(Into::into).collect();
        match queue.jobs().enqueue(&items, ttl).await {
            Ok(pushed) => done.enqueued += pushed.iter().filter(|p| **p).count(),
            Err(e) => {
                done.note = Some(format!(
                    "some due deliveries were not pushed now ({e}); they are due, and the sweeper sends them"
                ))
            }
        }
    };
    // Rows due and never held first (their order in time), then the held
    // ones, released and enqueued a batch at a time, oldest first.
    if was_paused {
        let mut after = None;
        loop {
            let id = w.id;
            let rows = store
                .run(move |c| deliveries::due_of_webhook(c, id, after, RESUME_BATCH))
                .await?;
            let Some(last) = rows.last() else { break };
            after = Some((last.next_retry, last.id));
            send(&rows, &mut done).await;
            if (rows.len() as i64) < RESUME_BATCH {
                break;
            }
        }
    }
    let mut after_id = 0;
    loop {
        let id = w.id;
        let rows = store
            .run(move |c| deliveries::release_held(c, id, after_id, RESUME_BATCH))
            .await?;
        let Some(last) = rows.last() else { break };
        after_id = last.id;
        done.released += rows.len();
        send(&rows, &mut done).await;
    }
    let id = w.id;
    store.run(move |c| webhooks::release_done(c, id)).await?;
    Ok(done)
}
