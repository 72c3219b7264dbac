//! The ingest under hostile callers: it will not serve an open network
//! without a token, closes connections that never finish their headers,
//! keeps its memory bounded whatever the batches, and tells callers nothing
//! about its internals.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use hookfleet_testkit::{
    bin_path, curl, free_port, run_within, IngestProcess, TempFile, TestEnv, ENTITY,
};

/// The ingest's peak resident memory so far, from the kernel.
fn peak_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("VmHWM");
    kib / 1024
}

fn serve_command(env: &TestEnv, listen: &str, extra: &[&str]) -> Command {
    let mut cmd = env.command("hookfleet-producer");
    cmd.args(["serve", "--listen", listen]).args(extra);
    cmd
}

#[test]
fn the_ingest_refuses_to_serve_a_non_loopback_address_without_a_token() {
    let env = TestEnv::new();
    let listen = format!("0.0.0.0:{}", free_port());
    let out = run_within(
        serve_command(&env, &listen, &[]),
        Duration::from_secs(20),
        "serve without a token",
    );
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stderr.contains("without a token"), "{out}");
    let (code, _) = curl(&[&format!("http://127.0.0.1:{}/healthz", &listen[8..])]);
    assert_eq!(code, 0, "nothing listens");
}

#[test]
fn an_empty_token_is_refused_even_on_loopback() {
    let env = TestEnv::new();
    let listen = format!("127.0.0.1:{}", free_port());
    let out = run_within(
        serve_command(&env, &listen, &["--token", ""]),
        Duration::from_secs(20),
        "serve with an empty token",
    );
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stderr.contains("token is empty"), "{out}");
}

#[test]
fn a_token_shorter_than_sixteen_characters_is_refused() {
    let env = TestEnv::new();
    let listen = format!("0.0.0.0:{}", free_port());
    let out = run_within(
        serve_command(&env, &listen, &["--token", "hunter2"]),
        Duration::from_secs(20),
        "serve with a short token",
    );
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stderr.contains("shorter than 16"), "{out}");
}

#[test]
fn an_event_of_a_million_zeros_is_refused_before_it_is_parsed() {
    let env = TestEnv::new();
    let ingest = IngestProcess::start(&env, &[]);
    // 2 MiB of text that would be 32 MiB of values.
    let zeros = vec!["0"; 1_000_000].join(",");
    let event = format!(
        r#"{{"entity_type": "{ENTITY}", "event": "on_submit", "name": "SO-1", "doc": {{"name": "SO-1", "z": [{zeros}]}}}}"#
    );
    let (code, body) = ingest.post("/v1/events", &event, &[]);
    assert_eq!(code, 413, "{body}");
    assert!(body.contains("JSON values"), "{body}");
    let batch = format!("[{event}]");
    let (code, body) = ingest.post("/v1/events/batch", &batch, &[]);
    assert_eq!(code, 413, "{body}");
}

#[test]
fn fifty_connections_that_never_finish_their_headers_are_closed_by_the_server() {
    let env = TestEnv::new();
    let ingest = IngestProcess::start(&env, &["--header-read-timeout", "1s"]);
    let addr = ingest.base.trim_start_matches("http://").to_string();
    let mut half_open: Vec<TcpStream> = (0..50)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).expect("connect");
            s.write_all(b"POST /v1/events HTTP/1.1\r\nHost: x\r\nContent-Type: appl")
                .expect("write part of the headers");
            s
        })
        .collect();
    let started = Instant::now();
    for s in &mut half_open {
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut buf = [0u8; 512];
        // Closed by the server: end of stream (possibly after an error
        // answer) or a reset; never a timeout of ours.
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("the connection stayed open: {e}"),
            }
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "closed within the header-read timeout: {:?}",
        started.elapsed()
    );
    let (code, _) = curl(&[&format!("{}/healthz", ingest.base)]);
    assert_eq!(code, 200, "and the ingest still serves");
}

/// A batch of `n` events whose JSON is about `each` bytes apiece.
fn batch_of(n: usize, each: usize) -> String {
    let events: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            json!({
                "entity_type": ENTITY,
                "event": "on_nothing",
                "name": format!("SO-{i}"),
                "doc": {"name": format!("SO-{i}"), "pad": "x".repeat(each - 120)},
            })
        })
        .collect();
    serde_json::to_string(&events).expect("json")
}

