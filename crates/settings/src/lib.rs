//! # hookfleet-settings
//!
//! What every hookfleet binary shares at its edge: the settings that are a
//! flag with an environment fallback (so the same names work on a command
//! line, in a systemd unit and in a Kubernetes manifest, DESIGN "Command line
//! and configuration"), and how logs are written.
//!
//! # Layout
//! - [`Settings`]: connection settings and delivery policy.
//! - [`init_tracing`]: text or JSON logs on stderr.

use std::time::Duration;

use clap::Args;

use hookfleet_core::domain::at_rest::{self, Keyring};
use hookfleet_core::domain::{parse_duration, DEFAULT_PREFIX, DEFAULT_QUEUE_GRACE};
use hookfleet_core::domain::{RetrySchedule, DEFAULT_SCHEDULE};
use hookfleet_core::error::{ConfigError, QueueError, StoreError};
use hookfleet_core::queue::{RedisQueue, RedisTarget};
use hookfleet_core::request::NetworkPolicy;
use hookfleet_core::store::Store;

/// Connection settings and delivery policy common to all binaries.
/// (`Debug` is written by hand: it must never print a key or a password.)
#[derive(Clone, Args)]
pub struct Settings {
    /// Postgres connection URL.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,

    /// Redis connection URL (`rediss://` for TLS). For a Redis Cluster,
    /// seed node URLs, comma-separated.
    #[arg(
        long,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    pub redis_url: String,

    /// Redis is a Redis Cluster (REDIS_URL lists seed nodes).
    #[arg(long, env = "HOOKFLEET_REDIS_CLUSTER")]
    pub redis_cluster: bool,

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

    /// Key sealing webhook secrets and header values at rest: 32 random
    /// bytes, base64 (`openssl rand -base64 32`). Prefer the _FILE form:
    /// environments and command lines are readable by others.
    #[arg(long, env = "HOOKFLEET_SECRET_KEY", hide_env_values = true)]
    pub secret_key: Option<String>,

    /// A file holding the key (when HOOKFLEET_SECRET_KEY is not set).
    #[arg(long, env = "HOOKFLEET_SECRET_KEY_FILE")]
    pub secret_key_file: Option<std::path::PathBuf>,

    /// Older keys, comma-separated: values sealed with them still open
    /// (`hookfleet secrets reencrypt` moves them to the current key).
    #[arg(
        long,
        env = "HOOKFLEET_SECRET_KEY_OLD",
        hide_env_values = true,
        value_delimiter = ','
    )]
    pub secret_key_old: Vec<String>,

    /// Postgres connections this process keeps at most (default: what the
    /// binary needs: worker 4, producer 8, sweeper 2, CLI 1). Size it so
    /// that processes × this stays under Postgres's max_connections (or the
    /// pooler's pool).
    #[arg(long, env = "HOOKFLEET_DB_POOL_SIZE", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub db_pool_size: Option<u32>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |set: bool| if set { "<hidden>" } else { "<unset>" };
        f.debug_struct("Settings")
            .field("database_url", &hidden(!self.database_url.is_empty()))
            .field("redis_url", &hidden(!self.redis_url.is_empty()))
            .field("redis_cluster", &self.redis_cluster)
            .field("redis_prefix", &self.redis_prefix)
            .field("retry_schedule", &self.retry_schedule)
            .field("queue_grace", &self.queue_grace)
            .field("allowed_networks", &self.allowed_networks)
            .field("log_format", &self.log_format)
            .field("secret_key", &hidden(self.secret_key.is_some()))
            .field("secret_key_file", &self.secret_key_file)
            .field(
                "secret_key_old",
                &format!("<{} hidden>", self.secret_key_old.len()),
            )
            .field("db_pool_size", &self.db_pool_size)
            .finish()
    }
}

impl Settings {
    /// Where Redis is (one server, or a cluster's seed nodes).
    pub fn redis_target(&self) -> Result<RedisTarget, QueueError> {
        RedisTarget::parse(&self.redis_url, self.redis_cluster)
    }

    /// The queue these settings name.
    pub fn queue(&self) -> Result<RedisQueue, QueueError> {
        RedisQueue::connect(&self.redis_target()?, &self.redis_prefix)
    }

    /// The keyring these settings describe (never logged: keys print as
    /// their ids only).
    pub fn keyring(&self) -> Result<Keyring, ConfigError> {
        let current = secret_or_file(
            self.secret_key.as_deref(),
            self.secret_key_file.as_deref(),
            "the secret key file",
        )?
        .filter(|k| !k.trim().is_empty());
        let old: Vec<&str> = self
            .secret_key_old
            .iter()
            .map(|k| k.trim())
            .filter(|k| !k.is_empty())
            .collect();
        Keyring::new(current.as_deref(), &old)
    }

