//! Webhook subscriptions: create, change, read, and the config version that
//! tells producers their cache is stale.

use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::PgConnection;

use crate::domain::at_rest::{self, Purpose};
use crate::domain::Secret;
use crate::domain::{Webhook, WebhookRow, MAX_PAUSE_REASON_CHARS};
use crate::error::{Refusal, StoreError};
use crate::store::schema::{webhook_config_version, webhooks};

/// How long a replaced secret keeps signing (as a second Standard Webhooks
/// signature) so receivers can roll over without dropping requests: a day
/// covers a deploy on the receiver's side.
pub(crate) const SECRET_ROTATION_OVERLAP: Duration = Duration::from_secs(24 * 3600);

fn not_found(name: &str) -> StoreError {
    StoreError::NotFound(format!("webhook {name:?}"))
}

fn map_unique(e: diesel::result::Error, name: &str) -> StoreError {
    match e {
        diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::UniqueViolation,
            _,
        ) => StoreError::Refused(Refusal::NameTaken(name.to_string())),
        other => StoreError::Query(other),
    }
}

pub fn insert(conn: &mut PgConnection, row: &WebhookRow) -> Result<Webhook, StoreError> {
    diesel::insert_into(webhooks::table)
        .values(row)
        .returning(Webhook::as_returning())
        .get_result(conn)
        .map_err(|e| map_unique(e, &row.name))
}

/// [`get`], locking the row until the transaction ends (a
/// read-modify-write of the definition).
pub fn get_for_update(conn: &mut PgConnection, name: &str) -> Result<Webhook, StoreError> {
    webhooks::table
        .filter(webhooks::name.eq(name))
        .select(Webhook::as_select())
        .for_update()
        .first(conn)
        .optional()?
        .ok_or_else(|| not_found(name))
}

pub fn get(conn: &mut PgConnection, name: &str) -> Result<Webhook, StoreError> {
    webhooks::table
        .filter(webhooks::name.eq(name))
        .select(Webhook::as_select())
        .first(conn)
        .optional()?
        .ok_or_else(|| not_found(name))
}

pub fn list(conn: &mut PgConnection) -> Result<Vec<Webhook>, StoreError> {
    Ok(webhooks::table
        .order(webhooks::name)
        .select(Webhook::as_select())
        .load(conn)?)
}

/// What `update` does to a webhook's signing secret.
#[derive(Debug, Clone)]
pub enum SecretChange {
    /// Leave it (and any rotation) as it is.
    Keep,
    /// Sign with this one. Replacing another starts a two-phase rotation:
    /// the old one keeps signing (a second Standard Webhooks signature, and
    /// the Frappe header, which carries one) until `rotate-finish` or
    /// [`SECRET_ROTATION_OVERLAP`]. During a rotation the old one stays the
    /// one that receivers already know.
    Set(Secret),
    /// Stop signing: no secret, no rotation.
    Remove,
    /// Sign with this one from now on, without a rotation: the old one
    /// stops signing at once (an import: the Frappe site already signs
    /// with the new one).
    Replace(Secret),
}

/// Replaces a webhook's definition, and changes its secret as `secret` says.
pub fn update(
    conn: &mut PgConnection,
    name: &str,
    row: &WebhookRow,
    secret: SecretChange,
) -> Result<Webhook, StoreError> {
    conn.transaction(|conn| {
        let current: Webhook = webhooks::table
            .filter(webhooks::name.eq(name))
            .select(Webhook::as_select())
            .for_update()
            .first(conn)
            .optional()?
            .ok_or_else(|| not_found(name))?;
        diesel::update(webhooks::table.find(current.id))
            .set((row, webhooks::updated_at.eq(Utc::now())))
            .execute(conn)
            .map_err(|e| map_unique(e, &row.name))?;
        let ring = at_rest::keyring();
        let now = Utc::now();
        match secret {
            SecretChange::Keep => {}
            SecretChange::Replace(new) => {
                let sealed = ring.seal(new.expose(), Purpose::SigningSecret);
                sign_alone(conn, current.id, Some(sealed))?;
            }
            SecretChange::Remove => sign_alone(conn, current.id, None)?,
            SecretChange::Set(new) => {
                let unchanged = match &current.secret {
                    Some(stored) => ring
                        .open(stored, Purpose::SigningSecret)
                        .is_ok_and(|old| old == new.expose()),
                    None => false,
                };
                if !unchanged {
                    let sealed = ring.seal(new.expose(), Purpose::SigningSecret);
                    if current.secret.is_some() && !current.rotating(now) {
                        let until = now
                            + chrono::Duration::from_std(SECRET_ROTATION_OVERLAP)
                                .unwrap_or_default();
                        diesel::update(webhooks::table.find(current.id))
                            .set((
                                webhooks::secret.eq(Some(sealed)),
                                webhooks::previous_secret.eq(&current.secret),
                                webhooks::previous_secret_expires_at.eq(Some(until)),
                            ))
                            .execute(conn)?;
                    } else if current.secret.is_none() {
                        // Signing starts afresh: nothing of an older secret
                        // comes back as a co-signer.
                        sign_alone(conn, current.id, Some(sealed))?;
                    } else {
                        diesel::update(webhooks::table.find(current.id))
                            .set(webhooks::secret.eq(Some(sealed)))
                            .execute(conn)?;
                    }
                }
            }
        }
        Ok(webhooks::table
            .find(current.id)
            .select(Webhook::as_select())
            .first(conn)?)
    })
}

