//! A delivery: one row per event per webhook (not per attempt), the status
//! it stands in, and the attempts made for it.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use diesel::deserialize::{self, FromSql, FromSqlRow};
use diesel::expression::AsExpression;
use diesel::pg::{Pg, PgValue};
use diesel::prelude::*;
use diesel::serialize::{self, IsNull, Output, ToSql};
use serde::{Deserialize, Serialize};

use crate::domain::text::named;
use crate::domain::webhook::{parse_headers, Header};
use crate::store::schema::{sql_types, webhook_delivery_attempts, webhook_request_logs};

/// Where a delivery stands. "next_retry is set ⇔ Queued or Failed" holds on
/// every row (a CHECK constraint). Stored as the Postgres enum
/// `delivery_status`, so no row can hold anything else.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    AsExpression,
    FromSqlRow,
    utoipa::ToSchema,
)]
#[diesel(sql_type = sql_types::DeliveryStatus)]
pub enum DeliveryStatus {
    /// Recorded at emit; the first attempt is on a queue.
    Queued,
    /// The receiver answered 2xx.
    Delivered,
    /// A retry is scheduled (never "failed and forgotten").
    Failed,
    /// Terminal: no further attempt; the reason is on the row.
    Exhausted,
}

impl DeliveryStatus {
    pub const ALL: [DeliveryStatus; 4] = [
        DeliveryStatus::Queued,
        DeliveryStatus::Delivered,
        DeliveryStatus::Failed,
        DeliveryStatus::Exhausted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Queued => "Queued",
            DeliveryStatus::Delivered => "Delivered",
            DeliveryStatus::Failed => "Failed",
            DeliveryStatus::Exhausted => "Exhausted",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, DeliveryStatus::Delivered | DeliveryStatus::Exhausted)
    }
}

impl ToSql<sql_types::DeliveryStatus, Pg> for DeliveryStatus {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
        use std::io::Write;
        out.write_all(self.as_str().as_bytes())?;
        Ok(IsNull::No)
    }
}

impl FromSql<sql_types::DeliveryStatus, Pg> for DeliveryStatus {
    fn from_sql(value: PgValue<'_>) -> deserialize::Result<Self> {
        let label = std::str::from_utf8(value.as_bytes())?;
        DeliveryStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == label)
            .ok_or_else(|| format!("unknown delivery status {label:?}").into())
    }
}

impl fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DeliveryStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        named(&DeliveryStatus::ALL, DeliveryStatus::as_str, s).ok_or_else(|| {
            format!("unknown status {s:?} (expected Queued, Delivered, Failed or Exhausted)")
        })
    }
}

/// A delivery record as stored.
#[derive(Debug, Clone, Queryable, Selectable, Identifiable)]
#[diesel(table_name = webhook_request_logs, check_for_backend(diesel::pg::Pg))]
pub struct DeliveryLog {
    pub id: i64,
    pub event_id: String,
    pub webhook_id: Option<i64>,
    pub webhook_name: String,
    pub entity_type: String,
    pub entity_name: String,
    pub event: String,
    pub url: String,
    pub method: String,
    pub headers: serde_json::Value,
    pub body: String,
    pub queue: String,
    pub status: DeliveryStatus,
    pub attempts: i32,
    pub max_attempts: i32,
    pub next_retry: Option<DateTime<Utc>>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub response_code: Option<i32>,
    /// The receiver's answer as it came (bytes: it may be binary), cut at
    /// [`crate::attempt::RESPONSE_BODY_LIMIT`].
    pub response_body: Option<Vec<u8>>,
    pub error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The fencing token of the latest claim or replay.
    pub claim_token: i64,
    /// The W3C trace context the event was emitted in, if any
    /// (`runtime::trace`).
    pub traceparent: Option<String>,
}

impl DeliveryLog {
    /// The stored static headers; an error says the stored value is not a
    /// header list (it never is unless written by hand).
    pub fn header_list(&self) -> Result<Vec<Header>, String> {
        parse_headers(&self.headers)
    }

    /// The response body as text for people: invalid UTF-8 shown as U+FFFD.
    pub fn response_text(&self) -> Option<String> {
        self.response_body
            .as_deref()
            .map(|b| String::from_utf8_lossy(b).into_owned())
    }
}

/// A row to insert at emit time.
#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = webhook_request_logs)]
pub struct NewDelivery {
    pub event_id: String,
    pub webhook_id: Option<i64>,
    pub webhook_name: String,
    pub entity_type: String,
    pub entity_name: String,
    pub event: String,
    pub url: String,
    pub method: String,
    pub headers: serde_json::Value,
    pub body: String,
    pub queue: String,
    pub status: DeliveryStatus,
    pub attempts: i32,
    pub max_attempts: i32,
    pub next_retry: Option<DateTime<Utc>>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub error: Option<String>,
    /// 1 for a row recorded already claimed (workflow_transition), else 0.
    pub claim_token: i64,
    /// The W3C trace context of the emit, if any (`runtime::trace`).
    pub traceparent: Option<String>,
}

/// `role:host:pid`: who holds a key or wrote an attempt.
pub fn process_identity(role: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{role}:{host}:{}", std::process::id())
}

/// One attempt of a delivery.
#[derive(Debug, Clone, Queryable, Selectable, Serialize, utoipa::ToSchema)]
#[diesel(table_name = webhook_delivery_attempts, check_for_backend(diesel::pg::Pg))]
pub struct DeliveryAttempt {
    /// The delivery (its `id`) this attempt belongs to.
    pub log_id: i64,
    /// 1 for the first attempt.
    pub attempt: i32,
    pub started_at: DateTime<Utc>,
    pub duration_ms: i32,
    /// The receiver's status; null when it did not answer.
    #[schema(required)]
    pub response_code: Option<i32>,
    /// Why the attempt failed (a timeout, a refused connection, the status).
    #[schema(required)]
    pub error: Option<String>,
    /// The worker that made it.
    pub worker: String,
}
