//! What happened to events: deliveries searched (`delivery list`, the
//! API's and the pages' lists) and one delivery with its attempts
//! (`delivery show`).

use std::time::Duration;

use hookfleet_core::domain::{DeliveryAttempt, DeliveryLog};
use hookfleet_core::error::StoreError;
use hookfleet_core::store::deliveries::{self, ListFilter};
use hookfleet_core::store::Store;

/// Deliveries newest first: those of the webhook named `webhook` (a
/// deleted one's too), within `filter`. With a `time_limit`, a search
/// that takes longer is stopped by Postgres and refused
/// (`Refusal::TooSlow`): a filter no index serves must not load the
/// database the workers write to.
pub async fn list(
    store: &Store,
    webhook: Option<String>,
    mut filter: ListFilter,
    time_limit: Option<Duration>,
) -> Result<Vec<DeliveryLog>, StoreError> {
    store
        .run(move |c| {
            filter.webhook = webhook
                .as_deref()
                .map(|name| deliveries::webhook_rows(c, name))
                .transpose()?;
            match time_limit {
                Some(limit) => deliveries::list_within(c, &filter, limit),
                None => deliveries::list(c, &filter),
            }
        })
        .await
}

/// One delivery with every attempt, oldest first.
pub async fn show(
    store: &Store,
    id: i64,
) -> Result<(DeliveryLog, Vec<DeliveryAttempt>), StoreError> {
    store
        .run(move |c| Ok((deliveries::get(c, id)?, deliveries::attempts(c, id)?)))
        .await
}
