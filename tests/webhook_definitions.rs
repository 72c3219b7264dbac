//! `hookfleet webhook add|update|show|list|enable|disable|delete`, run as real
//! processes against the test's own database: what a definition may be
//! (URL, structure, method, templates, headers, retries, timeout, the network
//! policy, the length of names) and, when it may not, the refusal: exit 1, a
//! message that says why, nothing written. Then one definition's round trip
//! through every command.

use serde_json::{json, Value};

use hookfleet_admin::limits::{MAX_NAME_LEN, MAX_RETRIES_LIMIT};
use hookfleet_core::store::webhooks;
use hookfleet_testkit::{webhook_add_args, Run, TempFile, TestEnv, ENTITY, NOWHERE};

/// A signing secret, for the round trip (it comes back only as `signed`).
const SECRET: &str = "S3CR3T-VALUE-123";

// ---------------------------------------------------------------------------
// 1. Refused definitions: exit 1, a message that says why, nothing written.
// ---------------------------------------------------------------------------

/// Runs `webhook add refused --entity-type "Sales Order" --event on_submit
/// EXTRA…` and checks it is refused with exit code 1, a stderr mentioning
/// every fragment of `says` (case-insensitive), and no webhook stored.
fn assert_add_refused(extra: &[&str], says: &[&str]) {
    let env = TestEnv::new();
    let mut args = vec![
        "webhook",
        "add",
        "refused",
        "--entity-type",
        "Sales Order",
        "--event",
        "on_submit",
    ];
    args.extend_from_slice(extra);
    let out = env.cli(&args);
    assert_eq!(out.code, Some(1), "{args:?} should be refused: {out}");
    assert!(
        !out.stderr.trim().is_empty(),
        "{args:?}: refused without a message: {out}"
    );
    let stderr = out.stderr.to_lowercase();
    for fragment in says {
        assert!(
            stderr.contains(&fragment.to_lowercase()),
            "{args:?}: the message should mention {fragment:?}: {out}"
        );
    }
    assert!(
        !out.stdout.contains("added webhook"),
        "{args:?}: claims success: {out}"
    );
    assert_eq!(
        env.listed_webhooks(),
        json!([]),
        "{args:?}: a refused webhook was written"
    );
}

#[test]
fn webhook_add_refuses_a_url_without_a_host() {
    assert_add_refused(&["--url", "http://"], &["url", "host"]);
}

#[test]
fn webhook_add_refuses_an_ftp_url() {
    assert_add_refused(
        &["--url", "ftp://example.com/hook"],
        &["ftp", "http or https"],
    );
}

#[test]
fn webhook_add_refuses_a_file_url() {
    assert_add_refused(&["--url", "file:///etc/passwd"], &["file", "http or https"]);
}

#[test]
fn webhook_add_refuses_an_unknown_structure() {
    assert_add_refused(
        &["--url", "http://127.0.0.1/x", "--structure", "xml"],
        &["xml", "json or form"],
    );
}

#[test]
fn webhook_add_refuses_an_unknown_method() {
    assert_add_refused(
        &["--url", "http://127.0.0.1/x", "--method", "FETCH"],
        &["FETCH", "POST"],
    );
}

#[test]
fn webhook_add_refuses_a_body_template_that_does_not_compile() {
    assert_add_refused(
        &[
            "--url",
            "http://127.0.0.1/x",
            "--body-template",
            r#"{"a": {{ doc.name }"#,
        ],
        &["syntax error", "body"],
    );
}

/// The message must say that the *condition* is what does not compile: an
/// operator who passed a body template, a dynamic URL and a condition must
/// be told which of the three to fix.
#[test]
fn webhook_add_refuses_a_condition_that_does_not_compile_and_says_it_is_the_condition() {
    assert_add_refused(
        &["--url", "http://127.0.0.1/x", "--condition", "doc.total >"],
        &["syntax error", "condition"],
    );
}

#[test]
fn webhook_add_refuses_a_dynamic_url_template_that_does_not_compile() {
    assert_add_refused(
        &["--url", "http://127.0.0.1/{{ doc.name", "--dynamic-url"],
        &["syntax error", "url"],
    );
}

