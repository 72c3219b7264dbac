//! Worker liveness in Redis: each worker registers the queues it takes from
//! and keeps a heartbeat key with a TTL. When a heartbeat is gone the worker
//! is dead, and a reaper (any live worker, one at a time under a short lock)
//! puts the jobs left in its processing lists back on their queues.
//!
//! A job recovered from dead workers more than `max_recoveries` times is a job
//! that kills its worker: it goes to the dead-letter list with the workers it
//! took down, instead of looping forever. (Its row, if any, stays in Postgres
//! and the sweeper owns it again.)
//!
//! Putting a job back is always safe: the row's claim decides whether it is
//! sent, so a job recovered while its row is leased or done is dropped.

use std::time::Duration;

use chrono::Utc;
use redis::{AsyncCommands, Script};

use crate::error::QueueError;
use crate::queue::dead::{DeadLetter, DeadLetters};
use crate::queue::link::Redis;

/// How long a recovery is remembered against a job: long enough to notice a
/// job that kills one worker after another, short enough to forget a job that
/// was merely unlucky once.
pub(crate) const RECOVERY_MEMORY: Duration = Duration::from_secs(24 * 3600);

/// Jobs one reaping script call moves: a dead worker's processing list holds
/// at most its concurrency's worth, and a call stays well under a millisecond.
pub(crate) const REAP_CHUNK: isize = 500;

/// Moves jobs (ARGV[4..], oldest first) of a dead worker's processing list
/// (KEYS[1]) back to the consuming end of its queue (KEYS[2]), counting each
/// job's recoveries in its own key (KEYS[i + 2] for ARGV[i + 3]; in the
/// queue's hash slot, as every key here). A job recovered more than ARGV[1]
/// times stays where it is and is returned with the workers it took down:
/// the caller files it as a dead letter (that list is in another slot), then
/// removes it with [`FORGET_LUA`], so a crash between the two files it
/// twice but never loses it. A job no longer in the list is passed over.
/// ARGV[2]: the dead worker's id; ARGV[3]: how long a recovery is
/// remembered (seconds). Returns {requeued, {job, holders as JSON, ...}}.
const REAP_LUA: &str = include_str!("lua/reap.lua");

/// Removes a dead-lettered job (ARGV[1]) from a dead worker's processing
/// list (KEYS[1]) and forgets its recoveries (KEYS[2]).
const FORGET_LUA: &str = include_str!("lua/forget.lua");

/// Moves every job of a live worker's own processing list (KEYS[1]) back to
/// its queue (KEYS[2]): what a draining worker did not finish.
const RETURN_LUA: &str = include_str!("lua/return.lua");

/// Deletes KEYS[1] only if it holds ARGV[1] (compare-and-delete).
const RELEASE_IF_OWNED_LUA: &str = include_str!("lua/release_if_owned.lua");

/// What one reaping pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    pub dead_workers: usize,
    pub requeued: usize,
    pub dead_lettered: usize,
}

/// The most workers [`Registry::workers`] lists: a fleet larger than this
/// is read through the metrics, not one page.
pub(crate) const MAX_LISTED_WORKERS: usize = 1_000;

/// A registered worker as the console and the API show it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct WorkerInfo {
    pub id: String,
    pub queues: Vec<String>,
    /// False once its heartbeat expired (it died; a reaper returns its jobs).
    pub alive: bool,
    #[schema(required)]
    pub heartbeat_at: Option<chrono::DateTime<Utc>>,
    /// Jobs held in its processing list, per queue.
    pub holding: std::collections::BTreeMap<String, i64>,
}

/// Worker liveness: registrations, heartbeats, and the reaper that returns
/// a dead worker's jobs (filing the ones that kill their workers with the
/// dead letters).
#[derive(Clone)]
pub struct Registry {
    redis: Redis,
    dead: DeadLetters,
    reap: Script,
    forget: Script,
    return_all: Script,
    release_if_owned: Script,
}

impl Registry {
    pub(crate) fn new(redis: Redis, dead: DeadLetters) -> Registry {
        Registry {
            redis,
            dead,
            reap: Script::new(REAP_LUA),
            forget: Script::new(FORGET_LUA),
            return_all: Script::new(RETURN_LUA),
            release_if_owned: Script::new(RELEASE_IF_OWNED_LUA),
        }
    }

    /// Registers (or re-registers after a Redis restart) a worker and renews
    /// its heartbeat for `ttl`. Two commands, since the keys live in
    /// different cluster slots: the heartbeat first, so a reaper never finds
    /// this worker registered without one.
    pub async fn heartbeat(
        &self,
        worker: &str,
        queues: &[String],
        ttl: Duration,
    ) -> Result<(), QueueError> {
        let mut conn = self.redis.conn().await?;
        let value =
            serde_json::json!({ "queues": queues, "at": Utc::now().to_rfc3339() }).to_string();
        let _: () = conn
            .set_ex(
                self.redis.keys.heartbeat(worker),
                value,
                ttl.as_secs().max(1),
            )
            .await?;
        let _: () = conn
            .hset(self.redis.keys.workers(), worker, queues.join(","))
            .await?;
        Ok(())
    }

