//! The console's side of every action, for the API and the pages alike: a
//! read-only token may not act, and each action is logged at info with the
//! name of the token that did it (the audit line). What an action does is
//! `hookfleet_admin`'s, the very function the CLI calls; the answer is the
//! API's JSON, which the pages' notices read too.

use std::future::Future;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use hookfleet_admin::replay::ReplayBulk;
use hookfleet_admin::{dead, definitions, frappe_import, replay, webhooks};
use hookfleet_core::domain::DeliveryStatus;
use hookfleet_producer::EmittedTo;

use crate::answers::{
    AllPurged, AllRequeued, DeadPurged, DeadRequeued, Deleted, Enabled, ImportReport, Paused,
    Resumed, Retried, RotationFinished, TestDelivery, TestSent, UpdatedWebhook,
};
use crate::auth::Actor;
use crate::read;
use crate::redact::for_actor;
use crate::{ApiError, Console};

/// An action's audit line, written before the action starts (a caller that
/// hangs up mid-way may leave a committed write behind, never an unlogged
/// one): who (the token's name), what, on what.
fn logged(actor: Actor, action: &str, target: &str) {
    tracing::info!(actor = actor.name, action, target, "console action");
}

/// Its result, once it has one (nothing is said of an action whose caller
/// left before it ended: its start line stands).
fn ended<T, E: std::fmt::Display>(actor: Actor, action: &str, target: &str, result: &Result<T, E>) {
    match result {
        Ok(_) => tracing::info!(actor = actor.name, action, target, "console action done"),
        Err(e) => {
            tracing::info!(actor = actor.name, action, target, error = %e, "console action failed")
        }
    }
}

/// Runs `run` if `actor` may act, logged before it starts and when it ends.
async fn audited<T, E>(
    actor: Actor,
    action: &str,
    target: &str,
    run: impl Future<Output = Result<T, E>>,
) -> Result<T, ApiError>
where
    ApiError: From<E>,
    E: std::fmt::Display,
{
    actor.may_act()?;
    logged(actor, action, target);
    let result = run.await;
    ended(actor, action, target, &result);
    Ok(result?)
}

/// `webhook add` from a JSON definition; the answer is the webhook as
/// `actor` may see it.
pub async fn create(
    c: &Console,
    actor: Actor,
    body: Map<String, Value>,
) -> Result<Value, ApiError> {
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("(unnamed)")
        .chars()
        .take(200)
        .collect::<String>();
    let w = audited(
        actor,
        "webhook-add",
        &name,
        definitions::add_json(&c.store, &c.policy, &body),
    )
    .await?;
    read::webhook_of(c, w, actor).await
}

/// `webhook update` from a JSON definition: the keys given replace those
/// parts of the stored one.
pub async fn update(
    c: &Console,
    actor: Actor,
    name: &str,
    body: Map<String, Value>,
) -> Result<Value, ApiError> {
    let updated = audited(
        actor,
        "webhook-update",
        name,
        definitions::update_json(&c.store, &c.policy, name, body),
    )
    .await?;
    let w = webhooks::with_health(&c.store, updated.webhook).await?;
    let answer = UpdatedWebhook {
        webhook: w.view(false),
        rotation_started: updated.rotation_started,
    };
    Ok(for_actor(&answer, actor))
}

/// `webhook preview`: what the webhook `name` would send for `doc`,
/// nothing recorded or sent. Not an action, so not in the audit trail,
/// but the full token's only: it renders a caller's document (CPU) and
/// shows the body template a read-only viewer is not shown.
pub async fn preview(c: &Console, actor: Actor, name: &str, doc: Value) -> Result<Value, ApiError> {
    actor.may_act()?;
    // Templates render in the renderer process, bounded in time and
    // memory; the wait for it is not the runtime's.
    let preview = hookfleet_admin::preview::preview(&c.store, &c.policy, name, doc).await?;
    Ok(for_actor(&preview, actor))
}

/// A test send: `doc` emitted as an event of the webhook `name` (its own
/// entity type and event) to that webhook alone, a real delivery recorded
/// under the document's `name`, signed and retried like any other; nothing
/// when the document does not meet the condition.
pub async fn test_send(
    c: &Console,
    actor: Actor,
    name: &str,
    doc: Value,
) -> Result<TestSent, ApiError> {
    actor.may_act()?;
    let doc_name = doc
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| {
            ApiError::bad_request(
                "the document needs a \"name\" (e.g. SO-0001): its delivery is recorded under it",
            )
        })?
        .to_string();
    let run = c.producer.emit_to(name, &doc_name, doc);
    let sent = audited(actor, "webhook-test", name, run).await?;
    Ok(match sent {
        EmittedTo::ConditionNotMet => TestSent {
            webhook: name.to_string(),
            meets_condition: false,
            held: false,
            deliveries: Vec::new(),
        },
        EmittedTo::Recorded { report, held } => TestSent {
            webhook: name.to_string(),
            meets_condition: true,
            held,
            deliveries: report
                .deliveries
                .into_iter()
                .map(|d| TestDelivery {
                    id: d.id,
                    event_id: d.event_id,
                    status: d.status,
                    enqueued: d.enqueued,
                    error: d.error,
                })
                .collect(),
        },
    })
}

pub async fn delete(c: &Console, actor: Actor, name: &str) -> Result<Deleted, ApiError> {
    let run = webhooks::delete(&c.store, name);
    audited(actor, "webhook-delete", name, run).await?;
    Ok(Deleted {
        webhook: name.to_string(),
        deleted: true,
    })
}

