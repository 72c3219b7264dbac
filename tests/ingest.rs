//! The HTTP ingest (`hookfleet-producer serve`) as a real process, asked
//! with curl: 202 for an accepted event, 400 for a malformed one, 401
//! without the token, 413 over the README's size limits (an event ≤ 4 MiB,
//! a batch ≤ 1,000 events and ≤ 32 MiB) and 502 when a workflow_transition
//! receiver fails; nothing refused is recorded.

use serde_json::{json, Value};

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_producer::emit::MAX_DOCUMENT_BYTES;
use hookfleet_producer::ingest::{MAX_BATCH_BYTES, MAX_BATCH_EVENTS};
use hookfleet_testkit::{
    blocking, event_json, json_of_size, spec, IngestProcess, Receiver, Reply, TestEnv, ENTITY,
};

#[test]
fn the_ingest_accepts_a_valid_event_and_refuses_malformed_ones_with_400() {
    let env = TestEnv::new();
    env.add_small_body_webhook("on_submit");
    let ingest = IngestProcess::start(&env, &[]);

    let (code, body) = ingest.post(
        "/v1/events",
        event_json("SO-1", String::new()).to_string(),
        &[],
    );
    assert_eq!(code, 202, "{body}");
    let report: Value = serde_json::from_str(&body).expect("the report is JSON");
    let id = report["deliveries"][0]["id"]
        .as_i64()
        .expect("a delivery id");
    assert_eq!(env.row(id).entity_name, "SO-1");
    assert_eq!(env.rows().len(), 1);

    let mut bad_id = event_json("SO-2", String::new());
    bad_id["event_id"] = json!("has a space");
    for (what, body) in [
        (
            "malformed JSON",
            r#"{"entity_type": "Sales Order", "#.to_string(),
        ),
        (
            "a missing name",
            r#"{"entity_type": "Sales Order", "event": "on_submit"}"#.into(),
        ),
        ("an invalid event id", bad_id.to_string()),
    ] {
        let (code, answer) = ingest.post("/v1/events", body, &[]);
        assert_eq!(code, 400, "{what}: {answer}");
        assert!(answer.contains("error"), "{what}: {answer}");
    }
    // Invalid UTF-8 is refused by the single-event endpoint as by the
    // batch one, never repaired into another document.
    let invalid = [
        br#"{"entity_type": "Sales Order", "event": "on_submit", "name": "SO-3", "doc": {"x": ""#
            .as_slice(),
        &[0xff],
        br#""}}"#,
    ]
    .concat();
    for (what, path, body) in [
        ("one", "/v1/events", invalid.clone()),
        (
            "batch",
            "/v1/events/batch",
            [b"[".as_slice(), &invalid, b"]"].concat(),
        ),
    ] {
        let (code, answer) = ingest.post(path, body, &[]);
        assert_eq!(code, 400, "{what}: {answer}");
        assert!(answer.contains("error"), "{what}: {answer}");
    }
    assert_eq!(env.rows().len(), 1, "a refused event was recorded");
}

#[test]
fn the_ingest_refuses_a_body_over_four_mebibytes_with_413_and_takes_one_of_exactly_four() {
    let env = TestEnv::new();
    env.add_small_body_webhook("on_submit");
    let ingest = IngestProcess::start(&env, &[]);

    let over = json_of_size(MAX_DOCUMENT_BYTES + 1, |pad| event_json("BIG", pad));
    let (code, body) = ingest.post("/v1/events", over, &[]);
    assert_eq!(code, 413, "{body}");
    assert!(env.rows().is_empty(), "an over-long event was recorded");

    let at = json_of_size(MAX_DOCUMENT_BYTES, |pad| event_json("BIG", pad));
    let (code, body) = ingest.post("/v1/events", at, &[]);
    assert_eq!(
        code,
        202,
        "a body of exactly 4 MiB: {}",
        &body[..body.len().min(500)]
    );
    assert_eq!(env.rows().len(), 1);
}

