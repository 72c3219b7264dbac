//! The pages' buttons and forms: one table of page actions
//! ([`PAGE_ACTIONS`]) served by one handler ([`page_action`]). Each is a
//! form POST carrying the session's CSRF token, runs the same `act`
//! function as the API (the role check and the audit line), and answers
//! with its page again and a signed notice saying what happened, or, for a
//! form, the form again with the reason it was refused and what was typed.
//!
//! A bulk action (the rows ticked on a list) runs the one-row action for
//! each id in turn, at most [`MAX_BULK_IDS`] of them and for at most
//! [`BULK_DEADLINE`], and its notice says how many succeeded, which did
//! not and why (those it had no time for among them), and what went on
//! differently (a replay the next sweep will queue, Redis being away).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use hookfleet_admin::replay::QUEUED_NOW;
use hookfleet_core::domain::DeliveryStatus;

use super::webhook_form::WebhookForm;
use super::{
    csrf_checked, done, error_page, path_segment, safe_next, webhook_form_page, webhook_page, Page,
    TestPanel,
};
use crate::api::parse_id;
use crate::auth::{Actor, PageActor};
use crate::{act, read, ApiError, Console};

/// The most ids one bulk form acts on. A page lists at most 50 rows
/// (`DEFAULT_LIST_LIMIT`), so a person never meets it; it bounds what a
/// crafted form can ask of one request: each id is its own action (a
/// transaction and a Redis push, a few milliseconds when all is well).
pub const MAX_BULK_IDS: usize = 100;

/// How long a bulk action starts new ids: with Redis slow each id may take
/// its command timeout (5 s), so the ids after this are left untried and
/// the notice names them, rather than the request being cut off by its
/// 25 s limit with nothing said about which ids were done. 15 s plus one
/// last slow id stays within it.
pub const BULK_DEADLINE: Duration = Duration::from_secs(15);

/// The longest id a bulk form may name: a dead letter's is 35 characters
/// (`dl_` and a UUID), a delivery's at most 20 digits; a longer one is a
/// crafted form, refused before it reaches a log line or a notice.
const MAX_ID_BYTES: usize = 64;

/// Ids a notice names in each of its lists before it says "and N more":
/// a notice travels in the URL it redirects to.
const NOTICE_IDS: usize = 20;

/// Reasons a notice gives before it says "and N more for other reasons"
/// (the ids of one reason share it; a dead letter's reason may name its
/// id, so each could be its own).
const NOTICE_REASONS: usize = 5;

/// A form as posted: every field in order (the ticked boxes of a list
/// repeat their name).
pub struct Fields(pub Vec<(String, String)>);

impl Fields {
    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `key`.
    fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> {
        self.0
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn has_nul(&self) -> bool {
        self.0
            .iter()
            .any(|(k, v)| k.contains('\0') || v.contains('\0'))
    }

    /// Where to go afterwards: the form's `back` if it names a local page.
    fn back(&self, default: String) -> String {
        self.get("back")
            .map(|b| safe_next(b).to_string())
            .filter(|b| b != "/")
            .unwrap_or(default)
    }
}

/// A button or form of the pages. Every one has a path in
/// [`PAGE_ACTIONS`], whose one parameter (if any) names what it acts on (a
/// webhook, a delivery, a dead letter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageAction {
    Pause,
    Resume,
    Retry,
    DeadRequeue,
    DeadPurge,
    /// The deliveries ticked on a list, replayed.
    RetrySelected,
    DeadRequeueSelected,
    DeadPurgeSelected,
    DeadRequeueAll,
    DeadPurgeAll,
    /// The "New webhook" form.
    Create,
    /// A webhook's "Edit" form.
    Update,
    /// The test panel's Preview: nothing recorded or sent.
    Preview,
    /// The test panel's Send test: a real delivery to that webhook alone.
    TestSend,
}

