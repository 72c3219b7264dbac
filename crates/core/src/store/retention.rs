//! Retention: terminal delivery rows (Delivered, Exhausted) and their
//! attempts are deleted once they are older than the cut, in batches that
//! walk the rows in the order they were recorded (the index on
//! `(created_at, id)`), so each batch is one short statement however large
//! the table is. A pending row (Queued, Failed) is never deleted, and a row
//! touched since the cut (a replay) waits for a later prune.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Double, Nullable, Timestamptz};
use diesel::PgConnection;
use serde::Serialize;

use crate::error::StoreError;

/// Rows a prune statement looks at by default: a few thousand deletes (and
/// their attempts) commit in tens of milliseconds, so row locks and WAL
/// bursts stay short beside the workers' writes.
pub const PRUNE_BATCH: i64 = 5_000;

/// Where a prune has got to: the last (created_at, id) it looked at.
pub type Cursor = (DateTime<Utc>, i64);

/// What one prune batch did.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Pruned {
    /// Delivery rows deleted.
    pub rows: u64,
    /// Their attempts, deleted with them.
    pub attempts: u64,
}

#[derive(QueryableByName)]
struct BatchRow {
    #[diesel(sql_type = BigInt)]
    rows: i64,
    #[diesel(sql_type = BigInt)]
    attempts: i64,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    last_created: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<BigInt>)]
    last_id: Option<i64>,
}

/// One batch: looks at up to `limit` rows recorded before `older_than` ago
/// (by the database's clock) after `after`, and deletes those that are
/// terminal and untouched since the cut, with their attempts. Returns what
/// it deleted and where to go on from (None: nothing older is left).
///
/// The delete checks each row again as it deletes it (`next_retry IS NULL`
/// and `updated_at` on the row as it is then), so a row replayed while the
/// batch runs is kept with its attempts.
pub fn prune_batch(
    conn: &mut PgConnection,
    older_than: Duration,
    after: Option<Cursor>,
    limit: i64,
) -> Result<(Pruned, Option<Cursor>), StoreError> {
    let (after_time, after_id) = match after {
        Some((t, id)) => (Some(t), id),
        None => (None, 0),
    };
    let row: BatchRow = diesel::sql_query(
        "WITH cut AS (SELECT now() - make_interval(secs => $1) AS at),
         looked AS (
             SELECT l.id, l.created_at FROM webhook_request_logs l, cut
             WHERE l.created_at < cut.at
               AND ($2::timestamptz IS NULL OR (l.created_at, l.id) > ($2, $3))
             ORDER BY l.created_at, l.id LIMIT $4
         ), deleted AS (
             DELETE FROM webhook_request_logs l USING looked, cut
             WHERE l.id = looked.id AND l.next_retry IS NULL AND l.updated_at < cut.at
             RETURNING l.id
         ), attempts AS (
             DELETE FROM webhook_delivery_attempts a USING deleted d
             WHERE a.log_id = d.id
             RETURNING 1
         ), last AS (
             SELECT created_at, id FROM looked ORDER BY created_at DESC, id DESC LIMIT 1
         )
         SELECT (SELECT count(*) FROM deleted) AS rows,
                (SELECT count(*) FROM attempts) AS attempts,
                (SELECT created_at FROM last) AS last_created,
                (SELECT id FROM last) AS last_id",
    )
    .bind::<Double, _>(older_than.as_secs_f64())
    .bind::<Nullable<Timestamptz>, _>(after_time)
    .bind::<BigInt, _>(after_id)
    .bind::<BigInt, _>(limit.max(1))
    .get_result(conn)?;
    let pruned = Pruned {
        rows: row.rows.max(0) as u64,
        attempts: row.attempts.max(0) as u64,
    };
    let next = match (row.last_created, row.last_id) {
        (Some(t), Some(id)) => Some((t, id)),
        _ => None,
    };
    Ok((pruned, next))
}

/// What a whole prune did.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct PruneReport {
    pub rows: u64,
    pub attempts: u64,
    pub batches: u64,
    /// Stopped at its time budget with older rows left to look at.
    pub budget_spent: bool,
    pub seconds: f64,
}

/// Batch after batch until no row older than the cut is left or `budget`
/// is spent. Each batch is its own statement: what was deleted stays
/// deleted if a later batch fails.
pub fn prune(
    conn: &mut PgConnection,
    older_than: Duration,
    batch: i64,
    budget: Duration,
) -> Result<PruneReport, StoreError> {
    let started = Instant::now();
    let mut report = PruneReport::default();
    let mut after = None;
    loop {
        let (done, next) = prune_batch(conn, older_than, after, batch)?;
        report.rows += done.rows;
        report.attempts += done.attempts;
        report.batches += 1;
        match next {
            None => break,
            Some(_) if started.elapsed() >= budget => {
                report.budget_spent = true;
                break;
            }
            Some(cursor) => after = Some(cursor),
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}
