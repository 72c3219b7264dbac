//! The recorder: writes attempt outcomes to Postgres in batches, then acks
//! their jobs and releases their in-flight keys in one Redis round trip, and
//! only then frees the delivery slots.
//!
//! Under load, outcomes pile up while batches are being written, so the next
//! write carries them all: the batch size follows the load with no timer, and
//! a few writes overlap so a commit's wait is not added to every outcome.
//! When Postgres does not answer, the recorder keeps the jobs (no ack) and
//! retries with backoff; since the slots stay taken, the worker pops nothing
//! new until the database answers.

use std::sync::Arc;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use hookfleet_core::deliver::Outcome;
use hookfleet_core::model::DeliveryStatus;
use hookfleet_core::queue::RedisQueue;
use hookfleet_core::shutdown::Shutdown;
use hookfleet_core::store::{deliveries, Store};

use crate::stats::Counters;
use crate::unit::{Held, UnitOfWork};
use hookfleet_core::backoff::Backoff;

/// Most outcomes per write: one statement of a few hundred rows commits in a
/// few milliseconds, and bounds the work redone if it fails.
pub const RECORD_BATCH: usize = 256;

/// Outcome batches written at once: while one commits, the next fills, so a
/// delivery's outcome waits for at most a commit, not a queue of them.
pub const WRITES_IN_FLIGHT: usize = 2;

/// A finished attempt waiting to be recorded; the permit is its delivery slot.
pub struct Finished {
    pub outcome: Outcome,
    pub unit: UnitOfWork,
    pub permit: OwnedSemaphorePermit,
}

pub struct Recorder {
    pub store: Store,
    pub queue: RedisQueue,
    pub worker_id: String,
    pub counters: Arc<Counters>,
    pub shutdown: Shutdown,
    pub held: Arc<Held>,
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
            let this = self.clone();
            tokio::spawn(async move {
                if this.write(&batch).await {
                    this.acknowledge(batch).await;
                }
                drop(writer);
            });
        }
    }

    /// Writes the outcomes; false when told to stop before it could.
    async fn write(&self, batch: &[Finished]) -> bool {
        let outcomes: Arc<Vec<Outcome>> =
            Arc::new(batch.iter().map(|f| f.outcome.clone()).collect());
        let mut backoff = Backoff::new();
        loop {
            let (batch_outcomes, worker) = (outcomes.clone(), self.worker_id.clone());
            match self
                .store
                .run(move |c| deliveries::record(c, &batch_outcomes, &worker))
                .await
            {
                Ok(updated) => {
                    self.count(&outcomes, &updated);
                    return true;
                }
                Err(e) if e.is_transient() => {
                    let wait = backoff.next_wait();
                    tracing::warn!(outcomes = outcomes.len(), error = %e, retry_in = ?wait,
                        "cannot record outcomes; holding their jobs and retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = self.shutdown.requested(2) => return false,
                    }
                }
                Err(e) => {
                    // Not the database's availability: retrying the same write
                    // would fail the same way. The rows keep their lease and
                    // come due again when it ends, so nothing is lost.
                    tracing::error!(outcomes = outcomes.len(), error = %e,
                        "outcomes could not be recorded; their rows come due again when their lease ends");
                    return true;
                }
            }
        }
    }

    fn count(&self, outcomes: &[Outcome], updated: &[i64]) {
        let updated: std::collections::HashSet<i64> = updated.iter().copied().collect();
        for o in outcomes {
            if !updated.contains(&o.log_id) {
                Counters::add(&self.counters.fenced, 1);
                tracing::warn!(log_id = o.log_id, attempt = o.attempt,
                    "outcome not recorded: the row was claimed again after this attempt's lease ended");
                continue;
            }
            let counter = match o.status {
                DeliveryStatus::Delivered => &self.counters.delivered,
                DeliveryStatus::Failed => &self.counters.failed,
                _ => &self.counters.exhausted,
            };
            Counters::add(counter, 1);
            tracing::debug!(log_id = o.log_id, attempt = o.attempt, status = %o.status,
                code = ?o.response_code, error = ?o.error, "attempt recorded");
        }
    }

    async fn acknowledge(&self, batch: Vec<Finished>) {
        let units: Vec<(UnitOfWork, bool)> = batch.iter().map(|f| (f.unit.clone(), true)).collect();
        UnitOfWork::acknowledge_until_done(&self.queue, &units, &self.held, &self.shutdown).await;
        // Only now are the delivery slots (the permits in `batch`) freed.
        drop(batch);
    }
}
