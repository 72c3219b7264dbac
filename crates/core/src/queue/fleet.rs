//! Per-webhook limits that hold across the whole fleet, kept in Redis: the
//! requests in flight to a webhook from every worker (`max_concurrency`),
//! and its rate (`rate_limit`, requests per second).
//!
//! - Concurrency: a sorted set per webhook of leases, each scored by when it
//!   expires. A worker takes leases before claiming rows and gives them back
//!   when the answers are in; a worker that dies leaves its leases to
//!   expire (the webhook's timeout plus [`LEASE_MARGIN`]), so a crash never
//!   holds a slot for long.
//! - Rate: GCRA (generic cell rate algorithm) on one key per webhook holding
//!   the theoretical arrival time: steady at the rate, with a burst of
//!   [`burst_of`] requests. A GCRA is a dozen lines of Lua over one key,
//!   atomic on the server and on a cluster's shard; no crate does it inside
//!   Redis, and a client-side limiter cannot see the other workers.
//!
//! Both use the server's clock (`TIME`), so workers' clocks do not matter.
//! Each key carries the webhook's own hash tag: one key per script.

use std::time::Duration;

use crate::error::QueueError;
use redis::Script;

use crate::queue::link::Redis;

/// Added to a webhook's timeout for the life of a lease: covers the claim
/// before the request and the time to give the lease back. A worker that
/// dies holding leases frees them after this much longer than its requests
/// could have taken.
pub const LEASE_MARGIN: Duration = Duration::from_secs(30);

/// Admits up to ARGV[1] requests to one webhook: rate tokens first (GCRA at
/// KEYS[2], the theoretical arrival time in µs: one per ARGV[2] µs with a
/// burst of ARGV[3]; ARGV[2] = 0: no rate limit), then leases (a sorted set
/// at KEYS[1] of lease → expiry in ms, at most ARGV[4] unexpired, ARGV[4] =
/// 0: no concurrency limit; named ARGV[5] .. ':' .. i, living ARGV[6] ms).
/// A token taken for a request the leases then refuse is lost: the receiver
/// sees fewer requests, never more. One call, one hash slot (both keys
/// carry the webhook's tag).
/// Returns {granted, µs until the next token (0: not refused by the rate),
/// full (1: refused by the leases), lease...}.
const ADMIT_LUA: &str = include_str!("lua/admit.lua");

/// The burst a rate limit of `per_s` allows: a twentieth of a second's
/// worth (at least one), so a receiver never sees more than about 5% over
/// its rate in any second.
pub(crate) fn burst_of(per_s: u32) -> u32 {
    (per_s / 20).max(1)
}

/// What an admission got.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Admission {
    /// How many requests may go now.
    pub granted: u32,
    /// Their leases (when the webhook limits its concurrency).
    pub leases: Vec<String>,
    /// Refused some by the rate: when the next token is there.
    pub next_token_in: Option<Duration>,
    /// Refused some because every lease is held.
    pub full: bool,
}

/// A webhook's limits across the fleet: its leases and its rate tokens.
#[derive(Clone)]
pub struct FleetLimits {
    redis: Redis,
    admit: Script,
}

impl FleetLimits {
    pub(crate) fn new(redis: Redis) -> FleetLimits {
        FleetLimits {
            redis,
            admit: Script::new(ADMIT_LUA),
        }
    }

    /// Admits up to `want` requests to `webhook` under a rate of `rate`
    /// per second and at most `max_concurrency` in flight (each lease
    /// living `life`; `stem` names them, unique per call: the worker's id
    /// and a counter), in one script call.
    pub async fn admit(
        &self,
        webhook: i64,
        max_concurrency: Option<u32>,
        rate: Option<u32>,
        want: u32,
        stem: &str,
        life: Duration,
    ) -> Result<Admission, QueueError> {
        let mut conn = self.redis.conn().await?;
        let interval = rate.map_or(0, |r| (1_000_000 / u64::from(r.max(1))).max(1));
        let out: Vec<redis::Value> = self
            .admit
            .key(self.redis.keys.leases(webhook))
            .key(self.redis.keys.rate(webhook))
            .arg(want)
            .arg(interval)
            .arg(rate.map_or(1, burst_of))
            .arg(max_concurrency.unwrap_or(0))
            .arg(stem)
            .arg(life.as_millis().max(1) as u64)
            .invoke_async(&mut conn)
            .await?;
        let bad = |e: redis::ParsingError| QueueError::Unavailable(format!("admission reply: {e}"));
        let int = |v: Option<&redis::Value>| -> Result<u64, QueueError> {
            Ok(v.map(redis::from_redis_value_ref::<u64>)
                .transpose()
                .map_err(bad)?
                .unwrap_or(0))
        };
        let granted = int(out.first())? as u32;
        let wait_us = int(out.get(1))?;
        let full = int(out.get(2))? == 1;
        let leases = out
            .iter()
            .skip(3)
            .map(redis::from_redis_value_ref::<String>)
            .collect::<Result<Vec<_>, _>>()
            .map_err(bad)?;
        Ok(Admission {
            granted,
            leases,
            next_token_in: (wait_us > 0).then(|| Duration::from_micros(wait_us)),
            full,
        })
    }

    /// Gives leases of `webhook` back.
    pub async fn give_back_leases(
        &self,
        webhook: i64,
        leases: &[String],
    ) -> Result<(), QueueError> {
        if leases.is_empty() {
            return Ok(());
        }
        let mut conn = self.redis.conn().await?;
        let _: i64 = redis::cmd("ZREM")
            .arg(self.redis.keys.leases(webhook))
            .arg(leases)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// How many leases of `webhook` are held now (expired ones not counted).
    pub async fn leases_held(&self, webhook: i64) -> Result<u64, QueueError> {
        let mut conn = self.redis.conn().await?;
        let t: (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await?;
        let now = t.0 * 1000 + t.1 / 1000;
        Ok(redis::cmd("ZCOUNT")
            .arg(self.redis.keys.leases(webhook))
            .arg(format!("({now}"))
            .arg("+inf")
            .query_async(&mut conn)
            .await?)
    }
}
