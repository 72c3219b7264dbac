//! `hookfleet delivery …` and `hookfleet stats`: what happened to events,
//! and the operator's replay.

use anyhow::bail;
use chrono::{DateTime, Utc};
use clap::Subcommand;

use hookfleet_admin::views::DeliveryView;
use hookfleet_admin::{deliveries as admin_deliveries, replay, stats as admin_stats};
use hookfleet_core::config::parse_time_or_ago;
use hookfleet_core::model::DeliveryStatus;
use hookfleet_core::queue::RedisQueue;
use hookfleet_core::store::deliveries::{self, ListFilter};
use hookfleet_core::store::Store;

use crate::table;

#[derive(Subcommand)]
pub enum DeliveryCommand {
    /// List deliveries, newest first.
    List {
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
    },
    /// Show one delivery: the frozen request, its state and every attempt.
    Show {
        /// The delivery's id (the log id).
        id: i64,
        /// Print one JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Replay: make a Failed or Exhausted delivery due now (an Exhausted one
    /// gets one more attempt). With --webhook/--status/--since, every
    /// matching delivery.
    Retry {
        /// The delivery to replay.
        #[arg(required_unless_present = "webhook", conflicts_with_all = ["webhook", "status", "since"])]
        id: Option<i64>,
        /// Replay a Delivered row too.
        #[arg(long)]
        force: bool,
        /// Bulk: this webhook's deliveries…
        #[arg(long, requires_all = ["status", "since"])]
        webhook: Option<String>,
        /// …in this status (Failed or Exhausted)…
        #[arg(long)]
        status: Option<DeliveryStatus>,
        /// …last changed since TIME (RFC 3339, or a duration ago such as 2h).
        #[arg(long)]
        since: Option<String>,
    },
}

fn parse_since(text: &str) -> anyhow::Result<DateTime<Utc>> {
    parse_time_or_ago(text).map_err(|e| anyhow::anyhow!("--since {e}"))
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
                opt(self.next_retry.map(|t| held_or(t, t.to_rfc3339()))),
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

fn time(t: Option<DateTime<Utc>>) -> String {
    t.map(|t| held_or(t, t.format("%Y-%m-%d %H:%M:%S").to_string()))
        .unwrap_or_else(|| "-".into())
}

/// A held row's next_retry (its webhook is paused) says so, not year 9999.
fn held_or(t: DateTime<Utc>, shown: String) -> String {
    if t == deliveries::held_until() {
        "held (webhook paused)".into()
    } else {
        shown
    }
}

pub async fn run(
    store: &Store,
    queue: &RedisQueue,
    grace: std::time::Duration,
    command: DeliveryCommand,
) -> anyhow::Result<()> {
    match command {
        DeliveryCommand::List {
            status,
            webhook,
            limit,
            json,
        } => {
            let filter = ListFilter {
                status,
                limit,
                ..ListFilter::default()
            };
            let rows = admin_deliveries::list(store, webhook, filter, None).await?;
            if json {
                let views: Vec<DeliveryView> = rows.iter().map(DeliveryView::new).collect();
                println!("{}", serde_json::to_string_pretty(&views)?);
            } else {
                let table_rows: Vec<Vec<String>> = rows
                    .iter()
                    .map(|d| {
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
                            time(d.next_retry),
                            table::clip(d.error.as_deref().unwrap_or(""), 60),
                        ]
                    })
                    .collect();
                table::print(
                    &[
                        "ID",
                        "STATUS",
                        "WEBHOOK",
                        "DOCUMENT",
                        "EVENT",
                        "ATTEMPTS",
                        "CODE",
                        "NEXT RETRY",
                        "ERROR",
                    ],
                    &table_rows,
                );
            }
        }
        DeliveryCommand::Show { id, json } => {
            let (row, attempts) = admin_deliveries::show(store, id).await?;
            let mut view = DeliveryView::new(&row);
            if json {
                view.attempt_log = Some(attempts.iter().collect());
                println!("{}", serde_json::to_string_pretty(&view)?);
            } else {
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
                            time(Some(a.started_at)),
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
        }
        DeliveryCommand::Retry {
            id: Some(id),
            force,
            ..
        } => {
            let replay::ReplayOne { replayed, note } =
                replay::replay(store, queue, grace, id, force).await?;
            println!(
                "delivery {id}: {} → Failed, due now (attempt {} allowed); {note}",
                replayed.previous_status, replayed.next_attempt
            );
        }
        DeliveryCommand::Retry {
            id: None,
            webhook: Some(webhook),
            status: Some(status),
            since: Some(since),
            ..
        } => {
            let since = parse_since(&since)?;
            let done =
                replay::replay_bulk(store, queue, grace, &webhook, status, since, false).await?;
            match done.note {
                None => {
                    println!("no {status} deliveries of {webhook} since {since}; nothing replayed")
                }
                Some(note) => println!(
                    "{} deliveries of {webhook} replayed ({status} → Failed, due now); {note}",
                    done.count
                ),
            }
        }
        DeliveryCommand::Retry { .. } => {
            bail!("give a delivery ID, or --webhook, --status and --since")
        }
    }
    Ok(())
}

/// `hookfleet stats`.
pub async fn stats(store: &Store, queue: &RedisQueue, json: bool) -> anyhow::Result<()> {
    let view = admin_stats::stats(store, queue).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&view)?);
        return Ok(());
    }
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
    println!("oldest due  {}", time(view.oldest_due_retry));
    println!("next retry  {}", time(view.next_retry));
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
    Ok(())
}
