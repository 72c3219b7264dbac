//! The recorder: writes attempt outcomes to Postgres in batches, then acks
//! their jobs and releases their in-flight keys, and only then frees the
//! delivery slots. **No job is acked before its outcome is written.**
//!
//! Under load, outcomes pile up while batches are being written, so the next
//! write carries them all: the batch size follows the load with no timer, and
//! a few writes overlap so a commit's wait is not added to every outcome.
//!
//! When a write fails:
//! - the database did not answer: the jobs stay held (no ack) and the write is
//!   retried with backoff; since the slots stay taken, the worker pops
//!   nothing new until the database answers;
//! - the database refused the statement: it is tried again a few times (a
//!   deadlock or a statement timeout passes), then the outcomes are written
//!   one by one, so one unwritable outcome cannot hold back the others; one
//!   refused on its own is written plainly (status, schedule and fence,
//!   without the receiver's bytes);
//! - anything else: held and retried, never dropped.
//!
//! A write's slot is freed as soon as its outcomes are in: acking (Redis)
//! never holds back the next writes (Postgres).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, Semaphore};

use hookfleet_core::attempt::{Outcome, OutcomeStatus};
use hookfleet_core::error::StoreError;
use hookfleet_core::queue::RedisQueue;
use hookfleet_core::runtime::retry_until_stopped;
use hookfleet_core::runtime::Shutdown;
use hookfleet_core::store::deliveries::{self, OutcomeWrite};
use hookfleet_core::store::{health, Store};

use crate::stats::Counters;
use crate::unit::UnitOfWork;

/// Most outcomes per write: one statement of a few hundred rows commits in a
/// few milliseconds, and bounds the work redone if it fails.
pub const RECORD_BATCH: usize = 256;

/// Outcome batches written at once: while one commits, the next fills, so a
/// delivery's outcome waits for at most a commit, not a queue of them.
pub const WRITES_IN_FLIGHT: usize = 2;

/// How many times a write the database refuses is tried again before its
/// outcomes are split (or, for one, written plainly): a deadlock or a
/// statement timeout passes; an unwritable value does not.
pub const WRITE_REFUSALS: u32 = 3;

/// A finished attempt waiting to be recorded, with the job it came from.
pub struct Finished {
    pub outcome: Outcome,
    pub unit: UnitOfWork,
    /// Its webhook's name (the metrics' label).
    pub webhook: Arc<str>,
    /// Its webhook (None: deleted since the claim), whose health it counts
    /// in.
    pub webhook_id: Option<i64>,
}

/// Failed-attempt lines logged per second, after a burst of
/// [`FAILURE_LOG_BURST`]: enough to see which receivers fail and why; a
/// receiver that is down fails thousands of attempts a minute, which would
/// bury everything else.
const FAILURE_LOG_PER_SECOND: u32 = 5;
const FAILURE_LOG_BURST: u32 = 20;

/// Logs failed and exhausted attempts at info (warn when exhausted), at
/// most at the rate above; what it held back is counted and said with the
/// next line it logs.
struct FailureLog {
    limiter: governor::DefaultDirectRateLimiter,
    held_back: std::sync::atomic::AtomicU64,
}

impl FailureLog {
    fn get() -> &'static FailureLog {
        static LOG: std::sync::OnceLock<FailureLog> = std::sync::OnceLock::new();
        LOG.get_or_init(|| {
            let per_second = std::num::NonZeroU32::new(FAILURE_LOG_PER_SECOND)
                .unwrap_or(std::num::NonZeroU32::MIN);
            let burst =
                std::num::NonZeroU32::new(FAILURE_LOG_BURST).unwrap_or(std::num::NonZeroU32::MIN);
            FailureLog {
                limiter: governor::RateLimiter::direct(
                    governor::Quota::per_second(per_second).allow_burst(burst),
                ),
                held_back: std::sync::atomic::AtomicU64::new(0),
            }
        })
    }

    fn log(&self, o: &Outcome, webhook: &str) {
        use std::sync::atomic::Ordering;
        if self.limiter.check().is_err() {
            self.held_back.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let not_logged = self.held_back.swap(0, Ordering::Relaxed);
        let reason = o.reason();
        if o.status == OutcomeStatus::Exhausted {
            tracing::warn!(webhook, log_id = o.log_id, attempt = o.attempt, reason = %reason,
                not_logged, "attempt failed; no retries left (Exhausted)");
        } else {
            tracing::info!(webhook, log_id = o.log_id, attempt = o.attempt, reason = %reason,
                retry_in = ?o.retry_in, not_logged, "attempt failed; retry scheduled");
        }
    }
}

/// The webhook of each outcome in a batch, by log id.
type Webhooks = std::collections::HashMap<i64, Arc<str>>;

pub struct Recorder {
    pub store: Store,
    pub queue: RedisQueue,
    pub worker_id: String,
    pub counters: Arc<Counters>,
    pub shutdown: Shutdown,
    /// Where recorded attempts wait to be counted in their webhooks'
    /// health (see [`crate::health`]).
    pub health: Arc<crate::health::HealthBuffer>,
}

/// How one write ended.
enum Written {
    /// The outcomes are in the database (or fenced off by a later claim):
    /// their jobs may be acked.
    Done,
    /// Told to stop at once before they could be written: the jobs stay in
    /// the processing list for the reaper.
    Stopped,
}

