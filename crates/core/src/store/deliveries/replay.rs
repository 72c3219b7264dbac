//! Replay: an operator's retry of one row or of a webhook's rows after an
//! outage, each taken only when no attempt holds it.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Integer, Nullable, Text, Timestamptz};
use diesel::PgConnection;
use serde::Serialize;

use crate::domain::DeliveryStatus;
use crate::error::{Refusal, StoreError};
use crate::queue::Enqueue;
use crate::store::schema::sql_types;

use super::{CountRow, LEASE_FREE, QUEUE_NOW};

/// What a manual replay did.
#[derive(Debug, Clone, Serialize)]
pub struct Replayed {
    pub id: i64,
    pub webhook_id: Option<i64>,
    pub previous_status: DeliveryStatus,
    pub queue: String,
    /// The attempt this replay allows (attempts made so far + 1).
    pub next_attempt: i32,
}

impl From<&Replayed> for Enqueue {
    fn from(r: &Replayed) -> Enqueue {
        Enqueue {
            log_id: r.id,
            queue: r.queue.clone(),
            webhook_id: r.webhook_id,
        }
    }
}

/// Makes one row due now: Failed stays Failed, Exhausted (and, with `force`,
/// Delivered) becomes Failed with one more attempt allowed, and its fencing
/// token moves on, so an outcome of an earlier attempt can no longer be
/// written over it. A row with an attempt in flight (by the database's
/// clock) is refused.
pub fn replay(conn: &mut PgConnection, id: i64, force: bool) -> Result<Replayed, StoreError> {
    #[derive(QueryableByName)]
    struct Before {
        #[diesel(sql_type = BigInt)]
        id: i64,
        #[diesel(sql_type = Nullable<BigInt>)]
        webhook_id: Option<i64>,
        #[diesel(sql_type = sql_types::DeliveryStatus)]
        status: DeliveryStatus,
        #[diesel(sql_type = Text)]
        queue: String,
        #[diesel(sql_type = Integer)]
        attempts: i32,
        #[diesel(sql_type = diesel::sql_types::Bool)]
        in_flight: bool,
    }
    let replayable: &[DeliveryStatus] = if force {
        &[
            DeliveryStatus::Failed,
            DeliveryStatus::Exhausted,
            DeliveryStatus::Delivered,
        ]
    } else {
        &[DeliveryStatus::Failed, DeliveryStatus::Exhausted]
    };
    // The row as it was (for the report) and the update, in one statement.
    let done: Option<Before> = diesel::sql_query(format!(
        "WITH before AS (
             SELECT id, status FROM webhook_request_logs WHERE id = $1 FOR UPDATE
         )
         UPDATE webhook_request_logs l
         SET status = 'Failed', next_retry = now(), lease_expires_at = NULL,
             claim_token = l.claim_token + 1,
             max_attempts = GREATEST(l.max_attempts, l.attempts + 1), updated_at = now()
         FROM before b
         WHERE l.id = b.id AND l.status = ANY($2)
           AND {LEASE_FREE}
         RETURNING l.id, l.webhook_id, b.status, {QUEUE_NOW} AS queue, l.attempts, false AS in_flight"
    ))
    .bind::<BigInt, _>(id)
    .bind::<Array<sql_types::DeliveryStatus>, _>(replayable)
    .get_result(conn)
    .optional()?;
    if let Some(r) = done {
        return Ok(Replayed {
            id: r.id,
            webhook_id: r.webhook_id,
            previous_status: r.status,
            queue: r.queue,
            next_attempt: r.attempts + 1,
        });
    }
    // Nothing changed: say why, from the row as it is now.
    let why: Option<Before> = diesel::sql_query(format!(
        "SELECT l.id, l.webhook_id, l.status, {QUEUE_NOW} AS queue, l.attempts,
                NOT {LEASE_FREE} AS in_flight
         FROM webhook_request_logs l WHERE l.id = $1"
    ))
    .bind::<BigInt, _>(id)
    .get_result(conn)
    .optional()?;
    Err(match why {
        None => StoreError::NotFound(format!("delivery {id}")),
        Some(r) if r.in_flight => StoreError::Refused(Refusal::InFlight(id)),
        Some(r) if r.status == DeliveryStatus::Delivered => {
            StoreError::Refused(Refusal::AlreadyDelivered(id))
        }
        Some(_) => StoreError::Refused(Refusal::NotYetAttempted(id)),
    })
}

/// Bulk replay: every row of webhook `webhook_id` in `status` updated since
/// `since` (after an outage longer than the schedule). Returns the rows
/// touched.
pub fn replay_bulk(
    conn: &mut PgConnection,
    webhook_id: i64,
    status: DeliveryStatus,
    since: DateTime<Utc>,
) -> Result<Vec<Replayed>, StoreError> {
    if status == DeliveryStatus::Queued {
        return Err(StoreError::Refused(Refusal::BulkQueued));
    }
    #[derive(QueryableByName)]
    struct Touched {
        #[diesel(sql_type = BigInt)]
        id: i64,
        #[diesel(sql_type = Nullable<BigInt>)]
        webhook_id: Option<i64>,
        #[diesel(sql_type = Text)]
        queue: String,
        #[diesel(sql_type = Integer)]
        attempts: i32,
    }
    let touched: Vec<Touched> = diesel::sql_query(format!(
        "UPDATE webhook_request_logs l
         SET status = 'Failed', next_retry = now(), lease_expires_at = NULL,
             claim_token = l.claim_token + 1,
             max_attempts = GREATEST(l.max_attempts, l.attempts + 1), updated_at = now()
         WHERE l.webhook_id = $1 AND l.status = $2 AND l.updated_at >= $3 AND {LEASE_FREE}
         RETURNING l.id, l.webhook_id, {QUEUE_NOW} AS queue, l.attempts"
    ))
    .bind::<BigInt, _>(webhook_id)
    .bind::<sql_types::DeliveryStatus, _>(status)
    .bind::<Timestamptz, _>(since)
    .load(conn)?;
    Ok(touched
        .into_iter()
        .map(|t| Replayed {
            id: t.id,
            webhook_id: t.webhook_id,
            previous_status: status,
            queue: t.queue,
            next_attempt: t.attempts + 1,
        })
        .collect())
}

/// How many rows [`replay_bulk`] would replay now (its dry run).
pub fn count_bulk(
    conn: &mut PgConnection,
    webhook_id: i64,
    status: DeliveryStatus,
    since: DateTime<Utc>,
) -> Result<i64, StoreError> {
    if status == DeliveryStatus::Queued {
        return Err(StoreError::Refused(Refusal::BulkQueued));
    }
    let n: CountRow = diesel::sql_query(format!(
        "SELECT count(*) AS n FROM webhook_request_logs l
         WHERE l.webhook_id = $1 AND l.status = $2 AND l.updated_at >= $3 AND {LEASE_FREE}"
    ))
    .bind::<BigInt, _>(webhook_id)
    .bind::<sql_types::DeliveryStatus, _>(status)
    .bind::<Timestamptz, _>(since)
    .get_result(conn)?;
    Ok(n.n)
}
