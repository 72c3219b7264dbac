//! Frappe's webhooks run unchanged. The corpus under `tests/fixtures/frappe/`
//! holds Webhook documents as Frappe exports them (Python conditions, Jinja
//! bodies with Frappe's filters and `utils`), each with a document and what
//! Frappe would do with it; every one is imported with `hookfleet webhook
//! import`, previewed with `webhook preview --json`, and delivered by a real
//! worker to a loopback receiver with the body the preview showed. Then the
//! refusals (an import, a dunder, an unknown function), the importer's
//! updates, refusals and `--atomic`, and the README's Python snippet against
//! the real ingest.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_testkit::{IngestProcess, Receiver, Run, TempFile, TestEnv};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/frappe");

/// How long a test waits for deliveries that should come.
const PATIENCE: Duration = Duration::from_secs(30);

/// One corpus entry.
struct Fixture {
    stem: String,
    webhook: Value,
    doc: Value,
    meets_condition: bool,
    body: Value,
    path_suffix: String,
}

fn fixtures() -> Vec<Fixture> {
    let mut paths: Vec<_> = std::fs::read_dir(FIXTURES)
        .expect("the Frappe fixtures")
        .map(|e| e.expect("a fixture").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 15, "the corpus shrank: {paths:?}");
    paths
        .iter()
        .map(|p| {
            let v: Value =
                serde_json::from_str(&std::fs::read_to_string(p).expect("read")).expect("JSON");
            Fixture {
                stem: p.file_stem().unwrap().to_string_lossy().into_owned(),
                webhook: v["webhook"].clone(),
                doc: v["doc"].clone(),
                meets_condition: v["meets_condition"].as_bool().expect("meets_condition"),
                body: v["body"].clone(),
                path_suffix: v["path_suffix"].as_str().unwrap_or("").to_string(),
            }
        })
        .collect()
}

/// `hookfleet webhook import FILE EXTRA…` of `docs`.
fn import(env: &TestEnv, docs: &Value, extra: &[&str]) -> Run {
    let file = TempFile::new(docs.to_string());
    let mut args = vec!["webhook", "import", file.path()];
    args.extend_from_slice(extra);
    env.cli(&args)
}

fn preview(env: &TestEnv, name: &str, doc: &Value) -> Value {
    let file = TempFile::new(doc.to_string());
    env.cli(&["webhook", "preview", name, "--doc", file.path(), "--json"])
        .ok("webhook preview")
        .json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_frappe_webhook_in_the_corpus_previews_and_delivers_the_body_frappe_would_send() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    let corpus = fixtures();
    // Each webhook on an event of its own, so one emit reaches exactly it.
    let docs: Vec<Value> = corpus
        .iter()
        .map(|f| {
            let mut w = f.webhook.clone();
            let url = w["request_url"]
                .as_str()
                .unwrap()
                .replace("RECEIVER", &receiver.url(&format!("/{}", f.stem)));
            w["request_url"] = json!(url);
            w["webhook_docevent"] = json!(f.stem);
            w
        })
        .collect();
    let out = import(&env, &Value::Array(docs.clone()), &[]).ok("import the corpus");
    assert_eq!(out.stdout.matches("created").count(), corpus.len(), "{out}");

    let mut previews = BTreeMap::new();
    for (f, w) in corpus.iter().zip(&docs) {
        let name = w["name"].as_str().unwrap();
        let p = preview(&env, name, &f.doc);
        assert_eq!(p["condition_error"], Value::Null, "{}: {p}", f.stem);
        assert_eq!(
            p["meets_condition"],
            json!(f.meets_condition),
            "{}: {p}",
            f.stem
        );
        let body = p["body"]
            .as_str()
            .unwrap_or_else(|| panic!("{}: no body: {p}", f.stem));
        let parsed: Value = serde_json::from_str(body).expect("the previewed body is JSON");
        assert_eq!(parsed, f.body, "{}: the body differs from Frappe's", f.stem);
        let url = p["url"].as_str().expect("a URL");
        assert!(
            url.ends_with(&format!("/{}{}", f.stem, f.path_suffix)),
            "{}: {url}",
            f.stem
        );
        previews.insert(f.stem.clone(), body.to_string());
    }

    for f in &corpus {
        let report = env
            .emit_by_cli(&f.stem, "SO-0001", &f.doc)
            .ok("emit")
            .json();
        let deliveries = report["deliveries"].as_array().expect("deliveries").len();
        assert_eq!(
            deliveries,
            usize::from(f.meets_condition),
            "{}: {report}",
            f.stem
        );
    }
    let expected = corpus.iter().filter(|f| f.meets_condition).count();
    assert!(expected >= 12, "most of the corpus is delivered");
    let worker = env.start_worker(4, TestEnv::fast_schedule());
    let got = receiver.wait_for(expected, PATIENCE).await;
    worker.stop().await;
    assert_eq!(got.len(), expected, "every qualifying event was delivered");
    for f in corpus.iter().filter(|f| f.meets_condition) {
        let path = format!("/{}{}", f.stem, f.path_suffix);
        let r = got
            .iter()
            .find(|r| r.path == path)
            .unwrap_or_else(|| panic!("{}: nothing reached {path}", f.stem));
        assert_eq!(
            r.body, previews[&f.stem],
            "{}: the delivered body is not the previewed one",
            f.stem
        );
    }
    assert!(env
        .rows()
        .iter()
        .all(|r| r.status == DeliveryStatus::Delivered));
}

