//! Who is asking: bearer tokens for the API, a signed session cookie for the
//! pages, CSRF tokens bound to the session for the pages' actions.

use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use hookfleet_core::runtime::http::{bearer, same_secret, Guesses, Peer};

use crate::ApiError;

type HmacSha256 = Hmac<Sha256>;

/// How long a page session lasts after the token was typed: a working day.
/// The key that signs sessions is made when the console starts, so a
/// restart also ends every session.
pub const SESSION_LIFE: Duration = Duration::from_secs(12 * 3600);

/// How long a wrong token waits for its refusal: guessing stays slow (a
/// person typing a token never notices). Connections are bounded, so the
/// wait cannot pile up.
pub const REFUSAL_DELAY: Duration = Duration::from_millis(500);

/// The session cookie's name.
pub const COOKIE: &str = "hookfleet_console";

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Full,
    Read,
}

/// The caller, as logged with every action: the name of the token used.
#[derive(Debug, Clone, Copy)]
pub struct Actor {
    pub name: &'static str,
    pub role: Role,
}

impl Actor {
    /// Whoever reaches a console that has no token (loopback only).
    pub const LOOPBACK: Actor = Actor {
        name: "loopback",
        role: Role::Full,
    };

    /// The caller of a token (or a session made with one) of `role`,
    /// named after its flag.
    fn of(role: Role) -> Actor {
        Actor {
            name: match role {
                Role::Full => "token",
                Role::Read => "read-token",
            },
            role,
        }
    }

    /// Refuses a read-only caller an action.
    pub fn may_act(&self) -> Result<(), ApiError> {
        match self.role {
            Role::Full => Ok(()),
            Role::Read => Err(ApiError(
                StatusCode::FORBIDDEN,
                "this token is read-only".into(),
            )),
        }
    }
}

/// Sessions ended by logout before their time: kept until they would
/// have expired anyway, at most this many (more logouts than this within
/// a session's life are not a person's: past it, every session ends).
pub const MAX_REVOKED: usize = 100_000;

/// The configured tokens and the key that signs sessions.
pub struct Tokens {
    full: Option<String>,
    read: Option<String>,
    /// Replaced (every session ends) when the sessions logged out fill
    /// [`MAX_REVOKED`].
    key: std::sync::RwLock<[u8; 32]>,
    /// Sessions logged out: nonce → when it would have expired (Unix
    /// seconds). A signed cookie cannot be unsigned, so a logged-out one is
    /// remembered until then.
    revoked: std::sync::Mutex<std::collections::HashMap<String, i64>>,
    /// Wrong tokens per client (API and login alike).
    pub guesses: Guesses,
}

impl Tokens {
    pub fn new(full: Option<String>, read: Option<String>) -> Tokens {
        Tokens {
            full: full.map(|t| t.trim().to_string()),
            read: read.map(|t| t.trim().to_string()),
            key: std::sync::RwLock::new(hookfleet_core::domain::at_rest::random_bytes()),
            revoked: Default::default(),
            guesses: Guesses::default(),
        }
    }

    /// Ends the session `value` (its cookie's value) for good, if it is one
    /// of ours: a copy of the cookie kept elsewhere opens nothing after
    /// logout.
    pub fn revoke(&self, value: &str) {
        let Some((_, expires, nonce)) = self.session_parts(value) else {
            return;
        };
        let now = chrono::Utc::now().timestamp();
        let mut revoked = self.revoked.lock().unwrap_or_else(|e| e.into_inner());
        if revoked.len() >= MAX_REVOKED {
            revoked.retain(|_, until| *until > now);
        }
        if revoked.len() < MAX_REVOKED {
            revoked.insert(nonce.to_string(), expires);
        } else {
            // More logouts than a session's life can remember: rather than
            // forget this one, every session ends (a new key signs the next
            // ones), and the list starts again.
            *self.key.write().unwrap_or_else(|e| e.into_inner()) =
                hookfleet_core::domain::at_rest::random_bytes();
            revoked.clear();
            tracing::warn!(
                revoked = MAX_REVOKED,
                "too many sessions logged out at once to remember; every session ended, log in again"
            );
        }
    }

