//! `hookfleet migrate`: the schema created or upgraded.

use clap::Args;

use hookfleet_core::store::Store;

#[derive(Args)]
pub struct Migrate {
    /// A direct Postgres URL for the migration, when DATABASE_URL goes
    /// through a pooler (PgBouncer) that should not carry DDL.
    #[arg(long, env = "HOOKFLEET_MIGRATE_DATABASE_URL", hide_env_values = true)]
    migrate_database_url: Option<String>,
}

impl Migrate {
    pub fn run(self, store: &Store) -> anyhow::Result<()> {
        let applied = match self.migrate_database_url.filter(|u| !u.trim().is_empty()) {
            Some(direct) => Store::connect_now(&direct, 1)?.migrate()?,
            None => store.migrate()?,
        };
        if applied.is_empty() {
            println!("schema is up to date");
        } else {
            for m in applied {
                println!("applied {m}");
            }
        }
        Ok(())
    }
}
