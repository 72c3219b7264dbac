//! Per-webhook concurrency limits: a webhook never has more requests in
//! flight than its limit, and one that hangs holds only its own slots.

use std::time::{Duration, Instant};

use serde_json::json;

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_producer::{Batch, Event};
use hookfleet_testkit::{until, Ready, Receiver, Reply, Scenario, TestEnv, PATIENCE};

/// The hanging webhook's timeout where the test reads "before its first
/// timeout": far beyond what the healthy webhook's 100 deliveries take.
const HANGING_TIMEOUT_SECS: u64 = 60;

fn events(entity: &str, n: usize) -> Vec<Event> {
    (0..n)
        .map(|i| {
            let name = format!("{entity}-{i}");
            Event::new(entity, "on_submit", &name, json!({"name": name}))
        })
        .collect()
}

/// `events` as one batch.
fn batch_of(events: impl IntoIterator<Item = Event>) -> Batch {
    let mut batch = Batch::new();
    for e in events {
        batch.push(e);
    }
    batch
}

/// Webhook `hangs` on Invoice posting to a receiver that never answers,
/// with a `timeout` and no retries.
async fn hanging_invoices(timeout: Duration) -> Ready {
    Scenario::webhook("hangs", "/hang")
        .about("Invoice")
        .with(|s| {
            s.timeout = timeout;
            s.max_retries = 0;
        })
        .replying(Reply::hang())
        .ready()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_never_has_more_requests_in_flight_than_its_limit() {
    let (env, rx) = Scenario::webhook("limited", "/limited")
        .about("Order")
        .with(|s| s.max_concurrency = Some(2))
        .replying(Reply::status(200).delayed(Duration::from_millis(200)))
        .ready()
        .await;
    let batch = batch_of(events("Order", 12));
    env.producer().emit_batch(batch).await.unwrap();
    let worker = env.start_worker(16, hookfleet_core::domain::RetrySchedule::default());
    rx.wait_for(12, PATIENCE).await;
    let stats = worker.stop().await;
    assert_eq!(
        rx.max_in_flight(),
        2,
        "the limit is reached and never passed"
    );
    assert_eq!(stats.delivered, 12);
    assert!(
        stats.bounced > 0,
        "jobs over the limit went back to the queue"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_webhook_holds_only_its_own_slots_and_the_others_flow() {
    // The hanging webhook's timeout is far beyond the time the healthy one
    // needs, so "before its first timeout" is read from the rows, not a clock.
    let (env, hanging) = hanging_invoices(Duration::from_secs(HANGING_TIMEOUT_SECS)).await;
    let healthy = Receiver::start().await;
    env.add_webhook(&hookfleet_testkit::spec(
        "healthy",
        "Order",
        "on_submit",
        &healthy.url("/ok"),
    ));
    // Interleaved: one hanging event for every five healthy ones.
    let mut batch = Batch::new();
    let mut bad_events = events("Invoice", 20).into_iter();
    for (i, e) in events("Order", 100).into_iter().enumerate() {
        batch.push(e);
        if i % 5 == 0 {
            batch.push(bad_events.next().unwrap());
        }
    }
    env.producer().emit_batch(batch).await.unwrap();
    let worker = env.start_worker_tuned(8, |c| {
        c.endpoint_concurrency = 2;
        // The hanging requests are put back at stop, not waited for.
        c.drain_timeout = Duration::from_secs(1);
    });
    healthy.wait_for(100, PATIENCE).await;
    let hanging_finished = env
        .rows()
        .iter()
        .filter(|r| r.webhook_name == "hangs" && r.status == DeliveryStatus::Exhausted)
        .count();
    assert_eq!(
        hanging_finished, 0,
        "the healthy webhook finished before the hanging one's first timeout"
    );
    assert!(hanging.in_flight() > 0, "the hanging requests still hang");
    assert!(
        hanging.max_in_flight() <= 2,
        "the hanging webhook held {} slots",
        hanging.max_in_flight()
    );
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_add_refuses_a_max_concurrency_outside_one_to_ten_thousand() {
    let env = TestEnv::new();
    let add = |limit: &str| {
        env.webhook_add(
            "x",
            "A",
            "e",
            "http://127.0.0.1:9/x",
            &["--max-concurrency", limit],
        )
    };
    for bad in ["0", "-1", "10001"] {
        let out = add(bad);
        assert_eq!(out.code, Some(1), "{bad}: {out}");
        assert!(out.stderr.contains("max concurrency"), "{bad}");
    }
    let ok = add("10000");
    assert_eq!(ok.code, Some(0), "{ok}");
    let shown = env.cli(&["webhook", "show", "x", "--json"]);
    let v = shown.json();
    assert_eq!(v["max_concurrency"], 10000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_limit_applies_to_a_running_worker() {
    let (env, rx, worker) = Scenario::webhook("changing", "/x")
        .about("Order")
        .with(|s| s.max_concurrency = Some(4))
        .replying(Reply::status(200).delayed(Duration::from_millis(150)))
        .concurrency(16)
        .start()
        .await;
    let first = batch_of(events("Order", 8));
    env.producer().emit_batch(first).await.unwrap();
    rx.wait_for(8, PATIENCE).await;
    until("the first eight are answered", || rx.in_flight() == 0).await;
    assert_eq!(rx.max_in_flight(), 4);

    let out = env.cli(&["webhook", "update", "changing", "--max-concurrency", "1"]);
    assert_eq!(out.code, Some(0), "{out}");
    // Deliberately a fixed time: the worker re-reads limits every second, and
    // shows nothing a test could poll for.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let rx2 = Receiver::start().await;
    rx2.reply_always(Reply::status(200).delayed(Duration::from_millis(150)));
    let out = env.cli(&["webhook", "update", "changing", "--url", &rx2.url("/y")]);
    assert_eq!(out.code, Some(0), "{out}");
    let second = batch_of(
        events("Order", 6)
            .into_iter()
            .enumerate()
            .map(|(i, mut e)| {
                e.name = format!("later-{i}");
                e
            }),
    );
    env.producer().emit_batch(second).await.unwrap();
    rx2.wait_for(6, PATIENCE).await;
    worker.stop().await;
    assert_eq!(rx2.max_in_flight(), 1, "the new limit holds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_found_slow_keeps_only_the_slow_limit_of_slots() {
    let (env, hanging) = hanging_invoices(Duration::from_secs(2)).await;
    let batch = batch_of(events("Invoice", 40));
    env.producer().emit_batch(batch).await.unwrap();
    // A fixed limit of 8 (as `--endpoint-concurrency 8` sets): alone, the
    // webhook would otherwise get every slot.
    let worker = env.start_worker_tuned(16, |c| {
        c.endpoint_concurrency = 8;
        c.endpoint_ceiling = 8;
        c.slow_endpoint_concurrency = 2;
        c.drain_timeout = Duration::from_secs(1);
    });
    // The first wave is not known to be slow yet: up to the limit of 8.
    until("the first wave is in flight", || hanging.in_flight() == 8).await;
    assert_eq!(hanging.in_flight(), 8);
    // After the first wave times out, the webhook is slow: 2 at a time.
    // Each request holds its slot for the whole 2 s timeout (a busy
    // machine only makes that longer), so with 2 slots a request starts at
    // least a timeout after the one two places before it. Read from the
    // arrival times, with half the timeout as the margin for a late look.
    let waves_after = 4;
    let got = hanging.wait_for(8 + 2 * waves_after, PATIENCE).await;
    let mut arrivals: Vec<Instant> = got.iter().map(|r| r.at).collect();
    arrivals.sort();
    for k in 8..arrivals.len() - 2 {
        let gap = arrivals[k + 2] - arrivals[k];
        assert!(
            gap >= Duration::from_secs(1),
            "requests {k} and {} to a slow webhook started {gap:?} apart: more than 2 at once",
            k + 2
        );
    }
    worker.stop().await;
}
