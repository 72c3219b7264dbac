//! The fetch loop: take jobs (as many as there are free delivery slots, and
//! no more of a webhook's than it has slots for), then hand them to the
//! [`Starter`](crate::start::Starter), which claims and starts them while the
//! loop takes the next ones.
//!
//! A slot (a semaphore permit) is taken before a job is popped and freed
//! when its answer is in, once the job has a place among the outcomes
//! waiting to be recorded (as many as the slots; see
//! [`UnitOfWork::answered`](crate::unit::UnitOfWork::answered)). So
//! `--concurrency` caps the jobs being claimed and sent, a slot turns around
//! at the receiver's pace rather than the recorder's, and a worker holds at
//! most twice `--concurrency` jobs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use hookfleet_core::queue::Conn;
use hookfleet_core::runtime::retry_until_stopped;

use crate::start::{Reservation, Starter};
use crate::stats::Counters;
use crate::unit::{Claimable, TakenJob, UnitOfWork, Unparsable};

/// A job as a take moved it: its queue, the processing list now holding it,
/// and its bytes.
type Popped = (String, String, String);

/// How many of a queue's oldest jobs a take looks at when some webhooks are
/// at their limit: jobs of other webhooks within this window are taken past
/// them, without disturbing the waiting ones' order.
pub const FAIR_WINDOW: usize = 256;

/// The window for a take of `want` jobs: four times what it may take (a few
/// saturated webhooks' jobs are looked past; reading more costs Redis time
/// on every take when one webhook's jobs fill the queue), at most
/// [`FAIR_WINDOW`].
fn fair_window(want: usize) -> usize {
    (4 * want).clamp(16, FAIR_WINDOW)
}

/// Longest wait for a webhook slot when every job within reach is for a
/// webhook at its limit (a slot freeing up ends the wait sooner).
pub const SATURATED_WAIT: Duration = Duration::from_millis(50);

/// After this many takes that found only jobs of saturated webhooks, the
/// next take rotates them to the back so jobs beyond the window come within
/// reach (about a quarter of a second of waiting).
pub const ROTATE_AFTER_ROUNDS: u32 = 5;

/// How long a pop waits on an empty queue: the worker then looks at its other
/// queues and at its shutdown flag, so a drain starts within a second.
pub const BLOCK_TIME: Duration = Duration::from_secs(1);

/// How often the worker compares its processing lists with the jobs it
/// holds even when nothing went wrong: a job whose task ended without a verb
/// (a panic) is put back within this time instead of waiting for the worker
/// to die. Reading lists of at most `--concurrency` jobs once a minute costs
/// nothing.
pub const ORPHAN_CHECK_EVERY: Duration = Duration::from_secs(60);

/// After Redis failed, the orphan check runs once it answers again and once
/// more this long after: a blocking pop abandoned by the client may still
/// move a job on the server until its block time and a command's timeout
/// have passed (PITFALLS 2).
pub const ORPHAN_RECHECK_AFTER: Duration =
    Duration::from_secs(BLOCK_TIME.as_secs() + hookfleet_core::queue::COMMAND_TIMEOUT.as_secs());

pub struct Fetcher {
    starter: Arc<Starter>,
    slots: Arc<Semaphore>,
    blocking: Option<Conn>,
    next_queue: usize,
    /// When the next orphan check is due: soon after a failed pop (a job may
    /// sit in a processing list unseen), else every [`ORPHAN_CHECK_EVERY`].
    orphan_check_at: tokio::time::Instant,
    /// A check to run [`ORPHAN_RECHECK_AFTER`] after the one that follows a
    /// Redis failure.
    orphan_recheck: bool,
    /// Consecutive takes that found only jobs of webhooks at their limit.
    saturated_rounds: u32,
}

impl Fetcher {
    pub fn new(starter: Arc<Starter>, slots: Arc<Semaphore>) -> Fetcher {
        Fetcher {
            starter,
            slots,
            blocking: None,
            next_queue: 0,
            orphan_check_at: tokio::time::Instant::now() + ORPHAN_CHECK_EVERY,
            orphan_recheck: false,
            saturated_rounds: 0,
        }
    }

    /// Something may have left a job in a processing list unseen: check as
    /// soon as Redis answers, and once more a little later.
    fn suspect_orphans(&mut self) {
        self.orphan_check_at = tokio::time::Instant::now();
        self.orphan_recheck = true;
    }

