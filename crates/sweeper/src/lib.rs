//! # hookfleet-sweeper
//!
//! One tick: find the rows whose next_retry has passed (Failed rows come due,
//! Queued rows whose first attempt is overdue past their grace, rows whose
//! worker died mid-attempt once the lease ran out), oldest first, and enqueue
//! at most `batch_size` of them, each with its in-flight key taken in the same
//! Redis script as its LPUSH. A row whose key is held is already on its way
//! and is walked past; the tick pages on to the next due rows so held rows
//! never starve the rest.
//!
//! A tick only enqueues: it never sends HTTP and never waits on a receiver,
//! so it takes milliseconds however slow the receivers are, and a backlog
//! drains over several ticks. Two sweepers ticking at once cannot enqueue a
//! row twice (SET NX decides).
//!
//! # Layout
//! - [`Sweeper`] and [`Sweeper::tick`]: the whole job; the binary adds
//!   `--once` (a Kubernetes CronJob) or an interval loop (systemd).

use std::time::Duration;

use serde::Serialize;

use hookfleet_core::error::{QueueError, StoreError};
use hookfleet_core::queue::{Enqueue, RedisQueue};
use hookfleet_core::store::{deliveries, webhooks, Store};

/// Rows enqueued per tick by default: a backlog drains over several ticks
/// instead of landing on the queues at once.
pub const DEFAULT_BATCH_SIZE: usize = 100;

/// Rows a tick may look at, as a multiple of its batch size, while walking
/// past rows whose key is held: bounds a tick's work when most due rows are
/// already on their way.
pub const SCAN_PAGES: usize = 10;

/// What one tick found and did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TickReport {
    /// Due rows looked at.
    pub due: usize,
    /// Jobs pushed.
    pub enqueued: usize,
    /// Due rows walked past because their in-flight key was held.
    pub skipped_in_flight: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
}

/// The sweeper.
pub struct Sweeper {
    store: Store,
    queue: RedisQueue,
    batch_size: usize,
    /// TTL of the in-flight keys it takes: the grace after which a job that
    /// was lost is enqueued again.
    key_ttl: Duration,
}

impl Sweeper {
    pub fn new(store: Store, queue: RedisQueue, batch_size: usize, key_ttl: Duration) -> Sweeper {
        Sweeper {
            store,
            queue,
            batch_size: batch_size.max(1),
            key_ttl,
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn queue(&self) -> &RedisQueue {
        &self.queue
    }

    /// One tick, logged with what it found and did and how long it took.
    pub async fn tick_and_log(&self) -> Result<TickReport, SweepError> {
        let started = std::time::Instant::now();
        let r = self.tick().await?;
        let metrics = hookfleet_core::observe::metrics();
        metrics
            .sweeper_tick
            .observe(started.elapsed().as_secs_f64());
        metrics.sweeper_enqueued.inc_by(r.enqueued as u64);
        tracing::info!(
            due = r.due,
            enqueued = r.enqueued,
            skipped_in_flight = r.skipped_in_flight,
            ms = started.elapsed().as_millis() as u64,
            "tick"
        );
        Ok(r)
    }

    /// Sets the gauges only the sweeper keeps: the due backlog and its
    /// oldest age, every queue's depth and the dead letters.
    pub async fn observe(&self) -> Result<(), SweepError> {
        let metrics = hookfleet_core::observe::metrics();
        let (due, oldest) = self.store.run(deliveries::backlog).await?;
        metrics.due_backlog.set(due);
        let age = oldest.map_or(0.0, |t| {
            (chrono::Utc::now() - t).num_milliseconds().max(0) as f64 / 1000.0
        });
        metrics.oldest_due_age.set(age);
        for name in self.store.run(webhooks::queue_names).await? {
            metrics.set_queue_depth(&name, self.queue.depth(&name).await?);
        }
        metrics.dead_letters.set(self.queue.dead_count().await?);
        Ok(())
    }

    /// One tick (see the crate docs).
    pub async fn tick(&self) -> Result<TickReport, SweepError> {
        let mut report = TickReport::default();
        let mut after = None;
        let scan_limit = self.batch_size * SCAN_PAGES;
        while report.enqueued < self.batch_size && report.due < scan_limit {
            let page = (self.batch_size - report.enqueued).min(scan_limit - report.due) as i64;
            let rows = self
                .store
                .run(move |c| deliveries::due(c, after, page))
                .await?;
            if rows.is_empty() {
                break;
            }
            let last = rows.last().map(|r| (r.next_retry, r.id));
            let items: Vec<Enqueue> = rows.iter().map(Enqueue::from).collect();
            let flags = self.queue.enqueue(&items, self.key_ttl).await?;
            report.due += rows.len();
            let pushed = flags.iter().filter(|f| **f).count();
            report.enqueued += pushed;
            report.skipped_in_flight += rows.len() - pushed;
            if (rows.len() as i64) < page {
                break;
            }
            after = last;
        }
        Ok(report)
    }
}
