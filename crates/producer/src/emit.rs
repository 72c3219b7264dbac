//! Emitting events: from an event to recorded rows and queued jobs.
//!
//! 1. Find the enabled webhooks for (entity type, event) in the cached
//!    catalog and evaluate each condition on the document.
//! 2. Build each request (URL, headers, body) and, in one transaction, record
//!    one row per webhook: Queued, or Exhausted with the reason when the
//!    request cannot be built. Postgres is the record from here on.
//! 3. After the commit, take each Queued row's in-flight key and push its job.
//!    If Redis fails here the emit still succeeds: the rows are durable and
//!    the sweeper sends them once their grace has passed (the report says so).
//!
//! `workflow_transition` refuses to be deferred: its rows are recorded already
//! claimed, delivered here and now, exactly once, and a failure is returned to
//! the caller. Only a pause defers one: a paused webhook's transition is
//! recorded Queued (one attempt) and sent after `webhook resume`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use hookfleet_core::attempt::{
    self, Claim, ClaimSource, Destination, SealedCredentials, LEASE_MARGIN,
};
use hookfleet_core::domain::format_duration;
use hookfleet_core::domain::RetrySchedule;
use hookfleet_core::domain::{
    check_event_id, new_event_id, process_identity, DeliveryStatus, NewDelivery, Webhook,
};
use hookfleet_core::error::{Refusal, RenderError, StoreError};
use hookfleet_core::queue::{Enqueue, RedisQueue};
use hookfleet_core::request::NetworkPolicy;
use hookfleet_core::runtime::retry_until_stopped;
use hookfleet_core::runtime::trace::{self, KeyValue, SpanKind};
use hookfleet_core::store::deliveries::{self, OutcomeWrite};
use hookfleet_core::store::{health, Store};

use crate::catalog::{Catalog, CatalogCache, Subscriber};
use hookfleet_core::request::{Renderer, RequestBuilder};

/// The event that is delivered synchronously, once, and never deferred.
pub const WORKFLOW_TRANSITION: &str = "workflow_transition";

pub use hookfleet_core::domain::MAX_DOCUMENT_BYTES;

/// The longest entity type, event or document name accepted: Frappe's names
/// are at most 140 characters; 1 KiB leaves room for any encoding of them.
pub const MAX_REFERENCE_BYTES: usize = 1024;

/// An event as an application reports it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    pub entity_type: String,
    pub event: String,
    /// The document's name (Frappe's `name`), e.g. `SO-0001`.
    pub name: String,
    /// The document as JSON (an object).
    #[serde(default)]
    pub doc: Value,
    /// The caller's own id for this event, to make a repeated emit
    /// idempotent. Generated when absent.
    #[serde(default)]
    pub event_id: Option<String>,
    /// The W3C trace context the application emitted it in
    /// (`00-<trace id>-<span id>-<flags>`): its deliveries join that trace
    /// (`hookfleet_core::runtime::trace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

impl Event {
    pub fn new(entity_type: &str, event: &str, name: &str, doc: Value) -> Event {
        Event {
            entity_type: entity_type.into(),
            event: event.into(),
            name: name.into(),
            doc,
            event_id: None,
            traceparent: None,
        }
    }

    /// Refuses what cannot be an event; fills in a missing document.
    pub fn check(mut self) -> Result<Event, EmitError> {
        for (field, v) in [
            (EventField::EntityType, &self.entity_type),
            (EventField::Event, &self.event),
            (EventField::Name, &self.name),
        ] {
            if v.trim().is_empty() {
                return Err(InvalidEvent::Empty(field).into());
            }
            if v.len() > MAX_REFERENCE_BYTES {
                return Err(InvalidEvent::TooLong(field).into());
            }
            if v.chars().any(char::is_control) {
                return Err(InvalidEvent::ControlCharacter(field).into());
            }
        }
        if let Some(id) = &self.event_id {
            check_event_id(id).map_err(InvalidEvent::EventId)?;
        }
        if let Some(tp) = &self.traceparent {
            // Stored and sent as version 00 writes it, never as given.
            let normal = trace::normalize_traceparent(tp).ok_or(InvalidEvent::Traceparent)?;
            self.traceparent = Some(normal);
        }
        match &self.doc {
            Value::Null => {
                self.doc = serde_json::json!({ "doctype": self.entity_type, "name": self.name });
            }
            Value::Object(_) => {}
            _ => return Err(InvalidEvent::NotAnObject.into()),
        }
        Ok(self)
    }
}

