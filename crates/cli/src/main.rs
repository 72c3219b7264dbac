//! `hookfleet`: the operator's command line over `hookfleet-admin`.
//!
//! Exit codes: 0 success, 1 the operation failed or was refused (the message
//! says why), 2 usage error.
//!
//! # Layout
//! - `cmd`: the commands, one file each (a folder for `webhook` and
//!   `delivery`): their flags, and a short `run` that calls the admin
//!   action and prints what it did.
//! - `table`: plain-text tables for people, and text made safe for a
//!   terminal; `ask`: a person at a terminal (the question before what
//!   cannot be undone, a long operation's progress).
//! - this file: the command line, the settings every command shares, and
//!   the exit code.

mod ask;
mod cmd;
mod table;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use hookfleet_settings::Settings;
use hookfleet_template::TemplateSettings;

use cmd::dead::DeadCommand;
use cmd::delivery::DeliveryCommand;
use cmd::offline::Offline;
use cmd::secrets::SecretsCommand;
use cmd::webhook::WebhookCommand;

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
    Migrate(cmd::migrate::Migrate),
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
    #[command(after_help = "Examples:
  hookfleet stats
  hookfleet stats --json | jq .oldest_due_retry")]
    Stats(cmd::stats::Stats),
    /// Webhook secrets and header values at rest.
    #[command(subcommand)]
    Secrets(SecretsCommand),
    /// Serve the management API (/api/v1, described at
    /// /api/v1/openapi.json) and the console's pages for people.
    Console(cmd::console::Console),
    /// Delete terminal rows (Delivered, Exhausted) recorded and last touched
    /// before the cut, with their attempts, in batches. Pending rows are
    /// never deleted. The sweeper does the same each tick (--retention).
    #[command(after_help = "Examples:
  hookfleet prune --older-than 30d --json
  hookfleet prune --older-than 90d --batch-size 1000   # gentler on a busy database")]
    Prune(cmd::prune::Prune),
    /// Print the shell completion script for SHELL (needs no database).
    ///
    /// Example: hookfleet completions bash > /etc/bash_completion.d/hookfleet
    Completions(cmd::offline::Completions),
    /// Print the man page, roff (needs no database).
    ///
    /// Example: hookfleet man > /usr/share/man/man1/hookfleet.1
    Man(cmd::offline::Man),
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    // Reached only when the offline parse did not take them (global flags
    // before the command): they still need no database.
    let offline = match cli.command {
        Command::Secrets(SecretsCommand::Generate(g)) => Offline::Generate(g),
        Command::Completions(c) => Offline::Completions(c),
        Command::Man(m) => Offline::Man(m),
        command => return run_online(cli.settings, cli.templates, command).await,
    };
    offline.run::<Cli>()?;
    Ok(())
}

/// Every command that reads or writes the fleet's state.
async fn run_online(
    s: Settings,
    templates: TemplateSettings,
    command: Command,
) -> anyhow::Result<()> {
    if matches!(command, Command::Console(_)) {
        hookfleet_settings::init_tracing(&s.log_format);
    }
    s.install(false)?;
    templates.install();
    // A command fails at once on a database that refuses it or does not
    // exist; the console, a long-running process, waits one out as the
    // worker does.
    let store = if matches!(command, Command::Console(_)) {
        s.store(1)?
    } else {
        s.store_now(1)?
    };
    if !matches!(command, Command::Migrate(_)) {
        hookfleet_settings::require_current_schema(&store)?;
    }
    match command {
        Command::Migrate(migrate) => migrate.run(&store),
        Command::Webhook(command) => cmd::webhook::run(command, &s, &store).await,
        Command::Delivery(command) => cmd::delivery::run(command, &s, &store).await,
        Command::Dead(command) => cmd::dead::run(&s.queue()?, command).await,
        Command::Secrets(command) => cmd::secrets::run(command, &store).await,
        Command::Prune(prune) => prune.run(&store).await,
        Command::Console(console) => console.run(&s).await,
        Command::Stats(stats) => stats.run(&store, &s.queue()?).await,
        Command::Completions(_) | Command::Man(_) => unreachable!("answered without a database"),
    }
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
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(offline) = Offline::parse(&args) {
        end_quietly_on_a_closed_pipe();
        return match offline.run::<Cli>() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        };
    }
    let cli = Cli::parse_from(args);
    if !matches!(cli.command, Command::Console(_)) {
        end_quietly_on_a_closed_pipe();
    }
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

/// A command whose output is piped into `head` ends there, as `cat` does,
/// instead of panicking on "Broken pipe" (Rust ignores SIGPIPE, so every
/// print would otherwise fail and panic). Not for the console: a server
/// must outlive a client that hangs up.
fn end_quietly_on_a_closed_pipe() {
    // SAFETY: restores the default disposition of one signal, before any
    // thread of ours writes anywhere.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
