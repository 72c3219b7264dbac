//! The delivery store's decisions against a real Postgres: claim, outcome,
//! exhaust and replay are each one conditional statement, judged by the
//! database's clock, and a fencing token keeps a late writer (an attempt
//! whose lease ran out) from undoing a later claim or a replay.

use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::BigInt;

use hookfleet_core::attempt::{Claim, Outcome, OutcomeStatus, LEASE_MARGIN};
use hookfleet_core::domain::{DeliveryStatus, NewDelivery, WebhookRow};
use hookfleet_core::error::{Refusal, StoreError};
use hookfleet_core::store::deliveries::{self, ListFilter, Verdict, WebhookRows};
use hookfleet_core::store::webhooks;
use hookfleet_testkit::{spec, TestEnv, NOWHERE};

/// The claim's verdict on the row `id`.
fn claim(env: &TestEnv, id: i64) -> Verdict {
    let mut verdicts = env
        .store
        .run_sync(|c| deliveries::claim(c, &[id], LEASE_MARGIN))
        .expect("claim");
    assert_eq!(verdicts.len(), 1, "one verdict per row: {verdicts:?}");
    verdicts.remove(0)
}

fn claimed(env: &TestEnv, id: i64) -> Claim {
    match claim(env, id) {
        Verdict::Send(claim) => claim,
        other => panic!("row {id} was not claimed: {other:?}"),
    }
}

fn outcome(claim: &Claim, status: DeliveryStatus) -> Outcome {
    let outcome_status = match status {
        DeliveryStatus::Delivered => OutcomeStatus::Delivered,
        DeliveryStatus::Failed => OutcomeStatus::Failed,
        DeliveryStatus::Exhausted | DeliveryStatus::Queued => OutcomeStatus::Exhausted,
    };
    Outcome {
        log_id: claim.log_id,
        attempt: claim.attempt,
        token: claim.token,
        status: outcome_status,
        retry_in: (status == DeliveryStatus::Failed).then(|| Duration::from_secs(60)),
        response_code: Some(if status == DeliveryStatus::Delivered {
            200
        } else {
            500
        }),
        response_body: Some(b"ok".to_vec()),
        error: (status != DeliveryStatus::Delivered).then(|| "HTTP 500".to_string()),
        started_at: chrono::Utc::now(),
        duration_ms: 3,
    }
}

fn record(env: &TestEnv, outcome: &Outcome) -> Result<Vec<i64>, StoreError> {
    env.store
        .run_sync(|c| deliveries::record(c, std::slice::from_ref(outcome), "test-worker"))
}

/// Sets the row's lease to `secs` from the database's now (negative: ended).
fn set_lease(env: &TestEnv, id: i64, secs: i64) {
    env.store
        .run_sync(|c| {
            diesel::sql_query(
                "UPDATE webhook_request_logs
                 SET lease_expires_at = now() + make_interval(secs => $2) WHERE id = $1",
            )
            .bind::<BigInt, _>(id)
            .bind::<diesel::sql_types::Double, _>(secs as f64)
            .execute(c)?;
            Ok(())
        })
        .expect("set lease");
}

fn attempt_rows(env: &TestEnv, id: i64) -> usize {
    env.attempts(id).len()
}