/// One delivery an emit made (or found already made).
#[derive(Debug, Clone, Serialize)]
pub struct Delivery {
    pub id: i64,
    pub event_id: String,
    pub webhook: String,
    pub webhook_id: Option<i64>,
    pub status: DeliveryStatus,
    pub queue: String,
    /// The event was already recorded for this webhook; nothing new was made.
    pub duplicate: bool,
    /// Its job is on the queue (false: the sweeper will send it after the grace).
    pub enqueued: bool,
    /// Why it is Exhausted, or what a workflow_transition attempt returned.
    pub error: Option<String>,
}

/// What an emit (or a batch) did.
#[derive(Debug, Clone, Serialize)]
pub struct EmitReport {
    /// Events taken.
    pub events: usize,
    pub deliveries: Vec<Delivery>,
    /// Deliveries folded into a later state of the same document (batches).
    pub superseded: usize,
    /// Redis refused the jobs: the rows are recorded and the sweeper sends
    /// them after the grace.
    pub enqueue_error: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    /// The event itself is refused (the caller's to fix).
    #[error(transparent)]
    Invalid(#[from] InvalidEvent),
    /// Nothing was recorded.
    #[error("nothing was recorded: {0}")]
    Store(#[from] StoreError),
    /// Nothing was recorded: a part of the producer (the template renderers)
    /// could not do its work; trying again later may succeed.
    #[error("nothing was recorded: {0}")]
    Unavailable(String),
    /// A workflow_transition could not be delivered (recorded Exhausted).
    #[error("workflow_transition failed: {}", describe_failures(.failures))]
    WorkflowTransition {
        report: Box<EmitReport>,
        failures: Vec<TransitionFailure>,
    },
    /// A workflow_transition was sent, but its outcome could not be written:
    /// the row stays claimed, and becomes Exhausted (never sent again) when
    /// its lease ends.
    #[error("workflow_transition to {webhook} was sent, but its outcome could not be recorded ({error}); the delivery becomes Exhausted when its lease ends and is never sent again")]
    TransitionUnrecorded {
        report: Box<EmitReport>,
        webhook: String,
        error: StoreError,
    },
}

/// A field of an event as the caller names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventField {
    EntityType,
    Event,
    Name,
}

impl std::fmt::Display for EventField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EventField::EntityType => "entity type",
            EventField::Event => "event",
            EventField::Name => "name",
        })
    }
}

/// Why an event was refused: the field and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidEvent {
    #[error("the {0} is empty")]
    Empty(EventField),
    #[error("the {0} is over {MAX_REFERENCE_BYTES} bytes")]
    TooLong(EventField),
    #[error("the {0} contains a control character")]
    ControlCharacter(EventField),
    #[error(transparent)]
    EventId(#[from] hookfleet_core::domain::EventIdError),
    #[error("the document is not a JSON object")]
    NotAnObject,
    #[error(
        "the traceparent is not a W3C trace context (00-<32 hex>-<16 hex>-<2 hex>, lower case)"
    )]
    Traceparent,
    /// One event id for two different events (in one batch, or one already
    /// recorded): the second would otherwise be dropped as a duplicate.
    #[error("{0}")]
    EventIdReused(String),
}

/// Refuses a batch in which one event id names two different events (the
/// same event twice is fine: it is recorded once).
fn refuse_reused_ids(events: &[Event]) -> Result<(), EmitError> {
    let mut seen: HashMap<&str, &Event> = HashMap::new();
    for e in events {
        let Some(id) = e.event_id.as_deref() else {
            continue;
        };
        match seen.get(id) {
            Some(first)
                if (&first.entity_type, &first.event, &first.name, &first.doc)
                    != (&e.entity_type, &e.event, &e.name, &e.doc) =>
            {
                return Err(InvalidEvent::EventIdReused(format!(
                    "event id {id:?} names two different events in this batch ({} {} {}, and {} {} {}); give each event its own id",
                    first.entity_type, first.name, first.event, e.entity_type, e.name, e.event
                ))
                .into());
            }
            Some(_) => {}
            None => {
                seen.insert(id, e);
            }
        }
    }
    Ok(())
}

