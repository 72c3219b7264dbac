//! `hookfleet delivery list`: deliveries newest first, as a table or the
//! views `--json` prints.

use chrono::{DateTime, Utc};
use clap::Args;

use hookfleet_admin::deliveries;
use hookfleet_admin::views::DeliveryView;
use hookfleet_core::domain::{parse_time_or_ago, DeliveryLog, DeliveryStatus};
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
    /// Only this document (Frappe's `name`, e.g. SO-0001), exactly.
    #[arg(long)]
    document: Option<String>,
    /// Only this event (e.g. on_submit).
    #[arg(long)]
    event: Option<String>,
    /// Only this event id (the `webhook-id` header the receiver saw).
    #[arg(long)]
    event_id: Option<String>,
    /// Recorded at or after TIME (RFC 3339, or a duration ago such as 2h).
    #[arg(long, value_parser = parse_time_or_ago)]
    since: Option<DateTime<Utc>>,
    /// Recorded before TIME (RFC 3339, or a duration ago such as 30m).
    #[arg(long, value_parser = parse_time_or_ago)]
    until: Option<DateTime<Utc>>,
    /// Only rows with a smaller id: the next page after the last id seen.
    #[arg(long, value_name = "ID")]
    before: Option<i64>,
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
            document: self.document,
            event: self.event,
            event_id: self.event_id,
            since: self.since,
            until: self.until,
            before_id: self.before,
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
