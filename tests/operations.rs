//! What an operator watches, from outside, on real processes started with
//! `--metrics-listen`: `/metrics` counts what the worker, the sweeper's loop
//! and the ingest did; `/livez` answers while their loops run; `/readyz`
//! answers 503 with the reason while Postgres is unreachable, and 200 again
//! when it is back, the process serving throughout.

use std::time::Duration;

use serde_json::json;

use hookfleet_testkit::{
    curl, free_port, spec, until_blocking, FleetProcess, IngestProcess, LocalPostgres, Receiver,
    TestEnv, ENTITY,
};

/// How long a test waits for a process to do what it should.
const PATIENCE: Duration = Duration::from_secs(30);

fn get(base: &str, path: &str) -> (u16, String) {
    curl(&[&format!("{base}{path}")])
}

/// Starts `bin ARGS --metrics-listen 127.0.0.1:PORT` and waits until it
/// answers `/livez`; the process and its base URL.
fn start_with_metrics(env: &TestEnv, bin: &str, args: &[&str]) -> (FleetProcess, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let mut cmd = env.command(bin);
    cmd.args(args).args(["--metrics-listen", &listen]);
    let mut process = FleetProcess::spawn(cmd);
    let base = format!("http://{listen}");
    until_blocking(PATIENCE, &format!("{bin} answers /livez"), || {
        assert!(process.running(), "{bin} exited");
        get(&base, "/livez").0 == 200
    });
    (process, base)
}

