//! Frappe Webhook documents (as `bench export-fixtures` or the REST API
//! give them) read into webhook definitions: `hookfleet webhook import`.
//!
//! Every field of Frappe's Webhook doctype is mapped (see [`to_spec`]); a
//! document that would not run here the way it runs in Frappe is refused
//! with the reason rather than imported in part.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use hookfleet_core::domain::Secret;
use hookfleet_core::domain::{
    FieldMapping, Header, Method, Structure, Webhook, WebhookRow, WebhookSpec, DEFAULT_TIMEOUT,
};
use hookfleet_core::error::StoreError;
use hookfleet_core::request::NetworkPolicy;
use hookfleet_core::store::webhooks::{self, SecretChange, Upsert};
use hookfleet_core::store::Store;

use crate::error::OpsError;
use crate::preview::default_sample_doc;
use crate::validate::validate;

/// The largest import file read: a site's webhooks are a few kilobytes
/// each; a file this size is a mistake (or not a fixtures file).
pub const MAX_IMPORT_BYTES: usize = 16 * 1024 * 1024;

/// The most documents one import takes: a site with more webhooks than
/// this imports them in several files.
pub const MAX_IMPORT_DOCUMENTS: usize = 10_000;

/// Frappe's body when a webhook has neither a data table nor a JSON
/// template: `get_webhook_data` returns an empty dict, sent as `{}`.
const EMPTY_BODY: &str = "{}";

/// Reads the documents of an import file: one Webhook document, a list of
/// them (`bench export-fixtures`), or the REST API's `{"data": …}` /
/// `{"message": …}` wrappers around either.
pub fn documents(text: &str) -> Result<Vec<Value>, String> {
    if text.len() > MAX_IMPORT_BYTES {
        return Err(format!("the file is over {MAX_IMPORT_BYTES} bytes"));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let unwrapped = match value {
        Value::Object(mut o) if !o.contains_key("name") && o.len() == 1 => {
            match o.remove("data").or_else(|| o.remove("message")) {
                Some(inner) => inner,
                None => Value::Object(o),
            }
        }
        other => other,
    };
    let docs = match unwrapped {
        Value::Array(docs) => docs,
        doc @ Value::Object(_) => vec![doc],
        _ => return Err("expected a Webhook document (a JSON object) or a list of them".into()),
    };
    if docs.len() > MAX_IMPORT_DOCUMENTS {
        return Err(format!(
            "{} documents: one import takes at most {MAX_IMPORT_DOCUMENTS}",
            docs.len()
        ));
    }
    Ok(docs)
}

/// The name a document reports under (for a refusal, even of a document
/// that has no usable name).
fn document_name(doc: &Value, index: usize) -> String {
    match doc.get("name") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        _ => format!("document #{}", index + 1),
    }
}

/// What the secret of an imported webhook is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportedSecret {
    /// Unsigned (`enable_security` off).
    None,
    /// Signed with this secret.
    Given(Secret),
    /// Signed, but the document holds the mask Frappe shows instead of a
    /// password (`*****`): usable only for a webhook that already has its
    /// secret here.
    Masked,
}

/// A Frappe Webhook document mapped to a definition.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The definition; its `secret` is `None` here, see `secret`.
    pub spec: WebhookSpec,
    pub secret: ImportedSecret,
    /// What differs from the way Frappe would send it (said in the report).
    pub notes: Vec<String>,
}

/// A JSON value's type, for a refusal: never the value itself, which may be
/// a secret or a header value put in the wrong place.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The most of a field's text a refusal repeats.
const ECHO_CHARS: usize = 40;

/// A select value as a refusal repeats it: at most [`ECHO_CHARS`].
fn clip(text: &str) -> String {
    match text.char_indices().nth(ECHO_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

fn obj(doc: &Value) -> Result<&Map<String, Value>, String> {
    doc.as_object()
        .ok_or_else(|| "not a JSON object".to_string())
}

/// A text field: absent and null are `None`; another type is refused.
fn text<'a>(o: &'a Map<String, Value>, field: &str) -> Result<Option<&'a str>, String> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(other) => Err(format!("{field} is not text but {}", kind(other))),
    }
}

