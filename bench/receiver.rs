//! `hookfleet-bench-receiver`: the fast, counting receiver the benchmarks and
//! the chaos script deliver to. Loopback only.
//!
//! Paths: `/ok/...` answers 204 at once; `/slow/<ms>/...` answers 204 after
//! <ms>; `/hang/...` never answers (the sender's timeout decides);
//! `/fail/...` answers 500; `/tag/<name>/<ms>/...` answers 204 after <ms>
//! and is counted under <name> (requests in flight, and started per second).
//!
//! Control: `POST /mode/<ok|hang|fail|drop>` makes every delivery path behave
//! that way until changed (`drop` closes the connection without an answer);
//! `GET /stats` returns `{"requests", "unique_ids", "duplicates",
//! "bad_signatures", "by_path_prefix"}`; `GET /ids` returns each
//! `webhook-id` with its receipt count, `GET /accepted` with the number of
//! times it was answered 2xx (a second 2xx for one id is a duplicate
//! delivery; a second receipt after a 500 or a timeout is a retry). With `--secret S` every request's
//! Frappe and Standard Webhooks signatures are verified (a request that fails
//! is answered 401 and counted in `bad_signatures`). With `--hostile` every
//! successful answer is a 200 whose body is hostile bytes, in turn: NUL bytes,
//! invalid UTF-8, a gzip stream (with `Content-Encoding: gzip`), terminal
//! escape sequences, and 64 KiB of binary.
//!
//! `GET /tags` returns, per tag name, `{"max_in_flight", "max_per_s",
//! "max_per_wall_s", "per_wall_s", "count", "done", "in_flight"}`: `max_per_s` is the most
//! requests started within any sliding one-second window (over the last
//! 100,000 starts), `max_per_wall_s` the most started in one wall-clock
//! second (`per_wall_s`: each second's count, first to last); `POST
//! /tags/reset` forgets them all.
//!
//! usage: hookfleet-bench-receiver [ADDR] [--secret S] [--hostile]   (default 127.0.0.1:18090)

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

const MODE_PATH: u8 = 0;
const MODE_OK: u8 = 1;
const MODE_HANG: u8 = 2;
const MODE_FAIL: u8 = 3;
const MODE_DROP: u8 = 4;

/// The panic that closes a connection without an answer (drop mode).
const DROP_MESSAGE: &str = "bench receiver: dropping the connection";

#[derive(Default)]
struct Counts {
    hostile: bool,
    requests: AtomicU64,
    bad_signatures: AtomicU64,
    mode: AtomicU8,
    secret: Option<String>,
    seen: Mutex<HashMap<String, u32>>,
    accepted: Mutex<HashMap<String, u32>>,
    by_prefix: Mutex<HashMap<String, u64>>,
    tags: Mutex<HashMap<String, Tag>>,
}

/// How many start instants each tag keeps for the sliding-window maximum.
const TAG_STARTS_KEPT: usize = 100_000;

/// One tag's counters (`/tag/<name>/<ms>/...`).
#[derive(Default)]
struct Tag {
    in_flight: u64,
    max_in_flight: u64,
    count: u64,
    done: u64,
    per_wall_second: HashMap<u64, u64>,
    starts: VecDeque<Instant>,
}

impl Tag {
    /// Requests started in each wall-clock second, from the first to the last.
    fn per_wall_s(&self) -> Vec<u64> {
        let (Some(first), Some(last)) = (
            self.per_wall_second.keys().min(),
            self.per_wall_second.keys().max(),
        ) else {
            return Vec::new();
        };
        (*first..=*last)
            .map(|s| self.per_wall_second.get(&s).copied().unwrap_or(0))
            .collect()
    }

    /// The most starts within any one-second window.
    fn max_per_sliding_second(&self) -> usize {
        let window = Duration::from_secs(1);
        let (mut best, mut lo) = (0, 0);
        for hi in 0..self.starts.len() {
            while self.starts[hi].duration_since(self.starts[lo]) >= window {
                lo += 1;
            }
            best = best.max(hi - lo + 1);
        }
        best
    }
}

/// Leaves a tag's in-flight count when the request ends, answered or not.
struct InFlight<'a> {
    counts: &'a Counts,
    name: String,
    ok: bool,
}

