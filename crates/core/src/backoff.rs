//! Exponential backoff with jitter for reconnecting to Redis or Postgres:
//! after a restart, a fleet's workers spread their retries instead of
//! reconnecting in lockstep.

use std::time::Duration;

/// First wait after a failure: quick enough to ride out a blip.
pub const BACKOFF_START: Duration = Duration::from_millis(100);

/// Longest wait: a restarted server is noticed within seconds.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Doubles from [`BACKOFF_START`] to [`BACKOFF_MAX`]; each wait is a random
/// point in the upper half of its step ("equal jitter"), so waits still grow
/// but two processes that failed together do not retry together.
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
        let step = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        step / 2 + step.mul_f64(fastrand::f64() / 2.0)
    }

    pub fn reset(&mut self) {
        self.next = BACKOFF_START;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_each_wait_jittered_within_its_upper_half() {
        let steps = [100, 200, 400, 800, 1600, 3200, 5000, 5000];
        let mut b = Backoff::new();
        for step in steps {
            let wait = b.next_wait().as_millis();
            assert!(
                (step / 2..=step).contains(&wait),
                "{wait} ms outside {}..={step}",
                step / 2
            );
        }
    }

    #[test]
    fn two_processes_failing_together_do_not_retry_together() {
        let waits: std::collections::HashSet<u128> = (0..20)
            .map(|_| Backoff::new().next_wait().as_micros())
            .collect();
        assert!(waits.len() > 10, "{waits:?}");
    }
}
