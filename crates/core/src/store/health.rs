//! Per-webhook health, kept by the workers as they record outcomes, so that
//! `webhook list|show` and the auto-pause never read the attempts table:
//!
//! - `webhook_health`: one row per webhook, the current run of failures
//!   (how many, since when), the last success and the last error;
//! - `webhook_health_hourly`: attempts and successes per webhook per clock
//!   hour per latency bucket ([`LATENCY_BOUNDS_MS`]), from which the last
//!   24 hours' success rate and percentiles are summed.
//!
//! Health is written after the outcomes, in its own statement: it can never
//! hold back or fail the write of an outcome. Several workers' batches may
//! interleave, so a run of failures is counted in the order batches are
//! written, which is the order attempts finished to within a batch.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{
    Array, BigInt, Bool, Double, Integer, Nullable, SmallInt, Text, Timestamptz,
};
use diesel::PgConnection;
use serde::Serialize;

use crate::error::StoreError;

/// Upper bounds (milliseconds) of the latency buckets: about 30% apart, so
/// a percentile read from them is within about 15% of the true value; the
/// last bucket holds everything above 60 s (the longest timeout).
pub(crate) const LATENCY_BOUNDS_MS: &[i32] = &[
    1, 2, 3, 5, 7, 10, 13, 16, 20, 25, 30, 40, 50, 65, 80, 100, 130, 160, 200, 250, 300, 400, 500,
    650, 800, 1000, 1300, 1600, 2000, 2500, 3000, 4000, 5000, 6500, 8000, 10000, 13000, 16000,
    20000, 25000, 30000, 40000, 50000, 60000,
];

/// The window of `attempts_24h`, `success_rate_24h` and the percentiles:
/// the current clock hour and the 23 before it.
pub(crate) const WINDOW_HOURS: i32 = 24;

/// Hourly rows older than this are deleted by the sweeper (the window and
/// an hour of slack for clocks).
pub(crate) const HOURLY_KEPT: Duration = Duration::from_secs((WINDOW_HOURS as u64 + 1) * 3600);

/// Auto-pause needs at least this many failed attempts in a row, however
/// long they span: a webhook that was tried twice in five days is not
/// known to be dead.
pub const AUTO_PAUSE_MIN_ATTEMPTS: i32 = 10;

/// The longest `last_error` kept: enough to say what went wrong.
pub(crate) const MAX_LAST_ERROR_CHARS: usize = 300;

/// The bucket of an attempt that took `ms`.
pub(crate) fn latency_bucket(ms: i32) -> i16 {
    LATENCY_BOUNDS_MS.partition_point(|&bound| bound < ms) as i16
}

/// One attempt as health counts it, or several successes of one webhook
/// in one latency bucket taken together (see [`Sample::absorb`]).
#[derive(Debug, Clone)]
pub struct Sample {
    pub webhook_id: i64,
    /// When it started (for successes taken together, the latest start:
    /// all a success tells the health is when the last one was).
    pub started_at: DateTime<Utc>,
    pub duration_ms: i32,
    /// The receiver answered 2xx.
    pub ok: bool,
    /// What went wrong (for a failure): the error, or `HTTP <code>`.
    pub error: Option<String>,
    /// How many attempts it stands for: 1, or more for successes taken
    /// together.
    pub count: i32,
}

impl Sample {
    /// The attempt behind `outcome`, of webhook `webhook_id`.
    pub fn of(webhook_id: i64, outcome: &crate::attempt::Outcome) -> Sample {
        let ok = outcome.status == crate::attempt::OutcomeStatus::Delivered;
        Sample {
            webhook_id,
            started_at: outcome.started_at,
            duration_ms: outcome.duration_ms,
            ok,
            error: (!ok).then(|| outcome.reason()),
            count: 1,
        }
    }

    /// Which successes may be taken together with this one: those of the
    /// same webhook in the same latency bucket (None for a failure, whose
    /// time and error each count).
    pub fn merge_key(&self) -> Option<(i64, i16)> {
        self.ok
            .then(|| (self.webhook_id, latency_bucket(self.duration_ms)))
    }

