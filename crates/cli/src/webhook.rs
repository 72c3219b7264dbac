//! `hookfleet webhook …`: define, change, inspect and remove subscriptions.
//! Every definition is validated before anything is written; the secret is
//! write-only (list and show say whether signing is on, never the secret).

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use serde_json::Value;

use hookfleet_admin::definitions;
use hookfleet_admin::preview::{default_sample_doc, Preview};
use hookfleet_admin::views::WebhookView;
use hookfleet_admin::webhooks;
use hookfleet_core::config::parse_duration;
use hookfleet_core::model::read_document;
use hookfleet_core::model::{FieldMapping, Header, Method, Structure, WebhookSpec};
use hookfleet_core::sign::Secret;
use hookfleet_core::ssrf::NetworkPolicy;
use hookfleet_core::store::Store;

use crate::table;

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum WebhookCommand {
    /// Add a webhook.
    Add {
        /// A unique name (any printable text; Frappe's webhook names are kept).
        name: String,
        #[command(flatten)]
        fields: Definition,
        /// Add it disabled.
        #[arg(long)]
        disabled: bool,
    },
    /// List webhooks.
    List {
        /// Print one JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one webhook (header values hidden unless --show-header-values).
    Show {
        /// The webhook's name.
        name: String,
        /// Print one JSON document instead of a table.
        #[arg(long)]
        json: bool,
        /// Show the static headers' values (they may be credentials).
        #[arg(long)]
        show_header_values: bool,
    },
    /// Change a webhook: only the fields given change. A new secret starts a
    /// two-phase rotation: the old one keeps signing (a second Standard
    /// Webhooks signature, and the Frappe header) until `rotate-finish` or
    /// 24 hours.
    Update {
        /// The webhook's name.
        name: String,
        #[command(flatten)]
        fields: Definition,
        /// Rename the webhook.
        #[arg(long)]
        rename: Option<String>,
        /// Remove the condition (every event is delivered).
        #[arg(long, conflicts_with = "condition")]
        no_condition: bool,
        /// Stop signing (removes the secret, and the previous one of a
        /// rotation).
        #[arg(long, conflicts_with_all = ["secret", "secret_file"])]
        no_secret: bool,
        /// Remove every allowed host (before adding the --allowed-host ones).
        #[arg(long)]
        clear_allowed_hosts: bool,
        /// Go back to the worker's default per-webhook concurrency.
        #[arg(long, conflicts_with = "max_concurrency")]
        default_concurrency: bool,
        /// Remove the rate limit.
        #[arg(long, conflicts_with = "rate_limit")]
        no_rate_limit: bool,
        /// Remove every static header (before adding the --header ones).
        #[arg(long)]
        clear_headers: bool,
        /// Remove the field selection (before adding the --field ones).
        #[arg(long)]
        clear_fields: bool,
        /// Remove the body template.
        #[arg(long, conflicts_with_all = ["body_template", "body_template_file"])]
        no_body_template: bool,
        /// Make the URL static again.
        #[arg(long, conflicts_with = "dynamic_url")]
        static_url: bool,
    },
    /// Finish a secret rotation: the old secret stops signing and the
    /// Frappe header moves to the new one.
    RotateFinish {
        /// The webhook's name.
        name: String,
    },
    /// Enable a webhook.
    Enable {
        /// The webhook's name.
        name: String,
    },
    /// Disable a webhook: no new deliveries; pending ones become Exhausted
    /// when their attempt comes, without a request.
    Disable {
        /// The webhook's name.
        name: String,
    },
    /// Pause a webhook: its events are still recorded, nothing is sent and
    /// nothing becomes Exhausted until `resume`.
    Pause {
        /// The webhook's name.
        name: String,
        /// Why (shown by list and show).
        #[arg(long, default_value = "paused by an operator")]
        reason: String,
    },
    /// Resume a paused webhook: what is due goes out at once, oldest first.
    Resume {
        /// The webhook's name.
        name: String,
    },
    /// Delete a webhook. Its delivery rows stay; pending ones become Exhausted
    /// when their attempt comes, without a request.
    Delete {
        /// The webhook's name.
        name: String,
    },
    /// What the webhook would do with a document: whether it meets the
    /// condition, the URL, method, headers (values hidden) and body.
    /// Nothing is recorded, nothing is sent.
    Preview {
        /// The webhook's name.
        name: String,
        /// The document, a JSON object: a file, or - for standard input.
        #[arg(long, value_name = "FILE|-")]
        doc: String,
        /// Print one JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Import Frappe Webhook documents (fixtures or REST API JSON): each is
    /// created or updated under its Frappe name, or refused with the reason.
    Import(crate::import::ImportArgs),
}

/// The definition flags shared by add and update.
#[derive(Args)]
pub struct Definition {
    /// Entity type (Frappe's doctype), e.g. "Sales Order" (required by add).
    #[arg(long)]
    entity_type: Option<String>,
    /// Event: after_insert, on_update, on_submit, on_cancel, on_trash,
    /// on_update_after_submit, on_change, workflow_transition, or any other
    /// (required by add).
    #[arg(long)]
    event: Option<String>,
    /// Receiver URL (http or https), or a Jinja template with --dynamic-url
    /// (required by add).
    #[arg(long)]
    url: Option<String>,
    /// Render the URL as a Jinja template with `doc`.
    #[arg(long)]
    dynamic_url: bool,
    /// A host (HOST or HOST:PORT) a dynamic URL may render to (repeatable;
    /// default: the host written literally in the URL template).
    #[arg(long = "allowed-host", value_name = "HOST[:PORT]")]
    allowed_hosts: Vec<String>,
    /// HTTP method: POST (add's default), PUT, PATCH, DELETE or GET.
    #[arg(long)]
    method: Option<String>,
    /// Body encoding: json (add's default) or form.
    #[arg(long)]
    structure: Option<String>,
    /// A Jinja template rendering the JSON body from `doc` (with Frappe's
    /// `utils` and its filters json, len, int, str, flt).
    #[arg(long, conflicts_with = "body_template_file")]
    body_template: Option<String>,
    /// Read the body template from a file.
    #[arg(long)]
    body_template_file: Option<String>,
    /// A document field to send, as DOCFIELD or DOCFIELD:KEY (repeatable).
    #[arg(long = "field", value_name = "DOCFIELD[:KEY]")]
    fields: Vec<String>,
    /// A static header, as KEY:VALUE (repeatable).
    #[arg(long = "header", value_name = "KEY:VALUE")]
    headers: Vec<String>,
    /// When to deliver: a Python expression as Frappe's conditions are
    /// written (`doc.get("status") == "Approved"`, `len(doc.items) > 0`,
    /// `utils.flt(doc.grand_total) > 1`) or a Jinja expression, on `doc` and
    /// `utils`; false → no delivery.
    #[arg(long)]
    condition: Option<String>,
    /// Signing secret (HMAC). Prefer --secret-file: a command line is visible
    /// to other users of the machine.
    #[arg(long, conflicts_with = "secret_file", hide_env_values = true)]
    secret: Option<String>,
    /// Read the signing secret from a file (first line).
    #[arg(long)]
    secret_file: Option<String>,
    /// Time a receiver has to answer (more than 0, at most 60s; add's
    /// default 5s).
    #[arg(long)]
    timeout: Option<String>,
    /// Queue its deliveries go to (add's default: default).
    #[arg(long)]
    queue: Option<String>,
    /// Retries after the first attempt (0 = one attempt only; add's default
    /// 3).
    #[arg(long, allow_negative_numbers = true)]
    max_retries: Option<i64>,
    /// Most requests in flight to this webhook from the whole fleet (every
    /// worker together; default: each worker's --endpoint-concurrency
    /// share, no fleet-wide limit).
    #[arg(long, allow_negative_numbers = true)]
    max_concurrency: Option<i64>,
    /// Most requests per second to this webhook from the whole fleet,
    /// written N/s (e.g. 100/s; default: none).
    #[arg(long, value_name = "N/s", allow_hyphen_values = true)]
    rate_limit: Option<String>,
    /// A JSON document to try the templates on (default: a document with only
    /// doctype and name, where missing fields render as null).
    #[arg(long, value_name = "FILE")]
    sample_doc: Option<String>,
}

/// Says, once, that what is about to be stored holds credentials that will
/// not be sealed (no key is configured).
fn warn_unsealed(spec: &WebhookSpec) {
    let credentials = spec.secret.is_some() || !spec.headers.is_empty();
    if credentials && !hookfleet_core::at_rest::keyring().seals() {
        eprintln!(
            "warning: no HOOKFLEET_SECRET_KEY: the secret and header values are stored unencrypted"
        );
    }
}

/// Splits `A:B` at the first colon.
fn split_pair(text: &str) -> (String, Option<String>) {
    match text.split_once(':') {
        Some((a, b)) => (a.trim().to_string(), Some(b.trim().to_string())),
        None => (text.trim().to_string(), None),
    }
}

fn parse_fields(raw: &[String]) -> Vec<FieldMapping> {
    raw.iter()
        .map(|f| {
            let (field, key) = split_pair(f);
            let key = key.unwrap_or_else(|| field.clone());
            FieldMapping { field, key }
        })
        .collect()
}

fn parse_headers(raw: &[String]) -> Vec<Header> {
    raw.iter()
        .map(|h| {
            let (key, value) = split_pair(h);
            Header {
                key,
                value: value.unwrap_or_default(),
            }
        })
        .collect()
}

fn read_file(path: &str, what: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read the {what} file {path}"))
}

impl Definition {
    /// Applies the flags given to `spec`.
    fn apply(&self, spec: &mut WebhookSpec) -> anyhow::Result<()> {
        if let Some(v) = &self.entity_type {
            spec.entity_type = v.clone();
        }
        if let Some(v) = &self.event {
            spec.event = v.clone();
        }
        if let Some(v) = &self.url {
            spec.request_url = v.clone();
        }
        if self.dynamic_url {
            spec.dynamic_url = true;
        }
        if let Some(v) = &self.method {
            spec.method = v.parse::<Method>().map_err(anyhow::Error::msg)?;
        }
        if let Some(v) = &self.structure {
            spec.structure = v.parse::<Structure>().map_err(anyhow::Error::msg)?;
        }
        if let Some(v) = &self.body_template {
            spec.body_template = Some(v.clone());
        }
        if let Some(path) = &self.body_template_file {
            spec.body_template = Some(read_file(path, "body template")?);
        }
        spec.fields.extend(parse_fields(&self.fields));
        spec.headers.extend(parse_headers(&self.headers));
        spec.allowed_hosts
            .extend(self.allowed_hosts.iter().map(|h| h.trim().to_string()));
        if let Some(v) = &self.condition {
            spec.condition = Some(v.clone());
        }
        if let Some(v) = &self.secret {
            spec.secret = Some(Secret::new(v.clone()));
        }
        if let Some(path) = &self.secret_file {
            let text = read_file(path, "secret")?;
            spec.secret = Some(Secret::new(
                text.lines().next().unwrap_or("").trim().to_string(),
            ));
        }
        if let Some(v) = &self.timeout {
            spec.timeout = parse_duration(v).map_err(|e| anyhow::anyhow!("--timeout: {e}"))?;
        }
        if let Some(v) = &self.queue {
            spec.queue = v.clone();
        }
        if let Some(v) = self.max_concurrency {
            spec.max_concurrency =
                Some(i32::try_from(v).unwrap_or(if v < 0 { -1 } else { i32::MAX }));
        }
        if let Some(v) = self.max_retries {
            spec.max_retries = i32::try_from(v).unwrap_or(if v < 0 { -1 } else { i32::MAX });
        }
        if let Some(v) = &self.rate_limit {
            spec.rate_limit = Some(
                hookfleet_admin::validate::parse_rate_limit(v)
                    .map_err(|e| anyhow::anyhow!("--rate-limit: {e}"))?,
            );
        }
        Ok(())
    }

    fn sample(&self, entity_type: &str) -> anyhow::Result<Value> {
        match &self.sample_doc {
            Some(path) => {
                let doc: Value = serde_json::from_str(&read_file(path, "sample document")?)
                    .with_context(|| format!("{path} is not JSON"))?;
                if !doc.is_object() {
                    bail!("the sample document is not a JSON object");
                }
                Ok(doc)
            }
            None => Ok(default_sample_doc(entity_type)),
        }
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

fn print_preview(p: &Preview) {
    let condition = match (&p.condition_error, p.meets_condition) {
        (Some(e), _) => format!("error: {e}"),
        (None, true) => "met".into(),
        (None, false) => "not met (no delivery)".into(),
    };
    println!("{:<10} {}", "condition", table::clean(&condition));
    match &p.url {
        Some(url) => println!("{:<10} {} {}", "request", p.method, table::clean(url)),
        None => println!("{:<10} {} (no URL)", "request", p.method),
    }
    for h in &p.headers {
        println!(
            "{:<10} {}: {}",
            "header",
            table::clean(&h.key),
            table::clean(&h.value)
        );
    }
    if let Some(e) = &p.error {
        println!("{:<10} {}", "error", table::clean(e));
    }
    if let Some(body) = &p.body {
        println!("body\n{}", table::clean_lines(body));
    }
}

pub async fn run(
    store: &Store,
    policy: &NetworkPolicy,
    command: WebhookCommand,
) -> anyhow::Result<()> {
    match command {
        WebhookCommand::Add {
            name,
            fields,
            disabled,
        } => {
            let (Some(entity_type), Some(event), Some(url)) =
                (&fields.entity_type, &fields.event, &fields.url)
            else {
                return Err(crate::Usage(
                    "webhook add needs --entity-type, --event and --url".into(),
                )
                .into());
            };
            let mut spec = WebhookSpec::new(&name, entity_type, event, url);
            spec.enabled = !disabled;
            fields.apply(&mut spec)?;
            let sample = fields.sample(&spec.entity_type)?;
            warn_unsealed(&spec);
            let w = definitions::add(store, policy, spec, sample).await?;
            println!(
                "added webhook {} ({} {} → {}){}",
                w.name,
                w.entity_type,
                w.event,
                w.request_url,
                if w.secret.is_some() { ", signed" } else { "" }
            );
        }
        WebhookCommand::List { json } => {
            let all = webhooks::list(store).await?;
            if json {
                let views: Vec<WebhookView> = all.iter().map(|w| w.view(false)).collect();
                println!("{}", serde_json::to_string_pretty(&views)?);
            } else {
                let rows: Vec<Vec<String>> = all
                    .iter()
                    .map(
                        |webhooks::WithHealth {
                             webhook: w,
                             health: h,
                         }| {
                            vec![
                                w.name.clone(),
                                w.entity_type.clone(),
                                w.event.clone(),
                                w.request_method.clone(),
                                table::clip(&w.request_url, 48),
                                if w.enabled { "yes" } else { "no" }.into(),
                                if w.paused_at.is_some() { "yes" } else { "no" }.into(),
                                if w.secret.is_some() { "yes" } else { "no" }.into(),
                                w.queue.clone(),
                                w.max_retries.to_string(),
                                h.attempts_24h.to_string(),
                                h.success_rate_24h.map_or("-".into(), percent),
                                h.p95_ms.map_or("-".into(), |n| format!("{n}ms")),
                                h.consecutive_failures.to_string(),
                            ]
                        },
                    )
                    .collect();
                table::print(
                    &[
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
                    ],
                    &rows,
                );
            }
        }
        WebhookCommand::Show {
            name,
            json,
            show_header_values,
        } => {
            let w = webhooks::show(store, &name).await?;
            let view = w.view(show_header_values);
            if json {
                println!("{}", serde_json::to_string_pretty(&view)?);
            } else {
                print_one(&view);
            }
        }
        WebhookCommand::Update {
            name,
            fields,
            rename,
            no_condition,
            no_secret,
            clear_headers,
            clear_fields,
            no_body_template,
            static_url,
            default_concurrency,
            no_rate_limit,
            clear_allowed_hosts,
        } => {
            let edit = move |spec: &mut WebhookSpec| {
                if clear_allowed_hosts {
                    spec.allowed_hosts.clear();
                }
                if clear_headers {
                    spec.headers.clear();
                }
                if clear_fields {
                    spec.fields.clear();
                }
                if no_body_template {
                    spec.body_template = None;
                }
                if no_condition {
                    spec.condition = None;
                }
                if default_concurrency {
                    spec.max_concurrency = None;
                }
                if no_rate_limit {
                    spec.rate_limit = None;
                }
                if no_secret {
                    spec.secret = None;
                }
                if static_url {
                    spec.dynamic_url = false;
                }
                fields.apply(spec)?;
                if let Some(new_name) = rename {
                    spec.name = new_name;
                }
                let sample = fields.sample(&spec.entity_type)?;
                warn_unsealed(spec);
                Ok::<_, anyhow::Error>((sample, no_secret))
            };
            let updated = definitions::update_with(store, policy, &name, edit).await?;
            let w = updated.webhook;
            let starts_rotation = updated.rotation_started;
            println!(
                "updated webhook {}{}",
                w.name,
                if starts_rotation {
                    " (secret rotation open: the previous secret also signs, and signs the \
                     Frappe header, until `webhook rotate-finish` or 24h)"
                } else {
                    ""
                }
            );
        }
        WebhookCommand::RotateFinish { name } => {
            let w = webhooks::rotate_finish(store, &name).await?;
            println!(
                "finished the secret rotation of webhook {}: only the new secret signs",
                w.name
            );
        }
        WebhookCommand::Enable { name } => {
            let w = webhooks::set_enabled(store, &name, true).await?;
            println!("enabled webhook {}", w.name);
        }
        WebhookCommand::Disable { name } => {
            let w = webhooks::set_enabled(store, &name, false).await?;
            println!("disabled webhook {}", w.name);
        }
        WebhookCommand::Pause { name, reason } => {
            let p = webhooks::pause(store, &name, &reason).await?;
            if p.already {
                println!(
                    "webhook {} was already paused ({})",
                    p.webhook.name,
                    p.webhook.paused_reason.as_deref().unwrap_or("-")
                );
            } else {
                println!(
                    "paused webhook {}: its events are recorded and wait; `hookfleet webhook resume {}` sends them",
                    p.webhook.name, p.webhook.name
                );
            }
        }
        WebhookCommand::Resume { .. } => bail!("resume needs Redis: call webhook::resume"),
        WebhookCommand::Delete { name } => {
            webhooks::delete(store, &name).await?;
            println!("deleted webhook {name}");
        }
        WebhookCommand::Preview { name, doc, json } => {
            let w = webhooks::get(store, &name).await?;
            let doc = if doc == "-" {
                read_document(std::io::stdin().lock(), "standard input")
            } else {
                let file = std::fs::File::open(&doc)
                    .with_context(|| format!("cannot open the document file {doc}"))?;
                read_document(file, &doc)
            }
            .map_err(anyhow::Error::msg)?;
            let preview = hookfleet_admin::preview::render(&w, &doc, policy);
            if json {
                println!("{}", serde_json::to_string_pretty(&preview)?);
            } else {
                print_preview(&preview);
            }
        }
        WebhookCommand::Import(args) => crate::import::run(store, policy, args).await?,
    }
    Ok(())
}

/// `webhook resume NAME` (see [`webhooks::resume`]).
pub async fn resume(
    store: &Store,
    queue: &hookfleet_core::queue::RedisQueue,
    key_ttl: std::time::Duration,
    name: &str,
) -> anyhow::Result<()> {
    let r = webhooks::resume(store, queue, key_ttl, name).await?;
    if !r.was_paused && r.released == 0 {
        println!("webhook {name} is not paused");
    } else {
        println!(
            "{} webhook {}: {} held rows released; {} due deliveries, {} enqueued now ({} already on their way or left to the sweeper)",
            if r.was_paused { "resumed" } else { "was not paused; released rows a resume left held for" },
            r.webhook,
            r.released,
            r.due,
            r.enqueued,
            r.due - r.enqueued
        );
    }
    if let Some(note) = &r.note {
        eprintln!("note: {note}");
    }
    Ok(())
}
