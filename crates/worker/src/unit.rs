//! A job a worker has taken: it sits in the worker's processing list until it
//! is acknowledged (done: removed), dead-lettered (unusable: moved to the
//! dead-letter list with the reason) or requeued (not started: put back at
//! the head of its queue). Nothing else removes it, so a worker that dies
//! holding it leaves it where the reaper finds it.

use hookfleet_core::dead::DeadLetter;
use hookfleet_core::error::QueueError;
use hookfleet_core::queue::RedisQueue;

/// One taken job.
#[derive(Debug, Clone)]
pub struct UnitOfWork {
    /// The queue it came from.
    pub queue: String,
    /// The processing list holding it.
    pub processing: String,
    /// The job exactly as popped (LREM needs the same bytes).
    pub raw: String,
    /// The row it names, once parsed.
    pub log_id: Option<i64>,
}

impl UnitOfWork {
    /// Acknowledges many units in one round trip. `release` says, per unit,
    /// whether its row's in-flight key is released too (only once the
    /// attempt's outcome is written).
    pub async fn acknowledge_all(
        queue: &RedisQueue,
        units: &[(UnitOfWork, bool)],
    ) -> Result<(), QueueError> {
        let items: Vec<(String, String, Option<i64>)> = units
            .iter()
            .map(|(u, release)| {
                (
                    u.processing.clone(),
                    u.raw.clone(),
                    if *release { u.log_id } else { None },
                )
            })
            .collect();
        queue.ack(&items).await
    }

    /// [`UnitOfWork::acknowledge_all`], retrying with backoff while Redis is
    /// away, then forgets the jobs in `held`. Gives up only when told to stop
    /// at once: a job left in the processing list is harmless, since its row
    /// is terminal or not due by then and the job is dropped when recovered.
    pub async fn acknowledge_until_done(
        queue: &RedisQueue,
        units: &[(UnitOfWork, bool)],
        held: &Held,
        shutdown: &hookfleet_core::shutdown::Shutdown,
    ) {
        if units.is_empty() {
            return;
        }
        let mut backoff = hookfleet_core::backoff::Backoff::new();
        loop {
            match Self::acknowledge_all(queue, units).await {
                Ok(()) => {
                    for (u, _) in units {
                        held.release(u);
                    }
                    return;
                }
                Err(e) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(jobs = units.len(), error = %e, retry_in = ?wait, "cannot ack jobs; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = shutdown.requested(2) => return,
                    }
                }
            }
        }
    }

    /// Moves the job to the dead-letter list with `reason`.
    pub async fn dead_letter(
        &self,
        queue: &RedisQueue,
        reason: &str,
        worker: &str,
    ) -> Result<(), QueueError> {
        let letter = DeadLetter::new(&self.raw, &self.queue, reason, worker);
        queue.dead_letter(&self.processing, &letter).await
    }

    /// Puts a job that was not started back where the next pop finds it first.
    pub async fn requeue(&self, queue: &RedisQueue) -> Result<(), QueueError> {
        queue
            .requeue(&self.processing, &self.queue, &self.raw)
            .await
    }
}

/// The jobs this worker holds, by processing list: what it took and has not
/// yet acked, dead-lettered or requeued. Anything else in its processing
/// lists is an orphan (a pop whose answer was lost, PITFALLS 2).
#[derive(Debug, Default)]
pub struct Held {
    jobs: std::sync::Mutex<std::collections::HashMap<(String, String), usize>>,
}

impl Held {
    pub fn take(&self, unit: &UnitOfWork) {
        let mut jobs = self.jobs.lock().expect("held lock");
        *jobs
            .entry((unit.processing.clone(), unit.raw.clone()))
            .or_default() += 1;
    }

    pub fn release(&self, unit: &UnitOfWork) {
        let mut jobs = self.jobs.lock().expect("held lock");
        let key = (unit.processing.clone(), unit.raw.clone());
        if let Some(n) = jobs.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                jobs.remove(&key);
            }
        }
    }

    /// How many copies of `raw` this worker holds in `processing`.
    pub fn count(&self, processing: &str, raw: &str) -> usize {
        let jobs = self.jobs.lock().expect("held lock");
        jobs.get(&(processing.to_string(), raw.to_string()))
            .copied()
            .unwrap_or(0)
    }
}
