//! The arrange step most delivery tests share, said once: a [`TestEnv`], a
//! [`Receiver`] answering as scripted, webhooks on Sales Order posting to
//! it, and (with [`Scenario::start`]) a worker in this process.
//!
//! ```ignore
//! let (env, rx, worker) = Scenario::webhook("once", "/once")
//!     .replying(Reply::status(503))
//!     .with(|s| s.max_retries = 0)
//!     .start()
//!     .await;
//! let row = env.submit_until("SO-1", DeliveryStatus::Exhausted).await;
//! ```
//!
//! Also the act steps that recur after it: emitting one event and waiting
//! for its row to reach a status.

use serde_json::Value;

use hookfleet_core::domain::{DeliveryLog, DeliveryStatus, RetrySchedule, Secret, WebhookSpec};
use std::time::Duration;

use hookfleet_producer::{Batch, EmitReport, Event};

use crate::env::{spec, TestEnv, WorkerHandle};
use crate::fixtures::ENTITY;
use crate::receiver::{Receiver, Reply};

/// A webhook of a scenario: its definition, and the path on the receiver it
/// posts to (its url is set once the receiver listens).
struct Hook {
    spec: WebhookSpec,
    path: String,
}

/// What a test sets up before it acts; see the [module](self) doc.
pub struct Scenario {
    env: Option<TestEnv>,
    hooks: Vec<Hook>,
    always: Option<Reply>,
    next: Vec<Reply>,
    secrets: Vec<String>,
    concurrency: usize,
    schedule: RetrySchedule,
}

/// A scenario set up without a worker (the test starts one when it wants):
/// the environment and the receiver.
pub type Ready = (TestEnv, Receiver);

/// A scenario set up with a worker running: the environment, the receiver
/// and the worker.
pub type Running = (TestEnv, Receiver, WorkerHandle);

impl Default for Scenario {
    fn default() -> Self {
        Self::new()
    }
}

impl Scenario {
    /// A receiver answering 200, no webhook yet; a worker of two slots with
    /// the default schedule once started.
    pub fn new() -> Scenario {
        Scenario {
            env: None,
            hooks: Vec::new(),
            always: None,
            next: Vec::new(),
            secrets: Vec::new(),
            concurrency: 2,
            schedule: RetrySchedule::default(),
        }
    }

    /// A scenario with webhook `name` on Sales Order `on_submit`, posting to
    /// `path` on the receiver.
    pub fn webhook(name: &str, path: &str) -> Scenario {
        Scenario::new().and_webhook(name, path)
    }

    /// Adds webhook `name` on Sales Order `on_submit`, posting to `path` on
    /// the receiver; [`on`](Self::on) and [`with`](Self::with) then adjust it.
    pub fn and_webhook(mut self, name: &str, path: &str) -> Scenario {
        self.hooks.push(Hook {
            spec: spec(name, ENTITY, "on_submit", ""),
            path: path.into(),
        });
        self
    }

    fn last(&mut self) -> &mut WebhookSpec {
        &mut self.hooks.last_mut().expect("a webhook to adjust").spec
    }

    /// The last webhook added is about `entity_type` instead of Sales Order.
    pub fn about(mut self, entity_type: &str) -> Scenario {
        self.last().entity_type = entity_type.into();
        self
    }

    /// The last webhook added fires on `event` instead of `on_submit`.
    pub fn on(mut self, event: &str) -> Scenario {
        self.last().event = event.into();
        self
    }

    /// Adjusts the last webhook added (its url is set from its path later).
    pub fn with(mut self, tweak: impl FnOnce(&mut WebhookSpec)) -> Scenario {
        tweak(self.last());
        self
    }

    /// The last webhook added signs with `secret`, and the receiver verifies
    /// the signatures with it.
    pub fn signed(mut self, secret: &str) -> Scenario {
        self.last().secret = Some(Secret::new(secret));
        self.secrets.push(secret.into());
        self
    }

    /// The receiver answers every request with `reply` (after any
    /// [`replying_next`](Self::replying_next)).
    pub fn replying(mut self, reply: Reply) -> Scenario {
        self.always = Some(reply);
        self
    }

