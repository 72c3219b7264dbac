//! Nothing lost, nothing doubled: workers killed or stopped, Postgres and
//! Redis cut or restarted. Tests that break a server start their own
//! throwaway instance on a spare port.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hookfleet_core::domain::{DeliveryLog, DeliveryStatus, DEFAULT_TIMEOUT};
use hookfleet_core::queue::Job;
use hookfleet_producer::{EmitError, Event};
use hookfleet_testkit::{
    sales_order, sales_orders, sales_orders_in, until, until_seen, FleetProcess, LocalPostgres,
    LocalRedis, Ready, Reply, Scenario, TestEnv, PATIENCE,
};

const KEY_TTL: Duration = Duration::from_secs(600);

/// `hookfleet-worker ARGS` as a real process, its output discarded.
fn start_worker_process(env: &TestEnv, args: &[&str]) -> FleetProcess {
    let mut cmd = env.command("hookfleet-worker");
    cmd.args(args)
        // Not about per-webhook limits: every slot may go to one webhook.
        .env("HOOKFLEET_ENDPOINT_CONCURRENCY", "1000")
        .env("RUST_LOG", "warn");
    FleetProcess::spawn(cmd)
}

/// `on_submit` of Sales Order SO-1, grand total 10.
fn so_1() -> Event {
    Event::new(
        "Sales Order",
        "on_submit",
        "SO-1",
        sales_order("SO-1", 10.0),
    )
}

fn all_delivered(env: &TestEnv, n: usize) -> bool {
    all_of_n_delivered(&env.rows(), n)
}

fn all_of_n_delivered(rows: &[DeliveryLog], n: usize) -> bool {
    rows.len() == n && rows.iter().all(|r| r.status == DeliveryStatus::Delivered)
}

/// Webhook `orders` posting to `/x` with a `timeout`, its receiver answering
/// `reply`, and `events` Sales Orders emitted; no worker yet.
async fn emitted_to(reply: Reply, timeout: Duration, events: usize) -> Ready {
    let (env, rx) = Scenario::webhook("orders", "/x")
        .replying(reply)
        .with(|s| s.timeout = timeout)
        .ready()
        .await;
    env.producer()
        .emit_batch(sales_orders(events))
        .await
        .unwrap();
    (env, rx)
}

/// Webhook `orders` posting to `/x` on `env` (a throwaway server's).
async fn orders_on(env: TestEnv) -> Ready {
    Scenario::webhook("orders", "/x").in_env(env).ready().await
}