    /// Connects to Postgres now, failing at once with the server's reason
    /// (a command a person typed: the CLI); otherwise as [`Settings::store`].
    pub fn store_now(&self, default_pool: u32) -> Result<Store, StoreError> {
        Store::connect_now(
            &self.database_url,
            self.db_pool_size.unwrap_or(default_pool),
        )
    }

    /// Connects to Postgres with `--db-pool-size` connections at most, or
    /// `default_pool` (the binary's own need) when unset.
    pub fn store(&self, default_pool: u32) -> Result<Store, StoreError> {
        Store::connect(
            &self.database_url,
            self.db_pool_size.unwrap_or(default_pool),
        )
    }

    /// Installs the keyring for this process; a
    /// long-running binary calls it at start with `warn` and says once if
    /// values will be stored as they are.
    pub fn install(&self, warn: bool) -> Result<(), ConfigError> {
        let ring = self.keyring()?;
        if warn && !ring.seals() {
            tracing::warn!(
                "no HOOKFLEET_SECRET_KEY: webhook secrets and header values are stored unencrypted"
            );
        }
        at_rest::install(ring);
        Ok(())
    }
}

/// A secret given as a value (a flag or its variable) or as a file that
/// holds it (`…_FILE`, which keeps it out of `ps` and the environment):
/// the value when it is set and not blank, else the file's content,
/// trimmed. The error names the file, never its content.
pub fn secret_or_file(
    value: Option<&str>,
    file: Option<&std::path::Path>,
    what: &str,
) -> Result<Option<String>, ConfigError> {
    match (value, file) {
        (Some(v), _) if !v.trim().is_empty() => Ok(Some(v.trim().to_string())),
        (_, Some(path)) => std::fs::read_to_string(path)
            .map(|text| Some(text.trim().to_string()))
            .map_err(|e| ConfigError(format!("cannot read {what} {}: {e}", path.display()))),
        (Some(v), None) => Ok(Some(v.to_string())),
        (None, None) => Ok(None),
    }
}

/// Whether logs are JSON: then even the last words of a process are.
static JSON_LOGS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Says why a process stops: `error: …` on stderr for a person, or (with
/// `--log-format json`) one JSON log line at error level, so a log pipeline
/// that parses every line parses this one too.
pub fn fatal(message: impl std::fmt::Display) {
    if JSON_LOGS.load(std::sync::atomic::Ordering::Relaxed) {
        tracing::error!(fatal = true, "{message}");
    } else {
        eprintln!("error: {message}");
    }
}

/// Parses the command line; a usage error exits 2 as clap's does, but when
/// JSON logs are asked for (`--log-format json` or `HOOKFLEET_LOG_FORMAT=json`)
/// it is one JSON line, so a pipeline that parses every line of a
/// long-running process parses this one too. Help and version print as
/// they are.
pub fn parse_args<C: clap::Parser>() -> C {
    match C::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            let informational = matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            );
            if informational || !json_asked() {
                e.exit();
            }
            let line = serde_json::json!({
                "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                "level": "ERROR",
                "fields": {"message": e.kind().to_string(), "usage": e.to_string().trim(), "fatal": true},
                "target": "hookfleet_settings",
            });
            eprintln!("{line}");
            std::process::exit(2);
        }
    }
}

/// Whether the command line or the environment asks for JSON logs.
fn json_asked() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let flag = args
        .windows(2)
        .any(|w| w[0] == "--log-format" && w[1] == "json")
        || args.iter().any(|a| a == "--log-format=json");
    flag || std::env::var("HOOKFLEET_LOG_FORMAT").is_ok_and(|v| v == "json")
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
        JSON_LOGS.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = builder.json().try_init();
    } else {
        let _ = builder.try_init();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        settings: Settings,
    }

    #[test]
    fn debug_never_prints_a_key_or_a_password() {
        let cli = Cli::parse_from([
            "x",
            "--database-url",
            "postgres://app:pg-password@db/hookfleet",
            "--redis-url",
            "redis://:redis-password@cache:6379",
            "--secret-key",
            "c2VjcmV0LWtleS1zZWNyZXQta2V5LXNlY3JldC1rZXk=",
            "--secret-key-old",
            "b2xkLWtleQ==",
        ]);
        let shown = format!("{:?}", cli.settings);
        for secret in ["pg-password", "redis-password", "c2VjcmV0", "b2xkLWtleQ"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("redis_prefix"), "{shown}");
    }
}

