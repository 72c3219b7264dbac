//! Postgres, through sync diesel on a small r2d2 pool. Every call from async
//! code goes through [`Store::run`], which moves it onto tokio's blocking
//! threads (PITFALLS 6): a slow query never stalls a worker's deliveries.
//!
//! - `webhooks`: subscriptions and the config version producers cache on.
//! - `deliveries`: delivery rows (emit, claim, outcome, sweep, replay) and
//!   what the operator reads (list, show, stats).
//! - `health`: per-webhook health kept as outcomes are recorded, and the
//!   auto-pause.
//! - `retention`: pruning terminal rows past their retention.

pub mod deliveries;
pub mod health;
pub mod retention;
pub mod schema;
pub mod webhooks;

use std::time::Duration;

use diesel::connection::{CacheSize, Connection};
use diesel::pg::PgConnection;
use diesel::r2d2::{ConnectionManager, ManageConnection, Pool, PooledConnection};
use diesel::RunQueryDsl;
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};

use crate::error::StoreError;

pub(crate) const MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations");

/// How long a caller waits for a pooled connection (or a new one) before the
/// database counts as unavailable: long enough for a busy pool to hand one
/// back, short enough that a down database is reported within seconds.
pub(crate) const POOL_CHECKOUT_TIMEOUT: Duration = Duration::from_secs(5);

/// libpq's settings for a network that fails, added to a `postgres://` URL
/// that does not set them. Without them a connection cut off mid-statement
/// waits as long as the kernel retransmits (about 15 minutes): a worker
/// partitioned from Postgres would hold its jobs, silent, long after the
/// partition healed. With them a write whose bytes go unacknowledged for
/// 30 s fails (the worker logs it and retries), an idle wait for an answer
/// finds a dead peer within a minute (keepalives after 30 s, every 10 s,
/// three missed), and a connection attempt gives up after 10 s. All are
/// the client's own settings: nothing reaches the server or a pooler.
pub(crate) const NETWORK_DEFAULTS: &[(&str, &str)] = &[
    ("connect_timeout", "10"),
    ("tcp_user_timeout", "30000"),
    ("keepalives", "1"),
    ("keepalives_idle", "30"),
    ("keepalives_interval", "10"),
    ("keepalives_count", "3"),
];

/// `url` with [`NETWORK_DEFAULTS`] it does not set added (a key=value
/// connection string is left as it is).
pub(crate) fn with_network_defaults(url: &str) -> String {
    let Some(scheme_end) = ["postgres://", "postgresql://"]
        .iter()
        .find(|s| url.starts_with(*s))
        .map(|s| s.len())
    else {
        return url.to_string();
    };
    // As libpq reads a URI: the credentials run to the first '@' met before
    // any '/', so a password may hold '?' or '#'; the parameters start at
    // the first '?' after them (libpq has no fragments).
    let after = &url[scheme_end..];
    let host_at = match after.find(['@', '/']) {
        Some(i) if after.as_bytes()[i] == b'@' => scheme_end + i + 1,
        _ => scheme_end,
    };
    let query = url[host_at..]
        .find('?')
        .map_or("", |i| &url[host_at + i + 1..]);
    let set: Vec<&str> = query
        .split('&')
        .filter_map(|kv| kv.split('=').next())
        .collect();
    let mut out = url.to_string();
    let mut separator = if url[host_at..].contains('?') {
        if url.ends_with('?') || url.ends_with('&') {
            ""
        } else {
            "&"
        }
    } else {
        "?"
    };
    for (key, value) in NETWORK_DEFAULTS {
        if !set.contains(key) {
            out.push_str(separator);
            out.push_str(key);
            out.push('=');
            out.push_str(value);
            separator = "&";
        }
    }
    out
}

/// Arbitrary but fixed key of the advisory lock that serialises `migrate`
/// across processes ("hookflt" in ASCII).
const MIGRATION_LOCK_KEY: i64 = 0x0068_6f6f_6b66_6c74;

pub type Conn = PooledConnection<Manager>;

/// A pooled connection that remembers whether it saw the server go away, so
/// the pool drops it instead of handing a dead socket to the next caller
/// (diesel's own manager cannot tell after a Postgres restart).
pub struct TrackedConnection {
    conn: PgConnection,
    broken: bool,
}

impl std::ops::Deref for TrackedConnection {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        &self.conn
    }
}

impl std::ops::DerefMut for TrackedConnection {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.conn
    }
}

/// r2d2 manager for [`TrackedConnection`]s.
pub struct Manager(ConnectionManager<PgConnection>);

