//! `hookfleet-producer serve`: an HTTP ingest for applications that are not
//! written in Rust. `POST /v1/events` takes one event, `POST /v1/events/batch`
//! a JSON array emitted as one [`Batch`]; `GET /healthz` answers `ok`.
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

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::emit::{Batch, EmitError, Event, Producer, MAX_DOCUMENT_BYTES};

/// Events per batch request: one transaction of a few thousand rows at most.
pub const MAX_BATCH_EVENTS: usize = 1000;

/// Bytes per batch request.
pub const MAX_BATCH_BYTES: usize = 32 * 1024 * 1024;

struct Ingest {
    producer: Arc<Producer>,
    token: Option<String>,
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

async fn one(State(ingest): State<Arc<Ingest>>, body: axum::body::Bytes) -> Response {
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

async fn many(State(ingest): State<Arc<Ingest>>, body: axum::body::Bytes) -> Response {
    let events: Vec<serde_json::Value> = match serde_json::from_slice(&body) {
        Ok(e) => e,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("expected a JSON array of events: {e}"),
            )
        }
    };
    if events.len() > MAX_BATCH_EVENTS {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "{} events in one batch; at most {MAX_BATCH_EVENTS}",
                events.len()
            ),
        );
    }
    let mut batch = Batch::new();
    for (i, raw) in events.into_iter().enumerate() {
        if raw.to_string().len() > MAX_DOCUMENT_BYTES {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("event {i} is over {MAX_DOCUMENT_BYTES} bytes"),
            );
        }
        match serde_json::from_value::<Event>(raw) {
            Ok(e) => batch.push(e),
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("event {i}: {e}")),
        }
    }
    respond(ingest.producer.emit_batch(batch).await)
}

/// The ingest's routes.
pub fn router(producer: Arc<Producer>, token: Option<String>) -> Router {
    let ingest = Arc::new(Ingest { producer, token });
    Router::new()
        .route(
            "/v1/events",
            post(one).layer(DefaultBodyLimit::max(MAX_DOCUMENT_BYTES)),
        )
        .route(
            "/v1/events/batch",
            post(many).layer(DefaultBodyLimit::max(MAX_BATCH_BYTES)),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            ingest.clone(),
            require_token,
        ))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(ingest)
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listen: SocketAddr,
    producer: Arc<Producer>,
    token: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(addr = %listener.local_addr()?, "ingest listening");
    axum::serve(listener, router(producer, token))
        .with_graceful_shutdown(shutdown)
        .await
}
