//! The README's limits on one template render: `range` yields at most a
//! thousand numbers, and a render gets a fixed amount of work
//! (TEMPLATE_FUEL). A runaway template is refused by `webhook add` on the
//! sample document, and one stored by hand is recorded Exhausted at emit
//! within seconds, whether it spins in template code or inside filters.

use std::time::Duration;

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_template::{RANGE_LIMIT, TEMPLATE_FUEL};
use hookfleet_testkit::{run_within, spec, webhook_add_args, TestEnv, ENTITY, NOWHERE};

/// How long a render stopped by a limit may take, process start included:
/// the limit makes a runaway template cost milliseconds, while without it
/// the runaway loops below would run for many minutes; the bound is
/// generous so that a machine busy with other work passes as an idle one.
const QUICK: Duration = Duration::from_secs(60);

/// A billion iterations of plain template code, within the `range` cap and
/// printing nothing (so only the fuel can stop it, not an output limit).
const RUNAWAY_LOOPS: &str = "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}{% endfor %}{% endfor %}{% endfor %}";

// The runaway loops need over a hundred times the fuel a render gets.
const _: () = assert!(1000u64 * 1000 * 1000 > TEMPLATE_FUEL * 100);

#[test]
fn range_yields_at_most_a_thousand_numbers() {
    let env = TestEnv::new();
    let add = |name: &str, n: usize| {
        let template = format!(r#"{{"n": {{{{ range({n}) | length }}}}}}"#);
        let mut cmd = env.command("hookfleet");
        let url = format!("{NOWHERE}/x");
        cmd.args(webhook_add_args(
            name,
            ENTITY,
            "on_submit",
            &url,
            &["--body-template", &template],
        ));
        run_within(cmd, QUICK, "hookfleet webhook add")
    };
    let over = add("over", RANGE_LIMIT + 1);
    assert_eq!(over.code, Some(1), "{over}");
    assert!(over.stderr.contains("at most 1000"), "{over}");
    let at = add("at", RANGE_LIMIT);
    assert_eq!(at.code, Some(0), "{at}");
}

/// Ten billion steps too, but inside a filter: the template itself runs
/// about seven instructions per outer iteration, 700,000 in all.
const RUNAWAY_FILTERS: &str =
    "{% for a in range(100000) %}{% set s = range(100000)|join %}{% endfor %}";

#[test]
fn webhook_add_refuses_a_body_template_that_runs_out_of_fuel_on_the_sample() {
    let env = TestEnv::new();
    let template = format!(r#"{{"x": "{RUNAWAY_LOOPS}"}}"#);
    let mut cmd = env.command("hookfleet");
    cmd.args([
        "webhook",
        "add",
        "runaway",
        "--entity-type",
        ENTITY,
        "--event",
        "on_submit",
        "--url",
        &format!("{NOWHERE}/x"),
        "--body-template",
        &template,
    ]);
    let out = run_within(cmd, QUICK, "hookfleet webhook add");
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stderr.contains("fuel"),
        "the refusal says the template ran out of fuel: {out}"
    );
    assert!(
        env.stored_webhooks().is_empty(),
        "a refused webhook was written"
    );
}

#[test]
fn a_runaway_template_stored_by_hand_is_exhausted_at_emit_within_five_seconds() {
    let env = TestEnv::new();
    let mut body = spec("runaway-body", ENTITY, "on_submit", &format!("{NOWHERE}/x"));
    body.body_template = Some(format!(r#"{{"x": "{RUNAWAY_LOOPS}"}}"#));
    env.add_webhook_unvalidated(&body);
    let mut url = spec(
        "runaway-url",
        ENTITY,
        "on_submit",
        &format!("{NOWHERE}/{RUNAWAY_LOOPS}"),
    );
    url.dynamic_url = true;
    env.add_webhook_unvalidated(&url);

    let out = emit_within_quick(&env);
    let report = out.json();
    let deliveries = report["deliveries"].as_array().expect("deliveries");
    assert_eq!(deliveries.len(), 2, "{report}");
    for d in deliveries {
        assert_eq!(d["status"], "Exhausted", "{d}");
        assert_eq!(d["enqueued"], false, "{d}");
    }
    for row in env.rows() {
        assert_eq!(
            row.status,
            DeliveryStatus::Exhausted,
            "{}",
            row.webhook_name
        );
        let error = row.error.clone().unwrap_or_default();
        assert!(error.contains("fuel"), "{}: {error}", row.webhook_name);
    }
    assert_eq!(env.queue_depth("default"), 0);
}

/// `hookfleet-producer emit` of SO-1, which must end within [`QUICK`].
fn emit_within_quick(env: &TestEnv) -> hookfleet_testkit::Run {
    let cmd = env.emit_command("on_submit", "SO-1");
    run_within(cmd, QUICK, "hookfleet-producer emit").ok("emit")
}

#[test]
fn a_template_that_spins_inside_filters_is_stopped_within_five_seconds_too() {
    let env = TestEnv::new();
    let mut s = spec(
        "spins-in-filters",
        ENTITY,
        "on_submit",
        &format!("{NOWHERE}/x"),
    );
    s.body_template = Some(format!(r#"{{"x": "{RUNAWAY_FILTERS}"}}"#));
    env.add_webhook_unvalidated(&s);

    let out = emit_within_quick(&env);
    let rows = env.rows();
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(rows[0].status, DeliveryStatus::Exhausted);
    assert_eq!(env.queue_depth("default"), 0);
}
