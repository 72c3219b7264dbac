//! What an operator watches: the metrics every long-running process keeps
//! (`/metrics`, Prometheus/OpenMetrics text by the official client), and its
//! health (`/livez`: its loop makes progress; `/readyz`: Postgres and Redis
//! answer), served on `--metrics-listen`.
//!
//! The metrics are one process-wide set ([`metrics`]), recorded whether or
//! not anything scrapes them (a few atomic adds per delivery). Labels are
//! bounded: webhook names past [`MAX_WEBHOOK_LABELS`] are counted under
//! `other`, outcomes, sources and queues are few by construction.
//!
//! A label value is written escaped ([`label_value`]): the official client
//! writes them raw, so a webhook named `Orders "EU"` would otherwise make
//! the whole scrape unparseable (and a crafted name could forge samples).
//! `/metrics` answers in the format the scraper asks for: OpenMetrics when
//! its `Accept` names it (Prometheus does), else the classic text format
//! (`text/plain; version=0.0.4`) that `promtool` and older parsers read.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::queue::RedisQueue;
use crate::runtime::http::ServeLimits;
use crate::runtime::Shutdown;
use crate::store::Store;

/// Distinct webhook label values kept; more are counted as `other`, so a
/// fleet with thousands of webhooks cannot grow the exposition without
/// bound (each webhook costs a counter set and a histogram).
pub(crate) const MAX_WEBHOOK_LABELS: usize = 500;

/// The label value of webhooks past [`MAX_WEBHOOK_LABELS`].
pub(crate) const OTHER_WEBHOOK: &str = "other";

/// The label value of a delivery Exhausted before any request, whose
/// webhook the worker never learned (deleted or disabled meanwhile).
pub const UNKNOWN_WEBHOOK: &str = "-";

/// How long a readiness check waits for Postgres or Redis: a healthy one
/// answers in milliseconds; a probe that hangs is worse than a 503.
pub(crate) const READY_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
    pub webhook: String,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub webhook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Request durations, 5 ms to about 82 s: a receiver's answer is
/// milliseconds to a webhook's 60 s timeout ceiling.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// Sweeper ticks, 1 ms to about 33 s.
fn tick_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Every metric DESIGN "Operations" names (but `hookfleet_webhooks_paused`,
/// which comes with pausing).
pub struct Metrics {
    /// Only what this process keeps is registered (see [`Role`]): a worker
    /// exporting the sweeper's gauges as 0 would hide a missing sweeper.
    registry: Mutex<Registry>,
    registered: Mutex<HashSet<&'static str>>,
    webhooks: Mutex<HashSet<String>>,
    pub deliveries: Family<DeliveryLabels, Counter>,
    pub delivery_duration: HistogramFamily<WebhookLabels>,
    pub in_flight: Gauge,
    pub queue_depth: Family<QueueLabels, Gauge>,
    pub due_backlog: Gauge,
    pub oldest_due_age: Gauge<f64, AtomicU64>,
    pub sweeper_enqueued: Counter,
    pub sweeper_tick: Histogram,
    pub dead_letters: Gauge,
    pub events: Family<SourceLabels, Counter>,
    pub webhooks_paused: Gauge,
    pub webhooks_auto_paused: Counter,
    pub pruned: Counter,
}

/// The names the processes export, as Prometheus sees them (counters with
/// `_total`); the Grafana dashboard is checked against this list.
pub const METRIC_NAMES: &[&str] = &[
    "hookfleet_deliveries_total",
    "hookfleet_delivery_duration_seconds",
    "hookfleet_in_flight",
    "hookfleet_queue_depth",
    "hookfleet_due_backlog",
    "hookfleet_oldest_due_age_seconds",
    "hookfleet_sweeper_enqueued_total",
    "hookfleet_sweeper_tick_seconds",
    "hookfleet_dead_letters",
    "hookfleet_events_total",
    "hookfleet_webhooks_paused",
    "hookfleet_webhooks_auto_paused_total",
    "hookfleet_pruned_total",
];

/// What a process does, and so which metrics it exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Deliveries, durations, in flight, its queues' depth, dead letters.
    Worker,
    /// The backlog, its ticks, every queue's depth, dead letters.
    Sweeper,
    /// Events emitted.
    Producer,
}

