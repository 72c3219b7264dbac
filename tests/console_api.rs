//! The management API (`hookfleet console`, `/api/v1`) against a real
//! fleet: every route's answer, refused input (a clear JSON error and
//! nothing written), tokens (none, wrong, read-only, full), the actions
//! ending in real deliveries, and the pages' login, CSRF and escaping.

use std::time::Duration;

use serde_json::Value;

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_core::domain::RetrySchedule;
use hookfleet_testkit::{
    csrf_of, spec, until, ConsoleServer, Receiver, Reply, TestEnv, ENTITY, FULL_TOKEN, READ_TOKEN,
};

/// A retry an hour away: a Failed row stays Failed for the test.
fn slow_schedule() -> RetrySchedule {
    RetrySchedule::parse("1h").expect("schedule")
}

/// A fleet with webhook `orders` to `receiver`, and `n` events emitted
/// (SO-1..SO-n), delivered or failed by a worker per the receiver's replies.
async fn fleet_with(env: &TestEnv, receiver: &Receiver, names: &[&str]) -> Vec<i64> {
    let mut s = spec("orders", ENTITY, "on_submit", &receiver.url("/hook"));
    s.headers.push(hookfleet_core::domain::Header {
        key: "Authorization".into(),
        value: "Bearer do-not-show-me".into(),
    });
    env.add_webhook(&s);
    let mut ids = Vec::new();
    for name in names {
        ids.push(env.submit(name).await.deliveries[0].id);
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_reads_what_the_cli_reads_and_filters_deliveries() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    receiver.reply_next([Reply::status(500)]);
    let ids = fleet_with(&env, &receiver, &["SO-1", "SO-2", "SO-3"]).await;
    let worker = env.start_worker(4, slow_schedule());
    let rows = env
        .until_rows("all three attempted", |rows| {
            rows.iter().all(|r| r.status != DeliveryStatus::Queued)
        })
        .await;
    worker.stop().await;
    let failed: Vec<i64> = rows
        .iter()
        .filter(|r| r.status == DeliveryStatus::Failed)
        .map(|r| r.id)
        .collect();
    assert_eq!(failed.len(), 1, "one 500, two 2xx");
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), Some(READ_TOKEN)).await;
    let t = Some(READ_TOKEN);

    let stats = console.get("/api/v1/stats", t).await;
    assert_eq!(stats.status, 200, "{}", stats.body);
    let stats = stats.json();
    assert_eq!(stats["rows"]["Delivered"], 2);
    assert_eq!(stats["rows"]["Failed"], 1);
    assert_eq!(stats["queues"]["default"], 0);

    let hooks = console.get("/api/v1/webhooks", t).await.json();
    assert_eq!(hooks[0]["name"], "orders");
    assert_eq!(hooks[0]["attempts_24h"], 3, "health is there: {hooks}");
    assert!(
        !hooks.to_string().contains("do-not-show-me"),
        "a header value was shown: {hooks}"
    );
    let one = console.get("/api/v1/webhooks/orders", t).await;
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["signed"], false);
    let missing = console.get("/api/v1/webhooks/nope", t).await;
    assert_eq!(missing.status, 404);
    assert!(missing.json()["error"]
        .as_str()
        .unwrap()
        .contains("not found"));

    let list = |q: &'static str| {
        let console = &console;
        async move {
            let a = console.get(&format!("/api/v1/deliveries{q}"), t).await;
            assert_eq!(a.status, 200, "{q}: {}", a.body);
            let v = a.json();
            let ids: Vec<i64> = v["deliveries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["id"].as_i64().unwrap())
                .collect();
            (ids, v["next_before"].clone())
        }
    };
    let (all, _) = list("").await;
    assert_eq!(all, vec![ids[2], ids[1], ids[0]], "newest first");
    assert_eq!(list("?status=Failed").await.0, failed);
    assert_eq!(list("?document=SO-2").await.0, vec![ids[1]]);
    let event_id = env.row(ids[2]).event_id;
    let by_event = console
        .get(&format!("/api/v1/deliveries?event_id={event_id}"), t)
        .await
        .json();
    assert_eq!(by_event["deliveries"][0]["id"], ids[2], "{by_event}");
    assert_eq!(by_event["deliveries"].as_array().unwrap().len(), 1);
    assert_eq!(list("?webhook=orders&event=on_submit").await.0.len(), 3);
    assert_eq!(list("?event=on_cancel").await.0.len(), 0);
    assert_eq!(list("?since=1h").await.0.len(), 3);
    assert_eq!(list("?until=1h").await.0.len(), 0);
    let (page1, next) = list("?limit=2").await;
    assert_eq!(page1, vec![ids[2], ids[1]]);
    assert_eq!(next, Value::from(ids[1]), "a full page names the next");
    let (page2, next) = list(Box::leak(
        format!("?limit=2&before={}", ids[1]).into_boxed_str(),
    ))
    .await;
    assert_eq!(page2, vec![ids[0]]);
    assert_eq!(next, Value::Null, "the last page");

    let show = console
        .get(&format!("/api/v1/deliveries/{}", failed[0]), t)
        .await;
    assert_eq!(show.status, 200);
    let show = show.json();
    assert_eq!(show["status"], "Failed");
    assert_eq!(show["attempt_log"][0]["response_code"], 500);
    assert!(!show.to_string().contains("do-not-show-me"), "{show}");

    let activity = console.get("/api/v1/activity?minutes=5", t).await.json();
    let minutes = activity.as_array().unwrap();
    assert_eq!(minutes.len(), 5);
    let ok: i64 = minutes.iter().map(|m| m["ok"].as_i64().unwrap()).sum();
    let bad: i64 = minutes.iter().map(|m| m["failed"].as_i64().unwrap()).sum();
    assert_eq!((ok, bad), (2, 1), "{activity}");

    let ready = console.get("/readyz", None).await;
    assert_eq!(
        ready.status, 200,
        "Postgres and Redis answer: {}",
        ready.body
    );
    let doc: Value = console.get("/api/v1/openapi.json", None).await.json();
    assert!(doc["paths"]["/api/v1/deliveries"]["get"].is_object());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_input_gets_a_clear_json_error_and_writes_nothing() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    let ids = fleet_with(&env, &receiver, &["SO-1"]).await;
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), None).await;
    let t = Some(FULL_TOKEN);
    let before = env.rows();

    for (path, needle) in [
        ("/api/v1/deliveries?limit=0", "limit is 1 to 200"),
        ("/api/v1/deliveries?limit=201", "limit is 1 to 200"),
        ("/api/v1/deliveries?limit=abc", "limit"),
        ("/api/v1/deliveries?status=Lost", "unknown status"),
        (
            "/api/v1/deliveries?since=yesterday",
            "neither an RFC 3339 time",
        ),
        ("/api/v1/deliveries?colour=red", "unknown field"),
        ("/api/v1/deliveries/abc", "not a delivery id"),
        ("/api/v1/deliveries/-4", "not a delivery id"),
        ("/api/v1/activity?minutes=0", "minutes is 1 to 1440"),
        ("/api/v1/dead-letters?limit=5000", "limit is 1 to 200"),
    ] {
        let a = console.get(path, t).await;
        assert_eq!(a.status, 400, "{path}: {}", a.body);
        let e = a.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(e.contains(needle), "{path}: {e}");
    }
    for (path, body, status, needle) in [
        (
            "/api/v1/webhooks/orders/pause",
            "{\"reasn\": 1}",
            400,
            "unknown field",
        ),
        ("/api/v1/webhooks/orders/pause", "{not json", 400, "body"),
        (
            "/api/v1/webhooks/orders/pause",
            "{\"reason\": \"\\u0007\"}",
            409,
            "printable",
        ),
        ("/api/v1/webhooks/nope/pause", "", 404, "not found"),
        (
            "/api/v1/deliveries/retry",
            "{\"webhook\": \"orders\"}",
            400,
            "needs webhook, status",
        ),
        (
            "/api/v1/deliveries/retry",
            "{\"webhook\": \"orders\", \"status\": \"Queued\", \"since\": \"1h\"}",
            400,
            "Failed or Exhausted",
        ),
        (
            "/api/v1/deliveries/retry",
            "{\"webhook\": \"orders\", \"status\": \"Failed\", \"since\": \"soon\"}",
            400,
            "since",
        ),
        ("/api/v1/deliveries/999999/retry", "", 404, "not found"),
        (
            "/api/v1/dead-letters/nope/requeue",
            "",
            404,
            "no dead letter",
        ),
        (
            "/api/v1/webhooks/orders/rotate-finish",
            "",
            409,
            "no secret rotation",
        ),
    ] {
        let a = console.post(path, t, body).await;
        assert_eq!(a.status, status, "{path} {body}: {}", a.body);
        let e = a.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(e.contains(needle), "{path} {body}: {e}");
    }
    // A Queued row cannot be replayed: its first attempt is on its way.
    let a = console
        .post(&format!("/api/v1/deliveries/{}/retry", ids[0]), t, "")
        .await;
    assert_eq!(a.status, 409, "{}", a.body);
    let big = format!(
        "{{\"reason\": \"{}\"}}",
        "x".repeat(hookfleet_console::MAX_BODY_BYTES)
    );
    let a = console.post("/api/v1/webhooks/orders/pause", t, &big).await;
    assert_eq!(a.status, 413, "a body over the limit: {}", a.body);

    let after = env.rows();
    assert_eq!(before.len(), after.len());
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            (b.status, b.attempts, b.next_retry),
            (a.status, a.attempts, a.next_retry)
        );
    }
    let hook = &env.stored_webhooks()[0];
    assert!(hook.paused_at.is_none(), "a refused pause paused");
    let unknown = console.get("/api/v1/nothing-here", t).await;
    assert_eq!(unknown.status, 404);
    assert!(unknown.json()["error"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_decide_who_may_read_and_who_may_act() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    fleet_with(&env, &receiver, &["SO-1"]).await;
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), Some(READ_TOKEN)).await;

    for token in [None, Some("wrong-token-0123456789"), Some("")] {
        let a = console.get("/api/v1/stats", token).await;
        assert_eq!(a.status, 401, "{token:?}: {}", a.body);
        assert!(a.json()["error"].as_str().unwrap().contains("bearer token"));
        let a = console
            .post("/api/v1/webhooks/orders/pause", token, "")
            .await;
        assert_eq!(a.status, 401, "{token:?}");
    }
    assert_eq!(
        console.get("/api/v1/stats", Some(READ_TOKEN)).await.status,
        200
    );
    let a = console
        .post("/api/v1/webhooks/orders/pause", Some(READ_TOKEN), "")
        .await;
    assert_eq!(a.status, 403, "{}", a.body);
    assert!(a.json()["error"].as_str().unwrap().contains("read-only"));
    assert!(
        env.stored_webhooks()[0].paused_at.is_none(),
        "a read-only token paused"
    );
    // A dry run is a read: the read-only token may count.
    let a = console
        .post(
            "/api/v1/deliveries/retry",
            Some(READ_TOKEN),
            r#"{"webhook": "orders", "status": "Failed", "since": "1h", "dry_run": true}"#,
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["count"], 0);

    let a = console
        .post(
            "/api/v1/webhooks/orders/pause",
            Some(FULL_TOKEN),
            r#"{"reason": "receiver maintenance"}"#,
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        env.stored_webhooks()[0].paused_reason.as_deref(),
        Some("receiver maintenance")
    );

    // Exposure: beyond loopback a token is required, and a short one is refused.
    let any: std::net::SocketAddr = "0.0.0.0:0".parse().unwrap();
    assert!(hookfleet_console::check_exposure(any, None, None).is_err());
    assert!(hookfleet_console::check_exposure(any, Some("short"), None).is_err());
    assert!(hookfleet_console::check_exposure(any, None, Some(READ_TOKEN)).is_ok());
    let local: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    assert!(hookfleet_console::check_exposure(local, None, None).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_through_the_api_end_in_real_deliveries() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    receiver.reply_next([Reply::status(503), Reply::status(503)]);
    let ids = fleet_with(&env, &receiver, &["SO-1", "SO-2"]).await;
    let worker = env.start_worker(4, slow_schedule());
    env.until_rows("both failed", |rows| {
        rows.iter().all(|r| r.status == DeliveryStatus::Failed)
    })
    .await;
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), None).await;
    let t = Some(FULL_TOKEN);

    // One by id: Failed → due now → Delivered by the running worker.
    let a = console
        .post(&format!("/api/v1/deliveries/{}/retry", ids[0]), t, "")
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["previous_status"], "Failed");
    env.until_row(ids[0], |r| r.status == DeliveryStatus::Delivered)
        .await;
    // A Delivered row needs force.
    let a = console
        .post(&format!("/api/v1/deliveries/{}/retry", ids[0]), t, "")
        .await;
    assert_eq!(a.status, 409, "{}", a.body);

    // Bulk: a dry run counts without touching; the real one replays.
    let bulk = r#"{"webhook": "orders", "status": "Failed", "since": "1h", "dry_run": true}"#;
    let a = console.post("/api/v1/deliveries/retry", t, bulk).await;
    assert_eq!(a.json()["count"], 1, "{}", a.body);
    assert_eq!(env.row(ids[1]).status, DeliveryStatus::Failed);
    let a = console
        .post(
            "/api/v1/deliveries/retry",
            t,
            &bulk.replace("true", "false"),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["count"], 1);
    env.until_row(ids[1], |r| r.status == DeliveryStatus::Delivered)
        .await;

    // Pause holds a new event; resume sends it.
    assert_eq!(
        console
            .post("/api/v1/webhooks/orders/pause", t, "")
            .await
            .status,
        200
    );
    let held = env.submit("SO-3").await.deliveries[0].id;
    let seen = receiver.count();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(receiver.count(), seen, "a paused webhook was sent to");
    let a = console.post("/api/v1/webhooks/orders/resume", t, "").await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["resumed"], true);
    env.until_row(held, |r| r.status == DeliveryStatus::Delivered)
        .await;

    // Disable and enable.
    let a = console.post("/api/v1/webhooks/orders/disable", t, "").await;
    assert_eq!(a.json()["enabled"], false, "{}", a.body);
    assert!(!env.stored_webhooks()[0].enabled);
    console.post("/api/v1/webhooks/orders/enable", t, "").await;
    assert!(env.stored_webhooks()[0].enabled);

    // Workers: the running one is listed, alive, on its queue.
    let workers = console.get("/api/v1/workers", t).await.json();
    let w = &workers.as_array().unwrap()[0];
    assert_eq!(w["alive"], true, "{workers}");
    assert_eq!(w["queues"][0], "default");

    // Dead letters: a job that does not parse is filed; requeue and purge.
    env.push_jobs("default", ["not a job", "nor this"]);
    until("the bad jobs are dead-lettered", || {
        env.llen(&env.queue.keys().dead()) == 2
    })
    .await;
    let letters = console.get("/api/v1/dead-letters", t).await.json();
    let id = letters[0]["id"].as_str().unwrap().to_string();
    assert!(letters[0]["reason"].is_string());
    let one = console.get(&format!("/api/v1/dead-letters/{id}"), t).await;
    assert_eq!(one.json()["job"], letters[0]["job"], "{}", one.body);
    assert_eq!(
        console.get("/api/v1/dead-letters/nope", t).await.status,
        404
    );
    let a = console
        .post(&format!("/api/v1/dead-letters/{id}/purge"), t, "")
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let left = console.get("/api/v1/dead-letters", t).await.json();
    assert_eq!(left.as_array().unwrap().len(), 1, "{left}");
    // Requeue (with no worker to take it again): back on its queue.
    worker.stop().await;
    let other = left[0]["id"].as_str().unwrap().to_string();
    let a = console
        .post(&format!("/api/v1/dead-letters/{other}/requeue"), t, "")
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["queue"], "default");
    assert_eq!(env.queue_depth("default"), 1);
    assert_eq!(
        console.get("/api/v1/dead-letters", t).await.json(),
        Value::Array(vec![])
    );
    // All at once: file two, requeue all; file them again, purge all.
    let dead_key = env.queue.keys().dead();
    let worker = env.start_worker(2, slow_schedule());
    env.push_jobs("default", ["bad 1", "bad 2"]);
    until("three dead letters", || env.llen(&dead_key) == 3).await;
    worker.stop().await;
    let a = console
        .post("/api/v1/dead-letters/requeue-all", t, "")
        .await;
    assert_eq!(a.json()["requeued"], 3, "{}", a.body);
    assert_eq!(env.llen(&dead_key), 0);
    let worker = env.start_worker(2, slow_schedule());
    until("three dead letters again", || env.llen(&dead_key) == 3).await;
    worker.stop().await;
    let a = console
        .post("/api/v1/dead-letters/purge-all", Some(READ_TOKEN), "")
        .await;
    assert_eq!(a.status, 401, "this console has no read token: {}", a.body);
    let a = console.post("/api/v1/dead-letters/purge-all", t, "").await;
    assert_eq!(a.json()["purged"], 3, "{}", a.body);
    assert_eq!(env.llen(&dead_key), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_need_a_login_and_a_csrf_token_and_escape_what_they_show() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    receiver.reply_next([Reply::status(500)]);
    let ids = fleet_with(&env, &receiver, &["<script>alert(1)</script>"]).await;
    let worker = env.start_worker(2, slow_schedule());
    env.until_row(ids[0], |r| r.status == DeliveryStatus::Failed)
        .await;
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), Some(READ_TOKEN)).await;

    let anon = console.page("/", None).await;
    assert_eq!(anon.status, 401, "no session: the login page");
    assert!(anon.body.contains("name=\"token\""));
    let wrong = console
        .form("/login", None, &[("token", "not-the-token-at-all")])
        .await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());
    let forged = console
        .page("/", Some("hookfleet_console=full.99999999999.AAAA.AAAA"))
        .await;
    assert_eq!(forged.status, 401, "a forged session");

    let cookie = console.login(FULL_TOKEN).await;
    let page = console
        .page(&format!("/deliveries/{}", ids[0]), Some(&cookie))
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("&lt;script&gt;alert(1)&lt;"),
        "{}",
        page.body
    );
    assert!(
        !page.body.contains("<script>alert(1)"),
        "a value was not escaped"
    );
    assert!(
        !page.body.contains("do-not-show-me"),
        "a header value was shown"
    );
    assert!(page.header("content-security-policy").is_some());
    let csrf = csrf_of(&page.body);

    // A POST without the CSRF token, or with another session's, is refused.
    let path = format!("/deliveries/{}/retry", ids[0]);
    let a = console.form(&path, Some(&cookie), &[]).await;
    assert_eq!(a.status, 403, "{}", a.body);
    let other = console.login(FULL_TOKEN).await;
    let a = console.form(&path, Some(&other), &[("csrf", &csrf)]).await;
    assert_eq!(a.status, 403, "another session's token");
    let a = console.form(&path, None, &[("csrf", &csrf)]).await;
    assert_eq!(a.status, 401, "no session");
    assert_eq!(env.row(ids[0]).attempts, 1, "a refused Retry replayed");

    // Read-only: the page shows no Retry, and the action is refused.
    let reader = console.login(READ_TOKEN).await;
    let page = console
        .page(&format!("/deliveries/{}", ids[0]), Some(&reader))
        .await;
    assert!(
        !page.body.contains(">Retry<"),
        "a read-only page offers Retry"
    );
    let a = console
        .form(&path, Some(&reader), &[("csrf", &csrf_of(&page.body))])
        .await;
    assert_eq!(a.status, 403);

    // With the token: Retry replays, and the worker delivers.
    let a = console.form(&path, Some(&cookie), &[("csrf", &csrf)]).await;
    assert_eq!(a.status, 303, "{}", a.body);
    env.until_row(ids[0], |r| r.status == DeliveryStatus::Delivered)
        .await;
    let after = console
        .page(a.header("location").unwrap(), Some(&cookie))
        .await;
    assert!(
        after.body.contains("Replayed"),
        "the page says what happened"
    );

    // Search by document name finds it.
    let found = console
        .page(
            "/deliveries?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
            Some(&cookie),
        )
        .await;
    assert!(
        found.body.contains(&format!("/deliveries/{}", ids[0])),
        "{}",
        found.body
    );
    let event_id = env.row(ids[0]).event_id;
    let found = console
        .page(&format!("/deliveries?q={event_id}"), Some(&cookie))
        .await;
    assert!(
        found.body.contains(&format!("/deliveries/{}", ids[0])),
        "by event id: {}",
        found.body
    );
    let none = console.page("/deliveries?q=SO-none", Some(&cookie)).await;
    assert!(none.body.contains("No deliveries match"), "{}", none.body);
    for p in [
        "/",
        "/webhooks",
        "/webhooks/orders",
        "/deliveries",
        "/dead-letters",
    ] {
        let a = console.page(p, Some(&cookie)).await;
        assert_eq!(a.status, 200, "{p}: {}", a.body);
    }
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_defined_through_the_api_as_through_the_cli() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), Some(READ_TOKEN)).await;
    let t = Some(FULL_TOKEN);
    let def = serde_json::json!({
        "name": "orders", "entity_type": ENTITY, "event": "on_submit",
        "url": receiver.url("/orders"), "secret": "first-secret-value",
        "headers": [{"key": "Authorization", "value": "Bearer keep-this-hidden"}],
        "condition": "doc.grand_total > 0", "max_concurrency": 8, "rate_limit": "50/s",
    });
    let a = console
        .post("/api/v1/webhooks", Some(READ_TOKEN), &def.to_string())
        .await;
    assert_eq!(a.status, 403, "read-only: {}", a.body);
    let a = console.post("/api/v1/webhooks", t, &def.to_string()).await;
    assert_eq!(a.status, 201, "{}", a.body);
    let w = a.json();
    assert_eq!(
        (w["signed"].clone(), w["rate_limit"].clone()),
        (Value::Bool(true), Value::from("50/s"))
    );
    assert!(
        !a.body.contains("first-secret-value") && !a.body.contains("keep-this-hidden"),
        "{}",
        a.body
    );
    let a = console.post("/api/v1/webhooks", t, &def.to_string()).await;
    assert_eq!(a.status, 409, "the name is taken: {}", a.body);

    // Refused definitions: the reason, and nothing written.
    for (change, needle) in [
        (
            serde_json::json!({"url": "http://169.254.169.254/latest"}),
            "internal address",
        ),
        (
            serde_json::json!({"body_template": "{{ doc.name "}),
            "template",
        ),
        (serde_json::json!({"timeout": "5 weeks"}), "timeout"),
        (serde_json::json!({"max_retries": 500}), "max retries"),
        (serde_json::json!({"colour": "red"}), "unknown key"),
        (serde_json::json!({"headers": [{"key": "X"}]}), "headers"),
        (serde_json::json!({"rate_limit": "fast"}), "rate_limit"),
    ] {
        let mut bad = def.clone();
        bad["name"] = "refused".into();
        for (k, v) in change.as_object().unwrap() {
            bad[k] = v.clone();
        }
        let a = console.post("/api/v1/webhooks", t, &bad.to_string()).await;
        assert_eq!(a.status, 400, "{change}: {}", a.body);
        let e = a.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_lowercase();
        assert!(e.contains(needle), "{change}: {e}");
        let a = console
            .patch("/api/v1/webhooks/orders", t, &change.to_string())
            .await;
        assert_eq!(a.status, 400, "update {change}: {}", a.body);
    }
    let a = console
        .post("/api/v1/webhooks", t, r#"{"name": "x"}"#)
        .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(
        env.stored_webhooks().len(),
        1,
        "a refused definition was stored"
    );
    let stored = &env.stored_webhooks()[0];
    assert_eq!(stored.condition.as_deref(), Some("doc.grand_total > 0"));

    // A definition read and sent back keeps its hidden header values.
    let shown = console.get("/api/v1/webhooks/orders", t).await.json();
    assert_eq!(shown["headers"][0]["value"], "[hidden]", "{shown}");
    let back = serde_json::json!({"headers": shown["headers"].clone()});
    let a = console
        .patch("/api/v1/webhooks/orders", t, &back.to_string())
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let spec = env.stored_webhooks()[0].to_spec().unwrap();
    assert!(
        spec.headers
            .iter()
            .any(|h| h.value == "Bearer keep-this-hidden"),
        "{:?}",
        spec.headers.iter().map(|h| &h.key).collect::<Vec<_>>()
    );
    let a = console
        .patch(
            "/api/v1/webhooks/orders",
            t,
            r#"{"headers": [{"key": "X-New", "value": "[hidden]"}]}"#,
        )
        .await;
    assert_eq!(
        a.status, 400,
        "[hidden] for a header never stored: {}",
        a.body
    );

    // The whole view sent back as it was read (its read-only keys, health
    // and times included) is accepted, and changes nothing: not even
    // updated_at.
    let shown = console.get("/api/v1/webhooks/orders", t).await;
    let a = console
        .patch("/api/v1/webhooks/orders", t, &shown.body)
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["rotation_started"], false, "{}", a.body);
    let again = console.get("/api/v1/webhooks/orders", t).await;
    assert_eq!(again.json(), shown.json(), "a read sent back changed it");
    // A field under both of its keys is refused, saying which.
    let a = console
        .patch(
            "/api/v1/webhooks/orders",
            t,
            r#"{"url": "https://a.example/x", "request_url": "https://b.example/y"}"#,
        )
        .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body.contains("url is given twice"), "{}", a.body);

    // Changes: a new secret starts a rotation; null clears; lists replace.
    let a = console
        .patch(
            "/api/v1/webhooks/orders",
            t,
            r#"{"secret": "second-secret-value", "condition": null, "max_concurrency": null, "headers": []}"#,
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let w = a.json();
    assert_eq!(w["rotation_started"], true, "{w}");
    assert!(
        w["condition"].is_null() && w["max_concurrency"].is_null(),
        "{w}"
    );
    assert_eq!(w["headers"], Value::Array(vec![]));
    assert!(env.stored_webhooks()[0].rotating(chrono::Utc::now()));
    let a = console
        .post("/api/v1/webhooks/orders/rotate-finish", t, "")
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let a = console
        .patch("/api/v1/webhooks/orders", t, r#"{"name": "orders-v2"}"#)
        .await;
    assert_eq!(a.json()["name"], "orders-v2", "{}", a.body);

    // It delivers as defined, signed with the new secret.
    receiver.verify_with(&["second-secret-value"]);
    let id = env.submit("SO-1").await.deliveries[0].id;
    let worker = env.start_worker(2, TestEnv::fast_schedule());
    env.until_row(id, |r| r.status == DeliveryStatus::Delivered)
        .await;
    assert!(receiver.requests()[0].signatures_verified());
    worker.stop().await;

    // Preview: the request a document would make, nothing sent. It shows
    // the body template's text and spends CPU: the full token's.
    let sent = receiver.count();
    let doc = r#"{"doctype": "Sales Order", "name": "SO-9", "grand_total": 0}"#;
    let a = console
        .post("/api/v1/webhooks/orders-v2/preview", Some(READ_TOKEN), doc)
        .await;
    assert_eq!(a.status, 403, "a read-only token previews: {}", a.body);
    let a = console
        .post("/api/v1/webhooks/orders-v2/preview", t, doc)
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let p = a.json();
    assert_eq!(p["meets_condition"], true, "the condition was cleared: {p}");
    assert!(p["body"].as_str().unwrap().contains("SO-9"), "{p}");
    let a = console
        .post("/api/v1/webhooks/orders-v2/preview", t, "[1]")
        .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(receiver.count(), sent, "a preview sent something");

    let a = console.delete("/api/v1/webhooks/orders-v2", t).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(
        console.get("/api/v1/webhooks/orders-v2", t).await.status,
        404
    );
    assert_eq!(
        console.delete("/api/v1/webhooks/orders-v2", t).await.status,
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_browser_does_for_another_site_is_refused() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    fleet_with(&env, &receiver, &["SO-1"]).await;

    // An open console (no token): only a loopback Host, and no other origin.
    let open = ConsoleServer::start(&env, None, None).await;
    let a = open.get("/api/v1/stats", None).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let rebound = open
        .send_with(
            "GET",
            "/api/v1/stats",
            &[("host", "attacker.example:8490")],
            "",
        )
        .await;
    assert_eq!(rebound.status, 421, "a rebound host name: {}", rebound.body);
    let cross = open
        .send_with(
            "POST",
            "/api/v1/webhooks/orders/disable",
            &[("origin", "https://attacker.example")],
            "",
        )
        .await;
    assert_eq!(cross.status, 403, "{}", cross.body);
    assert!(
        env.stored_webhooks()[0].enabled,
        "a cross-site POST disabled it"
    );
    let same = format!("http://{}", open.addr);
    let a = open
        .send_with(
            "POST",
            "/api/v1/webhooks/orders/disable",
            &[("origin", &same)],
            "",
        )
        .await;
    assert_eq!(a.status, 200, "the console's own origin: {}", a.body);
    // Behind a proxy that rewrites Host: the origin matches X-Forwarded-Host.
    let a = open
        .send_with(
            "POST",
            "/api/v1/webhooks/orders/enable",
            &[
                ("origin", "https://console.example"),
                ("x-forwarded-host", "console.example"),
            ],
            "",
        )
        .await;
    assert_eq!(a.status, 200, "the proxy's origin: {}", a.body);
    drop(open);

    // With tokens: a read-only viewer sees a receiver's host, not its URL.
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), Some(READ_TOKEN)).await;
    let hooks = console
        .get("/api/v1/webhooks", Some(READ_TOKEN))
        .await
        .json();
    let url = hooks[0]["request_url"].as_str().unwrap().to_string();
    assert!(url.ends_with("/…") && !url.contains("/hook"), "{url}");
    let full = console
        .get("/api/v1/webhooks", Some(FULL_TOKEN))
        .await
        .json();
    assert!(full[0]["request_url"].as_str().unwrap().ends_with("/hook"));

    // A notice in a link from elsewhere is not shown; the console's own is.
    let cookie = console.login(FULL_TOKEN).await;
    let page = console
        .page(
            "/webhooks?done=Session%20expired%2C%20log%20in%20at%20evil.example",
            Some(&cookie),
        )
        .await;
    assert!(
        !page.body.contains("Session expired"),
        "an unsigned notice was shown"
    );
    let page = console.page("/webhooks", Some(&cookie)).await;
    let csrf = hookfleet_testkit::csrf_of(&page.body);
    let a = console
        .form("/webhooks/orders/pause", Some(&cookie), &[("csrf", &csrf)])
        .await;
    assert_eq!(a.status, 303);
    let back = console
        .page(a.header("location").unwrap(), Some(&cookie))
        .await;
    assert!(back.body.contains("Paused orders."), "{}", back.body);

    // Behind a TLS proxy the session cookie is Secure; on plain HTTP not.
    let login = |proto: Option<&'static str>| {
        let console = &console;
        async move {
            let mut headers = vec![("content-type", "application/x-www-form-urlencoded")];
            if let Some(p) = proto {
                headers.push(("x-forwarded-proto", p));
            }
            let a = console
                .send_with("POST", "/login", &headers, &format!("token={FULL_TOKEN}"))
                .await;
            a.header("set-cookie").unwrap_or_default().to_string()
        }
    };
    assert!(login(Some("https")).await.contains("; Secure"));
    assert!(!login(None).await.contains("Secure"));

    // The same value for both tokens is refused at start.
    let local: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    assert!(hookfleet_console::check_exposure(local, Some(FULL_TOKEN), Some(FULL_TOKEN)).is_err());
}

