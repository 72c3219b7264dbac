//! The webhooks' health, written once a second: the recorder adds each
//! recorded batch's attempts to a buffer, and one task per worker writes
//! what gathered in one statement (and pauses the webhooks that failed for
//! too long). So health costs one statement a second however fast the
//! worker delivers, and several workers never queue on a busy webhook's
//! health row with every batch.
//!
//! Health is a summary: a write that fails is logged and its attempts left
//! out (the rows and attempts tables are complete), and a worker killed
//! between two writes leaves out at most a second of attempts.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookfleet_core::error::StoreError;
use hookfleet_core::runtime::Shutdown;
use hookfleet_core::store::health::{self, Sample};
use hookfleet_core::store::Store;

/// How often the gathered attempts are written: often enough that health
/// and the auto-pause follow within a second, rarely enough to cost one
/// statement a second.
pub const HEALTH_WRITE_INTERVAL: Duration = Duration::from_secs(1);

/// The most attempts gathered between two writes; more (a database that
/// does not answer for a while) are left out of the health rather than
/// held in memory without bound.
pub const MAX_GATHERED: usize = 100_000;

/// Attempts waiting to be counted in their webhooks' health.
#[derive(Default)]
pub struct HealthBuffer {
    samples: Mutex<Vec<Sample>>,
}

impl HealthBuffer {
    /// Adds attempts (those over [`MAX_GATHERED`] are left out).
    pub fn add(&self, samples: impl IntoIterator<Item = Sample>) {
        let mut gathered = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let room = MAX_GATHERED.saturating_sub(gathered.len());
        gathered.extend(samples.into_iter().take(room));
    }

    fn take(&self) -> Vec<Sample> {
        std::mem::take(&mut *self.samples.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Writes what gathered (and pauses the webhooks that failed for longer
    /// than `auto_pause_after`). A failure is logged (and returned): those
    /// attempts are left out of the health.
    pub async fn write(
        &self,
        store: &Store,
        auto_pause_after: Option<Duration>,
    ) -> Result<(), StoreError> {
        let samples = self.take();
        if samples.is_empty() {
            return Ok(());
        }
        match store
            .run(move |c| health::record(c, &samples, auto_pause_after))
            .await
        {
            Ok(paused) => {
                for p in paused {
                    hookfleet_core::runtime::observe::metrics()
                        .webhooks_auto_paused
                        .inc();
                    tracing::warn!(webhook = %p.name, reason = %p.reason,
                        "webhook paused: its deliveries wait for `hookfleet webhook resume`");
                }
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot update the webhooks' health");
                Err(e)
            }
        }
    }
}

/// Writes the buffer every [`HEALTH_WRITE_INTERVAL`] until told to stop;
/// the worker writes it once more after its last outcomes.
pub async fn run(
    buffer: Arc<HealthBuffer>,
    store: Store,
    auto_pause_after: Option<Duration>,
    shutdown: Shutdown,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(HEALTH_WRITE_INTERVAL) => {}
            _ = shutdown.requested(1) => return,
        }
        // Logged inside; the next write goes on with new attempts.
        let _ = buffer.write(&store, auto_pause_after).await;
    }
}
