//! A test's own database and Redis prefix, and the fleet's parts on top.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Double};

use hookfleet_admin::preview::default_sample_doc;
use hookfleet_core::domain::RetrySchedule;
use hookfleet_core::domain::{
    DeliveryAttempt, DeliveryLog, FieldMapping, Webhook, WebhookRow, WebhookSpec,
};
use hookfleet_core::queue::{Job, RedisQueue, RedisTarget};
use hookfleet_core::request::NetworkPolicy;
use hookfleet_core::runtime::Shutdown;
use hookfleet_core::store::{deliveries, webhooks, Store};
use hookfleet_producer::{Producer, ProducerConfig};
use hookfleet_sweeper::Sweeper;

use crate::fixtures::{ENTITY, NOWHERE};
use crate::wait::until_seen;

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// The networks tests may reach: loopback, where the receivers listen.
pub const TEST_NETWORKS: &str = "127.0.0.0/8";

/// The variables that turn tracing on or shape it: a machine that exports
/// its own traces must not make the fleet's tests export theirs.
pub const TRACE_ENV: [&str; 8] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SERVICE_NAME",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "HOOKFLEET_SEND_TRACEPARENT",
];

fn admin_url() -> String {
    std::env::var("HOOKFLEET_TEST_ADMIN_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn redis_url() -> String {
    std::env::var("HOOKFLEET_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// Whether `HOOKFLEET_TEST_REDIS_URL` lists a Redis Cluster's seed nodes
/// (`HOOKFLEET_TEST_REDIS_CLUSTER=true`: scripts/test.sh's cluster pass).
pub fn redis_cluster() -> bool {
    std::env::var("HOOKFLEET_TEST_REDIS_CLUSTER").is_ok_and(|v| v == "true")
}

/// The admin server seen through PgBouncer in transaction mode
/// (`HOOKFLEET_TEST_PG_POOLER_URL`: scripts/test.sh's pooler pass): tests on
/// the shared Postgres then reach their database through it.
fn pooler_url() -> Option<String> {
    std::env::var("HOOKFLEET_TEST_PG_POOLER_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

fn run_id() -> String {
    std::env::var("HOOKFLEET_TEST_RUN").unwrap_or_else(|_| "adhoc".into())
}

/// Replaces the database name in a Postgres URL.
fn with_database(url: &str, db: &str) -> String {
    match url.rfind('/') {
        Some(i) if url[..i].contains("://") && url[..i].len() > url.find("://").unwrap() + 2 => {
            let (base, rest) = url.split_at(i);
            let query = rest.find('?').map(|q| &rest[q..]).unwrap_or("");
            format!("{base}/{db}{query}")
        }
        _ => format!("{url}/{db}"),
    }
}

/// A synchronous Redis connection for tests: one server or a cluster.
pub type RedisConn = Box<dyn redis::ConnectionLike>;

/// A database and a Redis prefix of this test's own.
pub struct TestEnv {
    admin_url: String,
    pub database_url: String,
    pub db_name: String,
    pub redis_url: String,
    /// Whether `redis_url` lists a cluster's seed nodes.
    pub redis_cluster: bool,
    pub prefix: String,
    pub store: Store,
    pub queue: RedisQueue,
    pub policy: Arc<NetworkPolicy>,
}

impl Default for TestEnv {
    fn default() -> Self {
        Self::new()
    }
}

impl TestEnv {
    /// Creates and migrates a fresh database; picks a fresh key prefix.
    pub fn new() -> TestEnv {
        Self::on(&admin_url(), &redis_url())
    }

    /// A test environment on a throwaway Postgres (and the shared Redis).
    pub fn on_postgres(admin: &str) -> TestEnv {
        Self::on(admin, &redis_url())
    }

    /// A test environment on a throwaway Redis (and the shared Postgres).
    pub fn on_redis(redis_url: &str) -> TestEnv {
        Self::on_servers(&admin_url(), redis_url, false)
    }

    /// A test environment on a given Postgres and the run's Redis.
    pub fn on(admin: &str, redis_url: &str) -> TestEnv {
        let cluster = redis_url == self::redis_url() && redis_cluster();
        Self::on_servers(admin, redis_url, cluster)
    }

    /// A test environment on given servers (throwaway ones, say).
    pub fn on_servers(admin: &str, redis_url: &str, redis_cluster: bool) -> TestEnv {
        use_renderer();
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let nonce = &uuid_like()[..8];
        let run = run_id();
        let db_name = format!("hf_t_{run}_{}_{n}_{nonce}", std::process::id()).to_lowercase();
        let admin = admin.to_string();
        let mut conn = PgConnection::establish(&admin)
            .expect("connect to Postgres as admin (HOOKFLEET_TEST_ADMIN_URL)");
        diesel::sql_query(format!("CREATE DATABASE \"{db_name}\""))
            .execute(&mut conn)
            .expect("create test database");
        // Created on the server itself; used through the pooler when the run
        // has one (and this is the run's Postgres).
        let through = match pooler_url() {
            Some(pooler) if admin == admin_url() => pooler,
            _ => admin.clone(),
        };
        let database_url = with_database(&through, &db_name);
        let store = Store::connect(&database_url, 8).expect("pool");
        store.migrate().expect("migrate test database");
        let prefix = format!("hftest:{run}:{}:{n}:{nonce}:", std::process::id());
        let redis_url = redis_url.to_string();
        let target = RedisTarget::parse(&redis_url, redis_cluster).expect("redis target");
        let queue = RedisQueue::connect(&target, &prefix).expect("redis");
        TestEnv {
            admin_url: admin,
            database_url,
            db_name,
            redis_url,
            redis_cluster,
            prefix,
            store,
            queue,
            policy: Arc::new(NetworkPolicy::parse(TEST_NETWORKS).expect("policy")),
        }
    }

    /// A fast schedule for tests that wait for retries.
    pub fn fast_schedule() -> RetrySchedule {
        RetrySchedule::parse("1s,2s,4s").expect("schedule")
    }

    /// Stores a webhook after validating it like `hookfleet webhook add`.
    pub fn add_webhook(&self, spec: &WebhookSpec) -> Webhook {
        hookfleet_admin::validate::validate(
            spec,
            &self.policy,
            &default_sample_doc(&spec.entity_type),
        )
        .expect("valid webhook");
        self.store
            .run_sync(|c| webhooks::insert(c, &WebhookRow::from(spec)))
            .expect("insert webhook")
    }

    /// Stores a webhook without validating it: a definition edited by hand
    /// in the database, which the fleet must survive.
    pub fn add_webhook_unvalidated(&self, spec: &WebhookSpec) -> Webhook {
        self.store
            .run_sync(|c| webhooks::insert(c, &WebhookRow::from(spec)))
            .expect("insert webhook")
    }

    /// Stores webhook `small` on Sales Order `event`, whose body is the
    /// document's `name` only: its rows stay small however large the
    /// document is. Its rows are never sent.
    pub fn add_small_body_webhook(&self, event: &str) -> Webhook {
        let mut s = spec("small", ENTITY, event, &format!("{NOWHERE}/small"));
        s.fields = vec![FieldMapping {
            field: "name".into(),
            key: "name".into(),
        }];
        self.add_webhook(&s)
    }

    /// The webhooks stored in the test's database.
    pub fn stored_webhooks(&self) -> Vec<Webhook> {
        self.store.run_sync(webhooks::list).expect("list webhooks")
    }

    pub fn set_enabled(&self, name: &str, enabled: bool) {
        self.store
            .run_sync(|c| webhooks::set_enabled(c, name, enabled))
            .expect("set enabled");
    }

    pub fn row(&self, id: i64) -> DeliveryLog {
        self.store
            .run_sync(|c| deliveries::get(c, id))
            .expect("row")
    }

    pub fn rows(&self) -> Vec<DeliveryLog> {
        use hookfleet_core::store::schema::webhook_request_logs::dsl as l;
        self.store
            .run_sync(|c| {
                Ok(l::webhook_request_logs
                    .order(l::id)
                    .select(DeliveryLog::as_select())
                    .load(c)?)
            })
            .expect("rows")
    }

    /// Waits until `pred` holds for row `id`; panics with the row after
    /// [`PATIENCE`](crate::wait::PATIENCE).
    pub async fn until_row(&self, id: i64, pred: impl Fn(&DeliveryLog) -> bool) -> DeliveryLog {
        let what = format!("row {id} reaches the expected state");
        until_seen(&what, async || self.row(id), pred).await
    }

    /// Waits until `pred` holds for all the test's rows (oldest first);
    /// panics naming `what`, with the rows, after
    /// [`PATIENCE`](crate::wait::PATIENCE).
    pub async fn until_rows(
        &self,
        what: &str,
        pred: impl Fn(&[DeliveryLog]) -> bool,
    ) -> Vec<DeliveryLog> {
        until_seen(what, async || self.rows(), |rows| pred(rows)).await
    }

    pub fn attempts(&self, id: i64) -> Vec<DeliveryAttempt> {
        self.store
            .run_sync(|c| deliveries::attempts(c, id))
            .expect("attempts")
    }

    /// Moves a pending row's next_retry to `secs` from now (negative: past),
    /// instead of waiting for the schedule.
    pub fn set_due_in(&self, id: i64, secs: f64) {
        self.store
            .run_sync(|c| {
                diesel::sql_query(
                    "UPDATE webhook_request_logs SET next_retry = now() + make_interval(secs => $2) WHERE id = $1",
                )
                .bind::<BigInt, _>(id)
                .bind::<Double, _>(secs)
                .execute(c)?;
                Ok(())
            })
            .expect("set next_retry");
    }

    /// Makes every pending row due now.
    pub fn make_all_due(&self) {
        self.store
            .run_sync(|c| {
                diesel::sql_query(
                    "UPDATE webhook_request_logs SET next_retry = now() - interval '1 second'
                     WHERE next_retry IS NOT NULL",
                )
                .execute(c)?;
                Ok(())
            })
            .expect("make due");
    }

    /// A producer reaching loopback receivers, with a 10-minute grace.
    pub fn producer(&self) -> Producer {
        self.producer_with_grace(Duration::from_secs(600))
    }

    /// A producer whose Queued rows count as lost after `grace`.
    pub fn producer_with_grace(&self, grace: Duration) -> Producer {
        Producer::new(
            self.store.clone(),
            self.queue.clone(),
            ProducerConfig {
                schedule: Self::fast_schedule(),
                queue_grace: grace,
                policy: self.policy.clone(),
            },
        )
    }

    /// Emits `on_submit` of Sales Order `name` (a small document).
    pub async fn submit(&self, name: &str) -> hookfleet_producer::EmitReport {
        let doc = crate::fixtures::sales_order(name, 1.0);
        self.producer()
            .emit(hookfleet_producer::Event::new(
                "Sales Order",
                "on_submit",
                name,
                doc,
            ))
            .await
            .expect("emit")
    }

    /// A sweeper over this test's rows.
    pub fn sweeper(&self, batch_size: usize, key_ttl: Duration) -> Sweeper {
        Sweeper::new(self.store.clone(), self.queue.clone(), batch_size, key_ttl)
    }

    /// A raw Redis connection (for inspecting or breaking the queues): to
    /// one server, or to the cluster (the crate routes each command; KEYS
    /// asks every primary, DEL splits by slot).
    pub fn redis(&self) -> RedisConn {
        self.try_redis().expect("redis connection")
    }

    fn try_redis(&self) -> redis::RedisResult<RedisConn> {
        if self.redis_cluster {
            let seeds: Vec<&str> = self.redis_url.split(',').collect();
            let client = redis::cluster::ClusterClient::new(seeds)?;
            Ok(Box::new(client.get_connection()?))
        } else {
            Ok(Box::new(
                redis::Client::open(self.redis_url.as_str())?.get_connection()?,
            ))
        }
    }

    /// Every key under this test's prefix.
    pub fn keys(&self) -> Vec<String> {
        let mut conn = self.redis();
        redis::cmd("KEYS")
            .arg(format!("{}*", self.prefix))
            .query(&mut *conn)
            .expect("keys")
    }

    /// Deletes every key under this test's prefix: what a Redis that lost
    /// everything looks like to this test (never FLUSHALL: other tests share
    /// the server).
    pub fn lose_redis(&self) {
        let keys = self.keys();
        if !keys.is_empty() {
            let mut conn = self.redis();
            redis::cmd("DEL")
                .arg(&keys)
                .query::<()>(&mut *conn)
                .expect("del");
        }
    }

    fn delete_keys(&self) -> redis::RedisResult<()> {
        let mut conn = self.try_redis()?;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", self.prefix))
            .query(&mut *conn)?;
        if !keys.is_empty() {
            redis::cmd("DEL").arg(&keys).query::<()>(&mut *conn)?;
        }
        Ok(())
    }

    /// Length of a Redis list by full key.
    pub fn llen(&self, key: &str) -> i64 {
        let mut conn = self.redis();
        redis::cmd("LLEN").arg(key).query(&mut *conn).expect("llen")
    }

    /// How many jobs wait on `queue` in Redis.
    pub fn queue_depth(&self, queue: &str) -> i64 {
        self.llen(&self.queue.keys().queue(queue))
    }

    /// Pushes `jobs` onto `queue` as they are, oldest first, the way the
    /// producer does (LPUSH): well-formed jobs, stale ones or junk.
    pub fn push_jobs<J: AsRef<str>>(&self, queue: &str, jobs: impl IntoIterator<Item = J>) {
        let mut conn = self.redis();
        for job in jobs {
            redis::cmd("LPUSH")
                .arg(self.queue.keys().queue(queue))
                .arg(job.as_ref())
                .query::<()>(&mut *conn)
                .expect("push a job");
        }
    }

    /// The rows whose jobs wait on `queue`, oldest first (next to be taken
    /// first).
    pub fn queued_ids(&self, queue: &str) -> Vec<i64> {
        let mut conn = self.redis();
        let jobs: Vec<String> = redis::cmd("LRANGE")
            .arg(self.queue.keys().queue(queue))
            .arg(0)
            .arg(-1)
            .query(&mut *conn)
            .expect("lrange");
        // LPUSHed: the newest job is at the head.
        jobs.iter()
            .rev()
            .map(|j| Job::decode(j).expect("a job").log_id)
            .collect()
    }

    /// Environment for the binaries, pointing them at this test's database,
    /// Redis prefix and loopback receivers.
    pub fn envs(&self) -> Vec<(String, String)> {
        vec![
            ("DATABASE_URL".into(), self.database_url.clone()),
            ("REDIS_URL".into(), self.redis_url.clone()),
            (
                "HOOKFLEET_REDIS_CLUSTER".into(),
                self.redis_cluster.to_string(),
            ),
            ("HOOKFLEET_REDIS_PREFIX".into(), self.prefix.clone()),
            ("HOOKFLEET_ALLOWED_NETWORKS".into(), TEST_NETWORKS.into()),
        ]
    }

    /// A command for one of the fleet's binaries, with [`TestEnv::envs`]
    /// and none of the machine's own tracing settings ([`TRACE_ENV`]).
    pub fn command(&self, bin: &str) -> Command {
        let mut cmd = Command::new(bin_path(bin));
        for (k, v) in self.envs() {
            cmd.env(k, v);
        }
        cmd.env_remove("HOOKFLEET_RETRY_SCHEDULE")
            .env_remove("HOOKFLEET_QUEUE_GRACE");
        // Tracing is on only where a test turns it on.
        for var in TRACE_ENV {
            cmd.env_remove(var);
        }
        cmd
    }

    /// Starts a worker in this process.
    pub fn start_worker(&self, concurrency: usize, schedule: RetrySchedule) -> WorkerHandle {
        self.start_worker_on(&["default"], concurrency, schedule)
    }

    /// Starts a worker in this process with its configuration adjusted by `tune`.
    pub fn start_worker_tuned(
        &self,
        concurrency: usize,
        tune: impl FnOnce(&mut hookfleet_worker::WorkerConfig),
    ) -> WorkerHandle {
        self.spawn_worker(&["default"], concurrency, RetrySchedule::default(), tune)
    }

    /// Starts a worker in this process on the given queues.
    pub fn start_worker_on(
        &self,
        queues: &[&str],
        concurrency: usize,
        schedule: RetrySchedule,
    ) -> WorkerHandle {
        self.spawn_worker(queues, concurrency, schedule, |_| {})
    }

    fn spawn_worker(
        &self,
        queues: &[&str],
        concurrency: usize,
        schedule: RetrySchedule,
        tune: impl FnOnce(&mut hookfleet_worker::WorkerConfig),
    ) -> WorkerHandle {
        let shutdown = Shutdown::new();
        let mut config = hookfleet_worker::WorkerConfig {
            worker_id: hookfleet_worker::WorkerConfig::new_worker_id(),
            queues: queues.iter().map(|q| q.to_string()).collect(),
            concurrency,
            endpoint_concurrency: concurrency,
            endpoint_ceiling: concurrency,
            slow_endpoint_concurrency: concurrency,
            fetch_batch: hookfleet_worker::DEFAULT_FETCH_BATCH.min(concurrency),
            schedule,
            policy: self.policy.clone(),
            drain_timeout: Duration::from_secs(30),
            heartbeat_ttl: hookfleet_worker::DEFAULT_HEARTBEAT_TTL,
            max_recoveries: hookfleet_worker::DEFAULT_MAX_RECOVERIES,
            lease_margin: hookfleet_core::attempt::LEASE_MARGIN,
            auto_pause_after: None,
            shutdown: shutdown.clone(),
        };
        tune(&mut config);
        let id = config.worker_id.clone();
        let task = tokio::spawn(hookfleet_worker::run(
            self.store.clone(),
            self.queue.clone(),
            config,
        ));
        WorkerHandle {
            shutdown,
            task: Some(task),
            id,
        }
    }
}

/// A worker running in the test's process.
pub struct WorkerHandle {
    pub shutdown: Shutdown,
    pub id: String,
    task: Option<tokio::task::JoinHandle<hookfleet_worker::WorkerReport>>,
}

impl WorkerHandle {
    /// Drains and stops the worker; returns its counters.
    pub async fn stop(self) -> hookfleet_worker::stats::Snapshot {
        self.stop_report().await.counts
    }

    /// Drains and stops the worker; returns its report.
    pub async fn stop_report(mut self) -> hookfleet_worker::WorkerReport {
        self.shutdown.trigger();
        self.task
            .take()
            .expect("running")
            .await
            .expect("worker task")
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        self.shutdown.trigger();
        self.shutdown.trigger();
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        let _ = self.delete_keys();
        if let Ok(mut conn) = PgConnection::establish(&self.admin_url) {
            let _ = diesel::sql_query(format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                self.db_name
            ))
            .execute(&mut conn);
        }
    }
}

/// A webhook definition with defaults (json body of the whole document,
/// POST, 5 s timeout, 3 retries, queue `default`).
pub fn spec(name: &str, entity_type: &str, event: &str, url: &str) -> WebhookSpec {
    WebhookSpec::new(name, entity_type, event, url)
}

/// Templates rendered in this test process run in `hookfleet-producer`
/// started as a renderer (the test binary itself cannot serve as one).
pub fn use_renderer() {
    static SET: std::sync::Once = std::sync::Once::new();
    SET.call_once(|| hookfleet_template::use_program(bin_path("hookfleet-producer")));
}

/// Where cargo put the fleet's binaries (beside this test's deps directory).
pub fn bin_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` first (scripts/test.sh does)",
        path.display()
    );
    path
}

fn uuid_like() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    format!("{:016x}", h.finish())
}

/// A file for one test, removed when dropped.
pub struct TempFile(PathBuf);

static NEXT_FILE: AtomicUsize = AtomicUsize::new(0);

impl TempFile {
    pub fn new(contents: impl AsRef<[u8]>) -> TempFile {
        let path = std::env::temp_dir().join(format!(
            "hookfleet-test-{}-{}",
            std::process::id(),
            NEXT_FILE.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::write(&path, contents).expect("write temp file");
        TempFile(path)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
