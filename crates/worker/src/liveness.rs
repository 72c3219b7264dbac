//! The worker's heartbeat and its turn as reaper.
//!
//! Every `ttl / 3` the worker renews its heartbeat (and re-registers, so a
//! Redis that restarted empty learns about it again). Every `ttl / 2` it tries
//! to become the reaper for a moment and recovers the jobs of workers whose
//! heartbeat has expired. Runs for the worker's whole life, drain included:
//! a draining worker is alive and keeps its jobs.

use std::sync::Arc;
use std::time::Duration;

use hookfleet_core::queue::RedisQueue;

use crate::config::WorkerConfig;

/// How long the reaper lock is held at most: a pass takes milliseconds; if
/// the reaper dies mid-pass the next one takes over after this.
pub const REAPER_LOCK: Duration = Duration::from_secs(10);

pub async fn run(queue: RedisQueue, config: Arc<WorkerConfig>) {
    let beat = (config.heartbeat_ttl / 3).max(Duration::from_millis(100));
    let reap_every = (config.heartbeat_ttl / 2).max(Duration::from_millis(100));
    let mut last_reap = tokio::time::Instant::now();
    let mut healthy = true;
    loop {
        // The loop runs whether or not Redis answers: /livez asks that it
        // runs, /readyz that Redis answers.
        hookfleet_core::runtime::observe::progress().tick();
        match queue
            .registry()
            .heartbeat(&config.worker_id, &config.queues, config.heartbeat_ttl)
            .await
        {
            Ok(()) => {
                if !healthy {
                    tracing::info!("Redis answers again; heartbeat renewed");
                }
                healthy = true;
            }
            Err(e) => {
                if healthy {
                    tracing::warn!(error = %e, "cannot renew the heartbeat (Redis unavailable); retrying");
                }
                healthy = false;
            }
        }
        if healthy && last_reap.elapsed() >= reap_every {
            last_reap = tokio::time::Instant::now();
            match queue
                .registry()
                .reap(&config.worker_id, config.max_recoveries, REAPER_LOCK)
                .await
            {
                Ok(Some(r)) if r.dead_workers > 0 => tracing::info!(
                    dead_workers = r.dead_workers,
                    requeued = r.requeued,
                    dead_lettered = r.dead_lettered,
                    "recovered the jobs of dead workers"
                ),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "reaping failed; the next pass retries"),
            }
        }
        tokio::time::sleep(beat).await;
    }
}

/// How often a worker reads its queues' depth and the dead letters for
/// the metrics: a scrape interval's worth of freshness for one LLEN each.
pub const QUEUE_GAUGE_INTERVAL: Duration = Duration::from_secs(10);

/// Sets the depth of this worker's queues and the dead letters for the
/// metrics, so they are exported where workers run even when the sweeper
/// runs from a timer. A task of its own: a slow Redis delays the gauges,
/// never the heartbeat.
pub async fn observe_queues(queue: RedisQueue, config: Arc<WorkerConfig>) {
    let metrics = hookfleet_core::runtime::observe::metrics();
    loop {
        for name in &config.queues {
            if let Ok(depth) = queue.jobs().depth(name).await {
                metrics.set_queue_depth(name, depth);
            }
        }
        if let Ok(dead) = queue.dead().count().await {
            metrics.dead_letters.set(dead);
        }
        tokio::time::sleep(QUEUE_GAUGE_INTERVAL).await;
    }
}
