//! Per-webhook concurrency limits. Three rules, all hard:
//!
//! - at most `limit` requests in flight to one webhook from this worker: the
//!   webhook's own `max_concurrency` if it sets one, else its **share**
//!   (`--endpoint-concurrency`, by default a quarter of the worker's slots);
//! - the share is work-conserving: a webhook whose jobs are the only ones
//!   this worker has seen for [`ACTIVE_WINDOW`] (and nothing else is in
//!   flight) may use up to the **ceiling** (every slot, unless
//!   `--endpoint-concurrency` was set, which makes the share a ceiling too);
//!   as soon as another webhook's job shows up, the share applies again;
//! - a **slow** webhook (a request in flight for longer than [`SLOW_AFTER`],
//!   or its last request took that long) gets at most `slow_limit` (the
//!   smaller of its limit and `--slow-endpoint-concurrency`) until one of its
//!   requests answers quickly again.
//!
//! So a webhook alone uses the whole worker, one that hangs until its timeout
//! holds a handful of slots, and a fast webhook beside others may use its
//! share. Jobs of a webhook at its limit stay on the queue (see `fetch`);
//! they never take a slot from anybody else.
//!
//! A webhook's own `max_concurrency` and `rate_limit` also hold across the
//! fleet: its jobs then take leases and rate tokens in Redis before they
//! are claimed (`fleet`), and a webhook refused there counts as at its limit
//! here (its jobs stay on the queue) until a lease comes back or its next
//! token is due.
//!
//! Limits are read from Postgres and re-read when the webhooks' config
//! version changes (checked at most every [`REFRESH_EVERY`]). A lowered
//! limit applies to the next request: those above it finish, none is added.
//!
//! What a job holds at its webhook lives here too: its [`EndpointSlot`],
//! and the [`FleetLease`] that slot carries when the webhook's limits hold
//! across the fleet. Dropping the slot frees both.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, Notify};

use hookfleet_core::queue::LEASE_MARGIN;
use hookfleet_core::store::{webhooks, Store};

/// How often the worker asks whether webhook limits changed: a change takes
/// effect within a second, for one tiny query a second.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// A webhook whose job was taken this recently counts as active: while any
/// other webhook is active, a webhook without its own limit gets its share,
/// not the whole worker. A second covers a queue with a steady trickle of a
/// second webhook's jobs, and lets a webhook left alone have every slot
/// within a second.
pub const ACTIVE_WINDOW: Duration = Duration::from_secs(1);

/// A request in flight this long marks its webhook slow. Receivers that work
/// answer in milliseconds; one that takes a second is in trouble, and waiting
/// for its timeout (up to 60 s) to find out would let it take many slots.
pub const SLOW_AFTER: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Endpoint {
    /// Each slot taken, by slot number, with when its request went out (None
    /// while the job is still being claimed).
    in_flight: HashMap<u64, Option<Instant>>,
    /// The last request to finish took [`SLOW_AFTER`] or longer.
    slow: bool,
    /// When a job of this webhook was last taken.
    seen: Option<Instant>,
    /// Refused by the fleet-wide limits until then (true: by its rate; a
    /// lease given back does not end that).
    refused_until: Option<(Instant, bool)>,
}

impl Endpoint {
    fn is_active(&self, now: Instant) -> bool {
        !self.in_flight.is_empty()
            || self
                .seen
                .is_some_and(|t| now.duration_since(t) < ACTIVE_WINDOW)
    }

    fn is_slow(&self, now: Instant) -> bool {
        self.slow
            || self
                .in_flight
                .values()
                .flatten()
                .any(|t| now.duration_since(*t) >= SLOW_AFTER)
    }
}

/// A webhook's limits across the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FleetLimit {
    /// Requests in flight from every worker together.
    pub max_concurrency: Option<u32>,
    /// Requests per second from every worker together.
    pub rate: Option<u32>,
    /// How long a lease lives: the webhook's timeout and [`LEASE_MARGIN`].
    pub lease_life: Duration,
}

struct State {
    version: i64,
    /// Webhooks with limits of their own (which also hold across the fleet).
    fleet: HashMap<i64, FleetLimit>,
    endpoints: HashMap<i64, Endpoint>,
    checked: Option<Instant>,
    next_slot: u64,
}

pub struct EndpointLimits {
    /// A webhook's share while others are active.
    default: usize,
    /// A webhook's limit while it is the only one active.
    ceiling: usize,
    slow_limit: usize,
    state: Arc<Mutex<State>>,
    released: Arc<Notify>,
}

