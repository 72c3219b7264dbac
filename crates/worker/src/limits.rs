//! Per-webhook concurrency limits: at most N requests in flight to one
//! webhook from this worker (the webhook's `max_concurrency`, else
//! `--endpoint-concurrency`). A webhook that hangs until its timeout holds
//! only its own slots; its other jobs go to the back of the queue instead of
//! taking slots from everybody else.
//!
//! Limits are read from Postgres and re-read when the webhooks' config
//! version changes (checked at most every [`REFRESH_EVERY`]). A lowered
//! limit takes effect as the requests above it finish, never by exceeding it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use hookfleet_core::store::{webhooks, Store};

/// How often the worker asks whether webhook limits changed: a change takes
/// effect within a second, for one tiny query a second.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

struct Endpoint {
    limit: usize,
    slots: Arc<Semaphore>,
}

struct State {
    version: i64,
    configured: HashMap<i64, usize>,
    endpoints: HashMap<i64, Endpoint>,
    checked: Option<Instant>,
}

pub struct EndpointLimits {
    default: usize,
    state: Mutex<State>,
    released: Arc<Notify>,
}

/// One request's slot at its webhook; freeing it wakes a fetcher waiting
/// for a saturated webhook.
pub struct EndpointSlot {
    _permit: OwnedSemaphorePermit,
    released: Arc<Notify>,
}

impl Drop for EndpointSlot {
    fn drop(&mut self) {
        // One fetcher waits; a permit stored while it is busy wakes its next wait.
        self.released.notify_one();
    }
}

impl EndpointLimits {
    pub fn new(default: usize) -> EndpointLimits {
        EndpointLimits {
            default: default.max(1),
            state: Mutex::new(State {
                version: -1,
                configured: HashMap::new(),
                endpoints: HashMap::new(),
                checked: None,
            }),
            released: Arc::new(Notify::new()),
        }
    }

    /// Re-reads the limits if the webhooks changed; errors are left for the
    /// next call (the limits in hand stay in force).
    pub async fn refresh(&self, store: &Store) {
        {
            let state = self.state.lock().expect("limits lock");
            if state.checked.is_some_and(|t| t.elapsed() < REFRESH_EVERY) {
                return;
            }
        }
        let version = match store.run(webhooks::config_version).await {
            Ok(v) => v,
            Err(_) => return,
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
        state.configured = limits
            .into_iter()
            .filter_map(|(id, n)| n.map(|n| (id, n.max(1) as usize)))
            .collect();
        let default = self.default;
        let configured = state.configured.clone();
        for (id, endpoint) in state.endpoints.iter_mut() {
            let want = configured.get(id).copied().unwrap_or(default);
            resize(endpoint, want);
        }
    }

    /// A slot for `webhook_id`, or None when it is at its limit.
    pub fn try_take(&self, webhook_id: i64) -> Option<EndpointSlot> {
        let permit = self.slots(webhook_id).try_acquire_owned().ok()?;
        Some(EndpointSlot {
            _permit: permit,
            released: self.released.clone(),
        })
    }

    /// Waits for a slot (for jobs that did not name their webhook).
    pub async fn take(&self, webhook_id: i64) -> Option<EndpointSlot> {
        let permit = self.slots(webhook_id).acquire_owned().await.ok()?;
        Some(EndpointSlot {
            _permit: permit,
            released: self.released.clone(),
        })
    }

    /// Webhooks with fewer than `want` free slots, and how many they have:
    /// a take must not bring in more of their jobs than that.
    pub fn caps(&self, want: usize) -> Vec<(i64, usize)> {
        let state = self.state.lock().expect("limits lock");
        state
            .endpoints
            .iter()
            .map(|(id, e)| (*id, e.slots.available_permits()))
            .filter(|(_, free)| *free < want)
            .collect()
    }

    /// Resolves when any webhook slot is freed.
    pub async fn released(&self) {
        self.released.notified().await
    }

    fn slots(&self, webhook_id: i64) -> Arc<Semaphore> {
        let mut state = self.state.lock().expect("limits lock");
        let limit = state
            .configured
            .get(&webhook_id)
            .copied()
            .unwrap_or(self.default);
        state
            .endpoints
            .entry(webhook_id)
            .or_insert_with(|| Endpoint {
                limit,
                slots: Arc::new(Semaphore::new(limit)),
            })
            .slots
            .clone()
    }
}

/// Changes an endpoint's limit in place: more slots at once; fewer as the
/// requests holding them finish (a background task takes and forgets them).
fn resize(endpoint: &mut Endpoint, want: usize) {
    if want > endpoint.limit {
        endpoint.slots.add_permits(want - endpoint.limit);
    } else if want < endpoint.limit {
        let surplus = (endpoint.limit - want) as u32;
        let slots = endpoint.slots.clone();
        tokio::spawn(async move {
            if let Ok(p) = slots.acquire_many_owned(surplus).await {
                p.forget();
            }
        });
    }
    endpoint.limit = want;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_webhook_gets_at_most_its_limit_and_others_are_unaffected() {
        let limits = EndpointLimits::new(2);
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
    async fn a_lowered_limit_never_admits_more_than_the_new_limit() {
        let mut endpoint = Endpoint {
            limit: 3,
            slots: Arc::new(Semaphore::new(3)),
        };
        let held: Vec<_> = (0..3)
            .map(|_| endpoint.slots.clone().try_acquire_owned().unwrap())
            .collect();
        resize(&mut endpoint, 1);
        drop(held);
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let first = endpoint.slots.clone().try_acquire_owned();
        assert!(first.is_ok());
        assert!(
            endpoint.slots.clone().try_acquire_owned().is_err(),
            "only one slot remains"
        );
    }
}
