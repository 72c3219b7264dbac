//! Credentials at rest: webhook signing secrets and static header values
//! are stored sealed with AES-256-GCM when a key is configured, so a copy of
//! the database (a backup, a `pg_dump`, a replica) holds none of them.
//!
//! The key comes from `HOOKFLEET_SECRET_KEY` (32 bytes, base64) or the file
//! `HOOKFLEET_SECRET_KEY_FILE` names; older keys, still accepted for opening,
//! from `HOOKFLEET_SECRET_KEY_OLD` (comma-separated). `hookfleet secrets
//! reencrypt` seals every stored value with the current key, after which
//! the old ones can go. Without a key, values are stored as they are, and
//! every binary says so once at start.
//!
//! A sealed value reads `hfenc:v1:<key id>:<base64 of nonce ‖ ciphertext>`,
//! the key id being the first four bytes of the key's SHA-256 (in hex), so a
//! value names the key that opens it without revealing anything about it.
//! The purpose (a signing secret, a header value) is bound in as associated
//! data, so a sealed value cannot be moved from one column to another.

use std::sync::RwLock;

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use sha2::{Digest, Sha256};

use crate::error::ConfigError;

/// What every sealed value starts with.
pub const SEALED_PREFIX: &str = "hfenc:";

const VERSION: &str = "v1";

/// The environment variables the keys are read from (by the settings every
/// binary shares), named in messages about them.
pub const KEY_ENV: &str = "HOOKFLEET_SECRET_KEY";
pub(crate) const OLD_KEYS_ENV: &str = "HOOKFLEET_SECRET_KEY_OLD";

/// What a sealed value is, bound into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A webhook's signing secret (current or previous).
    SigningSecret,
    /// A webhook's static header value.
    HeaderValue,
}

impl Purpose {
    fn aad(self) -> &'static [u8] {
        match self {
            Purpose::SigningSecret => b"hookfleet webhook signing secret",
            Purpose::HeaderValue => b"hookfleet webhook header value",
        }
    }
}

/// One AES-256 key and its id.
#[derive(Clone)]
struct SealingKey {
    id: String,
    cipher: Aes256Gcm,
}

impl SealingKey {
    fn from_base64(text: &str, what: &str) -> Result<SealingKey, ConfigError> {
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|_| ConfigError(format!("{what} is not base64")))?;
        if bytes.len() != 32 {
            return Err(ConfigError(format!(
                "{what} is {} bytes; a key is 32 bytes (base64 of 32 random bytes, e.g. `openssl rand -base64 32`)",
                bytes.len()
            )));
        }
        let id = hex(&Sha256::digest(&bytes)[..4]);
        Ok(SealingKey {
            id,
            cipher: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&bytes)),
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The keys a process seals and opens with.
#[derive(Clone, Default)]
pub struct Keyring {
    current: Option<SealingKey>,
    old: Vec<SealingKey>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("current", &self.current.as_ref().map(|k| &k.id))
            .field("old", &self.old.iter().map(|k| &k.id).collect::<Vec<_>>())
            .finish()
    }
}

/// Why a stored value could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("it was sealed with key {0}, which is not configured (set HOOKFLEET_SECRET_KEY or HOOKFLEET_SECRET_KEY_OLD)")]
    UnknownKey(String),
    #[error("it is sealed but damaged, or sealed for another use")]
    Damaged,
}

