//! Record: outcomes and their attempts written in one statement per batch,
//! fenced by the claim's token; an outcome the database refuses whole is
//! written plainly.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Bytea, Double, Integer, Nullable, Text, Timestamptz};
use diesel::PgConnection;

use crate::attempt::{Outcome, OutcomeStatus};
use crate::domain::DeliveryStatus;
use crate::domain::MAX_DURATION;
use crate::error::StoreError;
use crate::store::schema::sql_types;
use crate::store::Store;

use super::{pg_text, IdOnly};

/// Writes outcomes and their attempts in one statement. A row is updated only
/// while it still carries the fencing token of the claim that produced the
/// outcome; the attempt itself is always kept. Returns the ids updated.
const RECORD_SQL: &str = "
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::int[], $3::bigint[], $4::delivery_status[], $5::float8[],
                         $6::int[], $7::bytea[], $8::text[], $9::timestamptz[], $10::int[])
        AS t(id, attempt, token, status, retry_in, response_code, response_body, error, started_at, duration_ms)
), updated AS (
    UPDATE webhook_request_logs l
    SET status = i.status,
        next_retry = CASE WHEN i.status = 'Failed' THEN now() + make_interval(secs => i.retry_in) END,
        lease_expires_at = NULL,
        response_code = i.response_code,
        response_body = i.response_body,
        error = i.error,
        updated_at = now()
    FROM input i
    WHERE l.id = i.id AND l.claim_token = i.token AND l.status IN ('Queued', 'Failed')
    RETURNING l.id
), attempts AS (
    INSERT INTO webhook_delivery_attempts (log_id, attempt, started_at, duration_ms, response_code, error, worker)
    SELECT i.id, i.attempt, i.started_at, i.duration_ms, i.response_code, i.error, $11 FROM input i
    -- A row pruned meanwhile keeps no attempts (and must not fail the write).
    WHERE EXISTS (SELECT 1 FROM webhook_request_logs x WHERE x.id = i.id)
    ON CONFLICT (log_id, attempt) DO NOTHING
)
SELECT id FROM updated";

/// Records `outcomes` (see `RECORD_SQL`); returns the ids whose row took it.
pub fn record(
    conn: &mut PgConnection,
    outcomes: &[Outcome],
    worker: &str,
) -> Result<Vec<i64>, StoreError> {
    if outcomes.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = outcomes.iter().map(|o| o.log_id).collect();
    let attempts: Vec<i32> = outcomes.iter().map(|o| o.attempt).collect();
    let tokens: Vec<i64> = outcomes.iter().map(|o| o.token).collect();
    let statuses: Vec<DeliveryStatus> = outcomes.iter().map(|o| o.status.into()).collect();
    // No setting allows a longer delay, and a longer one would overflow the
    // timestamp.
    let retry_in: Vec<Option<f64>> = outcomes
        .iter()
        .map(|o| o.retry_in.map(|d| d.min(MAX_DURATION).as_secs_f64()))
        .collect();
    let codes: Vec<Option<i32>> = outcomes.iter().map(|o| o.response_code).collect();
    let bodies: Vec<Option<&[u8]>> = outcomes
        .iter()
        .map(|o| o.response_body.as_deref())
        .collect();
    let errors: Vec<Option<std::borrow::Cow<'_, str>>> = outcomes
        .iter()
        .map(|o| o.error.as_deref().map(pg_text))
        .collect();
    let started: Vec<DateTime<Utc>> = outcomes.iter().map(|o| o.started_at).collect();
    let durations: Vec<i32> = outcomes.iter().map(|o| o.duration_ms).collect();
    let rows: Vec<IdOnly> = diesel::sql_query(RECORD_SQL)
        .bind::<Array<BigInt>, _>(ids)
        .bind::<Array<Integer>, _>(attempts)
        .bind::<Array<BigInt>, _>(tokens)
        .bind::<Array<sql_types::DeliveryStatus>, _>(statuses)
        .bind::<Array<Nullable<Double>>, _>(retry_in)
        .bind::<Array<Nullable<Integer>>, _>(codes)
        .bind::<Array<Nullable<Bytea>>, _>(bodies)
        .bind::<Array<Nullable<Text>>, _>(errors)
        .bind::<Array<Timestamptz>, _>(started)
        .bind::<Array<Integer>, _>(durations)
        .bind::<Text, _>(worker)
        .load(conn)?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// The last resort for an outcome the database refused even on its own: the
/// same status, schedule and fence, without the receiver's bytes and with a
/// plain error, so the row still ends with its outcome recorded.
pub fn record_plain(
    conn: &mut PgConnection,
    outcome: &Outcome,
    worker: &str,
) -> Result<Vec<i64>, StoreError> {
    let plain = Outcome {
        response_body: None,
        error: Some(format!(
            "{} (the details of this outcome could not be stored)",
            match outcome.status {
                OutcomeStatus::Delivered => "delivered",
                OutcomeStatus::Failed => "failed",
                OutcomeStatus::Exhausted => "exhausted",
            }
        )),
        ..outcome.clone()
    };
    record(conn, std::slice::from_ref(&plain), worker)
}

/// One outcome on its way into the database, written whole while the
/// database takes it and, once it has refused it whole
/// `refusals_before_plain` times, plainly at once ([`record_plain`]), so
/// the row still ends with its outcome. The one path for the outcomes
/// written alone: a worker's, when the database refuses their batch, and a
/// workflow_transition's. Each caller retries [`OutcomeWrite::try_write`]
/// with its own patience ([`crate::runtime::retry_until_stopped`]); the
/// count of refusals is kept here between tries (atomics: a try's future
/// only borrows the write, so it may run on any thread).
pub struct OutcomeWrite {
    outcome: Arc<Outcome>,
    worker: Arc<str>,
    refusals_before_plain: u32,
    refusals: AtomicU32,
    plain: AtomicBool,
}

impl OutcomeWrite {
    /// `outcome`, recorded as written by `worker`.
    pub fn new(outcome: Outcome, worker: &str, refusals_before_plain: u32) -> OutcomeWrite {
        OutcomeWrite {
            outcome: Arc::new(outcome),
            worker: worker.into(),
            refusals_before_plain,
            refusals: AtomicU32::new(0),
            plain: AtomicBool::new(false),
        }
    }

    /// One try (and the plain write at once, if this refusal is the one
    /// that calls for it): the ids whose row took the outcome (none: the row
    /// was claimed again or replayed meanwhile, see [`record`]).
    pub async fn try_write(&self, store: &Store) -> Result<Vec<i64>, StoreError> {
        let plain = self.plain.load(Ordering::Relaxed);
        let result = self.write(store, plain).await;
        let Err(StoreError::Rejected(e)) = &result else {
            return result;
        };
        if plain || self.refusals.fetch_add(1, Ordering::Relaxed) + 1 < self.refusals_before_plain {
            return result;
        }
        tracing::warn!(log_id = self.outcome.log_id, attempt = self.outcome.attempt, error = %e,
            "the database refuses this outcome; recording it without the response");
        self.plain.store(true, Ordering::Relaxed);
        self.write(store, true).await
    }

    async fn write(&self, store: &Store, plain: bool) -> Result<Vec<i64>, StoreError> {
        let (outcome, worker) = (self.outcome.clone(), self.worker.clone());
        store
            .run(move |c| {
                if plain {
                    record_plain(c, &outcome, &worker)
                } else {
                    record(c, std::slice::from_ref(&*outcome), &worker)
                }
            })
            .await
    }
}
