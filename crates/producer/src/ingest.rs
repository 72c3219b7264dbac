//! `hookfleet-producer serve`: an HTTP ingest for applications that are not
//! written in Rust. `POST /v1/events` takes one event, `POST /v1/events/batch`
//! a JSON array emitted as one [`Batch`]; `GET /healthz` answers `ok`,
//! `GET /livez` and `GET /readyz` as every process's probes do (readiness
//! asks Postgres and Redis), `GET /metrics` (behind the token) the metrics.
//!
//! Whoever can reach it can make hookfleet sign events with real secrets, so
//! it is locked down: it refuses to start on a non-loopback address without
//! a non-empty token; a caller gets [`HEADER_READ_TIMEOUT`] to send its
//! headers and [`BODY_READ_TIMEOUT`] its body; at most [`MAX_CONNECTIONS`]
//! connections are served (more wait in the kernel's backlog), a quarter of
//! them to any one client; a client that sends [`hookfleet_core::runtime::http::GUESS_BUDGET`] wrong tokens
//! in a minute is refused (429) for the rest of it; requests in
//! progress share a memory budget ([`MEMORY_BUDGET_MIB`]), each reserving
//! what it may need before its body is read; a body is counted (bytes, JSON
//! values) before it is parsed, and a batch is split into raw events first;
//! callers get generic errors, the details go to the log.
//!
//! Status codes: 202 recorded (and queued, or to be swept); 400 the event is
//! refused; 401 a token is configured and was not given; 413 too large;
//! 429 too many wrong tokens from this client;
//! 422 a workflow_transition request could not be built (recorded Exhausted);
//! 502 a workflow_transition delivery failed (recorded Exhausted); the body of
//! both is the report; 500 a workflow_transition was sent but its outcome
//! could not be recorded, or the database refused the emit (nothing recorded;
//! retrying will not help); 503 Postgres is unavailable (nothing recorded;
//! retry later).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::Semaphore;

use hookfleet_core::runtime::http::{bearer, same_secret, Exposure, Guesses, Peer, ServeLimits};
use hookfleet_core::runtime::trace;

use crate::emit::{Batch, EmitError, Event, Producer, MAX_DOCUMENT_BYTES};

/// Events per batch request: one transaction of a few thousand rows at most.
pub const MAX_BATCH_EVENTS: usize = 1000;

/// Bytes per batch request.
pub const MAX_BATCH_BYTES: usize = 32 * 1024 * 1024;

/// How long a caller has to send a request's headers: a client on a slow
/// link needs milliseconds; one that trickles them is holding a connection.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a caller has to send a request's body: 32 MiB at 1 MiB/s, the
/// largest batch on a slow link.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

pub use hookfleet_core::runtime::http::MIN_TOKEN_LEN;

/// How long a stopping ingest waits for requests in progress: longer than a
/// body read and an emit take.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(60);

/// Connections served at once; more wait in the kernel's backlog. Callers
/// are applications with a connection pool each, not browsers.
pub const MAX_CONNECTIONS: usize = 512;

/// The memory the ingest lets requests in progress take (MiB), shared by
/// single events and batches: each request reserves what it may need before
/// its body is read (more wait, their bodies still in the socket).
pub const MEMORY_BUDGET_MIB: u32 = 512;

/// What one event's request may need: a 4 MiB body and its values parsed
/// (at most [`MAX_DOCUMENT_VALUES`]).
pub const EVENT_RESERVATION_MIB: u32 = 32;

/// What one batch's request may need: a 32 MiB body and its events parsed
/// (at most [`MAX_BATCH_VALUES`]): two at a time.
pub const BATCH_RESERVATION_MIB: u32 = 192;

/// The most JSON values (numbers, strings, lists, objects…) one event may
/// hold: a document of a few thousand fields and rows has tens of thousands.
/// A parsed value takes tens of bytes where its text took two, so a 4 MiB
/// array of zeros would take 64 MiB in memory; this bounds it.
pub const MAX_DOCUMENT_VALUES: usize = 250_000;

/// The most JSON values one batch may hold in all.
pub const MAX_BATCH_VALUES: usize = 1_000_000;

/// The ingest's limits (flags of `serve`; the constants above by default).
#[derive(Debug, Clone, Copy)]
pub struct IngestLimits {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub max_connections: usize,
}

impl Default for IngestLimits {
    fn default() -> Self {
        IngestLimits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            body_read_timeout: BODY_READ_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

struct Ingest {
    producer: Arc<Producer>,
    token: Option<String>,
    /// Wrong tokens per client.
    guesses: Guesses,
    /// [`MEMORY_BUDGET_MIB`] permits, one per MiB.
    memory: Semaphore,
    body_read_timeout: Duration,
}

/// How many JSON values `raw` holds (counted on its text, before anything is
/// parsed): a value per scalar or container.
pub fn count_values(raw: &str) -> usize {
    let mut values = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut in_scalar = false;
    for b in raw.bytes() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                values += 1;
                in_scalar = false;
            }
            b'[' | b'{' => {
                values += 1;
                in_scalar = false;
            }
            b',' | b':' | b']' | b'}' | b' ' | b'\n' | b'\r' | b'\t' => in_scalar = false,
            _ => {
                if !in_scalar {
                    values += 1;
                    in_scalar = true;
                }
            }
        }
    }
    values
}

