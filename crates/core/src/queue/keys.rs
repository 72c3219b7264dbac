//! The key scheme: every key hookfleet uses in Redis, under one prefix
//! (default `hookfleet:`), with the hash tags that keep what one script
//! touches in one Redis Cluster slot.
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
//!   reaper's count).
//! - `dead`, `workers`, `worker:<id>`, `reaper:lock`: the dead-letter list
//!   and worker liveness, one key per command.
//!
//! Every script and pipeline touches keys of one hash slot only, all named
//! in KEYS, so the same code runs on a Redis Cluster.

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

    /// The fleet-wide leases of a webhook's requests in flight ([`crate::queue::FleetLimits`]),
    /// under the webhook's own hash tag.
    pub fn leases(&self, webhook: i64) -> String {
        format!("{}{{webhook:{}}}:leases", self.prefix, webhook)
    }

    /// The fleet-wide rate limit state of a webhook ([`crate::queue::FleetLimits`]).
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

#[cfg(test)]
mod tests {
    use super::*;

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