/// Sets a webhook's sealed secret (or none) and ends any rotation: the one
/// secret, if any, signs alone.
fn sign_alone(conn: &mut PgConnection, id: i64, sealed: Option<String>) -> Result<(), StoreError> {
    diesel::update(webhooks::table.find(id))
        .set((
            webhooks::secret.eq(sealed),
            webhooks::previous_secret.eq(None::<String>),
            webhooks::previous_secret_expires_at.eq(None::<DateTime<Utc>>),
        ))
        .execute(conn)?;
    Ok(())
}

/// A webhook to create, or to replace under its name (`webhook import`).
pub struct Upsert<'a> {
    pub row: &'a WebhookRow,
    pub secret: SecretChange,
    /// Whether a webhook of this name is stored (replace, not create).
    pub exists: bool,
}

/// Creates or replaces one webhook.
pub fn upsert(conn: &mut PgConnection, u: &Upsert) -> Result<Webhook, StoreError> {
    if u.exists {
        update(conn, &u.row.name, u.row, u.secret.clone())
    } else {
        insert(conn, u.row)
    }
}

/// Creates or replaces every webhook in one transaction: all or none.
pub fn upsert_all(conn: &mut PgConnection, items: &[Upsert]) -> Result<Vec<Webhook>, StoreError> {
    conn.transaction(|conn| items.iter().map(|u| upsert(conn, u)).collect())
}

/// Ends an open rotation: the old secret stops signing and the Frappe header
/// moves to the new one.
pub fn rotate_finish(conn: &mut PgConnection, name: &str) -> Result<Webhook, StoreError> {
    let current = get(conn, name)?;
    if !current.rotating(Utc::now()) {
        return Err(StoreError::Refused(Refusal::NoRotation(name.to_string())));
    }
    Ok(diesel::update(webhooks::table.find(current.id))
        .set((
            webhooks::previous_secret.eq(None::<String>),
            webhooks::previous_secret_expires_at.eq(None::<DateTime<Utc>>),
            webhooks::updated_at.eq(Utc::now()),
        ))
        .returning(Webhook::as_returning())
        .get_result(conn)?)
}

/// What `secrets reencrypt` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Reencrypted {
    pub webhooks: usize,
    /// Secrets and header values sealed again with the current key.
    pub values: usize,
}

/// The ids of the keys stored values are sealed with (secrets, previous
/// secrets still in their rotation, header values), so a process can tell
/// at start, and in its readiness, whether it can open all it will use (an
/// expired previous secret is never opened: a claim leaves it out).
pub fn sealing_key_ids(conn: &mut PgConnection) -> Result<Vec<String>, StoreError> {
    #[derive(QueryableByName)]
    struct KeyId {
        #[diesel(sql_type = diesel::sql_types::Text)]
        id: String,
    }
    let ids: Vec<KeyId> = diesel::sql_query(
        "SELECT DISTINCT m[1] AS id FROM (
             SELECT secret AS v FROM webhooks WHERE secret IS NOT NULL
             UNION ALL SELECT previous_secret FROM webhooks
                 WHERE previous_secret IS NOT NULL AND previous_secret_expires_at > now()
             UNION ALL SELECT headers::text FROM webhooks
         ) s, regexp_matches(s.v, 'hfenc:v1:([0-9a-f]+):', 'g') AS m
         ORDER BY 1",
    )
    .load(conn)?;
    Ok(ids.into_iter().map(|k| k.id).collect())
}

/// Why a process cannot open stored values, if it cannot: the ids of the
/// keys it lacks. None when it has every one (or nothing is sealed).
pub fn missing_keys(conn: &mut PgConnection) -> Result<Option<String>, StoreError> {
    let ids = sealing_key_ids(conn)?;
    let ring = crate::domain::at_rest::keyring();
    let missing = ring.missing(&ids);
    Ok((!missing.is_empty()).then(|| {
        format!(
            "stored secrets or header values are sealed with key {}, which this process does not have (set HOOKFLEET_SECRET_KEY or HOOKFLEET_SECRET_KEY_OLD)",
            missing.join(", ")
        )
    }))
}