    /// Takes `other`, a success with the same [`Sample::merge_key`], into
    /// this one: the health written is the same as for both apart.
    pub fn absorb(&mut self, other: &Sample) {
        debug_assert_eq!(self.merge_key(), other.merge_key());
        self.count = self.count.saturating_add(other.count);
        self.started_at = self.started_at.max(other.started_at);
    }
}

/// A webhook the auto-pause just paused.
#[derive(Debug, Clone, QueryableByName, Serialize)]
pub struct AutoPaused {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = Text)]
    pub name: String,
    #[diesel(sql_type = Text)]
    pub reason: String,
}

const RECORD_HEALTH_SQL: &str = "
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::smallint[], $4::bool[], $5::text[], $6::int[])
        AS t(webhook_id, started_at, bucket, ok, error, n)
), hourly AS (
    INSERT INTO webhook_health_hourly AS h (webhook_id, hour, bucket, attempts, successes)
    SELECT webhook_id, date_trunc('hour', now()), bucket, sum(n), coalesce(sum(n) FILTER (WHERE ok), 0)
    FROM input GROUP BY webhook_id, bucket ORDER BY webhook_id, bucket
    ON CONFLICT (webhook_id, hour, bucket) DO UPDATE
    SET attempts = h.attempts + EXCLUDED.attempts, successes = h.successes + EXCLUDED.successes
), last_ok AS (
    SELECT webhook_id, max(started_at) FILTER (WHERE ok) AS at FROM input GROUP BY webhook_id
), per AS (
    SELECT i.webhook_id, o.at AS last_success_at, max(i.started_at) AS last_attempt_at,
           coalesce(sum(i.n) FILTER (WHERE NOT i.ok AND (o.at IS NULL OR i.started_at > o.at)), 0)
               AS failures,
           min(i.started_at) FILTER (WHERE NOT i.ok AND (o.at IS NULL OR i.started_at > o.at))
               AS first_failure,
           (array_agg(i.error ORDER BY i.started_at DESC) FILTER (WHERE NOT i.ok))[1] AS last_error
    FROM input i JOIN last_ok o USING (webhook_id)
    GROUP BY i.webhook_id, o.at
)
INSERT INTO webhook_health AS h
    (webhook_id, consecutive_failures, failing_since, last_success_at, last_error, last_attempt_at)
SELECT webhook_id, failures, first_failure, last_success_at, last_error, last_attempt_at
FROM per ORDER BY webhook_id
ON CONFLICT (webhook_id) DO UPDATE SET
    consecutive_failures = CASE WHEN EXCLUDED.last_success_at IS NOT NULL
        THEN EXCLUDED.consecutive_failures
        ELSE h.consecutive_failures + EXCLUDED.consecutive_failures END,
    failing_since = CASE WHEN EXCLUDED.last_success_at IS NOT NULL
        THEN EXCLUDED.failing_since
        ELSE COALESCE(h.failing_since, EXCLUDED.failing_since) END,
    last_success_at = GREATEST(h.last_success_at, EXCLUDED.last_success_at),
    last_error = COALESCE(EXCLUDED.last_error, h.last_error),
    last_attempt_at = GREATEST(h.last_attempt_at, EXCLUDED.last_attempt_at)
RETURNING h.webhook_id, h.consecutive_failures, h.failing_since";

/// Pauses the webhooks among `$1` whose every attempt has failed for `$3`
/// seconds, at least `$2` of them, and that are not paused already. The
/// webhooks are locked in id order, so two workers pausing the same ones
/// never deadlock.
const AUTO_PAUSE_SQL: &str = "
WITH locked AS (
    SELECT id FROM webhooks WHERE id = ANY($1) AND paused_at IS NULL ORDER BY id FOR UPDATE
)
UPDATE webhooks w
SET paused_at = now(),
    paused_reason = format('auto-paused: all %s attempts since %s failed (HOOKFLEET_AUTO_PAUSE_AFTER); last error: %s',
                           h.consecutive_failures,
                           to_char(h.failing_since AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),
                           COALESCE(h.last_error, '-'))
