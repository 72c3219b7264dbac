//! One delivery attempt: sign the stored request afresh, send it with the
//! webhook's timeout and no redirects, and judge the answer. Shared by the
//! worker (every queued attempt) and the producer (workflow_transition, which
//! is delivered synchronously).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::model::{DeliveryStatus, Header};
use crate::schedule::{parse_retry_after, RetrySchedule};
use crate::sign::{signature_headers, SigningKeys};
use crate::ssrf::{GuardedResolver, NetworkPolicy};

/// How much of a response body is kept on the row. Enough for an error page's
/// message; a receiver that answers with megabytes is not stored.
pub const RESPONSE_BODY_LIMIT: usize = 4096;

/// Ceiling on establishing a connection; the webhook's own timeout (at most
/// 60 s) still bounds the whole request.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Idle keep-alive connections are dropped after this long: receivers commonly
/// close theirs at 60-75 s, and reusing a connection the peer is closing fails
/// the request.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(50);

/// How long a claim outlives the webhook's timeout: covers reading the
/// response and writing the outcome behind other outcomes in a batch. A worker
/// that dies mid-attempt leaves a lease that runs out by itself after
/// timeout + this, and the row comes due again.
pub const LEASE_MARGIN: Duration = Duration::from_secs(30);

/// A row claimed for one attempt: everything needed to send it.
#[derive(Debug, Clone)]
pub struct Claim {
    pub log_id: i64,
    /// The attempt number this claim made (attempts after the claim). The
    /// outcome is written only while the row still has this count: a fencing
    /// token against a second claimant after the lease expired.
    pub attempt: i32,
    pub max_attempts: i32,
    pub event_id: String,
    pub webhook_name: String,
    pub webhook_id: Option<i64>,
    pub url: String,
    pub method: String,
    pub headers: Vec<Header>,
    pub body: String,
    pub timeout: Duration,
    pub keys: SigningKeys,
    /// The queue the job came from, for per-endpoint accounting.
    pub queue: String,
}

/// What happened on the wire.
#[derive(Debug, Clone)]
pub struct AttemptReport {
    pub started_at: DateTime<Utc>,
    pub duration: Duration,
    pub response_code: Option<u16>,
    pub response_body: Option<String>,
    pub error: Option<String>,
    /// A `Retry-After` sent with 429 or 503.
    pub retry_after: Option<Duration>,
}

/// The outcome of an attempt, ready to be recorded.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub log_id: i64,
    pub attempt: i32,
    pub status: DeliveryStatus,
    /// For Failed: when the next attempt is due, from now.
    pub retry_in: Option<Duration>,
    pub response_code: Option<i32>,
    pub response_body: Option<String>,
    pub error: Option<String>,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i32,
}

/// The HTTP client every attempt uses: pooled connections, no redirects (a
/// 3xx is a failure, as in the Standard Webhooks spec), no proxy from the
/// environment, and a resolver that refuses internal addresses.
pub fn http_client(policy: Arc<NetworkPolicy>) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(CONNECT_TIMEOUT)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .tcp_nodelay(true)
        .dns_resolver(Arc::new(GuardedResolver::new(policy)))
        .user_agent(concat!("hookfleet/", env!("CARGO_PKG_VERSION")))
        .build()
        .expect("the HTTP client configuration is static and valid")
}

/// Describes a transport error without its URL (which may carry a token).
fn describe(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        return format!(
            "timed out after {}",
            crate::config::format_duration(timeout)
        );
    }
    let mut msg = if e.is_connect() {
        "could not connect".to_string()
    } else {
        "request failed".to_string()
    };
    let mut source = std::error::Error::source(e);
    let mut last = String::new();
    while let Some(s) = source {
        let text = s.to_string();
        // hyper-util's wrapper adds nothing a reader needs.
        let generic = text.starts_with("client error (");
        if text != last && !text.is_empty() && !generic {
            msg.push_str(": ");
            msg.push_str(&text);
            last = text;
        }
        source = s.source();
    }
    msg
}

