//! `hookfleet-sweeper`: `--once` for a CronJob, or a loop every `--interval`.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use hookfleet_core::domain::parse_duration;
use hookfleet_core::runtime::Backoff;
use hookfleet_core::runtime::Shutdown;
use hookfleet_settings::{fatal, init_tracing, MetricsArgs, Settings};
use hookfleet_sweeper::{Sweeper, DEFAULT_BATCH_SIZE};

/// The largest batch a tick may take: beyond this a tick stops being quick.
const MAX_BATCH_SIZE: u64 = 100_000;

#[derive(Parser)]
#[command(
    name = "hookfleet-sweeper",
    version,
    about = "Enqueue due retries and overdue first attempts"
)]
struct Cli {
    #[command(flatten)]
    settings: Settings,
    /// Run one tick and exit (for a Kubernetes CronJob or a systemd timer);
    /// --interval and --metrics-listen are then ignored, so one environment
    /// file can serve the timer and the loop.
    #[arg(long)]
    once: bool,
    /// Time between ticks when looping.
    #[arg(long, env = "HOOKFLEET_SWEEP_INTERVAL", default_value = "5m", value_parser = parse_duration)]
    interval: Duration,
    // 60 s: a batch of 1,000 takes about 10 ms, so a minute heals millions
    // of lost jobs, and it is well under the 5-minute interval and the
    // CronJob's 240 s deadline, so ticks never pile up.
    /// How long one tick may keep taking batches while due rows are left
    /// (keep it well under --interval and the CronJob's deadline).
    #[arg(long, env = "HOOKFLEET_SWEEP_TICK_BUDGET", default_value = "60s", value_parser = parse_duration)]
    tick_budget: Duration,
    /// Rows one batch enqueues (a tick takes batches until none is due or
    /// its budget is spent).
    #[arg(long, env = "HOOKFLEET_SWEEP_BATCH_SIZE", default_value_t = DEFAULT_BATCH_SIZE as u64,
          value_parser = clap::value_parser!(u64).range(1..=MAX_BATCH_SIZE))]
    batch_size: u64,
    // 30 days: Frappe clears its Webhook Request Log after 30 days.
    /// Delete terminal rows (Delivered, Exhausted) and their attempts once
    /// they are this old, each tick after sweeping, in paced batches for up
    /// to --prune-budget. Pending rows are never deleted. 0: keep
    /// everything; else at least 1h.
    #[arg(long, env = "HOOKFLEET_RETENTION", default_value = "30d", value_parser = parse_retention)]
    retention: Duration,
    // 120 s: paced at a fifth of the time in statements, a prune deletes
    // 13,000-16,000 rows/s beside a delivering worker here, so a tick keeps
    // up with over 5,000 deliveries/s of inflow at the 5-minute interval;
    // with the 60 s tick budget it stays under the CronJob's 240 s deadline.
    /// How long one tick may spend pruning (at least one batch).
    #[arg(long, env = "HOOKFLEET_PRUNE_BUDGET", default_value = "120s", value_parser = parse_duration)]
    prune_budget: Duration,
    #[command(flatten)]
    metrics: MetricsArgs,
}

/// 0 (keep everything) or at least an hour
/// ([`hookfleet_core::store::retention::MIN_RETENTION`]).
fn parse_retention(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text).map_err(|e| e.to_string())?;
    let min = hookfleet_core::store::retention::MIN_RETENTION;
    if !d.is_zero() && d < min {
        return Err(format!(
            "must be 0 (keep everything) or at least {}",
            hookfleet_core::domain::format_duration(min)
        ));
    }
    Ok(d)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli: Cli = hookfleet_settings::parse_args();
    init_tracing(&cli.settings.log_format);
    let (store, queue) = match (cli.settings.store(2), cli.settings.queue()) {
        (Ok(s), Ok(q)) => (s, q),
        (Err(e), _) => {
            fatal(&e);
            return ExitCode::from(1);
        }
        (_, Err(e)) => {
            fatal(&e);
            return ExitCode::from(1);
        }
    };
    if let Err(e) = hookfleet_settings::require_current_schema(&store) {
        fatal(&e);
        return ExitCode::from(1);
    }
    let sweeper = Sweeper::new(
        store,
        queue,
        cli.batch_size as usize,
        cli.settings.queue_grace,
    )
    .with_retention(
        Some(cli.retention).filter(|d| !d.is_zero()),
        cli.prune_budget,
    );
    if cli.once {
        return match sweeper.tick_and_log(cli.tick_budget).await {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                fatal(format!("tick failed: {e}"));
                ExitCode::from(1)
            }
        };
    }
    let shutdown = Shutdown::new();
    shutdown.listen_for_signals();
    // A loop ticks every interval (or sooner, retrying): three missed
    // intervals and a slow tick's budget mean it is stuck.
    let stall_after = cli.interval * 3 + Duration::from_secs(60);
    if let Err(e) = cli
        .metrics
        .serve(
            hookfleet_core::runtime::observe::Role::Sweeper,
            sweeper.store(),
            sweeper.queue(),
            stall_after,
            &shutdown,
        )
        .await
    {
        fatal(&e);
        return ExitCode::from(2);
    }
    tracing::info!(interval = ?cli.interval, batch_size = cli.batch_size, "sweeper started");
    while !shutdown.is_requested() {
        // A failed tick is tried again sooner, but never later than the
        // next one would have run.
        let ticked = Backoff::with_ceiling(cli.interval)
            .retry_until_stopped(
                shutdown.requested(1),
                |e, wait| tracing::warn!(error = %e, retry_in = ?wait, "tick failed; trying again"),
                || async {
                    hookfleet_core::runtime::observe::progress().tick();
                    sweeper.tick_and_log(cli.tick_budget).await
                },
            )
            .await;
        if ticked.is_err() {
            break;
        }
        if let Err(e) = sweeper.observe().await {
            tracing::warn!(error = %e, "cannot read the backlog and queue depths for the metrics");
        }
        tokio::select! {
            _ = tokio::time::sleep(cli.interval) => {}
            _ = shutdown.requested(1) => break,
        }
    }
    tracing::info!("sweeper stopped");
    ExitCode::SUCCESS
}
