//! Exponential backoff for reconnecting to Redis or Postgres.

use std::time::Duration;

/// First wait after a failure: quick enough to ride out a blip.
pub const BACKOFF_START: Duration = Duration::from_millis(100);

/// Longest wait: a restarted server is noticed within seconds.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Doubles from [`BACKOFF_START`] to [`BACKOFF_MAX`].
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Backoff {
    pub fn new() -> Backoff {
        Backoff {
            next: BACKOFF_START,
        }
    }

    /// The wait before the next try.
    pub fn next_wait(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        now
    }

    pub fn reset(&mut self) {
        self.next = BACKOFF_START;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap() {
        let mut b = Backoff::new();
        let waits: Vec<u128> = (0..8).map(|_| b.next_wait().as_millis()).collect();
        assert_eq!(waits, vec![100, 200, 400, 800, 1600, 3200, 5000, 5000]);
    }
}
