//! Redis over TLS (`rediss://`): a redis-server of the test's own that speaks
//! only TLS, with a certificate signed by a private CA. Without the CA the
//! fleet refuses the server and says why; with it (`SSL_CERT_FILE`, README
//! "Redis over TLS") events go producer → Redis → worker → receiver.

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_core::domain::RetrySchedule;
use hookfleet_testkit::{spec, LocalRedis, Receiver, TestEnv};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_redis_signed_by_a_private_ca_is_refused_until_the_ca_is_trusted() {
    let redis = LocalRedis::start_tls();
    let ca = redis.ca_file();
    // This process (the test's producer and worker) trusts the CA the way
    // an operator's would: OpenSSL reads SSL_CERT_FILE when it starts. Each
    // test runs in a process of its own (nextest), before any TLS.
    std::env::set_var("SSL_CERT_FILE", &ca);
    let env = TestEnv::on_redis(&redis.url());

    // A CLI that does not trust the CA says so, and prints no URL.
    let empty = tempdir_of("no-ca");
    let refused = env
        .command("hookfleet")
        .args(["dead", "list", "--json"])
        .env("SSL_CERT_FILE", empty.join("none.pem"))
        .env("SSL_CERT_DIR", &empty)
        .output()
        .expect("run hookfleet");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.to_lowercase().contains("certificate"),
        "the refusal names the certificate: {stderr}"
    );
    assert!(!stderr.contains("rediss://"), "{stderr}");

    let trusted = env
        .command("hookfleet")
        .args(["dead", "list", "--json"])
        .env("SSL_CERT_FILE", &ca)
        .output()
        .expect("run hookfleet");
    assert_eq!(
        trusted.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );

    let rx = Receiver::start().await;
    env.add_webhook(&spec(
        "orders",
        "Sales Order",
        "on_submit",
        &rx.url("/hook"),
    ));
    let worker = env.start_worker(2, RetrySchedule::default());
    let report = env.submit("SO-TLS").await;
    let id = report.deliveries[0].id;
    let row = env
        .until_row(id, |r| r.status == DeliveryStatus::Delivered)
        .await;
    assert_eq!(row.attempts, 1);
    assert_eq!(rx.requests().len(), 1);
    // The in-flight key went through the TLS server and was released.
    assert!(
        env.keys().iter().all(|k| !k.contains("webhook_retry")),
        "{:?}",
        env.keys()
    );
    worker.stop().await;
}

fn tempdir_of(kind: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("hookfleet-{kind}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
