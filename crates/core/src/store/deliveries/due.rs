//! Due, held and released: what the sweeper finds due, the rows a paused
//! webhook holds out of every sweeper's reach, and their release.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Nullable, Text, Timestamptz};
use diesel::PgConnection;

use crate::error::StoreError;
use crate::queue::Enqueue;

use super::{IdOnly, LEASE_FREE, QUEUE_NOW};

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
