//! Redis: queues of jobs that say "deliver row N", and the in-flight keys
//! that keep a row from being enqueued twice.
//!
//! Keys (after the prefix, default `hookfleet:`):
//! - `{Q}:jobs`: the list of queue Q. Producers and the sweeper LPUSH,
//!   workers move from the right end, so jobs run oldest first.
//! - `{Q}:processing:<worker>`: what a worker has taken and not acked yet;
//!   the same `{Q}` hash tag keeps it in its queue's Redis Cluster slot.
//! - `{Q}:webhook_retry::<log id>`: the in-flight key, in its queue's hash
//!   slot. Whoever enqueues a row takes it first (SET NX EX, in the same
//!   script as the LPUSH, so a crash can never leave a key without its job);
//!   its value is a token that the job carries, and the worker deletes the key
//!   once the attempt's outcome is written, only if it still holds that token
//!   (a stale job never releases a newer enqueue's key); its TTL is the
//!   backstop for a lost job. Keys of the earlier form `webhook_retry::<id>`
//!   (no hash tag) are still honoured until they expire.
//! - `{Q}:recovered::<job>`: the workers that died holding a job (the
//!   reaper's count, registry.rs).
//! - `dead`, `workers`, `worker:<id>`, `reaper:lock`: the dead-letter list
//!   and worker liveness, one key per command.
//!
//! Every script and pipeline touches keys of one hash slot only, all named
//! in KEYS, so the same code runs on a Redis Cluster (redis_link.rs).
//!
//! Redis only carries work; Postgres holds the record. Losing every key here
//! loses no event: the sweeper finds every pending row again.

use std::time::Duration;

use redis::{AsyncCommands, Script};
use serde::{Deserialize, Serialize};

use crate::error::QueueError;

use crate::queue::link::Link;
use crate::queue::link::{Conn, RedisTarget};

/// Rows per enqueue script call: bounded so one call never holds Redis for
/// more than a millisecond or so.
pub const ENQUEUE_CHUNK: usize = 500;

/// A job on a queue. Versioned so a future format can live beside this one.
/// `webhook_id` lets a worker apply the webhook's concurrency limit before
/// claiming the row; `token` is the value of the in-flight key its enqueue
/// took, so only this job releases that key. A job without them (older, or
/// written by hand) is still delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub v: u32,
    pub log_id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// Why a job cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error("job does not parse: {0}")]
    Malformed(String),
    #[error("job version {0} is not supported (this worker reads version 1)")]
    Version(u32),
    #[error("job names log id {0}, which cannot exist")]
    BadLogId(i64),
}

impl Job {
    pub fn new(log_id: i64) -> Self {
        Job {
            v: 1,
            log_id,
            webhook_id: None,
            token: None,
        }
    }

    pub fn for_webhook(log_id: i64, webhook_id: Option<i64>) -> Self {
        Job {
            webhook_id,
            ..Job::new(log_id)
        }
    }

    pub fn encode(&self) -> String {
        use std::fmt::Write;
        let mut out = format!("{{\"v\":{},\"log_id\":{}", self.v, self.log_id);
        if let Some(w) = self.webhook_id {
            let _ = write!(out, ",\"webhook_id\":{w}");
        }
        if let Some(t) = &self.token {
            // Tokens are hex: nothing to escape.
            let _ = write!(out, ",\"token\":\"{t}\"");
        }
        out.push('}');
        out
    }

    /// Parses a job; the error says what is wrong with it.
    pub fn decode(raw: &str) -> Result<Job, JobError> {
        let job: Job = serde_json::from_str(raw).map_err(|e| JobError::Malformed(e.to_string()))?;
        if job.v != 1 {
            return Err(JobError::Version(job.v));
        }
        if job.log_id <= 0 {
            return Err(JobError::BadLogId(job.log_id));
        }
        Ok(job)
    }
}

/// A fresh in-flight key token: 64 random bits, hex. Two enqueues of one row
/// never share one, so a key is released only by the job its enqueue pushed.
pub fn new_token() -> String {
    format!("{:016x}", fastrand::u64(..))
}

