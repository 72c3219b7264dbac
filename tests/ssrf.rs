//! Requests go only where they may: a redirect is never followed; a worker
//! whose network policy refuses loopback refuses it at send time however
//! the address is written (an IP literal, `localhost`, an IPv4-mapped IPv6
//! literal, a name that resolves to it); and a producer with such a policy
//! records requests to internal addresses Exhausted instead of queueing
//! them.

use std::net::{IpAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_core::request::NetworkPolicy;
use hookfleet_producer::{EmitError, Event, Producer, ProducerConfig};
use hookfleet_testkit::{blocking, spec, FleetProcess, Receiver, Reply, Scenario, TestEnv, ENTITY};

// ---------------------------------------------------------------------------
// 1. Redirects are never followed.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_a_failure_and_its_target_hears_nothing() {
    let target = Receiver::start().await;
    let (env, first, worker) = Scenario::webhook("moved", "/hook")
        .and_webhook("moved-now", "/wf")
        .on("workflow_transition")
        .replying(Reply::status(302).header("Location", &target.url("/stolen")))
        .start()
        .await;
    let producer = env.producer();

    // From a worker: a failure, retried later.
    let row = env
        .submit_doc_until(json!({"name": "SO-1"}), DeliveryStatus::Failed)
        .await;
    assert_eq!(row.response_code, Some(302));
    assert!(
        row.error.as_deref().unwrap_or("").contains("HTTP 302"),
        "{:?}",
        row.error
    );
    worker.stop().await;

    // From the producer (workflow_transition): a failure returned at once.
    let err = producer
        .emit(Event::new(
            ENTITY,
            "workflow_transition",
            "SO-1",
            json!({"name": "SO-1"}),
        ))
        .await
        .expect_err("a redirected workflow_transition is a failure");
    let EmitError::WorkflowTransition { report, failures } = err else {
        panic!("expected a workflow_transition failure, got {err:?}")
    };
    assert!(failures[0].reason.contains("302"), "{failures:?}");
    assert_eq!(
        env.row(report.deliveries[0].id).status,
        DeliveryStatus::Exhausted
    );

    assert_eq!(first.count(), 2);
    assert_eq!(target.count(), 0, "a redirect was followed");
}

// ---------------------------------------------------------------------------
// 2. The SSRF guard at send time (a worker whose policy refuses loopback).
// ---------------------------------------------------------------------------

/// What a refusal at send time says: the address and why.
const REFUSED_SAYS: [&str; 2] = ["127.0.0.1", "internal address"];

