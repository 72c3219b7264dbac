//! # hookfleet-producer
//!
//! Embedded in an application, the producer turns "event E happened to
//! document D" into delivery rows in Postgres (the record, from this moment)
//! and jobs on Redis queues (the work).
//!
//! ```no_run
//! # async fn demo(producer: hookfleet_producer::Producer) -> Result<(), hookfleet_producer::EmitError> {
//! use hookfleet_producer::Event;
//! let doc = serde_json::json!({"name": "SO-1", "customer": "ACME", "grand_total": 120.5});
//! let report = producer.emit(Event::new("Sales Order", "on_submit", "SO-1", doc)).await?;
//! println!("{} deliveries", report.deliveries.len());
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`emit`]: [`Producer`], [`Event`], [`Batch`] and what an emit reports.
//! - [`emit_to`]: an event emitted to one webhook alone (a test send).
//! - [`lines`]: emitting a file of newline-delimited events in batches.
//! - [`catalog`]: the cache of enabled webhooks, invalidated on any change.
//! - [`ingest`]: the HTTP ingest (`hookfleet-producer serve`).

pub mod catalog;
pub mod emit;
pub mod emit_to;
pub mod ingest;
pub mod lines;

pub use emit::{
    Batch, Delivery, EmitError, EmitReport, Event, EventField, InvalidEvent, Producer,
    ProducerConfig, TransitionFailure, WORKFLOW_TRANSITION,
};
pub use emit_to::{EmitToError, EmittedTo};
pub use lines::{LinesError, LinesReport};
