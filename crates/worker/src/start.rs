//! Claiming and starting: each taken job first gets its webhook's slot (so a
//! row's lease never ticks while it waits for one), then the jobs' rows are
//! claimed in one statement, each claimed row's delivery starts at once, and
//! the jobs that cannot be sent are acked (Exhausted, or stale), or
//! dead-lettered (naming no row). Several claims run at once (the fetch loop
//! does not wait for them), and jobs that wait for one are claimed together
//! (see [`ClaimQueue`]).
//!
//! [`Starter::reserve`] is the one place a job takes its webhook's slot,
//! whether the fetch loop just took it, its webhook had to be looked up, it
//! waited for a slot or for another attempt's lease. The [`Claimable`] it
//! makes frees the slot itself: with the answer, or at a verdict that does
//! not send.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, Semaphore, SemaphorePermit};

use hookfleet_core::attempt::{self, Claim};
use hookfleet_core::runtime::retry_until_stopped;

use hookfleet_core::error::StoreError;
use hookfleet_core::queue::RedisQueue;
use hookfleet_core::store::deliveries::{self, Verdict};
use hookfleet_core::store::Store;

use crate::config::WorkerConfig;
use crate::fleet::FleetGate;
use crate::limits::EndpointLimits;
use crate::record::Finished;
use crate::stats::Counters;
use crate::unit::{Claimable, Held, TakenJob, UnitOfWork};

/// The longest a job waits for another attempt's lease: a lease is at most
/// the longest webhook timeout (60 s) plus the lease margin.
pub const MAX_LEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Added to a lease's end before claiming again, so the claim does not race
/// the clock it is compared with.
pub const LEASE_SLACK: std::time::Duration = std::time::Duration::from_millis(200);

/// Claim statements under way at once, whoever starts them (the fetch loop,
/// a job that waited for its webhook's slot or for a lease): enough that
/// taking the next jobs never waits on the previous claim, few enough to keep
/// a handful of Postgres connections.
pub const CLAIMS_IN_FLIGHT: usize = 2;

/// The most rows one claim statement takes: jobs that queued for a claim
/// while the statements before them ran go together, up to this many (one
/// statement for a few hundred ids costs little more than for one; a
/// bigger batch would only make its first jobs wait on its last rows).
pub const MAX_CLAIM_BATCH: usize = 512;

/// How many times a claim the database refuses is tried again before it is
/// split (or, for one row, given up): a deadlock or a statement timeout
/// passes; a row that cannot be claimed does not.
pub const CLAIM_REFUSALS: u32 = 3;

/// Whether a job got its webhook's slot.
pub enum Reservation {
    /// It holds its slot (or has no webhook to hold one at): ready to claim.
    Ready(Claimable),
    /// Its webhook is at its limit.
    Full { unit: UnitOfWork, webhook: i64 },
}

/// How a claim statement ended, short of a failure worth retrying.
enum Claimed {
    Verdicts(Vec<Verdict>),
    /// Refused [`CLAIM_REFUSALS`] times: the database will not claim these
    /// rows together.
    Refused(StoreError),
    /// The claim permits are gone (the starter is going away).
    Closed,
}

/// The claim statements: [`CLAIMS_IN_FLIGHT`] permits, and the jobs waiting
/// for one. A caller adds its jobs, waits for a permit, then claims every
/// job waiting (up to [`MAX_CLAIM_BATCH`]), its own or others': under load a
/// slot waits for at most the statement ahead of it, not for a queue of
/// small ones, and Postgres commits fewer, larger claims.
pub struct ClaimQueue {
    permits: Semaphore,
    waiting: std::sync::Mutex<Vec<Claimable>>,
}

