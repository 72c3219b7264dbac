//! Webhook definitions written by the operator's surfaces: the CLI builds a
//! [`WebhookSpec`] from flags ([`add`], [`update_with`]), the management
//! API from JSON ([`add_json`], [`update_json`], through [`apply_json`]).
//! Every definition is validated before it is stored, in the transaction
//! that stores it, so nothing refused is ever written.

use serde_json::{Map, Value};

use diesel::{Connection, PgConnection};

use hookfleet_core::domain::parse_duration;
use hookfleet_core::domain::Secret;
use hookfleet_core::domain::{
    FieldMapping, Header, Method, Structure, Webhook, WebhookRow, WebhookSpec,
};
use hookfleet_core::error::{Refusal, StoreError};
use hookfleet_core::request::NetworkPolicy;
use hookfleet_core::store::webhooks::{self, SecretChange};
use hookfleet_core::store::Store;

use crate::error::{DefinitionError, Expected, Field, Rule, ValidationError};
use crate::preview::default_sample_doc;
use crate::validate::{parse_rate_limit, validate};

/// `webhook add`: validates `spec` on `sample` (`policy`: where its
/// requests may go) and stores it as a new webhook.
pub async fn add(
    store: &Store,
    policy: &NetworkPolicy,
    spec: WebhookSpec,
    sample: Value,
) -> Result<Webhook, DefinitionError> {
    let policy = policy.clone();
    store
        .run(move |conn| {
            let added = validate(&spec, &policy, &sample)
                .map_err(DefinitionError::from)
                .and_then(|()| Ok(webhooks::insert(conn, &WebhookRow::from(&spec))?));
            Ok(added)
        })
        .await?
}

/// The keys a new webhook's JSON definition must give.
const REQUIRED_FIELDS: [Field; 4] = [Field::Name, Field::EntityType, Field::Event, Field::Url];

/// `webhook add` from a JSON definition (see [`apply_json`]), tried on its
/// `sample_doc` or on [`default_sample_doc`].
pub async fn add_json(
    store: &Store,
    policy: &NetworkPolicy,
    body: &Map<String, Value>,
) -> Result<Webhook, DefinitionError> {
    let given: Vec<Field> = body.keys().filter_map(|k| Field::of_json_key(k)).collect();
    if REQUIRED_FIELDS.iter().any(|f| !given.contains(f)) {
        return Err(ValidationError::Required.into());
    }
    let mut spec = WebhookSpec::new("", "", "", "");
    let (sample, _) = apply_json(&mut spec, body)?;
    let sample = sample.unwrap_or_else(|| default_sample_doc(&spec.entity_type));
    add(store, policy, spec, sample).await
}

/// A stored change.
#[derive(Debug)]
pub struct Updated {
    pub webhook: Webhook,
    /// A new secret replaced one that still signs until `rotate-finish` or
    /// a day has passed.
    pub rotation_started: bool,
}

/// `webhook update` as one read-modify-write: the stored definition is
/// read under a row lock, `edit` changes it (and returns the sample
/// document to validate on and whether the secret goes), and the result is
/// validated and stored in the same transaction, so two changes made at
/// once (an edit and a disable, two edits) never undo each other. `edit`
/// may fail with an error of its own (the CLI reads files in it).
pub async fn update_with<E>(
    store: &Store,
    policy: &NetworkPolicy,
    name: &str,
    edit: impl FnOnce(&mut WebhookSpec) -> Result<(Value, bool), E> + Send + 'static,
) -> Result<Updated, E>
where
    E: From<DefinitionError> + Send + 'static,
{
    let (policy, name) = (policy.clone(), name.to_string());
    store
        .run(move |conn| Ok(update_on(conn, &policy, &name, edit)))
        .await
        .map_err(|e| E::from(e.into()))?
}

/// `webhook update` from a JSON definition: the keys given replace those
/// parts of the stored one (see [`apply_json`]).
pub async fn update_json(
    store: &Store,
    policy: &NetworkPolicy,
    name: &str,
    body: Map<String, Value>,
) -> Result<Updated, DefinitionError> {
    update_with(store, policy, name, move |spec| {
        let (sample, remove_secret) = apply_json(spec, &body)?;
        let sample = sample.unwrap_or_else(|| default_sample_doc(&spec.entity_type));
        Ok((sample, remove_secret))
    })
    .await
}

/// What stopped an update: the definition (or the database), or the
/// caller's own edit.
enum Failed<E> {
    Definition(DefinitionError),
    Edit(E),
}

impl<E> From<diesel::result::Error> for Failed<E> {
    fn from(e: diesel::result::Error) -> Failed<E> {
        Failed::Definition(e.into())
    }
}