/// Every page action, as the API has [`crate::api::api_routes`]: the
/// router serves each path with [`page_action`].
pub const PAGE_ACTIONS: [(&str, PageAction); 14] = [
    ("/webhooks/{name}/pause", PageAction::Pause),
    ("/webhooks/{name}/resume", PageAction::Resume),
    ("/deliveries/{id}/retry", PageAction::Retry),
    ("/dead-letters/{id}/requeue", PageAction::DeadRequeue),
    ("/dead-letters/{id}/purge", PageAction::DeadPurge),
    ("/deliveries/retry-selected", PageAction::RetrySelected),
    (
        "/dead-letters/requeue-selected",
        PageAction::DeadRequeueSelected,
    ),
    (
        "/dead-letters/purge-selected",
        PageAction::DeadPurgeSelected,
    ),
    ("/dead-letters/requeue-all", PageAction::DeadRequeueAll),
    ("/dead-letters/purge-all", PageAction::DeadPurgeAll),
    ("/webhooks/new", PageAction::Create),
    ("/webhooks/{name}/edit", PageAction::Update),
    ("/webhooks/{name}/preview", PageAction::Preview),
    ("/webhooks/{name}/test", PageAction::TestSend),
];

/// How an action answers.
enum Outcome {
    /// Done: to this page, with this notice.
    Done { to: String, notice: String },
    /// A page of its own: a form again with its reason, a preview.
    Shown(Response),
}

impl Outcome {
    fn done(to: String, notice: impl Into<String>) -> Result<Outcome, ApiError> {
        Ok(Outcome::Done {
            to,
            notice: notice.into(),
        })
    }
}

/// Whether a refusal is shown on the form it refused (with what was
/// typed) rather than on an error page: not for a caller who may not act
/// or a webhook that is not there.
fn shown_on_the_form(e: &ApiError) -> bool {
    !matches!(
        e.0,
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::NOT_FOUND
    )
}

impl PageAction {
    /// Runs the action on `on` for the visitor of `page`.
    async fn run(
        self,
        c: &Console,
        page: &Page,
        on: &str,
        f: &Fields,
    ) -> Result<Outcome, ApiError> {
        let actor = page.actor;
        let its_page = || format!("/webhooks/{}", path_segment(on));
        match self {
            PageAction::Pause => {
                let reason = f.get("reason").map(str::trim).filter(|r| !r.is_empty());
                act::pause(c, actor, on, reason).await?;
                Outcome::done(f.back(its_page()), format!("Paused {on}."))
            }
            PageAction::Resume => {
                let v = act::resume(c, actor, on).await?;
                let notice = format!(
                    "Resumed {on}: {} due deliveries, {} enqueued now.",
                    v.due, v.enqueued
                );
                Outcome::done(f.back(its_page()), notice)
            }
            PageAction::Retry => {
                let force = f.get("force") == Some("true");
                let v = act::retry(c, actor, parse_id(on)?, force).await?;
                let notice = format!(
                    "Replayed: {} → Failed, due now ({}).",
                    v.previous_status, v.note
                );
                Outcome::done(format!("/deliveries/{}", path_segment(on)), notice)
            }
            PageAction::DeadRequeue => {
                act::dead_requeue(c, actor, on).await?;
                Outcome::done("/dead-letters".into(), format!("Requeued {on}."))
            }
            PageAction::DeadPurge => {
                act::dead_purge(c, actor, on).await?;
                Outcome::done("/dead-letters".into(), format!("Purged {on}."))
            }
            PageAction::RetrySelected => retry_selected(c, actor, f).await,
            PageAction::DeadRequeueSelected | PageAction::DeadPurgeSelected => {
                let purge = self == PageAction::DeadPurgeSelected;
                dead_selected(c, actor, f, purge).await
            }
            PageAction::DeadRequeueAll => {
                let n = act::dead_requeue_all(c, actor).await?.requeued;
                Outcome::done(
                    "/dead-letters".into(),
                    format!("Requeued {n} dead letters."),
                )
            }
            PageAction::DeadPurgeAll => {
                let n = act::dead_purge_all(c, actor).await?.purged;
                Outcome::done("/dead-letters".into(), format!("Purged {n} dead letters."))
            }
            PageAction::Create | PageAction::Update => {
                let editing = (self == PageAction::Update).then_some(on);
                save_webhook(c, page, editing, f).await
            }
            PageAction::Preview | PageAction::TestSend => {
                test_panel(c, page, on, f, self == PageAction::TestSend).await
            }
        }
    }
}