FROM webhook_health h, locked
WHERE h.webhook_id = w.id AND w.id = locked.id AND w.paused_at IS NULL
  AND h.consecutive_failures >= $2
  AND h.failing_since <= now() - make_interval(secs => $3)
RETURNING w.id, w.name, w.paused_reason AS reason";

#[derive(QueryableByName)]
struct Streak {
    #[diesel(sql_type = BigInt)]
    webhook_id: i64,
    #[diesel(sql_type = Integer)]
    consecutive_failures: i32,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    failing_since: Option<DateTime<Utc>>,
}

/// Adds `samples` to their webhooks' health and, when `auto_pause_after` is
/// set, pauses every webhook among them whose attempts have all failed for
/// that long (at least [`AUTO_PAUSE_MIN_ATTEMPTS`]). Returns those paused.
pub fn record(
    conn: &mut PgConnection,
    samples: &[Sample],
    auto_pause_after: Option<Duration>,
) -> Result<Vec<AutoPaused>, StoreError> {
    if samples.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = samples.iter().map(|s| s.webhook_id).collect();
    let started: Vec<DateTime<Utc>> = samples.iter().map(|s| s.started_at).collect();
    let buckets: Vec<i16> = samples
        .iter()
        .map(|s| latency_bucket(s.duration_ms))
        .collect();
    let ok: Vec<bool> = samples.iter().map(|s| s.ok).collect();
    let errors: Vec<Option<String>> = samples
        .iter()
        .map(|s| {
            s.error.as_deref().map(|e| {
                super::deliveries::pg_text(
                    &e.chars().take(MAX_LAST_ERROR_CHARS).collect::<String>(),
                )
                .into_owned()
            })
        })
        .collect();
    let streaks: Vec<Streak> = diesel::sql_query(RECORD_HEALTH_SQL)
        .bind::<Array<BigInt>, _>(ids)
        .bind::<Array<Timestamptz>, _>(started)
        .bind::<Array<SmallInt>, _>(buckets)
        .bind::<Array<Bool>, _>(ok)
        .bind::<Array<Nullable<Text>>, _>(errors)
        .bind::<Array<Integer>, _>(samples.iter().map(|s| s.count).collect::<Vec<i32>>())
        .load(conn)?;
    let Some(after) = auto_pause_after else {
        return Ok(Vec::new());
    };
    let cut = Utc::now() - chrono::Duration::from_std(after).unwrap_or(chrono::Duration::MAX);
    // Only a webhook whose run just crossed the line costs an UPDATE (which
    // bumps the producers' config version).
    let candidates: Vec<i64> = streaks
        .iter()
        .filter(|s| {
            s.consecutive_failures >= AUTO_PAUSE_MIN_ATTEMPTS
                && s.failing_since.is_some_and(|t| t <= cut)
        })
        .map(|s| s.webhook_id)
        .collect();
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    Ok(diesel::sql_query(AUTO_PAUSE_SQL)
        .bind::<Array<BigInt>, _>(candidates)
        .bind::<Integer, _>(AUTO_PAUSE_MIN_ATTEMPTS)
        .bind::<Double, _>(after.as_secs_f64())
        .load(conn)?)
}

/// A webhook's health, as `webhook list|show --json` carry it.
#[derive(Debug, Clone, Default, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Health {
    /// Failed attempts since the last success.
    pub consecutive_failures: i32,
    #[schema(required)]
    pub last_success_at: Option<DateTime<Utc>>,
    /// What went wrong the last time an attempt failed.
    #[schema(required)]
    pub last_error: Option<String>,
    pub attempts_24h: i64,
    /// Successes ÷ attempts over the last 24 hours; None without attempts.
    #[schema(required)]
    pub success_rate_24h: Option<f64>,
    /// Median and 95th percentile of the attempts' durations over the last
    /// 24 hours (read from latency buckets, within about 15%).
    #[schema(required)]
    pub p50_ms: Option<i64>,
    #[schema(required)]
    pub p95_ms: Option<i64>,
}

