//! `hookfleet-producer emit` from the command line, run as a real process:
//! a document from a file or stdin, NDJSON batches with their malformed and
//! over-long lines reported by number, what it refuses (documents that are
//! not JSON objects, documents over 4 MiB), the rows and jobs it writes, and
//! its exit code when a workflow_transition fails.

use serde_json::{json, Value};

use hookfleet_core::domain::DeliveryStatus;
use hookfleet_producer::emit::MAX_DOCUMENT_BYTES;
use hookfleet_testkit::{
    blocking, delivery_ids, event_json, json_of_size, Receiver, Reply, Run, TempFile, TestEnv,
    ENTITY,
};

// ---------------------------------------------------------------------------
// 1. A document from a file or stdin; NDJSON batches.
// ---------------------------------------------------------------------------

#[test]
fn emit_with_a_doc_file_prints_the_created_rows_as_json() {
    let env = TestEnv::new();
    env.add_quiet_webhook("erp", "on_submit");
    env.add_quiet_webhook("crm", "on_submit");
    let doc = json!({"name": "SO-1", "customer": "ACME", "grand_total": 12.5});
    let file = TempFile::new(doc.to_string());
    let mut cmd = env.emit_command("on_submit", "SO-1");
    cmd.args(["--doc", file.path()]);
    let report = hookfleet_testkit::run_with_stdin(cmd, None)
        .ok("emit")
        .json();

    assert_eq!(report["events"], 1, "{report}");
    let deliveries = report["deliveries"].as_array().expect("deliveries");
    assert_eq!(deliveries.len(), 2, "{report}");
    let mut hooks: Vec<&str> = deliveries
        .iter()
        .map(|d| d["webhook"].as_str().expect("webhook"))
        .collect();
    hooks.sort();
    assert_eq!(hooks, vec!["crm", "erp"]);
    for d in deliveries {
        assert_eq!(d["status"], "Queued", "{d}");
        assert_eq!(d["enqueued"], true, "{d}");
        assert_eq!(d["duplicate"], false, "{d}");
        assert!(d["event_id"].as_str().is_some_and(|e| !e.is_empty()), "{d}");
    }
    let mut ids = delivery_ids(&report);
    ids.sort();
    let rows = env.rows();
    assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), ids);
    for row in &rows {
        assert_eq!(row.status, DeliveryStatus::Queued);
        assert_eq!(row.entity_name, "SO-1");
        assert_eq!(
            serde_json::from_str::<Value>(&row.body).expect("JSON body"),
            doc
        );
    }
    assert_eq!(env.queue_depth("default"), 2);
}

#[test]
fn emit_with_doc_dash_reads_the_document_from_stdin() {
    let env = TestEnv::new();
    env.add_quiet_webhook("erp", "on_submit");
    let doc = json!({"name": "SO-7", "items": [{"sku": "A"}], "grand_total": 3});
    let report = env.emit_by_cli("on_submit", "SO-7", &doc).ok("emit").json();
    let ids = delivery_ids(&report);
    assert_eq!(ids.len(), 1, "{report}");
    let row = env.row(ids[0]);
    assert_eq!(row.entity_name, "SO-7");
    assert_eq!(
        serde_json::from_str::<Value>(&row.body).expect("JSON body"),
        doc
    );
}

