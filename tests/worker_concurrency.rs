//! The README's bounds on a worker's concurrency, 1 … 10,000, on
//! `hookfleet-worker` run as a real process: outside them a usage error
//! (by flag or environment), at them a worker that delivers; and what a slot
//! covers: a job frees it when its answer is in, and answered jobs waiting
//! for their outcomes are capped at as many again.

use std::time::Duration;

use serde_json::json;

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_producer::Event;
use hookfleet_testkit::{
    blocking, run_within, spec, FleetProcess, Receiver, Scenario, TestEnv, ENTITY, PATIENCE,
};

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

/// A row locked by another transaction: the worker's outcome write for it
/// waits until the lock is dropped (the connection closes).
struct RowLock {
    /// Dropped, it ends the locking transaction.
    _release: std::sync::mpsc::Sender<()>,
}

impl RowLock {
    fn take(database_url: &str, id: i64) -> RowLock {
        use diesel::{Connection, PgConnection, RunQueryDsl};
        let (locked_tx, locked_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let url = database_url.to_string();
        std::thread::spawn(move || {
            let mut conn = PgConnection::establish(&url).expect("connect");
            conn.transaction::<_, diesel::result::Error, _>(|c| {
                diesel::sql_query(format!(
                    "SELECT id FROM webhook_request_logs WHERE id = {id} FOR UPDATE"
                ))
                .execute(c)?;
                locked_tx.send(()).expect("locked");
                let _ = release_rx.recv();
                Ok(())
            })
            .expect("lock");
        });
        locked_rx.recv().expect("the row is locked");
        RowLock {
            _release: release_tx,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answered_job_frees_its_slot_while_its_outcome_waits_and_the_waiting_are_capped() {
    let (env, rx, worker) = Scenario::webhook("orders", "/orders")
        .concurrency(1)
        .start()
        .await;
    rx.hold();
    let first = env.submit("SO-1").await.deliveries[0].id;
    rx.wait_for(1, PATIENCE).await;
    // The first request is in flight; its outcome will wait on this lock.
    let lock = blocking({
        let url = env.database_url.clone();
        move || RowLock::take(&url, first)
    });
    for name in ["SO-2", "SO-3"] {
        env.submit(name).await;
    }
    rx.release();
    // With one slot, the second request is sent while the first outcome
    // cannot be written: the slot was freed when the first answer came.
    rx.wait_for(2, PATIENCE).await;
    assert_eq!(
        env.row(first).status,
        DeliveryStatus::Queued,
        "not written yet"
    );
    // One place for waiting outcomes, taken by the first: the second keeps
    // the slot, so the third is not sent while the first cannot be written.
    // (A look after a while: a busy machine can only make it pass later.)
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rx.count(), 2, "a third request while two outcomes wait");
    drop(lock);
    let rows = env
        .until_rows("all three delivered", |rows| {
            rows.len() == 3 && rows.iter().all(|r| r.status == DeliveryStatus::Delivered)
        })
        .await;
    assert_eq!(rows.len(), 3);
    assert_eq!(rx.count(), 3, "each sent once");
    worker.stop().await;
}
