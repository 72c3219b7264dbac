//! An event emitted to one webhook alone: what the console's "Send test"
//! and `POST /api/v1/webhooks/{name}/test` do. It takes the path of every
//! emit (the webhook's condition, its request built in the renderers, the
//! row recorded and its job queued; signed, sent and retried by the workers
//! like any other delivery) with every other webhook of that entity type
//! and event left out, so a test reaches the one receiver it is meant for.

use serde_json::Value;

use hookfleet_core::error::StoreError;
use hookfleet_core::store::webhooks;

use crate::emit::{Batch, EmitError, EmitReport, Event, Producer};

/// What an emit to one webhook did.
#[derive(Debug)]
pub enum EmittedTo {
    /// The document meets the webhook's condition: its delivery is
    /// recorded (Queued, or Exhausted with the reason its request could not
    /// be built; a `workflow_transition` is sent at once and recorded with
    /// its outcome). `held`: the webhook is paused, so the delivery waits
    /// for Resume.
    Recorded { report: EmitReport, held: bool },
    /// The condition does not hold: nothing was recorded or sent.
    ConditionNotMet,
}

/// Why nothing was emitted to the webhook.
#[derive(Debug, thiserror::Error)]
pub enum EmitToError {
    /// No webhook of that name, or the database did not answer.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A disabled webhook takes no events, a test one neither.
    #[error("webhook {0:?} is disabled: enable it to send to it")]
    Disabled(String),
    /// The event was refused, or nothing could be recorded.
    #[error(transparent)]
    Emit(#[from] EmitError),
}

impl Producer {
    /// Emits the document `doc`, named `name`, as an event of the webhook
    /// `webhook`'s own entity type and event, to that webhook alone. A
    /// fresh event id each time: two tests are two deliveries. Not counted
    /// in `hookfleet_events_total`, which counts the application's events.
    ///
    /// A webhook disabled between the look-up and the emit is said to be
    /// disabled, not to have refused the document.
    pub async fn emit_to(
        &self,
        webhook: &str,
        name: &str,
        doc: Value,
    ) -> Result<EmittedTo, EmitToError> {
        let wanted = webhook.to_string();
        let hook = self.store().run(move |c| webhooks::get(c, &wanted)).await?;
        if !hook.enabled {
            return Err(EmitToError::Disabled(hook.name));
        }
        let mut batch = Batch::new();
        batch.push(Event::new(&hook.entity_type, &hook.event, name, doc));
        let report = match self.record_batch(batch, Some(&hook.name)).await {
            Ok(report) => report,
            // A transition that failed is recorded with its outcome: for
            // one webhook, that row is the answer.
            Err(EmitError::WorkflowTransition { report, .. }) => *report,
            Err(e) => return Err(e.into()),
        };
        if !report.deliveries.is_empty() {
            let held = hook.paused_at.is_some();
            return Ok(EmittedTo::Recorded { report, held });
        }
        // Nothing recorded: the condition, or the webhook disabled since.
        let wanted = hook.name.clone();
        let now = self.store().run(move |c| webhooks::get(c, &wanted)).await?;
        if !now.enabled {
            return Err(EmitToError::Disabled(now.name));
        }
        Ok(EmittedTo::ConditionNotMet)
    }
}