/// Serves every page action: the visitor logged in, the form's CSRF token
/// right, then the action, then its answer (or the error's page).
pub async fn page_action(
    action: PageAction,
    c: Arc<Console>,
    visitor: PageActor,
    on: String,
    f: Fields,
) -> Response {
    let Some(actor) = visitor.actor else {
        return (StatusCode::UNAUTHORIZED, "log in first").into_response();
    };
    if f.has_nul() {
        return (
            StatusCode::BAD_REQUEST,
            "a NUL character is not allowed in a form",
        )
            .into_response();
    }
    let page = Page::new("Refused", "", &visitor, &c, actor);
    if let Err(e) = csrf_checked(&c, &visitor, f.get("csrf").unwrap_or("")) {
        return error_page(&page, e);
    }
    match action.run(&c, &page, &on, &f).await {
        Ok(Outcome::Done { to, notice }) => done(&c, &visitor, &to, &notice),
        Ok(Outcome::Shown(r)) => r,
        Err(e) => error_page(&page, e),
    }
}

/// The ids ticked (`id`, repeated), each once, in order, at most
/// [`MAX_BULK_IDS`] (refused at the first one over, however many more a
/// crafted form holds) and none longer than [`MAX_ID_BYTES`].
fn selected<'a>(f: &'a Fields, what: &str) -> Result<Vec<&'a str>, ApiError> {
    let mut ids: Vec<&str> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for id in f.all("id").map(str::trim).filter(|id| !id.is_empty()) {
        if id.len() > MAX_ID_BYTES {
            return Err(ApiError::bad_request(format!(
                "an id of over {MAX_ID_BYTES} bytes is no id of {what}"
            )));
        }
        if seen.insert(id) {
            ids.push(id);
        }
        if ids.len() > MAX_BULK_IDS {
            return Err(ApiError::bad_request(format!(
                "over {MAX_BULK_IDS} {what} selected; at most {MAX_BULK_IDS} are acted on at once: select fewer"
            )));
        }
    }
    if ids.is_empty() {
        return Err(ApiError::bad_request(format!(
            "no {what} selected: tick the ones to act on"
        )));
    }
    Ok(ids)
}

/// Why an id was left untried: the bulk action ran out of time.
const UNTRIED: &str = "not tried: the request's time ran out; select it again";

/// What a bulk action did: the ids it acted on, those of them done
/// otherwise than asked (with how), and those it did not act on, with the
/// reason.
struct Tally {
    done: Vec<String>,
    noted: Vec<(String, String)>,
    failed: Vec<(String, String)>,
    /// When the action began, for [`BULK_DEADLINE`].
    started: Instant,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            done: Vec::new(),
            noted: Vec::new(),
            failed: Vec::new(),
            started: Instant::now(),
        }
    }

    /// Whether `id` may still be tried; past [`BULK_DEADLINE`] it is
    /// counted untried instead.
    fn in_time(&mut self, id: &str) -> bool {
        let in_time = self.started.elapsed() <= BULK_DEADLINE;
        if !in_time {
            self.failed.push((id.to_string(), UNTRIED.into()));
        }
        in_time
    }

    /// "Retried 3 of 4 deliveries: 1, 2, 3. Of those, 3 (how). Not
    /// retried: 4 (the reason)."
    fn notice(&self, done: &str, not_done: &str, what: &str) -> String {
        let acted = self.done.len() + self.noted.len();
        let total = acted + self.failed.len();
        let mut out = format!("{done} {acted} of {total} {what}");
        if acted > 0 {
            let ids = self.done.iter().chain(self.noted.iter().map(|(id, _)| id));
            let ids: Vec<&str> = ids.map(String::as_str).collect();
            out.push_str(&format!(": {}", listed(ids.into_iter())));
        }
        out.push('.');
        if !self.noted.is_empty() {
            out.push_str(&format!(" Of those, {}.", by_reason(&self.noted)));
        }
        if !self.failed.is_empty() {
            out.push_str(&format!(" {not_done}: {}.", by_reason(&self.failed)));
        }
        out
    }
}