/// The value of the sample `line_start` (a metric name with its labels).
fn sample(metrics: &str, line_start: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_counts_its_deliveries_by_webhook_and_outcome() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    receiver.reply_next([hookfleet_testkit::Reply::status(503)]);
    env.add_webhook(&spec("orders", ENTITY, "on_submit", &receiver.url("/o")));
    env.emit_by_cli("on_submit", "SO-1", &json!({"name": "SO-1"}))
        .ok("emit");
    env.emit_by_cli("on_submit", "SO-2", &json!({"name": "SO-2"}))
        .ok("emit");
    let (mut worker, base) = start_with_metrics(&env, "hookfleet-worker", &["--concurrency", "1"]);
    receiver.wait_for(2, PATIENCE).await;
    let text = blocking_until_metric(
        &base,
        r#"hookfleet_delivery_attempts_total{webhook="orders",outcome="delivered"}"#,
    );
    assert_eq!(
        sample(
            &text,
            r#"hookfleet_delivery_attempts_total{webhook="orders",outcome="delivered"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"hookfleet_delivery_attempts_total{webhook="orders",outcome="failed"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"hookfleet_delivery_duration_seconds_count{webhook="orders"}"#
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(sample(&text, "hookfleet_in_flight "), Some(0.0), "{text}");
    // Only what a worker keeps: a missing sweeper must not read as a
    // backlog of 0.
    for absent in [
        "hookfleet_oldest_due_age_seconds",
        "hookfleet_due_backlog",
        "hookfleet_events",
    ] {
        assert!(!text.contains(absent), "a worker exports {absent}: {text}");
    }
    assert_eq!(get(&base, "/readyz"), (200, "ok\n".into()));
    assert_eq!(get(&base, "/nothing-here").0, 404);
    worker.stop();
}

/// Reads `/metrics` until `line_start` appears; the text.
fn blocking_until_metric(base: &str, line_start: &str) -> String {
    let mut text = String::new();
    until_blocking(PATIENCE, &format!("{line_start} in /metrics"), || {
        let (code, body) = get(base, "/metrics");
        assert_eq!(code, 200, "{body}");
        text = body;
        text.contains(line_start)
    });
    text
}

#[test]
fn readyz_says_postgres_is_unreachable_while_the_worker_keeps_serving() {
    let pg = LocalPostgres::start();
    let env = TestEnv::on_postgres(&pg.admin_url());
    let (mut worker, base) = start_with_metrics(&env, "hookfleet-worker", &[]);
    assert_eq!(get(&base, "/readyz").0, 200);
    pg.stop_immediately();
    let mut answer = (0, String::new());
    until_blocking(PATIENCE, "/readyz answers 503", || {
        answer = get(&base, "/readyz");
        answer.0 == 503
    });
    // Within a probe's timeout, however many ask at once.
    let asked = std::time::Instant::now();
    let answers: Vec<u16> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..20)
            .map(|_| s.spawn(|| get(&base, "/readyz").0))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(answers.iter().all(|c| *c == 503), "{answers:?}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "20 probes took {:?}",
        asked.elapsed()
    );
    assert!(answer.1.contains("postgres"), "{answer:?}");
    assert!(!answer.1.contains("redis"), "Redis is fine: {answer:?}");
    assert_eq!(get(&base, "/livez").0, 200, "alive, only not ready");
    assert!(worker.running());
    pg.start_again();
    until_blocking(PATIENCE, "/readyz answers 200 again", || {
        get(&base, "/readyz").0 == 200
    });
    worker.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_loop_reports_the_backlog_queues_and_its_ticks() {
    let env = TestEnv::new();
    env.add_quiet_webhook("quiet", "on_submit");
    for name in ["SO-1", "SO-2", "SO-3"] {
        env.emit_by_cli("on_submit", name, &json!({"name": name}))
            .ok("emit");
    }
    env.make_all_due();
    let (mut sweeper, base) = start_with_metrics(&env, "hookfleet-sweeper", &["--interval", "1s"]);
    // The histogram is exported (count 0) before the first tick ends, and
    // the backlog is read after the tick: wait for both.
    let mut text = String::new();
    until_blocking(
        PATIENCE,
        "a sweeper tick and its backlog in /metrics",
        || {
            text = get(&base, "/metrics").1;
            sample(&text, "hookfleet_sweeper_tick_seconds_count").is_some_and(|n| n >= 1.0)
                && sample(&text, "hookfleet_due_backlog ") == Some(3.0)
        },
    );
    assert!(
        sample(&text, "hookfleet_oldest_due_age_seconds ").is_some_and(|a| a > 0.0),
        "{text}"
    );
    assert!(
        sample(&text, r#"hookfleet_queue_depth{queue="default"}"#).is_some_and(|d| d >= 3.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "hookfleet_dead_letters "),
        Some(0.0),
        "{text}"
    );
    assert!(text.contains("hookfleet_sweeper_enqueued_total"), "{text}");
    assert_eq!(get(&base, "/readyz").0, 200);
    sweeper.stop();
}

#[test]
fn the_ingest_serves_probes_and_counts_its_events_behind_its_token() {
    let env = TestEnv::new();
    env.add_quiet_webhook("quiet", "on_submit");
    let token = "an-ingest-token-of-some-length";
    let ingest = IngestProcess::start(&env, &["--token", token]);
    assert_eq!(get(&ingest.base, "/livez").0, 200);
    assert_eq!(get(&ingest.base, "/readyz"), (200, "ok\n".into()));
    assert_eq!(
        get(&ingest.base, "/metrics").0,
        401,
        "the metrics name webhooks"
    );
    let auth = format!("Authorization: Bearer {token}");
    let event = json!({"entity_type": ENTITY, "event": "on_submit", "name": "SO-1"});
    let (code, body) = ingest.post("/v1/events", event.to_string(), &[&auth]);
    assert_eq!(code, 202, "{body}");
    let (code, text) = curl(&["-H", &auth, &format!("{}/metrics", ingest.base)]);
    assert_eq!(code, 200, "{text}");
    assert_eq!(
        sample(&text, r#"hookfleet_events_total{source="ingest"}"#),
        Some(1.0),
        "{text}"
    );
}

#[test]
fn a_metrics_address_that_cannot_be_bound_stops_the_process() {
    let env = TestEnv::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = hookfleet_testkit::run_within(
        {
            let mut cmd = env.command("hookfleet-worker");
            cmd.args(["--metrics-listen", &addr]);
            cmd
        },
        PATIENCE,
        "a worker on a taken metrics port",
    );
    assert_eq!(out.code, Some(2), "{out}");
    assert!(out.stderr.contains("--metrics-listen"), "{out}");
}

#[test]
fn the_grafana_dashboard_queries_only_metrics_the_processes_export() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/grafana/hookfleet-dashboard.json"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the dashboard"))
            .expect("the dashboard is JSON");
    let mut queried = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("a PromQL expression");
            for (i, _) in expr.match_indices("hookfleet_") {
                let name: String = expr[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                queried.insert(name);
            }
        }
    }
    assert!(queried.len() >= 8, "{queried:?}");
    let exported = hookfleet_core::runtime::observe::METRIC_NAMES;
    for name in &queried {
        let base = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        assert!(
            exported.contains(&base),
            "the dashboard queries {name}, which no process exports"
        );
    }
    // And what the issue asks the dashboard to show is there.
    for wanted in [
        "hookfleet_delivery_attempts_total",
        "hookfleet_delivery_duration_seconds_bucket",
        "hookfleet_in_flight",
        "hookfleet_queue_depth",
        "hookfleet_due_backlog",
        "hookfleet_oldest_due_age_seconds",
        "hookfleet_dead_letters",
    ] {
        assert!(queried.contains(wanted), "the dashboard lacks {wanted}");
    }
    // Every metric a query reads is scoped by the namespace and job the
    // viewer picks, and those variables exist.
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for wanted in ["datasource", "namespace", "job"] {
        assert!(variables.contains(&wanted), "{variables:?}");
    }
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("a PromQL expression");
            let scoped = r#"{job=~"$job",namespace=~"$namespace""#;
            assert_eq!(
                expr.matches("hookfleet_").count(),
                expr.matches(scoped).count(),
                "every metric in {expr:?} is scoped"
            );
        }
    }
    // The stat panels turn red where the shipped alerts fire: one dead
    // letter, a due retry waiting 15 minutes; not at Grafana's default 80.
    let red_from = |title: &str| -> Option<f64> {
        let panel = dashboard["panels"]
            .as_array()
            .expect("panels")
            .iter()
            .find(|p| p["title"] == title && p["type"] == "stat")
            .unwrap_or_else(|| panic!("a stat panel {title:?}"));
        panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
            .as_array()
            .expect("explicit thresholds")
            .iter()
            .find(|s| s["color"] == "red")
            .and_then(|s| s["value"].as_f64())
    };
    assert_eq!(red_from("Dead letters"), Some(1.0));
    assert_eq!(red_from("Oldest due retry"), Some(900.0));
    let alerts = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/prometheus/hookfleet-alerts.yml"
    ))
    .expect("the alert rules");
    for expr in [
        "max(hookfleet_oldest_due_age_seconds) > 900",
        "max(hookfleet_dead_letters) > 0",
    ] {
        assert!(alerts.contains(expr), "the alert the panel mirrors: {expr}");
    }
}

