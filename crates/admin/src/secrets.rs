//! `secrets reencrypt`: every stored signing secret and header value
//! sealed again with the current key (`HOOKFLEET_SECRET_KEY`), opened with
//! it or an old one; run after changing keys, then the old ones may go.

use hookfleet_core::domain::at_rest;
use hookfleet_core::store::webhooks::{self, Reencrypted};
use hookfleet_core::store::Store;

use crate::error::OpsError;

/// Seals every stored value with the current key, one webhook per
/// transaction. With no key that would store every value as it is, which
/// is done only when `decrypt` says so (a missing key is far more often a
/// deploy mistake than a wish to decrypt); `decrypt` with a key is refused.
pub async fn reencrypt(store: &Store, decrypt: bool) -> Result<Reencrypted, OpsError> {
    let seals = at_rest::keyring().seals();
    if !seals && !decrypt {
        return Err(OpsError::NoKeyToSealWith);
    }
    if seals && decrypt {
        return Err(OpsError::DecryptWithKey);
    }
    Ok(store.run(webhooks::reencrypt).await?)
}