#[test]
fn batches_over_the_limit_are_refused_and_six_at_once_keep_the_ingest_small() {
    let env = TestEnv::new();
    let mut ingest = IngestProcess::start(&env, &[]);
    let pid = ingest.pid();
    let before = peak_rss_mib(pid);

    // 40 MiB: refused by its declared length, before the client is told
    // to go on (`100 Continue`), so it never starts the upload.
    let big = TempFile::new("x".repeat(40 << 20));
    let (code, headers) = curl(&[
        "-D",
        "-",
        "-o",
        "/dev/null",
        "-H",
        "Content-Type: application/json",
        "-H",
        "Expect: 100-continue",
        "--data-binary",
        &format!("@{}", big.path()),
        &format!("{}/v1/events/batch", ingest.base),
    ]);
    assert_eq!(code, 413, "{headers}");
    assert!(
        !headers.contains(" 100 "),
        "answered 100 Continue first: {headers}"
    );

    // Six batches just under the limit (1,000 events of ~32 KiB), at once.
    let batch = TempFile::new(batch_of(1000, 32 * 1024 - 64));
    let url = format!("{}/v1/events/batch", ingest.base);
    let data = format!("@{}", batch.path());
    let clients: Vec<_> = (0..6)
        .map(|_| {
            Command::new("curl")
                .args([
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "--max-time",
                    "120",
                ])
                .args([
                    "-H",
                    "Content-Type: application/json",
                    "--data-binary",
                    &data,
                    &url,
                ])
                .output()
        })
        .map(|o| std::thread::spawn(move || o))
        .collect();
    for c in clients {
        let out = c.join().expect("client").expect("curl");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "202");
    }
    assert!(ingest.running());
    let peak = peak_rss_mib(pid);
    eprintln!("ingest peak RSS: {before} MiB at start, {peak} MiB after six 32 MiB batches");
    assert!(peak < 400, "peak {peak} MiB");
}

#[test]
fn an_unavailable_database_is_answered_generically() {
    let env = TestEnv::new();
    let listen = format!("127.0.0.1:{}", free_port());
    let dead_db = format!("postgres://hookfleet:pw@127.0.0.1:{}/nowhere", free_port());
    let mut cmd = Command::new(bin_path("hookfleet-producer"));
    for (k, v) in env.envs() {
        cmd.env(k, v);
    }
    cmd.env("DATABASE_URL", &dead_db)
        .args(["serve", "--listen", &listen]);
    let _ingest = hookfleet_testkit::FleetProcess::spawn(cmd);
    let healthz = format!("http://{listen}/healthz");
    hookfleet_testkit::until_blocking(hookfleet_testkit::PATIENCE, "the ingest listens", || {
        curl(&[&healthz]).0 == 200
    });
    let event = json!({"entity_type": ENTITY, "event": "on_submit", "name": "SO-1"}).to_string();
    let file = TempFile::new(event);
    let (code, body) = curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        &format!("@{}", file.path()),
        &format!("http://{listen}/v1/events"),
    ]);
    assert_eq!(code, 503, "{body}");
    for leak in ["postgres://", "nowhere", "hookfleet:pw", "127.0.0.1"] {
        assert!(!body.contains(leak), "the answer leaks {leak:?}: {body}");
    }
}

#[test]
fn a_token_too_repetitive_to_be_worth_guessing_is_refused() {
    let env = TestEnv::new();
    let listen = format!("0.0.0.0:{}", free_port());
    let out = run_within(
        serve_command(&env, &listen, &["--token", "abababababababababab"]),
        Duration::from_secs(20),
        "serve with a repetitive token",
    );
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stderr.contains("too repetitive"), "{out}");
}

#[test]
fn a_client_that_guesses_tokens_is_refused_even_the_right_one_for_a_while() {
    let env = TestEnv::new();
    let token = "T0KEN-0123456789abcdef";
    let ingest = IngestProcess::start(&env, &["--token", token]);
    let event = json!({"entity_type": ENTITY, "event": "on_submit", "name": "SO-1"}).to_string();
    for i in 0..hookfleet_core::runtime::http::GUESS_BUDGET {
        let (code, body) = ingest.post(
            "/v1/events",
            &event,
            &[&format!("Authorization: Bearer guess-{i:02}-0123456789")],
        );
        assert_eq!(code, 401, "guess {i}: {body}");
    }
    // Over its budget: refused before its token is looked at, so a right
    // guess now would teach it nothing.
    let right = format!("Authorization: Bearer {token}");
    let (code, body) = ingest.post("/v1/events", &event, &[&right]);
    assert_eq!(code, 429, "{body}");
    assert!(env.rows().is_empty(), "nothing recorded");
}

#[test]
fn one_client_holds_at_most_a_quarter_of_the_ingests_connections() {
    let env = TestEnv::new();
    // A header timeout far longer than the test waits: only the cap can
    // close a connection here.
    let ingest = IngestProcess::start(
        &env,
        &["--max-connections", "8", "--header-read-timeout", "300s"],
    );
    let addr = ingest.base.trim_start_matches("http://").to_string();
    // Two idle connections are this client's share of eight; a third is
    // closed as it comes.
    let _share: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(&addr).expect("connect"))
        .collect();
    let mut third = TcpStream::connect(&addr).expect("connect");
    third
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let mut buf = [0u8; 16];
    match third.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("a third connection was held: {other:?}"),
    }
}

#[test]
fn the_token_can_come_from_a_file_kept_out_of_ps_and_the_environment() {
    let env = TestEnv::new();
    let token = "T0KEN-from-a-file-0123456789";
    let file = TempFile::new(format!("{token}\n"));
    let ingest = IngestProcess::start(&env, &["--token-file", file.path()]);
    let event = json!({"entity_type": ENTITY, "event": "on_submit", "name": "SO-1"}).to_string();
    let (code, _) = ingest.post("/v1/events", &event, &[]);
    assert_eq!(code, 401, "the file's token is required");
    let (code, body) = ingest.post(
        "/v1/events",
        &event,
        &[&format!("Authorization: Bearer {token}")],
    );
    assert_eq!(code, 202, "{body}");
}