    /// A session cookie's fields (role, expiry, nonce), if we signed it;
    /// expiry and revocation are the caller's to check.
    fn session_parts<'v>(&self, value: &'v str) -> Option<(&'v str, i64, &'v str)> {
        let (body, sig) = value.rsplit_once('.')?;
        let sig = URL_SAFE_NO_PAD.decode(sig).ok()?;
        let want = self.mac(&[b"session", body.as_bytes()]);
        if !same_secret(&sig, &want) {
            return None;
        }
        let mut fields = body.split('.');
        let role = fields.next()?;
        let expires: i64 = fields.next()?.parse().ok()?;
        let nonce = fields.next()?;
        Some((role, expires, nonce))
    }

    pub fn has_full(&self) -> bool {
        self.full.is_some()
    }

    pub fn has_read(&self) -> bool {
        self.read.is_some()
    }

    /// No token configured: loopback only, everyone there has full access.
    pub fn is_open(&self) -> bool {
        self.full.is_none() && self.read.is_none()
    }

    /// The actor a token names, if it is one of ours. Both are compared,
    /// whatever the first gave, so the time taken says nothing.
    pub fn actor_of(&self, given: &str) -> Option<Actor> {
        let full = self
            .full
            .as_deref()
            .is_some_and(|t| same_secret(given.as_bytes(), t.as_bytes()));
        let read = self
            .read
            .as_deref()
            .is_some_and(|t| same_secret(given.as_bytes(), t.as_bytes()));
        if given.is_empty() {
            return None;
        }
        if full {
            Some(Actor::of(Role::Full))
        } else if read {
            Some(Actor::of(Role::Read))
        } else {
            None
        }
    }

    fn mac(&self, parts: &[&[u8]]) -> Vec<u8> {
        let key = *self.key.read().unwrap_or_else(|e| e.into_inner());
        let mut mac = HmacSha256::new_from_slice(&key).expect("HMAC takes keys of any length");
        for p in parts {
            mac.update(&(p.len() as u64).to_be_bytes());
            mac.update(p);
        }
        mac.finalize().into_bytes().to_vec()
    }

    /// A session cookie's value for `role`, valid for [`SESSION_LIFE`].
    pub fn session_for(&self, role: Role) -> String {
        let expires = chrono::Utc::now().timestamp() + SESSION_LIFE.as_secs() as i64;
        let nonce: [u8; 16] = hookfleet_core::domain::at_rest::random_bytes();
        let body = format!(
            "{}.{expires}.{}",
            match role {
                Role::Full => "full",
                Role::Read => "read",
            },
            URL_SAFE_NO_PAD.encode(nonce)
        );
        let sig = URL_SAFE_NO_PAD.encode(self.mac(&[b"session", body.as_bytes()]));
        format!("{body}.{sig}")
    }

    /// The actor of a session cookie, if it is ours and current.
    fn actor_of_session(&self, value: &str) -> Option<Actor> {
        let (role, expires, nonce) = self.session_parts(value)?;
        let role = match role {
            "full" if self.full.is_some() => Role::Full,
            "read" if self.read.is_some() => Role::Read,
            _ => return None,
        };
        if chrono::Utc::now().timestamp() >= expires {
            return None;
        }
        let revoked = self.revoked.lock().unwrap_or_else(|e| e.into_inner());
        if revoked.contains_key(nonce) {
            return None;
        }
        Some(Actor::of(role))
    }

    /// The CSRF token of the session `session` (its cookie's value, or ""
    /// on an open loopback console).
    pub fn csrf_for(&self, session: &str) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(&[b"csrf", session.as_bytes()]))
    }

    /// A notice to show after an action, signed so a link cannot put words
    /// in the console's mouth.
    pub fn sign_notice(&self, session: &str, notice: &str) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(&[b"notice", session.as_bytes(), notice.as_bytes()]))
    }

    pub fn notice_ok(&self, session: &str, notice: &str, sig: &str) -> bool {
        same_secret(sig.as_bytes(), self.sign_notice(session, notice).as_bytes())
    }

    /// Whether `given` is the CSRF token of `session`.
    pub fn csrf_ok(&self, session: &str, given: &str) -> bool {
        !given.is_empty() && same_secret(given.as_bytes(), self.csrf_for(session).as_bytes())
    }
}

/// The session cookie's value in a request, if any.
pub fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v)
}

/// An API caller: a bearer token, or anyone on an open loopback console.
pub struct ApiActor(pub Actor);

