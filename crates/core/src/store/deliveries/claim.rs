//! Claim: rows taken for one attempt each, in one statement per batch, and
//! one [`Verdict`] per row for the ones that cannot be sent (Exhausted,
//! leased, paused, stale, missing).

use std::collections::HashMap;
use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Double, Integer, Jsonb, Nullable, Text};
use diesel::PgConnection;

use crate::attempt::{Claim, ClaimSource, Destination, SealedCredentials};
use crate::error::{Refusal, StoreError};
use crate::store::schema::webhook_request_logs;

use super::{pg_text, unique, IdOnly};

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
    #[diesel(sql_type = Nullable<Text>)]
    traceparent: Option<String>,
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
          w.headers AS static_headers, w.request_url, w.dynamic_url, w.allowed_hosts, l.traceparent";

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
    /// Claimed, but this process cannot open the webhook's credentials (a
    /// sealing key it lacks): nothing is sent, the claim is undone without
    /// counting the attempt, and the row comes due again after
    /// [`WITHHELD_RETRY`], its error saying why (see [`withhold`]).
    Withheld(String),
}

/// How long a row withheld for its credentials waits before the sweeper
/// enqueues it again: long enough that a misconfigured worker does not spin
/// on it, short enough that a worker with the key sends it within a couple
/// of minutes.
pub const WITHHELD_RETRY: Duration = Duration::from_secs(60);

/// Undoes the claims of rows whose credentials this process could not open
/// (`(id, claim token, reason)`): the attempt is not counted, the lease is
/// gone, the row is due again after [`WITHHELD_RETRY`] and its error says
/// why. Only while the row still carries the claim's token. Returns the ids
/// withheld.
const WITHHOLD_SQL: &str = "
UPDATE webhook_request_logs l
SET attempts = l.attempts - 1,
    lease_expires_at = NULL,
    next_retry = now() + make_interval(secs => $4),
    error = input.reason,
    updated_at = now()
FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS input(id, token, reason)
WHERE l.id = input.id AND l.claim_token = input.token AND l.status IN ('Queued', 'Failed')
RETURNING l.id";

/// See [`WITHHOLD_SQL`].
pub fn withhold(
    conn: &mut PgConnection,
    rows: &[(i64, i64, String)],
) -> Result<Vec<i64>, StoreError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
    let tokens: Vec<i64> = rows.iter().map(|r| r.1).collect();
    let reasons: Vec<String> = rows.iter().map(|r| pg_text(&r.2).into_owned()).collect();
    let done: Vec<IdOnly> = diesel::sql_query(WITHHOLD_SQL)
        .bind::<Array<BigInt>, _>(ids)
        .bind::<Array<BigInt>, _>(tokens)
        .bind::<Array<Text>, _>(reasons)
        .bind::<Double, _>(WITHHELD_RETRY.as_secs_f64())
        .load(conn)?;
    Ok(done.into_iter().map(|r| r.id).collect())
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
    // Claims whose credentials this process cannot open are undone, not
    // sent: an attempt is never spent on a worker's missing key. Should the
    // undoing fail, they go out as before and fail as attempts.
    let unopened: Vec<(i64, i64, String)> = claims
        .values()
        .flatten()
        .filter_map(|c| {
            c.credentials_error
                .as_ref()
                .map(|reason| (c.log_id, c.token, reason.clone()))
        })
        .collect();
    let mut withheld: HashMap<i64, Option<String>> = HashMap::new();
    if !unopened.is_empty() {
        match withhold(conn, &unopened) {
            Ok(done) => {
                for (id, _, reason) in unopened {
                    if done.contains(&id) {
                        claims.remove(&id);
                        withheld.insert(id, Some(reason));
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, rows = unopened.len(),
                "cannot withhold rows whose credentials cannot be opened; they are attempted"),
        }
    }
    let rest: Vec<i64> = unique(
        ids.iter()
            .copied()
            .filter(|id| !claims.contains_key(id) && !withheld.contains_key(id)),
    );
    let unclaimed = if rest.is_empty() {
        HashMap::new()
    } else {
        why_unclaimed(conn, rest)?
    };
    Ok(ids
        .iter()
        .map(|id| match claims.get_mut(id) {
            Some(claim) => claim.take().map_or(Verdict::Stale, Verdict::Send),
            // A second job for a row this batch withheld is stale.
            None if withheld.contains_key(id) => withheld
                .get_mut(id)
                .and_then(Option::take)
                .map_or(Verdict::Stale, Verdict::Withheld),
            // Every row not claimed has its verdict there.
            None => unclaimed.get(id).cloned().unwrap_or(Verdict::Missing),
        })
        .collect())
}

/// The claim a claimed row allows, sent where the webhook points now.
fn claim_of(r: ClaimRow) -> Claim {
    Claim::new(ClaimSource {
        log_id: r.id,
        attempt: r.attempts,
        max_attempts: r.max_attempts,
        token: r.claim_token,
        event_id: r.event_id,
        webhook_name: r.webhook_name,
        webhook_id: r.webhook_id,
        destination: Destination {
            stored: r.url,
            webhook_url: &r.request_url,
            dynamic: r.dynamic_url,
            allowed_hosts: &r.allowed_hosts,
        },
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
        traceparent: r.traceparent,
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
