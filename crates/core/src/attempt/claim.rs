//! The claim that allows one attempt, built in one place ([`Claim::new`])
//! from a stored request and its webhook's sealed credentials, for the
//! worker and the producer alike. No I/O here: the store claims rows and
//! the sender sends them, and both speak this type.

use std::time::Duration;

use crate::domain::at_rest::{self, Purpose};
use crate::domain::SigningKeys;
use crate::domain::{open_signing_keys, parse_headers, Header};
use crate::request::AllowedHosts;

/// How long a claim outlives the webhook's timeout: covers reading the
/// response and writing the outcome behind other outcomes in a batch. A worker
/// that dies mid-attempt leaves a lease that runs out by itself after
/// timeout + this, and the row comes due again.
pub const LEASE_MARGIN: Duration = Duration::from_secs(30);

/// A row claimed for one attempt: everything needed to send it.
#[derive(Debug, Clone)]
pub struct Claim {
    pub log_id: i64,
    /// The attempt number this claim made (attempts after the claim).
    pub attempt: i32,
    pub max_attempts: i32,
    /// The fencing token this claim set on the row: its outcome is written
    /// only while the row still carries it (no later claim, no replay).
    pub token: i64,
    pub event_id: String,
    pub webhook_name: String,
    pub webhook_id: Option<i64>,
    pub url: String,
    pub method: String,
    pub headers: Vec<Header>,
    pub body: String,
    pub timeout: Duration,
    pub keys: SigningKeys,
    /// The queue the job came from, for per-endpoint accounting.
    pub queue: String,
    /// Why the stored request cannot be sent as it is (a malformed stored
    /// value): the attempt fails for good with this reason, without a request.
    pub defect: Option<String>,
    /// Why the webhook's credentials cannot be opened (their key is not
    /// configured): the attempt fails with this reason, without a request,
    /// and is tried again on the schedule.
    pub credentials_error: Option<String>,
    /// The W3C trace context the event was emitted in: each attempt's span
    /// is its child (`runtime::trace`).
    pub traceparent: Option<String>,
}

/// What a [`Claim`] is made from: a stored request taken for one attempt,
/// and its webhook's credentials as they are now. The worker's claims and
/// the producer's workflow_transition attempts are both built from one, so
/// both judge a stored request and open credentials the same way.
pub struct ClaimSource<'a> {
    pub log_id: i64,
    pub attempt: i32,
    pub max_attempts: i32,
    pub token: i64,
    pub event_id: String,
    pub webhook_name: String,
    pub webhook_id: Option<i64>,
    /// Where the request goes.
    pub destination: Destination<'a>,
    pub method: String,
    /// The row's frozen headers (its body's Content-Type), as stored.
    pub frozen_headers: &'a serde_json::Value,
    pub body: String,
    pub timeout: Duration,
    pub queue: String,
    pub credentials: SealedCredentials<'a>,
    pub traceparent: Option<String>,
}

/// Where a stored request goes now. Its credentials are the webhook's as
/// it is now, so its destination must be too: a static URL is the
/// webhook's current one (a receiver that moved gets its pending retries);
/// a URL rendered at emit must still be on a host the webhook allows, else
/// the row cannot be sent (a token must never follow a retry to an address
/// the operator has withdrawn).
pub struct Destination<'a> {
    /// The URL frozen on the row at emit.
    pub stored: String,
    /// The webhook's URL as it is now (a template when it is dynamic).
    pub webhook_url: &'a str,
    pub dynamic: bool,
    /// The hosts the webhook allows a rendered URL now.
    pub allowed_hosts: &'a [String],
}

impl Destination<'_> {
    /// The URL to send to, or why the row may not go anywhere (with its
    /// stored URL, for the record).
    fn resolve(self) -> (String, Option<String>) {
        if !self.dynamic {
            return (self.webhook_url.to_string(), None);
        }
        let checked = url::Url::parse(&self.stored)
            .map_err(|e| format!("stored URL is not valid: {e}"))
            .and_then(|url| {
                AllowedHosts::for_template(true, self.webhook_url, self.allowed_hosts)
                    .check(&url)
                    .map_err(|e| format!("{e} (any more)"))
            });
        match checked {
            Ok(()) => (self.stored, None),
            Err(reason) => (self.stored, Some(reason)),
        }
    }
}

/// A webhook's credentials as stored: sealed at rest, opened only for an
/// attempt.
pub struct SealedCredentials<'a> {
    /// Its static headers (`[{"key": …, "value": …}]`), values sealed.
    pub headers: &'a serde_json::Value,
    pub secret: Option<&'a str>,
    /// The previous secret, only while a rotation is open.
    pub previous_secret: Option<&'a str>,
}

impl SealedCredentials<'_> {
    /// The headers and signing keys an attempt sends: the row's `frozen`
    /// headers (its body's Content-Type) with the webhook's static headers as
    /// they are now, opened, over them; and the webhook's secrets, opened. A
    /// value that cannot be opened (its key is not configured) is the
    /// attempt's error: it is tried again later, not sent without its
    /// credentials.
    fn open(&self, frozen: Vec<Header>) -> (Vec<Header>, SigningKeys, Option<String>) {
        let ring = at_rest::keyring();
        let mut error = None;
        let mut statics = Vec::new();
        for h in parse_headers(self.headers).unwrap_or_default() {
            match ring.open(&h.value, Purpose::HeaderValue) {
                Ok(value) => statics.push(Header { key: h.key, value }),
                Err(e) => {
                    error.get_or_insert(format!(
                        "the value of header {:?} cannot be opened: {e}",
                        h.key
                    ));
                }
            }
        }
        let mut headers: Vec<Header> = frozen
            .into_iter()
            .filter(|f| !statics.iter().any(|s| s.key.eq_ignore_ascii_case(&f.key)))
            .collect();
        headers.extend(statics);
        let keys = match open_signing_keys(self.secret, self.previous_secret) {
            Ok(k) => k,
            Err(e) => {
                error.get_or_insert(format!("the signing secret cannot be opened: {e}"));
                SigningKeys::default()
            }
        };
        (headers, keys, error)
    }
}

impl Claim {
    /// The claim `source` allows: its credentials opened, and any defect of
    /// the stored request (a destination refused, headers that do not
    /// parse) noted so the attempt fails without a request.
    pub fn new(source: ClaimSource<'_>) -> Claim {
        let (frozen, headers_defect) = match parse_headers(source.frozen_headers) {
            Ok(h) => (h, None),
            Err(reason) => (Vec::new(), Some(reason)),
        };
        let (headers, keys, credentials_error) = source.credentials.open(frozen);
        let (url, url_refused) = source.destination.resolve();
        Claim {
            log_id: source.log_id,
            attempt: source.attempt,
            max_attempts: source.max_attempts,
            token: source.token,
            event_id: source.event_id,
            webhook_name: source.webhook_name,
            webhook_id: source.webhook_id,
            url,
            method: source.method,
            headers,
            body: source.body,
            timeout: source.timeout,
            keys,
            queue: source.queue,
            // A refused destination is named before a header defect.
            defect: url_refused.or(headers_defect),
            credentials_error,
            traceparent: source.traceparent,
        }
    }
}