impl FromRequestParts<std::sync::Arc<crate::Console>> for ApiActor {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        console: &std::sync::Arc<crate::Console>,
    ) -> Result<Self, Self::Rejection> {
        let tokens = &console.tokens;
        if tokens.is_open() {
            return Ok(ApiActor(Actor::LOOPBACK));
        }
        if !parts
            .headers
            .contains_key(axum::http::header::AUTHORIZATION)
        {
            // No token is no guess: it is neither counted nor held back by
            // a lockout, so a client without one always learns what to send.
            return Err(ApiError(
                StatusCode::UNAUTHORIZED,
                "a bearer token is needed (Authorization: Bearer <token>)".into(),
            ));
        }
        let peer = parts.extensions.get::<Peer>().map(|p| p.0.ip());
        if let Some(wait) = peer.and_then(|p| tokens.guesses.refused(p)) {
            return Err(ApiError(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "too many wrong tokens from this address; try again in {} s",
                    wait.as_secs().max(1)
                ),
            ));
        }
        match tokens.actor_of(bearer(&parts.headers)) {
            Some(actor) => Ok(ApiActor(actor)),
            None => {
                if let Some(p) = peer {
                    tokens.guesses.wrong(p);
                }
                let client =
                    hookfleet_core::runtime::http::client_of(&parts.extensions, &parts.headers);
                tracing::warn!(client, "console API refused: missing or wrong bearer token");
                tokio::time::sleep(REFUSAL_DELAY).await;
                Err(ApiError(
                    StatusCode::UNAUTHORIZED,
                    "missing or wrong bearer token (Authorization: Bearer <token>)".into(),
                ))
            }
        }
    }
}

/// A page visitor: their session (None on an open loopback console, or
/// when they have not logged in: the page then asks for a token).
pub struct PageActor {
    pub actor: Option<Actor>,
    /// The session cookie's value ("" on an open console): what the CSRF
    /// token is bound to.
    pub session: String,
}

impl FromRequestParts<std::sync::Arc<crate::Console>> for PageActor {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        console: &std::sync::Arc<crate::Console>,
    ) -> Result<Self, Self::Rejection> {
        let tokens = &console.tokens;
        if tokens.is_open() {
            return Ok(PageActor {
                actor: Some(Actor::LOOPBACK),
                session: String::new(),
            });
        }
        let session = session_cookie(&parts.headers).unwrap_or("").to_string();
        Ok(PageActor {
            actor: tokens.actor_of_session(&session),
            session,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logout_past_the_remembered_many_ends_every_session() {
        let t = Tokens::new(Some("f".repeat(20)), Some("r".repeat(20)));
        let kept = t.session_for(Role::Full);
        let far = chrono::Utc::now().timestamp() + 3600;
        t.revoked
            .lock()
            .unwrap()
            .extend((0..MAX_REVOKED).map(|i| (format!("n{i}"), far)));
        let leaving = t.session_for(Role::Read);
        t.revoke(&leaving);
        assert!(t.actor_of_session(&leaving).is_none(), "the logout held");
        assert!(
            t.actor_of_session(&kept).is_none(),
            "every other session ended too, rather than the logout being forgotten"
        );
        let fresh = t.session_for(Role::Full);
        assert!(t.actor_of_session(&fresh).is_some(), "a new login works");
    }

    #[test]
    fn a_session_is_accepted_until_it_is_altered() {
        let t = Tokens::new(Some("f".repeat(20)), Some("r".repeat(20)));
        let s = t.session_for(Role::Read);
        assert_eq!(t.actor_of_session(&s).map(|a| a.role), Some(Role::Read));
        let forged = s.replacen("read", "full", 1);
        assert!(
            t.actor_of_session(&forged).is_none(),
            "a changed role breaks the signature"
        );
        let other = Tokens::new(Some("f".repeat(20)), Some("r".repeat(20)));
        assert!(
            other.actor_of_session(&s).is_none(),
            "another console's key"
        );
    }

    #[test]
    fn a_csrf_token_belongs_to_its_session() {
        let t = Tokens::new(Some("f".repeat(20)), None);
        let a = t.session_for(Role::Full);
        let b = t.session_for(Role::Full);
        assert!(t.csrf_ok(&a, &t.csrf_for(&a)));
        assert!(!t.csrf_ok(&b, &t.csrf_for(&a)));
        assert!(!t.csrf_ok(&a, ""));
    }

    #[test]
    fn tokens_name_their_actor() {
        let t = Tokens::new(Some("f".repeat(20)), Some("r".repeat(20)));
        assert_eq!(t.actor_of(&"f".repeat(20)).map(|a| a.name), Some("token"));
        assert_eq!(
            t.actor_of(&"r".repeat(20)).map(|a| a.name),
            Some("read-token")
        );
        assert!(t.actor_of("").is_none());
        assert!(t.actor_of("nope").is_none());
    }
}
