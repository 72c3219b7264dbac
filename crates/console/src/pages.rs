//! The console's pages: server-rendered HTML (minijinja, every value
//! escaped), a stylesheet and a little JavaScript (times in the viewer's
//! time zone and how long ago, confirmations, "select all"); each page
//! reads and works without it. Every button is a form POST carrying the
//! session's CSRF token, and calls the same action as the API.
//!
//! # Layout
//! - this file: the templates and their filters, the pages people read.
//! - `session`: logging in and out, the CSRF check.
//! - `chart`: the overview's chart.
//! - `actions`: every button and form (one table, `PAGE_ACTIONS`, served by
//!   one handler), bulk actions on the rows ticked in a list.
//! - `webhook_form`: the webhook form, read into the API's JSON definition.
//! - `filters`: how the templates show times and JSON bodies.

mod actions;
mod chart;
mod filters;
mod session;
mod webhook_form;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use chrono::Utc;
use minijinja::{context, Environment, Value};
use serde::Serialize;

use self::actions::{page_action, Fields, PAGE_ACTIONS};
use self::chart::chart;
use self::session::{csrf_checked, login, login_form, logout};
use self::webhook_form::WebhookForm;
use crate::api::parse_id;
use crate::auth::{self, Actor, PageActor, Role};
use crate::read;
use crate::read::ListQuery;
use crate::{ApiError, Console};

/// Minutes the overview's chart covers.
pub const CHART_MINUTES: i32 = 60;

/// Deliveries a webhook's page lists (the deliveries page pages on).
pub const WEBHOOK_PAGE_ROWS: i64 = 50;

const CSS: &str = include_str!("static/console.css");
const JS: &str = include_str!("static/console.js");

static TEMPLATES: LazyLock<Environment<'static>> = LazyLock::new(|| {
    let mut env = Environment::new();
    for (name, source) in [
        ("layout.html", include_str!("templates/layout.html")),
        ("login.html", include_str!("templates/login.html")),
        ("overview.html", include_str!("templates/overview.html")),
        ("webhooks.html", include_str!("templates/webhooks.html")),
        ("webhook.html", include_str!("templates/webhook.html")),
        ("deliveries.html", include_str!("templates/deliveries.html")),
        ("delivery.html", include_str!("templates/delivery.html")),
        ("dead.html", include_str!("templates/dead.html")),
        (
            "webhook_form.html",
            include_str!("templates/webhook_form.html"),
        ),
        ("error.html", include_str!("templates/error.html")),
    ] {
        env.add_template(name, source)
            .expect("the console's templates parse");
    }
    // Every value a page shows: a name, a reason or an answer that hides
    // behind bidirectional or invisible characters is shown with them
    // escaped (as the CLI shows it), then HTML-escaped.
    env.set_formatter(|out, state, value| {
        if let Some(text) = value.as_str().filter(|_| !value.is_safe()) {
            if let std::borrow::Cow::Owned(escaped) = hookfleet_core::domain::shown(text) {
                return minijinja::escape_formatter(out, state, &minijinja::Value::from(escaped));
            }
        }
        minijinja::escape_formatter(out, state, value)
    });
    env.add_filter("urlencode", |s: String| path_segment(&s));
    env.add_filter("percent", |rate: f64| format!("{:.1}%", rate * 100.0));
    env.add_filter("when", |t: Value| filters::when(&t, Utc::now()));
    env.add_filter("pretty_json", |s: String| filters::pretty_json(&s));
    env.add_filter("bytes", |s: String| s.len());
    env
});

