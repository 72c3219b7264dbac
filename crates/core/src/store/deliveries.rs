//! Delivery rows through their life: recorded at emit, claimed for an attempt,
//! given an outcome, found again by the sweeper, replayed by the operator.
//!
//! Every write that decides a row's fate is conditional on the row's state,
//! judged by the database's clock (`now()`), never a client's, so two
//! workers, two sweepers, an operator or a late writer can never both act on
//! it:
//! - a claim takes only a non-terminal row that is due and not leased, counts
//!   the attempt, sets a lease and bumps the row's fencing token
//!   (`claim_token`);
//! - a replay takes only a Failed or Exhausted row that is not leased, and
//!   bumps the token too;
//! - an outcome is written only while the row still carries its claim's
//!   token: a late outcome of an attempt whose lease ran out can never
//!   overwrite a later claim or a replay.
//!
//! The hot paths (claim, outcomes) take many rows per statement: one round
//! trip per batch, not per delivery.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{
    Array, BigInt, Bytea, Double, Integer, Jsonb, Nullable, Text, Timestamptz,
};
use diesel::PgConnection;
use serde::Serialize;

use crate::attempt::{Claim, ClaimSource, Outcome, OutcomeStatus, SealedCredentials};
use crate::domain::MAX_DURATION;
use crate::domain::{DeliveryAttempt, DeliveryLog, DeliveryStatus, NewDelivery};
use crate::error::{Refusal, StoreError};
use crate::queue::Enqueue;
use crate::request::AllowedHosts;
use crate::store::schema::{sql_types, webhook_delivery_attempts, webhook_request_logs, webhooks};
use crate::store::Store;

/// Rows per INSERT at emit: 17 bind parameters per row stays far below
/// Postgres's 65,535-parameter limit.
pub const INSERT_CHUNK: usize = 1000;

/// A row recorded at emit.
#[derive(Debug, Clone, Serialize)]
pub struct Recorded {
    pub id: i64,
    pub webhook_id: Option<i64>,
    pub event_id: String,
    pub webhook_name: String,
    pub status: DeliveryStatus,
    pub queue: String,
    /// The (event, webhook) pair was already recorded: no new row was made.
    pub duplicate: bool,
}

/// Records `rows`, at most one per (event id, webhook): an event recorded
/// twice returns the existing row marked `duplicate`.
pub fn insert(conn: &mut PgConnection, rows: &[NewDelivery]) -> Result<Vec<Recorded>, StoreError> {
    // A reason quoting a document may hold a NUL, which text cannot.
    let sanitized: Vec<NewDelivery>;
    let rows = if rows
        .iter()
        .any(|r| r.error.as_deref().is_some_and(|e| e.contains('\0')))
    {
        sanitized = rows
            .iter()
            .map(|r| NewDelivery {
                error: r.error.as_deref().map(|e| pg_text(e).into_owned()),
                ..r.clone()
            })
            .collect();
        &sanitized[..]
    } else {
        rows
    };
    let mut out = Vec::with_capacity(rows.len());
    for chunk in rows.chunks(INSERT_CHUNK) {
        let inserted: Vec<(i64, String, Option<i64>, String, DeliveryStatus, String)> =
            diesel::insert_into(webhook_request_logs::table)
                .values(chunk)
                .on_conflict((
                    webhook_request_logs::event_id,
                    webhook_request_logs::webhook_id,
                ))
                .do_nothing()
                .returning((
                    webhook_request_logs::id,
                    webhook_request_logs::event_id,
                    webhook_request_logs::webhook_id,
                    webhook_request_logs::webhook_name,
                    webhook_request_logs::status,
                    webhook_request_logs::queue,
                ))
                .get_results(conn)?;
        let fresh: HashSet<(String, Option<i64>)> = inserted
            .iter()
            .map(|(_, e, w, _, _, _)| (e.clone(), *w))
            .collect();
        out.extend(inserted.into_iter().map(
            |(id, event_id, webhook_id, webhook_name, status, queue)| Recorded {
                id,
                webhook_id,
                event_id,
                webhook_name,
                status,
                queue,
                duplicate: false,
            },
        ));
        for row in chunk
            .iter()
            .filter(|r| !fresh.contains(&(r.event_id.clone(), r.webhook_id)))
        {
            let existing: DeliveryLog = webhook_request_logs::table
                .filter(webhook_request_logs::event_id.eq(&row.event_id))
                .filter(webhook_request_logs::webhook_id.eq(row.webhook_id))
                .select(DeliveryLog::as_select())
                .first(conn)?;
            out.push(Recorded {
                id: existing.id,
                webhook_id: existing.webhook_id,
                status: existing.status,
                event_id: existing.event_id,
                webhook_name: existing.webhook_name,
                queue: existing.queue,
                duplicate: true,
            });
        }
    }
    Ok(out)
}

