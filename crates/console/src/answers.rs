//! What the API's actions answer, as types: the handlers return them, the
//! pages' notices read them, and the OpenAPI document describes them from
//! these very definitions (so the document cannot promise a key the code
//! does not send).

use serde::Serialize;
use utoipa::ToSchema;

use hookfleet_admin::frappe_import::Outcome;
use hookfleet_admin::views::{DeliveryView, WebhookView};
use hookfleet_core::domain::DeliveryStatus;

/// Every refusal and failure: a 4xx or 5xx status and what went wrong.
#[derive(Serialize, ToSchema)]
#[schema(example = json!({"error": "no webhook named \"orders\""}))]
pub struct ErrorBody {
    pub error: String,
}

/// A webhook as changed by an update.
#[derive(Serialize, ToSchema)]
pub struct UpdatedWebhook<'a> {
    #[serde(flatten)]
    pub webhook: WebhookView<'a>,
    /// A new secret replaced one that still signs until `rotate-finish`
    /// (or a day has passed).
    pub rotation_started: bool,
}

#[derive(Serialize, ToSchema)]
pub struct Deleted {
    pub webhook: String,
    pub deleted: bool,
}

#[derive(Serialize, ToSchema)]
pub struct Paused {
    pub webhook: String,
    pub paused: bool,
    /// It was paused already (the reason is the one it had).
    pub already: bool,
    #[schema(required)]
    pub reason: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct Resumed {
    pub webhook: String,
    /// It was paused (else resume only released rows a cut-short resume
    /// left held, if any).
    pub resumed: bool,
    /// Held rows made due.
    pub released: usize,
    /// Due rows found (the released ones included).
    pub due: usize,
    /// Of those, pushed now (the rest were already on their way, or wait
    /// for the sweeper: see `note`).
    pub enqueued: usize,
    /// Why some due rows were not pushed now; they are due, so the sweeper
    /// sends them.
    #[schema(required)]
    pub note: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct Enabled {
    pub webhook: String,
    pub enabled: bool,
}

#[derive(Serialize, ToSchema)]
pub struct RotationFinished {
    pub webhook: String,
    pub rotation_finished: bool,
}

/// A delivery replayed: due now as Failed, with one more attempt allowed.
#[derive(Serialize, ToSchema)]
pub struct Retried {
    pub id: i64,
    pub previous_status: DeliveryStatus,
    pub status: DeliveryStatus,
    pub next_attempt: i32,
    /// Whether it was queued now or waits for the sweeper.
    pub note: String,
}

/// One page of deliveries, newest first.
#[derive(Serialize, ToSchema)]
pub struct DeliveryPage<'a> {
    pub deliveries: Vec<DeliveryView<'a>>,
    /// The `before` of the next page, when this one was full.
    #[schema(required)]
    pub next_before: Option<i64>,
}

/// What `webhook import` did, document by document.
#[derive(Serialize, ToSchema)]
pub struct ImportReport {
    pub outcomes: Vec<Outcome>,
    /// Nothing was written: `atomic`, and a document was refused.
    pub held_back: bool,
    /// How many documents were refused.
    pub refused: usize,
}

#[derive(Serialize, ToSchema)]
pub struct DeadRequeued {
    pub id: String,
    pub requeued: bool,
    /// The queue it went back to.
    pub queue: String,
}

#[derive(Serialize, ToSchema)]
pub struct DeadPurged {
    pub id: String,
    pub purged: bool,
}

#[derive(Serialize, ToSchema)]
pub struct AllRequeued {
    /// Dead letters put back on their queues.
    pub requeued: usize,
}

#[derive(Serialize, ToSchema)]
pub struct AllPurged {
    /// Dead letters removed.
    pub purged: i64,
}

/// A test event sent to one webhook (`testWebhook`, the pages' Send test).
#[derive(Serialize, ToSchema)]
pub struct TestSent {
    pub webhook: String,
    /// The document meets the webhook's condition; when it does not,
    /// nothing was recorded or sent.
    pub meets_condition: bool,
    /// The webhook is paused: its delivery is recorded and waits for
    /// Resume.
    pub held: bool,
    /// The delivery recorded (none when the condition does not hold).
    pub deliveries: Vec<TestDelivery>,
}

/// The delivery a test send recorded.
#[derive(Serialize, ToSchema)]
pub struct TestDelivery {
    pub id: i64,
    /// The event id: the `webhook-id` header the receiver sees.
    pub event_id: String,
    /// Queued; Exhausted when its request could not be built (see
    /// `error`); for a `workflow_transition` webhook, which is sent at
    /// once, Delivered or Failed.
    pub status: DeliveryStatus,
    /// Its job is on the queue now (else the sweeper sends it after the
    /// queue grace).
    pub enqueued: bool,
    /// Why it is Exhausted, if it is.
    #[schema(required)]
    pub error: Option<String>,
}
