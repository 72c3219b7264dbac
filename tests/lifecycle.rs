//! Endpoint health and data lifecycle, end to end with the real binaries:
//! pause holds every delivery and resume sends them all; a receiver that
//! fails for longer than HOOKFLEET_AUTO_PAUSE_AFTER is paused and sees no
//! more requests; health follows a known sequence of answers; retention
//! deletes old terminal rows and their attempts and nothing else; one
//! sweeper tick heals a Redis that lost 100,000 jobs.

use std::time::{Duration, Instant};

use diesel::sql_types::{BigInt, Integer, Text};
use diesel::RunQueryDsl;
use serde_json::{json, Value};

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_core::store::deliveries::{self, held_until};
use hookfleet_testkit::{
    run_within, until, FleetProcess, Receiver, Reply, Scenario, TestEnv, ENTITY, PATIENCE,
};

/// Starts a worker process (logged) with `vars` set.
fn worker(env: &TestEnv, vars: &[(&str, &str)]) -> FleetProcess {
    let mut cmd = env.command("hookfleet-worker");
    cmd.args(["--concurrency", "1"]);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    FleetProcess::spawn_logged(cmd)
}

fn emit(env: &TestEnv, name: &str) -> i64 {
    let report = env
        .emit_by_cli("on_submit", name, &json!({ "name": name }))
        .ok("emit")
        .json();
    hookfleet_testkit::delivery_ids(&report)[0]
}

fn show(env: &TestEnv, name: &str) -> Value {
    env.cli(&["webhook", "show", name, "--json"])
        .ok("webhook show")
        .json()
}

fn count(rows: &[hookfleet_core::domain::DeliveryLog], status: DeliveryStatus) -> usize {
    rows.iter().filter(|r| r.status == status).count()
}

/// Waits until webhook "dead" shows `n` failures in a row; its view.
async fn until_failures(env: &TestEnv, n: i64) -> Value {
    let mut h = Value::Null;
    until(&format!("{n} failures in the health"), || {
        h = show(env, "dead");
        h["consecutive_failures"] == n
    })
    .await;
    h
}

/// One `hookfleet-sweeper --once` tick; its JSON log.
fn sweep_once(env: &TestEnv) -> String {
    let mut cmd = env.command("hookfleet-sweeper");
    cmd.args(["--once", "--log-format", "json"]);
    run_within(cmd, PATIENCE, "tick").ok("tick").all()
}

/// Records `rows` delivery rows of the test's one webhook by SQL (emitting
/// that many events would take the test's time for nothing the producer's
/// own tests do not cover): row `n`'s status and next_retry are the SQL
/// expressions given, over `n`.
fn seed_rows(env: &TestEnv, rows: i64, status: &str, next_retry: &str) {
    sql(
        env,
        &format!(
            "INSERT INTO webhook_request_logs
                 (event_id, webhook_id, webhook_name, entity_type, entity_name, event, url, method,
                  body, queue, status, max_attempts, next_retry)
             SELECT 'evt-' || n, w.id, w.name, w.entity_type, 'SO-' || n, w.event, w.request_url,
                    'POST', '{{}}', 'default', ({status})::delivery_status, 4, {next_retry}
             FROM webhooks w, generate_series(1, {rows}) n"
        ),
    );
}