#[derive(QueryableByName)]
struct ClaimRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    webhook_id: Option<i64>,
    #[diesel(sql_type = Integer)]
    attempts: i32,
    #[diesel(sql_type = Integer)]
    max_attempts: i32,
    #[diesel(sql_type = BigInt)]
    claim_token: i64,
    #[diesel(sql_type = Text)]
    event_id: String,
    #[diesel(sql_type = Text)]
    webhook_name: String,
    #[diesel(sql_type = Text)]
    url: String,
    #[diesel(sql_type = Text)]
    method: String,
    #[diesel(sql_type = Jsonb)]
    headers: serde_json::Value,
    #[diesel(sql_type = Text)]
    body: String,
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Integer)]
    timeout_ms: i32,
    #[diesel(sql_type = Nullable<Text>)]
    secret: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    previous_secret: Option<String>,
    /// The webhook's static headers, values sealed.
    #[diesel(sql_type = Jsonb)]
    static_headers: serde_json::Value,
    /// The webhook's URL (a template when dynamic) and allowed hosts as they
    /// are now.
    #[diesel(sql_type = Text)]
    request_url: String,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    dynamic_url: bool,
    #[diesel(sql_type = Array<Text>)]
    allowed_hosts: Vec<String>,
}

/// The claim. A row is claimable when it is not terminal, not leased, due (a
/// Queued row always is: its next_retry is only when the sweeper would send
/// it), has attempts left, and its webhook still exists, is enabled and is
/// not paused. The lease lasts the webhook's timeout plus a margin.
///
/// The claim touches no indexed column, so Postgres updates the row in place
/// (a HOT update: no index entries); the sweeper skips leased rows itself.
const CLAIM_SQL: &str = "
UPDATE webhook_request_logs l
SET attempts = l.attempts + 1,
    claim_token = l.claim_token + 1,
    lease_expires_at = now() + make_interval(secs => w.timeout_ms / 1000.0 + $2),
    updated_at = now()
FROM webhooks w
WHERE l.id = ANY($1)
  AND w.id = l.webhook_id
  AND w.enabled
  -- Not `w.paused_at IS NULL`: without statistics on the new column the
  -- planner takes that for almost no webhook, drives the join from
  -- webhooks and scans the claimed ids once per webhook (+70% per claim).
  AND NOT EXISTS (SELECT 1 FROM webhooks p WHERE p.id = l.webhook_id AND p.paused_at IS NOT NULL)
  AND l.status IN ('Queued', 'Failed')
  AND (l.lease_expires_at IS NULL OR l.lease_expires_at <= now())
  AND (l.status = 'Queued' OR l.next_retry <= now())
  AND l.attempts < l.max_attempts
RETURNING l.id, l.webhook_id, l.attempts, l.max_attempts, l.claim_token, l.event_id, l.webhook_name, l.url, l.method,
          l.headers, l.body, w.queue, w.timeout_ms, w.secret,
          CASE WHEN w.previous_secret_expires_at > now() THEN w.previous_secret END AS previous_secret,
          w.headers AS static_headers, w.request_url, w.dynamic_url, w.allowed_hosts";

/// Rows that are due but may not be sent: the webhook is gone or disabled, or
/// the attempts ran out (the last one interrupted before its outcome was
/// written). They become Exhausted without a request.
const EXHAUST_UNSENDABLE_SQL: &str = "
UPDATE webhook_request_logs l
SET status = 'Exhausted', next_retry = NULL, lease_expires_at = NULL, updated_at = now(),
    claim_token = l.claim_token + 1,
    error = CASE
        WHEN s.webhook_exists IS NULL THEN 'webhook deleted since the event; not sent'
        WHEN NOT s.webhook_enabled THEN 'webhook disabled since the event; not sent'
        ELSE format('out of attempts: %s of %s made, the last interrupted before its outcome was recorded',
                    l.attempts, l.max_attempts)
    END
FROM (SELECT l2.id, w.id AS webhook_exists, w.enabled AS webhook_enabled
      FROM webhook_request_logs l2 LEFT JOIN webhooks w ON w.id = l2.webhook_id
      WHERE l2.id = ANY($1)) s
WHERE l.id = s.id
  AND l.status IN ('Queued', 'Failed')
  AND (l.lease_expires_at IS NULL OR l.lease_expires_at <= now())
  AND (l.status = 'Queued' OR l.next_retry <= now())
  AND (s.webhook_exists IS NULL OR NOT s.webhook_enabled OR l.attempts >= l.max_attempts)
RETURNING l.id, l.error";

#[derive(QueryableByName)]
struct IdReason {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Nullable<Text>)]
    error: Option<String>,
}

