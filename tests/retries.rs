//! Retries that survive an outage: the schedule on the rows, the sweeper,
//! the retry path in the worker, and the operator's replay.

use std::time::Duration;

use chrono::Utc;

use hookfleet_core::domain::RetrySchedule;
use hookfleet_core::domain::{DeliveryLog, DeliveryStatus};
use hookfleet_core::queue::Job;
use hookfleet_core::store::deliveries;
use hookfleet_testkit::{
    assert_error_mentions, sales_order, sales_orders, until, until_seen, Reply, Running, Scenario,
    TestEnv, PATIENCE,
};

const KEY_TTL: Duration = Duration::from_secs(600);

/// Waits until the row's attempt is recorded and its in-flight key released
/// (the worker acks just after writing the outcome), so a tick can take it.
async fn until_idle(env: &TestEnv, id: i64) -> DeliveryLog {
    let key = env.queue.keys().in_flight("default", id);
    // The key is looked at before the row: a key found released means the
    // outcome it guarded is already written (the worker releases it after),
    // whereas a row read first could be from before a job that then ran.
    let (_, row) = until_seen(
        &format!("row {id} settles"),
        async || {
            let held = env.keys().contains(&key);
            (held, env.row(id))
        },
        |(held, row)| {
            row.status != DeliveryStatus::Queued && row.lease_expires_at.is_none() && !held
        },
    )
    .await;
    row
}

async fn emit_one(env: &TestEnv, name: &str) -> i64 {
    let report = env.submit(name).await;
    assert_eq!(report.deliveries.len(), 1);
    report.deliveries[0].id
}

/// Emits SO-1 and waits until its first attempt has settled; its row id.
async fn first_attempt_settled(env: &TestEnv) -> i64 {
    let id = emit_one(env, "SO-1").await;
    until_idle(env, id).await;
    id
}

/// Webhook `name` with `max_retries`, its receiver always answering 500:
/// SO-1's first attempt, then its retry made due at once.
async fn fail_and_retry_once(name: &str, max_retries: i32) -> (Running, i64) {
    let running = Scenario::webhook(name, "/x")
        .replying(Reply::status(500))
        .with(|s| s.max_retries = max_retries)
        .start()
        .await;
    let id = first_attempt_settled(&running.0).await;
    retry_now(&running.0, id).await;
    (running, id)
}

/// Webhook `name` posting to `/x`, its receiver always answering 500, and a
/// worker of two slots.
async fn always_500(name: &str) -> Running {
    Scenario::webhook(name, "/x")
        .replying(Reply::status(500))
        .start()
        .await
}

/// Webhook `orders` posting to `/x`, its receiver answering `replies` first
/// (200 after), and a worker of two slots.
async fn orders(replies: impl IntoIterator<Item = Reply>) -> Running {
    Scenario::webhook("orders", "/x")
        .replying_next(replies)
        .start()
        .await
}

/// Makes row `id` due now and runs one sweeper tick: the retry, without
/// waiting for the schedule. Returns how many rows the tick enqueued.
async fn retry_now(env: &TestEnv, id: i64) -> usize {
    env.set_due_in(id, -1.0);
    env.sweeper(100, KEY_TTL).tick().await.unwrap().enqueued
}