    /// The registered workers, by id: their queues, their last heartbeat
    /// (None once it expired: a dead worker the reaper has not reaped
    /// yet) and the jobs each of their processing lists holds. At most
    /// [`MAX_LISTED_WORKERS`]; one round trip per worker.
    pub async fn workers(&self) -> Result<Vec<WorkerInfo>, QueueError> {
        let mut conn = self.redis.conn().await?;
        let all: std::collections::BTreeMap<String, String> =
            conn.hgetall(self.redis.keys.workers()).await?;
        let mut out = Vec::with_capacity(all.len().min(MAX_LISTED_WORKERS));
        for (id, queues) in all.into_iter().take(MAX_LISTED_WORKERS) {
            let queues: Vec<String> = queues
                .split(',')
                .filter(|q| !q.is_empty())
                .map(str::to_string)
                .collect();
            let beat: Option<String> = conn.get(self.redis.keys.heartbeat(&id)).await?;
            let heartbeat_at = beat
                .as_deref()
                .and_then(|b| serde_json::from_str::<serde_json::Value>(b).ok())
                .and_then(|v| v.get("at").and_then(|a| a.as_str()).map(str::to_string))
                .and_then(|at| chrono::DateTime::parse_from_rfc3339(&at).ok())
                .map(|t| t.with_timezone(&Utc));
            let mut holding = std::collections::BTreeMap::new();
            for q in &queues {
                let n: i64 = conn.llen(self.redis.keys.processing(q, &id)).await?;
                holding.insert(q.clone(), n);
            }
            out.push(WorkerInfo {
                alive: beat.is_some(),
                id,
                queues,
                heartbeat_at,
                holding,
            });
        }
        Ok(out)
    }

    /// Removes a worker that stopped cleanly (its lists are empty by then).
    pub async fn deregister(&self, worker: &str) -> Result<(), QueueError> {
        let mut conn = self.redis.conn().await?;
        let _: () = conn.hdel(self.redis.keys.workers(), worker).await?;
        let _: () = conn.del(self.redis.keys.heartbeat(worker)).await?;
        Ok(())
    }

    /// Puts everything left in `worker`'s processing lists back on the queues.
    pub async fn return_all(&self, worker: &str, queues: &[String]) -> Result<usize, QueueError> {
        let script = &self.return_all;
        let mut conn = self.redis.conn().await?;
        let mut total = 0usize;
        for q in queues {
            let n: usize = script
                .key(self.redis.keys.processing(q, worker))
                .key(self.redis.keys.queue(q))
                .invoke_async(&mut conn)
                .await?;
            total += n;
        }
        Ok(total)
    }

    /// One reaping pass, if this process gets the reaper lock (held for
    /// `lock_for`): recovers the jobs of every registered worker whose
    /// heartbeat is gone. Returns None when another reaper holds the lock.
    pub async fn reap(
        &self,
        me: &str,
        max_recoveries: u32,
        lock_for: Duration,
    ) -> Result<Option<Reaped>, QueueError> {
        let mut conn = self.redis.conn().await?;
        let locked: bool = redis::cmd("SET")
            .arg(self.redis.keys.reaper_lock())
            .arg(me)
            .arg("NX")
            .arg("PX")
            .arg(lock_for.as_millis() as u64)
            .query_async::<Option<String>>(&mut conn)
            .await?
            .is_some();
        if !locked {
            return Ok(None);
        }
        let registered: Vec<(String, String)> = conn.hgetall(self.redis.keys.workers()).await?;
        let script = &self.reap;
        let mut reaped = Reaped::default();
        for (worker, queues) in registered {
            if worker == me {
                continue;
            }
            let alive: bool = conn.exists(self.redis.keys.heartbeat(&worker)).await?;
            if alive {
                continue;
            }
            reaped.dead_workers += 1;
            for q in queues.split(',').filter(|q| !q.is_empty()) {
                let processing = self.redis.keys.processing(q, &worker);
                loop {
                    // Oldest last in the list: read from its end, oldest first.
                    let mut jobs: Vec<String> = conn.lrange(&processing, -REAP_CHUNK, -1).await?;
                    if jobs.is_empty() {
                        break;
                    }
                    jobs.reverse();
                    let mut invocation = script.prepare_invoke();
                    invocation
                        .key(&processing)
                        .key(self.redis.keys.queue(q))
                        .arg(max_recoveries)
                        .arg(&worker)
                        .arg(RECOVERY_MEMORY.as_secs());
                    for job in &jobs {
                        invocation.key(self.redis.keys.recoveries(q, job)).arg(job);
                    }
                    let (requeued, dead): (usize, Vec<String>) =
                        invocation.invoke_async(&mut conn).await?;
                    reaped.requeued += requeued;
                    if requeued == 0 && dead.is_empty() {
                        break; // taken meanwhile: nothing left that is ours
                    }
                    for pair in dead.chunks(2) {
                        let [job, holders] = pair else { continue };
                        let mut letter = DeadLetter::new(
                            job,
                            q,
                            &format!(
                                "recovered from {} dead workers: a job that kills its worker",
                                max_recoveries + 1
                            ),
                            "reaper",
                        );
                        letter.died_holding = serde_json::from_str(holders).unwrap_or_default();
                        self.dead.file_entry(&mut conn, &letter).await?;
                        let _: i64 = self
                            .forget
                            .key(&processing)
                            .key(self.redis.keys.recoveries(q, job))
                            .arg(job)
                            .invoke_async(&mut conn)
                            .await?;
                        reaped.dead_lettered += 1;
                    }
                }
            }
            let _: () = conn.hdel(self.redis.keys.workers(), &worker).await?;
        }
        // Released only if still ours: a pass that outlived the lock must not
        // free the next reaper's.
        let _: i64 = self
            .release_if_owned
            .key(self.redis.keys.reaper_lock())
            .arg(me)
            .invoke_async(&mut conn)
            .await?;
        Ok(Some(reaped))
    }

    /// The jobs in one of `worker`'s processing lists.
    pub async fn processing_jobs(
        &self,
        queue: &str,
        worker: &str,
    ) -> Result<Vec<String>, QueueError> {
        let mut conn = self.redis.conn().await?;
        Ok(conn
            .lrange(self.redis.keys.processing(queue, worker), 0, -1)
            .await?)
    }
}