impl Keyring {
    /// A keyring from the key texts given (base64), current first.
    pub fn new(current: Option<&str>, old: &[&str]) -> Result<Keyring, ConfigError> {
        Ok(Keyring {
            current: current
                .map(|k| SealingKey::from_base64(k, KEY_ENV))
                .transpose()?,
            old: old
                .iter()
                .map(|k| SealingKey::from_base64(k, OLD_KEYS_ENV))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Whether new values are sealed.
    pub fn seals(&self) -> bool {
        self.current.is_some()
    }

    /// The key ids among `ids` this keyring cannot open values with.
    pub fn missing<'a>(&self, ids: &'a [String]) -> Vec<&'a str> {
        ids.iter()
            .map(String::as_str)
            .filter(|id| {
                !self
                    .current
                    .iter()
                    .chain(self.old.iter())
                    .any(|k| k.id == *id)
            })
            .collect()
    }

    /// `plain` as it is to be stored: sealed with the current key, or as it
    /// is without one.
    pub fn seal(&self, plain: &str, purpose: Purpose) -> String {
        let Some(key) = &self.current else {
            return plain.to_string();
        };
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let sealed = key
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plain.as_bytes(),
                    aad: purpose.aad(),
                },
            )
            .expect("AES-GCM encryption of an in-memory value cannot fail");
        let mut blob = nonce.to_vec();
        blob.extend_from_slice(&sealed);
        format!(
            "{SEALED_PREFIX}{VERSION}:{}:{}",
            key.id,
            STANDARD.encode(blob)
        )
    }

    /// The plain value of `stored` (stored as it is, or sealed with any key
    /// of the ring).
    pub fn open(&self, stored: &str, purpose: Purpose) -> Result<String, OpenError> {
        let Some(rest) = stored.strip_prefix(SEALED_PREFIX) else {
            return Ok(stored.to_string());
        };
        let mut parts = rest.splitn(3, ':');
        let (Some(VERSION), Some(id), Some(data)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(OpenError::Damaged);
        };
        let key = self
            .current
            .iter()
            .chain(self.old.iter())
            .find(|k| k.id == id)
            .ok_or_else(|| OpenError::UnknownKey(id.to_string()))?;
        let blob = STANDARD.decode(data).map_err(|_| OpenError::Damaged)?;
        if blob.len() < 12 {
            return Err(OpenError::Damaged);
        }
        let (nonce, sealed) = blob.split_at(12);
        let plain = key
            .cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: purpose.aad(),
                },
            )
            .map_err(|_| OpenError::Damaged)?;
        String::from_utf8(plain).map_err(|_| OpenError::Damaged)
    }

    /// Whether `stored` is sealed with the current key already (or stored
    /// as it is, with no key to seal with): nothing for `reencrypt` to do.
    pub fn is_current(&self, stored: &str) -> bool {
        match (&self.current, stored.strip_prefix(SEALED_PREFIX)) {
            (None, None) => true,
            (None, Some(_)) => false,
            (Some(_), None) => false,
            (Some(key), Some(rest)) => rest
                .strip_prefix(VERSION)
                .and_then(|r| r.strip_prefix(':'))
                .is_some_and(|r| r.starts_with(&format!("{}:", key.id))),
        }
    }
}

static RING: RwLock<Option<Keyring>> = RwLock::new(None);

/// Makes `ring` the process's keyring (binaries do this once at start).
pub fn install(ring: Keyring) {
    *RING.write().expect("keyring lock") = Some(ring);
}

/// The process's keyring (empty until installed: values stored as they are).
pub fn keyring() -> Keyring {
    RING.read()
        .expect("keyring lock")
        .clone()
        .unwrap_or_default()
}

/// A new key for `HOOKFLEET_SECRET_KEY`: the base64 of 32 random bytes.
pub fn generate_key() -> String {
    STANDARD.encode(random_bytes::<32>())
}

/// `N` bytes from the operating system's random source (session keys,
/// CSRF secrets, generated secrets and keys).
pub fn random_bytes<const N: usize>() -> [u8; N] {
    use aes_gcm::aead::rand_core::RngCore;
    let mut out = [0u8; N];
    OsRng.fill_bytes(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const K2: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

    #[test]
    fn a_sealed_value_opens_with_its_key_and_names_it() {
        let ring = Keyring::new(Some(K1), &[]).unwrap();
        let sealed = ring.seal("hunter2", Purpose::SigningSecret);
        assert!(sealed.starts_with("hfenc:v1:"), "{sealed}");
        assert!(!sealed.contains("hunter2"));
        assert_ne!(
            sealed,
            ring.seal("hunter2", Purpose::SigningSecret),
            "a fresh nonce each time"
        );
        assert_eq!(
            ring.open(&sealed, Purpose::SigningSecret).unwrap(),
            "hunter2"
        );
        assert_eq!(
            ring.open(&sealed, Purpose::HeaderValue),
            Err(OpenError::Damaged),
            "bound to its purpose"
        );
    }

    #[test]
    fn an_old_key_still_opens_and_an_unknown_one_is_named() {
        let old = Keyring::new(Some(K1), &[]).unwrap();
        let sealed = old.seal("token", Purpose::HeaderValue);
        let rotated = Keyring::new(Some(K2), &[K1]).unwrap();
        assert_eq!(
            rotated.open(&sealed, Purpose::HeaderValue).unwrap(),
            "token"
        );
        assert!(!rotated.is_current(&sealed));
        assert!(rotated.is_current(&rotated.seal("token", Purpose::HeaderValue)));
        let forgot = Keyring::new(Some(K2), &[]).unwrap();
        assert!(matches!(
            forgot.open(&sealed, Purpose::HeaderValue),
            Err(OpenError::UnknownKey(_))
        ));
    }

    #[test]
    fn without_a_key_values_are_stored_as_they_are() {
        let ring = Keyring::default();
        assert_eq!(ring.seal("plain", Purpose::SigningSecret), "plain");
        assert_eq!(ring.open("plain", Purpose::SigningSecret).unwrap(), "plain");
    }

    #[test]
    fn a_key_that_is_not_32_bytes_is_refused() {
        assert!(Keyring::new(Some("c2hvcnQ="), &[]).is_err());
        assert!(Keyring::new(Some("not base64!"), &[]).is_err());
    }
}