    /// The receiver answers the first requests with `replies`, in order.
    pub fn replying_next(mut self, replies: impl IntoIterator<Item = Reply>) -> Scenario {
        self.next.extend(replies);
        self
    }

    /// Sets up on `env` (a throwaway server's, say) instead of a new one.
    pub fn in_env(mut self, env: TestEnv) -> Scenario {
        self.env = Some(env);
        self
    }

    /// The worker [`start`](Self::start) runs has `concurrency` slots.
    pub fn concurrency(mut self, concurrency: usize) -> Scenario {
        self.concurrency = concurrency;
        self
    }

    /// The worker [`start`](Self::start) runs retries on `schedule`.
    pub fn schedule(mut self, schedule: RetrySchedule) -> Scenario {
        self.schedule = schedule;
        self
    }

    /// The database, the receiver and the webhooks, no worker.
    pub async fn ready(self) -> Ready {
        let env = self.env.unwrap_or_default();
        let rx = Receiver::start().await;
        if !self.secrets.is_empty() {
            let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
            rx.verify_with(&secrets);
        }
        rx.reply_next(self.next);
        if let Some(reply) = self.always {
            rx.reply_always(reply);
        }
        for mut hook in self.hooks {
            hook.spec.request_url = rx.url(&hook.path);
            env.add_webhook(&hook.spec);
        }
        (env, rx)
    }

    /// What [`ready`](Self::ready) sets up, and a worker running on it.
    pub async fn start(self) -> Running {
        let (concurrency, schedule) = (self.concurrency, self.schedule.clone());
        let (env, rx) = self.ready().await;
        let worker = env.start_worker(concurrency, schedule);
        (env, rx, worker)
    }
}

/// Panics, showing the row's error, unless the row has an error that
/// mentions `what`.
pub fn assert_error_mentions(row: &DeliveryLog, what: &str) {
    assert!(
        row.error.as_deref().expect("an error").contains(what),
        "{what:?} not in {:?}",
        row.error
    );
}

/// The act steps that follow a scenario.
impl TestEnv {
    /// Emits `event` of Sales Order `name` with `doc` as its document.
    pub async fn emit_doc(&self, event: &str, name: &str, doc: Value) -> EmitReport {
        self.producer()
            .emit(Event::new(ENTITY, event, name, doc))
            .await
            .expect("emit")
    }

    /// Waits until row `id` is in `status`; panics with the row after
    /// [`PATIENCE`](crate::wait::PATIENCE).
    pub async fn until_status(&self, id: i64, status: DeliveryStatus) -> DeliveryLog {
        self.until_row(id, |r| r.status == status).await
    }

    /// Emits `on_submit` of Sales Order `name` (one row expected), and waits
    /// until its row is in `status`.
    pub async fn submit_until(&self, name: &str, status: DeliveryStatus) -> DeliveryLog {
        let report = self.submit(name).await;
        self.until_status(report.deliveries[0].id, status).await
    }

    /// Emits `batch` with a producer whose Queued rows count as lost after
    /// `grace`; panics unless every row's job was queued.
    pub async fn emit_all_queued(&self, batch: Batch, grace: Duration) -> EmitReport {
        let report = self
            .producer_with_grace(grace)
            .emit_batch(batch)
            .await
            .expect("emit");
        assert!(report.deliveries.iter().all(|d| d.enqueued));
        report
    }

    /// Whether every row of the test is Delivered after exactly `attempts`
    /// attempts.
    pub fn all_delivered_after(&self, attempts: i32) -> bool {
        self.rows()
            .iter()
            .all(|r| r.status == DeliveryStatus::Delivered && r.attempts == attempts)
    }

    /// Emits `on_submit` of Sales Order SO-1 with `doc` as its document (one
    /// row expected), and waits until its row is in `status`.
    pub async fn submit_doc_until(&self, doc: Value, status: DeliveryStatus) -> DeliveryLog {
        let report = self.emit_doc("on_submit", "SO-1", doc).await;
        self.until_status(report.deliveries[0].id, status).await
    }
}
