//! `hookfleet secrets reencrypt`: webhook secrets and header values at
//! rest sealed again with the current key. `hookfleet secrets generate`: a
//! new signing secret or sealing key (no database needed).

use clap::Subcommand;

use hookfleet_admin::secrets;
use hookfleet_core::store::Store;

#[derive(Subcommand)]
pub enum SecretsCommand {
    /// Print a new webhook signing secret in the Standard Webhooks form
    /// (`whsec_` and the base64 of 32 random bytes), which the official
    /// libraries take as it is; needs no database.
    ///
    /// Example: (umask 077; hookfleet secrets generate > orders.secret), then
    /// hookfleet webhook add orders ... --secret-file orders.secret
    Generate(Generate),
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

/// `hookfleet secrets generate`.
#[derive(clap::Args)]
pub struct Generate {
    /// Print a key for HOOKFLEET_SECRET_KEY (32 random bytes, base64)
    /// instead: the key that seals secrets and header values at rest.
    #[arg(long)]
    sealing_key: bool,
}

impl Generate {
    /// Prints the secret (or key) on a line of its own, and nothing else.
    /// The one place a secret is printed, on purpose: it is new, made for
    /// the operator to store (the help says: into a file only they read),
    /// and it goes to standard output only, never to a log.
    pub fn run(&self) {
        if self.sealing_key {
            println!("{}", hookfleet_core::domain::at_rest::generate_key());
        } else {
            println!("{}", hookfleet_core::domain::generate_secret());
        }
    }
}

pub async fn run(command: SecretsCommand, store: &Store) -> anyhow::Result<()> {
    let (decrypt, json) = match command {
        SecretsCommand::Generate(_) => unreachable!("answered without a database"),
        SecretsCommand::Reencrypt { decrypt, json } => (decrypt, json),
    };
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
