//! Usage errors of `hookfleet` and `hookfleet-producer`, run as real
//! processes: an unknown command or flag, a malformed or missing argument, a
//! missing required setting all exit 2 with a message, and write nothing.

use serde_json::json;

use hookfleet_testkit::{Run, TestEnv};

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
    assert_eq!(env.listed_webhooks(), json!([]));
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
        let out = env.cli(&args);
        if out.code != Some(2) || !out.stderr.contains(flag) {
            wrong.push(format!("without {flag}: {out}"));
        }
    }
    assert_eq!(env.listed_webhooks(), json!([]), "nothing is written");
    assert!(
        wrong.is_empty(),
        "a missing required flag must exit 2 and name the flag:\n{}",
        wrong.join("\n---\n")
    );
}

#[test]
fn a_database_that_refuses_or_does_not_exist_fails_a_command_at_once_with_its_reason() {
    let env = TestEnv::new();
    let missing = {
        let mut url = url_without_db(&env);
        url.push_str("hf_no_such_database");
        url
    };
    let cases: [(&str, &str); 3] = [
        (&missing, "does not exist"),
        // Never quoted back: libpq echoes a connection string it cannot
        // read, password and all.
        ("mysql://root:sekrit-pw@127.0.0.1/x", "postgres://"),
        ("postgres://u:sekrit-pw@127.0.0.1:1/x", "refused"),
    ];
    for (url, reason) in cases {
        let out = Run::from(
            env.command("hookfleet")
                .args(["stats"])
                .env("DATABASE_URL", url)
                .output()
                .expect("run hookfleet"),
        );
        assert_eq!(out.code, Some(1), "{out}");
        assert!(out.stderr.contains(reason), "{reason}: {out}");
        assert!(
            !out.stderr.contains("sekrit"),
            "a password in the error: {out}"
        );
        // The server's answer at once, not the pool's wait for a
        // connection ("timed out").
        assert!(!out.stderr.contains("timed out"), "{out}");
    }
}

/// The test database's URL without its database name (`…/`).
fn url_without_db(env: &TestEnv) -> String {
    let url = env
        .envs()
        .into_iter()
        .find(|(k, _)| k == "DATABASE_URL")
        .map(|(_, v)| v)
        .expect("DATABASE_URL");
    let cut = url.rfind('/').expect("a path");
    url[..=cut].to_string()
}

#[test]
fn a_listing_piped_into_head_ends_quietly_without_a_panic() {
    let env = TestEnv::new();
    // Enough output to fill a pipe that `head` has stopped reading.
    for i in 0..300 {
        env.add_webhook_unvalidated(&hookfleet_testkit::spec(
            &format!("hook-{i:03}"),
            hookfleet_testkit::ENTITY,
            "on_submit",
            "https://example.com/a-rather-long-path/to/make/the/listing/longer",
        ));
    }
    let hookfleet = hookfleet_testkit::bin_path("hookfleet");
    let mut cmd = std::process::Command::new("bash");
    cmd.arg("-c").arg(format!(
        "'{}' webhook list --json | head -c 10 >/dev/null; echo \"status ${{PIPESTATUS[0]}}\"",
        hookfleet.display()
    ));
    for (k, v) in env.envs() {
        cmd.env(k, v);
    }
    let out = Run::from(cmd.output().expect("run bash"));
    assert!(!out.stderr.contains("panicked"), "{out}");
    assert!(!out.stderr.contains("Broken pipe"), "{out}");
    assert!(
        out.stdout.contains("status 0") || out.stdout.contains("status 141"),
        "ended by the closed pipe, not by a panic (101): {out}"
    );
}