impl Default for ClaimQueue {
    fn default() -> Self {
        ClaimQueue {
            permits: Semaphore::new(CLAIMS_IN_FLIGHT),
            waiting: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl ClaimQueue {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Vec<Claimable>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `jobs` to those waiting for a claim; once a statement may start,
    /// takes those still waiting, oldest first (None: other callers took
    /// them all, and claim them). A caller takes at least as many jobs as it
    /// added (more than [`MAX_CLAIM_BATCH`] only when it added more), so no
    /// job is left waiting for a caller that never comes.
    async fn join(&self, jobs: Vec<Claimable>) -> Option<(SemaphorePermit<'_>, Vec<Claimable>)> {
        let added = jobs.len();
        self.waiting().extend(jobs);
        let Ok(permit) = self.permits.acquire().await else {
            // Never closed while the worker runs; should it be, the jobs
            // are let go (their slots freed) rather than left waiting.
            self.waiting().clear();
            return None;
        };
        let batch: Vec<Claimable> = {
            let mut waiting = self.waiting();
            let n = waiting.len().min(MAX_CLAIM_BATCH.max(added));
            waiting.drain(..n).collect()
        };
        (!batch.is_empty()).then_some((permit, batch))
    }
}

/// What claiming and starting needs; shared by the fetch loop and the claim
/// tasks it spawns.
pub struct Starter {
    pub store: Store,
    pub queue: RedisQueue,
    pub config: Arc<WorkerConfig>,
    pub counters: Arc<Counters>,
    pub held: Arc<Held>,
    pub limits: Arc<EndpointLimits>,
    /// The fleet-wide limits (leases and rate tokens in Redis).
    pub fleet: Arc<FleetGate>,
    pub recorder: mpsc::UnboundedSender<Finished>,
    /// Places for answered jobs whose outcomes wait to be written and acked
    /// (as many as `--concurrency`): an answered job trades its delivery
    /// slot for one (see [`UnitOfWork::answered`]).
    pub waiting: Arc<Semaphore>,
    pub http: reqwest::Client,
    /// The claim statements and the jobs waiting for one.
    pub claims: ClaimQueue,
}

impl Starter {
    /// The one place a job takes its slot at its webhook (`webhook`: None
    /// when it has none to take one at: its row is missing or its webhook
    /// deleted, and it is never sent). A job whose webhook is at its limit
    /// is handed back, for the caller to put back on its queue or to wait.
    pub fn reserve(&self, unit: UnitOfWork, webhook: Option<i64>) -> Reservation {
        let Some(webhook) = webhook else {
            return Reservation::Ready(Claimable::new(unit, None));
        };
        match self.limits.try_take(webhook) {
            Some(slot) => Reservation::Ready(Claimable::new(unit, Some(slot))),
            None => Reservation::Full { unit, webhook },
        }
    }

    /// Claims the rows of `ready` (jobs holding their webhook's slot) and
    /// starts a delivery for each claimed row. `unslotted`: jobs that have no
    /// slot yet (they do not name their webhook, or come back from a lease):
    /// each takes one first, or if its webhook is at its limit waits for one
    /// on a task of its own, unclaimed.
    pub async fn claim_and_start(
        self: &Arc<Self>,
        mut ready: Vec<Claimable>,
        unslotted: Vec<UnitOfWork>,
    ) {
        if !unslotted.is_empty() {
            let Some(found) = self.webhooks(unslotted).await else {
                // Left in the processing list: the drain puts them back.
                return;
            };
            for (unit, webhook) in found {
                match self.reserve(unit, webhook) {
                    Reservation::Ready(job) => ready.push(job),
                    Reservation::Full { unit, webhook } => {
                        self.claim_when_slot_frees(unit, webhook)
                    }
                }
            }
        }
        let admitted = self.fleet.admit(&self.limits, ready).await;
        if admitted.is_empty() {
            return;
        }
        // Every job added is claimed by some caller: each takes at least as
        // many as it added.
        let Some((permit, jobs)) = self.claims.join(admitted).await else {
            return;
        };
        let ids: Vec<i64> = jobs.iter().map(Claimable::log_id).collect();
        let Some(verdicts) = self.claim(ids, Some(permit)).await else {
            // Told to stop at once while the database was down: the jobs stay
            // in the processing list for the reaper.
            return;
        };
        let mut done: Vec<UnitOfWork> = Vec::new();
        let mut of_paused: Vec<UnitOfWork> = Vec::new();
        let mut withheld: Option<String> = None;
        // One verdict per job, in order. Only a Send keeps the webhook's
        // slot; every other verdict frees it (into_unit) before the job goes
        // on.
        for (job, verdict) in jobs.into_iter().zip(verdicts) {
            let id = job.log_id();
            match verdict {
                Verdict::Send(claim) => self.start(job, claim),
                Verdict::Exhausted(reason) => {
                    Counters::add(&self.counters.exhausted, 1);
                    hookfleet_core::runtime::observe::metrics().delivery(
                        hookfleet_core::runtime::observe::UNKNOWN_WEBHOOK,
                        "exhausted",
                    );
                    tracing::info!(log_id = id, reason = %reason, "exhausted without sending");
                    done.push(job.into_unit());
                }
                Verdict::Leased(left) => {
                    // Another attempt holds the row (its worker may have died
                    // and this job been recovered from it): claim it when the
                    // lease ends, keeping the job (not the webhook's slot)
                    // until then.
                    self.claim_after_lease(job.into_unit(), left);
                }
                Verdict::Paused => of_paused.push(job.into_unit()),
                Verdict::Missing => {
                    let reason = format!("job names log id {id}, which does not exist");
                    self.dead_letter(job.into_unit().into(), &reason).await;
                }
                Verdict::Refused(reason) => {
                    // The row stays in Postgres; the sweeper enqueues it again
                    // once it is due, and the dead letter says why this job
                    // could not claim it.
                    let reason = format!("the database refused to claim row {id}: {reason}");
                    self.dead_letter(job.into_unit().into(), &reason).await;
                }
                Verdict::Withheld(reason) => {
                    // Nothing sent and no attempt counted: the row is due
                    // again in a minute, for a worker that has the key.
                    Counters::add(&self.counters.withheld, 1);
                    hookfleet_core::runtime::observe::metrics().withheld.inc();
                    withheld.get_or_insert(reason);
                    done.push(job.into_unit());
                }
                Verdict::Stale => {
                    // Terminal, not due, or a second job for a row this batch
                    // already claimed. Its in-flight key is released if it
                    // still holds this job's token: a row whose worker died is
                    // leased (and waited for above), so this is never a live
                    // attempt's key.
                    Counters::add(&self.counters.stale, 1);
                    tracing::debug!(log_id = id, "stale job dropped without a request");
                    done.push(job.into_unit());
                }
            }
        }
        if let Some(reason) = withheld {
            tracing::warn!(reason = %reason,
                "rows withheld, unsent and no attempt counted: this worker cannot open their webhooks' credentials");
        }
        if !of_paused.is_empty() {
            done.extend(self.hold(of_paused).await);
        }
        UnitOfWork::acknowledge_all(done, &self.queue, &self.config.shutdown).await;
    }

    /// Jobs whose webhook is paused, unclaimed: their rows are held (no
    /// attempt counted, nothing Exhausted; `webhook resume` releases and
    /// enqueues them) and the jobs returned to be acked. A job whose row
    /// could not be held (its webhook resumed meanwhile, or the database did
    /// not answer) goes back to its queue instead, to be claimed again.
    async fn hold(&self, units: Vec<UnitOfWork>) -> Vec<UnitOfWork> {
        let ids: Vec<i64> = units.iter().map(UnitOfWork::log_id).collect();
        let held: HashSet<i64> = match self.store.run(move |c| deliveries::hold(c, &ids)).await {
            Ok(held) => held.into_iter().collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot hold the rows of a paused webhook; their jobs go back to the queue");
                HashSet::new()
            }
        };
        let mut done = Vec::new();
        for unit in units {
            let id = unit.log_id();
            if held.contains(&id) {
                Counters::add(&self.counters.paused, 1);
                tracing::debug!(log_id = id, "webhook paused; row held until resume");
                done.push(unit);
            } else if let Err(e) = unit.bounce(&self.queue).await {
                // Whether it moved is unknown: the orphan check settles it
                // once Redis answers.
                tracing::warn!(log_id = id, error = %e, "cannot put a job back on its queue");
            }
        }
        done
    }

    /// Each job's webhook: the one it names, or for a job that names none,
    /// its row's (looked up in one statement, retried while the database
    /// does not answer; a webhook found so counts as seen). None: told to
    /// stop meanwhile.
    async fn webhooks(&self, units: Vec<UnitOfWork>) -> Option<Vec<(UnitOfWork, Option<i64>)>> {
        let unnamed: Vec<i64> = units
            .iter()
            .filter(|u| u.job().webhook_id.is_none())
            .map(UnitOfWork::log_id)
            .collect();
        let looked_up: HashMap<i64, Option<i64>> = if unnamed.is_empty() {
            HashMap::new()
        } else {
            let unnamed = Arc::new(unnamed);
            retry_until_stopped(
                self.config.shutdown.requested(1),
                |e, wait| {
                    tracing::warn!(jobs = unnamed.len(), error = %e, retry_in = ?wait,
                    "cannot look up the webhooks of jobs that do not name theirs; holding them")
                },
                || {
                    let ids = unnamed.clone();
                    self.store.run(move |c| deliveries::webhooks_of(c, &ids))
                },
            )
            .await
            .ok()?
            .into_iter()
            .collect()
        };
        let found = units
            .into_iter()
            .map(|unit| {
                let job = unit.job();
                let webhook = job
                    .webhook_id
                    .or_else(|| looked_up.get(&job.log_id).copied().flatten());
                if let (Some(w), None) = (webhook, job.webhook_id) {
                    self.limits.seen(w);
                }
                (unit, webhook)
            })
            .collect();
        Some(found)
    }

    /// Waits until `webhook` has room, then takes the job's slot there and
    /// claims its row (if another job took the room first, it waits again).
    fn claim_when_slot_frees(self: &Arc<Self>, unit: UnitOfWork, webhook: i64) {
        let this = self.clone();
        tokio::spawn(async move {
            let mut unit = unit;
            let job = loop {
                tokio::select! {
                    _ = this.limits.room(webhook) => {}
                    // A draining worker puts the job back instead of waiting.
                    _ = this.config.shutdown.requested(1) => return,
                }
                match this.reserve(unit, Some(webhook)) {
                    Reservation::Ready(job) => break job,
                    Reservation::Full { unit: again, .. } => unit = again,
                }
            };
            Box::pin(this.claim_and_start(vec![job], Vec::new())).await;
        });
    }

    /// Claims the job's row once the lease that holds it (`left` to run, by
    /// the database's clock) has ended, taking its webhook's slot again
    /// first.
    fn claim_after_lease(self: &Arc<Self>, unit: UnitOfWork, left: std::time::Duration) {
        let this = self.clone();
        let wait = left.min(MAX_LEASE_WAIT) + LEASE_SLACK;
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                // A draining worker puts the job back instead of waiting.
                _ = this.config.shutdown.requested(1) => return,
            }
            Box::pin(this.claim_and_start(Vec::new(), vec![unit])).await;
        });
    }

    /// Claims rows, at most [`CLAIMS_IN_FLIGHT`] statements at once (the
    /// first with `permit` when the caller holds one), retrying while the
    /// database does not answer (the jobs and their slots stay held, so
    /// nothing new is taken meanwhile): one verdict per id, in order. A claim
    /// the database keeps refusing is split row by row; a row it refuses
    /// alone is [`Verdict::Refused`]. None: told to stop (the jobs stay in
    /// the processing list, and the drain puts them back).
    async fn claim(
        &self,
        ids: Vec<i64>,
        permit: Option<SemaphorePermit<'_>>,
    ) -> Option<Vec<Verdict>> {
        let ids = Arc::new(ids);
        let lease_margin = self.config.lease_margin;
        let refusals = AtomicU32::new(0);
        let first = std::sync::Mutex::new(permit);
        let claimed = retry_until_stopped(
            self.config.shutdown.requested(1),
            |e, wait| {
                tracing::warn!(jobs = ids.len(), error = %e, retry_in = ?wait,
                "cannot claim rows; holding the jobs and retrying")
            },
            || async {
                let batch_ids = ids.clone();
                let result = {
                    // Held for the statement only, never across a wait.
                    let given = first.lock().expect("permit lock").take();
                    let _permit = match given {
                        Some(permit) => permit,
                        None => match self.claims.permits.acquire().await {
                            Ok(permit) => permit,
                            Err(_) => return Ok(Claimed::Closed),
                        },
                    };
                    self.store
                        .run(move |c| deliveries::claim(c, &batch_ids, lease_margin))
                        .await
                };
                match result {
                    Ok(verdicts) => Ok(Claimed::Verdicts(verdicts)),
                    Err(e @ StoreError::Rejected(_)) => {
                        if refusals.fetch_add(1, Ordering::Relaxed) + 1 >= CLAIM_REFUSALS {
                            Ok(Claimed::Refused(e))
                        } else {
                            Err(e)
                        }
                    }
                    Err(e) => Err(e),
                }
            },
        )
        .await;
        match claimed.ok()? {
            Claimed::Verdicts(verdicts) => Some(verdicts),
            Claimed::Refused(e) => self.claim_one_by_one(&ids, &e).await,
            Claimed::Closed => None,
        }
    }

    /// Claims a refused batch's rows one by one (each with its own retries).
    async fn claim_one_by_one(&self, ids: &[i64], error: &StoreError) -> Option<Vec<Verdict>> {
        if let [_] = ids {
            return Some(vec![Verdict::Refused(error.to_string())]);
        }
        let mut verdicts = Vec::with_capacity(ids.len());
        for id in ids {
            verdicts.extend(Box::pin(self.claim(vec![*id], None)).await?);
        }
        Some(verdicts)
    }

    /// Moves a job to the dead-letter list.
    pub async fn dead_letter(&self, job: TakenJob, reason: &str) {
        Counters::add(&self.counters.dead_lettered, 1);
        tracing::warn!(job = %job.raw.chars().take(200).collect::<String>(), reason, "job dead-lettered");
        job.dead_letter(
            &self.queue,
            reason,
            &self.config.worker_id,
            &self.config.shutdown,
        )
        .await;
    }

    /// Starts one delivery; its outcome goes to the recorder with the job.
    fn start(&self, job: Claimable, claim: Claim) {
        let http = self.http.clone();
        let config = self.config.clone();
        let recorder = self.recorder.clone();
        let waiting = self.waiting.clone();
        // Every line logged while this attempt is sent carries its log id,
        // attempt and webhook. A debug span: at the default level it costs
        // nothing per delivery (the lines of interest at info, the failed
        // attempts, name their log id and webhook themselves).
        let span = tracing::debug_span!("delivery", log_id = claim.log_id,
            attempt = claim.attempt, webhook = %claim.webhook_name);
        let delivery = async move {
            let (mut unit, slot) = job.send();
            let metrics = hookfleet_core::runtime::observe::metrics();
            let sent = std::time::Instant::now();
            let report = {
                // The webhook's slot (and its fleet-wide lease) bounds
                // requests at its receiver: it goes when the answer is in, at
                // the end of this block; the job then trades its delivery
                // slot for a place among the outcomes waiting to be recorded.
                let _slot = slot;
                let _in_flight = metrics.in_flight_guard();
                attempt::send(&http, &config.policy, &claim).await
            };
            metrics.request_took(&claim.webhook_name, sent.elapsed());
            let outcome = attempt::judge(&claim, &report, &config.schedule, true);
            tracing::debug!(log_id = claim.log_id, attempt = claim.attempt, webhook = %claim.webhook_name,
                code = ?report.response_code, "attempt finished");
            // The next request may start while this outcome is recorded.
            unit.answered(&waiting).await;
            // The recorder outlives every delivery.
            let webhook: Arc<str> = claim.webhook_name.as_str().into();
            let _ = recorder.send(Finished {
                outcome,
                unit,
                webhook,
                webhook_id: claim.webhook_id,
            });
        };
        tokio::spawn(tracing::Instrument::instrument(delivery, span));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookfleet_core::queue::Job;

    /// A job for row `id`, holding one of `slots`.
    fn claimable(id: i64, slots: &Arc<Semaphore>, held: &Arc<Held>) -> Claimable {
        let permit = slots.clone().try_acquire_owned().expect("a free slot");
        let unit = TakenJob::new("q", "q:processing", Job::new(id).encode(), permit, held)
            .parse()
            .expect("a job that parses");
        Claimable::new(unit, None)
    }

    /// Callers that queued while both statements ran: each added its jobs,
    /// and every job comes out of exactly one batch, no batch over
    /// [`MAX_CLAIM_BATCH`], in far fewer batches than callers.
    async fn claimed_batches(callers: i64, each: i64) -> Vec<Vec<i64>> {
        let queue = Arc::new(ClaimQueue::default());
        let slots = Arc::new(Semaphore::new((callers * each) as usize));
        let held = Arc::new(Held::default());
        let busy: Vec<_> = (0..CLAIMS_IN_FLIGHT)
            .map(|_| queue.permits.try_acquire().expect("a free permit"))
            .collect();
        let tasks: Vec<_> = (0..callers)
            .map(|caller| {
                let jobs: Vec<Claimable> = (0..each)
                    .map(|k| claimable(1 + caller * each + k, &slots, &held))
                    .collect();
                let queue = queue.clone();
                tokio::spawn(async move {
                    let joined = queue.join(jobs).await;
                    joined.map(|(_permit, batch)| {
                        batch.iter().map(Claimable::log_id).collect::<Vec<i64>>()
                    })
                })
            })
            .collect();
        let everyone_waits = async {
            while queue.waiting().len() < (callers * each) as usize {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(30), everyone_waits)
            .await
            .expect("every caller adds its jobs");
        drop(busy);
        let mut batches = Vec::new();
        for task in tasks {
            if let Some(batch) = task.await.expect("the caller ends") {
                batches.push(batch);
            }
        }
        batches
    }

    #[tokio::test]
    async fn jobs_waiting_for_a_claim_go_together_and_each_once() {
        let batches = claimed_batches(20, 5).await;
        assert_eq!(
            batches.len(),
            1,
            "one statement for the 20 callers: {batches:?}"
        );
        let mut ids: Vec<i64> = batches.concat();
        ids.sort_unstable();
        assert_eq!(ids, (1..=100).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_caller_that_adds_more_than_a_batch_takes_all_it_added() {
        let batches = claimed_batches(1, MAX_CLAIM_BATCH as i64 + 88).await;
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![MAX_CLAIM_BATCH + 88]);
    }

    #[tokio::test]
    async fn a_claim_takes_at_most_its_batch_and_the_rest_is_claimed_by_the_next() {
        let batches = claimed_batches(3, 300).await;
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert!(sizes.iter().all(|&n| n <= MAX_CLAIM_BATCH), "{sizes:?}");
        assert_eq!(sizes.len(), 2, "{sizes:?}");
        let mut ids: Vec<i64> = batches.concat();
        ids.sort_unstable();
        assert_eq!(ids, (1..=900).collect::<Vec<_>>(), "every job once");
    }
}