#[test]
fn emit_refuses_a_document_that_is_not_a_json_object_and_records_nothing() {
    let env = TestEnv::new();
    env.add_quiet_webhook("erp", "on_submit");
    let array_file = TempFile::new("[1, 2, 3]");
    let base = [
        "emit",
        "--entity-type",
        "Sales Order",
        "--event",
        "on_submit",
        "--name",
        "SO-1",
        "--json",
        "--doc",
    ];
    let cases: Vec<(&str, &str, Option<&str>, &str)> = vec![
        (
            "an array in a file",
            array_file.path(),
            None,
            "not a JSON object",
        ),
        (
            "a string on stdin",
            "-",
            Some("\"just text\""),
            "not a JSON object",
        ),
        ("a number on stdin", "-", Some("42"), "not a JSON object"),
        (
            "text that is not JSON",
            "-",
            Some("{name: SO-1"),
            "not JSON",
        ),
    ];
    for (what, source, stdin, says) in cases {
        let mut args = base.to_vec();
        args.push(source);
        let out = env.producer_cli(&args, stdin);
        assert_eq!(out.code, Some(1), "{what}: {out}");
        assert!(out.stderr.contains(says), "{what}: {out}");
        assert!(env.rows().is_empty(), "{what}: a row was recorded");
    }
    assert_eq!(env.queue_depth("default"), 0);
}

#[test]
fn emit_batch_emits_the_good_lines_and_reports_each_malformed_line_by_number() {
    let env = TestEnv::new();
    env.add_quiet_webhook("erp", "on_submit");
    let lines = [
        r#"{"entity_type": "Sales Order", "event": "on_submit", "name": "A", "doc": {"name": "A"}}"#,
        r#"this is not JSON"#,
        r#"{"entity_type": "Sales Order", "event": "on_submit", "doc": {"name": "no-name"}}"#,
        "",
        r#"{"entity_type": "Sales Order", "event": "on_submit", "name": "D", "doc": [1, 2]}"#,
        r#"{"entity_type": "Sales Order", "event": "on_submit", "name": "B"}"#,
        r#"{"entity_type": "Sales Order", "event": "on_submit", "name": "C", "doc": {"name": "C", "x": 1}}"#,
    ];
    let file = TempFile::new(lines.join("\n") + "\n");

    let out = env.producer_cli(&["emit", "--batch", file.path()], None);
    assert_eq!(out.code, Some(1), "malformed lines make exit code 1: {out}");
    for bad in [2, 3, 5] {
        assert!(
            out.stderr.contains(&format!("line {bad}:")),
            "line {bad} is not reported: {out}"
        );
    }
    for good in [1, 4, 6, 7] {
        assert!(
            !out.stderr.contains(&format!("line {good}:")),
            "line {good} is reported as malformed: {out}"
        );
    }
    assert!(out.stderr.contains("missing field `name`"), "{out}");
    assert!(out.stderr.contains("not a JSON object"), "{out}");
    let mut names: Vec<String> = env.rows().into_iter().map(|r| r.entity_name).collect();
    names.sort();
    assert_eq!(names, vec!["A", "B", "C"], "the good lines are emitted");

    let out = env.producer_cli(&["emit", "--batch", file.path(), "--json"], None);
    assert_eq!(out.code, Some(1), "{out}");
    let summary = out.json();
    let skipped: Vec<i64> = summary["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .map(|s| s["line"].as_i64().expect("line"))
        .collect();
    assert_eq!(skipped, vec![2, 3, 5], "{summary}");
    assert!(
        summary["skipped"]
            .as_array()
            .expect("skipped")
            .iter()
            .all(|s| s["error"].as_str().is_some_and(|e| !e.is_empty())),
        "each skipped line says why: {summary}"
    );
    assert_eq!(summary["events_emitted"], 3, "{summary}");
    assert_eq!(summary["totals"]["deliveries"], 3, "{summary}");
    assert_eq!(
        env.rows().len(),
        6,
        "the second run emitted its 3 good lines"
    );
}

// ---------------------------------------------------------------------------
// 2. Document accepted by emit ≤ 4 MiB.
// ---------------------------------------------------------------------------

/// `hookfleet-producer emit --doc FILE --json`.
fn emit_doc(env: &TestEnv, file: &TempFile) -> Run {
    let mut cmd = env.emit_command("on_submit", "SO-1");
    cmd.args(["--doc", file.path()]);
    Run::from(cmd.output().expect("run hookfleet-producer"))
}

#[test]
fn emit_refuses_a_document_over_four_mebibytes_and_takes_one_of_exactly_four() {
    let env = TestEnv::new();
    env.add_small_body_webhook("on_submit");
    let doc = |pad: String| json!({"name": "SO-1", "pad": pad});

    let over = TempFile::new(json_of_size(MAX_DOCUMENT_BYTES + 1, doc));
    let out = emit_doc(&env, &over);
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stderr.contains(&MAX_DOCUMENT_BYTES.to_string()),
        "the refusal names the limit: {out}"
    );
    assert!(env.rows().is_empty(), "a row was recorded: {out}");
    assert_eq!(env.queue_depth("default"), 0);

    let at = TempFile::new(json_of_size(MAX_DOCUMENT_BYTES, doc));
    let report = emit_doc(&env, &at).ok("emit of exactly 4 MiB").json();
    assert_eq!(report["deliveries"][0]["status"], "Queued", "{report}");
    assert_eq!(env.rows().len(), 1);
}

