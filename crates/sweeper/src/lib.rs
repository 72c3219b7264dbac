//! # hookfleet-sweeper
//!
//! One tick: find the rows whose next_retry has passed (Failed rows come due,
//! Queued rows whose first attempt is overdue past their grace, rows whose
//! worker died mid-attempt once the lease ran out), oldest first, and enqueue
//! them a batch (`batch_size`) at a time, each row with its in-flight key
//! taken in the same Redis script as its LPUSH. A row whose key is held is
//! already on its way and is walked past; the tick pages on to the next due
//! rows so held rows never starve the rest, and takes batch after batch
//! until no due row is left or its time budget is spent.
//!
//! Rows of paused webhooks are walked past: they wait for `webhook resume`.
//! A resume cut short leaves its webhook marked `releasing`; a tick
//! releases what is still held first, so the same tick enqueues it.
//!
//! After sweeping, a tick applies the retention (`--retention`): terminal
//! rows older than it are deleted, with their attempts, in paced batches,
//! for up to its own budget (`--prune-budget`, at least one batch), and
//! the webhooks' hourly health older than a day goes too.
//!
//! A tick only enqueues: it never sends HTTP and never waits on a receiver,
//! so a batch takes milliseconds however slow the receivers are, and a
//! backlog (a Redis that lost everything) heals in one tick. Two sweepers
//! ticking at once cannot enqueue a row twice (SET NX decides).
//!
//! # Layout
//! - [`Sweeper`] and [`Sweeper::tick`]: the whole job; the binary adds
//!   `--once` (a Kubernetes CronJob) or an interval loop (systemd).

use std::time::Duration;

use serde::Serialize;

use hookfleet_core::error::{QueueError, StoreError};
use hookfleet_core::queue::{Enqueue, RedisQueue};
use hookfleet_core::store::{deliveries, health, retention, webhooks, Store};

/// Held rows a tick releases at most for resumes cut short, a statement
/// of [`RELEASE_BATCH`] at a time: a backlog of millions is finished over a
/// few ticks, none of them long.
pub const RELEASE_PER_TICK: usize = 100_000;
pub const RELEASE_BATCH: i64 = 1_000;

/// Rows enqueued per batch by default: one enqueue script call and one
/// query page per batch keep each step short; a tick takes as many batches
/// as its budget allows.
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
    /// Batches taken (a sweep takes several).
    pub batches: usize,
    /// Whether the sweep stopped at its time budget with due rows left.
    pub budget_spent: bool,
    /// Held rows of resumed webhooks released (a resume cut short).
    pub released: usize,
    /// Terminal rows deleted by the retention (and their attempts).
    pub pruned: u64,
    pub pruned_attempts: u64,
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
    /// Terminal rows older than this are pruned each tick; None: kept.
    retention: Option<Duration>,
    /// How long a tick's prune may take (paced at
    /// [`retention::PRUNE_DUTY`]).
    prune_budget: Duration,
    /// Where the retention's walk goes on from, and when it last began at
    /// the first row (see [`PRUNE_REWALK`]).
    prune_from: std::sync::Mutex<(i64, std::time::Instant)>,
}

/// How often the retention's walk begins again at the first row: between
/// times a tick goes on from where the last stopped, so old rows that are
/// kept (pending, or replayed since the cut) are not walked every tick; a
/// day is soon enough for them once they end.
pub const PRUNE_REWALK: Duration = Duration::from_secs(24 * 3600);

impl Sweeper {
    pub fn new(store: Store, queue: RedisQueue, batch_size: usize, key_ttl: Duration) -> Sweeper {
        Sweeper {
            store,
            queue,
            batch_size: batch_size.max(1),
            key_ttl,
            retention: None,
            prune_budget: Duration::ZERO,
            prune_from: std::sync::Mutex::new((0, std::time::Instant::now())),
        }
    }

