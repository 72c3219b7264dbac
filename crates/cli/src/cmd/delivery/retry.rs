//! `hookfleet delivery retry ID [--force]`, or in bulk `--webhook W
//! --status S --since T`: deliveries made due again and enqueued now.

use std::time::Duration;

use anyhow::bail;
use clap::Args;

use hookfleet_admin::replay;
use hookfleet_core::domain::parse_time_or_ago;
use hookfleet_core::domain::DeliveryStatus;
use hookfleet_core::queue::RedisQueue;
use hookfleet_core::store::Store;

#[derive(Args)]
pub struct Retry {
    /// The delivery to replay.
    #[arg(required_unless_present = "webhook", conflicts_with_all = ["webhook", "status", "since"])]
    id: Option<i64>,
    /// Replay a Delivered row too.
    #[arg(long)]
    force: bool,
    /// Bulk: this webhook's deliveries…
    #[arg(long, requires_all = ["status", "since"])]
    webhook: Option<String>,
    /// …in this status (Failed or Exhausted)…
    #[arg(long)]
    status: Option<DeliveryStatus>,
    /// …last changed since TIME (RFC 3339, or a duration ago such as 2h).
    #[arg(long)]
    since: Option<String>,
    /// Bulk: say how many deliveries would be replayed, and replay none.
    #[arg(long, requires = "webhook")]
    dry_run: bool,
    /// Bulk: do not ask first (at a terminal, it asks).
    #[arg(long, short = 'y', requires = "webhook")]
    yes: bool,
}

impl Retry {
    pub async fn run(
        self,
        store: &Store,
        queue: &RedisQueue,
        grace: Duration,
    ) -> anyhow::Result<()> {
        match (self.id, self.webhook, self.status, self.since) {
            (Some(id), ..) => one(store, queue, grace, id, self.force).await,
            (None, Some(webhook), Some(status), Some(since)) => {
                let mode = match (self.dry_run, self.yes) {
                    (true, _) => Bulk::DryRun,
                    (false, false) => Bulk::AskFirst,
                    (false, true) => Bulk::Replay,
                };
                bulk(store, queue, grace, &webhook, status, &since, mode).await
            }
            _ => bail!("give a delivery ID, or --webhook, --status and --since"),
        }
    }
}

async fn one(
    store: &Store,
    queue: &RedisQueue,
    grace: Duration,
    id: i64,
    force: bool,
) -> anyhow::Result<()> {
    let replay::ReplayOne { replayed, note } =
        replay::replay(store, queue, grace, id, force).await?;
    println!(
        "delivery {id}: {} → Failed, due now (attempt {} allowed); {note}",
        replayed.previous_status, replayed.next_attempt
    );
    Ok(())
}

/// What a bulk retry does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Bulk {
    /// Count, replay nothing (--dry-run).
    DryRun,
    /// Ask a person at a terminal first (the default).
    AskFirst,
    /// Replay without asking (--yes).
    Replay,
}

async fn bulk(
    store: &Store,
    queue: &RedisQueue,
    grace: Duration,
    webhook: &str,
    status: DeliveryStatus,
    since: &str,
    mode: Bulk,
) -> anyhow::Result<()> {
    let since = parse_time_or_ago(since).map_err(|e| anyhow::anyhow!("--since {e}"))?;
    let dry_run = mode == Bulk::DryRun;
    if mode == Bulk::AskFirst && crate::ask::person_present() {
        let would = replay::replay_bulk(store, queue, grace, webhook, status, since, true).await?;
        let question = format!(
            "Replay {} {status} deliveries of {webhook} since {since} (each gets another attempt now)?",
            would.count
        );
        if would.count > 0 && !crate::ask::confirmed(&question, false) {
            anyhow::bail!("cancelled: nothing replayed");
        }
    }
    let done = replay::replay_bulk(store, queue, grace, webhook, status, since, dry_run).await?;
    if dry_run {
        println!(
            "dry run: {} {status} deliveries of {webhook} since {since} would be replayed; none was",
            done.count
        );
        return Ok(());
    }
    match done.note {
        None => println!("no {status} deliveries of {webhook} since {since}; nothing replayed"),
        Some(note) => println!(
            "{} deliveries of {webhook} replayed ({status} → Failed, due now); {note}",
            done.count
        ),
    }
    Ok(())
}