/// Seals every stored secret and header value with the current key (or,
/// with no key, stores them as they are), one webhook per transaction.
pub fn reencrypt(conn: &mut PgConnection) -> Result<Reencrypted, StoreError> {
    let ring = at_rest::keyring();
    let ids: Vec<i64> = webhooks::table
        .select(webhooks::id)
        .order(webhooks::id)
        .load(conn)?;
    let mut done = Reencrypted::default();
    for id in ids {
        let changed = conn.transaction(|conn| {
            let w: Webhook = webhooks::table
                .find(id)
                .select(Webhook::as_select())
                .for_update()
                .first(conn)?;
            let mut changed = 0;
            let mut reseal = |stored: &Option<String>,
                              purpose|
             -> Result<Option<String>, StoreError> {
                match stored {
                    Some(s) if !ring.is_current(s) => {
                        changed += 1;
                        let plain = ring.open(s, purpose).map_err(|e| {
                            StoreError::Refused(Refusal::Unsealable(w.name.clone(), e.to_string()))
                        })?;
                        Ok(Some(ring.seal(&plain, purpose)))
                    }
                    other => Ok(other.clone()),
                }
            };
            let secret = reseal(&w.secret, Purpose::SigningSecret)?;
            let previous = reseal(&w.previous_secret, Purpose::SigningSecret)?;
            // Headers that do not parse (written by hand) are left as they are.
            let mut headers = crate::domain::parse_headers(&w.headers).ok();
            for h in headers.iter_mut().flatten() {
                if h.key.eq_ignore_ascii_case("content-type") {
                    continue;
                }
                if let Some(v) = reseal(&Some(h.value.clone()), Purpose::HeaderValue)? {
                    h.value = v;
                }
            }
            if changed > 0 {
                diesel::update(webhooks::table.find(id))
                    .set((
                        webhooks::secret.eq(secret),
                        webhooks::previous_secret.eq(previous),
                        webhooks::headers.eq(match &headers {
                            Some(h) => serde_json::to_value(h).unwrap_or_default(),
                            None => w.headers.clone(),
                        }),
                    ))
                    .execute(conn)?;
            }
            Ok::<usize, StoreError>(changed)
        })?;
        if changed > 0 {
            done.webhooks += 1;
            done.values += changed;
        }
    }
    Ok(done)
}

pub fn set_enabled(
    conn: &mut PgConnection,
    name: &str,
    enabled: bool,
) -> Result<Webhook, StoreError> {
    diesel::update(webhooks::table.filter(webhooks::name.eq(name)))
        .set((
            webhooks::enabled.eq(enabled),
            webhooks::updated_at.eq(Utc::now()),
        ))
        .returning(Webhook::as_returning())
        .get_result(conn)
        .optional()?
        .ok_or_else(|| not_found(name))
}

/// Deletes a webhook. Its delivery rows stay (with its name); pending ones
/// become Exhausted when their attempt comes, without a request.
pub fn delete(conn: &mut PgConnection, name: &str) -> Result<(), StoreError> {
    conn.transaction(|conn| {
        let id: i64 = webhooks::table
            .filter(webhooks::name.eq(name))
            .select(webhooks::id)
            .for_update()
            .first(conn)
            .optional()?
            .ok_or_else(|| not_found(name))?;
        // Rows held by a pause are due again, to be made Exhausted
        // ("webhook deleted") when taken, like every other pending row;
        // before the delete, which sets their webhook_id to NULL.
        diesel::sql_query(format!(
            "UPDATE webhook_request_logs SET next_retry = now()
             WHERE webhook_id = $1 AND next_retry = {}",
            super::deliveries::HELD_UNTIL
        ))
        .bind::<diesel::sql_types::BigInt, _>(id)
        .execute(conn)?;
        diesel::delete(webhooks::table.find(id)).execute(conn)?;
        super::health::forget(conn, id)
    })
}

/// What `pause` found.
#[derive(Debug, Clone)]
pub struct Paused {
    pub webhook: Webhook,
    /// It was paused already (and keeps its first reason and time).
    pub already: bool,
}

/// Pauses a webhook: its events are still recorded, nothing is sent and
/// nothing becomes Exhausted until [`resume`]. A paused webhook keeps the
/// reason and time of its first pause.
pub fn pause(conn: &mut PgConnection, name: &str, reason: &str) -> Result<Paused, StoreError> {
    if reason.trim().is_empty()
        || reason.chars().count() > MAX_PAUSE_REASON_CHARS
        || reason.chars().any(char::is_control)
    {
        return Err(StoreError::Refused(Refusal::PauseReason {
            max_chars: MAX_PAUSE_REASON_CHARS,
        }));
    }
    let paused: Option<Webhook> = diesel::update(
        webhooks::table
            .filter(webhooks::name.eq(name))
            .filter(webhooks::paused_at.is_null()),
    )
    .set((
        webhooks::paused_at.eq(diesel::dsl::now),
        webhooks::paused_reason.eq(reason),
    ))
    .returning(Webhook::as_returning())
    .get_result(conn)
    .optional()?;
    match paused {
        Some(webhook) => Ok(Paused {
            webhook,
            already: false,
        }),
        None => Ok(Paused {
            webhook: get(conn, name)?,
            already: true,
        }),
    }
}

