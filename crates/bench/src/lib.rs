//! Fixtures shared by the micro-benchmarks in `benches/`.

use std::sync::Arc;

use hookfleet_core::domain::{FieldMapping, Structure, Webhook, WebhookSpec};

/// A Sales Order like the ones the fleet benchmarks send (a ~342-byte body).
pub fn sample_order() -> serde_json::Value {
    serde_json::json!({
        "doctype": "Sales Order", "name": "SO-0001234", "customer": "ACME Corporation",
        "grand_total": 1234.5, "status": "Submitted", "currency": "EUR",
        "items": [{"sku": "A-1", "qty": 2, "rate": 100.0}, {"sku": "B-7", "qty": 1, "rate": 1034.5}],
        "note": "x".repeat(120)
    })
}

/// A stored webhook with the given body template or field selection.
pub fn webhook(
    template: Option<&str>,
    fields: &[(&str, &str)],
    structure: Structure,
) -> Arc<Webhook> {
    let mut spec = WebhookSpec::new(
        "bench",
        "Sales Order",
        "on_submit",
        "https://example.com/hooks/orders",
    );
    spec.structure = structure;
    spec.body_template = template.map(str::to_string);
    spec.fields = fields
        .iter()
        .map(|(f, k)| FieldMapping {
            field: f.to_string(),
            key: k.to_string(),
        })
        .collect();
    spec.condition = Some("doc.grand_total > 100".into());
    Arc::new(Webhook::preview(&spec))
}
