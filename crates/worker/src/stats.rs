//! Counters of what a worker did, logged as a summary line every
//! [`SUMMARY_INTERVAL`] and returned when it stops.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How often the worker logs what it did: often enough to watch a demo, rare
/// enough to stay out of the way at thousands of deliveries per second.
pub const SUMMARY_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
pub struct Counters {
    pub delivered: AtomicU64,
    pub failed: AtomicU64,
    pub exhausted: AtomicU64,
    /// Jobs dropped because their row was terminal or not due, or a second
    /// job for a row its batch claimed (a job whose row is leased waits for
    /// the lease instead).
    pub stale: AtomicU64,
    pub dead_lettered: AtomicU64,
    /// Outcomes refused because another claim took the row meanwhile.
    pub fenced: AtomicU64,
    /// Jobs sent to the back of the queue because their webhook was at its
    /// concurrency limit.
    pub bounced: AtomicU64,
    /// Jobs acked unclaimed because their webhook is paused (the row is
    /// held in Postgres until `webhook resume`).
    pub paused: AtomicU64,
    /// Rows whose claim was undone because this worker cannot open their
    /// webhook's credentials (a sealing key it lacks).
    pub withheld: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub delivered: u64,
    pub failed: u64,
    pub exhausted: u64,
    pub stale: u64,
    pub dead_lettered: u64,
    pub fenced: u64,
    pub bounced: u64,
    pub paused: u64,
    pub withheld: u64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            delivered: self.delivered.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            exhausted: self.exhausted.load(Ordering::Relaxed),
            stale: self.stale.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
            fenced: self.fenced.load(Ordering::Relaxed),
            bounced: self.bounced.load(Ordering::Relaxed),
            paused: self.paused.load(Ordering::Relaxed),
            withheld: self.withheld.load(Ordering::Relaxed),
        }
    }
}

impl Snapshot {
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        Snapshot {
            delivered: self.delivered - earlier.delivered,
            failed: self.failed - earlier.failed,
            exhausted: self.exhausted - earlier.exhausted,
            stale: self.stale - earlier.stale,
            dead_lettered: self.dead_lettered - earlier.dead_lettered,
            fenced: self.fenced - earlier.fenced,
            bounced: self.bounced - earlier.bounced,
            paused: self.paused - earlier.paused,
            withheld: self.withheld - earlier.withheld,
        }
    }

    /// Logs the counters with `message`.
    pub fn log(&self, message: &str) {
        tracing::info!(
            delivered = self.delivered,
            failed = self.failed,
            exhausted = self.exhausted,
            stale = self.stale,
            dead_lettered = self.dead_lettered,
            bounced = self.bounced,
            paused = self.paused,
            withheld = self.withheld,
            "{message}"
        );
    }

    pub fn is_zero(&self) -> bool {
        *self == Snapshot::default()
    }
}