fn required<'a>(o: &'a Map<String, Value>, field: &str) -> Result<&'a str, String> {
    match text(o, field)? {
        Some(s) if !s.trim().is_empty() => Ok(s),
        _ => Err(format!("{field} is missing")),
    }
}

/// A Check field: 0/1, true/false, "0"/"1"; absent → `default`.
fn check(o: &Map<String, Value>, field: &str, default: bool) -> Result<bool, String> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::Number(n)) if n.as_i64() == Some(0) => Ok(false),
        Some(Value::Number(n)) if n.as_i64() == Some(1) => Ok(true),
        Some(Value::String(s)) if s == "0" => Ok(false),
        Some(Value::String(s)) if s == "1" => Ok(true),
        Some(other) => Err(format!(
            "{field} is not a check (0 or 1) but {}",
            kind(other)
        )),
    }
}

/// An Int field: a number or a string of digits; absent → `None`.
fn int(o: &Map<String, Value>, field: &str) -> Result<Option<i64>, String> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| format!("{field} is not a whole number")),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("{field} is not a whole number")),
        Some(other) => Err(format!("{field} is not a whole number but {}", kind(other))),
    }
}

/// The rows of a child table (`webhook_data`, `webhook_headers`).
fn rows<'a>(o: &'a Map<String, Value>, field: &str) -> Result<Vec<&'a Map<String, Value>>, String> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(rows)) => rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                r.as_object()
                    .ok_or_else(|| format!("{field} row {} is not an object", i + 1))
            })
            .collect(),
        Some(other) => Err(format!(
            "{field} is not a table (a list of rows) but {}",
            kind(other)
        )),
    }
}

/// True for the mask Frappe puts where a password is (`*****`).
fn is_masked(secret: &str) -> bool {
    !secret.is_empty() && secret.chars().all(|c| c == '*')
}