impl Metrics {
    fn new() -> Metrics {
        Metrics {
            registry: Mutex::new(Registry::default()),
            registered: Mutex::new(HashSet::new()),
            webhooks: Mutex::new(HashSet::new()),
            deliveries: Family::default(),
            delivery_duration: Family::new_with_constructor(duration_histogram),
            in_flight: Gauge::default(),
            queue_depth: Family::default(),
            due_backlog: Gauge::default(),
            oldest_due_age: Gauge::default(),
            sweeper_enqueued: Counter::default(),
            sweeper_tick: tick_histogram(),
            dead_letters: Gauge::default(),
            events: Family::default(),
            webhooks_paused: Gauge::default(),
            webhooks_auto_paused: Counter::default(),
            pruned: Counter::default(),
        }
    }

    fn register(
        &self,
        name: &'static str,
        help: &str,
        metric: impl prometheus_client::registry::Metric,
    ) {
        let mut registered = self.registered.lock().unwrap_or_else(|e| e.into_inner());
        if registered.insert(name) {
            self.registry
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .register(name, help, metric);
        }
    }

    /// Exports the metrics `role` keeps (a process may have several).
    pub fn export(&self, role: Role) {
        let queues = || {
            self.register(
                "hookfleet_queue_depth",
                "Jobs waiting in a queue (a worker's own queues, the sweeper's every queue)",
                self.queue_depth.clone(),
            );
            self.register(
                "hookfleet_dead_letters",
                "Jobs in the dead-letter list",
                self.dead_letters.clone(),
            );
        };
        match role {
            Role::Worker => {
                self.register(
                    "hookfleet_deliveries",
                    "Attempts recorded, by webhook and outcome (delivered, failed, exhausted)",
                    self.deliveries.clone(),
                );
                self.register(
                    "hookfleet_delivery_duration_seconds",
                    "Time from sending a request to its answer (or error), by webhook",
                    self.delivery_duration.clone(),
                );
                self.register(
                    "hookfleet_in_flight",
                    "Requests this worker has sent and not yet had answered",
                    self.in_flight.clone(),
                );
                self.register(
                    "hookfleet_webhooks_auto_paused",
                    "Webhooks this worker paused because every attempt failed for HOOKFLEET_AUTO_PAUSE_AFTER",
                    self.webhooks_auto_paused.clone(),
                );
                queues();
            }
            Role::Sweeper => {
                self.register(
                    "hookfleet_due_backlog",
                    "Pending rows whose attempt is due (counted up to 1,000,000)",
                    self.due_backlog.clone(),
                );
                self.register(
                    "hookfleet_oldest_due_age_seconds",
                    "How long the oldest due row has been waiting",
                    self.oldest_due_age.clone(),
                );
                self.register(
                    "hookfleet_sweeper_enqueued",
                    "Rows the sweeper put (back) on their queues",
                    self.sweeper_enqueued.clone(),
                );
                self.register(
                    "hookfleet_sweeper_tick_seconds",
                    "How long a sweeper tick took",
                    self.sweeper_tick.clone(),
                );
                self.register(
                    "hookfleet_webhooks_paused",
                    "Webhooks paused (by an operator or the auto-pause): their deliveries wait",
                    self.webhooks_paused.clone(),
                );
                self.register(
                    "hookfleet_pruned",
                    "Terminal delivery rows deleted by retention (--retention)",
                    self.pruned.clone(),
                );
                queues();
            }
            Role::Producer => self.register(
                "hookfleet_events",
                "Events emitted, by source (emit: library and CLI; ingest: HTTP)",
                self.events.clone(),
            ),
        }
    }

    /// The label value for `webhook` (escaped, see [`label_value`]): its
    /// name while fewer than [`MAX_WEBHOOK_LABELS`] are known, else `other`.
    pub fn webhook_label(&self, webhook: &str) -> String {
        let mut known = self.webhooks.lock().unwrap_or_else(|e| e.into_inner());
        if known.contains(webhook) {
            return label_value(webhook);
        }
        if known.len() < MAX_WEBHOOK_LABELS {
            known.insert(webhook.to_string());
            return label_value(webhook);
        }
        OTHER_WEBHOOK.to_string()
    }

    /// Counts one recorded attempt of `webhook`.
    pub fn delivery(&self, webhook: &str, outcome: &'static str) {
        self.deliveries
            .get_or_create(&DeliveryLabels {
                webhook: self.webhook_label(webhook),
                outcome,
            })
            .inc();
    }

