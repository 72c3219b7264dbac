//! A webhook's life: `webhook enable|disable|pause|resume|rotate-finish|
//! delete NAME`, each a line saying what changed.

use std::time::Duration;

use clap::Args;

use hookfleet_admin::webhooks::{self, DEFAULT_PAUSE_REASON};
use hookfleet_core::queue::RedisQueue;
use hookfleet_core::store::Store;

/// The commands that take a webhook's name and nothing else.
#[derive(Args)]
pub struct Named {
    /// The webhook's name.
    pub name: String,
}

#[derive(Args)]
pub struct Pause {
    /// The webhook's name.
    name: String,
    /// Why (shown by list and show).
    #[arg(long, default_value = DEFAULT_PAUSE_REASON)]
    reason: String,
}

pub async fn rotate_finish(store: &Store, name: &str) -> anyhow::Result<()> {
    let w = webhooks::rotate_finish(store, name).await?;
    println!(
        "finished the secret rotation of webhook {}: only the new secret signs",
        w.name
    );
    Ok(())
}

pub async fn set_enabled(store: &Store, name: &str, enabled: bool) -> anyhow::Result<()> {
    let w = webhooks::set_enabled(store, name, enabled).await?;
    let done = if enabled { "enabled" } else { "disabled" };
    println!("{done} webhook {}", w.name);
    Ok(())
}

impl Pause {
    pub async fn run(self, store: &Store) -> anyhow::Result<()> {
        let p = webhooks::pause(store, &self.name, &self.reason).await?;
        if p.already {
            println!(
                "webhook {} was already paused ({})",
                p.webhook.name,
                p.webhook.paused_reason.as_deref().unwrap_or("-")
            );
        } else {
            println!(
                "paused webhook {}: its events are recorded and wait; `hookfleet webhook resume {}` sends them",
                p.webhook.name, p.webhook.name
            );
        }
        Ok(())
    }
}

/// `webhook resume NAME` (see [`webhooks::resume`]).
pub async fn resume(
    store: &Store,
    queue: &RedisQueue,
    key_ttl: Duration,
    name: &str,
) -> anyhow::Result<()> {
    let r = webhooks::resume(store, queue, key_ttl, name).await?;
    if !r.was_paused && r.released == 0 {
        println!("webhook {name} is not paused");
    } else {
        println!(
            "{} webhook {}: {} held rows released; {} due deliveries, {} enqueued now ({} already on their way or left to the sweeper)",
            if r.was_paused { "resumed" } else { "was not paused; released rows a resume left held for" },
            r.webhook,
            r.released,
            r.due,
            r.enqueued,
            r.due - r.enqueued
        );
    }
    if let Some(note) = &r.note {
        eprintln!("note: {note}");
    }
    Ok(())
}

pub async fn delete(store: &Store, name: &str) -> anyhow::Result<()> {
    webhooks::delete(store, name).await?;
    println!("deleted webhook {name}");
    Ok(())
}
