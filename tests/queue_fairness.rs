//! The take that passes over webhooks at their limit: what it takes, what it
//! moves to the back, and what it leaves in place (against real Redis).

use hookfleet_core::queue::Job;
use hookfleet_testkit::TestEnv;

fn job(log_id: i64, webhook: i64) -> String {
    Job::for_webhook(log_id, Some(webhook)).encode()
}

/// The queue, oldest first.
fn queue(env: &TestEnv) -> Vec<i64> {
    env.queued_ids("default")
}

fn push_oldest_first(env: &TestEnv, jobs: &[String]) {
    env.push_jobs("default", jobs);
}

#[tokio::test]
async fn jobs_of_a_saturated_webhook_are_passed_over_kept_in_order_and_never_left_blocking() {
    let env = TestEnv::new();
    // 1, 3, 5 are webhook 10 (saturated); 2, 4 are webhook 20.
    push_oldest_first(
        &env,
        &[job(1, 10), job(2, 20), job(3, 10), job(4, 20), job(5, 10)],
    );
    let processing = env.queue.keys().processing("default", "w");
    let (taken, skipped) = env
        .queue
        .jobs()
        .take_fair("default", &processing, 10, 16, &[(10, 0)], false)
        .await
        .unwrap();
    let taken: Vec<i64> = taken
        .iter()
        .map(|j| Job::decode(j).unwrap().log_id)
        .collect();
    assert_eq!(taken, vec![2, 4], "the other webhook's jobs, oldest first");
    assert_eq!(skipped, 3);
    // 1 and 3 were passed over for newer jobs: to the back, in order; 5 came
    // after the last job taken and stays at the front.
    assert_eq!(queue(&env), vec![5, 1, 3]);
}

#[tokio::test]
async fn a_webhook_with_some_free_slots_gets_that_many_of_its_jobs() {
    let env = TestEnv::new();
    push_oldest_first(&env, &[job(1, 10), job(2, 10), job(3, 10), job(4, 10)]);
    let processing = env.queue.keys().processing("default", "w");
    let (taken, _) = env
        .queue
        .jobs()
        .take_fair("default", &processing, 10, 16, &[(10, 2)], false)
        .await
        .unwrap();
    assert_eq!(taken.len(), 2);
    assert_eq!(queue(&env), vec![3, 4], "the rest wait in place, in order");
    assert_eq!(env.llen(&processing), 2);
}

#[tokio::test]
async fn when_nothing_can_be_taken_the_jobs_stay_unless_asked_to_rotate_past_the_window() {
    let env = TestEnv::new();
    let jobs: Vec<String> = (1..=6).map(|i| job(i, 10)).collect();
    push_oldest_first(&env, &jobs);
    let processing = env.queue.keys().processing("default", "w");
    let (taken, skipped) = env
        .queue
        .jobs()
        .take_fair("default", &processing, 4, 4, &[(10, 0)], false)
        .await
        .unwrap();
    assert!(taken.is_empty());
    assert_eq!(skipped, 4);
    assert_eq!(queue(&env), vec![1, 2, 3, 4, 5, 6], "no churn");
    // Rotating brings the jobs beyond the window within reach.
    env.queue
        .jobs()
        .take_fair("default", &processing, 4, 4, &[(10, 0)], true)
        .await
        .unwrap();
    assert_eq!(queue(&env), vec![5, 6, 1, 2, 3, 4]);
}
