//! The retry schedule: when the next attempt of a failed delivery is due.
//!
//! `[5m, 30m, 2h, 5h, 10h, 10h]` (Svix's, minus its 5 s entry: a retry is
//! always "later, from the database", never a short sleep). After attempt k
//! fails the next one is due at now + S[min(k-1, len-1)]: a webhook allowed
//! more retries than the schedule has entries keeps going at the last
//! interval. With the default max_retries of 3 a delivery is tried at 0, +5m,
//! +35m and +2h35m, then Exhausted.
//!
//! A receiver's `Retry-After` (on 429 or 503) may push the next attempt later,
//! never earlier, and never past the last entry. Everything else in hookfleet
//! asks this module; no other file knows a retry delay.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::{format_duration, parse_duration};
use crate::error::ConfigError;

/// The default schedule, as text so `--help` and the parser agree.
pub const DEFAULT_SCHEDULE: &str = "5m,30m,2h,5h,10h,10h";

/// Delays between attempts, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySchedule {
    steps: Vec<Duration>,
}

impl Default for RetrySchedule {
    fn default() -> Self {
        Self::parse(DEFAULT_SCHEDULE).expect("the default schedule parses")
    }
}

impl RetrySchedule {
    /// Parses a comma-separated list of durations such as `2s,4s,8s`.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let steps = text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                let d = parse_duration(s)?;
                if d.is_zero() {
                    return Err(ConfigError(format!(
                        "retry schedule entry {s:?} is zero: a retry must come later"
                    )));
                }
                Ok(d)
            })
            .collect::<Result<Vec<_>, _>>()?;
        if steps.is_empty() {
            return Err(ConfigError(format!(
                "retry schedule {text:?} has no entries (expected e.g. {DEFAULT_SCHEDULE})"
            )));
        }
        Ok(Self { steps })
    }

    pub fn steps(&self) -> &[Duration] {
        &self.steps
    }

    /// The last (longest-standing) interval: the cap for `Retry-After`.
    pub fn last(&self) -> Duration {
        *self.steps.last().expect("a schedule is never empty")
    }

    /// The delay after attempt `attempt` (1-based) has failed.
    pub fn delay_after(&self, attempt: u32) -> Duration {
        let index = (attempt.max(1) as usize - 1).min(self.steps.len() - 1);
        self.steps[index]
    }

    /// The delay after attempt `attempt` failed, honouring a receiver's
    /// `Retry-After`: later than the schedule says, never earlier, and never
    /// past the last entry.
    pub fn delay_with_retry_after(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let scheduled = self.delay_after(attempt);
        match retry_after {
            Some(asked) => scheduled.max(asked.min(self.last())),
            None => scheduled,
        }
    }
}

impl std::fmt::Display for RetrySchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.steps.iter().map(|d| format_duration(*d)).collect();
        f.write_str(&parts.join(","))
    }
}

/// Reads a `Retry-After` header: delay-seconds or an HTTP date. A date in the
/// past means "now" (zero); anything unreadable is ignored.
pub fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let when = DateTime::parse_from_rfc2822(value)
        .ok()?
        .with_timezone(&Utc);
    Some((when - now).to_std().unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60;
    const HOUR: u64 = 3600;

    #[test]
    fn default_schedule_is_five_minutes_then_half_an_hour_then_hours() {
        let s = RetrySchedule::default();
        let secs: Vec<u64> = (1..=8).map(|k| s.delay_after(k).as_secs()).collect();
        assert_eq!(
            secs,
            vec![
                5 * MIN,
                30 * MIN,
                2 * HOUR,
                5 * HOUR,
                10 * HOUR,
                10 * HOUR,
                10 * HOUR,
                10 * HOUR
            ]
        );
    }

    #[test]
    fn schedule_parses_compressed_seconds_and_prints_back() {
        let s = RetrySchedule::parse("2s, 4s,8s").unwrap();
        assert_eq!(
            s.steps(),
            &[
                Duration::from_secs(2),
                Duration::from_secs(4),
                Duration::from_secs(8)
            ]
        );
        assert_eq!(s.to_string(), "2s,4s,8s");
        assert_eq!(RetrySchedule::default().to_string(), DEFAULT_SCHEDULE);
    }

    #[test]
    fn schedule_refuses_empty_zero_and_garbage() {
        assert!(RetrySchedule::parse("").is_err());
        assert!(RetrySchedule::parse("0s").is_err());
        assert!(RetrySchedule::parse("5m,soon").is_err());
    }

    #[test]
    fn retry_after_pushes_later_never_earlier_and_is_capped() {
        let s = RetrySchedule::default();
        // Asked for 10 minutes after the first failure: later than 5m, honoured.
        assert_eq!(
            s.delay_with_retry_after(1, Some(Duration::from_secs(600)))
                .as_secs(),
            600
        );
        // Asked for 1 s: the schedule's 5 minutes stand.
        assert_eq!(
            s.delay_with_retry_after(1, Some(Duration::from_secs(1)))
                .as_secs(),
            5 * MIN
        );
        // Asked for a week: capped at the last entry.
        assert_eq!(
            s.delay_with_retry_after(1, Some(Duration::from_secs(7 * 24 * HOUR)))
                .as_secs(),
            10 * HOUR
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Mon, 30 Nov 2026 12:10:00 GMT", now),
            Some(Duration::from_secs(600))
        );
        assert_eq!(
            parse_retry_after("Mon, 30 Nov 2026 11:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("tomorrow-ish", now), None);
    }
}
