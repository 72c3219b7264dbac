//! A process's health: `/livez` (its main loop makes progress) and
//! `/readyz` (Postgres and Redis answer), one readiness check at a time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;

use crate::queue::RedisQueue;
use crate::store::Store;

/// How long a readiness check waits for Postgres or Redis: a healthy one
/// answers in milliseconds; a probe that hangs is worse than a 503.
pub(crate) const READY_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a loop may go without progress before `/livez` says so, unless
/// the process sets its own ([`Progress::set_stall_after`]): three times
/// the slowest loop's natural period is the usual choice.
pub(crate) const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(60);

/// When the process's main loop last made progress: `/livez` answers 503
/// once it has not for longer than the process allows.
#[derive(Debug)]
pub struct Progress {
    started: Instant,
    /// Milliseconds from `started` to the last tick.
    last: AtomicU64,
    /// Milliseconds allowed between ticks.
    stall_after: AtomicU64,
}

impl Progress {
    /// A loop that must tick at least every `stall_after`.
    pub fn new(stall_after: Duration) -> Progress {
        Progress {
            started: Instant::now(),
            last: AtomicU64::new(0),
            stall_after: AtomicU64::new(millis(stall_after)),
        }
    }

    /// Sets how long the loop may go without a tick.
    pub fn set_stall_after(&self, stall_after: Duration) {
        self.stall_after
            .store(millis(stall_after), Ordering::Relaxed);
    }

    /// The loop made progress.
    pub fn tick(&self) {
        self.last
            .store(millis(self.started.elapsed()), Ordering::Relaxed);
    }

    /// How long since the last tick.
    pub fn since_last(&self) -> Duration {
        self.started
            .elapsed()
            .saturating_sub(Duration::from_millis(self.last.load(Ordering::Relaxed)))
    }

    /// Ok while the loop ticks often enough; else why not.
    pub fn live(&self) -> Result<(), String> {
        let since = self.since_last();
        let allowed = Duration::from_millis(self.stall_after.load(Ordering::Relaxed));
        if since > allowed {
            return Err(format!(
                "no progress for {}s (allowed {}s)",
                since.as_secs(),
                allowed.as_secs()
            ));
        }
        Ok(())
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The process's main loop's progress.
pub fn progress() -> &'static Progress {
    static PROGRESS: OnceLock<Progress> = OnceLock::new();
    PROGRESS.get_or_init(|| Progress::new(DEFAULT_STALL_AFTER))
}

/// How long a readiness answer is reused: probes from several places (an
/// orchestrator, a scraper, a load balancer) share one check, and a flood
/// of requests during an outage costs one check a second, not a thread
/// each.
pub(crate) const READY_CACHE: Duration = Duration::from_secs(1);

type ReadyAnswer = Option<(Instant, Result<(), String>)>;

/// What `/livez` and `/readyz` ask.
#[derive(Clone)]
pub struct Probe {
    store: Store,
    queue: RedisQueue,
    /// Whether ready also means able to open every stored credential (a
    /// process that sends: the worker, the producer).
    keys: bool,
    last: std::sync::Arc<tokio::sync::Mutex<ReadyAnswer>>,
}

impl Probe {
    pub fn new(store: Store, queue: RedisQueue) -> Probe {
        Probe {
            store,
            queue,
            keys: false,
            last: Default::default(),
        }
    }

    /// The same probe, not ready while stored credentials are sealed with a
    /// key this process lacks (it would send nothing for their webhooks).
    pub fn requiring_keys(mut self) -> Probe {
        self.keys = true;
        self
    }

    /// Ok when Postgres and Redis both answer within
    /// [`READY_CHECK_TIMEOUT`]; else every reason. One check at a time;
    /// an answer younger than [`READY_CACHE`] is reused.
    pub async fn ready(&self) -> Result<(), String> {
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = &*last {
            if at.elapsed() < READY_CACHE {
                return answer.clone();
            }
        }
        let answer = self.check().await;
        *last = Some((Instant::now(), answer.clone()));
        answer
    }

    async fn check(&self) -> Result<(), String> {
        // The pool waits at most the check's time for a connection; the
        // outer timeout also bounds a query on a connection that hangs.
        let pg = tokio::time::timeout(
            READY_CHECK_TIMEOUT,
            self.store.ping(READY_CHECK_TIMEOUT.mul_f32(0.75)),
        );
        let redis = tokio::time::timeout(READY_CHECK_TIMEOUT, self.queue.ping());
        let (pg, redis) = tokio::join!(pg, redis);
        let mut reasons = Vec::new();
        match pg {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => reasons.push(format!("postgres: {e}")),
            Err(_) => reasons.push(format!(
                "postgres: no answer within {}s",
                READY_CHECK_TIMEOUT.as_secs()
            )),
        }
        match redis {
            Ok(Ok(())) => {}
            Ok(Err(e)) => reasons.push(format!("redis: {e}")),
            Err(_) => reasons.push(format!(
                "redis: no answer within {}s",
                READY_CHECK_TIMEOUT.as_secs()
            )),
        }
        if self.keys && reasons.is_empty() {
            let missing = tokio::time::timeout(
                READY_CHECK_TIMEOUT,
                self.store.run(crate::store::webhooks::missing_keys),
            )
            .await;
            match missing {
                Ok(Ok(None)) => {}
                Ok(Ok(Some(reason))) => reasons.push(reason),
                Ok(Err(e)) => reasons.push(format!("postgres: {e}")),
                Err(_) => reasons.push(format!(
                    "postgres: no answer within {}s",
                    READY_CHECK_TIMEOUT.as_secs()
                )),
            }
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons.join("; "))
        }
    }
}

fn answer(result: Result<(), String>) -> (StatusCode, String) {
    match result {
        Ok(()) => (StatusCode::OK, "ok\n".into()),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}

pub(crate) async fn livez() -> impl IntoResponse {
    answer(progress().live())
}

pub(crate) async fn readyz(State((probe, detailed)): State<(Probe, bool)>) -> impl IntoResponse {
    let result = probe.ready().await;
    // On a public listener the reason (hosts, ports) stays in the log.
    if !detailed {
        if let Err(reason) = &result {
            tracing::warn!(reason = %reason, "not ready");
            return answer(Err("not ready".into()));
        }
    }
    answer(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_that_stops_ticking_is_not_live() {
        let p = Progress::new(Duration::from_millis(50));
        p.tick();
        assert!(p.live().is_ok());
        std::thread::sleep(Duration::from_millis(120));
        assert!(p.live().unwrap_err().contains("no progress"));
        p.tick();
        assert!(p.live().is_ok());
    }
}
