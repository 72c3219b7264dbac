//! The metrics every long-running process keeps: one process-wide set
//! ([`metrics`]), recorded whether or not anything scrapes it (a few atomic
//! adds per delivery), exported in the OpenMetrics or the classic text
//! format. Labels are bounded ([`MAX_WEBHOOK_LABELS`]) and escaped
//! ([`label_value`]).

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Distinct webhook label values kept; more are counted as `other`, so a
/// fleet with thousands of webhooks cannot grow the exposition without
/// bound (each webhook costs a counter set and a histogram).
pub(crate) const MAX_WEBHOOK_LABELS: usize = 500;

/// The label value of webhooks past [`MAX_WEBHOOK_LABELS`].
pub(crate) const OTHER_WEBHOOK: &str = "other";

/// The label value of a delivery Exhausted before any request, whose
/// webhook the worker never learned (deleted or disabled meanwhile).
pub const UNKNOWN_WEBHOOK: &str = "-";

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
    pub withheld: Counter,
    pub pruned: Counter,
}

/// The names the processes export, as Prometheus sees them (counters with
/// `_total`); the Grafana dashboard is checked against this list.
pub const METRIC_NAMES: &[&str] = &[
    "hookfleet_delivery_attempts_total",
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
    "hookfleet_deliveries_withheld_total",
    "hookfleet_pruned_total",
    "hookfleet_build_info",
];

/// `hookfleet_delivery_attempts_total`'s deprecated alias (the registered
/// name, without `_total`): the same counter, exported one more release.
pub const DEPRECATED_DELIVERIES: &str = "hookfleet_deliveries";

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
            withheld: Counter::default(),
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

    /// Exports the metrics `role` keeps (a process may have several), and
    /// with the first role what every process has: `process_*` and
    /// `hookfleet_build_info`.
    pub fn export(&self, role: Role) {
        // The process collector is no metric of its own: the set of what
        // is registered remembers it under a name of its own.
        if self
            .registered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert("process_*")
        {
            self.registry
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .register_collector(Box::new(ProcessCollector));
        }
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        self.register(
            "hookfleet_build_info",
            "The build this process runs (always 1; the version in its label)",
            build,
        );
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
                    "hookfleet_delivery_attempts",
                    "Attempts recorded, by webhook and outcome (delivered, failed, exhausted)",
                    self.deliveries.clone(),
                );
                // The same counter under its first name, which said
                // deliveries where it counts attempts: kept one release
                // for dashboards and alerts still reading it.
                self.register(
                    DEPRECATED_DELIVERIES,
                    "Deprecated: the same as hookfleet_delivery_attempts_total (removed in the next release)",
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
                self.register(
                    "hookfleet_deliveries_withheld",
                    "Attempts this worker did not make, its claim undone without counting one, because it cannot open the webhook's credentials (a sealing key it lacks)",
                    self.withheld.clone(),
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// The `process_*` metrics every Prometheus client exports (CPU, memory,
/// file descriptors, threads, start time), read from `/proc` at each scrape
/// by the `metrics-process` crate, under the official Go client's names
/// (an unlimited maximum is 0 here, where the Go client gives the largest
/// number). A value the system does not give is left out.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let process = metrics_process::collector::collect();
        if let Some(seconds) = process.cpu_seconds_total {
            let counter = ConstCounter::new(seconds);
            let metric = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                counter.metric_type(),
            )?;
            counter.encode(metric)?;
        }
        let gauges = [
            (
                "process_open_fds",
                "Number of open file descriptors",
                process.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                process.max_fds,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                process.virtual_memory_bytes,
            ),
            (
                "process_virtual_memory_max_bytes",
                "Maximum amount of virtual memory available in bytes (0: unlimited)",
                process.virtual_memory_max_bytes,
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                process.resident_memory_bytes,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                process.start_time_seconds,
            ),
            (
                "process_threads",
                "Number of OS threads in the process",
                process.threads,
            ),
        ];
        for (name, help, value) in gauges {
            let Some(value) = value else { continue };
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
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
            text.contains(
                r#"hookfleet_delivery_attempts_total{webhook="other",outcome="failed"} 2"#
            ),
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
            classic.contains("# TYPE hookfleet_delivery_attempts_total counter"),
            "{classic}"
        );
        assert!(
            classic.contains("# HELP hookfleet_delivery_attempts_total Attempts"),
            "{classic}"
        );
        assert!(
            classic.contains("# TYPE hookfleet_in_flight gauge"),
            "{classic}"
        );
        assert!(!classic.contains("# EOF"), "{classic}");
        assert!(
            classic.contains(
                r#"hookfleet_delivery_attempts_total{webhook="w",outcome="delivered"} 1"#
            ),
            "{classic}"
        );
    }

    /// The old name counts the same attempts, marked deprecated, until it
    /// is removed.
    #[test]
    fn the_deprecated_name_counts_the_same_attempts() {
        let m = Metrics::new();
        m.export(Role::Worker);
        m.delivery("w", "failed");
        m.delivery("w", "failed");
        let text = m.encode();
        for name in [
            "hookfleet_delivery_attempts_total",
            "hookfleet_deliveries_total",
        ] {
            let line = format!(r#"{name}{{webhook="w",outcome="failed"}} 2"#);
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
        assert!(
            text.contains("# HELP hookfleet_deliveries Deprecated: the same as hookfleet_delivery_attempts_total"),
            "{text}"
        );
    }
}