#[test]
fn in_json_mode_every_line_a_failing_process_prints_is_json() {
    let env = TestEnv::new();
    let nothing_listens = format!("postgres://nobody@127.0.0.1:{}/none", free_port());
    let run = |bin: &str, args: &[&str], database_url: &str| {
        let mut cmd = env.command(bin);
        cmd.args(args)
            .env("HOOKFLEET_LOG_FORMAT", "json")
            .env("DATABASE_URL", database_url);
        hookfleet_testkit::run_within(cmd, PATIENCE, bin)
    };
    for (out, code, says) in [
        (
            run("hookfleet-sweeper", &["--once"], &nothing_listens),
            1,
            "tick failed",
        ),
        (
            run("hookfleet-worker", &["--queues", ","], &env.envs()[0].1),
            2,
            "--queues names no queue",
        ),
        (
            run(
                "hookfleet-worker",
                &["--concurrency", "abc"],
                &env.envs()[0].1,
            ),
            2,
            "invalid value",
        ),
    ] {
        assert_eq!(out.code, Some(code), "{out}");
        let all = out.all();
        let lines: Vec<&str> = all.lines().filter(|l| !l.is_empty()).collect();
        assert!(!lines.is_empty(), "{out}");
        for line in &lines {
            let parsed: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            assert!(parsed["level"].is_string(), "{line}");
        }
        assert!(
            lines
                .iter()
                .any(|l| l.contains("\"level\":\"ERROR\"") && l.contains(says)),
            "the fatal error is a JSON line: {out}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_attempts_are_logged_with_their_reason_but_a_dead_receiver_cannot_flood_the_log() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    receiver.reply_always(hookfleet_testkit::Reply::status(500));
    env.add_webhook(&spec("down", ENTITY, "on_submit", &receiver.url("/down")));
    let events = 200;
    env.producer()
        .emit_batch(hookfleet_testkit::sales_orders(events))
        .await
        .expect("emit");
    let mut cmd = env.command("hookfleet-worker");
    cmd.args(["--concurrency", "64"])
        .env("HOOKFLEET_LOG_FORMAT", "json");
    let started = std::time::Instant::now();
    let mut worker = FleetProcess::spawn_logged(cmd);
    receiver.wait_for(events, PATIENCE).await;
    // Every attempt's outcome is written before the worker stops.
    until_blocking(PATIENCE, "every row Failed", || {
        env.rows()
            .iter()
            .all(|r| r.status == hookfleet_core::domain::DeliveryStatus::Failed)
    });
    worker.stop();
    let elapsed = started.elapsed().as_secs_f64();
    let log = worker.log();
    let failures: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["fields"]["message"] == "attempt failed; retry scheduled")
        .collect();
    assert!(!failures.is_empty(), "no failed attempt logged: {log}");
    let first = &failures[0];
    assert_eq!(first["level"], "INFO", "{first}");
    assert_eq!(first["fields"]["webhook"], "down", "{first}");
    assert_eq!(first["fields"]["reason"], "HTTP 500", "{first}");
    assert!(first["fields"]["log_id"].is_number(), "{first}");
    assert_eq!(first["fields"]["attempt"], 1, "{first}");
    // A burst of 20, then 5 a second: far fewer lines than failures.
    let allowed = 20.0 + 5.0 * elapsed + 1.0;
    assert!(
        (failures.len() as f64) <= allowed && failures.len() < events,
        "{} lines for {events} failures in {elapsed:.1}s",
        failures.len()
    );
}

/// Parses a scrape with the reference Python client's parsers (the classic
/// text parser for `classic`, the OpenMetrics one otherwise) and returns
/// every `hookfleet_delivery_attempts_total` sample as (labels, value), or the
/// parser's refusal.
fn parsed_deliveries(text: &str, classic: bool) -> Result<Vec<(serde_json::Value, f64)>, String> {
    let python = std::env::var("HOOKFLEET_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = r#"
import json, sys
text = sys.stdin.read()
if sys.argv[1] == "classic":
    from prometheus_client.parser import text_string_to_metric_families
else:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(text):
    for s in family.samples:
        if s.name == "hookfleet_delivery_attempts_total":
            out.append([s.labels, s.value])
print(json.dumps(out))
"#;
    let mut cmd = std::process::Command::new(&python);
    cmd.args([
        "-c",
        script,
        if classic { "classic" } else { "openmetrics" },
    ]);
    let out = hookfleet_testkit::run_with_stdin(cmd, Some(text));
    if out.code != Some(0) {
        return Err(out.stderr);
    }
    let samples: Vec<(serde_json::Value, f64)> =
        serde_json::from_str(&out.stdout).expect("the parser's JSON");
    Ok(samples)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quote_in_a_webhook_name_neither_breaks_the_scrape_nor_forges_a_sample() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    let names = [
        r#"Orders "EU""#,
        r#"x",outcome="delivered"} 1e9 #"#,
        r"back\slash",
    ];
    for (i, name) in names.iter().enumerate() {
        let event = format!("on_event_{i}");
        env.add_webhook(&spec(name, ENTITY, &event, &receiver.url("/q")));
        env.emit_by_cli(&event, &format!("SO-{i}"), &json!({"name": i}))
            .ok("emit");
    }
    let (mut worker, base) = start_with_metrics(&env, "hookfleet-worker", &[]);
    receiver.wait_for(names.len(), PATIENCE).await;
    let mut scrapes = Vec::new();
    until_blocking(PATIENCE, "every delivery counted in /metrics", || {
        let classic = get(&base, "/metrics");
        let openmetrics = curl(&[
            "-H",
            "Accept: application/openmetrics-text; version=1.0.0",
            &format!("{base}/metrics"),
        ]);
        let counted = parsed_deliveries(&classic.1, true).map_or(0, |s| s.len());
        scrapes = vec![(classic, true), (openmetrics, false)];
        counted == names.len()
    });
    for ((code, text), classic) in scrapes {
        assert_eq!(code, 200, "{text}");
        let samples = parsed_deliveries(&text, classic)
            .unwrap_or_else(|e| panic!("a parser refused the scrape ({e}):\n{text}"));
        let mut seen: Vec<(String, String, f64)> = samples
            .iter()
            .map(|(labels, value)| {
                (
                    labels["webhook"].as_str().unwrap_or_default().to_string(),
                    labels["outcome"].as_str().unwrap_or_default().to_string(),
                    *value,
                )
            })
            .collect();
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        let mut expected: Vec<(String, String, f64)> = names
            .iter()
            .map(|n| (n.to_string(), "delivered".to_string(), 1.0))
            .collect();
        expected.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(seen, expected, "classic={classic}:\n{text}");
    }
    worker.stop();
}

#[test]
fn metrics_speak_the_format_the_scraper_asks_for() {
    let env = TestEnv::new();
    let (mut worker, base) = start_with_metrics(&env, "hookfleet-worker", &[]);
    let head = |accept: Option<&str>| {
        let mut args = vec!["-D", "-", "-o", "/dev/null"];
        let header;
        if let Some(a) = accept {
            header = format!("Accept: {a}");
            args.extend(["-H", header.as_str()]);
        }
        let url = format!("{base}/metrics");
        args.push(&url);
        curl(&args).1.to_ascii_lowercase()
    };
    assert!(
        head(None).contains("content-type: text/plain; version=0.0.4"),
        "{}",
        head(None)
    );
    // What Prometheus sends: OpenMetrics first, the classic format after.
    let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    assert!(head(Some(prometheus)).contains("content-type: application/openmetrics-text"));
    let (_, classic) = get(&base, "/metrics");
    assert!(
        classic.contains("# TYPE hookfleet_webhooks_auto_paused_total counter"),
        "a classic parser needs the counter's TYPE line to name its _total series:\n{classic}"
    );
    assert!(!classic.contains("# EOF"), "{classic}");
    worker.stop();
}

#[test]
fn idle_sockets_on_the_metrics_port_are_closed_and_cannot_starve_it() {
    use std::io::Read;
    let env = TestEnv::new();
    let (mut worker, base) = start_with_metrics(&env, "hookfleet-worker", &[]);
    let addr = base.trim_start_matches("http://").to_string();
    // More idle sockets than the listener serves at once, none sending a
    // byte (a slow or hostile client).
    let cap = hookfleet_core::runtime::observe::METRICS_LIMITS.max_connections;
    let mut idle: Vec<std::net::TcpStream> = (0..cap + 8)
        .map(|_| std::net::TcpStream::connect(&addr).expect("connect"))
        .collect();
    // Each is closed by the server (end of stream), the waiting ones as the
    // first are let go: none is held for longer than a few header timeouts.
    for (i, s) in idle.iter_mut().enumerate() {
        s.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let mut byte = [0u8; 1];
        match s.read(&mut byte) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("idle socket {i} was not closed by the server: {other:?}"),
        }
    }
    assert_eq!(get(&base, "/livez").0, 200, "the listener serves again");
    worker.stop();
}

/// `promtool check metrics` (Prometheus's own linter, from the Debian
/// package the test script installs) on a scrape: its complaints, empty
/// when it has none.
fn promtool_complaints(text: &str) -> String {
    let promtool = std::env::var("HOOKFLEET_TEST_PROMTOOL").unwrap_or_else(|_| "promtool".into());
    let mut cmd = std::process::Command::new(&promtool);
    cmd.args(["check", "metrics"]);
    let run = hookfleet_testkit::run_with_stdin(cmd, Some(text));
    if run.code == Some(0) && run.stdout.trim().is_empty() && run.stderr.trim().is_empty() {
        String::new()
    } else {
        format!("{run}")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_process_scrape_passes_promtool_and_says_what_runs_it() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    receiver.reply_next([hookfleet_testkit::Reply::status(503)]);
    env.add_webhook(&spec("orders", ENTITY, "on_submit", &receiver.url("/o")));
    env.emit_by_cli("on_submit", "SO-1", &json!({"name": "SO-1"}))
        .ok("emit");
    let (mut worker, worker_base) = start_with_metrics(&env, "hookfleet-worker", &[]);
    let (mut sweeper, sweeper_base) =
        start_with_metrics(&env, "hookfleet-sweeper", &["--interval", "1s"]);
    let token = "an-ingest-token-of-some-length";
    let ingest = IngestProcess::start(&env, &["--token", token]);
    let auth = format!("Authorization: Bearer {token}");
    let event = json!({"entity_type": ENTITY, "event": "on_submit", "name": "SO-2"});
    assert_eq!(
        ingest.post("/v1/events", event.to_string(), &[&auth]).0,
        202
    );
    receiver.wait_for(1, PATIENCE).await;
    // Scrapes once the worker has counted an attempt, so labelled series
    // (counters, histograms) are in what promtool reads.
    let worker_text = blocking_until_metric(
        &worker_base,
        r#"hookfleet_delivery_attempts_total{webhook="orders",outcome="failed"}"#,
    );
    let scrapes = [
        ("worker", worker_text),
        ("sweeper", get(&sweeper_base, "/metrics").1),
        (
            "ingest",
            curl(&["-H", &auth, &format!("{}/metrics", ingest.base)]).1,
        ),
    ];
    for (process, text) in &scrapes {
        assert_eq!(
            promtool_complaints(text),
            "",
            "the {process}'s scrape:\n{text}"
        );
        // CPU time is counted in ticks: a quiet process may show 0.
        assert!(
            sample(text, "process_cpu_seconds_total ").is_some_and(|v| v >= 0.0),
            "the {process} exports process_cpu_seconds_total:\n{text}"
        );
        for name in [
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_start_time_seconds ",
        ] {
            let value = sample(text, name);
            assert!(
                value.is_some_and(|v| v > 0.0),
                "the {process} exports {name}:\n{text}"
            );
        }
        let build = format!(
            r#"hookfleet_build_info{{version="{}"}}"#,
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(sample(text, &build), Some(1.0), "the {process}:\n{text}");
    }
    // A scrape promtool must refuse, so the check above can fail.
    assert_ne!(
        promtool_complaints("# TYPE x counter\nx 1\n"),
        "",
        "promtool accepted a counter without _total"
    );
    worker.stop();
    sweeper.stop();
}
