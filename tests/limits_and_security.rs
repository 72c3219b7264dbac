//! The README's "Limits" and "Security" sections, each limit tested just over
//! (and, where cheap, exactly at) its value against the real fleet: what is
//! refused and with what message, what is recorded on the rows, what reached
//! Redis, and what a real receiver on 127.0.0.1 heard.
//!
//! Every limit is a hard limit: each test here fails if the limit is not
//! enforced, not only if it is enforced with the wrong message.

use hookfleet_core::model::DeliveryStatus;
use std::net::{IpAddr, TcpListener, ToSocketAddrs};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use hookfleet_core::attempt::RESPONSE_BODY_LIMIT;
use hookfleet_core::model::{
    DeliveryLog, FieldMapping, Structure, Webhook, WebhookRow, WebhookSpec,
};
use hookfleet_core::render::{MAX_BODY_BYTES, RANGE_LIMIT, TEMPLATE_FUEL};
use hookfleet_core::schedule::RetrySchedule;
use hookfleet_core::ssrf::NetworkPolicy;
use hookfleet_core::store::webhooks;
use hookfleet_core::validate::{MAX_NAME_LEN, MAX_RETRIES_LIMIT};
use hookfleet_producer::emit::MAX_DOCUMENT_BYTES;
use hookfleet_producer::ingest::{MAX_BATCH_BYTES, MAX_BATCH_EVENTS};
use hookfleet_producer::{EmitError, Event, Producer, ProducerConfig};
use hookfleet_testkit::{spec, Receiver, Reply, TempFile, TestEnv};

/// How long a test waits for something that normally takes milliseconds
/// (a worker delivering one row, a process exiting after SIGTERM).
const WAIT: Duration = Duration::from_secs(20);

/// How long a render stopped by a limit may take, process start included:
/// the limit exists so that a runaway template costs milliseconds.
const QUICK: Duration = Duration::from_secs(5);

const ENTITY: &str = "Sales Order";

/// An address nobody answers on, for webhooks whose rows are never sent.
const NOWHERE: &str = "http://127.0.0.1:9";

// ---------------------------------------------------------------------------
// Helpers: processes, files, rows.
// ---------------------------------------------------------------------------

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

    /// Panics (with what the process said) unless it exited 0.
    fn ok(self, what: &str) -> Run {
        assert_eq!(self.code, Some(0), "{what} failed: {self}");
        self
    }

    /// The one JSON document a `--json` command printed.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self}"))
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A multi-megabyte document echoed back would drown the message.
        let clip = |s: &str| -> String { s.chars().take(2000).collect() };
        write!(
            f,
            "exit {:?}\nstdout: {}\nstderr: {}",
            self.code,
            clip(&self.stdout),
            clip(&self.stderr)
        )
    }
}

/// `hookfleet ARGS`.
fn cli(env: &TestEnv, args: &[&str]) -> Run {
    Run::from(env.cli(args))
}