#[test]
fn webhook_add_refuses_a_body_template_that_does_not_render_to_json_on_the_sample() {
    // Two values side by side: `{"a": "SAMPLE-0001" "SAMPLE-0001"}`.
    assert_add_refused(
        &[
            "--url",
            "http://127.0.0.1/x",
            "--body-template",
            r#"{"a": {{ doc.name }} {{ doc.name }}}"#,
        ],
        &["did not render to json", "SAMPLE-0001"],
    );
}

#[test]
fn webhook_add_refuses_a_filter_or_utils_function_that_does_not_exist_whatever_the_document() {
    assert_add_refused(
        &[
            "--url",
            "http://127.0.0.1/x",
            "--body-template",
            r#"{"a": {{ doc.taxes[0].rate | no_such_filter }}}"#,
        ],
        &["unknown filter", "no_such_filter"],
    );
    assert_add_refused(
        &[
            "--url",
            "http://127.0.0.1/x",
            "--body-template",
            r#"{"a": {{ utils.no_such_function(doc.total) }}}"#,
        ],
        &["utils has no function named no_such_function"],
    );
}

#[test]
fn webhook_add_refuses_a_template_past_a_limit_even_on_the_sample() {
    assert_add_refused(
        &[
            "--url",
            "http://127.0.0.1/x",
            "--body-template",
            r#"[{% for i in range(5000) %}{{ i }},{% endfor %}0]"#,
        ],
        &["range of 5000 numbers"],
    );
}

/// Frappe checks only that a template compiles: one that needs a value a
/// document with only a name lacks (a child row, a number) is a working
/// webhook, and is stored; a real document without the value fails its own
/// row, with the reason. A sample document given is one the author vouches
/// for: there the same failure is refused.
#[test]
fn a_template_that_needs_a_value_the_sample_lacks_is_stored_and_fails_only_the_rows_without_it() {
    let env = TestEnv::new();
    let body = r#"{"tax_rate": {{ doc.taxes[0].rate }}, "per_cent": {{ doc.grand_total / 100 }}}"#;
    let run = add(
        &env,
        "taxes",
        ENTITY,
        "on_submit",
        &["--body-template", body],
    );
    assert_eq!(run.code, Some(0), "{run}");

    let file = |v: Value| TempFile::new(v.to_string());
    let doc = file(json!({
        "doctype": ENTITY, "name": "SO-1", "grand_total": 1250,
        "taxes": [{"rate": 9.0}],
    }));
    let preview = env.cli(&["webhook", "preview", "taxes", "--doc", doc.path(), "--json"]);
    assert_eq!(preview.code, Some(0), "{preview}");
    let shown: Value = serde_json::from_str(&preview.stdout).expect("JSON");
    let sent: Value = serde_json::from_str(shown["body"].as_str().expect("a body")).expect("JSON");
    assert_eq!(sent, json!({"tax_rate": 9.0, "per_cent": 12.5}));

    let doc = file(json!({"doctype": ENTITY, "name": "SO-2", "grand_total": 1250}));
    let preview = env.cli(&["webhook", "preview", "taxes", "--doc", doc.path(), "--json"]);
    let shown: Value = serde_json::from_str(&preview.stdout).expect("JSON");
    assert!(
        shown["error"]
            .as_str()
            .is_some_and(|e| e.contains("undefined")),
        "{preview}"
    );

    let sample = file(json!({"doctype": ENTITY, "name": "SO-3"}));
    let run = add(
        &env,
        "vouched",
        ENTITY,
        "on_submit",
        &["--body-template", body, "--sample-doc", sample.path()],
    );
    assert_refused(&env, "a sample without the value", &run, "undefined", 1);
}

#[test]
fn webhook_add_refuses_the_same_document_field_selected_twice() {
    assert_add_refused(
        &[
            "--url",
            "http://127.0.0.1/x",
            "--field",
            "name:a",
            "--field",
            "name:b",
        ],
        &["\"name\"", "twice"],
    );
}

#[test]
fn webhook_add_refuses_a_header_without_a_key() {
    assert_add_refused(
        &["--url", "http://127.0.0.1/x", "--header", ":v"],
        &["header", "no key"],
    );
}

#[test]
fn webhook_add_refuses_a_header_without_a_value() {
    assert_add_refused(
        &["--url", "http://127.0.0.1/x", "--header", "X-Key:"],
        &["X-Key", "no value"],
    );
}

