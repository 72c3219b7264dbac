//! One delivery attempt on the wire: sign the stored request afresh and send
//! it with the webhook's timeout and no redirects. Shared by the worker
//! (every queued attempt) and the producer (workflow_transition, which is
//! delivered synchronously); [`crate::attempt::judge`] decides what the
//! answer means.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::attempt::{AttemptReport, Claim, RESPONSE_BODY_LIMIT};
use crate::domain::parse_retry_after;
use crate::domain::signature_headers;
use crate::request::{GuardedResolver, NetworkPolicy};
use crate::runtime::trace::{self, KeyValue, SpanKind};

/// Ceiling on establishing a connection; the webhook's own timeout (at most
/// 60 s) still bounds the whole request.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Idle keep-alive connections are dropped after this long: receivers commonly
/// close theirs at 60-75 s, and reusing a connection the peer is closing fails
/// the request.
pub(crate) const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(50);

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
            crate::domain::format_duration(timeout)
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

/// Bytes read past [`RESPONSE_BODY_LIMIT`] so that a credential the
/// receiver echoes across the cut is still found whole and hidden.
const REDACT_MARGIN: usize = 1024;

/// The shortest credential (or part of one) hidden in an answer: shorter
/// ones (`Bearer`, a short id) would blot out ordinary words.
const MIN_REDACTED_LEN: usize = 8;

/// What an echoed credential becomes in a stored answer.
const REDACTED: &[u8] = b"[hidden]";

/// The first [`RESPONSE_BODY_LIMIT`] bytes of the answer, as they came but
/// for the request's credentials, which a receiver that echoes its request
/// would otherwise leave on the row for anyone who reads it (a read-only
/// token, a log): the rest is never read into memory.
async fn read_limited(
    mut response: reqwest::Response,
    claim: &Claim,
) -> Result<Vec<u8>, reqwest::Error> {
    let mut buf = Vec::new();
    while buf.len() < RESPONSE_BODY_LIMIT + REDACT_MARGIN {
        match response.chunk().await? {
            Some(chunk) => buf.extend_from_slice(&chunk),
            None => break,
        }
    }
    let mut buf = hide_credentials(buf, claim);
    buf.truncate(RESPONSE_BODY_LIMIT);
    Ok(buf)
}

/// `body` with every static header value of `claim` (the credentials: all
/// but Content-Type), and each word of one, replaced by `[hidden]`.
fn hide_credentials(mut body: Vec<u8>, claim: &Claim) -> Vec<u8> {
    let mut secrets: Vec<String> = claim
        .headers
        .iter()
        .filter(|h| !h.key.eq_ignore_ascii_case("content-type"))
        .flat_map(|h| std::iter::once(h.value.as_str()).chain(h.value.split_whitespace()))
        .filter(|v| v.len() >= MIN_REDACTED_LEN)
        .flat_map(echoed_forms)
        .collect();
    // Longest first, so a whole value is hidden before its words are; each
    // once (a value and its escaped forms are often the same).
    secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    secrets.dedup();
    for secret in secrets {
        let needle = secret.as_bytes();
        // Most answers echo nothing: no copy of the body for those.
        if body.windows(needle.len()).any(|w| w == needle) {
            body = replace_all(&body, needle, REDACTED);
        }
    }
    body
}

/// `value` as a receiver may echo it: as sent, inside a JSON string
/// (quotes and backslashes escaped), and with `/` escaped too, as PHP's
/// `json_encode` writes it.
fn echoed_forms(value: &str) -> Vec<String> {
    let json = serde_json::to_string(value).unwrap_or_default();
    let json = json
        .strip_prefix('"')
        .and_then(|j| j.strip_suffix('"'))
        .unwrap_or(value)
        .to_string();
    let slashed = json.replace('/', "\\/");
    vec![value.to_string(), json, slashed]
}

fn replace_all(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return haystack.to_vec();
    }
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out
}

/// The claim's static headers, checked: a stored name or value that is not
/// valid in HTTP makes the request unsendable, never silently dropped.
fn static_headers(claim: &Claim) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for h in &claim.headers {
        let name = HeaderName::from_bytes(h.key.as_bytes())
            .map_err(|_| format!("stored header name {:?} is not valid in HTTP", h.key))?;
        let value = HeaderValue::from_str(&h.value).map_err(|_| {
            format!(
                "the stored value of header {:?} is not valid in HTTP",
                h.key
            )
        })?;
        map.append(name, value);
    }
    Ok(map)
}