#[derive(QueryableByName)]
struct IdOnly {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

/// What a claim decided for one row: [`claim`] gives one per id it is
/// asked for, in the same order.
#[derive(Debug, Clone)]
// A Send carries the whole request while the other verdicts are a word or
// two; boxing it would cost an allocation for nearly every delivery, and
// verdicts live only as long as one batch takes to sort.
#[allow(clippy::large_enum_variant)]
pub enum Verdict {
    /// Claimed for one attempt: send it.
    Send(Claim),
    /// Made Exhausted without a request (its webhook deleted or disabled,
    /// or out of attempts), with the reason.
    Exhausted(String),
    /// Held by another attempt's lease for this long yet, by the database's
    /// clock (its worker may have died: the job can claim the row once the
    /// lease ends).
    Leased(Duration),
    /// Due, but its webhook is paused: the row waits, untouched, for
    /// `webhook resume` (which enqueues it again).
    Paused,
    /// No such row.
    Missing,
    /// Terminal, or not due, or a second job for a row this batch claimed:
    /// a stale duplicate.
    Stale,
    /// The database would not claim the row, with its reason (given by
    /// callers that split a refused claim row by row).
    Refused(String),
}

/// Claims the rows `ids` for one attempt each, in one statement (two or three
/// more only for rows that cannot be claimed), and says what became of each:
/// one verdict per id, in order. `lease_margin` is added to each webhook's
/// timeout.
pub fn claim(
    conn: &mut PgConnection,
    ids: &[i64],
    lease_margin: Duration,
) -> Result<Vec<Verdict>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<ClaimRow> = diesel::sql_query(CLAIM_SQL)
        .bind::<Array<BigInt>, _>(ids)
        .bind::<Double, _>(lease_margin.as_secs_f64())
        .load(conn)?;
    // Each claim goes to the first job naming its row; a second is stale.
    let mut claims: HashMap<i64, Option<Claim>> = rows
        .into_iter()
        .map(|r| (r.id, Some(claim_of(r))))
        .collect();
    let rest: Vec<i64> = unique(ids.iter().copied().filter(|id| !claims.contains_key(id)));
    let unclaimed = if rest.is_empty() {
        HashMap::new()
    } else {
        why_unclaimed(conn, rest)?
    };
    Ok(ids
        .iter()
        .map(|id| match claims.get_mut(id) {
            Some(claim) => claim.take().map_or(Verdict::Stale, Verdict::Send),
            // Every row not claimed has its verdict there.
            None => unclaimed.get(id).cloned().unwrap_or(Verdict::Missing),
        })
        .collect())
}

/// The claim a claimed row allows, sent where the webhook points now.
fn claim_of(r: ClaimRow) -> Claim {
    let (url, url_refused) = match destination(&r) {
        Ok(url) => (url, None),
        Err(reason) => (r.url.clone(), Some(reason)),
    };
    Claim::new(ClaimSource {
        log_id: r.id,
        attempt: r.attempts,
        max_attempts: r.max_attempts,
        token: r.claim_token,
        event_id: r.event_id,
        webhook_name: r.webhook_name,
        webhook_id: r.webhook_id,
        url,
        url_refused,
        method: r.method,
        frozen_headers: &r.headers,
        body: r.body,
        timeout: Duration::from_millis(r.timeout_ms.max(1) as u64),
        queue: r.queue,
        credentials: SealedCredentials {
            headers: &r.static_headers,
            secret: r.secret.as_deref(),
            previous_secret: r.previous_secret.as_deref(),
        },
    })
}

