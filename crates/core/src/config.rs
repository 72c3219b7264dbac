//! Settings shared by every binary: each is a flag with an environment
//! fallback, so the same names work on a command line, in a systemd unit and
//! in a Kubernetes manifest (DESIGN "Command line and configuration").

use std::time::Duration;

use clap::Args;

use crate::error::ConfigError;
use crate::schedule::{RetrySchedule, DEFAULT_SCHEDULE};
use crate::ssrf::NetworkPolicy;

/// Default Redis key prefix: every key hookfleet writes starts with it.
pub const DEFAULT_PREFIX: &str = "hookfleet:";

/// How long a Queued row may wait for its first attempt before the sweeper
/// counts its job as lost and enqueues it again. Ten minutes is two sweeper
/// ticks: long enough that a healthy backlog is never doubled, short enough
/// that a Redis that lost everything heals within the quarter hour.
pub const DEFAULT_QUEUE_GRACE: &str = "10m";

/// Connection settings and delivery policy common to all binaries.
#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// Postgres connection URL.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,

    /// Redis connection URL.
    #[arg(
        long,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    pub redis_url: String,

    /// Prefix of every Redis key hookfleet uses.
    #[arg(long, env = "HOOKFLEET_REDIS_PREFIX", default_value = DEFAULT_PREFIX)]
    pub redis_prefix: String,

    /// Delays between attempts, comma-separated (e.g. 2s,4s,8s).
    #[arg(long, env = "HOOKFLEET_RETRY_SCHEDULE", default_value = DEFAULT_SCHEDULE, value_parser = RetrySchedule::parse)]
    pub retry_schedule: RetrySchedule,

    /// Grace before a Queued row whose first attempt has not happened counts
    /// as lost and is enqueued again by the sweeper.
    #[arg(long, env = "HOOKFLEET_QUEUE_GRACE", default_value = DEFAULT_QUEUE_GRACE, value_parser = parse_duration)]
    pub queue_grace: Duration,

    /// Networks webhooks may reach despite the guard against internal
    /// addresses (comma-separated CIDRs, e.g. 10.0.0.0/8,127.0.0.1/32).
    #[arg(long, env = "HOOKFLEET_ALLOWED_NETWORKS", default_value = "", value_parser = NetworkPolicy::parse)]
    pub allowed_networks: NetworkPolicy,

    /// Log format: text or json (RUST_LOG sets the level; default info).
    #[arg(long, env = "HOOKFLEET_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

/// Parses `500ms`, `5s`, `2m`, `1h`, `1d`, or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, ConfigError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number.parse().map_err(|_| {
        ConfigError(format!(
            "{text:?} is not a duration (expected e.g. 500ms, 5s, 2m, 1h)"
        ))
    })?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86400.0,
        other => {
            return Err(ConfigError(format!(
                "{text:?} has an unknown unit {other:?} (use ms, s, m, h or d)"
            )))
        }
    };
    if !seconds.is_finite() || !(0.0..=365.0 * 86400.0).contains(&seconds) {
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

/// Starts `tracing` output on stderr, as text or one JSON object per line.
pub fn init_tracing(format: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a person at a terminal, never in files or pipes.
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    if format == "json" {
        let _ = builder.json().try_init();
    } else {
        let _ = builder.try_init();
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