/// Maps one Frappe Webhook document to a definition (not yet validated:
/// the caller validates it as `webhook add` would).
///
/// - `name` → the webhook's name; `webhook_doctype` → entity type;
///   `webhook_docevent` → event; `request_url`, `is_dynamic_url`,
///   `request_method` (POST when empty), `condition`, `enabled`,
///   `timeout` (seconds; 0 or empty is Frappe's 5), `background_jobs_queue`
///   → queue (`default` when empty), `max_retries` where the site has it.
/// - The body, as Frappe's `get_webhook_data` makes it: the `webhook_data`
///   rows (`fieldname` → `key`) when the structure is Form URL-Encoded (or
///   empty and rows exist), else the `webhook_json` template, else `{}`.
///   Frappe sends both as JSON text (`json.dumps`), so both are JSON here.
/// - `webhook_headers` rows with a key and a value (Frappe skips the others).
/// - `enable_security` with `webhook_secret`: signed (Frappe's header and
///   Standard Webhooks'); a masked secret is [`ImportedSecret::Masked`].
pub fn to_spec(doc: &Value) -> Result<Imported, String> {
    let o = obj(doc)?;
    if let Some(doctype) = text(o, "doctype")? {
        if doctype != "Webhook" {
            return Err(format!("not a Webhook document but a {doctype:?}"));
        }
    }
    let name = required(o, "name")?;
    let entity_type = required(o, "webhook_doctype")?;
    let event = required(o, "webhook_docevent")?;
    let url = required(o, "request_url")?.trim();
    let mut spec = WebhookSpec::new(name, entity_type, event, url);
    let mut notes = Vec::new();
    // Sent as Frappe sends it: the same bytes to a receiver that compares
    // them (or a signature over them) with the site's own sender.
    spec.frappe_body = true;
    spec.dynamic_url = check(o, "is_dynamic_url", false)?;
    spec.method = match text(o, "request_method")?.map(str::trim) {
        None | Some("") => Method::Post,
        Some(m) => m
            .parse::<Method>()
            .map_err(|_| format!("request_method {:?} is not POST, PUT or DELETE", clip(m)))?,
    };
    let structure = text(o, "request_structure")?.unwrap_or("").trim();
    let data_rows = rows(o, "webhook_data")?;
    let template = text(o, "webhook_json")?.filter(|t| !t.trim().is_empty());
    let use_rows = match structure {
        "Form URL-Encoded" => true,
        "JSON" => false,
        "" => !data_rows.is_empty(),
        other => {
            return Err(format!(
                "request_structure {:?} is neither \"Form URL-Encoded\" nor \"JSON\"",
                clip(other)
            ))
        }
    };
    spec.structure = Structure::Json;
    if use_rows && !data_rows.is_empty() {
        for (i, row) in data_rows.iter().enumerate() {
            let field = required(row, "fieldname")
                .map_err(|e| format!("webhook_data row {}: {e}", i + 1))?;
            let key = text(row, "key")?
                .filter(|k| !k.trim().is_empty())
                .unwrap_or(field);
            let mapping = FieldMapping {
                field: field.trim().to_string(),
                key: key.trim().to_string(),
            };
            // Frappe builds a dict: a key given again keeps its place and
            // takes the later row's field.
            match spec.fields.iter_mut().find(|f| f.key == mapping.key) {
                Some(earlier) => {
                    notes.push(format!(
                        "webhook_data key {:?} is given twice: the later row's field {:?} is sent, as Frappe sends it",
                        clip(&mapping.key),
                        clip(&mapping.field)
                    ));
                    *earlier = mapping;
                }
                None => spec.fields.push(mapping),
            }
        }
        if structure == "Form URL-Encoded" {
            notes.push(
                "Form URL-Encoded: sent as a JSON object of the selected fields, \
                 as Frappe sends it"
                    .into(),
            );
        }
    } else if let (false, Some(t)) = (use_rows, template) {
        spec.body_template = Some(t.to_string());
    } else {
        spec.body_template = Some(EMPTY_BODY.into());
        notes.push("no data rows and no JSON template: the body is {}, as Frappe sends it".into());
    }
    for (i, row) in rows(o, "webhook_headers")?.into_iter().enumerate() {
        let key = text(row, "key").map_err(|e| format!("webhook_headers row {}: {e}", i + 1))?;
        let value =
            text(row, "value").map_err(|e| format!("webhook_headers row {}: {e}", i + 1))?;
        if let (Some(key), Some(value)) = (key, value) {
            if !key.trim().is_empty() && !value.is_empty() {
                let header = Header {
                    key: key.trim().to_string(),
                    value: value.to_string(),
                };
                // A dict in Frappe too: the later value of a header wins.
                match spec
                    .headers
                    .iter_mut()
                    .find(|h| h.key.eq_ignore_ascii_case(&header.key))
                {
                    Some(earlier) => {
                        notes.push(format!(
                            "header {:?} is given twice: the later value is sent, as Frappe sends it",
                            clip(&header.key)
                        ));
                        *earlier = header;
                    }
                    None => spec.headers.push(header),
                }
            }
        }
    }
    spec.condition = text(o, "condition")?
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string);
    spec.enabled = check(o, "enabled", true)?;
    spec.timeout = match int(o, "timeout")? {
        None | Some(0) => DEFAULT_TIMEOUT,
        Some(s) if s < 0 => return Err(format!("timeout {s} is negative")),
        Some(s) => Duration::from_secs(s.unsigned_abs()),
    };
    if let Some(queue) = text(o, "background_jobs_queue")?.map(str::trim) {
        if !queue.is_empty() {
            spec.queue = queue.to_string();
        }
    }
    if let Some(n) = int(o, "max_retries")? {
        spec.max_retries =
            i32::try_from(n).map_err(|_| format!("max_retries {n} is out of range"))?;
    }
    let secret = if check(o, "enable_security", false)? {
        match text(o, "webhook_secret")? {
            None | Some("") => {
                return Err("enable_security is on but webhook_secret is empty".into())
            }
            Some(s) if is_masked(s) => ImportedSecret::Masked,
            Some(s) => ImportedSecret::Given(Secret::new(s)),
        }
    } else {
        ImportedSecret::None
    };
    Ok(Imported {
        spec,
        secret,
        notes,
    })
}

// The import itself: documents planned against what is stored, then
// written (each on its own, or all in one transaction).

