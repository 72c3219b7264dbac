//! `hookfleet delivery …` and `hookfleet stats`: what happened to events,
//! and the operator's replay.

use anyhow::bail;
use chrono::{DateTime, Utc};
use clap::Subcommand;
use serde::Serialize;

use hookfleet_core::config::parse_duration;
use hookfleet_core::model::{display_header_value, DeliveryAttempt, DeliveryLog, DeliveryStatus};
use hookfleet_core::queue::{Enqueue, RedisQueue};
use hookfleet_core::store::deliveries::{self, ListFilter, Replayed};
use hookfleet_core::store::{webhooks, Store};

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
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    match parse_duration(text) {
        Ok(d) => Ok(Utc::now() - chrono::Duration::from_std(d)?),
        Err(_) => bail!("--since {text:?} is neither an RFC 3339 time nor a duration such as 2h"),
    }
}

/// A header as shown: the value hidden when it looks like a credential.
#[derive(Serialize)]
struct HeaderView {
    key: String,
    value: String,
}

/// A delivery as `delivery list|show --json` print it (field names as the
/// columns, DESIGN "Command line"); never a secret.
#[derive(Serialize)]
struct DeliveryView<'a> {
    id: i64,
    event_id: &'a str,
    webhook: &'a str,
    webhook_id: Option<i64>,
    entity_type: &'a str,
    entity_name: &'a str,
    event: &'a str,
    url: &'a str,
    method: &'a str,
    headers: Vec<HeaderView>,
    /// Set when the stored headers cannot be read (they are not sent then).
    #[serde(skip_serializing_if = "Option::is_none")]
    headers_error: Option<String>,
    body: &'a str,
    queue: &'a str,
    status: DeliveryStatus,
    attempts: i32,
    max_attempts: i32,
    next_retry: Option<DateTime<Utc>>,
    in_flight_until: Option<DateTime<Utc>>,
    response_code: Option<i32>,
    /// The receiver's answer as text (bytes that are not UTF-8 as U+FFFD).
    response_body: Option<String>,
    error: Option<&'a str>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempt_log: Option<Vec<&'a DeliveryAttempt>>,
}

impl<'a> DeliveryView<'a> {
    fn new(d: &'a DeliveryLog) -> DeliveryView<'a> {
        let (headers, headers_error) = match d.header_list() {
            Ok(list) => (
                list.iter()
                    .map(|h| HeaderView {
                        key: h.key.clone(),
                        value: display_header_value(&h.key, &h.value, false),
                    })
                    .collect(),
                None,
            ),
            Err(e) => (Vec::new(), Some(e)),
        };
        DeliveryView {
            id: d.id,
            event_id: &d.event_id,
            webhook: &d.webhook_name,
            webhook_id: d.webhook_id,
            entity_type: &d.entity_type,
            entity_name: &d.entity_name,
            event: &d.event,
            url: &d.url,
            method: &d.method,
            headers,
            headers_error,
            body: &d.body,
            queue: &d.queue,
            status: d.status,
            attempts: d.attempts,
            max_attempts: d.max_attempts,
            next_retry: d.next_retry,
            in_flight_until: d.lease_expires_at,
            response_code: d.response_code,
            response_body: d.response_text(),
            error: d.error.as_deref(),
            created_at: d.created_at,
            updated_at: d.updated_at,
            attempt_log: None,
        }
    }

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

/// Puts replayed rows on their queues now rather than at the next sweep.
async fn enqueue_now(queue: &RedisQueue, rows: &[Replayed], ttl: std::time::Duration) -> String {
    let items: Vec<Enqueue> = rows.iter().map(Enqueue::from).collect();
    match queue.enqueue(&items, ttl).await {
        Ok(flags) => {
            let n = flags.iter().filter(|f| **f).count();
            if n == rows.len() {
                "queued now".into()
            } else {
                format!("{n} queued now; the rest are already on a queue")
            }
        }
        Err(e) => format!("not queued now ({e}); the next sweep sends them"),
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
            let rows = store.run_sync(|c| {
                let webhook = webhook
                    .as_deref()
                    .map(|name| deliveries::webhook_rows(c, name))
                    .transpose()?;
                deliveries::list(
                    c,
                    &ListFilter {
                        status,
                        webhook,
                        limit,
                    },
                )
            })?;
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
            let (row, attempts) =
                store.run_sync(|c| Ok((deliveries::get(c, id)?, deliveries::attempts(c, id)?)))?;
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
            let replayed = store.run_sync(|c| deliveries::replay(c, id, force))?;
            let note = enqueue_now(queue, std::slice::from_ref(&replayed), grace).await;
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
            if !matches!(status, DeliveryStatus::Failed | DeliveryStatus::Exhausted) {
                bail!("bulk replay takes --status Failed or Exhausted");
            }
            let since = parse_since(&since)?;
            let rows = store.run_sync(|c| {
                let hook = webhooks::get(c, &webhook)?;
                deliveries::replay_bulk(c, hook.id, status, since)
            })?;
            if rows.is_empty() {
                println!("no {status} deliveries of {webhook} since {since}; nothing replayed");
            } else {
                let note = enqueue_now(queue, &rows, grace).await;
                println!(
                    "{} deliveries of {webhook} replayed ({status} → Failed, due now); {note}",
                    rows.len()
                );
            }
        }
        DeliveryCommand::Retry { .. } => {
            bail!("give a delivery ID, or --webhook, --status and --since")
        }
    }
    Ok(())
}

/// Rows per status, as `stats --json` prints them.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct RowCounts {
    queued: i64,
    delivered: i64,
    failed: i64,
    exhausted: i64,
}

/// What `hookfleet stats --json` prints.
#[derive(Serialize)]
struct StatsView {
    rows: RowCounts,
    /// Jobs waiting, per queue.
    queues: std::collections::BTreeMap<String, i64>,
    /// None when Redis did not answer.
    dead_letters: Option<i64>,
    /// Delivered and Exhausted are estimates from the table's statistics
    /// (a table of a million rows or more), or the pending counts reached
    /// their cap.
    rows_estimated: bool,
    oldest_due_retry: Option<DateTime<Utc>>,
    next_retry: Option<DateTime<Utc>>,
    /// Paused webhooks (their deliveries wait for `webhook resume`).
    paused_webhooks: Vec<String>,
    redis_error: Option<String>,
}

/// `hookfleet stats`.
pub async fn stats(store: &Store, queue: &RedisQueue, json: bool) -> anyhow::Result<()> {
    let (counts, mut queues, paused) = store.run_sync(|c| {
        Ok((
            deliveries::counts(c, deliveries::CountLimits::default())?,
            webhooks::queue_names(c)?,
            webhooks::paused_names(c)?,
        ))
    })?;
    if !queues.iter().any(|q| q == "default") {
        queues.insert(0, "default".into());
    }
    let mut view = StatsView {
        rows: RowCounts {
            queued: counts.queued,
            delivered: counts.delivered,
            failed: counts.failed,
            exhausted: counts.exhausted,
        },
        queues: Default::default(),
        dead_letters: None,
        rows_estimated: counts.estimated,
        oldest_due_retry: counts.oldest_due,
        next_retry: counts.next_due,
        paused_webhooks: paused,
        redis_error: None,
    };
    for q in &queues {
        match queue.depth(q).await {
            Ok(n) => {
                view.queues.insert(q.clone(), n);
            }
            Err(e) => {
                view.redis_error = Some(e.to_string());
                break;
            }
        }
    }
    match queue.dead_count().await {
        Ok(n) => view.dead_letters = Some(n),
        Err(e) => {
            view.redis_error.get_or_insert(e.to_string());
        }
    }
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
