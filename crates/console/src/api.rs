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
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use hookfleet_admin::views::DeliveryView;
use hookfleet_core::domain::DeliveryStatus;

use crate::answers::{
    AllPurged, AllRequeued, DeadPurged, DeadRequeued, Deleted, DeliveryPage, Enabled, ImportReport,
    Paused, Resumed, Retried, RotationFinished, TestSent, UpdatedWebhook,
};
use crate::auth::ApiActor;
use crate::openapi::{NewWebhook, WebhookChange};
use crate::read::{page_limit, ListQuery};
use crate::redact::for_actor;
use crate::{act, read};
use crate::{ApiError, Console, DEFAULT_LIST_LIMIT};

type ApiResult<T = Value> = Result<Json<T>, ApiError>;
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
            "/api/v1/webhooks/{name}/test",
            post(webhook_test),
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

/// This document.
#[utoipa::path(get, path = "/api/v1/openapi.json", operation_id = "openapi", tag = "meta",
    security(()),
    responses((status = 200, description = "the OpenAPI document", content_type = "application/json")))]
pub(crate) async fn openapi() -> ([(axum::http::HeaderName, &'static str); 1], &'static str) {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        crate::openapi::document(),
    )
}

/// A JSON body of at most [`crate::MAX_BODY_BYTES`] (the router's limit);
/// an empty body, or `null`, is the type's default.
fn body<T: DeserializeOwned + Default>(bytes: &Bytes) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("body: {e}")))?;
    if value.is_null() {
        return Ok(T::default());
    }
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

/// Counts: rows by status, queue depths, dead letters
///
/// The oldest due retry and the paused webhooks too, as `hookfleet stats
/// --json` prints them.
#[utoipa::path(get, path = "/api/v1/stats", operation_id = "getStats", tag = "operations",
    responses((status = 200, description = "the counts", body = hookfleet_admin::views::StatsView)))]
pub(crate) async fn stats(State(c): Shared, ApiActor(_): ApiActor) -> ApiResult {
    to_json(&hookfleet_admin::stats::stats(&c.store, &c.queue).await?)
}

/// The most minutes the activity chart covers: a day, 1,440 points.
pub const MAX_ACTIVITY_MINUTES: i32 = 1_440;

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ActivityQuery {
    /// How many minutes back (default 60).
    #[param(minimum = 1, maximum = 1440)]
    minutes: Option<i32>,
}

/// Attempts per minute by outcome
///
/// Oldest first, one entry per minute (zeros included).
#[utoipa::path(get, path = "/api/v1/activity", operation_id = "getActivity", tag = "operations",
    params(ActivityQuery),
    responses(
        (status = 200, description = "one entry per minute", body = Vec<hookfleet_core::store::deliveries::MinuteCount>),
        (status = 400, description = "minutes out of range")))]
pub(crate) async fn activity(
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

/// Registered workers
///
/// Their queues, last heartbeat and the jobs they hold.
#[utoipa::path(get, path = "/api/v1/workers", operation_id = "listWorkers", tag = "operations",
    responses((status = 200, description = "the workers", body = Vec<hookfleet_core::queue::WorkerInfo>)))]
pub(crate) async fn workers(State(c): Shared, ApiActor(_): ApiActor) -> ApiResult {
    to_json(&c.queue.registry().workers().await?)
}

/// Every webhook with its health
///
/// As `hookfleet webhook list --json` prints them.
#[utoipa::path(get, path = "/api/v1/webhooks", operation_id = "listWebhooks", tag = "webhooks",
    responses((status = 200, description = "every webhook", body = Vec<hookfleet_admin::views::WebhookView>)))]
pub(crate) async fn webhook_list(State(c): Shared, ApiActor(actor): ApiActor) -> ApiResult {
    read::webhooks(&c, actor).await.map(Json)
}

/// One webhook with its health
///
/// Sent back unchanged as an update (`updateWebhook`), it is accepted and
/// changes nothing.
#[utoipa::path(get, path = "/api/v1/webhooks/{name}", operation_id = "getWebhook", tag = "webhooks",
    params(("name" = String, Path, description = "the webhook's name")),
    responses(
        (status = 200, description = "the webhook", body = hookfleet_admin::views::WebhookView),
        (status = 404, description = "no such webhook")))]
