//! The README's limit on a receiver's answer kept on the row: the first
//! 4 KiB of the body as it was sent, cut there even inside a character, and
//! never a credential of the request a receiver echoes back.

use serde_json::json;

use hookfleet_core::attempt::RESPONSE_BODY_LIMIT;
use hookfleet_core::domain::{DeliveryLog, DeliveryStatus};
use hookfleet_testkit::{Reply, Scenario};

/// Emits one event to a receiver answering 500 with `answer`; returns the
/// row once the attempt is recorded.
async fn stored_answer(answer: &str) -> DeliveryLog {
    let (env, rx, worker) = Scenario::webhook("chatty", "/chatty")
        .replying(Reply::status(500).body(answer))
        .start()
        .await;
    let row = env
        .submit_doc_until(json!({"name": "SO-1"}), DeliveryStatus::Failed)
        .await;
    worker.stop().await;
    assert_eq!(row.response_code, Some(500));
    assert_eq!(rx.count(), 1);
    row
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_kib_response_body_is_stored_cut_to_exactly_four_kibibytes() {
    let answer: String = (0..100 * 1024)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let row = stored_answer(&answer).await;
    let stored = row.response_body.expect("a response body");
    assert_eq!(stored.len(), RESPONSE_BODY_LIMIT);
    assert_eq!(stored, answer.as_bytes()[..RESPONSE_BODY_LIMIT]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multibyte_response_body_cut_inside_a_character_is_stored_as_its_first_four_kibibytes() {
    // "a" then two-byte characters: byte 4096 is the first half of an "é".
    let answer = format!("a{}", "é".repeat(50 * 1024));
    assert!(!answer.is_char_boundary(RESPONSE_BODY_LIMIT));
    let row = stored_answer(&answer).await;
    let stored = row.response_body.clone().expect("a response body");
    assert_eq!(
        stored,
        answer.as_bytes()[..RESPONSE_BODY_LIMIT],
        "the bytes as sent, cut at the limit"
    );
    let shown = row.response_text().expect("text");
    assert!(
        shown.ends_with('\u{FFFD}'),
        "the cut character shows as U+FFFD"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_echoes_its_request_leaves_no_credential_on_the_row() {
    let header = |key: &str, value: &str| hookfleet_core::domain::Header {
        key: key.into(),
        value: value.into(),
    };
    let (env, rx, worker) = Scenario::webhook("echo", "/echo")
        .with(|s| {
            s.headers = vec![
                header("Authorization", "Bearer s3cret-t0ken-value"),
                header("X-Api-Key", "another-secret-key"),
            ]
        })
        .replying(Reply::status(500).echoing_headers())
        .start()
        .await;
    let row = env.submit_until("SO-1", DeliveryStatus::Failed).await;
    worker.stop().await;
    let got = rx.requests();
    assert_eq!(
        got[0].header("authorization"),
        Some("Bearer s3cret-t0ken-value"),
        "the receiver was sent the credential"
    );
    let stored =
        String::from_utf8_lossy(row.response_body.as_deref().unwrap_or_default()).into_owned();
    assert!(stored.contains("[hidden]"), "{stored}");
    for secret in ["s3cret-t0ken-value", "another-secret-key"] {
        assert!(!stored.contains(secret), "{secret} stored: {stored}");
    }
    assert!(stored.contains("webhook-id"), "the rest is kept: {stored}");
}
