//! What hookfleet is about, as data and rules: a webhook and its
//! definition, a delivery and its attempts, an event and its document, the
//! retry schedule, how a request is signed and how credentials are sealed
//! at rest, and durations as people write them.

pub mod at_rest;
mod config;
mod delivery;
mod event;
mod schedule;
mod signing;
mod text;
mod webhook;

pub(crate) use config::MAX_DURATION;
pub use config::{
    format_duration, parse_duration, parse_time_or_ago, redact_url, DEFAULT_PREFIX,
    DEFAULT_QUEUE_GRACE,
};
pub use delivery::{process_identity, DeliveryAttempt, DeliveryLog, DeliveryStatus, NewDelivery};
pub use event::{
    check_event_id, new_event_id, read_document, DocumentError, EventIdError, MAX_DOCUMENT_BYTES,
    MAX_EVENT_ID_BYTES,
};
pub use schedule::{parse_retry_after, RetrySchedule, DEFAULT_SCHEDULE};
pub use signing::{
    check_secret, frappe_signature, generate_secret, signature_headers, standard_signature, Secret,
    SecretError, SigningKeys, HEADER_FRAPPE_SIGNATURE, HEADER_ID, HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
};
pub use text::{shown, shown_on_one_line};
pub use webhook::{
    display_header_value, parse_headers, FieldMapping, Header, HeaderError, Method, Structure,
    Webhook, WebhookRow, WebhookSpec, DEFAULT_TIMEOUT, HIDDEN,
};
pub(crate) use webhook::{open_signing_keys, MAX_PAUSE_REASON_CHARS};
