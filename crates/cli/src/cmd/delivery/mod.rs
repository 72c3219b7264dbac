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
    List(list::List),
    /// Show one delivery: the frozen request, its state and every attempt.
    Show(show::Show),
    /// Replay: make a Failed or Exhausted delivery due now (an Exhausted one
    /// gets one more attempt). With --webhook/--status/--since, every
    /// matching delivery.
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