/// Webhook `orders` paused with three deliveries held (a worker running),
/// then a resume that committed its unpause and stopped before releasing
/// anything: the held rows' ids, and the worker.
async fn resume_cut_short(
    env: &TestEnv,
    receiver: &Receiver,
) -> (Vec<i64>, hookfleet_testkit::WorkerHandle) {
    fleet_with(env, receiver, &[]).await;
    env.store
        .run_sync(|c| hookfleet_core::store::webhooks::pause(c, "orders", "test"))
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(env.submit(&format!("SO-{n}")).await.deliveries[0].id);
    }
    let worker = env.start_worker(2, slow_schedule());
    let held = Some(hookfleet_core::store::deliveries::held_until());
    env.until_rows("all held", |rows| rows.iter().all(|r| r.next_retry == held))
        .await;
    env.store
        .run_sync(|c| hookfleet_core::store::webhooks::resume(c, "orders"))
        .unwrap();
    (ids, worker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_cut_short_is_finished_by_resuming_again() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    let (ids, worker) = resume_cut_short(&env, &receiver).await;
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), None).await;
    let shown = console
        .get(&format!("/api/v1/deliveries/{}", ids[0]), Some(FULL_TOKEN))
        .await
        .json();
    assert_eq!(shown["held"], true, "{shown}");
    let a = console
        .post("/api/v1/webhooks/orders/resume", Some(FULL_TOKEN), "")
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["released"], 3, "{}", a.body);
    for id in ids {
        env.until_row(id, |r| r.status == DeliveryStatus::Delivered)
            .await;
    }
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_cut_short_is_finished_by_the_sweeper() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    let (ids, worker) = resume_cut_short(&env, &receiver).await;
    let report = env
        .sweeper(100, Duration::from_secs(600))
        .tick_and_log(Duration::from_secs(10))
        .await
        .expect("a tick");
    assert_eq!(report.released, 3, "{report:?}");
    assert_eq!(report.enqueued, 3, "released rows go out in the same tick");
    for id in ids {
        env.until_row(id, |r| r.status == DeliveryStatus::Delivered)
            .await;
    }
    let again = env
        .sweeper(100, Duration::from_secs(600))
        .tick_and_log(Duration::from_secs(10))
        .await
        .expect("a tick");
    assert_eq!(again.released, 0, "the webhook is no longer marked");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frappe_webhooks_import_through_the_api_as_through_the_cli() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), Some(READ_TOKEN)).await;
    let site = serde_json::json!([
        {
            "doctype": "Webhook", "name": "Orders JSON", "webhook_doctype": "Sales Order",
            "webhook_docevent": "on_submit", "request_url": receiver.url("/json"),
            "request_structure": "JSON", "webhook_json": "{\"n\": \"{{ doc.name }}\"}",
            "enable_security": 1, "webhook_secret": "import-secret"
        },
        {
            "doctype": "Webhook", "name": "Masked", "webhook_doctype": "Sales Order",
            "webhook_docevent": "on_cancel", "request_url": receiver.url("/masked"),
            "request_structure": "JSON", "enable_security": 1, "webhook_secret": "*************"
        }
    ]);
    // A dry run compares guesses with the stored definitions and renders
    // templates: not a read-only token's to ask.
    let a = console
        .post(
            "/api/v1/imports/frappe?dry_run=true",
            Some(READ_TOKEN),
            &site.to_string(),
        )
        .await;
    assert_eq!(a.status, 403, "{}", a.body);
    let a = console
        .post(
            "/api/v1/imports/frappe?dry_run=true",
            Some(FULL_TOKEN),
            &site.to_string(),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let r = a.json();
    assert_eq!(r["outcomes"][0]["action"], "would_create", "{r}");
    assert_eq!(r["outcomes"][1]["action"], "refused", "{r}");
    assert!(
        r["outcomes"][1]["reason"]
            .as_str()
            .unwrap()
            .contains("masked"),
        "{r}"
    );
    assert!(env.stored_webhooks().is_empty(), "a dry run wrote");
    let a = console
        .post(
            "/api/v1/imports/frappe",
            Some(READ_TOKEN),
            &site.to_string(),
        )
        .await;
    assert_eq!(a.status, 403, "{}", a.body);

    let a = console
        .post(
            "/api/v1/imports/frappe?atomic=true",
            Some(FULL_TOKEN),
            &site.to_string(),
        )
        .await;
    assert_eq!(a.json()["held_back"], true, "{}", a.body);
    assert!(env.stored_webhooks().is_empty(), "atomic: nothing written");
    let a = console
        .post(
            "/api/v1/imports/frappe",
            Some(FULL_TOKEN),
            &site.to_string(),
        )
        .await;
    let r = a.json();
    assert_eq!(
        (r["outcomes"][0]["action"].clone(), r["refused"].clone()),
        (Value::from("created"), Value::from(1)),
        "{r}"
    );
    assert!(!a.body.contains("import-secret"));
    assert_eq!(env.stored_webhooks()[0].name, "Orders JSON");
    let a = console
        .post(
            "/api/v1/imports/frappe",
            Some(FULL_TOKEN),
            "{\"doctype\": \"Nope\"",
        )
        .await;
    assert_eq!(a.status, 400, "{}", a.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_binary_logs_every_write_with_its_token_and_client_and_never_a_token() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    fleet_with(&env, &receiver, &[]).await;
    let port = hookfleet_testkit::free_port();
    let mut cmd = env.command("hookfleet");
    cmd.args(["console", "--listen", &format!("127.0.0.1:{port}")])
        .env("HOOKFLEET_CONSOLE_TOKEN", FULL_TOKEN)
        .env("HOOKFLEET_CONSOLE_READ_TOKEN", READ_TOKEN);
    let mut console = hookfleet_testkit::FleetProcess::spawn_logged(cmd);
    let base = format!("http://127.0.0.1:{port}");
    until("the console listens", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await;
    let bearer = format!("authorization: Bearer {FULL_TOKEN}");
    let (code, body) = hookfleet_testkit::curl(&[
        "-X",
        "POST",
        "-H",
        &bearer,
        "-H",
        "x-forwarded-for: 203.0.113.7",
        &format!("{base}/api/v1/webhooks/orders/pause"),
    ]);
    assert_eq!(code, 200, "{body}");
    let (code, _) = hookfleet_testkit::curl(&[
        "-X",
        "POST",
        "-H",
        "authorization: Bearer wrong-token-0123456789",
        &format!("{base}/api/v1/webhooks/orders/resume"),
    ]);
    assert_eq!(code, 401);
    // A write whose caller hangs up before the answer: an import of many
    // documents, the client gone after a moment. Its audit line is written
    // before the work starts, so it is there whatever became of the work.
    let docs: Vec<Value> = (0..3000)
        .map(|i| {
            serde_json::json!({
                "doctype": "Webhook", "name": format!("Hook {i}"),
                "webhook_doctype": "Sales Order", "webhook_docevent": "on_submit",
                "request_url": "https://example.com/hook", "request_structure": "JSON",
                "webhook_json": "{\"name\": \"{{ doc.name }}\"}"
            })
        })
        .collect();
    let file = hookfleet_testkit::TempFile::new(Value::from(docs).to_string());
    let _ = hookfleet_testkit::curl(&[
        "--max-time",
        "1",
        "-X",
        "POST",
        "-H",
        &bearer,
        "--data-binary",
        &format!("@{}", file.path()),
        &format!("{base}/api/v1/imports/frappe"),
    ]);
    console.stop();
    let log = console.log();
    assert!(
        log.contains("console action") && log.contains("action=\"webhook-import\""),
        "the import's audit line: {log}"
    );
    assert!(
        log.contains("console action")
            && log.contains("actor=\"token\"")
            && log.contains("action=\"pause\""),
        "{log}"
    );
    assert!(
        log.contains("203.0.113.7"),
        "the client a proxy named: {log}"
    );
    assert!(log.contains("missing or wrong bearer token"), "{log}");
    for secret in [FULL_TOKEN, READ_TOKEN, "wrong-token-0123456789"] {
        assert!(!log.contains(secret), "a token in the log: {log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logout_ends_the_session_for_every_copy_of_its_cookie() {
    let env = TestEnv::new();
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), None).await;
    let cookie = console.login(FULL_TOKEN).await;
    let page = console.page("/", Some(&cookie)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let csrf = hookfleet_testkit::csrf_of(&page.body);
    let out = console
        .form("/logout", Some(&cookie), &[("csrf", csrf.as_str())])
        .await;
    assert_eq!(out.status, 303, "{}", out.body);
    // A copy of the cookie kept elsewhere opens nothing now.
    let after = console.page("/", Some(&cookie)).await;
    assert!(
        after.body.contains("name=\"token\"") || after.status == 303,
        "the logged-out session still opens pages: {} {}",
        after.status,
        after.body
    );
    assert!(!after.body.contains("csrf"), "{}", after.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_a_path_or_query_is_a_clear_400_never_the_databases_words() {
    let env = TestEnv::new();
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), Some(READ_TOKEN)).await;
    for path in [
        "/api/v1/deliveries?document=SO%001",
        "/api/v1/deliveries?event_id=a%00b",
        "/api/v1/deliveries?webhook=x%00",
        "/api/v1/webhooks/orders%00",
        "/deliveries?document=SO%00",
    ] {
        let a = console.get(path, Some(FULL_TOKEN)).await;
        assert_eq!(a.status, 400, "{path}: {}", a.body);
        assert!(a.body.contains("NUL"), "{path}: {}", a.body);
    }
    // In a JSON body too: a string, a key, a string deep in a list.
    for (path, body) in [
        (
            "/api/v1/deliveries/retry",
            r#"{"webhook": "a\u0000", "status": "Failed", "since": "2026-01-01T00:00:00Z"}"#,
        ),
        ("/api/v1/webhooks", r#"{"name": "x\u0000y"}"#),
        ("/api/v1/webhooks", r#"{"headers": [{"key\u0000": "v"}]}"#),
        ("/api/v1/imports/frappe", r#"[{"name": "a\u0000"}]"#),
    ] {
        let a = console.post(path, Some(FULL_TOKEN), body).await;
        assert_eq!(a.status, 400, "{path} {body}: {}", a.body);
        assert!(a.body.contains("NUL"), "{path} {body}: {}", a.body);
    }
    // And in a page's form.
    let cookie = console.login(FULL_TOKEN).await;
    let a = console
        .form(
            "/webhooks/orders/pause",
            Some(&cookie),
            &[("reason", "a\0b"), ("csrf", "x")],
        )
        .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body.contains("NUL"), "{}", a.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_guessing_tokens_is_refused_even_the_right_one_for_a_while() {
    let env = TestEnv::new();
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), None).await;
    for i in 0..hookfleet_core::runtime::http::GUESS_BUDGET {
        let guess = format!("guess-{i:02}-0123456789abcdef");
        let a = console.get("/api/v1/stats", Some(&guess)).await;
        assert_eq!(a.status, 401, "guess {i}: {}", a.body);
    }
    let a = console.get("/api/v1/stats", Some(FULL_TOKEN)).await;
    assert_eq!(a.status, 429, "{}", a.body);
    assert!(a.body.contains("too many wrong tokens"), "{}", a.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_hide_behind_invisible_or_bidi_characters_are_shown_escaped() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    fleet_with(&env, &receiver, &["SO-1\u{202E}1-OS\u{200B}"]).await;
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), None).await;
    let cookie = console.login(FULL_TOKEN).await;
    let page = console.page("/deliveries", Some(&cookie)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        !page.body.contains('\u{202E}'),
        "an override reached the page"
    );
    assert!(
        !page.body.contains('\u{200B}'),
        "an invisible space reached the page"
    );
    assert!(
        page.body.contains("SO-1\\u{202e}1-OS\\u{200b}"),
        "{}",
        page.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_send_is_a_real_signed_delivery_to_that_webhook_alone() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    receiver.verify_with(&["test-send-secret"]);
    let mut s = spec("orders", ENTITY, "on_submit", &receiver.url("/orders"));
    s.secret = Some(hookfleet_core::domain::Secret::new("test-send-secret"));
    s.condition = Some("doc.grand_total > 100".into());
    env.add_webhook(&s);
    // Another webhook of the same document and event: a test is not its.
    env.add_webhook(&spec("audit", ENTITY, "on_submit", &receiver.url("/audit")));
    let mut off = spec("off", ENTITY, "on_submit", &receiver.url("/off"));
    off.enabled = false;
    env.add_webhook(&off);
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), Some(READ_TOKEN)).await;
    let doc = |total: f64| hookfleet_testkit::sales_order("SO-T1", total).to_string();
    let path = "/api/v1/webhooks/orders/test";

    // Refused: a read-only token, an unknown or disabled webhook, a body
    // that is no document with a name. Nothing recorded.
    let a = console.post(path, Some(READ_TOKEN), &doc(500.0)).await;
    assert_eq!(a.status, 403, "{}", a.body);
    let a = console
        .post("/api/v1/webhooks/nope/test", Some(FULL_TOKEN), &doc(500.0))
        .await;
    assert_eq!(a.status, 404, "{}", a.body);
    let a = console
        .post("/api/v1/webhooks/off/test", Some(FULL_TOKEN), &doc(500.0))
        .await;
    assert_eq!(a.status, 409, "{}", a.body);
    assert!(a.json()["error"].as_str().unwrap().contains("disabled"));
    for (body, needle) in [
        ("[1, 2]", "JSON object"),
        (r#"{"doctype": "Sales Order"}"#, "needs a \"name\""),
        (r#"{"name": "SO\u0007"}"#, "control character"),
    ] {
        let a = console.post(path, Some(FULL_TOKEN), body).await;
        assert_eq!(a.status, 400, "{body}: {}", a.body);
        let e = a.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(e.contains(needle), "{body}: {e}");
    }
    // The condition does not hold: said so, and nothing recorded or sent.
    let a = console.post(path, Some(FULL_TOKEN), &doc(5.0)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["meets_condition"], false, "{}", a.body);
    assert_eq!(a.json()["deliveries"], Value::Array(vec![]));
    assert!(env.rows().is_empty(), "a refused test recorded a row");

    // It holds: one delivery, for `orders` alone, sent signed by a worker.
    let a = console.post(path, Some(FULL_TOKEN), &doc(500.0)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let sent = a.json();
    assert_eq!(sent["meets_condition"], true, "{sent}");
    let id = sent["deliveries"][0]["id"].as_i64().expect("a delivery id");
    assert_eq!(sent["deliveries"][0]["status"], "Queued");
    let rows = env.rows();
    assert_eq!(rows.len(), 1, "only the webhook tested: {rows:?}");
    assert_eq!(
        (rows[0].webhook_name.as_str(), rows[0].entity_name.as_str()),
        ("orders", "SO-T1")
    );
    let worker = env.start_worker(2, slow_schedule());
    env.until_row(id, |r| r.status == DeliveryStatus::Delivered)
        .await;
    let got = receiver.wait_for(1, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 1, "one request");
    assert_eq!(got[0].path, "/orders");
    assert_eq!(got[0].json()["name"], "SO-T1");
    assert_eq!(
        got[0].header("webhook-id"),
        sent["deliveries"][0]["event_id"].as_str()
    );
    got[0].assert_signatures_verified("a test send");
    // Twice is two deliveries (a fresh event id each).
    let again = console
        .post(path, Some(FULL_TOKEN), &doc(500.0))
        .await
        .json();
    assert_ne!(again["deliveries"][0]["id"], sent["deliveries"][0]["id"]);
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_forms_are_refused_to_a_reader_and_a_bulk_form_is_bounded() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    receiver.reply_next([Reply::status(500)]);
    let ids = fleet_with(&env, &receiver, &["SO-1"]).await;
    // SO-1 Failed, its retry an hour away: a replay would make it due now.
    let worker = env.start_worker(1, slow_schedule());
    let failed = env
        .until_row(ids[0], |r| r.status == DeliveryStatus::Failed)
        .await;
    worker.stop().await;
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), Some(READ_TOKEN)).await;

    // A reader is shown no form to define, edit or test a webhook, and
    // may not post one.
    let reader = console.login(READ_TOKEN).await;
    let page = console.page("/webhooks/orders", Some(&reader)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    for offered in ["Send test", ">Edit<", "New webhook", "Retry selected"] {
        assert!(
            !page.body.contains(offered),
            "a reader is offered {offered}"
        );
    }
    for form in ["/webhooks/new", "/webhooks/orders/edit"] {
        assert_eq!(
            console.page(form, Some(&reader)).await.status,
            403,
            "{form}"
        );
    }
    let csrf = csrf_of(&page.body);
    let definition = [
        ("csrf", csrf.as_str()),
        ("name", "sneaky"),
        ("entity_type", ENTITY),
        ("event", "on_submit"),
        ("request_url", "http://127.0.0.1:9/x"),
    ];
    let a = console
        .form("/webhooks/new", Some(&reader), &definition)
        .await;
    assert_eq!(a.status, 403, "{}", a.body);
    let a = console
        .form(
            "/webhooks/orders/test",
            Some(&reader),
            &[("csrf", &csrf), ("doc", r#"{"name": "SO-9"}"#)],
        )
        .await;
    assert_eq!(a.status, 403, "{}", a.body);
    assert_eq!(env.stored_webhooks().len(), 1, "a reader made a webhook");
    assert_eq!(env.rows().len(), 1, "a reader sent a test");
    let id = ids[0].to_string();
    for route in [
        "/deliveries/retry-selected",
        "/dead-letters/purge-all",
        "/dead-letters/requeue-all",
    ] {
        let a = console
            .form(route, Some(&reader), &[("csrf", &csrf), ("id", &id)])
            .await;
        assert_eq!(a.status, 403, "a reader's {route}: {}", a.body);
    }

    // The new forms, like every other, need the session's CSRF token.
    let cookie = console.login(FULL_TOKEN).await;
    for route in [
        "/deliveries/retry-selected",
        "/dead-letters/purge-all",
        "/dead-letters/purge-selected",
        "/webhooks/orders/test",
        "/webhooks/new",
    ] {
        let a = console
            .form(
                route,
                Some(&cookie),
                &[("id", &id), ("doc", r#"{"name": "SO-9"}"#)],
            )
            .await;
        assert_eq!(a.status, 403, "{route} without a CSRF token: {}", a.body);
    }
    assert_eq!(env.rows().len(), 1, "a form without its token acted");

    // A bulk form names at most MAX_BULK_IDS rows: more is refused whole,
    // saying so, and replays nothing.
    let csrf = csrf_of(&console.page("/deliveries", Some(&cookie)).await.body);
    let many: Vec<String> = (1..=101).map(|i| i.to_string()).collect();
    let mut fields = vec![("csrf", csrf.as_str())];
    fields.extend(many.iter().map(|id| ("id", id.as_str())));
    let a = console
        .form("/deliveries/retry-selected", Some(&cookie), &fields)
        .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body.contains("at most 100"), "{}", a.body);
    let a = console
        .form(
            "/deliveries/retry-selected",
            Some(&cookie),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(a.status, 400, "nothing ticked: {}", a.body);
    assert!(a.body.contains("no deliveries selected"), "{}", a.body);
    let after = env.row(ids[0]);
    assert_eq!(
        (after.status, after.next_retry, after.max_attempts),
        (failed.status, failed.next_retry, failed.max_attempts),
        "a refused bulk form replayed"
    );
    // An id no delivery or dead letter could have is refused before it is
    // looked up, logged or named in a notice.
    let long = "9".repeat(65);
    let a = console
        .form(
            "/dead-letters/purge-selected",
            Some(&cookie),
            &[("csrf", &csrf), ("id", &long)],
        )
        .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(!a.body.contains(&long), "{}", a.body);

    // A webhook named `new` keeps a page of its own beside the form's.
    env.add_webhook(&spec("new", ENTITY, "on_cancel", &receiver.url("/new")));
    let list = console.page("/webhooks", Some(&cookie)).await;
    assert!(
        list.body.contains("href=\"/webhooks/%6Eew\""),
        "{}",
        list.body
    );
    let page = console.page("/webhooks/%6Eew", Some(&cookie)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Webhook new"), "{}", page.body);
    let form = console.page("/webhooks/new", Some(&cookie)).await;
    assert!(form.body.contains("Create webhook"), "{}", form.body);
}
