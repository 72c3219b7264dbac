//! A real HTTP receiver on 127.0.0.1 for tests: it records every request as
//! it arrives, answers from a script (then a default), counts requests in
//! flight, and verifies signatures with its own code, as a receiver using the
//! official libraries would (Frappe: base64 HMAC of the body; Standard
//! Webhooks: `v1,` HMAC of `id.timestamp.body`, timestamp within 5 minutes).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// How far a Standard Webhooks timestamp may be from the receiver's clock
/// (the official libraries' tolerance).
pub const TIMESTAMP_TOLERANCE_SECS: i64 = 300;

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub delay: Duration,
    pub headers: Vec<(String, String)>,
    /// Bytes, not text: a hostile receiver answers with anything.
    pub body: Vec<u8>,
    /// Answer with the request's headers (`name: value` lines) instead, as
    /// a debugging endpoint that echoes its request does.
    pub echo_headers: bool,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            delay: Duration::ZERO,
            headers: Vec::new(),
            body: b"ok".to_vec(),
            echo_headers: false,
        }
    }

    /// Answers only after `delay`.
    pub fn delayed(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    pub fn header(mut self, key: &str, value: &str) -> Reply {
        self.headers.push((key.into(), value.into()));
        self
    }

    pub fn body(mut self, body: &str) -> Reply {
        self.body = body.as_bytes().to_vec();
        self
    }

    /// Answers with these bytes (NUL, invalid UTF-8, gzip: anything).
    pub fn bytes(mut self, body: &[u8]) -> Reply {
        self.body = body.to_vec();
        self
    }

    /// Answers with the request's headers.
    pub fn echoing_headers(mut self) -> Reply {
        self.echo_headers = true;
        self
    }

    /// Never answers (well, not for an hour): the client's timeout decides.
    pub fn hang() -> Reply {
        Reply::status(200).delayed(Duration::from_secs(3600))
    }
}

/// A request as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Received {
    pub at: Instant,
    pub method: String,
    pub path: String,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// With a secret set: did `X-Frappe-Webhook-Signature` verify?
    pub frappe_ok: Option<bool>,
    /// With a secret set: did `webhook-signature` verify?
    pub standard_ok: Option<bool>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("JSON body")
    }

    /// Both signatures present and valid.
    pub fn signatures_verified(&self) -> bool {
        self.frappe_ok == Some(true) && self.standard_ok == Some(true)
    }

    /// Panics, naming `what` and showing both checks, unless both
    /// signatures are present and valid.
    pub fn assert_signatures_verified(&self, what: &str) {
        assert!(
            self.signatures_verified(),
            "{what}: {:?} {:?}",
            self.frappe_ok,
            self.standard_ok
        );
    }
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<Received>>,
    script: Mutex<VecDeque<Reply>>,
    default: Mutex<Option<Reply>>,
    secrets: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    arrived: tokio::sync::Notify,
    /// While true, requests wait at the door (counted as in flight) until
    /// [`Receiver::release`].
    held: HeldGate,
}

/// A gate requests wait behind (see [`Receiver::hold`]).
struct HeldGate(tokio::sync::watch::Sender<bool>);

impl Default for HeldGate {
    fn default() -> HeldGate {
        HeldGate(tokio::sync::watch::Sender::new(false))
    }
}

