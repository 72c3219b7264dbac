//! The fleet-wide limits on the worker's side: before their rows are
//! claimed, jobs of a webhook with a `max_concurrency` or a `rate_limit`
//! take a lease and a rate token in Redis (one script call per webhook per
//! batch, `hookfleet_core::queue`). Jobs the fleet has no room for go back
//! to the consuming end of their queue, in order, and their webhook counts
//! as at its limit here until its next token is due or a lease comes back
//! (`limits`), so its jobs stay on the queue meanwhile without holding a
//! slot or blocking other webhooks. Webhooks without such limits cost no
//! Redis command here.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use hookfleet_core::queue::RedisQueue;

use crate::limits::{EndpointLimits, FleetLease, FleetLimit, GiveBack};
use crate::unit::Claimable;

/// How long a webhook whose fleet-wide concurrency is full counts as at its
/// limit before this worker asks again (sooner if one of its own leases
/// comes back): another worker's lease coming back is seen within this.
pub const FULL_RETRY: Duration = Duration::from_millis(20);

/// How long a webhook counts as at its limit after Redis did not answer a
/// lease or token request: the jobs go back to the queue meanwhile.
pub const UNANSWERED_RETRY: Duration = Duration::from_secs(1);

/// Leases given back in one round: what piled up while the last went out.
pub const GIVE_BACK_BATCH: usize = 1_000;

/// Admits jobs under the fleet-wide limits.
pub struct FleetGate {
    queue: RedisQueue,
    stem: String,
    calls: AtomicU64,
    back: mpsc::UnboundedSender<GiveBack>,
}

impl FleetGate {
    /// A gate for the worker `worker_id`, and the loop that gives leases back.
    pub fn start(queue: RedisQueue, worker_id: &str) -> Arc<FleetGate> {
        let (back, rx) = mpsc::unbounded_channel();
        tokio::spawn(give_back(queue.clone(), rx));
        Arc::new(FleetGate {
            queue,
            stem: worker_id.to_string(),
            calls: AtomicU64::new(0),
            back,
        })
    }

    /// Waits (at most `within`) until every lease dropped so far is given
    /// back: a worker that drained gives its last leases back before it
    /// exits, instead of leaving them to expire (the webhook's timeout plus
    /// [`hookfleet_core::queue::LEASE_MARGIN`], a long pause for a small
    /// limit during a deploy).
    pub async fn flush(&self, within: Duration) {
        let (done, wait) = tokio::sync::oneshot::channel();
        if self.back.send(GiveBack::Flush(done)).is_ok() {
            let _ = tokio::time::timeout(within, wait).await;
        }
    }

    /// Jobs holding a webhook slot not yet admitted, of webhooks with fleet
    /// limits, take a token and a lease each; returns the jobs that may be
    /// claimed (the others give up their slot and are back on their queue).
    pub async fn admit(&self, limits: &EndpointLimits, jobs: Vec<Claimable>) -> Vec<Claimable> {
        let limited = limits.fleet_limits_of(
            jobs.iter()
                .filter(|j| !j.is_admitted())
                .filter_map(Claimable::webhook),
        );
        if limited.is_empty() {
            return jobs;
        }
        let mut ready = Vec::with_capacity(jobs.len());
        let mut asking: BTreeMap<i64, Vec<Claimable>> = BTreeMap::new();
        for job in jobs {
            match job.webhook() {
                Some(w) if !job.is_admitted() && limited.contains_key(&w) => {
                    asking.entry(w).or_default().push(job)
                }
                _ => ready.push(job),
            }
        }
        for (webhook, mut jobs) in asking {
            let limit = limited[&webhook];
            let want = jobs.len() as u32;
            let (granted, leases) = match self.ask(webhook, limit, want).await {
                Ok((granted, leases, refusal)) => {
                    if let Some((wait, by_rate)) = refusal {
                        limits.refused(webhook, wait, by_rate);
                    }
                    (granted, leases)
                }
                Err(e) => {
                    tracing::warn!(webhook, error = %e,
                        "cannot reach Redis for the fleet-wide limits; the jobs go back to their queue");
                    limits.refused(webhook, UNANSWERED_RETRY, true);
                    (0, Vec::new())
                }
            };
            let refused = jobs.split_off((granted as usize).min(jobs.len()));
            let mut leases = leases.into_iter();
            for mut job in jobs {
                let lease = leases
                    .next()
                    .map(|lease| FleetLease::new(webhook, lease, self.back.clone()));
                job.admit(lease);
                ready.push(job);
            }
            // Oldest last on a queue's consuming end: put back newest first.
            for job in refused.into_iter().rev() {
                if let Err(e) = job.into_unit().requeue(&self.queue).await {
                    tracing::warn!(webhook, error = %e, "cannot put a job back on its queue");
                }
            }
        }
        ready
    }

    /// One script call: how many may go, their leases, and why fewer did
    /// (how long to wait, whether for the rate).
    async fn ask(
        &self,
        webhook: i64,
        limit: FleetLimit,
        want: u32,
    ) -> Result<(u32, Vec<String>, Option<(Duration, bool)>), hookfleet_core::error::QueueError>
    {
        let call = self.calls.fetch_add(1, Ordering::Relaxed);
        let stem = format!("{}:{call}", self.stem);
        let got = self
            .queue
            .fleet()
            .admit(
                webhook,
                limit.max_concurrency,
                limit.rate,
                want,
                &stem,
                limit.lease_life,
            )
            .await?;
        let refusal = match (got.next_token_in, got.full) {
            (Some(wait), _) => Some((wait, true)),
            (None, true) => Some((FULL_RETRY, false)),
            (None, false) => None,
        };
        Ok((got.granted, got.leases, refusal))
    }
}

/// Gives leases back as they come, in batches per webhook.
async fn give_back(queue: RedisQueue, mut rx: mpsc::UnboundedReceiver<GiveBack>) {
    let mut batch = Vec::with_capacity(GIVE_BACK_BATCH);
    while rx.recv_many(&mut batch, GIVE_BACK_BATCH).await > 0 {
        let mut by_webhook: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        let mut flushes = Vec::new();
        for item in batch.drain(..) {
            match item {
                GiveBack::Lease(webhook, lease) => {
                    by_webhook.entry(webhook).or_default().push(lease)
                }
                GiveBack::Flush(done) => flushes.push(done),
            }
        }
        for (webhook, leases) in by_webhook {
            if let Err(e) = queue.fleet().give_back_leases(webhook, &leases).await {
                tracing::debug!(webhook, leases = leases.len(), error = %e,
                    "cannot give leases back; they expire by themselves");
            }
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
}