async fn read_limited(mut response: reqwest::Response) -> Result<String, reqwest::Error> {
    let mut buf = Vec::new();
    while buf.len() < RESPONSE_BODY_LIMIT {
        match response.chunk().await? {
            Some(chunk) => buf.extend_from_slice(&chunk),
            None => break,
        }
    }
    buf.truncate(RESPONSE_BODY_LIMIT);
    // Cut back to the last whole character, so the stored text is a prefix of
    // what the receiver sent and never longer than the limit.
    if let Err(e) = std::str::from_utf8(&buf) {
        if e.error_len().is_none() {
            buf.truncate(e.valid_up_to());
        }
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Signs and sends `claim` once.
pub async fn send(
    client: &reqwest::Client,
    policy: &NetworkPolicy,
    claim: &Claim,
) -> AttemptReport {
    let started_at = Utc::now();
    let clock = Instant::now();
    let failed = |error: String| AttemptReport {
        started_at,
        duration: clock.elapsed(),
        response_code: None,
        response_body: None,
        error: Some(error),
        retry_after: None,
    };

    let url = match url::Url::parse(&claim.url) {
        Ok(u) => u,
        Err(e) => return failed(format!("stored URL is not valid: {e}")),
    };
    if let Err(reason) = policy.check_url(&url) {
        return failed(reason);
    }
    let method = match reqwest::Method::from_bytes(claim.method.as_bytes()) {
        Ok(m) => m,
        Err(_) => return failed(format!("stored method {:?} is not valid", claim.method)),
    };

    let mut request = client.request(method, url).timeout(claim.timeout);
    for h in &claim.headers {
        request = request.header(h.key.as_str(), h.value.as_str());
    }
    for (name, value) in signature_headers(
        &claim.keys,
        &claim.event_id,
        started_at.timestamp(),
        claim.body.as_bytes(),
    ) {
        request = request.header(name, value);
    }
    let request = request.body(claim.body.clone());

    // One deadline over the answer and the body read.
    let exchange = async {
        let response = request.send().await?;
        let status = response.status().as_u16();
        let retry_after = if status == 429 || status == 503 {
            response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, Utc::now()))
        } else {
            None
        };
        let body = read_limited(response).await.unwrap_or_default();
        Ok::<_, reqwest::Error>((status, body, retry_after))
    };
    match tokio::time::timeout(claim.timeout, exchange).await {
        Ok(Ok((status, body, retry_after))) => AttemptReport {
            started_at,
            duration: clock.elapsed(),
            response_code: Some(status),
            response_body: Some(body),
            error: if (200..300).contains(&status) {
                None
            } else {
                Some(format!("HTTP {status}"))
            },
            retry_after,
        },
        Ok(Err(e)) => failed(describe(&e, claim.timeout)),
        Err(_) => failed(format!(
            "timed out after {}",
            crate::config::format_duration(claim.timeout)
        )),
    }
}

/// Turns an attempt into an outcome: 2xx → Delivered; 410 → Exhausted; any
/// other answer or error → Failed with the schedule's next time while
/// attempts remain (and `retries_allowed`), else Exhausted.
pub fn judge(
    claim: &Claim,
    report: &AttemptReport,
    schedule: &RetrySchedule,
    retries_allowed: bool,
) -> Outcome {
    let code = report.response_code;
    let mut outcome = Outcome {
        log_id: claim.log_id,
        attempt: claim.attempt,
        status: DeliveryStatus::Delivered,
        retry_in: None,
        response_code: code.map(i32::from),
        response_body: report.response_body.clone(),
        error: report.error.clone(),
        started_at: report.started_at,
        duration_ms: report.duration.as_millis().min(i32::MAX as u128) as i32,
    };
    match code {
        Some(c) if (200..300).contains(&c) => {}
        Some(410) => {
            outcome.status = DeliveryStatus::Exhausted;
            outcome.error = Some("HTTP 410 Gone: the receiver asked for no more deliveries".into());
        }
        _ if retries_allowed && claim.attempt < claim.max_attempts => {
            outcome.status = DeliveryStatus::Failed;
            outcome.retry_in =
                Some(schedule.delay_with_retry_after(claim.attempt as u32, report.retry_after));
        }
        _ => {
            outcome.status = DeliveryStatus::Exhausted;
            let reason = report.error.clone().unwrap_or_else(|| "failed".into());
            outcome.error = Some(if retries_allowed {
                format!(
                    "{reason} (attempt {} of {}; no retries left)",
                    claim.attempt, claim.max_attempts
                )
            } else {
                reason
            });
        }
    }
    outcome
}
