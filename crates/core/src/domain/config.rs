//! Values every binary's configuration is made of: durations as people
//! write them, the defaults, and URLs made safe to print. The flags
//! themselves live in the binaries and `hookfleet-settings` (core knows
//! nothing of command lines).

use std::time::Duration;

use crate::error::ConfigError;

/// Default Redis key prefix: every key hookfleet writes starts with it.
pub const DEFAULT_PREFIX: &str = "hookfleet:";

/// How long a Queued row may wait for its first attempt before the sweeper
/// counts its job as lost and enqueues it again. Ten minutes is two sweeper
/// ticks: long enough that a healthy backlog is never doubled, short enough
/// that a Redis that lost everything heals within the quarter hour.
pub const DEFAULT_QUEUE_GRACE: &str = "10m";

/// The longest duration any setting takes (a year): a retry delay, a
/// retention, a grace. Longer ones are typos, and no timestamp arithmetic
/// near it can overflow.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(365 * 86400);

/// Parses `500ms`, `5s`, `2m`, `1.5h`, `1d`, a bare number of seconds, or
/// several of these added up (`1h30m`, `2h 15m`). Units are exactly these
/// five, case and all: `5M` is refused rather than read as months or
/// minutes.
pub fn parse_duration(text: &str) -> Result<Duration, ConfigError> {
    let t = text.trim();
    let not_a_duration = || {
        ConfigError(format!(
            "{text:?} is not a duration (expected e.g. 500ms, 5s, 2m, 1h, 1h30m)"
        ))
    };
    let is_number = |c: char| c.is_ascii_digit() || c == '.';
    let seconds = if t.is_empty() {
        return Err(not_a_duration());
    } else if t.chars().all(is_number) {
        t.parse::<f64>().map_err(|_| not_a_duration())?
    } else {
        let mut total = 0.0;
        let mut rest = t;
        while !rest.is_empty() {
            let number_end = rest.find(|c: char| !is_number(c)).unwrap_or(rest.len());
            let (number, after) = rest.split_at(number_end);
            let unit_end = after
                .find(|c: char| !c.is_ascii_alphabetic())
                .unwrap_or(after.len());
            let (unit, after) = after.split_at(unit_end);
            let value: f64 = number.parse().map_err(|_| not_a_duration())?;
            let per_unit = match unit {
                "ms" => 0.001,
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                "d" => 86400.0,
                "" => return Err(not_a_duration()),
                other => {
                    return Err(ConfigError(format!(
                        "{text:?} has an unknown unit {other:?} (use ms, s, m, h or d, or combine them: 1h30m)"
                    )))
                }
            };
            total += value * per_unit;
            rest = after.trim_start();
        }
        total
    };
    if !seconds.is_finite() || !(0.0..=MAX_DURATION.as_secs_f64()).contains(&seconds) {
        return Err(ConfigError(format!("{text:?} is out of range")));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// The shortest exact rendering: `5m`, `2h`, `1500ms`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    match s {
        0 => "0s".into(),
        s if s.is_multiple_of(86400) => format!("{}d", s / 86400),
        s if s.is_multiple_of(3600) => format!("{}h", s / 3600),
        s if s.is_multiple_of(60) => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// A connection URL with its password replaced, for log lines and errors.
pub fn redact_url(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("***"));
            }
            u.to_string()
        }
        Err(_) => "<unparseable url>".into(),
    }
}

/// A point in time as operators type it: RFC 3339 (`2026-12-01T10:00:00Z`)
/// or a duration ago (`2h`, `30m`).
pub fn parse_time_or_ago(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    let ago = parse_duration(text)
        .ok()
        .and_then(|d| chrono::Duration::from_std(d).ok());
    match ago {
        Some(d) => Ok(chrono::Utc::now() - d),
        None => Err(format!(
            "{text:?} is neither an RFC 3339 time nor a duration such as 2h"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_every_unit() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86400));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-3s").is_err());
    }

    #[test]
    fn compound_durations_parse_and_stay_bounded() {
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("2h 15m").unwrap(), Duration::from_secs(8100));
        assert_eq!(
            parse_duration("1d12h").unwrap(),
            Duration::from_secs(129_600)
        );
        assert_eq!(
            parse_duration("1m30s500ms").unwrap(),
            Duration::from_millis(90_500)
        );
        // Not months, not minutes; no units but the five; no loose numbers.
        for refused in [
            "5M", "1 month", "1day", "10 000 s", "1h 30", "h", "1.2.3s", "-1h30m",
        ] {
            assert!(parse_duration(refused).is_err(), "{refused}");
        }
        // Huge values are refused, never overflow.
        for huge in [
            "18446744073709551615s1000ms",
            "1e300s",
            "99999999999999999999d1s",
        ] {
            assert!(parse_duration(huge).is_err(), "{huge}");
        }
        let too_long = parse_duration("400d").unwrap_err().to_string();
        assert!(too_long.contains("out of range"), "{too_long}");
        let unknown = parse_duration("1h30parsecs").unwrap_err().to_string();
        assert!(
            unknown.contains("1h30m"),
            "the error shows the form: {unknown}"
        );
    }

    #[test]
    fn durations_format_shortest() {
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
        assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(45)), "45s");
    }

    #[test]
    fn urls_lose_their_password() {
        let r = redact_url("postgres://app:hunter2@db:5432/hook");
        assert!(!r.contains("hunter2"), "{r}");
        assert!(r.contains("app"), "{r}");
    }
}
