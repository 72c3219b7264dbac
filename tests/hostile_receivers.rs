//! Receivers that answer 200 with bytes no text column can hold (NUL,
//! invalid UTF-8, gzip, terminal escapes). Each such answer is stored as it
//! came, and never keeps an outcome from being written: one hostile receiver
//! among three webhooks, every row ends Delivered and every (webhook,
//! webhook-id) is received exactly once.

use std::collections::HashMap;

use hookfleet_core::attempt::RESPONSE_BODY_LIMIT;
use hookfleet_core::domain::DeliveryStatus;
use hookfleet_core::domain::RetrySchedule;
use hookfleet_testkit::{sales_orders, spec, until_seen, Receiver, Reply, TestEnv, ENTITY};

/// Events emitted: enough that outcomes are written in batches of many rows.
const EVENTS: usize = 200;

/// How many times each webhook-id reached `rx`.
fn receipts(rx: &Receiver) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for r in rx.requests() {
        *seen
            .entry(r.header("webhook-id").unwrap_or("").to_string())
            .or_default() += 1;
    }
    seen
}

/// Three webhooks, one of them answered by `hostile`; a batch of events
/// through one worker at concurrency 64. Returns the hostile webhook's rows'
/// stored bodies.
async fn every_row_delivered_once_beside(hostile: Reply) -> Vec<Option<Vec<u8>>> {
    let env = TestEnv::new();
    let bad = Receiver::start().await;
    bad.reply_always(hostile);
    let good_a = Receiver::start().await;
    let good_b = Receiver::start().await;
    env.add_webhook(&spec("hostile", ENTITY, "on_submit", &bad.url("/h")));
    env.add_webhook(&spec("a", ENTITY, "on_submit", &good_a.url("/a")));
    env.add_webhook(&spec("b", ENTITY, "on_submit", &good_b.url("/b")));
    let worker = env.start_worker(64, RetrySchedule::default());
    let report = env
        .producer()
        .emit_batch(sales_orders(EVENTS))
        .await
        .expect("emit");
    assert_eq!(report.deliveries.len(), 3 * EVENTS);

    let rows = until_seen(
        "every row is Delivered",
        async || env.rows(),
        |rows| rows.iter().all(|r| r.status == DeliveryStatus::Delivered),
    )
    .await;
    worker.stop().await;
    for rx in [&bad, &good_a, &good_b] {
        let seen = receipts(rx);
        assert_eq!(seen.len(), EVENTS, "every event reached every receiver");
        assert!(
            seen.values().all(|n| *n == 1),
            "each webhook-id exactly once: {:?}",
            seen.iter().filter(|(_, n)| **n > 1).collect::<Vec<_>>()
        );
    }
    assert!(
        rows.iter().all(|r| r.attempts == 1),
        "no retries were needed"
    );
    rows.into_iter()
        .filter(|r| r.webhook_name == "hostile")
        .map(|r| r.response_body)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_answering_nul_bytes_delays_and_duplicates_nothing() {
    let body = b"ok\0\0accepted\0";
    let stored = every_row_delivered_once_beside(Reply::status(200).bytes(body)).await;
    assert!(stored.iter().all(|b| b.as_deref() == Some(&body[..])));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_answering_invalid_utf8_delays_and_duplicates_nothing() {
    let body = [b'o', b'k', 0xff, 0xfe, 0xc3, 0x28];
    let stored = every_row_delivered_once_beside(Reply::status(200).bytes(&body)).await;
    assert!(stored.iter().all(|b| b.as_deref() == Some(&body[..])));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_answering_gzip_delays_and_duplicates_nothing() {
    // "ok" gzipped, answered with Content-Encoding: gzip; a long stream of
    // binary after it, so the stored copy is cut at the limit.
    let mut body = vec![
        0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0x00, 0x03, 0xcb, 0xcf, 0x06, 0x00, 0x47, 0xdd, 0xdc,
        0x79, 0x02, 0, 0, 0,
    ];
    body.extend((0..3 * RESPONSE_BODY_LIMIT).map(|i| (i * 7 % 256) as u8));
    let stored = every_row_delivered_once_beside(
        Reply::status(200)
            .bytes(&body)
            .header("Content-Encoding", "gzip"),
    )
    .await;
    assert!(stored
        .iter()
        .all(|b| b.as_deref() == Some(&body[..RESPONSE_BODY_LIMIT])));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receivers_terminal_escapes_never_reach_the_operators_terminal() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    rx.reply_always(Reply::status(500).bytes(b"\x1b[2J\x1b[31mred\x07\x1b]0;pwned\x07"));
    env.add_webhook(&spec("orders", ENTITY, "on_submit", &rx.url("/x")));
    let worker = env.start_worker(4, RetrySchedule::default());
    let id = env.submit("SO-1").await.deliveries[0].id;
    env.until_row(id, |r| r.status == DeliveryStatus::Failed)
        .await;
    worker.stop().await;
    let id = id.to_string();
    for args in [
        vec!["delivery", "show", id.as_str()],
        vec!["delivery", "list"],
    ] {
        let out = env.cli(&args).ok("delivery");
        assert!(
            !out.stdout.contains('\u{1b}') && !out.stdout.contains('\u{7}'),
            "{args:?} printed a control character: {:?}",
            out.stdout
        );
    }
    let shown = env.cli(&["delivery", "show", &id]).ok("show");
    assert!(
        shown.stdout.contains("\\u{1b}[2J"),
        "shown escaped: {}",
        shown.stdout
    );
}