    /// Prunes terminal rows older than `retention` each tick (None: keeps
    /// everything), for up to `budget` (at least one batch).
    pub fn with_retention(mut self, retention: Option<Duration>, budget: Duration) -> Sweeper {
        self.retention = retention;
        self.prune_budget = budget;
        self
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn queue(&self) -> &RedisQueue {
        &self.queue
    }

    /// One tick of the binary (a [`Sweeper::sweep`] within `budget`),
    /// logged with what it found and did and how long it took.
    pub async fn tick_and_log(&self, budget: Duration) -> Result<TickReport, SweepError> {
        let started = std::time::Instant::now();
        let released = self.finish_releases().await?;
        let mut r = self.sweep(budget).await?;
        r.released = released;
        if let Some(retention) = self.retention {
            let budget = self.prune_budget;
            let from = {
                let mut from = self.prune_from.lock().unwrap_or_else(|e| e.into_inner());
                if from.1.elapsed() >= PRUNE_REWALK {
                    *from = (0, std::time::Instant::now());
                }
                from.0
            };
            let pruned = self
                .store
                .run(move |c| {
                    retention::prune(
                        c,
                        retention,
                        from,
                        retention::PRUNE_BATCH,
                        budget,
                        retention::PRUNE_DUTY,
                        &mut |_| {},
                    )
                })
                .await?;
            self.prune_from.lock().unwrap_or_else(|e| e.into_inner()).0 = pruned.stopped_after;
            r.pruned = pruned.rows;
            r.pruned_attempts = pruned.attempts;
            hookfleet_core::runtime::observe::metrics()
                .pruned
                .inc_by(pruned.rows);
        }
        self.store.run(health::clean).await?;
        let metrics = hookfleet_core::runtime::observe::metrics();
        metrics
            .sweeper_tick
            .observe(started.elapsed().as_secs_f64());
        metrics.sweeper_enqueued.inc_by(r.enqueued as u64);
        tracing::info!(
            due = r.due,
            enqueued = r.enqueued,
            skipped_in_flight = r.skipped_in_flight,
            batches = r.batches,
            budget_spent = r.budget_spent,
            released = r.released,
            pruned = r.pruned,
            pruned_attempts = r.pruned_attempts,
            ms = started.elapsed().as_millis() as u64,
            "tick"
        );
        Ok(r)
    }

    /// Releases the held rows a resume cut short left behind (webhooks
    /// marked `releasing` and not paused), at most [`RELEASE_PER_TICK`] a
    /// tick; they are due at once, so the sweep that follows enqueues them.
    /// A webhook is unmarked once none of its rows is held.
    pub async fn finish_releases(&self) -> Result<usize, SweepError> {
        let mut released = 0;
        for id in self.store.run(webhooks::releasing).await? {
            let mut after = 0;
            loop {
                if released >= RELEASE_PER_TICK {
                    return Ok(released);
                }
                let rows = self
                    .store
                    .run(move |c| deliveries::release_held(c, id, after, RELEASE_BATCH))
                    .await?;
                let Some(last) = rows.last() else { break };
                after = last.id;
                released += rows.len();
            }
            self.store
                .run(move |c| webhooks::release_done(c, id))
                .await?;
        }
        if released > 0 {
            tracing::info!(released, "released rows a resume cut short had left held");
        }
        Ok(released)
    }

    /// Sets the gauges only the sweeper keeps: the due backlog and its
    /// oldest age, every queue's depth and the dead letters.
    pub async fn observe(&self) -> Result<(), SweepError> {
        let metrics = hookfleet_core::runtime::observe::metrics();
        let (due, oldest) = self.store.run(deliveries::backlog).await?;
        metrics.due_backlog.set(due);
        let age = oldest.map_or(0.0, |t| {
            (chrono::Utc::now() - t).num_milliseconds().max(0) as f64 / 1000.0
        });
        metrics.oldest_due_age.set(age);
        for name in self.store.run(webhooks::queue_names).await? {
            metrics.set_queue_depth(&name, self.queue.jobs().depth(&name).await?);
        }
        metrics.dead_letters.set(self.queue.dead().count().await?);
        let paused = self.store.run(webhooks::paused_names).await?;
        metrics.webhooks_paused.set(paused.len() as i64);
        Ok(())
    }

    /// One tick (see the crate docs): one batch.
    pub async fn tick(&self) -> Result<TickReport, SweepError> {
        Ok(self.batch(None).await?.0)
    }

    /// Batch after batch, each from where the last stopped, until no due
    /// row is left or `budget` is spent: a Redis that lost 100,000 jobs is
    /// healed by one tick, not one batch per interval. Stops early, with
    /// what it did, at the first error.
    pub async fn sweep(&self, budget: Duration) -> Result<TickReport, SweepError> {
        let started = std::time::Instant::now();
        let mut total = TickReport::default();
        let mut after = None;
        loop {
            let (report, next) = self.batch(after).await?;
            total.due += report.due;
            total.enqueued += report.enqueued;
            total.skipped_in_flight += report.skipped_in_flight;
            total.batches += 1;
            match next {
                Some(cursor) if started.elapsed() < budget => after = Some(cursor),
                Some(_) => {
                    total.budget_spent = true;
                    return Ok(total);
                }
                None => return Ok(total),
            }
        }
    }

    /// One batch from `after` (the first due row when None); the cursor to
    /// go on from, or None when no due row is left past it.
    async fn batch(
        &self,
        mut after: Option<(chrono::DateTime<chrono::Utc>, i64)>,
    ) -> Result<(TickReport, Option<(chrono::DateTime<chrono::Utc>, i64)>), SweepError> {
        let mut report = TickReport::default();
        let scan_limit = self.batch_size * SCAN_PAGES;
        while report.enqueued < self.batch_size && report.due < scan_limit {
            let page = (self.batch_size - report.enqueued).min(scan_limit - report.due) as i64;
            let rows = self
                .store
                .run(move |c| deliveries::due(c, after, page))
                .await?;
            if rows.is_empty() {
                return Ok((report, None));
            }
            let last = rows.last().map(|r| (r.next_retry, r.id));
            let items: Vec<Enqueue> = rows.iter().map(Enqueue::from).collect();
            let flags = self.queue.jobs().enqueue(&items, self.key_ttl).await?;
            report.due += rows.len();
            let pushed = flags.iter().filter(|f| **f).count();
            report.enqueued += pushed;
            report.skipped_in_flight += rows.len() - pushed;
            after = last;
            if (rows.len() as i64) < page {
                return Ok((report, None));
            }
        }
        Ok((report, after))
    }
}
