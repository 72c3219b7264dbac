//! Redis: the work. One connection (one Redis or a Redis Cluster, plain or
//! TLS) and one key scheme, shared by four concerns, each its own small type
//! owning its scripts (Lua in `lua/`, included at build time): the queues
//! ([`Jobs`]), worker liveness ([`Registry`]), the dead letters
//! ([`DeadLetters`]) and per-webhook limits across the fleet
//! ([`FleetLimits`]). [`RedisQueue`] hands out each.
//!
//! Redis only carries work; Postgres holds the record. Losing every key here
//! loses no event: the sweeper finds every pending row again.

mod dead;
mod fleet;
mod job;
mod jobs;
mod keys;
mod link;
mod registry;

use std::time::Duration;

pub use dead::{DeadLetter, DeadLetters, DEAD_LETTER_LIMIT};
pub use fleet::{Admission, FleetLimits, LEASE_MARGIN};
pub use job::{Job, JobError};
pub use jobs::{Ack, Enqueue, Jobs, Release};
pub use keys::Keys;
pub use link::{Conn, RedisTarget, COMMAND_TIMEOUT, POOL_SIZE};
pub use registry::{Reaped, Registry, WorkerInfo};

use crate::error::QueueError;
use link::Redis;

/// The Redis side of hookfleet: its four concerns over one connection.
#[derive(Clone)]
pub struct RedisQueue {
    redis: Redis,
    jobs: Jobs,
    registry: Registry,
    dead: DeadLetters,
    fleet: FleetLimits,
}

impl RedisQueue {
    /// A way to Redis whose commands answer within [`COMMAND_TIMEOUT`].
    /// Connects lazily: a process starts while Redis is down and says so on
    /// first use.
    pub fn connect(target: &RedisTarget, prefix: &str) -> Result<RedisQueue, QueueError> {
        let redis = Redis::open(target, prefix)?;
        let dead = DeadLetters::new(redis.clone());
        Ok(RedisQueue {
            jobs: Jobs::new(redis.clone()),
            registry: Registry::new(redis.clone(), dead.clone()),
            fleet: FleetLimits::new(redis.clone()),
            dead,
            redis,
        })
    }

    /// The queues.
    pub fn jobs(&self) -> &Jobs {
        &self.jobs
    }

    /// Worker liveness and the reaper.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The dead-letter list.
    pub fn dead(&self) -> &DeadLetters {
        &self.dead
    }

    /// Per-webhook limits across the fleet.
    pub fn fleet(&self) -> &FleetLimits {
        &self.fleet
    }

    /// The key scheme.
    pub fn keys(&self) -> &Keys {
        &self.redis.keys
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.redis.is_cluster()
    }

    /// A pooled connection (for what no concern owns: tests, tools).
    pub async fn conn(&self) -> Result<Conn, QueueError> {
        self.redis.conn().await
    }

    /// A connection of its own for blocking pops, whose answer may take up to
    /// `block` (PITFALLS 1 and 2: never share it, and never assume a pop that
    /// timed out on our side moved nothing).
    pub async fn blocking_connection(&self, block: Duration) -> Result<Conn, QueueError> {
        self.redis.blocking(block).await
    }

    /// Whether Redis answers (`PING`), for readiness.
    pub async fn ping(&self) -> Result<(), QueueError> {
        let mut conn = self.redis.conn().await?;
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        Ok(())
    }
}
