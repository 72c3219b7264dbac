//! Exponential backoff with jitter for reconnecting to Redis or Postgres:
//! after a restart, a fleet's workers spread their retries instead of
//! reconnecting in lockstep. [`retry_until_stopped`] is the one loop that
//! uses it: try, and after a failure wait and try again, until the work is
//! done or the caller is told to stop.

use std::future::Future;
use std::time::Duration;

/// First wait after a failure: quick enough to ride out a blip.
pub(crate) const BACKOFF_START: Duration = Duration::from_millis(100);

/// Longest wait: a restarted server is noticed within seconds.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Doubles from [`BACKOFF_START`] to [`BACKOFF_MAX`]; each wait is a random
/// point in the upper half of its step ("equal jitter"), so waits still grow
/// but two processes that failed together do not retry together.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    /// No wait is longer than this (a caller with a rhythm of its own).
    ceiling: Duration,
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
            ceiling: BACKOFF_MAX,
        }
    }

    /// The same steps, but no wait longer than `ceiling`: a loop that runs
    /// every `ceiling` anyway never waits longer after a failure.
    pub fn with_ceiling(ceiling: Duration) -> Backoff {
        Backoff {
            ceiling,
            ..Backoff::new()
        }
    }

    /// The wait before the next try.
    pub fn next_wait(&mut self) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        (step / 2 + step.mul_f64(fastrand::f64() / 2.0)).min(self.ceiling)
    }

    pub fn reset(&mut self) {
        self.next = BACKOFF_START;
    }

    /// [`retry_until_stopped`], waiting this backoff's steps.
    pub async fn retry_until_stopped<T, E, Try>(
        mut self,
        stop: impl Future<Output = ()>,
        mut log: impl FnMut(&E, Duration),
        mut op: impl FnMut() -> Try,
    ) -> Result<T, E>
    where
        Try: Future<Output = Result<T, E>>,
    {
        let mut stop = std::pin::pin!(stop);
        loop {
            let error = match op().await {
                Ok(done) => return Ok(done),
                Err(e) => e,
            };
            let wait = self.next_wait();
            log(&error, wait);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = &mut stop => return Err(error),
            }
        }
    }
}

/// Runs `op` until it succeeds, waiting a [`Backoff`] step after each
/// failure; `log` hears of each failure with the wait ahead, so every loop
/// keeps its own words. `stop` ends a wait and the loop, which then returns
/// the last failure: it says how urgently the caller gives up, e.g.
/// `shutdown.requested(1)` for work a drain puts back anyway,
/// `shutdown.requested(2)` for work that should finish even while draining
/// (an outcome, an ack), `std::future::pending()` for a caller whose `op`
/// decides itself when to give up (it returns `Ok` with its own error).
///
/// `op` makes a fresh future for each try (`|| async { … }`): state kept
/// from one try to the next lives outside it, in a `Sync` type, so the
/// whole loop stays `Send` (a task may carry it across threads).
pub async fn retry_until_stopped<T, E, Try>(
    stop: impl Future<Output = ()>,
    log: impl FnMut(&E, Duration),
    op: impl FnMut() -> Try,
) -> Result<T, E>
where
    Try: Future<Output = Result<T, E>>,
{
    Backoff::new().retry_until_stopped(stop, log, op).await
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
    fn a_ceiling_caps_every_wait() {
        let mut b = Backoff::with_ceiling(Duration::from_millis(150));
        for _ in 0..6 {
            assert!(b.next_wait() <= Duration::from_millis(150));
        }
    }

    #[tokio::test]
    async fn retries_until_the_work_is_done_hearing_of_every_failure() {
        let tries = std::sync::atomic::AtomicU32::new(0);
        let mut heard = Vec::new();
        let done = retry_until_stopped(
            std::future::pending(),
            |e: &u32, wait| heard.push((*e, wait)),
            || async {
                let tried = tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if tried < 3 {
                    Err(tried)
                } else {
                    Ok("done")
                }
            },
        )
        .await;
        assert_eq!(done, Ok("done"));
        assert_eq!(heard.iter().map(|(e, _)| *e).collect::<Vec<_>>(), [1, 2]);
        assert!(heard[1].1 >= BACKOFF_START, "the second wait is longer");
    }

    #[tokio::test]
    async fn told_to_stop_it_gives_up_with_the_last_failure() {
        let mut tries = 0;
        let stopped = retry_until_stopped(
            std::future::ready(()),
            |_: &&str, _| tries += 1,
            || async { Err::<(), _>("down") },
        )
        .await;
        assert_eq!(stopped, Err("down"));
        assert_eq!(tries, 1, "stopped during the first wait");
    }

    #[test]
    fn two_processes_failing_together_do_not_retry_together() {
        let waits: std::collections::HashSet<u128> = (0..20)
            .map(|_| Backoff::new().next_wait().as_micros())
            .collect();
        assert!(waits.len() > 10, "{waits:?}");
    }
}