/// The receiver.
pub struct Receiver {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

fn hmac_b64(key: &[u8], data: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(data);
    STANDARD.encode(mac.finalize().into_bytes())
}

fn verify_frappe(secrets: &[String], headers: &HeaderMap, body: &[u8]) -> bool {
    let Some(given) = headers
        .get("x-frappe-webhook-signature")
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    secrets
        .iter()
        .any(|s| hmac_b64(s.as_bytes(), body) == given)
}

fn verify_standard(secrets: &[String], headers: &HeaderMap, body: &[u8]) -> bool {
    let get = |k: &str| headers.get(k).and_then(|v| v.to_str().ok());
    let (Some(id), Some(ts), Some(sigs)) = (
        get("webhook-id"),
        get("webhook-timestamp"),
        get("webhook-signature"),
    ) else {
        return false;
    };
    let Ok(ts_num) = ts.parse::<i64>() else {
        return false;
    };
    let now = chrono::Utc::now().timestamp();
    if (now - ts_num).abs() > TIMESTAMP_TOLERANCE_SECS {
        return false;
    }
    let mut signed = Vec::new();
    signed.extend_from_slice(id.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(ts.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(body);
    secrets.iter().any(|s| {
        let key = match s.strip_prefix("whsec_") {
            Some(b64) => STANDARD.decode(b64).unwrap_or_default(),
            None => s.as_bytes().to_vec(),
        };
        let expected = format!("v1,{}", hmac_b64(&key, &signed));
        sigs.split(' ').any(|sig| sig == expected)
    })
}

struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let _guard = InFlight(&shared.in_flight);
    let secrets = shared.secrets.lock().expect("lock").clone();
    let (frappe_ok, standard_ok) = if secrets.is_empty() {
        (None, None)
    } else {
        (
            Some(verify_frappe(&secrets, &headers, &body)),
            Some(verify_standard(&secrets, &headers, &body)),
        )
    };
    let received = Received {
        at: Instant::now(),
        method: method.to_string(),
        path: uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_ascii_lowercase(),
                    v.to_str().unwrap_or("").to_string(),
                )
            })
            .collect(),
        body: String::from_utf8_lossy(&body).into_owned(),
        frappe_ok,
        standard_ok,
    };
    shared.requests.lock().expect("lock").push(received);
    shared.arrived.notify_waiters();
    let _ = shared.held.0.subscribe().wait_for(|held| !held).await;
    let reply = {
        let next = shared.script.lock().expect("lock").pop_front();
        next.or_else(|| shared.default.lock().expect("lock").clone())
            .unwrap_or_else(|| Reply::status(200))
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let body = if reply.echo_headers {
        headers
            .iter()
            .map(|(k, v)| format!("{}: {}\n", k, v.to_str().unwrap_or("")))
            .collect::<String>()
            .into_bytes()
    } else {
        reply.body
    };
    let mut response = (
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK),
        body,
    )
        .into_response();
    for (k, v) in reply.headers {
        if let (Ok(k), Ok(v)) = (
            axum::http::HeaderName::from_bytes(k.as_bytes()),
            axum::http::HeaderValue::from_str(&v),
        ) {
            response.headers_mut().insert(k, v);
        }
    }
    response
}

impl Receiver {
    /// Listens on a free port of 127.0.0.1, answering 200 by default.
    pub async fn start() -> Receiver {
        let shared = Arc::new(Shared::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let addr = listener.local_addr().expect("addr");
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { addr, shared, task }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Verify signatures with these secrets (any one may match).
    pub fn verify_with(&self, secrets: &[&str]) {
        *self.shared.secrets.lock().expect("lock") =
            secrets.iter().map(|s| s.to_string()).collect();
    }

    /// Answer the next requests with these replies, in order.
    pub fn reply_next(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.script.lock().expect("lock").extend(replies);
    }

    /// Answer with this once the script is used up.
    pub fn reply_always(&self, reply: Reply) {
        *self.shared.default.lock().expect("lock") = Some(reply);
    }

    /// How many requests carried each `webhook-id`, from the `from`th
    /// request received on (0: all); panics on a request without one.
    pub fn per_webhook_id(&self, from: usize) -> std::collections::HashMap<String, usize> {
        let mut per_id = std::collections::HashMap::new();
        for r in &self.requests()[from..] {
            let id = r.header("webhook-id").expect("a webhook-id header");
            *per_id.entry(id.to_string()).or_insert(0) += 1;
        }
        per_id
    }

    pub fn requests(&self) -> Vec<Received> {
        self.shared.requests.lock().expect("lock").clone()
    }

    pub fn count(&self) -> usize {
        self.shared.requests.lock().expect("lock").len()
    }

    /// From now on requests wait, unanswered, until [`Receiver::release`]:
    /// a test sees how many a fleet sends at once without racing the clock.
    pub fn hold(&self) {
        self.shared.held.0.send_replace(true);
    }

    /// Answers the requests held, and every later one as scripted.
    pub fn release(&self) {
        self.shared.held.0.send_replace(false);
    }

    /// Waits until `n` requests are in flight at once; panics after
    /// `timeout`.
    pub async fn wait_in_flight(&self, n: usize, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.in_flight() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} requests in flight, expected {n} within {timeout:?}",
                self.in_flight()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Requests in flight right now.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    /// The most requests that were in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` requests arrived; panics after `timeout`.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.arrived.notified();
            if self.count() >= n {
                return self.requests();
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "receiver got {} requests, expected {n} within {timeout:?}",
                    self.count()
                );
            }
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}
