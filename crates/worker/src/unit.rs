//! A job a worker has taken (Sidekiq's `UnitOfWork`). It sits in the
//! worker's processing list until it is acknowledged (done: removed, its
//! row's in-flight key released), dead-lettered (unusable: moved to the
//! dead-letter list with the reason) or put back on its queue (not started).
//! Nothing else removes it, so a worker that dies holding it leaves it where
//! the reaper finds it.
//!
//! A job is taken as bytes ([`TakenJob`]) and parsed once: one that does not
//! parse can only be dead-lettered; one that does becomes a [`UnitOfWork`],
//! which owns its [`Job`] from then on. Before its row is claimed it takes
//! its slot at its webhook and becomes [`Claimable`].
//!
//! Each owns everything the job holds in this process: its place (a
//! delivery slot, a permit of `--concurrency`, from the pop until the answer
//! is in; then a place among the outcomes waiting to be written, until the
//! ack) and its entry in [`Held`], from the pop to the ack; a [`Claimable`] its webhook slot too, which it gives to the
//! delivery (dropped when the answer is in) or frees as soon as the claim
//! says nothing is sent. The verbs (acknowledge, dead-letter, bounce)
//! consume the job, and dropping it frees what it holds, so no slot can be
//! freed twice or forgotten. A unit dropped without a verb leaves its job in
//! the processing list, no longer held: the worker's periodic orphan check
//! puts it back on its queue.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use hookfleet_core::error::QueueError;
use hookfleet_core::queue::DeadLetter;
use hookfleet_core::queue::{Ack, Job, JobError, RedisQueue, Release};
use hookfleet_core::runtime::retry_until_stopped;
use hookfleet_core::runtime::Shutdown;

use crate::limits::{EndpointSlot, FleetLease};

/// A job just moved into a processing list, as bytes, and what it holds.
#[must_use = "a taken job must be parsed and handled, or dead-lettered"]
pub struct TakenJob {
    /// The queue it came from.
    pub queue: String,
    /// The processing list holding it.
    pub processing: String,
    /// The job exactly as popped (LREM needs the same bytes).
    pub raw: String,
    /// Its place in the worker: a delivery slot (a permit of
    /// `--concurrency`) from before the pop until its answer is in, then a
    /// place among the outcomes waiting to be written, until it is acked.
    place: OwnedSemaphorePermit,
    /// Its entry among the jobs this worker holds.
    _held: HeldEntry,
}

impl std::fmt::Debug for TakenJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TakenJob")
            .field("processing", &self.processing)
            .field("raw", &self.raw)
            .finish_non_exhaustive()
    }
}

/// A taken job that does not parse, and why: it can only be dead-lettered.
#[derive(Debug)]
pub struct Unparsable {
    pub job: TakenJob,
    pub reason: JobError,
}

impl TakenJob {
    /// A job just moved into `processing`, with the delivery slot taken for
    /// it; it counts as held from this moment (before any orphan check).
    pub fn new(
        queue: &str,
        processing: &str,
        raw: String,
        permit: OwnedSemaphorePermit,
        held: &Arc<Held>,
    ) -> TakenJob {
        let entry = held.enter(processing, &raw);
        TakenJob {
            queue: queue.to_string(),
            processing: processing.to_string(),
            raw,
            place: permit,
            _held: entry,
        }
    }

    /// Parses the job: the unit of work that owns it from now on, or the
    /// job with the reason it cannot be one (boxed: it is rare, and the
    /// common answer stays small).
    pub fn parse(self) -> Result<UnitOfWork, Box<Unparsable>> {
        match Job::decode(&self.raw) {
            Ok(job) => Ok(UnitOfWork { taken: self, job }),
            Err(reason) => Err(Box::new(Unparsable { job: self, reason })),
        }
    }

