//! The first attempt of a delivery, end to end: producer → Redis → worker →
//! a real receiver on 127.0.0.1 → the outcome in Postgres.

use std::time::Duration;

use chrono::Utc;
use serde_json::json;

use hookfleet_core::domain::RetrySchedule;
use hookfleet_core::domain::{DeliveryStatus, FieldMapping, Structure};
use hookfleet_producer::{Batch, EmitError, Event};
use hookfleet_testkit::{
    assert_error_mentions, sales_order, sales_orders, Reply, Scenario, PATIENCE,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2xx_marks_the_row_delivered_and_the_receiver_verifies_both_signatures() {
    let (env, rx, worker) = Scenario::webhook("orders", "/hook")
        .signed("s3cret")
        .concurrency(4)
        .start()
        .await;

    let report = env
        .emit_doc("on_submit", "SO-1", sales_order("SO-1", 10.0))
        .await;
    assert_eq!(report.deliveries.len(), 1);
    let id = report.deliveries[0].id;
    let row = env.until_status(id, DeliveryStatus::Delivered).await;
    assert_eq!(row.attempts, 1);
    assert!(row.next_retry.is_none());
    assert_eq!(row.response_code, Some(200));

    let got = rx.requests();
    assert_eq!(got.len(), 1);
    got[0].assert_signatures_verified("signatures");
    assert_eq!(
        got[0].header("webhook-id"),
        Some(report.deliveries[0].event_id.as_str())
    );
    assert_eq!(got[0].json()["name"], "SO-1");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_enabled_webhooks_matching_entity_type_and_event_fire() {
    let (env, rx, worker) = Scenario::webhook("on", "/on")
        .and_webhook("off", "/off")
        .with(|s| s.enabled = false)
        .and_webhook("other-event", "/cancel")
        .on("on_cancel")
        .and_webhook("other-type", "/invoice")
        .with(|s| s.entity_type = "Invoice".into())
        .concurrency(4)
        .start()
        .await;

    let report = env.submit("SO-1").await;
    assert_eq!(
        report
            .deliveries
            .iter()
            .map(|d| d.webhook.as_str())
            .collect::<Vec<_>>(),
        vec!["on"]
    );
    env.until_status(report.deliveries[0].id, DeliveryStatus::Delivered)
        .await;
    let paths: Vec<String> = rx.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, vec!["/on"]);
    assert_eq!(env.rows().len(), 1);
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_condition_decides_whether_an_event_is_delivered() {
    let (env, _rx) = Scenario::webhook("big-orders", "/big")
        .with(|s| s.condition = Some("doc.grand_total > 100".into()))
        .ready()
        .await;

    let small = env
        .emit_doc("on_submit", "SO-1", sales_order("SO-1", 5.0))
        .await;
    assert!(small.deliveries.is_empty(), "condition false: no row");
    let big = env
        .emit_doc("on_submit", "SO-2", sales_order("SO-2", 500.0))
        .await;
    assert_eq!(big.deliveries.len(), 1, "condition true: one row");
    assert_eq!(env.rows().len(), 1);
    assert_eq!(env.rows()[0].entity_name, "SO-2");
}

/// Field `field` of the document, sent under `key`.
fn mapping((field, key): (&str, &str)) -> FieldMapping {
    FieldMapping {
        field: field.into(),
        key: key.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_body_is_exactly_the_selected_fields_url_encoded() {
    let fields = [
        ("name", "order"),
        ("customer", "customer name"),
        ("grand_total", "total"),
    ];
    let (env, rx, worker) = Scenario::webhook("form", "/form")
        .with(|s| {
            s.structure = Structure::Form;
            s.fields = fields.into_iter().map(mapping).collect();
        })
        .start()
        .await;
    let doc = json!({"name": "SO-1", "customer": "A&B Co", "grand_total": 12.5, "secret_field": "not sent"});
    let report = env.emit_doc("on_submit", "SO-1", doc).await;
    env.until_status(report.deliveries[0].id, DeliveryStatus::Delivered)
        .await;
    let got = &rx.requests()[0];
    assert_eq!(got.body, "order=SO-1&customer+name=A%26B+Co&total=12.5");
    assert_eq!(
        got.header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_templates_render_objects_and_arrays_and_the_row_freezes_the_request() {
    let (env, rx, worker) = Scenario::webhook("object", "/object")
        .with(|obj| {
            obj.body_template = Some(r#"{"order": "{{ doc.name }}", "total": {{ doc.grand_total }}, "items": {{ doc["items"] | tojson }}}"#.into());
            obj.headers = vec![hookfleet_core::domain::Header {
                key: "X-Tenant".into(),
                value: "acme".into(),
            }];
        })
        .and_webhook("array", "/array")
        .with(|arr| arr.body_template = Some(r#"[{% for i in doc["items"] %}{"sku": "{{ i.sku }}"}{% if not loop.last %},{% endif %}{% endfor %}]"#.into()))
        .start()
        .await;

    let doc = json!({"name": "SO-9", "grand_total": 42, "items": [{"sku": "A"}, {"sku": "B"}]});
    let report = env.emit_doc("on_submit", "SO-9", doc).await;
    for d in &report.deliveries {
        env.until_status(d.id, DeliveryStatus::Delivered).await;
    }
    let by_path = |p: &str| rx.requests().into_iter().find(|r| r.path == p).unwrap();
    assert_eq!(
        by_path("/object").json(),
        json!({"order": "SO-9", "total": 42, "items": [{"sku": "A"}, {"sku": "B"}]})
    );
    assert_eq!(by_path("/object").header("x-tenant"), Some("acme"));
    assert_eq!(
        by_path("/array").json(),
        json!([{"sku": "A"}, {"sku": "B"}])
    );

    // The row holds the request as sent: url, method, body, and the body's
    // type; static headers (credentials among them) are read from the
    // webhook at send time, never frozen on the row.
    let row = env
        .rows()
        .into_iter()
        .find(|r| r.webhook_name == "object")
        .unwrap();
    assert_eq!(row.url, rx.url("/object"));
    assert_eq!(row.method, "POST");
    assert_eq!(row.body, by_path("/object").body);
    let headers = row.header_list().expect("headers");
    assert_eq!(headers.len(), 1, "{headers:?}");
    assert!(headers
        .iter()
        .any(|h| h.key == "Content-Type" && h.value == "application/json"));
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dynamic_url_is_rendered_from_the_document_and_a_static_one_is_not() {
    let (env, rx, worker) = Scenario::webhook("dynamic", "/{{ doc.customer }}/orders")
        .with(|s| s.dynamic_url = true)
        .and_webhook("static", "/{{ doc.customer }}")
        .start()
        .await;
    let report = env.submit("SO-1").await;
    for d in &report.deliveries {
        env.until_status(d.id, DeliveryStatus::Delivered).await;
    }
    let mut paths: Vec<String> = rx.requests().iter().map(|r| r.path.clone()).collect();
    paths.sort();
    assert_eq!(
        paths,
        vec!["/%7B%7B%20doc.customer%20%7D%7D", "/ACME/orders"]
    );
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_schedules_a_retry_in_five_minutes() {
    let (env, rx, worker) = Scenario::webhook("down", "/down")
        .replying(Reply::status(500).body("boom"))
        .start()
        .await;
    let row = env.submit_until("SO-1", DeliveryStatus::Failed).await;
    assert_eq!(row.attempts, 1);
    assert_eq!(row.response_code, Some(500));
    assert_eq!(row.response_body.as_deref(), Some(&b"boom"[..]));
    let due_in = (row.next_retry.unwrap() - Utc::now()).num_seconds();
    assert!(
        (290..=301).contains(&due_in),
        "next retry in {due_in}s, expected ~300s"
    );
    assert_eq!(rx.count(), 1);
    let attempts = env.attempts(row.id);
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].response_code, Some(500));
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_retries_zero_makes_a_failure_final() {
    let (env, _rx, worker) = Scenario::webhook("once", "/once")
        .replying(Reply::status(503))
        .with(|s| s.max_retries = 0)
        .start()
        .await;
    let row = env.submit_until("SO-1", DeliveryStatus::Exhausted).await;
    assert!(row.next_retry.is_none());
    assert_eq!(row.attempts, 1);
    assert_error_mentions(&row, "HTTP 503");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_receiver_gets_exactly_one_request_and_the_row_fails_after_the_timeout() {
    let (env, rx, worker) = Scenario::webhook("hangs", "/hang")
        .replying(Reply::hang())
        .with(|s| s.timeout = Duration::from_secs(1))
        .start()
        .await;
    let row = env.submit_until("SO-1", DeliveryStatus::Failed).await;
    assert_error_mentions(&row, "timed out");
    let took = env.attempts(row.id)[0].duration_ms;
    assert!(
        (900..3000).contains(&took),
        "attempt took {took} ms with a 1 s timeout"
    );
    // No back-to-back re-fire: deliberately a window, still one request a
    // while later.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(rx.count(), 1);
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_gone_is_final() {
    let (env, _rx, worker) = Scenario::webhook("gone", "/gone")
        .replying(Reply::status(410))
        .start()
        .await;
    let row = env.submit_until("SO-1", DeliveryStatus::Exhausted).await;
    assert!(row.next_retry.is_none());
    assert_error_mentions(&row, "410");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_that_fails_at_render_time_is_recorded_exhausted_without_a_request() {
    // Valid on the sample document (a missing field renders as null) but
    // not JSON when the real document lacks the field: `{"total": }`.
    let (env, rx, worker) = Scenario::webhook("bad-render", "/x")
        .with(|s| s.body_template = Some(r#"{"total": {{ doc.grand_total }}}"#.into()))
        .start()
        .await;
    let report = env
        .emit_doc("on_submit", "SO-1", json!({"name": "SO-1"}))
        .await;
    assert_eq!(report.deliveries.len(), 1);
    let d = &report.deliveries[0];
    assert_eq!(d.status.as_str(), "Exhausted");
    assert!(!d.enqueued);
    let row = env.row(d.id);
    assert!(
        row.error
            .as_deref()
            .unwrap()
            .contains("did not render to JSON"),
        "{:?}",
        row.error
    );
    assert!(row.next_retry.is_none());
    // Deliberately a window: the running worker must send nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rx.count(), 0);
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_workflow_transition_returns_the_error_after_exactly_one_request() {
    let (env, rx) = Scenario::webhook("approve", "/wf")
        .on("workflow_transition")
        .replying(Reply::status(500))
        .ready()
        .await;
    let err = env
        .producer()
        .emit(Event::new(
            "Sales Order",
            "workflow_transition",
            "SO-1",
            sales_order("SO-1", 1.0),
        ))
        .await
        .unwrap_err();
    let EmitError::WorkflowTransition { report, failures } = err else {
        panic!("expected a workflow failure")
    };
    assert!(failures[0].reason.contains("HTTP 500"), "{failures:?}");
    let row = env.row(report.deliveries[0].id);
    assert_eq!(row.status, DeliveryStatus::Exhausted);
    assert_eq!(row.attempts, 1);
    assert!(row.next_retry.is_none());
    assert_eq!(rx.count(), 1);
    // Nothing was queued for it.
    assert_eq!(env.queue_depth("default"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_workflow_transition_is_delivered_synchronously() {
    let (env, rx) = Scenario::webhook("approve", "/wf")
        .on("workflow_transition")
        .ready()
        .await;
    let report = env
        .emit_doc("workflow_transition", "SO-1", sales_order("SO-1", 1.0))
        .await;
    assert_eq!(report.deliveries[0].status.as_str(), "Delivered");
    assert_eq!(
        env.row(report.deliveries[0].id).status,
        DeliveryStatus::Delivered
    );
    assert_eq!(rx.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_with_an_insert_and_several_saves_delivers_once_with_the_final_state() {
    let (env, rx, worker) = Scenario::webhook("changes", "/changes")
        .on("on_update")
        .start()
        .await;
    let mut batch = Batch::new();
    for (event, name, total) in [
        ("after_insert", "SO-1", 1.0),
        ("on_update", "SO-1", 2.0),
        ("on_update", "SO-1", 3.0),
        ("on_update", "SO-2", 7.0),
    ] {
        batch.push(Event::new(
            "Sales Order",
            event,
            name,
            sales_order(name, total),
        ));
    }
    let report = env.producer().emit_batch(batch).await.unwrap();
    assert_eq!(report.deliveries.len(), 2, "one per document");
    assert_eq!(report.superseded, 1);
    for d in &report.deliveries {
        env.until_status(d.id, DeliveryStatus::Delivered).await;
    }
    let got = rx.requests();
    assert_eq!(got.len(), 2);
    let so1 = got.iter().find(|r| r.json()["name"] == "SO-1").unwrap();
    assert_eq!(so1.json()["grand_total"], 3.0);
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_four_never_puts_more_than_four_requests_in_flight() {
    let (env, rx) = Scenario::webhook("slow", "/slow")
        .replying(Reply::status(200).delayed(Duration::from_millis(300)))
        .ready()
        .await;
    env.producer().emit_batch(sales_orders(24)).await.unwrap();
    let worker = env.start_worker(4, RetrySchedule::default());
    rx.wait_for(24, PATIENCE).await;
    let stats = worker.stop().await;
    assert_eq!(stats.delivered, 24);
    assert_eq!(rx.max_in_flight(), 4, "the cap is reached and never passed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_job_goes_to_the_dead_letter_list_and_the_worker_goes_on() {
    let (env, _rx) = Scenario::webhook("orders", "/ok").ready().await;
    env.push_jobs(
        "default",
        [
            "not json at all",
            r#"{"v":1,"log_id":987654}"#,
            r#"{"v":9,"log_id":1}"#,
        ],
    );
    let worker = env.start_worker(2, RetrySchedule::default());
    let report = env.submit("SO-1").await;
    env.until_status(report.deliveries[0].id, DeliveryStatus::Delivered)
        .await;
    let stats = worker.stop().await;
    assert_eq!(stats.dead_lettered, 3);
    let dead = env.queue.dead().list(10).await.unwrap();
    assert_eq!(dead.len(), 3);
    let reasons: Vec<String> = dead.iter().map(|d| d.reason.clone()).collect();
    assert!(dead
        .iter()
        .all(|d| d.queue == "default" && !d.id.is_empty()));
    assert!(
        reasons.iter().any(|r| r.contains("does not parse")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("does not exist")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("version 9")),
        "{reasons:?}"
    );
    // Nothing is left in flight: the processing list is empty.
    let processing = env
        .keys()
        .into_iter()
        .filter(|k| k.contains(":processing:"))
        .collect::<Vec<_>>();
    for k in processing {
        assert_eq!(env.llen(&k), 0, "{k} still holds jobs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_disabled_after_the_event_is_exhausted_without_a_request() {
    let (env, rx) = Scenario::webhook("orders", "/ok").ready().await;
    let report = env.submit("SO-1").await;
    env.set_enabled("orders", false);
    let worker = env.start_worker(2, RetrySchedule::default());
    let row = env
        .until_status(report.deliveries[0].id, DeliveryStatus::Exhausted)
        .await;
    assert_error_mentions(&row, "disabled");
    assert_eq!(rx.count(), 0);
    worker.stop().await;
}
