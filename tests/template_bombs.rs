//! Templates that would hang, crash or balloon the process running them
//! (filters and operators whose work minijinja's fuel does not count). Each
//! is refused at `webhook add` within a couple of seconds, the command
//! exiting normally; one a document triggers is Exhausted at emit, with the
//! limit it hit, while the ingest answers and goes on serving; a batch of
//! such documents costs one limit, not one per document; and a renderer
//! that is not one refuses the emit with nothing recorded.

use std::time::{Duration, Instant};

use serde_json::json;

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_testkit::{
    delivery_ids, run_within, IngestProcess, TempFile, TestEnv, ENTITY, NOWHERE,
};

/// An `on_submit` event of document `name` as the ingest takes it.
fn event(name: &str, doc: serde_json::Value) -> String {
    json!({"entity_type": ENTITY, "event": "on_submit", "name": name, "doc": doc}).to_string()
}

/// The longest a refusal may take: the renderer's one second of CPU, a
/// process start, and room for a machine busy with other work (a bomb no
/// limit stopped would run for minutes or take the machine's memory).
const REFUSED_WITHIN: Duration = Duration::from_secs(60);

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
        assert!(took < REFUSED_WITHIN, "{evil}: answered in {took:?}");
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
        assert!(started.elapsed() < REFUSED_WITHIN);
        let report: serde_json::Value = serde_json::from_str(&body).expect("report");
        let row = env.row(delivery_ids(&report)[0]);
        assert_eq!(row.status, DeliveryStatus::Queued, "{row:?}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&row.body).unwrap(),
            json!({"order": "SO-ok", "a": ""})
        );
    }
}

/// A template that runs out of time when a document asks it to.
const TIME_BOMB_ON_DEMAND: &str = r#"{"order": "{{ doc.name }}", "a": "{% if doc.evil %}{{ ([0]*1000000000000)|sum }}{% endif %}"}"#;

#[test]
fn a_batch_of_documents_that_trip_a_limit_costs_two_limits_not_one_each() {
    let env = TestEnv::new();
    env.webhook_add(
        "guarded",
        ENTITY,
        "on_submit",
        NOWHERE,
        &["--body-template", TIME_BOMB_ON_DEMAND],
    )
    .ok("webhook add");
    let ingest = IngestProcess::start(&env, &[]);
    let order = |name: &str, evil: bool| {
        json!({"entity_type": ENTITY, "event": "on_submit", "name": name,
               "doc": {"name": name, "evil": evil}})
    };
    // A lone bad document spares its batch mates; twenty do not cost twenty
    // seconds.
    const EVIL: usize = 20;
    let mut batch = vec![order("SO-evil-0", true), order("SO-spared", false)];
    batch.extend((1..EVIL).map(|i| order(&format!("SO-evil-{i}"), true)));
    batch.push(order("SO-late", false));
    let started = Instant::now();
    let (code, body) = ingest.post("/v1/events/batch", json!(batch).to_string(), &[]);
    let took = started.elapsed();
    assert_eq!(code, 202, "{body}");
    // Two limits spent (LIMITS_PER_TEMPLATE_PER_CALL), the rest refused at
    // once: counted below by the rows' reasons, not by the clock.
    assert!(took < REFUSED_WITHIN, "answered in {took:?}");
    let rows = env.rows();
    assert_eq!(rows.len(), EVIL + 2);
    let row_of = |name: &str| rows.iter().find(|r| r.entity_name == name).expect("a row");
    let spared = row_of("SO-spared");
    assert_eq!(spared.status, DeliveryStatus::Queued, "{spared:?}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&spared.body).unwrap(),
        json!({"order": "SO-spared", "a": ""})
    );
    let late = row_of("SO-late");
    assert!(
        late.error.as_deref().unwrap_or("").contains("not rendered"),
        "past the template's two limits, a good document is refused too: {late:?}"
    );
    let exhausted: Vec<_> = rows
        .iter()
        .filter(|r| r.status == DeliveryStatus::Exhausted)
        .collect();
    assert_eq!(
        exhausted.len(),
        EVIL + 1,
        "every bad document, and the one after the second limit"
    );
    let mut hit = 0;
    let mut refused = 0;
    for row in &exhausted {
        let error = row.error.as_deref().unwrap_or("");
        if error.contains("not rendered") {
            assert!(error.contains("ran longer than its limit"), "{row:?}");
            refused += 1;
        } else {
            assert!(error.contains("limit"), "{row:?}");
            hit += 1;
        }
    }
    assert_eq!(hit, 2, "two limits were spent on the template");
    assert_eq!(refused, EVIL - 1);
}

#[test]
fn a_renderer_that_is_not_one_refuses_the_emit_and_records_nothing() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    env.webhook_add(
        "templated",
        ENTITY,
        "on_submit",
        NOWHERE,
        &["--body-template", TIME_BOMB_ON_DEMAND],
    )
    .ok("webhook add");
    // One exits at once; the other answers the handshake with something
    // else and would then hang.
    let impostor = TempFile::new("#!/bin/sh\necho not-a-renderer\nexec sleep 60\n");
    std::fs::set_permissions(impostor.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    for program in ["/bin/true", impostor.path()] {
        let ingest = IngestProcess::start_with_env(&env, &[], &[("HOOKFLEET_RENDERER", program)]);
        let started = Instant::now();
        let (code, body) = ingest.post("/v1/events", event("SO-1", json!({"name": "SO-1"})), &[]);
        assert_eq!(code, 503, "{program}: {body}");
        assert!(
            started.elapsed() < REFUSED_WITHIN,
            "{program}: refused in {:?}",
            started.elapsed()
        );
        assert!(env.rows().is_empty(), "{program}: nothing was recorded");
    }
}

