//! Credentials at rest and in rotation: with a key configured, neither a
//! signing secret nor a header value is in the database in the clear (a
//! `pg_dump` holds neither); credentials are read from the webhook at send
//! time, so a changed token reaches a pending retry; secrets rotate in two
//! phases, checked with the official Standard Webhooks library and the
//! Frappe HMAC; `secrets reencrypt` moves every value to a new key.

use std::process::Command;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use hookfleet_core::domain::at_rest::{self, Keyring};
use hookfleet_core::domain::DeliveryStatus;
use hookfleet_core::domain::RetrySchedule;
use hookfleet_testkit::{webhook_add_args, Received, Receiver, Reply, Run, TestEnv, ENTITY};

/// Test keys (32 bytes each, base64).
const KEY_1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const KEY_2: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

const SECRET_A: &str = "whsec_QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=";
const SECRET_B: &str = "whsec_QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=";
const SECRET_C: &str = "whsec_Q0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0M=";

/// `hookfleet ARGS` with `key` (if any) as the current key and `old` as old
/// keys.
fn cli_with_keys(env: &TestEnv, key: Option<&str>, old: &[&str], args: &[&str]) -> Run {
    let mut cmd = env.command("hookfleet");
    if let Some(k) = key {
        cmd.env("HOOKFLEET_SECRET_KEY", k);
    }
    if !old.is_empty() {
        cmd.env("HOOKFLEET_SECRET_KEY_OLD", old.join(","));
    }
    Run::from(cmd.args(args).output().expect("run hookfleet"))
}

/// `hookfleet webhook add NAME` on Sales Order `on_submit` posting to `url`,
/// with `extra` arguments after, and `key` (if any) as the current key.
fn add_with_key(env: &TestEnv, key: Option<&str>, name: &str, url: &str, extra: &[&str]) -> Run {
    let args = webhook_add_args(name, ENTITY, "on_submit", url, extra);
    cli_with_keys(env, key, &[], &args)
}

/// This test process seals and opens with `key` (its in-process worker and
/// producer do).
fn use_key(key: &str) {
    at_rest::install(Keyring::new(Some(key), &[]).expect("key"));
}

/// With `key` installed, a worker delivers SO-1 and stops.
async fn deliver_so_1_with_key(env: &TestEnv, key: &str) {
    use_key(key);
    let worker = env.start_worker(2, RetrySchedule::default());
    env.submit_until("SO-1", DeliveryStatus::Delivered).await;
    worker.stop().await;
}

/// The official Standard Webhooks libraries the tests judge signatures
/// with, as receivers use them.
#[derive(Debug, Clone, Copy)]
enum Library {
    Python,
    Node,
}

/// Whether the official Standard Webhooks library for Python accepts
/// `request` for `secret` (given as a string).
fn standard_library_accepts(request: &Received, secret: &str) -> bool {
    library_accepts(Library::Python, request, secret, false)
}

/// Whether `library` accepts `request` for `secret`, given as a string or,
/// with `raw`, as its bytes.
fn library_accepts(library: Library, request: &Received, secret: &str, raw: bool) -> bool {
    let (program, script) = match library {
        Library::Python => (
            std::env::var("HOOKFLEET_TEST_PYTHON").unwrap_or_else(|_| "python3".into()),
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/support/py/verify_standard_webhooks.py"
            ),
        ),
        Library::Node => (
            "node".to_string(),
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/support/js/verify_standard_webhooks.cjs"
            ),
        ),
    };
    let headers: serde_json::Map<String, serde_json::Value> = request
        .headers
        .iter()
        .filter(|(k, _)| k.starts_with("webhook-"))
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    let input =
        serde_json::json!({"secret": secret, "raw": raw, "headers": headers, "body": request.body});
    let mut cmd = Command::new(&program);
    cmd.arg(script);
    let out = hookfleet_testkit::run_with_stdin(cmd, Some(&input.to_string()));
    let said = &out.stdout;
    assert!(
        said.starts_with("ok") || said.starts_with("refused"),
        "the {library:?} verifier did not run (is the library installed?): {out}"
    );
    said.starts_with("ok")
}

