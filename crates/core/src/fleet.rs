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

use redis::Script;

use crate::error::QueueError;
use crate::queue::RedisQueue;

/// Added to a webhook's timeout for the life of a lease: covers the claim
/// before the request and the time to give the lease back. A worker that
/// dies holding leases frees them after this much longer than its requests
/// could have taken.
pub const LEASE_MARGIN: Duration = Duration::from_secs(30);

/// Takes up to ARGV[2] leases at KEYS[1] (a sorted set of lease → expiry,
/// ms), keeping at most ARGV[1] unexpired. ARGV[3]: the leases' name stem
/// (unique per call); ARGV[4]: their life, ms. Returns the leases taken.
const LEASE_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local free = tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[1])
local n = math.min(free, tonumber(ARGV[2]))
local life = tonumber(ARGV[4])
local out = {}
for i = 1, n do
  local lease = ARGV[3] .. ':' .. i
  redis.call('ZADD', KEYS[1], now + life, lease)
  out[i] = lease
end
if n > 0 then redis.call('PEXPIRE', KEYS[1], life) end
return out
";

/// GCRA at KEYS[1] (the theoretical arrival time, µs): up to ARGV[3]
/// requests at one per ARGV[1] µs with a burst of ARGV[2]. Returns
/// {granted, µs until one more would be}.
const RATE_LUA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = interval * tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local room = math.floor((now + tolerance - tat) / interval)
local n = math.max(0, math.min(room, tonumber(ARGV[3])))
if n > 0 then
  tat = tat + n * interval
  redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', math.ceil((tat - now) / 1000) + 1)
end
return {n, math.max(0, tat + interval - tolerance - now)}
";

/// The burst a rate limit of `per_s` allows: a twentieth of a second's
/// worth (at least one), so a receiver never sees more than about 5% over
/// its rate in any second.
pub fn burst_of(per_s: u32) -> u32 {
    (per_s / 20).max(1)
}

/// What a take of rate tokens got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateTake {
    pub granted: u32,
    /// When the next token is there (zero if some are left).
    pub next_in: Duration,
}

impl RedisQueue {
    /// Takes up to `want` of the `limit` leases of `webhook`, each living
    /// `life`; `stem` names them (unique per call: the worker's id and a
    /// counter). Returns the leases taken (possibly none).
    pub async fn take_leases(
        &self,
        webhook: i64,
        limit: u32,
        want: u32,
        stem: &str,
        life: Duration,
    ) -> Result<Vec<String>, QueueError> {
        let mut conn = self.conn().await?;
        Ok(Script::new(LEASE_LUA)
            .key(self.keys.leases(webhook))
            .arg(limit)
            .arg(want)
            .arg(stem)
            .arg(life.as_millis().max(1) as u64)
            .invoke_async(&mut conn)
            .await?)
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
        let mut conn = self.conn().await?;
        let _: i64 = redis::cmd("ZREM")
            .arg(self.keys.leases(webhook))
            .arg(leases)
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// How many leases of `webhook` are held now (expired ones not counted).
    pub async fn leases_held(&self, webhook: i64) -> Result<u64, QueueError> {
        let mut conn = self.conn().await?;
        let t: (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await?;
        let now = t.0 * 1000 + t.1 / 1000;
        Ok(redis::cmd("ZCOUNT")
            .arg(self.keys.leases(webhook))
            .arg(format!("({now}"))
            .arg("+inf")
            .query_async(&mut conn)
            .await?)
    }

    /// Takes up to `want` requests' worth of `webhook`'s rate of `per_s`.
    pub async fn take_rate(
        &self,
        webhook: i64,
        per_s: u32,
        want: u32,
    ) -> Result<RateTake, QueueError> {
        let mut conn = self.conn().await?;
        let interval = 1_000_000 / u64::from(per_s.max(1));
        let (granted, next_us): (u32, u64) = Script::new(RATE_LUA)
            .key(self.keys.rate(webhook))
            .arg(interval.max(1))
            .arg(burst_of(per_s))
            .arg(want)
            .invoke_async(&mut conn)
            .await?;
        Ok(RateTake {
            granted,
            next_in: Duration::from_micros(next_us),
        })
    }
}
