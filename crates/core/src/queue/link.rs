//! How a process reaches Redis: one server (a pool of multiplexed
//! connections) or a Redis Cluster (the redis crate's own cluster client,
//! which sends each command to the node owning its keys' slot and follows
//! MOVED and ASK answers). `rediss://` URLs speak TLS through the system's
//! OpenSSL, so a private CA is trusted the way OpenSSL trusts one (the
//! system store, or `SSL_CERT_FILE`; README "Redis over TLS").
//!
//! Every script and every pipeline hookfleet sends touches keys of one hash
//! slot only ([`crate::queue::Keys`] says which), so the same code runs on both.

use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::{Manager, Pool};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value};
use tokio::sync::OnceCell;

use crate::error::QueueError;
use crate::queue::keys::Keys;

/// The answer time allowed to an ordinary Redis command. Redis answers in
/// microseconds; a second means it is gone, and the caller should back off
/// rather than hang (PITFALLS 1: the crate's own default is 500 ms).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections in a process's pool (one Redis): commands are pipelined over
/// each, so a few carry thousands of deliveries per second.
pub const POOL_SIZE: usize = 8;

/// Seed URLs `REDIS_URL` may list for a cluster: a handful is what clients
/// need to find the rest (the cluster tells them its topology).
pub(crate) const MAX_SEED_URLS: usize = 16;

/// Where Redis is: `REDIS_URL` (seed URLs, comma-separated, for a cluster)
/// and `HOOKFLEET_REDIS_CLUSTER`.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisTarget {
    urls: Vec<String>,
    cluster: bool,
}

// Written by hand: URLs carry passwords.
impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTarget")
            .field("urls", &format!("<{} hidden>", self.urls.len()))
            .field("cluster", &self.cluster)
            .finish()
    }
}

impl RedisTarget {
    /// Reads `REDIS_URL` for one server, or seed URLs for a cluster. Errors
    /// name the URL by its position, never by its text (it may hold a
    /// password).
    pub fn parse(url: &str, cluster: bool) -> Result<RedisTarget, QueueError> {
        // One server's URL is taken whole (a password may hold a comma);
        // only a cluster's seed list is split.
        let urls: Vec<String> = if cluster {
            url.split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(String::from)
                .collect()
        } else {
            Some(url.trim())
                .filter(|u| !u.is_empty())
                .map(|u| vec![u.to_string()])
                .unwrap_or_default()
        };
        let refuse = |why: String| Err(QueueError::Config(why));
        if urls.is_empty() {
            return refuse("REDIS_URL is empty".into());
        }
        if urls.len() > MAX_SEED_URLS {
            return refuse(format!(
                "REDIS_URL lists {} seed URLs; at most {MAX_SEED_URLS}",
                urls.len()
            ));
        }
        for (i, u) in urls.iter().enumerate() {
            if let Err(e) = u.as_str().into_connection_info() {
                let which = if cluster {
                    format!("REDIS_URL's URL number {}", i + 1)
                } else {
                    "REDIS_URL".to_string()
                };
                let hint = if !cluster && u.contains(",redis") {
                    " (several seed URLs are for a Redis Cluster: set HOOKFLEET_REDIS_CLUSTER=true)"
                } else {
                    ""
                };
                return refuse(format!("{which} cannot be used: {}{hint}", e.category()));
            }
        }
        Ok(RedisTarget { urls, cluster })
    }

    pub fn is_cluster(&self) -> bool {
        self.cluster
    }
}

/// A process's way to Redis. Connects lazily: a process starts while Redis
/// is down and says so on first use. (One per process, cloned by handle:
/// the size of the cluster variant does not matter.)
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Link {
    Single {
        pool: Pool,
        client: redis::Client,
    },
    Cluster {
        client: ClusterClient,
        seeds: Vec<String>,
        // One multiplexed connection per node, shared by the process (the
        // crate reconnects it); made on first use.
        shared: Arc<OnceCell<ClusterConnection>>,
    },
}