impl ManageConnection for Manager {
    type Connection = TrackedConnection;
    type Error = diesel::r2d2::Error;

    fn connect(&self) -> Result<TrackedConnection, Self::Error> {
        let mut conn = self.0.connect()?;
        // No named prepared statements: diesel then sends every statement
        // with its parameters in one round trip (PQsendQueryParams), which a
        // pooler in transaction mode without prepared-statement support
        // (PgBouncer 1.18, Debian's) carries to whichever server connection
        // it picks. Our hot statements are raw SQL, which diesel never
        // prepared by name anyway (docs/PERFORMANCE.md has the cost).
        conn.set_prepared_statement_cache_size(CacheSize::Disabled);
        Ok(TrackedConnection {
            conn,
            broken: false,
        })
    }

    fn is_valid(&self, conn: &mut TrackedConnection) -> Result<(), Self::Error> {
        self.0.is_valid(&mut conn.conn)
    }

    fn has_broken(&self, conn: &mut TrackedConnection) -> bool {
        conn.broken || self.0.has_broken(&mut conn.conn)
    }
}

/// The Postgres store.
#[derive(Clone)]
pub struct Store {
    pool: Pool<Manager>,
    /// Why the pool last failed to open a connection: a caller that times
    /// out waiting for one is told the server's reason, not only "timed
    /// out".
    last_error: LastError,
}

/// The pool's last connection error (r2d2 otherwise drops it), with the
/// URL's password blotted out: libpq may quote the connection string.
#[derive(Clone, Debug)]
struct LastError {
    last: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    url: std::sync::Arc<str>,
}

impl LastError {
    fn new(url: &str) -> LastError {
        LastError {
            last: Default::default(),
            url: url.into(),
        }
    }

    fn get(&self) -> Option<String> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl diesel::r2d2::HandleError<diesel::r2d2::Error> for LastError {
    fn handle_error(&self, error: diesel::r2d2::Error) {
        let said = without_password(&error.to_string(), &self.url);
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(said);
    }
}

impl Store {
    /// A pool of at most `max_connections`. Connections open lazily, so a
    /// process starts while the database is down and says so on first use.
    pub fn connect(database_url: &str, max_connections: u32) -> Result<Store, StoreError> {
        let manager = Manager(ConnectionManager::<PgConnection>::new(
            with_network_defaults(database_url),
        ));
        let last_error = LastError::new(database_url);
        let pool = Pool::builder()
            .max_size(max_connections.max(1))
            .min_idle(Some(0))
            .connection_timeout(POOL_CHECKOUT_TIMEOUT)
            .test_on_check_out(false)
            .error_handler(Box::new(last_error.clone()))
            .build_unchecked(manager);
        Ok(Store { pool, last_error })
    }

    /// As [`Store::connect`], but opens a connection now and fails at once,
    /// with the server's reason, when the database refuses it or does not
    /// exist (a command a person typed, not a process that waits out an
    /// outage).
    pub fn connect_now(database_url: &str, max_connections: u32) -> Result<Store, StoreError> {
        // libpq quotes a connection string it cannot read, password and all:
        // anything but a postgres URL is refused in our own words.
        let scheme = database_url.split_once("://").map(|(s, _)| s);
        if !matches!(scheme, Some("postgres" | "postgresql")) {
            return Err(StoreError::Unavailable(format!(
                "DATABASE_URL is not a postgres:// URL{}",
                scheme.map_or(String::new(), |s| format!(
                    " (its scheme is {:?})",
                    s.chars().take(20).collect::<String>()
                ))
            )));
        }
        if let Err(e) = PgConnection::establish(&with_network_defaults(database_url)) {
            return Err(StoreError::Unavailable(without_password(
                e.to_string().trim(),
                database_url,
            )));
        }
        Store::connect(database_url, max_connections)
    }

    /// A pooled connection, or why none came: the pool's time limit, with
    /// the last reason a new connection failed.
    fn checkout(&self) -> Result<Conn, StoreError> {
        self.pool
            .get()
            .map_err(|e| unavailable(e, &self.last_error))
    }

    /// A connection for synchronous callers (the CLI, tests).
    pub fn conn(&self) -> Result<Conn, StoreError> {
        self.checkout()
    }