#[derive(QueryableByName)]
struct StreakRow {
    #[diesel(sql_type = BigInt)]
    webhook_id: i64,
    #[diesel(sql_type = Integer)]
    consecutive_failures: i32,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    last_success_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Text>)]
    last_error: Option<String>,
}

#[derive(QueryableByName)]
struct BucketRow {
    #[diesel(sql_type = BigInt)]
    webhook_id: i64,
    #[diesel(sql_type = SmallInt)]
    bucket: i16,
    #[diesel(sql_type = BigInt)]
    attempts: i64,
    #[diesel(sql_type = BigInt)]
    successes: i64,
}

/// The health of the webhooks `ids` (those without any attempt yet get the
/// default). Reads one row per webhook and at most 24 hourly rows per
/// webhook per latency bucket hit.
pub fn of(conn: &mut PgConnection, ids: &[i64]) -> Result<HashMap<i64, Health>, StoreError> {
    // One snapshot for both reads: a health write committed between them
    // would pair the new attempt counts with the old run of failures.
    conn.build_transaction()
        .read_only()
        .repeatable_read()
        .run(|conn| of_in_snapshot(conn, ids))
}

fn of_in_snapshot(
    conn: &mut PgConnection,
    ids: &[i64],
) -> Result<HashMap<i64, Health>, StoreError> {
    let streaks: Vec<StreakRow> = diesel::sql_query(
        "SELECT webhook_id, consecutive_failures, last_success_at, last_error
         FROM webhook_health WHERE webhook_id = ANY($1)",
    )
    .bind::<Array<BigInt>, _>(ids)
    .load(conn)?;
    let buckets: Vec<BucketRow> = diesel::sql_query(
        "SELECT webhook_id, bucket, sum(attempts)::bigint AS attempts, sum(successes)::bigint AS successes
         FROM webhook_health_hourly
         WHERE webhook_id = ANY($1) AND hour >= date_trunc('hour', now()) - make_interval(hours => $2 - 1)
         GROUP BY webhook_id, bucket",
    )
    .bind::<Array<BigInt>, _>(ids)
    .bind::<Integer, _>(WINDOW_HOURS)
    .load(conn)?;
    let mut out: HashMap<i64, Health> = ids.iter().map(|&id| (id, Health::default())).collect();
    for s in streaks {
        if let Some(h) = out.get_mut(&s.webhook_id) {
            h.consecutive_failures = s.consecutive_failures;
            h.last_success_at = s.last_success_at;
            h.last_error = s.last_error;
        }
    }
    let mut histograms: HashMap<i64, Vec<(i16, i64)>> = HashMap::new();
    for b in buckets {
        if let Some(h) = out.get_mut(&b.webhook_id) {
            h.attempts_24h += b.attempts;
            h.success_rate_24h = Some(h.success_rate_24h.unwrap_or(0.0) + b.successes as f64);
            histograms
                .entry(b.webhook_id)
                .or_default()
                .push((b.bucket, b.attempts));
        }
    }
    for (id, h) in out.iter_mut() {
        if h.attempts_24h == 0 {
            h.success_rate_24h = None;
            continue;
        }
        h.success_rate_24h = h.success_rate_24h.map(|s| s / h.attempts_24h as f64);
        let mut hist = histograms.remove(id).unwrap_or_default();
        hist.sort_unstable();
        h.p50_ms = percentile(&hist, 0.50);
        h.p95_ms = percentile(&hist, 0.95);
    }
    Ok(out)
}

