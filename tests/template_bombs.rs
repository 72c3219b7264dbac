//! Templates that would hang, crash or balloon the process running them
//! (filters and operators whose work minijinja's fuel does not count). Each
//! is refused at `webhook add` within a couple of seconds, the command
//! exiting normally; one a document triggers is Exhausted at emit, with the
//! limit it hit, while the ingest answers and goes on serving.

use std::time::{Duration, Instant};

use serde_json::json;

use hookfleet_core::model::DeliveryStatus;
use hookfleet_testkit::{delivery_ids, run_within, IngestProcess, TestEnv, ENTITY, NOWHERE};

/// An `on_submit` event of document `name` as the ingest takes it.
fn event(name: &str, doc: serde_json::Value) -> String {
    json!({"entity_type": ENTITY, "event": "on_submit", "name": name, "doc": doc}).to_string()
}

/// The longest `webhook add` may take to refuse a bomb: the renderer's one
/// second, a process start, and room for a loaded machine.
const REFUSED_WITHIN: Duration = Duration::from_secs(5);

/// Body templates whose work or memory has no bound but the renderer's.
const BOMBS: &[(&str, &str)] = &[
    (
        "a sum over a trillion zeros",
        r#"{"a": {{ ([0]*1000000000000)|sum }}}"#,
    ),
    (
        "indent by ten billion",
        r#"{"a": "{{ "x"|indent(10000000000) }}"}"#,
    ),
    (
        "a join of ten 100 MB strings",
        r#"{% set s = "x" * 100000000 %}{"a": "{{ [s, s, s, s, s, s, s, s, s, s]|join }}"}"#,
    ),
    (
        "concatenation of 100 MB strings",
        r#"{% set s = "x" * 100000000 %}{"a": "{{ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s }}"}"#,
    ),
    (
        "nested loops",
        r#"{"a": "{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}{% endfor %}{% endfor %}{% endfor %}"}"#,
    ),
];

#[test]
fn each_template_bomb_is_refused_at_add_within_seconds_and_the_command_exits_normally() {
    let env = TestEnv::new();
    for (what, template) in BOMBS {
        let mut cmd = env.command("hookfleet");
        cmd.args([
            "webhook",
            "add",
            "bomb",
            "--entity-type",
            ENTITY,
            "--event",
            "on_submit",
            "--url",
            NOWHERE,
            "--body-template",
            template,
        ]);
        let started = Instant::now();
        let out = run_within(cmd, Duration::from_secs(30), what);
        let took = started.elapsed();
        assert_eq!(out.code, Some(1), "{what}: refused with exit 1: {out}");
        assert!(
            out.stderr.contains("limit"),
            "{what}: the message names the limit it hit: {out}"
        );
        assert!(took < REFUSED_WITHIN, "{what}: took {took:?}");
        assert!(env.stored_webhooks().is_empty(), "{what}: nothing stored");
    }
}

#[test]
fn a_bomb_a_document_triggers_is_exhausted_through_the_ingest_which_goes_on_serving() {
    let env = TestEnv::new();
    // Harmless on the sample document (no `evil` field), so it is accepted.
    let template = r#"{"order": "{{ doc.name }}", "a": "{% if doc.evil == 'time' %}{{ ([0]*1000000000000)|sum }}{% elif doc.evil == 'memory' %}{% set s = "x" * 100000000 %}{{ [s, s, s, s, s, s, s, s, s, s]|join }}{% endif %}"}"#;
    env.webhook_add(
        "guarded",
        ENTITY,
        "on_submit",
        NOWHERE,
        &["--body-template", template],
    )
    .ok("webhook add");
    let ingest = IngestProcess::start(&env, &[]);
    for evil in ["time", "memory"] {
        let started = Instant::now();
        let (code, body) = ingest.post(
            "/v1/events",
            event(&format!("SO-{evil}"), json!({"name": "SO", "evil": evil})),
            &[],
        );
        let took = started.elapsed();
        assert_eq!(code, 202, "{evil}: {body}");
        assert!(
            took < Duration::from_secs(5),
            "{evil}: answered in {took:?}"
        );
        let report: serde_json::Value = serde_json::from_str(&body).expect("report");
        let row = env.row(delivery_ids(&report)[0]);
        assert_eq!(row.status, DeliveryStatus::Exhausted, "{evil}: {row:?}");
        assert!(
            row.error.as_deref().unwrap_or("").contains("limit"),
            "{evil}: the reason names the limit: {row:?}"
        );

        // The next, ordinary event goes through at once.
        let started = Instant::now();
        let (code, body) = ingest.post(
            "/v1/events",
            event(&format!("SO-after-{evil}"), json!({"name": "SO-ok"})),
            &[],
        );
        assert_eq!(code, 202, "{body}");
        assert!(started.elapsed() < Duration::from_secs(2));
        let report: serde_json::Value = serde_json::from_str(&body).expect("report");
        let row = env.row(delivery_ids(&report)[0]);
        assert_eq!(row.status, DeliveryStatus::Queued, "{row:?}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&row.body).unwrap(),
            json!({"order": "SO-ok", "a": ""})
        );
    }
}