/// What happened to one document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Created,
    Updated,
    Unchanged,
    WouldCreate,
    WouldUpdate,
    /// Valid, but not written: another document was refused under `atomic`.
    Skipped,
    Refused,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Updated => "updated",
            Action::Unchanged => "unchanged",
            Action::WouldCreate => "would create",
            Action::WouldUpdate => "would update",
            Action::Skipped => "skipped",
            Action::Refused => "refused",
        }
    }
}

/// One line of the report.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Outcome {
    pub name: String,
    pub action: Action,
    /// Why it was refused.
    #[schema(required)]
    pub reason: Option<String>,
    /// What differs from the way Frappe sends it.
    pub notes: Vec<String>,
}

/// A document ready to write.
struct Plan {
    spec: WebhookSpec,
    change: SecretChange,
    exists: bool,
    /// The stored webhook is this definition already.
    unchanged: bool,
}

/// Maps and validates one document against what is stored.
fn plan(
    store: &Store,
    policy: &NetworkPolicy,
    doc: &serde_json::Value,
) -> Result<(Plan, Vec<String>), String> {
    let imported = to_spec(doc)?;
    let mut spec = imported.spec;
    let current: Option<Webhook> = match store.run_sync(|c| webhooks::get(c, &spec.name)) {
        Ok(w) => Some(w),
        Err(StoreError::NotFound(_)) => None,
        Err(e) => return Err(e.to_string()),
    };
    let current_spec = current
        .as_ref()
        .map(|w| w.to_spec().map_err(|e| e.to_string()))
        .transpose()?;
    let mut notes = imported.notes;
    // What Frappe has no field for stays as the operator set it here.
    if let Some(current) = &current_spec {
        spec.max_concurrency = current.max_concurrency;
        spec.rate_limit = current.rate_limit;
        if spec.dynamic_url {
            spec.allowed_hosts = current.allowed_hosts.clone();
        }
        if doc
            .get("max_retries")
            .is_none_or(serde_json::Value::is_null)
        {
            spec.max_retries = current.max_retries;
        }
    }
    if spec.queue != "default" {
        notes.push(format!(
            "its deliveries go to the queue {:?}: a worker must read it (--queues)",
            spec.queue
        ));
    }
    let stored_secret = current_spec.as_ref().and_then(|c| c.secret.clone());
    let change = match imported.secret {
        ImportedSecret::None => {
            spec.secret = None;
            SecretChange::Remove
        }
        ImportedSecret::Given(s) => {
            spec.secret = Some(s.clone());
            match stored_secret {
                Some(old) if old != s => {
                    notes.push(
                        "the secret changed: the new one signs from now on, with no overlap \
                         (as in Frappe)"
                            .into(),
                    );
                    SecretChange::Replace(s)
                }
                Some(_) => SecretChange::Keep,
                None => SecretChange::Set(s),
            }
        }
        ImportedSecret::Masked => match stored_secret {
            Some(kept) => {
                spec.secret = Some(kept);
                SecretChange::Keep
            }
            None => {
                return Err("webhook_secret is masked (*****): Frappe never exports a \
                            password; put the secret in the file and import again"
                    .into())
            }
        },
    };
    validate(&spec, policy, &default_sample_doc(&spec.entity_type)).map_err(|e| e.to_string())?;
    Ok((
        Plan {
            unchanged: current_spec.as_ref() == Some(&spec),
            exists: current.is_some(),
            spec,
            change,
        },
        notes,
    ))
}

impl Plan {
    fn upsert<'a>(&self, row: &'a WebhookRow) -> Upsert<'a> {
        Upsert {
            row,
            secret: self.change.clone(),
            exists: self.exists,
        }
    }

    fn written(&self) -> Action {
        if self.exists {
            Action::Updated
        } else {
            Action::Created
        }
    }
}

