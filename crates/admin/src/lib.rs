//! # hookfleet-admin
//!
//! The operator's actions over `hookfleet-core`, one implementation each:
//! the CLI (`hookfleet`) and the console (`hookfleet console`: its API and
//! its pages) both call these, so the three surfaces cannot drift apart.
//! Who may act and the audit line are the console's (the CLI is the
//! operator's own shell); what an action does is here. Templates render in
//! `hookfleet-template`'s renderer processes, which this crate passes
//! itself: a caller gives the network policy only.
//!
//! # Layout
//! - [`webhooks`]: a webhook's life (pause, resume, enable, disable,
//!   rotate-finish, delete) and the webhooks listed and shown with their
//!   health.
//! - [`definitions`]: webhook definitions validated and stored, from the
//!   CLI's flags or the API's JSON.
//! - [`validate`]: what a webhook definition must satisfy before it is
//!   stored; [`limits`]: the bounds it is held to.
//! - [`preview`]: a webhook's request for a document, nothing sent, and its
//!   templates tried on a sample before it is stored.
//! - [`frappe_import`]: Frappe Webhook documents read into definitions, and
//!   the import that writes them.
//! - [`deliveries`]: deliveries searched, and one shown with its attempts.
//! - [`replay`]: a delivery, or a webhook's deliveries in bulk, made due
//!   again and enqueued.
//! - [`dead`]: the dead-letter list read, requeued, purged.
//! - [`stats`]: rows by status, queue depths, dead letters, attempts per
//!   minute, each webhook's health.
//! - [`prune`]: terminal rows past a retention deleted.
//! - [`secrets`]: stored secrets and header values sealed again with the
//!   current key.
//! - [`views`]: what every surface shows (the CLI's `--json`, the API, the
//!   console's pages).
//! - [`error`]: the errors callers match on: a refused definition names
//!   its field and rule ([`ValidationError`]).
//!
//! Modules are public and named by concept because their verbs repeat
//! (`dead::list`, `webhooks::list`); each says what it owns.

pub mod dead;
pub mod definitions;
pub mod deliveries;
pub mod error;
pub mod frappe_import;
pub mod limits;
pub mod preview;
pub mod prune;
pub mod replay;
pub mod secrets;
pub mod stats;
pub mod validate;
pub mod views;
pub mod webhooks;

pub use error::{DefinitionError, Field, OpsError, Rule, ValidationError};
