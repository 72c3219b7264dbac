//! The management API, `/api/v1`: JSON in, JSON out, errors as
//! `{"error": "..."}` with a 4xx or 5xx status. The reads return the same
//! views as the CLI's `--json`; the actions are the functions the pages'
//! buttons call too (`act`), which run `hookfleet_admin`'s.

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

use hookfleet_core::domain::DeliveryStatus;

use crate::auth::ApiActor;
use crate::read::{page_limit, ListQuery};
use crate::redact::for_actor;
use crate::{act, read};
use crate::{ApiError, Console, DEFAULT_LIST_LIMIT};

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
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("body: {e}")))?;
    without_nul(&value)?;
    serde_json::from_value(value).map_err(|e| ApiError::bad_request(format!("body: {e}")))
}

/// Postgres's text refuses NUL: a body naming one (`\u0000` in a key or a
/// string) is the caller's mistake, said as such, as in a path or query.
pub(crate) fn without_nul(value: &Value) -> Result<(), ApiError> {
    let has_nul = |s: &str| s.contains('\0');
    let found = match value {
        Value::String(s) => has_nul(s),
        Value::Array(items) => return items.iter().try_for_each(without_nul),
        Value::Object(map) => {
            if map.keys().any(|k| has_nul(k)) {
                true
            } else {
                return map.values().try_for_each(without_nul);
            }
        }
        _ => false,
    };
    if found {
        return Err(ApiError::bad_request(
            "a NUL character (\\u0000) is not allowed in the body",
        ));
    }
    Ok(())
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
    to_json(&hookfleet_admin::stats::stats(&c.store, &c.queue).await?)
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
    to_json(&hookfleet_admin::stats::activity(&c.store, minutes).await?)
}

async fn workers(State(c): Shared, ApiActor(_): ApiActor) -> ApiResult {
    to_json(&c.queue.registry().workers().await?)
}

async fn webhook_list(State(c): Shared, ApiActor(actor): ApiActor) -> ApiResult {
    read::webhooks(&c, actor).await.map(Json)
}

async fn webhook_show(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult {
    read::webhook(&c, &name, actor).await.map(Json)
}

/// A JSON object body (a webhook definition), or a 400.
fn object(bytes: &Bytes) -> Result<serde_json::Map<String, Value>, ApiError> {
    let value = serde_json::from_slice::<Value>(bytes)
        .map_err(|e| ApiError::bad_request(format!("body: {e}")))?;
    without_nul(&value)?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(ApiError::bad_request("body: a JSON object")),
    }
}

async fn webhook_create(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    bytes: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let body = object(&bytes)?;
    let created = act::create(&c, actor, body).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

async fn webhook_update(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    let body = object(&bytes)?;
    act::update(&c, actor, &name, body).await.map(Json)
}

async fn webhook_delete(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult {
    act::delete(&c, actor, &name).await.map(Json)
}

/// `webhook preview`: the body is the document; the answer says whether
/// it meets the condition and the request it would make (header values
/// hidden). Nothing is recorded or sent, but it needs the full token: the
/// body it renders shows the webhook's body template, which a read-only
/// viewer is not shown, and rendering spends CPU.
async fn webhook_preview(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    actor.may_act()?;
    let doc = Value::Object(object(&bytes)?);
    // Templates render in the renderer process, bounded in time and
    // memory; the wait for it is not the runtime's.
    let preview = hookfleet_admin::preview::preview(&c.store, &c.policy, &name, doc).await?;
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
    act::import(&c, actor, &bytes, q.dry_run, q.atomic)
        .await
        .map(Json)
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
    act::pause(&c, actor, &name, b.reason.as_deref())
        .await
        .map(Json)
}

async fn webhook_resume(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult {
    act::resume(&c, actor, &name).await.map(Json)
}

async fn webhook_enable(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult {
    act::set_enabled(&c, actor, &name, true).await.map(Json)
}

async fn webhook_disable(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult {
    act::set_enabled(&c, actor, &name, false).await.map(Json)
}

async fn webhook_rotate_finish(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult {
    act::rotate_finish(&c, actor, &name).await.map(Json)
}

async fn delivery_list(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> ApiResult {
    let q = query(q)?;
    let rows = read::deliveries(&c, &q).await?;
    let full = rows.len() as i64 == q.limit.unwrap_or(DEFAULT_LIST_LIMIT);
    to_json(&json!({
        "deliveries": read::delivery_views(&rows, actor),
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
    read::delivery_view(&c, id, actor).await.map(Json)
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
    act::retry(&c, actor, id, b.force).await.map(Json)
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
    let since = hookfleet_core::domain::parse_time_or_ago(&since)
        .map_err(|e| ApiError::bad_request(format!("since: {e}")))?;
    act::retry_bulk(&c, actor, &webhook, status, since, b.dry_run)
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
    to_json(&hookfleet_admin::dead::list(&c.queue, limit as isize).await?)
}

async fn dead_show(State(c): Shared, ApiActor(_): ApiActor, Path(id): Path<String>) -> ApiResult {
    to_json(&hookfleet_admin::dead::show(&c.queue, &id).await?)
}

/// `dead requeue --all`.
async fn dead_requeue_all(State(c): Shared, ApiActor(actor): ApiActor) -> ApiResult {
    act::dead_requeue_all(&c, actor).await.map(Json)
}

/// `dead purge --all`.
async fn dead_purge_all(State(c): Shared, ApiActor(actor): ApiActor) -> ApiResult {
    act::dead_purge_all(&c, actor).await.map(Json)
}

async fn dead_requeue(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(id): Path<String>,
) -> ApiResult {
    act::dead_requeue(&c, actor, &id).await.map(Json)
}

async fn dead_purge(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(id): Path<String>,
) -> ApiResult {
    act::dead_purge(&c, actor, &id).await.map(Json)
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