/// Runs `emit --batch FILE --json` over `lines` (one event per line).
fn emit_batch(env: &TestEnv, lines: &[String]) -> Run {
    let file = TempFile::new(lines.join("\n") + "\n");
    env.producer_cli(&["emit", "--batch", file.path(), "--json"], None)
}

/// Checks a batch whose line 2 was over-long: reported by number, skipped,
/// lines 1 and 3 emitted.
fn assert_only_line_two_skipped(env: &TestEnv, out: &Run) {
    assert_eq!(out.code, Some(1), "a skipped line makes exit code 1: {out}");
    assert!(
        out.stderr.contains("line 2:"),
        "line 2 is not reported: {out}"
    );
    assert!(
        !out.stderr.contains("line 1:") && !out.stderr.contains("line 3:"),
        "a good line is reported: {out}"
    );
    let summary = out.json();
    assert_eq!(summary["skipped"][0]["line"], 2, "{summary}");
    assert_eq!(summary["skipped"].as_array().map(Vec::len), Some(1));
    assert_eq!(summary["events_emitted"], 2, "{summary}");
    let mut names: Vec<String> = env.rows().into_iter().map(|r| r.entity_name).collect();
    names.sort();
    assert_eq!(names, vec!["A", "C"], "the lines around it are emitted");
}

#[test]
fn emit_batch_skips_a_line_over_four_mebibytes_by_number_and_emits_the_others() {
    let env = TestEnv::new();
    env.add_small_body_webhook("on_submit");
    let lines = [
        event_json("A", String::new()).to_string(),
        json_of_size(MAX_DOCUMENT_BYTES + 1, |pad| event_json("B", pad)),
        event_json("C", String::new()).to_string(),
    ];
    let out = emit_batch(&env, &lines);
    assert_only_line_two_skipped(&env, &out);
    assert!(
        out.stderr.contains(&MAX_DOCUMENT_BYTES.to_string()),
        "the report names the limit: {out}"
    );
}

#[test]
fn emit_batch_skips_an_over_long_line_of_non_ascii_text_like_any_other() {
    // The line is cut at the limit to be skipped; here the cut falls inside
    // a two-byte character, which must not turn a skipped line into a failed
    // read of the whole file.
    let env = TestEnv::new();
    env.add_small_body_webhook("on_submit");
    let mut prefix = String::from(
        r#"{"entity_type":"Sales Order","event":"on_submit","name":"B","doc":{"name":"B","pad":""#,
    );
    // The read stops after MAX_DOCUMENT_BYTES + 1 bytes (an odd count): with
    // an even prefix, the last byte read is the first half of an "é".
    if prefix.len() % 2 == 1 {
        prefix.insert(0, ' ');
    }
    let long = format!("{prefix}{}\"}}}}", "é".repeat(MAX_DOCUMENT_BYTES / 2 + 16));
    assert!(!long.is_char_boundary(MAX_DOCUMENT_BYTES + 1));
    let lines = [
        event_json("A", String::new()).to_string(),
        long,
        event_json("C", String::new()).to_string(),
    ];
    let out = emit_batch(&env, &lines);
    assert_only_line_two_skipped(&env, &out);
}