/// Starts worker B (`concurrency` slots, quick heartbeats and leases, so it
/// soon finds what a dead worker held) and ticks a sweeper until all `n`
/// rows are Delivered (`what`); returns B, still running.
async fn recovering_worker(
    env: &TestEnv,
    concurrency: usize,
    what: &str,
    n: usize,
) -> hookfleet_testkit::WorkerHandle {
    let b = env.start_worker_tuned(concurrency, |c| {
        c.heartbeat_ttl = Duration::from_secs(2);
        c.lease_margin = Duration::from_secs(1);
    });
    let sweeper = env.sweeper(100, KEY_TTL);
    until_seen(
        what,
        async || {
            sweeper.tick().await.unwrap();
            env.rows()
        },
        |rows| all_of_n_delivered(rows, n),
    )
    .await;
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_while_holding_jobs_has_them_delivered_by_another_worker() {
    let delayed = Reply::status(200).delayed(Duration::from_millis(1500));
    let (env, rx) = emitted_to(delayed, Duration::from_secs(3), 6).await;

    let mut a = start_worker_process(
        &env,
        &[
            "--concurrency",
            "8",
            "--heartbeat-ttl",
            "2s",
            "--lease-margin",
            "1s",
        ],
    );
    rx.wait_for(6, PATIENCE).await;
    a.signal("-KILL");
    a.wait(Duration::from_secs(5));
    assert!(
        env.rows()
            .iter()
            .all(|r| r.status == DeliveryStatus::Queued && r.attempts == 1),
        "A died mid-attempt"
    );

    let b = recovering_worker(&env, 8, "every row delivered by B", 6).await;
    b.stop().await;
    // Every row was delivered by B's attempt; A's processing list is empty
    // and A is no longer registered.
    assert!(env.rows().iter().all(|r| r.attempts == 2));
    let per_id = rx.per_webhook_id(0);
    assert_eq!(per_id.len(), 6);
    assert!(
        per_id.values().all(|n| *n == 2),
        "A sent once before dying, B once: {per_id:?}"
    );
    assert!(env
        .keys()
        .iter()
        .all(|k| !k.contains(":processing:") || env.llen(k) == 0));
    let mut conn = env.redis();
    let workers: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(env.queue.keys().workers())
        .query(&mut *conn)
        .unwrap();
    assert!(
        workers.is_empty(),
        "dead and stopped workers are deregistered: {workers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_slow_deliveries_in_flight_finish_and_exits_0() {
    let delayed = Reply::status(200).delayed(Duration::from_secs(2));
    let (env, rx) = emitted_to(delayed, DEFAULT_TIMEOUT, 5).await;
    let mut w = start_worker_process(&env, &["--concurrency", "8"]);
    rx.wait_for(5, PATIENCE).await;
    let signalled = Instant::now();
    w.signal("-TERM");
    assert_eq!(w.wait(Duration::from_secs(15)).code(), Some(0));
    assert!(
        signalled.elapsed() >= Duration::from_millis(1000),
        "it waited for the deliveries"
    );
    assert!(all_delivered(&env, 5), "{:?}", env.rows());
    assert_eq!(rx.count(), 5);
    assert!(
        env.keys().iter().all(|k| !k.contains("webhook_retry::")),
        "keys released"
    );
    assert!(
        env.keys().iter().all(|k| !k.contains(":processing:")),
        "nothing left held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_that_times_out_puts_the_unfinished_jobs_back_and_exits_0() {
    let (env, rx) = emitted_to(Reply::hang(), Duration::from_secs(10), 3).await;
    let mut w = start_worker_process(&env, &["--concurrency", "8", "--drain-timeout", "1s"]);
    rx.wait_for(3, PATIENCE).await;
    w.signal("-TERM");
    assert_eq!(w.wait(Duration::from_secs(10)).code(), Some(0));
    let queue = env.queue.keys().queue("default");
    assert_eq!(env.llen(&queue), 3, "the three jobs are back on the queue");
    assert!(env.keys().iter().all(|k| !k.contains(":processing:")));
    // Their rows are still leased by the cut-short attempt: a worker that takes
    // the jobs now must not send them again before the lease ends.
    let b = env.start_worker(8, hookfleet_core::domain::RetrySchedule::default());
    until("the returned jobs are taken", || env.llen(&queue) == 0).await;
    // Deliberately a window: nothing may be sent again during it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rx.count(), 3, "no second send while the lease holds");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_stops_at_once_and_the_reaper_recovers_what_was_held() {
    let (env, rx) = emitted_to(Reply::hang(), Duration::from_secs(2), 2).await;
    let mut w = start_worker_process(
        &env,
        &[
            "--concurrency",
            "4",
            "--heartbeat-ttl",
            "2s",
            "--lease-margin",
            "1s",
        ],
    );
    rx.wait_for(2, PATIENCE).await;
    w.signal("-TERM");
    // Two signals, not one the kernel might merge: the second comes while
    // the first's drain is under way (nothing to poll: its output is off).
    tokio::time::sleep(Duration::from_millis(200)).await;
    w.signal("-TERM");
    assert_eq!(
        w.wait(Duration::from_secs(5)).code(),
        Some(1),
        "stopped at once, not drained"
    );
    let held: Vec<String> = env
        .keys()
        .into_iter()
        .filter(|k| k.contains(":processing:"))
        .collect();
    assert_eq!(held.len(), 1);
    assert_eq!(
        env.llen(&held[0]),
        2,
        "the jobs stay where the reaper finds them"
    );

    rx.reply_always(Reply::status(200));
    let b = recovering_worker(&env, 4, "every row recovered and delivered", 2).await;
    assert_eq!(env.llen(&held[0]), 0, "recovered");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cutting_postgres_during_outcome_writes_loses_nothing_and_sends_nothing_twice() {
    let pg = LocalPostgres::start();
    let (env, rx) = Scenario::webhook("orders", "/x")
        .in_env(TestEnv::on_postgres(&pg.admin_url()))
        .replying(Reply::status(200).delayed(Duration::from_millis(700)))
        .ready()
        .await;
    env.producer().emit_batch(sales_orders(30)).await.unwrap();
    let worker = env.start_worker(4, hookfleet_core::domain::RetrySchedule::default());
    rx.wait_for(4, PATIENCE).await;

    pg.stop_immediately();
    // The four in flight finish; their outcomes cannot be written, so the
    // worker keeps their jobs and slots and takes nothing new. Deliberately
    // fixed times: 3 s for the worker to settle, then a 2 s window in which
    // nothing more may arrive.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during = rx.count();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rx.count(), during, "no new request while Postgres is down");
    assert!(during <= 8, "at most the held slots were sent: {during}");
    pg.start_again();

    until("every row Delivered", || all_delivered(&env, 30)).await;
    worker.stop().await;
    let per_id = rx.per_webhook_id(0);
    assert_eq!(per_id.len(), 30, "none lost");
    assert!(
        per_id.values().all(|n| *n == 1),
        "none sent twice: {per_id:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emit_fails_clearly_while_postgres_is_down_and_records_nothing() {
    let pg = LocalPostgres::start();
    let (env, _rx) = orders_on(TestEnv::on_postgres(&pg.admin_url())).await;
    let producer = env.producer();
    producer
        .emit(Event::new(
            "Sales Order",
            "on_submit",
            "SO-0",
            sales_order("SO-0", 10.0),
        ))
        .await
        .unwrap();
    pg.stop_immediately();
    let err = producer.emit(so_1()).await.unwrap_err();
    assert!(matches!(err, EmitError::Store(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("nothing was recorded") && text.contains("database"),
        "{text}"
    );
    assert_eq!(env.queue_depth("default"), 1, "only the first event's job");
    pg.start_again();
    assert_eq!(env.rows().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_between_emit_and_pop_is_healed_by_the_sweeper_after_the_grace() {
    let mut redis = LocalRedis::start();
    let (env, rx) = orders_on(TestEnv::on_redis(&redis.url())).await;
    let grace = Duration::from_secs(1);
    env.emit_all_queued(sales_orders(10), grace).await;
    redis.restart();
    let worker = env.start_worker(8, hookfleet_core::domain::RetrySchedule::default());
    // Deliberately the grace itself: until it has passed the sweeper may not
    // count the rows lost, and meanwhile nothing may arrive.
    tokio::time::sleep(grace + Duration::from_millis(300)).await;
    assert_eq!(rx.count(), 0, "the jobs died with Redis");
    let tick = env.sweeper(100, grace).tick().await.unwrap();
    assert_eq!(tick.enqueued, 10);
    until("every row Delivered", || all_delivered(&env, 10)).await;
    worker.stop().await;
    let per_id = rx.per_webhook_id(0);
    assert_eq!(per_id.len(), 10);
    assert!(per_id.values().all(|n| *n == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emit_while_redis_is_down_succeeds_and_says_the_sweeper_will_send_it() {
    let mut redis = LocalRedis::start();
    let (env, rx) = orders_on(TestEnv::on_redis(&redis.url())).await;
    let grace = Duration::from_secs(1);
    let producer = env.producer_with_grace(grace);
    redis.kill();
    let report = producer.emit(so_1()).await.unwrap();
    let note = report
        .enqueue_error
        .clone()
        .expect("the report says it was not queued");
    assert!(note.contains("sweeper"), "{note}");
    assert!(!report.deliveries[0].enqueued);
    assert_eq!(
        env.row(report.deliveries[0].id).status,
        DeliveryStatus::Queued
    );
    redis.start_again();
    let worker = env.start_worker(2, hookfleet_core::domain::RetrySchedule::default());
    // Deliberately the grace itself: before it the sweeper leaves the row to
    // its (lost) job.
    tokio::time::sleep(grace + Duration::from_millis(200)).await;
    env.sweeper(100, grace).tick().await.unwrap();
    until("delivered", || all_delivered(&env, 1)).await;
    worker.stop().await;
    assert_eq!(rx.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_rides_out_a_redis_restart_and_keeps_delivering() {
    let mut redis = LocalRedis::start();
    let (env, rx) = orders_on(TestEnv::on_redis(&redis.url())).await;
    let producer = env.producer();
    let worker = env.start_worker(4, hookfleet_core::domain::RetrySchedule::default());
    producer.emit_batch(sales_orders(3)).await.unwrap();
    until("first three delivered", || all_delivered(&env, 3)).await;
    redis.kill();
    // Deliberately an outage of a fixed length for the worker to ride out.
    tokio::time::sleep(Duration::from_secs(2)).await;
    redis.start_again();
    let more = sales_orders_in(3..6, 10.0);
    // The producer may skip Redis for a moment after its failure; retry the
    // emit's enqueue through the sweeper if so.
    let report = producer.emit_batch(more).await.unwrap();
    if report.enqueue_error.is_some() {
        for d in &report.deliveries {
            env.set_due_in(d.id, -1.0);
        }
        env.sweeper(100, KEY_TTL).tick().await.unwrap();
    }
    until("the next three delivered by the same worker", || {
        all_delivered(&env, 6)
    })
    .await;
    worker.stop().await;
    assert_eq!(rx.count(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_keeps_killing_its_workers_is_dead_lettered_with_its_history() {
    let env = TestEnv::new();
    let keys = env.queue.keys().clone();
    let job = Job::new(4242).encode();
    let mut conn = env.redis();
    let mut recoveries = Vec::new();
    for i in 1..=4 {
        // A worker registered for "default" takes the job and dies (no heartbeat).
        let dead = format!("doomed-{i}");
        redis::cmd("HSET")
            .arg(keys.workers())
            .arg(&dead)
            .arg("default")
            .query::<()>(&mut *conn)
            .unwrap();
        redis::cmd("RPOP")
            .arg(keys.queue("default"))
            .query::<Option<String>>(&mut *conn)
            .unwrap();
        redis::cmd("LPUSH")
            .arg(keys.processing("default", &dead))
            .arg(&job)
            .query::<()>(&mut *conn)
            .unwrap();
        let reaped = env
            .queue
            .registry()
            .reap("reaper-test", 3, Duration::from_secs(5))
            .await
            .unwrap()
            .expect("lock");
        recoveries.push((reaped.requeued, reaped.dead_lettered));
    }
    assert_eq!(recoveries, vec![(1, 0), (1, 0), (1, 0), (0, 1)]);
    assert_eq!(env.llen(&keys.queue("default")), 0);
    let dead = env.queue.dead().list(10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].job, job);
    assert_eq!(
        dead[0].died_holding,
        vec!["doomed-1", "doomed-2", "doomed-3", "doomed-4"]
    );
    assert!(
        dead[0].reason.contains("kills its worker"),
        "{}",
        dead[0].reason
    );
    // The operator can put it back.
    let back = env
        .queue
        .dead()
        .requeue(&dead[0].id)
        .await
        .unwrap()
        .expect("found");
    assert_eq!(back.job, job);
    assert_eq!(env.llen(&keys.queue("default")), 1);
    assert_eq!(env.queue.dead().count().await.unwrap(), 0);
}