pub use hookfleet_core::runtime::http::ServeError;

/// What an open ingest lets anyone do, and the flag that closes it.
const EXPOSURE: Exposure = Exposure {
    risk: "make hookfleet sign events",
    token_flag: "--token (HOOKFLEET_INGEST_TOKEN)",
};

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

fn authorised(ingest: &Ingest, headers: &HeaderMap) -> bool {
    let Some(token) = &ingest.token else {
        return true;
    };
    same_secret(bearer(headers).as_bytes(), token.as_bytes())
}

/// Refuses, by its declared length, a body over `limit` before anything
/// touches it: hyper answers `100 Continue` to a client that asked for it
/// (curl does for large bodies) as soon as a handler first polls the body,
/// so a refusal decided after that reaches a client already uploading, and
/// it may see only the `100`.
fn declared_over(request: &Request, limit: usize) -> Option<Response> {
    let declared = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    (declared > limit as u64).then(|| {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is over {limit} bytes"),
        )
    })
}

/// Reads a request body of at most `limit` bytes within `within`.
async fn read_body(
    body: Body,
    limit: usize,
    within: Duration,
) -> Result<axum::body::Bytes, Response> {
    match tokio::time::timeout(within, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            Err(if too_large {
                error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the request body is over {limit} bytes"),
                )
            } else {
                error(
                    StatusCode::BAD_REQUEST,
                    "the request body could not be read",
                )
            })
        }
        Err(_) => Err(error(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {} s",
                within.as_secs_f64()
            ),
        )),
    }
}

fn respond(result: Result<crate::emit::EmitReport, EmitError>) -> Response {
    match result {
        Ok(report) => (StatusCode::ACCEPTED, Json(report)).into_response(),
        Err(EmitError::Invalid(why)) => error(StatusCode::BAD_REQUEST, why.to_string()),
        Err(EmitError::Unavailable(e)) => {
            tracing::warn!(error = %e, "emit failed; nothing was recorded");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the event could not be processed now; nothing was recorded, try again later",
            )
        }
        Err(EmitError::Store(e)) => {
            // The details (which may name the server) go to the log only.
            tracing::warn!(error = %e, "emit failed; nothing was recorded");
            if e.is_transient() {
                error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the database is unavailable; nothing was recorded, try again later",
                )
            } else {
                error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the event could not be recorded; nothing was recorded",
                )
            }
        }
        Err(e @ EmitError::WorkflowTransition { .. }) => {
            let message = e.to_string();
            let EmitError::WorkflowTransition { report, failures } = e else {
                unreachable!("matched above")
            };
            let status = if failures.iter().any(|f| !f.sent) {
                StatusCode::UNPROCESSABLE_ENTITY
            } else {
                StatusCode::BAD_GATEWAY
            };
            (
                status,
                Json(json!({ "error": message, "failures": failures, "report": report })),
            )
                .into_response()
        }
        Err(e @ EmitError::TransitionUnrecorded { .. }) => {
            tracing::error!(error = %e, "workflow_transition outcome not recorded");
            let EmitError::TransitionUnrecorded {
                report, webhook, ..
            } = e
            else {
                unreachable!("matched above")
            };
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                Json(json!({
                    "error": format!("workflow_transition to {webhook} was sent, but its outcome could not be recorded; it becomes Exhausted and is never sent again"),
                    "report": report,
                })),
            )
                .into_response()
        }
    }
}

/// Refuses a request without the token before its body is read, so an
/// unauthenticated caller cannot make the ingest buffer 32 MiB.
async fn require_token(
    State(ingest): State<Arc<Ingest>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if ingest.token.is_none() {
        return next.run(request).await;
    }
    let peer = request.extensions().get::<Peer>().map(|p| p.0.ip());
    if let Some(wait) = peer.and_then(|p| ingest.guesses.refused(p)) {
        let mut refused = error(
            StatusCode::TOO_MANY_REQUESTS,
            "too many wrong tokens from this address; try again later",
        );
        if let Ok(v) = axum::http::HeaderValue::from_str(&wait.as_secs().max(1).to_string()) {
            refused
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, v);
        }
        return refused;
    }
    if !authorised(&ingest, request.headers()) {
        if let Some(p) = peer {
            ingest.guesses.wrong(p);
        }
        return error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
    }
    next.run(request).await
}