/// [`update_with`] on a connection.
fn update_on<E: From<DefinitionError>>(
    conn: &mut PgConnection,
    policy: &NetworkPolicy,
    name: &str,
    edit: impl FnOnce(&mut WebhookSpec) -> Result<(Value, bool), E>,
) -> Result<Updated, E> {
    let stored = |e: StoreError| Failed::Definition(e.into());
    conn.transaction(|conn| {
        let current = webhooks::get_for_update(conn, name).map_err(stored)?;
        let mut spec = current.to_spec().map_err(|e| {
            stored(StoreError::Refused(Refusal::Unsealable(
                name.to_string(),
                e.to_string(),
            )))
        })?;
        let was = spec.clone();
        let (sample, remove_secret) = edit(&mut spec).map_err(Failed::Edit)?;
        if spec == was && !remove_secret {
            // Nothing changes (a webhook read and sent back): nothing is
            // written, so its updated_at stays too.
            return Ok(Updated {
                webhook: current,
                rotation_started: false,
            });
        }
        store_update(
            conn,
            policy,
            name,
            &spec,
            was.secret.as_ref(),
            remove_secret,
            &sample,
        )
        .map_err(Failed::Definition)
    })
    .map_err(|failed| match failed {
        Failed::Definition(e) => E::from(e),
        Failed::Edit(e) => e,
    })
}

