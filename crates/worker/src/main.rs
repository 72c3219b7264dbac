//! `hookfleet-worker`: delivers webhooks from one or more queues.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

use hookfleet_core::domain::parse_duration;
use hookfleet_core::runtime::Shutdown;
use hookfleet_settings::{fatal, init_tracing, MetricsArgs, Settings, TraceArgs};
use hookfleet_worker::{Stop, WorkerConfig, DEFAULT_FETCH_BATCH, DEFAULT_MAX_RECOVERIES};

/// The most deliveries one process runs at once; more is more processes.
const MAX_CONCURRENCY: usize = 10_000;

/// Deliveries at once when nobody says: at 256 one worker delivers 8,000-
/// 10,000/s to a fast receiver here (5,200-6,100 at 64) and uses about 33
/// MiB; with the default shares a webhook that starts hanging holds at most
/// a quarter of them, and one already slow a sixteenth (16).
const DEFAULT_CONCURRENCY: u64 = 256;

#[derive(Parser)]
#[command(
    name = "hookfleet-worker",
    version,
    about = "Deliver webhooks from Redis queues"
)]
struct Cli {
    #[command(flatten)]
    settings: Settings,
    /// Queues to take jobs from, comma-separated.
    #[arg(
        long,
        env = "HOOKFLEET_QUEUES",
        default_value = "default",
        value_delimiter = ','
    )]
    queues: Vec<String>,
    /// Most requests in flight to one webhook, unless the webhook sets its own
    /// --max-concurrency. Default: a quarter of --concurrency while other
    /// webhooks' jobs are in hand (so a webhook that starts hanging holds at
    /// most a quarter of the slots), and every slot for a webhook alone. Set,
    /// it is a fixed limit.
    #[arg(long, env = "HOOKFLEET_ENDPOINT_CONCURRENCY",
          value_parser = clap::value_parser!(u64).range(1..=MAX_CONCURRENCY as u64))]
    endpoint_concurrency: Option<u64>,
    /// Most requests in flight to a slow webhook (one with a request in
    /// flight for over a second, or whose last request took that long);
    /// default: a sixteenth of --concurrency.
    #[arg(long, env = "HOOKFLEET_SLOW_ENDPOINT_CONCURRENCY",
          value_parser = clap::value_parser!(u64).range(1..=MAX_CONCURRENCY as u64))]
    slow_endpoint_concurrency: Option<u64>,
    /// Most deliveries being claimed and sent at once. A slot is freed when
    /// the answer is in; as many answered jobs more may wait for their
    /// outcomes to be written, so a worker holds at most twice this.
    #[arg(long, env = "HOOKFLEET_CONCURRENCY", default_value_t = DEFAULT_CONCURRENCY,
          value_parser = clap::value_parser!(u64).range(1..=MAX_CONCURRENCY as u64))]
    concurrency: u64,
    /// How long SIGTERM waits for deliveries in flight before exiting.
    #[arg(long, env = "HOOKFLEET_DRAIN_TIMEOUT", default_value = "65s", value_parser = parse_duration)]
    drain_timeout: Duration,
    /// A worker whose heartbeat is this old is dead; its jobs are recovered.
    #[arg(long, env = "HOOKFLEET_HEARTBEAT_TTL", default_value = "30s", value_parser = parse_heartbeat)]
    heartbeat_ttl: Duration,
    /// Dead workers a job may take down before it is dead-lettered.
    #[arg(long, env = "HOOKFLEET_MAX_RECOVERIES", default_value_t = DEFAULT_MAX_RECOVERIES,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    max_recoveries: u32,
    /// Added to a webhook's timeout to make a claim's lease: the time allowed
    /// to record an outcome before the row counts as abandoned.
    #[arg(long, env = "HOOKFLEET_LEASE_MARGIN", default_value = "30s", value_parser = parse_duration)]
    lease_margin: Duration,
    // 5 days, Svix's figure: long enough to ride out a receiver's long
    // weekend outage, short enough that a dead receiver does not cost
    // retries for ever. Pausing loses nothing: the rows wait for resume.
    /// Pause a webhook whose every attempt has failed for this long (and at
    /// least 10 attempts); its deliveries wait for `hookfleet webhook
    /// resume`. 0: never.
    #[arg(long, env = "HOOKFLEET_AUTO_PAUSE_AFTER", default_value = "5d", value_parser = parse_duration)]
    auto_pause_after: Duration,
    #[command(flatten)]
    metrics: MetricsArgs,
    #[command(flatten)]
    trace: TraceArgs,
}

