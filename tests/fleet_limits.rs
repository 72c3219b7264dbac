//! Per-webhook limits that hold across the fleet (`--max-concurrency N`,
//! `--rate-limit N/s`): several workers, one receiver, and the limits kept
//! in Redis.

use std::time::Duration;

use hookfleet_core::domain::{DeliveryStatus, WebhookSpec};
use hookfleet_testkit::{spec, Receiver, TestEnv};

/// How long a test waits for the fleet to do what it should: generous, so a
/// busy machine passes as an idle one.
const PATIENCE: Duration = Duration::from_secs(60);

fn limited(rx: &Receiver, name: &str) -> WebhookSpec {
    spec(name, "Sales Order", "on_submit", &rx.url("/hook"))
}

async fn delivered(env: &TestEnv, webhook: &str) -> usize {
    env.rows()
        .iter()
        .filter(|r| r.webhook_name == webhook && r.status == DeliveryStatus::Delivered)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_workers_never_send_more_than_max_concurrency_and_other_webhooks_go_on() {
    let env = TestEnv::new();
    let slow = Receiver::start().await;
    // The limited webhook's requests wait at its receiver until the test
    // lets them go, so what is in flight at once is seen, not raced.
    slow.hold();
    let fast = Receiver::start().await;
    let mut s = limited(&slow, "limited");
    s.max_concurrency = Some(3);
    // Longer than the test holds its requests: none times out.
    s.timeout = Duration::from_secs(60);
    env.add_webhook(&s);
    env.add_webhook(&limited(&fast, "free"));
    let workers: Vec<_> = (0..3).map(|_| env.start_worker_tuned(16, |_| {})).collect();
    for i in 0..30 {
        env.submit(&format!("SO-{i}")).await;
    }
    // The free webhook's deliveries all go through while the limited one's
    // are held.
    fast.wait_for(30, PATIENCE).await;
    // Three workers of 16 slots each fill the limit, and no more.
    slow.wait_in_flight(3, PATIENCE).await;
    assert_eq!(delivered(&env, "limited").await, 0, "none answered yet");
    assert_eq!(slow.max_in_flight(), 3, "never more than 3 at once");
    slow.release();
    slow.wait_for(30, PATIENCE).await;
    env.until_rows("every row is delivered", |rows| {
        rows.iter().all(|r| r.status == DeliveryStatus::Delivered)
    })
    .await;
    assert_eq!(slow.count(), 30, "each sent once");
    assert_eq!(
        slow.max_in_flight(),
        3,
        "three workers of 16 slots each, and never more than 3 at once"
    );
    for w in workers {
        w.stop().await;
    }
    // Every lease came back.
    let wid = env
        .stored_webhooks()
        .iter()
        .find(|w| w.name == "limited")
        .unwrap()
        .id;
    // Given back by the time each worker stopped (a drained worker flushes
    // them), not left to expire.
    assert_eq!(env.queue.fleet().leases_held(wid).await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_keep_to_the_rate_limit_in_every_second() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    let mut s = limited(&rx, "paced");
    s.rate_limit = Some(20);
    env.add_webhook(&s);
    let workers: Vec<_> = (0..2).map(|_| env.start_worker_tuned(16, |_| {})).collect();
    for i in 0..60 {
        env.submit(&format!("SO-{i}")).await;
    }
    let got = rx.wait_for(60, Duration::from_secs(30)).await;
    assert_eq!(got.len(), 60);
    let mut at: Vec<_> = got.iter().map(|r| r.at).collect();
    at.sort();
    // 20/s with a burst of 1: at most 21 in any second, and 60 take about
    // three seconds.
    let most = at
        .iter()
        .map(|start| {
            at.iter()
                .filter(|t| **t >= *start && t.duration_since(*start) < Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap();
    assert!(most <= 21, "{most} requests within one second at 20/s");
    let span = at.last().unwrap().duration_since(at[0]);
    assert!(
        span >= Duration::from_millis(2_700),
        "60 requests at 20/s took only {span:?}"
    );
    env.until_rows("every row is delivered", |rows| {
        rows.iter().all(|r| r.status == DeliveryStatus::Delivered)
    })
    .await;
    for w in workers {
        w.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_workers_leases_expire_and_the_rate_bucket_refills() {
    let env = TestEnv::new();
    let life = Duration::from_millis(400);
    let leases = |n: u32, stem: &'static str| {
        let q = env.queue.clone();
        async move {
            q.fleet()
                .admit(7, Some(3), None, n, stem, life)
                .await
                .unwrap()
        }
    };
    let taken = leases(5, "dead-worker:1").await;
    assert_eq!(
        (taken.granted, taken.leases.len()),
        (3, 3),
        "three of five asked for"
    );
    assert!(taken.full && taken.next_token_in.is_none());
    assert_eq!(leases(1, "w2:1").await.granted, 0);
    assert_eq!(env.queue.fleet().leases_held(7).await.unwrap(), 3);
    // Nobody gives them back (the worker died): they expire.
    tokio::time::sleep(life + Duration::from_millis(100)).await;
    assert_eq!(env.queue.fleet().leases_held(7).await.unwrap(), 0);
    let again = leases(1, "w2:2").await;
    assert_eq!(again.leases.len(), 1);
    env.queue
        .fleet()
        .give_back_leases(7, &again.leases)
        .await
        .unwrap();
    assert_eq!(env.queue.fleet().leases_held(7).await.unwrap(), 0);

    // A lease with a shorter life (another worker's timeout) never cuts a
    // longer one short.
    let one_lease = async |holder: &str, life: Duration| {
        let fleet = env.queue.fleet();
        fleet
            .admit(11, Some(5), None, 1, holder, life)
            .await
            .unwrap()
    };
    let long = one_lease("long", Duration::from_secs(10)).await;
    assert_eq!(long.granted, 1);
    let short = one_lease("short", Duration::from_millis(100)).await;
    assert_eq!(short.granted, 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        env.queue.fleet().leases_held(11).await.unwrap(),
        1,
        "the long lease is held"
    );

    // 10/s: a burst of one, then one every 100 ms.
    let rate = |n: u32| {
        let q = env.queue.clone();
        async move {
            q.fleet()
                .admit(8, None, Some(10), n, "r", life)
                .await
                .unwrap()
        }
    };
    let first = rate(5).await;
    assert_eq!(first.granted, 1);
    assert!(first.leases.is_empty() && !first.full);
    let next = first.next_token_in.expect("refused four by the rate");
    assert!(
        next > Duration::from_millis(50) && next <= Duration::from_millis(100),
        "{first:?}"
    );
    assert_eq!(rate(1).await.granted, 0);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        rate(10).await.granted,
        1,
        "a bucket never holds more than its burst"
    );

    // Both limits in one call: the rate admits five, the leases one.
    let both = env
        .queue
        .fleet()
        .admit(9, Some(1), Some(1000), 5, "b", life)
        .await
        .unwrap();
    assert_eq!((both.granted, both.leases.len()), (1, 1));
    assert!(both.full, "one lease for five asked");
}

#[test]
fn the_cli_sets_shows_and_clears_a_rate_limit_and_refuses_bad_ones() {
    let env = TestEnv::new();
    let add = env.cli(&[
        "webhook",
        "add",
        "paced",
        "--entity-type",
        "Sales Order",
        "--event",
        "on_submit",
        "--url",
        "http://127.0.0.1:9/x",
        "--rate-limit",
        "100/s",
        "--max-concurrency",
        "32",
    ]);
    assert_eq!(add.code, Some(0), "{add}");
    let show = env.cli(&["webhook", "show", "paced", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(v["rate_limit"], "100/s");
    assert_eq!(v["max_concurrency"], 32);
    for bad in ["100", "0/s", "100/m", "100001/s", "-5/s", "x/s"] {
        let r = env.cli(&["webhook", "update", "paced", "--rate-limit", bad]);
        assert_eq!(r.code, Some(1), "{bad}: {r}");
        assert!(r.stderr.contains("N/s"), "{bad}: {}", r.stderr);
    }
    let same = env.cli(&["webhook", "show", "paced", "--json"]);
    assert!(same.stdout.contains("\"100/s\""), "refusals wrote nothing");
    let clear = env.cli(&["webhook", "update", "paced", "--no-rate-limit"]);
    assert_eq!(clear.code, Some(0), "{clear}");
    let v: serde_json::Value =
        serde_json::from_str(&env.cli(&["webhook", "show", "paced", "--json"]).stdout).unwrap();
    assert!(v["rate_limit"].is_null());
    let table = env.cli(&["webhook", "show", "paced"]);
    assert!(table.stdout.contains("rate_limit"), "{}", table.stdout);
}
