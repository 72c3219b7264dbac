//! An event as an application emits it: its id (the receiver's key for
//! dropping duplicates) and its document.

/// The largest document accepted: bodies are capped at 1 MiB, and a
/// document is rarely more than a few times its body.
pub const MAX_DOCUMENT_BYTES: usize = 4 * 1024 * 1024;

/// Reads one document (a JSON object) from `reader`, at most
/// [`MAX_DOCUMENT_BYTES`] of it: what `--doc FILE|-` takes. `source` names
/// the reader in errors.
pub fn read_document(
    reader: impl std::io::Read,
    source: &str,
) -> Result<serde_json::Value, DocumentError> {
    use std::io::Read;
    let mut text = String::new();
    reader
        .take(MAX_DOCUMENT_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|e| DocumentError::Unreadable {
            input: source.to_string(),
            reason: e.to_string(),
        })?;
    if text.len() > MAX_DOCUMENT_BYTES {
        return Err(DocumentError::TooLarge);
    }
    let doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| DocumentError::NotJson {
            input: source.to_string(),
            reason: e.to_string(),
        })?;
    if !doc.is_object() {
        return Err(DocumentError::NotAnObject);
    }
    Ok(doc)
}

/// Why a document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    #[error("cannot read {input}: {reason}")]
    Unreadable { input: String, reason: String },
    #[error("the document is over {MAX_DOCUMENT_BYTES} bytes")]
    TooLarge,
    #[error("{input} is not JSON: {reason}")]
    NotJson { input: String, reason: String },
    #[error("the document is not a JSON object")]
    NotAnObject,
}

/// Why an event id chosen by the caller was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventIdError {
    #[error("an event id has 1 to {MAX_EVENT_ID_BYTES} characters")]
    Length,
    #[error("event id {0:?} may only use printable ASCII without spaces")]
    Unprintable(String),
}

/// The longest event id: a receiver's deduplication key, not a document.
pub const MAX_EVENT_ID_BYTES: usize = 128;

/// A fresh event id, sent as `webhook-id`: `msg_` and a time-ordered UUID.
pub fn new_event_id() -> String {
    format!("msg_{}", uuid::Uuid::now_v7().simple())
}

/// Checks an event id chosen by the caller (for idempotent emits).
pub fn check_event_id(id: &str) -> Result<(), EventIdError> {
    if id.is_empty() || id.len() > MAX_EVENT_ID_BYTES {
        return Err(EventIdError::Length);
    }
    if !id.chars().all(|c| c.is_ascii_graphic()) {
        return Err(EventIdError::Unprintable(id.to_string()));
    }
    Ok(())
}
