//! A property of the worker's recorder, against a real Postgres and Redis:
//! whatever a batch of outcomes carries (any bytes a receiver answered, NULs
//! in error messages, a retry delay no timestamp can hold, a body the
//! database refuses), every outcome is written exactly once and every job is
//! acked only after its outcome is in.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use proptest::prelude::*;
use tokio::sync::{mpsc, Semaphore};

use hookfleet_core::attempt::{Outcome, OutcomeStatus, LEASE_MARGIN};
use hookfleet_core::domain::DeliveryStatus;
use hookfleet_core::runtime::Shutdown;
use hookfleet_core::store::deliveries::{self, Verdict};
use hookfleet_testkit::{sales_orders, spec, wait, TestEnv};
use hookfleet_worker::record::{Finished, Recorder};
use hookfleet_worker::stats::Counters;
use hookfleet_worker::unit::{Held, TakenJob};

/// Bytes the test database refuses in a response body (a CHECK constraint
/// added for this test): what a truly unwritable outcome looks like.
const POISON: [u8; 4] = [0xde, 0xad, 0xbe, 0xef];

/// One generated outcome: what the receiver said and how it was judged.
#[derive(Debug, Clone)]
struct Case {
    status: DeliveryStatus,
    /// With [`POISON`] appended when `poisoned`.
    body: Option<Vec<u8>>,
    error: Option<String>,
    /// Seconds to the next attempt (Failed only); some beyond any timestamp.
    retry_secs: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![
            Just(DeliveryStatus::Delivered),
            Just(DeliveryStatus::Failed),
            Just(DeliveryStatus::Exhausted)
        ],
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..6000)),
        proptest::option::of(proptest::collection::vec(any::<char>(), 0..80)),
        prop_oneof![1u64..100_000, Just(u64::MAX / 4)],
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(status, body, error, retry_secs, poisoned)| Case {
            status,
            body: match body {
                Some(b) if poisoned => Some([b.as_slice(), &POISON].concat()),
                other => other,
            },
            error: error.map(|cs| cs.into_iter().collect()),
            retry_secs,
        })
}

/// One database, Redis prefix and runtime for every case (a database per
/// case would spend the test's time creating databases).
struct Shared {
    env: TestEnv,
    rt: tokio::runtime::Runtime,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let env = rt.block_on(async {
            let env = TestEnv::new();
            env.add_webhook(&spec(
                "w",
                "Sales Order",
                "on_submit",
                "http://127.0.0.1:9/x",
            ));
            env.store
                .run_sync(|c| {
                    use diesel::RunQueryDsl;
                    diesel::sql_query(
                        "ALTER TABLE webhook_request_logs ADD CONSTRAINT test_no_poison
                         CHECK (response_body IS NULL
                                OR position('\\xdeadbeef'::bytea IN response_body) = 0)",
                    )
                    .execute(c)?;
                    Ok(())
                })
                .expect("add constraint");
            env
        });
        Shared { env, rt }
    })
}

async fn run_case(env: &TestEnv, cases: Vec<Case>) {
    // Rows and their jobs, taken into a processing list as a worker would.
    let report = env
        .producer()
        .emit_batch(sales_orders(cases.len()))
        .await
        .expect("emit");
    let ids: Vec<i64> = report.deliveries.iter().map(|d| d.id).collect();
    let processing = env.queue.keys().processing("default", "prop-worker");
    let mut raws = Vec::new();
    while raws.len() < ids.len() {
        let taken = env
            .queue
            .jobs()
            .take("default", &processing, ids.len())
            .await
            .expect("take");
        assert!(!taken.is_empty(), "every row has its job");
        raws.extend(taken);
    }
    let claims: Vec<_> = env
        .store
        .run_sync(|c| deliveries::claim(c, &ids, LEASE_MARGIN))
        .expect("claim")
        .into_iter()
        .filter_map(|verdict| match verdict {
            Verdict::Send(claim) => Some(claim),
            _ => None,
        })
        .collect();
    assert_eq!(claims.len(), ids.len());

    let held = Arc::new(Held::default());
    let slots = Arc::new(Semaphore::new(raws.len()));
    let counters = Arc::new(Counters::default());
    let health = Arc::new(hookfleet_worker::health::HealthBuffer::default());
    let recorder = Arc::new(Recorder {
        store: env.store.clone(),
        queue: env.queue.clone(),
        worker_id: "prop-worker".into(),
        counters: counters.clone(),
        shutdown: Shutdown::new(),
        health: health.clone(),
    });
    let (tx, rx) = mpsc::unbounded_channel();
    let mut expected = Vec::new();
    for ((raw, claim), case) in raws.into_iter().zip(&claims).zip(&cases) {
        let unit = TakenJob::new(
            "default",
            &processing,
            raw,
            slots.clone().try_acquire_owned().expect("slot"),
            &held,
        );
        let unit = unit.parse().expect("a job the producer wrote");
        let outcome = Outcome {
            log_id: claim.log_id,
            attempt: claim.attempt,
            token: claim.token,
            status: match case.status {
                DeliveryStatus::Delivered => OutcomeStatus::Delivered,
                DeliveryStatus::Failed => OutcomeStatus::Failed,
                _ => OutcomeStatus::Exhausted,
            },
            retry_in: (case.status == DeliveryStatus::Failed)
                .then(|| Duration::from_secs(case.retry_secs)),
            response_code: Some(200),
            response_body: case.body.clone(),
            error: case.error.clone(),
            started_at: chrono::Utc::now(),
            duration_ms: 1,
        };
        expected.push((claim.log_id, case.clone()));
        tx.send(Finished {
            outcome,
            unit,
            webhook: "props".into(),
            webhook_id: claim.webhook_id,
        })
        .expect("recorder listening");
    }
    drop(tx);
    recorder.run(rx).await;
    // Whatever the receiver said, its attempts count in the health.
    health
        .write(&env.store, Some(Duration::from_secs(3600)))
        .await
        .expect("health written");
    // Every job acked (only after its outcome is written), every slot back.
    wait::until("every job is acked", || env.llen(&processing) == 0).await;
    wait::until("every delivery slot is freed", || {
        slots.available_permits() == ids.len()
    })
    .await;
    assert_eq!(held.total(), 0);

    for (id, case) in expected {
        let row = env.row(id);
        assert_eq!(row.status, case.status, "row {id}: {case:?}");
        assert!(
            row.lease_expires_at.is_none(),
            "row {id} is no longer leased"
        );
        assert_eq!(env.attempts(id).len(), 1, "row {id}: one attempt written");
        let poisoned = case
            .body
            .as_deref()
            .is_some_and(|b| b.windows(4).any(|w| w == POISON));
        let plain = row.response_body.is_none() && case.body.is_some();
        assert_eq!(plain, poisoned, "row {id}: written plainly only if refused");
        if !plain {
            assert_eq!(row.response_body, case.body, "row {id}: the bytes as sent");
        } else {
            assert!(
                row.error
                    .as_deref()
                    .unwrap_or("")
                    .contains("could not be stored"),
                "row {id} was written plainly and says so: {row:?}"
            );
        }
    }
    let counts = counters.snapshot();
    assert_eq!(
        counts.delivered + counts.failed + counts.exhausted,
        ids.len() as u64,
        "{counts:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_outcome_of_a_batch_is_written_exactly_once(cases in proptest::collection::vec(case(), 1..40)) {
        let s = shared();
        s.rt.block_on(run_case(&s.env, cases));
    }
}
