//! `hookfleet delivery show ID`: the frozen request, its state and every
//! attempt.

use clap::Args;

use hookfleet_admin::deliveries;
use hookfleet_admin::views::DeliveryView;
use hookfleet_core::domain::DeliveryAttempt;
use hookfleet_core::store::Store;

use crate::table;

#[derive(Args)]
pub struct Show {
    /// The delivery's id (the log id).
    id: i64,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

impl Show {
    pub async fn run(self, store: &Store) -> anyhow::Result<()> {
        let (row, attempts) = deliveries::show(store, self.id).await?;
        let mut view = DeliveryView::new(&row);
        if self.json {
            view.attempt_log = Some(attempts.iter().collect());
            println!("{}", serde_json::to_string_pretty(&view)?);
        } else {
            print_one(&view, &attempts);
        }
        Ok(())
    }
}

fn print_one(view: &DeliveryView, attempts: &[DeliveryAttempt]) {
    for (key, text) in view.lines() {
        println!("{key:<16} {}", table::clean(&text));
    }
    for h in &view.headers {
        println!(
            "header           {}: {}",
            table::clean(&h.key),
            table::clean(&h.value)
        );
    }
    if let Some(e) = &view.headers_error {
        println!("headers          {}", table::clean(e));
    }
    println!("body             {}", table::clean(view.body));
    if let Some(b) = &view.response_body {
        println!("response_body    {}", table::clip(b, 400));
    }
    println!();
    let rows: Vec<Vec<String>> = attempts
        .iter()
        .map(|a| {
            vec![
                a.attempt.to_string(),
                table::time(Some(a.started_at)),
                format!("{} ms", a.duration_ms),
                a.response_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "-".into()),
                table::clip(a.error.as_deref().unwrap_or(""), 60),
                a.worker.clone(),
            ]
        })
        .collect();
    table::print(
        &["ATTEMPT", "STARTED", "TOOK", "CODE", "ERROR", "WORKER"],
        &rows,
    );
}

trait Lines {
    fn lines(&self) -> Vec<(&'static str, String)>;
}

impl Lines for DeliveryView<'_> {
    /// The fields a person reads, in order, as text.
    fn lines(&self) -> Vec<(&'static str, String)> {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        vec![
            ("id", self.id.to_string()),
            ("event_id", self.event_id.into()),
            ("webhook", self.webhook.into()),
            ("entity_type", self.entity_type.into()),
            ("entity_name", self.entity_name.into()),
            ("event", self.event.into()),
            ("method", self.method.into()),
            ("url", self.url.into()),
            ("queue", self.queue.into()),
            ("status", self.status.to_string()),
            ("attempts", self.attempts.to_string()),
            ("max_attempts", self.max_attempts.to_string()),
            (
                "next_retry",
                opt(self.next_retry.map(|t| table::held_or(t, t.to_rfc3339()))),
            ),
            (
                "in_flight_until",
                opt(self.in_flight_until.map(|t| t.to_rfc3339())),
            ),
            (
                "response_code",
                opt(self.response_code.map(|c| c.to_string())),
            ),
            ("error", opt(self.error.map(str::to_string))),
            ("created_at", self.created_at.to_rfc3339()),
            ("updated_at", self.updated_at.to_rfc3339()),
        ]
    }
}