/// `webhook add` with a Frappe-style condition; the run.
fn add_with_condition(env: &TestEnv, name: &str, condition: &str) -> Run {
    env.webhook_add(
        name,
        "Sales Order",
        "on_submit",
        "https://example.com/hook",
        &["--condition", condition],
    )
}

#[test]
fn constructs_outside_the_subset_are_refused_at_add_with_the_construct_named() {
    let env = TestEnv::new();
    for (condition, names) in [
        ("__import__('os').system('id')", "__import__"),
        ("import os", "import"),
        ("doc.__class__", "__class__"),
        ("doc.name.__len__() > 0", "__len__"),
        ("eval('1') == 1", "eval"),
        ("open('/etc/passwd')", "open"),
        ("getattr(doc, 'name')", "getattr"),
        ("system('id')", "system"),
        ("utils.get_url() != ''", "get_url"),
        ("doc.name.format() == ''", "format"),
        ("(lambda: 1)()", "lambda"),
        ("[i for i in doc.items]", "comprehension"),
        ("f'{doc.name}' == ''", "f-string"),
    ] {
        let out = add_with_condition(&env, "refused", condition);
        assert_eq!(out.code, Some(1), "{condition:?} was accepted: {out}");
        assert!(
            out.stderr.contains(names),
            "{condition:?}: the message does not name {names:?}: {out}"
        );
    }
    assert_eq!(
        env.listed_webhooks(),
        json!([]),
        "a refused webhook was stored"
    );
    // The issue's table: each of these is now accepted.
    for (i, condition) in [
        r#"doc.get("status") == "Approved""#,
        "len(doc.items) > 0",
        "utils.flt(doc.grand_total) > 1",
        r#"doc.status in ("Approved", "Open")"#,
    ]
    .iter()
    .enumerate()
    {
        add_with_condition(&env, &format!("ok{i}"), condition).ok(condition);
    }
}

