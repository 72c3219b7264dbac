//! The OpenAPI document served at `/api/v1/openapi.json`, derived from
//! the handlers (`api`, their `#[utoipa::path]`) and the types they answer
//! with, so it names what the code serves and nothing else. What every
//! operation shares (the bearer token, the errors any request may meet) is
//! added here once, by [`Shared`], rather than on each operation.

use std::sync::OnceLock;

use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
use utoipa::{Modify, OpenApi, ToSchema};

use hookfleet_core::domain::{FieldMapping, Header};

use crate::answers::ErrorBody;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "hookfleet management API",
        description = "Served by `hookfleet console`. Send `Authorization: Bearer <token>` \
            (`--token` for everything, `--read-token` for reads). Errors are \
            `{\"error\": \"...\"}`. Secrets are never returned; header values other than \
            Content-Type are hidden. A webhook read (`getWebhook`) and sent back \
            (`updateWebhook`) is accepted and changes nothing.",
        license(name = "MIT", identifier = "MIT"),
    ),
    paths(
        crate::api::openapi,
        crate::api::stats,
        crate::api::activity,
        crate::api::workers,
        crate::api::webhook_list,
        crate::api::webhook_create,
        crate::api::webhook_show,
        crate::api::webhook_update,
        crate::api::webhook_delete,
        crate::api::webhook_preview,
        crate::api::webhook_test,
        crate::api::webhook_pause,
        crate::api::webhook_resume,
        crate::api::webhook_enable,
        crate::api::webhook_disable,
        crate::api::webhook_rotate_finish,
        crate::api::frappe_import,
        crate::api::delivery_list,
        crate::api::delivery_retry_bulk,
        crate::api::delivery_show,
        crate::api::delivery_retry,
        crate::api::dead_list,
        crate::api::dead_requeue_all,
        crate::api::dead_purge_all,
        crate::api::dead_show,
        crate::api::dead_requeue,
        crate::api::dead_purge,
    ),
    components(schemas(ErrorBody)),
    modifiers(&Shared),
    security(("bearer" = [])),
    tags(
        (name = "webhooks", description = "Definitions, their health, and pausing"),
        (name = "deliveries", description = "One row per event and webhook, with its attempts"),
        (name = "dead letters", description = "Jobs no worker could use"),
        (name = "operations", description = "Counts, activity and workers"),
        (name = "meta", description = "This document"),
    )
)]
struct ApiDoc;

/// The document as JSON, built once.
pub fn document() -> &'static str {
    static DOC: OnceLock<String> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut doc = ApiDoc::openapi();
        doc.info.version = env!("CARGO_PKG_VERSION").to_string();
        doc.to_pretty_json()
            .expect("the OpenAPI document serialises")
    })
}

/// What every operation shares: the bearer scheme, and the refusals any
/// request may meet (the guard's, the token's, the database's), each with
/// the error body. An operation's own 4xx answers get the body too.
struct Shared;

impl Modify for Shared {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        for (path, item) in doc.paths.paths.iter_mut() {
            let open = path.ends_with("/openapi.json");
            for (method, op) in [
                ("get", item.get.as_mut()),
                ("post", item.post.as_mut()),
                ("patch", item.patch.as_mut()),
                ("delete", item.delete.as_mut()),
            ] {
                if let Some(op) = op {
                    shared_answers(op, method != "get", open);
                }
            }
        }
    }
}

/// Adds to `op` the answers every request may get (`acts`: it changes
/// something; `open`: it needs no token), and the error body to each
/// error answer.
fn shared_answers(op: &mut Operation, acts: bool, open: bool) {
    let has_parameters = op.parameters.as_ref().is_some_and(|p| !p.is_empty());
    let has_body = op.request_body.is_some();
    let mut shared: Vec<(&str, &str)> = vec![
        (
            "421",
            "this console has no token and answers only to a loopback host name",
        ),
        ("500", "an unexpected failure"),
    ];
    if !open {
        shared.extend([
            ("401", "a missing or wrong bearer token"),
            ("429", "too many wrong tokens from this client: wait"),
            (
                "503",
                "Postgres or Redis did not answer, or the request took over 25 s",
            ),
        ]);
    }
    if has_parameters || has_body {
        shared.push((
            "400",
            "a bad parameter or body (a NUL character is never allowed)",
        ));
    }
    if has_body {
        shared.push(("413", "the body is over 1 MiB"));
    }
    if acts {
        shared.push((
            "403",
            "the token is read-only, or the request came from another origin",
        ));
    }
    let responses = &mut op.responses.responses;
    for (status, description) in shared {
        responses
            .entry(status.to_string())
            .or_insert_with(|| ResponseBuilder::new().description(description).into());
    }
    let error = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name("ErrorBody")))
        .build();
    for (status, answer) in responses.iter_mut() {
        if let utoipa::openapi::RefOr::T(answer) = answer {
            if !status.starts_with('2') && answer.content.is_empty() {
                answer
                    .content
                    .insert("application/json".to_string(), error.clone());
            }
        }
    }
}

