//! Request signing, afresh on every attempt.
//!
//! Two schemes, both over the body bytes exactly as sent:
//! - Frappe-compatible `X-Frappe-Webhook-Signature`: standard padded base64 of
//!   HMAC-SHA256(secret as UTF-8, body). A **string**: the seed's bug stored it
//!   as raw bytes, which came back from the log row as an integer array and
//!   broke every retry. It is never stored here; each attempt recomputes it.
//! - Standard Webhooks `webhook-signature: v1,<base64>` over
//!   `id.timestamp.body` (a `whsec_` secret is base64-decoded first), one
//!   signature per active secret while a secret is being rotated.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

pub const HEADER_FRAPPE_SIGNATURE: &str = "X-Frappe-Webhook-Signature";
pub const HEADER_ID: &str = "webhook-id";
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
pub const HEADER_SIGNATURE: &str = "webhook-signature";

/// A signing secret. Its `Debug` and `Display` never show the value, so a
/// secret cannot reach a log line or an error message by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself: only for signing and for storing.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The HMAC key for Standard Webhooks: the base64 payload of a `whsec_`
    /// secret, otherwise the secret's UTF-8 bytes.
    fn standard_key(&self) -> Vec<u8> {
        match self.0.strip_prefix("whsec_") {
            Some(encoded) => STANDARD
                .decode(encoded)
                .unwrap_or_else(|_| self.0.as_bytes().to_vec()),
            None => self.0.as_bytes().to_vec(),
        }
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Random bytes in a `whsec_` secret: what the Standard Webhooks libraries
/// generate (24 is their floor; 32 matches an HMAC-SHA256 key).
pub const GENERATED_SECRET_BYTES: usize = 32;

/// A new signing secret in the Standard Webhooks form (`whsec_` and the
/// base64 of [`GENERATED_SECRET_BYTES`] random bytes from the operating
/// system), which every official library takes as it is.
pub fn generate_secret() -> String {
    let bytes = crate::domain::at_rest::random_bytes::<GENERATED_SECRET_BYTES>();
    format!("whsec_{}", STANDARD.encode(bytes))
}

/// Is `secret` usable with the Standard Webhooks scheme? A `whsec_` secret must
/// carry valid base64.
pub fn check_secret(secret: &str) -> Result<(), SecretError> {
    if secret.is_empty() {
        return Err(SecretError::Empty);
    }
    if let Some(encoded) = secret.strip_prefix("whsec_") {
        if STANDARD
            .decode(encoded)
            .map(|k| k.is_empty())
            .unwrap_or(true)
        {
            return Err(SecretError::BadWhsec);
        }
    }
    Ok(())
}

/// Why a signing secret cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("the secret is empty")]
    Empty,
    #[error("a secret starting with whsec_ must continue with non-empty base64")]
    BadWhsec,
}

fn hmac_base64(key: &[u8], parts: &[&[u8]]) -> String {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    for part in parts {
        mac.update(part);
    }
    STANDARD.encode(mac.finalize().into_bytes())
}

/// Frappe's `X-Frappe-Webhook-Signature` value for `body`.
pub fn frappe_signature(secret: &Secret, body: &[u8]) -> String {
    hmac_base64(secret.expose().as_bytes(), &[body])
}

/// One Standard Webhooks signature, `v1,<base64>`.
pub fn standard_signature(secret: &Secret, id: &str, timestamp: i64, body: &[u8]) -> String {
    let ts = timestamp.to_string();
    let sig = hmac_base64(
        &secret.standard_key(),
        &[id.as_bytes(), b".", ts.as_bytes(), b".", body],
    );
    format!("v1,{sig}")
}

/// The secrets that sign a webhook's requests right now: the current one and,
/// while a rotation is open, the previous one. Standard Webhooks lists a
/// signature by each; the Frappe header, which carries one, keeps the
/// previous one (the one receivers know) until the rotation finishes.
#[derive(Debug, Clone, Default)]
pub struct SigningKeys {
    pub current: Option<Secret>,
    pub previous: Option<Secret>,
}

/// The headers every attempt carries: `webhook-id`, `webhook-timestamp`, and
/// when a secret is set the two signatures.
pub fn signature_headers(
    keys: &SigningKeys,
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        (HEADER_ID, id.to_string()),
        (HEADER_TIMESTAMP, timestamp.to_string()),
    ];
    if let Some(current) = &keys.current {
        let frappe = keys.previous.as_ref().unwrap_or(current);
        headers.push((HEADER_FRAPPE_SIGNATURE, frappe_signature(frappe, body)));
        let mut sigs = vec![standard_signature(current, id, timestamp, body)];
        if let Some(previous) = &keys.previous {
            sigs.push(standard_signature(previous, id, timestamp, body));
        }
        headers.push((HEADER_SIGNATURE, sigs.join(" ")));
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_secret_is_a_fresh_valid_whsec_of_32_bytes() {
        let secret = generate_secret();
        assert_eq!(check_secret(&secret), Ok(()));
        let key = Secret::new(secret.clone()).standard_key();
        assert_eq!(key.len(), GENERATED_SECRET_BYTES);
        assert_ne!(secret, generate_secret());
    }

    #[test]
    fn standard_webhooks_vector_one() {
        let s = Secret::new("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD");
        let sig = standard_signature(
            &s,
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1649367553,
            br#"{"email":"test@example.com","username":"test_user"}"#,
        );
        assert_eq!(sig, "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=");
    }

    #[test]
    fn standard_webhooks_vector_two() {
        let s = Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let sig = standard_signature(
            &s,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn frappe_signature_is_padded_base64_string_stable_across_attempts() {
        let s = Secret::new("frappe-secret");
        let a = frappe_signature(&s, br#"{"name":"SO-1"}"#);
        let b = frappe_signature(&s, br#"{"name":"SO-1"}"#);
        assert_eq!(a, b);
        assert_eq!(a.len(), 44, "32-byte HMAC in padded base64");
        assert!(a.ends_with('='));
        assert!(STANDARD.decode(&a).is_ok());
    }

    #[test]
    fn rotation_lists_one_signature_per_secret() {
        let keys = SigningKeys {
            current: Some(Secret::new("new")),
            previous: Some(Secret::new("old")),
        };
        let headers = signature_headers(&keys, "msg_1", 1, b"{}");
        let sig = &headers
            .iter()
            .find(|(k, _)| *k == HEADER_SIGNATURE)
            .unwrap()
            .1;
        assert_eq!(sig.split(' ').count(), 2);
        assert!(sig.contains(&standard_signature(&Secret::new("old"), "msg_1", 1, b"{}")));
    }

    #[test]
    fn no_secret_means_no_signature_but_id_and_timestamp() {
        let headers = signature_headers(&SigningKeys::default(), "msg_1", 1, b"{}");
        let names: Vec<_> = headers.iter().map(|(k, _)| *k).collect();
        assert_eq!(names, vec![HEADER_ID, HEADER_TIMESTAMP]);
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("hunter2");
        assert!(!format!("{s:?} {s}").contains("hunter2"));
    }

    #[test]
    fn whsec_secrets_must_be_base64() {
        assert!(check_secret("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").is_ok());
        assert!(check_secret("whsec_!!!").is_err());
        assert!(check_secret("plain").is_ok());
        assert!(check_secret("").is_err());
    }
}
