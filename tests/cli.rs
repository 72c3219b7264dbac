//! The command lines, run as real processes: `hookfleet` (the operator's
//! CLI) and `hookfleet-producer`, against the test's own Postgres database and
//! Redis prefix (DESIGN "Command line and configuration"): what they refuse,
//! what they print, what they write, their exit codes, and that a signing
//! secret never comes back out of any of them.

use hookfleet_core::model::DeliveryStatus;
use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use diesel::RunQueryDsl;
use serde_json::{json, Value};

use hookfleet_testkit::{Receiver, Reply, TempFile, TestEnv};

/// How long a test waits for something that normally takes milliseconds
/// (a worker delivering one row, a process exiting after SIGTERM).
const WAIT: Duration = Duration::from_secs(20);

/// The signing secret the write-only tests look for in every output.
const SECRET: &str = "S3CR3T-VALUE-123";

/// What a finished process printed, and how it ended.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn from(out: Output) -> Run {
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Both streams, for "never appears anywhere" checks.
    fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }

    /// Panics (with what the process said) unless it exited 0.
    fn ok(self, what: &str) -> Run {
        assert_eq!(
            self.code,
            Some(0),
            "{what} failed:\nstdout: {}\nstderr: {}",
            self.stdout,
            self.stderr
        );
        self
    }

    /// The one JSON document a `--json` command printed.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\nstdout: {}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\nstdout: {}\nstderr: {}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// `hookfleet ARGS`.
fn cli(env: &TestEnv, args: &[&str]) -> Run {
    Run::from(env.cli(args))
}

/// `hookfleet-producer ARGS`, with `stdin` fed to it when given.
fn producer(env: &TestEnv, args: &[&str], stdin: Option<&str>) -> Run {
    let mut cmd = env.command("hookfleet-producer");
    cmd.args(args);
    run_with_stdin(cmd, stdin)
}

fn run_with_stdin(mut cmd: Command, stdin: Option<&str>) -> Run {
    let Some(input) = stdin else {
        return Run::from(cmd.output().expect("run process"));
    };
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn process");
    let mut pipe = child.stdin.take().expect("stdin");
    pipe.write_all(input.as_bytes()).expect("write stdin");
    drop(pipe);
    Run::from(child.wait_with_output().expect("wait for process"))
}

/// `hookfleet-producer emit` of one event, the document on stdin, `--json`.
fn emit(env: &TestEnv, event: &str, name: &str, doc: &Value) -> Run {
    producer(
        env,
        &[
            "emit",
            "--entity-type",
            "Sales Order",
            "--event",
            event,
            "--name",
            name,
            "--doc",
            "-",
            "--json",
        ],
        Some(&doc.to_string()),
    )
}

