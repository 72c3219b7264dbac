//! The console in a real browser: headless Chromium (Debian's) driven
//! through chromedriver over WebDriver, against a fleet with real
//! deliveries. A person logs in, finds a Failed delivery by its document's
//! name, presses Retry and sees it Delivered; pauses and resumes a webhook;
//! a POST without the CSRF token is refused; the pages fit a phone.
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

/// How many of the `<time>` elements `css` selects still show a raw
/// RFC 3339 time (the page's script shows each in the viewer's zone).
async fn raw_times(c: &Client, css: &str) -> i64 {
    c.execute(
        "return [...document.querySelectorAll(arguments[0])]
           .filter(t => /\\d{4}-\\d\\d-\\d\\dT\\d\\d:/.test(t.textContent)).length",
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
