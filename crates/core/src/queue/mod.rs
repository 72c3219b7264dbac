//! Redis: the work. Jobs on queue lists and the in-flight keys that guard
//! them, workers' heartbeats and the reaper, the dead-letter list, and
//! per-webhook limits held across the fleet, over one connection (one
//! Redis or a Redis Cluster, plain or TLS) and one key scheme.

mod dead;
mod fleet;
mod jobs;
mod link;
mod registry;

pub use dead::{DeadLetter, DEAD_LETTER_LIMIT};
pub use fleet::{burst_of, Admission, LEASE_MARGIN};
pub use jobs::{new_token, Ack, Enqueue, Job, JobError, Keys, RedisQueue, Release, ENQUEUE_CHUNK};
pub use link::{Conn, RedisTarget, COMMAND_TIMEOUT, MAX_SEED_URLS, POOL_SIZE};
pub use registry::{Reaped, WorkerInfo, MAX_LISTED_WORKERS, REAP_CHUNK, RECOVERY_MEMORY};
