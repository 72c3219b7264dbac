//! The management API, `/api/v1`: JSON in, JSON out, errors as
//! `{"error": "..."}` with a 4xx or 5xx status. The reads return the same
//! views as the CLI's `--json`; the actions are the functions the pages'
//! buttons call too ([`actions`]).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post, MethodRouter};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use hookfleet_core::model::DeliveryStatus;
use hookfleet_core::store::deliveries::ListFilter;

use crate::auth::ApiActor;
use crate::redact::for_actor;
use crate::{ApiError, Console, DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT};

/// The OpenAPI document served at `/api/v1/openapi.json`; a test holds it
/// against [`api_routes`].
pub const OPENAPI: &str = include_str!("openapi.json");

type ApiResult = Result<Json<Value>, ApiError>;
type Shared = State<Arc<Console>>;

/// Every API route: (methods, path, handler). The router is built from
/// this table, and the OpenAPI test reads it.
pub type Route = (
    &'static [&'static str],
    &'static str,
    MethodRouter<Arc<Console>>,
);

pub fn api_routes() -> Vec<Route> {
    vec![
        (&["get"], "/api/v1/openapi.json", get(openapi)),
        (&["get"], "/api/v1/stats", get(stats)),
        (&["get"], "/api/v1/activity", get(activity)),
        (&["get"], "/api/v1/workers", get(workers)),
        (
            &["get", "post"],
            "/api/v1/webhooks",
            get(webhook_list).post(webhook_create),
        ),
        (
            &["get", "patch", "delete"],
            "/api/v1/webhooks/{name}",
            get(webhook_show)
                .patch(webhook_update)
                .delete(webhook_delete),
        ),
        (
            &["post"],
            "/api/v1/webhooks/{name}/preview",
            post(webhook_preview),
        ),
        (
            &["post"],
            "/api/v1/webhooks/{name}/pause",
            post(webhook_pause),
        ),
        (
            &["post"],
            "/api/v1/webhooks/{name}/resume",
            post(webhook_resume),
        ),
        (
            &["post"],
            "/api/v1/webhooks/{name}/enable",
            post(webhook_enable),
        ),
        (
            &["post"],
            "/api/v1/webhooks/{name}/disable",
            post(webhook_disable),
        ),
        (
            &["post"],
            "/api/v1/webhooks/{name}/rotate-finish",
            post(webhook_rotate_finish),
        ),
        (
            &["post"],
            "/api/v1/imports/frappe",
            post(frappe_import).layer(axum::extract::DefaultBodyLimit::max(
                hookfleet_admin::frappe_import::MAX_IMPORT_BYTES,
            )),
        ),
        (&["get"], "/api/v1/deliveries", get(delivery_list)),
        (
            &["post"],
            "/api/v1/deliveries/retry",
            post(delivery_retry_bulk),
        ),
        (&["get"], "/api/v1/deliveries/{id}", get(delivery_show)),
        (
            &["post"],
            "/api/v1/deliveries/{id}/retry",
            post(delivery_retry),
        ),
        (&["get"], "/api/v1/dead-letters", get(dead_list)),
        (
            &["post"],
            "/api/v1/dead-letters/requeue-all",
            post(dead_requeue_all),
        ),
        (
            &["post"],
            "/api/v1/dead-letters/purge-all",
            post(dead_purge_all),
        ),
        (&["get"], "/api/v1/dead-letters/{id}", get(dead_show)),
        (
            &["post"],
            "/api/v1/dead-letters/{id}/requeue",
            post(dead_requeue),
        ),
        (
            &["post"],
            "/api/v1/dead-letters/{id}/purge",
            post(dead_purge),
        ),
    ]
}

pub fn router() -> Router<Arc<Console>> {
    api_routes()
        .into_iter()
        .fold(Router::new(), |r, (_, path, handler)| {
            r.route(path, handler)
        })
        .fallback(|| async {
            ApiError(
                StatusCode::NOT_FOUND,
                "no such route (see /api/v1/openapi.json)".into(),
            )
        })
}

