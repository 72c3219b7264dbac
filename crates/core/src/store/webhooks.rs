//! Webhook subscriptions: create, change, read, and the config version that
//! tells producers their cache is stale.

use std::time::Duration;

use chrono::Utc;
use diesel::prelude::*;
use diesel::PgConnection;

use crate::error::{Refusal, StoreError};
use crate::model::{Webhook, WebhookRow};
use crate::schema::{webhook_config_version, webhooks};

/// How long a replaced secret keeps signing (as a second Standard Webhooks
/// signature) so receivers can roll over without dropping requests: a day
/// covers a deploy on the receiver's side.
pub const SECRET_ROTATION_OVERLAP: Duration = Duration::from_secs(24 * 3600);

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

/// Replaces a webhook's definition. A changed secret starts a rotation: the
/// old one keeps signing for [`SECRET_ROTATION_OVERLAP`].
pub fn update(
    conn: &mut PgConnection,
    name: &str,
    row: &WebhookRow,
) -> Result<Webhook, StoreError> {
    conn.transaction(|conn| {
        let current: Webhook = webhooks::table
            .filter(webhooks::name.eq(name))
            .select(Webhook::as_select())
            .for_update()
            .first(conn)
            .optional()?
            .ok_or_else(|| not_found(name))?;
        let updated: Webhook = diesel::update(webhooks::table.find(current.id))
            .set((row, webhooks::updated_at.eq(Utc::now())))
            .returning(Webhook::as_returning())
            .get_result(conn)
            .map_err(|e| map_unique(e, &row.name))?;
        if current.secret.is_some() && current.secret != row.secret {
            let until = Utc::now()
                + chrono::Duration::from_std(SECRET_ROTATION_OVERLAP).unwrap_or_default();
            diesel::update(webhooks::table.find(current.id))
                .set((
                    webhooks::previous_secret.eq(&current.secret),
                    webhooks::previous_secret_expires_at.eq(until),
                ))
                .execute(conn)?;
        }
        Ok(updated)
    })
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
    let n = diesel::delete(webhooks::table.filter(webhooks::name.eq(name))).execute(conn)?;
    if n == 0 {
        return Err(not_found(name));
    }
    Ok(())
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

/// Webhook id → its `max_concurrency` (None: the worker's default).
pub type ConcurrencyLimits = Vec<(i64, Option<i32>)>;

/// Every webhook's concurrency limit, with the config version it was read at.
pub fn concurrency_limits(conn: &mut PgConnection) -> Result<(i64, ConcurrencyLimits), StoreError> {
    conn.build_transaction()
        .read_only()
        .repeatable_read()
        .run(|conn| {
            let version = config_version(conn)?;
            let limits = webhooks::table
                .select((webhooks::id, webhooks::max_concurrency))
                .load(conn)?;
            Ok((version, limits))
        })
}