/// Why a workflow_transition attempt ended without a recorded outcome.
enum Transition {
    /// Nothing was sent (the row was given up, or the database is away).
    NotSent(StoreError),
    /// The request was sent; its outcome could not be written.
    Unrecorded(StoreError),
}

/// One workflow_transition delivery that failed.
#[derive(Debug, Clone, Serialize)]
pub struct TransitionFailure {
    pub webhook: String,
    pub reason: String,
    /// False when the request could not even be built (nothing was sent).
    pub sent: bool,
}

fn describe_failures(failures: &[TransitionFailure]) -> String {
    failures
        .iter()
        .map(|f| format!("{}: {}", f.webhook, f.reason))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    pub schedule: RetrySchedule,
    /// A Queued row's first attempt is overdue after this; also the TTL of
    /// the in-flight key the producer takes.
    pub queue_grace: Duration,
    pub policy: Arc<NetworkPolicy>,
}

/// Turns events into deliveries. Cheap to share (`Arc`) across tasks.
pub struct Producer {
    store: Store,
    queue: RedisQueue,
    config: ProducerConfig,
    catalog: CatalogCache,
    /// What renders the webhooks' templates (renderer processes unless
    /// [`Producer::with_renderer`]).
    renderer: Arc<dyn Renderer>,
    http: reqwest::Client,
    identity: String,
    /// Where its events come from, for `hookfleet_events_total{source}`:
    /// `emit` (library, CLI) unless [`Producer::for_ingest`].
    source: &'static str,
    /// After Redis fails, emits skip it until this time: the rows are safe in
    /// Postgres either way, and an emit should not wait on a dead Redis.
    redis_down_until: std::sync::Mutex<Option<std::time::Instant>>,
}

/// How long emits skip Redis after it failed, before trying it again.
pub const REDIS_RETRY_AFTER: Duration = Duration::from_secs(2);