/// One webhook and one emitted event; returns the row's id.
async fn one_row(env: &TestEnv) -> i64 {
    env.add_webhook(&spec("orders", "Sales Order", "on_submit", NOWHERE));
    env.submit("SO-1").await.deliveries[0].id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_counts_the_attempt_leases_the_row_and_moves_its_token() {
    let env = TestEnv::new();
    let id = one_row(&env).await;
    let before = env.row(id);
    assert_eq!((before.attempts, before.claim_token), (0, 0));

    let c = claimed(&env, id);
    assert_eq!((c.attempt, c.token), (1, 1));
    let row = env.row(id);
    assert_eq!((row.attempts, row.claim_token), (1, 1));
    assert_eq!(
        row.status,
        DeliveryStatus::Queued,
        "a claim changes no status"
    );
    assert!(row.lease_expires_at.is_some_and(|t| t > chrono::Utc::now()));

    let again = claim(&env, id);
    assert!(
        matches!(again, Verdict::Leased(_)),
        "a leased row is not claimed twice: {again:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_judged_by_the_database_clock() {
    let env = TestEnv::new();
    let id = one_row(&env).await;
    claimed(&env, id);
    set_lease(&env, id, 3600);
    assert!(
        !matches!(claim(&env, id), Verdict::Send(_)),
        "an hour left: still held"
    );
    assert!(matches!(
        env.store.run_sync(|c| deliveries::replay(c, id, true)),
        Err(StoreError::Refused(Refusal::InFlight(i))) if i == id
    ));
    set_lease(&env, id, -1);
    let second = claimed(&env, id);
    assert_eq!(
        (second.attempt, second.token),
        (2, 2),
        "ended a second ago: claimable"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_is_written_once_under_its_claims_token() {
    let env = TestEnv::new();
    let id = one_row(&env).await;
    let c = claimed(&env, id);
    let delivered = outcome(&c, DeliveryStatus::Delivered);
    assert_eq!(record(&env, &delivered).unwrap(), vec![id]);
    assert_eq!(
        record(&env, &delivered).unwrap(),
        Vec::<i64>::new(),
        "written twice: the second is fenced"
    );
    let row = env.row(id);
    assert_eq!(row.status, DeliveryStatus::Delivered);
    assert!(row.lease_expires_at.is_none() && row.next_retry.is_none());
    assert_eq!(attempt_rows(&env, id), 1, "one attempt row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_outcome_of_an_earlier_claim_is_fenced_by_the_next_claim() {
    let env = TestEnv::new();
    let id = one_row(&env).await;
    let first = claimed(&env, id);
    set_lease(&env, id, -1); // its worker stalled past the lease
    let second = claimed(&env, id);
    assert_eq!(
        record(&env, &outcome(&first, DeliveryStatus::Exhausted)).unwrap(),
        Vec::<i64>::new()
    );
    assert_eq!(
        record(&env, &outcome(&second, DeliveryStatus::Delivered)).unwrap(),
        vec![id]
    );
    assert_eq!(env.row(id).status, DeliveryStatus::Delivered);
    assert_eq!(attempt_rows(&env, id), 2, "both attempts are kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_outcome_after_a_replay_is_fenced_and_the_replay_stands() {
    let env = TestEnv::new();
    let id = one_row(&env).await;
    let first = claimed(&env, id);
    record(&env, &outcome(&first, DeliveryStatus::Failed)).unwrap();
    env.set_due_in(id, -1.0);
    let second = claimed(&env, id);
    // Attempt 2's worker stalls past its lease; the operator replays.
    set_lease(&env, id, -1);
    let replayed = env
        .store
        .run_sync(|c| deliveries::replay(c, id, false))
        .expect("replay");
    assert_eq!(replayed.previous_status, DeliveryStatus::Failed);
    let after_replay = env.row(id);
    assert_eq!(after_replay.claim_token, 3, "the replay moved the token on");

    // The stalled attempt's outcome arrives: Exhausted would undo the replay.
    assert_eq!(
        record(&env, &outcome(&second, DeliveryStatus::Exhausted)).unwrap(),
        Vec::<i64>::new(),
        "fenced"
    );
    let row = env.row(id);
    assert_eq!(row.status, DeliveryStatus::Failed, "still due, as replayed");
    assert!(row.next_retry.is_some_and(|t| t <= chrono::Utc::now()));
    assert!(row.max_attempts > row.attempts, "one more attempt allowed");

    let third = claimed(&env, id);
    assert_eq!((third.attempt, third.token), (3, 4));
    assert_eq!(
        record(&env, &outcome(&third, DeliveryStatus::Delivered)).unwrap(),
        vec![id]
    );
    assert_eq!(env.row(id).status, DeliveryStatus::Delivered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_refuses_queued_in_flight_and_delivered_rows_and_says_why() {
    let env = TestEnv::new();
    let id = one_row(&env).await;
    let replay = |force| env.store.run_sync(|c| deliveries::replay(c, id, force));
    assert!(matches!(
        replay(false),
        Err(StoreError::Refused(Refusal::NotYetAttempted(_)))
    ));
    let c = claimed(&env, id);
    assert!(matches!(
        replay(false),
        Err(StoreError::Refused(Refusal::InFlight(_)))
    ));
    record(&env, &outcome(&c, DeliveryStatus::Delivered)).unwrap();
    let refused = replay(false).unwrap_err();
    assert!(refused.to_string().contains("--force"), "{refused}");
    let forced = replay(true).expect("forced");
    assert_eq!(forced.previous_status, DeliveryStatus::Delivered);
    assert_eq!(env.row(id).status, DeliveryStatus::Failed);
    assert!(matches!(
        env.store
            .run_sync(|c| deliveries::replay(c, 999_999, false)),
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_webhooks_due_row_is_exhausted_without_a_claim() {
    let env = TestEnv::new();
    let id = one_row(&env).await;
    env.set_enabled("orders", false);
    let verdict = claim(&env, id);
    assert!(
        matches!(&verdict, Verdict::Exhausted(reason) if reason.contains("disabled")),
        "{verdict:?}"
    );
    let row = env.row(id);
    assert_eq!(row.status, DeliveryStatus::Exhausted);
    assert_eq!(row.attempts, 0, "no attempt was made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_webhooks_rows_are_listed_and_replayed_by_its_new_name() {
    let env = TestEnv::new();
    env.add_webhook(&spec("orders", "Sales Order", "on_submit", NOWHERE));
    let ids: Vec<i64> = vec![
        env.submit("SO-1").await.deliveries[0].id,
        env.submit("SO-2").await.deliveries[0].id,
    ];
    for id in &ids {
        let c = claimed(&env, *id);
        record(&env, &outcome(&c, DeliveryStatus::Exhausted)).unwrap();
    }
    let current = env.store.run_sync(|c| webhooks::get(c, "orders")).unwrap();
    let mut renamed = current.to_spec().expect("spec");
    renamed.name = "orders-v2".into();
    env.store
        .run_sync(|c| {
            webhooks::update(
                c,
                "orders",
                &WebhookRow::from(&renamed),
                webhooks::SecretChange::Keep,
            )
        })
        .unwrap();

    let list = |name: &str| {
        env.store
            .run_sync(|c| {
                let webhook = Some(deliveries::webhook_rows(c, name)?);
                deliveries::list(
                    c,
                    &ListFilter {
                        webhook,
                        limit: 10,
                        ..ListFilter::default()
                    },
                )
            })
            .unwrap()
    };
    assert_eq!(list("orders-v2").len(), 2, "the rows are its rows");
    assert!(
        list("orders").is_empty(),
        "no webhook of that name has rows now"
    );

    let replayed = env
        .store
        .run_sync(|c| {
            let w = webhooks::get(c, "orders-v2")?;
            deliveries::replay_bulk(
                c,
                w.id,
                DeliveryStatus::Exhausted,
                chrono::Utc::now() - chrono::Duration::hours(1),
            )
        })
        .unwrap();
    assert_eq!(replayed.len(), 2);

    // Deleted, its rows are found under the name they were recorded with.
    env.store
        .run_sync(|c| webhooks::delete(c, "orders-v2"))
        .unwrap();
    assert_eq!(
        env.store
            .run_sync(|c| deliveries::webhook_rows(c, "orders"))
            .unwrap(),
        WebhookRows::Deleted("orders".into())
    );
    assert_eq!(list("orders").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receivers_bytes_are_stored_as_sent_and_a_nul_in_an_error_is_replaced() {
    let env = TestEnv::new();
    let id = one_row(&env).await;
    let c = claimed(&env, id);
    let bytes: Vec<u8> = vec![
        b'o', b'k', 0, 0xff, 0xfe, 0x1f, 0x8b, 0x1b, b'[', b'2', b'J',
    ];
    let mut o = outcome(&c, DeliveryStatus::Failed);
    o.response_body = Some(bytes.clone());
    o.error = Some("HTTP 500: bad\0thing".into());
    assert_eq!(record(&env, &o).unwrap(), vec![id]);
    let row = env.row(id);
    assert_eq!(row.response_body.as_deref(), Some(&bytes[..]));
    assert_eq!(row.error.as_deref(), Some("HTTP 500: bad\u{FFFD}thing"));
}

/// Makes the database refuse any response body holding `POISON`: what a
/// truly unwritable outcome looks like (none is known any more).
fn refuse_poisoned_bodies(env: &TestEnv) {
    env.store
        .run_sync(|c| {
            diesel::sql_query(
                "ALTER TABLE webhook_request_logs ADD CONSTRAINT test_no_poison
                 CHECK (response_body IS NULL OR position('\\xdeadbeef'::bytea IN response_body) = 0)",
            )
            .execute(c)?;
            Ok(())
        })
        .expect("add constraint");
}

const POISON: [u8; 4] = [0xde, 0xad, 0xbe, 0xef];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_the_database_refuses_is_written_plainly() {
    let env = TestEnv::new();
    let id = one_row(&env).await;
    refuse_poisoned_bodies(&env);
    let c = claimed(&env, id);
    let mut o = outcome(&c, DeliveryStatus::Failed);
    o.response_body = Some([b"x".as_slice(), &POISON].concat());
    match record(&env, &o) {
        Err(StoreError::Rejected(_)) => {}
        other => panic!("expected the database to refuse it: {other:?}"),
    }
    assert_eq!(
        env.row(id).status,
        DeliveryStatus::Queued,
        "nothing written"
    );
    let written = env
        .store
        .run_sync(|c| deliveries::record_plain(c, &o, "test-worker"))
        .expect("plain write");
    assert_eq!(written, vec![id]);
    let row = env.row(id);
    assert_eq!(row.status, DeliveryStatus::Failed, "the outcome's status");
    assert!(row.next_retry.is_some(), "a retry is still scheduled");
    assert!(row.response_body.is_none());
    assert!(
        row.error
            .as_deref()
            .unwrap_or("")
            .contains("could not be stored"),
        "{row:?}"
    );
    assert_eq!(attempt_rows(&env, id), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_delay_no_timestamp_can_hold_is_recorded_at_the_longest_delay() {
    let env = TestEnv::new();
    let id = one_row(&env).await;
    let c = claimed(&env, id);
    let mut o = outcome(&c, DeliveryStatus::Failed);
    o.retry_in = Some(Duration::from_secs(u64::MAX / 4));
    assert_eq!(record(&env, &o).unwrap(), vec![id]);
    let row = env.row(id);
    let due = row.next_retry.expect("scheduled");
    assert!(
        due < chrono::Utc::now() + chrono::Duration::days(366),
        "{due}"
    );
    assert!(
        due > chrono::Utc::now() + chrono::Duration::days(364),
        "{due}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_transition_given_up_before_its_attempt_is_not_taken_for_it() {
    let env = TestEnv::new();
    let hook = env.add_webhook(&spec(
        "approve",
        "Sales Order",
        "workflow_transition",
        NOWHERE,
    ));
    let row = NewDelivery {
        event_id: "msg_transition".into(),
        webhook_id: Some(hook.id),
        webhook_name: hook.name.clone(),
        entity_type: "Sales Order".into(),
        entity_name: "SO-1".into(),
        event: "workflow_transition".into(),
        url: NOWHERE.into(),
        method: "POST".into(),
        headers: serde_json::json!([]),
        body: "{}".into(),
        queue: "default".into(),
        status: DeliveryStatus::Queued,
        // Recorded counting its one attempt, as the producer records it.
        attempts: 1,
        max_attempts: 1,
        next_retry: Some(chrono::Utc::now()),
        lease_expires_at: Some(chrono::Utc::now()),
        error: None,
        claim_token: 1,
        traceparent: None,
    };
    let id = env
        .store
        .run_sync(|c| deliveries::insert(c, std::slice::from_ref(&row)))
        .unwrap()[0]
        .id;
    set_lease(&env, id, -1);
    // A worker finds it (the producer died, say): it is given up, unsent.
    let verdict = claim(&env, id);
    assert!(matches!(verdict, Verdict::Exhausted(_)), "{verdict:?}");
    let taken = env
        .store
        .run_sync(|c| deliveries::take_for_transition(c, id, 1, Duration::from_secs(35)));
    assert!(
        matches!(taken, Err(StoreError::Refused(Refusal::Fenced(i))) if i == id),
        "{taken:?}"
    );

    // Taken in time, its token moves on and its lease is the database's.
    let row2 = NewDelivery {
        event_id: "msg_transition_2".into(),
        ..row
    };
    let id2 = env
        .store
        .run_sync(|c| deliveries::insert(c, std::slice::from_ref(&row2)))
        .unwrap()[0]
        .id;
    let token = env
        .store
        .run_sync(|c| deliveries::take_for_transition(c, id2, 1, Duration::from_secs(35)))
        .expect("taken");
    assert_eq!(token, 2);
    let leased = env.row(id2).lease_expires_at.expect("leased");
    assert!(leased > chrono::Utc::now() + chrono::Duration::seconds(30));
}

#[test]
fn a_list_stopped_by_its_time_limit_is_refused_as_too_slow_and_one_within_it_answers() {
    let env = TestEnv::new();
    // 300,000 rows: a filter on the event (no index serves it) that matches
    // nothing walks them all, far longer than a millisecond.
    env.store
        .run_sync(|c| {
            diesel::sql_query(
                "INSERT INTO webhook_request_logs (event_id, webhook_name, entity_type, entity_name,
                     event, url, method, headers, body, queue, status, attempts, max_attempts)
                 SELECT 'e' || g, 'w', 'T', 'D' || g, 'on_submit', 'http://x/', 'POST', '[]', '{}',
                     'default', 'Delivered', 1, 4
                 FROM generate_series(1, 300000) g",
            )
            .execute(c)?;
            Ok(())
        })
        .unwrap();
    let filter = ListFilter {
        event: Some("on_cancel".into()),
        limit: 10,
        ..ListFilter::default()
    };
    let slow = env
        .store
        .run_sync(|c| deliveries::list_within(c, &filter, Duration::from_millis(1)));
    assert!(
        matches!(slow, Err(StoreError::Refused(Refusal::TooSlow(_)))),
        "{slow:?}"
    );
    let fine = env
        .store
        .run_sync(|c| deliveries::list_within(c, &filter, Duration::from_secs(30)))
        .expect("within its limit");
    assert!(fine.is_empty());
}