    /// Moves the job to the dead-letter list with `reason`, retrying while
    /// Redis is away (until told to stop: the job then stays in the
    /// processing list, and the drain or the reaper puts it back).
    pub async fn dead_letter(
        self,
        queue: &RedisQueue,
        reason: &str,
        worker: &str,
        shutdown: &Shutdown,
    ) {
        let letter = DeadLetter::new(&self.raw, &self.queue, reason, worker);
        // Given up when told to stop (see above).
        let _ = retry_until_stopped(
            shutdown.requested(1),
            |e, wait| tracing::warn!(error = %e, retry_in = ?wait, "cannot dead-letter a job; retrying"),
            || queue.dead().file(&self.processing, &letter),
        )
        .await;
    }
}

/// A parsed job and the resources it holds.
#[must_use = "a taken job must be acknowledged, put back or dead-lettered"]
pub struct UnitOfWork {
    /// The job as taken, and what it holds.
    taken: TakenJob,
    /// The job, parsed.
    job: Job,
}

impl std::fmt::Debug for UnitOfWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnitOfWork")
            .field("processing", &self.taken.processing)
            .field("job", &self.job)
            .finish_non_exhaustive()
    }
}

impl From<UnitOfWork> for TakenJob {
    /// The job as taken, still holding its delivery slot and its entry in
    /// [`Held`]: for the verbs any taken job has, such as dead-lettering.
    fn from(unit: UnitOfWork) -> TakenJob {
        unit.taken
    }
}

impl UnitOfWork {
    /// The answer is in: the job gives its delivery slot back for a place
    /// among the outcomes waiting to be written (`waiting`, as many as
    /// `--concurrency`), so the next request starts while this outcome is
    /// written and acked. While every such place is taken it waits, keeping
    /// its slot: outcomes that cannot be written stop new requests.
    pub async fn answered(&mut self, waiting: &Arc<Semaphore>) {
        if let Ok(place) = waiting.clone().acquire_owned().await {
            // The delivery slot is freed here.
            self.taken.place = place;
        }
    }

    pub fn job(&self) -> &Job {
        &self.job
    }

    /// The row the job names.
    pub fn log_id(&self) -> i64 {
        self.job.log_id
    }

    fn ack_item(&self) -> Ack {
        Ack {
            queue: self.taken.queue.clone(),
            processing: self.taken.processing.clone(),
            raw: self.taken.raw.clone(),
            release: match &self.job {
                Job {
                    log_id,
                    token: Some(token),
                    ..
                } => Release::Token {
                    log_id: *log_id,
                    token: token.clone(),
                },
                Job { log_id, .. } => Release::Legacy { log_id: *log_id },
            },
        }
    }

    /// Acknowledges `units` in one round trip per processing list (removing
    /// each job and releasing its row's in-flight key if it still holds the
    /// job's token), retrying with backoff while Redis is away; then frees
    /// what they held. Gives up only when told to stop at once: a job left in
    /// the processing list is harmless, since its row is terminal or not due
    /// by then and the job is dropped when recovered.
    pub async fn acknowledge_all(units: Vec<UnitOfWork>, queue: &RedisQueue, shutdown: &Shutdown) {
        if units.is_empty() {
            return;
        }
        let items: Vec<Ack> = units.iter().map(UnitOfWork::ack_item).collect();
        // Given up only when told to stop at once (see above).
        let _ = retry_until_stopped(
            shutdown.requested(2),
            |e, wait| tracing::warn!(jobs = items.len(), error = %e, retry_in = ?wait, "cannot ack jobs; retrying"),
            || queue.jobs().ack(&items),
        )
        .await;
    }

    /// Puts the job back at the consuming end of its queue (the fleet had
    /// no room for its webhook): it keeps its place in line. On a Redis
    /// error, as for [`UnitOfWork::bounce`].
    pub async fn requeue(self, queue: &RedisQueue) -> Result<(), QueueError> {
        let t = &self.taken;
        queue
            .jobs()
            .requeue(&t.processing, &t.queue, &t.raw)
            .await
            .map(|_| ())
    }

    /// Sends the job to the back of its queue (its webhook is at its limit):
    /// it waits its turn again without holding a slot. On a Redis error
    /// nobody knows whether it moved: the caller drops the unit and has the
    /// orphan check settle it once Redis answers.
    pub async fn bounce(self, queue: &RedisQueue) -> Result<(), QueueError> {
        let t = &self.taken;
        queue
            .jobs()
            .bounce(&t.processing, &t.queue, &t.raw)
            .await
            .map(|_| ())
    }
}