/// Traces over OTLP (off unless an endpoint is given): see
/// `hookfleet_core::runtime::trace`. The exporter also reads the standard
/// `OTEL_*` variables (`OTEL_EXPORTER_OTLP_HEADERS`, `_TIMEOUT`,
/// `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`).
#[derive(Args, Debug, Clone)]
pub struct TraceArgs {
    /// Export traces (a trace per event: its emit and every attempt of its
    /// deliveries) to this OpenTelemetry collector's OTLP/HTTP base URL,
    /// e.g. http://127.0.0.1:4318 (/v1/traces is added). Off when unset.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    /// Send each attempt's W3C `traceparent` header to the receiver, so a
    /// receiver that traces joins the event's trace.
    #[arg(long, env = "HOOKFLEET_SEND_TRACEPARENT")]
    pub send_traceparent: bool,
}

impl TraceArgs {
    /// Sets tracing up for this process, named `service` unless
    /// `OTEL_SERVICE_NAME` says otherwise. An endpoint that is not an
    /// http(s) URL is an error (the process should not run without the
    /// traces it was asked for).
    pub fn init(&self, service: &'static str) -> Result<(), ConfigError> {
        use hookfleet_core::runtime::trace;
        let on = trace::init(&trace::TraceSettings {
            endpoint: self.otlp_endpoint.clone(),
            service,
            send_traceparent: self.send_traceparent,
        })
        .map_err(|e| ConfigError(format!("--otlp-endpoint: {e}")))?;
        if on {
            tracing::info!(service, "exporting traces over OTLP");
        }
        Ok(())
    }
}

/// `--metrics-listen`: where a long-running process serves `/metrics`,
/// `/livez` and `/readyz` (off when unset).
#[derive(Args, Debug, Clone)]
pub struct MetricsArgs {
    /// Serve /metrics (Prometheus), /livez and /readyz on this address, e.g.
    /// 127.0.0.1:9464 (off when unset; the sweeper serves them in its loop
    /// mode only and ignores this with --once).
    #[arg(long, env = "HOOKFLEET_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
}

impl MetricsArgs {
    /// Exports `role`'s metrics and starts the listener if asked, with
    /// `/livez` failing once the
    /// process's loop has not ticked for `stall_after`. An address that
    /// cannot be bound is an error (the process should not run blind).
    pub async fn serve(
        &self,
        role: hookfleet_core::runtime::observe::Role,
        store: &hookfleet_core::store::Store,
        queue: &hookfleet_core::queue::RedisQueue,
        stall_after: std::time::Duration,
        shutdown: &hookfleet_core::runtime::Shutdown,
    ) -> Result<(), ConfigError> {
        use hookfleet_core::runtime::observe;
        observe::metrics().export(role);
        observe::progress().set_stall_after(stall_after);
        observe::progress().tick();
        let Some(addr) = self.metrics_listen else {
            return Ok(());
        };
        let probe = observe::Probe::new(store.clone(), queue.clone());
        // A worker that cannot open stored credentials sends nothing for
        // their webhooks: not ready. (The ingest opens them only for a
        // workflow_transition, and the sweeper never does.)
        let probe = match role {
            observe::Role::Worker => probe.requiring_keys(),
            observe::Role::Producer | observe::Role::Sweeper => probe,
        };
        observe::serve(addr, probe, shutdown.clone())
            .await
            .map(|_| ())
            .map_err(|e| ConfigError(format!("--metrics-listen {addr}: {e}")))
    }
}

/// Refuses to start a worker while stored
/// credentials are sealed with a key it lacks: it would claim their rows
/// and send nothing. A database that does not answer now is not refused
/// here; it is said.
pub fn require_sealing_keys(store: &Store) -> Result<(), ConfigError> {
    match store.run_sync(hookfleet_core::store::webhooks::missing_keys) {
        Ok(None) => Ok(()),
        Ok(Some(reason)) => Err(ConfigError(reason)),
        Err(e) => {
            tracing::warn!(error = %e, "cannot check the sealing keys now");
            Ok(())
        }
    }
}

/// Refuses to run on a schema older than the binary: "run hookfleet
/// migrate". A database that does not answer now is not refused here (a
/// worker waits for it, as it waits out any outage); it is said.
pub fn require_current_schema(store: &Store) -> Result<(), ConfigError> {
    match store.check_schema() {
        Ok(()) => Ok(()),
        Err(e @ StoreError::OldSchema(_)) => Err(ConfigError(e.to_string())),
        Err(e) => {
            tracing::warn!(error = %e, "cannot check the schema version now");
            Ok(())
        }
    }
}