/// Writes the plans: each on its own, or (`atomic`) all in one transaction
/// that a failure rolls back whole.
fn write_all(store: &Store, plans: &[&Plan], atomic: bool) -> Vec<Result<Action, String>> {
    let rows: Vec<WebhookRow> = plans.iter().map(|p| WebhookRow::from(&p.spec)).collect();
    if !atomic {
        return plans
            .iter()
            .zip(&rows)
            .map(|(p, row)| {
                store
                    .run_sync(|c| webhooks::upsert(c, &p.upsert(row)))
                    .map(|_| p.written())
                    .map_err(|e| e.to_string())
            })
            .collect();
    }
    let items: Vec<Upsert> = plans
        .iter()
        .zip(&rows)
        .map(|(p, row)| p.upsert(row))
        .collect();
    match store.run_sync(|c| webhooks::upsert_all(c, &items)) {
        Ok(_) => plans.iter().map(|p| Ok(p.written())).collect(),
        Err(e) => {
            let reason = format!("nothing was written (atomic): {e}");
            plans.iter().map(|_| Err(reason.clone())).collect()
        }
    }
}

/// What an import did, document by document, and whether it held back
/// every write (`atomic`, and a document was refused).
#[derive(Debug, Serialize)]
pub struct Report {
    pub outcomes: Vec<Outcome>,
    pub held_back: bool,
}

impl Report {
    pub fn refused(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.action == Action::Refused)
            .count()
    }
}

/// `webhook import`: maps each document ([`to_spec`]), validates it as
/// `webhook add` does against what is stored, and (unless `dry_run`)
/// creates or updates it under its Frappe name; one refused document does
/// not stop the others unless `atomic`. Runs on a blocking thread (the
/// templates render in the renderer processes).
pub async fn import(
    store: &Store,
    policy: &NetworkPolicy,
    docs: Vec<Value>,
    dry_run: bool,
    atomic: bool,
) -> Result<Report, OpsError> {
    import_with_progress(store, policy, docs, dry_run, atomic, |_, _| {}).await
}

/// [`import`], calling `checked(done, of)` after each document is checked
/// (the slow part: its templates are tried in the renderers), for a
/// command to show how far it got.
pub async fn import_with_progress(
    store: &Store,
    policy: &NetworkPolicy,
    docs: Vec<Value>,
    dry_run: bool,
    atomic: bool,
    checked: impl Fn(usize, usize) + Send + 'static,
) -> Result<Report, OpsError> {
    let (store, policy) = (store.clone(), policy.clone());
    // The documents are planned (validated, their templates tried) on a
    // blocking thread that dropping this future would not stop: a caller
    // that leaves (a console request cut short) stops the planning between
    // two documents, and nothing is written.
    let left = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let _caller = CallerGone(left.clone());
    Ok(tokio::task::spawn_blocking(move || {
        let gone = || left.load(std::sync::atomic::Ordering::Relaxed);
        import_blocking(&store, &policy, &docs, dry_run, atomic, &gone, &checked)
    })
    .await?)
}

