//! Webhook definitions written by the operator's surfaces: the CLI builds a
//! [`WebhookSpec`] from flags, the management API from JSON
//! ([`apply_json`]); both store it through [`add`] and [`update`], which
//! validate first, so nothing refused is ever written.

use serde_json::{Map, Value};

use diesel::{Connection, PgConnection};

use hookfleet_core::config::parse_duration;
use hookfleet_core::error::{Refusal, StoreError};
use hookfleet_core::model::{
    FieldMapping, Header, Method, Structure, Webhook, WebhookRow, WebhookSpec,
};
use hookfleet_core::sign::Secret;
use hookfleet_core::ssrf::NetworkPolicy;
use hookfleet_core::store::webhooks::{self, SecretChange};

use crate::error::ValidationError;
use crate::validate::{parse_rate_limit, validate};

/// Why a definition was not stored.
#[derive(Debug, thiserror::Error)]
pub enum DefinitionError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Validates `spec` on `sample` and stores it as a new webhook.
pub fn add(
    conn: &mut PgConnection,
    policy: &NetworkPolicy,
    spec: &WebhookSpec,
    sample: &Value,
) -> Result<Webhook, DefinitionError> {
    validate(spec, policy, sample)?;
    Ok(webhooks::insert(conn, &WebhookRow::from(spec))?)
}

/// A stored change.
pub struct Updated {
    pub webhook: Webhook,
    /// A new secret replaced one that still signs until `rotate-finish` or
    /// a day has passed.
    pub rotation_started: bool,
}

/// Validates `spec` (the webhook `name`'s definition as changed) on
/// `sample` and stores it. `was`: the secret before the change; with
/// `remove_secret` the webhook stops signing.
pub fn update(
    conn: &mut PgConnection,
    policy: &NetworkPolicy,
    name: &str,
    spec: &WebhookSpec,
    was: Option<&Secret>,
    remove_secret: bool,
    sample: &Value,
) -> Result<Updated, DefinitionError> {
    validate(spec, policy, sample)?;
    let change = if remove_secret {
        SecretChange::Remove
    } else {
        match (&spec.secret, was) {
            (Some(new), Some(old)) if new.expose() == old.expose() => SecretChange::Keep,
            (Some(new), _) => SecretChange::Set(new.clone()),
            (None, _) => SecretChange::Keep,
        }
    };
    let replaces = matches!(change, SecretChange::Set(_)) && was.is_some();
    let webhook = webhooks::update(conn, name, &WebhookRow::from(spec), change)?;
    Ok(Updated {
        rotation_started: replaces && webhook.rotating(chrono::Utc::now()),
        webhook,
    })
}

/// `update` as one read-modify-write: the stored definition is read under
/// a row lock, `edit` changes it (and returns the sample document to
/// validate on and whether the secret goes), and the result is validated
/// and stored in the same transaction, so two changes made at once (an
/// edit and a disable, two edits) never undo each other.
pub fn update_with(
    conn: &mut PgConnection,
    policy: &NetworkPolicy,
    name: &str,
    edit: impl FnOnce(&mut WebhookSpec) -> Result<(Value, bool), ValidationError>,
) -> Result<Updated, DefinitionError> {
    conn.transaction(|conn| {
        let current = webhooks::get_for_update(conn, name)?;
        let mut spec = current.to_spec().map_err(|e| {
            StoreError::Refused(Refusal::Unsealable(name.to_string(), e.to_string()))
        })?;
        let was = spec.secret.clone();
        let (sample, remove_secret) = edit(&mut spec)?;
        update(
            conn,
            policy,
            name,
            &spec,
            was.as_ref(),
            remove_secret,
            &sample,
        )
    })
}

impl From<diesel::result::Error> for DefinitionError {
    fn from(e: diesel::result::Error) -> DefinitionError {
        DefinitionError::Store(e.into())
    }
}

pub use hookfleet_core::model::HIDDEN;

/// The keys [`apply_json`] takes.
pub const JSON_KEYS: &[&str] = &[
    "name",
    "entity_type",
    "event",
    "url",
    "dynamic_url",
    "allowed_hosts",
    "method",
    "structure",
    "body_template",
    "fields",
    "headers",
    "condition",
    "secret",
    "timeout",
    "queue",
    "max_retries",
    "max_concurrency",
    "rate_limit",
    "enabled",
    "sample_doc",
];

