//! `hookfleet delivery list`: deliveries newest first, as a table or the
//! views `--json` prints.

use clap::Args;

use hookfleet_admin::deliveries;
use hookfleet_admin::views::DeliveryView;
use hookfleet_core::domain::{DeliveryLog, DeliveryStatus};
use hookfleet_core::store::deliveries::ListFilter;
use hookfleet_core::store::Store;

use crate::table;

#[derive(Args)]
pub struct List {
    /// Only this status: Queued, Delivered, Failed or Exhausted.
    #[arg(long)]
    status: Option<DeliveryStatus>,
    /// Only this webhook.
    #[arg(long)]
    webhook: Option<String>,
    /// At most this many rows.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    limit: i64,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// The list's columns.
const COLUMNS: [&str; 9] = [
    "ID",
    "STATUS",
    "WEBHOOK",
    "DOCUMENT",
    "EVENT",
    "ATTEMPTS",
    "CODE",
    "NEXT RETRY",
    "ERROR",
];

impl List {
    pub async fn run(self, store: &Store) -> anyhow::Result<()> {
        let filter = ListFilter {
            status: self.status,
            limit: self.limit,
            ..ListFilter::default()
        };
        let rows = deliveries::list(store, self.webhook, filter, None).await?;
        if self.json {
            let views: Vec<DeliveryView> = rows.iter().map(DeliveryView::new).collect();
            println!("{}", serde_json::to_string_pretty(&views)?);
        } else {
            let rows: Vec<Vec<String>> = rows.iter().map(row).collect();
            table::print(&COLUMNS, &rows);
        }
        Ok(())
    }
}

/// A delivery's row in the list.
fn row(d: &DeliveryLog) -> Vec<String> {
    vec![
        d.id.to_string(),
        d.status.to_string(),
        d.webhook_name.clone(),
        format!("{} {}", d.entity_type, d.entity_name),
        d.event.clone(),
        format!("{}/{}", d.attempts, d.max_attempts),
        d.response_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "-".into()),
        table::time(d.next_retry),
        table::clip(d.error.as_deref().unwrap_or(""), 60),
    ]
}