/// Stores a webhook at the url `url_of` gives for a new receiver (the test
/// kit's policy allows loopback), emits one event, and runs a worker process
/// whose policy does not: the row must fail with a reason mentioning every
/// fragment of [`REFUSED_SAYS`], and the receiver must hear nothing.
async fn assert_refused_at_send_time(url_of: impl FnOnce(&Receiver) -> String) {
    let (env, rx) = Scenario::new().ready().await;
    let url = &url_of(&rx);
    let says = REFUSED_SAYS;
    env.add_webhook(&spec("internal", ENTITY, "on_submit", url));
    let report = env
        .emit_doc("on_submit", "SO-1", json!({"name": "SO-1"}))
        .await;
    assert!(report.deliveries[0].enqueued, "{report:?}");
    let mut cmd = env.command("hookfleet-worker");
    cmd.env("HOOKFLEET_ALLOWED_NETWORKS", "");
    let mut worker = FleetProcess::spawn(cmd);
    let row = env
        .until_row(report.deliveries[0].id, |r| {
            r.status != DeliveryStatus::Queued
        })
        .await;
    blocking(|| worker.stop());
    assert_eq!(row.status, DeliveryStatus::Failed, "{url}: {row:?}");
    assert_eq!(row.response_code, None, "{url}: an answer was recorded");
    let error = row.error.unwrap_or_default();
    for fragment in says {
        assert!(
            error.contains(fragment),
            "{url}: {fragment:?} not in {error:?}"
        );
    }
    assert_eq!(rx.count(), 0, "{url} reached the receiver");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_ip_literal_is_refused_at_send_time() {
    assert_refused_at_send_time(|rx| rx.url("/literal")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn localhost_is_refused_at_send_time() {
    assert_refused_at_send_time(|rx| format!("http://localhost:{}/named", rx.addr.port())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv4_mapped_ipv6_literal_of_loopback_is_refused_at_send_time() {
    assert_refused_at_send_time(|rx| {
        format!("http://[::ffff:127.0.0.1]:{}/mapped", rx.addr.port())
    })
    .await;
}

/// A host name other than `localhost` that resolves only to loopback
/// addresses (this machine's own name usually does), for the resolver path.
fn name_resolving_to_loopback() -> Option<String> {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let hostname = hostname.trim().to_ascii_lowercase();
    if hostname.is_empty() || hostname == "localhost" || hostname.ends_with(".localhost") {
        return None;
    }
    let addrs: Vec<IpAddr> = (hostname.as_str(), 0)
        .to_socket_addrs()
        .ok()?
        .map(|a| a.ip())
        .collect();
    let ipv4_loopback = |ip: &IpAddr| matches!(ip, IpAddr::V4(v4) if v4.is_loopback());
    (addrs.iter().any(ipv4_loopback) && addrs.iter().all(|ip| ip.is_loopback())).then_some(hostname)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_name_resolving_to_loopback_is_refused_when_resolved() {
    let Some(host) = name_resolving_to_loopback() else {
        eprintln!("no host name on this machine resolves only to loopback; nothing to test");
        return;
    };
    assert_refused_at_send_time(|rx| format!("http://{host}:{}/resolved", rx.addr.port())).await;
}

// ---------------------------------------------------------------------------
// 3. The producer refuses to record a request to an internal address.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_whose_policy_refuses_loopback_records_internal_urls_exhausted_and_queues_nothing(
) {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    let port = rx.addr.port();
    let dynamic = |name: &str, url: String| {
        let mut s = spec(name, ENTITY, "on_submit", &url);
        s.dynamic_url = true;
        s
    };
    // A host chosen by the document may only be one the webhook allows; an
    // allowed internal host is still refused by the network policy.
    let chosen = |name: &str, url: &str, allowed: String| {
        let mut s = dynamic(name, url.into());
        s.allowed_hosts = vec![allowed];
        s
    };
    let internal = [
        chosen(
            "by-document",
            "http://{{ doc.host }}/hook",
            format!("127.0.0.1:{port}"),
        ),
        dynamic(
            "literal",
            format!("http://127.0.0.1:{port}/{{{{ doc.name }}}}"),
        ),
        dynamic(
            "named",
            format!("http://localhost:{port}/{{{{ doc.name }}}}"),
        ),
        dynamic(
            "mapped",
            format!("http://[::ffff:127.0.0.1]:{port}/{{{{ doc.name }}}}"),
        ),
        chosen(
            "metadata",
            "http://{{ doc.cloud }}/latest/meta-data",
            "169.254.169.254".into(),
        ),
        spec("static", ENTITY, "on_submit", &rx.url("/static")),
    ];
    for s in &internal {
        env.add_webhook(s);
    }
    // A control: the same producer records a public destination as usual.
    env.add_webhook(&dynamic(
        "public",
        "http://93.184.216.34/{{ doc.name }}".into(),
    ));

    let producer = Producer::new(
        env.store.clone(),
        env.queue.clone(),
        ProducerConfig {
            schedule: TestEnv::fast_schedule(),
            queue_grace: Duration::from_secs(600),
            policy: Arc::new(NetworkPolicy::default()),
        },
    );
    let doc = json!({
        "name": "SO-1",
        "host": format!("127.0.0.1:{port}"),
        "cloud": "169.254.169.254",
    });
    let report = producer
        .emit(Event::new(ENTITY, "on_submit", "SO-1", doc))
        .await
        .unwrap();
    assert_eq!(report.deliveries.len(), internal.len() + 1, "{report:?}");
    for d in &report.deliveries {
        let row = env.row(d.id);
        if d.webhook == "public" {
            assert_eq!(row.status, DeliveryStatus::Queued, "{row:?}");
            assert!(d.enqueued);
            continue;
        }
        assert_eq!(
            row.status,
            DeliveryStatus::Exhausted,
            "{}: {row:?}",
            d.webhook
        );
        assert!(!d.enqueued, "{}", d.webhook);
        assert!(row.next_retry.is_none(), "{}", d.webhook);
        let error = row.error.unwrap_or_default();
        assert!(
            error.contains("internal address"),
            "{}: the reason is on the row: {error:?}",
            d.webhook
        );
    }
    assert_eq!(
        env.queue_depth("default"),
        1,
        "only the public row is queued"
    );
    assert_eq!(rx.count(), 0);
}
