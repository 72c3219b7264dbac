//! # hookfleet-testkit
//!
//! What every hookfleet test needs, against the real services:
//! - [`TestEnv`]: a Postgres database and a Redis key prefix of the test's
//!   own (created, migrated, and dropped afterwards), so tests running side
//!   by side never see each other's rows or keys; helpers to start the
//!   producer, workers and sweeper in-process or as real processes.
//! - [`Receiver`]: a real HTTP receiver on 127.0.0.1 that records every
//!   request, answers as scripted (status, delay, headers), counts requests in
//!   flight, and verifies both signature schemes with its own HMAC code (not
//!   hookfleet's).
//!
//! Configuration (set by `scripts/test.sh`; the defaults suit this machine):
//! `HOOKFLEET_TEST_ADMIN_URL` (a Postgres URL allowed to create databases),
//! `HOOKFLEET_TEST_REDIS_URL`, and `HOOKFLEET_TEST_RUN` (a run id in every
//! database name and key prefix, so a run can clean up after itself).

pub mod env;
pub mod fixtures;
pub mod instances;
pub mod receiver;

pub use env::{spec, TempFile, TestEnv, WorkerHandle};
pub use fixtures::{sales_order, sales_orders};
pub use instances::{LocalPostgres, LocalRedis};
pub use receiver::{Received, Receiver, Reply};