/// Applies a JSON definition to `spec`: each key given replaces that part
/// (lists whole; a header whose value is [`HIDDEN`] keeps its stored
/// value), `null` clears what may be absent (body_template,
/// condition, secret, max_concurrency, rate_limit). Returns the sample
/// document to validate on (`sample_doc`, if given) and whether the secret
/// was cleared. Unknown keys and wrong types are refused with the key's
/// name.
pub fn apply_json(
    spec: &mut WebhookSpec,
    body: &Map<String, Value>,
) -> Result<(Option<Value>, bool), ValidationError> {
    let bad = |key: &str, what: &str| ValidationError(format!("{key}: {what}"));
    let text = |key: &str, v: &Value| -> Result<String, ValidationError> {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| bad(key, "a string"))
    };
    let int = |key: &str, v: &Value| -> Result<i32, ValidationError> {
        v.as_i64()
            .map(|n| i32::try_from(n).unwrap_or(if n < 0 { -1 } else { i32::MAX }))
            .ok_or_else(|| bad(key, "an integer"))
    };
    let mut sample = None;
    let mut secret_cleared = false;
    for (key, v) in body {
        match key.as_str() {
            "name" => spec.name = text(key, v)?,
            "entity_type" => spec.entity_type = text(key, v)?,
            "event" => spec.event = text(key, v)?,
            "url" => spec.request_url = text(key, v)?,
            "dynamic_url" => {
                spec.dynamic_url = v.as_bool().ok_or_else(|| bad(key, "true or false"))?
            }
            "enabled" => spec.enabled = v.as_bool().ok_or_else(|| bad(key, "true or false"))?,
            "method" => spec.method = text(key, v)?.parse::<Method>().map_err(|e| bad(key, &e))?,
            "structure" => {
                spec.structure = text(key, v)?
                    .parse::<Structure>()
                    .map_err(|e| bad(key, &e))?
            }
            "body_template" => spec.body_template = nullable(key, v, text)?,
            "condition" => spec.condition = nullable(key, v, text)?,
            "secret" => {
                spec.secret = nullable(key, v, text)?.map(Secret::new);
                secret_cleared = spec.secret.is_none();
            }
            "timeout" => {
                spec.timeout =
                    parse_duration(&text(key, v)?).map_err(|e| bad(key, &e.to_string()))?
            }
            "queue" => spec.queue = text(key, v)?,
            "max_retries" => spec.max_retries = int(key, v)?,
            "max_concurrency" => spec.max_concurrency = nullable(key, v, int)?,
            "rate_limit" => {
                spec.rate_limit = nullable(key, v, text)?
                    .map(|r| parse_rate_limit(&r))
                    .transpose()
                    .map_err(|e| bad(key, &e.to_string()))?
            }
            "allowed_hosts" => {
                spec.allowed_hosts = list(key, v)?
                    .iter()
                    .map(|h| text(key, h).map(|h| h.trim().to_string()))
                    .collect::<Result<_, _>>()?
            }
            "fields" => {
                spec.fields = list(key, v)?
                    .iter()
                    .map(|f| {
                        let field = f
                            .get("field")
                            .map(|x| text("fields[].field", x))
                            .transpose()?;
                        let field =
                            field.ok_or_else(|| bad(key, "objects with a field (and a key)"))?;
                        let key_name = match f.get("key") {
                            Some(k) => text("fields[].key", k)?,
                            None => field.clone(),
                        };
                        Ok(FieldMapping {
                            field,
                            key: key_name,
                        })
                    })
                    .collect::<Result<_, ValidationError>>()?
            }
            "headers" => {
                // Header values are shown as [hidden]: a definition read and
                // sent back keeps the stored value of a header so shown.
                let stored = std::mem::take(&mut spec.headers);
                spec.headers = list(key, v)?
                    .iter()
                    .map(|h| {
                        let get = |k: &str| {
                            h.get(k)
                                .map(|x| text(&format!("headers[].{k}"), x))
                                .transpose()
                        };
                        match (get("key")?, get("value")?) {
                            (Some(key), Some(value)) if value == HIDDEN => stored
                                .iter()
                                .find(|s| s.key.eq_ignore_ascii_case(&key))
                                .map(|s| Header {
                                    key: key.clone(),
                                    value: s.value.clone(),
                                })
                                .ok_or_else(|| {
                                    bad(
                                        "headers",
                                        &format!("{key}: {HIDDEN} keeps a stored value, and none is stored"),
                                    )
                                }),
                            (Some(key), Some(value)) => Ok(Header { key, value }),
                            _ => Err(bad("headers", "objects with a key and a value")),
                        }
                    })
                    .collect::<Result<_, ValidationError>>()?
            }
            "sample_doc" => {
                if !v.is_object() {
                    return Err(bad(key, "a JSON object"));
                }
                sample = Some(v.clone());
            }
            other => {
                return Err(ValidationError(format!(
                    "unknown key {other:?} (known: {})",
                    JSON_KEYS.join(", ")
                )))
            }
        }
    }
    Ok((sample, secret_cleared))
}

/// `null` as None, else the value read by `read`.
fn nullable<T>(
    key: &str,
    v: &Value,
    read: impl Fn(&str, &Value) -> Result<T, ValidationError>,
) -> Result<Option<T>, ValidationError> {
    if v.is_null() {
        Ok(None)
    } else {
        read(key, v).map(Some)
    }
}

fn list<'a>(key: &str, v: &'a Value) -> Result<&'a Vec<Value>, ValidationError> {
    v.as_array()
        .ok_or_else(|| ValidationError(format!("{key}: a list")))
}