pub async fn pause(
    c: &Console,
    actor: Actor,
    name: &str,
    reason: Option<&str>,
) -> Result<Paused, ApiError> {
    let reason = reason.unwrap_or(webhooks::DEFAULT_PAUSE_REASON);
    let p = audited(
        actor,
        "pause",
        name,
        webhooks::pause(&c.store, name, reason),
    )
    .await?;
    Ok(Paused {
        webhook: p.webhook.name,
        paused: true,
        already: p.already,
        reason: p.webhook.paused_reason,
    })
}

pub async fn resume(c: &Console, actor: Actor, name: &str) -> Result<Resumed, ApiError> {
    let run = webhooks::resume(&c.store, &c.queue, c.key_ttl, name);
    let r = audited(actor, "resume", name, run).await?;
    Ok(Resumed {
        webhook: r.webhook,
        resumed: r.was_paused,
        released: r.released,
        due: r.due,
        enqueued: r.enqueued,
        note: r.note,
    })
}

pub async fn set_enabled(
    c: &Console,
    actor: Actor,
    name: &str,
    enabled: bool,
) -> Result<Enabled, ApiError> {
    let action = if enabled { "enable" } else { "disable" };
    let run = webhooks::set_enabled(&c.store, name, enabled);
    let w = audited(actor, action, name, run).await?;
    Ok(Enabled {
        webhook: w.name,
        enabled: w.enabled,
    })
}

pub async fn rotate_finish(
    c: &Console,
    actor: Actor,
    name: &str,
) -> Result<RotationFinished, ApiError> {
    let run = webhooks::rotate_finish(&c.store, name);
    let w = audited(actor, "rotate-finish", name, run).await?;
    Ok(RotationFinished {
        webhook: w.name,
        rotation_finished: true,
    })
}

pub async fn retry(c: &Console, actor: Actor, id: i64, force: bool) -> Result<Retried, ApiError> {
    let run = replay::replay(&c.store, &c.queue, c.key_ttl, id, force);
    let done = audited(actor, "retry", &id.to_string(), run).await?;
    Ok(Retried {
        id,
        previous_status: done.replayed.previous_status,
        status: DeliveryStatus::Failed,
        next_attempt: done.replayed.next_attempt,
        note: done.note,
    })
}

/// A bulk replay; a dry run only counts, so a read-only token may ask.
pub async fn retry_bulk(
    c: &Console,
    actor: Actor,
    webhook: &str,
    status: DeliveryStatus,
    since: DateTime<Utc>,
    dry_run: bool,
) -> Result<ReplayBulk, ApiError> {
    let run = replay::replay_bulk(
        &c.store, &c.queue, c.key_ttl, webhook, status, since, dry_run,
    );
    if dry_run {
        Ok(run.await?)
    } else {
        let target = format!("{webhook} {status} since {since}");
        audited(actor, "retry-bulk", &target, run).await
    }
}

pub async fn dead_requeue(c: &Console, actor: Actor, id: &str) -> Result<DeadRequeued, ApiError> {
    let d = audited(actor, "dead-requeue", id, dead::requeue(&c.queue, id)).await?;
    Ok(DeadRequeued {
        id: d.id,
        requeued: true,
        queue: d.queue,
    })
}

pub async fn dead_purge(c: &Console, actor: Actor, id: &str) -> Result<DeadPurged, ApiError> {
    audited(actor, "dead-purge", id, dead::purge(&c.queue, id)).await?;
    Ok(DeadPurged {
        id: id.to_string(),
        purged: true,
    })
}

/// `dead requeue --all`.
pub async fn dead_requeue_all(c: &Console, actor: Actor) -> Result<AllRequeued, ApiError> {
    let n = audited(
        actor,
        "dead-requeue-all",
        "every dead letter",
        dead::requeue_all(&c.queue),
    )
    .await?;
    Ok(AllRequeued { requeued: n })
}

/// `dead purge --all`.
pub async fn dead_purge_all(c: &Console, actor: Actor) -> Result<AllPurged, ApiError> {
    let n = audited(
        actor,
        "dead-purge-all",
        "every dead letter",
        dead::purge_all(&c.queue),
    )
    .await?;
    Ok(AllPurged { purged: n })
}

/// `webhook import` of the Frappe Webhook documents `body` holds (what the
/// CLI's file holds). A dry run too needs the full token: it compares
/// caller-supplied definitions with the stored ones (which would let a
/// read-only token test guesses of hidden URLs, headers and secrets) and
/// renders caller-supplied templates (CPU a read-only token may not spend).
/// The answer is the report, document by document, and `refused`, how
/// many were.
pub async fn import(
    c: &Console,
    actor: Actor,
    body: &[u8],
    dry_run: bool,
    atomic: bool,
) -> Result<ImportReport, ApiError> {
    actor.may_act()?;
    let text =
        std::str::from_utf8(body).map_err(|_| ApiError::bad_request("body: not UTF-8 text"))?;
    let docs =
        frappe_import::documents(text).map_err(|e| ApiError::bad_request(format!("body: {e}")))?;
    docs.iter().try_for_each(crate::api::without_nul)?;
    let target = format!(
        "{} documents{}",
        docs.len(),
        if dry_run { ", dry run" } else { "" }
    );
    logged(actor, "webhook-import", &target);
    let result = frappe_import::import(&c.store, &c.policy, docs, dry_run, atomic).await;
    ended(actor, "webhook-import", &target, &result);
    let report = result?;
    Ok(ImportReport {
        refused: report.refused(),
        outcomes: report.outcomes,
        held_back: report.held_back,
    })
}
