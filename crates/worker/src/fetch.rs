//! The fetch loop: take jobs (as many as there are free delivery slots),
//! claim their rows in one statement, and start one delivery per claimed row.
//!
//! A slot (a semaphore permit) is taken before a job is popped and freed only
//! after its outcome is recorded and the job acked, so `--concurrency` is a
//! hard cap on jobs held, not only on requests in flight.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use hookfleet_core::backoff::Backoff;
use hookfleet_core::deliver::{self, Claim};
use hookfleet_core::queue::{Job, RedisQueue};
use hookfleet_core::store::deliveries::{self, ClaimBatch};
use hookfleet_core::store::Store;

use crate::limits::EndpointLimits;
use crate::record::Finished;
use crate::stats::Counters;
use crate::unit::{Held, UnitOfWork};
use crate::WorkerConfig;

/// The pause after a take that found only jobs for webhooks at their limit:
/// their requests need time to finish, and re-reading the same jobs at once
/// would only spin.
pub const BOUNCE_PAUSE: Duration = Duration::from_millis(20);

/// How long a pop waits on an empty queue: the worker then looks at its other
/// queues and at its shutdown flag, so a drain starts within a second.
pub const BLOCK_TIME: Duration = Duration::from_secs(1);

pub struct Fetcher {
    pub store: Store,
    pub queue: RedisQueue,
    pub config: Arc<WorkerConfig>,
    pub slots: Arc<Semaphore>,
    pub counters: Arc<Counters>,
    pub recorder: mpsc::UnboundedSender<Finished>,
    pub http: reqwest::Client,
    pub tasks: tokio::task::JoinSet<()>,
    pub held: Arc<Held>,
    pub limits: Arc<EndpointLimits>,
    blocking: Option<MultiplexedConnection>,
    next_queue: usize,
    /// A blocking pop failed: a job may sit in a processing list unseen.
    suspect_orphans: bool,
}

