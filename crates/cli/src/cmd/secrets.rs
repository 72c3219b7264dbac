//! `hookfleet secrets reencrypt`: webhook secrets and header values at
//! rest sealed again with the current key.

use clap::Subcommand;

use hookfleet_admin::secrets;
use hookfleet_core::store::Store;

#[derive(Subcommand)]
pub enum SecretsCommand {
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

pub async fn run(command: SecretsCommand, store: &Store) -> anyhow::Result<()> {
    let SecretsCommand::Reencrypt { decrypt, json } = command;
    let done = secrets::reencrypt(store, decrypt).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&done)?);
    } else {
        println!(
            "{} values of {} webhooks sealed with the current key; every other value already was",
            done.values, done.webhooks
        );
    }
    Ok(())
}
