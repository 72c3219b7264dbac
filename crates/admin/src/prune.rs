//! `prune`: terminal rows (Delivered, Exhausted) recorded and last touched
//! before a cut deleted with their attempts, in batches that each commit
//! on their own. Pending rows are never deleted. The sweeper prunes the
//! same way each tick (`--retention`), within a time budget.

use std::time::Duration;

use hookfleet_core::error::StoreError;
use hookfleet_core::store::retention::{self, PruneReport};
use hookfleet_core::store::Store;

pub use hookfleet_core::store::retention::{MIN_RETENTION, PRUNE_BATCH};

/// The largest prune batch: beyond this one statement holds its locks and
/// WAL for seconds.
pub const MAX_PRUNE_BATCH: i64 = 100_000;

/// An operator's prune runs until no row older than the cut is left: it
/// has no budget of its own (each batch commits on its own, so a prune
/// stopped half-way keeps what it deleted).
const PRUNE_BUDGET: Duration = Duration::MAX;

/// Deletes the terminal rows older than `older_than`, `batch_size` rows
/// looked at per statement; paced (a fifth of the time in statements)
/// unless `full_speed`. `progress` sees the report so far after each batch.
pub async fn prune(
    store: &Store,
    older_than: Duration,
    batch_size: i64,
    full_speed: bool,
    mut progress: impl FnMut(&PruneReport) + Send + 'static,
) -> Result<PruneReport, StoreError> {
    let duty = if full_speed {
        1.0
    } else {
        retention::PRUNE_DUTY
    };
    store
        .run(move |c| {
            retention::prune(
                c,
                older_than,
                0,
                batch_size,
                PRUNE_BUDGET,
                duty,
                &mut progress,
            )
        })
        .await
}
