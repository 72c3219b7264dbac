//! What an operator watches: the metrics every long-running process keeps
//! (`/metrics`, Prometheus/OpenMetrics text by the official client), and its
//! health (`/livez`: its loop makes progress; `/readyz`: Postgres and Redis
//! answer), served on `--metrics-listen`.
//!
//! The metrics are one process-wide set ([`metrics`]), recorded whether or
//! not anything scrapes them (a few atomic adds per delivery). Labels are
//! bounded: webhook names past a few hundred are counted under `other`;
//! outcomes, sources and queues are few by construction.
//!
//! A label value is written escaped: the official client
//! writes them raw, so a webhook named `Orders "EU"` would otherwise make
//! the whole scrape unparseable (and a crafted name could forge samples).
//! `/metrics` answers in the format the scraper asks for: OpenMetrics when
//! its `Accept` names it (Prometheus does), else the classic text format
//! (`text/plain; version=0.0.4`) that `promtool` and older parsers read.
//!
//! - `metrics`: the metrics, their labels and both text formats.
//! - `health`: `/livez` and `/readyz`.
//! - this file: the routes and the listener.

mod health;
mod metrics;

use std::net::SocketAddr;
use std::time::Duration;

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::runtime::http::ServeLimits;
use crate::runtime::Shutdown;

pub(crate) use health::{livez, readyz};
pub use health::{progress, Probe, Progress};
pub use metrics::{
    metrics, DeliveryLabels, InFlightGuard, Metrics, QueueLabels, Role, SourceLabels,
    WebhookLabels, METRIC_NAMES, UNKNOWN_WEBHOOK,
};

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
