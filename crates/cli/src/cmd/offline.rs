//! The commands that touch neither Postgres nor Redis: `secrets generate`,
//! `completions` and `man`. They are parsed before the settings every
//! other command requires, so they run with no DATABASE_URL (as a package's
//! build or a shell's startup file runs them).

use clap::{Args, CommandFactory, Parser, Subcommand};
use clap_complete::Shell;

use crate::cmd::secrets::Generate;

/// `hookfleet completions SHELL`.
#[derive(Args)]
pub struct Completions {
    /// bash, zsh, fish, elvish or powershell.
    shell: Shell,
}

/// `hookfleet man`.
#[derive(Args)]
pub struct Man {}

/// A command that needs no database, as parsed on its own.
pub enum Offline {
    Generate(Generate),
    Completions(Completions),
    Man(Man),
}

impl Offline {
    /// The command, when the arguments are exactly one of these (with or
    /// without a database configured).
    pub fn parse(args: &[std::ffi::OsString]) -> Option<Offline> {
        #[derive(Parser)]
        #[command(name = "hookfleet")]
        struct Line {
            #[command(subcommand)]
            command: LineCommand,
        }
        #[derive(Subcommand)]
        enum LineCommand {
            #[command(subcommand)]
            Secrets(LineSecrets),
            Completions(Completions),
            Man(Man),
        }
        #[derive(Subcommand)]
        enum LineSecrets {
            Generate(Generate),
        }
        Some(match Line::try_parse_from(args).ok()?.command {
            LineCommand::Secrets(LineSecrets::Generate(g)) => Offline::Generate(g),
            LineCommand::Completions(c) => Offline::Completions(c),
            LineCommand::Man(m) => Offline::Man(m),
        })
    }

    /// Runs it, printing to standard output; `C` is the whole command
    /// line's definition (completions and the man page describe it).
    pub fn run<C: CommandFactory>(self) -> std::io::Result<()> {
        match self {
            Offline::Generate(g) => {
                g.run();
                Ok(())
            }
            Offline::Completions(Completions { shell }) => {
                clap_complete::generate(
                    shell,
                    &mut C::command(),
                    "hookfleet",
                    &mut std::io::stdout(),
                );
                Ok(())
            }
            Offline::Man(Man {}) => {
                clap_mangen::Man::new(C::command()).render(&mut std::io::stdout())
            }
        }
    }
}
