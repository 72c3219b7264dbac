//! The dead-letter list (jobs a worker could not use, or that killed their
//! workers too often): read, put back on their queues, or purged. A dead
//! letter never holds an event hostage: a job that names a row still has
//! its row, which the sweeper enqueues again once it is due.

use serde::Serialize;

use hookfleet_core::error::QueueError;
use hookfleet_core::queue::RedisQueue;
use hookfleet_core::queue::{DeadLetter, DEAD_LETTER_LIMIT};

use crate::error::OpsError;

/// The newest `limit` dead letters, newest first.
pub async fn list(queue: &RedisQueue, limit: isize) -> Result<Vec<DeadLetter>, QueueError> {
    queue.dead().list(limit).await
}

/// The dead letter `id`.
pub async fn show(queue: &RedisQueue, id: &str) -> Result<DeadLetter, OpsError> {
    queue
        .dead()
        .by_id(id)
        .await?
        .ok_or_else(|| OpsError::NoDeadLetter(id.to_string()))
}

/// A dead letter put back on its queue.
#[derive(Debug, Serialize)]
pub struct Requeued {
    pub id: String,
    /// The queue it went to (`default` for a job that named none).
    pub queue: String,
}

/// `dead requeue ID`: the job goes back on its queue.
pub async fn requeue(queue: &RedisQueue, id: &str) -> Result<Requeued, OpsError> {
    let d = queue
        .dead()
        .requeue(id)
        .await?
        .ok_or_else(|| OpsError::NoDeadLetter(id.to_string()))?;
    Ok(Requeued {
        queue: if d.queue.is_empty() {
            "default".into()
        } else {
            d.queue
        },
        id: d.id,
    })
}

/// `dead requeue --all`: every dead letter back on its queue; how many
/// went (one requeued or purged meanwhile by someone else is not counted).
pub async fn requeue_all(queue: &RedisQueue) -> Result<usize, QueueError> {
    let mut n = 0;
    for d in queue.dead().list(DEAD_LETTER_LIMIT).await? {
        if queue.dead().requeue(&d.id).await?.is_some() {
            n += 1;
        }
    }
    Ok(n)
}

/// `dead purge ID`: the dead letter is deleted.
pub async fn purge(queue: &RedisQueue, id: &str) -> Result<(), OpsError> {
    if queue.dead().purge(id).await? {
        Ok(())
    } else {
        Err(OpsError::NoDeadLetter(id.to_string()))
    }
}

/// `dead purge --all`: every dead letter deleted; how many were.
pub async fn purge_all(queue: &RedisQueue) -> Result<i64, QueueError> {
    queue.dead().purge_all().await
}