/// One request's slot at its webhook, taken before the job's row is claimed
/// (by the starter's `reserve`) and owned by the job's `Claimable` until the
/// answer is in. Dropping it frees the slot and any fleet-wide lease, notes
/// whether the request (if it went out) was slow, and wakes whoever waits
/// for a slot.
pub struct EndpointSlot {
    webhook: i64,
    slot: u64,
    state: Arc<Mutex<State>>,
    released: Arc<Notify>,
    /// Passed the fleet-wide limits (taken a lease and a rate token where
    /// the webhook has them).
    admitted: bool,
    /// The fleet-wide lease, given back when the slot is freed.
    lease: Option<FleetLease>,
}

impl EndpointSlot {
    pub fn webhook(&self) -> i64 {
        self.webhook
    }

    pub fn is_admitted(&self) -> bool {
        self.admitted
    }

    /// Passed the fleet-wide limits, holding `lease` if the webhook limits
    /// its concurrency.
    pub fn admit(&mut self, lease: Option<FleetLease>) {
        self.admitted = true;
        self.lease = lease;
    }

    /// The request goes out now: its time is counted from here (a claim
    /// waiting on the database does not make a receiver look slow).
    pub fn sending(&self) {
        if let Ok(mut state) = self.state.lock() {
            if let Some(e) = state.endpoints.get_mut(&self.webhook) {
                if let Some(started) = e.in_flight.get_mut(&self.slot) {
                    *started = Some(Instant::now());
                }
            }
        }
    }
}

/// A lease on one of a webhook's fleet-wide request slots (taken by the
/// fleet gate, `fleet`), held by its [`EndpointSlot`]; dropping it gives it
/// back (in the background, batched).
pub struct FleetLease {
    webhook: i64,
    lease: Option<String>,
    back: mpsc::UnboundedSender<GiveBack>,
}

/// What the fleet gate's give-back loop is asked to do.
pub(crate) enum GiveBack {
    Lease(i64, String),
    /// Answer once everything sent before is given back.
    Flush(oneshot::Sender<()>),
}

impl FleetLease {
    /// The lease `lease` at `webhook`, given back through `back`.
    pub(crate) fn new(webhook: i64, lease: String, back: mpsc::UnboundedSender<GiveBack>) -> Self {
        FleetLease {
            webhook,
            lease: Some(lease),
            back,
        }
    }
}

impl Drop for FleetLease {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            // The loop ends only with the worker; a lease not given back
            // expires by itself.
            let _ = self.back.send(GiveBack::Lease(self.webhook, lease));
        }
    }
}

impl Drop for EndpointSlot {
    fn drop(&mut self) {
        let gave_back_lease = self.lease.take().is_some();
        if let Ok(mut state) = self.state.lock() {
            if let Some(e) = state.endpoints.get_mut(&self.webhook) {
                if let Some(Some(started)) = e.in_flight.remove(&self.slot) {
                    e.slow = started.elapsed() >= SLOW_AFTER;
                }
                // A fleet lease just came back: this webhook may have room.
                if gave_back_lease && matches!(e.refused_until, Some((_, false))) {
                    e.refused_until = None;
                }
            }
        }
        // The fetcher and jobs waiting for their webhook's slot all look
        // again (each waiter registered before it last looked: none misses
        // this).
        self.released.notify_waiters();
    }
}

impl EndpointLimits {
    /// `default`: a webhook's share of requests in flight unless it sets its
    /// own limit; `ceiling`: its limit while no other webhook is active
    /// (equal to `default` for no work-conserving); `slow_limit`: requests in
    /// flight to a slow webhook.
    pub fn new(default: usize, ceiling: usize, slow_limit: usize) -> EndpointLimits {
        EndpointLimits {
            default: default.max(1),
            ceiling: ceiling.max(default).max(1),
            slow_limit: slow_limit.max(1),
            state: Arc::new(Mutex::new(State {
                version: -1,
                fleet: HashMap::new(),
                endpoints: HashMap::new(),
                checked: None,
                next_slot: 0,
            })),
            released: Arc::new(Notify::new()),
        }
    }

    /// Re-reads the limits if the webhooks changed; on an error the limits in
    /// hand stay in force until the next call.
    pub async fn refresh(&self, store: &Store) {
        {
            let state = self.state.lock().expect("limits lock");
            if state.checked.is_some_and(|t| t.elapsed() < REFRESH_EVERY) {
                return;
            }
        }
        let Ok(version) = store.run(webhooks::config_version).await else {
            return;
        };
        if version == self.state.lock().expect("limits lock").version {
            self.state.lock().expect("limits lock").checked = Some(Instant::now());
            return;
        }
        let Ok((version, limits)) = store.run(webhooks::concurrency_limits).await else {
            return;
        };
        let mut state = self.state.lock().expect("limits lock");
        state.version = version;
        state.checked = Some(Instant::now());
        state.fleet = limits
            .iter()
            .filter(|l| l.max_concurrency.is_some() || l.rate_limit.is_some())
            .map(|l| {
                let limit = FleetLimit {
                    max_concurrency: l.max_concurrency.map(|n| n.max(1) as u32),
                    rate: l.rate_limit.map(|n| n.max(1) as u32),
                    lease_life: Duration::from_millis(l.timeout_ms.max(0) as u64) + LEASE_MARGIN,
                };
                (l.webhook_id, limit)
            })
            .collect();
    }

