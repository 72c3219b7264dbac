//! The operator's actions that need both Postgres and Redis, and the reads
//! every surface shows: the CLI, the management API and the console's pages
//! call these, so each action has one implementation.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use hookfleet_core::error::{QueueError, StoreError};
use hookfleet_core::model::{DeliveryStatus, Webhook};
use hookfleet_core::queue::{Enqueue, RedisQueue};
use hookfleet_core::store::deliveries::{self, DueRow, Replayed};
use hookfleet_core::store::health::{self, Health};
use hookfleet_core::store::{webhooks, Store};

use crate::views::{RowCounts, StatsView};

/// An action that failed in Postgres or in Redis.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// Input the action refuses (the message says why).
    #[error("{0}")]
    Invalid(String),
}

/// Rows `resume` releases or enqueues per statement: the sweeper's shipped
/// batch size, one enqueue script call each, so a statement takes
/// milliseconds however long the backlog that waited.
pub const RESUME_BATCH: i64 = 1_000;

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
        match queue.depth(q).await {
            Ok(n) => {
                view.queues.insert(q.clone(), n);
            }
            Err(e) => {
                view.redis_error = Some(e.to_string());
                break;
            }
        }
    }
    match queue.dead_count().await {
        Ok(n) => view.dead_letters = Some(n),
        Err(e) => {
            view.redis_error.get_or_insert(e.to_string());
        }
    }
    Ok(view)
}

/// The health of `ws`, one read for all of them.
pub async fn health_of(store: &Store, ws: &[Webhook]) -> Result<HashMap<i64, Health>, StoreError> {
    let ids: Vec<i64> = ws.iter().map(|w| w.id).collect();
    store.run(move |c| health::of(c, &ids)).await
}

/// Puts replayed rows on their queues now rather than at the next sweep,
/// and says what happened in words (a failure here loses nothing: the rows
/// are due, so the sweeper sends them).
pub async fn enqueue_now(queue: &RedisQueue, rows: &[Replayed], ttl: Duration) -> String {
    let items: Vec<Enqueue> = rows.iter().map(Enqueue::from).collect();
    match queue.enqueue(&items, ttl).await {
        Ok(flags) => {
            let n = flags.iter().filter(|f| **f).count();
            if n == rows.len() {
                "queued now".into()
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
#[derive(Debug, Serialize)]
pub struct ReplayBulk {
    pub webhook: String,
    pub status: DeliveryStatus,
    pub since: DateTime<Utc>,
    pub dry_run: bool,
    /// Rows replayed (or that would be).
    pub count: i64,
    pub note: Option<String>,
}

/// `delivery retry --webhook W --status S --since T`: every row of the
/// webhook in that status changed since `since`; `dry_run` only counts.
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
        return Err(OpsError::Invalid(
            "bulk replay takes the status Failed or Exhausted".into(),
        ));
    }
    let name = webhook.to_string();
    let mut out = ReplayBulk {
        webhook: webhook.to_string(),
        status,
        since,
        dry_run,
        count: 0,
        note: None,
    };
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
        out.note = Some(enqueue_now(queue, &rows, ttl).await);
    }
    Ok(out)
}

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
/// held, so running it again always finishes the job.
pub async fn resume(
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
        match queue.enqueue(&items, ttl).await {
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
