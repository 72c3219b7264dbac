//! # hookfleet-admin
//!
//! The operator's actions over `hookfleet-core`, one implementation each:
//! the CLI (`hookfleet`) and the console (`hookfleet console`: its API and
//! its pages) both call these, so the three surfaces cannot drift apart.
//!
//! # Layout
//! - [`definitions`]: webhook definitions validated and stored, from the
//!   CLI's flags or the API's JSON.
//! - [`validate`]: what a webhook definition must satisfy before it is stored.
//! - [`preview`]: a webhook's request for a document, nothing sent, and its
//!   templates tried on a sample before it is stored.
//! - [`views`]: what every surface shows (the CLI's `--json`, the API, the
//!   console's pages).
//! - [`ops`]: the operator's actions that need Postgres and Redis (stats,
//!   replay, resume).
//! - [`frappe_import`]: Frappe Webhook documents read into definitions, and
//!   the import that writes them.
//! - [`error`]: the errors callers match on.

pub mod definitions;
pub mod error;
pub mod frappe_import;
pub mod ops;
pub mod preview;
pub mod validate;
pub mod views;

pub use error::ValidationError;
