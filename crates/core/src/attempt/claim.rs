//! One attempt as data: the claim that allows it (built in one place,
//! [`Claim::new`], from a stored request and its webhook's sealed
//! credentials, for the worker and the producer alike), what happened on
//! the wire, and the outcome to record. No I/O here: [`crate::attempt`]
//! sends, the store records, and both speak these types.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::at_rest::{self, Purpose};
use crate::domain::RetrySchedule;
use crate::domain::SigningKeys;
use crate::domain::{open_signing_keys, parse_headers, DeliveryStatus, Header};

/// How much of a response body is kept on the row. Enough for an error page's
/// message; a receiver that answers with megabytes is not stored.
pub const RESPONSE_BODY_LIMIT: usize = 4096;

/// How long a claim outlives the webhook's timeout: covers reading the
/// response and writing the outcome behind other outcomes in a batch. A worker
/// that dies mid-attempt leaves a lease that runs out by itself after
/// timeout + this, and the row comes due again.
pub const LEASE_MARGIN: Duration = Duration::from_secs(30);

/// A row claimed for one attempt: everything needed to send it.
#[derive(Debug, Clone)]
pub struct Claim {
    pub log_id: i64,
    /// The attempt number this claim made (attempts after the claim).
    pub attempt: i32,
    pub max_attempts: i32,
    /// The fencing token this claim set on the row: its outcome is written
    /// only while the row still carries it (no later claim, no replay).
    pub token: i64,
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
    /// Why the stored request cannot be sent as it is (a malformed stored
    /// value): the attempt fails for good with this reason, without a request.
    pub defect: Option<String>,
    /// Why the webhook's credentials cannot be opened (their key is not
    /// configured): the attempt fails with this reason, without a request,
    /// and is tried again on the schedule.
    pub credentials_error: Option<String>,
}

/// What a [`Claim`] is made from: a stored request taken for one attempt,
/// and its webhook's credentials as they are now. The worker's claims and
/// the producer's workflow_transition attempts are both built from one, so
/// both judge a stored request and open credentials the same way.
pub struct ClaimSource<'a> {
    pub log_id: i64,
    pub attempt: i32,
    pub max_attempts: i32,
    pub token: i64,
    pub event_id: String,
    pub webhook_name: String,
    pub webhook_id: Option<i64>,
    /// Where the request goes.
    pub url: String,
    /// Why it may not go there (any more): the attempt is then unsendable.
    pub url_refused: Option<String>,
    pub method: String,
    /// The row's frozen headers (its body's Content-Type), as stored.
    pub frozen_headers: &'a serde_json::Value,
    pub body: String,
    pub timeout: Duration,
    pub queue: String,
    pub credentials: SealedCredentials<'a>,
}

/// A webhook's credentials as stored: sealed at rest, opened only for an
/// attempt.
pub struct SealedCredentials<'a> {
    /// Its static headers (`[{"key": …, "value": …}]`), values sealed.
    pub headers: &'a serde_json::Value,
    pub secret: Option<&'a str>,
    /// The previous secret, only while a rotation is open.
    pub previous_secret: Option<&'a str>,
}

impl SealedCredentials<'_> {
    /// The headers and signing keys an attempt sends: the row's `frozen`
    /// headers (its body's Content-Type) with the webhook's static headers as
    /// they are now, opened, over them; and the webhook's secrets, opened. A
    /// value that cannot be opened (its key is not configured) is the
    /// attempt's error: it is tried again later, not sent without its
    /// credentials.
    fn open(&self, frozen: Vec<Header>) -> (Vec<Header>, SigningKeys, Option<String>) {
        let ring = at_rest::keyring();
        let mut error = None;
        let mut statics = Vec::new();
        for h in parse_headers(self.headers).unwrap_or_default() {
            match ring.open(&h.value, Purpose::HeaderValue) {
                Ok(value) => statics.push(Header { key: h.key, value }),
                Err(e) => {
                    error.get_or_insert(format!(
                        "the value of header {:?} cannot be opened: {e}",
                        h.key
                    ));
                }
            }
        }
        let mut headers: Vec<Header> = frozen
            .into_iter()
            .filter(|f| !statics.iter().any(|s| s.key.eq_ignore_ascii_case(&f.key)))
            .collect();
        headers.extend(statics);
        let keys = match open_signing_keys(self.secret, self.previous_secret) {
            Ok(k) => k,
            Err(e) => {
                error.get_or_insert(format!("the signing secret cannot be opened: {e}"));
                SigningKeys::default()
            }
        };
        (headers, keys, error)
    }
}

