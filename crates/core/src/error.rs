//! The errors hookfleet-core returns. Callers match on them: a worker retries
//! a `StoreError::Unavailable` with backoff but dead-letters a bad job; the
//! console answers a `StoreError::NotFound` with a 404. (A definition
//! refused before it is stored is `hookfleet-admin`'s `ValidationError`.)
//!
//! No variant ever carries a webhook secret or a connection URL: messages are
//! built from our own words and the server's message, never from row values.

/// Why a request could not be built from a document. Recorded on the row
/// (status Exhausted) when it happens at emit time.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RenderError {
    #[error("{0}")]
    Template(String),
    /// A template failed for want of a value this document lacks (an
    /// undefined field, a child row that is not there, none in arithmetic):
    /// the document's fault as much as the template's, so validation on a
    /// sample document with only a name lets it pass, as Frappe does; a
    /// real document that gives it records the reason on its row.
    #[error("{0}")]
    WantsValue(String),
    /// A template used up its instructions (`what` names it).
    #[error("{what}: ran out of fuel (its limit of {limit} instructions)")]
    OutOfFuel { what: String, limit: u64 },
    #[error("body template did not render to JSON: {0}")]
    NotJson(String),
    #[error("request URL is not valid: {0}")]
    Url(String),
    #[error("request body is {size} bytes, over the {limit}-byte limit")]
    BodyTooLarge { size: usize, limit: usize },
    /// A template ran past its time limit and its renderer was stopped.
    #[error("a template ran longer than its limit of {limit_ms} ms")]
    TimeLimit { limit_ms: u64 },
    /// A template's renderer ran out of memory (or died).
    #[error("a template used more than its memory limit of {limit_mib} MiB")]
    MemoryLimit { limit_mib: u64 },
    /// The template's renderer died while rendering it, twice (or the
    /// template language failed inside it): the template's failure, not
    /// the renderers'.
    #[error("the template crashed its renderer: {0}")]
    Crashed(String),
    /// The renderer could not be started or reached.
    #[error("template renderer: {0}")]
    Renderer(String),
}

/// Postgres could not do what was asked. [`crate::store::Store`] sorts every
/// failure by the connection's state, never by the message's words (which a
/// localized server translates): the database did not answer
/// ([`StoreError::Unavailable`]: keep what you hold and retry), or it answered
/// and refused this statement while the connection still works
/// ([`StoreError::Rejected`]: the same statement fails the same way).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database did not answer (down, restarting, the connection lost,
    /// the pool exhausted): worth retrying with backoff.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The database refused this statement and still answers others: its
    /// data or its shape is at fault, not the database's availability.
    #[error("the database refused the statement: {0}")]
    Rejected(diesel::result::Error),
    /// Any other failure of a query (a result that does not decode, say):
    /// nothing says whether trying again helps.
    #[error("database error: {0}")]
    Query(#[from] diesel::result::Error),
    #[error("{0} not found")]
    NotFound(String),
    /// The operation is not allowed in the current state.
    #[error("{0}")]
    Refused(Refusal),
    #[error("migration failed: {0}")]
    Migration(String),
    /// The schema lacks migrations this binary needs.
    #[error("the database schema is older than this binary (missing {0}): run hookfleet migrate")]
    OldSchema(String),
}

/// Why an operation was refused; the message says what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("a webhook named {0:?} already exists")]
    NameTaken(String),
    #[error("delivery {0} was already Delivered; replay it anyway with --force")]
    AlreadyDelivered(i64),
    #[error("delivery {0} has an attempt in flight; try again once it is recorded")]
    InFlight(i64),
    #[error("delivery {0} is Queued: its first attempt is already on its way")]
    NotYetAttempted(i64),
    #[error("Queued rows are already on their way; nothing to replay")]
    BulkQueued,
    /// An outcome was not written: the row was claimed again, replayed or
    /// given up while the attempt was out.
    #[error("delivery {0} was taken over while its attempt was in flight; this attempt's outcome was not recorded")]
    Fenced(i64),
    /// A query stopped by its time limit (a search no index serves).
    #[error(
        "the search took longer than {}s; narrow it (a webhook, a status, a time range)",
        .0.as_secs()
    )]
    TooSlow(std::time::Duration),
    #[error("webhook {0:?} has no secret rotation open")]
    NoRotation(String),
    #[error("a stored value of webhook {0:?} cannot be opened: {1}")]
    Unsealable(String, String),
    /// A pause reason that is empty, too long or not printable (the
    /// limit is `domain::MAX_PAUSE_REASON_CHARS`, carried here so
    /// that this module depends on no other).
    #[error("a pause reason is 1 to {max_chars} characters of printable text")]
    PauseReason { max_chars: usize },
    /// An event id already recorded for another event: a retry of the same
    /// event is a duplicate, a different event under its id is a mistake
    /// that would otherwise be dropped silently.
    #[error("event id {event_id:?} already names another event ({existing}); give each event its own id")]
    EventIdReused { event_id: String, existing: String },
}

impl StoreError {
    /// True when the failure is the database's availability, not the request:
    /// the caller should keep what it holds and try again.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

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
    /// REDIS_URL or HOOKFLEET_REDIS_CLUSTER cannot be used.
    #[error("{0}")]
    Config(String),
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
