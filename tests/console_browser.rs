//! The console in a real browser: headless Chromium (Debian's) driven
//! through chromedriver over WebDriver, against a fleet with real
//! deliveries. A person logs in, finds a Failed delivery by its document's
//! name, presses Retry and sees it Delivered; pauses and resumes a webhook;
//! ticks rows and retries, requeues or purges them together; creates and
//! edits a webhook through its form; previews and sends a test event; a
//! POST without the CSRF token is refused; the pages fit a phone.
//!
//! Screenshots go to `HOOKFLEET_SCREENSHOTS_DIR` (scripts/screenshots.sh
//! points it at docs/screenshots, which the README shows), else to the
//! target directory as the run's artefacts.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_core::domain::RetrySchedule;
use hookfleet_testkit::{
    free_port, spec, until_seen, ConsoleServer, Receiver, Reply, TestEnv, ENTITY, FULL_TOKEN,
};

/// How long a page may take to show what a step waits for.
const PAGE_WAIT: Duration = Duration::from_secs(20);

/// chromedriver on a free loopback port, killed when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start() -> Driver {
        let bin = std::env::var("HOOKFLEET_TEST_CHROMEDRIVER")
            .unwrap_or_else(|_| "/usr/bin/chromedriver".into());
        let port = free_port();
        let child = Command::new(&bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {bin} ({e}); scripts/test.sh installs chromium and chromium-driver")
            });
        let deadline = Instant::now() + PAGE_WAIT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Driver { child, port }
    }

    async fn browser(&self) -> Client {
        let chromium =
            std::env::var("HOOKFLEET_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,900",
                         "--lang=en-GB"],
            }),
        );
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a Chromium session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn screenshots_dir() -> PathBuf {
    let dir = std::env::var("HOOKFLEET_SCREENSHOTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            hookfleet_testkit::bin_path("hookfleet")
                .parent()
                .expect("target dir")
                .join("console-screenshots")
        });
    std::fs::create_dir_all(&dir).expect("screenshots dir");
    dir
}

async fn shoot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(screenshots_dir().join(name), png).expect("write the screenshot");
}

/// The text of the first element `css` finds, waiting for it. A page
/// being replaced may hand out an element of the old document: asked
/// again until the new one answers.
/// How many elements `css` selects on the page.
async fn count_of(c: &Client, css: &str) -> i64 {
    c.execute(
        "return document.querySelectorAll(arguments[0]).length",
        vec![json!(css)],
    )
    .await
    .expect("script")
    .as_i64()
    .unwrap_or(-1)
}

/// How many of the `<time>` elements `css` selects the page's script has
/// not shown in the viewer's zone (it keeps the UTC time in the title), or
/// whose "ago" beside it says nothing.
async fn raw_times(c: &Client, css: &str) -> i64 {
    c.execute(
        "return [...document.querySelectorAll(arguments[0])]
           .filter(t => !t.title
                        || (t.nextElementSibling && t.nextElementSibling.classList.contains('ago')
                            && !/ago|^in |just now/.test(t.nextElementSibling.textContent))).length",
        vec![json!(css)],
    )
    .await
    .expect("script")
    .as_i64()
    .unwrap_or(-1)
}