/// Why each of `ids` (distinct rows the claim did not take) was not
/// claimed: rows that may not be sent are made Exhausted here; the others
/// are found leased, paused, stale or missing.
fn why_unclaimed(
    conn: &mut PgConnection,
    ids: Vec<i64>,
) -> Result<HashMap<i64, Verdict>, StoreError> {
    let exhausted: Vec<IdReason> = diesel::sql_query(EXHAUST_UNSENDABLE_SQL)
        .bind::<Array<BigInt>, _>(&ids)
        .load(conn)?;
    let mut verdicts: HashMap<i64, Verdict> = exhausted
        .into_iter()
        .map(|r| (r.id, Verdict::Exhausted(r.error.unwrap_or_default())))
        .collect();
    let rest: Vec<i64> = ids
        .into_iter()
        .filter(|id| !verdicts.contains_key(id))
        .collect();
    if rest.is_empty() {
        return Ok(verdicts);
    }
    #[derive(QueryableByName)]
    struct Found {
        #[diesel(sql_type = BigInt)]
        id: i64,
        /// Seconds left on a live lease.
        #[diesel(sql_type = Nullable<Double>)]
        lease: Option<f64>,
        /// Pending, and its webhook is paused.
        #[diesel(sql_type = diesel::sql_types::Bool)]
        paused: bool,
    }
    let found: HashMap<i64, (Option<f64>, bool)> = diesel::sql_query(
        "SELECT l.id,
                CASE WHEN l.status IN ('Queued', 'Failed') AND l.lease_expires_at > now()
                     THEN extract(epoch FROM l.lease_expires_at - now())::float8 END AS lease,
                (l.status IN ('Queued', 'Failed') AND w.paused_at IS NOT NULL) AS paused
         FROM webhook_request_logs l LEFT JOIN webhooks w ON w.id = l.webhook_id
         WHERE l.id = ANY($1)",
    )
    .bind::<Array<BigInt>, _>(&rest)
    .load::<Found>(conn)?
    .into_iter()
    .map(|r| (r.id, (r.lease, r.paused)))
    .collect();
    for id in rest {
        let verdict = match found.get(&id) {
            Some((Some(left), _)) => {
                Verdict::Leased(Duration::from_secs_f64(left.clamp(0.0, 86_400.0)))
            }
            Some((None, true)) => Verdict::Paused,
            Some((None, false)) => Verdict::Stale,
            None => Verdict::Missing,
        };
        verdicts.insert(id, verdict);
    }
    Ok(verdicts)
}

/// Takes a workflow_transition row for its one synchronous attempt: the row
/// was recorded counting that attempt, with `inserted_token`; it is leased
/// for `lease` by the database's clock and its token moves on. Refused
/// (nothing is to be sent) if the row was given up meanwhile.
pub fn take_for_transition(
    conn: &mut PgConnection,
    id: i64,
    inserted_token: i64,
    lease: Duration,
) -> Result<i64, StoreError> {
    let token: Option<i64> = diesel::sql_query(
        "UPDATE webhook_request_logs
         SET claim_token = claim_token + 1,
             lease_expires_at = now() + make_interval(secs => $3),
             next_retry = now() + make_interval(secs => $3),
             updated_at = now()
         WHERE id = $1 AND claim_token = $2 AND status = 'Queued'
         RETURNING claim_token",
    )
    .bind::<BigInt, _>(id)
    .bind::<BigInt, _>(inserted_token)
    .bind::<Double, _>(lease.as_secs_f64())
    .get_result::<TokenOnly>(conn)
    .optional()?
    .map(|t| t.claim_token);
    token.ok_or(StoreError::Refused(Refusal::Fenced(id)))
}

#[derive(QueryableByName)]
struct TokenOnly {
    #[diesel(sql_type = BigInt)]
    claim_token: i64,
}

/// The webhook of each row in `ids` (None: deleted; rows that do not exist
/// are left out): for jobs that do not name their webhook.
pub fn webhooks_of(
    conn: &mut PgConnection,
    ids: &[i64],
) -> Result<Vec<(i64, Option<i64>)>, StoreError> {
    Ok(webhook_request_logs::table
        .filter(webhook_request_logs::id.eq_any(ids))
        .select((webhook_request_logs::id, webhook_request_logs::webhook_id))
        .load(conn)?)
}

/// Where an attempt goes, given the webhook as it is now (its credentials
/// are the webhook's as they are now, so its destination must be too): a
/// static URL is the webhook's current one (a receiver that moved gets its
/// pending retries); a URL rendered at emit must still be on a host the
/// webhook allows, else the row cannot be sent.
fn destination(r: &ClaimRow) -> Result<String, String> {
    if !r.dynamic_url {
        return Ok(r.request_url.clone());
    }
    let url = url::Url::parse(&r.url).map_err(|e| format!("stored URL is not valid: {e}"))?;
    AllowedHosts::for_template(true, &r.request_url, &r.allowed_hosts)
        .check(&url)
        .map_err(|e| format!("{e} (any more)"))?;
    Ok(r.url.clone())
}

fn unique(ids: impl Iterator<Item = i64>) -> Vec<i64> {
    let mut seen = HashSet::new();
    ids.filter(|id| seen.insert(*id)).collect()
}

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

