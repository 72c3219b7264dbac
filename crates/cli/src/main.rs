//! `hookfleet`: the operator's command line over hookfleet-core.
//!
//! Exit codes: 0 success, 1 the operation failed or was refused (the message
//! says why), 2 usage error.

mod dead;
mod delivery;
mod import;
mod table;
mod webhook;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use hookfleet_core::store::Store;
use hookfleet_settings::Settings;
use hookfleet_template::TemplateSettings;

use crate::dead::DeadCommand;
use crate::delivery::DeliveryCommand;
use crate::webhook::WebhookCommand;

/// A usage error found after parsing (exit code 2, like clap's own).
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

#[derive(Parser)]
#[command(
    name = "hookfleet",
    version,
    about = "Operate a hookfleet: schema, webhooks, deliveries, dead letters, secrets, stats"
)]
struct Cli {
    #[command(flatten)]
    settings: Settings,
    #[command(flatten)]
    templates: TemplateSettings,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
enum Command {
    /// Create or upgrade the schema (idempotent; safe to run from several
    /// processes at once; all pending migrations in one transaction).
    Migrate {
        /// A direct Postgres URL for the migration, when DATABASE_URL goes
        /// through a pooler (PgBouncer) that should not carry DDL.
        #[arg(long, env = "HOOKFLEET_MIGRATE_DATABASE_URL", hide_env_values = true)]
        migrate_database_url: Option<String>,
    },
    /// Define and inspect webhooks.
    #[command(subcommand)]
    Webhook(WebhookCommand),
    /// Inspect and replay deliveries.
    #[command(subcommand)]
    Delivery(DeliveryCommand),
    /// Inspect, requeue or purge dead-lettered jobs.
    #[command(subcommand)]
    Dead(DeadCommand),
    /// Rows by status, queue depths, dead letters, the oldest due retry.
    Stats {
        /// Print one JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Webhook secrets and header values at rest.
    #[command(subcommand)]
    Secrets(SecretsCommand),
    /// Serve the management API (/api/v1, described at
    /// /api/v1/openapi.json) and the console's pages for people.
    Console {
        /// Address to listen on. Any address but loopback needs a token.
        #[arg(
            long,
            env = "HOOKFLEET_CONSOLE_LISTEN",
            default_value = "127.0.0.1:8490"
        )]
        listen: std::net::SocketAddr,
        /// Full-access token (API: Authorization: Bearer ...; pages: asked
        /// once, then a session cookie). At least 16 characters.
        #[arg(long, env = "HOOKFLEET_CONSOLE_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Read-only token, for support staff: every page and read, no
        /// action. At least 16 characters.
        #[arg(long, env = "HOOKFLEET_CONSOLE_READ_TOKEN", hide_env_values = true)]
        read_token: Option<String>,
    },
    /// Delete terminal rows (Delivered, Exhausted) recorded and last touched
    /// before the cut, with their attempts, in batches. Pending rows are
    /// never deleted. The sweeper does the same each tick (--retention).
    Prune {
        /// How old a row must be, e.g. 30d (Frappe's default), 12h; at least
        /// 1h.
        #[arg(long, value_parser = parse_retention)]
        older_than: std::time::Duration,
        /// Rows one statement looks at.
        #[arg(long, default_value_t = hookfleet_core::store::retention::PRUNE_BATCH,
              value_parser = clap::value_parser!(i64).range(1..=MAX_PRUNE_BATCH))]
        batch_size: i64,
        /// Delete as fast as the database allows, instead of spending a
        /// fifth of the time in statements (for a backlog of old rows at
        /// a quiet hour; it slows delivery meanwhile).
        #[arg(long)]
        full_speed: bool,
        /// Print one JSON document instead of a line.
        #[arg(long)]
        json: bool,
    },
}

/// The largest prune batch: beyond this one statement holds its locks and
/// WAL for seconds.
const MAX_PRUNE_BATCH: i64 = 100_000;

/// A prune runs until no row older than the cut is left: the CLI has no
/// budget of its own (each batch commits on its own, so a prune stopped
/// half-way keeps what it deleted).
const PRUNE_BUDGET: std::time::Duration = std::time::Duration::MAX;

/// At least an hour ([`hookfleet_core::store::retention::MIN_RETENTION`]).
fn parse_retention(text: &str) -> Result<std::time::Duration, String> {
    let d = hookfleet_core::config::parse_duration(text).map_err(|e| e.to_string())?;
    let min = hookfleet_core::store::retention::MIN_RETENTION;
    if d < min {
        return Err(format!(
            "must be at least {} (a younger row may still have an attempt in flight)",
            hookfleet_core::config::format_duration(min)
        ));
    }
    Ok(d)
}