/// A job ready to claim: its unit of work and its slot at its webhook,
/// taken before the claim so that no row's lease ticks while a job waits
/// for one (none when the job's webhook is not known: its row is missing or
/// its webhook deleted, and it is never sent). Made only by the starter's
/// `reserve`. It releases the slot itself: the slot moves into the delivery
/// when the row is claimed ([`Claimable::send`]) and is dropped when the
/// answer is in; for every other verdict the unit goes on alone
/// ([`Claimable::into_unit`]) and the slot is freed at once.
#[must_use = "a job ready to claim must be sent, or go on without its slot"]
pub struct Claimable {
    unit: UnitOfWork,
    slot: Option<EndpointSlot>,
}

impl std::fmt::Debug for Claimable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claimable")
            .field("unit", &self.unit)
            .field("webhook", &self.webhook())
            .finish_non_exhaustive()
    }
}

impl Claimable {
    pub(crate) fn new(unit: UnitOfWork, slot: Option<EndpointSlot>) -> Claimable {
        Claimable { unit, slot }
    }

    /// The row the job names.
    pub fn log_id(&self) -> i64 {
        self.unit.log_id()
    }

    /// The webhook whose slot the job holds.
    pub fn webhook(&self) -> Option<i64> {
        self.slot.as_ref().map(EndpointSlot::webhook)
    }

    /// Whether its slot passed the fleet-wide limits.
    pub fn is_admitted(&self) -> bool {
        self.slot.as_ref().is_some_and(EndpointSlot::is_admitted)
    }

    /// Its slot passed the fleet-wide limits, with `lease` if any.
    pub fn admit(&mut self, lease: Option<FleetLease>) {
        if let Some(slot) = &mut self.slot {
            slot.admit(lease);
        }
    }

    /// The request goes out: the unit, and the webhook's slot with its
    /// clock started, for the delivery to drop once the answer is in.
    pub fn send(self) -> (UnitOfWork, Option<EndpointSlot>) {
        if let Some(slot) = &self.slot {
            slot.sending();
        }
        (self.unit, self.slot)
    }

    /// No request for this job (the claim did not send it, or the fleet has
    /// no room for its webhook): the webhook's slot and any fleet-wide lease
    /// are freed here, and the unit goes on without them.
    pub fn into_unit(self) -> UnitOfWork {
        self.unit
    }
}

/// The jobs this worker holds, by processing list: what it took and has not
/// yet acked, dead-lettered or put back. Anything else in its processing
/// lists is an orphan (a pop whose answer was lost, PITFALLS 2).
#[derive(Debug, Default)]
pub struct Held {
    jobs: Mutex<HashMap<(String, String), usize>>,
}

/// One job's entry in [`Held`]; dropping it removes the entry.
struct HeldEntry {
    held: Arc<Held>,
    key: (String, String),
}

impl Drop for HeldEntry {
    fn drop(&mut self) {
        let mut jobs = self.held.jobs.lock().expect("held lock");
        if let Some(n) = jobs.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                jobs.remove(&self.key);
            }
        }
    }
}

impl Held {
    fn enter(self: &Arc<Self>, processing: &str, raw: &str) -> HeldEntry {
        let key = (processing.to_string(), raw.to_string());
        *self
            .jobs
            .lock()
            .expect("held lock")
            .entry(key.clone())
            .or_default() += 1;
        HeldEntry {
            held: self.clone(),
            key,
        }
    }

    /// How many copies of `raw` this worker holds in `processing`.
    pub fn count(&self, processing: &str, raw: &str) -> usize {
        let jobs = self.jobs.lock().expect("held lock");
        jobs.get(&(processing.to_string(), raw.to_string()))
            .copied()
            .unwrap_or(0)
    }

    /// Jobs held in all.
    pub fn total(&self) -> usize {
        self.jobs.lock().expect("held lock").values().sum()
    }
}
