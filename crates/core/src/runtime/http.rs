//! What every hookfleet HTTP listener shares (the ingest, the console, the
//! metrics): a bounded accept loop with a header-read timeout, a cap on
//! connections in all and from any one client, and a graceful stop;
//! bearer-token checks that take the same time whatever was given, a
//! budget of wrong tokens per client, and the rule that a listener beyond
//! loopback needs a token worth guessing.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The shortest token accepted: guessing 16 random characters is out of
/// reach; a word is not.
pub const MIN_TOKEN_LEN: usize = 16;

/// The least a token's characters may say (their Shannon entropy times
/// their count, in bits): a random token of 16 letters and digits says
/// about 60; `aaaa…`, `abab…` or `0000000011111111` say 32 or less.
pub(crate) const MIN_TOKEN_BITS: f64 = 48.0;

/// Wrong tokens one client (an IPv4 address, an IPv6 /64) may send in a
/// [`GUESS_WINDOW`]: a person mistyping or a client misconfigured sends a
/// few; guessing needs billions.
pub const GUESS_BUDGET: u32 = 10;

/// The window [`GUESS_BUDGET`] counts in; a client over it is refused
/// (429) until its window ends, right token or not.
pub(crate) const GUESS_WINDOW: Duration = Duration::from_secs(60);

/// Clients whose wrong tokens are counted at once: bounds the memory a
/// crowd of addresses can make the listener spend (expired ones are
/// dropped first; past it a newcomer is not counted).
pub(crate) const MAX_GUESSERS: usize = 100_000;

/// How a listener bounds its callers.
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// Connections served at once; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// Connections from one client (an IPv4 address, an IPv6 /64) served at
    /// once; more are closed as they come, so no one client, token or not,
    /// can hold every connection.
    pub max_per_client: usize,
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
    #[error("the token's characters are too few or too repetitive to be worth guessing; use a random one (e.g. openssl rand -hex 32)")]
    WeakToken,
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
        if token_bits(t.trim()) < MIN_TOKEN_BITS {
            return Err(ServeError::WeakToken);
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

/// What a token's characters say, in bits: the Shannon entropy of their
/// distribution times their count (see [`MIN_TOKEN_BITS`]).
pub(crate) fn token_bits(token: &str) -> f64 {
    let mut counts: HashMap<char, usize> = HashMap::new();
    for c in token.chars() {
        *counts.entry(c).or_default() += 1;
    }
    let n = token.chars().count() as f64;
    let per_char: f64 = counts
        .values()
        .map(|&k| {
            let p = k as f64 / n;
            -p * p.log2()
        })
        .sum();
    per_char * n
}

/// The client a connection or a request counts against: its IPv4
/// address, or the /64 of its IPv6 address (one host is handed a /64).
pub(crate) fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

/// Wrong tokens per client (see [`GUESS_BUDGET`]): a listener asks
/// [`Guesses::refused`] before it checks a token, and tells
/// [`Guesses::wrong`] of each wrong one. A fixed window per client (one
/// count and its start), which lets a client that is over its budget be
/// refused before its token is looked at: a guess is never judged.
#[derive(Debug, Default)]
pub struct Guesses {
    clients: Mutex<HashMap<IpAddr, Strikes>>,
}

#[derive(Debug, Clone, Copy)]
struct Strikes {
    since: Instant,
    wrong: u32,
}

impl Guesses {
    /// How long `peer` must still wait, if it has used its budget.
    pub fn refused(&self, peer: IpAddr) -> Option<Duration> {
        let clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let strikes = clients.get(&client_key(peer))?;
        let left = GUESS_WINDOW.checked_sub(strikes.since.elapsed())?;
        (strikes.wrong >= GUESS_BUDGET).then_some(left)
    }

    /// Counts a wrong (or missing) token from `peer`.
    pub fn wrong(&self, peer: IpAddr) {
        let key = client_key(peer);
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if !clients.contains_key(&key) && clients.len() >= MAX_GUESSERS {
            clients.retain(|_, s| s.since.elapsed() < GUESS_WINDOW);
            if clients.len() >= MAX_GUESSERS {
                return;
            }
        }
        let strikes = clients.entry(key).or_insert(Strikes {
            since: Instant::now(),
            wrong: 0,
        });
        if strikes.since.elapsed() >= GUESS_WINDOW {
            *strikes = Strikes {
                since: Instant::now(),
                wrong: 0,
            };
        }
        strikes.wrong = strikes.wrong.saturating_add(1);
    }
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
    let per_client = Arc::new(PerClient::default());
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
        let Some(held) = per_client.enter(peer.ip(), limits.max_per_client.max(1)) else {
            // This client holds its share already: closed at once, its
            // permit back for others.
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(
            app.clone().layer(axum::Extension(Peer(peer))),
        );
        let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        let watched = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = watched.await;
            drop(held);
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

/// Connections open per client, for [`ServeLimits::max_per_client`].
#[derive(Debug, Default)]
struct PerClient(Mutex<HashMap<IpAddr, usize>>);

/// One connection's place in [`PerClient`]; dropping it gives it back.
struct ClientSlot {
    clients: Arc<PerClient>,
    key: IpAddr,
}

impl PerClient {
    fn enter(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<ClientSlot> {
        let key = client_key(ip);
        let mut open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(key).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            clients: self.clone(),
            key,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.clients.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repetitive_tokens_are_too_weak_and_random_ones_are_not() {
        for weak in [
            "aaaaaaaaaaaaaaaa",
            "abababababababab",
            "abcdabcdabcdabcd",
            "0000000011111111",
        ] {
            assert!(token_bits(weak) < MIN_TOKEN_BITS, "{weak}");
        }
        for strong in [
            "full-token-0123456789abcdef",
            "q7Zk2pL9xR4mT1vB",
            "3f9a1c0b7e5d2a8c4b6e0f1d9c7a5b3e",
        ] {
            assert!(token_bits(strong) >= MIN_TOKEN_BITS, "{strong}");
        }
    }

    #[test]
    fn a_client_over_its_budget_of_wrong_tokens_is_refused_and_others_are_not() {
        let guesses = Guesses::default();
        let guesser: IpAddr = "203.0.113.7".parse().unwrap();
        let other: IpAddr = "203.0.113.8".parse().unwrap();
        for _ in 0..GUESS_BUDGET {
            assert!(guesses.refused(guesser).is_none());
            guesses.wrong(guesser);
        }
        let wait = guesses.refused(guesser).expect("over its budget");
        assert!(wait <= GUESS_WINDOW);
        assert!(guesses.refused(other).is_none());
    }

    #[test]
    fn an_ipv6_client_counts_by_its_slash_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(c));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(client_key(mapped), "192.0.2.1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn one_client_holds_at_most_its_share_of_connections() {
        let clients = Arc::new(PerClient::default());
        let ip: IpAddr = "198.51.100.1".parse().unwrap();
        let held: Vec<_> = (0..3)
            .map(|_| clients.enter(ip, 3).expect("a slot"))
            .collect();
        assert!(clients.enter(ip, 3).is_none());
        assert!(clients.enter("198.51.100.2".parse().unwrap(), 3).is_some());
        drop(held);
        assert!(clients.enter(ip, 3).is_some());
    }
}