/// The ids of the rows an `emit --json` report lists.
fn ids_of(report: &Value) -> Vec<i64> {
    report["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .map(|d| d["id"].as_i64().expect("id"))
        .collect()
}

/// `hookfleet webhook list --json`.
fn webhooks(env: &TestEnv) -> Value {
    cli(env, &["webhook", "list", "--json"])
        .ok("webhook list")
        .json()
}

/// Runs blocking process calls from an async test without stalling the
/// runtime that serves the test's receiver.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Length of the `default` queue in Redis.
fn default_queue_depth(env: &TestEnv) -> i64 {
    env.llen(&env.queue.keys().queue("default"))
}

/// A `hookfleet-worker` process whose log output is captured; killed if the
/// test ends without stopping it.
struct WorkerProcess {
    child: Child,
    log: Option<std::thread::JoinHandle<String>>,
}

impl WorkerProcess {
    fn start(env: &TestEnv) -> WorkerProcess {
        let mut child = env
            .command("hookfleet-worker")
            .args(["--concurrency", "2"])
            .env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn hookfleet-worker");
        let mut stderr = child.stderr.take().expect("stderr");
        let mut stdout = child.stdout.take().expect("stdout");
        // Read while it runs, so a chatty debug log never fills the pipe.
        let log = std::thread::spawn(move || {
            let out = std::thread::spawn(move || {
                let mut text = String::new();
                let _ = stdout.read_to_string(&mut text);
                text
            });
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text.push_str(&out.join().unwrap_or_default());
            text
        });
        WorkerProcess {
            child,
            log: Some(log),
        }
    }

    /// Sends SIGTERM, waits for the process to exit, returns how it ended and
    /// everything it logged.
    fn stop(&mut self) -> (ExitStatus, String) {
        let sent = Command::new("kill")
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM failed");
        let deadline = Instant::now() + WAIT;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the worker did not exit within {WAIT:?} of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let log = self
            .log
            .take()
            .expect("log reader")
            .join()
            .expect("log reader thread");
        (status, log)
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

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
    let out = cli(&env, &args);
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
        webhooks(&env),
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
    // The name renders unquoted: `{"a": SAMPLE-0001}`.
    assert_add_refused(
        &[
            "--url",
            "http://127.0.0.1/x",
            "--body-template",
            r#"{"a": {{ doc.name }}}"#,
        ],
        &["did not render to json", "SAMPLE-0001"],
    );
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
fn an_internal_address_is_accepted_exactly_when_its_network_is_allowed() {
    let env = TestEnv::new();
    let add = |name: &str, url: &str, allowed: Option<&str>| {
        let mut cmd = env.command("hookfleet");
        cmd.args([
            "webhook",
            "add",
            name,
            "--entity-type",
            "Sales Order",
            "--event",
            "on_submit",
            "--url",
            url,
        ]);
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

    let listed = webhooks(&env);
    let names: Vec<&str> = listed
        .as_array()
        .expect("list")
        .iter()
        .map(|w| w["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, vec!["loopback", "private"]);
}

// ---------------------------------------------------------------------------
// 2. Usage errors exit 2.
// ---------------------------------------------------------------------------

#[test]
fn usage_errors_exit_with_code_two() {
    let env = TestEnv::new();
    let cases: &[(&str, &[&str])] = &[
        ("hookfleet", &["frobnicate"]),
        ("hookfleet", &["webhook", "frobnicate"]),
        ("hookfleet", &["webhook", "show"]),
        ("hookfleet", &["webhook", "list", "--no-such-flag"]),
        ("hookfleet", &["delivery", "show", "not-a-number"]),
        ("hookfleet", &["delivery", "list", "--status", "Lost"]),
        ("hookfleet", &["delivery", "retry"]),
        (
            "hookfleet-producer",
            &["emit", "--event", "on_submit", "--name", "SO-1"],
        ),
        ("hookfleet-producer", &["frobnicate"]),
    ];
    let mut wrong = Vec::new();
    for (bin, args) in cases {
        let out = Run::from(
            env.command(bin)
                .args(*args)
                .output()
                .expect("run the binary"),
        );
        if out.code != Some(2) || !out.stderr.to_lowercase().contains("error") {
            wrong.push(format!("{bin} {args:?}: {out}"));
        }
    }
    // Without DATABASE_URL (a required setting).
    let out = Run::from(
        env.command("hookfleet")
            .args(["webhook", "list"])
            .env_remove("DATABASE_URL")
            .output()
            .expect("run hookfleet"),
    );
    if out.code != Some(2) || !out.stderr.contains("--database-url") {
        wrong.push(format!("hookfleet without DATABASE_URL: {out}"));
    }
    assert!(
        wrong.is_empty(),
        "not usage errors (exit 2):\n{}",
        wrong.join("\n---\n")
    );
    assert_eq!(webhooks(&env), json!([]));
    assert!(env.rows().is_empty());
}

/// `webhook add` without --entity-type, --event or --url is a missing
/// required flag: a usage error (2), like every other missing argument.
#[test]
fn webhook_add_without_a_required_flag_is_a_usage_error() {
    let env = TestEnv::new();
    let missing: &[(&str, &[&str])] = &[
        (
            "--entity-type",
            &["--event", "on_submit", "--url", "http://127.0.0.1/x"],
        ),
        (
            "--event",
            &[
                "--entity-type",
                "Sales Order",
                "--url",
                "http://127.0.0.1/x",
            ],
        ),
        (
            "--url",
            &["--entity-type", "Sales Order", "--event", "on_submit"],
        ),
    ];
    let mut wrong = Vec::new();
    for (flag, rest) in missing {
        let mut args = vec!["webhook", "add", "incomplete"];
        args.extend_from_slice(rest);
        let out = cli(&env, &args);
        if out.code != Some(2) || !out.stderr.contains(flag) {
            wrong.push(format!("without {flag}: {out}"));
        }
    }
    assert_eq!(webhooks(&env), json!([]), "nothing is written");
    assert!(
        wrong.is_empty(),
        "a missing required flag must exit 2 and name the flag:\n{}",
        wrong.join("\n---\n")
    );
}

// ---------------------------------------------------------------------------
// 3. A webhook's life: add, show, list, update, disable, enable, delete.
// ---------------------------------------------------------------------------

#[test]
fn webhook_add_show_list_update_toggle_and_delete_round_trip_every_field() {
    let env = TestEnv::new();
    let template = r#"{"order": "{{ doc.name }}", "total": {{ doc.grand_total | tojson }}}"#;
    let add = cli(
        &env,
        &[
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
        ],
    )
    .ok("webhook add");
    assert!(add.stdout.contains("added webhook orders"), "{add}");

    let shown = cli(&env, &["webhook", "show", "orders", "--json"])
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
        "headers": [{"key": "X-Tenant", "value": "acme"}],
        "condition": "doc.grand_total > 100",
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

    let listed = webhooks(&env);
    assert_eq!(listed.as_array().expect("list").len(), 1, "{listed}");
    assert_eq!(listed[0], shown, "list shows what show shows");

    // Update changes only the fields given.
    cli(
        &env,
        &[
            "webhook",
            "update",
            "orders",
            "--max-retries",
            "1",
            "--event",
            "on_cancel",
        ],
    )
    .ok("webhook update");
    let updated = cli(&env, &["webhook", "show", "orders", "--json"])
        .ok("webhook show")
        .json();
    assert_eq!(updated["max_retries"], 1);
    assert_eq!(updated["event"], "on_cancel");
    for (key, before) in shown.as_object().expect("object") {
        if !matches!(key.as_str(), "max_retries" | "event" | "updated_at") {
            assert_eq!(&updated[key], before, "update changed {key}");
        }
    }

    cli(&env, &["webhook", "disable", "orders"]).ok("disable");
    let off = cli(&env, &["webhook", "show", "orders", "--json"])
        .ok("show")
        .json();
    assert_eq!(off["enabled"], false);
    cli(&env, &["webhook", "enable", "orders"]).ok("enable");
    let on = cli(&env, &["webhook", "show", "orders", "--json"])
        .ok("show")
        .json();
    assert_eq!(on["enabled"], true);

    let deleted = cli(&env, &["webhook", "delete", "orders"]).ok("delete");
    assert!(
        deleted.stdout.contains("deleted webhook orders"),
        "{deleted}"
    );
    assert_eq!(webhooks(&env), json!([]));
    let again = cli(&env, &["webhook", "delete", "orders"]);
    assert_eq!(again.code, Some(1), "a second delete: {again}");
    assert!(again.stderr.contains("not found"), "{again}");
    let gone = cli(&env, &["webhook", "show", "orders", "--json"]);
    assert_eq!(gone.code, Some(1), "show after delete: {gone}");
}

// ---------------------------------------------------------------------------
// 4. The secret is write-only; credential-like header values are hidden.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_is_never_printed_logged_or_stored_on_a_delivery() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    rx.verify_with(&[SECRET]);
    let url = rx.url("/signed");
    blocking(|| {
        cli(
            &env,
            &[
                "webhook",
                "add",
                "signed",
                "--entity-type",
                "Sales Order",
                "--event",
                "on_submit",
                "--url",
                &url,
                "--secret",
                SECRET,
            ],
        )
        .ok("webhook add")
    });
    let report = blocking(|| emit(&env, "on_submit", "SO-1", &json!({"name": "SO-1"})))
        .ok("emit")
        .json();
    let id = ids_of(&report)[0];

    let mut worker = blocking(|| WorkerProcess::start(&env));
    let row = env
        .until_row(id, |r| r.status == DeliveryStatus::Delivered)
        .await;
    let (status, log) = blocking(|| worker.stop());
    assert!(
        status.success(),
        "the worker exited badly on SIGTERM: {status:?}\n{log}"
    );
    assert!(
        log.contains("worker started") && log.contains("attempt finished"),
        "the worker's debug log was not captured: {log}"
    );
    assert!(
        !log.contains(SECRET),
        "the worker logged the secret:\n{log}"
    );

    // The secret signed the request…
    let got = rx.requests();
    assert_eq!(got.len(), 1);
    assert!(
        got[0].signatures_verified(),
        "signatures: {:?} {:?}",
        got[0].frappe_ok,
        got[0].standard_ok
    );
    // …and is stored nowhere on the delivery.
    assert!(
        !row.headers.to_string().contains(SECRET),
        "{:?}",
        row.headers
    );
    assert!(!row.body.contains(SECRET), "{}", row.body);

    let id_text = id.to_string();
    let commands: &[&[&str]] = &[
        &["webhook", "list"],
        &["webhook", "list", "--json"],
        &["webhook", "show", "signed"],
        &["webhook", "show", "signed", "--json"],
        &["delivery", "list"],
        &["delivery", "list", "--json"],
        &["delivery", "show", &id_text],
        &["delivery", "show", &id_text, "--json"],
        &["stats"],
        &["stats", "--json"],
    ];
    for args in commands {
        let out = blocking(|| cli(&env, args)).ok(&format!("{args:?}"));
        assert!(
            !out.all().contains(SECRET),
            "hookfleet {args:?} printed the secret:\n{out}"
        );
    }
    let shown = blocking(|| cli(&env, &["webhook", "show", "signed", "--json"])).json();
    assert_eq!(shown["signed"], true);
}

#[test]
fn a_credential_like_header_value_is_shown_as_hidden() {
    let env = TestEnv::new();
    cli(
        &env,
        &[
            "webhook",
            "add",
            "api",
            "--entity-type",
            "Sales Order",
            "--event",
            "on_submit",
            "--url",
            "http://127.0.0.1:9/api",
            "--header",
            "Authorization: Bearer tok-999",
            "--header",
            "X-Tenant: acme",
        ],
    )
    .ok("webhook add");
    let report = emit(&env, "on_submit", "SO-1", &json!({"name": "SO-1"}))
        .ok("emit")
        .json();
    let id = ids_of(&report)[0].to_string();

    let commands: &[&[&str]] = &[
        &["webhook", "show", "api"],
        &["webhook", "show", "api", "--json"],
        &["webhook", "list", "--json"],
        &["delivery", "show", &id],
        &["delivery", "show", &id, "--json"],
        &["delivery", "list", "--json"],
    ];
    for args in commands {
        let out = cli(&env, args).ok(&format!("{args:?}"));
        assert!(
            !out.all().contains("tok-999"),
            "hookfleet {args:?} printed the credential:\n{out}"
        );
        assert!(
            out.stdout.contains("[hidden]"),
            "hookfleet {args:?}:\n{out}"
        );
        assert!(
            out.stdout.contains("acme"),
            "an ordinary header stays visible: hookfleet {args:?}:\n{out}"
        );
    }
    let shown = cli(&env, &["webhook", "show", "api", "--json"]).json();
    assert!(
        shown["headers"]
            .as_array()
            .expect("headers")
            .contains(&json!({"key": "Authorization", "value": "[hidden]"})),
        "{shown}"
    );
    // Hidden in output only: the stored request still carries it.
    let stored = env
        .row(id.parse().expect("id"))
        .header_list()
        .expect("headers");
    assert!(
        stored
            .iter()
            .any(|h| h.key == "Authorization" && h.value == "Bearer tok-999"),
        "{stored:?}"
    );
}

// ---------------------------------------------------------------------------
// 5. and 6. Emitting from the producer's command line.
// ---------------------------------------------------------------------------

/// Adds a webhook on Sales Order `event` posting to an address nobody
/// answers (these tests run no worker).
fn add_quiet_webhook(env: &TestEnv, name: &str, event: &str) {
    cli(
        env,
        &[
            "webhook",
            "add",
            name,
            "--entity-type",
            "Sales Order",
            "--event",
            event,
            "--url",
            &format!("http://127.0.0.1:9/{name}"),
        ],
    )
    .ok("webhook add");
}

#[test]
fn emit_with_a_doc_file_prints_the_created_rows_as_json() {
    let env = TestEnv::new();
    add_quiet_webhook(&env, "erp", "on_submit");
    add_quiet_webhook(&env, "crm", "on_submit");
    let doc = json!({"name": "SO-1", "customer": "ACME", "grand_total": 12.5});
    let file = TempFile::new(doc.to_string());
    let report = producer(
        &env,
        &[
            "emit",
            "--entity-type",
            "Sales Order",
            "--event",
            "on_submit",
            "--name",
            "SO-1",
            "--doc",
            file.path(),
            "--json",
        ],
        None,
    )
    .ok("emit")
    .json();

    assert_eq!(report["events"], 1, "{report}");
    let deliveries = report["deliveries"].as_array().expect("deliveries");
    assert_eq!(deliveries.len(), 2, "{report}");
    let mut hooks: Vec<&str> = deliveries
        .iter()
        .map(|d| d["webhook"].as_str().expect("webhook"))
        .collect();
    hooks.sort();
    assert_eq!(hooks, vec!["crm", "erp"]);
    for d in deliveries {
        assert_eq!(d["status"], "Queued", "{d}");
        assert_eq!(d["enqueued"], true, "{d}");
        assert_eq!(d["duplicate"], false, "{d}");
        assert!(d["event_id"].as_str().is_some_and(|e| !e.is_empty()), "{d}");
    }
    let mut ids = ids_of(&report);
    ids.sort();
    let rows = env.rows();
    assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), ids);
    for row in &rows {
        assert_eq!(row.status, DeliveryStatus::Queued);
        assert_eq!(row.entity_name, "SO-1");
        assert_eq!(
            serde_json::from_str::<Value>(&row.body).expect("JSON body"),
            doc
        );
    }
    assert_eq!(default_queue_depth(&env), 2);
}

#[test]
fn emit_with_doc_dash_reads_the_document_from_stdin() {
    let env = TestEnv::new();
    add_quiet_webhook(&env, "erp", "on_submit");
    let doc = json!({"name": "SO-7", "items": [{"sku": "A"}], "grand_total": 3});
    let report = emit(&env, "on_submit", "SO-7", &doc).ok("emit").json();
    let ids = ids_of(&report);
    assert_eq!(ids.len(), 1, "{report}");
    let row = env.row(ids[0]);
    assert_eq!(row.entity_name, "SO-7");
    assert_eq!(
        serde_json::from_str::<Value>(&row.body).expect("JSON body"),
        doc
    );
}

#[test]
fn emit_refuses_a_document_that_is_not_a_json_object_and_records_nothing() {
    let env = TestEnv::new();
    add_quiet_webhook(&env, "erp", "on_submit");
    let array_file = TempFile::new("[1, 2, 3]");
    let base = [
        "emit",
        "--entity-type",
        "Sales Order",
        "--event",
        "on_submit",
        "--name",
        "SO-1",
        "--json",
        "--doc",
    ];
    let cases: Vec<(&str, &str, Option<&str>, &str)> = vec![
        (
            "an array in a file",
            array_file.path(),
            None,
            "not a JSON object",
        ),
        (
            "a string on stdin",
            "-",
            Some("\"just text\""),
            "not a JSON object",
        ),
        ("a number on stdin", "-", Some("42"), "not a JSON object"),
        (
            "text that is not JSON",
            "-",
            Some("{name: SO-1"),
            "not JSON",
        ),
    ];
    for (what, source, stdin, says) in cases {
        let mut args = base.to_vec();
        args.push(source);
        let out = producer(&env, &args, stdin);
        assert_eq!(out.code, Some(1), "{what}: {out}");
        assert!(out.stderr.contains(says), "{what}: {out}");
        assert!(env.rows().is_empty(), "{what}: a row was recorded");
    }
    assert_eq!(default_queue_depth(&env), 0);
}

#[test]
fn emit_batch_emits_the_good_lines_and_reports_each_malformed_line_by_number() {
    let env = TestEnv::new();
    add_quiet_webhook(&env, "erp", "on_submit");
    let lines = [
        r#"{"entity_type": "Sales Order", "event": "on_submit", "name": "A", "doc": {"name": "A"}}"#,
        r#"this is not JSON"#,
        r#"{"entity_type": "Sales Order", "event": "on_submit", "doc": {"name": "no-name"}}"#,
        "",
        r#"{"entity_type": "Sales Order", "event": "on_submit", "name": "D", "doc": [1, 2]}"#,
        r#"{"entity_type": "Sales Order", "event": "on_submit", "name": "B"}"#,
        r#"{"entity_type": "Sales Order", "event": "on_submit", "name": "C", "doc": {"name": "C", "x": 1}}"#,
    ];
    let file = TempFile::new(lines.join("\n") + "\n");

    let out = producer(&env, &["emit", "--batch", file.path()], None);
    assert_eq!(out.code, Some(1), "malformed lines make exit code 1: {out}");
    for bad in [2, 3, 5] {
        assert!(
            out.stderr.contains(&format!("line {bad}:")),
            "line {bad} is not reported: {out}"
        );
    }
    for good in [1, 4, 6, 7] {
        assert!(
            !out.stderr.contains(&format!("line {good}:")),
            "line {good} is reported as malformed: {out}"
        );
    }
    assert!(out.stderr.contains("missing field `name`"), "{out}");
    assert!(out.stderr.contains("not a JSON object"), "{out}");
    let mut names: Vec<String> = env.rows().into_iter().map(|r| r.entity_name).collect();
    names.sort();
    assert_eq!(names, vec!["A", "B", "C"], "the good lines are emitted");

    let out = producer(&env, &["emit", "--batch", file.path(), "--json"], None);
    assert_eq!(out.code, Some(1), "{out}");
    let summary = out.json();
    let skipped: Vec<i64> = summary["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .map(|s| s["line"].as_i64().expect("line"))
        .collect();
    assert_eq!(skipped, vec![2, 3, 5], "{summary}");
    assert!(
        summary["skipped"]
            .as_array()
            .expect("skipped")
            .iter()
            .all(|s| s["error"].as_str().is_some_and(|e| !e.is_empty())),
        "each skipped line says why: {summary}"
    );
    assert_eq!(summary["events_emitted"], 3, "{summary}");
    assert_eq!(summary["totals"]["deliveries"], 3, "{summary}");
    assert_eq!(
        env.rows().len(),
        6,
        "the second run emitted its 3 good lines"
    );
}

// ---------------------------------------------------------------------------
// 7. A failed workflow_transition fails the command.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_workflow_transition_emit_exits_1_and_leaves_the_row_exhausted() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    rx.reply_always(Reply::status(500).body("boom"));
    let url = rx.url("/approve");
    blocking(|| {
        cli(
            &env,
            &[
                "webhook",
                "add",
                "approve",
                "--entity-type",
                "Sales Order",
                "--event",
                "workflow_transition",
                "--url",
                &url,
            ],
        )
        .ok("webhook add")
    });
    let out = blocking(|| {
        emit(
            &env,
            "workflow_transition",
            "SO-1",
            &json!({"name": "SO-1"}),
        )
    });
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stderr.contains("workflow_transition failed"), "{out}");
    assert!(
        out.stderr.contains("500"),
        "the error says what happened: {out}"
    );
    let report = out.json();
    assert_eq!(report["deliveries"][0]["status"], "Exhausted", "{report}");

    let rows = env.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, DeliveryStatus::Exhausted);
    assert_eq!(rows[0].attempts, 1);
    assert_eq!(rows[0].response_code, Some(500));
    assert!(rows[0].next_retry.is_none());
    assert_eq!(rx.count(), 1, "exactly one request, no retry");
    assert_eq!(default_queue_depth(&env), 0, "nothing queued for later");
}

// ---------------------------------------------------------------------------
// 8. The reading commands reflect what was emitted.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_list_show_and_stats_reflect_what_was_emitted() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    let approve_url = rx.url("/approve");
    blocking(|| {
        add_quiet_webhook(&env, "orders", "on_submit");
        // Valid on the sample document, not JSON for a string total.
        cli(
            &env,
            &[
                "webhook",
                "add",
                "totals",
                "--entity-type",
                "Sales Order",
                "--event",
                "on_submit",
                "--url",
                "http://127.0.0.1:9/totals",
                "--body-template",
                r#"{"total": {{ doc.grand_total }}}"#,
            ],
        )
        .ok("webhook add totals");
        cli(
            &env,
            &[
                "webhook",
                "add",
                "approve",
                "--entity-type",
                "Sales Order",
                "--event",
                "workflow_transition",
                "--url",
                &approve_url,
            ],
        )
        .ok("webhook add approve");
    });

    // SO-1: orders Queued, totals Exhausted (the body is not JSON).
    let first = blocking(|| {
        emit(
            &env,
            "on_submit",
            "SO-1",
            &json!({"name": "SO-1", "grand_total": "twelve"}),
        )
    })
    .ok("emit SO-1")
    .json();
    // SO-2: orders and totals Queued.
    blocking(|| {
        emit(
            &env,
            "on_submit",
            "SO-2",
            &json!({"name": "SO-2", "grand_total": 5}),
        )
    })
    .ok("emit SO-2");
    // SO-1 approved: delivered synchronously, one attempt.
    let approved = blocking(|| {
        emit(
            &env,
            "workflow_transition",
            "SO-1",
            &json!({"name": "SO-1"}),
        )
    })
    .ok("emit workflow_transition")
    .json();
    let approved_id = ids_of(&approved)[0];
    let exhausted_id = first["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .find(|d| d["webhook"] == "totals")
        .expect("totals delivery")["id"]
        .as_i64()
        .expect("id");

    let all = blocking(|| cli(&env, &["delivery", "list", "--json"]))
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

    let queued = blocking(|| cli(&env, &["delivery", "list", "--status", "Queued", "--json"]))
        .ok("delivery list --status")
        .json();
    let queued = queued.as_array().expect("list");
    assert_eq!(queued.len(), 3, "{queued:?}");
    assert!(queued.iter().all(|d| d["status"] == "Queued"), "{queued:?}");

    let of_totals = blocking(|| cli(&env, &["delivery", "list", "--webhook", "totals", "--json"]))
        .ok("delivery list --webhook")
        .json();
    assert_eq!(of_totals.as_array().expect("list").len(), 2, "{of_totals}");

    let shown = blocking(|| {
        cli(
            &env,
            &["delivery", "show", &approved_id.to_string(), "--json"],
        )
    })
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

    let broken = blocking(|| {
        cli(
            &env,
            &["delivery", "show", &exhausted_id.to_string(), "--json"],
        )
    })
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

    let missing = blocking(|| cli(&env, &["delivery", "show", "999999", "--json"]));
    assert_eq!(missing.code, Some(1), "{missing}");
    assert!(missing.stderr.contains("not found"), "{missing}");

    let stats = blocking(|| cli(&env, &["stats", "--json"]))
        .ok("stats")
        .json();
    assert_eq!(
        stats["rows"],
        json!({"Queued": 3, "Delivered": 1, "Failed": 0, "Exhausted": 1}),
        "{stats}"
    );
    assert_eq!(stats["queues"]["default"], 3, "{stats}");
    assert_eq!(stats["queues"]["default"], default_queue_depth(&env));
    assert_eq!(stats["dead_letters"], 0, "{stats}");
    assert_eq!(stats["redis_error"], Value::Null, "{stats}");
    assert_eq!(rx.count(), 1, "only the workflow_transition was sent");
}

// ---------------------------------------------------------------------------
// 9. migrate is idempotent and safe to run concurrently.
// ---------------------------------------------------------------------------

/// Empties the test's database, as a fresh install would find it.
fn drop_schema(env: &TestEnv) {
    env.store
        .run_sync(|c| {
            diesel::sql_query("DROP SCHEMA public CASCADE").execute(c)?;
            diesel::sql_query("CREATE SCHEMA public").execute(c)?;
            Ok(())
        })
        .expect("drop the schema");
}

#[test]
fn migrate_twice_applies_the_schema_then_says_it_is_up_to_date() {
    let env = TestEnv::new();
    drop_schema(&env);
    let first = cli(&env, &["migrate"]).ok("first migrate");
    assert!(first.stdout.contains("applied"), "{first}");
    let second = cli(&env, &["migrate"]).ok("second migrate");
    assert_eq!(second.stdout.trim(), "schema is up to date", "{second}");
    // The schema works.
    add_quiet_webhook(&env, "after-migrate", "on_submit");
    assert_eq!(webhooks(&env).as_array().expect("list").len(), 1);
}

#[test]
fn migrate_from_four_processes_at_once_all_succeed_and_apply_once() {
    let env = TestEnv::new();
    drop_schema(&env);
    let children: Vec<Child> = (0..4)
        .map(|_| {
            env.command("hookfleet")
                .arg("migrate")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn migrate")
        })
        .collect();
    let runs: Vec<Run> = children
        .into_iter()
        .map(|c| Run::from(c.wait_with_output().expect("wait for migrate")))
        .collect();
    for run in &runs {
        assert_eq!(run.code, Some(0), "a concurrent migrate failed: {run}");
    }
    let applied = runs.iter().filter(|r| r.stdout.contains("applied")).count();
    assert_eq!(
        applied,
        1,
        "exactly one process applies the migrations: {}",
        runs.iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
    let up_to_date = runs
        .iter()
        .filter(|r| r.stdout.trim() == "schema is up to date")
        .count();
    assert_eq!(up_to_date, 3);
    add_quiet_webhook(&env, "after-migrate", "on_submit");
    assert_eq!(webhooks(&env).as_array().expect("list").len(), 1);
}

// ---------------------------------------------------------------------------
// 10. Replay refuses a Delivered row unless forced.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_retry_refuses_a_delivered_row_without_force() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    let url = rx.url("/approve");
    blocking(|| {
        cli(
            &env,
            &[
                "webhook",
                "add",
                "approve",
                "--entity-type",
                "Sales Order",
                "--event",
                "workflow_transition",
                "--url",
                &url,
            ],
        )
        .ok("webhook add")
    });
    let report = blocking(|| {
        emit(
            &env,
            "workflow_transition",
            "SO-1",
            &json!({"name": "SO-1"}),
        )
    })
    .ok("emit")
    .json();
    let id = ids_of(&report)[0];
    let before = env.row(id);
    assert_eq!(before.status, DeliveryStatus::Delivered);

    let refused = blocking(|| cli(&env, &["delivery", "retry", &id.to_string()]));
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
    assert_eq!(default_queue_depth(&env), 0);

    blocking(|| cli(&env, &["delivery", "retry", &id.to_string(), "--force"])).ok("retry --force");
    let forced = env.row(id);
    assert_eq!(forced.status, DeliveryStatus::Failed, "forced: due again");
    assert!(forced.next_retry.is_some());
    assert_eq!(forced.max_attempts, before.attempts + 1);
    assert_eq!(default_queue_depth(&env), 1, "queued now");
    assert_eq!(rx.count(), 1);
}