/// `s` as one URL path segment: everything but unreserved characters
/// percent-encoded. A segment that reads `new` is written `%6Eew`: the
/// router takes that for the webhook named `new`, never for the "New
/// webhook" form at `/webhooks/new`.
fn path_segment(s: &str) -> String {
    if s == "new" {
        return "%6Eew".into();
    }
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub fn router() -> Router<Arc<Console>> {
    let pages = Router::new()
        .route("/", get(overview))
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
        .route("/webhooks", get(webhooks))
        .route("/webhooks/new", get(new_webhook))
        .route("/webhooks/{name}", get(webhook))
        .route("/webhooks/{name}/edit", get(edit_webhook))
        .route("/deliveries", get(deliveries))
        .route("/deliveries/{id}", get(delivery))
        .route("/dead-letters", get(dead_letters))
        .route("/static/console.css", get(|| asset("text/css", CSS)))
        .route("/static/console.js", get(|| asset("text/javascript", JS)));
    PAGE_ACTIONS
        .into_iter()
        .fold(pages, |pages, (path, action)| {
            // `on` names what the action acts on; a bulk action names
            // nothing in its path.
            let handler = move |State(c): State<Arc<Console>>,
                                visitor: PageActor,
                                on: Option<Path<String>>,
                                Form(form): Form<Vec<(String, String)>>| {
                let on = on.map(|Path(on)| on).unwrap_or_default();
                page_action(action, c, visitor, on, Fields(form))
            };
            pages.route(path, post(handler))
        })
}

async fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// The visitor as a template sees them.
#[derive(Serialize)]
struct Who {
    name: &'static str,
    can_act: bool,
}

/// What every page passes to the layout.
#[derive(Clone)]
struct Page {
    title: String,
    section: &'static str,
    actor: Actor,
    csrf: String,
    notice: Option<String>,
    /// Why what was asked was refused, above the content.
    problem: Option<String>,
    q: Option<String>,
}

impl Page {
    fn new(
        title: impl Into<String>,
        section: &'static str,
        visitor: &PageActor,
        console: &Console,
        actor: Actor,
    ) -> Page {
        Page {
            title: title.into(),
            section,
            actor,
            csrf: console.tokens.csrf_for(&visitor.session),
            notice: None,
            problem: None,
            q: None,
        }
    }

    /// The same visitor's page, under another title (an action answering
    /// with a page of its own).
    fn retitled(&self, title: String, section: &'static str) -> Page {
        Page {
            title,
            section,
            ..self.clone()
        }
    }

    fn who(&self) -> Who {
        Who {
            name: self.actor.name,
            can_act: self.actor.role == Role::Full,
        }
    }

    /// Renders `template` with `ctx` (plus `actor` and `csrf`) inside the
    /// layout.
    fn render(&self, template: &str, ctx: Value) -> Response {
        let base = context! { actor => self.who(), csrf => &self.csrf };
        match TEMPLATES
            .get_template(template)
            .and_then(|t| t.render(context! { ..ctx, ..base }))
        {
            Ok(html) => self.wrap(html),
            Err(e) => failed(&e),
        }
    }

    /// Puts rendered `content` inside the layout.
    fn wrap(&self, content: String) -> Response {
        in_layout(
            context! {
                title => &self.title,
                section => self.section,
                notice => &self.notice,
                problem => &self.problem,
                q => &self.q,
                actor => self.who(),
                csrf => &self.csrf,
            },
            content,
        )
    }
}

/// `content` inside the layout, with the layout's values `ctx`. Pages show
/// live state and a CSRF token: never cached (the security headers every
/// answer carries are the router's, see `timed`).
fn in_layout(ctx: Value, content: String) -> Response {
    let page = TEMPLATES
        .get_template("layout.html")
        .and_then(|t| t.render(context! { content => Value::from_safe_string(content), ..ctx }));
    match page {
        Ok(html) => (
            [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
            Html(html),
        )
            .into_response(),
        Err(e) => failed(&e),
    }
}

fn failed(e: &minijinja::Error) -> Response {
    tracing::error!(error = %e, "a console page did not render");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        "the page did not render; see the console's log",
    )
        .into_response()
}

/// A page for an error of an action or a read.
fn error_page(page: &Page, e: ApiError) -> Response {
    let mut r = page.render(
        "error.html",
        context! { heading => status_heading(e.0), message => e.1 },
    );
    *r.status_mut() = e.0;
    r
}

fn status_heading(status: StatusCode) -> &'static str {
    match status {
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::FORBIDDEN => "Not allowed",
        StatusCode::CONFLICT => "Refused",
        StatusCode::BAD_REQUEST => "Bad request",
        StatusCode::SERVICE_UNAVAILABLE => "Unavailable",
        _ => "Failed",
    }
}