impl InFlight<'_> {
    fn enter<'a>(counts: &'a Counts, name: &str) -> InFlight<'a> {
        let now = Instant::now();
        let second = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut tags = counts.tags.lock().expect("lock");
        let tag = tags.entry(name.to_string()).or_default();
        tag.in_flight += 1;
        tag.max_in_flight = tag.max_in_flight.max(tag.in_flight);
        tag.count += 1;
        *tag.per_wall_second.entry(second).or_default() += 1;
        if tag.starts.len() == TAG_STARTS_KEPT {
            tag.starts.pop_front();
        }
        tag.starts.push_back(now);
        InFlight {
            counts,
            name: name.to_string(),
            ok: false,
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut tags = self.counts.tags.lock().expect("lock");
        if let Some(tag) = tags.get_mut(&self.name) {
            tag.in_flight = tag.in_flight.saturating_sub(1);
            if self.ok {
                tag.done += 1;
            }
        }
    }
}

fn hmac_b64(key: &[u8], parts: &[&[u8]]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    for p in parts {
        mac.update(p);
    }
    STANDARD.encode(mac.finalize().into_bytes())
}

/// Both signatures valid for `secret`.
fn verified(secret: &str, headers: &HeaderMap, body: &[u8]) -> bool {
    let get = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or("");
    let frappe = get("x-frappe-webhook-signature") == hmac_b64(secret.as_bytes(), &[body]);
    let key = match secret.strip_prefix("whsec_") {
        Some(b64) => STANDARD.decode(b64).unwrap_or_default(),
        None => secret.as_bytes().to_vec(),
    };
    let (id, ts) = (get("webhook-id"), get("webhook-timestamp"));
    let expected = format!(
        "v1,{}",
        hmac_b64(&key, &[id.as_bytes(), b".", ts.as_bytes(), b".", body])
    );
    let standard = get("webhook-signature").split(' ').any(|s| s == expected);
    frappe && standard
}

/// The `n`th hostile body, and whether it claims to be gzip.
fn hostile_body(n: u64) -> (Vec<u8>, bool) {
    match n % 5 {
        0 => (b"ok\0\0accepted\0".to_vec(), false),
        1 => (
            vec![b'o', b'k', 0xff, 0xfe, 0xfd, 0xc3, 0x28, 0xa0, 0xa1],
            false,
        ),
        // A gzip member header, then deflate-looking bytes.
        2 => (
            vec![
                0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0x00, 0x03, 0xcb, 0xcf, 0x06, 0x00, 0x47, 0xdd,
                0xdc, 0x79, 0x02, 0, 0, 0,
            ],
            true,
        ),
        3 => (
            b"\x1b[2J\x1b[31mred alert\x07\x1b]0;pwned\x07\r\n".to_vec(),
            false,
        ),
        _ => {
            // 64 KiB of pseudo-random bytes (xorshift), NULs included.
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ n;
            let bytes = (0..64 * 1024)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            (bytes, false)
        }
    }
}

async fn receive(
    State(counts): State<Arc<Counts>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let n = counts.requests.fetch_add(1, Ordering::Relaxed);
    let status = judge(&counts, &uri, &headers, &body).await;
    if counts.hostile && status.is_success() {
        let (body, gzip) = hostile_body(n);
        let mut response = (StatusCode::OK, body).into_response();
        if gzip {
            response.headers_mut().insert(
                axum::http::header::CONTENT_ENCODING,
                axum::http::HeaderValue::from_static("gzip"),
            );
        }
        return response;
    }
    status.into_response()
}

