//! Micro-benchmarks: signing, request rendering, schedule computation, job
//! (de)serialisation. `cargo bench -p hookfleet-bench`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use hookfleet_bench::{sample_order, webhook};
use hookfleet_core::domain::Structure;
use hookfleet_core::domain::{
    frappe_signature, signature_headers, standard_signature, Secret, SigningKeys,
};
use hookfleet_core::domain::{parse_retry_after, RetrySchedule};
use hookfleet_core::queue::Job;
use hookfleet_core::request::NetworkPolicy;
use hookfleet_core::request::{RequestBuilder, Templates};
use hookfleet_template::Compiled;

fn signing(c: &mut Criterion) {
    let body = sample_order().to_string();
    let secret = Secret::new("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD");
    let mut g = c.benchmark_group("sign");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("frappe", |b| {
        b.iter(|| frappe_signature(black_box(&secret), black_box(body.as_bytes())))
    });
    g.bench_function("standard_webhooks", |b| {
        b.iter(|| {
            standard_signature(
                black_box(&secret),
                "msg_01",
                1_700_000_000,
                black_box(body.as_bytes()),
            )
        })
    });
    let rotating = SigningKeys {
        current: Some(secret.clone()),
        previous: Some(Secret::new("old-secret")),
    };
    g.bench_function("all_headers_during_rotation", |b| {
        b.iter(|| {
            signature_headers(
                black_box(&rotating),
                "msg_01",
                1_700_000_000,
                black_box(body.as_bytes()),
            )
        })
    });
    g.finish();
}

fn rendering(c: &mut Criterion) {
    let doc = sample_order();
    let policy = NetworkPolicy::default();
    let template = r#"{"order": "{{ doc.name }}", "customer": "{{ doc.customer }}", "total": {{ doc.grand_total }},
        "items": [{% for i in doc["items"] %}{"sku": "{{ i.sku }}", "qty": {{ i.qty }}}{% if not loop.last %},{% endif %}{% endfor %}]}"#;
    // Rendering itself, as the renderer process does it (in-process here:
    // the sandbox's round trip is measured end to end by scripts/bench.sh).
    let templates = Templates {
        condition: Some("doc.grand_total > 0".into()),
        body: Some(template.into()),
        url: None,
        lenient: false,
        python_text: false,
    };
    let compiled = Compiled::compile(&templates).unwrap();
    let builder = |w| RequestBuilder::new(w, false);
    let templated = builder(webhook(Some(template), &[], Structure::Json));
    let rendered = compiled.render_all(&doc).unwrap();
    let selected = builder(webhook(
        None,
        &[
            ("name", "order"),
            ("customer", "customer"),
            ("grand_total", "total"),
        ],
        Structure::Json,
    ));
    let form = builder(webhook(
        None,
        &[("name", "order"), ("grand_total", "total")],
        Structure::Form,
    ));
    let whole = builder(webhook(None, &[], Structure::Json));
    let mut g = c.benchmark_group("render");
    g.bench_function("condition_and_jinja_json_template", |b| {
        b.iter(|| compiled.render_all(black_box(&doc)).unwrap())
    });
    g.bench_function("check_rendered_json_body", |b| {
        b.iter(|| {
            templated
                .build(black_box(&doc), Some(&rendered), &policy)
                .unwrap()
        })
    });
    g.bench_function("json_field_selection", |b| {
        b.iter(|| selected.build(black_box(&doc), None, &policy).unwrap())
    });
    g.bench_function("form_field_selection", |b| {
        b.iter(|| form.build(black_box(&doc), None, &policy).unwrap())
    });
    g.bench_function("whole_document", |b| {
        b.iter(|| whole.build(black_box(&doc), None, &policy).unwrap())
    });
    g.bench_function("compile_templates", |b| {
        b.iter(|| Compiled::compile(black_box(&templates)).unwrap())
    });
    g.finish();
}

fn schedule(c: &mut Criterion) {
    let s = RetrySchedule::default();
    let now = chrono::Utc::now();
    let mut g = c.benchmark_group("schedule");
    g.bench_function("next_delay", |b| {
        b.iter(|| s.delay_with_retry_after(black_box(3), black_box(Some(Duration::from_secs(600)))))
    });
    g.bench_function("retry_after_seconds", |b| {
        b.iter(|| parse_retry_after(black_box("120"), now))
    });
    g.bench_function("retry_after_http_date", |b| {
        b.iter(|| parse_retry_after(black_box("Mon, 30 Nov 2026 12:10:00 GMT"), now))
    });
    g.bench_function("parse_schedule", |b| {
        b.iter(|| RetrySchedule::parse(black_box("5m,30m,2h,5h,10h,10h")).unwrap())
    });
    g.finish();
}

fn jobs(c: &mut Criterion) {
    let job = Job::new(123_456_789);
    let raw = job.encode();
    let mut g = c.benchmark_group("job");
    g.bench_function("encode", |b| b.iter(|| black_box(&job).encode()));
    g.bench_function("decode", |b| {
        b.iter(|| Job::decode(black_box(&raw)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, signing, rendering, schedule, jobs);
criterion_main!(benches);