/// A collection of events emitted together. Like Frappe's after-commit queue,
/// it keeps only the last state of a document per webhook: an insert and
/// several saves of one document make one delivery carrying its final state.
#[derive(Debug, Default, Clone)]
pub struct Batch {
    events: Vec<Event>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    pub fn push(&mut self, event: Event) {
        self.events.push(event);
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

/// A delivery planned within a batch.
struct Planned {
    subscriber: Arc<Subscriber>,
    event_index: usize,
}

/// What an emit will record: one row per (webhook, document) with the
/// document's final state in the batch, built or refused with the reason.
struct Plan {
    /// Each row with the webhook it is for.
    rows: Vec<(NewDelivery, Arc<Webhook>)>,
    /// Indexes into `rows` of workflow_transition rows, delivered here.
    synchronous: Vec<usize>,
    /// Indexes into `rows` of workflow_transition rows whose request could
    /// not be built: recorded Exhausted, and the emit fails.
    unbuildable_transitions: Vec<usize>,
    superseded: usize,
}

/// Evaluates conditions and builds requests (CPU work, run on a blocking
/// thread so a heavy template never stalls the async runtime). `only`: for
/// the webhook of that name alone ([`Producer::emit_to`]).
fn plan(
    events: &[Event],
    catalog: &Catalog,
    only: Option<&str>,
    policy: &NetworkPolicy,
    renderer: &dyn Renderer,
    queue_grace: Duration,
) -> Result<Plan, EmitError> {
    // The final state of each document in the batch.
    let mut final_doc: HashMap<(&str, &str), usize> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        final_doc.insert((e.entity_type.as_str(), e.name.as_str()), i);
    }
    // One delivery per (webhook, document), from its latest matching event.
    let mut plan: Vec<Planned> = Vec::new();
    let mut slot: HashMap<(i64, &str, &str), usize> = HashMap::new();
    let mut superseded = 0;
    for (i, e) in events.iter().enumerate() {
        let subscribers = catalog.subscribers(&e.entity_type, &e.event).iter();
        for sub in subscribers.filter(|s| only.is_none_or(|name| s.webhook.name == name)) {
            let key = (sub.webhook.id, e.entity_type.as_str(), e.name.as_str());
            match slot.get(&key) {
                Some(&at) => {
                    plan[at].event_index = i;
                    superseded += 1;
                }
                None => {
                    slot.insert(key, plan.len());
                    plan.push(Planned {
                        subscriber: sub.clone(),
                        event_index: i,
                    });
                }
            }
        }
    }

    let now = Utc::now();
    let grace = chrono::Duration::from_std(queue_grace).unwrap_or(chrono::Duration::minutes(10));
    let mut rows = Vec::with_capacity(plan.len());
    let mut synchronous = Vec::new();
    let mut unbuildable_transitions = Vec::new();
    let doc_of = |p: &Planned| {
        let e = &events[p.event_index];
        &events[final_doc[&(e.entity_type.as_str(), e.name.as_str())]].doc
    };
    // Every template of the batch, rendered in renderers under their limits.
    let pairs: Vec<(&Subscriber, &Value)> = plan
        .iter()
        .map(|p| (p.subscriber.as_ref(), doc_of(p)))
        .collect();
    let built_all = RequestBuilder::build_all(&pairs, policy, renderer);
    // The renderers failing (not a template) records nothing: the emit fails
    // and the caller tries again.
    if let Some(Err(RenderError::Renderer(reason))) = built_all
        .iter()
        .find(|b| matches!(b, Err(RenderError::Renderer(_))))
    {
        return Err(EmitError::Unavailable(format!(
            "templates could not be rendered: {reason}"
        )));
    }
    for (p, built) in plan.iter().zip(built_all) {
        let e = &events[p.event_index];
        let hook = &p.subscriber.webhook;
        let built = match built {
            Ok(None) => continue,
            Ok(Some(request)) => Ok(request),
            Err(err) => Err(err.to_string()),
        };
        // A paused webhook holds its transitions too: recorded as an
        // ordinary delivery (one attempt), sent by a worker after resume.
        let workflow = e.event == WORKFLOW_TRANSITION;
        let synchronous_now = workflow && hook.paused_at.is_none();
        let mut row = NewDelivery {
            event_id: e.event_id.clone().unwrap_or_default(),
            webhook_id: Some(hook.id),
            webhook_name: hook.name.clone(),
            entity_type: e.entity_type.clone(),
            entity_name: e.name.clone(),
            event: e.event.clone(),
            url: hook.request_url.clone(),
            method: hook.request_method.clone(),
            headers: Value::Array(vec![]),
            body: String::new(),
            queue: hook.queue.clone(),
            status: DeliveryStatus::Queued,
            attempts: 0,
            max_attempts: if workflow {
                1
            } else {
                1 + hook.max_retries.max(0)
            },
            next_retry: Some(now + grace),
            lease_expires_at: None,
            error: None,
            claim_token: 0,
            traceparent: e.traceparent.clone(),
        };
        match built {
            Ok(req) => {
                row.url = req.url;
                row.method = req.method;
                row.headers = serde_json::to_value(&req.headers).unwrap_or_default();
                row.body = req.body;
                if synchronous_now {
                    // Recorded already claimed for its one attempt: should
                    // this process die mid-attempt, the row is Exhausted
                    // when it comes due, never retried later.
                    let lease = now
                        + chrono::Duration::from_std(hook.timeout() + LEASE_MARGIN)
                            .unwrap_or_default();
                    row.attempts = 1;
                    row.claim_token = 1;
                    row.lease_expires_at = Some(lease);
                    row.next_retry = Some(lease);
                    synchronous.push(rows.len());
                }
            }
            Err(reason) => {
                row.status = DeliveryStatus::Exhausted;
                row.next_retry = None;
                row.error = Some(format!("request could not be built: {reason}"));
                if workflow {
                    unbuildable_transitions.push(rows.len());
                }
            }
        }
        rows.push((row, hook.clone()));
    }
    Ok(Plan {
        rows,
        synchronous,
        unbuildable_transitions,
        superseded,
    })
}

impl Producer {
    pub fn new(store: Store, queue: RedisQueue, config: ProducerConfig) -> Producer {
        let http = attempt::http_client(config.policy.clone());
        Producer {
            store,
            queue,
            config,
            catalog: CatalogCache::default(),
            renderer: Arc::new(hookfleet_template::Sandbox),
            http,
            identity: process_identity("producer"),
            source: "emit",
            redis_down_until: std::sync::Mutex::new(None),
        }
    }

    /// The same producer, rendering templates with `renderer`.
    pub fn with_renderer(mut self, renderer: Arc<dyn Renderer>) -> Producer {
        self.renderer = renderer;
        self
    }

    /// The same producer, its events counted as the ingest's.
    pub fn for_ingest(mut self) -> Producer {
        self.source = "ingest";
        self
    }