/// Says the caller has gone when the future holding it is dropped.
struct CallerGone(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for CallerGone {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// [`import`] on the calling thread.
fn import_blocking(
    store: &Store,
    policy: &NetworkPolicy,
    docs: &[Value],
    dry_run: bool,
    atomic: bool,
    caller_gone: &dyn Fn() -> bool,
    checked: &dyn Fn(usize, usize),
) -> Report {
    let mut outcomes = Vec::with_capacity(docs.len());
    let mut plans = Vec::with_capacity(docs.len());
    let mut seen = std::collections::HashSet::new();
    for (i, doc) in docs.iter().enumerate() {
        if caller_gone() {
            // Nobody reads the report; nothing is written.
            return Report {
                outcomes,
                held_back: true,
            };
        }
        let name = document_name(doc, i);
        // A name given twice in one file would be created, then updated by
        // the second: the later ones are refused, whatever became of the
        // first.
        let planned = if seen.insert(name.clone()) {
            plan(store, policy, doc)
        } else {
            Err("the file holds another document of this name".into())
        };
        match planned {
            Ok((p, notes)) => {
                outcomes.push(Outcome {
                    name,
                    action: Action::Unchanged,
                    reason: None,
                    notes,
                });
                plans.push(Some(p));
            }
            Err(reason) => {
                outcomes.push(Outcome {
                    name,
                    action: Action::Refused,
                    reason: Some(reason),
                    notes: Vec::new(),
                });
                plans.push(None);
            }
        }
        checked(i + 1, docs.len());
    }
    let refused = outcomes
        .iter()
        .filter(|o| o.action == Action::Refused)
        .count();
    let hold_back = atomic && refused > 0;
    let mut to_write = Vec::new();
    for (i, (outcome, plan)) in outcomes.iter_mut().zip(&plans).enumerate() {
        let Some(plan) = plan else { continue };
        outcome.action = match (plan.unchanged, hold_back, dry_run, plan.exists) {
            (true, ..) => Action::Unchanged,
            (false, true, ..) => Action::Skipped,
            (false, false, true, true) => Action::WouldUpdate,
            (false, false, true, false) => Action::WouldCreate,
            (false, false, false, _) => {
                to_write.push((i, plan));
                continue;
            }
        };
    }
    let (indexes, writes): (Vec<usize>, Vec<&Plan>) = to_write.into_iter().unzip();
    for (i, result) in indexes.into_iter().zip(write_all(store, &writes, atomic)) {
        match result {
            Ok(action) => outcomes[i].action = action,
            Err(reason) => {
                outcomes[i].action = Action::Refused;
                outcomes[i].reason = Some(reason);
            }
        }
    }
    Report {
        outcomes,
        held_back: hold_back,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({
            "doctype": "Webhook",
            "name": "Orders to ERP",
            "webhook_doctype": "Sales Order",
            "webhook_docevent": "on_submit",
            "request_url": "https://erp.example/hook",
            "request_structure": "JSON",
            "webhook_json": "{\"name\": \"{{ doc.name }}\"}",
        })
    }

    #[test]
    fn a_json_webhook_maps_field_by_field() {
        let mut doc = base();
        doc["condition"] = json!("doc.status == 'Approved'");
        doc["timeout"] = json!(9);
        doc["enabled"] = json!(0);
        doc["background_jobs_queue"] = json!("long");
        doc["webhook_headers"] = json!([
            {"key": "Authorization", "value": "token x"},
            {"key": "X-Empty", "value": ""},
        ]);
        let i = to_spec(&doc).unwrap();
        assert_eq!(i.spec.name, "Orders to ERP");
        assert_eq!(i.spec.entity_type, "Sales Order");
        assert_eq!(i.spec.event, "on_submit");
        assert_eq!(
            i.spec.body_template.as_deref(),
            Some("{\"name\": \"{{ doc.name }}\"}")
        );
        assert_eq!(
            i.spec.condition.as_deref(),
            Some("doc.status == 'Approved'")
        );
        assert_eq!(i.spec.timeout, Duration::from_secs(9));
        assert!(!i.spec.enabled);
        assert_eq!(i.spec.queue, "long");
        assert_eq!(
            i.spec.headers.len(),
            1,
            "Frappe skips a header without a value"
        );
        assert_eq!(i.secret, ImportedSecret::None);
    }

    #[test]
    fn form_rows_become_a_json_field_selection() {
        let mut doc = base();
        doc["request_structure"] = json!("Form URL-Encoded");
        doc["webhook_data"] = json!([
            {"fieldname": "name", "key": "id"},
            {"fieldname": "grand_total", "key": ""},
        ]);
        let i = to_spec(&doc).unwrap();
        assert_eq!(i.spec.structure, Structure::Json);
        assert_eq!(i.spec.body_template, None);
        assert_eq!(
            i.spec.fields,
            vec![
                FieldMapping {
                    field: "name".into(),
                    key: "id".into()
                },
                FieldMapping {
                    field: "grand_total".into(),
                    key: "grand_total".into()
                },
            ]
        );
    }

    #[test]
    fn a_key_given_twice_keeps_its_place_and_the_later_row_as_in_frappe() {
        let mut doc = base();
        doc["request_structure"] = json!("Form URL-Encoded");
        doc["webhook_data"] = json!([
            {"fieldname": "customer", "key": "party"},
            {"fieldname": "name", "key": "id"},
            {"fieldname": "customer_name", "key": "party"},
        ]);
        doc["webhook_headers"] = json!([
            {"key": "X-Tenant", "value": "a"},
            {"key": "x-tenant", "value": "b"},
        ]);
        let i = to_spec(&doc).unwrap();
        let fields: Vec<(&str, &str)> = i
            .spec
            .fields
            .iter()
            .map(|f| (f.key.as_str(), f.field.as_str()))
            .collect();
        assert_eq!(fields, [("party", "customer_name"), ("id", "name")]);
        assert_eq!(i.spec.headers.len(), 1);
        assert_eq!(i.spec.headers[0].value, "b");
        assert!(
            i.notes
                .iter()
                .any(|n| n.contains("\"party\" is given twice")),
            "{:?}",
            i.notes
        );
        assert!(i.spec.frappe_body, "an import sends Frappe's bytes");
    }

    #[test]
    fn no_body_at_all_is_an_empty_object_as_in_frappe() {
        let mut doc = base();
        doc["request_structure"] = json!("");
        doc["webhook_json"] = json!(null);
        assert_eq!(
            to_spec(&doc).unwrap().spec.body_template.as_deref(),
            Some("{}")
        );
    }

    #[test]
    fn secrets_given_masked_and_missing() {
        let mut doc = base();
        doc["enable_security"] = json!(1);
        doc["webhook_secret"] = json!("s3cret");
        assert_eq!(
            to_spec(&doc).unwrap().secret,
            ImportedSecret::Given(Secret::new("s3cret"))
        );
        doc["webhook_secret"] = json!("*****");
        assert_eq!(to_spec(&doc).unwrap().secret, ImportedSecret::Masked);
        doc["webhook_secret"] = json!("");
        assert!(to_spec(&doc)
            .unwrap_err()
            .contains("webhook_secret is empty"));
    }

    #[test]
    fn broken_documents_are_refused_with_the_field_named() {
        let mut doc = base();
        doc.as_object_mut().unwrap().remove("request_url");
        assert_eq!(to_spec(&doc).unwrap_err(), "request_url is missing");
        let mut doc = base();
        doc["doctype"] = json!("Sales Order");
        assert!(to_spec(&doc)
            .unwrap_err()
            .contains("not a Webhook document"));
        let mut doc = base();
        doc["request_structure"] = json!("XML");
        assert!(to_spec(&doc).unwrap_err().contains("\"XML\""));
        let mut doc = base();
        doc["enabled"] = json!("yes");
        assert!(to_spec(&doc)
            .unwrap_err()
            .contains("enabled is not a check"));
        let mut doc = base();
        doc["request_method"] = json!("TRACE");
        assert!(to_spec(&doc).is_err());
    }

    #[test]
    fn refusals_never_repeat_a_value() {
        let mut doc = base();
        doc["enable_security"] = json!(1);
        doc["webhook_secret"] = json!(1234567890123_u64);
        let e = to_spec(&doc).unwrap_err();
        assert!(
            !e.contains("1234567890123") && e.contains("a number"),
            "{e}"
        );
        let mut doc = base();
        doc["webhook_headers"] = json!([{"key": "Authorization", "value": ["Bearer sk_live"]}]);
        let e = to_spec(&doc).unwrap_err();
        assert!(!e.contains("sk_live") && e.contains("a list"), "{e}");
        let mut doc = base();
        doc["request_structure"] = json!("x".repeat(10_000));
        assert!(to_spec(&doc).unwrap_err().len() < 200);
    }

    #[test]
    fn files_hold_one_a_list_or_a_wrapped_document() {
        assert_eq!(documents(&base().to_string()).unwrap().len(), 1);
        assert_eq!(
            documents(&json!([base(), base()]).to_string())
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            documents(&json!({"data": base()}).to_string())
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            documents(&json!({"message": [base()]}).to_string())
                .unwrap()
                .len(),
            1
        );
        assert!(documents("42").is_err());
        assert!(documents("{").unwrap_err().starts_with("not JSON"));
        let many = Value::Array(vec![json!({}); MAX_IMPORT_DOCUMENTS + 1]);
        assert!(documents(&many.to_string())
            .unwrap_err()
            .contains("at most"));
        assert!(documents(&" ".repeat(MAX_IMPORT_BYTES + 1))
            .unwrap_err()
            .contains("over"));
    }
}