    fn processing(&self, queue: &str) -> String {
        self.starter
            .queue
            .keys()
            .processing(queue, &self.starter.config.worker_id)
    }

    /// Runs until shutdown is requested. Every job taken has been handed to
    /// the starter by then; it holds its slot (then its place among the
    /// outcomes waiting) until it is recorded.
    pub async fn run(&mut self) {
        let shutdown = self.starter.config.shutdown.clone();
        while !shutdown.is_requested() {
            let first = tokio::select! {
                permit = self.slots.clone().acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => return,
                },
                _ = shutdown.requested(1) => return,
            };
            let mut permits = vec![first];
            while permits.len() < self.starter.config.fetch_batch {
                match self.slots.clone().try_acquire_owned() {
                    Ok(p) => permits.push(p),
                    Err(_) => break,
                }
            }
            let want = permits.len();
            let taken = {
                // Each try borrows the fetcher mutably; the lock lends it to
                // one try at a time (it is never contended).
                let lent = tokio::sync::Mutex::new(&mut *self);
                retry_until_stopped(
                    shutdown.requested(1),
                    |e, wait| tracing::warn!(error = %e, retry_in = ?wait, "cannot take jobs from Redis; reconnecting"),
                    || async {
                        let mut this = lent.lock().await;
                        this.starter.limits.refresh(&this.starter.store).await;
                        let taken = this.take(want).await;
                        if taken.is_err() {
                            this.blocking = None;
                            this.suspect_orphans();
                        }
                        taken
                    },
                )
                .await
            };
            // Told to stop while Redis was away: nothing was taken.
            let Ok(taken) = taken else { return };
            // Held from here on, before any orphan check looks.
            let jobs: Vec<TakenJob> = taken
                .into_iter()
                .zip(permits)
                .map(|((queue, processing, raw), permit)| {
                    TakenJob::new(&queue, &processing, raw, permit, &self.starter.held)
                })
                .collect();
            if tokio::time::Instant::now() >= self.orphan_check_at {
                self.return_orphans().await;
            }
            if jobs.is_empty() {
                continue;
            }
            let (ready, unnamed) = self.reserve(jobs).await;
            if ready.is_empty() && unnamed.is_empty() {
                continue;
            }
            // Claims are bounded inside the starter; the loop goes on
            // taking (and notices a shutdown) meanwhile.
            let starter = self.starter.clone();
            tokio::spawn(async move { starter.claim_and_start(ready, unnamed).await });
        }
    }

    /// Parses the taken jobs and gives each that names its webhook its slot
    /// there ([`Starter::reserve`]); those that name none are returned apart,
    /// for the starter to look their webhook up. A job whose webhook has no
    /// free slot (it slipped past the take's caps: a blocking pop, or a
    /// webhook not seen before) goes to the back of the queue and frees its
    /// delivery slot for someone else's job. A job that does not parse is
    /// dead-lettered (on a task of its own: the loop does not wait for Redis
    /// there).
    async fn reserve(&mut self, jobs: Vec<TakenJob>) -> (Vec<Claimable>, Vec<UnitOfWork>) {
        let count = jobs.len();
        let mut ready = Vec::with_capacity(count);
        let mut unnamed = Vec::new();
        let mut bounced = 0;
        for job in jobs {
            let unit = match job.parse() {
                Ok(unit) => unit,
                Err(unparsable) => {
                    let starter = self.starter.clone();
                    tokio::spawn(async move {
                        let Unparsable { job, reason } = *unparsable;
                        starter.dead_letter(job, &reason.to_string()).await
                    });
                    continue;
                }
            };
            let Some(webhook) = unit.job().webhook_id else {
                unnamed.push(unit);
                continue;
            };
            self.starter.limits.seen(webhook);
            match self.starter.reserve(unit, Some(webhook)) {
                Reservation::Ready(job) => ready.push(job),
                Reservation::Full { unit, .. } => {
                    if let Err(e) = unit.bounce(&self.starter.queue).await {
                        // It may or may not have moved: the orphan check
                        // settles it once Redis answers.
                        tracing::warn!(error = %e, "cannot put a job back; checking for it once Redis answers");
                        self.suspect_orphans();
                    } else {
                        bounced += 1;
                    }
                }
            }
        }
        if bounced > 0 {
            Counters::add(&self.starter.counters.bounced, bounced as u64);
            if bounced == count {
                let _ = tokio::time::timeout(SATURATED_WAIT, self.starter.limits.released()).await;
            }
        }
        (ready, unnamed)
    }

    /// Puts back jobs sitting in this worker's processing lists that it does
    /// not hold: a pop whose answer was lost may still have moved one there
    /// (PITFALLS 2), and a job whose task ended without a verb is left there.
    /// Runs after the jobs just taken are counted as held; a check that could
    /// not finish runs again at the next take.
    async fn return_orphans(&mut self) {
        let mut returned = 0;
        let mut complete = true;
        for q in self.starter.config.queues.clone() {
            let processing = self.processing(&q);
            let Ok(jobs) = self
                .starter
                .queue
                .registry()
                .processing_jobs(&q, &self.starter.config.worker_id)
                .await
            else {
                complete = false;
                break;
            };
            let mut seen: HashMap<&str, usize> = HashMap::new();
            for raw in &jobs {
                let n = seen.entry(raw.as_str()).or_default();
                *n += 1;
                if *n <= self.starter.held.count(&processing, raw) {
                    continue;
                }
                // Conditional: a job acked since the list was read is not
                // pushed again.
                match self
                    .starter
                    .queue
                    .jobs()
                    .requeue(&processing, &q, raw)
                    .await
                {
                    Ok(true) => returned += 1,
                    Ok(false) => {}
                    Err(_) => complete = false,
                }
            }
        }
        if returned > 0 {
            tracing::info!(
                returned,
                "returned jobs this worker's processing list held but the worker did not"
            );
        }
        let now = tokio::time::Instant::now();
        self.orphan_check_at = if !complete {
            now
        } else if std::mem::take(&mut self.orphan_recheck) {
            now + ORPHAN_RECHECK_AFTER
        } else {
            now + ORPHAN_CHECK_EVERY
        };
    }

    /// Takes up to `max` jobs: without waiting from each queue in turn, then,
    /// if all were empty, waiting up to [`BLOCK_TIME`] on one of them.
    async fn take(&mut self, max: usize) -> Result<Vec<Popped>, hookfleet_core::QueueError> {
        let queues = self.starter.config.queues.clone();
        let mut units = Vec::new();
        let mut skipped = 0;
        for i in 0..queues.len() {
            let q = &queues[(self.next_queue + i) % queues.len()];
            if units.len() >= max {
                break;
            }
            let processing = self.processing(q);
            let want = max - units.len();
            // Webhooks near their limit: take only what they can start now.
            let caps = self.starter.limits.caps(want);
            let taken = if caps.is_empty() {
                self.starter.queue.jobs().take(q, &processing, want).await?
            } else {
                let rotate = self.saturated_rounds >= ROTATE_AFTER_ROUNDS;
                let (taken, n) = self
                    .starter
                    .queue
                    .jobs()
                    .take_fair(q, &processing, want, fair_window(want), &caps, rotate)
                    .await?;
                skipped += n;
                taken
            };
            for raw in taken {
                units.push((q.clone(), processing.clone(), raw));
            }
        }
        if !units.is_empty() {
            self.saturated_rounds = 0;
            return Ok(units);
        }
        if skipped > 0 {
            // Jobs are waiting, but only for webhooks at their limit: wait for
            // one of their requests to finish rather than for the queue.
            self.saturated_rounds += 1;
            let _ = tokio::time::timeout(SATURATED_WAIT, self.starter.limits.released()).await;
            return Ok(units);
        }
        self.saturated_rounds = 0;
        let q = queues[self.next_queue % queues.len()].clone();
        self.next_queue = (self.next_queue + 1) % queues.len();
        let block = BLOCK_TIME / queues.len() as u32;
        if self.blocking.is_none() {
            self.blocking = Some(self.starter.queue.blocking_connection(block).await?);
        }
        let processing = self.processing(&q);
        let queue_key = self.starter.queue.keys().queue(&q);
        let conn = self.blocking.as_mut().expect("set above");
        // Not raced against shutdown: a pop abandoned half-way may still move
        // a job (PITFALLS 2), so it is always allowed to finish.
        if let Some(raw) =
            hookfleet_core::queue::Jobs::take_blocking(conn, &queue_key, &processing, block).await?
        {
            units.push((q, processing, raw));
        }
        Ok(units)
    }
}
