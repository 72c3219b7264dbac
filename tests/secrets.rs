//! A signing secret is write-only: it signs the requests but is never
//! printed by any command, logged by the worker, or stored on a delivery;
//! credential-like header values are shown as `[hidden]`, though the stored
//! request keeps them.

use serde_json::json;

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_testkit::{blocking, delivery_ids, FleetProcess, Receiver, TestEnv, ENTITY, NOWHERE};

/// The signing secret the tests look for in every output.
const SECRET: &str = "S3CR3T-VALUE-123";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_is_never_printed_logged_or_stored_on_a_delivery() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    rx.verify_with(&[SECRET]);
    let url = rx.url("/signed");
    blocking(|| {
        env.webhook_add("signed", ENTITY, "on_submit", &url, &["--secret", SECRET])
            .ok("webhook add")
    });
    let report = blocking(|| env.emit_by_cli("on_submit", "SO-1", &json!({"name": "SO-1"})))
        .ok("emit")
        .json();
    let id = delivery_ids(&report)[0];

    let mut worker = env.command("hookfleet-worker");
    worker.args(["--concurrency", "2"]).env("RUST_LOG", "debug");
    let mut worker = blocking(|| FleetProcess::spawn_logged(worker));
    let row = env
        .until_row(id, |r| r.status == DeliveryStatus::Delivered)
        .await;
    let status = blocking(|| worker.stop());
    let log = blocking(|| worker.log());
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
    got[0].assert_signatures_verified("signatures");
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
        let out = blocking(|| env.cli(args)).ok(&format!("{args:?}"));
        assert!(
            !out.all().contains(SECRET),
            "hookfleet {args:?} printed the secret:\n{out}"
        );
    }
    let shown = blocking(|| env.cli(&["webhook", "show", "signed", "--json"])).json();
    assert_eq!(shown["signed"], true);
}

#[test]
fn every_header_value_is_hidden_unless_asked_for_and_none_is_frozen_on_a_delivery() {
    let env = TestEnv::new();
    env.webhook_add(
        "api",
        ENTITY,
        "on_submit",
        &format!("{NOWHERE}/api"),
        &[
            "--header",
            "Authorization: Bearer tok-999",
            "--header",
            "X-Creds: hunter2",
            "--header",
            "X-Tenant: acme",
        ],
    )
    .ok("webhook add");
    let report = env
        .emit_by_cli("on_submit", "SO-1", &json!({"name": "SO-1"}))
        .ok("emit")
        .json();
    let id = delivery_ids(&report)[0].to_string();

    let commands: &[&[&str]] = &[
        &["webhook", "show", "api"],
        &["webhook", "show", "api", "--json"],
        &["webhook", "list", "--json"],
        &["delivery", "show", &id],
        &["delivery", "show", &id, "--json"],
        &["delivery", "list", "--json"],
    ];
    for args in commands {
        let out = env.cli(args).ok(&format!("{args:?}"));
        for value in ["tok-999", "hunter2", "acme"] {
            assert!(
                !out.all().contains(value),
                "hookfleet {args:?} printed a header value ({value}), whatever its name:\n{out}"
            );
        }
    }
    let shown = env.cli(&["webhook", "show", "api", "--json"]).json();
    assert_eq!(
        shown["headers"],
        json!([
            {"key": "Authorization", "value": "[hidden]"},
            {"key": "X-Creds", "value": "[hidden]"},
            {"key": "X-Tenant", "value": "[hidden]"},
        ]),
        "{shown}"
    );
    let revealed = env
        .cli(&["webhook", "show", "api", "--show-header-values"])
        .ok("show with values");
    assert!(revealed.stdout.contains("hunter2"), "{revealed}");
    // Nothing but the body's type is frozen on the delivery row: the static
    // headers are read from the webhook when the request is sent.
    let stored = env
        .row(id.parse().expect("id"))
        .header_list()
        .expect("headers");
    assert_eq!(
        stored.iter().map(|h| h.key.as_str()).collect::<Vec<_>>(),
        vec!["Content-Type"],
        "{stored:?}"
    );
}