/// Waits until every row is terminal (Delivered or Exhausted).
async fn until_all_terminal(env: &TestEnv) {
    env.until_rows("every row terminal", |rows| {
        rows.iter()
            .all(|r| r.status == DeliveryStatus::Delivered || r.status == DeliveryStatus::Exhausted)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_then_200_is_delivered_by_the_retry_with_the_same_body_and_a_signature_that_verifies()
{
    let (env, rx, worker) = Scenario::webhook("orders", "/hook")
        .signed("s3cret")
        .replying_next([Reply::status(500)])
        .concurrency(4)
        .start()
        .await;
    let id = first_attempt_settled(&env).await;

    assert_eq!(retry_now(&env, id).await, 1);
    let row = env.until_status(id, DeliveryStatus::Delivered).await;
    assert_eq!(row.attempts, 2);
    assert!(row.next_retry.is_none());

    let got = rx.requests();
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[0].body, got[1].body,
        "the retry replays the stored body"
    );
    assert_eq!(got[0].header("webhook-id"), got[1].header("webhook-id"));
    // The seed's bug: the retry's signature must verify too, not only the first's.
    assert!(got[0].signatures_verified());
    got[1].assert_signatures_verified("retry signatures");
    assert_eq!(env.attempts(id).len(), 2);
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_retries_one_is_exhausted_after_two_attempts() {
    let ((env, rx, worker), id) = fail_and_retry_once("one-retry", 1).await;
    let row = env.until_status(id, DeliveryStatus::Exhausted).await;
    assert_eq!(row.attempts, 2);
    assert!(row.next_retry.is_none());
    assert_error_mentions(&row, "no retries left");
    assert_eq!(rx.count(), 2);
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_retries_two_is_still_failed_after_two_attempts() {
    let ((env, _rx, worker), id) = fail_and_retry_once("two-retries", 2).await;
    let row = env
        .until_row(id, |r| r.attempts == 2 && r.lease_expires_at.is_none())
        .await;
    assert_eq!(row.status, DeliveryStatus::Failed);
    assert!(row.next_retry.is_some());
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_default_three_retries_the_due_times_follow_five_minutes_half_an_hour_two_hours() {
    let (env, _rx, worker) = always_500("default").await;
    let id = emit_one(&env, "SO-1").await;
    let sweeper = env.sweeper(100, KEY_TTL);
    let mut delays = Vec::new();
    for attempt in 1..=3 {
        let row = until_idle(&env, id).await;
        assert_eq!((row.status.as_str(), row.attempts), ("Failed", attempt));
        delays.push((row.next_retry.unwrap() - Utc::now()).num_seconds());
        env.set_due_in(id, -1.0);
        assert_eq!(sweeper.tick().await.unwrap().enqueued, 1);
    }
    let last = env.until_status(id, DeliveryStatus::Exhausted).await;
    assert_eq!(last.attempts, 4);
    let expected = [300, 1800, 7200];
    for (got, want) in delays.iter().zip(expected) {
        assert!(
            (want - 10..=want).contains(got),
            "delays {delays:?}, expected about {expected:?}"
        );
    }
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_sends_the_body_of_the_event_not_the_document_as_it_is_now() {
    let (env, rx, worker) = orders([Reply::status(502)]).await;
    let first = env
        .emit_doc("on_submit", "SO-1", sales_order("SO-1", 10.0))
        .await;
    let id = first.deliveries[0].id;
    until_idle(&env, id).await;
    // The document changes (and is even submitted again with the new total).
    env.emit_doc("on_submit", "SO-1", sales_order("SO-1", 99.0))
        .await;
    retry_now(&env, id).await;
    env.until_status(id, DeliveryStatus::Delivered).await;
    let bodies: Vec<f64> = rx
        .requests()
        .iter()
        .filter(|r| r.header("webhook-id") == Some(first.deliveries[0].event_id.as_str()))
        .map(|r| r.json()["grand_total"].as_f64().unwrap())
        .collect();
    assert_eq!(bodies, vec![10.0, 10.0]);
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_whose_in_flight_key_is_held_is_skipped_by_the_sweeper() {
    let (env, _rx, worker) = always_500("orders").await;
    let id = first_attempt_settled(&env).await;
    worker.stop().await;
    {
        let mut conn = env.redis();
        redis::cmd("SET")
            .arg(env.queue.keys().in_flight("default", id))
            .arg("someone")
            .arg("EX")
            .arg(60)
            .query::<()>(&mut *conn)
            .unwrap();
    }
    env.set_due_in(id, -1.0);
    let tick = env.sweeper(100, KEY_TTL).tick().await.unwrap();
    assert_eq!((tick.due, tick.enqueued, tick.skipped_in_flight), (1, 0, 1));
    let row = env.row(id);
    assert_eq!((row.status.as_str(), row.attempts), ("Failed", 1));
    assert_eq!(env.queue_depth("default"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_disabled_after_the_failure_is_exhausted_at_the_retry_without_a_request() {
    let (env, rx, worker) = orders([Reply::status(500)]).await;
    let id = first_attempt_settled(&env).await;
    env.set_enabled("orders", false);
    retry_now(&env, id).await;
    let row = env.until_status(id, DeliveryStatus::Exhausted).await;
    assert_error_mentions(&row, "disabled");
    assert_eq!(row.attempts, 1);
    assert_eq!(rx.count(), 1);
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_duplicate_job_is_dropped_without_a_request() {
    // One at a time: the 500 goes to SO-1, the first sent.
    let (env, rx, worker) = Scenario::webhook("orders", "/x")
        .replying_next([Reply::status(500)])
        .concurrency(1)
        .start()
        .await;
    let failed = emit_one(&env, "SO-1").await;
    let delivered = emit_one(&env, "SO-2").await;
    until_idle(&env, failed).await;
    env.until_status(delivered, DeliveryStatus::Delivered).await;
    let before = rx.count();
    // Jobs for a row not due yet and for a terminal row.
    env.push_jobs(
        "default",
        [failed, delivered].map(|id| Job::new(id).encode()),
    );
    until("the stale jobs are taken", || {
        env.queue_depth("default") == 0
    })
    .await;
    let stats = worker.stop().await;
    assert_eq!(stats.stale, 2);
    assert_eq!(rx.count(), before);
    assert_eq!(env.row(failed).attempts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sweepers_ticking_at_once_over_a_thousand_due_rows_enqueue_each_once() {
    let (env, rx) = Scenario::webhook("orders", "/x")
        .replying(Reply::status(500))
        .ready()
        .await;
    env.producer().emit_batch(sales_orders(1000)).await.unwrap();
    let worker = env.start_worker(64, RetrySchedule::default());
    env.until_rows("the first attempts finish", |rows| {
        rows.iter()
            .all(|r| r.status == DeliveryStatus::Failed && r.lease_expires_at.is_none())
    })
    .await;
    // The worker acks (and releases the keys) just after writing outcomes.
    until("the first round's in-flight keys are released", || {
        !env.keys().iter().any(|k| k.contains("webhook_retry"))
    })
    .await;
    rx.reply_always(Reply::status(200).delayed(Duration::from_millis(20)));
    let first_round = rx.count();
    assert_eq!(first_round, 1000);
    // No worker takes jobs while the sweepers tick: a row delivered between
    // one sweeper's query and the other's key check would be enqueued again
    // (and then found stale, never sent twice), which this count must not
    // depend on a busy machine's timing for.
    worker.stop().await;
    env.make_all_due();
    let (a, b) = (env.sweeper(1000, KEY_TTL), env.sweeper(1000, KEY_TTL));
    let (ra, rb) = tokio::join!(a.tick(), b.tick());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(
        ra.enqueued + rb.enqueued,
        1000,
        "each row enqueued exactly once: {ra:?} {rb:?}"
    );
    // A third tick while the retries wait on their queue enqueues nothing.
    let again = env.sweeper(1000, KEY_TTL).tick().await.unwrap();
    assert_eq!(again.enqueued, 0, "{again:?}");
    let worker = env.start_worker(64, RetrySchedule::default());
    rx.wait_for(2000, Duration::from_secs(60)).await;
    until_all_terminal(&env).await;
    worker.stop().await;
    let per_id = rx.per_webhook_id(first_round);
    assert_eq!(per_id.len(), 1000);
    assert!(
        per_id.values().all(|n| *n == 1),
        "a webhook-id arrived twice in the retry round"
    );
    assert!(env.all_delivered_after(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_while_the_previous_ticks_deliveries_are_in_flight_adds_no_duplicate() {
    let (env, rx, worker) = Scenario::webhook("orders", "/x")
        .replying_next([Reply::status(500), Reply::status(500), Reply::status(500)])
        .concurrency(8)
        .start()
        .await;
    let ids = [
        emit_one(&env, "SO-1").await,
        emit_one(&env, "SO-2").await,
        emit_one(&env, "SO-3").await,
    ];
    for id in ids {
        until_idle(&env, id).await;
    }
    rx.reply_always(Reply::status(200).delayed(Duration::from_millis(1500)));
    env.make_all_due();
    let sweeper = env.sweeper(100, KEY_TTL);
    assert_eq!(sweeper.tick().await.unwrap().enqueued, 3);
    rx.wait_for(6, PATIENCE).await;
    // The retries are at the slow receiver now; tick again, and again,
    // deliberately spaced over the time they are in flight.
    for _ in 0..3 {
        let t = sweeper.tick().await.unwrap();
        assert_eq!(t.enqueued, 0, "{t:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for id in ids {
        env.until_status(id, DeliveryStatus::Delivered).await;
    }
    assert_eq!(rx.count(), 6);
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_fifty_due_rows_drain_in_three_ticks_of_a_hundred_oldest_first() {
    let (env, _rx) = Scenario::webhook("orders", "/x").ready().await;
    let report = env.producer().emit_batch(sales_orders(250)).await.unwrap();
    // No first attempt: every row waits for the sweeper.
    env.lose_redis();
    // Spread the due times so "oldest first" is observable: row i due i ms apart.
    for (i, d) in report.deliveries.iter().enumerate() {
        env.set_due_in(d.id, -100.0 + i as f64 * 0.01);
    }
    let sweeper = env.sweeper(100, KEY_TTL);
    let mut enqueued_order: Vec<i64> = Vec::new();
    for expected in [100, 100, 50] {
        let t = sweeper.tick().await.unwrap();
        assert_eq!(t.enqueued, expected, "{t:?}");
        enqueued_order = env.queued_ids("default");
    }
    let expected: Vec<i64> = report.deliveries.iter().map(|d| d.id).collect();
    assert_eq!(enqueued_order, expected, "oldest first, each once");
    assert_eq!(
        sweeper.tick().await.unwrap().enqueued,
        0,
        "nothing left to enqueue"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_redis_loses_everything_the_sweeper_recovers_every_queued_row_once() {
    let (env, rx) = Scenario::webhook("orders", "/x").ready().await;
    // Long enough that no machine is slow enough to reach it during the
    // first tick; its passing is then written into the rows.
    let grace = Duration::from_secs(600);
    env.emit_all_queued(sales_orders(100), grace).await;
    env.lose_redis();
    assert!(env.keys().is_empty());
    let sweeper = env.sweeper(100, grace);
    assert_eq!(
        sweeper.tick().await.unwrap().enqueued,
        0,
        "nothing is due before the grace"
    );
    // Only once the grace has passed are the rows counted lost.
    env.make_all_due();
    assert_eq!(sweeper.tick().await.unwrap().enqueued, 100);
    let worker = env.start_worker(16, RetrySchedule::default());
    rx.wait_for(100, PATIENCE).await;
    until_all_terminal(&env).await;
    worker.stop().await;
    let mut ids: Vec<String> = rx
        .requests()
        .iter()
        .map(|r| r.header("webhook-id").unwrap().to_string())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 100, "none lost");
    assert_eq!(rx.count(), 100, "none doubled");
    assert!(env.all_delivered_after(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_pushes_the_next_attempt_later() {
    let (env, _rx, worker) = Scenario::webhook("limited", "/x")
        .replying_next([Reply::status(429).header("Retry-After", "600")])
        .start()
        .await;
    let id = emit_one(&env, "SO-1").await;
    let row = until_idle(&env, id).await;
    let due_in = (row.next_retry.unwrap() - Utc::now()).num_seconds();
    assert!(
        due_in >= 595,
        "next retry in {due_in}s; Retry-After asked for 600"
    );
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_makes_an_exhausted_row_due_with_one_more_attempt_and_refuses_delivered_rows() {
    let (env, _rx, worker) = Scenario::webhook("once", "/x")
        .replying_next([Reply::status(500)])
        .with(|s| s.max_retries = 0)
        .start()
        .await;
    let id = first_attempt_settled(&env).await;

    let replayed = env
        .store
        .run_sync(|c| deliveries::replay(c, id, false))
        .unwrap();
    assert_eq!(replayed.next_attempt, 2);
    let row = env.row(id);
    assert_eq!(row.status, DeliveryStatus::Failed);
    assert_eq!(row.max_attempts, 2);
    env.sweeper(100, KEY_TTL).tick().await.unwrap();
    let row = env.until_status(id, DeliveryStatus::Delivered).await;
    assert_eq!(row.attempts, 2);

    let refused = env
        .store
        .run_sync(|c| deliveries::replay(c, id, false))
        .unwrap_err();
    assert!(refused.to_string().contains("--force"), "{refused}");
    env.store
        .run_sync(|c| deliveries::replay(c, id, true))
        .unwrap();
    assert_eq!(env.row(id).status, DeliveryStatus::Failed);
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_replay_after_an_outage_longer_than_the_schedule_touches_only_matching_rows() {
    let (env, rx, worker) = Scenario::webhook("orders", "/x")
        .with(|s| s.max_retries = 0)
        .and_webhook("other", "/y")
        .with(|s| s.max_retries = 0)
        .replying(Reply::status(503))
        .concurrency(4)
        .start()
        .await;
    env.producer().emit_batch(sales_orders(5)).await.unwrap();
    env.until_rows("every row exhausted", |rows| {
        rows.iter().all(|r| r.status == DeliveryStatus::Exhausted)
    })
    .await;
    rx.reply_always(Reply::status(200));
    for r in env.rows() {
        until_idle(&env, r.id).await;
    }
    let since = Utc::now() - chrono::Duration::hours(1);
    let touched = env
        .store
        .run_sync(|c| {
            let hook = hookfleet_core::store::webhooks::get(c, "orders")?;
            deliveries::replay_bulk(
                c,
                hook.id,
                hookfleet_core::domain::DeliveryStatus::Exhausted,
                since,
            )
        })
        .unwrap();
    assert_eq!(touched.len(), 5);
    assert_eq!(env.sweeper(100, KEY_TTL).tick().await.unwrap().enqueued, 5);
    for t in &touched {
        env.until_status(t.id, DeliveryStatus::Delivered).await;
    }
    let rows = env.rows();
    assert_eq!(
        rows.iter()
            .filter(|r| r.webhook_name == "orders" && r.status == DeliveryStatus::Delivered)
            .count(),
        5
    );
    assert_eq!(
        rows.iter()
            .filter(|r| r.webhook_name == "other" && r.status == DeliveryStatus::Exhausted)
            .count(),
        5
    );
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sweeper_tick_heals_a_redis_that_lost_every_job() {
    let env = TestEnv::new();
    env.add_quiet_webhook("lost", "on_submit");
    let events = 2_500;
    env.producer()
        .emit_batch(hookfleet_testkit::sales_orders(events))
        .await
        .expect("emit");
    env.lose_redis();
    env.make_all_due();
    // Batches of 100: one tick takes 25 of them, from where each stopped.
    let mut cmd = env.command("hookfleet-sweeper");
    cmd.args(["--once", "--batch-size", "100"]);
    hookfleet_testkit::run_within(cmd, Duration::from_secs(60), "one tick").ok("tick");
    assert_eq!(
        env.queue_depth("default"),
        events as i64,
        "every lost job back"
    );
    // With no time left in its budget a tick stops after one batch.
    env.lose_redis();
    let report = env
        .sweeper(100, KEY_TTL)
        .sweep(Duration::ZERO)
        .await
        .expect("sweep");
    assert_eq!((report.enqueued, report.batches), (100, 1));
    assert!(report.budget_spent);
    assert_eq!(env.queue_depth("default"), 100);
}