#[test]
fn webhook_add_refuses_negative_max_retries() {
    assert_add_refused(
        &["--url", "http://127.0.0.1/x", "--max-retries", "-1"],
        &["retries", "negative"],
    );
}

#[test]
fn webhook_add_refuses_a_zero_timeout() {
    assert_add_refused(
        &["--url", "http://127.0.0.1/x", "--timeout", "0"],
        &["timeout", "more than 0"],
    );
}

#[test]
fn webhook_add_refuses_a_timeout_over_sixty_seconds() {
    assert_add_refused(
        &["--url", "http://127.0.0.1/x", "--timeout", "61s"],
        &["timeout", "60s"],
    );
}

#[test]
fn webhook_add_refuses_a_private_network_address_the_policy_does_not_allow() {
    assert_add_refused(
        &["--url", "http://10.1.2.3/x"],
        &["10.1.2.3", "internal", "HOOKFLEET_ALLOWED_NETWORKS"],
    );
}

#[test]
fn webhook_add_refuses_the_cloud_metadata_address() {
    assert_add_refused(
        &["--url", "http://169.254.169.254/"],
        &["169.254.169.254", "internal"],
    );
}

#[test]
fn webhook_add_refuses_every_address_that_is_not_globally_routable() {
    for (url, address) in [
        ("http://[::7f00:1]/", "::7f00:1"), // IPv4-compatible loopback
        ("http://[::a9fe:a9fe]/", "::a9fe:a9fe"), // IPv4-compatible metadata
        ("http://[64:ff9b:1::a9fe:a9fe]/", "64:ff9b:1"), // local-use NAT64
        ("http://[fec0::1]/", "fec0::1"),   // site-local
        (
            "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
            "2001:0:4136",
        ), // Teredo
        ("http://168.63.129.16/", "168.63.129.16"), // Azure's wire server
        ("http://[fd00:ec2::254]/", "fd00:ec2::254"), // AWS's IPv6 metadata
    ] {
        assert_add_refused(&["--url", url], &[address, "internal"]);
    }
}

#[test]
fn webhook_add_refuses_hop_by_hop_headers() {
    for header in [
        "Upgrade: h2c",
        "Keep-Alive: timeout=5",
        "TE: trailers",
        "Trailer: X-Checksum",
        "Expect: 100-continue",
        "Proxy-Authorization: Basic eA==",
        "Proxy-Connection: keep-alive",
    ] {
        let name = header.split(':').next().unwrap();
        assert_add_refused(
            &["--url", "https://example.com/x", "--header", header],
            &[name, "one connection"],
        );
    }
}