impl Claim {
    /// The claim `source` allows: its credentials opened, and any defect of
    /// the stored request (a destination refused, headers that do not
    /// parse) noted so the attempt fails without a request.
    pub fn new(source: ClaimSource<'_>) -> Claim {
        let (frozen, headers_defect) = match parse_headers(source.frozen_headers) {
            Ok(h) => (h, None),
            Err(reason) => (Vec::new(), Some(reason)),
        };
        let (headers, keys, credentials_error) = source.credentials.open(frozen);
        Claim {
            log_id: source.log_id,
            attempt: source.attempt,
            max_attempts: source.max_attempts,
            token: source.token,
            event_id: source.event_id,
            webhook_name: source.webhook_name,
            webhook_id: source.webhook_id,
            url: source.url,
            method: source.method,
            headers,
            body: source.body,
            timeout: source.timeout,
            keys,
            queue: source.queue,
            // A refused destination is named before a header defect.
            defect: source.url_refused.or(headers_defect),
            credentials_error,
        }
    }
}

/// What happened on the wire.
#[derive(Debug, Clone)]
pub struct AttemptReport {
    pub started_at: DateTime<Utc>,
    pub duration: Duration,
    pub response_code: Option<u16>,
    /// The first [`RESPONSE_BODY_LIMIT`] bytes of the answer, as sent.
    pub response_body: Option<Vec<u8>>,
    pub error: Option<String>,
    /// A `Retry-After` sent with 429 or 503.
    pub retry_after: Option<Duration>,
    /// The request could not be built from the stored row: retrying cannot
    /// help, so the outcome is final.
    pub unsendable: bool,
}

impl AttemptReport {
    /// An attempt that ended before an answer, with `error`.
    pub fn failed(started_at: DateTime<Utc>, duration: Duration, error: String) -> AttemptReport {
        AttemptReport {
            started_at,
            duration,
            response_code: None,
            response_body: None,
            error: Some(error),
            retry_after: None,
            unsendable: false,
        }
    }

    /// A request that cannot be built from what is stored.
    pub fn unsendable(started_at: DateTime<Utc>, reason: String) -> AttemptReport {
        AttemptReport {
            unsendable: true,
            ..AttemptReport::failed(started_at, Duration::ZERO, reason)
        }
    }
}

/// What an attempt made of its row: the statuses an attempt can end in
/// (never Queued).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutcomeStatus {
    /// The receiver answered 2xx.
    Delivered,
    /// A retry is scheduled.
    Failed,
    /// No attempt follows.
    Exhausted,
}

impl From<OutcomeStatus> for DeliveryStatus {
    fn from(s: OutcomeStatus) -> DeliveryStatus {
        match s {
            OutcomeStatus::Delivered => DeliveryStatus::Delivered,
            OutcomeStatus::Failed => DeliveryStatus::Failed,
            OutcomeStatus::Exhausted => DeliveryStatus::Exhausted,
        }
    }
}

impl std::fmt::Display for OutcomeStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        DeliveryStatus::from(*self).fmt(f)
    }
}

/// The outcome of an attempt, ready to be recorded.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub log_id: i64,
    pub attempt: i32,
    /// The claim's fencing token (see [`Claim::token`]).
    pub token: i64,
    pub status: OutcomeStatus,
    /// For Failed: when the next attempt is due, from now.
    pub retry_in: Option<Duration>,
    pub response_code: Option<i32>,
    pub response_body: Option<Vec<u8>>,
    pub error: Option<String>,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i32,
}

impl Outcome {
    /// What went wrong, in a few words: the error, else the HTTP status.
    pub fn reason(&self) -> String {
        match (&self.error, self.response_code) {
            (Some(e), _) => e.clone(),
            (None, Some(code)) => format!("HTTP {code}"),
            (None, None) => "no answer".into(),
        }
    }
}

/// Turns an attempt into an outcome: 2xx → Delivered; 410 or a request that
/// cannot be built → Exhausted; any other answer or error → Failed with the
/// schedule's next time while attempts remain (and `retries_allowed`), else
/// Exhausted.
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
        token: claim.token,
        status: OutcomeStatus::Delivered,
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
            outcome.status = OutcomeStatus::Exhausted;
            outcome.error = Some("HTTP 410 Gone: the receiver asked for no more deliveries".into());
        }
        _ if report.unsendable => {
            outcome.status = OutcomeStatus::Exhausted;
            outcome.error = Some(format!(
                "request could not be built: {}",
                report.error.as_deref().unwrap_or("unknown reason")
            ));
        }
        _ if retries_allowed && claim.attempt < claim.max_attempts => {
            outcome.status = OutcomeStatus::Failed;
            outcome.retry_in =
                Some(schedule.delay_with_retry_after(claim.attempt as u32, report.retry_after));
        }
        _ => {
            outcome.status = OutcomeStatus::Exhausted;
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
