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
) -> Result<serde_json::Value, String> {
    use std::io::Read;
    let mut text = String::new();
    reader
        .take(MAX_DOCUMENT_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {source}: {e}"))?;
    if text.len() > MAX_DOCUMENT_BYTES {
        return Err(format!("the document is over {MAX_DOCUMENT_BYTES} bytes"));
    }
    let doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{source} is not JSON: {e}"))?;
    if !doc.is_object() {
        return Err("the document is not a JSON object".into());
    }
    Ok(doc)
}

/// A fresh event id, sent as `webhook-id`: `msg_` and a time-ordered UUID.
pub fn new_event_id() -> String {
    format!("msg_{}", uuid::Uuid::now_v7().simple())
}

/// Checks an event id chosen by the caller (for idempotent emits).
pub fn check_event_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 128 {
        return Err("an event id has 1 to 128 characters".into());
    }
    if !id.chars().all(|c| c.is_ascii_graphic()) {
        return Err(format!(
            "event id {id:?} may only use printable ASCII without spaces"
        ));
    }
    Ok(())
}
