//! Claiming and starting: the taken jobs' rows are claimed in one statement,
//! each claimed row's delivery starts at once, and the jobs that cannot be
//! sent are acked (Exhausted, or stale), or dead-lettered (naming no row).
//! Several claims run at once (the fetch loop does not wait for them).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::{mpsc, OwnedSemaphorePermit};

use hookfleet_core::backoff::Backoff;
use hookfleet_core::deliver::{self, Claim};
use hookfleet_core::queue::RedisQueue;
use hookfleet_core::store::deliveries::{self, ClaimBatch};
use hookfleet_core::store::Store;

use crate::limits::{EndpointLimits, EndpointSlot};
use crate::record::Finished;
use crate::stats::Counters;
use crate::unit::{Held, UnitOfWork};
use crate::WorkerConfig;

/// The longest a job waits for another attempt's lease: a lease is at most
/// the longest webhook timeout (60 s) plus the lease margin.
pub const MAX_LEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// Added to a lease's end before claiming again, so the claim does not race
/// the clock it is compared with.
pub const LEASE_SLACK: std::time::Duration = std::time::Duration::from_millis(200);

/// Jobs taken together, each with its webhook slot if it has one, and one
/// delivery slot per job.
#[derive(Default)]
pub struct Taken {
    pub units: Vec<(UnitOfWork, Option<EndpointSlot>)>,
    pub permits: Vec<OwnedSemaphorePermit>,
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
    pub recorder: mpsc::UnboundedSender<Finished>,
    pub http: reqwest::Client,
}

impl Starter {
    /// Claims the jobs' rows and starts a delivery for each claimed one.
    pub async fn claim_and_start(self: &Arc<Self>, taken: Taken) {
        let Taken { units, mut permits } = taken;
        let ids: Vec<i64> = units.iter().filter_map(|(u, _)| u.log_id).collect();
        let Some(batch) = self.claim(ids).await else {
            // Told to stop at once while the database was down: the jobs stay
            // in the processing list for the reaper.
            return;
        };
        let ClaimBatch {
            claimed,
            exhausted,
            missing,
            leased,
            ..
        } = batch;
        let leased: HashMap<i64, chrono::DateTime<chrono::Utc>> = leased.into_iter().collect();
        let mut claims: HashMap<i64, Claim> = claimed.into_iter().map(|c| (c.log_id, c)).collect();
        let exhausted: HashMap<i64, String> = exhausted.into_iter().collect();
        let missing: HashSet<i64> = missing.into_iter().collect();
        let mut done: Vec<(UnitOfWork, bool)> = Vec::new();
        for (unit, slot) in units {
            let id = unit.log_id.expect("parsed before the claim");
            if let Some(claim) = claims.remove(&id) {
                let permit = permits.pop().expect("one permit per job");
                let slot = match (slot, claim.webhook_id) {
                    (Some(s), _) => Some(s),
                    // A job that did not name its webhook waits for a slot now
                    // that the claim told us which webhook it is.
                    (None, Some(w)) => Some(self.limits.take(w).await),
                    (None, None) => None,
                };
                self.start(unit, claim, permit, slot);
            } else if let Some(reason) = exhausted.get(&id) {
                Counters::add(&self.counters.exhausted, 1);
                tracing::info!(log_id = id, reason = %reason, "exhausted without sending");
                done.push((unit, true));
            } else if let Some(until) = leased.get(&id) {
                // Another attempt holds the row (its worker may have died and
                // this job been recovered from it): claim it when the lease
                // ends, keeping the job and its slots until then.
                let permit = permits.pop().expect("one permit per job");
                self.claim_after_lease(unit, slot, permit, *until);
            } else if missing.contains(&id) {
                self.dead_letter(
                    &unit,
                    &format!("job names log id {id}, which does not exist"),
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
        UnitOfWork::acknowledge_until_done(&self.queue, &done, &self.held, &self.config.shutdown)
            .await;
        drop(permits);
    }

    fn claim_after_lease(
        self: &Arc<Self>,
        unit: UnitOfWork,
        slot: Option<EndpointSlot>,
        permit: OwnedSemaphorePermit,
        until: chrono::DateTime<chrono::Utc>,
    ) {
        let this = self.clone();
        let wait = (until - chrono::Utc::now())
            .to_std()
            .unwrap_or_default()
            .min(MAX_LEASE_WAIT)
            + LEASE_SLACK;
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                // A draining worker puts the job back instead of waiting.
                _ = this.config.shutdown.requested(1) => return,
            }
            Box::pin(this.claim_and_start(Taken {
                units: vec![(unit, slot)],
                permits: vec![permit],
            }))
            .await;
        });
    }

    /// Claims rows, retrying while the database is unavailable (the jobs and
    /// their slots stay held, so nothing new is taken meanwhile). None: told
    /// to stop at once.
    async fn claim(&self, ids: Vec<i64>) -> Option<ClaimBatch> {
        let ids = Arc::new(ids);
        let lease_margin = self.config.lease_margin;
        let mut backoff = Backoff::new();
        loop {
            let batch_ids = ids.clone();
            match self
                .store
                .run(move |c| deliveries::claim(c, &batch_ids, lease_margin))
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

    /// Moves a job to the dead-letter list, retrying while Redis is away.
    pub async fn dead_letter(&self, unit: &UnitOfWork, reason: &str) {
        Counters::add(&self.counters.dead_lettered, 1);
        tracing::warn!(job = %unit.raw.chars().take(200).collect::<String>(), reason, "job dead-lettered");
        let mut backoff = Backoff::new();
        while let Err(e) = unit
            .dead_letter(&self.queue, reason, &self.config.worker_id)
            .await
        {
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
        &self,
        unit: UnitOfWork,
        claim: Claim,
        permit: OwnedSemaphorePermit,
        endpoint: Option<EndpointSlot>,
    ) {
        let http = self.http.clone();
        let config = self.config.clone();
        let recorder = self.recorder.clone();
        tokio::spawn(async move {
            let report = deliver::send(&http, &config.policy, &claim).await;
            // The webhook's slot bounds requests at its receiver: it is free
            // as soon as the answer is in, while the job keeps its delivery
            // slot until the outcome is recorded.
            drop(endpoint);
            let outcome = deliver::judge(&claim, &report, &config.schedule, true);
            tracing::debug!(log_id = claim.log_id, attempt = claim.attempt, webhook = %claim.webhook_name,
                code = ?report.response_code, "attempt finished");
            // The recorder outlives every delivery.
            let _ = recorder.send(Finished {
                outcome,
                unit,
                permit,
            });
        });
    }
}
