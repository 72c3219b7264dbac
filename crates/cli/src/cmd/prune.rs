//! `hookfleet prune --older-than D`: terminal rows past a retention
//! deleted, in batches.

use std::time::Duration;

use clap::Args;

use hookfleet_admin::prune::{self, MAX_PRUNE_BATCH, MIN_RETENTION, PRUNE_BATCH};
use hookfleet_core::domain::{format_duration, parse_duration};
use hookfleet_core::store::Store;

#[derive(Args)]
pub struct Prune {
    /// How old a row must be, e.g. 30d (Frappe's default), 12h; at least
    /// 1h.
    #[arg(long, value_parser = parse_retention)]
    older_than: Duration,
    /// Rows one statement looks at.
    #[arg(long, default_value_t = PRUNE_BATCH,
          value_parser = clap::value_parser!(i64).range(1..=MAX_PRUNE_BATCH))]
    batch_size: i64,
    /// Delete as fast as the database allows, instead of spending a
    /// fifth of the time in statements (for a backlog of old rows at
    /// a quiet hour; it slows delivery meanwhile).
    #[arg(long)]
    full_speed: bool,
    /// Print one JSON document instead of a line.
    #[arg(long)]
    json: bool,
}

/// At least an hour ([`MIN_RETENTION`]).
fn parse_retention(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text).map_err(|e| e.to_string())?;
    if d < MIN_RETENTION {
        return Err(format!(
            "must be at least {} (a younger row may still have an attempt in flight)",
            format_duration(MIN_RETENTION)
        ));
    }
    Ok(d)
}

impl Prune {
    pub async fn run(self, store: &Store) -> anyhow::Result<()> {
        let progress = crate::ask::Progress::on_a_terminal();
        let shown = progress.clone();
        let r = prune::prune(
            store,
            self.older_than,
            self.batch_size,
            self.full_speed,
            move |so_far| {
                shown.show(|| {
                    format!(
                        "pruned {} rows and {} attempts so far ({} batches)",
                        so_far.rows, so_far.attempts, so_far.batches
                    )
                })
            },
        )
        .await;
        progress.done();
        let r = r?;
        if self.json {
            println!("{}", serde_json::to_string_pretty(&r)?);
        } else {
            println!(
                "pruned {} delivery rows and {} attempts older than {} in {:.1}s ({} batches)",
                r.rows,
                r.attempts,
                format_duration(self.older_than),
                r.seconds,
                r.batches
            );
        }
        Ok(())
    }
}
