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

use std::collections::HashMap;
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

/// The most samples gathered between two writes; more (failures of a
/// database that does not answer for a while) are left out of the health
/// rather than held in memory without bound.
pub const MAX_GATHERED: usize = 100_000;

/// Attempts waiting to be counted in their webhooks' health. Successes of
/// one webhook in one latency bucket are gathered as one sample (its count
/// and latest start are all the health needs of them), so a worker
/// delivering 10,000 a second holds a few dozen samples, not 10,000; each
/// failure is kept, for its time and its error.
#[derive(Default)]
pub struct HealthBuffer {
    gathered: Mutex<Gathered>,
}

#[derive(Default)]
struct Gathered {
    samples: Vec<Sample>,
    /// Where the successes of each (webhook, bucket) are in `samples`.
    successes: HashMap<(i64, i16), usize>,
}

impl HealthBuffer {
    /// Adds attempts (once [`MAX_GATHERED`] samples are held, every new
    /// attempt is left out until the next write).
    pub fn add(&self, samples: impl IntoIterator<Item = Sample>) {
        let mut gathered = self.gathered.lock().unwrap_or_else(|e| e.into_inner());
        let Gathered {
            samples: kept,
            successes,
        } = &mut *gathered;
        for sample in samples {
            // Full: every new attempt is left out (a success taken into one
            // held could hide failures left out before it).
            if kept.len() >= MAX_GATHERED {
                break;
            }
            let key = sample.merge_key();
            if let Some(at) = key.and_then(|k| successes.get(&k)) {
                kept[*at].absorb(&sample);
                continue;
            }
            kept.push(sample);
            if let Some(key) = key {
                successes.insert(key, kept.len() - 1);
            }
        }
    }

    fn take(&self) -> Vec<Sample> {
        let taken = std::mem::take(&mut *self.gathered.lock().unwrap_or_else(|e| e.into_inner()));
        taken.samples
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn sample(webhook_id: i64, second: u32, duration_ms: i32, ok: bool) -> Sample {
        Sample {
            webhook_id,
            started_at: Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, second).unwrap(),
            duration_ms,
            ok,
            error: (!ok).then(|| "HTTP 500".to_string()),
            count: 1,
        }
    }

    #[test]
    fn successes_of_a_webhook_and_bucket_are_one_sample_and_failures_each_their_own() {
        let buffer = HealthBuffer::default();
        // 1,000 successes of webhook 1 at 5 ms, latest start at second 59.
        buffer.add((0..1000).map(|i| sample(1, (i % 60) as u32, 5, true)));
        // Another bucket, another webhook, and three failures.
        buffer.add([sample(1, 3, 900, true), sample(2, 4, 5, true)]);
        buffer.add((0..3).map(|i| sample(1, 10 + i, 5, false)));
        let taken = buffer.take();
        assert_eq!(taken.len(), 6, "{taken:?}");
        let merged = &taken[0];
        assert_eq!(
            (merged.webhook_id, merged.count, merged.ok),
            (1, 1000, true)
        );
        assert_eq!(
            merged.started_at,
            Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 59).unwrap()
        );
        assert_eq!(taken.iter().map(|s| s.count).sum::<i32>(), 1005);
        assert_eq!(taken.iter().filter(|s| !s.ok && s.count == 1).count(), 3);
        assert!(buffer.take().is_empty(), "taken once");
    }

    #[test]
    fn once_full_every_new_attempt_is_left_out() {
        let buffer = HealthBuffer::default();
        buffer.add([sample(1, 0, 5, true)]);
        buffer.add((0..MAX_GATHERED + 10).map(|_| sample(1, 1, 5, false)));
        // Full: not even a success of a (webhook, bucket) already held
        // counts, lest it hide the failures left out before it.
        buffer.add([sample(1, 2, 5, true), sample(9, 2, 5, true)]);
        let taken = buffer.take();
        assert_eq!(taken.len(), MAX_GATHERED);
        assert_eq!(taken[0].count, 1);
        assert!(taken.iter().all(|s| s.webhook_id == 1));
        // Emptied by the write: gathering starts again.
        buffer.add([sample(9, 3, 5, true)]);
        assert_eq!(buffer.take().len(), 1);
    }
}