/// Runs `cmd` to its end, or kills it and panics once `limit` has passed: a
/// limit that is not enforced must fail the test, not hang it.
fn run_within(mut cmd: Command, limit: Duration, what: &str) -> Run {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let mut process = Process {
        child: Some(child),
        what: what.to_string(),
    };
    let started = Instant::now();
    while process.running() {
        if started.elapsed() > limit {
            process.kill();
            panic!("{what} was still running after {limit:?}; killed it");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let child = process.child.take().expect("child");
    Run::from(child.wait_with_output().expect("collect output"))
}

/// Runs blocking process calls from an async test without stalling the
/// runtime that serves the test's receiver.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Length of the `default` queue in Redis.
fn queue_depth(env: &TestEnv) -> i64 {
    env.llen(&env.queue.keys().queue("default"))
}

/// The webhooks stored in the test's database.
fn stored_webhooks(env: &TestEnv) -> Vec<Webhook> {
    env.store.run_sync(webhooks::list).expect("list webhooks")
}

/// Stores a webhook without validating it: a definition edited by hand in
/// the database, which the producer must survive.
fn insert_unvalidated(env: &TestEnv, spec: &WebhookSpec) -> Webhook {
    env.store
        .run_sync(|c| webhooks::insert(c, &WebhookRow::from(spec)))
        .expect("insert webhook")
}

/// A webhook whose body is the document's `name` only: the rows stay small
/// however large the document is. Its rows are never sent.
fn small_body_webhook(env: &TestEnv, event: &str) -> Webhook {
    let mut s = spec("small", ENTITY, event, &format!("{NOWHERE}/small"));
    s.fields = vec![FieldMapping {
        field: "name".into(),
        key: "name".into(),
    }];
    env.add_webhook(&s)
}

/// JSON text of exactly `total` bytes: `make(pad)`, with the pad string grown
/// to fit.
fn json_of_size(total: usize, make: impl Fn(String) -> Value) -> String {
    let base = make(String::new()).to_string().len();
    let text = make("x".repeat(total - base)).to_string();
    assert_eq!(text.len(), total, "the padding is miscounted");
    text
}

/// An event as the ingest and `emit --batch` read it.
fn event_json(name: &str, pad: String) -> Value {
    json!({
        "entity_type": ENTITY,
        "event": "on_submit",
        "name": name,
        "doc": {"name": name, "pad": pad},
    })
}

/// A child process of the fleet. Dropping it (a passing test or a failing
/// one) sends SIGTERM and, if that is not enough, SIGKILL: no process
/// outlives its test.
struct Process {
    child: Option<Child>,
    what: String,
}

impl Process {
    fn spawn(mut cmd: Command, what: &str) -> Process {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        Process {
            child: Some(child),
            what: what.to_string(),
        }
    }

    fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Sends SIGTERM and waits up to `limit` for the exit.
    fn terminate(&mut self, limit: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        let _ = Command::new("kill")
            .arg(child.id().to_string())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Stops the process with SIGTERM; panics if it does not exit in time.
    fn stop(&mut self) -> ExitStatus {
        let status = self.terminate(WAIT);
        let what = self.what.clone();
        status.unwrap_or_else(|| panic!("{what} did not exit within {WAIT:?} of SIGTERM"))
    }

    fn kill(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.terminate(Duration::from_secs(5)).is_none() {
            self.kill();
        }
    }
}

/// A free port on 127.0.0.1 (bound, then released for the process to take).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .expect("local addr")
        .port()
}

/// `curl ARGS`: the HTTP status (0 when nothing answered) and the body.
fn curl(args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "-S", "--max-time", "60", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("run curl (is it installed?)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// `hookfleet-producer serve` as a real process on a port of its own.
struct Ingest {
    process: Process,
    base: String,
}

impl Ingest {
    /// Starts the ingest and waits until `GET /healthz` answers.
    fn start(env: &TestEnv, extra: &[&str]) -> Ingest {
        let listen = format!("127.0.0.1:{}", free_port());
        let mut cmd = env.command("hookfleet-producer");
        cmd.args(["serve", "--listen", &listen]).args(extra);
        let mut ingest = Ingest {
            process: Process::spawn(cmd, "hookfleet-producer serve"),
            base: format!("http://{listen}"),
        };
        let deadline = Instant::now() + WAIT;
        loop {
            let (code, _) = curl(&["-o", "/dev/null", &format!("{}/healthz", ingest.base)]);
            if code == 200 {
                return ingest;
            }
            assert!(
                ingest.process.running(),
                "the ingest exited before answering /healthz"
            );
            assert!(
                Instant::now() < deadline,
                "the ingest did not answer /healthz within {WAIT:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// POSTs `body` to `path` with the extra `headers` ("Name: value").
    fn post(&self, path: &str, body: impl AsRef<[u8]>, headers: &[&str]) -> (u16, String) {
        let file = TempFile::new(body);
        let url = format!("{}{path}", self.base);
        let data = format!("@{}", file.path());
        let mut args = vec!["-X", "POST", "-H", "Content-Type: application/json"];
        for h in headers {
            args.extend(["-H", h]);
        }
        args.extend(["--data-binary", data.as_str(), url.as_str()]);
        curl(&args)
    }
}

/// `hookfleet-producer emit` of one event without a document, `--json`.
fn emit_command(env: &TestEnv, name: &str) -> Command {
    let mut cmd = env.command("hookfleet-producer");
    cmd.args([
        "emit",
        "--entity-type",
        ENTITY,
        "--event",
        "on_submit",
        "--name",
        name,
        "--json",
    ]);
    cmd
}

// ---------------------------------------------------------------------------
// 1. Request body built ≤ 1 MiB.
// ---------------------------------------------------------------------------

/// A document whose `big` field is `len` bytes.
fn big_doc(len: usize) -> Value {
    json!({ "big": "x".repeat(len) })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_one_mebibyte_is_exhausted_without_a_request_and_one_at_the_limit_is_delivered()
{
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    let big = || {
        vec![FieldMapping {
            field: "big".into(),
            key: "big".into(),
        }]
    };
    let whole = spec("whole", "Upload", "whole", &rx.url("/whole"));
    let mut fields = spec("fields", "Upload", "fields", &rx.url("/fields"));
    fields.fields = big();
    let mut template = spec("template", "Upload", "template", &rx.url("/template"));
    template.body_template = Some(r#"{"big":{{ doc.big|tojson }}}"#.into());
    let mut form = spec("form", "Upload", "form", &rx.url("/form"));
    form.structure = Structure::Form;
    form.fields = big();
    for s in [&whole, &fields, &template, &form] {
        env.add_webhook(s);
    }
    // The bytes each way of building the body adds around `big`:
    // `{"big":"` + `"}` for JSON, `big=` for a form.
    let kinds = [("whole", 10), ("fields", 10), ("template", 10), ("form", 4)];
    let producer = env.producer();

    for (event, overhead) in kinds {
        let doc = big_doc(MAX_BODY_BYTES - overhead + 1);
        let report = producer
            .emit(Event::new("Upload", event, "over", doc))
            .await
            .unwrap();
        assert_eq!(report.deliveries.len(), 1, "{event}: {report:?}");
        let d = &report.deliveries[0];
        assert_eq!(d.status.as_str(), "Exhausted", "{event}: {d:?}");
        assert!(!d.enqueued, "{event}: an over-long body was queued");
        let row = env.row(d.id);
        assert_eq!(row.status, DeliveryStatus::Exhausted, "{event}");
        assert!(row.next_retry.is_none(), "{event}");
        let error = row.error.unwrap_or_default();
        assert!(
            error.contains("limit") && error.contains(&MAX_BODY_BYTES.to_string()),
            "{event}: the reason names the limit: {error}"
        );
    }
    assert_eq!(queue_depth(&env), 0, "nothing queued for an over-long body");

    let mut at_limit = Vec::new();
    for (event, overhead) in kinds {
        let doc = big_doc(MAX_BODY_BYTES - overhead);
        let report = producer
            .emit(Event::new("Upload", event, "at", doc))
            .await
            .unwrap();
        let d = &report.deliveries[0];
        assert_eq!(
            d.status.as_str(),
            "Queued",
            "{event}: a body of exactly {MAX_BODY_BYTES} bytes is refused: {d:?}"
        );
        assert!(d.enqueued, "{event}");
        at_limit.push(d.id);
    }
    assert_eq!(queue_depth(&env), 4);

    let worker = env.start_worker(4, RetrySchedule::default());
    for &id in &at_limit {
        env.until_row(id, |r| r.status == DeliveryStatus::Delivered)
            .await;
    }
    worker.stop().await;
    let got = rx.requests();
    assert_eq!(got.len(), 4, "only the bodies at the limit were sent");
    for r in &got {
        assert_eq!(r.body.len(), MAX_BODY_BYTES, "{}", r.path);
    }
}

#[test]
fn a_template_that_would_render_gigabytes_is_stopped_at_the_body_limit_not_after() {
    // Eighty strings of 100 MB (minijinja's largest repeat): 8 GB of output
    // from a template that uses a few hundred instructions, far inside the
    // fuel. A hard body limit stops the render at 1 MiB; checking the size
    // after rendering needs the 8 GB first. The producer runs with 3 GiB of
    // address space, plenty for everything but building such a body.
    let env = TestEnv::new();
    let mut s = spec("gigabytes", ENTITY, "on_submit", &format!("{NOWHERE}/x"));
    s.body_template =
        Some(r#"{"x": "{% for i in range(80) %}{{ "x" * 100000000 }}{% endfor %}"}"#.into());
    insert_unvalidated(&env, &s);

    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"ulimit -v 3145728 && exec "$0" "$@""#)
        .arg(hookfleet_testkit::env::bin_path("hookfleet-producer"))
        .args([
            "emit",
            "--entity-type",
            ENTITY,
            "--event",
            "on_submit",
            "--name",
            "SO-1",
            "--json",
        ]);
    for (k, v) in env.envs() {
        cmd.env(k, v);
    }
    let out = run_within(cmd, WAIT, "hookfleet-producer emit");
    assert_eq!(
        out.code,
        Some(0),
        "the producer did not survive a template rendering 8 GB: {out}"
    );
    let rows = env.rows();
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(rows[0].status, DeliveryStatus::Exhausted);
    let error = rows[0].error.clone().unwrap_or_default();
    assert!(
        error.contains(&MAX_BODY_BYTES.to_string()) || error.contains("limit"),
        "{error}"
    );
    assert_eq!(queue_depth(&env), 0);
}

// ---------------------------------------------------------------------------
// 2. Template work per render (TEMPLATE_FUEL).
// ---------------------------------------------------------------------------

/// A billion iterations of plain template code, within the `range` cap and
/// printing nothing (so only the fuel can stop it, not an output limit).
const RUNAWAY_LOOPS: &str = "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}{% endfor %}{% endfor %}{% endfor %}";

// The runaway loops need over a hundred times the fuel a render gets.
const _: () = assert!(1000u64 * 1000 * 1000 > TEMPLATE_FUEL * 100);

#[test]
fn range_yields_at_most_a_thousand_numbers() {
    let env = TestEnv::new();
    let add = |name: &str, n: usize| {
        let template = format!(r#"{{"n": {{{{ range({n}) | length }}}}}}"#);
        let mut cmd = env.command("hookfleet");
        cmd.args([
            "webhook",
            "add",
            name,
            "--entity-type",
            ENTITY,
            "--event",
            "on_submit",
            "--url",
            &format!("{NOWHERE}/x"),
            "--body-template",
            &template,
        ]);
        run_within(cmd, QUICK, "hookfleet webhook add")
    };
    let over = add("over", RANGE_LIMIT + 1);
    assert_eq!(over.code, Some(1), "{over}");
    assert!(over.stderr.contains("at most 1000"), "{over}");
    let at = add("at", RANGE_LIMIT);
    assert_eq!(at.code, Some(0), "{at}");
}

/// Ten billion steps too, but inside a filter: the template itself runs
/// about seven instructions per outer iteration, 700,000 in all.
const RUNAWAY_FILTERS: &str =
    "{% for a in range(100000) %}{% set s = range(100000)|join %}{% endfor %}";

#[test]
fn webhook_add_refuses_a_body_template_that_runs_out_of_fuel_on_the_sample() {
    let env = TestEnv::new();
    let template = format!(r#"{{"x": "{RUNAWAY_LOOPS}"}}"#);
    let mut cmd = env.command("hookfleet");
    cmd.args([
        "webhook",
        "add",
        "runaway",
        "--entity-type",
        ENTITY,
        "--event",
        "on_submit",
        "--url",
        &format!("{NOWHERE}/x"),
        "--body-template",
        &template,
    ]);
    let out = run_within(cmd, QUICK, "hookfleet webhook add");
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stderr.contains("fuel"),
        "the refusal says the template ran out of fuel: {out}"
    );
    assert!(
        stored_webhooks(&env).is_empty(),
        "a refused webhook was written"
    );
}

#[test]
fn a_runaway_template_stored_by_hand_is_exhausted_at_emit_within_five_seconds() {
    let env = TestEnv::new();
    let mut body = spec("runaway-body", ENTITY, "on_submit", &format!("{NOWHERE}/x"));
    body.body_template = Some(format!(r#"{{"x": "{RUNAWAY_LOOPS}"}}"#));
    insert_unvalidated(&env, &body);
    let mut url = spec(
        "runaway-url",
        ENTITY,
        "on_submit",
        &format!("{NOWHERE}/{RUNAWAY_LOOPS}"),
    );
    url.dynamic_url = true;
    insert_unvalidated(&env, &url);

    let out = run_within(emit_command(&env, "SO-1"), QUICK, "hookfleet-producer emit").ok("emit");
    let report = out.json();
    let deliveries = report["deliveries"].as_array().expect("deliveries");
    assert_eq!(deliveries.len(), 2, "{report}");
    for d in deliveries {
        assert_eq!(d["status"], "Exhausted", "{d}");
        assert_eq!(d["enqueued"], false, "{d}");
    }
    for row in env.rows() {
        assert_eq!(
            row.status,
            DeliveryStatus::Exhausted,
            "{}",
            row.webhook_name
        );
        let error = row.error.clone().unwrap_or_default();
        assert!(error.contains("fuel"), "{}: {error}", row.webhook_name);
    }
    assert_eq!(queue_depth(&env), 0);
}

#[test]
fn a_template_that_spins_inside_filters_is_stopped_within_five_seconds_too() {
    let env = TestEnv::new();
    let mut s = spec(
        "spins-in-filters",
        ENTITY,
        "on_submit",
        &format!("{NOWHERE}/x"),
    );
    s.body_template = Some(format!(r#"{{"x": "{RUNAWAY_FILTERS}"}}"#));
    insert_unvalidated(&env, &s);

    let out = run_within(emit_command(&env, "SO-1"), QUICK, "hookfleet-producer emit").ok("emit");
    let rows = env.rows();
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(rows[0].status, DeliveryStatus::Exhausted);
    assert_eq!(queue_depth(&env), 0);
}

// ---------------------------------------------------------------------------
// 3. Document accepted by emit ≤ 4 MiB.
// ---------------------------------------------------------------------------

/// `hookfleet-producer emit --doc FILE --json`.
fn emit_doc(env: &TestEnv, file: &TempFile) -> Run {
    let mut cmd = emit_command(env, "SO-1");
    cmd.args(["--doc", file.path()]);
    Run::from(cmd.output().expect("run hookfleet-producer"))
}

#[test]
fn emit_refuses_a_document_over_four_mebibytes_and_takes_one_of_exactly_four() {
    let env = TestEnv::new();
    small_body_webhook(&env, "on_submit");
    let doc = |pad: String| json!({"name": "SO-1", "pad": pad});

    let over = TempFile::new(json_of_size(MAX_DOCUMENT_BYTES + 1, doc));
    let out = emit_doc(&env, &over);
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stderr.contains(&MAX_DOCUMENT_BYTES.to_string()),
        "the refusal names the limit: {out}"
    );
    assert!(env.rows().is_empty(), "a row was recorded: {out}");
    assert_eq!(queue_depth(&env), 0);

    let at = TempFile::new(json_of_size(MAX_DOCUMENT_BYTES, doc));
    let report = emit_doc(&env, &at).ok("emit of exactly 4 MiB").json();
    assert_eq!(report["deliveries"][0]["status"], "Queued", "{report}");
    assert_eq!(env.rows().len(), 1);
}

/// Runs `emit --batch FILE --json` over `lines` (one event per line).
fn emit_batch(env: &TestEnv, lines: &[String]) -> Run {
    let file = TempFile::new(lines.join("\n") + "\n");
    let mut cmd = env.command("hookfleet-producer");
    cmd.args(["emit", "--batch", file.path(), "--json"]);
    Run::from(cmd.output().expect("run hookfleet-producer"))
}

/// Checks a batch whose line 2 was over-long: reported by number, skipped,
/// lines 1 and 3 emitted.
fn assert_only_line_two_skipped(env: &TestEnv, out: &Run) {
    assert_eq!(out.code, Some(1), "a skipped line makes exit code 1: {out}");
    assert!(
        out.stderr.contains("line 2:"),
        "line 2 is not reported: {out}"
    );
    assert!(
        !out.stderr.contains("line 1:") && !out.stderr.contains("line 3:"),
        "a good line is reported: {out}"
    );
    let summary = out.json();
    assert_eq!(summary["skipped"][0]["line"], 2, "{summary}");
    assert_eq!(summary["skipped"].as_array().map(Vec::len), Some(1));
    assert_eq!(summary["events_emitted"], 2, "{summary}");
    let mut names: Vec<String> = env.rows().into_iter().map(|r| r.entity_name).collect();
    names.sort();
    assert_eq!(names, vec!["A", "C"], "the lines around it are emitted");
}

#[test]
fn emit_batch_skips_a_line_over_four_mebibytes_by_number_and_emits_the_others() {
    let env = TestEnv::new();
    small_body_webhook(&env, "on_submit");
    let lines = [
        event_json("A", String::new()).to_string(),
        json_of_size(MAX_DOCUMENT_BYTES + 1, |pad| event_json("B", pad)),
        event_json("C", String::new()).to_string(),
    ];
    let out = emit_batch(&env, &lines);
    assert_only_line_two_skipped(&env, &out);
    assert!(
        out.stderr.contains(&MAX_DOCUMENT_BYTES.to_string()),
        "the report names the limit: {out}"
    );
}

#[test]
fn emit_batch_skips_an_over_long_line_of_non_ascii_text_like_any_other() {
    // The line is cut at the limit to be skipped; here the cut falls inside
    // a two-byte character, which must not turn a skipped line into a failed
    // read of the whole file.
    let env = TestEnv::new();
    small_body_webhook(&env, "on_submit");
    let mut prefix = String::from(
        r#"{"entity_type":"Sales Order","event":"on_submit","name":"B","doc":{"name":"B","pad":""#,
    );
    // The read stops after MAX_DOCUMENT_BYTES + 1 bytes (an odd count): with
    // an even prefix, the last byte read is the first half of an "é".
    if prefix.len() % 2 == 1 {
        prefix.insert(0, ' ');
    }
    let long = format!("{prefix}{}\"}}}}", "é".repeat(MAX_DOCUMENT_BYTES / 2 + 16));
    assert!(!long.is_char_boundary(MAX_DOCUMENT_BYTES + 1));
    let lines = [
        event_json("A", String::new()).to_string(),
        long,
        event_json("C", String::new()).to_string(),
    ];
    let out = emit_batch(&env, &lines);
    assert_only_line_two_skipped(&env, &out);
}

// ---------------------------------------------------------------------------
// 4. The HTTP ingest: 202, 400, 401, 413, 502.
// ---------------------------------------------------------------------------

#[test]
fn the_ingest_accepts_a_valid_event_and_refuses_malformed_ones_with_400() {
    let env = TestEnv::new();
    small_body_webhook(&env, "on_submit");
    let ingest = Ingest::start(&env, &[]);

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
    assert_eq!(env.rows().len(), 1, "a refused event was recorded");
}

#[test]
fn the_ingest_refuses_a_body_over_four_mebibytes_with_413_and_takes_one_of_exactly_four() {
    let env = TestEnv::new();
    small_body_webhook(&env, "on_submit");
    let ingest = Ingest::start(&env, &[]);

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
    small_body_webhook(&env, "on_submit");
    let ingest = Ingest::start(&env, &[]);
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
    small_body_webhook(&env, "on_submit");
    let ingest = Ingest::start(&env, &["--token", "T0KEN"]);
    let event = event_json("SO-1", String::new()).to_string();
    let batch = format!("[{event}]");

    for (what, headers) in [
        ("no Authorization header", vec![]),
        ("a wrong token", vec!["Authorization: Bearer WRONG"]),
        ("the token without Bearer", vec!["Authorization: T0KEN"]),
        ("a longer token", vec!["Authorization: Bearer T0KEN2"]),
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
    assert_eq!(queue_depth(&env), 0);

    let (code, answer) = ingest.post("/v1/events", &event, &["Authorization: Bearer T0KEN"]);
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
    let ingest = blocking(|| Ingest::start(&env, &[]));
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
    assert_eq!(queue_depth(&env), 0, "nothing queued for later");
}

// ---------------------------------------------------------------------------
// 5. Response body stored ≤ 4 KiB.
// ---------------------------------------------------------------------------

/// Emits one event to a receiver answering 500 with `answer`; returns the
/// row once the attempt is recorded.
async fn stored_answer(answer: &str) -> DeliveryLog {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    rx.reply_always(Reply::status(500).body(answer));
    env.add_webhook(&spec("chatty", ENTITY, "on_submit", &rx.url("/chatty")));
    let worker = env.start_worker(2, RetrySchedule::default());
    let report = env
        .producer()
        .emit(Event::new(
            ENTITY,
            "on_submit",
            "SO-1",
            json!({"name": "SO-1"}),
        ))
        .await
        .unwrap();
    let row = env
        .until_row(report.deliveries[0].id, |r| {
            r.status == DeliveryStatus::Failed
        })
        .await;
    worker.stop().await;
    assert_eq!(row.response_code, Some(500));
    assert_eq!(rx.count(), 1);
    row
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_kib_response_body_is_stored_cut_to_exactly_four_kibibytes() {
    let answer: String = (0..100 * 1024)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let row = stored_answer(&answer).await;
    let stored = row.response_body.expect("a response body");
    assert_eq!(stored.len(), RESPONSE_BODY_LIMIT);
    assert_eq!(stored, answer.as_bytes()[..RESPONSE_BODY_LIMIT]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multibyte_response_body_cut_inside_a_character_is_stored_as_its_first_four_kibibytes() {
    // "a" then two-byte characters: byte 4096 is the first half of an "é".
    let answer = format!("a{}", "é".repeat(50 * 1024));
    assert!(!answer.is_char_boundary(RESPONSE_BODY_LIMIT));
    let row = stored_answer(&answer).await;
    let stored = row.response_body.clone().expect("a response body");
    assert_eq!(
        stored,
        answer.as_bytes()[..RESPONSE_BODY_LIMIT],
        "the bytes as sent, cut at the limit"
    );
    let shown = row.response_text().expect("text");
    assert!(
        shown.ends_with('\u{FFFD}'),
        "the cut character shows as U+FFFD"
    );
}

// ---------------------------------------------------------------------------
// 6. Event id: 1–128 printable characters; one row per event and webhook.
// ---------------------------------------------------------------------------

fn event_with_id(name: &str, id: &str) -> Event {
    let mut e = Event::new(ENTITY, "on_submit", name, json!({"name": name}));
    e.event_id = Some(id.to_string());
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_id_over_128_characters_or_not_printable_is_refused_and_128_is_accepted() {
    let env = TestEnv::new();
    small_body_webhook(&env, "on_submit");
    let producer = env.producer();
    for bad in [
        "a".repeat(129),
        "has space".into(),
        String::new(),
        "tab\there".into(),
        "new\nline".into(),
    ] {
        let err = producer
            .emit(event_with_id("SO-1", &bad))
            .await
            .expect_err(&format!("event id {bad:?} was accepted"));
        assert!(matches!(err, EmitError::Invalid(_)), "{bad:?}: {err:?}");
    }
    assert!(env.rows().is_empty(), "a refused event was recorded");
    assert_eq!(queue_depth(&env), 0);

    // Every printable ASCII character, 128 of them.
    let longest: String = (b'!'..=b'~').cycle().take(128).map(char::from).collect();
    let report = producer
        .emit(event_with_id("SO-1", &longest))
        .await
        .expect("an event id of 128 printable characters");
    assert_eq!(report.deliveries[0].event_id, longest);
    assert_eq!(env.rows().len(), 1);

    let out = blocking(|| {
        let mut cmd = emit_command(&env, "SO-2");
        cmd.args(["--event-id", &"b".repeat(129)]);
        Run::from(cmd.output().expect("run hookfleet-producer"))
    });
    assert_eq!(
        out.code,
        Some(1),
        "emit --event-id of 129 characters: {out}"
    );
    assert_eq!(env.rows().len(), 1, "the command line recorded it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_event_id_emitted_twice_makes_one_row_per_webhook_and_one_request_each() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    env.add_webhook(&spec("erp", ENTITY, "on_submit", &rx.url("/erp")));
    env.add_webhook(&spec("crm", ENTITY, "on_submit", &rx.url("/crm")));
    let producer = env.producer();

    let first = producer
        .emit(event_with_id("SO-1", "evt-42"))
        .await
        .unwrap();
    let second = producer
        .emit(event_with_id("SO-1", "evt-42"))
        .await
        .unwrap();
    assert_eq!(first.deliveries.len(), 2);
    assert_eq!(second.deliveries.len(), 2);
    assert!(first.deliveries.iter().all(|d| !d.duplicate && d.enqueued));
    assert!(
        second.deliveries.iter().all(|d| d.duplicate && !d.enqueued),
        "the second emit says duplicate and queues nothing: {second:?}"
    );
    let mut first_ids: Vec<i64> = first.deliveries.iter().map(|d| d.id).collect();
    let mut second_ids: Vec<i64> = second.deliveries.iter().map(|d| d.id).collect();
    first_ids.sort();
    second_ids.sort();
    assert_eq!(
        first_ids, second_ids,
        "the duplicate points at the same rows"
    );
    assert_eq!(env.rows().len(), 2, "one row per webhook");
    assert_eq!(queue_depth(&env), 2, "one job per row");

    let worker = env.start_worker(2, RetrySchedule::default());
    for id in first_ids {
        env.until_row(id, |r| r.status == DeliveryStatus::Delivered)
            .await;
    }
    worker.stop().await;
    let mut paths: Vec<String> = rx.requests().iter().map(|r| r.path.clone()).collect();
    paths.sort();
    assert_eq!(paths, vec!["/crm", "/erp"], "one request per webhook");
    assert!(rx
        .requests()
        .iter()
        .all(|r| r.header("webhook-id") == Some("evt-42")));
    assert_eq!(queue_depth(&env), 0, "nothing left to send");
}

// ---------------------------------------------------------------------------
// 7. Names, entity types, events, queues ≤ 140 characters; queue charset.
// ---------------------------------------------------------------------------

/// `hookfleet webhook add NAME --entity-type T --event E --url … EXTRA…`.
fn add(env: &TestEnv, name: &str, entity_type: &str, event: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "webhook",
        "add",
        name,
        "--entity-type",
        entity_type,
        "--event",
        event,
        "--url",
        "http://127.0.0.1:9/x",
    ];
    args.extend_from_slice(extra);
    cli(env, &args)
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
        stored_webhooks(env).len(),
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
    let stored = stored_webhooks(&env);
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
        let run = cli(&env, &["webhook", "update", "t", "--queue", queue]);
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
    assert_eq!(stored_webhooks(&env).len(), 2);
}

// ---------------------------------------------------------------------------
// 8. Worker concurrency 1 … 10,000.
// ---------------------------------------------------------------------------

#[test]
fn worker_concurrency_of_0_or_10001_is_a_usage_error() {
    let env = TestEnv::new();
    for value in ["0", "10001"] {
        let mut by_flag = env.command("hookfleet-worker");
        by_flag.args(["--concurrency", value]);
        let out = run_within(by_flag, WAIT, "hookfleet-worker");
        assert_eq!(out.code, Some(2), "--concurrency {value}: {out}");
        assert!(
            out.stderr.contains(value),
            "the message names the value: {out}"
        );

        let mut by_env = env.command("hookfleet-worker");
        by_env.env("HOOKFLEET_CONCURRENCY", value);
        let out = run_within(by_env, WAIT, "hookfleet-worker");
        assert_eq!(out.code, Some(2), "HOOKFLEET_CONCURRENCY={value}: {out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_concurrency_of_1_and_10000_are_accepted_and_deliver() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    env.add_webhook(&spec("orders", ENTITY, "on_submit", &rx.url("/orders")));
    let producer = env.producer();
    for (i, value) in ["1", "10000"].into_iter().enumerate() {
        let name = format!("SO-{i}");
        let report = producer
            .emit(Event::new(
                ENTITY,
                "on_submit",
                &name,
                json!({"name": name}),
            ))
            .await
            .unwrap();
        let mut cmd = env.command("hookfleet-worker");
        cmd.args(["--concurrency", value]);
        let mut worker = Process::spawn(cmd, "hookfleet-worker");
        env.until_row(report.deliveries[0].id, |r| {
            r.status == DeliveryStatus::Delivered
        })
        .await;
        let status = blocking(|| worker.stop());
        assert!(status.success(), "--concurrency {value}: exit {status:?}");
    }
    assert_eq!(rx.count(), 2);
}

// ---------------------------------------------------------------------------
// 9. max_retries ≤ 50.
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
    let shown = cli(&env, &["webhook", "show", "r", "--json"])
        .ok("webhook show")
        .json();
    assert_eq!(shown["max_retries"], MAX_RETRIES_LIMIT, "{shown}");

    let run = cli(&env, &["webhook", "update", "r", "--max-retries", &over]);
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
// 10. Redirects are never followed.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_a_failure_and_its_target_hears_nothing() {
    let env = TestEnv::new();
    let first = Receiver::start().await;
    let target = Receiver::start().await;
    first.reply_always(Reply::status(302).header("Location", &target.url("/stolen")));
    env.add_webhook(&spec("moved", ENTITY, "on_submit", &first.url("/hook")));
    env.add_webhook(&spec(
        "moved-now",
        ENTITY,
        "workflow_transition",
        &first.url("/wf"),
    ));
    let worker = env.start_worker(2, RetrySchedule::default());
    let producer = env.producer();

    // From a worker: a failure, retried later.
    let report = producer
        .emit(Event::new(
            ENTITY,
            "on_submit",
            "SO-1",
            json!({"name": "SO-1"}),
        ))
        .await
        .unwrap();
    let row = env
        .until_row(report.deliveries[0].id, |r| {
            r.status == DeliveryStatus::Failed
        })
        .await;
    assert_eq!(row.response_code, Some(302));
    assert!(
        row.error.as_deref().unwrap_or("").contains("HTTP 302"),
        "{:?}",
        row.error
    );
    worker.stop().await;

    // From the producer (workflow_transition): a failure returned at once.
    let err = producer
        .emit(Event::new(
            ENTITY,
            "workflow_transition",
            "SO-1",
            json!({"name": "SO-1"}),
        ))
        .await
        .expect_err("a redirected workflow_transition is a failure");
    let EmitError::WorkflowTransition { report, failures } = err else {
        panic!("expected a workflow_transition failure, got {err:?}")
    };
    assert!(failures[0].reason.contains("302"), "{failures:?}");
    assert_eq!(
        env.row(report.deliveries[0].id).status,
        DeliveryStatus::Exhausted
    );

    assert_eq!(first.count(), 2);
    assert_eq!(target.count(), 0, "a redirect was followed");
}

// ---------------------------------------------------------------------------
// 11. The SSRF guard at send time (a worker whose policy refuses loopback).
// ---------------------------------------------------------------------------

/// Stores a webhook at `url` (the test kit's policy allows loopback), emits
/// one event, and runs a worker process whose policy does not: the row must
/// fail with a reason mentioning every fragment of `says`, and the receiver
/// must hear nothing.
async fn assert_refused_at_send_time(env: &TestEnv, rx: &Receiver, url: &str, says: &[&str]) {
    env.add_webhook(&spec("internal", ENTITY, "on_submit", url));
    let report = env
        .producer()
        .emit(Event::new(
            ENTITY,
            "on_submit",
            "SO-1",
            json!({"name": "SO-1"}),
        ))
        .await
        .unwrap();
    assert!(report.deliveries[0].enqueued, "{report:?}");
    let mut cmd = env.command("hookfleet-worker");
    cmd.env("HOOKFLEET_ALLOWED_NETWORKS", "");
    let mut worker = Process::spawn(cmd, "hookfleet-worker");
    let row = env
        .until_row(report.deliveries[0].id, |r| {
            r.status != DeliveryStatus::Queued
        })
        .await;
    blocking(|| worker.stop());
    assert_eq!(row.status, DeliveryStatus::Failed, "{url}: {row:?}");
    assert_eq!(row.response_code, None, "{url}: an answer was recorded");
    let error = row.error.unwrap_or_default();
    for fragment in says {
        assert!(
            error.contains(fragment),
            "{url}: {fragment:?} not in {error:?}"
        );
    }
    assert_eq!(rx.count(), 0, "{url} reached the receiver");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_ip_literal_is_refused_at_send_time() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    let url = rx.url("/literal");
    assert_refused_at_send_time(&env, &rx, &url, &["127.0.0.1", "internal address"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn localhost_is_refused_at_send_time() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    let url = format!("http://localhost:{}/named", rx.addr.port());
    assert_refused_at_send_time(&env, &rx, &url, &["127.0.0.1", "internal address"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv4_mapped_ipv6_literal_of_loopback_is_refused_at_send_time() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    let url = format!("http://[::ffff:127.0.0.1]:{}/mapped", rx.addr.port());
    assert_refused_at_send_time(&env, &rx, &url, &["127.0.0.1", "internal address"]).await;
}

/// A host name other than `localhost` that resolves only to loopback
/// addresses (this machine's own name usually does), for the resolver path.
fn name_resolving_to_loopback() -> Option<String> {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let hostname = hostname.trim().to_ascii_lowercase();
    if hostname.is_empty() || hostname == "localhost" || hostname.ends_with(".localhost") {
        return None;
    }
    let addrs: Vec<IpAddr> = (hostname.as_str(), 0)
        .to_socket_addrs()
        .ok()?
        .map(|a| a.ip())
        .collect();
    let ipv4_loopback = |ip: &IpAddr| matches!(ip, IpAddr::V4(v4) if v4.is_loopback());
    (addrs.iter().any(ipv4_loopback) && addrs.iter().all(|ip| ip.is_loopback())).then_some(hostname)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_name_resolving_to_loopback_is_refused_when_resolved() {
    let Some(host) = name_resolving_to_loopback() else {
        eprintln!("no host name on this machine resolves only to loopback; nothing to test");
        return;
    };
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    let url = format!("http://{host}:{}/resolved", rx.addr.port());
    assert_refused_at_send_time(&env, &rx, &url, &["127.0.0.1", "internal address"]).await;
}

// ---------------------------------------------------------------------------
// 12. The producer refuses to record a request to an internal address.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_whose_policy_refuses_loopback_records_internal_urls_exhausted_and_queues_nothing(
) {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    let port = rx.addr.port();
    let dynamic = |name: &str, url: String| {
        let mut s = spec(name, ENTITY, "on_submit", &url);
        s.dynamic_url = true;
        s
    };
    let internal = [
        dynamic("by-document", "http://{{ doc.host }}/hook".into()),
        dynamic(
            "literal",
            format!("http://127.0.0.1:{port}/{{{{ doc.name }}}}"),
        ),
        dynamic(
            "named",
            format!("http://localhost:{port}/{{{{ doc.name }}}}"),
        ),
        dynamic(
            "mapped",
            format!("http://[::ffff:127.0.0.1]:{port}/{{{{ doc.name }}}}"),
        ),
        dynamic("metadata", "http://{{ doc.cloud }}/latest/meta-data".into()),
        spec("static", ENTITY, "on_submit", &rx.url("/static")),
    ];
    for s in &internal {
        env.add_webhook(s);
    }
    // A control: the same producer records a public destination as usual.
    env.add_webhook(&dynamic(
        "public",
        "http://93.184.216.34/{{ doc.name }}".into(),
    ));

    let producer = Producer::new(
        env.store.clone(),
        env.queue.clone(),
        ProducerConfig {
            schedule: TestEnv::fast_schedule(),
            queue_grace: Duration::from_secs(600),
            policy: Arc::new(NetworkPolicy::default()),
        },
    );
    let doc = json!({
        "name": "SO-1",
        "host": format!("127.0.0.1:{port}"),
        "cloud": "169.254.169.254",
    });
    let report = producer
        .emit(Event::new(ENTITY, "on_submit", "SO-1", doc))
        .await
        .unwrap();
    assert_eq!(report.deliveries.len(), internal.len() + 1, "{report:?}");
    for d in &report.deliveries {
        let row = env.row(d.id);
        if d.webhook == "public" {
            assert_eq!(row.status, DeliveryStatus::Queued, "{row:?}");
            assert!(d.enqueued);
            continue;
        }
        assert_eq!(
            row.status,
            DeliveryStatus::Exhausted,
            "{}: {row:?}",
            d.webhook
        );
        assert!(!d.enqueued, "{}", d.webhook);
        assert!(row.next_retry.is_none(), "{}", d.webhook);
        let error = row.error.unwrap_or_default();
        assert!(
            error.contains("internal address"),
            "{}: the reason is on the row: {error:?}",
            d.webhook
        );
    }
    assert_eq!(queue_depth(&env), 1, "only the public row is queued");
    assert_eq!(rx.count(), 0);
}