    /// Runs `f` with a connection on the calling thread (the CLI, tests).
    pub fn run_sync<T>(
        &self,
        f: impl FnOnce(&mut PgConnection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.checkout()?;
        let result = f(&mut conn.conn);
        classify(&mut conn, result)
    }

    /// Runs `f` with a connection on a blocking thread.
    pub async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut PgConnection) -> Result<T, StoreError> + Send + 'static,
    {
        let pool = self.pool.clone();
        let last_error = self.last_error.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = pool.get().map_err(|e| unavailable(e, &last_error))?;
            let result = f(&mut conn.conn);
            classify(&mut conn, result)
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("database task failed: {e}")))?
    }

    /// Whether Postgres answers `SELECT 1` within `within`, waiting for a
    /// pooled connection no longer than that (readiness: a probe must not
    /// pile up blocked threads while the database is down).
    pub async fn ping(&self, within: std::time::Duration) -> Result<(), StoreError> {
        let pool = self.pool.clone();
        let last_error = self.last_error.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = pool
                .get_timeout(within)
                .map_err(|e| unavailable(e, &last_error))?;
            diesel::sql_query("SELECT 1").execute(&mut conn.conn)?;
            Ok(())
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("the ping task failed: {e}")))?
    }

    /// Refuses a schema older than this binary: `Err(Refused)` naming the
    /// migrations it lacks and saying to run `hookfleet migrate`. Other
    /// errors (Postgres unreachable) are the caller's to judge.
    pub fn check_schema(&self) -> Result<(), StoreError> {
        // Read, never create: diesel's pending_migrations creates its table
        // if missing, which a role without DDL rights may not do.
        #[derive(diesel::QueryableByName)]
        struct Applied {
            #[diesel(sql_type = diesel::sql_types::Text)]
            version: String,
        }
        self.run_sync(|conn| {
            let applied: Vec<Applied> =
                diesel::sql_query("SELECT version FROM __diesel_schema_migrations")
                    .load(conn)
                    .or_else(|e| match e {
                        // No table at all: nothing was ever migrated.
                        diesel::result::Error::DatabaseError(_, ref info)
                            if info.message().contains("does not exist") =>
                        {
                            Ok(Vec::new())
                        }
                        other => Err(other),
                    })?;
            let applied: std::collections::HashSet<String> =
                applied.into_iter().map(|a| a.version).collect();
            let migrations =
                diesel::migration::MigrationSource::<diesel::pg::Pg>::migrations(&MIGRATIONS)
                    .map_err(|e| StoreError::Migration(e.to_string()))?;
            let missing: Vec<String> = migrations
                .iter()
                .filter(|m| !applied.contains(&m.name().version().to_string()))
                .map(|m| m.name().to_string())
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(StoreError::OldSchema(missing.join(", ")))
            }
        })
    }

    /// Applies pending migrations; returns the names applied. Safe when
    /// several processes run it at once (an advisory lock serialises them) and
    /// a no-op when the schema is current. All of them run in one
    /// transaction holding a transaction-scoped lock, so it also works
    /// through a pooler in transaction mode and an upgrade applies whole or
    /// not at all.
    pub fn migrate(&self) -> Result<Vec<String>, StoreError> {
        self.run_sync(migrate)
    }
}

/// `message` with the password of `url` (if any) blotted out, for a
/// server's or libpq's words that might quote it.
fn without_password(message: &str, url: &str) -> String {
    let mut secrets = Vec::new();
    if let Some(p) = url::Url::parse(url)
        .ok()
        .and_then(|u| u.password().map(str::to_string))
    {
        // As written in the URL, and as libpq reads it (percent-decoded).
        let decoded =
            url::form_urlencoded::parse(format!("p={}", p.replace('+', "%2B")).as_bytes())
                .next()
                .map(|(_, v)| v.into_owned());
        secrets.extend(decoded);
        secrets.push(p);
    }
    // A key=value connection string: `password=secret` or `password='se cret'`.
    if let Some(rest) = url.split("password").nth(1) {
        let value = rest.trim_start().trim_start_matches('=').trim_start();
        let value = match value.strip_prefix('\'') {
            Some(quoted) => quoted.split('\'').next().unwrap_or(""),
            None => value.split_whitespace().next().unwrap_or(""),
        };
        secrets.push(value.to_string());
    }
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets
        .iter()
        .filter(|s| !s.is_empty())
        .fold(message.to_string(), |m, s| m.replace(s.as_str(), "***"))
}

/// A pool that gave no connection, with the last reason one could not be
/// opened (the server's words), when there is one.
fn unavailable(e: diesel::r2d2::PoolError, last: &LastError) -> StoreError {
    match last.get() {
        Some(reason) => StoreError::Unavailable(format!("{e} ({})", reason.trim())),
        None => StoreError::Unavailable(e.to_string()),
    }
}