/// The login page, for a visitor without a session (status 401).
fn ask_login(next: &str) -> Response {
    let content = TEMPLATES.get_template("login.html").and_then(|t| {
        t.render(context! { next => safe_next(next), hours => auth::SESSION_LIFE.as_secs() / 3600 })
    });
    match content {
        Ok(c) => {
            let mut r = in_layout(context! { title => "Log in" }, c);
            *r.status_mut() = StatusCode::UNAUTHORIZED;
            r
        }
        Err(e) => failed(&e),
    }
}

/// A local path to go back to (never another site: `//host` and schemes
/// are refused).
fn safe_next(next: &str) -> &str {
    if next.starts_with('/')
        && !next.starts_with("//")
        && !next.contains('\\')
        && !next.chars().any(|ch| ch.is_control() || ch.is_whitespace())
    {
        next
    } else {
        "/"
    }
}

/// The visitor's actor, or the login page.
macro_rules! visitor {
    ($visitor:expr, $next:expr) => {
        match $visitor.actor {
            Some(a) => a,
            None => return ask_login($next),
        }
    };
}

async fn overview(State(c): State<Arc<Console>>, visitor: PageActor) -> Response {
    let actor = visitor!(visitor, "/");
    let page = Page::new("Overview", "overview", &visitor, &c, actor);
    let stats = match hookfleet_admin::stats::stats(&c.store, &c.queue).await {
        Ok(s) => s,
        Err(e) => return error_page(&page, e.into()),
    };
    let minutes = match hookfleet_admin::stats::activity(&c.store, CHART_MINUTES).await {
        Ok(m) => m,
        Err(e) => return error_page(&page, e.into()),
    };
    let (workers, workers_error) = match c.queue.registry().workers().await {
        Ok(w) => (w, None),
        Err(e) => (Vec::new(), Some(format!("Redis did not answer: {e}"))),
    };
    page.render(
        "overview.html",
        context! {
            about => if stats.rows_estimated { "~" } else { "" },
            stats => Value::from_serialize(&stats),
            chart => Value::from_serialize(chart(&minutes)),
            workers => Value::from_serialize(&workers),
            workers_error,
        },
    )
}

async fn webhooks(
    State(c): State<Arc<Console>>,
    visitor: PageActor,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let actor = visitor!(visitor, "/webhooks");
    let mut page = Page::new("Webhooks", "webhooks", &visitor, &c, actor);
    page.notice = notice_of(&c, &visitor, &q);
    match read::webhooks(&c, page.actor).await {
        Ok(views) => page.render(
            "webhooks.html",
            context! { webhooks => Value::from_serialize(views) },
        ),
        Err(e) => error_page(&page, e),
    }
}

/// An event id as hookfleet makes them (`msg_` and 32 hex digits) or as
/// Frappe's import keeps them (64 hex digits): what the search box takes
/// for a `webhook-id` rather than a document's name.
fn looks_like_event_id(text: &str) -> bool {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    match text.strip_prefix("msg_") {
        Some(rest) => hex(rest),
        None => text.len() == 64 && hex(text),
    }
}

/// Renders the rows of a delivery list (the table alone, for embedding),
/// with its "Retry selected" form, which comes back to `here`.
fn delivery_table(
    page: &Page,
    rows: &[hookfleet_core::domain::DeliveryLog],
    next: Option<String>,
    heading: bool,
    f: &ListQuery,
    here: &str,
) -> Result<String, minijinja::Error> {
    TEMPLATES.get_template("deliveries.html")?.render(context! {
        rows => Value::from_serialize(read::delivery_views(rows, page.actor)),
        next,
        heading,
        here,
        max_bulk => actions::MAX_BULK_IDS,
        f => context! {
            webhook => &f.webhook, status => &f.status, document => &f.document,
            event => &f.event, since => &f.since,
        },
        actor => page.who(),
        csrf => &page.csrf,
    })
}

async fn webhook(
    State(c): State<Arc<Console>>,
    visitor: PageActor,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let actor = visitor!(visitor, &format!("/webhooks/{}", path_segment(&name)));
    let mut page = Page::new(format!("Webhook {name}"), "webhooks", &visitor, &c, actor);
    page.notice = notice_of(&c, &visitor, &q);
    webhook_page(&c, &page, &name, TestPanel::default()).await
}