/// A new webhook's definition (`createWebhook`): the four keys every
/// webhook has, and the rest of [`WebhookSettings`].
#[derive(ToSchema)]
#[schema(example = json!({
    "name": "orders", "entity_type": "Sales Order", "event": "on_submit",
    "request_url": "https://hooks.example.com/orders",
    "body_template": "{\"order\": {{ doc.name | tojson }}, \"total\": {{ doc.grand_total }}}",
    "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
}))]
#[allow(dead_code)] // a description of the JSON `definitions::apply_json` reads
pub(crate) struct NewWebhook {
    /// Unique; the name every command and page uses.
    name: String,
    /// The document type whose events it takes (`Sales Order`).
    entity_type: String,
    /// The event (`on_submit`, `after_insert`, …, or any string a producer emits).
    event: String,
    /// The receiver's URL (or, with `dynamic_url`, a template of one).
    request_url: String,
    #[serde(flatten)]
    settings: WebhookSettings,
}

/// A change to a webhook (`updateWebhook`): the keys given replace those
/// parts; a webhook as read (`getWebhook`) is a change too, its read-only
/// keys (its state, health and times) ignored.
#[derive(ToSchema)]
#[schema(example = json!({"timeout": "30s", "max_retries": 10}))]
#[allow(dead_code)] // a description of the JSON `definitions::apply_json` reads
pub(crate) struct WebhookChange {
    /// A new name.
    #[schema(nullable = false)]
    name: Option<String>,
    #[schema(nullable = false)]
    entity_type: Option<String>,
    #[schema(nullable = false)]
    event: Option<String>,
    /// The receiver's URL (or, with `dynamic_url`, a template of one).
    #[schema(nullable = false)]
    request_url: Option<String>,
    #[serde(flatten)]
    settings: WebhookSettings,
}

/// The parts of a definition no webhook must give. Each may also be
/// `null` where it may be absent (the template, condition, secret and
/// limits), which clears it.
#[derive(ToSchema)]
#[allow(dead_code)] // a description of the JSON `definitions::apply_json` reads
pub(crate) struct WebhookSettings {
    /// The same as `request_url` (give one of them).
    #[schema(nullable = false, deprecated)]
    url: Option<String>,
    /// `request_url` is a Jinja template rendered per document.
    #[schema(nullable = false)]
    dynamic_url: Option<bool>,
    /// The hosts a dynamic URL may render to.
    #[schema(nullable = false)]
    allowed_hosts: Option<Vec<String>>,
    /// POST (default), PUT, PATCH, DELETE or GET.
    #[schema(nullable = false, example = "POST")]
    request_method: Option<String>,
    /// The same as `request_method` (give one of them).
    #[schema(nullable = false, deprecated)]
    method: Option<String>,
    /// `json` (default) or `form`.
    #[schema(nullable = false, example = "json")]
    request_structure: Option<String>,
    /// The same as `request_structure` (give one of them).
    #[schema(nullable = false, deprecated)]
    structure: Option<String>,
    /// A Jinja template of the JSON body (Frappe's `webhook_json`).
    #[schema(nullable)]
    body_template: Option<String>,
    /// Document fields sent under keys (Frappe's `webhook_data`).
    #[schema(nullable = false)]
    fields: Option<Vec<FieldMapping>>,
    /// Headers sent with every request; a value of `[hidden]` (as read)
    /// keeps the stored one.
    #[schema(nullable = false)]
    headers: Option<Vec<Header>>,
    /// A Frappe condition (Python expression or Jinja) a document must meet.
    #[schema(nullable, example = "doc.grand_total > 1000")]
    condition: Option<String>,
    /// The signing secret (`whsec_` + base64, or any text); never returned.
    #[schema(nullable)]
    secret: Option<String>,
    /// How long an attempt may take (`10s`, `1m30s`).
    #[schema(nullable = false, example = "10s")]
    timeout: Option<String>,
    /// The Redis queue its jobs go on.
    #[schema(nullable = false)]
    queue: Option<String>,
    #[schema(nullable = false)]
    max_retries: Option<i32>,
    /// Attempts in flight at once, fleet-wide.
    #[schema(nullable)]
    max_concurrency: Option<i32>,
    /// Attempts started per second, fleet-wide (`N/s`).
    #[schema(nullable, example = "50/s")]
    rate_limit: Option<String>,
    #[schema(nullable = false)]
    enabled: Option<bool>,
    /// Send the body as Frappe sends it: values inside a template's quotes
    /// as Python writes them (`None`, `True`, `['a']`), the JSON as
    /// Python's `json.dumps` writes it. `imports/frappe` sets it.
    #[schema(nullable = false)]
    frappe_body: Option<bool>,
    /// The document the templates are tried on before the definition is
    /// stored (default: one of the entity type with only its name).
    #[schema(nullable = false)]
    sample_doc: Option<serde_json::Map<String, serde_json::Value>>,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::Value;