// ---------------------------------------------------------------------------
// 3. A failed workflow_transition fails the command.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_workflow_transition_emit_exits_1_and_leaves_the_row_exhausted() {
    let env = TestEnv::new();
    let rx = Receiver::start().await;
    rx.reply_always(Reply::status(500).body("boom"));
    let url = rx.url("/approve");
    blocking(|| {
        env.webhook_add("approve", ENTITY, "workflow_transition", &url, &[])
            .ok("webhook add")
    });
    let out = blocking(|| env.emit_by_cli("workflow_transition", "SO-1", &json!({"name": "SO-1"})));
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stderr.contains("workflow_transition failed"), "{out}");
    assert!(
        out.stderr.contains("500"),
        "the error says what happened: {out}"
    );
    let report = out.json();
    assert_eq!(report["deliveries"][0]["status"], "Exhausted", "{report}");

    let rows = env.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, DeliveryStatus::Exhausted);
    assert_eq!(rows[0].attempts, 1);
    assert_eq!(rows[0].response_code, Some(500));
    assert!(rows[0].next_retry.is_none());
    assert_eq!(rx.count(), 1, "exactly one request, no retry");
    assert_eq!(env.queue_depth("default"), 0, "nothing queued for later");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_the_database_refuses_fails_its_own_row_and_the_rest_of_the_batch_is_recorded() {
    let env = TestEnv::new();
    env.add_small_body_webhook("on_submit");
    // A refusal of a kind nothing in the producer foresees: the database
    // itself refuses any delivery whose body holds the word "poison".
    env.store
        .run_sync(|c| {
            use diesel::RunQueryDsl;
            diesel::sql_query(
                "ALTER TABLE webhook_request_logs ADD CONSTRAINT no_poison CHECK (body NOT LIKE '%poison%')",
            )
            .execute(c)?;
            Ok(())
        })
        .expect("add the constraint");
    let mut batch = hookfleet_producer::Batch::new();
    for name in ["SO-1", "SO-poison", "SO-3"] {
        batch.push(hookfleet_producer::Event::new(
            ENTITY,
            "on_submit",
            name,
            json!({"name": name}),
        ));
    }
    let report = env
        .producer()
        .emit_batch(batch)
        .await
        .expect("the batch is recorded");
    assert_eq!(report.deliveries.len(), 3, "{report:?}");
    let rows = env.rows();
    for row in &rows {
        if row.entity_name == "SO-poison" {
            assert_eq!(row.status, DeliveryStatus::Exhausted, "{row:?}");
            let error = row.error.as_deref().unwrap_or("");
            assert!(error.contains("refused this delivery"), "{row:?}");
            assert!(
                error.contains("no_poison"),
                "the reason names the refusal: {row:?}"
            );
            assert!(
                row.body.is_empty(),
                "the refused value is not kept: {row:?}"
            );
        } else {
            assert_eq!(row.status, DeliveryStatus::Queued, "{row:?}");
        }
    }
    assert_eq!(rows.len(), 3);

    // Still all or nothing: a later event reusing another event's id fails
    // the batch whole, and the rows before it (one recorded, one refused
    // alone) are not left behind for a retry to double.
    let mut batch = hookfleet_producer::Batch::new();
    for name in ["SO-4", "SO-poison-2", "SO-5"] {
        let mut e =
            hookfleet_producer::Event::new(ENTITY, "on_submit", name, json!({"name": name}));
        if name == "SO-5" {
            e.event_id = Some(rows[0].event_id.clone());
        }
        batch.push(e);
    }
    let err = env
        .producer()
        .emit_batch(batch)
        .await
        .expect_err("an event id reused");
    assert!(
        err.to_string().contains("already names another event"),
        "{err}"
    );
    assert_eq!(env.rows().len(), 3, "nothing of that batch was recorded");
}
