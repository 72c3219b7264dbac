//! `hookfleet dead list|show|requeue|purge` against real Redis.

use hookfleet_testkit::{until_seen, TestEnv};

/// Pushes `jobs` (none of which a worker can use) and waits, with a worker
/// running, until the dead-letter list holds at least that many more.
async fn dead_letter(env: &TestEnv, jobs: &[&str]) {
    let before = env.queue.dead().count().await.unwrap();
    let worker = env.start_worker(2, hookfleet_core::domain::RetrySchedule::default());
    env.push_jobs("default", jobs.iter().copied());
    until_seen(
        "the junk is dead-lettered",
        async || env.queue.dead().count().await.unwrap(),
        |dead| *dead >= before + jobs.len() as i64,
    )
    .await;
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_lists_shows_requeues_and_purges_dead_letters() {
    let env = TestEnv::new();
    dead_letter(
        &env,
        &["garbage one", "garbage two", r#"{"v":1,"log_id":777}"#],
    )
    .await;

    let list = env.cli(&["dead", "list", "--json"]);
    assert_eq!(list.code, Some(0));
    let letters: Vec<serde_json::Value> = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(letters.len(), 3);
    let missing_row = letters
        .iter()
        .find(|d| d["job"] == r#"{"v":1,"log_id":777}"#)
        .unwrap();
    assert!(missing_row["reason"]
        .as_str()
        .unwrap()
        .contains("does not exist"));
    let id = missing_row["id"].as_str().unwrap().to_string();

    let table = env.cli(&["dead", "list"]);
    assert!(
        table.stdout.contains(&id) && table.stdout.contains("REASON"),
        "{}",
        table.stdout
    );
    let show = env.cli(&["dead", "show", &id]);
    assert!(
        show.stdout.contains("log_id\":777") && show.stdout.contains("does not exist"),
        "{}",
        show.stdout
    );

    let requeue = env.cli(&["dead", "requeue", &id]);
    assert_eq!(requeue.code, Some(0), "{requeue}");
    assert_eq!(env.queue_depth("default"), 1, "back on its queue");
    assert_eq!(env.queue.dead().count().await.unwrap(), 2);

    let again = env.cli(&["dead", "show", &id]);
    assert_eq!(again.code, Some(1), "gone from the list");
    assert!(again.stderr.contains("no dead letter"));

    let purge = env.cli(&["dead", "purge", "--all"]);
    assert!(purge.stdout.contains("purged 2"), "{}", purge.stdout);
    assert_eq!(env.queue.dead().count().await.unwrap(), 0);
    let usage = env.cli(&["dead", "purge"]);
    assert_eq!(usage.code, Some(2), "an id or --all is required");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purging_every_dead_letter_asks_a_person_first_and_not_a_script() {
    let env = TestEnv::new();
    dead_letter(&env, &["garbage one", "garbage two"]).await;
    let question = "Delete every dead letter?";

    let (code, shown) = env.at_a_terminal(question, "n", &["dead", "purge", "--all"]);
    assert_eq!(code, 1, "{shown}");
    assert!(
        shown.contains("cancelled: no dead letter purged"),
        "{shown}"
    );
    assert_eq!(env.queue.dead().count().await.unwrap(), 2, "nothing purged");

    let (code, shown) = env.at_a_terminal(question, "y", &["dead", "purge", "--all"]);
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("purged 2 dead letters"), "{shown}");
    assert_eq!(env.queue.dead().count().await.unwrap(), 0);

    // --yes at a terminal, and a script (no terminal), are not asked.
    dead_letter(&env, &["garbage three"]).await;
    let (code, shown) = env.at_a_terminal(question, "n", &["dead", "purge", "--all", "--yes"]);
    assert_eq!(code, 0, "{shown}");
    assert!(
        !shown.contains(question) && shown.contains("purged 1"),
        "{shown}"
    );
}