    /// What `/readyz` asks of this producer's Postgres and Redis.
    pub fn probe(&self) -> hookfleet_core::runtime::observe::Probe {
        hookfleet_core::runtime::observe::Probe::new(self.store.clone(), self.queue.clone())
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn queue(&self) -> &RedisQueue {
        &self.queue
    }

    /// Emits one event.
    pub async fn emit(&self, event: Event) -> Result<EmitReport, EmitError> {
        let mut batch = Batch::new();
        batch.push(event);
        self.emit_batch(batch).await
    }

    /// Emits a batch (see [`Batch`]) in one transaction.
    pub async fn emit_batch(&self, batch: Batch) -> Result<EmitReport, EmitError> {
        let count = batch.events.len() as u64;
        let report = self.record_batch(batch, None).await;
        if report.is_ok() {
            hookfleet_core::runtime::observe::metrics().events_emitted(self.source, count);
        }
        report
    }

    /// Records `batch` and enqueues its rows; `only`: for the webhook of
    /// that name alone.
    pub(crate) async fn record_batch(
        &self,
        batch: Batch,
        only: Option<&str>,
    ) -> Result<EmitReport, EmitError> {
        let mut events: Vec<Event> = batch
            .events
            .into_iter()
            .map(|e| {
                let mut e = e.check()?;
                e.event_id.get_or_insert_with(new_event_id);
                Ok(e)
            })
            .collect::<Result<_, EmitError>>()?;
        refuse_reused_ids(&events)?;
        // With tracing on, a span per event (under the application's own
        // context, if it sent one), written on its rows: every attempt of
        // every delivery is its child. It ends when the emit does, failed
        // when the emit fails.
        let mut spans: Vec<trace::Traced> = events
            .iter_mut()
            .filter_map(|e| {
                let span =
                    trace::start("emit", SpanKind::Producer, e.traceparent.as_deref(), || {
                        vec![
                            KeyValue::new("hookfleet.entity_type", e.entity_type.clone()),
                            KeyValue::new("hookfleet.event", e.event.clone()),
                            KeyValue::new("hookfleet.document", e.name.clone()),
                            KeyValue::new(
                                "hookfleet.event_id",
                                e.event_id.clone().unwrap_or_default(),
                            ),
                        ]
                    })?;
                e.traceparent = Some(span.traceparent());
                Some(span)
            })
            .collect();
        let recorded = self.record_events(events, only).await;
        if let Err(e) = &recorded {
            let why = e.to_string();
            spans.iter_mut().for_each(|s| s.fail(&why));
        }
        recorded
    }

    /// Records checked `events` and enqueues their rows (see
    /// [`Producer::record_batch`]).
    async fn record_events(
        &self,
        events: Vec<Event>,
        only: Option<&str>,
    ) -> Result<EmitReport, EmitError> {
        let catalog = self.catalog.get(&self.store).await?;
        let only = only.map(str::to_string);

        let policy = self.config.policy.clone();
        let queue_grace = self.config.queue_grace;
        let renderer = self.renderer.clone();
        let (events, plan) = tokio::task::spawn_blocking(move || {
            let p = plan(
                &events,
                &catalog,
                only.as_deref(),
                &policy,
                renderer.as_ref(),
                queue_grace,
            );
            (events, p)
        })
        .await
        .map_err(|e| EmitError::Unavailable(format!("building the requests failed: {e}")))?;
        let Plan {
            rows,
            synchronous,
            unbuildable_transitions,
            superseded,
        } = plan?;

        let (hooks, new_rows): (Vec<Arc<Webhook>>, Vec<NewDelivery>) =
            rows.into_iter().map(|(r, h)| (h, r)).unzip();
        let (new_rows, recorded) = self
            .store
            .run(move |conn| {
                // One value the database refuses (on a working connection)
                // fails its own row, never the batch.
                let recorded = deliveries::insert_each_if_refused(conn, &new_rows)?;
                Ok((new_rows, recorded))
            })
            .await
            .map_err(|e| match e {
                StoreError::Refused(r @ Refusal::EventIdReused { .. }) => {
                    EmitError::Invalid(InvalidEvent::EventIdReused(r.to_string()))
                }
                other => other.into(),
            })?;
        let rows: Vec<(NewDelivery, Arc<Webhook>)> = new_rows.into_iter().zip(hooks).collect();

        let mut report = EmitReport {
            events: events.len(),
            deliveries: Vec::new(),
            superseded,
            enqueue_error: None,
        };
        let by_key: HashMap<(String, String), usize> = rows
            .iter()
            .enumerate()
            .map(|(i, (r, _))| ((r.event_id.clone(), r.webhook_name.clone()), i))
            .collect();
        for r in &recorded {
            let error = by_key
                .get(&(r.event_id.clone(), r.webhook_name.clone()))
                .and_then(|&i| rows[i].0.error.clone());
            report.deliveries.push(Delivery {
                id: r.id,
                event_id: r.event_id.clone(),
                webhook: r.webhook_name.clone(),
                webhook_id: r.webhook_id,
                status: r.status,
                queue: r.queue.clone(),
                duplicate: r.duplicate,
                enqueued: false,
                error,
            });
        }

        // First attempts onto the queues (not workflow_transition, not duplicates).
        let sync_keys: std::collections::HashSet<(String, String)> = synchronous
            .iter()
            .map(|&i| (rows[i].0.event_id.clone(), rows[i].0.webhook_name.clone()))
            .collect();
        let to_queue: Vec<usize> = report
            .deliveries
            .iter()
            .enumerate()
            .filter(|(_, d)| {
                d.status == DeliveryStatus::Queued
                    && !d.duplicate
                    && !sync_keys.contains(&(d.event_id.clone(), d.webhook.clone()))
            })
            .map(|(i, _)| i)
            .collect();
        if !to_queue.is_empty() {
            let items: Vec<Enqueue> = to_queue
                .iter()
                .map(|&i| Enqueue {
                    log_id: report.deliveries[i].id,
                    queue: report.deliveries[i].queue.clone(),
                    webhook_id: report.deliveries[i].webhook_id,
                })
                .collect();
            let skip = self
                .redis_down_until
                .lock()
                .expect("redis flag")
                .is_some_and(|until| std::time::Instant::now() < until);
            let result = if skip {
                Err(hookfleet_core::QueueError::Unavailable(
                    "it failed moments ago".into(),
                ))
            } else {
                self.queue
                    .jobs()
                    .enqueue(&items, self.config.queue_grace)
                    .await
            };
            match result {
                Ok(flags) => {
                    *self.redis_down_until.lock().expect("redis flag") = None;
                    for (&i, ok) in to_queue.iter().zip(flags) {
                        report.deliveries[i].enqueued = ok;
                    }
                }
                Err(e) => {
                    let msg = format!(
                        "rows recorded but not queued ({e}); the sweeper sends them after the grace of {}",
                        format_duration(self.config.queue_grace)
                    );
                    if !skip {
                        tracing::warn!(rows = items.len(), "{msg}");
                        *self.redis_down_until.lock().expect("redis flag") =
                            Some(std::time::Instant::now() + REDIS_RETRY_AFTER);
                    }
                    report.enqueue_error = Some(msg);
                }
            }
        }

        let mut failures = Vec::new();
        for &i in &unbuildable_transitions {
            let (row, _) = &rows[i];
            let fresh = report.deliveries.iter().any(|d| {
                d.event_id == row.event_id && d.webhook == row.webhook_name && !d.duplicate
            });
            if fresh {
                failures.push(TransitionFailure {
                    webhook: row.webhook_name.clone(),
                    reason: row.error.clone().unwrap_or_default(),
                    sent: false,
                });
            }
        }
        for &i in &synchronous {
            let (row, hook) = &rows[i];
            let Some(at) = report
                .deliveries
                .iter()
                .position(|d| d.event_id == row.event_id && d.webhook == row.webhook_name)
            else {
                continue;
            };
            if report.deliveries[at].duplicate {
                continue;
            }
            let log_id = report.deliveries[at].id;
            let (status, error) = match self.deliver_now(log_id, row, hook).await {
                Ok(done) => done,
                Err(Transition::NotSent(e)) => {
                    let reason = format!("not sent: {e}");
                    report.deliveries[at].error = Some(reason.clone());
                    failures.push(TransitionFailure {
                        webhook: row.webhook_name.clone(),
                        reason,
                        sent: false,
                    });
                    continue;
                }
                Err(Transition::Unrecorded(error)) => {
                    return Err(EmitError::TransitionUnrecorded {
                        report: Box::new(report),
                        webhook: row.webhook_name.clone(),
                        error,
                    })
                }
            };
            let d = &mut report.deliveries[at];
            d.status = status;
            d.error = error.clone();
            if status != DeliveryStatus::Delivered {
                failures.push(TransitionFailure {
                    webhook: row.webhook_name.clone(),
                    reason: error.unwrap_or_default(),
                    sent: true,
                });
            }
        }
        if !failures.is_empty() {
            return Err(EmitError::WorkflowTransition {
                report: Box::new(report),
                failures,
            });
        }
        Ok(report)
    }

    /// The one attempt of a workflow_transition row, recorded Delivered or
    /// Exhausted. The row was recorded already counting this attempt (so no
    /// worker ever sends it); it is taken now, by the database's clock, for
    /// as long as the attempt may take, and not sent at all if it was given
    /// up meanwhile.
    async fn deliver_now(
        &self,
        log_id: i64,
        row: &NewDelivery,
        hook: &Webhook,
    ) -> Result<(DeliveryStatus, Option<String>), Transition> {
        let lease = hook.timeout() + LEASE_MARGIN;
        let inserted_token = row.claim_token;
        let token = self
            .store
            .run(move |c| deliveries::take_for_transition(c, log_id, inserted_token, lease))
            .await
            .map_err(Transition::NotSent)?;
        // The webhook's static headers and secrets as they are now.
        let now = Utc::now();
        let claim = Claim::new(ClaimSource {
            log_id,
            attempt: 1,
            max_attempts: 1,
            token,
            event_id: row.event_id.clone(),
            webhook_name: row.webhook_name.clone(),
            webhook_id: row.webhook_id,
            destination: Destination {
                stored: row.url.clone(),
                webhook_url: &hook.request_url,
                dynamic: hook.dynamic_url,
                allowed_hosts: &hook.allowed_hosts,
            },
            method: row.method.clone(),
            frozen_headers: &row.headers,
            body: row.body.clone(),
            timeout: hook.timeout(),
            queue: row.queue.clone(),
            credentials: SealedCredentials {
                headers: &hook.headers,
                secret: hook.secret.as_deref(),
                previous_secret: hook
                    .previous_secret
                    .as_deref()
                    .filter(|_| hook.rotating(now)),
            },
            traceparent: row.traceparent.clone(),
        });
        let report = attempt::send(&self.http, &self.config.policy, &claim).await;
        let outcome = attempt::judge(&claim, &report, &self.config.schedule, false);
        let (status, error) = (outcome.status.into(), outcome.error.clone());
        let sample = row
            .webhook_id
            .map(|webhook_id| health::Sample::of(webhook_id, &outcome));
        self.record_transition(outcome)
            .await
            .map_err(Transition::Unrecorded)?;
        if let Some(sample) = sample {
            // Counted in the webhook's health like a worker's attempt (the
            // auto-pause is the workers'). Best effort: the outcome is in.
            if let Err(e) = self
                .store
                .run(move |c| health::record(c, &[sample], None))
                .await
            {
                tracing::warn!(error = %e, "cannot update the webhook's health");
            }
        }
        Ok((status, error))
    }

    /// Writes a workflow_transition's outcome, retrying for as long as its
    /// row's lease allows: past it, the row is Exhausted by the next claim
    /// ("interrupted"), so the outcome must not be lost silently before.
    async fn record_transition(&self, outcome: attempt::Outcome) -> Result<(), StoreError> {
        let deadline = std::time::Instant::now() + LEASE_MARGIN;
        let log_id = outcome.log_id;
        // The caller is waiting: an outcome the database refuses goes plain
        // at the first refusal.
        let write = OutcomeWrite::new(outcome, &self.identity, 1);
        // No shutdown ends it: the caller waits for this answer, and the
        // deadline bounds the wait.
        let written = retry_until_stopped(
            std::future::pending(),
            |_, _| {},
            || async {
                match write.try_write(&self.store).await {
                    Err(e) if e.is_transient() && std::time::Instant::now() < deadline => Err(e),
                    done => Ok(done),
                }
            },
        )
        .await;
        match written.and_then(|done| done) {
            Ok(updated) if updated.contains(&log_id) => Ok(()),
            // Given up (claimed or replayed) while the attempt was out.
            Ok(_) => Err(StoreError::Refused(Refusal::Fenced(log_id))),
            Err(e) => Err(e),
        }
    }
}
