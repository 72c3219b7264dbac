//! `hookfleet-producer serve`: an HTTP ingest for applications that are not
//! written in Rust. `POST /v1/events` takes one event, `POST /v1/events/batch`
//! a JSON array emitted as one [`Batch`]; `GET /healthz` answers `ok`.
//!
//! Whoever can reach it can make hookfleet sign events with real secrets, so
//! it is locked down: it refuses to start on a non-loopback address without
//! a non-empty token; a caller gets [`HEADER_READ_TIMEOUT`] to send its
//! headers and [`BODY_READ_TIMEOUT`] its body; at most [`MAX_CONNECTIONS`]
//! connections are served (more wait in the kernel's backlog); at most
//! [`BATCHES_IN_PROGRESS`] batches are read and parsed at once, and a batch
//! is split into raw events (sized) before any is parsed, so memory per
//! request stays near its size; callers get generic errors, the details go
//! to the log.
//!
//! Status codes: 202 recorded (and queued, or to be swept); 400 the event is
//! refused; 401 a token is configured and was not given; 413 too large;
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

/// Connections served at once; more wait in the kernel's backlog. Callers
/// are applications with a connection pool each, not browsers.
pub const MAX_CONNECTIONS: usize = 512;

/// Batches read and parsed at once: each holds up to 32 MiB and its events
/// parsed, so this bounds the ingest's memory, while single events (4 MiB at
/// most) are not held back.
pub const BATCHES_IN_PROGRESS: usize = 2;

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
    batches: Semaphore,
    body_read_timeout: Duration,
}

/// Why the ingest will not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("refusing to serve on {0} without a token: anyone who can reach it could make hookfleet sign events; set --token (HOOKFLEET_INGEST_TOKEN) or listen on a loopback address")]
    NoToken(SocketAddr),
    #[error("the token is empty; give a real one (or none, on a loopback address)")]
    EmptyToken,
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

/// Compares without an early exit, so the time taken says nothing of the token.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn authorised(ingest: &Ingest, headers: &HeaderMap) -> bool {
    let Some(token) = &ingest.token else {
        return true;
    };
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    same(given.as_bytes(), token.as_bytes())
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
        Err(EmitError::Invalid(msg)) => error(StatusCode::BAD_REQUEST, msg),
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
    if !authorised(&ingest, request.headers()) {
        return error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
    }
    next.run(request).await
}

async fn one(State(ingest): State<Arc<Ingest>>, request: Request) -> Response {
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
    let event: Event = match serde_json::from_slice(&body) {
        Ok(e) => e,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the event is not valid JSON of the expected shape: {e}"),
            )
        }
    };
    respond(ingest.producer.emit(event).await)
}

async fn many(State(ingest): State<Arc<Ingest>>, request: Request) -> Response {
    // Waiting here leaves the body in the socket, not in memory.
    let Ok(_permit) = ingest.batches.acquire().await else {
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
    let mut batch = Batch::new();
    for (i, r) in raw.iter().enumerate() {
        match serde_json::from_str::<Event>(r.get()) {
            Ok(e) => batch.push(e),
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("event {i}: {e}")),
        }
    }
    drop(raw);
    drop(body);
    respond(ingest.producer.emit_batch(batch).await)
}

/// The ingest's routes.
pub fn router(producer: Arc<Producer>, token: Option<String>, limits: IngestLimits) -> Router {
    let ingest = Arc::new(Ingest {
        producer,
        token,
        batches: Semaphore::new(BATCHES_IN_PROGRESS),
        body_read_timeout: limits.body_read_timeout,
    });
    Router::new()
        .route("/v1/events", post(one))
        .route("/v1/events/batch", post(many))
        .route_layer(axum::middleware::from_fn_with_state(
            ingest.clone(),
            require_token,
        ))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(ingest)
}

/// Checks the address and token before anything listens.
pub fn check_exposure(listen: SocketAddr, token: Option<&str>) -> Result<(), ServeError> {
    match token {
        Some(t) if t.trim().is_empty() => Err(ServeError::EmptyToken),
        None if !listen.ip().is_loopback() => Err(ServeError::NoToken(listen)),
        _ => Ok(()),
    }
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
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| ServeError::Listen(listen, e))?;
    let local = listener
        .local_addr()
        .map_err(|e| ServeError::Listen(listen, e))?;
    tracing::info!(addr = %local, authenticated = token.is_some(), "ingest listening");
    let app = router(producer, token, limits);
    let connections = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = connections.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = &mut shutdown => break,
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, say: wait, do not spin.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        let watched = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = watched.await;
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
