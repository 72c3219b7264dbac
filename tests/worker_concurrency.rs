//! The README's bounds on a worker's concurrency, 1 … 10,000, on
//! `hookfleet-worker` run as a real process: outside them a usage error
//! (by flag or environment), at them a worker that delivers.

use std::time::Duration;

use serde_json::json;

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_producer::Event;
use hookfleet_testkit::{blocking, run_within, spec, FleetProcess, Receiver, TestEnv, ENTITY};

/// How long a worker refusing its flags may take to exit.
const WAIT: Duration = Duration::from_secs(20);

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
        let mut worker = FleetProcess::spawn(cmd);
        env.until_row(report.deliveries[0].id, |r| {
            r.status == DeliveryStatus::Delivered
        })
        .await;
        let status = blocking(|| worker.stop());
        assert!(status.success(), "--concurrency {value}: exit {status:?}");
    }
    assert_eq!(rx.count(), 2);
}
