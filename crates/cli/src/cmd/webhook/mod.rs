//! `hookfleet webhook …`: define, change, inspect and remove subscriptions.
//! Every definition is validated before anything is written; the secret is
//! write-only (list and show say whether signing is on, never the secret).
//!
//! - `add`, `update`: a definition from flags (`definition`, which both
//!   share).
//! - `show`: `list` and `show`.
//! - `lifecycle`: enable, disable, pause, resume, rotate-finish, delete.
//! - `preview`: a document through the webhook, nothing sent.
//! - `import`: Frappe Webhook documents in.

mod add;
mod definition;
mod import;
mod lifecycle;
mod preview;
mod show;
mod update;

use clap::Subcommand;

use hookfleet_core::store::Store;
use hookfleet_settings::Settings;

use lifecycle::Named;

#[derive(Subcommand)]
pub enum WebhookCommand {
    /// Add a webhook.
    #[command(after_help = "Examples:
  (umask 077; hookfleet secrets generate > orders.secret)
  hookfleet webhook add orders --entity-type 'Sales Order' --event on_submit \\
    --url https://erp-sync.example.com/hooks --secret-file orders.secret
  hookfleet webhook add big-orders --entity-type 'Sales Order' --event on_submit \\
    --url https://example.com/big --condition 'doc.grand_total > 10000' \\
    --body-template '{\"order\": \"{{ doc.name }}\", \"total\": {{ doc.grand_total }}}'")]
    Add(add::Add),
    /// List webhooks.
    List(show::List),
    /// Show one webhook (header values hidden unless --show-header-values).
    Show(show::Show),
    /// Change a webhook: only the fields given change. A new secret starts a
    /// two-phase rotation: the old one keeps signing (a second Standard
    /// Webhooks signature, and the Frappe header) until `rotate-finish` or
    /// 24 hours.
    #[command(after_help = "Examples:
  hookfleet webhook update orders --timeout 10s --max-retries 5
  hookfleet webhook update orders --secret-file orders-2.secret   # starts a rotation
  hookfleet webhook rotate-finish orders")]
    Update(update::Update),
    /// Finish a secret rotation: the old secret stops signing and the
    /// Frappe header moves to the new one.
    RotateFinish(Named),
    /// Enable a webhook.
    Enable(Named),
    /// Disable a webhook: no new deliveries; pending ones become Exhausted
    /// when their attempt comes, without a request.
    Disable(Named),
    /// Pause a webhook: its events are still recorded, nothing is sent and
    /// nothing becomes Exhausted until `resume`.
    Pause(lifecycle::Pause),
    /// Resume a paused webhook: what is due goes out at once, oldest first.
    Resume(Named),
    /// Delete a webhook. Its delivery rows stay; pending ones become Exhausted
    /// when their attempt comes, without a request.
    Delete(Named),
    /// What the webhook would do with a document: whether it meets the
    /// condition, the URL, method, headers (values hidden) and body.
    /// Nothing is recorded, nothing is sent.
    #[command(after_help = "Examples:
  hookfleet webhook preview orders --doc so-0001.json
  curl -s \"$ERP/api/resource/Sales Order/SO-0001\" | jq .data | hookfleet webhook preview orders --doc -")]
    Preview(preview::PreviewArgs),
    /// Import Frappe Webhook documents (fixtures or REST API JSON): each is
    /// created or updated under its Frappe name, or refused with the reason.
    #[command(after_help = "Examples:
  hookfleet webhook import webhook.json --dry-run     # what would change, nothing written
  hookfleet webhook import webhook.json --atomic      # all or nothing")]
    Import(import::ImportArgs),
}

pub async fn run(command: WebhookCommand, s: &Settings, store: &Store) -> anyhow::Result<()> {
    let policy = &s.allowed_networks;
    match command {
        WebhookCommand::Add(add) => add.run(store, policy).await,
        WebhookCommand::List(list) => list.run(store).await,
        WebhookCommand::Show(show) => show.run(store).await,
        WebhookCommand::Update(update) => update.run(store, policy).await,
        WebhookCommand::RotateFinish(w) => lifecycle::rotate_finish(store, &w.name).await,
        WebhookCommand::Enable(w) => lifecycle::set_enabled(store, &w.name, true).await,
        WebhookCommand::Disable(w) => lifecycle::set_enabled(store, &w.name, false).await,
        WebhookCommand::Pause(pause) => pause.run(store).await,
        WebhookCommand::Resume(w) => {
            lifecycle::resume(store, &s.queue()?, s.queue_grace, &w.name).await
        }
        WebhookCommand::Delete(w) => lifecycle::delete(store, &w.name).await,
        WebhookCommand::Preview(preview) => preview.run(store, policy).await,
        WebhookCommand::Import(args) => import::run(store, policy, args).await,
    }
}