/// Key names under one prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: impl Into<String>) -> Self {
        Keys {
            prefix: prefix.into(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn queue(&self, queue: &str) -> String {
        format!("{}{{{}}}:jobs", self.prefix, queue)
    }

    pub fn processing(&self, queue: &str, worker: &str) -> String {
        format!("{}{{{}}}:processing:{}", self.prefix, queue, worker)
    }

    /// The in-flight key of a row enqueued on `queue`: in the queue's hash
    /// slot, so one script can take it and push the job on Redis Cluster.
    pub fn in_flight(&self, queue: &str, log_id: i64) -> String {
        format!("{}{{{}}}:webhook_retry::{}", self.prefix, queue, log_id)
    }

    /// The in-flight key as versions before the hash tag wrote it; honoured
    /// (never written) until such keys expire.
    pub fn legacy_in_flight(&self, log_id: i64) -> String {
        format!("{}webhook_retry::{}", self.prefix, log_id)
    }

    /// The fleet-wide leases of a webhook's requests in flight (fleet.rs),
    /// under the webhook's own hash tag.
    pub fn leases(&self, webhook: i64) -> String {
        format!("{}{{webhook:{}}}:leases", self.prefix, webhook)
    }

    /// The fleet-wide rate limit state of a webhook (fleet.rs).
    pub fn rate(&self, webhook: i64) -> String {
        format!("{}{{webhook:{}}}:rate", self.prefix, webhook)
    }

    pub fn dead(&self) -> String {
        format!("{}dead", self.prefix)
    }

    /// A worker's heartbeat: exists while the worker lives (it has a TTL).
    pub fn heartbeat(&self, worker: &str) -> String {
        format!("{}worker:{}", self.prefix, worker)
    }

    /// Hash of registered workers → the queues they take from, so a dead
    /// worker's processing lists can be found after its heartbeat is gone.
    pub fn workers(&self) -> String {
        format!("{}workers", self.prefix)
    }

    /// The short lock one reaper holds while it recovers dead workers' jobs.
    pub fn reaper_lock(&self) -> String {
        format!("{}reaper:lock", self.prefix)
    }

    /// The workers that died holding a job taken from `queue` (a list with
    /// a TTL), in the queue's hash slot.
    pub fn recoveries(&self, queue: &str, job: &str) -> String {
        format!("{}{{{}}}:recovered::{}", self.prefix, queue, job)
    }
}

/// Takes each row's in-flight key and pushes its job onto one queue, as one
/// step per row. KEYS: in-flight key and legacy in-flight key for each row
/// (on a cluster, the in-flight key again: no legacy key exists there, and
/// one of another slot may not be named), then the queue. ARGV: TTL seconds, token, then one job per row. Returns 1
/// (enqueued) or 0 (key held: already on its way) per row.
const ENQUEUE_LUA: &str = r"
local ttl = ARGV[1]
local token = ARGV[2]
local queue = KEYS[#KEYS]
local out = {}
for i = 1, (#KEYS - 1) / 2 do
  if redis.call('EXISTS', KEYS[2 * i]) == 0
     and redis.call('SET', KEYS[2 * i - 1], token, 'NX', 'EX', ttl) then
    redis.call('LPUSH', queue, ARGV[i + 2])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
";

/// Acknowledges jobs of one processing list (KEYS[1]): removes each and
/// releases its row's in-flight key (KEYS[i + 1]) if the key still holds the
/// job's token (ARGV: job, token, per job). An empty token releases nothing;
/// `*` (a job from before tokens, whose key is of the legacy form) releases
/// the key whatever it holds, as those versions did.
const ACK_LUA: &str = r"
for i = 1, #ARGV / 2 do
  redis.call('LREM', KEYS[1], 1, ARGV[2 * i - 1])
  local token = ARGV[2 * i]
  if token == '*' or (token ~= '' and redis.call('GET', KEYS[i + 1]) == token) then
    redis.call('DEL', KEYS[i + 1])
  end
end
return 0
";

/// Moves one job from a processing list (KEYS[1]) to a queue (KEYS[2]), at
/// the consuming end (ARGV[2] = 'R') or the back ('L'), only if the list still
/// held it: a job acked meanwhile is never pushed a second time.
const PUT_BACK_LUA: &str = r"
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 1 then
  if ARGV[2] == 'R' then
    redis.call('RPUSH', KEYS[2], ARGV[1])
  else
    redis.call('LPUSH', KEYS[2], ARGV[1])
  end
  return 1
end
return 0
";

/// Moves up to ARGV[1] jobs from a queue (KEYS[1]) to a processing list
/// (KEYS[2]) without blocking, oldest first.
const TAKE_LUA: &str = r"
local out = {}
for i = 1, tonumber(ARGV[1]) do
  local job = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  if not job then break end
  out[i] = job
end
return out
";

/// Moves up to ARGV[1] jobs from the oldest ARGV[2] of a queue (KEYS[1]) to a
/// processing list (KEYS[2]), oldest first, taking at most the given number
/// of jobs per webhook (ARGV[4..]: webhook id, capacity, ...). Jobs of
/// webhooks at their limit that it passed over to take a newer job go to the
/// back of the queue, in order, so they never pile up at its front and block
/// the others; those after the last job taken stay where they are. If it took
/// nothing, it leaves them all in place (they are all there is within reach)
/// unless ARGV[3] is 1 and the queue is longer than the window: then they go
/// to the back too, bringing jobs beyond the window within reach.
/// Returns {taken, skipped}.
const TAKE_FAIR_LUA: &str = r#"
local want = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cap = {}
for i = 4, #ARGV, 2 do cap[ARGV[i]] = tonumber(ARGV[i + 1]) end
local jobs = redis.call('LRANGE', KEYS[1], -window, -1)
local taken, passed = {}, {}
local passed_before_last_taken = 0
for i = #jobs, 1, -1 do
  if #taken >= want then break end
  local job = jobs[i]
  local w = string.match(job, '"webhook_id":(%d+)')
  local c = w and cap[w]
  if c ~= nil and c <= 0 then
    passed[#passed + 1] = job
  else
    if c ~= nil then cap[w] = c - 1 end
    redis.call('LREM', KEYS[1], -1, job)
    redis.call('LPUSH', KEYS[2], job)
    taken[#taken + 1] = job
    passed_before_last_taken = #passed
  end
end
local move = passed_before_last_taken
if #taken == 0 and ARGV[3] == '1' and redis.call('LLEN', KEYS[1]) > window then move = #passed end
for i = 1, move do
  redis.call('LREM', KEYS[1], -1, passed[i])
  redis.call('LPUSH', KEYS[1], passed[i])
end
return {taken, #passed}
"#;

/// A row to put on a queue.
#[derive(Debug, Clone)]
pub struct Enqueue {
    pub log_id: i64,
    pub queue: String,
    pub webhook_id: Option<i64>,
}

/// The Redis side of hookfleet.
#[derive(Clone)]
pub struct RedisQueue {
    link: Link,
    pub(crate) keys: Keys,
    enqueue: Script,
    take: Script,
    take_fair: Script,
    ack: Script,
    put_back: Script,
    /// The fleet-wide limits' admission (fleet.rs), hashed once.
    pub(crate) admit: Script,
}

/// One job to acknowledge: where it is held, and its row's key to release.
#[derive(Debug, Clone)]
pub struct Ack {
    pub queue: String,
    pub processing: String,
    pub raw: String,
    pub release: Release,
}

/// Which in-flight key an ack releases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// The row's key, if it still holds this token (the job's enqueue took it).
    Token { log_id: i64, token: String },
    /// A job from before tokens: its row's key of the legacy form, as those
    /// versions released it.
    Legacy { log_id: i64 },
    /// Nothing (a job that names no row).
    Nothing,
}

impl RedisQueue {
    /// A way to Redis whose commands answer within [`crate::queue::COMMAND_TIMEOUT`].
    /// Connects lazily: a process starts while Redis is down and says so on
    /// first use.
    pub fn connect(target: &RedisTarget, prefix: &str) -> Result<RedisQueue, QueueError> {
        Ok(RedisQueue {
            link: Link::open(target)?,
            keys: Keys::new(prefix),
            enqueue: Script::new(ENQUEUE_LUA),
            take: Script::new(TAKE_LUA),
            take_fair: Script::new(TAKE_FAIR_LUA),
            ack: Script::new(ACK_LUA),
            put_back: Script::new(PUT_BACK_LUA),
            admit: Script::new(crate::queue::fleet::ADMIT_LUA),
        })
    }

    /// Whether this is a Redis Cluster (no key of the pre-hash-tag form can
    /// exist there: those versions never ran on one).
    pub fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster { .. })
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    pub async fn conn(&self) -> Result<Conn, QueueError> {
        self.link.get().await
    }

    /// A connection of its own for blocking pops, whose answer may take up to
    /// `block` (PITFALLS 1 and 2: never share it, and never assume a pop that
    /// timed out on our side moved nothing).
    pub async fn blocking_connection(&self, block: Duration) -> Result<Conn, QueueError> {
        self.link.blocking(block).await
    }

    /// Takes each row's in-flight key (TTL `ttl`, a fresh token as its value)
    /// and pushes its job carrying the token; a row whose key is held is
    /// skipped. Returns, per row, whether it was enqueued.
    pub async fn enqueue(&self, rows: &[Enqueue], ttl: Duration) -> Result<Vec<bool>, QueueError> {
        let mut out = vec![false; rows.len()];
        if rows.is_empty() {
            return Ok(out);
        }
        // One script call per queue (and chunk): every key it touches is in
        // that queue's hash slot.
        let mut by_queue: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
        for (i, row) in rows.iter().enumerate() {
            by_queue.entry(row.queue.as_str()).or_default().push(i);
        }
        let mut conn = self.conn().await?;
        let ttl = ttl.as_secs().max(1);
        for (queue, indexes) in by_queue {
            for chunk in indexes.chunks(ENQUEUE_CHUNK) {
                let token = new_token();
                let mut invocation = self.enqueue.prepare_invoke();
                for &i in chunk {
                    let key = self.keys.in_flight(queue, rows[i].log_id);
                    let legacy = if self.is_cluster() {
                        key.clone()
                    } else {
                        self.keys.legacy_in_flight(rows[i].log_id)
                    };
                    invocation.key(key).key(legacy);
                }
                invocation.key(self.keys.queue(queue));
                invocation.arg(ttl).arg(&token);
                for &i in chunk {
                    let job = Job {
                        token: Some(token.clone()),
                        ..Job::for_webhook(rows[i].log_id, rows[i].webhook_id)
                    };
                    invocation.arg(job.encode());
                }
                let flags: Vec<i64> = invocation.invoke_async(&mut conn).await?;
                for (&i, f) in chunk.iter().zip(flags) {
                    out[i] = f == 1;
                }
            }
        }
        Ok(out)
    }

    /// Moves up to `max` jobs from `queue` to `processing` without waiting.
    pub async fn take(
        &self,
        queue: &str,
        processing: &str,
        max: usize,
    ) -> Result<Vec<String>, QueueError> {
        let mut conn = self.conn().await?;
        Ok(self
            .take
            .key(self.keys.queue(queue))
            .key(processing)
            .arg(max)
            .invoke_async(&mut conn)
            .await?)
    }

    /// Like [`RedisQueue::take`], but looking at the oldest `window` jobs and
    /// taking at most `caps[webhook]` jobs of each webhook listed: jobs of a
    /// webhook at its limit stay where they are. Returns the jobs taken and
    /// how many were skipped; with `rotate`, a take that found only skipped
    /// jobs moves them to the back.
    pub async fn take_fair(
        &self,
        queue: &str,
        processing: &str,
        max: usize,
        window: usize,
        caps: &[(i64, usize)],
        rotate: bool,
    ) -> Result<(Vec<String>, usize), QueueError> {
        let mut conn = self.conn().await?;
        let mut invocation = self.take_fair.prepare_invoke();
        invocation
            .key(self.keys.queue(queue))
            .key(processing)
            .arg(max)
            .arg(window)
            .arg(u8::from(rotate));
        for (webhook, cap) in caps {
            invocation.arg(webhook).arg(cap);
        }
        Ok(invocation.invoke_async(&mut conn).await?)
    }

    /// Waits up to `block` for one job on `queue`, moving it to `processing`,
    /// on a dedicated connection.
    pub async fn take_blocking(
        conn: &mut Conn,
        queue_key: &str,
        processing: &str,
        block: Duration,
    ) -> Result<Option<String>, QueueError> {
        Ok(redis::cmd("BLMOVE")
            .arg(queue_key)
            .arg(processing)
            .arg("RIGHT")
            .arg("LEFT")
            .arg(block.as_secs_f64())
            .query_async(conn)
            .await?)
    }

    /// Acks jobs: removes each from its processing list and releases its
    /// row's in-flight key if the key still holds the job's token. One script
    /// call per processing list.
    pub async fn ack(&self, items: &[Ack]) -> Result<(), QueueError> {
        if items.is_empty() {
            return Ok(());
        }
        let mut by_list: std::collections::BTreeMap<&str, Vec<&Ack>> = Default::default();
        for item in items {
            by_list
                .entry(item.processing.as_str())
                .or_default()
                .push(item);
        }
        let mut conn = self.conn().await?;
        for (processing, items) in by_list {
            let mut invocation = self.ack.prepare_invoke();
            invocation.key(processing);
            for item in &items {
                match &item.release {
                    Release::Token { log_id, token } => {
                        invocation
                            .key(self.keys.in_flight(&item.queue, *log_id))
                            .arg(&item.raw)
                            .arg(token);
                    }
                    // One Redis only: the legacy key has no hash tag, and
                    // none exists on a cluster (there such a job releases
                    // nothing: its key expires by its TTL).
                    Release::Legacy { log_id } if !self.is_cluster() => {
                        invocation
                            .key(self.keys.legacy_in_flight(*log_id))
                            .arg(&item.raw)
                            .arg("*");
                    }
                    Release::Legacy { .. } | Release::Nothing => {
                        // A key that is never read: the job releases nothing.
                        invocation.key(processing).arg(&item.raw).arg("");
                    }
                }
            }
            invocation.invoke_async::<()>(&mut conn).await?;
        }
        Ok(())
    }

    /// Puts a taken job back at the consuming end of its queue (it is taken
    /// next), atomically with removing it from the processing list. Returns
    /// false when the list no longer held it (nothing was pushed).
    pub async fn requeue(
        &self,
        processing: &str,
        queue: &str,
        job: &str,
    ) -> Result<bool, QueueError> {
        self.put_back(processing, queue, job, "R").await
    }

    /// Sends a taken job to the back of its queue (the producing end),
    /// atomically with removing it from the processing list: a job whose
    /// webhook is at its concurrency limit waits its turn again instead of
    /// holding a slot. Returns false when the list no longer held it.
    pub async fn bounce(
        &self,
        processing: &str,
        queue: &str,
        job: &str,
    ) -> Result<bool, QueueError> {
        self.put_back(processing, queue, job, "L").await
    }

    async fn put_back(
        &self,
        processing: &str,
        queue: &str,
        job: &str,
        end: &str,
    ) -> Result<bool, QueueError> {
        let mut conn = self.conn().await?;
        let moved: i64 = self
            .put_back
            .key(processing)
            .key(self.keys.queue(queue))
            .arg(job)
            .arg(end)
            .invoke_async(&mut conn)
            .await?;
        Ok(moved == 1)
    }

    /// Whether Redis answers (`PING`), for readiness.
    pub async fn ping(&self) -> Result<(), QueueError> {
        let mut conn = self.conn().await?;
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        Ok(())
    }

    /// Jobs waiting on `queue`.
    pub async fn depth(&self, queue: &str) -> Result<i64, QueueError> {
        let mut conn = self.conn().await?;
        Ok(conn.llen(self.keys.queue(queue)).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_round_trip_and_bad_ones_say_why() {
        let j = Job::new(42);
        assert_eq!(j.encode(), r#"{"v":1,"log_id":42}"#);
        let w = Job::for_webhook(42, Some(7));
        assert_eq!(w.encode(), r#"{"v":1,"log_id":42,"webhook_id":7}"#);
        assert_eq!(Job::decode(&w.encode()).unwrap(), w);
        assert_eq!(Job::decode(&j.encode()).unwrap(), j);
        let t = Job {
            token: Some("00ff".into()),
            ..Job::for_webhook(42, Some(7))
        };
        assert_eq!(
            t.encode(),
            r#"{"v":1,"log_id":42,"webhook_id":7,"token":"00ff"}"#
        );
        assert_eq!(Job::decode(&t.encode()).unwrap(), t);
        assert!(matches!(
            Job::decode("not json"),
            Err(JobError::Malformed(_))
        ));
        assert_eq!(
            Job::decode(r#"{"v":2,"log_id":1}"#),
            Err(JobError::Version(2))
        );
        assert_eq!(
            Job::decode(r#"{"v":1,"log_id":0}"#),
            Err(JobError::BadLogId(0))
        );
    }

    #[test]
    fn queue_keys_share_a_hash_tag_with_their_processing_lists() {
        let k = Keys::new("hookfleet:");
        assert_eq!(k.queue("default"), "hookfleet:{default}:jobs");
        assert_eq!(
            k.processing("default", "w1"),
            "hookfleet:{default}:processing:w1"
        );
        assert_eq!(
            k.in_flight("default", 7),
            "hookfleet:{default}:webhook_retry::7"
        );
    }
}