/// Postgres `text` cannot hold NUL: one in a stored string is replaced with
/// U+FFFD, so no message can keep an outcome from being written.
pub fn pg_text(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        std::borrow::Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// Records `outcomes` (see [`RECORD_SQL`]); returns the ids whose row took it.
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

/// A row the sweeper should enqueue.
#[derive(Debug, Clone, QueryableByName)]
pub struct DueRow {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub webhook_id: Option<i64>,
    #[diesel(sql_type = Text)]
    pub queue: String,
    #[diesel(sql_type = Timestamptz)]
    pub next_retry: DateTime<Utc>,
}

/// Rows whose next_retry has passed, oldest first, after the position
/// `after` (keyset paging within one tick), at most `limit`. Both forms walk
/// the partial index on (next_retry, id) in order and stop after `limit`
/// rows, however large the table is. A paused webhook's rows are held
/// ([`HELD_UNTIL`]) by the first worker that meets one, so they leave the
/// due part of the index after at most one enqueue each.
pub fn due(
    conn: &mut PgConnection,
    after: Option<(DateTime<Utc>, i64)>,
    limit: i64,
) -> Result<Vec<DueRow>, StoreError> {
    // A leased row is in flight: it comes due again when its lease ends.
    const SELECT: &str =
        "SELECT l.id, l.webhook_id, COALESCE(w.queue, l.queue) AS queue, l.next_retry
         FROM webhook_request_logs l LEFT JOIN webhooks w ON w.id = l.webhook_id";
    Ok(match after {
        None => diesel::sql_query(format!(
            "{SELECT} WHERE l.next_retry <= now() AND {LEASE_FREE} ORDER BY l.next_retry, l.id LIMIT $1"
        ))
        .bind::<BigInt, _>(limit)
        .load(conn)?,
        Some((time, id)) => diesel::sql_query(format!(
            "{SELECT} WHERE l.next_retry <= now() AND {LEASE_FREE} AND (l.next_retry, l.id) > ($1, $2)
             ORDER BY l.next_retry, l.id LIMIT $3"
        ))
        .bind::<Timestamptz, _>(time)
        .bind::<BigInt, _>(id)
        .bind::<BigInt, _>(limit)
        .load(conn)?,
    })
}

impl From<&DueRow> for Enqueue {
    fn from(r: &DueRow) -> Enqueue {
        Enqueue {
            log_id: r.id,
            queue: r.queue.clone(),
            webhook_id: r.webhook_id,
        }
    }
}

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

/// No attempt holds the row (judged by the database's clock).
const LEASE_FREE: &str = "(l.lease_expires_at IS NULL OR l.lease_expires_at <= now())";

/// The next_retry of a held row: the row of a paused webhook waits, out of
/// every sweeper's reach (it is never due), until `webhook resume` (or the
/// webhook's deletion) releases it. A finite date, so every reader can
/// still read it as a time.
pub const HELD_UNTIL: &str = "'9999-01-01 00:00:00+00'::timestamptz";

/// The time [`HELD_UNTIL`] names, for readers that show a row.
pub fn held_until() -> DateTime<Utc> {
    DateTime::<Utc>::from_naive_utc_and_offset(
        chrono::NaiveDate::from_ymd_opt(9999, 1, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .unwrap_or_default(),
        Utc,
    )
}

/// Holds the pending, unleased rows among `ids` whose webhook is paused
/// (see [`HELD_UNTIL`]); returns those held. The webhooks are read with a
/// share lock, so a resume or a delete either waits for this statement
/// (and then finds the rows it held) or commits first (and nothing is
/// held): a row is never held after its webhook's resume has looked.
pub fn hold(conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<i64>, StoreError> {
    let held: Vec<IdOnly> = diesel::sql_query(format!(
        "WITH paused AS (
             SELECT w.id FROM webhooks w
             WHERE w.paused_at IS NOT NULL
               AND w.id IN (SELECT webhook_id FROM webhook_request_logs WHERE id = ANY($1))
             ORDER BY w.id
             FOR SHARE
         )
         UPDATE webhook_request_logs l SET next_retry = {HELD_UNTIL}
         FROM paused p
         WHERE l.id = ANY($1) AND l.webhook_id = p.id
           AND l.status IN ('Queued', 'Failed') AND {LEASE_FREE}
         RETURNING l.id"
    ))
    .bind::<Array<BigInt>, _>(ids)
    .load(conn)?;
    Ok(held.into_iter().map(|r| r.id).collect())
}

/// Makes up to `limit` held rows of webhook `webhook_id` after `after_id`
/// due now, oldest first, and returns them to be enqueued (empty: none
/// left). Held rows share one next_retry, so this walks the sweeper's index
/// over the held rows alone, in id order.
pub fn release_held(
    conn: &mut PgConnection,
    webhook_id: i64,
    after_id: i64,
    limit: i64,
) -> Result<Vec<DueRow>, StoreError> {
    let mut released: Vec<DueRow> = diesel::sql_query(format!(
        "UPDATE webhook_request_logs l SET next_retry = now()
         WHERE l.id IN (SELECT id FROM webhook_request_logs
                        WHERE next_retry = {HELD_UNTIL} AND webhook_id = $1 AND id > $2
                        ORDER BY next_retry, id LIMIT $3)
           AND l.next_retry = {HELD_UNTIL}
         RETURNING l.id, l.webhook_id, {QUEUE_NOW} AS queue, l.next_retry"
    ))
    .bind::<BigInt, _>(webhook_id)
    .bind::<BigInt, _>(after_id)
    .bind::<BigInt, _>(limit)
    .load(conn)?;
    released.sort_unstable_by_key(|r| r.id);
    Ok(released)
}

/// The due rows of webhook `webhook_id` (held rows are not due), not
/// leased, oldest first, after the position `after`, at most `limit`: what
/// `webhook resume` enqueues besides the rows it releases. Walks the
/// sweeper's index over the due rows.
pub fn due_of_webhook(
    conn: &mut PgConnection,
    webhook_id: i64,
    after: Option<(DateTime<Utc>, i64)>,
    limit: i64,
) -> Result<Vec<DueRow>, StoreError> {
    // Before every row: a time Postgres can hold (chrono's minimum it
    // cannot).
    let (time, id) = after.unwrap_or((DateTime::<Utc>::UNIX_EPOCH, 0));
    Ok(diesel::sql_query(format!(
        "SELECT l.id, l.webhook_id, {QUEUE_NOW} AS queue, l.next_retry
         FROM webhook_request_logs l
         WHERE l.next_retry <= now() AND l.webhook_id = $1 AND (l.next_retry, l.id) > ($2, $3)
           AND {LEASE_FREE}
         ORDER BY l.next_retry, l.id LIMIT $4"
    ))
    .bind::<BigInt, _>(webhook_id)
    .bind::<Timestamptz, _>(time)
    .bind::<BigInt, _>(id)
    .bind::<BigInt, _>(limit)
    .load(conn)?)
}

/// The queue a row goes to now: its webhook's current queue while it exists.
const QUEUE_NOW: &str =
    "COALESCE((SELECT w.queue FROM webhooks w WHERE w.id = l.webhook_id), l.queue)";

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

/// Whose rows a filter by webhook name selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookRows {
    /// A webhook that exists: its rows by id, whatever name they were
    /// recorded under (it may have been renamed since).
    Id(i64),
    /// No webhook has this name now: the rows of deleted webhooks recorded
    /// under it.
    Deleted(String),
}

/// Resolves a webhook name for a filter (see [`WebhookRows`]).
pub fn webhook_rows(conn: &mut PgConnection, name: &str) -> Result<WebhookRows, StoreError> {
    let id: Option<i64> = webhooks::table
        .filter(webhooks::name.eq(name))
        .select(webhooks::id)
        .first(conn)
        .optional()?;
    Ok(match id {
        Some(id) => WebhookRows::Id(id),
        None => WebhookRows::Deleted(name.to_string()),
    })
}

/// Filters for `delivery list` and the API's delivery list.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub status: Option<DeliveryStatus>,
    pub webhook: Option<WebhookRows>,
    /// The document's name (Frappe's `name`, e.g. SO-0001), exactly.
    pub document: Option<String>,
    pub event: Option<String>,
    /// The event id (the `webhook-id` header the receiver saw).
    pub event_id: Option<String>,
    /// Recorded at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Recorded before this time.
    pub until: Option<DateTime<Utc>>,
    /// Only rows with a smaller id (the next page after the last one seen).
    pub before_id: Option<i64>,
    pub limit: i64,
}

