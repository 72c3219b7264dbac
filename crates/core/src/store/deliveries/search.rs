//! Search and counts: what people read (lists with filters, one row and
//! its attempts, the backlog, counts by status, attempts per minute).

use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Double, Integer, Timestamptz};
use diesel::PgConnection;
use serde::Serialize;

use crate::domain::{DeliveryAttempt, DeliveryLog, DeliveryStatus};
use crate::error::{Refusal, StoreError};
use crate::store::schema::{sql_types, webhook_delivery_attempts, webhook_request_logs, webhooks};

use super::{held_until, CountRow};

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
pub(crate) const MAX_BACKLOG_COUNT: i64 = 1_000_000;

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
#[derive(Debug, Clone, QueryableByName, Serialize, utoipa::ToSchema)]
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