impl Fetcher {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Store,
        queue: RedisQueue,
        config: Arc<WorkerConfig>,
        slots: Arc<Semaphore>,
        counters: Arc<Counters>,
        recorder: mpsc::UnboundedSender<Finished>,
        http: reqwest::Client,
        held: Arc<Held>,
        limits: Arc<EndpointLimits>,
    ) -> Fetcher {
        Fetcher {
            store,
            queue,
            config,
            slots,
            counters,
            recorder,
            http,
            tasks: tokio::task::JoinSet::new(),
            held,
            limits,
            blocking: None,
            next_queue: 0,
            suspect_orphans: false,
        }
    }

    fn processing(&self, queue: &str) -> String {
        self.queue.keys().processing(queue, &self.config.worker_id)
    }

    /// Runs until shutdown is requested; then returns with every job it took
    /// started (deliveries still in flight are in `tasks`).
    pub async fn run(&mut self) {
        let mut backoff = Backoff::new();
        while !self.config.shutdown.is_requested() {
            let first = tokio::select! {
                permit = self.slots.clone().acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => return,
                },
                _ = self.config.shutdown.requested(1) => return,
            };
            let mut permits = vec![first];
            while permits.len() < self.config.fetch_batch {
                match self.slots.clone().try_acquire_owned() {
                    Ok(p) => permits.push(p),
                    Err(_) => break,
                }
            }
            match self.take(permits.len()).await {
                Ok(units) => {
                    backoff.reset();
                    if self.suspect_orphans {
                        self.return_orphans().await;
                    }
                    for u in &units {
                        self.held.take(u);
                    }
                    if units.is_empty() {
                        continue;
                    }
                    permits.truncate(units.len());
                    self.dispatch(units, permits).await;
                }
                Err(e) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(error = %e, retry_in = ?wait, "cannot take jobs from Redis; reconnecting");
                    self.blocking = None;
                    self.suspect_orphans = true;
                    drop(permits);
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = self.config.shutdown.requested(1) => return,
                    }
                }
            }
            // Reap finished delivery tasks so the set does not grow.
            while self.tasks.try_join_next().is_some() {}
        }
    }

    /// Puts back jobs sitting in this worker's processing lists that it does
    /// not hold: a pop whose answer was lost may still have moved one there
    /// (PITFALLS 2). Runs once Redis answers again after a failed pop.
    async fn return_orphans(&mut self) {
        let mut returned = 0;
        for q in self.config.queues.clone() {
            let processing = self.processing(&q);
            let Ok(jobs) = self.queue.processing_jobs(&q, &self.config.worker_id).await else {
                return;
            };
            let mut seen: HashMap<&str, usize> = HashMap::new();
            for raw in &jobs {
                let n = seen.entry(raw.as_str()).or_default();
                *n += 1;
                if *n > self.held.count(&processing, raw)
                    && self.queue.requeue(&processing, &q, raw).await.is_ok()
                {
                    returned += 1;
                }
            }
        }
        if returned > 0 {
            tracing::info!(
                returned,
                "returned jobs a lost pop had moved into this worker's processing list"
            );
        }
        self.suspect_orphans = false;
    }

    /// Takes up to `max` jobs: without waiting from each queue in turn, then,
    /// if all were empty, waiting up to [`BLOCK_TIME`] on one of them.
    async fn take(&mut self, max: usize) -> Result<Vec<UnitOfWork>, hookfleet_core::QueueError> {
        let queues = self.config.queues.clone();
        let mut units = Vec::new();
        for i in 0..queues.len() {
            let q = &queues[(self.next_queue + i) % queues.len()];
            if units.len() >= max {
                break;
            }
            let processing = self.processing(q);
            for raw in self.queue.take(q, &processing, max - units.len()).await? {
                units.push(UnitOfWork {
                    queue: q.clone(),
                    processing: processing.clone(),
                    raw,
                    log_id: None,
                });
            }
        }
        if !units.is_empty() {
            return Ok(units);
        }
        let q = queues[self.next_queue % queues.len()].clone();
        self.next_queue = (self.next_queue + 1) % queues.len();
        let block = BLOCK_TIME / queues.len() as u32;
        if self.blocking.is_none() {
            self.blocking = Some(self.queue.blocking_connection(block).await?);
        }
        let processing = self.processing(&q);
        let queue_key = self.queue.keys().queue(&q);
        let conn = self.blocking.as_mut().expect("set above");
        // Not raced against shutdown: a pop abandoned half-way may still move
        // a job (PITFALLS 2), so it is always allowed to finish.
        if let Some(raw) = RedisQueue::take_blocking(conn, &queue_key, &processing, block).await? {
            units.push(UnitOfWork {
                queue: q,
                processing,
                raw,
                log_id: None,
            });
        }
        Ok(units)
    }

    /// Parses, claims and starts the taken jobs.
    async fn dispatch(
        &mut self,
        mut units: Vec<UnitOfWork>,
        mut permits: Vec<OwnedSemaphorePermit>,
    ) {
        let worker = self.config.worker_id.clone();
        self.limits.refresh(&self.store).await;
        let taken = units.len();
        let mut ids = Vec::with_capacity(units.len());
        let mut kept = Vec::with_capacity(units.len());
        let mut endpoint_slots: HashMap<i64, Vec<OwnedSemaphorePermit>> = HashMap::new();
        let mut bounced = 0;
        for mut unit in units.drain(..) {
            match Job::decode(&unit.raw) {
                Ok(job) => {
                    if let Some(webhook) = job.webhook_id {
                        match self.limits.try_take(webhook) {
                            Some(slot) => endpoint_slots.entry(job.log_id).or_default().push(slot),
                            None => {
                                // At its limit: to the back of the queue, and
                                // the slot goes to someone else's job.
                                if self
                                    .queue
                                    .bounce(&unit.processing, &unit.queue, &unit.raw)
                                    .await
                                    .is_ok()
                                {
                                    self.held.release(&unit);
                                    permits.pop();
                                    bounced += 1;
                                    continue;
                                }
                            }
                        }
                    }
                    unit.log_id = Some(job.log_id);
                    ids.push(job.log_id);
                    kept.push(unit);
                }
                Err(reason) => self.dead_letter(&unit, &reason, &worker).await,
            }
        }
        if bounced > 0 {
            Counters::add(&self.counters.bounced, bounced as u64);
            if bounced == taken {
                // Everything taken was for saturated webhooks: give their
                // requests a moment instead of spinning on the queue.
                tokio::time::sleep(BOUNCE_PAUSE).await;
            }
        }
        if kept.is_empty() {
            return;
        }
        let Some(batch) = self.claim(ids).await else {
            // Told to stop at once while the database was down: the jobs stay
            // in the processing list for the reaper.
            return;
        };
        let ClaimBatch {
            claimed,
            exhausted,
            missing,
            ..
        } = batch;
        let mut claims: HashMap<i64, Claim> = claimed.into_iter().map(|c| (c.log_id, c)).collect();
        let exhausted: HashMap<i64, String> = exhausted.into_iter().collect();
        let missing: std::collections::HashSet<i64> = missing.into_iter().collect();
        let mut done: Vec<(UnitOfWork, bool)> = Vec::new();
        for unit in kept {
            let id = unit.log_id.expect("parsed above");
            if let Some(claim) = claims.remove(&id) {
                let permit = permits.pop().expect("one permit per unit");
                let endpoint = match endpoint_slots.get_mut(&id).and_then(Vec::pop) {
                    Some(slot) => Some(slot),
                    // A job that did not name its webhook waits for a slot
                    // now that the claim told us which webhook it is.
                    None => match claim.webhook_id {
                        Some(w) => self.limits.take(w).await,
                        None => None,
                    },
                };
                self.start(unit, claim, permit, endpoint);
            } else if let Some(reason) = exhausted.get(&id) {
                Counters::add(&self.counters.exhausted, 1);
                tracing::info!(log_id = id, reason = %reason, "exhausted without sending");
                done.push((unit, true));
            } else if missing.contains(&id) {
                self.dead_letter(
                    &unit,
                    &format!("job names log id {id}, which does not exist"),
                    &worker,
                )
                .await;
            } else {
                // Terminal, leased elsewhere, not due, or a second job for a
                // row this batch already claimed.
                Counters::add(&self.counters.stale, 1);
                tracing::debug!(log_id = id, "stale job dropped without a request");
                // Its in-flight key is released too: if the row is leased by a
                // worker that died, the sweeper takes it once the lease ends
                // instead of once the key's TTL does; a live holder records
                // its outcome before then, and the claim fences the rest.
                done.push((unit, true));
            }
        }
        if !done.is_empty() {
            let mut backoff = Backoff::new();
            loop {
                match UnitOfWork::acknowledge_all(&self.queue, &done).await {
                    Ok(()) => {
                        for (u, _) in &done {
                            self.held.release(u);
                        }
                        break;
                    }
                    Err(e) => {
                        let wait = backoff.next_wait();
                        tracing::warn!(error = %e, retry_in = ?wait, "cannot ack jobs; retrying");
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => {}
                            _ = self.config.shutdown.requested(2) => break,
                        }
                    }
                }
            }
        }
        drop(permits);
    }

    /// Claims rows, retrying while the database is unavailable. None: told to
    /// stop at once meanwhile.
    async fn claim(&self, ids: Vec<i64>) -> Option<ClaimBatch> {
        let ids = Arc::new(ids);
        let lease_margin = self.config.lease_margin;
        let mut backoff = Backoff::new();
        loop {
            let ids2 = ids.clone();
            match self
                .store
                .run(move |c| deliveries::claim(c, &ids2, lease_margin))
                .await
            {
                Ok(batch) => return Some(batch),
                Err(e) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(jobs = ids.len(), error = %e, retry_in = ?wait,
                        "cannot claim rows; holding the jobs and retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = self.config.shutdown.requested(2) => return None,
                    }
                }
            }
        }
    }

    async fn dead_letter(&self, unit: &UnitOfWork, reason: &str, worker: &str) {
        Counters::add(&self.counters.dead_lettered, 1);
        tracing::warn!(job = %unit.raw.chars().take(200).collect::<String>(), reason, "job dead-lettered");
        let mut backoff = Backoff::new();
        while let Err(e) = unit.dead_letter(&self.queue, reason, worker).await {
            let wait = backoff.next_wait();
            tracing::warn!(error = %e, retry_in = ?wait, "cannot dead-letter a job; retrying");
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.config.shutdown.requested(2) => return,
            }
        }
        self.held.release(unit);
    }

    /// Starts one delivery; its outcome goes to the recorder with its slots.
    fn start(
        &mut self,
        unit: UnitOfWork,
        claim: Claim,
        permit: OwnedSemaphorePermit,
        endpoint: Option<OwnedSemaphorePermit>,
    ) {
        let http = self.http.clone();
        let config = self.config.clone();
        let recorder = self.recorder.clone();
        self.tasks.spawn(async move {
            let report = deliver::send(&http, &config.policy, &claim).await;
            let outcome = deliver::judge(&claim, &report, &config.schedule, true);
            tracing::debug!(log_id = claim.log_id, attempt = claim.attempt, webhook = %claim.webhook_name,
                code = ?report.response_code, "attempt finished");
            // The recorder outlives every delivery task.
            let _ = recorder.send(Finished { outcome, unit, permit, endpoint });
        });
    }
}
