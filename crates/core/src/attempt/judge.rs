//! What an attempt made of its row: what happened on the wire
//! ([`AttemptReport`]), and [`judge`], which turns it into the outcome to
//! record (Delivered, Failed with the schedule's next time, or Exhausted).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::attempt::Claim;
use crate::domain::{DeliveryStatus, RetrySchedule};

/// How much of a response body is kept on the row. Enough for an error page's
/// message; a receiver that answers with megabytes is not stored.
pub const RESPONSE_BODY_LIMIT: usize = 4096;

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
