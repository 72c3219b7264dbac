//! A dynamic URL may reach only the hosts its webhook allows: the host
//! written literally in the URL template, or the ones named with
//! `--allowed-host`. A document cannot send a webhook's credentials and
//! signatures anywhere else.

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_core::domain::RetrySchedule;
use hookfleet_producer::Event;
use hookfleet_testkit::{spec, Receiver, Reply, TestEnv, ENTITY};
use serde_json::json;

#[test]
fn a_url_template_that_renders_its_host_is_refused_unless_hosts_are_allowed() {
    let env = TestEnv::new();
    let add = |extra: &[&str]| {
        let mut args = vec![
            "webhook",
            "add",
            "hook",
            "--entity-type",
            ENTITY,
            "--event",
            "on_submit",
            "--dynamic-url",
            "--url",
            "https://{{ doc.tenant }}.example.com/orders",
        ];
        args.extend_from_slice(extra);
        env.cli(&args)
    };
    let refused = add(&[]);
    assert_eq!(refused.code, Some(1), "{refused}");
    assert!(refused.stderr.contains("--allowed-host"), "{refused}");
    assert!(env.stored_webhooks().is_empty());
    for bad in ["", "a b", "host:0", "host:99999", "[::1", "user@host"] {
        let out = add(&["--allowed-host", bad]);
        assert_eq!(out.code, Some(1), "{bad:?}: {out}");
    }
    add(&[
        "--allowed-host",
        "acme.example.com",
        "--allowed-host",
        "globex.example.com:8443",
    ])
    .ok("allowed hosts named");
    let shown = env.cli(&["webhook", "show", "hook", "--json"]).json();
    assert_eq!(
        shown["allowed_hosts"],
        json!(["acme.example.com", "globex.example.com:8443"])
    );
    let static_with_hosts = env.cli(&[
        "webhook",
        "add",
        "static",
        "--entity-type",
        ENTITY,
        "--event",
        "on_submit",
        "--url",
        "https://example.com/x",
        "--allowed-host",
        "example.com",
    ]);
    assert_eq!(static_with_hosts.code, Some(1), "{static_with_hosts}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_can_steer_a_request_only_to_an_allowed_host() {
    let env = TestEnv::new();
    let allowed = Receiver::start().await;
    let elsewhere = Receiver::start().await;
    let mut hook = spec(
        "steered",
        ENTITY,
        "on_submit",
        "http://{{ doc.target }}/orders/{{ doc.name }}",
    );
    hook.dynamic_url = true;
    hook.allowed_hosts = vec![format!("127.0.0.1:{}", allowed.addr.port())];
    hook.headers = vec![hookfleet_core::domain::Header {
        key: "Authorization".into(),
        value: "Bearer only-for-allowed".into(),
    }];
    env.add_webhook(&hook);
    // Written literally, the host is pinned without --allowed-host.
    let mut literal = spec(
        "literal",
        ENTITY,
        "on_submit",
        &format!(
            "http://127.0.0.1:{}/by-name/{{{{ doc.name }}}}",
            allowed.addr.port()
        ),
    );
    literal.dynamic_url = true;
    env.add_webhook(&literal);

    let producer = env.producer();
    let emit = |name: &str, target: String| {
        let doc = json!({"name": name, "target": target});
        producer.emit(Event::new(ENTITY, "on_submit", name, doc))
    };
    let good = emit("SO-1", allowed.addr.to_string()).await.unwrap();
    let bad = emit("SO-2", elsewhere.addr.to_string()).await.unwrap();

    let worker = env.start_worker(4, RetrySchedule::default());
    let row_of = |report: &hookfleet_producer::EmitReport, webhook: &str| {
        report
            .deliveries
            .iter()
            .find(|d| d.webhook == webhook)
            .expect("a row")
            .id
    };
    let refused = env.row(row_of(&bad, "steered"));
    assert_eq!(refused.status, DeliveryStatus::Exhausted, "{refused:?}");
    assert!(
        refused
            .error
            .as_deref()
            .unwrap_or("")
            .contains("does not allow"),
        "{refused:?}"
    );
    for id in [
        row_of(&good, "steered"),
        row_of(&good, "literal"),
        row_of(&bad, "literal"),
    ] {
        env.until_row(id, |r| r.status == DeliveryStatus::Delivered)
            .await;
    }
    worker.stop().await;
    assert_eq!(
        elsewhere.count(),
        0,
        "nothing, credentials least of all, went elsewhere"
    );
    let paths: Vec<String> = allowed.requests().into_iter().map(|r| r.path).collect();
    assert!(paths.contains(&"/orders/SO-1".to_string()), "{paths:?}");
    assert!(paths.contains(&"/by-name/SO-2".to_string()), "{paths:?}");
}

// ---------------------------------------------------------------------------
// A retry goes where the webhook points now, and only where it allows now.
// ---------------------------------------------------------------------------

/// Makes row `id` due now and lets a sweep enqueue it.
async fn retry_now(env: &TestEnv, id: i64) {
    env.set_due_in(id, -1.0);
    env.sweeper(100, std::time::Duration::from_secs(60))
        .tick()
        .await
        .expect("sweep");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_of_a_static_url_goes_to_the_url_the_webhook_has_now() {
    let env = TestEnv::new();
    let old = Receiver::start().await;
    let new = Receiver::start().await;
    old.reply_next([Reply::status(500)]);
    env.add_webhook(&spec("moved", ENTITY, "on_submit", &old.url("/old")));
    let worker = env.start_worker(2, RetrySchedule::parse("1s").unwrap());
    let id = env.submit("SO-1").await.deliveries[0].id;
    env.until_row(id, |r| {
        r.status == DeliveryStatus::Failed && r.lease_expires_at.is_none()
    })
    .await;
    // The receiver moved (its old address may be retired, or reassigned).
    env.cli(&["webhook", "update", "moved", "--url", &new.url("/new")])
        .ok("update the URL");
    retry_now(&env, id).await;
    env.until_row(id, |r| r.status == DeliveryStatus::Delivered)
        .await;
    worker.stop().await;
    assert_eq!(old.count(), 1, "the retry did not go to the old URL");
    let moved = new.requests();
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].path, "/new");
    assert_eq!(
        moved[0].body,
        old.requests()[0].body,
        "the body is the event's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_to_a_host_the_webhook_no_longer_allows_is_exhausted_unsent() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    rx.reply_next([Reply::status(500)]);
    let mut hook = spec(
        "steered",
        ENTITY,
        "on_submit",
        "http://{{ doc.target }}/orders",
    );
    hook.dynamic_url = true;
    hook.allowed_hosts = vec![rx.addr.to_string()];
    env.add_webhook(&hook);
    let worker = env.start_worker(2, RetrySchedule::parse("1s").unwrap());
    let doc = json!({"name": "SO-1", "target": rx.addr.to_string()});
    let report = env
        .producer()
        .emit(Event::new(ENTITY, "on_submit", "SO-1", doc))
        .await
        .unwrap();
    let id = report.deliveries[0].id;
    env.until_row(id, |r| {
        r.status == DeliveryStatus::Failed && r.lease_expires_at.is_none()
    })
    .await;
    // The operator withdraws the host (it was compromised, say).
    env.cli(&[
        "webhook",
        "update",
        "steered",
        "--clear-allowed-hosts",
        "--allowed-host",
        "hooks.example.com",
    ])
    .ok("update the allowed hosts");
    retry_now(&env, id).await;
    let row = env
        .until_row(id, |r| r.status == DeliveryStatus::Exhausted)
        .await;
    worker.stop().await;
    assert!(
        row.error
            .as_deref()
            .unwrap_or("")
            .contains("does not allow"),
        "{row:?}"
    );
    assert_eq!(rx.count(), 1, "nothing was sent to the withdrawn host");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_a_document_puts_in_a_dynamic_url_is_sent_encoded_and_fails_no_other_event() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    let mut hook = spec(
        "by-part",
        ENTITY,
        "on_submit",
        &format!("http://127.0.0.1:{}/ok/{{{{ doc.p }}}}", rx.addr.port()),
    );
    hook.dynamic_url = true;
    env.add_webhook(&hook);
    env.add_webhook(&spec("other", "Customer", "after_insert", &rx.url("/c")));
    // One batch: the document with a NUL in the part of the URL it renders,
    // and an unrelated event of another webhook.
    let mut batch = hookfleet_producer::Batch::new();
    batch.push(Event::new(
        ENTITY,
        "on_submit",
        "SO-1",
        json!({"name": "SO-1", "p": "a\u{0}b"}),
    ));
    batch.push(Event::new(
        "Customer",
        "after_insert",
        "C-1",
        json!({"name": "C-1"}),
    ));
    let report = env
        .producer()
        .emit_batch(batch)
        .await
        .expect("the batch is recorded");
    assert_eq!(report.deliveries.len(), 2, "{report:?}");
    let rows = env.rows();
    let nul = rows
        .iter()
        .find(|r| r.webhook_name == "by-part")
        .expect("row");
    assert_eq!(
        nul.url,
        format!("http://127.0.0.1:{}/ok/a%00b", rx.addr.port()),
        "stored as it is sent"
    );
    let worker = env.start_worker(4, RetrySchedule::default());
    let got = rx.wait_for(2, std::time::Duration::from_secs(60)).await;
    assert!(got.iter().any(|r| r.path == "/ok/a%00b"), "{got:?}");
    assert!(got.iter().any(|r| r.path == "/c"), "{got:?}");
    worker.stop().await;
}
