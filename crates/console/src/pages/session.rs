//! Logging in and out, and the CSRF check every form of the pages passes.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;

use super::{ask_login, safe_next};
use crate::auth::{self, PageActor};
use crate::{ApiError, Console};

/// `GET /login`: the login page, or the overview for one logged in.
pub(super) async fn login_form(visitor: PageActor) -> Response {
    if visitor.actor.is_some() {
        return Redirect::to("/").into_response();
    }
    ask_login("/")
}

/// `POST /login`: a token in, a session cookie out (a wrong token waits
/// [`auth::REFUSAL_DELAY`] and counts towards the client's lockout).
pub(super) async fn login(
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

/// Checks a form's CSRF token (`given`) against the visitor's session.
pub(super) fn csrf_checked(c: &Console, visitor: &PageActor, given: &str) -> Result<(), ApiError> {
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

/// `POST /logout`: ends the session, for every copy of its cookie.
pub(super) async fn logout(
    State(c): State<Arc<Console>>,
    visitor: PageActor,
    Form(form): Form<HashMap<String, String>>,
) -> Response {
    let given = form.get("csrf").map(String::as_str).unwrap_or("");
    if csrf_checked(&c, &visitor, given).is_err() {
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
