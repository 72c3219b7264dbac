//! What a worker is told: its [`WorkerConfig`], and the defaults the
//! binary and the tests start from.

use std::sync::Arc;
use std::time::Duration;

use hookfleet_core::domain::RetrySchedule;
use hookfleet_core::request::NetworkPolicy;
use hookfleet_core::runtime::Shutdown;

/// Jobs taken per pop at most: one claim statement covers them all.
pub const DEFAULT_FETCH_BATCH: usize = 64;

/// How long a drain waits for deliveries in flight; past it the process exits
/// and the reaper recovers what it held. A little over the longest webhook
/// timeout (60 s), so a drain never cuts a legitimate attempt short.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(65);

/// A worker silent this long counts as dead: three missed beats (one every
/// ten seconds), so a pause in Redis or a busy machine is not mistaken for
/// death, while a killed worker's jobs are back within half a minute.
pub const DEFAULT_HEARTBEAT_TTL: Duration = Duration::from_secs(30);

/// A job that was held by this many workers that died is a poison job.
pub const DEFAULT_MAX_RECOVERIES: u32 = 3;

/// The default per-webhook share while other webhooks are active: a quarter
/// of the worker's slots, so a webhook that starts hanging takes at most a
/// quarter of them before it is found slow. Alone, a webhook may use them all
/// (see `limits`).
pub fn default_endpoint_concurrency(concurrency: usize) -> usize {
    concurrency.div_ceil(4).max(1)
}

/// The default limit for a slow webhook: a sixteenth of the worker's slots,
/// so one that hangs until its timeout costs the others little.
pub fn default_slow_endpoint_concurrency(concurrency: usize) -> usize {
    concurrency.div_ceil(16).max(1)
}

/// What a worker needs to know.
pub struct WorkerConfig {
    pub worker_id: String,
    pub queues: Vec<String>,
    /// Most jobs being claimed and sent at once (a job's slot is freed when
    /// its answer is in); as many more answered jobs may wait for their
    /// outcomes to be written, so at most twice this is held.
    pub concurrency: usize,
    /// Most requests in flight to one webhook while other webhooks are
    /// active, unless the webhook sets its own `max_concurrency`.
    pub endpoint_concurrency: usize,
    /// Most requests in flight to one webhook while it is the only one
    /// active (`concurrency`, or `endpoint_concurrency` when the operator
    /// set that explicitly).
    pub endpoint_ceiling: usize,
    /// Most requests in flight to a slow webhook (see `limits`).
    pub slow_endpoint_concurrency: usize,
    pub fetch_batch: usize,
    pub schedule: RetrySchedule,
    pub policy: Arc<NetworkPolicy>,
    pub drain_timeout: Duration,
    /// The heartbeat's TTL: a worker silent this long is dead and its jobs are
    /// recovered.
    pub heartbeat_ttl: Duration,
    /// Recoveries from dead workers after which a job is dead-lettered.
    pub max_recoveries: u32,
    /// Added to each webhook's timeout to make a claim's lease
    /// ([`hookfleet_core::attempt::LEASE_MARGIN`] by default).
    pub lease_margin: Duration,
    /// Pause a webhook whose every attempt has failed for this long (and
    /// at least [`hookfleet_core::store::health::AUTO_PAUSE_MIN_ATTEMPTS`]
    /// of them); None: never.
    pub auto_pause_after: Option<Duration>,
    pub shutdown: Shutdown,
}

impl WorkerConfig {
    /// A unique id for this process: host, pid and a random part, so a
    /// restarted worker never adopts a dead one's processing list by accident.
    pub fn new_worker_id() -> String {
        let identity = hookfleet_core::domain::process_identity("worker");
        let random = uuid::Uuid::now_v7().simple().to_string();
        format!(
            "{}:{}",
            identity.trim_start_matches("worker:"),
            &random[random.len() - 6..]
        )
    }
}
