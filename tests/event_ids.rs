//! Event ids: 1–128 printable characters, refused otherwise (by the
//! producer library and the command line alike); the same id emitted twice
//! makes one row per webhook and one request each; an id already naming
//! another event (recorded, or in the same batch) is refused, not taken for
//! a duplicate.

use serde_json::json;

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_core::domain::RetrySchedule;
use hookfleet_producer::{EmitError, Event};
use hookfleet_testkit::{blocking, spec, Receiver, Run, TestEnv, ENTITY};

fn event_with_id(name: &str, id: &str) -> Event {
    let mut e = Event::new(ENTITY, "on_submit", name, json!({"name": name}));
    e.event_id = Some(id.to_string());
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_id_over_128_characters_or_not_printable_is_refused_and_128_is_accepted() {
    let env = TestEnv::new();
    env.add_small_body_webhook("on_submit");
    let producer = env.producer();
    for bad in [
        "a".repeat(129),
        "has space".into(),
        String::new(),
        "tab\there".into(),
        "new\nline".into(),
    ] {
        let err = producer
            .emit(event_with_id("SO-1", &bad))
            .await
            .expect_err(&format!("event id {bad:?} was accepted"));
        assert!(matches!(err, EmitError::Invalid(_)), "{bad:?}: {err:?}");
    }
    assert!(env.rows().is_empty(), "a refused event was recorded");
    assert_eq!(env.queue_depth("default"), 0);

    // Every printable ASCII character, 128 of them.
    let longest: String = (b'!'..=b'~').cycle().take(128).map(char::from).collect();
    let report = producer
        .emit(event_with_id("SO-1", &longest))
        .await
        .expect("an event id of 128 printable characters");
    assert_eq!(report.deliveries[0].event_id, longest);
    assert_eq!(env.rows().len(), 1);

    let out = blocking(|| {
        let mut cmd = env.emit_command("on_submit", "SO-2");
        cmd.args(["--event-id", &"b".repeat(129)]);
        Run::from(cmd.output().expect("run hookfleet-producer"))
    });
    assert_eq!(
        out.code,
        Some(1),
        "emit --event-id of 129 characters: {out}"
    );
    assert_eq!(env.rows().len(), 1, "the command line recorded it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_event_id_emitted_twice_makes_one_row_per_webhook_and_one_request_each() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    env.add_webhook(&spec("erp", ENTITY, "on_submit", &rx.url("/erp")));
    env.add_webhook(&spec("crm", ENTITY, "on_submit", &rx.url("/crm")));
    let producer = env.producer();

    let first = producer
        .emit(event_with_id("SO-1", "evt-42"))
        .await
        .unwrap();
    let second = producer
        .emit(event_with_id("SO-1", "evt-42"))
        .await
        .unwrap();
    assert_eq!(first.deliveries.len(), 2);
    assert_eq!(second.deliveries.len(), 2);
    assert!(first.deliveries.iter().all(|d| !d.duplicate && d.enqueued));
    assert!(
        second.deliveries.iter().all(|d| d.duplicate && !d.enqueued),
        "the second emit says duplicate and queues nothing: {second:?}"
    );
    let mut first_ids: Vec<i64> = first.deliveries.iter().map(|d| d.id).collect();
    let mut second_ids: Vec<i64> = second.deliveries.iter().map(|d| d.id).collect();
    first_ids.sort();
    second_ids.sort();
    assert_eq!(
        first_ids, second_ids,
        "the duplicate points at the same rows"
    );
    assert_eq!(env.rows().len(), 2, "one row per webhook");
    assert_eq!(env.queue_depth("default"), 2, "one job per row");

    let worker = env.start_worker(2, RetrySchedule::default());
    for id in first_ids {
        env.until_row(id, |r| r.status == DeliveryStatus::Delivered)
            .await;
    }
    worker.stop().await;
    let mut paths: Vec<String> = rx.requests().iter().map(|r| r.path.clone()).collect();
    paths.sort();
    assert_eq!(paths, vec!["/crm", "/erp"], "one request per webhook");
    assert!(rx
        .requests()
        .iter()
        .all(|r| r.header("webhook-id") == Some("evt-42")));
    assert_eq!(env.queue_depth("default"), 0, "nothing left to send");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_id_already_naming_another_event_is_refused_not_answered_duplicate() {
    let env = TestEnv::new();
    env.add_small_body_webhook("on_submit");
    let producer = env.producer();
    producer
        .emit(event_with_id("SO-1", "evt-7"))
        .await
        .expect("the first event");
    // The same id for another document: a mistake, said, not a duplicate.
    let err = producer
        .emit(event_with_id("SO-2", "evt-7"))
        .await
        .expect_err("another event under a recorded id");
    assert!(matches!(err, EmitError::Invalid(_)), "{err:?}");
    assert!(
        err.to_string().contains("already names another event"),
        "{err}"
    );
    assert!(err.to_string().contains("SO-1"), "{err}");
    assert_eq!(env.rows().len(), 1, "nothing more recorded");

    // Two different events under one id in one batch: refused whole, with
    // both named; the same event twice is one row.
    let mut batch = hookfleet_producer::Batch::new();
    batch.push(event_with_id("SO-3", "evt-8"));
    batch.push(event_with_id("SO-4", "evt-8"));
    let err = producer.emit_batch(batch).await.expect_err("a reused id");
    assert!(
        err.to_string().contains("SO-3") && err.to_string().contains("SO-4"),
        "{err}"
    );
    assert_eq!(env.rows().len(), 1, "nothing of the batch recorded");
    let mut batch = hookfleet_producer::Batch::new();
    batch.push(event_with_id("SO-5", "evt-9"));
    batch.push(event_with_id("SO-5", "evt-9"));
    producer
        .emit_batch(batch)
        .await
        .expect("the same event twice");
    assert_eq!(env.rows().len(), 2, "one row for it");
}