/// Validates `spec` (the webhook `name`'s definition as changed) on
/// `sample` and stores it. `was`: the secret before the change; with
/// `remove_secret` the webhook stops signing.
fn store_update(
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

pub use hookfleet_core::domain::HIDDEN;

/// The keys [`apply_json`] takes, in the order [`Field::JSON`] lists them.
pub const JSON_KEYS: [&str; Field::JSON.len()] = {
    let mut keys = [""; Field::JSON.len()];
    let mut i = 0;
    while i < keys.len() {
        keys[i] = Field::JSON[i].key();
        i += 1;
    }
    keys
};

/// The keys of a webhook's view (`webhook show --json`, the API's GET and
/// an update's answer) that no definition sets: its state, its health and
/// the times. A definition that names them (a view read, edited and sent
/// back) is taken with them ignored; pause, resume and rotate-finish are
/// actions of their own.
pub const READ_ONLY_KEYS: [&str; 15] = [
    "signed",
    "secret_rotation_until",
    "created_at",
    "updated_at",
    "paused",
    "paused_at",
    "paused_reason",
    "consecutive_failures",
    "last_success_at",
    "last_error",
    "attempts_24h",
    "success_rate_24h",
    "p50_ms",
    "p95_ms",
    "rotation_started",
];

/// Applies a JSON definition to `spec`: each key given replaces that part
/// (lists whole; a header whose value is [`HIDDEN`] keeps its stored
/// value), `null` clears what may be absent (body_template,
/// condition, secret, max_concurrency, rate_limit). A field may be given
/// under the view's key ([`Field::READ_AS`]), once; the view's read-only
/// keys ([`READ_ONLY_KEYS`]) are ignored. Returns the sample document to
/// validate on (`sample_doc`, if given) and whether the secret was
/// cleared. Unknown keys and wrong types are refused with the key's name.
pub fn apply_json(
    spec: &mut WebhookSpec,
    body: &Map<String, Value>,
) -> Result<(Option<Value>, bool), ValidationError> {
    let mut sample = None;
    let mut secret_cleared = false;
    let mut seen = Vec::with_capacity(body.len());
    for (key, v) in body {
        if READ_ONLY_KEYS.contains(&key.as_str()) {
            continue;
        }
        let field =
            Field::of_json_key(key).ok_or_else(|| ValidationError::UnknownKey(key.clone()))?;
        if seen.contains(&field) {
            return Err(ValidationError::GivenTwice(field));
        }
        seen.push(field);
        match field {
            Field::SampleDoc if !v.is_object() => return Err(wrong(field, Expected::Object)),
            Field::SampleDoc => sample = Some(v.clone()),
            Field::Secret => {
                spec.secret = nullable(v, |v| text(field, v))?.map(Secret::new);
                secret_cleared = spec.secret.is_none();
            }
            _ => apply_field(spec, field, v)?,
        }
    }
    Ok((sample, secret_cleared))
}

/// Sets `field` of `spec` from its JSON value `v` (not the secret or the
/// sample document, which [`apply_json`] keeps apart).
fn apply_field(spec: &mut WebhookSpec, field: Field, v: &Value) -> Result<(), ValidationError> {
    let unreadable = |e: String| ValidationError::invalid(field, Rule::Unreadable(e));
    match field {
        Field::Name => spec.name = text(field, v)?,
        Field::EntityType => spec.entity_type = text(field, v)?,
        Field::Event => spec.event = text(field, v)?,
        Field::Url => spec.request_url = text(field, v)?,
        Field::DynamicUrl => spec.dynamic_url = boolean(field, v)?,
        Field::Enabled => spec.enabled = boolean(field, v)?,
        Field::FrappeBody => spec.frappe_body = boolean(field, v)?,
        Field::Method => spec.method = text(field, v)?.parse::<Method>().map_err(unreadable)?,
        Field::Structure => {
            spec.structure = text(field, v)?.parse::<Structure>().map_err(unreadable)?
        }
        Field::BodyTemplate => spec.body_template = nullable(v, |v| text(field, v))?,
        Field::Condition => spec.condition = nullable(v, |v| text(field, v))?,
        Field::Timeout => {
            spec.timeout =
                parse_duration(&text(field, v)?).map_err(|e| unreadable(e.to_string()))?
        }
        Field::Queue => spec.queue = text(field, v)?,
        Field::MaxRetries => spec.max_retries = int(field, v)?,
        Field::MaxConcurrency => spec.max_concurrency = nullable(v, |v| int(field, v))?,
        Field::RateLimit => {
            spec.rate_limit = nullable(v, |v| text(field, v))?
                .map(|r| parse_rate_limit(&r))
                .transpose()
                .map_err(|e| unreadable(e.to_string()))?
        }
        Field::AllowedHosts => {
            spec.allowed_hosts = list(field, v)?
                .iter()
                .map(|h| text(field, h).map(|h| h.trim().to_string()))
                .collect::<Result<_, _>>()?
        }
        Field::Fields => {
            spec.fields = list(field, v)?
                .iter()
                .map(field_mapping)
                .collect::<Result<_, _>>()?
        }
        Field::Headers => {
            // Header values are shown as [hidden]: a definition read and
            // sent back keeps the stored value of a header so shown.
            let stored = std::mem::take(&mut spec.headers);
            spec.headers = list(field, v)?
                .iter()
                .map(|h| header(h, &stored))
                .collect::<Result<_, _>>()?
        }
        Field::Secret | Field::SampleDoc | Field::Templates => {}
    }
    Ok(())
}

/// One `{"field": …, "key": …}` of `fields` (the key defaults to the
/// field).
fn field_mapping(f: &Value) -> Result<FieldMapping, ValidationError> {
    let part = |name| {
        f.get(name)
            .map(|x| text_of(Field::Fields, Some(name), x))
            .transpose()
    };
    let field = part("field")?.ok_or_else(|| wrong(Field::Fields, Expected::FieldObjects))?;
    let key = match part("key")? {
        Some(k) => k,
        None => field.clone(),
    };
    Ok(FieldMapping { field, key })
}

/// One `{"key": …, "value": …}` of `headers`: a value of [`HIDDEN`] keeps
/// the one `stored` under that key.
fn header(h: &Value, stored: &[Header]) -> Result<Header, ValidationError> {
    let part = |name| {
        h.get(name)
            .map(|x| text_of(Field::Headers, Some(name), x))
            .transpose()
    };
    match (part("key")?, part("value")?) {
        (Some(key), Some(value)) if value == HIDDEN => stored
            .iter()
            .find(|s| s.key.eq_ignore_ascii_case(&key))
            .map(|s| Header {
                key: key.clone(),
                value: s.value.clone(),
            })
            .ok_or_else(|| {
                ValidationError::invalid(Field::Headers, Rule::HiddenNotStored { header: key })
            }),
        (Some(key), Some(value)) => Ok(Header { key, value }),
        _ => Err(wrong(Field::Headers, Expected::HeaderObjects)),
    }
}

/// `field`'s value is not what it takes.
fn wrong(field: Field, expected: Expected) -> ValidationError {
    ValidationError::invalid(
        field,
        Rule::WrongType {
            item: None,
            expected,
        },
    )
}

fn text(field: Field, v: &Value) -> Result<String, ValidationError> {
    text_of(field, None, v)
}

/// A string: `field`'s value, or `item` of one element of its list.
fn text_of(field: Field, item: Option<&'static str>, v: &Value) -> Result<String, ValidationError> {
    v.as_str().map(str::to_string).ok_or_else(|| {
        let expected = Expected::Text;
        ValidationError::invalid(field, Rule::WrongType { item, expected })
    })
}

fn boolean(field: Field, v: &Value) -> Result<bool, ValidationError> {
    v.as_bool().ok_or_else(|| wrong(field, Expected::Boolean))
}

/// An integer; one beyond `i32` is kept beyond every bound (`-1` or
/// `i32::MAX`), for validation to refuse with the bound's message.
fn int(field: Field, v: &Value) -> Result<i32, ValidationError> {
    v.as_i64()
        .map(|n| i32::try_from(n).unwrap_or(if n < 0 { -1 } else { i32::MAX }))
        .ok_or_else(|| wrong(field, Expected::Integer))
}

/// `null` as None, else the value read by `read`.
fn nullable<T>(
    v: &Value,
    read: impl Fn(&Value) -> Result<T, ValidationError>,
) -> Result<Option<T>, ValidationError> {
    if v.is_null() {
        Ok(None)
    } else {
        read(v).map(Some)
    }
}

fn list(field: Field, v: &Value) -> Result<&Vec<Value>, ValidationError> {
    v.as_array().ok_or_else(|| wrong(field, Expected::List))
}
