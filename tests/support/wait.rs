//! Waiting for something another task or process does: look again and again
//! until a condition holds, and fail with what was last seen once a deadline
//! passes. A test waits for its condition this way instead of sleeping a
//! fixed time and hoping the work is done; a sleep is left only where a test
//! means to watch that something does *not* happen during a window.

use std::fmt::Debug;
use std::time::{Duration, Instant};

/// How long a test waits for something that normally takes milliseconds (a
/// worker delivering a row, a process starting): generous, because tests
/// share two cores; a healthy run takes a fraction of it.
pub const PATIENCE: Duration = Duration::from_secs(40);

/// How long a condition is left alone between looks: short enough that a
/// test does not idle, long enough not to load Postgres and Redis that the
/// fleet under test is using.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// How much of the last state seen a failure shows: a thousand rows would
/// drown the message.
const SHOWN_CHARS: usize = 4000;

/// Waits until `cond` holds; panics naming `what` after [`PATIENCE`].
pub async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened within {PATIENCE:?}: {what}"
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Looks with `look` until `done` holds for what it saw, and returns that.
/// `look` may also act before it looks (tick a sweeper, say). Panics after
/// [`PATIENCE`] with `what` and the last thing seen, so a failure shows the
/// state the test was stuck in.
pub async fn until_seen<T: Debug>(
    what: &str,
    mut look: impl AsyncFnMut() -> T,
    done: impl Fn(&T) -> bool,
) -> T {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let seen = look().await;
        if done(&seen) {
            return seen;
        }
        if tokio::time::Instant::now() >= deadline {
            let seen: String = format!("{seen:?}").chars().take(SHOWN_CHARS).collect();
            panic!("never happened within {PATIENCE:?}: {what}; last seen: {seen}");
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// [`until`] for code that runs outside the async runtime (starting or
/// stopping a process): the thread sleeps between looks. Panics naming
/// `what` after `limit`.
pub fn until_blocking(limit: Duration, what: &str, cond: impl FnMut() -> bool) {
    assert!(
        holds_within(limit, cond),
        "never happened within {limit:?}: {what}"
    );
}

/// Whether `cond` comes to hold within `limit`, looking again and again
/// (the thread sleeps between looks); for a wait whose end is no failure
/// (a process that may need killing after all).
pub fn holds_within(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !cond() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    true
}
