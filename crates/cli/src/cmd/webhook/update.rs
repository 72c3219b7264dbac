//! `hookfleet webhook update NAME …`: only the fields given change, in one
//! read-modify-write of the stored definition.

use clap::Args;

use hookfleet_admin::definitions;
use hookfleet_core::domain::WebhookSpec;
use hookfleet_core::request::NetworkPolicy;
use hookfleet_core::store::Store;

use super::definition::{warn_unknown_event, warn_unsealed, Definition};

#[derive(Args)]
pub struct Update {
    /// The webhook's name.
    name: String,
    #[command(flatten)]
    fields: Definition,
    /// Rename the webhook.
    #[arg(long)]
    rename: Option<String>,
    /// Remove the condition (every event is delivered).
    #[arg(long, conflicts_with = "condition")]
    no_condition: bool,
    /// Stop signing (removes the secret, and the previous one of a
    /// rotation).
    #[arg(long, conflicts_with_all = ["secret", "secret_file"])]
    no_secret: bool,
    /// Remove every allowed host (before adding the --allowed-host ones).
    #[arg(long)]
    clear_allowed_hosts: bool,
    /// Go back to the worker's default per-webhook concurrency.
    #[arg(long, conflicts_with = "max_concurrency")]
    default_concurrency: bool,
    /// Remove the rate limit.
    #[arg(long, conflicts_with = "rate_limit")]
    no_rate_limit: bool,
    /// Remove every static header (before adding the --header ones).
    #[arg(long)]
    clear_headers: bool,
    /// Remove the field selection (before adding the --field ones).
    #[arg(long)]
    clear_fields: bool,
    /// Remove the body template.
    #[arg(long, conflicts_with_all = ["body_template", "body_template_file"])]
    no_body_template: bool,
    /// Make the URL static again.
    #[arg(long, conflicts_with = "dynamic_url")]
    static_url: bool,
    /// Send the body as hookfleet writes it, not as Frappe does.
    #[arg(long, conflicts_with = "frappe_body")]
    no_frappe_body: bool,
}

impl Update {
    pub async fn run(self, store: &Store, policy: &NetworkPolicy) -> anyhow::Result<()> {
        let name = self.name.clone();
        let edit = move |spec: &mut WebhookSpec| self.edit(spec);
        let updated = definitions::update_with(store, policy, &name, edit).await?;
        println!(
            "updated webhook {}{}",
            updated.webhook.name,
            if updated.rotation_started {
                " (secret rotation open: the previous secret also signs, and signs the \
                 Frappe header, until `webhook rotate-finish` or 24h)"
            } else {
                ""
            }
        );
        Ok(())
    }

    /// Changes the stored definition `spec` as the flags say: first what
    /// they clear, then what they set. Returns the sample document to
    /// validate on and whether the secret goes.
    fn edit(self, spec: &mut WebhookSpec) -> anyhow::Result<(serde_json::Value, bool)> {
        if self.clear_allowed_hosts {
            spec.allowed_hosts.clear();
        }
        if self.clear_headers {
            spec.headers.clear();
        }
        if self.clear_fields {
            spec.fields.clear();
        }
        if self.no_body_template {
            spec.body_template = None;
        }
        if self.no_condition {
            spec.condition = None;
        }
        if self.default_concurrency {
            spec.max_concurrency = None;
        }
        if self.no_rate_limit {
            spec.rate_limit = None;
        }
        if self.no_secret {
            spec.secret = None;
        }
        if self.static_url {
            spec.dynamic_url = false;
        }
        if self.no_frappe_body {
            spec.frappe_body = false;
        }
        self.fields.apply(spec)?;
        if let Some(new_name) = self.rename {
            spec.name = new_name;
        }
        let sample = self.fields.sample(&spec.entity_type)?;
        warn_unsealed(spec);
        if self.fields.names_an_event() {
            warn_unknown_event(spec);
        }
        Ok((sample, self.no_secret))
    }
}