#[test]
fn a_template_that_crashes_its_renderer_fails_its_own_row_never_the_batch() {
    let env = TestEnv::new();
    // `batch` and `indent` set aside room for a count a document chooses:
    // 2^62 is a refusal (batch is capped as range is; it used to panic and
    // fail the whole batch as "renderers unavailable") or the memory limit
    // (indent), each that document's failure only.
    let template = r#"{"order": "{{ doc.name }}", "pages": {{ doc.lines | batch(doc.per_page or 10) | list | length }}, "pad": "{{ "x" | indent(doc.width or 0) }}"}"#;
    env.webhook_add(
        "paged",
        ENTITY,
        "on_submit",
        NOWHERE,
        &["--body-template", template],
    )
    .ok("webhook add");
    env.webhook_add("plain", ENTITY, "on_submit", NOWHERE, &[])
        .ok("webhook add");
    let ingest = IngestProcess::start(&env, &[]);
    let huge = 1u64 << 62;
    let order = |name: &str, doc: serde_json::Value| json!({"entity_type": ENTITY, "event": "on_submit", "name": name, "doc": doc});
    let batch = json!([
        order(
            "SO-batch",
            json!({"name": "SO-batch", "lines": [1, 2, 3], "per_page": huge})
        ),
        order("SO-indent", json!({"name": "SO-indent", "width": huge})),
        order(
            "SO-fine",
            json!({"name": "SO-fine", "lines": [1, 2, 3], "per_page": 2})
        ),
    ]);
    let (code, body) = ingest.post("/v1/events/batch", batch.to_string(), &[]);
    assert_eq!(
        code, 202,
        "a template's crash is not the renderers' outage: {body}"
    );
    let rows = env.rows();
    assert_eq!(rows.len(), 6, "every event, for both webhooks: {rows:?}");
    let row = |webhook: &str, name: &str| {
        rows.iter()
            .find(|r| r.webhook_name == webhook && r.entity_name == name)
            .unwrap_or_else(|| panic!("a row of {webhook} for {name}: {rows:?}"))
    };
    for name in ["SO-batch", "SO-indent", "SO-fine"] {
        assert_eq!(row("plain", name).status, DeliveryStatus::Queued);
    }
    let fine = row("paged", "SO-fine");
    assert_eq!(fine.status, DeliveryStatus::Queued, "{fine:?}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&fine.body).unwrap(),
        json!({"order": "SO-fine", "pages": 2, "pad": "x"})
    );
    let batched = row("paged", "SO-batch");
    assert_eq!(batched.status, DeliveryStatus::Exhausted, "{batched:?}");
    assert!(
        batched
            .error
            .as_deref()
            .unwrap_or("")
            .contains("at most 1000"),
        "{batched:?}"
    );
    let indented = row("paged", "SO-indent");
    assert_eq!(indented.status, DeliveryStatus::Exhausted, "{indented:?}");
    assert!(
        indented
            .error
            .as_deref()
            .unwrap_or("")
            .contains("memory limit"),
        "{indented:?}"
    );
    // The ingest goes on serving.
    let (code, body) = ingest.post(
        "/v1/events",
        event("SO-after", json!({"name": "SO-after"})),
        &[],
    );
    assert_eq!(code, 202, "{body}");
}

#[test]
fn a_renderer_that_dies_on_a_document_fails_that_row_and_the_rest_are_recorded() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    env.webhook_add(
        "templated",
        ENTITY,
        "on_submit",
        NOWHERE,
        &["--body-template", TIME_BOMB_ON_DEMAND],
    )
    .ok("webhook add");
    env.webhook_add("plain", ENTITY, "on_submit", NOWHERE, &[])
        .ok("webhook add");
    // A renderer that greets as one, takes its request and dies (as one
    // whose template crashed it would): every time, so the retry in a fresh
    // renderer dies too.
    let dying = TempFile::new(
        "#!/usr/bin/env python3\n\
         import struct, sys\n\
         hello = b'hookfleet-renderer/1'\n\
         sys.stdout.buffer.write(struct.pack('<I', len(hello)) + hello)\n\
         sys.stdout.buffer.flush()\n\
         n = struct.unpack('<I', sys.stdin.buffer.read(4))[0]\n\
         sys.stdin.buffer.read(n)\n\
         sys.exit(101)\n",
    );
    std::fs::set_permissions(dying.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let ingest = IngestProcess::start_with_env(&env, &[], &[("HOOKFLEET_RENDERER", dying.path())]);
    let (code, body) = ingest.post("/v1/events", event("SO-1", json!({"name": "SO-1"})), &[]);
    assert_eq!(
        code, 202,
        "a renderer dying under a template is that row's failure: {body}"
    );
    let rows = env.rows();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        match row.webhook_name.as_str() {
            "plain" => assert_eq!(row.status, DeliveryStatus::Queued, "{row:?}"),
            _ => {
                assert_eq!(row.status, DeliveryStatus::Exhausted, "{row:?}");
                let error = row.error.as_deref().unwrap_or("");
                assert!(
                    error.contains("crashed its renderer") && error.contains("code 101"),
                    "{row:?}"
                );
            }
        }
    }
}