pub(crate) async fn webhook_show(
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

/// Add a webhook
///
/// As `hookfleet webhook add`: validated on its `sample_doc` (or a document
/// of its entity type with only a name) before it is stored.
#[utoipa::path(post, path = "/api/v1/webhooks", operation_id = "createWebhook", tag = "webhooks",
    request_body = NewWebhook,
    responses(
        (status = 201, description = "created", body = hookfleet_admin::views::WebhookView),
        (status = 400, description = "a definition refused, with the reason"),
        (status = 409, description = "the name is taken")))]
pub(crate) async fn webhook_create(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    bytes: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let body = object(&bytes)?;
    let created = act::create(&c, actor, body).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// Change a webhook
///
/// As `hookfleet webhook update`: the keys given replace those parts. A
/// webhook as read is accepted: its read-only keys (state, health, times)
/// are ignored.
#[utoipa::path(patch, path = "/api/v1/webhooks/{name}", operation_id = "updateWebhook", tag = "webhooks",
    params(("name" = String, Path, description = "the webhook's name")),
    request_body = WebhookChange,
    responses(
        (status = 200, description = "the webhook as changed", body = UpdatedWebhook),
        (status = 400, description = "a definition refused, with the reason"),
        (status = 404, description = "no such webhook"),
        (status = 409, description = "the new name is taken, or a stored value cannot be opened")))]
pub(crate) async fn webhook_update(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    let body = object(&bytes)?;
    act::update(&c, actor, &name, body).await.map(Json)
}

/// Delete a webhook
///
/// Its deliveries stay; the pending ones become Exhausted.
#[utoipa::path(delete, path = "/api/v1/webhooks/{name}", operation_id = "deleteWebhook", tag = "webhooks",
    params(("name" = String, Path, description = "the webhook's name")),
    responses(
        (status = 200, description = "deleted", body = Deleted),
        (status = 404, description = "no such webhook")))]
pub(crate) async fn webhook_delete(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult<Deleted> {
    act::delete(&c, actor, &name).await.map(Json)
}

/// Preview what a webhook would send for a document
///
/// As `hookfleet webhook preview`: whether the document meets the
/// condition, and the URL, method, headers (values hidden) and body it
/// would get. Nothing is recorded or sent. Needs the full token: the body
/// shows the webhook's template.
#[utoipa::path(post, path = "/api/v1/webhooks/{name}/preview", operation_id = "previewWebhook", tag = "webhooks",
    params(("name" = String, Path, description = "the webhook's name")),
    request_body(content = Object, description = "the document",
        example = json!({"doctype": "Sales Order", "name": "SO-0001", "grand_total": 1250.5})),
    responses(
        (status = 200, description = "the preview", body = hookfleet_admin::preview::Preview),
        (status = 400, description = "the body is not a JSON object"),
        (status = 404, description = "no such webhook"),
        (status = 504, description = "the templates took too long to render")))]
pub(crate) async fn webhook_preview(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
    bytes: Bytes,
) -> ApiResult {
    actor.may_act()?;
    let doc = Value::Object(object(&bytes)?);
    act::preview(&c, actor, &name, doc).await.map(Json)
}

/// Send a test event to a webhook
///
/// The document, as an event of the webhook's own entity type and event,
/// to this webhook alone: a real delivery, recorded under the document's
/// `name`, signed, sent and retried like any other. When the document does
/// not meet the webhook's condition nothing is recorded or sent
/// (`meets_condition` is false). Needs the full token.
#[utoipa::path(post, path = "/api/v1/webhooks/{name}/test", operation_id = "testWebhook", tag = "webhooks",
    params(("name" = String, Path, description = "the webhook's name")),
    request_body(content = Object, description = "the document; its `name` names the delivery",
        example = json!({"doctype": "Sales Order", "name": "SO-0001", "grand_total": 1250.5})),
    responses(
        (status = 200, description = "the delivery recorded, or none (the condition does not hold)", body = TestSent),
        (status = 400, description = "the body is not a JSON object with a name, or the event is refused"),
        (status = 404, description = "no such webhook"),
        (status = 409, description = "the webhook is disabled")))]
