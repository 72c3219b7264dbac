//! Documents and events the tests emit, and where their webhooks post
//! when nobody is meant to answer.

use hookfleet_producer::{Batch, Event};
use serde_json::{json, Value};

/// The entity type the tests' events are about.
pub const ENTITY: &str = "Sales Order";

/// An address nobody answers on (loopback's discard port), for webhooks
/// whose rows are never sent.
pub const NOWHERE: &str = "http://127.0.0.1:9";

/// A Sales Order document.
pub fn sales_order(name: &str, total: f64) -> Value {
    json!({"doctype": "Sales Order", "name": name, "customer": "ACME", "grand_total": total, "status": "Draft"})
}

/// `on_submit` of Sales Orders SO-0 … SO-(n-1), as one batch.
pub fn sales_orders(n: usize) -> Batch {
    sales_orders_in(0..n, 1.0)
}

/// `on_submit` of Sales Orders SO-i for every i in `numbers`, each of
/// grand total `total`, as one batch.
pub fn sales_orders_in(numbers: std::ops::Range<usize>, total: f64) -> Batch {
    let mut batch = Batch::new();
    for i in numbers {
        let name = format!("SO-{i}");
        batch.push(Event::new(
            ENTITY,
            "on_submit",
            &name,
            sales_order(&name, total),
        ));
    }
    batch
}

/// An event as the HTTP ingest and `emit --batch` read it: Sales Order
/// `name`, whose document carries `pad`.
pub fn event_json(name: &str, pad: String) -> Value {
    json!({
        "entity_type": ENTITY,
        "event": "on_submit",
        "name": name,
        "doc": {"name": name, "pad": pad},
    })
}

/// JSON text of exactly `total` bytes: `make(pad)`, with the pad string
/// grown to fit (for tests just over and exactly at a size limit).
pub fn json_of_size(total: usize, make: impl Fn(String) -> Value) -> String {
    let base = make(String::new()).to_string().len();
    let text = make("x".repeat(total - base)).to_string();
    assert_eq!(text.len(), total, "the padding is miscounted");
    text
}
