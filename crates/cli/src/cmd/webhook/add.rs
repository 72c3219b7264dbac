//! `hookfleet webhook add NAME --entity-type T --event E --url U …`.

use clap::Args;

use hookfleet_admin::definitions;
use hookfleet_core::domain::WebhookSpec;
use hookfleet_core::request::NetworkPolicy;
use hookfleet_core::store::Store;

use super::definition::{warn_unknown_event, warn_unsealed, Definition};

#[derive(Args)]
pub struct Add {
    /// A unique name (any printable text; Frappe's webhook names are kept).
    name: String,
    #[command(flatten)]
    fields: Definition,
    /// Add it disabled.
    #[arg(long)]
    disabled: bool,
}

impl Add {
    pub async fn run(self, store: &Store, policy: &NetworkPolicy) -> anyhow::Result<()> {
        let Some((entity_type, event, url)) = self.fields.required() else {
            return Err(
                crate::Usage("webhook add needs --entity-type, --event and --url".into()).into(),
            );
        };
        let mut spec = WebhookSpec::new(&self.name, entity_type, event, url);
        spec.enabled = !self.disabled;
        self.fields.apply(&mut spec)?;
        let sample = self.fields.sample(&spec.entity_type)?;
        warn_unsealed(&spec);
        warn_unknown_event(&spec);
        let w = definitions::add(store, policy, spec, sample).await?;
        println!(
            "added webhook {} ({} {} → {}){}",
            w.name,
            w.entity_type,
            w.event,
            w.request_url,
            if w.secret.is_some() { ", signed" } else { "" }
        );
        Ok(())
    }
}