pub(crate) async fn webhook_test(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
    bytes: Bytes,
) -> ApiResult<TestSent> {
    actor.may_act()?;
    let doc = Value::Object(object(&bytes)?);
    act::test_send(&c, actor, &name, doc).await.map(Json)
}

#[derive(Deserialize, Default, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ImportQuery {
    /// Say what would happen; write nothing.
    #[serde(default)]
    dry_run: bool,
    /// All or nothing: one refused document holds back every write.
    #[serde(default)]
    atomic: bool,
}

/// Import Frappe Webhook documents
///
/// As `hookfleet webhook import`: one document, a list (`bench
/// export-fixtures`) or the REST API's `{"data": [...]}`. Each is created
/// or updated under its Frappe name, or refused with the reason. A dry run
/// too needs the full token.
#[utoipa::path(post, path = "/api/v1/imports/frappe", operation_id = "importFrappeWebhooks", tag = "webhooks",
    params(ImportQuery),
    request_body(content = Object, description = "Frappe Webhook documents: at most 16 MiB and 10,000 documents",
        example = json!({"name": "orders", "webhook_doctype": "Sales Order", "webhook_docevent": "on_submit",
            "request_url": "https://hooks.example.com/orders", "request_structure": "Form",
            "webhook_data": [{"fieldname": "name", "key": "name"}]})),
    responses(
        (status = 200, description = "the report, document by document", body = ImportReport),
        (status = 400, description = "the body is not Webhook documents"),
        (status = 413, description = "over 16 MiB"),
        (status = 504, description = "the templates took too long to render")))]
pub(crate) async fn frappe_import(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    q: Result<Query<ImportQuery>, QueryRejection>,
    bytes: Bytes,
) -> ApiResult<ImportReport> {
    let q = query(q)?;
    act::import(&c, actor, &bytes, q.dry_run, q.atomic)
        .await
        .map(Json)
}

#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PauseBody {
    /// Why (1 to 500 printable characters), shown with the webhook.
    #[schema(
        nullable = false,
        max_length = 500,
        example = "the receiver is being migrated"
    )]
    reason: Option<String>,
}

/// Pause a webhook
///
/// Events are still recorded and wait; nothing is sent until it is resumed.
#[utoipa::path(post, path = "/api/v1/webhooks/{name}/pause", operation_id = "pauseWebhook", tag = "webhooks",
    params(("name" = String, Path, description = "the webhook's name")),
    request_body(content = PauseBody, description = "`{}` (or no body at all) pauses with the default reason"),
    responses(
        (status = 200, description = "paused (already: it was)", body = Paused),
        (status = 400, description = "a bad body"),
        (status = 404, description = "no such webhook"),
        (status = 409, description = "a reason that is not 1 to 500 printable characters")))]
pub(crate) async fn webhook_pause(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
    bytes: Bytes,
) -> ApiResult<Paused> {
    let b: PauseBody = body(&bytes)?;
    act::pause(&c, actor, &name, b.reason.as_deref())
        .await
        .map(Json)
}

/// Resume a webhook
///
/// What is due goes out at once, oldest first.
#[utoipa::path(post, path = "/api/v1/webhooks/{name}/resume", operation_id = "resumeWebhook", tag = "webhooks",
    params(("name" = String, Path, description = "the webhook's name")),
    responses(
        (status = 200, description = "resumed, with the rows released and enqueued", body = Resumed),
        (status = 404, description = "no such webhook")))]
pub(crate) async fn webhook_resume(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult<Resumed> {
    act::resume(&c, actor, &name).await.map(Json)
}

/// Enable a webhook
///
/// New events make deliveries again.
#[utoipa::path(post, path = "/api/v1/webhooks/{name}/enable", operation_id = "enableWebhook", tag = "webhooks",
    params(("name" = String, Path, description = "the webhook's name")),
    responses(
        (status = 200, description = "enabled", body = Enabled),
        (status = 404, description = "no such webhook")))]
pub(crate) async fn webhook_enable(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult<Enabled> {
    act::set_enabled(&c, actor, &name, true).await.map(Json)
}

/// Disable a webhook
///
/// New events make no deliveries.
#[utoipa::path(post, path = "/api/v1/webhooks/{name}/disable", operation_id = "disableWebhook", tag = "webhooks",
    params(("name" = String, Path, description = "the webhook's name")),
    responses(
        (status = 200, description = "disabled", body = Enabled),
        (status = 404, description = "no such webhook")))]