/// Newest first.
pub fn list(conn: &mut PgConnection, filter: &ListFilter) -> Result<Vec<DeliveryLog>, StoreError> {
    let mut q = webhook_request_logs::table
        .select(DeliveryLog::as_select())
        .into_boxed();
    if let Some(s) = filter.status {
        q = q.filter(webhook_request_logs::status.eq(s));
    }
    match &filter.webhook {
        Some(WebhookRows::Id(id)) => q = q.filter(webhook_request_logs::webhook_id.eq(*id)),
        Some(WebhookRows::Deleted(name)) => {
            q = q
                .filter(webhook_request_logs::webhook_id.is_null())
                .filter(webhook_request_logs::webhook_name.eq(name))
        }
        None => {}
    }
    if let Some(d) = &filter.document {
        q = q.filter(webhook_request_logs::entity_name.eq(d));
    }
    if let Some(e) = &filter.event {
        q = q.filter(webhook_request_logs::event.eq(e));
    }
    if let Some(e) = &filter.event_id {
        q = q.filter(webhook_request_logs::event_id.eq(e));
    }
    if let Some(t) = filter.since {
        q = q.filter(webhook_request_logs::created_at.ge(t));
    }
    if let Some(t) = filter.until {
        q = q.filter(webhook_request_logs::created_at.lt(t));
    }
    if let Some(id) = filter.before_id {
        q = q.filter(webhook_request_logs::id.lt(id));
    }
    Ok(q.order(webhook_request_logs::id.desc())
        .limit(filter.limit.max(1))
        .load(conn)?)
}