    /// The fleet-wide limits of those of `webhooks` that have any, under
    /// one lock (empty, and no allocation, when none has).
    pub fn fleet_limits_of(
        &self,
        webhooks: impl IntoIterator<Item = i64>,
    ) -> HashMap<i64, FleetLimit> {
        let state = self.state.lock().expect("limits lock");
        if state.fleet.is_empty() {
            return HashMap::new();
        }
        webhooks
            .into_iter()
            .filter_map(|w| state.fleet.get(&w).map(|l| (w, *l)))
            .collect()
    }

    /// The fleet refused `webhook` more requests: it counts as at its limit
    /// for `wait` (`by_rate`: until its next token; else until one of this
    /// worker's leases comes back, if sooner).
    pub fn refused(&self, webhook: i64, wait: Duration, by_rate: bool) {
        let mut state = self.state.lock().expect("limits lock");
        state.endpoints.entry(webhook).or_default().refused_until =
            Some((Instant::now() + wait, by_rate));
    }

    /// How many webhooks are active now.
    fn active(state: &State, now: Instant) -> usize {
        state
            .endpoints
            .values()
            .filter(|e| e.is_active(now))
            .count()
    }

    /// How many more requests `webhook` may start now, `active` webhooks
    /// being active.
    fn free(&self, state: &State, webhook: i64, now: Instant, active: usize) -> usize {
        let alone = match state.endpoints.get(&webhook) {
            Some(e) if e.is_active(now) => active <= 1,
            _ => active == 0,
        };
        let own = state.fleet.get(&webhook).and_then(|l| l.max_concurrency);
        let limit =
            own.map(|n| n as usize)
                .unwrap_or(if alone { self.ceiling } else { self.default });
        match state.endpoints.get(&webhook) {
            None => limit,
            Some(e) if e.refused_until.is_some_and(|(until, _)| now < until) => 0,
            Some(e) => {
                let cap = if e.is_slow(now) {
                    limit.min(self.slow_limit)
                } else {
                    limit
                };
                cap.saturating_sub(e.in_flight.len())
            }
        }
    }

    /// Notes that a job of `webhook` was taken: it counts as active for
    /// [`ACTIVE_WINDOW`].
    pub fn seen(&self, webhook: i64) {
        let mut state = self.state.lock().expect("limits lock");
        state.endpoints.entry(webhook).or_default().seen = Some(Instant::now());
    }

    /// Whether `webhook` may start another request now.
    fn has_room(&self, state: &State, webhook: i64) -> bool {
        let now = Instant::now();
        let active = Self::active(state, now);
        self.free(state, webhook, now, active) > 0
    }

    /// A slot for `webhook`, or None when it is at its limit.
    pub fn try_take(&self, webhook: i64) -> Option<EndpointSlot> {
        let mut state = self.state.lock().expect("limits lock");
        if !self.has_room(&state, webhook) {
            return None;
        }
        let slot = state.next_slot;
        state.next_slot += 1;
        state
            .endpoints
            .entry(webhook)
            .or_default()
            .in_flight
            .insert(slot, None);
        Some(EndpointSlot {
            webhook,
            slot,
            state: self.state.clone(),
            released: self.released.clone(),
            admitted: false,
            lease: None,
        })
    }