#[derive(Subcommand)]
enum SecretsCommand {
    /// Seal every stored secret and header value with the current key
    /// (HOOKFLEET_SECRET_KEY), opening them with it or an old one
    /// (HOOKFLEET_SECRET_KEY_OLD). Run after changing keys; then the old
    /// ones may go.
    Reencrypt {
        /// With no current key (HOOKFLEET_SECRET_KEY unset), store every
        /// value unencrypted. Without this flag that is refused: a missing
        /// key is far more often a deploy mistake than a wish to decrypt.
        #[arg(long)]
        decrypt: bool,
        /// Print one JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// How often the console's ticker ticks, and how long /livez tolerates it
/// not ticking: a runtime that cannot run a task for half a minute is
/// wedged.
const CONSOLE_TICK: std::time::Duration = std::time::Duration::from_secs(1);
const CONSOLE_STALL_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// Postgres connections the console keeps: a few people and scripts at once.
const CONSOLE_POOL_SIZE: u32 = 8;

async fn run(cli: Cli) -> anyhow::Result<()> {
    let s = cli.settings;
    if matches!(cli.command, Command::Console { .. }) {
        hookfleet_settings::init_tracing(&s.log_format);
    }
    s.install(false)?;
    cli.templates.install();
    let store = s.store(1)?;
    if !matches!(cli.command, Command::Migrate { .. }) {
        hookfleet_settings::require_current_schema(&store)?;
    }
    match cli.command {
        Command::Migrate {
            migrate_database_url,
        } => {
            let applied = match migrate_database_url.filter(|u| !u.trim().is_empty()) {
                Some(direct) => Store::connect(&direct, 1)?.migrate()?,
                None => store.migrate()?,
            };
            if applied.is_empty() {
                println!("schema is up to date");
            } else {
                for m in applied {
                    println!("applied {m}");
                }
            }
        }
        Command::Webhook(WebhookCommand::Resume { name }) => {
            let queue = s.queue()?;
            webhook::resume(&store, &queue, s.queue_grace, &name).await?
        }
        Command::Webhook(cmd) => webhook::run(&store, &s.allowed_networks, cmd).await?,
        Command::Delivery(cmd) => {
            let queue = s.queue()?;
            delivery::run(&store, &queue, s.queue_grace, cmd).await?
        }
        Command::Dead(cmd) => {
            let queue = s.queue()?;
            dead::run(&queue, cmd).await?
        }
        Command::Secrets(SecretsCommand::Reencrypt { decrypt, json }) => {
            let seals = hookfleet_core::at_rest::keyring().seals();
            if !seals && !decrypt {
                anyhow::bail!(
                    "no HOOKFLEET_SECRET_KEY: reencrypt would store every secret unencrypted; \
                     set the key, or pass --decrypt if that is what you want"
                );
            }
            if seals && decrypt {
                anyhow::bail!(
                    "--decrypt is for when HOOKFLEET_SECRET_KEY is unset; unset it first"
                );
            }
            let done = store.run_sync(hookfleet_core::store::webhooks::reencrypt)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&done)?);
            } else {
                println!(
                    "{} values of {} webhooks sealed with the current key; every other value already was",
                    done.values, done.webhooks
                );
            }
        }
        Command::Prune {
            older_than,
            batch_size,
            full_speed,
            json,
        } => {
            use hookfleet_core::store::retention;
            let duty = if full_speed {
                1.0
            } else {
                retention::PRUNE_DUTY
            };
            let r = store
                .run_sync(|c| retention::prune(c, older_than, 0, batch_size, PRUNE_BUDGET, duty))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "pruned {} delivery rows and {} attempts older than {} in {:.1}s ({} batches)",
                    r.rows,
                    r.attempts,
                    hookfleet_core::config::format_duration(older_than),
                    r.seconds,
                    r.batches
                );
            }
        }
        Command::Console {
            listen,
            token,
            read_token,
        } => {
            hookfleet_console::check_exposure(listen, token.as_deref(), read_token.as_deref())?;
            let console = hookfleet_console::Console::new(
                s.store(CONSOLE_POOL_SIZE)?,
                s.queue()?,
                s.queue_grace,
                s.allowed_networks.clone(),
                token,
                read_token,
            );
            let shutdown = hookfleet_core::shutdown::Shutdown::new();
            shutdown.listen_for_signals();
            // The console has no loop of its own: a ticker shows /livez the
            // runtime still schedules work.
            let progress = hookfleet_core::observe::progress();
            progress.set_stall_after(CONSOLE_STALL_AFTER);
            tokio::spawn(async move {
                loop {
                    progress.tick();
                    tokio::time::sleep(CONSOLE_TICK).await;
                }
            });
            hookfleet_console::serve(
                listen,
                console,
                async move { shutdown.requested(1).await },
                |addr| eprintln!("console on http://{addr}/ (API under /api/v1)"),
            )
            .await?;
        }
        Command::Stats { json } => {
            let queue = s.queue()?;
            delivery::stats(&store, &queue, json).await?
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    // Started as a template renderer (see hookfleet_template): serve.
    if let Some(code) = hookfleet_template::serve_if_renderer() {
        return code;
    }
    run_main()
}

#[tokio::main(flavor = "current_thread")]
async fn run_main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<Usage>() => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
