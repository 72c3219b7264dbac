//! # hookfleet-worker
//!
//! Takes delivery jobs from Redis, sends the signed requests, records the
//! outcomes in Postgres. Many deliveries run at once (tokio), at most
//! `--concurrency`; a slow or hanging receiver holds only its own slots.
//!
//! # Layout
//! - [`fetch`]: take jobs into this worker's processing lists, claim their
//!   rows in one statement, start the deliveries.
//! - [`record`]: write outcomes in batches, then ack and release keys.
//! - [`unit`]: a taken job and its verbs (acknowledge, dead-letter, requeue).
//! - [`stats`]: counters and the periodic summary line.
//!
//! A job's life: LMOVE/BLMOVE into `{queue}:processing:<worker>` → claim
//! (lease + attempt count, or Exhausted / stale / missing) → send → outcome
//! recorded → LREM + DEL of the in-flight key → slot freed.

pub mod fetch;
pub mod record;
pub mod stats;
pub mod unit;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};

use hookfleet_core::deliver;
use hookfleet_core::queue::RedisQueue;
use hookfleet_core::schedule::RetrySchedule;
use hookfleet_core::shutdown::Shutdown;
use hookfleet_core::ssrf::NetworkPolicy;
use hookfleet_core::store::Store;

use crate::fetch::Fetcher;
use crate::record::Recorder;
use crate::stats::{Counters, Snapshot, SUMMARY_INTERVAL};

/// Jobs taken per pop at most: one claim statement covers them all.
pub const DEFAULT_FETCH_BATCH: usize = 64;

/// How long a drain waits for deliveries in flight; past it the process exits
/// and the reaper recovers what it held. A little over the longest webhook
/// timeout (60 s), so a drain never cuts a legitimate attempt short.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(65);

/// What a worker needs to know.
pub struct WorkerConfig {
    pub worker_id: String,
    pub queues: Vec<String>,
    /// Hard cap on jobs held (popped and not yet acked) at once.
    pub concurrency: usize,
    pub fetch_batch: usize,
    pub schedule: RetrySchedule,
    pub policy: Arc<NetworkPolicy>,
    pub drain_timeout: Duration,
    pub shutdown: Shutdown,
}

impl WorkerConfig {
    /// A unique id for this process: host, pid and a random part, so a
    /// restarted worker never adopts a dead one's processing list by accident.
    pub fn new_worker_id() -> String {
        let identity = hookfleet_core::model::process_identity("worker");
        let random = uuid::Uuid::now_v7().simple().to_string();
        format!(
            "{}:{}",
            identity.trim_start_matches("worker:"),
            &random[random.len() - 6..]
        )
    }
}

/// Runs a worker until shutdown; returns what it did.
pub async fn run(store: Store, queue: RedisQueue, config: WorkerConfig) -> Snapshot {
    let config = Arc::new(config);
    let counters = Arc::new(Counters::default());
    let slots = Arc::new(Semaphore::new(config.concurrency.max(1)));
    let (tx, rx) = mpsc::unbounded_channel();
    let recorder = Recorder {
        store: store.clone(),
        queue: queue.clone(),
        worker_id: config.worker_id.clone(),
        counters: counters.clone(),
        shutdown: config.shutdown.clone(),
    };
    let recorder = tokio::spawn(recorder.run(rx));
    let summary = tokio::spawn(summarise(counters.clone(), config.shutdown.clone()));

    tracing::info!(worker = %config.worker_id, queues = ?config.queues, concurrency = config.concurrency, "worker started");
    let http = deliver::http_client(config.policy.clone());
    let mut fetcher = Fetcher::new(
        store,
        queue,
        config.clone(),
        slots.clone(),
        counters.clone(),
        tx,
        http,
    );
    fetcher.run().await;

    // Drain: every taken job is started; wait for the deliveries in flight.
    tracing::info!(
        in_flight = config.concurrency - slots.available_permits(),
        "draining"
    );
    let mut tasks = std::mem::take(&mut fetcher.tasks);
    drop(fetcher);
    let drained = tokio::select! {
        _ = async { while tasks.join_next().await.is_some() {} } => true,
        _ = tokio::time::sleep(config.drain_timeout) => false,
        _ = config.shutdown.requested(2) => false,
    };
    if drained {
        let _ = recorder.await;
    } else {
        tasks.abort_all();
        tracing::warn!(
            "stopped before every delivery finished; the reaper recovers the jobs still held"
        );
    }
    summary.abort();
    let done = counters.snapshot();
    tracing::info!(
        delivered = done.delivered,
        failed = done.failed,
        exhausted = done.exhausted,
        stale = done.stale,
        dead_lettered = done.dead_lettered,
        "worker stopped"
    );
    done
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
            tracing::info!(
                delivered = d.delivered,
                failed = d.failed,
                exhausted = d.exhausted,
                stale = d.stale,
                dead_lettered = d.dead_lettered,
                "last {}s",
                SUMMARY_INTERVAL.as_secs()
            );
        }
        last = now;
    }
}
