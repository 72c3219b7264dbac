//! Documents and events the tests emit.

use hookfleet_producer::{Batch, Event};
use serde_json::{json, Value};

/// A Sales Order document.
pub fn sales_order(name: &str, total: f64) -> Value {
    json!({"doctype": "Sales Order", "name": name, "customer": "ACME", "grand_total": total, "status": "Draft"})
}

/// `on_submit` of Sales Orders SO-0 … SO-(n-1), as one batch.
pub fn sales_orders(n: usize) -> Batch {
    let mut batch = Batch::new();
    for i in 0..n {
        let name = format!("SO-{i}");
        batch.push(Event::new(
            "Sales Order",
            "on_submit",
            &name,
            sales_order(&name, 1.0),
        ));
    }
    batch
}