pub(crate) async fn webhook_disable(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult<Enabled> {
    act::set_enabled(&c, actor, &name, false).await.map(Json)
}

/// Finish a secret rotation
///
/// Only the new secret signs from now on.
#[utoipa::path(post, path = "/api/v1/webhooks/{name}/rotate-finish", operation_id = "finishSecretRotation", tag = "webhooks",
    params(("name" = String, Path, description = "the webhook's name")),
    responses(
        (status = 200, description = "finished", body = RotationFinished),
        (status = 404, description = "no such webhook"),
        (status = 409, description = "no rotation open")))]
pub(crate) async fn webhook_rotate_finish(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(name): Path<String>,
) -> ApiResult<RotationFinished> {
    act::rotate_finish(&c, actor, &name).await.map(Json)
}

/// List deliveries
///
/// Newest first, filtered, a page at a time (`before` = the previous page's
/// `next_before`).
#[utoipa::path(get, path = "/api/v1/deliveries", operation_id = "listDeliveries", tag = "deliveries",
    params(ListQuery),
    responses(
        (status = 200, description = "a page", body = DeliveryPage),
        (status = 400, description = "a bad filter"),
        (status = 504, description = "the list took too long (narrow the filter)")))]
pub(crate) async fn delivery_list(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> ApiResult {
    let q = query(q)?;
    let rows = read::deliveries(&c, &q).await?;
    let full = rows.len() as i64 == q.limit.unwrap_or(DEFAULT_LIST_LIMIT);
    let page = DeliveryPage {
        deliveries: rows.iter().map(DeliveryView::new).collect(),
        next_before: if full {
            rows.last().map(|r| r.id)
        } else {
            None
        },
    };
    Ok(Json(for_actor(&page, actor)))
}

/// One delivery with every attempt
///
/// The frozen request, its state and every attempt.
#[utoipa::path(get, path = "/api/v1/deliveries/{id}", operation_id = "getDelivery", tag = "deliveries",
    params(("id" = i64, Path, minimum = 1, description = "the delivery's id")),
    responses(
        (status = 200, description = "the delivery", body = hookfleet_admin::views::DeliveryView),
        (status = 400, description = "not an id"),
        (status = 404, description = "no such delivery")))]
pub(crate) async fn delivery_show(
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

#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RetryBody {
    /// Replay a Delivered delivery too.
    #[serde(default)]
    force: bool,
}

/// Replay a delivery
///
/// A Failed or Exhausted delivery is due now, with one more attempt allowed
/// (`force`: a Delivered one too).
#[utoipa::path(post, path = "/api/v1/deliveries/{id}/retry", operation_id = "retryDelivery", tag = "deliveries",
    params(("id" = i64, Path, minimum = 1, description = "the delivery's id")),
    request_body(content = RetryBody, description = "`{}` (or no body at all) is no force"),
    responses(
        (status = 200, description = "replayed", body = Retried),
        (status = 400, description = "not an id, or a bad body"),
        (status = 404, description = "no such delivery"),
        (status = 409, description = "Delivered without force, Queued, or an attempt in flight")))]
pub(crate) async fn delivery_retry(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(id): Path<String>,
    bytes: Bytes,
) -> ApiResult<Retried> {
    let id = parse_id(&id)?;
    let b: RetryBody = body(&bytes)?;
    act::retry(&c, actor, id, b.force).await.map(Json)
}

#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"webhook": "orders", "status": "Exhausted", "since": "2h", "dry_run": true}))]
pub(crate) struct BulkBody {
    /// The webhook whose deliveries are replayed.
    #[schema(required, nullable = false)]
    webhook: Option<String>,
    /// Failed or Exhausted.
    #[schema(required, nullable = false, pattern = "^(Failed|Exhausted)$")]
    status: Option<String>,
    /// Rows changed at or after: RFC 3339, or a duration ago (`2h`, `1h30m`).
    #[schema(required, nullable = false)]
    since: Option<String>,
    /// Only count them.
    #[serde(default)]
    dry_run: bool,
}