/// [`list`], stopped by Postgres after `limit` (a person's search must
/// never hold a connection, or Postgres's time, for long: a filter no index
/// serves walks the table). In its own transaction, so the limit is set
/// with SET LOCAL and works through a pooler.
pub fn list_within(
    conn: &mut PgConnection,
    filter: &ListFilter,
    limit: Duration,
) -> Result<Vec<DeliveryLog>, StoreError> {
    let started = std::time::Instant::now();
    conn.transaction(|conn| {
        diesel::sql_query(format!(
            "SET LOCAL statement_timeout = {}",
            limit.as_millis().max(1)
        ))
        .execute(conn)?;
        list(conn, filter)
    })
    // Postgres's words for the cancel depend on its language: the clock
    // says what stopped the query.
    .map_err(|e| match e {
        StoreError::Query(diesel::result::Error::DatabaseError(..))
            if started.elapsed() >= limit =>
        {
            StoreError::Refused(Refusal::TooSlow(limit))
        }
        other => other,
    })
}

pub fn get(conn: &mut PgConnection, id: i64) -> Result<DeliveryLog, StoreError> {
    webhook_request_logs::table
        .find(id)
        .select(DeliveryLog::as_select())
        .first(conn)
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("delivery {id}")))
}

pub fn attempts(conn: &mut PgConnection, log_id: i64) -> Result<Vec<DeliveryAttempt>, StoreError> {
    Ok(webhook_delivery_attempts::table
        .filter(webhook_delivery_attempts::log_id.eq(log_id))
        .order(webhook_delivery_attempts::attempt)
        .select(DeliveryAttempt::as_select())
        .load(conn)?)
}

/// The most due rows [`backlog`] counts: counting walks the due part of
/// the next_retry index, so a huge backlog is reported as "at least this"
/// rather than walked whole every tick.
pub const MAX_BACKLOG_COUNT: i64 = 1_000_000;

