//! The errors hookfleet-core returns. Callers match on them: a worker retries
//! a `StoreError::Unavailable` with backoff but dead-letters a bad job; the CLI
//! turns a `ValidationError` into exit code 1 with its message.
//!
//! No variant ever carries a webhook secret or a connection URL: messages are
//! built from our own words and the server's message, never from row values.

use std::fmt;

/// A webhook definition (or one of its fields) that hookfleet refuses.
/// The message is meant for the operator who typed the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError(pub String);

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ValidationError {}

/// Why a request could not be built from a document. Recorded on the row
/// (status Exhausted) when it happens at emit time.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum RenderError {
    #[error("{0}")]
    Template(String),
    #[error("body template did not render to JSON: {0}")]
    NotJson(String),
    #[error("request URL is not valid: {0}")]
    Url(String),
    #[error("request body is {size} bytes, over the {limit}-byte limit")]
    BodyTooLarge { size: usize, limit: usize },
}

/// Postgres could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database did not answer (down, restarting, pool exhausted): worth
    /// retrying with backoff.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The database answered with an error.
    #[error("database error: {0}")]
    Query(#[from] diesel::result::Error),
    #[error("{0} not found")]
    NotFound(String),
    /// The operation is not allowed in the row's current state.
    #[error("{0}")]
    Refused(String),
    #[error("migration failed: {0}")]
    Migration(String),
}

impl StoreError {
    /// True when the failure is the database's availability, not the request:
    /// the caller should keep what it holds and try again.
    pub fn is_transient(&self) -> bool {
        use diesel::result::{DatabaseErrorKind as Kind, Error as E};
        match self {
            StoreError::Unavailable(_) => true,
            StoreError::Query(E::DatabaseError(kind, info)) => {
                matches!(kind, Kind::ClosedConnection | Kind::SerializationFailure)
                    || TRANSIENT_MESSAGES
                        .iter()
                        .any(|m| info.message().contains(m))
            }
            StoreError::Query(E::BrokenTransactionManager) => true,
            StoreError::Query(other) => {
                let text = other.to_string();
                TRANSIENT_MESSAGES.iter().any(|m| text.contains(m))
            }
            _ => false,
        }
    }
}

/// What libpq and Postgres say when the server went away or is restarting.
const TRANSIENT_MESSAGES: &[&str] = &[
    "terminating connection",
    "server closed the connection",
    "no connection to the server",
    "connection to server",
    "could not connect",
    "the database system is",
    "Connection refused",
    "could not receive data from server",
    "could not send data to server",
];

impl From<diesel::r2d2::PoolError> for StoreError {
    fn from(e: diesel::r2d2::PoolError) -> Self {
        StoreError::Unavailable(e.to_string())
    }
}

/// Redis could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("redis unavailable: {0}")]
    Unavailable(String),
    #[error("redis error: {0}")]
    Command(#[from] redis::RedisError),
}

impl From<deadpool_redis::PoolError> for QueueError {
    fn from(e: deadpool_redis::PoolError) -> Self {
        QueueError::Unavailable(e.to_string())
    }
}

/// A setting (flag or environment variable) that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);