/// The `q` quantile of a histogram of (bucket, count), sorted by bucket:
/// linear within the bucket it falls in.
pub fn percentile(hist: &[(i16, i64)], q: f64) -> Option<i64> {
    let total: i64 = hist.iter().map(|(_, n)| n).sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut below = 0i64;
    for &(bucket, n) in hist {
        if n > 0 && (below + n) as f64 >= rank {
            // A bucket past the bounds (the overflow bucket, or one written
            // by a build with more bounds) reads as the last bound.
            let last = LATENCY_BOUNDS_MS[LATENCY_BOUNDS_MS.len() - 1];
            let b = bucket.max(0) as usize;
            let lower = match b {
                0 => 0,
                _ => LATENCY_BOUNDS_MS.get(b - 1).copied().unwrap_or(last),
            };
            let Some(&upper) = LATENCY_BOUNDS_MS.get(b) else {
                return Some(i64::from(lower));
            };
            let within = ((rank - below as f64) / n as f64).clamp(0.0, 1.0);
            return Some((f64::from(lower) + within * f64::from(upper - lower)).round() as i64);
        }
        below += n;
    }
    None
}

/// Deletes hourly rows older than [`HOURLY_KEPT`], and the health of
/// webhooks that no longer exist. Both are small.
pub fn clean(conn: &mut PgConnection) -> Result<usize, StoreError> {
    let old = diesel::sql_query(
        "DELETE FROM webhook_health_hourly WHERE hour < now() - make_interval(secs => $1)",
    )
    .bind::<Double, _>(HOURLY_KEPT.as_secs_f64())
    .execute(conn)?;
    let orphans = diesel::sql_query(
        "DELETE FROM webhook_health h WHERE NOT EXISTS (SELECT 1 FROM webhooks w WHERE w.id = h.webhook_id)",
    )
    .execute(conn)?;
    let hourly_orphans = diesel::sql_query(
        "DELETE FROM webhook_health_hourly h
         WHERE NOT EXISTS (SELECT 1 FROM webhooks w WHERE w.id = h.webhook_id)",
    )
    .execute(conn)?;
    Ok(old + orphans + hourly_orphans)
}

/// Forgets a deleted webhook's health (in the transaction that deletes it).
pub fn forget(conn: &mut PgConnection, webhook_id: i64) -> Result<(), StoreError> {
    diesel::sql_query("DELETE FROM webhook_health WHERE webhook_id = $1")
        .bind::<BigInt, _>(webhook_id)
        .execute(conn)?;
    diesel::sql_query("DELETE FROM webhook_health_hourly WHERE webhook_id = $1")
        .bind::<BigInt, _>(webhook_id)
        .execute(conn)?;
    Ok(())
}

/// Restarts the clock of a run of failures (at `webhook resume`): the
/// auto-pause waits HOOKFLEET_AUTO_PAUSE_AFTER again before pausing a
/// webhook an operator chose to resume; the count stays true.
pub(crate) fn restart_failure_clock(
    conn: &mut PgConnection,
    webhook_id: i64,
) -> Result<(), StoreError> {
    diesel::sql_query(
        "UPDATE webhook_health SET failing_since = now()
         WHERE webhook_id = $1 AND failing_since IS NOT NULL",
    )
    .bind::<BigInt, _>(webhook_id)
    .execute(conn)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_split_at_their_bounds() {
        assert_eq!(latency_bucket(0), 0);
        assert_eq!(latency_bucket(1), 0);
        assert_eq!(latency_bucket(2), 1);
        assert_eq!(latency_bucket(100), 15);
        assert_eq!(latency_bucket(101), 16);
        assert_eq!(
            latency_bucket(60_001) as usize,
            LATENCY_BOUNDS_MS.len(),
            "above the last bound: the overflow bucket"
        );
        assert!(LATENCY_BOUNDS_MS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn percentiles_interpolate_within_a_bucket() {
        // 90 attempts at about 10 ms, 10 at about 200 ms.
        let hist = vec![(latency_bucket(10), 90), (latency_bucket(200), 10)];
        let p50 = percentile(&hist, 0.5).unwrap();
        assert!((7..=10).contains(&p50), "{p50}");
        let p95 = percentile(&hist, 0.95).unwrap();
        assert!((160..=200).contains(&p95), "{p95}");
        assert_eq!(percentile(&[], 0.5), None);
        let overflow = vec![(LATENCY_BOUNDS_MS.len() as i16, 3)];
        assert_eq!(percentile(&overflow, 0.95), Some(60_000));
    }
}
