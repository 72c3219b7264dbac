//! Fixtures shared by the micro-benchmarks in `benches/`.

use std::sync::Arc;

use hookfleet_core::model::{FieldMapping, Method, Structure, Webhook, WebhookRow, WebhookSpec};

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
    let spec = WebhookSpec {
        name: "bench".into(),
        entity_type: "Sales Order".into(),
        event: "on_submit".into(),
        request_url: "https://example.com/hooks/orders".into(),
        dynamic_url: false,
        method: Method::Post,
        structure,
        body_template: template.map(str::to_string),
        fields: fields
            .iter()
            .map(|(f, k)| FieldMapping {
                field: f.to_string(),
                key: k.to_string(),
            })
            .collect(),
        headers: vec![],
        condition: Some("doc.grand_total > 100".into()),
        enabled: true,
        secret: None,
        timeout: std::time::Duration::from_secs(5),
        queue: "default".into(),
        max_retries: 3,
        max_concurrency: None,
    };
    let row = WebhookRow::from(&spec);
    let now = chrono::Utc::now();
    Arc::new(Webhook {
        id: 1,
        name: row.name,
        entity_type: row.entity_type,
        event: row.event,
        request_url: row.request_url,
        dynamic_url: row.dynamic_url,
        request_method: row.request_method,
        request_structure: row.request_structure,
        body_template: row.body_template,
        fields: row.fields,
        headers: row.headers,
        condition: row.condition,
        enabled: row.enabled,
        secret: None,
        previous_secret: None,
        previous_secret_expires_at: None,
        timeout_ms: row.timeout_ms,
        queue: row.queue,
        max_retries: row.max_retries,
        max_concurrency: row.max_concurrency,
        created_at: now,
        updated_at: now,
    })
}
