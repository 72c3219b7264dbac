//! The console's pages: server-rendered HTML (minijinja, every value
//! escaped), a stylesheet and a few lines of JavaScript that show times in
//! the viewer's time zone. Every button is a form POST carrying the
//! session's CSRF token, and calls the same action as the API: the buttons
//! are one table (`PAGE_ACTIONS`) served by one handler.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use minijinja::{context, Environment, Value};
use serde::Serialize;

use crate::api::parse_id;
use crate::auth::{self, Actor, PageActor, Role};
use crate::read::ListQuery;
use crate::{act, read};
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
    env
});

/// `s` as one URL path segment: everything but unreserved characters
/// percent-encoded.
fn path_segment(s: &str) -> String {
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
        .route("/webhooks/{name}", get(webhook))
        .route("/deliveries", get(deliveries))
        .route("/deliveries/{id}", get(delivery))
        .route("/dead-letters", get(dead_letters))
        .route("/static/console.css", get(|| asset("text/css", CSS)))
        .route("/static/console.js", get(|| asset("text/javascript", JS)));
    PAGE_ACTIONS
        .into_iter()
        .fold(pages, |pages, (path, action)| {
            let handler =
                move |State(c): State<Arc<Console>>,
                      visitor: PageActor,
                      Path(on): Path<String>,
                      Form(form): Form<HashMap<String, String>>| {
                    page_action(action, c, visitor, on, form)
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
struct Page<'a> {
    title: &'a str,
    section: &'a str,
    actor: Actor,
    csrf: String,
    notice: Option<String>,
    q: Option<String>,
}

impl Page<'_> {
    fn new<'a>(
        title: &'a str,
        section: &'a str,
        visitor: &PageActor,
        console: &Console,
        actor: Actor,
    ) -> Page<'a> {
        Page {
            title,
            section,
            actor,
            csrf: console.tokens.csrf_for(&visitor.session),
            notice: None,
            q: None,
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
                title => self.title,
                section => self.section,
                notice => &self.notice,
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

async fn login_form(visitor: PageActor) -> Response {
    if visitor.actor.is_some() {
        return Redirect::to("/").into_response();
    }
    ask_login("/")
}

async fn login(
    State(c): State<Arc<Console>>,
    peer: Option<axum::Extension<hookfleet_core::runtime::http::Peer>>,
    headers: axum::http::HeaderMap,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let given = form.get("token").map(|t| t.trim()).unwrap_or("");
    let next = safe_next(form.get("next").map(String::as_str).unwrap_or("/")).to_string();
    let peer = peer.map(|p| p.0 .0.ip());
    if peer.and_then(|p| c.tokens.guesses.refused(p)).is_some() {
        tracing::warn!("console login refused: too many wrong tokens from this address");
        let mut r = ask_login(&next);
        *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        return r;
    }
    let Some(actor) = c.tokens.actor_of(given) else {
        if let Some(p) = peer {
            c.tokens.guesses.wrong(p);
        }
        tracing::warn!("console login refused: wrong token");
        tokio::time::sleep(auth::REFUSAL_DELAY).await;
        let mut r = ask_login(&next);
        *r.status_mut() = StatusCode::UNAUTHORIZED;
        return r;
    };
    tracing::info!(actor = actor.name, "console login");
    // Behind a TLS proxy (which says so), the cookie never travels in clear.
    let behind_tls = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    let cookie = format!(
        "{}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        auth::COOKIE,
        c.tokens.session_for(actor.role),
        auth::SESSION_LIFE.as_secs(),
        if behind_tls { "; Secure" } else { "" }
    );
    let mut r = Redirect::to(&next).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// Checks a form's CSRF token against the visitor's session.
fn csrf_checked(
    c: &Console,
    visitor: &PageActor,
    form: &HashMap<String, String>,
) -> Result<(), ApiError> {
    let given = form.get("csrf").map(String::as_str).unwrap_or("");
    if c.tokens.csrf_ok(&visitor.session, given) {
        Ok(())
    } else {
        tracing::warn!("console action refused: missing or wrong CSRF token");
        Err(ApiError(
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or stale; reload the page and try again".into(),
        ))
    }
}

async fn logout(
    State(c): State<Arc<Console>>,
    visitor: PageActor,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    if csrf_checked(&c, &visitor, &form).is_err() {
        return (StatusCode::FORBIDDEN, "missing or stale CSRF token").into_response();
    }
    // The cookie is dropped by the browser, and the session ended here, so
    // a copy of it kept elsewhere opens nothing either.
    c.tokens.revoke(&visitor.session);
    if let Some(actor) = visitor.actor {
        tracing::info!(actor = actor.name, "console logout");
    }
    let mut r = Redirect::to("/login").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "hookfleet_console=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
    r
}

/// One bar of the overview's chart (SVG units).
#[derive(Serialize)]
struct Bar {
    x: f64,
    ok: i64,
    failed: i64,
    ok_y: f64,
    ok_h: f64,
    failed_y: f64,
    failed_h: f64,
    label: String,
}

#[derive(Serialize)]
struct Chart {
    width: u32,
    height: u32,
    bar: f64,
    bars: Vec<Bar>,
    peak: i64,
    /// The first minute (RFC 3339), under the bars' left end.
    first: String,
    total_ok: i64,
    total_failed: i64,
}

/// Stacked bars, failures on top, scaled to the busiest minute.
fn chart(minutes: &[hookfleet_core::store::deliveries::MinuteCount]) -> Chart {
    const W: u32 = 600;
    const H: u32 = 120;
    let slot = W as f64 / minutes.len().max(1) as f64;
    let peak = minutes.iter().map(|m| m.ok + m.failed).max().unwrap_or(0);
    let scale = if peak > 0 {
        H as f64 / peak as f64
    } else {
        0.0
    };
    let bars = minutes
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let ok_h = m.ok as f64 * scale;
            let failed_h = m.failed as f64 * scale;
            Bar {
                x: i as f64 * slot,
                ok: m.ok,
                failed: m.failed,
                ok_y: H as f64 - ok_h,
                ok_h,
                failed_y: H as f64 - ok_h - failed_h,
                failed_h,
                label: m.minute.format("%H:%M UTC").to_string(),
            }
        })
        .collect();
    Chart {
        width: W,
        height: H,
        bar: (slot * 0.8).max(1.0),
        bars,
        peak,
        first: minutes
            .first()
            .map(|m| m.minute.to_rfc3339())
            .unwrap_or_default(),
        total_ok: minutes.iter().map(|m| m.ok).sum(),
        total_failed: minutes.iter().map(|m| m.failed).sum(),
    }
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

/// Renders the rows of a delivery list (the table alone, for embedding).
fn delivery_table(
    page: &Page,
    rows: &[hookfleet_core::domain::DeliveryLog],
    next: Option<String>,
    heading: bool,
    f: &ListQuery,
) -> Result<String, minijinja::Error> {
    TEMPLATES.get_template("deliveries.html")?.render(context! {
        rows => Value::from_serialize(read::delivery_views(rows, page.actor)),
        next,
        heading,
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
    let title = format!("Webhook {name}");
    let mut page = Page::new(&title, "webhooks", &visitor, &c, actor);
    page.notice = notice_of(&c, &visitor, &q);
    let w = match read::webhook(&c, &name, page.actor).await {
        Ok(v) => v,
        Err(e) => return error_page(&page, e),
    };
    let list = ListQuery {
        webhook: Some(name.clone()),
        limit: Some(WEBHOOK_PAGE_ROWS),
        ..ListQuery::default()
    };
    let rows = match read::deliveries(&c, &list).await {
        Ok(r) => r,
        Err(e) => return error_page(&page, e),
    };
    let next = (rows.len() as i64 == WEBHOOK_PAGE_ROWS).then(|| {
        format!(
            "/deliveries?webhook={}&before={}",
            path_segment(&name),
            rows.last().map_or(0, |r| r.id)
        )
    });
    let table = match delivery_table(&page, &rows, next, false, &list) {
        Ok(t) => t,
        Err(e) => return failed(&e),
    };
    page.render(
        "webhook.html",
        context! {
            w => Value::from_serialize(w),
            deliveries => Value::from_safe_string(table),
        },
    )
}

/// A form's fields, and where to go afterwards (a local path only).
fn back(form: &HashMap<String, String>, default: String) -> String {
    form.get("back")
        .map(|b| safe_next(b).to_string())
        .filter(|b| b != "/")
        .unwrap_or(default)
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

/// A button of the pages: a form POST to its path, whose one parameter
/// names what it acts on (a webhook, a delivery, a dead letter), carrying
/// the session's CSRF token. It runs the same action as the API (`act`:
/// the role check and the audit line) and goes back to a page with a
/// notice saying what happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PageAction {
    Pause,
    Resume,
    Retry,
    DeadRequeue,
    DeadPurge,
}

/// Every page action, as the API has [`crate::api::api_routes`]: the
/// router serves each path with [`page_action`].
const PAGE_ACTIONS: [(&str, PageAction); 5] = [
    ("/webhooks/{name}/pause", PageAction::Pause),
    ("/webhooks/{name}/resume", PageAction::Resume),
    ("/deliveries/{id}/retry", PageAction::Retry),
    ("/dead-letters/{id}/requeue", PageAction::DeadRequeue),
    ("/dead-letters/{id}/purge", PageAction::DeadPurge),
];

impl PageAction {
    /// The page to go back to: the one of what was acted on (pause and
    /// resume, shown on the webhooks list too, go where the form's `back`
    /// says, if it names a local page).
    fn back(self, on: &str, form: &HashMap<String, String>) -> String {
        match self {
            PageAction::Pause | PageAction::Resume => {
                back(form, format!("/webhooks/{}", path_segment(on)))
            }
            PageAction::Retry => format!("/deliveries/{}", path_segment(on)),
            PageAction::DeadRequeue | PageAction::DeadPurge => "/dead-letters".into(),
        }
    }

    /// Runs the action on `on` for `actor`, and says what happened.
    async fn run(
        self,
        c: &Console,
        actor: Actor,
        on: &str,
        form: &HashMap<String, String>,
    ) -> Result<String, ApiError> {
        match self {
            PageAction::Pause => {
                let reason = form
                    .get("reason")
                    .map(|r| r.trim())
                    .filter(|r| !r.is_empty());
                act::pause(c, actor, on, reason).await?;
                Ok(format!("Paused {on}."))
            }
            PageAction::Resume => {
                let v = act::resume(c, actor, on).await?;
                Ok(format!(
                    "Resumed {on}: {} due deliveries, {} enqueued now.",
                    v.due, v.enqueued
                ))
            }
            PageAction::Retry => {
                let force = form.get("force").is_some_and(|f| f == "true");
                let v = act::retry(c, actor, parse_id(on)?, force).await?;
                Ok(format!(
                    "Replayed: {} → Failed, due now ({}).",
                    v.previous_status, v.note
                ))
            }
            PageAction::DeadRequeue => {
                act::dead_requeue(c, actor, on).await?;
                Ok(format!("Requeued {on}."))
            }
            PageAction::DeadPurge => {
                act::dead_purge(c, actor, on).await?;
                Ok(format!("Purged {on}."))
            }
        }
    }
}

/// Serves every page action: the visitor logged in, the form's CSRF token
/// right, then the action, then back to its page with a signed notice (or
/// the error's page).
async fn page_action(
    action: PageAction,
    c: Arc<Console>,
    visitor: PageActor,
    on: String,
    form: HashMap<String, String>,
) -> Response {
    let to = action.back(&on, &form);
    let Some(actor) = visitor.actor else {
        return (StatusCode::UNAUTHORIZED, "log in first").into_response();
    };
    if form
        .iter()
        .any(|(k, v)| k.contains('\0') || v.contains('\0'))
    {
        return (
            StatusCode::BAD_REQUEST,
            "a NUL character is not allowed in a form",
        )
            .into_response();
    }
    let page = Page::new("Refused", "", &visitor, &c, actor);
    if let Err(e) = csrf_checked(&c, &visitor, &form) {
        return error_page(&page, e);
    }
    match action.run(&c, actor, &on, &form).await {
        Ok(notice) => done(&c, &visitor, &to, &notice),
        Err(e) => error_page(&page, e),
    }
}

async fn deliveries(
    State(c): State<Arc<Console>>,
    visitor: PageActor,
    q: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    let actor = visitor!(visitor, "/deliveries");
    let mut page = Page::new("Deliveries", "deliveries", &visitor, &c, actor);
    let q = q.map(|Query(q)| q).unwrap_or_default();
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
    let next = (rows.len() as i64 == crate::DEFAULT_LIST_LIMIT).then(|| {
        let mut params: Vec<(String, String)> = q
            .iter()
            .filter(|(k, _)| k.as_str() != "before")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        params.sort();
        params.push(("before".into(), rows.last().map_or(0, |r| r.id).to_string()));
        let query: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{}={}", path_segment(k), path_segment(v)))
            .collect();
        format!("/deliveries?{}", query.join("&"))
    });
    let table = match delivery_table(&page, &rows, next, true, &list) {
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
    let mut page = Page::new(&title, "deliveries", &visitor, &c, actor);
    page.notice = notice_of(&c, &visitor, &q);
    let id = match parse_id(&id) {
        Ok(id) => id,
        Err(e) => return error_page(&page, e),
    };
    match read::delivery_view(&c, id, page.actor).await {
        Ok(d) => page.render("delivery.html", context! { d => Value::from_serialize(d) }),
        Err(e) => error_page(&page, e),
    }
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
            for form in source.split("method=\"post\" action=\"").skip(1) {
                let action = &form[..form.find('"').unwrap()];
                if !["/login", "/logout"].contains(&action) {
                    posted.insert(generic(action));
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
    }
}
