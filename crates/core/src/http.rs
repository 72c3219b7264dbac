//! What every hookfleet HTTP listener shares (the ingest, the console):
//! a bounded accept loop with a header-read timeout and a graceful stop,
//! bearer-token checks that take the same time whatever was given, and the
//! rule that a listener beyond loopback needs a token.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The shortest token accepted: guessing 16 random characters is out of
/// reach; a word is not.
pub const MIN_TOKEN_LEN: usize = 16;

/// How a listener bounds its callers.
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// Connections served at once; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// How long a caller has to send a request's headers.
    pub header_read_timeout: Duration,
    /// How long a stopping listener waits for requests in progress.
    pub shutdown_wait: Duration,
}

/// Why a listener will not start. `what` names it and its token's flag.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("refusing to serve on {0} without a token: anyone who can reach it could {1}; set {2} or listen on a loopback address")]
    NoToken(SocketAddr, &'static str, &'static str),
    #[error("the token is empty; give a real one (or none, on a loopback address)")]
    EmptyToken,
    #[error("the token is shorter than {MIN_TOKEN_LEN} characters; use a random one (e.g. openssl rand -hex 32)")]
    ShortToken,
    #[error("the read-only token is the full token: give them different values")]
    SameTokens,
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
}

/// What an open listener would let anyone do, and the flag that closes it
/// (for [`ServeError::NoToken`]).
#[derive(Debug, Clone, Copy)]
pub struct Exposure {
    pub risk: &'static str,
    pub token_flag: &'static str,
}

/// Checks the address and tokens before anything listens: every token
/// given is long enough, and a non-loopback address has at least one.
pub fn check_exposure(
    listen: SocketAddr,
    tokens: &[Option<&str>],
    exposure: Exposure,
) -> Result<(), ServeError> {
    for t in tokens.iter().flatten() {
        if t.trim().is_empty() {
            return Err(ServeError::EmptyToken);
        }
        if t.trim().chars().count() < MIN_TOKEN_LEN {
            return Err(ServeError::ShortToken);
        }
    }
    if tokens.iter().all(Option::is_none) && !listen.ip().is_loopback() {
        return Err(ServeError::NoToken(
            listen,
            exposure.risk,
            exposure.token_flag,
        ));
    }
    Ok(())
}

/// Compares digests without an early exit, so the time taken says nothing
/// of the token, its length included.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    use sha2::{Digest, Sha256};
    let (a, b) = (Sha256::digest(a), Sha256::digest(b));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// The bearer token of a request's Authorization header ("" if none).
pub fn bearer(headers: &HeaderMap) -> &str {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim())
        .unwrap_or("")
}

/// The address a request's connection came from (a proxy's, behind one),
/// for the logs: handlers find it in the request's extensions.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// Who a request came from, as a log line says it: the peer, and what a
/// proxy in front says in `X-Forwarded-For` (not trusted, only recorded).
pub fn client_of(extensions: &axum::http::Extensions, headers: &HeaderMap) -> String {
    let peer = extensions
        .get::<Peer>()
        .map_or_else(|| "-".to_string(), |p| p.0.to_string());
    match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(f) => format!(
            "{peer} (forwarded for {})",
            f.chars().take(200).collect::<String>()
        ),
        None => peer,
    }
}

/// Binds `listen` (port 0: any free port), returning the listener and the
/// address it got.
pub async fn bind(listen: SocketAddr) -> Result<(TcpListener, SocketAddr), ServeError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| ServeError::Listen(listen, e))?;
    let local = listener
        .local_addr()
        .map_err(|e| ServeError::Listen(listen, e))?;
    Ok((listener, local))
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets requests
/// in progress finish (at most `limits.shutdown_wait`).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
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
        let (stream, peer) = tokio::select! {
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
        let service = hyper_util::service::TowerToHyperService::new(
            app.clone().layer(axum::Extension(Peer(peer))),
        );
        let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        let watched = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = watched.await;
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_wait, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in progress after the shutdown wait; stopping anyway");
    }
}