/// "1, 2 (a reason); 3 (another)": ids that share a reason share it, at
/// most [`NOTICE_REASONS`] reasons.
fn by_reason(ids: &[(String, String)]) -> String {
    let mut grouped: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, why) in ids {
        grouped.entry(why).or_default().push(id);
    }
    let reasons = grouped.len();
    let mut parts: Vec<String> = grouped
        .into_iter()
        .take(NOTICE_REASONS)
        .map(|(why, ids)| format!("{} ({why})", listed(ids.into_iter())))
        .collect();
    if reasons > NOTICE_REASONS {
        parts.push(format!(
            "and more for {} other reasons",
            reasons - NOTICE_REASONS
        ));
    }
    parts.join("; ")
}

/// `ids` joined, at most [`NOTICE_IDS`] of them and how many more.
fn listed<'a>(ids: impl ExactSizeIterator<Item = &'a str>) -> String {
    let n = ids.len();
    let shown: Vec<&str> = ids.take(NOTICE_IDS).collect();
    let more = n - shown.len();
    let mut out = shown.join(", ");
    if more > 0 {
        out.push_str(&format!(" and {more} more"));
    }
    out
}

/// "Retry selected" on a list of deliveries: each replayed as its Retry
/// button would (a Delivered one only with `force`, "also send Delivered
/// ones again").
async fn retry_selected(c: &Console, actor: Actor, f: &Fields) -> Result<Outcome, ApiError> {
    actor.may_act()?;
    let ids = selected(f, "deliveries")?
        .into_iter()
        .map(parse_id)
        .collect::<Result<Vec<i64>, _>>()?;
    let force = f.get("force") == Some("true");
    let mut tally = Tally::new();
    for id in ids {
        if !tally.in_time(&id.to_string()) {
            continue;
        }
        match act::retry(c, actor, id, force).await {
            Ok(r) if r.note == QUEUED_NOW => tally.done.push(id.to_string()),
            Ok(r) => tally.noted.push((id.to_string(), r.note)),
            Err(e) => {
                let why = match read::delivery(c, id).await {
                    Ok((row, _)) if row.status == DeliveryStatus::Delivered && !force => {
                        "Delivered: tick \"also send Delivered ones again\" to send it again"
                            .to_string()
                    }
                    _ => e.1,
                };
                tally.failed.push((id.to_string(), why));
            }
        }
    }
    let notice = tally.notice("Retried", "Not retried", "deliveries");
    Outcome::done(f.back("/deliveries".into()), notice)
}

/// "Requeue selected" or "Purge selected" on the dead letters.
async fn dead_selected(
    c: &Console,
    actor: Actor,
    f: &Fields,
    purge: bool,
) -> Result<Outcome, ApiError> {
    actor.may_act()?;
    let mut tally = Tally::new();
    for id in selected(f, "dead letters")? {
        if !tally.in_time(id) {
            continue;
        }
        let result = if purge {
            act::dead_purge(c, actor, id).await.map(drop)
        } else {
            act::dead_requeue(c, actor, id).await.map(drop)
        };
        match result {
            Ok(()) => tally.done.push(id.to_string()),
            Err(e) => tally.failed.push((id.to_string(), e.1)),
        }
    }
    let notice = if purge {
        tally.notice("Purged", "Not purged", "dead letters")
    } else {
        tally.notice("Requeued", "Not requeued", "dead letters")
    };
    Outcome::done("/dead-letters".into(), notice)
}