#[derive(diesel::QueryableByName)]
struct CountRow {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// Rows whose attempt is due (at most [`MAX_BACKLOG_COUNT`]) and the
/// oldest due time, for the sweeper's gauges (held rows are never due).
/// Both walk the next_retry index.
pub fn backlog(conn: &mut PgConnection) -> Result<(i64, Option<DateTime<Utc>>), StoreError> {
    #[derive(QueryableByName)]
    struct Oldest {
        #[diesel(sql_type = Timestamptz)]
        next_retry: DateTime<Utc>,
    }
    const DUE: &str = "FROM webhook_request_logs WHERE next_retry <= now()";
    let oldest: Option<Oldest> = diesel::sql_query(format!(
        "SELECT next_retry {DUE} ORDER BY next_retry LIMIT 1"
    ))
    .get_result(conn)
    .optional()?;
    let count: CountRow = diesel::sql_query(format!(
        "SELECT count(*) AS n FROM (SELECT 1 {DUE} LIMIT $1) due"
    ))
    .bind::<BigInt, _>(MAX_BACKLOG_COUNT)
    .get_result(conn)?;
    Ok((count.n, oldest.map(|o| o.next_retry)))
}

/// When [`counts`] estimates instead of counting.
#[derive(Debug, Clone, Copy)]
pub struct CountLimits {
    /// From this many rows (by the planner's count), terminal rows are
    /// estimated from the table's statistics instead of counted.
    pub exact_below: f64,
    /// Pending rows are counted up to this many; past it the counts are
    /// lower bounds.
    pub pending_cap: i64,
}

impl Default for CountLimits {
    fn default() -> CountLimits {
        CountLimits {
            // A count of 10 million rows takes seconds on a small machine,
            // the estimate a millisecond; a million is counted in ~100 ms.
            exact_below: 1_000_000.0,
            // Pending rows are read from the heap through their partial
            // index: 100,000 take ~100 ms, which keeps `stats` well under a
            // second whatever the backlog.
            pending_cap: 100_000,
        }
    }
}

/// Row counts and the oldest pending time, for `stats`.
#[derive(Debug, Clone, Serialize)]
pub struct Counts {
    pub queued: i64,
    pub delivered: i64,
    pub failed: i64,
    pub exhausted: i64,
    /// Delivered and Exhausted are estimates from the table's statistics
    /// (as of its last ANALYZE), or the pending counts reached their cap
    /// (and are lower bounds): see [`CountLimits`].
    pub estimated: bool,
    /// The earliest next_retry that has passed (a backlog's age), if any.
    pub oldest_due: Option<DateTime<Utc>>,
    /// The earliest next_retry of all pending rows but the held ones.
    pub next_due: Option<DateTime<Utc>>,
}

#[derive(QueryableByName)]
struct StatusCount {
    #[diesel(sql_type = sql_types::DeliveryStatus)]
    status: DeliveryStatus,
    #[diesel(sql_type = Double)]
    n: f64,
}

/// Pending rows are counted exactly (up to a cap) through the partial index
/// of pending rows; terminal rows are counted too while the table is small,
/// and estimated from the planner's statistics once it is large (see
/// [`CountLimits`]). So `stats` stays well under a second at 10 million
/// rows.
pub fn counts(conn: &mut PgConnection, limits: CountLimits) -> Result<Counts, StoreError> {
    #[derive(QueryableByName)]
    struct Size {
        #[diesel(sql_type = Double)]
        rows: f64,
    }
    let size: Size = diesel::sql_query(
        "SELECT reltuples::float8 AS rows FROM pg_class WHERE oid = 'webhook_request_logs'::regclass",
    )
    .get_result(conn)?;
    // -1: never analyzed (a new table), so small enough to count.
    let estimate = size.rows >= limits.exact_below;
    let pending: Vec<StatusCount> = diesel::sql_query(
        "SELECT status, count(*)::float8 AS n
         FROM (SELECT status FROM webhook_request_logs WHERE next_retry IS NOT NULL LIMIT $1) p
         GROUP BY status",
    )
    .bind::<BigInt, _>(limits.pending_cap)
    .load(conn)?;
    let terminal: Vec<StatusCount> = if estimate {
        diesel::sql_query(
            "SELECT v.status::delivery_status AS status, (v.freq * $1)::float8 AS n
             FROM pg_stats s,
                  unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS v(status, freq)
             WHERE s.schemaname = current_schema() AND s.tablename = 'webhook_request_logs'
               AND s.attname = 'status' AND v.status IN ('Delivered', 'Exhausted')",
        )
        .bind::<Double, _>(size.rows)
        .load(conn)?
    } else {
        diesel::sql_query(
            "SELECT status, count(*)::float8 AS n FROM webhook_request_logs
             WHERE next_retry IS NULL GROUP BY status",
        )
        .load(conn)?
    };
    let get = |s: DeliveryStatus| {
        pending
            .iter()
            .chain(&terminal)
            .filter(|c| c.status == s)
            .map(|c| c.n.round() as i64)
            .sum::<i64>()
    };
    let next_due: Option<DateTime<Utc>> = webhook_request_logs::table
        .filter(webhook_request_logs::next_retry.lt(held_until()))
        .select(diesel::dsl::min(webhook_request_logs::next_retry))
        .first(conn)?;
    let pending_total: f64 = pending.iter().map(|c| c.n).sum();
    Ok(Counts {
        queued: get(DeliveryStatus::Queued),
        delivered: get(DeliveryStatus::Delivered),
        failed: get(DeliveryStatus::Failed),
        exhausted: get(DeliveryStatus::Exhausted),
        estimated: estimate || pending_total >= limits.pending_cap as f64,
        oldest_due: next_due.filter(|t| *t <= Utc::now()),
        next_due,
    })
}

/// Attempts that started in one minute, by outcome.
#[derive(Debug, Clone, QueryableByName, Serialize)]
pub struct MinuteCount {
    #[diesel(sql_type = Timestamptz)]
    pub minute: DateTime<Utc>,
    /// Answered 2xx.
    #[diesel(sql_type = BigInt)]
    pub ok: i64,
    /// Anything else (an error status, a timeout, a refused connection).
    #[diesel(sql_type = BigInt)]
    pub failed: i64,
}

/// Attempts per minute over the last `minutes` minutes, oldest first, one
/// entry per minute (zeros included). Reads the attempts table through its
/// BRIN index on started_at, so the table's size does not matter.
pub fn attempts_per_minute(
    conn: &mut PgConnection,
    minutes: i32,
) -> Result<Vec<MinuteCount>, StoreError> {
    Ok(diesel::sql_query(
        "WITH m AS (
             SELECT generate_series(date_trunc('minute', now()) - ($1 - 1) * interval '1 minute',
                                    date_trunc('minute', now()), interval '1 minute') AS minute
         ), a AS (
             SELECT date_trunc('minute', started_at) AS minute,
                    count(*) FILTER (WHERE error IS NULL AND response_code BETWEEN 200 AND 299) AS ok,
                    count(*) FILTER (WHERE NOT (error IS NULL AND response_code BETWEEN 200 AND 299)
                                        OR response_code IS NULL) AS failed
             FROM webhook_delivery_attempts
             WHERE started_at >= date_trunc('minute', now()) - ($1 - 1) * interval '1 minute'
             GROUP BY 1
         )
         SELECT m.minute, coalesce(a.ok, 0) AS ok, coalesce(a.failed, 0) AS failed
         FROM m LEFT JOIN a USING (minute) ORDER BY m.minute",
    )
    .bind::<Integer, _>(minutes)
    .load(conn)?)
}
