//! `hookfleet-bench-receiver`: the fast, counting receiver the benchmarks and
//! the chaos script deliver to. Loopback only.
//!
//! Paths: `/ok/...` answers 204 at once; `/slow/<ms>/...` answers 204 after
//! <ms>; `/hang/...` never answers (the sender's timeout decides);
//! `/fail/...` answers 500. `GET /stats` returns
//! `{"requests", "unique_ids", "duplicates", "by_path_prefix": {...}}` where a
//! duplicate is a second request with an already-seen `webhook-id`.
//!
//! usage: hookfleet-bench-receiver [ADDR]   (default 127.0.0.1:18090)

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};

#[derive(Default)]
struct Counts {
    requests: AtomicU64,
    seen: Mutex<HashMap<String, u32>>,
    by_prefix: Mutex<HashMap<String, u64>>,
}

async fn receive(
    State(counts): State<Arc<Counts>>,
    uri: Uri,
    headers: HeaderMap,
) -> impl IntoResponse {
    counts.requests.fetch_add(1, Ordering::Relaxed);
    let path = uri.path();
    let prefix = path.split('/').nth(1).unwrap_or("").to_string();
    *counts
        .by_prefix
        .lock()
        .expect("lock")
        .entry(prefix.clone())
        .or_default() += 1;
    if let Some(id) = headers.get("webhook-id").and_then(|v| v.to_str().ok()) {
        *counts
            .seen
            .lock()
            .expect("lock")
            .entry(id.to_string())
            .or_default() += 1;
    }
    match prefix.as_str() {
        "hang" => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::NO_CONTENT
        }
        "fail" => StatusCode::INTERNAL_SERVER_ERROR,
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
    }
}

async fn stats(State(counts): State<Arc<Counts>>) -> impl IntoResponse {
    let seen = counts.seen.lock().expect("lock");
    let duplicates: u64 = seen.values().map(|n| u64::from(n.saturating_sub(1))).sum();
    Json(serde_json::json!({
        "requests": counts.requests.load(Ordering::Relaxed),
        "unique_ids": seen.len(),
        "duplicates": duplicates,
        "by_path_prefix": *counts.by_prefix.lock().expect("lock"),
    }))
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:18090".into());
    let counts = Arc::new(Counts::default());
    let app = Router::new()
        .route("/stats", get(stats))
        .fallback(receive)
        .with_state(counts);
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("bench receiver on {}", listener.local_addr()?);
    axum::serve(listener, app).await
}