async fn openapi() -> ([(axum::http::HeaderName, &'static str); 1], &'static str) {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        OPENAPI,
    )
}

/// A JSON body of at most [`crate::MAX_BODY_BYTES`] (the router's limit);
/// an empty body is the type's default.
fn body<T: DeserializeOwned + Default>(bytes: &Bytes) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("body: {e}")))
}

fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(t)| t)
        .map_err(|e| ApiError::bad_request(e.body_text()))
}

fn to_json<T: Serialize>(value: &T) -> ApiResult {
    serde_json::to_value(value)
        .map(Json)
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

async fn stats(State(c): Shared, ApiActor(_): ApiActor) -> ApiResult {
    to_json(&hookfleet_admin::ops::stats(&c.store, &c.queue).await?)
}

/// The most minutes the activity chart covers: a day, 1,440 points.
pub const MAX_ACTIVITY_MINUTES: i32 = 1_440;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ActivityQuery {
    minutes: Option<i32>,
}

async fn activity(
    State(c): Shared,
    ApiActor(_): ApiActor,
    q: Result<Query<ActivityQuery>, QueryRejection>,
) -> ApiResult {
    let minutes = query(q)?.minutes.unwrap_or(60);
    if !(1..=MAX_ACTIVITY_MINUTES).contains(&minutes) {
        return Err(ApiError::bad_request(format!(
            "minutes is 1 to {MAX_ACTIVITY_MINUTES}"
        )));
    }
    to_json(&actions::activity(&c, minutes).await?)
}

async fn workers(State(c): Shared, ApiActor(_): ApiActor) -> ApiResult {
    to_json(&c.queue.workers().await?)
}

async fn webhook_list(State(c): Shared, ApiActor(actor): ApiActor) -> ApiResult {
    actions::webhook_views(&c, actor).await.map(Json)
}

async fn webhook_show(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult {
    actions::webhook_view(&c, &name, actor).await.map(Json)
}

/// A JSON object body (a webhook definition), or a 400.
fn object(bytes: &Bytes) -> Result<serde_json::Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::bad_request("body: a JSON object")),
        Err(e) => Err(ApiError::bad_request(format!("body: {e}"))),
    }
}