/// Counts a request and decides its answer.
async fn judge(counts: &Counts, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> StatusCode {
    let path = uri.path();
    let prefix = path.split('/').nth(1).unwrap_or("").to_string();
    *counts
        .by_prefix
        .lock()
        .expect("lock")
        .entry(prefix.clone())
        .or_default() += 1;
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if let Some(id) = &id {
        *counts
            .seen
            .lock()
            .expect("lock")
            .entry(id.clone())
            .or_default() += 1;
    }
    if let Some(secret) = &counts.secret {
        if !verified(secret, headers, body) {
            counts.bad_signatures.fetch_add(1, Ordering::Relaxed);
            return StatusCode::UNAUTHORIZED;
        }
    }
    let behaviour = match counts.mode.load(Ordering::Relaxed) {
        MODE_OK => "ok",
        MODE_HANG => "hang",
        MODE_FAIL => "fail",
        MODE_DROP => "drop",
        _ => prefix.as_str(),
    };
    let status = match behaviour {
        "hang" => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::NO_CONTENT
        }
        "fail" => StatusCode::INTERNAL_SERVER_ERROR,
        "drop" => std::panic::panic_any(DROP_MESSAGE),
        "tag" => {
            let mut parts = path.split('/').skip(2);
            let name = parts.next().unwrap_or("").to_string();
            let ms: u64 = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
            let mut guard = InFlight::enter(counts, &name);
            if ms > 0 {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            guard.ok = true;
            StatusCode::NO_CONTENT
        }
        "slow" => {
            let ms: u64 = path
                .split('/')
                .nth(2)
                .and_then(|m| m.parse().ok())
                .unwrap_or(100);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            StatusCode::NO_CONTENT
        }
        _ => StatusCode::NO_CONTENT,
    };
    if let (Some(id), true) = (id, status.is_success()) {
        *counts.accepted.lock().expect("lock").entry(id).or_default() += 1;
    }
    status
}

async fn set_mode(
    State(counts): State<Arc<Counts>>,
    Path(mode): Path<String>,
) -> impl IntoResponse {
    let m = match mode.as_str() {
        "path" => MODE_PATH,
        "ok" => MODE_OK,
        "hang" => MODE_HANG,
        "fail" => MODE_FAIL,
        "drop" => MODE_DROP,
        _ => return (StatusCode::BAD_REQUEST, "modes: path, ok, hang, fail, drop"),
    };
    counts.mode.store(m, Ordering::Relaxed);
    (StatusCode::OK, "ok")
}

async fn stats(State(counts): State<Arc<Counts>>) -> impl IntoResponse {
    let seen = counts.seen.lock().expect("lock");
    let duplicates: u64 = seen.values().map(|n| u64::from(n.saturating_sub(1))).sum();
    Json(serde_json::json!({
        "requests": counts.requests.load(Ordering::Relaxed),
        "unique_ids": seen.len(),
        "duplicates": duplicates,
        "bad_signatures": counts.bad_signatures.load(Ordering::Relaxed),
        "by_path_prefix": *counts.by_prefix.lock().expect("lock"),
    }))
}

async fn tags(State(counts): State<Arc<Counts>>) -> impl IntoResponse {
    let tags = counts.tags.lock().expect("lock");
    let out: serde_json::Map<String, serde_json::Value> = tags
        .iter()
        .map(|(name, tag)| {
            let value = serde_json::json!({
                "max_in_flight": tag.max_in_flight,
                "max_per_s": tag.max_per_sliding_second(),
                "max_per_wall_s": tag.per_wall_second.values().copied().max().unwrap_or(0),
                "per_wall_s": tag.per_wall_s(),
                "count": tag.count,
                "done": tag.done,
                "in_flight": tag.in_flight,
            });
            (name.clone(), value)
        })
        .collect();
    Json(serde_json::Value::Object(out))
}

async fn reset_tags(State(counts): State<Arc<Counts>>) -> impl IntoResponse {
    counts.tags.lock().expect("lock").clear();
    (StatusCode::OK, "ok")
}

async fn ids(State(counts): State<Arc<Counts>>) -> impl IntoResponse {
    Json(counts.seen.lock().expect("lock").clone())
}

async fn accepted(State(counts): State<Arc<Counts>>) -> impl IntoResponse {
    Json(counts.accepted.lock().expect("lock").clone())
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut addr = "127.0.0.1:18090".to_string();
    let mut secret = None;
    let mut hostile = false;
    let mut i = 0;
    while i < args.len() {
        if args[i] == "--hostile" {
            hostile = true;
            i += 1;
        } else if args[i] == "--secret" {
            secret = args.get(i + 1).cloned();
            i += 2;
        } else {
            addr = args[i].clone();
            i += 1;
        }
    }
    // Drop mode closes connections by unwinding their task; keep that quiet.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info.payload().downcast_ref::<&str>() != Some(&DROP_MESSAGE) {
            default_hook(info);
        }
    }));
    let counts = Arc::new(Counts {
        secret,
        hostile,
        ..Counts::default()
    });
    let app = Router::new()
        .route("/stats", get(stats))
        .route("/ids", get(ids))
        .route("/tags", get(tags))
        .route("/tags/reset", post(reset_tags))
        .route("/accepted", get(accepted))
        .route("/mode/{mode}", post(set_mode))
        .fallback(receive)
        .with_state(counts);
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("bench receiver on {}", listener.local_addr()?);
    axum::serve(listener, app).await
}