/// Runs SQL on the test's database.
fn sql(env: &TestEnv, query: &str) -> usize {
    env.store
        .run_sync(|c| Ok(diesel::sql_query(query).execute(c)?))
        .expect(query)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_webhook_sends_nothing_and_exhausts_nothing_and_resume_sends_everything() {
    let (env, rx) = Scenario::new().ready().await;
    env.webhook_add("orders", ENTITY, "on_submit", &rx.url("/o"), &[])
        .ok("add");
    let mut w = worker(&env, &[]);
    // One row already Failed before the pause, made due while paused.
    rx.reply_next([Reply::status(503)]);
    let failed = emit(&env, "SO-0");
    env.until_row(failed, |r| {
        r.status == DeliveryStatus::Failed && r.lease_expires_at.is_none()
    })
    .await;

    let out = env
        .cli(&[
            "webhook",
            "pause",
            "orders",
            "--reason",
            "receiver maintenance",
        ])
        .ok("pause");
    assert!(
        out.stdout.contains("paused webhook orders"),
        "{}",
        out.all()
    );
    let ids: Vec<i64> = (1..=5).map(|i| emit(&env, &format!("SO-{i}"))).collect();
    // The worker takes the five jobs and holds their rows unclaimed.
    env.until_rows("the five rows held", |rows| {
        ids.iter().all(|id| {
            rows.iter()
                .any(|r| r.id == *id && r.next_retry == Some(held_until()))
        })
    })
    .await;
    // The Failed row comes due: the sweeper enqueues it once, and the
    // worker holds it too; the next tick has nothing to do.
    env.set_due_in(failed, -1.0);
    let tick = sweep_once(&env);
    assert!(tick.contains("\"enqueued\":1"), "{tick}");
    env.until_row(failed, |r| r.next_retry == Some(held_until()))
        .await;
    let tick = sweep_once(&env);
    assert!(tick.contains("\"due\":0"), "{tick}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.count(), 1, "nothing sent while paused");
    let rows = env.rows();
    assert_eq!(count(&rows, DeliveryStatus::Exhausted), 0, "{rows:?}");
    assert_eq!(count(&rows, DeliveryStatus::Queued), 5, "{rows:?}");
    assert!(
        ids.iter().all(|id| env.row(*id).attempts == 0),
        "no attempt counted"
    );
    let shown = env
        .cli(&["delivery", "show", &ids[0].to_string()])
        .ok("delivery show");
    assert!(
        shown.stdout.contains("held (webhook paused)"),
        "{}",
        shown.all()
    );

    let listed = env.listed_webhooks();
    assert_eq!(listed[0]["paused"], true);
    assert_eq!(listed[0]["paused_reason"], "receiver maintenance");
    assert!(listed[0]["paused_at"].is_string());
    let stats = env.cli(&["stats", "--json"]).ok("stats").json();
    assert_eq!(stats["paused_webhooks"], json!(["orders"]));
    assert_eq!(stats["rows"]["Queued"], 5);
    assert_eq!(stats["rows_estimated"], false);

    let out = env.cli(&["webhook", "resume", "orders"]).ok("resume");
    assert!(
        out.stdout
            .contains("6 held rows released; 6 due deliveries, 6 enqueued now"),
        "{}",
        out.all()
    );
    env.until_rows("all six delivered", |rows| {
        count(rows, DeliveryStatus::Delivered) == 6
    })
    .await;
    assert_eq!(rx.count(), 7, "each sent once after resume");
    assert_eq!(show(&env, "orders")["paused"], false);
    w.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_failing_longer_than_the_auto_pause_window_is_paused_and_hears_nothing_more() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    rx.reply_always(Reply::status(503));
    env.webhook_add(
        "dead",
        ENTITY,
        "on_submit",
        &rx.url("/d"),
        &["--max-retries", "0"],
    )
    .ok("add");
    let mut w = worker(&env, &[("HOOKFLEET_AUTO_PAUSE_AFTER", "1h")]);
    for i in 0..8 {
        emit(&env, &format!("SO-{i}"));
    }
    until_failures(&env, 8).await;
    // The run of failures began over an hour ago (a compressed five days).
    sql(
        &env,
        "UPDATE webhook_health SET failing_since = now() - interval '2 hours'",
    );
    // A ninth failure: long enough, but fewer than ten attempts.
    emit(&env, "SO-8");
    let h = until_failures(&env, 9).await;
    assert_eq!(h["paused"], false, "nine attempts are not enough: {h}");
    // The tenth pauses it.
    emit(&env, "SO-9");
    let mut seen = Value::Null;
    until("auto-paused", || {
        seen = show(&env, "dead");
        seen["paused"] == true
    })
    .await;
    let reason = seen["paused_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("auto-paused: all 10 attempts since"),
        "{reason}"
    );
    assert!(reason.contains("HTTP 503"), "{reason}");
    assert_eq!(seen["consecutive_failures"], 10);
    let heard = rx.count();
    assert_eq!(heard, 10);

    for i in 10..15 {
        emit(&env, &format!("SO-{i}"));
    }
    env.until_rows("the five later rows held", |rows| {
        rows.iter()
            .filter(|r| r.next_retry == Some(held_until()))
            .count()
            == 5
    })
    .await;
    assert_eq!(rx.count(), heard, "no request once paused");
    let rows = env.rows();
    assert_eq!(count(&rows, DeliveryStatus::Queued), 5, "{rows:?}");
    assert_eq!(count(&rows, DeliveryStatus::Exhausted), 10);

    // The receiver is back: resume sends what waited.
    rx.reply_always(Reply::status(200));
    env.cli(&["webhook", "resume", "dead"]).ok("resume");
    env.until_rows("the five delivered", |rows| {
        count(rows, DeliveryStatus::Delivered) == 5
    })
    .await;
    until_failures(&env, 0).await;
    let log = {
        w.stop();
        w.log()
    };
    assert!(
        log.contains("webhook paused") && log.contains("WARN"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_a_known_sequence_of_answers() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    env.webhook_add(
        "orders",
        ENTITY,
        "on_submit",
        &rx.url("/o"),
        &["--max-retries", "0"],
    )
    .ok("add");
    let fresh = show(&env, "orders");
    assert_eq!(fresh["attempts_24h"], 0);
    assert_eq!(fresh["success_rate_24h"], Value::Null);
    assert_eq!(fresh["p50_ms"], Value::Null);
    assert_eq!(fresh["last_success_at"], Value::Null);

    // Six quick successes, then three failures that take 300 ms each.
    let mut replies: Vec<Reply> = (0..6).map(|_| Reply::status(200)).collect();
    replies.extend((0..3).map(|_| Reply::status(503).delayed(Duration::from_millis(300))));
    rx.reply_next(replies);
    let mut w = worker(&env, &[]);
    for i in 0..9 {
        emit(&env, &format!("SO-{i}"));
    }
    env.until_rows("nine attempts recorded", |rows| {
        rows.len() == 9 && rows.iter().all(|r| r.next_retry.is_none())
    })
    .await;
    let mut h = Value::Null;
    until("health counted all nine", || {
        h = show(&env, "orders");
        h["attempts_24h"] == 9
    })
    .await;
    let rate = h["success_rate_24h"].as_f64().unwrap();
    assert!((rate - 6.0 / 9.0).abs() < 1e-9, "{h}");
    assert_eq!(h["consecutive_failures"], 3, "{h}");
    assert!(
        h["last_error"].as_str().unwrap().starts_with("HTTP 503"),
        "{h}"
    );
    assert!(h["last_success_at"].is_string(), "{h}");
    let p50 = h["p50_ms"].as_i64().unwrap();
    let p95 = h["p95_ms"].as_i64().unwrap();
    assert!(p50 < 100, "the median is a quick success: {h}");
    assert!(
        (250..=400).contains(&p95),
        "the 95th percentile is a slow failure: {h}"
    );
    // list carries the same fields.
    let listed = env.listed_webhooks();
    assert_eq!(listed[0]["attempts_24h"], 9);
    assert_eq!(listed[0]["consecutive_failures"], 3);

    // A success ends the run of failures.
    rx.reply_next([Reply::status(200)]);
    emit(&env, "SO-9");
    until("the run of failures ended", || {
        h = show(&env, "orders");
        h["attempts_24h"] == 10
    })
    .await;
    assert_eq!(h["consecutive_failures"], 0, "{h}");
    assert!(
        h["last_error"].as_str().unwrap().starts_with("HTTP 503"),
        "the last error stays: {h}"
    );
    w.stop();
}

/// Makes row `id` `status` (terminal or Failed), recorded and last touched
/// `created_days` and `updated_days` ago, with `attempts` attempt rows.
fn age_row(
    env: &TestEnv,
    id: i64,
    status: &str,
    created_days: i32,
    updated_days: i32,
    attempts: i32,
) {
    env.store
        .run_sync(|c| {
            diesel::sql_query(
                "UPDATE webhook_request_logs
                 SET status = $2::delivery_status, attempts = $5,
                     next_retry = CASE WHEN $2 = 'Failed' THEN now() + interval '1 hour' END,
                     created_at = now() - make_interval(days => $3),
                     updated_at = now() - make_interval(days => $4)
                 WHERE id = $1",
            )
            .bind::<BigInt, _>(id)
            .bind::<Text, _>(status)
            .bind::<Integer, _>(created_days)
            .bind::<Integer, _>(updated_days)
            .bind::<Integer, _>(attempts)
            .execute(c)?;
            diesel::sql_query(
                "INSERT INTO webhook_delivery_attempts (log_id, attempt, started_at, duration_ms, worker)
                 SELECT $1, n, now(), 5, 'test' FROM generate_series(1, $2) n",
            )
            .bind::<BigInt, _>(id)
            .bind::<Integer, _>(attempts)
            .execute(c)?;
            Ok(())
        })
        .expect("age row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_deletes_old_terminal_rows_and_their_attempts_and_keeps_pending_and_recent_ones() {
    let env = TestEnv::new();
    env.add_quiet_webhook("orders", "on_submit");
    let ids: Vec<i64> = (0..8).map(|i| emit(&env, &format!("SO-{i}"))).collect();
    age_row(&env, ids[0], "Delivered", 40, 40, 1);
    age_row(&env, ids[1], "Delivered", 40, 40, 2);
    age_row(&env, ids[2], "Exhausted", 35, 35, 4);
    age_row(&env, ids[3], "Failed", 40, 40, 2); // pending: never pruned
    age_row(&env, ids[4], "Delivered", 10, 10, 1); // recent
    age_row(&env, ids[5], "Delivered", 40, 1, 2); // replayed since the cut
                                                  // ids[6] stays Queued (pending, recorded now); ids[7] is for the sweeper.
    age_row(&env, ids[7], "Delivered", 40, 40, 1);

    let mut cmd = env.command("hookfleet-sweeper");
    cmd.args(["--once", "--retention", "0"]);
    run_within(cmd, PATIENCE, "tick without retention").ok("tick");
    assert_eq!(env.rows().len(), 8, "--retention 0 keeps everything");

    let report = env
        .cli(&[
            "prune",
            "--older-than",
            "30d",
            "--batch-size",
            "2",
            "--json",
        ])
        .ok("prune")
        .json();
    assert_eq!(report["rows"], 4, "{report}");
    assert_eq!(report["attempts"], 1 + 2 + 4 + 1, "{report}");
    assert!(report["batches"].as_u64().unwrap() >= 4, "{report}");
    let left: Vec<i64> = env.rows().iter().map(|r| r.id).collect();
    let mut expected = vec![ids[3], ids[4], ids[5], ids[6]];
    expected.sort();
    let mut left_sorted = left.clone();
    left_sorted.sort();
    assert_eq!(left_sorted, expected);
    for id in [ids[0], ids[1], ids[2], ids[7]] {
        assert!(env.attempts(id).is_empty(), "attempts of {id} deleted");
    }
    assert_eq!(
        env.attempts(ids[3]).len(),
        2,
        "a pending row keeps its attempts"
    );

    // The sweeper's retention does the same each tick.
    let more = emit(&env, "SO-8");
    age_row(&env, more, "Exhausted", 31, 31, 3);
    let mut cmd = env.command("hookfleet-sweeper");
    cmd.args(["--once", "--retention", "30d", "--log-format", "json"]);
    let tick = run_within(cmd, PATIENCE, "tick with retention").ok("tick");
    assert!(
        tick.all().contains("\"pruned\":1") && tick.all().contains("\"pruned_attempts\":3"),
        "{}",
        tick.all()
    );
    assert_eq!(env.rows().len(), 4);

    for short in ["0", "59m"] {
        let refused = env.cli(&["prune", "--older-than", short]);
        assert_eq!(refused.code, Some(2), "{}", refused.all());
        assert!(
            refused.all().contains("must be at least 1h"),
            "{}",
            refused.all()
        );
    }
    let mut cmd = env.command("hookfleet-sweeper");
    cmd.args(["--once", "--retention", "10m"]);
    let refused = run_within(cmd, PATIENCE, "tick with a short retention");
    assert_eq!(refused.code, Some(2), "{}", refused.all());
    assert!(
        refused.all().contains("or at least 1h"),
        "{}",
        refused.all()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tick_with_the_shipped_settings_heals_a_redis_that_lost_100000_jobs() {
    let env = TestEnv::new();
    env.add_quiet_webhook("lost", "on_submit");
    let rows = 100_000;
    // Recorded by SQL, due, with no job in Redis: what a Redis that lost
    // everything leaves.
    seed_rows(&env, rows, "'Queued'", "now() - interval '1 minute'");
    assert_eq!(env.queue_depth("default"), 0);
    // deploy/ ships HOOKFLEET_SWEEP_BATCH_SIZE=1000 and the default budget.
    let mut cmd = env.command("hookfleet-sweeper");
    cmd.args(["--once", "--log-format", "json"])
        .env("HOOKFLEET_SWEEP_BATCH_SIZE", "1000");
    let started = Instant::now();
    let tick = run_within(cmd, Duration::from_secs(120), "one tick").ok("tick");
    let took = started.elapsed();
    assert_eq!(env.queue_depth("default"), rows, "every lost job back");
    assert!(
        tick.all().contains("\"budget_spent\":false"),
        "{}",
        tick.all()
    );
    eprintln!("one tick enqueued {rows} lost jobs in {took:?} (debug build)");
}

#[test]
fn the_pause_reason_is_bounded_and_printable() {
    let env = TestEnv::new();
    env.add_quiet_webhook("orders", "on_submit");
    let long = "x".repeat(501);
    for bad in [long.as_str(), "", "two\nlines"] {
        let out = env.cli(&["webhook", "pause", "orders", "--reason", bad]);
        assert_eq!(out.code, Some(1), "{}", out.all());
        assert!(
            out.all().contains("a pause reason is 1 to 500 characters"),
            "{}",
            out.all()
        );
    }
    assert_eq!(env.listed_webhooks()[0]["paused"], false);
    let out = env.cli(&["webhook", "pause", "nope"]);
    assert_eq!(out.code, Some(1));
    assert!(out.all().contains("nope"), "{}", out.all());
    let out = env.cli(&["webhook", "resume", "orders"]).ok("resume");
    assert!(out.stdout.contains("is not paused"), "{}", out.all());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_webhooks_workflow_transition_waits_for_resume_instead_of_going_out_at_once() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    env.webhook_add("approve", ENTITY, "workflow_transition", &rx.url("/a"), &[])
        .ok("add");
    env.cli(&["webhook", "pause", "approve"]).ok("pause");
    let report = env
        .emit_by_cli("workflow_transition", "SO-1", &json!({"name": "SO-1"}))
        .ok("emit")
        .json();
    assert_eq!(report["deliveries"][0]["status"], "Queued", "{report}");
    assert_eq!(rx.count(), 0, "not sent while paused");
    let id = hookfleet_testkit::delivery_ids(&report)[0];
    let row = env.row(id);
    assert_eq!(
        (row.attempts, row.max_attempts),
        (0, 1),
        "one attempt, not yet made"
    );

    let mut w = worker(&env, &[]);
    env.cli(&["webhook", "resume", "approve"]).ok("resume");
    env.until_row(id, |r| r.status == DeliveryStatus::Delivered)
        .await;
    assert_eq!(rx.count(), 1);
    w.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_releases_and_enqueues_a_large_held_backlog_oldest_first() {
    let env = TestEnv::new();
    env.add_quiet_webhook("big", "on_submit");
    env.cli(&["webhook", "pause", "big"]).ok("pause");
    let rows = 2_500; // more than two of resume's batches
    seed_rows(&env, rows, "'Queued'", deliveries::HELD_UNTIL);
    let tick = sweep_once(&env);
    assert!(tick.contains("\"due\":0"), "held rows are not due: {tick}");
    let stats = env.cli(&["stats", "--json"]).ok("stats").json();
    assert_eq!(
        stats["next_retry"],
        Value::Null,
        "held rows have no next retry: {stats}"
    );
    let out = env.cli(&["webhook", "resume", "big"]).ok("resume");
    assert!(
        out.stdout.contains(&format!(
            "{rows} held rows released; {rows} due deliveries, {rows} enqueued now"
        )),
        "{}",
        out.all()
    );
    let queued = env.queued_ids("default");
    assert_eq!(queued.len() as i64, rows);
    assert!(queued.windows(2).all(|w| w[0] < w[1]), "taken oldest first");
    assert!(env
        .rows()
        .iter()
        .all(|r| r.next_retry != Some(held_until())));
}

#[test]
fn stats_estimates_terminal_rows_from_the_statistics_of_a_large_table() {
    let env = TestEnv::new();
    env.add_quiet_webhook("orders", "on_submit");
    seed_rows(
        &env,
        4010,
        "CASE WHEN n <= 3000 THEN 'Delivered' WHEN n <= 4000 THEN 'Exhausted' ELSE 'Queued' END",
        "CASE WHEN n > 4000 THEN now() END",
    );
    sql(&env, "ANALYZE webhook_request_logs");
    let exact = env
        .store
        .run_sync(|c| deliveries::counts(c, deliveries::CountLimits::default()))
        .unwrap();
    assert_eq!(
        (
            exact.delivered,
            exact.exhausted,
            exact.queued,
            exact.estimated
        ),
        (3000, 1000, 10, false)
    );
    // The same table as if it were large: estimated, and pending capped.
    let limits = deliveries::CountLimits {
        exact_below: 1.0,
        pending_cap: 5,
    };
    let estimated = env
        .store
        .run_sync(|c| deliveries::counts(c, limits))
        .unwrap();
    assert!(estimated.estimated);
    assert!(
        (estimated.delivered - 3000).abs() <= 150 && (estimated.exhausted - 1000).abs() <= 50,
        "{estimated:?}"
    );
    assert_eq!(estimated.queued, 5, "a lower bound at the cap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_shows_its_progress_on_a_terminal_and_prints_only_its_result_to_a_script() {
    let env = TestEnv::new();
    env.add_quiet_webhook("orders", "on_submit");
    let ids: Vec<i64> = (0..6).map(|i| emit(&env, &format!("SO-{i}"))).collect();
    for id in &ids[..3] {
        age_row(&env, *id, "Delivered", 40, 40, 1);
    }
    let args = ["prune", "--older-than", "30d", "--batch-size", "1"];
    let (code, shown) = env.at_a_terminal("no question is asked", "", &args);
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("so far ("), "a progress line: {shown:?}");
    assert!(
        shown.contains("pruned 3 delivery rows and 3 attempts"),
        "{shown:?}"
    );

    for id in &ids[3..] {
        age_row(&env, *id, "Delivered", 40, 40, 1);
    }
    let script = env.cli(&args).ok("prune");
    assert!(
        script.stderr.is_empty(),
        "no progress without a terminal: {script}"
    );
    assert!(
        script.stdout.starts_with("pruned 3 delivery rows"),
        "{script}"
    );
}