#[test]
fn a_preview_says_why_a_condition_fails_and_hides_header_values() {
    let env = TestEnv::new();
    let doc = json!({"doctype": "Sales Order", "name": "SO-9", "grand_total": "abc", "items": []});
    let hook = json!({
        "doctype": "Webhook", "name": "Preview Me", "webhook_doctype": "Sales Order",
        "webhook_docevent": "on_submit", "request_url": "https://example.com/in",
        "request_structure": "JSON", "condition": "len(doc.items) > 0",
        "webhook_json": "{\"name\": \"{{ doc.name }}\", \"total\": {{ doc.grand_total | flt }}}",
        "webhook_headers": [{"key": "Authorization", "value": "token SECRET-VALUE"}],
        "enable_security": 1, "webhook_secret": "shh-its-a-secret"
    });
    import(&env, &hook, &[]).ok("import");
    let p = preview(&env, "Preview Me", &doc);
    assert_eq!(p["meets_condition"], json!(false), "{p}");
    assert_eq!(p["condition_error"], Value::Null, "{p}");
    assert_eq!(p["body"], json!(r#"{"name": "SO-9", "total": 0.0}"#), "{p}");
    assert_eq!(p["method"], json!("POST"));
    let text = p.to_string();
    assert!(
        !text.contains("SECRET-VALUE"),
        "a header value shows: {text}"
    );
    assert!(
        !text.contains("shh-its-a-secret"),
        "the secret shows: {text}"
    );
    let headers = p["headers"].as_array().unwrap();
    let names: Vec<&str> = headers.iter().map(|h| h["key"].as_str().unwrap()).collect();
    for h in [
        "Authorization",
        "X-Frappe-Webhook-Signature",
        "webhook-signature",
    ] {
        assert!(names.iter().any(|n| n.eq_ignore_ascii_case(h)), "{h}: {p}");
    }

    // A condition that errors says why, and nothing is recorded or sent.
    env.cli(&[
        "webhook",
        "update",
        "Preview Me",
        "--condition",
        "doc.items[3].qty > 1",
    ])
    .ok("update the condition");
    let p = preview(&env, "Preview Me", &doc);
    assert_eq!(p["meets_condition"], json!(false), "{p}");
    assert!(p["condition_error"].as_str().is_some(), "{p}");
    assert!(env.rows().is_empty(), "a preview recorded a delivery");

    // The table form says the same.
    let file = TempFile::new(doc.to_string());
    let table = env
        .cli(&["webhook", "preview", "Preview Me", "--doc", file.path()])
        .ok("table preview");
    assert!(
        table.stdout.contains("condition  error: condition:"),
        "the table says why the condition fails: {table}"
    );
    assert!(table.stdout.contains("Authorization: [hidden]"), "{table}");
    assert!(!table.stdout.contains("SECRET-VALUE"), "{table}");
    // And a document that is not a JSON object is refused.
    let bad = TempFile::new("[1, 2]");
    let out = env.cli(&["webhook", "preview", "Preview Me", "--doc", bad.path()]);
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stderr.contains("not a JSON object"), "{out}");
}

fn fixture_site(receiver: &Receiver) -> Value {
    json!([
        {
            "doctype": "Webhook", "name": "Orders JSON", "webhook_doctype": "Sales Order",
            "webhook_docevent": "on_submit", "request_url": receiver.url("/json"),
            "request_structure": "JSON", "condition": "doc.docstatus == 1",
            "webhook_json": "{\"order\": \"{{ doc.name }}\", \"total\": {{ doc.grand_total }}}",
            "webhook_headers": [{"key": "X-Api-Key", "value": "k-123"}],
            "enable_security": 1, "webhook_secret": "import-secret",
            "background_jobs_queue": "default", "timeout": 7
        },
        {
            "doctype": "Webhook", "name": "Orders Form", "webhook_doctype": "Sales Order",
            "webhook_docevent": "on_submit", "request_url": receiver.url("/form"),
            "request_structure": "Form URL-Encoded",
            "webhook_data": [{"fieldname": "name", "key": "id"}, {"fieldname": "customer", "key": "who"}]
        },
        {
            "doctype": "Webhook", "name": "Orders Dynamic", "webhook_doctype": "Sales Order",
            "webhook_docevent": "on_submit", "is_dynamic_url": 1,
            "request_url": format!("{}/{{{{ doc.name }}}}", receiver.url("/dyn")),
            "request_structure": "JSON", "webhook_json": "{\"n\": \"{{ doc.name }}\"}"
        }
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn importing_a_site_creates_then_updates_and_delivers() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    receiver.verify_with(&["import-secret"]);
    let site = fixture_site(&receiver);

    let dry = import(&env, &site, &["--dry-run"]).ok("dry run");
    assert_eq!(dry.stdout.matches("would create").count(), 3, "{dry}");
    assert_eq!(env.listed_webhooks(), json!([]), "a dry run wrote");

    let first = import(&env, &site, &["--json"]).ok("first import").json();
    let actions: Vec<&str> = first
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["created", "created", "created"], "{first}");
    assert!(!first.to_string().contains("import-secret"));
    let again = import(&env, &site, &[]).ok("second import");
    assert_eq!(again.stdout.matches("unchanged").count(), 3, "{again}");
    let mut changed = site.clone();
    changed[1]["webhook_data"][1]["key"] = json!("customer_name");
    // The REST API masks the secret: the stored one is kept.
    changed[0]["webhook_secret"] = json!("*************");
    let third = import(&env, &changed, &[]).ok("third import");
    assert!(third.stdout.contains("updated      Orders Form"), "{third}");
    assert!(third.stdout.contains("unchanged    Orders JSON"), "{third}");
    let listed = env.listed_webhooks();
    assert_eq!(
        listed.as_array().unwrap().len(),
        3,
        "no duplicates: {listed}"
    );
    let shown = env
        .cli(&["webhook", "show", "Orders JSON", "--json"])
        .ok("show")
        .json();
    assert_eq!(shown["signed"], json!(true));
    assert_eq!(shown["timeout"], json!("7s"));
    // Imported, it sends the bytes Frappe's sender would.
    assert_eq!(shown["frappe_body"], json!(true));

    let doc = json!({"doctype": "Sales Order", "name": "SO-7", "customer": "Globex",
                     "docstatus": 1, "grand_total": 99.5});
    env.emit_by_cli("on_submit", "SO-7", &doc).ok("emit");
    let worker = env.start_worker(4, TestEnv::fast_schedule());
    let got = receiver.wait_for(3, PATIENCE).await;
    worker.stop().await;
    let by_path = |p: &str| {
        got.iter()
            .find(|r| r.path == p)
            .unwrap_or_else(|| panic!("{p}: {got:?}"))
    };
    let json_req = by_path("/json");
    assert_eq!(json_req.json(), json!({"order": "SO-7", "total": 99.5}));
    assert!(json_req.signatures_verified(), "the imported secret signs");
    assert_eq!(json_req.header("x-api-key"), Some("k-123"));
    assert_eq!(
        by_path("/form").json(),
        json!({"id": "SO-7", "customer_name": "Globex"})
    );
    assert_eq!(by_path("/dyn/SO-7").json(), json!({"n": "SO-7"}));
}

#[test]
fn a_broken_document_is_reported_and_the_others_import_unless_atomic() {
    let env = TestEnv::new();
    let good = json!({
        "doctype": "Webhook", "name": "Good One", "webhook_doctype": "Sales Order",
        "webhook_docevent": "on_submit", "request_url": "https://example.com/a"
    });
    let broken = [
        (
            json!({"doctype": "Webhook", "name": "No Url", "webhook_doctype": "Sales Order",
                "webhook_docevent": "on_submit"}),
            "request_url is missing",
        ),
        (
            json!({"doctype": "Webhook", "name": "Bad Condition", "webhook_doctype": "Sales Order",
                "webhook_docevent": "on_submit", "request_url": "https://example.com/b",
                "condition": "doc.__class__"}),
            "__class__",
        ),
        (
            json!({"doctype": "Webhook", "name": "Masked", "webhook_doctype": "Sales Order",
                "webhook_docevent": "on_submit", "request_url": "https://example.com/c",
                "enable_security": 1, "webhook_secret": "*****"}),
            "masked",
        ),
        (
            json!({"doctype": "Webhook", "name": "Internal", "webhook_doctype": "Sales Order",
                "webhook_docevent": "on_submit", "request_url": "http://169.254.169.254/x"}),
            "169.254.169.254",
        ),
    ];
    for (doc, reason) in &broken {
        let docs = json!([good.clone(), doc.clone()]);
        let atomic = import(&env, &docs, &["--atomic"]);
        assert_eq!(atomic.code, Some(1), "{atomic}");
        assert!(atomic.stdout.contains(reason), "{reason}: {atomic}");
        assert!(atomic.stdout.contains("skipped"), "{atomic}");
        assert_eq!(env.listed_webhooks(), json!([]), "--atomic wrote: {atomic}");
    }
    let mut docs = vec![good.clone()];
    docs.extend(broken.iter().map(|(d, _)| d.clone()));
    let out = import(&env, &Value::Array(docs), &[]);
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stdout.contains("created      Good One"), "{out}");
    assert!(out.stderr.contains("4 of 5 documents refused"), "{out}");
    let listed = env.listed_webhooks();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    // Not JSON at all: refused as a whole.
    let out = env.cli(&["webhook", "import", TempFile::new("{").path()]);
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stderr.contains("not JSON"), "{out}");
}