/// The webhook form sent: a new webhook (`act::create`, as `POST
/// /api/v1/webhooks`) or the webhook `editing` changed (`act::update`, as
/// `PATCH`). Refused, the form again with the reason and what was typed
/// (but the secret, which is never sent back).
async fn save_webhook(
    c: &Console,
    page: &Page,
    editing: Option<&str>,
    f: &Fields,
) -> Result<Outcome, ApiError> {
    page.actor.may_act()?;
    let signed = match editing {
        Some(name) => read::webhook(c, name, page.actor).await?["signed"] == Value::Bool(true),
        None => false,
    };
    let form = WebhookForm::posted(f, signed);
    let secret = f.get("secret").unwrap_or_default();
    let saved = match form.definition(secret, editing.is_some()) {
        Ok(definition) => match editing {
            Some(name) => act::update(c, page.actor, name, definition).await,
            None => act::create(c, page.actor, definition).await,
        },
        Err(e) => Err(e),
    };
    match saved {
        Ok(w) => {
            let name = w["name"].as_str().unwrap_or_default();
            let notice = match (editing, w["rotation_started"] == Value::Bool(true)) {
                (None, _) => format!("Created webhook {name}."),
                (Some(_), false) => format!("Saved webhook {name}."),
                (Some(_), true) => format!(
                    "Saved webhook {name}: the new secret signs from now on, beside the old one until rotate-finish (or a day)."
                ),
            };
            Outcome::done(format!("/webhooks/{}", path_segment(name)), notice)
        }
        Err(e) if shown_on_the_form(&e) => {
            let mut problem = e.1;
            if !secret.is_empty() {
                problem.push_str(". The secret typed was not kept: type it again.");
            }
            Ok(Outcome::Shown(webhook_form_page(
                page,
                &form,
                editing,
                Some(problem),
                e.0,
            )))
        }
        Err(e) => Err(e),
    }
}