#[test]
fn the_ingest_takes_a_batch_of_1000_events_and_refuses_1001_or_over_32_mebibytes_with_413() {
    let env = TestEnv::new();
    env.add_small_body_webhook("on_submit");
    let ingest = IngestProcess::start(&env, &[]);
    let batch = |n: usize, prefix: &str| {
        Value::Array(
            (0..n)
                .map(|i| event_json(&format!("{prefix}-{i}"), String::new()))
                .collect(),
        )
        .to_string()
    };

    let (code, body) = ingest.post("/v1/events/batch", batch(MAX_BATCH_EVENTS + 1, "over"), &[]);
    assert_eq!(code, 413, "{body}");
    assert!(
        env.rows().is_empty(),
        "part of a refused batch was recorded"
    );

    // Nine events of 3.9 MB each: every event is under the document limit,
    // the request is over 32 MiB.
    let each = MAX_BATCH_BYTES / 8 - 200_000;
    assert!(each < MAX_DOCUMENT_BYTES);
    let heavy = Value::Array(
        (0..9)
            .map(|i| event_json(&format!("heavy-{i}"), "x".repeat(each)))
            .collect(),
    )
    .to_string();
    assert!(heavy.len() > MAX_BATCH_BYTES);
    let (code, body) = ingest.post("/v1/events/batch", heavy, &[]);
    assert_eq!(code, 413, "{body}");
    assert!(
        env.rows().is_empty(),
        "part of a refused batch was recorded"
    );

    let (code, body) = ingest.post("/v1/events/batch", batch(MAX_BATCH_EVENTS, "at"), &[]);
    assert_eq!(code, 202, "{}", &body[..body.len().min(500)]);
    assert_eq!(env.rows().len(), MAX_BATCH_EVENTS);
}

#[test]
fn with_a_token_the_ingest_refuses_requests_without_it_with_401_and_records_nothing() {
    let env = TestEnv::new();
    env.add_small_body_webhook("on_submit");
    let ingest = IngestProcess::start(&env, &["--token", "T0KEN-0123456789abcdef"]);
    let event = event_json("SO-1", String::new()).to_string();
    let batch = format!("[{event}]");

    for (what, headers) in [
        ("no Authorization header", vec![]),
        ("a wrong token", vec!["Authorization: Bearer WRONG"]),
        (
            "the token without Bearer",
            vec!["Authorization: T0KEN-0123456789abcdef"],
        ),
        (
            "a longer token",
            vec!["Authorization: Bearer T0KEN-0123456789abcdef-0123456789abcdef2"],
        ),
    ] {
        for (path, body) in [("/v1/events", &event), ("/v1/events/batch", &batch)] {
            let (code, answer) = ingest.post(path, body, &headers);
            assert_eq!(code, 401, "{what} on {path}: {answer}");
        }
    }
    assert!(
        env.rows().is_empty(),
        "an unauthorised request was recorded"
    );
    assert_eq!(env.queue_depth("default"), 0);

    // The scheme's name is not case-sensitive (RFC 9110).
    let (code, answer) = ingest.post(
        "/v1/events",
        &event,
        &["Authorization: bearer T0KEN-0123456789abcdef"],
    );
    assert_eq!(code, 202, "{answer}");
    assert_eq!(env.rows().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ingest_answers_502_when_a_workflow_transition_receiver_answers_500() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    rx.reply_always(Reply::status(500).body("boom"));
    env.add_webhook(&spec(
        "approve",
        ENTITY,
        "workflow_transition",
        &rx.url("/wf"),
    ));
    let ingest = blocking(|| IngestProcess::start(&env, &[]));
    let event = json!({"entity_type": ENTITY, "event": "workflow_transition", "name": "SO-1"});

    let (code, body) = blocking(|| ingest.post("/v1/events", event.to_string(), &[]));
    assert_eq!(code, 502, "{body}");
    assert!(
        body.contains("500"),
        "the answer says what happened: {body}"
    );
    let rows = env.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, DeliveryStatus::Exhausted);
    assert_eq!(rows[0].response_code, Some(500));
    assert_eq!(rx.count(), 1, "exactly one request");
    assert_eq!(env.queue_depth("default"), 0, "nothing queued for later");
}
