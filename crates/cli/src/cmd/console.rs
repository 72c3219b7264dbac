//! `hookfleet console`: the management API and the console's pages,
//! served until a signal stops them.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use hookfleet_core::runtime::observe;
use hookfleet_core::runtime::Shutdown;
use hookfleet_settings::Settings;

#[derive(Args)]
pub struct Console {
    /// Address to listen on. Any address but loopback needs a token.
    #[arg(
        long,
        env = "HOOKFLEET_CONSOLE_LISTEN",
        default_value = "127.0.0.1:8490"
    )]
    listen: SocketAddr,
    /// Full-access token (API: Authorization: Bearer ...; pages: asked
    /// once, then a session cookie). At least 16 characters.
    #[arg(long, env = "HOOKFLEET_CONSOLE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Read-only token, for support staff: every page and read, no
    /// action. At least 16 characters.
    #[arg(long, env = "HOOKFLEET_CONSOLE_READ_TOKEN", hide_env_values = true)]
    read_token: Option<String>,
    /// A file holding the full-access token (when --token is not given):
    /// kept out of `ps` and the environment.
    #[arg(long, env = "HOOKFLEET_CONSOLE_TOKEN_FILE", value_name = "FILE")]
    token_file: Option<std::path::PathBuf>,
    /// A file holding the read-only token (when --read-token is not given).
    #[arg(long, env = "HOOKFLEET_CONSOLE_READ_TOKEN_FILE", value_name = "FILE")]
    read_token_file: Option<std::path::PathBuf>,
}

/// How often the console's ticker ticks, and how long /livez tolerates it
/// not ticking: a runtime that cannot run a task for half a minute is
/// wedged.
const CONSOLE_TICK: Duration = Duration::from_secs(1);
const CONSOLE_STALL_AFTER: Duration = Duration::from_secs(30);

/// Postgres connections the console keeps: a few people and scripts at once.
const CONSOLE_POOL_SIZE: u32 = 8;

impl Console {
    pub async fn run(self, s: &Settings) -> anyhow::Result<()> {
        let listen = self.listen;
        let token = hookfleet_settings::secret_or_file(
            self.token.as_deref(),
            self.token_file.as_deref(),
            "the console token file",
        )?;
        let read_token = hookfleet_settings::secret_or_file(
            self.read_token.as_deref(),
            self.read_token_file.as_deref(),
            "the console read-only token file",
        )?;
        hookfleet_console::check_exposure(listen, token.as_deref(), read_token.as_deref())?;
        let console = hookfleet_console::Console::new(
            s.store(CONSOLE_POOL_SIZE)?,
            s.queue()?,
            s.queue_grace,
            s.allowed_networks.clone(),
            token,
            read_token,
        );
        let shutdown = Shutdown::new();
        shutdown.listen_for_signals();
        // The console has no loop of its own: a ticker shows /livez the
        // runtime still schedules work.
        let progress = observe::progress();
        progress.set_stall_after(CONSOLE_STALL_AFTER);
        tokio::spawn(async move {
            loop {
                progress.tick();
                tokio::time::sleep(CONSOLE_TICK).await;
            }
        });
        hookfleet_console::serve(
            listen,
            console,
            async move { shutdown.requested(1).await },
            |addr| eprintln!("console on http://{addr}/ (API under /api/v1)"),
        )
        .await?;
        Ok(())
    }
}