/// Signs and sends `claim` once; with tracing on, as a span under the
/// event's emit (`runtime::trace`), whose context the receiver is sent too
/// with `--send-traceparent`.
pub async fn send(
    client: &reqwest::Client,
    policy: &NetworkPolicy,
    claim: &Claim,
) -> AttemptReport {
    let mut span = trace::start(
        "deliver",
        SpanKind::Client,
        claim.traceparent.as_deref(),
        || {
            vec![
                KeyValue::new("hookfleet.webhook", claim.webhook_name.clone()),
                KeyValue::new("hookfleet.delivery_id", claim.log_id),
                KeyValue::new("hookfleet.event_id", claim.event_id.clone()),
                KeyValue::new("hookfleet.attempt", i64::from(claim.attempt)),
                KeyValue::new("hookfleet.max_attempts", i64::from(claim.max_attempts)),
                KeyValue::new("http.request.method", claim.method.clone()),
            ]
        },
    );
    // The receiver joins the attempt's trace; without export, the
    // application's own context (if the event carried one) goes on.
    let traceparent = if trace::send_traceparent() {
        span.as_ref()
            .map(trace::Traced::traceparent)
            .or_else(|| claim.traceparent.clone())
    } else {
        None
    };
    let report = send_once(client, policy, claim, traceparent.as_deref()).await;
    if let Some(span) = span.as_mut().filter(|s| s.is_recording()) {
        if let Some(code) = report.response_code {
            span.set("http.response.status_code", i64::from(code));
        }
        if let Some(host) = url::Url::parse(&claim.url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string))
        {
            // The host only: a path or query may hold a credential.
            span.set("server.address", host);
        }
        if let Some(error) = &report.error {
            span.fail(error);
        }
    }
    report
}

async fn send_once(
    client: &reqwest::Client,
    policy: &NetworkPolicy,
    claim: &Claim,
    traceparent: Option<&str>,
) -> AttemptReport {
    let started_at = Utc::now();
    let clock = Instant::now();
    let failed = |error: String| AttemptReport::failed(started_at, clock.elapsed(), error);

    if let Some(defect) = &claim.defect {
        return AttemptReport::unsendable(started_at, defect.clone());
    }
    if let Some(reason) = &claim.credentials_error {
        return failed(reason.clone());
    }
    let url = match url::Url::parse(&claim.url) {
        Ok(u) => u,
        Err(e) => {
            return AttemptReport::unsendable(started_at, format!("stored URL is not valid: {e}"))
        }
    };
    if let Err(blocked) = policy.check_url(&url) {
        return failed(blocked.to_string());
    }
    let method = match reqwest::Method::from_bytes(claim.method.as_bytes()) {
        Ok(m) => m,
        Err(_) => {
            return AttemptReport::unsendable(
                started_at,
                format!("stored method {:?} is not valid", claim.method),
            )
        }
    };
    let mut headers = match static_headers(claim) {
        Ok(h) => h,
        Err(reason) => return AttemptReport::unsendable(started_at, reason),
    };
    if traceparent.is_some() {
        // The attempt's own context replaces a static one of that name.
        headers.remove(trace::TRACEPARENT);
    }

    let mut request = client
        .request(method, url)
        .timeout(claim.timeout)
        .headers(headers);
    for (name, value) in signature_headers(
        &claim.keys,
        &claim.event_id,
        started_at.timestamp(),
        claim.body.as_bytes(),
    ) {
        request = request.header(name, value);
    }
    if let Some(tp) = traceparent {
        request = request.header(trace::TRACEPARENT, tp);
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
        let body = read_limited(response, claim).await.unwrap_or_default();
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
            unsendable: false,
        },
        Ok(Err(e)) => failed(describe(&e, claim.timeout)),
        Err(_) => failed(format!(
            "timed out after {}",
            crate::domain::format_duration(claim.timeout)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_occurrence_is_replaced_and_a_longer_needle_is_never_found() {
        assert_eq!(replace_all(b"a-xx-b-xx", b"xx", b"[h]"), b"a-[h]-b-[h]");
        assert_eq!(replace_all(b"short", b"longer needle", b"[h]"), b"short");
    }

    #[test]
    fn a_value_is_hidden_as_sent_and_as_a_json_string_escapes_it() {
        let forms = echoed_forms(r#"Bearer ab/cd"ef"#);
        let echo = br#"{"a":"Bearer ab/cd\"ef","b":"Bearer ab\/cd\"ef"}"#;
        let hidden = forms
            .iter()
            .fold(echo.to_vec(), |b, f| replace_all(&b, f.as_bytes(), b"[h]"));
        assert_eq!(hidden, br#"{"a":"[h]","b":"[h]"}"#);
    }
}