    /// Observes one request's duration.
    pub fn request_took(&self, webhook: &str, took: Duration) {
        self.delivery_duration
            .get_or_create(&WebhookLabels {
                webhook: self.webhook_label(webhook),
            })
            .observe(took.as_secs_f64());
    }

    /// Sets a queue's depth.
    pub fn set_queue_depth(&self, queue: &str, depth: i64) {
        self.queue_depth
            .get_or_create(&QueueLabels {
                queue: label_value(queue),
            })
            .set(depth);
    }

    /// Counts a request in flight until the guard drops (a cancelled or
    /// panicking send included).
    pub fn in_flight_guard(&self) -> InFlightGuard {
        self.in_flight.inc();
        InFlightGuard(self.in_flight.clone())
    }

    /// Counts events emitted from `source` ("emit" or "ingest").
    pub fn events_emitted(&self, source: &'static str, n: u64) {
        self.events
            .get_or_create(&SourceLabels { source })
            .inc_by(n);
    }

    /// The exposition in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
        text
    }

    /// The exposition in the classic Prometheus text format (0.0.4), for
    /// scrapers that do not ask for OpenMetrics: the same samples, with the
    /// counters' `# TYPE`/`# HELP` lines naming the `_total` series (a
    /// classic parser otherwise sees them untyped), and no `# UNIT` or
    /// `# EOF` lines (which that format does not have).
    pub fn encode_classic(&self) -> String {
        classic_text(&self.encode())
    }
}

/// `value` as a label value of either text format: backslash, double quote
/// and line feed escaped (`\\`, `\"`, `\n`), everything else as it is.
pub(crate) fn label_value(value: &str) -> String {
    if !value.contains(['\\', '"', '\n']) {
        return value.to_string();
    }
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// OpenMetrics text rewritten as the classic format (see
/// [`Metrics::encode_classic`]). Only metadata lines change; samples are
/// the same in both formats for the kinds hookfleet exports (counters,
/// gauges, histograms).
fn classic_text(openmetrics: &str) -> String {
    let mut counters: HashSet<&str> = HashSet::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some((name, "counter")) = rest.split_once(' ') {
                counters.insert(name);
            }
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# TYPE ", "# HELP "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                if counters.contains(name) && !name.ends_with("_total") {
                    out.push_str(&format!("{prefix}{name}_total {tail}"));
                } else {
                    out.push_str(line);
                }
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// A request in flight (see [`Metrics::in_flight_guard`]).
pub struct InFlightGuard(Gauge);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

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
    last: std::sync::Arc<tokio::sync::Mutex<ReadyAnswer>>,
}

