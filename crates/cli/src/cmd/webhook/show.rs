//! `hookfleet webhook list` and `webhook show NAME`: every webhook as a
//! table, or one as lines, each with its health; `--json` prints the views
//! every surface shows.

use clap::Args;

use hookfleet_admin::views::WebhookView;
use hookfleet_admin::webhooks::{self, WithHealth};
use hookfleet_core::store::Store;

use crate::table;

#[derive(Args)]
pub struct List {
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// The list's columns.
const COLUMNS: [&str; 14] = [
    "NAME",
    "ENTITY TYPE",
    "EVENT",
    "METHOD",
    "URL",
    "ENABLED",
    "PAUSED",
    "SIGNED",
    "QUEUE",
    "RETRIES",
    "ATTEMPTS 24H",
    "OK 24H",
    "P95",
    "FAILING",
];

impl List {
    pub async fn run(self, store: &Store) -> anyhow::Result<()> {
        let all = webhooks::list(store).await?;
        if self.json {
            let views: Vec<WebhookView> = all.iter().map(|w| w.view(false)).collect();
            println!("{}", serde_json::to_string_pretty(&views)?);
        } else {
            let rows: Vec<Vec<String>> = all.iter().map(row).collect();
            table::print(&COLUMNS, &rows);
        }
        Ok(())
    }
}

/// A webhook's row in the list.
fn row(
    WithHealth {
        webhook: w,
        health: h,
    }: &WithHealth,
) -> Vec<String> {
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
    vec![
        w.name.clone(),
        w.entity_type.clone(),
        w.event.clone(),
        w.request_method.clone(),
        table::clip(&w.request_url, 48),
        yes_no(w.enabled),
        yes_no(w.paused_at.is_some()),
        yes_no(w.secret.is_some()),
        w.queue.clone(),
        w.max_retries.to_string(),
        h.attempts_24h.to_string(),
        h.success_rate_24h.map_or("-".into(), percent),
        h.p95_ms.map_or("-".into(), |n| format!("{n}ms")),
        h.consecutive_failures.to_string(),
    ]
}

#[derive(Args)]
pub struct Show {
    /// The webhook's name.
    name: String,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
    /// Show the static headers' values (they may be credentials).
    #[arg(long)]
    show_header_values: bool,
}

impl Show {
    pub async fn run(self, store: &Store) -> anyhow::Result<()> {
        let w = webhooks::show(store, &self.name).await?;
        let view = w.view(self.show_header_values);
        if self.json {
            println!("{}", serde_json::to_string_pretty(&view)?);
        } else {
            print_one(&view);
        }
        Ok(())
    }
}

trait Lines {
    fn lines(&self) -> Vec<(&'static str, String)>;
}

impl Lines for WebhookView<'_> {
    /// The one-line fields a person reads, in order, as text.
    fn lines(&self) -> Vec<(&'static str, String)> {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        vec![
            ("name", self.name.into()),
            ("entity_type", self.entity_type.into()),
            ("event", self.event.into()),
            ("request_url", self.request_url.into()),
            ("dynamic_url", self.dynamic_url.to_string()),
            ("request_method", self.request_method.into()),
            ("request_structure", self.request_structure.into()),
            ("condition", opt(self.condition.map(str::to_string))),
            (
                "allowed_hosts",
                if self.allowed_hosts.is_empty() {
                    "-".into()
                } else {
                    self.allowed_hosts.join(", ")
                },
            ),
            ("enabled", self.enabled.to_string()),
            ("signed", self.signed.to_string()),
            (
                "secret_rotation_until",
                opt(self.secret_rotation_until.map(|t| t.to_rfc3339())),
            ),
            ("timeout", self.timeout.clone()),
            ("queue", self.queue.into()),
            ("max_retries", self.max_retries.to_string()),
            (
                "max_concurrency",
                opt(self.max_concurrency.map(|n| n.to_string())),
            ),
            ("rate_limit", opt(self.rate_limit.clone())),
            ("frappe_body", self.frappe_body.to_string()),
            (
                "paused",
                match (self.paused_at, self.paused_reason) {
                    (Some(at), reason) => {
                        format!("since {} ({})", at.to_rfc3339(), reason.unwrap_or("-"))
                    }
                    (None, _) => "no".into(),
                },
            ),
            (
                "consecutive_failures",
                self.health.consecutive_failures.to_string(),
            ),
            (
                "last_success_at",
                opt(self.health.last_success_at.map(|t| t.to_rfc3339())),
            ),
            ("last_error", opt(self.health.last_error.clone())),
            ("attempts_24h", self.health.attempts_24h.to_string()),
            (
                "success_rate_24h",
                opt(self.health.success_rate_24h.map(percent)),
            ),
            ("p50_ms", opt(self.health.p50_ms.map(|n| n.to_string()))),
            ("p95_ms", opt(self.health.p95_ms.map(|n| n.to_string()))),
        ]
    }
}

/// A rate as a percentage with one decimal.
fn percent(rate: f64) -> String {
    format!("{:.1}%", rate * 100.0)
}

fn print_one(v: &WebhookView) {
    for (key, text) in v.lines() {
        println!("{key:<20} {}", table::clean(&text));
    }
    if let Some(t) = v.body_template {
        println!("body_template\n{}", table::clean_lines(t.trim_end()));
    }
    for f in &v.fields {
        println!(
            "field                {} -> {}",
            table::clean(&f.field),
            table::clean(&f.key)
        );
    }
    for h in &v.headers {
        println!(
            "header               {}: {}",
            table::clean(&h.key),
            table::clean(&h.value)
        );
    }
    println!("{:<20} {}", "created_at", v.created_at.to_rfc3339());
    println!("{:<20} {}", "updated_at", v.updated_at.to_rfc3339());
}
