//! # hookfleet-worker
//!
//! Takes delivery jobs from Redis, sends the signed requests, records the
//! outcomes in Postgres. Many deliveries run at once (tokio), at most
//! `--concurrency`; a slow or hanging receiver holds only its own slots.
//!
//! # Layout
//! - [`config`]: what a worker is told ([`WorkerConfig`]) and the defaults.
//! - [`fetch`]: take jobs into this worker's processing lists (no more of a
//!   webhook's than it has slots for).
//! - [`start`]: give each job its webhook's slot (the one place it is
//!   taken), claim the jobs' rows in one statement, one verdict per row, and
//!   start the deliveries, while the fetch loop takes the next jobs.
//! - [`record`]: write outcomes in batches, then ack and release keys.
//! - [`health`]: the recorded attempts counted in their webhooks' health
//!   once a second (and the auto-pause).
//! - [`unit`]: a taken job, parsed once, owning its delivery slot, and its
//!   verbs (acknowledge, dead-letter, bounce); a job ready to claim, owning
//!   its webhook's slot until the answer is in.
//! - [`stats`]: counters and the periodic summary line.
//! - [`limits`]: per-webhook concurrency limits, so one slow webhook holds
//!   only its own slots; a job's slot at its webhook and the fleet-wide
//!   lease it carries.
//! - [`fleet`]: a webhook's own concurrency and rate limits across every
//!   worker (leases and tokens in Redis).
//! - [`liveness`]: the heartbeat, and the reaper that recovers the jobs of
//!   workers that died.
//!
//! A job's life: LMOVE/BLMOVE into `{queue}:processing:<worker>` → claim
//! (lease + attempt count, or Exhausted / held / stale / missing) → send → outcome
//! recorded → LREM + DEL of the in-flight key. The delivery slot is freed
//! when the answer is in (the job waits for its outcome in a place of its
//! own, as many as the slots), so a slot turns around at the receiver's pace.

pub mod config;
pub mod fetch;
pub mod fleet;
pub mod health;
pub mod limits;
pub mod liveness;
pub mod record;
pub mod start;
pub mod stats;
pub mod unit;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};

use hookfleet_core::queue::RedisQueue;
use hookfleet_core::runtime::Shutdown;
use hookfleet_core::store::Store;

use crate::fetch::Fetcher;
use crate::limits::EndpointLimits;
use crate::record::Recorder;
use crate::start::Starter;
use crate::stats::{Counters, Snapshot, SUMMARY_INTERVAL};
use crate::unit::Held;

pub use config::{
    default_endpoint_concurrency, default_slow_endpoint_concurrency, WorkerConfig,
    DEFAULT_DRAIN_TIMEOUT, DEFAULT_FETCH_BATCH, DEFAULT_HEARTBEAT_TTL, DEFAULT_MAX_RECOVERIES,
};

/// How long a drained worker waits for its last fleet-wide leases to be
/// given back: one Redis round trip per webhook; past this they expire.
pub const FLEET_FLUSH_WAIT: Duration = Duration::from_secs(2);

/// How a worker stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Every delivery finished and was recorded; nothing left held.
    Drained,
    /// The drain timeout passed: unfinished jobs were put back on their
    /// queues (their rows' leases keep them from being sent twice).
    TimedOut,
    /// A second signal: stopped at once; the reaper recovers what was held.
    Forced,
}

/// What a worker did and how it stopped.
#[derive(Debug, Clone, Copy)]
pub struct WorkerReport {
    pub counts: Snapshot,
    pub stop: Stop,
}