    /// Resolves once `webhook` has room for another request: a job waiting
    /// for its slot then takes one ([`EndpointLimits::try_take`]), and if
    /// another job was quicker, waits again.
    pub async fn room(&self, webhook: i64) {
        loop {
            // Registered before looking, so a slot freed in between wakes it.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if self.has_room(&self.state.lock().expect("limits lock"), webhook) {
                return;
            }
            // Look again now and then in any case.
            let _ = tokio::time::timeout(SLOW_AFTER, released).await;
        }
    }

    /// Webhooks that may start fewer than `want` requests now, and how many
    /// they may: a take must not bring in more of their jobs than that.
    pub fn caps(&self, want: usize) -> Vec<(i64, usize)> {
        let state = self.state.lock().expect("limits lock");
        let now = Instant::now();
        let active = Self::active(&state, now);
        state
            .endpoints
            .keys()
            .map(|id| (*id, self.free(&state, *id, now, active)))
            .filter(|(_, free)| *free < want)
            .collect()
    }

    /// Resolves when any webhook slot is freed (after this call).
    pub async fn released(&self) {
        self.released.notified().await
    }

    #[cfg(test)]
    fn set_limit(&self, webhook: i64, limit: usize) {
        let own = FleetLimit {
            max_concurrency: Some(limit as u32),
            rate: None,
            lease_life: LEASE_MARGIN,
        };
        self.state
            .lock()
            .expect("limits lock")
            .fleet
            .insert(webhook, own);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_webhook_gets_at_most_its_limit_and_others_are_unaffected() {
        let limits = EndpointLimits::new(2, 2, 1);
        let a1 = limits.try_take(1).expect("first");
        let _a2 = limits.try_take(1).expect("second");
        assert!(limits.try_take(1).is_none(), "third is refused");
        assert!(
            limits.try_take(2).is_some(),
            "another webhook has its own slots"
        );
        drop(a1);
        assert!(limits.try_take(1).is_some(), "a freed slot is taken again");
    }

    #[tokio::test]
    async fn a_lowered_limit_admits_nothing_until_the_requests_above_it_finish() {
        let limits = EndpointLimits::new(3, 3, 3);
        let held: Vec<_> = (0..3).map(|_| limits.try_take(7).unwrap()).collect();
        limits.set_limit(7, 1);
        assert!(limits.try_take(7).is_none());
        drop(held);
        assert!(limits.try_take(7).is_some());
        let _one = limits.try_take(7);
        assert!(limits.try_take(7).is_none(), "only one slot now");
    }

    #[tokio::test]
    async fn a_slow_webhook_gets_the_slow_limit_until_it_answers_quickly_again() {
        let limits = EndpointLimits::new(8, 8, 2);
        let hanging: Vec<_> = (0..4).map(|_| limits.try_take(1).unwrap()).collect();
        hanging.iter().for_each(EndpointSlot::sending);
        assert_eq!(
            limits.caps(100),
            vec![(1, 4)],
            "fast so far: its whole limit"
        );
        std::thread::sleep(SLOW_AFTER + Duration::from_millis(10));
        assert!(
            limits.try_take(1).is_none(),
            "4 in flight for over a second: over the slow limit of 2"
        );
        drop(hanging);
        let a = limits.try_take(1).expect("slow: two slots");
        let _b = limits.try_take(1).expect("slow: two slots");
        a.sending();
        assert!(
            limits.try_take(1).is_none(),
            "still slow: its last request took over a second"
        );
        drop(a); // answered at once
        assert_eq!(
            limits.caps(100),
            vec![(1, 7)],
            "fast again: its whole limit"
        );
    }

    #[tokio::test]
    async fn a_webhook_alone_may_use_every_slot_and_gets_its_share_once_another_is_active() {
        let limits = EndpointLimits::new(2, 8, 1);
        let alone: Vec<_> = (0..8)
            .map(|_| limits.try_take(1).expect("alone: all 8"))
            .collect();
        assert!(limits.try_take(1).is_none(), "the ceiling holds");
        limits.seen(2);
        assert!(
            limits.try_take(1).is_none(),
            "another is active: back to its share"
        );
        let other = limits
            .try_take(2)
            .expect("the other webhook gets its share");
        drop(alone);
        let _a = limits.try_take(1).unwrap();
        let _b = limits.try_take(1).unwrap();
        assert!(
            limits.try_take(1).is_none(),
            "two, its share, while webhook 2 is active"
        );
        drop(other);
        std::thread::sleep(ACTIVE_WINDOW + Duration::from_millis(10));
        assert!(limits.try_take(1).is_some(), "alone again: past its share");
    }

    #[tokio::test]
    async fn time_spent_before_the_request_goes_out_does_not_make_a_webhook_slow() {
        let limits = EndpointLimits::new(8, 8, 2);
        let claiming: Vec<_> = (0..4).map(|_| limits.try_take(1).unwrap()).collect();
        std::thread::sleep(SLOW_AFTER + Duration::from_millis(10));
        assert!(
            limits.try_take(1).is_some(),
            "four slots held a second by claims, none sent: not slow"
        );
        drop(claiming);
        assert_eq!(limits.caps(100), vec![(1, 8)], "freed unsent: still fast");
    }

    #[tokio::test]
    async fn a_slot_freed_while_a_job_waits_for_one_wakes_it_at_once() {
        let limits = Arc::new(EndpointLimits::new(1, 1, 1));
        let held = limits.try_take(5).unwrap();
        let waiter = {
            let limits = limits.clone();
            tokio::spawn(async move {
                limits.room(5).await;
                limits.try_take(5)
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let freed = Instant::now();
        drop(held);
        let slot = waiter.await.unwrap();
        assert!(freed.elapsed() < SLOW_AFTER / 2, "{:?}", freed.elapsed());
        assert!(slot.is_some(), "the freed slot is the waiter's");
    }
}