/// Sorts a failed query by the state of its connection and the kind diesel
/// reads from the SQLSTATE (DESIGN: never by the words of the message). A
/// lost connection is [`StoreError::Unavailable`] and is not reused; so is a
/// serialization failure or a read-only server. Otherwise the connection is
/// asked a trivial question: if it answers, the database refused this
/// statement ([`StoreError::Rejected`]: its data, or a passing conflict such
/// as a deadlock or a statement timeout, which callers retry a few times
/// before treating it as final); if not, it is unavailable.
fn classify<T>(
    conn: &mut TrackedConnection,
    result: Result<T, StoreError>,
) -> Result<T, StoreError> {
    use diesel::result::{DatabaseErrorKind as Kind, Error as E};
    let error = match result {
        Ok(v) => return Ok(v),
        Err(StoreError::Query(e)) => e,
        Err(e) => {
            conn.broken |= e.is_transient();
            return Err(e);
        }
    };
    match error {
        E::DatabaseError(Kind::ClosedConnection, info) => {
            conn.broken = true;
            Err(StoreError::Unavailable(info.message().to_string()))
        }
        // A conflict with a concurrent transaction, or a server that is (for
        // now) a read-only standby after a failover: the same statement
        // succeeds later.
        E::DatabaseError(Kind::SerializationFailure | Kind::ReadOnlyTransaction, info) => {
            Err(StoreError::Unavailable(info.message().to_string()))
        }
        E::BrokenTransactionManager => {
            conn.broken = true;
            Err(StoreError::Unavailable(
                "the connection was left in a broken transaction".into(),
            ))
        }
        e @ E::DatabaseError(..) => {
            if diesel::sql_query("SELECT 1")
                .execute(&mut conn.conn)
                .is_ok()
            {
                Err(StoreError::Rejected(e))
            } else {
                conn.broken = true;
                Err(StoreError::Unavailable(e.to_string()))
            }
        }
        other => Err(StoreError::Query(other)),
    }
}

/// [`Store::migrate`] on a given connection.
pub fn migrate(conn: &mut PgConnection) -> Result<Vec<String>, StoreError> {
    conn.transaction(|conn| {
        diesel::sql_query(format!(
            "SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"
        ))
        .execute(conn)?;
        conn.run_pending_migrations(MIGRATIONS)
            .map(|applied| applied.iter().map(|m| m.to_string()).collect())
            .map_err(|e| StoreError::Migration(e.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_blotted_out_as_written_decoded_or_in_key_value_form() {
        let said = "cannot parse \"postgres://u:s%40cret@db\" (s@cret) nor password=hunter2";
        let out = without_password(said, "postgres://u:s%40cret@db/app");
        assert!(
            !out.contains("s%40cret") && !out.contains("s@cret"),
            "{out}"
        );
        let out = without_password(said, "host=db password=hunter2 dbname=app");
        assert!(!out.contains("hunter2"), "{out}");
        let out = without_password("x 'two words' y", "host=db password='two words'");
        assert_eq!(out, "x '***' y");
    }

    #[test]
    fn a_url_gets_the_network_defaults_it_does_not_set() {
        assert_eq!(
            with_network_defaults("postgres://u:p@db:5432/app"),
            "postgres://u:p@db:5432/app?connect_timeout=10&tcp_user_timeout=30000&keepalives=1&keepalives_idle=30&keepalives_interval=10&keepalives_count=3"
        );
        let own =
            with_network_defaults("postgresql://db/app?sslmode=require&tcp_user_timeout=5000");
        assert!(
            own.starts_with(
                "postgresql://db/app?sslmode=require&tcp_user_timeout=5000&connect_timeout=10"
            ),
            "{own}"
        );
        assert_eq!(own.matches("tcp_user_timeout").count(), 1, "{own}");
        assert_eq!(
            with_network_defaults("host=db dbname=app"),
            "host=db dbname=app"
        );
        // A password may hold '?' and '#' (libpq takes it to the '@').
        assert_eq!(
            with_network_defaults("postgres://u:pa?s#s@db/app"),
            format!(
                "postgres://u:pa?s#s@db/app?{}",
                with_network_defaults("postgres://h")
                    .split_once('?')
                    .unwrap()
                    .1
            )
        );
        assert!(
            with_network_defaults("postgres://u:p?w@db/app?connect_timeout=3")
                .starts_with("postgres://u:p?w@db/app?connect_timeout=3&tcp_user_timeout=30000")
        );
    }
}