impl Link {
    pub(crate) fn open(target: &RedisTarget) -> Result<Link, QueueError> {
        if target.cluster {
            let client = cluster_client(&target.urls, COMMAND_TIMEOUT)?;
            return Ok(Link::Cluster {
                client,
                seeds: target.urls.clone(),
                shared: Arc::new(OnceCell::new()),
            });
        }
        let url = target.urls[0].as_str();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(COMMAND_TIMEOUT))
            .set_response_timeout(Some(COMMAND_TIMEOUT));
        let manager = Manager::new_with_config(url, config)?;
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .wait_timeout(Some(COMMAND_TIMEOUT))
            .create_timeout(Some(COMMAND_TIMEOUT))
            .runtime(deadpool_redis::Runtime::Tokio1)
            .build()
            .map_err(|e| QueueError::Unavailable(e.to_string()))?;
        Ok(Link::Single {
            pool,
            client: redis::Client::open(url)?,
        })
    }

    pub(crate) async fn get(&self) -> Result<Conn, QueueError> {
        match self {
            Link::Single { pool, .. } => Ok(Conn::Pooled(pool.get().await?)),
            Link::Cluster { client, shared, .. } => {
                // Bounded: callers queue behind a first connection attempt,
                // and a cluster that is down must not hold them longer.
                let conn = tokio::time::timeout(
                    COMMAND_TIMEOUT,
                    shared.get_or_try_init(|| client.get_async_connection()),
                )
                .await
                .map_err(|_| {
                    QueueError::Unavailable("no answer from the Redis Cluster".into())
                })??;
                Ok(Conn::Cluster(conn.clone()))
            }
        }
    }

    /// A connection of its own whose answers may take up to `block` longer
    /// than a command's, for blocking pops.
    pub(crate) async fn blocking(&self, block: Duration) -> Result<Conn, QueueError> {
        match self {
            Link::Single { client, .. } => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(COMMAND_TIMEOUT))
                    .set_response_timeout(Some(block + COMMAND_TIMEOUT));
                Ok(Conn::Own(
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                ))
            }
            Link::Cluster { seeds, .. } => {
                let client = cluster_client(seeds, block + COMMAND_TIMEOUT)?;
                Ok(Conn::Cluster(client.get_async_connection().await?))
            }
        }
    }
}

fn cluster_client(seeds: &[String], response: Duration) -> Result<ClusterClient, QueueError> {
    Ok(ClusterClientBuilder::new(seeds.iter().map(String::as_str))
        .connection_timeout(COMMAND_TIMEOUT)
        .response_timeout(response)
        .build()?)
}

/// A connection to one Redis or to a cluster; every command of the crate
/// (`AsyncCommands`, scripts, pipelines) runs on it.
pub enum Conn {
    Pooled(deadpool_redis::Connection),
    Own(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Pooled(c) => c.req_packed_command(cmd),
            Conn::Own(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Pooled(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Own(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Pooled(c) => c.get_db(),
            Conn::Own(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_read_and_bad_ones_refused_without_their_text() {
        let one = RedisTarget::parse("redis://127.0.0.1:6379", false).unwrap();
        assert!(!one.is_cluster());
        let seeds = RedisTarget::parse("redis://a:7000, rediss://b:7001,", true).unwrap();
        assert_eq!(seeds.urls, vec!["redis://a:7000", "rediss://b:7001"]);
        let err =
            |url: &str, cluster: bool| RedisTarget::parse(url, cluster).unwrap_err().to_string();
        assert!(err("redis://a:1,redis://b:2", false).contains("HOOKFLEET_REDIS_CLUSTER"));
        assert!(err(" , ", true).contains("empty"));
        assert!(err("  ", false).contains("empty"));
        // A password with a comma is one URL for one server.
        assert!(RedisTarget::parse("redis://:pa,ss@a:1", false).is_ok());
        let secret = "http://user:hunter2@a:1";
        let e = err(secret, false);
        assert!(e.contains("REDIS_URL") && !e.contains("hunter2"), "{e}");
        let e = err(&format!("redis://a:1,{secret}"), true);
        assert!(e.contains("number 2") && !e.contains("hunter2"), "{e}");
        let many = vec!["redis://a:1"; MAX_SEED_URLS + 1].join(",");
        assert!(err(&many, true).contains("at most"));
        assert!(RedisTarget::parse(&vec!["redis://a:1"; MAX_SEED_URLS].join(","), true).is_ok());
        let shown = format!(
            "{:?}",
            RedisTarget::parse("redis://:hunter2@a:1", false).unwrap()
        );
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}

/// One way to Redis (a pool, or a cluster client) and one key scheme: what
/// every concern of the queue shares.
#[derive(Clone)]
pub(crate) struct Redis {
    link: Link,
    pub(crate) keys: Keys,
}

impl Redis {
    pub(crate) fn open(target: &RedisTarget, prefix: &str) -> Result<Redis, QueueError> {
        Ok(Redis {
            link: Link::open(target)?,
            keys: Keys::new(prefix),
        })
    }

    pub(crate) async fn conn(&self) -> Result<Conn, QueueError> {
        self.link.get().await
    }

    /// A connection of its own for blocking pops (see [`Link::blocking`]).
    pub(crate) async fn blocking(&self, block: Duration) -> Result<Conn, QueueError> {
        self.link.blocking(block).await
    }

    /// Whether this is a Redis Cluster (no key of the pre-hash-tag form can
    /// exist there: those versions never ran on one).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster { .. })
    }
}
