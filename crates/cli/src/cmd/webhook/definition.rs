//! The definition flags `webhook add` and `webhook update` share, and how
//! they change a [`WebhookSpec`]: files are read and values parsed here;
//! what a definition must satisfy is `hookfleet_admin`'s to check.

use anyhow::{bail, Context};
use clap::Args;
use serde_json::Value;

use hookfleet_admin::preview::default_sample_doc;
use hookfleet_admin::validate::parse_rate_limit;
use hookfleet_core::domain::parse_duration;
use hookfleet_core::domain::Secret;
use hookfleet_core::domain::{FieldMapping, Header, Method, Structure, WebhookSpec};

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
    /// Send the body as Frappe sends it: values inside the template's
    /// quotes as Python writes them (None, True, ['a']), and the JSON as
    /// Python's json.dumps writes it (", ", \uXXXX); webhook import sets it.
    #[arg(long)]
    frappe_body: bool,
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
    /// A JSON document to try the templates on; any failure on it is
    /// refused (default: a document with only doctype and name, where
    /// missing fields render as null and a template that fails for want of
    /// a value still passes, as in Frappe).
    #[arg(long, value_name = "FILE")]
    sample_doc: Option<String>,
}

impl Definition {
    /// The flags add requires (entity type, event and URL), if given.
    pub fn required(&self) -> Option<(&str, &str, &str)> {
        match (&self.entity_type, &self.event, &self.url) {
            (Some(entity_type), Some(event), Some(url)) => Some((entity_type, event, url)),
            _ => None,
        }
    }

    /// Applies the flags given to `spec`.
    pub fn apply(&self, spec: &mut WebhookSpec) -> anyhow::Result<()> {
        self.apply_request(spec)?;
        self.apply_secret(spec)?;
        self.apply_limits(spec)
    }

    /// What is sent where: the document's type and event, the URL, the
    /// method, the body and the headers, the condition.
    fn apply_request(&self, spec: &mut WebhookSpec) -> anyhow::Result<()> {
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
        if self.frappe_body {
            spec.frappe_body = true;
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
        Ok(())
    }

    /// The signing secret, given or read from its file's first line.
    fn apply_secret(&self, spec: &mut WebhookSpec) -> anyhow::Result<()> {
        if let Some(v) = &self.secret {
            spec.secret = Some(Secret::new(v.clone()));
        }
        if let Some(path) = &self.secret_file {
            let text = read_file(path, "secret")?;
            spec.secret = Some(Secret::new(
                text.lines().next().unwrap_or("").trim().to_string(),
            ));
        }
        Ok(())
    }

    /// The timeout, the queue, the retries, the concurrency and the rate
    /// limit. A number beyond `i32` is kept beyond every bound, for
    /// validation to refuse with the bound's message.
    fn apply_limits(&self, spec: &mut WebhookSpec) -> anyhow::Result<()> {
        let clamp = |v: i64| i32::try_from(v).unwrap_or(if v < 0 { -1 } else { i32::MAX });
        if let Some(v) = &self.timeout {
            spec.timeout = parse_duration(v).map_err(|e| anyhow::anyhow!("--timeout: {e}"))?;
        }
        if let Some(v) = &self.queue {
            spec.queue = v.clone();
        }
        if let Some(v) = self.max_concurrency {
            spec.max_concurrency = Some(clamp(v));
        }
        if let Some(v) = self.max_retries {
            spec.max_retries = clamp(v);
        }
        if let Some(v) = &self.rate_limit {
            spec.rate_limit =
                Some(parse_rate_limit(v).map_err(|e| anyhow::anyhow!("--rate-limit: {e}"))?);
        }
        Ok(())
    }

    /// The document the templates are tried on: `--sample-doc`, else a
    /// document with only doctype and name.
    pub fn sample(&self, entity_type: &str) -> anyhow::Result<Value> {
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

/// Says, once, that what is about to be stored holds credentials that will
/// not be sealed (no key is configured).
pub fn warn_unsealed(spec: &WebhookSpec) {
    let credentials = spec.secret.is_some() || !spec.headers.is_empty();
    if credentials && !hookfleet_core::domain::at_rest::keyring().seals() {
        eprintln!(
            "warning: no HOOKFLEET_SECRET_KEY: the secret and header values are stored unencrypted"
        );
    }
}

impl Definition {
    /// Whether --event was given (an update that does not change the event
    /// says nothing about it).
    pub fn names_an_event(&self) -> bool {
        self.event.is_some()
    }
}

/// Says when the event looks like a misspelt Frappe event: any event name
/// is accepted (an application may emit its own), but one nothing emits
/// would never deliver.
pub fn warn_unknown_event(spec: &WebhookSpec) {
    if let Some(meant) = hookfleet_admin::validate::likely_meant_event(&spec.event) {
        eprintln!(
            "warning: event \"{}\" is not one of Frappe's; did you mean \"{meant}\"? (any event is accepted, and only events emitted with this name are delivered)",
            hookfleet_core::domain::shown_on_one_line(&spec.event)
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