    use hookfleet_admin::definitions::{JSON_KEYS, READ_ONLY_KEYS};
    use hookfleet_admin::Field;

    use super::*;
    use crate::api::api_routes;

    fn doc() -> Value {
        serde_json::from_str(document()).expect("the document is JSON")
    }

    /// The document names exactly the routes the router serves.
    #[test]
    fn the_openapi_document_matches_the_routes() {
        let doc = doc();
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
        assert!(doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")));
    }

    /// Every operation has an id, a summary and its errors with the error
    /// body; every object schema says which keys it always has.
    #[test]
    fn every_operation_and_schema_is_described() {
        let doc = doc();
        let mut ids = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let id = op["operationId"].as_str().unwrap_or_default();
                assert!(!id.is_empty(), "{method} {path}: no operationId");
                assert!(ids.insert(id.to_string()), "{id} twice");
                assert!(op["summary"].is_string(), "{id}: no summary");
                let answers = op["responses"].as_object().unwrap();
                assert!(answers.keys().any(|s| s.starts_with('2')), "{id}");
                assert!(answers.contains_key("500"), "{id}: no 500");
                for (status, a) in answers {
                    if !status.starts_with('2') {
                        assert_eq!(
                            a["content"]["application/json"]["schema"]["$ref"],
                            "#/components/schemas/ErrorBody",
                            "{id} {status}"
                        );
                    }
                }
                if path.contains('{') {
                    assert!(answers.contains_key("404"), "{id}: no 404");
                }
            }
        }
        for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
            let object = schema["type"] == "object" && schema["properties"].is_object();
            let all_optional = ["WebhookChange", "WebhookSettings", "PauseBody", "RetryBody"];
            if object && !all_optional.contains(&name.as_str()) {
                assert!(
                    schema["required"].as_array().is_some_and(|r| !r.is_empty()),
                    "{name}: no required list"
                );
            }
        }
    }

    /// A webhook as read is a definition: each of its keys is one a
    /// definition takes (under its own key or the view's) or one it
    /// ignores; and every key a definition takes is described.
    #[test]
    fn the_keys_read_are_the_keys_written() {
        let doc = doc();
        let schemas = &doc["components"]["schemas"];
        let keys = |name: &str| -> BTreeSet<String> {
            let mut keys = BTreeSet::new();
            let mut add = |s: &Value| {
                if let Some(p) = s["properties"].as_object() {
                    keys.extend(p.keys().cloned());
                }
            };
            add(&schemas[name]);
            for part in schemas[name]["allOf"].as_array().into_iter().flatten() {
                match part["$ref"].as_str() {
                    Some(r) => add(&schemas[r.rsplit('/').next().unwrap()]),
                    None => add(part),
                }
            }
            keys
        };
        let writable: BTreeSet<String> = JSON_KEYS
            .iter()
            .map(|k| k.to_string())
            .chain(Field::READ_AS.iter().map(|(_, k)| k.to_string()))
            .collect();
        for key in keys("Webhook").union(&keys("UpdatedWebhook")) {
            assert!(
                writable.contains(key) || READ_ONLY_KEYS.contains(&key.as_str()),
                "{key} is read but neither written nor ignored"
            );
        }
        let described = keys("WebhookChange");
        let missing: Vec<_> = writable.difference(&described).collect();
        assert!(missing.is_empty(), "not described: {missing:?}");
        let mut new_required: Vec<_> = schemas["NewWebhook"]["required"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(
                schemas["NewWebhook"]["allOf"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|p| p["required"].as_array().into_iter().flatten()),
            )
            .filter_map(Value::as_str)
            .collect();
        new_required.sort();
        assert_eq!(
            new_required,
            ["entity_type", "event", "name", "request_url"]
        );
    }
}
