//! `hookfleet stats`: rows by status, queue depths, dead letters, the
//! oldest due retry and the paused webhooks.

use clap::Args;

use hookfleet_admin::stats;
use hookfleet_admin::views::StatsView;
use hookfleet_core::queue::RedisQueue;
use hookfleet_core::store::Store;

use crate::table;

#[derive(Args)]
pub struct Stats {
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

impl Stats {
    pub async fn run(self, store: &Store, queue: &RedisQueue) -> anyhow::Result<()> {
        let view = stats::stats(store, queue).await?;
        if self.json {
            println!("{}", serde_json::to_string_pretty(&view)?);
        } else {
            print(&view);
        }
        Ok(())
    }
}

fn print(view: &StatsView) {
    let r = &view.rows;
    let about = if view.rows_estimated { "~" } else { "" };
    println!(
        "rows        Queued {about}{}  Delivered {about}{}  Failed {about}{}  Exhausted {about}{}{}",
        r.queued,
        r.delivered,
        r.failed,
        r.exhausted,
        if view.rows_estimated {
            "  (~: estimated from the table's statistics)"
        } else {
            ""
        }
    );
    for (q, n) in &view.queues {
        println!("queue       {}: {n} waiting", table::clean(q));
    }
    if let Some(n) = view.dead_letters {
        println!("dead        {n} dead-lettered jobs");
    }
    println!("oldest due  {}", table::time(view.oldest_due_retry));
    println!("next retry  {}", table::time(view.next_retry));
    if !view.paused_webhooks.is_empty() {
        let names: Vec<String> = view
            .paused_webhooks
            .iter()
            .map(|n| table::clean(n))
            .collect();
        println!("paused      {}", names.join(", "));
    }
    if let Some(e) = &view.redis_error {
        println!("note        Redis did not answer: {}", table::clean(e));
    }
}