/// The test panel of a webhook's page: the document in its box (by
/// default one of the webhook's entity type with only a name), and what
/// Preview showed or why nothing was sent.
#[derive(Serialize, Default)]
struct TestPanel {
    doc: Option<String>,
    preview: Option<serde_json::Value>,
    problem: Option<String>,
}

impl TestPanel {
    fn preview(doc: String, preview: serde_json::Value) -> TestPanel {
        TestPanel {
            doc: Some(doc),
            preview: Some(preview),
            problem: None,
        }
    }

    fn problem(doc: String, problem: String) -> TestPanel {
        TestPanel {
            doc: Some(doc),
            preview: None,
            problem: Some(problem),
        }
    }
}

/// The webhook `name`'s page: its definition and health, its buttons, the
/// test panel as `panel` says, and its latest deliveries.
async fn webhook_page(c: &Console, page: &Page, name: &str, panel: TestPanel) -> Response {
    let page = page.retitled(format!("Webhook {name}"), "webhooks");
    let w = match read::webhook(c, name, page.actor).await {
        Ok(v) => v,
        Err(e) => return error_page(&page, e),
    };
    let list = ListQuery {
        webhook: Some(name.to_string()),
        limit: Some(WEBHOOK_PAGE_ROWS),
        ..ListQuery::default()
    };
    let rows = match read::deliveries(c, &list).await {
        Ok(r) => r,
        Err(e) => return error_page(&page, e),
    };
    let here = format!("/webhooks/{}", path_segment(name));
    let next = (rows.len() as i64 == WEBHOOK_PAGE_ROWS).then(|| {
        format!(
            "/deliveries?webhook={}&before={}",
            path_segment(name),
            rows.last().map_or(0, |r| r.id)
        )
    });
    let table = match delivery_table(&page, &rows, next, false, &list, &here) {
        Ok(t) => t,
        Err(e) => return failed(&e),
    };
    let doc = panel.doc.unwrap_or_else(|| {
        let entity_type = w["entity_type"].as_str().unwrap_or_default();
        let sample = hookfleet_admin::preview::default_sample_doc(entity_type);
        serde_json::to_string_pretty(&sample).unwrap_or_default()
    });
    page.render(
        "webhook.html",
        context! {
            w => Value::from_serialize(&w),
            deliveries => Value::from_safe_string(table),
            test => context! {
                doc,
                preview => panel.preview.map(|p| Value::from_serialize(&p)),
                problem => panel.problem,
            },
        },
    )
}

/// The "New webhook" form (the full token only).
async fn new_webhook(State(c): State<Arc<Console>>, visitor: PageActor) -> Response {
    let actor = visitor!(visitor, "/webhooks/new");
    let page = Page::new("New webhook", "webhooks", &visitor, &c, actor);
    if let Err(e) = actor.may_act() {
        return error_page(&page, e);
    }
    webhook_form_page(&page, &WebhookForm::blank(), None, None, StatusCode::OK)
}

/// A webhook's "Edit" form, filled from it (the full token only).
async fn edit_webhook(
    State(c): State<Arc<Console>>,
    visitor: PageActor,
    Path(name): Path<String>,
) -> Response {
    let actor = visitor!(visitor, &format!("/webhooks/{}/edit", path_segment(&name)));
    let page = Page::new(format!("Edit {name}"), "webhooks", &visitor, &c, actor);
    if let Err(e) = actor.may_act() {
        return error_page(&page, e);
    }
    match read::webhook(&c, &name, actor).await {
        Ok(w) => {
            let form = WebhookForm::of_view(&w);
            webhook_form_page(&page, &form, Some(&name), None, StatusCode::OK)
        }
        Err(e) => error_page(&page, e),
    }
}

/// The webhook form: a new webhook's (`editing` None) or the webhook
/// `editing`'s, filled from `form`, with `problem` (why it was refused)
/// above it, answered with `status`.
fn webhook_form_page(
    page: &Page,
    form: &WebhookForm,
    editing: Option<&str>,
    problem: Option<String>,
    status: StatusCode,
) -> Response {
    let title = match editing {
        Some(name) => format!("Edit {name}"),
        None => "New webhook".into(),
    };
    let mut page = page.retitled(title, "webhooks");
    page.problem = problem;
    let mut r = page.render(
        "webhook_form.html",
        context! { form => Value::from_serialize(form), editing },
    );
    if r.status().is_success() {
        *r.status_mut() = status;
    }
    r
}