async fn text_of(c: &Client, css: &str) -> String {
    let deadline = Instant::now() + PAGE_WAIT;
    loop {
        let got = match c.find(Locator::Css(css)).await {
            Ok(e) => e.text().await,
            Err(e) => Err(e),
        };
        match got {
            Ok(text) => return text,
            Err(e) => {
                if Instant::now() >= deadline {
                    let url = c
                        .current_url()
                        .await
                        .map(|u| u.to_string())
                        .unwrap_or_default();
                    let source = c.source().await.unwrap_or_default();
                    panic!("{css}: {e}\nat {url}:\n{source}");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The element `locator` finds (waiting for the page to show it), named
/// `what` in a failure.
async fn element(c: &Client, locator: Locator<'_>, what: &str) -> fantoccini::elements::Element {
    c.wait()
        .at_most(PAGE_WAIT)
        .for_element(locator)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Clicks what `locator` finds.
async fn click(c: &Client, locator: Locator<'_>, what: &str) {
    element(c, locator, what)
        .await
        .click()
        .await
        .unwrap_or_else(|e| panic!("click {what}: {e}"));
}

/// Types `text` into what `locator` finds.
async fn type_into(c: &Client, locator: Locator<'_>, what: &str, text: &str) {
    element(c, locator, what)
        .await
        .send_keys(text)
        .await
        .unwrap_or_else(|e| panic!("type into {what}: {e}"));
}

/// Opens `path` and logs in with the full token (the console asks once).
async fn log_in(c: &Client, console: &ConsoleServer, path: &str) {
    c.goto(&console.url(path)).await.expect("open the console");
    type_into(
        c,
        Locator::Css("input[name=token]"),
        "the login form",
        FULL_TOKEN,
    )
    .await;
    click(c, Locator::Css("form.login button"), "log in").await;
}

/// Replaces what the field `css` holds with `text`.
async fn fill(c: &Client, css: &str, text: &str) {
    let field = element(c, Locator::Css(css), css).await;
    field
        .clear()
        .await
        .unwrap_or_else(|e| panic!("clear {css}: {e}"));
    field
        .send_keys(text)
        .await
        .unwrap_or_else(|e| panic!("type into {css}: {e}"));
}

/// The value the field `css` holds.
async fn value_of(c: &Client, css: &str) -> String {
    element(c, Locator::Css(css), css)
        .await
        .prop("value")
        .await
        .expect("a value")
        .unwrap_or_default()
}

/// Accepts the confirmation a form asks for, returning what it asked.
async fn confirm(c: &Client) -> String {
    let deadline = Instant::now() + PAGE_WAIT;
    loop {
        match c.get_alert_text().await {
            Ok(asked) => {
                c.accept_alert().await.expect("say yes");
                return asked;
            }
            Err(e) => assert!(Instant::now() < deadline, "no confirmation: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many pixels the page is wider than the window (a phone's: the
/// tables scroll in their own box, nothing else may).
async fn overflow(c: &Client) -> i64 {
    c.execute(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth",
        vec![],
    )
    .await
    .expect("script")
    .as_i64()
    .unwrap_or(i64::MAX)
}

/// Waits until the page's text contains `needle`, reloading if `reload`.
async fn until_page_says(c: &Client, needle: &str, reload: bool) {
    let deadline = Instant::now() + PAGE_WAIT;
    loop {
        let body = text_of(c, "main").await;
        if body.contains(needle) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the page never said {needle:?}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        if reload {
            c.refresh().await.expect("reload");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_finds_a_failed_delivery_retries_it_and_pauses_a_webhook() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    // SO-1001 fails once (its retry an hour away); the rest are delivered.
    receiver.reply_next([Reply::status(502).body("bad gateway")]);
    env.add_webhook(&spec(
        "orders",
        ENTITY,
        "on_submit",
        &receiver.url("/orders"),
    ));
    let failed = env.submit("SO-1001").await.deliveries[0].id;
    let worker = env.start_worker(4, RetrySchedule::parse("1h").expect("schedule"));
    env.until_row(failed, |r| r.status == DeliveryStatus::Failed)
        .await;
    for n in 1002..1006 {
        env.submit(&format!("SO-{n}")).await;
    }
    env.until_rows("the rest delivered", |rows| {
        rows.iter()
            .filter(|r| r.status == DeliveryStatus::Delivered)
            .count()
            == 4
    })
    .await;
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), None).await;
    let driver = Driver::start();
    let c = driver.browser().await;

    // The overview asks for the token once, then shows the fleet.
    c.goto(&console.url("/")).await.expect("open the console");
    type_into(
        &c,
        Locator::Css("input[name=token]"),
        "the login form",
        FULL_TOKEN,
    )
    .await;
    click(&c, Locator::Css("form.login button"), "log in").await;
    until_page_says(&c, "Attempts per minute", false).await;
    let cards = text_of(&c, ".cards").await;
    assert!(
        cards.contains("4\nDelivered") || cards.contains("4 Delivered"),
        "{cards}"
    );
    // Times are shown in the viewer's zone by the page's script: no raw
    // RFC 3339 left in a <time> once it ran.
    assert_eq!(raw_times(&c, "time").await, 0, "every <time> was localised");
    shoot(&c, "overview.png").await;

    // The counts are links to the deliveries they count.
    click(&c, Locator::Css(".card.warn a"), "the Failed count").await;
    until_page_says(&c, "SO-1001", false).await;
    let listed = text_of(&c, "table").await;
    assert!(!listed.contains("SO-1002"), "only the Failed one: {listed}");
    c.back().await.expect("back to the overview");

    // Find the Failed delivery by its document's name.
    type_into(
        &c,
        Locator::Css("header input[name=q]"),
        "the search box",
        "SO-1001\u{E007}",
    )
    .await;
    until_page_says(&c, "SO-1001", false).await;
    click(
        &c,
        Locator::LinkText(&failed.to_string()),
        "the link to the delivery",
    )
    .await;
    until_page_says(&c, "bad gateway", false).await;
    assert!(text_of(&c, "h1").await.contains("Failed"));
    shoot(&c, "delivery.png").await;

    // Retry: replayed at once, Delivered once the worker sends it.
    click(&c, Locator::Css("form.actions button"), "Retry").await;
    until_page_says(&c, "Replayed", false).await;
    env.until_row(failed, |r| r.status == DeliveryStatus::Delivered)
        .await;
    until_page_says(&c, "Delivered", true).await;
    assert!(text_of(&c, "h1").await.contains("Delivered"));

    // A POST without the CSRF token is refused, and replays nothing.
    let status = c
        .execute_async(
            "const done = arguments[arguments.length - 1];
             fetch(arguments[0], {method: 'POST', credentials: 'same-origin',
                   headers: {'content-type': 'application/x-www-form-urlencoded'}, body: 'force=true'})
               .then(r => done(r.status), e => done(String(e)));",
            vec![json!(format!("/deliveries/{failed}/retry"))],
        )
        .await
        .expect("fetch");
    assert_eq!(status, json!(403), "a CSRF-less POST");
    assert_eq!(env.row(failed).attempts, 2, "the refused POST replayed");

    // Pause and resume from the webhooks page: Pause asks first, and a
    // person who says no pauses nothing.
    c.goto(&console.url("/webhooks")).await.expect("webhooks");
    click(&c, Locator::XPath("//button[text()='Pause']"), "Pause").await;
    let asked = c.get_alert_text().await.expect("Pause asks first");
    assert!(asked.contains("Pause this webhook?"), "{asked}");
    c.dismiss_alert().await.expect("say no");
    assert!(env.stored_webhooks()[0].paused_at.is_none(), "not paused");
    click(&c, Locator::XPath("//button[text()='Pause']"), "Pause").await;
    c.accept_alert().await.expect("say yes");
    until_page_says(&c, "Paused orders.", false).await;
    assert!(env.stored_webhooks()[0].paused_at.is_some());
    assert!(text_of(&c, "table").await.contains("paused"));
    shoot(&c, "webhooks.png").await;
    click(&c, Locator::XPath("//button[text()='Resume']"), "Resume").await;
    until_page_says(&c, "Resumed orders", false).await;
    assert!(env.stored_webhooks()[0].paused_at.is_none());

    // A phone's width: nothing wider than the screen but the tables,
    // which scroll inside their own box.
    c.set_window_size(390, 844).await.expect("phone size");
    c.goto(&console.url(&format!("/deliveries/{failed}")))
        .await
        .expect("delivery");
    until_page_says(&c, "Attempts", false).await;
    let overflow = c
        .execute(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth",
            vec![],
        )
        .await
        .expect("script");
    assert!(
        overflow.as_i64().is_some_and(|px| px <= 0),
        "the page is wider than a phone by {overflow} px"
    );
    shoot(&c, "phone.png").await;

    c.close().await.expect("close the browser");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhooks_page_says_which_webhook_is_failing_healthy_paused_or_idle() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    env.add_webhook(&spec("good", ENTITY, "on_submit", &receiver.url("/good")));
    // Nothing listens there: every attempt fails.
    env.add_webhook(&spec(
        "dead-end",
        ENTITY,
        "on_submit",
        &format!("{}/dead", hookfleet_testkit::NOWHERE),
    ));
    env.add_webhook(&spec("held", ENTITY, "on_submit", &receiver.url("/held")));
    env.add_webhook(&spec("quiet", ENTITY, "on_cancel", &receiver.url("/quiet")));
    env.cli(&["webhook", "pause", "held"]).ok("pause");
    let worker = env.start_worker(4, RetrySchedule::parse("1h").expect("schedule"));
    env.submit("SO-1").await;
    env.until_rows("good delivered, dead-end failed", |rows| {
        let status = |name: &str| {
            rows.iter()
                .find(|r| r.webhook_name == name)
                .map(|r| r.status)
        };
        status("good") == Some(DeliveryStatus::Delivered)
            && status("dead-end") == Some(DeliveryStatus::Failed)
    })
    .await;
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), None).await;
    let driver = Driver::start();
    let c = driver.browser().await;
    c.goto(&console.url("/webhooks"))
        .await
        .expect("open the console");
    type_into(
        &c,
        Locator::Css("input[name=token]"),
        "the login form",
        FULL_TOKEN,
    )
    .await;
    click(&c, Locator::Css("form.login button"), "log in").await;
    // Health is written once a second: reload until it shows.
    until_page_says(&c, "failing", true).await;
    until_page_says(&c, "healthy", true).await;
    let state_of = async |name: &str| -> String {
        let row = element(
            &c,
            Locator::XPath(&format!("//tr[td/a[text()='{name}']]/td[4]")),
            "the webhook's state",
        )
        .await;
        row.text().await.expect("text")
    };
    assert_eq!(state_of("good").await, "healthy");
    assert_eq!(state_of("dead-end").await, "failing");
    assert_eq!(state_of("held").await, "paused");
    assert_eq!(state_of("quiet").await, "idle");
    // The failing one in red, by its class.
    let failing = element(
        &c,
        Locator::XPath("//tr[td/a[text()='dead-end']]/td[4]/span"),
        "the failing tag",
    )
    .await;
    assert_eq!(
        failing.attr("class").await.expect("class").as_deref(),
        Some("tag bad")
    );
    shoot(&c, "webhooks-health.png").await;

    // A dead letter's time is shown in the viewer's zone, not as a raw
    // timestamp.
    env.push_jobs("default", ["not a job"]);
    until_seen(
        "the junk is dead-lettered",
        async || env.queue.dead().count().await.unwrap(),
        |dead| *dead >= 1,
    )
    .await;
    c.goto(&console.url("/dead-letters"))
        .await
        .expect("dead letters");
    until_page_says(&c, "Purge", false).await;
    assert_eq!(
        raw_times(&c, "td time").await,
        0,
        "the dead letter's time was localised"
    );
    assert_eq!(
        count_of(&c, "td time").await,
        1,
        "one dead letter, one time"
    );
    c.goto(&console.url("/webhooks/dead-end"))
        .await
        .expect("one webhook");
    until_page_says(&c, "attempts failed in a row", false).await;
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticked_deliveries_are_retried_together_and_a_delivered_one_only_with_force() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    // SO-1..SO-3 fail once (their retries an hour away); SO-4 is delivered.
    receiver.reply_next([Reply::status(503), Reply::status(503), Reply::status(503)]);
    env.add_webhook(&spec(
        "orders",
        ENTITY,
        "on_submit",
        &receiver.url("/orders"),
    ));
    let worker = env.start_worker(4, RetrySchedule::parse("1h").expect("schedule"));
    for n in 1..=3 {
        env.submit(&format!("SO-{n}")).await;
    }
    env.until_rows("three failed", |rows| {
        rows.iter()
            .filter(|r| r.status == DeliveryStatus::Failed)
            .count()
            == 3
    })
    .await;
    let delivered = env.submit("SO-4").await.deliveries[0].id;
    env.until_row(delivered, |r| r.status == DeliveryStatus::Delivered)
        .await;
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), None).await;
    let driver = Driver::start();
    let c = driver.browser().await;
    log_in(&c, &console, "/deliveries").await;
    until_page_says(&c, "SO-4", false).await;
    assert_eq!(raw_times(&c, "td time").await, 0, "times localised");

    // Tick every row (the header's box), the Delivered one too, and retry:
    // the three Failed are replayed, the Delivered one is not, and the
    // notice says why.
    click(&c, Locator::Css("input.pick-all"), "select every row").await;
    assert_eq!(count_of(&c, "input[name=id]:checked").await, 4);
    shoot(&c, "deliveries.png").await;
    click(
        &c,
        Locator::XPath("//button[text()='Retry selected']"),
        "Retry selected",
    )
    .await;
    let asked = confirm(&c).await;
    assert!(asked.contains("Retry the 4 selected"), "{asked}");
    until_page_says(&c, "Retried 3 of 4 deliveries", false).await;
    let notice = text_of(&c, ".notice").await;
    assert!(
        notice.contains(&format!("Not retried: {delivered} (Delivered")),
        "{notice}"
    );
    let rows = env
        .until_rows("all four delivered", |rows| {
            rows.iter().all(|r| r.status == DeliveryStatus::Delivered)
        })
        .await;
    assert!(rows.iter().all(|r| r.id == delivered || r.attempts == 2));
    assert_eq!(env.row(delivered).attempts, 1, "sent once: not forced");
    let got = receiver.wait_for(7, Duration::from_secs(30)).await;
    for n in 1..=3 {
        let name = format!("SO-{n}");
        let sent = got.iter().filter(|r| r.json()["name"] == name).count();
        assert_eq!(sent, 2, "{name}: the failed attempt and the retry");
    }

    // With "also send Delivered ones again", a Delivered row goes again.
    c.refresh().await.expect("reload");
    click(
        &c,
        Locator::Css(&format!("input[name=id][value='{delivered}']")),
        "the Delivered row",
    )
    .await;
    click(&c, Locator::Css("input[name=force]"), "force").await;
    click(
        &c,
        Locator::XPath("//button[text()='Retry selected']"),
        "Retry selected",
    )
    .await;
    assert!(confirm(&c).await.contains("Retry the 1 selected"));
    until_page_says(&c, "Retried 1 of 1 deliveries", false).await;
    env.until_row(delivered, |r| {
        r.status == DeliveryStatus::Delivered && r.attempts == 2
    })
    .await;
    c.close().await.expect("close the browser");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_requeued_and_purged_ticked_or_all_at_once() {
    let env = TestEnv::new();
    let dead = async || env.queue.dead().count().await.unwrap();
    // Junk a worker files as dead letters; none is left running while the
    // page acts, so what is requeued stays on its queue to be counted.
    let file_dead_letters = async |n: i64| {
        let worker = env.start_worker(2, RetrySchedule::parse("1h").expect("schedule"));
        until_seen(
            "the junk is dead-lettered",
            async || env.queue.dead().count().await.unwrap(),
            |d| *d >= n,
        )
        .await;
        worker.stop().await;
    };
    env.push_jobs("default", ["junk 1", "junk 2", "junk 3"]);
    file_dead_letters(3).await;
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), None).await;
    let driver = Driver::start();
    let c = driver.browser().await;
    log_in(&c, &console, "/dead-letters").await;
    until_page_says(&c, "Requeue selected", false).await;
    assert_eq!(count_of(&c, "input[name=id]").await, 3);

    // Two ticked, requeued: back on their queue.
    let boxes = c
        .find_all(Locator::Css("input[name=id]"))
        .await
        .expect("the rows' boxes");
    for b in &boxes[..2] {
        b.click().await.expect("tick");
    }
    shoot(&c, "dead-letters.png").await;
    click(
        &c,
        Locator::XPath("//button[text()='Requeue selected']"),
        "Requeue selected",
    )
    .await;
    assert!(confirm(&c).await.contains("Requeue the 2 selected"));
    until_page_says(&c, "Requeued 2 of 2 dead letters", false).await;
    assert_eq!(dead().await, 1);
    assert_eq!(env.queue_depth("default"), 2);

    // The last one ticked, purged (Purge asks its own question).
    click(&c, Locator::Css("input[name=id]"), "the last row").await;
    click(
        &c,
        Locator::XPath("//button[text()='Purge selected']"),
        "Purge selected",
    )
    .await;
    let asked = confirm(&c).await;
    assert!(asked.contains("Purge the 1 selected"), "{asked}");
    until_page_says(&c, "Purged 1 of 1 dead letters", false).await;
    assert_eq!(dead().await, 0);

    // The two requeued are filed again: Requeue all.
    file_dead_letters(2).await;
    c.refresh().await.expect("reload");
    click(
        &c,
        Locator::XPath("//button[text()='Requeue all']"),
        "Requeue all",
    )
    .await;
    assert!(confirm(&c).await.contains("Requeue every dead letter"));
    until_page_says(&c, "Requeued 2 dead letters.", false).await;
    assert_eq!((dead().await, env.queue_depth("default")), (0, 2));

    // Filed once more: Purge all, which a person may still refuse.
    file_dead_letters(2).await;
    c.refresh().await.expect("reload");
    click(
        &c,
        Locator::XPath("//button[text()='Purge all']"),
        "Purge all",
    )
    .await;
    assert!(c
        .get_alert_text()
        .await
        .expect("asks")
        .contains("Purge every"));
    c.dismiss_alert().await.expect("say no");
    assert_eq!(dead().await, 2, "purged after a no");
    click(
        &c,
        Locator::XPath("//button[text()='Purge all']"),
        "Purge all",
    )
    .await;
    confirm(&c).await;
    until_page_says(&c, "Purged 2 dead letters.", false).await;
    assert_eq!(dead().await, 0);
    c.close().await.expect("close the browser");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_is_created_and_edited_through_its_form_and_a_refusal_keeps_what_was_typed() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), None).await;
    let driver = Driver::start();
    let c = driver.browser().await;
    log_in(&c, &console, "/webhooks").await;
    click(&c, Locator::LinkText("New webhook"), "New webhook").await;
    until_page_says(&c, "What it sends", false).await;

    // A URL the network policy refuses: the form again, with the reason
    // and everything typed (but the secret).
    fill(&c, "input[name=name]", "orders").await;
    fill(&c, "input[name=entity_type]", ENTITY).await;
    fill(&c, "input[name=event]", "on_submit").await;
    fill(
        &c,
        "input[name=request_url]",
        "http://169.254.169.254/latest",
    )
    .await;
    fill(
        &c,
        "textarea[name=headers]",
        "Authorization: Bearer keep-me",
    )
    .await;
    fill(&c, "input[name=secret]", "form-secret-value").await;
    fill(&c, "input[name=max_concurrency]", "4").await;
    click(
        &c,
        Locator::XPath("//button[text()='Create webhook']"),
        "Create",
    )
    .await;
    until_page_says(&c, "internal address", false).await;
    let problem = text_of(&c, ".problem").await;
    assert!(problem.contains("type it again"), "{problem}");
    assert_eq!(value_of(&c, "input[name=name]").await, "orders");
    assert_eq!(
        value_of(&c, "input[name=request_url]").await,
        "http://169.254.169.254/latest"
    );
    assert_eq!(
        value_of(&c, "textarea[name=headers]").await,
        "Authorization: Bearer keep-me"
    );
    assert_eq!(value_of(&c, "input[name=max_concurrency]").await, "4");
    assert_eq!(
        value_of(&c, "input[name=secret]").await,
        "",
        "never sent back"
    );
    assert!(env.stored_webhooks().is_empty(), "a refused form stored");
    shoot(&c, "webhook-form.png").await;

    // Put right: created, and listed.
    fill(&c, "input[name=request_url]", &receiver.url("/orders")).await;
    fill(&c, "input[name=secret]", "form-secret-value").await;
    click(
        &c,
        Locator::XPath("//button[text()='Create webhook']"),
        "Create",
    )
    .await;
    until_page_says(&c, "Created webhook orders.", false).await;
    c.goto(&console.url("/webhooks")).await.expect("webhooks");
    element(
        &c,
        Locator::XPath("//td/a[text()='orders']"),
        "orders in the list",
    )
    .await;
    let stored = &env.stored_webhooks()[0];
    assert_eq!(stored.max_concurrency, Some(4));
    assert!(stored.secret.is_some(), "signed");

    // Edit: the header shows [hidden] and keeps its value; the secret
    // field left empty keeps the secret.
    click(&c, Locator::LinkText("orders"), "the webhook").await;
    click(&c, Locator::LinkText("Edit"), "Edit").await;
    until_page_says(&c, "Remove the secret", false).await;
    assert_eq!(
        value_of(&c, "textarea[name=headers]").await.trim(),
        "Authorization: [hidden]"
    );
    assert_eq!(
        value_of(&c, "input[name=request_url]").await,
        receiver.url("/orders")
    );
    fill(&c, "input[name=timeout]", "30s").await;
    fill(&c, "input[name=max_retries]", "7").await;
    click(&c, Locator::XPath("//button[text()='Save']"), "Save").await;
    until_page_says(&c, "Saved webhook orders.", false).await;
    let stored = &env.stored_webhooks()[0];
    assert_eq!(stored.timeout(), Duration::from_secs(30));
    assert_eq!(stored.max_retries, 7);
    let headers = stored.header_list().expect("the stored headers open");
    assert_eq!(headers[0].value, "Bearer keep-me", "the hidden value kept");
    assert!(stored.secret.is_some(), "the secret kept");

    // The form fits a phone.
    c.set_window_size(390, 844).await.expect("phone size");
    c.goto(&console.url("/webhooks/orders/edit"))
        .await
        .expect("edit");
    until_page_says(&c, "What it sends", false).await;
    let over = overflow(&c).await;
    assert!(over <= 0, "the form is wider than a phone by {over} px");
    shoot(&c, "phone-form.png").await;
    c.close().await.expect("close the browser");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_shows_the_body_and_a_test_send_reaches_the_receiver_signed() {
    let env = TestEnv::new();
    let receiver = Receiver::start().await;
    receiver.verify_with(&["page-test-secret"]);
    let mut s = spec("orders", ENTITY, "on_submit", &receiver.url("/orders"));
    s.secret = Some(hookfleet_core::domain::Secret::new("page-test-secret"));
    s.condition = Some("doc.grand_total > 100".into());
    s.body_template =
        Some(r#"{"order": {{ doc.name | tojson }}, "total": {{ doc.grand_total }}}"#.into());
    env.add_webhook(&s);
    let worker = env.start_worker(2, RetrySchedule::parse("1h").expect("schedule"));
    let console = ConsoleServer::start(&env, Some(FULL_TOKEN), None).await;
    let driver = Driver::start();
    let c = driver.browser().await;
    log_in(&c, &console, "/webhooks/orders").await;
    until_page_says(&c, "Send test", false).await;
    let sample = value_of(&c, "textarea[name=doc]").await;
    assert!(
        sample.contains("SAMPLE-0001") && sample.contains(ENTITY),
        "{sample}"
    );
    let doc = |total: u32| {
        format!(r#"{{"doctype": "{ENTITY}", "name": "SO-T1", "grand_total": {total}}}"#)
    };

    // Preview: the condition's verdict and the body; nothing recorded.
    fill(&c, "textarea[name=doc]", &doc(500)).await;
    click(&c, Locator::XPath("//button[text()='Preview']"), "Preview").await;
    until_page_says(&c, "nothing was recorded or sent", false).await;
    let body = text_of(&c, ".preview-body").await;
    assert!(body.contains("\"order\": \"SO-T1\""), "{body}");
    assert_eq!(text_of(&c, ".preview .tag.ok").await, "met");
    assert_eq!(value_of(&c, "textarea[name=doc]").await, doc(500), "kept");
    assert!(env.rows().is_empty(), "a preview recorded");
    shoot(&c, "webhook-test.png").await;

    // A document the condition refuses: said so, nothing sent.
    fill(&c, "textarea[name=doc]", &doc(5)).await;
    click(
        &c,
        Locator::XPath("//button[text()='Send test']"),
        "Send test",
    )
    .await;
    assert!(confirm(&c).await.contains("a real, signed delivery"));
    until_page_says(&c, "does not meet the webhook's condition", false).await;
    assert!(
        env.rows().is_empty(),
        "a test the condition refused recorded"
    );

    // One it meets: a real delivery, its page shown, signed at the receiver.
    fill(&c, "textarea[name=doc]", &doc(500)).await;
    click(
        &c,
        Locator::XPath("//button[text()='Send test']"),
        "Send test",
    )
    .await;
    confirm(&c).await;
    until_page_says(&c, "Test event sent to orders", false).await;
    let rows = env
        .until_rows("the test delivered", |rows| {
            rows.len() == 1 && rows[0].status == DeliveryStatus::Delivered
        })
        .await;
    assert_eq!(rows[0].entity_name, "SO-T1");
    let got = receiver.wait_for(1, Duration::from_secs(30)).await;
    assert_eq!(got[0].json()["order"], "SO-T1");
    got[0].assert_signatures_verified("the test send");
    until_page_says(&c, "Delivered", true).await;
    assert!(text_of(&c, "h1").await.contains(&rows[0].id.to_string()));

    // The webhook's page, its test panel and deliveries, fit a phone.
    c.set_window_size(390, 844).await.expect("phone size");
    c.goto(&console.url("/webhooks/orders"))
        .await
        .expect("webhook");
    until_page_says(&c, "Send test", false).await;
    let over = overflow(&c).await;
    assert!(over <= 0, "the page is wider than a phone by {over} px");
    shoot(&c, "phone-webhook.png").await;
    c.close().await.expect("close the browser");
    worker.stop().await;
}
