//! The bounds a webhook definition is held to, each with the reason it is
//! that number. [`crate::validate`] enforces them; a refusal's message
//! quotes them.

use std::time::Duration;

/// The longest a receiver may take: a worker slot held longer than a minute
/// by one receiver is a slot stolen from all the others.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// The most retries a webhook may ask for: 50 at the last interval of the
/// default schedule (10 h) is three weeks, longer than anyone waits.
pub const MAX_RETRIES_LIMIT: i32 = 50;

/// The most requests a webhook may have in flight across the fleet: a
/// worker's own concurrency is capped at 10,000.
pub const MAX_ENDPOINT_CONCURRENCY: i32 = 10_000;

/// The highest rate limit, requests per second: above this a limit protects
/// no receiver, and each request still costs a Redis round trip.
pub const MAX_RATE_LIMIT: i32 = 100_000;

/// The most hosts a dynamic URL may be allowed to reach: a webhook talks to
/// a service, not to a list of them.
pub const MAX_ALLOWED_HOSTS: usize = 32;

/// Longest name, entity type, event or queue name accepted.
pub const MAX_NAME_LEN: usize = 140;
