//! `hookfleet delivery …`: what happened to events (`list`, `show`), and
//! the operator's replay (`retry`).

mod list;
mod retry;
mod show;

use clap::Subcommand;

use hookfleet_core::store::Store;
use hookfleet_settings::Settings;

#[derive(Subcommand)]
pub enum DeliveryCommand {
    /// List deliveries, newest first.
    #[command(after_help = "Examples:
  hookfleet delivery list --status Failed --webhook orders
  hookfleet delivery list --document SO-0001
  hookfleet delivery list --event-id 01JF3V...   # the webhook-id a receiver reported
  hookfleet delivery list --since 2h --json | jq '.[].id'")]
    List(list::List),
    /// Show one delivery: the frozen request, its state and every attempt.
    Show(show::Show),
    /// Replay: make a Failed or Exhausted delivery due now (an Exhausted one
    /// gets one more attempt). With --webhook/--status/--since, every
    /// matching delivery.
    #[command(after_help = "Examples:
  hookfleet delivery retry 4211
  hookfleet delivery retry --webhook orders --status Exhausted --since 24h --dry-run
  hookfleet delivery retry --webhook orders --status Exhausted --since 24h")]
    Retry(retry::Retry),
}

pub async fn run(command: DeliveryCommand, s: &Settings, store: &Store) -> anyhow::Result<()> {
    let queue = s.queue()?;
    match command {
        DeliveryCommand::List(list) => list.run(store).await,
        DeliveryCommand::Show(show) => show.run(store).await,
        DeliveryCommand::Retry(retry) => retry.run(store, &queue, s.queue_grace).await,
    }
}