// ---------------------------------------------------------------------------
// The README's Python snippet, run against the real ingest.
// ---------------------------------------------------------------------------

const SNIPPET: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/frappe/hookfleet_events.py"
);

#[test]
fn the_readme_shows_the_snippet_the_tests_run() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README");
    let snippet = std::fs::read_to_string(SNIPPET).expect("snippet");
    assert!(
        readme.contains(&snippet),
        "README.md must show examples/frappe/hookfleet_events.py as it is"
    );
}

/// Runs the snippet under a stand-in `frappe` module (flags, after-commit
/// and after-rollback callbacks, site config, log_error, enqueue), with
/// `transactions` (each `{"events", "rollback"}`) run in order; what the
/// stand-in saw.
fn run_snippet(ingest: &str, token: &str, transactions: &Value) -> Value {
    let python = std::env::var("HOOKFLEET_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let harness = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/py/fake_frappe_site.py"
    );
    let dir = Path::new(SNIPPET).parent().unwrap();
    let out = Command::new(python)
        .args([harness, dir.to_str().unwrap(), ingest, token])
        .arg(transactions.to_string())
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "the snippet failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the harness prints JSON")
}

#[test]
fn the_python_snippet_sends_a_sites_events_to_the_ingest_once() {
    let env = TestEnv::new();
    env.add_quiet_webhook("orders", "on_submit");
    let token = "a-token-of-twenty-characters";
    let ingest = IngestProcess::start(&env, &["--token", token]);
    let events = json!([
        {"method": "on_submit", "doc": {"doctype": "Sales Order", "name": "SO-1",
            "modified": "2026-11-30 10:00:00.000001", "grand_total": 10.5,
            "items": [{"item_code": "I-1", "qty": 1}]}},
        {"method": "on_submit", "doc": {"doctype": "Sales Order", "name": "SO-2",
            "modified": "2026-11-30 10:00:01", "grand_total": 3}},
        {"method": "on_update", "doc": {"doctype": "Sales Order", "name": "SO-2",
            "modified": "2026-11-30 10:00:01", "grand_total": 3}}
    ]);
    let events = json!([{"events": events}]);
    let seen = run_snippet(&ingest.base, token, &events);
    assert_eq!(seen, json!({"errors": [], "jobs": 0}), "{seen}");
    let rows = env.rows();
    let mut names: Vec<&str> = rows.iter().map(|r| r.entity_name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["SO-1", "SO-2"], "one row per subscribed event");
    let so1 = rows.iter().find(|r| r.entity_name == "SO-1").unwrap();
    assert_eq!(so1.event_id.len(), 64, "a sha256 event id");
    // The same transaction reported again (a retried request) adds nothing.
    let again = run_snippet(&ingest.base, token, &events);
    assert_eq!(again, json!({"errors": [], "jobs": 0}));
    assert_eq!(env.rows().len(), 2, "a repeated event was recorded twice");
    // A wrong token: the events are not lost, they go to a background job.
    let refused = run_snippet(&ingest.base, "not-the-token-at-all", &events);
    assert_eq!(refused["jobs"], json!(1), "{refused}");
    assert_eq!(refused["errors"].as_array().unwrap().len(), 1, "{refused}");

    // A rolled-back transaction sends nothing, and the next one still goes.
    let doc =
        |name: &str| json!({"doctype": "Sales Order", "name": name, "modified": "2026-12-01"});
    let seen = run_snippet(
        &ingest.base,
        token,
        &json!([
            {"events": [{"method": "on_submit", "doc": doc("SO-ROLLED-BACK")}], "rollback": true},
            {"events": [{"method": "on_submit", "doc": doc("SO-3")}]},
            {"events": [{"method": "on_submit", "doc": doc("SO-4")}]}
        ]),
    );
    assert_eq!(seen, json!({"errors": [], "jobs": 0}), "{seen}");
    let mut names: Vec<String> = env.rows().into_iter().map(|r| r.entity_name).collect();
    names.sort();
    assert_eq!(names, ["SO-1", "SO-2", "SO-3", "SO-4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reimport_replaces_a_changed_secret_removes_a_dropped_one_and_keeps_local_settings() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    let site = fixture_site(&receiver);
    import(&env, &site, &[]).ok("first import");
    env.cli(&["webhook", "update", "Orders Form", "--max-concurrency", "2"])
        .ok("a setting Frappe does not have");

    let mut changed = site.clone();
    changed[0]["webhook_secret"] = json!("the-new-secret");
    changed[2]["enable_security"] = json!(0);
    let out = import(&env, &changed, &[]).ok("reimport");
    assert!(out.stdout.contains("updated      Orders JSON"), "{out}");
    assert!(out.stdout.contains("the secret changed"), "{out}");
    assert!(out.stdout.contains("unchanged    Orders Form"), "{out}");
    let form = env
        .cli(&["webhook", "show", "Orders Form", "--json"])
        .ok("show")
        .json();
    assert_eq!(
        form["max_concurrency"],
        json!(2),
        "a reimport undid a local setting"
    );

    // Frappe already signs with the new secret: so does hookfleet, alone,
    // at once (no rotation keeping the old one in the Frappe header).
    receiver.verify_with(&["the-new-secret"]);
    let doc = json!({"doctype": "Sales Order", "name": "SO-8", "customer": "Initech",
                     "docstatus": 1, "grand_total": 1});
    env.emit_by_cli("on_submit", "SO-8", &doc).ok("emit");
    let worker = env.start_worker(4, TestEnv::fast_schedule());
    let got = receiver.wait_for(3, PATIENCE).await;
    worker.stop().await;
    let signed = got
        .iter()
        .find(|r| r.path == "/json")
        .expect("the JSON webhook");
    assert!(signed.signatures_verified(), "{signed:?}");
    assert_eq!(
        signed
            .header("webhook-signature")
            .map(|h| h.split(' ').count()),
        Some(1),
        "one signature: no rotation"
    );

    // Signing turned off in Frappe removes the stored secret.
    let mut unsigned = site.clone();
    unsigned[0]["enable_security"] = json!(0);
    import(&env, &unsigned, &[]).ok("unsigned");
    let shown = env
        .cli(&["webhook", "show", "Orders JSON", "--json"])
        .ok("show")
        .json();
    assert_eq!(shown["signed"], json!(false));
}

#[test]
fn a_name_given_twice_in_one_file_is_imported_once() {
    let env = TestEnv::new();
    let doc = |url: &str| {
        json!({"doctype": "Webhook", "name": "Twice (EU) / Müller", "webhook_doctype": "Sales Order",
               "webhook_docevent": "on_submit", "request_url": url})
    };
    // Whatever became of the first (refused here), the second is refused too.
    let out = import(
        &env,
        &json!([doc("http://10.0.0.1/x"), doc("https://example.com/ok")]),
        &[],
    );
    assert_eq!(out.code, Some(1), "{out}");
    assert_eq!(out.stdout.matches("refused").count(), 2, "{out}");
    assert!(
        out.stdout.contains("another document of this name"),
        "{out}"
    );
    assert_eq!(env.listed_webhooks(), json!([]));
    // Frappe's prompt names (brackets, slashes, accents) are kept as they are.
    import(&env, &doc("https://example.com/ok"), &[]).ok("one");
    assert_eq!(
        env.listed_webhooks()[0]["name"],
        json!("Twice (EU) / Müller")
    );
    let hidden = env.webhook_add(
        "evil\u{202e}name",
        "Sales Order",
        "on_submit",
        "https://example.com/x",
        &[],
    );
    assert_eq!(hidden.code, Some(1), "{hidden}");
}

#[test]
fn utils_answer_in_the_site_time_zone() {
    let env = TestEnv::new();
    env.webhook_add(
        "dated",
        "Sales Order",
        "on_submit",
        "https://example.com/x",
        &["--body-template", r#"{"d": "{{ utils.nowdate() }}"}"#],
    )
    .ok("add");
    let doc = TempFile::new(json!({"doctype": "Sales Order", "name": "SO-1"}).to_string());
    let preview_in = |zone: &str| {
        let mut cmd = env.command("hookfleet");
        cmd.args(["webhook", "preview", "dated", "--doc", doc.path(), "--json"])
            .env("HOOKFLEET_TIME_ZONE", zone);
        hookfleet_testkit::run_with_stdin(cmd, None)
    };
    // Kiritimati is UTC+14 all year: its date is UTC's tomorrow for most of
    // the day, so a renderer that ignored the zone would show.
    let p = preview_in("Pacific/Kiritimati").ok("preview").json();
    let body: Value = serde_json::from_str(p["body"].as_str().unwrap()).unwrap();
    let shown = body["d"].as_str().unwrap().to_string();
    let before = chrono::Utc::now() + chrono::Duration::hours(14);
    let dates: Vec<String> = [
        before - chrono::Duration::minutes(1),
        before + chrono::Duration::minutes(1),
    ]
    .iter()
    .map(|t| t.format("%Y-%m-%d").to_string())
    .collect();
    assert!(
        dates.contains(&shown),
        "{shown} is not Kiritimati's date {dates:?}"
    );
    let bad = preview_in("Mars/Olympus_Mons");
    assert_eq!(bad.code, Some(2), "{bad}");
    assert!(bad.stderr.contains("Mars/Olympus_Mons"), "{bad}");
}

/// At a terminal the import says how far its checking got; piped, it
/// prints its report alone.
#[test]
fn the_import_shows_its_progress_at_a_terminal_and_nothing_else_when_piped() {
    let env = TestEnv::new();
    let docs: Vec<Value> = (1..=3)
        .map(|i| {
            json!({
                "doctype": "Webhook", "name": format!("Hook {i}"),
                "webhook_doctype": "Sales Order", "webhook_docevent": "on_submit",
                "request_url": "http://127.0.0.1:9/x", "request_method": "POST",
                "request_structure": "JSON", "webhook_json": "{\"n\": {{ doc.name | tojson }}}",
                "enabled": 1,
            })
        })
        .collect();
    let file = TempFile::new(Value::from(docs).to_string());
    let piped = env.cli(&["webhook", "import", file.path(), "--dry-run"]);
    assert_eq!(piped.code, Some(0), "{piped}");
    assert!(!piped.stderr.contains("checked"), "{piped}");

    // `script` gives the command a terminal (util-linux, as on Debian).
    let line = format!(
        "{} webhook import {} --dry-run",
        hookfleet_testkit::bin_path("hookfleet").display(),
        file.path()
    );
    let mut cmd = Command::new("script");
    cmd.args(["-qec", &line, "/dev/null"]);
    for (k, v) in env.envs() {
        cmd.env(k, v);
    }
    let shown = hookfleet_testkit::run_with_stdin(cmd, None);
    assert_eq!(shown.code, Some(0), "{shown}");
    assert!(shown.stdout.contains("checked 1 of 3 webhooks"), "{shown}");
    assert!(
        shown.stdout.contains("Hook 3"),
        "the report after it: {shown}"
    );
}