/// The Frappe signature of `body` for `secret`, computed here.
fn frappe(secret: &str, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("key");
    mac.update(body.as_bytes());
    STANDARD.encode(mac.finalize().into_bytes())
}

/// Panics unless `request`'s Frappe header is the signature of its body
/// for `secret`.
fn assert_frappe_signed_by(request: &Received, secret: &str) {
    assert_eq!(
        request.header("x-frappe-webhook-signature"),
        Some(frappe(secret, &request.body).as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_key_a_database_dump_holds_neither_the_secret_nor_a_header_value() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    let added = add_with_key(
        &env,
        Some(KEY_1),
        "api",
        &rx.url("/api"),
        &[
            "--secret",
            SECRET_A,
            "--header",
            "Authorization: Bearer tok-1a2b3c",
            "--header",
            "X-Creds: hunter2",
        ],
    );
    assert_eq!(added.code, Some(0), "{added}");
    assert!(!added.stderr.contains("unencrypted"), "{added}");
    deliver_so_1_with_key(&env, KEY_1).await;

    // Sent as they are...
    let sent = &rx.requests()[0];
    assert_eq!(sent.header("authorization"), Some("Bearer tok-1a2b3c"));
    assert_eq!(sent.header("x-creds"), Some("hunter2"));
    assert!(standard_library_accepts(sent, SECRET_A));
    // ...stored sealed.
    let dump = Command::new("pg_dump")
        .arg(&env.database_url)
        .output()
        .expect("pg_dump");
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let dump = String::from_utf8_lossy(&dump.stdout);
    assert!(dump.contains("webhook_request_logs"), "a real dump");
    for secret in ["tok-1a2b3c", "hunter2", SECRET_A, &SECRET_A[6..]] {
        assert!(!dump.contains(secret), "the dump holds {secret:?}");
    }
    assert!(dump.contains("hfenc:v1:"), "the values are there, sealed");

    // Without a key, the CLI says the values will be stored unencrypted.
    let plain = add_with_key(&env, None, "plain", &rx.url("/p"), &["--secret", SECRET_B]);
    assert!(plain.stderr.contains("unencrypted"), "{plain}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_changed_on_the_webhook_is_sent_by_the_next_retry() {
    let env = TestEnv::new();
    use_key(KEY_1);
    let rx = Receiver::start().await;
    rx.reply_next([Reply::status(500)]);
    let old_token = ["--header", "Authorization: Bearer old-token"];
    add_with_key(&env, Some(KEY_1), "api", &rx.url("/api"), &old_token).ok("add");
    let worker = env.start_worker(2, RetrySchedule::parse("1s").unwrap());
    let id = env.submit("SO-1").await.deliveries[0].id;
    env.until_row(id, |r| {
        r.status == DeliveryStatus::Failed && r.lease_expires_at.is_none()
    })
    .await;
    cli_with_keys(
        &env,
        Some(KEY_1),
        &[],
        &[
            "webhook",
            "update",
            "api",
            "--clear-headers",
            "--header",
            "Authorization: Bearer new-token",
        ],
    )
    .ok("update");
    env.set_due_in(id, -1.0);
    env.sweeper(100, std::time::Duration::from_secs(60))
        .tick()
        .await
        .unwrap();
    env.until_status(id, DeliveryStatus::Delivered).await;
    worker.stop().await;
    let sent = rx.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].header("authorization"), Some("Bearer old-token"));
    assert_eq!(
        sent[1].header("authorization"),
        Some("Bearer new-token"),
        "the retry carries the webhook's token as it is now"
    );
    assert_eq!(
        sent[0].body, sent[1].body,
        "the body is the event's, frozen"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rotates_in_two_phases_as_receivers_verify_it() {
    let env = TestEnv::new();
    use_key(KEY_1);
    let rx = Receiver::start().await;
    let cli = |args: &[&str]| cli_with_keys(&env, Some(KEY_1), &[], args).ok("hookfleet");
    add_sealed(&env, &rx, KEY_1);
    let worker = env.start_worker(2, RetrySchedule::default());
    let send = |name: &'static str| {
        let env = &env;
        let rx = &rx;
        async move {
            let before = rx.count();
            env.submit(name).await;
            rx.wait_for(before + 1, hookfleet_testkit::PATIENCE).await[before].clone()
        }
    };

    // Before: the old secret signs.
    let r = send("SO-1").await;
    assert!(standard_library_accepts(&r, SECRET_A));
    assert!(!standard_library_accepts(&r, SECRET_B));
    assert_frappe_signed_by(&r, SECRET_A);

    // Rotation open: both sign the Standard Webhooks header; the Frappe
    // header, which carries one, keeps the old one receivers know.
    cli(&["webhook", "update", "api", "--secret", SECRET_B]);
    let shown = cli(&["webhook", "show", "api", "--json"]).json();
    assert!(shown["secret_rotation_until"].is_string(), "{shown}");
    let r = send("SO-2").await;
    assert!(
        standard_library_accepts(&r, SECRET_A),
        "old receivers still verify"
    );
    assert!(
        standard_library_accepts(&r, SECRET_B),
        "new receivers already verify"
    );
    assert_frappe_signed_by(&r, SECRET_A);

    // Finished: only the new one.
    cli(&["webhook", "rotate-finish", "api"]);
    let r = send("SO-3").await;
    assert!(standard_library_accepts(&r, SECRET_B));
    assert!(!standard_library_accepts(&r, SECRET_A));
    assert_frappe_signed_by(&r, SECRET_B);
    let again = cli_with_keys(&env, Some(KEY_1), &[], &["webhook", "rotate-finish", "api"]);
    assert_eq!(again.code, Some(1), "no rotation is open: {again}");

    // --no-secret removes every secret; a later one signs alone.
    cli(&["webhook", "update", "api", "--secret", SECRET_A]);
    cli(&["webhook", "update", "api", "--no-secret"]);
    let r = send("SO-4").await;
    assert_eq!(r.header("webhook-signature"), None);
    assert_eq!(r.header("x-frappe-webhook-signature"), None);
    cli(&["webhook", "update", "api", "--secret", SECRET_C]);
    let r = send("SO-5").await;
    assert!(standard_library_accepts(&r, SECRET_C));
    assert!(
        !standard_library_accepts(&r, SECRET_A) && !standard_library_accepts(&r, SECRET_B),
        "no old secret comes back as a co-signer"
    );
    assert_frappe_signed_by(&r, SECRET_C);
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reencrypt_seals_plain_values_then_moves_them_to_a_new_key() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    let sealable = [
        "--secret",
        SECRET_A,
        "--header",
        "Authorization: Bearer tok",
    ];
    add_with_key(&env, None, "api", &rx.url("/api"), &sealable).ok("add without a key");
    let stored = |env: &TestEnv| env.stored_webhooks()[0].clone();
    assert_eq!(
        stored(&env).secret.as_deref(),
        Some(SECRET_A),
        "stored as it is"
    );

    let first =
        cli_with_keys(&env, Some(KEY_1), &[], &["secrets", "reencrypt", "--json"]).ok("reencrypt");
    assert_eq!(first.json()["values"], 2, "{first}");
    let w = stored(&env);
    assert!(w.secret.as_deref().unwrap().starts_with("hfenc:v1:"));
    assert!(!w.headers.to_string().contains("Bearer tok"));

    let second = cli_with_keys(
        &env,
        Some(KEY_2),
        &[KEY_1],
        &["secrets", "reencrypt", "--json"],
    )
    .ok("reencrypt to the new key");
    assert_eq!(second.json()["values"], 2, "{second}");
    let nothing =
        cli_with_keys(&env, Some(KEY_2), &[], &["secrets", "reencrypt", "--json"]).ok("again");
    assert_eq!(
        nothing.json()["values"],
        0,
        "everything is on the current key"
    );

    // Losing the key in a deploy does not decrypt everything by accident.
    let keyless = cli_with_keys(&env, None, &[], &["secrets", "reencrypt"]);
    assert_ne!(keyless.code, Some(0), "{keyless}");
    assert!(keyless.stderr.contains("--decrypt"), "{keyless}");
    assert!(stored(&env)
        .secret
        .as_deref()
        .unwrap()
        .starts_with("hfenc:v1:"));

    // Only the new key is needed now.
    deliver_so_1_with_key(&env, KEY_2).await;
    let r = &rx.requests()[0];
    assert_eq!(r.header("authorization"), Some("Bearer tok"));
    assert!(standard_library_accepts(r, SECRET_A));

    // Asked for in so many words, the values go back to plain text.
    let plain = cli_with_keys(
        &env,
        None,
        &[KEY_2],
        &["secrets", "reencrypt", "--decrypt", "--json"],
    )
    .ok("decrypt");
    assert_eq!(plain.json()["values"], 2, "{plain}");
    assert_eq!(stored(&env).secret.as_deref(), Some(SECRET_A));
}

/// Adds webhook `api` to `rx`, its secret sealed with `key` (by the CLI).
fn add_sealed(env: &TestEnv, rx: &Receiver, key: &str) {
    add_with_key(
        env,
        Some(key),
        "api",
        &rx.url("/api"),
        &["--secret", SECRET_A],
    )
    .ok("add");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_whose_credentials_this_worker_cannot_open_is_withheld_without_spending_an_attempt() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    add_sealed(&env, &rx, KEY_1);
    use_key(KEY_2);
    let worker = env.start_worker(2, RetrySchedule::default());
    let id = env.submit("SO-1").await.deliveries[0].id;
    let row = env
        .until_row(id, |r| r.error.is_some() && r.lease_expires_at.is_none())
        .await;
    let snapshot = worker.stop().await;
    assert_eq!(row.status, DeliveryStatus::Queued, "{row:?}");
    assert_eq!(
        row.attempts, 0,
        "no attempt spent on a missing key: {row:?}"
    );
    assert!(
        row.error
            .as_deref()
            .unwrap_or("")
            .contains("not configured"),
        "{row:?}"
    );
    let due_in = (row.next_retry.expect("due again") - chrono::Utc::now()).num_seconds();
    assert!(
        (0..=60).contains(&due_in),
        "due again within a minute: {due_in}s"
    );
    assert_eq!(snapshot.withheld, 1, "{snapshot:?}");
    assert!(env.attempts(id).is_empty(), "no attempt recorded");
    assert_eq!(rx.count(), 0, "never sent unsigned");

    // A worker that has the key sends it once it is due again.
    use_key(KEY_1);
    env.make_all_due();
    let worker = env.start_worker(2, RetrySchedule::default());
    env.sweeper(100, std::time::Duration::from_secs(60))
        .tick()
        .await
        .expect("tick");
    let row = env.until_status(id, DeliveryStatus::Delivered).await;
    worker.stop().await;
    assert_eq!(row.attempts, 1, "{row:?}");
    assert_eq!(rx.count(), 1);
}

#[test]
fn a_worker_lacking_a_key_stored_values_are_sealed_with_refuses_to_start() {
    let env = TestEnv::new();
    let sealed_token = ["--header", "Authorization: Bearer sealed-token"];
    add_with_key(
        &env,
        Some(KEY_1),
        "api",
        "https://example.com/api",
        &sealed_token,
    )
    .ok("add");
    for key in [None, Some(KEY_2)] {
        let mut cmd = env.command("hookfleet-worker");
        if let Some(k) = key {
            cmd.env("HOOKFLEET_SECRET_KEY", k);
        }
        let out = hookfleet_testkit::run_within(
            cmd,
            std::time::Duration::from_secs(60),
            "a worker without the key",
        );
        assert_eq!(out.code, Some(2), "{key:?}: {out}");
        assert!(
            out.stderr.contains("which this process does not have"),
            "{key:?}: {out}"
        );
    }
    // With the key as an old one, it starts, and is ready.
    let listen = format!("127.0.0.1:{}", hookfleet_testkit::free_port());
    let mut cmd = env.command("hookfleet-worker");
    cmd.env("HOOKFLEET_SECRET_KEY", KEY_2)
        .env("HOOKFLEET_SECRET_KEY_OLD", KEY_1)
        .args(["--metrics-listen", &listen]);
    let mut worker = hookfleet_testkit::FleetProcess::spawn(cmd);
    hookfleet_testkit::until_blocking(
        std::time::Duration::from_secs(60),
        "the worker with the old key is ready",
        || {
            assert!(worker.running(), "the worker exited");
            hookfleet_testkit::curl(&[&format!("http://{listen}/readyz")]).0 == 200
        },
    );
    // A reencrypt to a key this worker lacks takes it out of readiness,
    // with the reason.
    const KEY_3: &str = "a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s=";
    cli_with_keys(&env, Some(KEY_3), &[KEY_1], &["secrets", "reencrypt"]).ok("reencrypt");
    let mut answer = (0, String::new());
    hookfleet_testkit::until_blocking(
        std::time::Duration::from_secs(60),
        "readyz says the worker lacks the new key",
        || {
            answer = hookfleet_testkit::curl(&[&format!("http://{listen}/readyz")]);
            answer.0 == 503
        },
    );
    assert!(answer.1.contains("does not have"), "{answer:?}");
    worker.stop();
}

/// `hookfleet secrets generate [--sealing-key]` with no database in its
/// environment: the one line it prints, checked to be base64 of 32 bytes
/// after `prefix`.
fn generated(env: &TestEnv, extra: &[&str], prefix: &str) -> String {
    let mut cmd = env.command("hookfleet");
    cmd.env_remove("DATABASE_URL").env_remove("REDIS_URL");
    let run = Run::from(
        cmd.args(["secrets", "generate"])
            .args(extra)
            .output()
            .expect("run hookfleet"),
    );
    assert_eq!(run.code, Some(0), "{run}");
    assert_eq!(run.stderr, "", "{run}");
    let line = run.stdout.trim_end_matches('\n');
    assert!(!line.contains('\n'), "one line: {run}");
    let encoded = line
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("starts with {prefix:?}: {line}"));
    let bytes = STANDARD.decode(encoded).expect("base64");
    assert_eq!(bytes.len(), 32, "{line}");
    line.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_secret_signs_deliveries_the_official_library_accepts_and_a_generated_key_seals(
) {
    let env = TestEnv::new();
    let secret = generated(&env, &[], "whsec_");
    assert_ne!(secret, generated(&env, &[], "whsec_"), "each one new");
    let key = generated(&env, &["--sealing-key"], "");
    assert_ne!(key, generated(&env, &["--sealing-key"], ""));

    let rx = Receiver::start().await;
    let added = add_with_key(
        &env,
        Some(&key),
        "api",
        &rx.url("/api"),
        &["--secret", &secret],
    );
    assert_eq!(added.code, Some(0), "{added}");
    deliver_so_1_with_key(&env, &key).await;
    let sent = &rx.requests()[0];
    for library in [Library::Python, Library::Node] {
        assert!(
            library_accepts(library, sent, &secret, false),
            "{library:?} takes the generated secret as it is"
        );
        let other = generated(&env, &[], "whsec_");
        assert!(!library_accepts(library, sent, &other, false));
    }
    // Sealed with the generated key: the dump does not hold the secret.
    let dump = Command::new("pg_dump")
        .arg(&env.database_url)
        .output()
        .expect("pg_dump");
    assert!(dump.status.success());
    assert!(!String::from_utf8_lossy(&dump.stdout).contains(&secret));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_secret_verifies_when_the_libraries_are_given_its_bytes_as_receivers_md_says() {
    let env = TestEnv::new();
    let secret = "a-plain-secret-not-whsec";
    let rx = Receiver::start().await;
    let added = add_with_key(
        &env,
        Some(KEY_1),
        "plain",
        &rx.url("/p"),
        &["--secret", secret],
    );
    assert_eq!(added.code, Some(0), "{added}");
    deliver_so_1_with_key(&env, KEY_1).await;
    let sent = &rx.requests()[0];
    for library in [Library::Python, Library::Node] {
        assert!(
            library_accepts(library, sent, secret, true),
            "{library:?} with the secret's bytes"
        );
        // Or as whsec_ and the base64 of its bytes, which every library
        // reads the same way (docs/RECEIVERS.md's advice).
        let wrapped = format!("whsec_{}", STANDARD.encode(secret));
        assert!(
            library_accepts(library, sent, &wrapped, false),
            "{library:?} with whsec_ and the secret's base64"
        );
        // Given as a string, the library takes it for base64 and refuses
        // the request: the trap docs/RECEIVERS.md warns of.
        assert!(
            !library_accepts(library, sent, secret, false),
            "{library:?} with the secret as a string"
        );
    }
}