/// Runs a worker until shutdown; returns what it did.
pub async fn run(store: Store, queue: RedisQueue, config: WorkerConfig) -> WorkerReport {
    let config = Arc::new(config);
    let counters = Arc::new(Counters::default());
    let held = Arc::new(Held::default());
    let slots = Arc::new(Semaphore::new(config.concurrency.max(1)));
    // Answered jobs whose outcomes wait to be written and acked: as many as
    // the slots, so a worker holds at most twice --concurrency jobs, and
    // outcomes that cannot be written stop new requests.
    let waiting = Arc::new(Semaphore::new(config.concurrency.max(1)));
    let (tx, rx) = mpsc::unbounded_channel();
    let health_buffer = Arc::new(health::HealthBuffer::default());
    let recorder = Arc::new(Recorder {
        store: store.clone(),
        queue: queue.clone(),
        worker_id: config.worker_id.clone(),
        counters: counters.clone(),
        shutdown: config.shutdown.clone(),
        health: health_buffer.clone(),
    });
    let recorder = tokio::spawn(recorder.run(rx));
    let health_writer = tokio::spawn(health::run(
        health_buffer.clone(),
        store.clone(),
        config.auto_pause_after,
        config.shutdown.clone(),
    ));
    let summary = tokio::spawn(summarise(counters.clone(), config.shutdown.clone()));
    // Registered before the first pop, so a reaper can always find what this
    // worker holds should it die.
    if let Err(e) = queue
        .registry()
        .heartbeat(&config.worker_id, &config.queues, config.heartbeat_ttl)
        .await
    {
        tracing::warn!(error = %e, "cannot register (Redis unavailable); will keep trying");
    }
    let liveness = tokio::spawn(liveness::run(queue.clone(), config.clone()));
    let gauges = tokio::spawn(liveness::observe_queues(queue.clone(), config.clone()));

    tracing::info!(worker = %config.worker_id, queues = ?config.queues, concurrency = config.concurrency,
        endpoint_concurrency = config.endpoint_concurrency, "worker started");
    let starter_store = store.clone();
    let starter = Arc::new(Starter {
        store,
        queue: queue.clone(),
        config: config.clone(),
        counters: counters.clone(),
        held,
        fleet: fleet::FleetGate::start(queue.clone(), &config.worker_id),
        limits: Arc::new(EndpointLimits::new(
            config.endpoint_concurrency,
            config.endpoint_ceiling,
            config.slow_endpoint_concurrency,
        )),
        recorder: tx,
        http: hookfleet_core::attempt::http_client(config.policy.clone()),
        claims: start::ClaimQueue::default(),
        waiting: waiting.clone(),
    });
    let fleet = starter.fleet.clone();
    Fetcher::new(starter, slots.clone()).run().await;

    // Drain: every job taken holds a delivery slot until its answer is in,
    // and then a place among the outcomes waiting until it is acked (taken
    // before the slot is given back); when all slots and then all places are
    // back, nothing is in flight.
    tracing::info!(
        in_flight = config.concurrency - slots.available_permits(),
        recording = config.concurrency - waiting.available_permits(),
        "draining"
    );
    let all = config.concurrency.max(1) as u32;
    let drained = async {
        let _slots = slots.acquire_many(all).await;
        let _places = waiting.acquire_many(all).await;
    };
    let stop = tokio::select! {
        _ = drained => Stop::Drained,
        _ = tokio::time::sleep(config.drain_timeout) => Stop::TimedOut,
        _ = config.shutdown.requested(2) => Stop::Forced,
    };
    recorder.abort();
    match stop {
        Stop::Forced => {
            tracing::warn!("stopped at once; the reaper recovers the jobs still held");
        }
        Stop::Drained | Stop::TimedOut => {
            if stop == Stop::TimedOut {
                tracing::warn!(timeout = ?config.drain_timeout, "drain timed out; putting unfinished jobs back");
            }
            // What is left (not started, or cut short) goes back to the
            // queues; the rows' leases keep a cut-short attempt from being
            // sent twice before its lease ends.
            match queue
                .registry()
                .return_all(&config.worker_id, &config.queues)
                .await
            {
                Ok(0) => {}
                Ok(n) => tracing::info!(returned = n, "put jobs back on their queues"),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot put jobs back; the reaper will once the heartbeat expires")
                }
            }
            fleet.flush(FLEET_FLUSH_WAIT).await;
            if let Err(e) = queue.registry().deregister(&config.worker_id).await {
                tracing::warn!(error = %e, "cannot deregister; the reaper will clean up");
            }
        }
    }
    health_writer.abort();
    if stop != Stop::Forced {
        // The last outcomes' attempts, which the writer's next tick would
        // have counted.
        // Logged inside: health is a summary, the outcomes are in.
        let _ = health_buffer
            .write(&starter_store, config.auto_pause_after)
            .await;
    }
    liveness.abort();
    gauges.abort();
    summary.abort();
    let counts = counters.snapshot();
    counts.log(&format!("worker stopped ({stop:?})"));
    WorkerReport { counts, stop }
}

async fn summarise(counters: Arc<Counters>, shutdown: Shutdown) {
    let mut last = Snapshot::default();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(SUMMARY_INTERVAL) => {}
            _ = shutdown.requested(1) => return,
        }
        let now = counters.snapshot();
        let d = now.since(&last);
        if !d.is_zero() {
            d.log(&format!("last {}s", SUMMARY_INTERVAL.as_secs()));
        }
        last = now;
    }
}