/// Replay a webhook's deliveries
///
/// Its Failed or Exhausted deliveries changed since a time (`dry_run`: only
/// count them).
#[utoipa::path(post, path = "/api/v1/deliveries/retry", operation_id = "retryDeliveries", tag = "deliveries",
    request_body = BulkBody,
    responses(
        (status = 200, description = "how many (and, unless a dry run, whether they were queued now)", body = hookfleet_admin::replay::ReplayBulk),
        (status = 400, description = "a bad body"),
        (status = 404, description = "no such webhook")))]
pub(crate) async fn delivery_retry_bulk(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    bytes: Bytes,
) -> ApiResult<hookfleet_admin::replay::ReplayBulk> {
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

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct DeadQuery {
    /// At most this many (default 50).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<i64>,
}

/// List dead letters
///
/// Jobs no worker could use, newest first.
#[utoipa::path(get, path = "/api/v1/dead-letters", operation_id = "listDeadLetters", tag = "dead letters",
    params(DeadQuery),
    responses(
        (status = 200, description = "dead letters", body = Vec<hookfleet_core::queue::DeadLetter>),
        (status = 400, description = "a bad limit")))]
pub(crate) async fn dead_list(
    State(c): Shared,
    ApiActor(_): ApiActor,
    q: Result<Query<DeadQuery>, QueryRejection>,
) -> ApiResult {
    let limit = page_limit(query(q)?.limit)?;
    to_json(&hookfleet_admin::dead::list(&c.queue, limit as isize).await?)
}

/// One dead letter
#[utoipa::path(get, path = "/api/v1/dead-letters/{id}", operation_id = "getDeadLetter", tag = "dead letters",
    params(("id" = String, Path, description = "the dead letter's id")),
    responses(
        (status = 200, description = "the dead letter", body = hookfleet_core::queue::DeadLetter),
        (status = 404, description = "no such dead letter")))]
pub(crate) async fn dead_show(
    State(c): Shared,
    ApiActor(_): ApiActor,
    Path(id): Path<String>,
) -> ApiResult {
    to_json(&hookfleet_admin::dead::show(&c.queue, &id).await?)
}

/// Requeue every dead letter
///
/// As `hookfleet dead requeue --all`.
#[utoipa::path(post, path = "/api/v1/dead-letters/requeue-all", operation_id = "requeueAllDeadLetters", tag = "dead letters",
    responses((status = 200, description = "how many", body = AllRequeued)))]
pub(crate) async fn dead_requeue_all(
    State(c): Shared,
    ApiActor(actor): ApiActor,
) -> ApiResult<AllRequeued> {
    act::dead_requeue_all(&c, actor).await.map(Json)
}

/// Purge every dead letter
///
/// As `hookfleet dead purge --all`.
#[utoipa::path(post, path = "/api/v1/dead-letters/purge-all", operation_id = "purgeAllDeadLetters", tag = "dead letters",
    responses((status = 200, description = "how many", body = AllPurged)))]
pub(crate) async fn dead_purge_all(
    State(c): Shared,
    ApiActor(actor): ApiActor,
) -> ApiResult<AllPurged> {
    act::dead_purge_all(&c, actor).await.map(Json)
}

/// Requeue a dead letter
///
/// It goes back on the queue it came from.
#[utoipa::path(post, path = "/api/v1/dead-letters/{id}/requeue", operation_id = "requeueDeadLetter", tag = "dead letters",
    params(("id" = String, Path, description = "the dead letter's id")),
    responses(
        (status = 200, description = "requeued", body = DeadRequeued),
        (status = 404, description = "no such dead letter")))]
pub(crate) async fn dead_requeue(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(id): Path<String>,
) -> ApiResult<DeadRequeued> {
    act::dead_requeue(&c, actor, &id).await.map(Json)
}

/// Purge a dead letter
#[utoipa::path(post, path = "/api/v1/dead-letters/{id}/purge", operation_id = "purgeDeadLetter", tag = "dead letters",
    params(("id" = String, Path, description = "the dead letter's id")),
    responses(
        (status = 200, description = "purged", body = DeadPurged),
        (status = 404, description = "no such dead letter")))]
pub(crate) async fn dead_purge(
    State(c): Shared,
    ApiActor(actor): ApiActor,
    Path(id): Path<String>,
) -> ApiResult<DeadPurged> {
    act::dead_purge(&c, actor, &id).await.map(Json)
}
