//! `hookfleet dead list|show|requeue|purge` against real Redis.

use hookfleet_testkit::TestEnv;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_lists_shows_requeues_and_purges_dead_letters() {
    let env = TestEnv::new();
    let worker = env.start_worker(2, hookfleet_core::schedule::RetrySchedule::default());
    {
        let mut conn = env.redis();
        for junk in ["garbage one", "garbage two", r#"{"v":1,"log_id":777}"#] {
            redis::cmd("LPUSH")
                .arg(env.queue.keys().queue("default"))
                .arg(junk)
                .query::<()>(&mut conn)
                .unwrap();
        }
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while env.queue.dead_count().await.unwrap() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the junk was never dead-lettered"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    worker.stop().await;

    let list = env.cli(&["dead", "list", "--json"]);
    assert_eq!(list.status.code(), Some(0));
    let letters: Vec<serde_json::Value> = serde_json::from_slice(&list.stdout).unwrap();
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
        stdout(&table).contains(&id) && stdout(&table).contains("REASON"),
        "{}",
        stdout(&table)
    );
    let show = env.cli(&["dead", "show", &id]);
    assert!(
        stdout(&show).contains("log_id\":777") && stdout(&show).contains("does not exist"),
        "{}",
        stdout(&show)
    );

    let requeue = env.cli(&["dead", "requeue", &id]);
    assert_eq!(requeue.status.code(), Some(0), "{requeue:?}");
    assert_eq!(
        env.llen(&env.queue.keys().queue("default")),
        1,
        "back on its queue"
    );
    assert_eq!(env.queue.dead_count().await.unwrap(), 2);

    let again = env.cli(&["dead", "show", &id]);
    assert_eq!(again.status.code(), Some(1), "gone from the list");
    assert!(String::from_utf8_lossy(&again.stderr).contains("no dead letter"));

    let purge = env.cli(&["dead", "purge", "--all"]);
    assert!(stdout(&purge).contains("purged 2"), "{}", stdout(&purge));
    assert_eq!(env.queue.dead_count().await.unwrap(), 0);
    let usage = env.cli(&["dead", "purge"]);
    assert_eq!(usage.status.code(), Some(2), "an id or --all is required");
}
