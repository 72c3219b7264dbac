//! The dead-letter list: jobs a worker could not use (unparseable, naming no
//! row) or that killed their workers too often. Each entry says why, who
//! found it and when, and carries an id for `hookfleet dead show|requeue|purge`.
//!
//! A dead letter never loses an event: a job that names a row still has its
//! row in Postgres, and the sweeper enqueues that row again once it is due.

use chrono::Utc;
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};

use crate::error::QueueError;
use crate::queue::link::{Conn, Redis};

/// Entries kept: a flood of garbage jobs cannot grow Redis without bound.
/// Older entries beyond this are trimmed (they name no row, or a row the
/// sweeper still owns).
pub const DEAD_LETTER_LIMIT: isize = 10_000;

/// One dead letter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeadLetter {
    pub id: String,
    /// The job exactly as it was on the queue.
    pub job: String,
    /// The queue it came from (where `requeue` puts it back).
    pub queue: String,
    pub reason: String,
    /// The worker (or reaper) that gave up on it.
    pub worker: String,
    pub at: String,
    /// Workers that died holding it, for jobs dead-lettered by the reaper.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub died_holding: Vec<String>,
}

impl DeadLetter {
    pub fn new(job: &str, queue: &str, reason: &str, worker: &str) -> DeadLetter {
        DeadLetter {
            id: format!("dl_{}", uuid::Uuid::now_v7().simple()),
            job: job.into(),
            queue: queue.into(),
            reason: reason.into(),
            worker: worker.into(),
            // Milliseconds are enough to order them and to read.
            at: Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            died_holding: Vec::new(),
        }
    }

    fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads an entry; one written by hand or by an older version still shows.
    fn decode(raw: &str) -> DeadLetter {
        serde_json::from_str(raw).unwrap_or_else(|_| DeadLetter {
            id: String::new(),
            job: raw.into(),
            queue: String::new(),
            reason: "unreadable dead-letter entry".into(),
            worker: String::new(),
            at: String::new(),
            died_holding: Vec::new(),
        })
    }
}

/// The dead-letter list.
#[derive(Clone)]
pub struct DeadLetters {
    redis: Redis,
}

impl DeadLetters {
    pub(crate) fn new(redis: Redis) -> DeadLetters {
        DeadLetters { redis }
    }

    /// Moves a job from a processing list to the dead-letter list. The two
    /// lists are in different cluster slots, so this is two steps, filing
    /// first: a crash between them leaves the job where it was (its worker's
    /// recovery files it again), never lost. A job the list no longer holds
    /// (a retry after a lost answer) is not filed twice.
    pub async fn file(&self, processing: &str, letter: &DeadLetter) -> Result<(), QueueError> {
        let mut conn = self.redis.conn().await?;
        let entry = self.file_entry(&mut conn, letter).await?;
        let removed: i64 = conn.lrem(processing, 1, &letter.job).await?;
        if removed == 0 {
            let _: i64 = conn.lrem(self.redis.keys.dead(), 1, entry).await?;
        }
        Ok(())
    }

    /// Files one entry at the head of the dead-letter list, trimming it to
    /// [`DEAD_LETTER_LIMIT`] entries. Returns the entry's text.
    pub(crate) async fn file_entry(
        &self,
        conn: &mut Conn,
        letter: &DeadLetter,
    ) -> Result<String, QueueError> {
        let entry = letter.encode();
        redis::pipe()
            .lpush(self.redis.keys.dead(), &entry)
            .ignore()
            .ltrim(self.redis.keys.dead(), 0, DEAD_LETTER_LIMIT - 1)
            .ignore()
            .query_async::<()>(conn)
            .await?;
        Ok(entry)
    }

    /// Dead letters, newest first.
    pub async fn list(&self, limit: isize) -> Result<Vec<DeadLetter>, QueueError> {
        let mut conn = self.redis.conn().await?;
        let raw: Vec<String> = conn
            .lrange(self.redis.keys.dead(), 0, limit.max(1) - 1)
            .await?;
        Ok(raw.iter().map(|r| DeadLetter::decode(r)).collect())
    }

    pub async fn count(&self) -> Result<i64, QueueError> {
        let mut conn = self.redis.conn().await?;
        Ok(conn.llen(self.redis.keys.dead()).await?)
    }

    /// The entry with `id`, and its stored text.
    async fn find(&self, id: &str) -> Result<Option<(DeadLetter, String)>, QueueError> {
        let mut conn = self.redis.conn().await?;
        let raw: Vec<String> = conn.lrange(self.redis.keys.dead(), 0, -1).await?;
        Ok(raw
            .into_iter()
            .map(|r| (DeadLetter::decode(&r), r))
            .find(|(d, _)| d.id == id))
    }

    pub async fn by_id(&self, id: &str) -> Result<Option<DeadLetter>, QueueError> {
        Ok(self.find(id).await?.map(|(d, _)| d))
    }

    /// Puts a dead letter's job back on its queue and removes the entry.
    /// Returns the entry, or None if no entry has `id`.
    pub async fn requeue(&self, id: &str) -> Result<Option<DeadLetter>, QueueError> {
        let Some((letter, raw)) = self.find(id).await? else {
            return Ok(None);
        };
        let queue = if letter.queue.is_empty() {
            "default"
        } else {
            letter.queue.as_str()
        };
        // Pushed first, then the entry removed (two slots on a cluster): a
        // crash between them leaves the entry to requeue again, and the
        // row's claim keeps a second job from sending twice.
        let mut conn = self.redis.conn().await?;
        let _: i64 = conn
            .rpush(self.redis.keys.queue(queue), &letter.job)
            .await?;
        let removed: i64 = conn.lrem(self.redis.keys.dead(), 1, &raw).await?;
        if removed == 0 {
            // Purged meanwhile by someone else: take the job back off the queue.
            let _: () = conn
                .lrem(self.redis.keys.queue(queue), -1, &letter.job)
                .await?;
            return Ok(None);
        }
        Ok(Some(letter))
    }

    /// Removes one dead letter; false if no entry has `id`.
    pub async fn purge(&self, id: &str) -> Result<bool, QueueError> {
        let Some((_, raw)) = self.find(id).await? else {
            return Ok(false);
        };
        let mut conn = self.redis.conn().await?;
        let removed: i64 = conn.lrem(self.redis.keys.dead(), 1, raw).await?;
        Ok(removed > 0)
    }

    /// Removes every dead letter; returns how many there were.
    pub async fn purge_all(&self) -> Result<i64, QueueError> {
        let mut conn = self.redis.conn().await?;
        let (n, _deleted): (i64, i64) = redis::pipe()
            .atomic()
            .llen(self.redis.keys.dead())
            .del(self.redis.keys.dead())
            .query_async(&mut conn)
            .await?;
        Ok(n)
    }
}