impl Probe {
    pub fn new(store: Store, queue: RedisQueue) -> Probe {
        Probe {
            store,
            queue,
            last: Default::default(),
        }
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

async fn livez() -> impl IntoResponse {
    answer(progress().live())
}

async fn readyz(State((probe, detailed)): State<(Probe, bool)>) -> impl IntoResponse {
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

/// The content type of the OpenMetrics text format.
pub(crate) const OPENMETRICS_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of the classic Prometheus text format.
pub(crate) const CLASSIC_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `GET /metrics`: OpenMetrics when the scraper's `Accept` names it
/// (Prometheus asks for it first), else the classic text format.
pub async fn metrics_text(headers: axum::http::HeaderMap) -> impl IntoResponse {
    let openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    if openmetrics {
        (
            [(header::CONTENT_TYPE, OPENMETRICS_TYPE)],
            metrics().encode(),
        )
    } else {
        (
            [(header::CONTENT_TYPE, CLASSIC_TYPE)],
            metrics().encode_classic(),
        )
    }
}

/// The probe routes (`/livez`, `/readyz`), for a listener of the caller's;
/// `detailed`: whether a 503 says why (not on a public listener).
pub fn probe_routes(probe: Probe, detailed: bool) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .with_state((probe, detailed))
}

/// How the metrics listener bounds its callers, as the ingest and the
/// console do theirs: a scraper, an orchestrator's probes and a person with
/// curl need a handful of connections, and a caller that opens sockets and
/// sends nothing must not hold one for longer than a scrape takes, nor take
/// the process's file descriptors (which its deliveries need).
pub const METRICS_LIMITS: ServeLimits = ServeLimits {
    // A scraper, a kubelet's probes and a person need a few each; a burst
    // of probes from one place (a load balancer's checks) a few dozen.
    // Far below a process's descriptors, which its deliveries need.
    max_connections: 64,
    max_per_client: 32,
    // A scraper sends its request at once; Prometheus's own scrape timeout
    // defaults to 10 s.
    header_read_timeout: Duration::from_secs(5),
    // A scrape or a probe answers in milliseconds.
    shutdown_wait: Duration::from_secs(2),
};

/// Serves `/metrics`, `/livez` and `/readyz` on `addr` until `shutdown`,
/// within [`METRICS_LIMITS`]; fails only if the address cannot be bound.
pub async fn serve(
    addr: SocketAddr,
    probe: Probe,
    shutdown: Shutdown,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let app = probe_routes(probe, true).route("/metrics", get(metrics_text));
    tracing::info!(listen = %listener.local_addr()?, "serving /metrics, /livez and /readyz");
    Ok(tokio::spawn(async move {
        let stop = async move { shutdown.requested(2).await };
        crate::runtime::http::serve(listener, app, METRICS_LIMITS, stop).await;
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_labels_are_bounded() {
        let m = Metrics::new();
        m.export(Role::Worker);
        for i in 0..MAX_WEBHOOK_LABELS {
            assert_eq!(m.webhook_label(&format!("w{i}")), format!("w{i}"));
        }
        assert_eq!(m.webhook_label("one too many"), OTHER_WEBHOOK);
        assert_eq!(m.webhook_label("w0"), "w0", "a known one keeps its name");
        m.delivery("one too many", "failed");
        m.delivery("another", "failed");
        let text = m.encode();
        assert!(
            text.contains(r#"hookfleet_deliveries_total{webhook="other",outcome="failed"} 2"#),
            "{text}"
        );
    }

    #[test]
    fn every_named_metric_is_exported() {
        let m = Metrics::new();
        for role in [Role::Worker, Role::Sweeper, Role::Producer, Role::Worker] {
            m.export(role);
        }
        m.delivery("w", "delivered");
        m.request_took("w", Duration::from_millis(12));
        m.set_queue_depth("default", 3);
        m.events_emitted("emit", 2);
        let text = m.encode();
        for name in METRIC_NAMES {
            assert!(
                text.lines().any(|l| l.starts_with(name)),
                "{name} missing from\n{text}"
            );
        }
    }

    #[test]
    fn a_process_exports_only_what_its_role_keeps() {
        let m = Metrics::new();
        m.export(Role::Worker);
        let text = m.encode();
        assert!(text.contains("hookfleet_in_flight"), "{text}");
        assert!(!text.contains("hookfleet_oldest_due_age_seconds"), "{text}");
        assert!(!text.contains("hookfleet_events"), "{text}");
    }

    #[test]
    fn label_values_are_escaped_as_both_formats_require() {
        assert_eq!(label_value("orders"), "orders");
        assert_eq!(label_value(r#"Orders "EU""#), r#"Orders \"EU\""#);
        assert_eq!(label_value("a\\b\nc"), "a\\\\b\\nc");
        let m = Metrics::new();
        m.export(Role::Worker);
        m.delivery(r#"x",outcome="delivered"} 1e9 #"#, "failed");
        let text = m.encode();
        assert!(
            text.contains(r#"{webhook="x\",outcome=\"delivered\"} 1e9 #",outcome="failed"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn the_classic_format_types_counters_by_their_total_series() {
        let m = Metrics::new();
        m.export(Role::Worker);
        m.delivery("w", "delivered");
        let classic = m.encode_classic();
        assert!(
            classic.contains("# TYPE hookfleet_deliveries_total counter"),
            "{classic}"
        );
        assert!(
            classic.contains("# HELP hookfleet_deliveries_total Attempts"),
            "{classic}"
        );
        assert!(
            classic.contains("# TYPE hookfleet_in_flight gauge"),
            "{classic}"
        );
        assert!(!classic.contains("# EOF"), "{classic}");
        assert!(
            classic.contains(r#"hookfleet_deliveries_total{webhook="w",outcome="delivered"} 1"#),
            "{classic}"
        );
    }

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
