//! `hookfleet console`: the management API under `/api/v1` (JSON, described
//! by `/api/v1/openapi.json`) and server-rendered pages for people, over the
//! same operator actions the CLI calls (`hookfleet-admin`).
//!
//! Access:
//! - `--token` (full access) and `--read-token` (read-only), each at least
//!   [`MIN_TOKEN_LEN`] characters. The API takes them as
//!   `Authorization: Bearer T`; the pages ask for one once and keep a signed
//!   session cookie (HttpOnly, SameSite=Strict) for [`SESSION_LIFE`].
//! - With no token at all the console serves loopback only, to whoever can
//!   reach it there (as the ingest does).
//! - Every action is a POST (PATCH, DELETE); the pages' forms carry a CSRF
//!   token bound to the session, and a POST without it is refused. The
//!   API's bearer token is not sent by browsers on their own, so it needs
//!   none; another site's `Origin` is refused everywhere.
//! - Every action is logged at info with the name of the token that did it
//!   (`token` or `loopback`; a `read-token` may not act).
//! - Secrets are never shown, nor header values (the views of
//!   [`hookfleet_admin::views`]); a read-only viewer sees less (`redact`).
//!
//! # Layout
//! - `api`: the `/api/v1` routes (one table, held against the OpenAPI
//!   document `openapi` derives from the handlers).
//! - `act`: the console's side of every action, for the API and the pages'
//!   buttons alike: the role check and the audit line around
//!   `hookfleet_admin`'s action, and the API's answer.
//! - `read`: what the API and the pages both show, as the caller may see
//!   it, and the delivery list's filters.
//! - `pages`: the HTML pages (`templates/`, `static/`), server-rendered,
//!   and their buttons (one table of page actions, one handler).
//! - `auth`: tokens, the session cookie, CSRF tokens and signed notices.
//! - `redact`: what a read-only viewer is not shown.
//! - this file: the router, the guard against other sites, request time
//!   limits, and the listener.

mod act;
mod answers;
mod api;
mod auth;
mod openapi;
mod pages;
mod read;
mod redact;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};

use hookfleet_core::domain::RetrySchedule;
use hookfleet_core::queue::RedisQueue;
use hookfleet_core::request::NetworkPolicy;
use hookfleet_core::runtime::http::{Exposure, ServeError, ServeLimits};
use hookfleet_core::store::Store;
use hookfleet_producer::{Producer, ProducerConfig};

pub use api::api_routes;
pub use auth::SESSION_LIFE;
pub use hookfleet_core::runtime::http::MIN_TOKEN_LEN;
pub use openapi::document as openapi_document;

/// Connections served at once: people and scripts, not a fleet.
pub const MAX_CONNECTIONS: usize = 128;

/// Connections one client (an address, an IPv6 /64; a proxy in front
/// counts as one) is served at once: a quarter, so no one client, with a
/// token or without, can take the console from everyone else.
pub const MAX_CONNECTIONS_PER_CLIENT: usize = MAX_CONNECTIONS / 4;

/// How long a caller has to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a stopping console waits for requests in progress (a bulk
/// replay of many rows takes seconds).
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(30);

/// The most rows one list returns. A delivery carries its request body
/// (at most 1 MiB) and the receiver's answer (bounded too): 200 of them
/// keep a page's memory to a few hundred MiB in the worst case, a few MiB
/// in the usual one. Scripts walk further with `before`.
pub const MAX_LIST_LIMIT: i64 = 200;

/// The longest a delivery list's query may run before Postgres stops it:
/// a filter no index serves (an event name, a status that matches nothing
/// on a large table) must not load the database the workers write to.
pub const LIST_STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);

/// Rows a list returns when the caller does not say.
pub const DEFAULT_LIST_LIMIT: i64 = 50;

/// Bytes of a request body the console reads: a webhook definition with a
/// body template (at most 64 KiB), a condition and a sample document, with
/// room; a pause reason or a login form is far less.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

const EXPOSURE: Exposure = Exposure {
    risk: "replay, pause and read every delivery",
    token_flag: "--token (HOOKFLEET_CONSOLE_TOKEN) or --read-token (HOOKFLEET_CONSOLE_READ_TOKEN)",
};

/// What `hookfleet console` serves with.
pub struct Console {
    pub store: Store,
    pub queue: RedisQueue,
    /// How long a replayed row's in-flight key lives (the queue grace).
    pub key_ttl: Duration,
    /// Where webhooks may send (HOOKFLEET_ALLOWED_NETWORKS): a definition
    /// made through the API is checked as the CLI checks it.
    pub policy: NetworkPolicy,
    /// Test sends: an event emitted to one webhook, by the producer's own
    /// path (its condition, rendering, row and job).
    producer: Producer,
    tokens: auth::Tokens,
}