/// The test panel of a webhook's page: Preview (what would be sent, the
/// condition's verdict) or Send test (a real delivery, then its page).
/// The document in the box stays as typed on every answer but a sent test.
async fn test_panel(
    c: &Console,
    page: &Page,
    name: &str,
    f: &Fields,
    send: bool,
) -> Result<Outcome, ApiError> {
    page.actor.may_act()?;
    let text = f.get("doc").unwrap_or_default().to_string();
    // The webhook's page again, the panel as given, answered with `status`
    // (a refusal's, or 200).
    let again = move |panel: TestPanel, status: StatusCode| async move {
        let mut r = webhook_page(c, page, name, panel).await;
        if r.status().is_success() {
            *r.status_mut() = status;
        }
        Ok::<_, ApiError>(Outcome::Shown(r))
    };
    let doc = match serde_json::from_str::<Value>(&text) {
        Ok(doc @ Value::Object(_)) => crate::api::without_nul(&doc).map(|()| doc),
        Ok(_) => Err(ApiError::bad_request("the document is not a JSON object")),
        Err(e) => Err(ApiError::bad_request(format!(
            "the document is not JSON: {e}"
        ))),
    };
    let doc = match doc {
        Ok(doc) => doc,
        Err(e) => return again(TestPanel::problem(text, e.1), e.0).await,
    };
    if !send {
        return match act::preview(c, page.actor, name, doc).await {
            Ok(preview) => again(TestPanel::preview(text, preview), StatusCode::OK).await,
            Err(e) if shown_on_the_form(&e) => again(TestPanel::problem(text, e.1), e.0).await,
            Err(e) => Err(e),
        };
    }
    match act::test_send(c, page.actor, name, doc).await {
        Ok(sent) => match sent.deliveries.first() {
            Some(d) => {
                let notice = match (&d.error, d.enqueued) {
                    (Some(why), _) => format!(
                        "Test event recorded for {name} as delivery {}, {}: {why}",
                        d.id, d.status
                    ),
                    (None, _) if sent.held => format!(
                        "Test event recorded for {name}: delivery {}, held while the webhook is paused; it is sent at Resume.",
                        d.id
                    ),
                    (None, true) => format!(
                        "Test event sent to {name}: delivery {}, queued now.",
                        d.id
                    ),
                    (None, false) => format!(
                        "Test event recorded for {name}: delivery {}; not queued now, the sweeper sends it.",
                        d.id
                    ),
                };
                Outcome::done(format!("/deliveries/{}", d.id), notice)
            }
            None => {
                let problem = "The document does not meet the webhook's condition: nothing was recorded or sent.";
                again(TestPanel::problem(text, problem.into()), StatusCode::OK).await
            }
        },
        Err(e) if shown_on_the_form(&e) => again(TestPanel::problem(text, e.1), e.0).await,
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Fields {
        Fields(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn a_bulk_form_takes_each_id_once_and_at_most_the_bound() {
        let f = fields(&[("id", "3"), ("id", "4"), ("id", "3"), ("csrf", "x")]);
        assert_eq!(selected(&f, "deliveries").unwrap(), ["3", "4"]);
        let none = fields(&[("csrf", "x")]);
        assert!(selected(&none, "deliveries")
            .unwrap_err()
            .1
            .contains("no deliveries selected"));
        let ids: Vec<String> = (0..=MAX_BULK_IDS).map(|i| i.to_string()).collect();
        let many = Fields(ids.iter().map(|i| ("id".to_string(), i.clone())).collect());
        let e = selected(&many, "deliveries").unwrap_err();
        assert_eq!(e.0, StatusCode::BAD_REQUEST);
        assert!(e.1.contains("at most 100"), "{}", e.1);
    }

    #[test]
    fn a_bulk_notice_says_how_many_and_which_failed_why() {
        let tally = Tally {
            done: vec!["1".into(), "2".into()],
            noted: vec![("6".into(), "not queued now (Redis away)".into())],
            failed: vec![
                ("3".into(), "Delivered".into()),
                ("5".into(), "Delivered".into()),
                ("4".into(), "not found".into()),
            ],
            started: Instant::now(),
        };
        assert_eq!(
            tally.notice("Retried", "Not retried", "deliveries"),
            "Retried 3 of 6 deliveries: 1, 2, 6. Of those, 6 (not queued now (Redis away)). \
             Not retried: 3, 5 (Delivered); 4 (not found)."
        );
        let many = (0..25).map(|i| i.to_string()).collect::<Vec<_>>();
        assert!(listed(many.iter().map(String::as_str)).ends_with("19 and 5 more"));
        // Reasons are bounded too: each dead letter's may be its own.
        let failed: Vec<(String, String)> = (0..9)
            .map(|i| (i.to_string(), format!("gone {i}")))
            .collect();
        let said = by_reason(&failed);
        assert!(said.ends_with("and more for 4 other reasons"), "{said}");
        assert!(!said.contains("gone 5"), "{said}");
    }

    #[test]
    fn a_bulk_form_refuses_an_id_no_row_could_have_and_stops_at_the_bound() {
        let long = "x".repeat(MAX_ID_BYTES + 1);
        let f = fields(&[("id", "dl_1"), ("id", &long)]);
        assert!(selected(&f, "dead letters")
            .unwrap_err()
            .1
            .contains("bytes"));
        // Refused at the first id over the bound, whatever follows.
        let ids: Vec<String> = (0..100_000).map(|i| i.to_string()).collect();
        let huge = Fields(ids.iter().map(|i| ("id".to_string(), i.clone())).collect());
        assert!(selected(&huge, "deliveries")
            .unwrap_err()
            .1
            .contains("at most 100"));
    }
}
