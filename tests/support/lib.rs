//! # hookfleet-testkit
//!
//! What every hookfleet test needs, against the real services. A test file
//! imports what it uses from here instead of defining its own copy.
//!
//! # Layout
//! - [`env`](mod@env): [`TestEnv`], a Postgres database and a Redis key prefix of the
//!   test's own (created, migrated, and dropped afterwards), so tests running
//!   side by side never see each other's rows or keys; the producer, workers
//!   and sweeper in-process on top; the rows and keys to look at.
//! - [`receiver`]: [`Receiver`], a real HTTP receiver on 127.0.0.1 that
//!   records every request, answers as scripted (status, delay, headers),
//!   counts requests in flight, and verifies both signature schemes with its
//!   own HMAC code (not hookfleet's).
//! - [`run`]: the command lines (`hookfleet`, `hookfleet-producer`) run to
//!   their end as real processes; [`Run`] is what one printed and how it
//!   exited.
//! - [`process`]: long-running binaries as child processes
//!   ([`FleetProcess`], the HTTP ingest as [`IngestProcess`]), never left
//!   running after their test.
//! - [`wait`]: polling until a condition holds, with a deadline, instead of
//!   sleeping a fixed time.
//! - [`fixtures`]: the documents and events tests emit.
//! - [`console`]: the console served in-process, and a client for its API
//!   and pages.
//! - [`scenario`]: [`Scenario`], the arrange step delivery tests share (a
//!   receiver, webhooks posting to it, a worker) in one expression, and the
//!   act steps that follow it (emit one event and wait for its row).
//! - [`instances`]: throwaway Redis and Postgres servers, for tests that
//!   stop, restart or cut them.
//!
//! Configuration (set by `scripts/test.sh`; the defaults suit this machine):
//! `HOOKFLEET_TEST_ADMIN_URL` (a Postgres URL allowed to create databases),
//! `HOOKFLEET_TEST_REDIS_URL`, and `HOOKFLEET_TEST_RUN` (a run id in every
//! database name and key prefix, so a run can clean up after itself).

pub mod console;
pub mod env;
pub mod fixtures;
pub mod instances;
pub mod process;
pub mod receiver;
pub mod run;
pub mod scenario;
pub mod wait;

pub use console::{csrf_of, Answer, ConsoleServer, FULL_TOKEN, READ_TOKEN};
pub use env::{
    bin_path, redis_cluster, spec, use_renderer, RedisConn, TempFile, TestEnv, WorkerHandle,
};
pub use fixtures::{
    event_json, json_of_size, sales_order, sales_orders, sales_orders_in, ENTITY, NOWHERE,
};
pub use instances::{LocalPostgres, LocalRedis};
pub use process::{curl, free_port, FleetProcess, IngestProcess};
pub use receiver::{Received, Receiver, Reply};
pub use run::{blocking, delivery_ids, run_with_stdin, run_within, webhook_add_args, Run};
pub use scenario::{assert_error_mentions, Ready, Running, Scenario};
pub use wait::{until, until_blocking, until_seen, PATIENCE};