/// A heartbeat TTL of at least a second (it is renewed every third of it).
fn parse_heartbeat(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(1) {
        return Err("the heartbeat TTL must be at least 1s".into());
    }
    Ok(d)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli: Cli = hookfleet_settings::parse_args();
    init_tracing(&cli.settings.log_format);
    if let Err(e) = cli.settings.install(true) {
        fatal(&e);
        return ExitCode::from(2);
    }
    if let Err(e) = cli.trace.init("hookfleet-worker") {
        fatal(&e);
        return ExitCode::from(2);
    }
    let queues: Vec<String> = cli
        .queues
        .iter()
        .map(|q| q.trim().to_string())
        .filter(|q| !q.is_empty())
        .collect();
    if queues.is_empty() {
        fatal("--queues names no queue");
        return ExitCode::from(2);
    }
    let concurrency = cli.concurrency as usize;
    // Enough connections that claims and outcome writes never wait on each
    // other; Postgres copes with a handful per worker.
    let store = match cli.settings.store(4) {
        Ok(s) => s,
        Err(e) => {
            fatal(&e);
            return ExitCode::from(1);
        }
    };
    if let Err(e) = hookfleet_settings::require_current_schema(&store) {
        fatal(&e);
        return ExitCode::from(1);
    }
    if let Err(e) = hookfleet_settings::require_sealing_keys(&store) {
        fatal(&e);
        return ExitCode::from(2);
    }
    let queue = match cli.settings.queue() {
        Ok(q) => q,
        Err(e) => {
            fatal(&e);
            return ExitCode::from(1);
        }
    };
    let shutdown = Shutdown::new();
    shutdown.listen_for_signals();
    // The heartbeat loop ticks every third of the TTL, Redis or not.
    let stall_after = (cli.heartbeat_ttl * 2).max(Duration::from_secs(30));
    if let Err(e) = cli
        .metrics
        .serve(
            hookfleet_core::runtime::observe::Role::Worker,
            &store,
            &queue,
            stall_after,
            &shutdown,
        )
        .await
    {
        fatal(&e);
        return ExitCode::from(2);
    }
    let config = WorkerConfig {
        worker_id: WorkerConfig::new_worker_id(),
        queues,
        concurrency,
        endpoint_concurrency: cli
            .endpoint_concurrency
            .map(|n| n as usize)
            .unwrap_or_else(|| hookfleet_worker::default_endpoint_concurrency(concurrency)),
        endpoint_ceiling: cli
            .endpoint_concurrency
            .map(|n| n as usize)
            .unwrap_or(concurrency),
        slow_endpoint_concurrency: cli
            .slow_endpoint_concurrency
            .map(|n| n as usize)
            .unwrap_or_else(|| hookfleet_worker::default_slow_endpoint_concurrency(concurrency)),
        fetch_batch: DEFAULT_FETCH_BATCH.min(concurrency),
        schedule: cli.settings.retry_schedule.clone(),
        policy: Arc::new(cli.settings.allowed_networks.clone()),
        drain_timeout: cli.drain_timeout,
        heartbeat_ttl: cli.heartbeat_ttl,
        max_recoveries: cli.max_recoveries,
        lease_margin: cli.lease_margin,
        auto_pause_after: Some(cli.auto_pause_after).filter(|d| !d.is_zero()),
        shutdown,
    };
    let stop = hookfleet_worker::run(store, queue, config).await.stop;
    // The last attempts' spans go out before the process does (a blocking
    // wait, off the runtime's threads).
    let _ = tokio::task::spawn_blocking(hookfleet_core::runtime::trace::shutdown).await;
    match stop {
        Stop::Drained | Stop::TimedOut => ExitCode::SUCCESS,
        Stop::Forced => ExitCode::from(1),
    }
}
