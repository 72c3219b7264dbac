//! Traces over OTLP, end to end with the real binaries and a real OTLP
//! receiver on loopback (the official protobuf definitions decode what
//! arrives): one trace per event, from the application's own context
//! through the emit to every attempt of its delivery, retries included;
//! the receiver is sent each attempt's `traceparent` when asked, and never
//! otherwise; the receiver's URL is exported as its host alone; the
//! worker's last spans go out as it stops; and no context is made up
//! without an endpoint.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_testkit::{
    free_port, run_within, spec, until, FleetProcess, Receiver, Reply, TestEnv, ENTITY, PATIENCE,
};

/// The application's own trace context, as it would pass it at emit.
const APP_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const APP_SPAN: &str = "00f067aa0ba902b7";

/// The OTLP receiver: a process writing each span it decodes as a JSON
/// line to its file.
struct Collector {
    _process: FleetProcess,
    port: u16,
    out: PathBuf,
}

impl Collector {
    async fn start() -> Collector {
        let python = std::env::var("HOOKFLEET_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let port = free_port();
        let out = std::env::temp_dir().join(format!(
            "hookfleet-otlp-{}-{port}.jsonl",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&out);
        let mut cmd = Command::new(python);
        cmd.arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/py/otlp_receiver.py"
        ))
        .arg(port.to_string())
        .arg(&out);
        let process = FleetProcess::spawn_logged(cmd);
        until("the OTLP receiver listens", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
        .await;
        Collector {
            _process: process,
            port,
            out,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far (whole lines only: the receiver may be
    /// writing the next one).
    fn spans(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let spans: Vec<Value> = text
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        for s in &spans {
            assert!(
                s.get("error").is_none(),
                "the receiver refused an export: {s}"
            );
        }
        spans
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.out);
    }
}

/// Emits SO-1 by the CLI to webhook `orders` at `url`, and delivers it
/// with a worker process made by `worker` (then stopped): the row's id.
async fn emit_and_deliver(env: &TestEnv, url: &str, worker: impl FnOnce(&mut Command)) -> i64 {
    env.add_webhook(&spec("orders", ENTITY, "on_submit", url));
    let report = run_within(env.emit_command("on_submit", "SO-1"), PATIENCE, "emit")
        .ok("emit")
        .json();
    let id = hookfleet_testkit::delivery_ids(&report)[0];
    let mut cmd = env.command("hookfleet-worker");
    cmd.args(["--concurrency", "1"]);
    worker(&mut cmd);
    let mut process = FleetProcess::spawn_logged(cmd);
    until("delivered", || {
        env.rows()
            .iter()
            .any(|r| r.id == id && r.status == DeliveryStatus::Delivered)
    })
    .await;
    process.stop();
    id
}

/// Whether `receiver`'s first request carried a `traceparent`.
fn sent_a_traceparent(receiver: &Receiver) -> bool {
    receiver.requests()[0]
        .headers
        .iter()
        .any(|(k, _)| k == "traceparent")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_the_application_through_every_attempt() {
    let env = TestEnv::new();
    let collector = Collector::start().await;
    let receiver = Receiver::start().await;
    receiver.reply_next([Reply::status(500)]);
    env.add_webhook(&spec("orders", ENTITY, "on_submit", &receiver.url("/hook")));
    let endpoint = collector.endpoint();

    // The application emits inside its own trace.
    let app_context = format!("00-{APP_TRACE}-{APP_SPAN}-01");
    let mut emit = env.emit_command("on_submit", "SO-1");
    emit.args(["--traceparent", &app_context])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
    let report = run_within(emit, PATIENCE, "emit").ok("emit").json();
    let id = hookfleet_testkit::delivery_ids(&report)[0];

    // A worker that sends the context on; its first attempt gets a 500, the
    // retry (due at once, re-enqueued by a sweeper tick) a 200.
    let mut cmd = env.command("hookfleet-worker");
    cmd.args(["--concurrency", "1", "--send-traceparent"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("HOOKFLEET_RETRY_SCHEDULE", "1s");
    let mut worker = FleetProcess::spawn_logged(cmd);
    let delivered = |env: &TestEnv| {
        env.rows()
            .iter()
            .any(|r| r.id == id && r.status == DeliveryStatus::Delivered)
    };
    until("the retry delivered it", || {
        if !delivered(&env) {
            let mut tick = env.command("hookfleet-sweeper");
            tick.arg("--once");
            run_within(tick, PATIENCE, "a sweeper tick");
        }
        delivered(&env)
    })
    .await;
    worker.stop();

    // The worker flushed its spans as it stopped; the emit's went out at
    // its exit.
    let mut spans = Vec::new();
    until("three spans exported", || {
        spans = collector.spans();
        spans.len() >= 3
    })
    .await;
    let by_name =
        |name: &str| -> Vec<&Value> { spans.iter().filter(|s| s["name"] == name).collect() };
    let emits = by_name("emit");
    assert_eq!(emits.len(), 1, "{spans:?}");
    let emit = emits[0];
    assert_eq!(emit["service"], "hookfleet-producer");
    assert_eq!(emit["trace_id"], APP_TRACE, "the application's trace");
    assert_eq!(
        emit["parent_span_id"], APP_SPAN,
        "under the application's span"
    );
    assert_eq!(emit["attributes"]["hookfleet.document"], "SO-1");

    let mut attempts = by_name("deliver");
    attempts.sort_by_key(|s| s["attributes"]["hookfleet.attempt"].as_i64());
    assert_eq!(attempts.len(), 2, "{spans:?}");
    for (n, (span, code)) in attempts.iter().zip([500, 200]).enumerate() {
        assert_eq!(span["service"], "hookfleet-worker");
        assert_eq!(span["trace_id"], APP_TRACE, "one trace: {span}");
        assert_eq!(
            span["parent_span_id"], emit["span_id"],
            "under the emit: {span}"
        );
        assert_eq!(span["attributes"]["hookfleet.attempt"], n as i64 + 1);
        assert_eq!(span["attributes"]["hookfleet.delivery_id"], id);
        assert_eq!(span["attributes"]["http.response.status_code"], code);
        assert_eq!(span["attributes"]["server.address"], "127.0.0.1");
        // OTLP status codes: 2 is error, 0 unset.
        assert_eq!(span["status"], if code == 500 { 2 } else { 0 }, "{span}");
    }

    // The receiver saw each attempt's own context, in the same trace.
    let seen: Vec<String> = receiver
        .requests()
        .iter()
        .map(|r| {
            let headers: HashMap<_, _> = r.headers.iter().cloned().collect();
            headers.get("traceparent").cloned().unwrap_or_default()
        })
        .collect();
    let expected: Vec<String> = attempts
        .iter()
        .map(|s| format!("00-{APP_TRACE}-{}-01", s["span_id"].as_str().unwrap()))
        .collect();
    assert_eq!(seen, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traced_without_send_traceparent_the_receiver_gets_none_and_the_url_is_its_host() {
    let env = TestEnv::new();
    let collector = Collector::start().await;
    let receiver = Receiver::start().await;
    // A receiver's path and query may hold a credential.
    let url = receiver.url("/hook/s3cret-path?token=s3cret-query");
    // Exported only when the worker stops: its flush at exit is what sends
    // the span.
    emit_and_deliver(&env, &url, |cmd| {
        cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
            .env("OTEL_BSP_SCHEDULE_DELAY", "3600000");
    })
    .await;
    let mut spans = Vec::new();
    until("the attempt's span exported at the worker's exit", || {
        spans = collector.spans();
        spans.iter().any(|s| s["name"] == "deliver")
    })
    .await;
    let attempt = spans.iter().find(|s| s["name"] == "deliver").unwrap();
    assert_eq!(attempt["attributes"]["server.address"], "127.0.0.1");
    let exported = serde_json::to_string(&spans).unwrap();
    assert!(
        !exported.contains("s3cret") && !exported.contains("/hook"),
        "a URL's path or query was exported: {exported}"
    );
    assert!(
        !sent_a_traceparent(&receiver),
        "a traceparent was sent without --send-traceparent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_no_traceparent_is_made_up() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    let id = emit_and_deliver(&env, &receiver.url("/hook"), |cmd| {
        cmd.arg("--send-traceparent");
    })
    .await;
    let row = env.rows().into_iter().find(|r| r.id == id).unwrap();
    assert_eq!(row.traceparent, None);
    assert!(
        !sent_a_traceparent(&receiver),
        "a context was sent that no one made"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_traceparent_is_refused_at_emit_and_a_bad_endpoint_at_start() {
    let env = TestEnv::new();
    let mut emit = env.emit_command("on_submit", "SO-1");
    emit.args(["--traceparent", "00-not-a-context-01"]);
    let run = run_within(emit, PATIENCE, "emit");
    assert_ne!(run.code, Some(0), "{run}");
    assert!(
        run.stderr
            .contains("the traceparent is not a W3C trace context"),
        "{run}"
    );
    assert!(env.rows().is_empty(), "a refused event was recorded");

    let mut worker = env.command("hookfleet-worker");
    worker.env("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://collector:4318");
    let run = run_within(worker, PATIENCE, "worker");
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("--otlp-endpoint"), "{run}");

    // Credentials in the URL would be written into the exporter's errors.
    let mut worker = env.command("hookfleet-worker");
    worker.env(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "http://user:pa55@collector:4318",
    );
    let run = run_within(worker, PATIENCE, "worker");
    assert_eq!(run.code, Some(2), "{run}");
    assert!(run.stderr.contains("OTEL_EXPORTER_OTLP_HEADERS"), "{run}");
    assert!(!run.stderr.contains("pa55"), "{run}");
}