/// The request's W3C `traceparent` header, for events that carry none of
/// their own; a malformed one is ignored (the W3C rule: it starts a new
/// trace, it is not the caller's error).
fn traceparent_of(request: &Request) -> Option<String> {
    request
        .headers()
        .get(trace::TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(trace::normalize_traceparent)
}

async fn one(State(ingest): State<Arc<Ingest>>, request: Request) -> Response {
    if let Some(refused) = declared_over(&request, MAX_DOCUMENT_BYTES) {
        return refused;
    }
    let traceparent = traceparent_of(&request);
    // Waiting here leaves the body in the socket, not in memory.
    let Ok(_reserved) = ingest.memory.acquire_many(EVENT_RESERVATION_MIB).await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the ingest is stopping");
    };
    let body = match read_body(
        request.into_body(),
        MAX_DOCUMENT_BYTES,
        ingest.body_read_timeout,
    )
    .await
    {
        Ok(b) => b,
        Err(r) => return r,
    };
    // Refused, not repaired: the batch endpoint refuses invalid UTF-8 too,
    // and a document replaced character by character is not the one sent.
    let Ok(text) = std::str::from_utf8(&body) else {
        return error(StatusCode::BAD_REQUEST, "the event is not valid UTF-8");
    };
    if count_values(text) > MAX_DOCUMENT_VALUES {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the event holds more than {MAX_DOCUMENT_VALUES} JSON values"),
        );
    }
    let mut event: Event = match serde_json::from_str(text) {
        Ok(e) => e,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the event is not valid JSON of the expected shape: {e}"),
            )
        }
    };
    if event.traceparent.is_none() {
        event.traceparent = traceparent;
    }
    respond(ingest.producer.emit(event).await)
}

async fn many(State(ingest): State<Arc<Ingest>>, request: Request) -> Response {
    if let Some(refused) = declared_over(&request, MAX_BATCH_BYTES) {
        return refused;
    }
    let traceparent = traceparent_of(&request);
    // Waiting here leaves the body in the socket, not in memory.
    let Ok(_reserved) = ingest.memory.acquire_many(BATCH_RESERVATION_MIB).await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the ingest is stopping");
    };
    let body = match read_body(
        request.into_body(),
        MAX_BATCH_BYTES,
        ingest.body_read_timeout,
    )
    .await
    {
        Ok(b) => b,
        Err(r) => return r,
    };
    // Raw slices of the body first: sized and counted before any event is
    // parsed into values.
    let raw: Vec<&RawValue> = match serde_json::from_slice(&body) {
        Ok(e) => e,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("expected a JSON array of events: {e}"),
            )
        }
    };
    if raw.len() > MAX_BATCH_EVENTS {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "{} events in one batch; at most {MAX_BATCH_EVENTS}",
                raw.len()
            ),
        );
    }
    if let Some(i) = raw.iter().position(|r| r.get().len() > MAX_DOCUMENT_BYTES) {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("event {i} is over {MAX_DOCUMENT_BYTES} bytes"),
        );
    }
    let mut values = 0;
    for (i, r) in raw.iter().enumerate() {
        let n = count_values(r.get());
        if n > MAX_DOCUMENT_VALUES {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("event {i} holds more than {MAX_DOCUMENT_VALUES} JSON values"),
            );
        }
        values += n;
    }
    if values > MAX_BATCH_VALUES {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the batch holds more than {MAX_BATCH_VALUES} JSON values"),
        );
    }
    let mut batch = Batch::new();
    for (i, r) in raw.iter().enumerate() {
        match serde_json::from_str::<Event>(r.get()) {
            Ok(mut e) => {
                if e.traceparent.is_none() {
                    e.traceparent = traceparent.clone();
                }
                batch.push(e)
            }
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("event {i}: {e}")),
        }
    }
    drop(raw);
    drop(body);
    respond(ingest.producer.emit_batch(batch).await)
}

/// The ingest's routes.
pub fn router(producer: Arc<Producer>, token: Option<String>, limits: IngestLimits) -> Router {
    let probe = producer.probe();
    let ingest = Arc::new(Ingest {
        producer,
        token,
        guesses: Guesses::default(),
        memory: Semaphore::new(MEMORY_BUDGET_MIB as usize),
        body_read_timeout: limits.body_read_timeout,
    });
    Router::new()
        .route("/v1/events", post(one))
        .route("/v1/events/batch", post(many))
        // Behind the token: the metrics name the webhooks.
        .route(
            "/metrics",
            get(hookfleet_core::runtime::observe::metrics_text),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            ingest.clone(),
            require_token,
        ))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(ingest)
        .merge(hookfleet_core::runtime::observe::probe_routes(probe, false))
}

/// Checks the address and token before anything listens.
pub fn check_exposure(listen: SocketAddr, token: Option<&str>) -> Result<(), ServeError> {
    hookfleet_core::runtime::http::check_exposure(listen, &[token], EXPOSURE)
}

/// Serves until `shutdown` resolves, then lets requests in progress finish.
pub async fn serve(
    listen: SocketAddr,
    producer: Arc<Producer>,
    token: Option<String>,
    limits: IngestLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    check_exposure(listen, token.as_deref())?;
    let (listener, local) = hookfleet_core::runtime::http::bind(listen).await?;
    tracing::info!(addr = %local, authenticated = token.is_some(), "ingest listening");
    let app = router(producer, token, limits);
    let serve_limits = ServeLimits {
        max_connections: limits.max_connections,
        max_per_client: (limits.max_connections / 4).max(1),
        header_read_timeout: limits.header_read_timeout,
        shutdown_wait: SHUTDOWN_WAIT,
    };
    hookfleet_core::runtime::http::serve(listener, app, serve_limits, shutdown).await;
    Ok(())
}