impl Console {
    pub fn new(
        store: Store,
        queue: RedisQueue,
        key_ttl: Duration,
        policy: NetworkPolicy,
        token: Option<String>,
        read_token: Option<String>,
    ) -> Console {
        let producer = Producer::new(
            store.clone(),
            queue.clone(),
            ProducerConfig {
                // Judges only a test workflow_transition's one attempt (no
                // retry follows it); the workers keep the retry schedule.
                schedule: RetrySchedule::default(),
                queue_grace: key_ttl,
                policy: Arc::new(policy.clone()),
            },
        );
        Console {
            store,
            queue,
            key_ttl,
            policy,
            producer,
            tokens: auth::Tokens::new(token, read_token),
        }
    }
}

/// A refusal or failure as the API returns it: a status and
/// `{"error": "..."}`; the pages show the same message.
#[derive(Debug)]
pub struct ApiError(pub StatusCode, pub String);

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError(StatusCode::BAD_REQUEST, message.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

impl From<hookfleet_core::StoreError> for ApiError {
    fn from(e: hookfleet_core::StoreError) -> ApiError {
        use hookfleet_core::StoreError as E;
        let status = match &e {
            E::NotFound(_) => StatusCode::NOT_FOUND,
            E::Refused(hookfleet_core::error::Refusal::TooSlow(_)) => StatusCode::GATEWAY_TIMEOUT,
            E::Refused(_) => StatusCode::CONFLICT,
            E::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(status, e.to_string())
    }
}

impl From<hookfleet_core::QueueError> for ApiError {
    fn from(e: hookfleet_core::QueueError) -> ApiError {
        ApiError(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
    }
}

impl From<hookfleet_admin::DefinitionError> for ApiError {
    fn from(e: hookfleet_admin::DefinitionError) -> ApiError {
        use hookfleet_admin::DefinitionError as E;
        match e {
            E::Invalid(v) => ApiError(StatusCode::BAD_REQUEST, v.to_string()),
            E::Store(e) => e.into(),
        }
    }
}

impl From<hookfleet_producer::EmitToError> for ApiError {
    fn from(e: hookfleet_producer::EmitToError) -> ApiError {
        use hookfleet_producer::{EmitError, EmitToError as E};
        let status = match e {
            E::Store(e) | E::Emit(EmitError::Store(e)) => return e.into(),
            E::Disabled(_) => StatusCode::CONFLICT,
            E::Emit(EmitError::Invalid(_)) => StatusCode::BAD_REQUEST,
            E::Emit(EmitError::Unavailable(_)) => StatusCode::SERVICE_UNAVAILABLE,
            E::Emit(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(status, e.to_string())
    }
}

impl From<hookfleet_admin::OpsError> for ApiError {
    fn from(e: hookfleet_admin::OpsError) -> ApiError {
        use hookfleet_admin::OpsError as E;
        let status = match e {
            E::Store(e) => return e.into(),
            E::Queue(e) => return e.into(),
            E::NoDeadLetter(_) => StatusCode::NOT_FOUND,
            E::BulkStatus(_) | E::NoKeyToSealWith | E::DecryptWithKey => StatusCode::BAD_REQUEST,
            E::Stopped(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(status, e.to_string())
    }
}

/// The console's routes: the API, the pages, and the probes (`/healthz`
/// answers while the process serves; `/livez` and `/readyz` as every
/// hookfleet process has them: the runtime ticks, Postgres and Redis
/// answer).
pub fn router(console: Arc<Console>) -> Router {
    let probe =
        hookfleet_core::runtime::observe::Probe::new(console.store.clone(), console.queue.clone());
    Router::new()
        .merge(api::router())
        .merge(pages::router())
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .merge(hookfleet_core::runtime::observe::probe_routes(probe, false).with_state(()))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(console.clone(), guard))
        .layer(axum::middleware::from_fn(timed))
        .with_state(console)
}

/// The longest a request may take, reading its body included: a caller
/// that sends headers and then trickles (or never sends) its body gives up
/// its connection. Resume and bulk replay go on in the background past it.
/// Under [`SHUTDOWN_WAIT`], so a stopping console sees every request end.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(25);

/// Logs each request at debug with its status and the server's time (the
/// figure the console's performance notes quote), and ends it after
/// [`REQUEST_TIMEOUT`]. The path is logged without its query, which may
/// name documents. Adds the security headers every answer carries.
async fn timed(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    let client = hookfleet_core::runtime::http::client_of(request.extensions(), request.headers());
    let started = std::time::Instant::now();
    let mut response = match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(r) => r,
        Err(_) => ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the request took longer than {}s",
                REQUEST_TIMEOUT.as_secs()
            ),
        )
        .into_response(),
    };
    // A refusal made by axum itself (a body over the limit, a bad form) is
    // plain text: the API answers JSON.
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE && path.starts_with("/api/") {
        response = ApiError(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is over {MAX_BODY_BYTES} bytes"),
        )
        .into_response();
    }
    // An API refusal for want of a token names the scheme (RFC 6750).
    if response.status() == StatusCode::UNAUTHORIZED && path.starts_with("/api/") {
        response.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer realm=\"hookfleet\""),
        );
    }
    // Every answer, page or JSON: nothing is sniffed, framed, or loaded from
    // elsewhere (the pages use only the console's own stylesheet and script).
    let headers = response.headers_mut();
    headers.insert(
        axum::http::header::X_CONTENT_TYPE_OPTIONS,
        axum::http::HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        axum::http::header::X_FRAME_OPTIONS,
        axum::http::HeaderValue::from_static("DENY"),
    );
    headers.insert(
        axum::http::header::CONTENT_SECURITY_POLICY,
        axum::http::HeaderValue::from_static(
            "default-src 'self'; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'",
        ),
    );
    // same-origin, not no-referrer: with no-referrer Chromium sends
    // `Origin: null` on the console's own form posts, which the guard
    // must refuse.
    headers.insert(
        axum::http::header::REFERRER_POLICY,
        axum::http::HeaderValue::from_static("same-origin"),
    );
    let ms = (started.elapsed().as_secs_f64() * 10_000.0).round() / 10.0;
    let status = response.status().as_u16();
    if matches!(method, axum::http::Method::GET | axum::http::Method::HEAD) {
        tracing::debug!(%method, path, status, ms, client, "console request");
    } else {
        // Every write, answered or refused, with where it came from: beside
        // the action's own line (which names the token), the audit trail.
        tracing::info!(%method, path, status, ms, client, "console request");
    }
    response
}

/// Refuses what a browser does on another site's behalf, and a NUL in the
/// path or query, before any body is read:
/// - a request that changes something (not GET or HEAD) whose `Origin`
///   names another origin than the one asked (a form or script elsewhere
///   posting here; curl and scripts send no Origin);
/// - on a console without tokens (loopback only), a `Host` that is not a
///   loopback address or `localhost`: a page that rebinds its own name to
///   127.0.0.1 reads nothing.
async fn guard(
    axum::extract::State(console): axum::extract::State<Arc<Console>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // Postgres's text refuses NUL: a path or query naming one (a webhook,
    // a document, an event id) is the caller's mistake, said as such, never
    // a 500 carrying the database's words.
    if request
        .uri()
        .path_and_query()
        .is_some_and(|pq| pq.as_str().to_ascii_lowercase().contains("%00"))
    {
        return ApiError::bad_request("a NUL character (%00) is not allowed in the path or query")
            .into_response();
    }
    let headers = request.headers();
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if console.tokens.is_open() && !loopback_host(host) {
        return ApiError(
            StatusCode::MISDIRECTED_REQUEST,
            "this console has no token and answers only to a loopback host name".into(),
        )
        .into_response();
    }
    let safe = matches!(
        *request.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    if !safe {
        if let Some(origin) = headers.get(axum::http::header::ORIGIN) {
            // Behind a proxy that rewrites Host, the browser's origin is the
            // proxy's: X-Forwarded-Host names it. A browser that says the
            // request is same-origin (Sec-Fetch-Site) is believed.
            let forwarded = headers
                .get("x-forwarded-host")
                .and_then(|h| h.to_str().ok())
                .and_then(|h| h.split(',').next())
                .map(str::trim);
            let same_site = headers
                .get("sec-fetch-site")
                .is_some_and(|v| v.as_bytes() == b"same-origin");
            let same = same_site
                || origin
                    .to_str()
                    .ok()
                    .and_then(|o| o.split_once("://"))
                    .is_some_and(|(_, authority)| {
                        authority.eq_ignore_ascii_case(host)
                            || forwarded.is_some_and(|f| authority.eq_ignore_ascii_case(f))
                    });
            if !same {
                tracing::warn!("console refused a cross-origin request");
                return ApiError(
                    StatusCode::FORBIDDEN,
                    "a request from another origin is refused".into(),
                )
                .into_response();
            }
        }
    }
    next.run(request).await
}

/// `127.0.0.1:8490`, `[::1]:8490`, `localhost:8490` (the port is any).
fn loopback_host(host: &str) -> bool {
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Checks the address and tokens before anything listens.
pub fn check_exposure(
    listen: SocketAddr,
    token: Option<&str>,
    read_token: Option<&str>,
) -> Result<(), ServeError> {
    if let (Some(t), Some(r)) = (token, read_token) {
        if t.trim() == r.trim() {
            return Err(ServeError::SameTokens);
        }
    }
    hookfleet_core::runtime::http::check_exposure(listen, &[token, read_token], EXPOSURE)
}

/// Serves until `shutdown` resolves. `on_listen` gets the address bound
/// (port 0 picks a free one).
pub async fn serve(
    listen: SocketAddr,
    console: Console,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    on_listen: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let (listener, local) = hookfleet_core::runtime::http::bind(listen).await?;
    tracing::info!(
        addr = %local,
        full_token = console.tokens.has_full(),
        read_token = console.tokens.has_read(),
        "console listening"
    );
    on_listen(local);
    let limits = ServeLimits {
        max_connections: MAX_CONNECTIONS,
        max_per_client: MAX_CONNECTIONS_PER_CLIENT,
        header_read_timeout: HEADER_READ_TIMEOUT,
        shutdown_wait: SHUTDOWN_WAIT,
    };
    hookfleet_core::runtime::http::serve(listener, router(Arc::new(console)), limits, shutdown)
        .await;
    Ok(())
}