impl Recorder {
    /// Runs until every sender is gone, writing up to [`WRITES_IN_FLIGHT`]
    /// batches at once.
    pub async fn run(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<Finished>) {
        let writers = Arc::new(Semaphore::new(WRITES_IN_FLIGHT));
        while let Some(first) = rx.recv().await {
            let Ok(writer) = writers.clone().acquire_owned().await else {
                return;
            };
            // Whatever arrived while waiting for a writer goes in this batch.
            let mut batch = vec![first];
            while batch.len() < RECORD_BATCH {
                match rx.try_recv() {
                    Ok(f) => batch.push(f),
                    Err(_) => break,
                }
            }
            // Counted in the health here, in the order the attempts
            // finished (batches are written concurrently, and a run of
            // failures is counted in the order health hears of them).
            self.health.add(
                batch
                    .iter()
                    .filter_map(|f| Some(health::Sample::of(f.webhook_id?, &f.outcome))),
            );
            let this = self.clone();
            tokio::spawn(async move {
                let webhooks: Webhooks = batch
                    .iter()
                    .map(|f| (f.outcome.log_id, f.webhook.clone()))
                    .collect();
                let (outcomes, units): (Vec<Outcome>, Vec<UnitOfWork>) =
                    batch.into_iter().map(|f| (f.outcome, f.unit)).unzip();
                let written = this.write(outcomes, &webhooks).await;
                // The next batch may be written while these are acked.
                drop(writer);
                if let Written::Done = written {
                    // Only after the ack are the delivery slots freed (when
                    // the units drop).
                    UnitOfWork::acknowledge_all(units, &this.queue, &this.shutdown).await;
                }
            });
        }
    }

    /// Writes the outcomes in one statement; if the database refuses it,
    /// one by one.
    async fn write(&self, outcomes: Vec<Outcome>, webhooks: &Webhooks) -> Written {
        let outcomes = Arc::new(outcomes);
        let refusals = AtomicU32::new(0);
        let written = retry_until_stopped(
            self.shutdown.requested(2),
            |e, wait| {
                tracing::warn!(outcomes = outcomes.len(), error = %e, retry_in = ?wait,
                "cannot record outcomes; holding their jobs and retrying")
            },
            || async {
                let (batch, worker) = (outcomes.clone(), self.worker_id.clone());
                match self
                    .store
                    .run(move |c| deliveries::record(c, &batch, &worker))
                    .await
                {
                    Ok(updated) => Ok(Ok(updated)),
                    Err(StoreError::Rejected(e)) => {
                        if refusals.fetch_add(1, Ordering::Relaxed) + 1 >= WRITE_REFUSALS {
                            Ok(Err(e))
                        } else {
                            Err(StoreError::Rejected(e))
                        }
                    }
                    Err(e) => Err(e),
                }
            },
        )
        .await;
        match written {
            Ok(Ok(updated)) => {
                self.count(&outcomes, &updated, webhooks);
                Written::Done
            }
            Ok(Err(e)) => {
                if outcomes.len() == 1 {
                    return self.write_one(&outcomes[0], webhooks).await;
                }
                tracing::warn!(outcomes = outcomes.len(), error = %e,
                    "the database refuses a batch of outcomes; writing them one by one");
                for outcome in outcomes.iter() {
                    if let Written::Stopped = self.write_one(outcome, webhooks).await {
                        return Written::Stopped;
                    }
                }
                Written::Done
            }
            Err(_) => Written::Stopped,
        }
    }

    /// Writes one outcome; if the database keeps refusing it, writes it
    /// plainly (without the receiver's bytes). Never gives up short of a
    /// forced stop: the job stays held until its outcome is in.
    async fn write_one(&self, outcome: &Outcome, webhooks: &Webhooks) -> Written {
        let write = OutcomeWrite::new(outcome.clone(), &self.worker_id, WRITE_REFUSALS);
        let written = retry_until_stopped(
            self.shutdown.requested(2),
            |e, wait| {
                tracing::error!(log_id = outcome.log_id, attempt = outcome.attempt, error = %e,
                retry_in = ?wait, "cannot record an outcome; holding its job and retrying")
            },
            || write.try_write(&self.store),
        )
        .await;
        match written {
            Ok(updated) => {
                self.count(std::slice::from_ref(outcome), &updated, webhooks);
                Written::Done
            }
            Err(_) => Written::Stopped,
        }
    }

    fn count(&self, outcomes: &[Outcome], updated: &[i64], webhooks: &Webhooks) {
        let metrics = hookfleet_core::runtime::observe::metrics();
        let updated: std::collections::HashSet<i64> = updated.iter().copied().collect();
        for o in outcomes {
            if !updated.contains(&o.log_id) {
                Counters::add(&self.counters.fenced, 1);
                tracing::warn!(log_id = o.log_id, attempt = o.attempt,
                    "outcome not recorded: the row was claimed again or replayed after this attempt's lease ended");
                continue;
            }
            let (counter, outcome) = match o.status {
                OutcomeStatus::Delivered => (&self.counters.delivered, "delivered"),
                OutcomeStatus::Failed => (&self.counters.failed, "failed"),
                OutcomeStatus::Exhausted => (&self.counters.exhausted, "exhausted"),
            };
            Counters::add(counter, 1);
            let webhook = webhooks
                .get(&o.log_id)
                .map_or(hookfleet_core::runtime::observe::UNKNOWN_WEBHOOK, |w| &**w);
            metrics.delivery(webhook, outcome);
            if o.status != OutcomeStatus::Delivered {
                FailureLog::get().log(o, webhook);
            }
            tracing::debug!(log_id = o.log_id, attempt = o.attempt, status = %o.status,
                code = ?o.response_code, error = ?o.error, "attempt recorded");
        }
    }
}
