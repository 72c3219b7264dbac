//! `hookfleet delivery list|show|retry` and `hookfleet stats`, run as real
//! processes: the reading commands reflect what was emitted (every row,
//! filters, one row's attempt log, the counts by status and queue), and a
//! replay refuses a Delivered row unless forced.

use serde_json::{json, Value};

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_testkit::{blocking, delivery_ids, Scenario, ENTITY};

/// Two webhooks on Sales Order `on_submit`: "orders", sent nowhere, and
/// "totals", whose body template is valid on the sample document but not
/// JSON for a document without a total (such a delivery is Exhausted at
/// emit).
fn add_orders_and_totals(env: &hookfleet_testkit::TestEnv) {
    env.add_quiet_webhook("orders", "on_submit");
    env.webhook_add(
        "totals",
        ENTITY,
        "on_submit",
        "http://127.0.0.1:9/totals",
        &["--body-template", r#"{"total": {{ doc.grand_total }}}"#],
    )
    .ok("webhook add totals");
}

// ---------------------------------------------------------------------------
// 1. The reading commands reflect what was emitted.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_list_show_and_stats_reflect_what_was_emitted() {
    let (env, rx) = Scenario::new().ready().await;
    let approve_url = rx.url("/approve");
    blocking(|| {
        add_orders_and_totals(&env);
        env.webhook_add("approve", ENTITY, "workflow_transition", &approve_url, &[])
            .ok("webhook add approve");
    });

    // SO-1: orders Queued, totals Exhausted (the body is not JSON).
    let first = blocking(|| env.emit_by_cli("on_submit", "SO-1", &json!({"name": "SO-1"})))
        .ok("emit SO-1")
        .json();
    // SO-2: orders and totals Queued.
    blocking(|| {
        env.emit_by_cli(
            "on_submit",
            "SO-2",
            &json!({"name": "SO-2", "grand_total": 5}),
        )
    })
    .ok("emit SO-2");
    // SO-1 approved: delivered synchronously, one attempt.
    let approved =
        blocking(|| env.emit_by_cli("workflow_transition", "SO-1", &json!({"name": "SO-1"})))
            .ok("emit workflow_transition")
            .json();
    let approved_id = delivery_ids(&approved)[0];
    let exhausted_id = first["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .find(|d| d["webhook"] == "totals")
        .expect("totals delivery")["id"]
        .as_i64()
        .expect("id");

    let all = blocking(|| env.cli(&["delivery", "list", "--json"]))
        .ok("delivery list")
        .json();
    let all = all.as_array().expect("list");
    let listed: Vec<i64> = all.iter().map(|d| d["id"].as_i64().expect("id")).collect();
    let mut newest_first: Vec<i64> = env.rows().iter().map(|r| r.id).collect();
    newest_first.reverse();
    assert_eq!(listed, newest_first, "every row, newest first");
    let status_of = |id: i64| {
        all.iter().find(|d| d["id"] == id).expect("listed")["status"]
            .as_str()
            .expect("status")
            .to_string()
    };
    assert_eq!(status_of(approved_id), "Delivered");
    assert_eq!(status_of(exhausted_id), "Exhausted");

    let queued = blocking(|| env.cli(&["delivery", "list", "--status", "Queued", "--json"]))
        .ok("delivery list --status")
        .json();
    let queued = queued.as_array().expect("list");
    assert_eq!(queued.len(), 3, "{queued:?}");
    assert!(queued.iter().all(|d| d["status"] == "Queued"), "{queued:?}");

    let of_totals = blocking(|| env.cli(&["delivery", "list", "--webhook", "totals", "--json"]))
        .ok("delivery list --webhook")
        .json();
    assert_eq!(of_totals.as_array().expect("list").len(), 2, "{of_totals}");

    let shown = blocking(|| env.cli(&["delivery", "show", &approved_id.to_string(), "--json"]))
        .ok("delivery show")
        .json();
    assert_eq!(shown["id"], approved_id);
    assert_eq!(shown["webhook"], "approve");
    assert_eq!(shown["entity_name"], "SO-1");
    assert_eq!(shown["event"], "workflow_transition");
    assert_eq!(shown["status"], "Delivered");
    assert_eq!(shown["attempts"], 1);
    assert_eq!(shown["response_code"], 200);
    assert_eq!(shown["url"], approve_url);
    let log = shown["attempt_log"].as_array().expect("attempt_log");
    assert_eq!(log.len(), 1, "{shown}");
    assert_eq!(log[0]["attempt"], 1);
    assert_eq!(log[0]["response_code"], 200);

    let broken = blocking(|| env.cli(&["delivery", "show", &exhausted_id.to_string(), "--json"]))
        .ok("delivery show")
        .json();
    assert_eq!(broken["status"], "Exhausted");
    assert!(
        broken["error"]
            .as_str()
            .is_some_and(|e| e.contains("did not render to JSON")),
        "{broken}"
    );
    assert_eq!(broken["attempt_log"], json!([]), "no request was made");

    let missing = blocking(|| env.cli(&["delivery", "show", "999999", "--json"]));
    assert_eq!(missing.code, Some(1), "{missing}");
    assert!(missing.stderr.contains("not found"), "{missing}");

    let stats = blocking(|| env.cli(&["stats", "--json"]))
        .ok("stats")
        .json();
    assert_eq!(
        stats["rows"],
        json!({"Queued": 3, "Delivered": 1, "Failed": 0, "Exhausted": 1}),
        "{stats}"
    );
    assert_eq!(stats["queues"]["default"], 3, "{stats}");
    assert_eq!(stats["queues"]["default"], env.queue_depth("default"));
    assert_eq!(stats["dead_letters"], 0, "{stats}");
    assert_eq!(stats["redis_error"], Value::Null, "{stats}");
    assert_eq!(rx.count(), 1, "only the workflow_transition was sent");
}

// ---------------------------------------------------------------------------
// 2. Replay refuses a Delivered row unless forced.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_retry_refuses_a_delivered_row_without_force() {
    let (env, rx) = Scenario::new().ready().await;
    let url = rx.url("/approve");
    blocking(|| {
        env.webhook_add("approve", ENTITY, "workflow_transition", &url, &[])
            .ok("webhook add")
    });
    let report =
        blocking(|| env.emit_by_cli("workflow_transition", "SO-1", &json!({"name": "SO-1"})))
            .ok("emit")
            .json();
    let id = delivery_ids(&report)[0];
    let before = env.row(id);
    assert_eq!(before.status, DeliveryStatus::Delivered);

    let refused = blocking(|| env.cli(&["delivery", "retry", &id.to_string()]));
    assert_eq!(refused.code, Some(1), "{refused}");
    assert!(refused.stderr.contains("Delivered"), "{refused}");
    assert!(refused.stderr.contains("--force"), "{refused}");
    let after = env.row(id);
    assert_eq!(
        after.status,
        DeliveryStatus::Delivered,
        "a refused replay changes nothing"
    );
    assert!(after.next_retry.is_none());
    assert_eq!(after.attempts, before.attempts);
    assert_eq!(after.max_attempts, before.max_attempts);
    assert_eq!(env.queue_depth("default"), 0);

    blocking(|| env.cli(&["delivery", "retry", &id.to_string(), "--force"])).ok("retry --force");
    let forced = env.row(id);
    assert_eq!(forced.status, DeliveryStatus::Failed, "forced: due again");
    assert!(forced.next_retry.is_some());
    assert_eq!(forced.max_attempts, before.attempts + 1);
    assert_eq!(env.queue_depth("default"), 1, "queued now");
    assert_eq!(rx.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_list_takes_the_apis_filters_and_a_bulk_dry_run_replays_nothing() {
    let (env, _rx) = Scenario::new().ready().await;
    let ids_of = |args: &[&str]| -> Vec<i64> {
        let mut all = vec!["delivery", "list", "--json"];
        all.extend_from_slice(args);
        let listed = blocking(|| env.cli(&all)).ok("delivery list").json();
        listed
            .as_array()
            .expect("list")
            .iter()
            .map(|d| d["id"].as_i64().expect("id"))
            .collect()
    };
    blocking(|| {
        add_orders_and_totals(&env);
    });
    let so1 = blocking(|| env.emit_by_cli("on_submit", "SO-1", &json!({"name": "SO-1"})))
        .ok("emit SO-1")
        .json();
    blocking(|| {
        env.emit_by_cli(
            "on_submit",
            "SO-2",
            &json!({"name": "SO-2", "grand_total": 5}),
        )
    })
    .ok("emit SO-2");
    let rows = env.rows();
    let of = |name: &str| -> Vec<i64> {
        let mut ids: Vec<i64> = rows
            .iter()
            .filter(|r| r.entity_name == name)
            .map(|r| r.id)
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids
    };
    assert_eq!(rows.len(), 4, "two webhooks, two documents");
    assert_eq!(ids_of(&["--document", "SO-2"]), of("SO-2"));
    let event_id = so1["deliveries"][0]["event_id"].as_str().expect("event id");
    let by_event_id = ids_of(&["--event-id", event_id]);
    assert!(
        !by_event_id.is_empty() && by_event_id.iter().all(|id| of("SO-1").contains(id)),
        "{by_event_id:?}"
    );
    assert_eq!(ids_of(&["--event", "on_submit"]).len(), 4);
    assert!(ids_of(&["--event", "on_cancel"]).is_empty());
    assert_eq!(ids_of(&["--since", "1h"]).len(), 4);
    assert!(
        ids_of(&["--until", "1h"]).is_empty(),
        "nothing before an hour ago"
    );
    let newest = *of("SO-2").first().expect("SO-2's rows");
    let page = ids_of(&["--before", &newest.to_string()]);
    assert!(
        page.iter().all(|id| *id < newest) && page.len() == 3,
        "{page:?}"
    );
    let bad = blocking(|| env.cli(&["delivery", "list", "--since", "yesterday-ish"]));
    assert_eq!(bad.code, Some(2), "{bad}");

    // A bulk dry run counts the Exhausted row and leaves it Exhausted.
    let exhausted: Vec<i64> = rows
        .iter()
        .filter(|r| r.status == DeliveryStatus::Exhausted)
        .map(|r| r.id)
        .collect();
    assert_eq!(exhausted.len(), 1, "SO-1's totals");
    let dry = blocking(|| {
        env.cli(&[
            "delivery",
            "retry",
            "--webhook",
            "totals",
            "--status",
            "Exhausted",
            "--since",
            "1h",
            "--dry-run",
        ])
    })
    .ok("bulk retry --dry-run");
    assert!(
        dry.stdout
            .contains("dry run: 1 Exhausted deliveries of totals")
            && dry.stdout.contains("would be replayed; none was"),
        "{dry}"
    );
    let after = env.rows();
    let still = after
        .iter()
        .find(|r| r.id == exhausted[0])
        .expect("the row");
    assert_eq!(still.status, DeliveryStatus::Exhausted, "nothing replayed");
}
