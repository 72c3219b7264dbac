//! Retention: terminal delivery rows (Delivered, Exhausted) and their
//! attempts are deleted once they were recorded and last touched before the
//! cut, in batches that walk the rows by id (the order they were recorded
//! in), so each batch is one short statement however large the table is and
//! no index is added for it (every index costs each outcome's write). A
//! pending row (Queued, Failed, held) is never deleted, and a row touched
//! since the cut (a replay) waits for a later prune.

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

/// The share of its time a paced prune spends in statements (it sleeps
/// the rest, four times as long as each batch took): on a two-core machine
/// shared with a delivering worker, a prune at full speed deletes about
/// 60,000 rows/s and slows delivery by 20-35%; at a quarter it slowed a
/// worker taking 5,000 events/s by 10-11%. At a fifth it still deletes
/// more than twice what 5,000 deliveries/s add (docs/PERFORMANCE.md).
pub const PRUNE_DUTY: f64 = 0.2;

/// The shortest retention: a terminal row this old can have no attempt in
/// flight (the longest lease is a 60 s timeout plus the lease margin), so a
/// late outcome never finds its row gone.
pub const MIN_RETENTION: Duration = Duration::from_secs(3600);

/// What one prune batch did.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Pruned {
    /// Delivery rows deleted.
    pub rows: u64,
    /// Their attempts, deleted with them.
    pub attempts: u64,
}

/// The cut for a retention of `older_than`, by the database's clock.
pub fn cut(conn: &mut PgConnection, older_than: Duration) -> Result<DateTime<Utc>, StoreError> {
    #[derive(QueryableByName)]
    struct Cut {
        #[diesel(sql_type = Timestamptz)]
        at: DateTime<Utc>,
    }
    let c: Cut = diesel::sql_query("SELECT now() - make_interval(secs => $1) AS at")
        .bind::<Double, _>(older_than.as_secs_f64())
        .get_result(conn)?;
    Ok(c.at)
}

#[derive(QueryableByName)]
struct BatchRow {
    #[diesel(sql_type = BigInt)]
    rows: i64,
    #[diesel(sql_type = BigInt)]
    attempts: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    last_id: Option<i64>,
    /// Rows looked at that were recorded before the cut.
    #[diesel(sql_type = BigInt)]
    old: i64,
}

/// One batch: looks at up to `limit` rows after id `after_id` and deletes
/// those recorded before `cut`, terminal and untouched since, with their
/// attempts. Returns what it deleted and the id to go on from (None: the
/// batch saw no row older than the cut, so the walk has passed it).
///
/// The delete checks each row again as it deletes it (`next_retry IS NULL`
/// and `updated_at` on the row as it is then), so a row replayed while the
/// batch runs is kept with its attempts.
pub(crate) fn prune_batch(
    conn: &mut PgConnection,
    cut: DateTime<Utc>,
    after_id: i64,
    limit: i64,
) -> Result<(Pruned, Option<i64>), StoreError> {
    let row: BatchRow = diesel::sql_query(
        "WITH looked AS (
             SELECT id, created_at FROM webhook_request_logs
             WHERE id > $2 ORDER BY id LIMIT $3
         ), deleted AS (
             DELETE FROM webhook_request_logs l USING looked
             WHERE l.id = looked.id AND looked.created_at < $1
               AND l.next_retry IS NULL AND l.updated_at < $1
             RETURNING l.id
         ), attempts AS (
             DELETE FROM webhook_delivery_attempts a USING deleted d
             WHERE a.log_id = d.id
             RETURNING 1
         )
         SELECT (SELECT count(*) FROM deleted) AS rows,
                (SELECT count(*) FROM attempts) AS attempts,
                (SELECT max(id) FROM looked) AS last_id,
                (SELECT count(*) FROM looked WHERE created_at < $1) AS old",
    )
    .bind::<Timestamptz, _>(cut)
    .bind::<BigInt, _>(after_id)
    .bind::<BigInt, _>(limit.max(1))
    .get_result(conn)?;
    let pruned = Pruned {
        rows: row.rows.max(0) as u64,
        attempts: row.attempts.max(0) as u64,
    };
    Ok((pruned, row.last_id.filter(|_| row.old > 0)))
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
    /// The id the walk stopped after (where a next prune may go on from).
    #[serde(skip)]
    pub stopped_after: i64,
}

/// Batch after batch from id `after_id` until the walk passes the cut or
/// `budget` is spent (at least one batch), spending at most `duty` of its
/// time in statements (1.0: full speed; see [`PRUNE_DUTY`]). Each batch is
/// its own statement: what was deleted stays deleted if a later batch
/// fails. `progress` sees the report so far after each batch.
pub fn prune(
    conn: &mut PgConnection,
    older_than: Duration,
    after_id: i64,
    batch: i64,
    budget: Duration,
    duty: f64,
    progress: &mut dyn FnMut(&PruneReport),
) -> Result<PruneReport, StoreError> {
    let started = Instant::now();
    let cut = cut(conn, older_than)?;
    let mut report = PruneReport {
        stopped_after: after_id,
        ..PruneReport::default()
    };
    let rest_per_busy = if duty > 0.0 && duty < 1.0 {
        1.0 / duty - 1.0
    } else {
        0.0
    };
    loop {
        let batch_started = Instant::now();
        let (done, next) = prune_batch(conn, cut, report.stopped_after, batch)?;
        report.rows += done.rows;
        report.attempts += done.attempts;
        report.batches += 1;
        progress(&report);
        let Some(next) = next else { break };
        report.stopped_after = next;
        if started.elapsed() >= budget {
            report.budget_spent = true;
            break;
        }
        let rest = batch_started.elapsed().mul_f64(rest_per_busy);
        std::thread::sleep(rest.min(budget.saturating_sub(started.elapsed())));
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}
