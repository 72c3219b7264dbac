//! # hookfleet-core
//!
//! Everything the binaries share; they are thin wiring around it. The
//! operator's actions over it (definitions, previews, replays, stats) are
//! `hookfleet-admin`'s; the template language is `hookfleet-template`'s.
//!
//! # Layout
//! - [`model`]: webhooks, delivery rows, attempts, statuses.
//! - [`render`]: a document in, the frozen request out: checks what the
//!   templates rendered, builds field selections. Templates themselves are
//!   rendered through its [`render::Renderer`] seam by `hookfleet-template`.
//! - [`schedule`]: the retry schedule, the one place that knows retry delays.
//! - [`sign`]: Frappe and Standard Webhooks signatures, afresh per attempt.
//! - [`at_rest`]: signing secrets and header values sealed (AES-256-GCM) in
//!   the database.
//! - [`attempt`]: one attempt as data (claim, report, outcome) and how an
//!   answer is judged.
//! - [`deliver`]: one attempt on the wire (sign, send).
//! - [`ssrf`]: the guard that keeps webhooks off internal addresses.
//! - [`store`]: Postgres through diesel: the record of every delivery.
//! - [`queue`]: Redis: jobs and in-flight keys.
//! - [`redis_link`]: one Redis or a Redis Cluster, plain or TLS.
//! - [`registry`]: worker heartbeats and the reaper that recovers a dead
//!   worker's jobs.
//! - [`dead`]: the dead-letter list.
//! - [`fleet`]: per-webhook concurrency and rate limits across the fleet.
//! - [`shutdown`]: the drain-then-stop signal every binary shares.
//! - [`backoff`]: waits between reconnection attempts.
//! - [`config`]: durations as people write them, shared defaults, URLs made
//!   safe to print (the flags themselves are in `hookfleet-settings`).
//! - [`error`]: the error types callers match on.
//! - [`http`]: what the ingest and the console share as HTTP listeners
//!   (a bounded accept loop, bearer tokens, the loopback rule).
//! - [`observe`]: the metrics, and the `/metrics`, `/livez` and `/readyz`
//!   listener.

pub mod at_rest;
pub mod attempt;
pub mod backoff;
pub mod config;
pub mod dead;
pub mod deliver;
pub mod error;
pub mod fleet;
pub mod http;
pub mod model;
pub mod observe;
pub mod queue;
pub mod redis_link;
pub mod registry;
pub mod render;
pub mod schedule;
pub mod schema;
pub mod shutdown;
pub mod sign;
pub mod ssrf;
pub mod store;

pub use error::{ConfigError, QueueError, RenderError, StoreError};
