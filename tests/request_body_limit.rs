//! The README's limit on a request body built for a delivery, ≤ 1 MiB,
//! tested just over and exactly at the limit for every way of building a
//! body (the whole document, selected fields, a template, a form), and
//! enforced while rendering: a template that would render gigabytes is
//! stopped at the limit, not after.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use hookfleet_core::domain::RetrySchedule;
use hookfleet_core::domain::{DeliveryStatus, FieldMapping, Structure};
use hookfleet_core::request::MAX_BODY_BYTES;
use hookfleet_producer::Event;
use hookfleet_testkit::{bin_path, run_within, spec, Receiver, TestEnv, ENTITY, NOWHERE};

/// How long the producer may take over a template rendering gigabytes: a
/// limit that is not enforced must fail the test, not hang it.
const WAIT: Duration = Duration::from_secs(20);

/// A document whose `big` field is `len` bytes.
fn big_doc(len: usize) -> Value {
    json!({ "big": "x".repeat(len) })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_one_mebibyte_is_exhausted_without_a_request_and_one_at_the_limit_is_delivered()
{
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    let big = || {
        vec![FieldMapping {
            field: "big".into(),
            key: "big".into(),
        }]
    };
    let whole = spec("whole", "Upload", "whole", &rx.url("/whole"));
    let mut fields = spec("fields", "Upload", "fields", &rx.url("/fields"));
    fields.fields = big();
    let mut template = spec("template", "Upload", "template", &rx.url("/template"));
    template.body_template = Some(r#"{"big":{{ doc.big|tojson }}}"#.into());
    let mut form = spec("form", "Upload", "form", &rx.url("/form"));
    form.structure = Structure::Form;
    form.fields = big();
    for s in [&whole, &fields, &template, &form] {
        env.add_webhook(s);
    }
    // The bytes each way of building the body adds around `big`:
    // `{"big":"` + `"}` for JSON, `big=` for a form.
    let kinds = [("whole", 10), ("fields", 10), ("template", 10), ("form", 4)];
    let producer = env.producer();

    for (event, overhead) in kinds {
        let doc = big_doc(MAX_BODY_BYTES - overhead + 1);
        let report = producer
            .emit(Event::new("Upload", event, "over", doc))
            .await
            .unwrap();
        assert_eq!(report.deliveries.len(), 1, "{event}: {report:?}");
        let d = &report.deliveries[0];
        assert_eq!(d.status.as_str(), "Exhausted", "{event}: {d:?}");
        assert!(!d.enqueued, "{event}: an over-long body was queued");
        let row = env.row(d.id);
        assert_eq!(row.status, DeliveryStatus::Exhausted, "{event}");
        assert!(row.next_retry.is_none(), "{event}");
        let error = row.error.unwrap_or_default();
        assert!(
            error.contains("limit") && error.contains(&MAX_BODY_BYTES.to_string()),
            "{event}: the reason names the limit: {error}"
        );
    }
    assert_eq!(
        env.queue_depth("default"),
        0,
        "nothing queued for an over-long body"
    );

    let mut at_limit = Vec::new();
    for (event, overhead) in kinds {
        let doc = big_doc(MAX_BODY_BYTES - overhead);
        let report = producer
            .emit(Event::new("Upload", event, "at", doc))
            .await
            .unwrap();
        let d = &report.deliveries[0];
        assert_eq!(
            d.status.as_str(),
            "Queued",
            "{event}: a body of exactly {MAX_BODY_BYTES} bytes is refused: {d:?}"
        );
        assert!(d.enqueued, "{event}");
        at_limit.push(d.id);
    }
    assert_eq!(env.queue_depth("default"), 4);

    let worker = env.start_worker(4, RetrySchedule::default());
    for &id in &at_limit {
        env.until_row(id, |r| r.status == DeliveryStatus::Delivered)
            .await;
    }
    worker.stop().await;
    let got = rx.requests();
    assert_eq!(got.len(), 4, "only the bodies at the limit were sent");
    for r in &got {
        assert_eq!(r.body.len(), MAX_BODY_BYTES, "{}", r.path);
    }
}

#[test]
fn a_template_that_would_render_gigabytes_is_stopped_at_the_body_limit_not_after() {
    // Eighty strings of 100 MB (minijinja's largest repeat): 8 GB of output
    // from a template that uses a few hundred instructions, far inside the
    // fuel. A hard body limit stops the render at 1 MiB; checking the size
    // after rendering needs the 8 GB first. The producer runs with 3 GiB of
    // address space, plenty for everything but building such a body.
    let env = TestEnv::new();
    let mut s = spec("gigabytes", ENTITY, "on_submit", &format!("{NOWHERE}/x"));
    s.body_template =
        Some(r#"{"x": "{% for i in range(80) %}{{ "x" * 100000000 }}{% endfor %}"}"#.into());
    env.add_webhook_unvalidated(&s);

    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"ulimit -v 3145728 && exec "$0" "$@""#)
        .arg(bin_path("hookfleet-producer"))
        .args([
            "emit",
            "--entity-type",
            ENTITY,
            "--event",
            "on_submit",
            "--name",
            "SO-1",
            "--json",
        ]);
    for (k, v) in env.envs() {
        cmd.env(k, v);
    }
    let out = run_within(cmd, WAIT, "hookfleet-producer emit");
    assert_eq!(
        out.code,
        Some(0),
        "the producer did not survive a template rendering 8 GB: {out}"
    );
    let rows = env.rows();
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(rows[0].status, DeliveryStatus::Exhausted);
    let error = rows[0].error.clone().unwrap_or_default();
    assert!(
        error.contains(&MAX_BODY_BYTES.to_string()) || error.contains("limit"),
        "{error}"
    );
    assert_eq!(env.queue_depth("default"), 0);
}