/// Resumes a paused webhook (None: it was not paused). Its held and due
/// rows are for the caller to release and enqueue
/// ([`super::deliveries::release_held`], [`super::deliveries::due_of_webhook`]);
/// the auto-pause's clock starts again.
pub fn resume(conn: &mut PgConnection, name: &str) -> Result<Option<Webhook>, StoreError> {
    conn.transaction(|conn| {
        let resumed: Option<Webhook> = diesel::update(
            webhooks::table
                .filter(webhooks::name.eq(name))
                .filter(webhooks::paused_at.is_not_null()),
        )
        .set((
            webhooks::paused_at.eq(None::<DateTime<Utc>>),
            webhooks::paused_reason.eq(None::<String>),
            webhooks::releasing.eq(true),
        ))
        .returning(Webhook::as_returning())
        .get_result(conn)
        .optional()?;
        match resumed {
            Some(w) => {
                super::health::restart_failure_clock(conn, w.id)?;
                Ok(Some(w))
            }
            None => {
                get(conn, name)?;
                Ok(None)
            }
        }
    })
}

/// The webhook's held rows are all released: a resume finished (see
/// [`releasing`]).
pub fn release_done(conn: &mut PgConnection, webhook_id: i64) -> Result<(), StoreError> {
    diesel::update(webhooks::table.find(webhook_id))
        .set(webhooks::releasing.eq(false))
        .execute(conn)?;
    Ok(())
}

/// Webhooks resumed whose held rows may not all be released yet (a resume
/// cut short): the sweeper releases them.
pub fn releasing(conn: &mut PgConnection) -> Result<Vec<i64>, StoreError> {
    Ok(webhooks::table
        .filter(webhooks::releasing.eq(true))
        .filter(webhooks::paused_at.is_null())
        .select(webhooks::id)
        .load(conn)?)
}

/// The names of the paused webhooks, for `stats` and the metrics.
pub fn paused_names(conn: &mut PgConnection) -> Result<Vec<String>, StoreError> {
    Ok(webhooks::table
        .filter(webhooks::paused_at.is_not_null())
        .order(webhooks::name)
        .select(webhooks::name)
        .load(conn)?)
}

/// Bumped by a trigger on every change to `webhooks`.
pub fn config_version(conn: &mut PgConnection) -> Result<i64, StoreError> {
    Ok(webhook_config_version::table
        .select(webhook_config_version::version)
        .first(conn)?)
}

/// Every enabled webhook, with the config version they were read at (one
/// snapshot, so the cache never pairs new rows with an old version).
pub fn enabled_snapshot(conn: &mut PgConnection) -> Result<(i64, Vec<Webhook>), StoreError> {
    conn.build_transaction()
        .read_only()
        .repeatable_read()
        .run(|conn| {
            let version = config_version(conn)?;
            let hooks = webhooks::table
                .filter(webhooks::enabled.eq(true))
                .order(webhooks::id)
                .select(Webhook::as_select())
                .load(conn)?;
            Ok((version, hooks))
        })
}

/// Distinct queue names in use (for queue depths in `stats`).
pub fn queue_names(conn: &mut PgConnection) -> Result<Vec<String>, StoreError> {
    Ok(webhooks::table
        .select(webhooks::queue)
        .distinct()
        .order(webhooks::queue)
        .load(conn)?)
}

/// A webhook's limits, as the worker applies them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, diesel::Queryable)]
pub struct Limits {
    pub webhook_id: i64,
    /// Requests in flight from the whole fleet (None: the worker's share).
    pub max_concurrency: Option<i32>,
    /// Requests per second from the whole fleet (None: no limit).
    pub rate_limit: Option<i32>,
    pub timeout_ms: i32,
}

/// Every webhook's limits, with the config version they were read at.
pub fn concurrency_limits(conn: &mut PgConnection) -> Result<(i64, Vec<Limits>), StoreError> {
    conn.build_transaction()
        .read_only()
        .repeatable_read()
        .run(|conn| {
            let version = config_version(conn)?;
            let limits = webhooks::table
                .select((
                    webhooks::id,
                    webhooks::max_concurrency,
                    webhooks::rate_limit,
                    webhooks::timeout_ms,
                ))
                .load(conn)?;
            Ok((version, limits))
        })
}
