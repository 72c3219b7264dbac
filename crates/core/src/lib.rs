//! # hookfleet-core
//!
//! The delivery engine the binaries share; they are thin wiring around it.
//! The operator's actions over it (definitions, previews, replays, stats)
//! are `hookfleet-admin`'s; the template language is `hookfleet-template`'s,
//! reached through [`request::Renderer`].
//!
//! # Layout
//! - [`domain`]: what hookfleet is about, as data and rules: a webhook and
//!   its definition, a delivery and its attempts, an event and its
//!   document, the retry schedule (the one place that knows retry delays),
//!   signatures, credentials sealed at rest, durations as people write them.
//! - [`request`]: a document in, the frozen request out (templates rendered
//!   through the [`request::Renderer`] seam), and the SSRF guard that keeps
//!   requests off internal addresses.
//! - [`attempt`]: one attempt: the claim that allows it and opens its
//!   credentials, the signed request on the wire, what the answer means.
//! - [`store`]: Postgres through diesel, the record of every delivery: its
//!   life step by step (emit, claim, record, due, replay, search), the
//!   webhooks, their health, retention, the schema and its migrations.
//! - [`queue`]: Redis, the work: jobs and in-flight keys, heartbeats and
//!   the reaper, dead letters, fleet-wide limits, over one connection.
//! - [`runtime`]: what a long-running process needs around its work: the
//!   drain-then-stop signal, back-off, metrics and probes, HTTP listeners.
//! - [`error`]: the error types callers match on.

pub mod attempt;
pub mod domain;
pub mod error;
pub mod queue;
pub mod request;
pub mod runtime;
pub mod store;

pub use error::{ConfigError, QueueError, RenderError, StoreError};