async fn webhook_create(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    bytes: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let body = object(&bytes)?;
    let created = actions::create(&c, actor, body).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

async fn webhook_update(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    let body = object(&bytes)?;
    actions::update(&c, actor, &name, body).await.map(Json)
}

async fn webhook_delete(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult {
    actions::delete(&c, actor, &name).await.map(Json)
}

/// `webhook preview`: the body is the document; the answer says whether
/// it meets the condition and the request it would make (header values
/// hidden). Nothing is recorded or sent, so a read-only token may ask.
async fn webhook_preview(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    let doc = Value::Object(object(&bytes)?);
    let w = actions::webhook(&c, &name).await?;
    let policy = c.policy.clone();
    // Templates render in the renderer process, bounded in time and
    // memory; the wait for it is not the runtime's.
    let preview =
        tokio::task::spawn_blocking(move || hookfleet_admin::preview::preview(&w, &doc, &policy))
            .await
            .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(Json(for_actor(&preview, actor)))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ImportQuery {
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    atomic: bool,
}

/// `webhook import`: the body is what the CLI's file holds (Frappe Webhook
/// documents); the answer is the same report, document by document, and
/// `refused`, how many were.
async fn frappe_import(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    q: Result<Query<ImportQuery>, QueryRejection>,
    bytes: Bytes,
) -> ApiResult {
    let q = query(q)?;
    if !q.dry_run {
        actor.may_act()?;
    }
    let text =
        std::str::from_utf8(&bytes).map_err(|_| ApiError::bad_request("body: not UTF-8 text"))?;
    let docs = hookfleet_admin::frappe_import::documents(text)
        .map_err(|e| ApiError::bad_request(format!("body: {e}")))?;
    let (store, policy) = (c.store.clone(), c.policy.clone());
    let report = tokio::task::spawn_blocking(move || {
        hookfleet_admin::frappe_import::import(&store, &policy, &docs, q.dry_run, q.atomic)
    })
    .await
    .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    if !q.dry_run {
        let target = format!(
            "{} documents, {} refused",
            report.outcomes.len(),
            report.refused()
        );
        actions::logged(actor, "webhook-import", &target);
    }
    Ok(Json(json!({
        "outcomes": report.outcomes,
        "held_back": report.held_back,
        "refused": report.refused(),
    })))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PauseBody {
    reason: Option<String>,
}

async fn webhook_pause(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    let b: PauseBody = body(&bytes)?;
    actions::pause(&c, actor, &name, b.reason.as_deref())
        .await
        .map(Json)
}

async fn webhook_resume(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult {
    actions::resume(&c, actor, &name).await.map(Json)
}

async fn webhook_enable(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult {
    actions::set_enabled(&c, actor, &name, true).await.map(Json)
}

async fn webhook_disable(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult {
    actions::set_enabled(&c, actor, &name, false)
        .await
        .map(Json)
}

async fn webhook_rotate_finish(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult {
    actions::rotate_finish(&c, actor, &name).await.map(Json)
}

/// A list's `limit`: [`DEFAULT_LIST_LIMIT`] when not given, else 1 to
/// [`MAX_LIST_LIMIT`] or a 400.
fn page_limit(given: Option<i64>) -> Result<i64, ApiError> {
    let limit = given.unwrap_or(DEFAULT_LIST_LIMIT);
    if (1..=MAX_LIST_LIMIT).contains(&limit) {
        Ok(limit)
    } else {
        Err(ApiError::bad_request(format!(
            "limit is 1 to {MAX_LIST_LIMIT}"
        )))
    }
}

/// The delivery list's filters, as query parameters.
#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub webhook: Option<String>,
    pub status: Option<String>,
    pub document: Option<String>,
    pub event: Option<String>,
    /// The event id (the `webhook-id` header a receiver saw).
    pub event_id: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    /// The next page: rows older than this id.
    pub before: Option<i64>,
    pub limit: Option<i64>,
}

impl ListQuery {
    /// The filter, or a 400 saying which parameter is wrong. Empty
    /// parameters (a form's blank fields) count as absent.
    pub fn filter(&self) -> Result<(Option<String>, ListFilter), ApiError> {
        let given = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let limit = page_limit(self.limit)?;
        let time = |name: &str, v: &Option<String>| {
            given(v)
                .map(|t| hookfleet_core::config::parse_time_or_ago(&t))
                .transpose()
                .map_err(|e| ApiError::bad_request(format!("{name}: {e}")))
        };
        let status = given(&self.status)
            .map(|s| s.parse::<DeliveryStatus>())
            .transpose()
            .map_err(|e| ApiError::bad_request(format!("status: {e}")))?;
        Ok((
            given(&self.webhook),
            ListFilter {
                status,
                webhook: None,
                document: given(&self.document),
                event: given(&self.event),
                event_id: given(&self.event_id),
                since: time("since", &self.since)?,
                until: time("until", &self.until)?,
                before_id: self.before,
                limit,
            },
        ))
    }
}

async fn delivery_list(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> ApiResult {
    let q = query(q)?;
    let rows = actions::deliveries(&c, &q).await?;
    let full = rows.len() as i64 == q.limit.unwrap_or(DEFAULT_LIST_LIMIT);
    to_json(&json!({
        "deliveries": actions::delivery_views(&rows, actor),
        // The `before` of the next page, when this one was full.
        "next_before": if full { rows.last().map(|r| r.id) } else { None },
    }))
}

async fn delivery_show(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(id): Path<String>,
) -> ApiResult {
    let id = parse_id(&id)?;
    actions::delivery_view(&c, id, actor).await.map(Json)
}

/// A delivery id from a path, or a 400 (not axum's plain-text rejection).
pub fn parse_id(text: &str) -> Result<i64, ApiError> {
    text.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::bad_request(format!("{text:?} is not a delivery id")))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RetryBody {
    #[serde(default)]
    force: bool,
}

async fn delivery_retry(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(id): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    let id = parse_id(&id)?;
    let b: RetryBody = body(&bytes)?;
    actions::retry(&c, actor, id, b.force).await.map(Json)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct BulkBody {
    webhook: Option<String>,
    status: Option<String>,
    since: Option<String>,
    #[serde(default)]
    dry_run: bool,
}

async fn delivery_retry_bulk(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    bytes: Bytes,
) -> ApiResult {
    let b: BulkBody = body(&bytes)?;
    let (Some(webhook), Some(status), Some(since)) = (b.webhook, b.status, b.since) else {
        return Err(ApiError::bad_request(
            "a bulk replay needs webhook, status (Failed or Exhausted) and since",
        ));
    };
    let status: DeliveryStatus = status
        .parse()
        .map_err(|e| ApiError::bad_request(format!("status: {e}")))?;
    let since = hookfleet_core::config::parse_time_or_ago(&since)
        .map_err(|e| ApiError::bad_request(format!("since: {e}")))?;
    actions::retry_bulk(&c, actor, &webhook, status, since, b.dry_run)
        .await
        .map(Json)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeadQuery {
    limit: Option<i64>,
}

async fn dead_list(
    State(c): Shared,
    ApiActor(_): ApiActor,
    q: Result<Query<DeadQuery>, QueryRejection>,
) -> ApiResult {
    let limit = page_limit(query(q)?.limit)?;
    to_json(&c.queue.dead_letters(limit as isize).await?)
}

async fn dead_show(State(c): Shared, ApiActor(_): ApiActor, Path(id): Path<String>) -> ApiResult {
    match c.queue.dead_letter_by_id(&id).await? {
        Some(d) => to_json(&d),
        None => Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("no dead letter {id:?}"),
        )),
    }
}

/// `dead requeue --all`.
async fn dead_requeue_all(State(c): Shared, ApiActor(actor): ApiActor) -> ApiResult {
    actor.may_act()?;
    let mut n = 0;
    for d in c
        .queue
        .dead_letters(hookfleet_core::dead::DEAD_LETTER_LIMIT)
        .await?
    {
        if c.queue.requeue_dead(&d.id).await?.is_some() {
            n += 1;
        }
    }
    actions::logged(actor, "dead-requeue-all", &format!("{n} dead letters"));
    Ok(Json(json!({ "requeued": n })))
}

/// `dead purge --all`.
async fn dead_purge_all(State(c): Shared, ApiActor(actor): ApiActor) -> ApiResult {
    actor.may_act()?;
    let n = c.queue.purge_all_dead().await?;
    actions::logged(actor, "dead-purge-all", &format!("{n} dead letters"));
    Ok(Json(json!({ "purged": n })))
}

async fn dead_requeue(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(id): Path<String>,
) -> ApiResult {
    actions::dead_requeue(&c, actor, &id).await.map(Json)
}

async fn dead_purge(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(id): Path<String>,
) -> ApiResult {
    actions::dead_purge(&c, actor, &id).await.map(Json)
}

/// What the API and the pages both do: reads they both show, and every
/// action (checked against the actor's role and logged with its name).
pub mod actions {
    use chrono::{DateTime, Utc};
    use serde_json::{json, Map, Value};

    use hookfleet_admin::definitions;
    use hookfleet_admin::ops;
    use hookfleet_admin::preview::default_sample_doc;
    use hookfleet_admin::views::{DeliveryView, WebhookView};
    use hookfleet_core::model::{
        DeliveryAttempt, DeliveryLog, DeliveryStatus, Webhook, WebhookSpec,
    };
    use hookfleet_core::store::deliveries::{self, MinuteCount};
    use hookfleet_core::store::webhooks;

    use super::ListQuery;
    use crate::auth::Actor;
    use crate::redact::for_actor;
    use crate::{ApiError, Console};

    /// An action's audit line: who (the token's name), what, on what.
    pub(crate) fn logged(actor: Actor, action: &str, target: &str) {
        tracing::info!(actor = actor.name, action, target, "console action");
    }

    pub async fn activity(c: &Console, minutes: i32) -> Result<Vec<MinuteCount>, ApiError> {
        Ok(c.store
            .run(move |conn| deliveries::attempts_per_minute(conn, minutes))
            .await?)
    }

    /// Every webhook with its health (one read for all), as `actor` may
    /// see them.
    pub async fn webhook_views(c: &Console, actor: Actor) -> Result<Value, ApiError> {
        let all = c.store.run(webhooks::list).await?;
        let mut health = ops::health_of(&c.store, &all).await?;
        let views: Vec<WebhookView> = all
            .iter()
            .map(|w| WebhookView::new(w, health.remove(&w.id).unwrap_or_default(), false))
            .collect();
        Ok(for_actor(&views, actor))
    }

    /// The webhook `name` as stored.
    pub async fn webhook(c: &Console, name: &str) -> Result<Webhook, ApiError> {
        let owned = name.to_string();
        Ok(c.store.run(move |conn| webhooks::get(conn, &owned)).await?)
    }

    /// The webhook `name` with its health, as `actor` may see it.
    pub async fn webhook_view(c: &Console, name: &str, actor: Actor) -> Result<Value, ApiError> {
        let w = webhook(c, name).await?;
        view_of(c, w, actor).await
    }

    /// `w` with its health, as `actor` may see it.
    async fn view_of(c: &Console, w: Webhook, actor: Actor) -> Result<Value, ApiError> {
        let health = ops::health_of(&c.store, std::slice::from_ref(&w))
            .await?
            .remove(&w.id)
            .unwrap_or_default();
        Ok(for_actor(&WebhookView::new(&w, health, false), actor))
    }

    /// A delivery with every attempt, as `actor` may see it.
    pub async fn delivery_view(c: &Console, id: i64, actor: Actor) -> Result<Value, ApiError> {
        let (row, attempts) = delivery(c, id).await?;
        let mut view = DeliveryView::new(&row);
        view.attempt_log = Some(attempts.iter().collect());
        Ok(for_actor(&view, actor))
    }

    /// Deliveries as `actor` may see them.
    pub fn delivery_views(rows: &[DeliveryLog], actor: Actor) -> Value {
        let views: Vec<DeliveryView> = rows.iter().map(DeliveryView::new).collect();
        for_actor(&views, actor)
    }

    pub async fn deliveries(c: &Console, q: &ListQuery) -> Result<Vec<DeliveryLog>, ApiError> {
        let (webhook, mut filter) = q.filter()?;
        Ok(c.store
            .run(move |conn| {
                filter.webhook = webhook
                    .as_deref()
                    .map(|name| deliveries::webhook_rows(conn, name))
                    .transpose()?;
                deliveries::list_within(conn, &filter, crate::LIST_STATEMENT_TIMEOUT)
            })
            .await?)
    }

    pub async fn delivery(
        c: &Console,
        id: i64,
    ) -> Result<(DeliveryLog, Vec<DeliveryAttempt>), ApiError> {
        Ok(c.store
            .run(move |conn| Ok((deliveries::get(conn, id)?, deliveries::attempts(conn, id)?)))
            .await?)
    }

    /// `webhook add` from a JSON definition (see [`definitions::apply_json`]).
    pub async fn create(
        c: &Console,
        actor: Actor,
        body: Map<String, Value>,
    ) -> Result<Value, ApiError> {
        actor.may_act()?;
        if ["name", "entity_type", "event", "url"]
            .iter()
            .any(|k| !body.contains_key(*k))
        {
            return Err(ApiError::bad_request(
                "a webhook needs name, entity_type, event and url",
            ));
        }
        let mut spec = WebhookSpec::new("", "", "", "");
        let (sample, _) = definitions::apply_json(&mut spec, &body)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let sample = sample.unwrap_or_else(|| default_sample_doc(&spec.entity_type));
        let policy = c.policy.clone();
        let name = spec.name.clone();
        let w = c
            .store
            .run(move |conn| Ok(definitions::add(conn, &policy, &spec, &sample)))
            .await??;
        logged(actor, "webhook-add", &name);
        view_of(c, w, actor).await
    }

    /// `webhook update` from a JSON definition: the keys given replace
    /// those parts of the stored one.
    pub async fn update(
        c: &Console,
        actor: Actor,
        name: &str,
        body: Map<String, Value>,
    ) -> Result<Value, ApiError> {
        actor.may_act()?;
        let owned = name.to_string();
        let policy = c.policy.clone();
        let updated = c
            .store
            .run(move |conn| {
                Ok(definitions::update_with(conn, &policy, &owned, |spec| {
                    let (sample, remove_secret) = definitions::apply_json(spec, &body)?;
                    let sample = sample.unwrap_or_else(|| default_sample_doc(&spec.entity_type));
                    Ok((sample, remove_secret))
                }))
            })
            .await??;
        logged(actor, "webhook-update", name);
        let rotation = updated.rotation_started;
        let mut v = view_of(c, updated.webhook, actor).await?;
        v["rotation_started"] = Value::Bool(rotation);
        Ok(v)
    }

    pub async fn delete(c: &Console, actor: Actor, name: &str) -> Result<Value, ApiError> {
        actor.may_act()?;
        let owned = name.to_string();
        c.store
            .run(move |conn| webhooks::delete(conn, &owned))
            .await?;
        logged(actor, "webhook-delete", name);
        Ok(json!({ "webhook": name, "deleted": true }))
    }

    pub async fn pause(
        c: &Console,
        actor: Actor,
        name: &str,
        reason: Option<&str>,
    ) -> Result<Value, ApiError> {
        actor.may_act()?;
        let (owned, reason) = (
            name.to_string(),
            reason.unwrap_or("paused by an operator").to_string(),
        );
        let p = c
            .store
            .run(move |conn| webhooks::pause(conn, &owned, &reason))
            .await?;
        logged(actor, "pause", name);
        Ok(json!({
            "webhook": p.webhook.name,
            "paused": true,
            "already": p.already,
            "reason": p.webhook.paused_reason,
        }))
    }

    pub async fn resume(c: &Console, actor: Actor, name: &str) -> Result<Value, ApiError> {
        actor.may_act()?;
        // Logged before it starts: the caller may be gone when it ends.
        logged(actor, "resume", name);
        // Detached from the request: a caller who goes away (or a timeout)
        // does not cut the release of a long backlog short.
        let (store, queue, ttl, owned) = (
            c.store.clone(),
            c.queue.clone(),
            c.key_ttl,
            name.to_string(),
        );
        let r = tokio::spawn(async move { ops::resume(&store, &queue, ttl, &owned).await })
            .await
            .map_err(|e| {
                ApiError(axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
            })??;

        Ok(
            json!({ "webhook": r.webhook, "resumed": r.was_paused, "released": r.released,
                   "due": r.due, "enqueued": r.enqueued, "note": r.note }),
        )
    }

    pub async fn set_enabled(
        c: &Console,
        actor: Actor,
        name: &str,
        enabled: bool,
    ) -> Result<Value, ApiError> {
        actor.may_act()?;
        let owned = name.to_string();
        let w = c
            .store
            .run(move |conn| webhooks::set_enabled(conn, &owned, enabled))
            .await?;
        logged(actor, if enabled { "enable" } else { "disable" }, name);
        Ok(json!({ "webhook": w.name, "enabled": w.enabled }))
    }

    pub async fn rotate_finish(c: &Console, actor: Actor, name: &str) -> Result<Value, ApiError> {
        actor.may_act()?;
        let owned = name.to_string();
        let w = c
            .store
            .run(move |conn| webhooks::rotate_finish(conn, &owned))
            .await?;
        logged(actor, "rotate-finish", name);
        Ok(json!({ "webhook": w.name, "rotation_finished": true }))
    }

    pub async fn retry(c: &Console, actor: Actor, id: i64, force: bool) -> Result<Value, ApiError> {
        actor.may_act()?;
        let done = ops::replay(&c.store, &c.queue, c.key_ttl, id, force).await?;
        logged(actor, "retry", &id.to_string());
        Ok(json!({
            "id": id,
            "previous_status": done.replayed.previous_status,
            "status": DeliveryStatus::Failed,
            "next_attempt": done.replayed.next_attempt,
            "note": done.note,
        }))
    }

    pub async fn retry_bulk(
        c: &Console,
        actor: Actor,
        webhook: &str,
        status: DeliveryStatus,
        since: DateTime<Utc>,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        if !dry_run {
            actor.may_act()?;
        }
        // Detached from the request, as resume: a replay half done because
        // the caller left would be a surprise.
        let (store, queue, ttl, owned) = (
            c.store.clone(),
            c.queue.clone(),
            c.key_ttl,
            webhook.to_string(),
        );
        if !dry_run {
            // Logged before it starts: the caller may be gone when it ends.
            logged(
                actor,
                "retry-bulk",
                &format!("{webhook} {status} since {since}"),
            );
        }
        let done = tokio::spawn(async move {
            ops::replay_bulk(&store, &queue, ttl, &owned, status, since, dry_run).await
        })
        .await
        .map_err(|e| ApiError(axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
        Ok(serde_json::to_value(&done).unwrap_or(Value::Null))
    }

    pub async fn dead_requeue(c: &Console, actor: Actor, id: &str) -> Result<Value, ApiError> {
        actor.may_act()?;
        match c.queue.requeue_dead(id).await? {
            Some(d) => {
                logged(actor, "dead-requeue", id);
                Ok(json!({ "id": d.id, "requeued": true,
                           "queue": if d.queue.is_empty() { "default" } else { &d.queue } }))
            }
            None => Err(ApiError(
                axum::http::StatusCode::NOT_FOUND,
                format!("no dead letter {id:?}"),
            )),
        }
    }

    pub async fn dead_purge(c: &Console, actor: Actor, id: &str) -> Result<Value, ApiError> {
        actor.may_act()?;
        if !c.queue.purge_dead(id).await? {
            return Err(ApiError(
                axum::http::StatusCode::NOT_FOUND,
                format!("no dead letter {id:?}"),
            ));
        }
        logged(actor, "dead-purge", id);
        Ok(json!({ "id": id, "purged": true }))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The OpenAPI document names exactly the routes the router serves.
    #[test]
    fn the_openapi_document_matches_the_routes() {
        let doc: Value = serde_json::from_str(OPENAPI).expect("openapi.json is JSON");
        let mut documented = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("a path item").keys() {
                if ["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                    documented.insert((method.clone(), path.clone()));
                }
            }
        }
        let served: BTreeSet<(String, String)> = api_routes()
            .into_iter()
            .flat_map(|(methods, p, _)| methods.iter().map(move |m| (m.to_string(), p.to_string())))
            .collect();
        let missing: Vec<_> = served.difference(&documented).collect();
        let extra: Vec<_> = documented.difference(&served).collect();
        assert!(missing.is_empty(), "served but not documented: {missing:?}");
        assert!(extra.is_empty(), "documented but not served: {extra:?}");
        assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")));
    }
}