/// After an action: back to the page, saying what happened.
fn done(c: &Console, visitor: &PageActor, to: &str, message: &str) -> Response {
    let sep = if to.contains('?') { '&' } else { '?' };
    let sig = c.tokens.sign_notice(&visitor.session, message);
    Redirect::to(&format!(
        "{to}{sep}done={}&sig={}",
        path_segment(message),
        path_segment(&sig)
    ))
    .into_response()
}

/// The notice an action left for this visitor (signed for their session:
/// a link from elsewhere shows nothing).
fn notice_of(c: &Console, visitor: &PageActor, q: &HashMap<String, String>) -> Option<String> {
    let (notice, sig) = (q.get("done")?, q.get("sig")?);
    c.tokens
        .notice_ok(&visitor.session, notice, sig)
        .then(|| notice.clone())
}

async fn deliveries(
    State(c): State<Arc<Console>>,
    visitor: PageActor,
    q: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    let actor = visitor!(visitor, "/deliveries");
    let mut page = Page::new("Deliveries", "deliveries", &visitor, &c, actor);
    let q = q.map(|Query(q)| q).unwrap_or_default();
    page.notice = notice_of(&c, &visitor, &q);
    let get = |k: &str| {
        q.get(k)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    // The search box: a delivery id opens it; an event id (64 hex
    // characters) or anything else searches documents by name.
    let (mut search_document, mut search_event_id) = (None, None);
    if let Some(search) = get("q") {
        page.q = Some(search.clone());
        // A number opens that delivery if there is one; else it may be a
        // document's name (Frappe names some doctypes by number).
        let id = search.parse::<i64>().ok().filter(|id| *id > 0);
        if let Some(id) = id {
            if read::delivery(&c, id).await.is_ok() {
                return Redirect::to(&format!("/deliveries/{id}")).into_response();
            }
        }
        if looks_like_event_id(&search) {
            search_event_id = Some(search);
        } else {
            search_document = Some(search);
        }
    }
    let list = ListQuery {
        webhook: get("webhook"),
        status: get("status"),
        document: get("document").or_else(|| search_document.clone()),
        event: get("event"),
        event_id: get("event_id").or(search_event_id),
        since: get("since"),
        until: get("until"),
        before: get("before").and_then(|b| b.parse().ok()),
        limit: None,
    };
    let mut rows = match read::deliveries(&c, &list).await {
        Ok(r) => r,
        Err(e) => return error_page(&page, e),
    };
    // A caller may choose any event id: a search that found no document of
    // that name looks for the event id too, and the other way round.
    if let (true, Some(search)) = (rows.is_empty(), page.q.clone()) {
        let mut other = list.clone();
        if other.document.as_deref() == Some(search.as_str()) {
            (other.document, other.event_id) = (None, Some(search));
        } else if other.event_id.as_deref() == Some(search.as_str()) {
            (other.document, other.event_id) = (Some(search), None);
        }
        match read::deliveries(&c, &other).await {
            Ok(r) => rows = r,
            Err(e) => return error_page(&page, e),
        }
    }
    // This list's filters (not a notice's), for the next page and for
    // coming back here after "Retry selected".
    let mut params: Vec<(String, String)> = q
        .iter()
        .filter(|(k, _)| !["before", "done", "sig"].contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    params.sort();
    let url_of = |params: &[(String, String)]| {
        let query: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{}={}", path_segment(k), path_segment(v)))
            .collect();
        if query.is_empty() {
            "/deliveries".to_string()
        } else {
            format!("/deliveries?{}", query.join("&"))
        }
    };
    let here = url_of(&params);
    let next = (rows.len() as i64 == crate::DEFAULT_LIST_LIMIT).then(|| {
        params.push(("before".into(), rows.last().map_or(0, |r| r.id).to_string()));
        url_of(&params)
    });
    let table = match delivery_table(&page, &rows, next, true, &list, &here) {
        Ok(t) => t,
        Err(e) => return failed(&e),
    };
    page.wrap(table)
}

async fn delivery(
    State(c): State<Arc<Console>>,
    visitor: PageActor,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let actor = visitor!(visitor, &format!("/deliveries/{}", path_segment(&id)));
    let title = format!("Delivery {id}");
    let mut page = Page::new(title, "deliveries", &visitor, &c, actor);
    page.notice = notice_of(&c, &visitor, &q);
    let id = match parse_id(&id) {
        Ok(id) => id,
        Err(e) => return error_page(&page, e),
    };
    let (row, attempts) = match read::delivery(&c, id).await {
        Ok(found) => found,
        Err(e) => return error_page(&page, e),
    };
    let headers = read::sent_headers(&c, &row).await;
    page.render(
        "delivery.html",
        context! {
            d => Value::from_serialize(read::view_of(&row, &attempts, page.actor)),
            headers => Value::from_serialize(&headers),
        },
    )
}

async fn dead_letters(
    State(c): State<Arc<Console>>,
    visitor: PageActor,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let actor = visitor!(visitor, "/dead-letters");
    let mut page = Page::new("Dead letters", "dead", &visitor, &c, actor);
    page.notice = notice_of(&c, &visitor, &q);
    let letters =
        match hookfleet_admin::dead::list(&c.queue, crate::DEFAULT_LIST_LIMIT as isize).await {
            Ok(l) => l,
            Err(e) => return error_page(&page, e.into()),
        };
    page.render(
        "dead.html",
        context! { letters => Value::from_serialize(&letters) },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_renders_escaped() {
        let env = &*TEMPLATES;
        let html = env
            .get_template("error.html")
            .unwrap()
            .render(context! { heading => "x", message => "<script>alert(1)</script>" })
            .unwrap();
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
    }

    #[test]
    fn only_local_paths_are_followed_after_login() {
        assert_eq!(safe_next("/webhooks"), "/webhooks");
        assert_eq!(safe_next("//evil.example"), "/");
        assert_eq!(safe_next("https://evil.example"), "/");
        assert_eq!(safe_next("/\\evil.example"), "/");
    }

    #[test]
    fn the_search_box_tells_event_ids_from_document_names() {
        assert!(looks_like_event_id("msg_01a23171423477d58cfddeff11518064"));
        assert!(looks_like_event_id(&"ab".repeat(32)));
        assert!(!looks_like_event_id("SO-0001"));
        assert!(!looks_like_event_id("msg_"));
        assert!(!looks_like_event_id(&"ab".repeat(31)));
    }

    /// Every form the templates post to is a page action, and every page
    /// action has a form (login and logout are no actions).
    #[test]
    fn the_templates_post_to_the_page_actions_and_to_nothing_else() {
        let generic = |path: &str| {
            let mut out = String::new();
            let mut rest = path;
            while let Some(open) = rest.find('{') {
                out.push_str(&rest[..open]);
                let close = rest[open..].find('}').map_or(rest.len(), |c| open + c + 1);
                // A template writes `{{ x }}`: skip the second brace too.
                let close = if rest[close..].starts_with('}') {
                    close + 1
                } else {
                    close
                };
                out.push_str("{}");
                rest = &rest[close..];
            }
            out + rest
        };
        let mut posted = std::collections::BTreeSet::new();
        for name in TEMPLATES.templates().map(|(name, _)| name) {
            let source = TEMPLATES.get_template(name).unwrap().source().to_string();
            // A form's action, and a button's own (`formaction`).
            for marker in ["method=\"post\" action=\"", "formaction=\""] {
                for form in source.split(marker).skip(1) {
                    let action = &form[..form.find('"').unwrap()];
                    // Where the answer scrolls to is no part of the path.
                    let action = action.split('#').next().unwrap();
                    if !["/login", "/logout"].contains(&action) {
                        posted.insert(generic(action));
                    }
                }
            }
        }
        let served: std::collections::BTreeSet<String> =
            PAGE_ACTIONS.iter().map(|(path, _)| generic(path)).collect();
        assert_eq!(posted, served);
    }

    #[test]
    fn a_path_segment_escapes_everything_but_unreserved_characters() {
        assert_eq!(path_segment("a b/c?d"), "a%20b%2Fc%3Fd");
        assert_eq!(path_segment("orders-v2_x.y~"), "orders-v2_x.y~");
        assert_eq!(path_segment("new"), "%6Eew", "never the form's path");
    }
}
