//! The producer's cache of enabled webhooks, compiled and indexed by
//! (entity type, event). It is keyed on the config version that a trigger
//! bumps on every change to the webhooks table, so a webhook added, changed,
//! disabled or deleted by any process takes effect on the next emit.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use hookfleet_core::domain::Webhook;
use hookfleet_core::error::StoreError;
use hookfleet_core::request::RequestBuilder;
use hookfleet_core::store::{webhooks, Store};

/// A webhook ready to build requests. A template that does not compile (one
/// stored without validation, e.g. by hand) fails each render with the
/// reason, and its rows are recorded Exhausted with it rather than dropped.
pub type Subscriber = RequestBuilder;

/// Enabled webhooks at one config version.
pub struct Catalog {
    pub version: i64,
    by_event: HashMap<(String, String), Vec<Arc<Subscriber>>>,
}

impl Catalog {
    fn build(version: i64, hooks: Vec<Webhook>) -> Catalog {
        let mut by_event: HashMap<(String, String), Vec<Arc<Subscriber>>> = HashMap::new();
        for hook in hooks {
            let key = (hook.entity_type.clone(), hook.event.clone());
            let subscriber = RequestBuilder::new(Arc::new(hook), false);
            by_event.entry(key).or_default().push(Arc::new(subscriber));
        }
        Catalog { version, by_event }
    }

    /// The enabled webhooks for an entity type and event.
    pub fn subscribers(&self, entity_type: &str, event: &str) -> &[Arc<Subscriber>] {
        self.by_event
            .get(&(entity_type.to_string(), event.to_string()))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

/// The cache itself.
#[derive(Default)]
pub struct CatalogCache {
    current: RwLock<Option<Arc<Catalog>>>,
}

impl CatalogCache {
    /// The catalog at the database's current config version: one small read
    /// when nothing changed, a reload when something did.
    pub async fn get(&self, store: &Store) -> Result<Arc<Catalog>, StoreError> {
        let version = store.run(webhooks::config_version).await?;
        if let Some(cached) = self.current.read().expect("catalog lock").as_ref() {
            if cached.version == version {
                return Ok(cached.clone());
            }
        }
        let (version, hooks) = store.run(webhooks::enabled_snapshot).await?;
        let catalog = Arc::new(Catalog::build(version, hooks));
        *self.current.write().expect("catalog lock") = Some(catalog.clone());
        Ok(catalog)
    }
}