#[test]
fn an_internal_address_is_accepted_exactly_when_its_network_is_allowed() {
    let env = TestEnv::new();
    let add = |name: &str, url: &str, allowed: Option<&str>| {
        let mut cmd = env.command("hookfleet");
        cmd.args(webhook_add_args(name, "Sales Order", "on_submit", url, &[]));
        match allowed {
            Some(networks) => cmd.env("HOOKFLEET_ALLOWED_NETWORKS", networks),
            None => cmd.env_remove("HOOKFLEET_ALLOWED_NETWORKS"),
        };
        Run::from(cmd.output().expect("run hookfleet"))
    };

    // The test kit's policy: loopback only.
    add("loopback", "http://127.0.0.1:9/x", Some("127.0.0.0/8")).ok("loopback allowed");
    // No policy: loopback is internal like the rest.
    let refused = add("loopback-unallowed", "http://127.0.0.1:9/x", None);
    assert_eq!(refused.code, Some(1), "{refused}");
    assert!(refused.stderr.contains("internal address"), "{refused}");
    // 10.x is refused under the loopback-only policy, accepted once allowed.
    let refused = add("private", "http://10.1.2.3/x", Some("127.0.0.0/8"));
    assert_eq!(refused.code, Some(1), "{refused}");
    add("private", "http://10.1.2.3/x", Some("10.0.0.0/8")).ok("10/8 allowed");

    let listed = env.listed_webhooks();
    let names: Vec<&str> = listed
        .as_array()
        .expect("list")
        .iter()
        .map(|w| w["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, vec!["loopback", "private"]);
}

// ---------------------------------------------------------------------------
// 2. Names, entity types, events, queues ≤ 140 characters; queue charset.
// ---------------------------------------------------------------------------

/// `hookfleet webhook add NAME --entity-type T --event E --url … EXTRA…`.
fn add(env: &TestEnv, name: &str, entity_type: &str, event: &str, extra: &[&str]) -> Run {
    env.webhook_add(name, entity_type, event, &format!("{NOWHERE}/x"), extra)
}

/// Checks that `run` was refused (exit 1, `says` in the message) and that no
/// webhook was written.
fn assert_refused(env: &TestEnv, what: &str, run: &Run, says: &str, webhooks_before: usize) {
    assert_eq!(run.code, Some(1), "{what} should be refused: {run}");
    assert!(
        run.stderr.contains(says),
        "{what}: the message should say {says:?}: {run}"
    );
    assert_eq!(
        env.stored_webhooks().len(),
        webhooks_before,
        "{what}: a refused webhook was written"
    );
}

#[test]
fn names_entity_types_events_and_queues_over_140_characters_are_refused_and_140_accepted() {
    let env = TestEnv::new();
    let over = "n".repeat(MAX_NAME_LEN + 1);
    let at = "n".repeat(MAX_NAME_LEN);
    let too_long = format!("longer than {MAX_NAME_LEN} characters");

    let cases: Vec<(&str, Run)> = vec![
        (
            "a 141-character name",
            add(&env, &over, ENTITY, "on_submit", &[]),
        ),
        (
            "a 141-character entity type",
            add(&env, "t", &over, "on_submit", &[]),
        ),
        ("a 141-character event", add(&env, "e", ENTITY, &over, &[])),
        (
            "a 141-character queue",
            add(&env, "q", ENTITY, "on_submit", &["--queue", &over]),
        ),
    ];
    for (what, run) in &cases {
        assert_refused(&env, what, run, &too_long, 0);
    }
    for (what, queue) in [
        ("a queue with braces", "a{b}"),
        ("a queue with a space", "a b"),
    ] {
        let run = add(&env, "q", ENTITY, "on_submit", &["--queue", queue]);
        assert_refused(&env, what, &run, "may only use", 0);
    }

    add(&env, &at, ENTITY, "on_submit", &[]).ok("a 140-character name");
    add(&env, "t", &at, "on_submit", &[]).ok("a 140-character entity type");
    add(&env, "e", ENTITY, &at, &[]).ok("a 140-character event");
    add(&env, "q", ENTITY, "on_submit", &["--queue", &at]).ok("a 140-character queue");
    let stored = env.stored_webhooks();
    assert_eq!(stored.len(), 4);
    assert!(stored.iter().any(|w| w.name == at));
    assert!(stored.iter().any(|w| w.entity_type == at));
    assert!(stored.iter().any(|w| w.event == at));
    assert!(stored.iter().any(|w| w.queue == at));

    // `update` is held to the same rules.
    for (what, queue, says) in [
        ("update to a queue with braces", "a{b}", "may only use"),
        (
            "update to a 141-character queue",
            over.as_str(),
            too_long.as_str(),
        ),
    ] {
        let run = env.cli(&["webhook", "update", "t", "--queue", queue]);
        assert_refused(&env, what, &run, says, 4);
    }
    let t = env
        .store
        .run_sync(|c| webhooks::get(c, "t"))
        .expect("webhook t");
    assert_eq!(t.queue, "default", "a refused update changed the queue");
}

#[test]
fn the_140_character_limit_counts_characters_not_bytes() {
    // An entity type and an event of 140 two-byte characters: 140 characters
    // is what the README promises, whatever the script.
    let env = TestEnv::new();
    let at = "é".repeat(MAX_NAME_LEN);
    let over = "é".repeat(MAX_NAME_LEN + 1);
    let run = add(&env, "over", &over, "on_submit", &[]);
    assert_refused(&env, "141 two-byte characters", &run, "140", 0);
    add(&env, "entity", &at, "on_submit", &[]).ok("an entity type of 140 two-byte characters");
    add(&env, "event", ENTITY, &at, &[]).ok("an event of 140 two-byte characters");
    assert_eq!(env.stored_webhooks().len(), 2);
}

// ---------------------------------------------------------------------------
// 3. max_retries ≤ 50.
// ---------------------------------------------------------------------------

#[test]
fn max_retries_over_50_is_refused_and_50_is_accepted() {
    let env = TestEnv::new();
    let at = MAX_RETRIES_LIMIT.to_string();
    let over = (MAX_RETRIES_LIMIT + 1).to_string();
    let says = format!("at most {MAX_RETRIES_LIMIT}");
    for value in [over.as_str(), "4294967297"] {
        let run = add(&env, "r", ENTITY, "on_submit", &["--max-retries", value]);
        assert_refused(&env, &format!("--max-retries {value}"), &run, &says, 0);
    }

    add(&env, "r", ENTITY, "on_submit", &["--max-retries", &at]).ok("--max-retries 50");
    let shown = env
        .cli(&["webhook", "show", "r", "--json"])
        .ok("webhook show")
        .json();
    assert_eq!(shown["max_retries"], MAX_RETRIES_LIMIT, "{shown}");

    let run = env.cli(&["webhook", "update", "r", "--max-retries", &over]);
    assert_refused(&env, "update --max-retries 51", &run, &says, 1);
    let r = env
        .store
        .run_sync(|c| webhooks::get(c, "r"))
        .expect("webhook r");
    assert_eq!(
        r.max_retries, MAX_RETRIES_LIMIT,
        "a refused update changed it"
    );
}

// ---------------------------------------------------------------------------
// 4. A webhook's life: add, show, list, update, disable, enable, delete.
// ---------------------------------------------------------------------------

#[test]
fn webhook_add_show_list_update_toggle_and_delete_round_trip_every_field() {
    let env = TestEnv::new();
    let template = r#"{"order": "{{ doc.name }}", "total": {{ doc.grand_total | tojson }}}"#;
    let add = env
        .cli(&[
            "webhook",
            "add",
            "orders",
            "--entity-type",
            "Sales Order",
            "--event",
            "on_submit",
            "--url",
            "http://127.0.0.1:9/orders",
            "--method",
            "PUT",
            "--structure",
            "json",
            "--body-template",
            template,
            "--header",
            "X-Tenant: acme",
            "--condition",
            "doc.grand_total > 100",
            "--secret",
            SECRET,
            "--timeout",
            "10s",
            "--queue",
            "q1",
            "--max-retries",
            "5",
        ])
        .ok("webhook add");
    assert!(add.stdout.contains("added webhook orders"), "{add}");

    let shown = env
        .cli(&["webhook", "show", "orders", "--json"])
        .ok("webhook show")
        .json();
    let expected = json!({
        "name": "orders",
        "entity_type": "Sales Order",
        "event": "on_submit",
        "request_url": "http://127.0.0.1:9/orders",
        "dynamic_url": false,
        "request_method": "PUT",
        "request_structure": "json",
        "body_template": template,
        "fields": [],
        "headers": [{"key": "X-Tenant", "value": "[hidden]"}],
        "condition": "doc.grand_total > 100",
        "allowed_hosts": [],
        "enabled": true,
        "signed": true,
        "secret_rotation_until": null,
        "timeout": "10s",
        "queue": "q1",
        "max_retries": 5,
    });
    for (key, value) in expected.as_object().expect("object") {
        assert_eq!(&shown[key], value, "webhook show --json: {key}");
    }
    assert!(shown["created_at"].is_string(), "{shown}");
    assert!(shown["updated_at"].is_string(), "{shown}");

    let listed = env.listed_webhooks();
    assert_eq!(listed.as_array().expect("list").len(), 1, "{listed}");
    assert_eq!(listed[0], shown, "list shows what show shows");
    let revealed = env
        .cli(&[
            "webhook",
            "show",
            "orders",
            "--json",
            "--show-header-values",
        ])
        .ok("webhook show --show-header-values")
        .json();
    assert_eq!(
        revealed["headers"],
        json!([{"key": "X-Tenant", "value": "acme"}]),
        "shown when asked for"
    );

    // Update changes only the fields given.
    env.cli(&[
        "webhook",
        "update",
        "orders",
        "--max-retries",
        "1",
        "--event",
        "on_cancel",
    ])
    .ok("webhook update");
    let updated = env
        .cli(&["webhook", "show", "orders", "--json"])
        .ok("webhook show")
        .json();
    assert_eq!(updated["max_retries"], 1);
    assert_eq!(updated["event"], "on_cancel");
    for (key, before) in shown.as_object().expect("object") {
        if !matches!(key.as_str(), "max_retries" | "event" | "updated_at") {
            assert_eq!(&updated[key], before, "update changed {key}");
        }
    }

    env.cli(&["webhook", "disable", "orders"]).ok("disable");
    let off = env
        .cli(&["webhook", "show", "orders", "--json"])
        .ok("show")
        .json();
    assert_eq!(off["enabled"], false);
    env.cli(&["webhook", "enable", "orders"]).ok("enable");
    let on = env
        .cli(&["webhook", "show", "orders", "--json"])
        .ok("show")
        .json();
    assert_eq!(on["enabled"], true);

    let deleted = env.cli(&["webhook", "delete", "orders"]).ok("delete");
    assert!(
        deleted.stdout.contains("deleted webhook orders"),
        "{deleted}"
    );
    assert_eq!(env.listed_webhooks(), json!([]));
    let again = env.cli(&["webhook", "delete", "orders"]);
    assert_eq!(again.code, Some(1), "a second delete: {again}");
    assert!(again.stderr.contains("not found"), "{again}");
    let gone = env.cli(&["webhook", "show", "orders", "--json"]);
    assert_eq!(gone.code, Some(1), "show after delete: {gone}");
}

#[test]
fn a_misspelt_frappe_event_is_stored_with_a_warning_naming_the_one_meant() {
    let env = TestEnv::new();
    let typo = add(&env, "typo", ENTITY, "on_sbumit", &[]);
    assert_eq!(typo.code, Some(0), "{typo}");
    assert!(
        typo.stderr
            .contains(r#"event "on_sbumit" is not one of Frappe's; did you mean "on_submit"?"#),
        "{typo}"
    );
    // An application's own event, far from Frappe's, passes quietly.
    let own = add(&env, "own", ENTITY, "invoice_paid", &[]);
    assert_eq!(own.code, Some(0), "{own}");
    assert!(!own.stderr.contains("did you mean"), "{own}");
    // So does update, when it renames the event to a misspelt one.
    let updated = env.cli(&["webhook", "update", "own", "--event", "on_cancle"]);
    assert_eq!(updated.code, Some(0), "{updated}");
    assert!(
        updated.stderr.contains(r#"did you mean "on_cancel"?"#),
        "{updated}"
    );
    // An update that leaves the event alone says nothing of it.
    let quiet = env.cli(&["webhook", "update", "typo", "--timeout", "3s"]);
    assert_eq!(quiet.code, Some(0), "{quiet}");
    assert!(!quiet.stderr.contains("did you mean"), "{quiet}");
}

/// `--frappe-body` sends what Frappe's sender would: Python's text inside
/// quotes and `json.dumps`'s bytes; `--no-frappe-body` goes back to
/// hookfleet's own writing. The view says which.
#[test]
fn frappe_body_writes_the_bytes_frappes_sender_writes_and_can_be_turned_off() {
    let env = TestEnv::new();
    let body = r#"{"name":"{{ doc.customer }}","note":"{{ doc.note }}","total":{{ doc.total }}}"#;
    let run = add(
        &env,
        "bytes",
        ENTITY,
        "on_submit",
        &["--body-template", body, "--frappe-body"],
    );
    assert_eq!(run.code, Some(0), "{run}");
    let doc = TempFile::new(
        json!({"doctype": ENTITY, "name": "SO-1", "customer": "Müller", "note": null, "total": 14750.0})
            .to_string(),
    );
    let preview = |env: &TestEnv| -> String {
        let p = env.cli(&["webhook", "preview", "bytes", "--doc", doc.path(), "--json"]);
        let v: Value = serde_json::from_str(&p.stdout).unwrap_or_else(|_| panic!("{p}"));
        v["body"].as_str().expect("a body").to_string()
    };
    assert_eq!(
        preview(&env),
        r#"{"name": "M\u00fcller", "note": "None", "total": 14750.0}"#
    );
    let shown = env.cli(&["webhook", "show", "bytes", "--json"]);
    let shown: Value = serde_json::from_str(&shown.stdout).expect("JSON");
    assert_eq!(shown["frappe_body"], true);

    let off = env.cli(&["webhook", "update", "bytes", "--no-frappe-body"]);
    assert_eq!(off.code, Some(0), "{off}");
    assert_eq!(
        preview(&env),
        r#"{"name":"Müller","note":"","total":14750.0}"#
    );
}
