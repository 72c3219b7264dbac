//! The queues: jobs that say "deliver row N", and the in-flight keys that
//! keep a row from being enqueued twice.
//!
//! Every key is named by [`crate::queue::Keys`] (which lists them all);
//! every script and pipeline here touches keys of one queue's hash slot
//! only, all named in KEYS, so the same code runs on a Redis Cluster.

use std::time::Duration;

use redis::{AsyncCommands, Script};

use crate::error::QueueError;
use crate::queue::job::{new_token, Job};
use crate::queue::link::{Conn, Redis};

/// Rows per enqueue script call: bounded so one call never holds Redis for
/// more than a millisecond or so.
pub(crate) const ENQUEUE_CHUNK: usize = 500;

/// Takes each row's in-flight key and pushes its job onto one queue, as one
/// step per row. KEYS: in-flight key and legacy in-flight key for each row
/// (on a cluster, the in-flight key again: no legacy key exists there, and
/// one of another slot may not be named), then the queue. ARGV: TTL seconds, token, then one job per row. Returns 1
/// (enqueued) or 0 (key held: already on its way) per row.
const ENQUEUE_LUA: &str = include_str!("lua/enqueue.lua");

/// Acknowledges jobs of one processing list (KEYS[1]): removes each and
/// releases its row's in-flight key (KEYS[i + 1]) if the key still holds the
/// job's token (ARGV: job, token, per job). An empty token releases nothing;
/// `*` (a job from before tokens, whose key is of the legacy form) releases
/// the key whatever it holds, as those versions did.
const ACK_LUA: &str = include_str!("lua/ack.lua");

/// Moves one job from a processing list (KEYS[1]) to a queue (KEYS[2]), at
/// the consuming end (ARGV[2] = 'R') or the back ('L'), only if the list still
/// held it: a job acked meanwhile is never pushed a second time.
const PUT_BACK_LUA: &str = include_str!("lua/put_back.lua");

/// Moves up to ARGV[1] jobs from a queue (KEYS[1]) to a processing list
/// (KEYS[2]) without blocking, oldest first.
const TAKE_LUA: &str = include_str!("lua/take.lua");

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
const TAKE_FAIR_LUA: &str = include_str!("lua/take_fair.lua");

/// A row to put on a queue.
#[derive(Debug, Clone)]
pub struct Enqueue {
    pub log_id: i64,
    pub queue: String,
    pub webhook_id: Option<i64>,
}

/// The queues: jobs pushed with their rows' in-flight keys, taken into
/// processing lists, acknowledged or put back, each step one script or
/// command in its queue's hash slot.
#[derive(Clone)]
pub struct Jobs {
    redis: Redis,
    enqueue: Script,
    take: Script,
    take_fair: Script,
    ack: Script,
    put_back: Script,
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

impl Jobs {
    pub(crate) fn new(redis: Redis) -> Jobs {
        Jobs {
            redis,
            enqueue: Script::new(ENQUEUE_LUA),
            take: Script::new(TAKE_LUA),
            take_fair: Script::new(TAKE_FAIR_LUA),
            ack: Script::new(ACK_LUA),
            put_back: Script::new(PUT_BACK_LUA),
        }
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
        let mut conn = self.redis.conn().await?;
        let ttl = ttl.as_secs().max(1);
        for (queue, indexes) in by_queue {
            for chunk in indexes.chunks(ENQUEUE_CHUNK) {
                let token = new_token();
                let mut invocation = self.enqueue.prepare_invoke();
                for &i in chunk {
                    let key = self.redis.keys.in_flight(queue, rows[i].log_id);
                    let legacy = if self.redis.is_cluster() {
                        key.clone()
                    } else {
                        self.redis.keys.legacy_in_flight(rows[i].log_id)
                    };
                    invocation.key(key).key(legacy);
                }
                invocation.key(self.redis.keys.queue(queue));
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
        let mut conn = self.redis.conn().await?;
        Ok(self
            .take
            .key(self.redis.keys.queue(queue))
            .key(processing)
            .arg(max)
            .invoke_async(&mut conn)
            .await?)
    }

    /// Like [`Jobs::take`], but looking at the oldest `window` jobs and
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
        let mut conn = self.redis.conn().await?;
        let mut invocation = self.take_fair.prepare_invoke();
        invocation
            .key(self.redis.keys.queue(queue))
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
        let mut conn = self.redis.conn().await?;
        for (processing, items) in by_list {
            let mut invocation = self.ack.prepare_invoke();
            invocation.key(processing);
            for item in &items {
                match &item.release {
                    Release::Token { log_id, token } => {
                        invocation
                            .key(self.redis.keys.in_flight(&item.queue, *log_id))
                            .arg(&item.raw)
                            .arg(token);
                    }
                    // One Redis only: the legacy key has no hash tag, and
                    // none exists on a cluster (there such a job releases
                    // nothing: its key expires by its TTL).
                    Release::Legacy { log_id } if !self.redis.is_cluster() => {
                        invocation
                            .key(self.redis.keys.legacy_in_flight(*log_id))
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
        let mut conn = self.redis.conn().await?;
        let moved: i64 = self
            .put_back
            .key(processing)
            .key(self.redis.keys.queue(queue))
            .arg(job)
            .arg(end)
            .invoke_async(&mut conn)
            .await?;
        Ok(moved == 1)
    }

    /// Jobs waiting on `queue`.
    pub async fn depth(&self, queue: &str) -> Result<i64, QueueError> {
        let mut conn = self.redis.conn().await?;
        Ok(conn.llen(self.redis.keys.queue(queue)).await?)
    }
}
