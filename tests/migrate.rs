//! `hookfleet migrate` on an empty database: it applies the schema once,
//! says so, is a no-op the second time, and is safe to run from several
//! processes at once.

use std::process::{Child, Stdio};

use diesel::RunQueryDsl;

use hookfleet_testkit::{Run, TestEnv};

/// Empties the test's database, as a fresh install would find it.
fn drop_schema(env: &TestEnv) {
    env.store
        .run_sync(|c| {
            diesel::sql_query("DROP SCHEMA public CASCADE").execute(c)?;
            diesel::sql_query("CREATE SCHEMA public").execute(c)?;
            Ok(())
        })
        .expect("drop the schema");
}

#[test]
fn migrate_twice_applies_the_schema_then_says_it_is_up_to_date() {
    let env = TestEnv::new();
    drop_schema(&env);
    let first = env.cli(&["migrate"]).ok("first migrate");
    assert!(first.stdout.contains("applied"), "{first}");
    let second = env.cli(&["migrate"]).ok("second migrate");
    assert_eq!(second.stdout.trim(), "schema is up to date", "{second}");
    // The schema works.
    env.add_quiet_webhook("after-migrate", "on_submit");
    assert_eq!(env.listed_webhooks().as_array().expect("list").len(), 1);
}

#[test]
fn migrate_from_four_processes_at_once_all_succeed_and_apply_once() {
    let env = TestEnv::new();
    drop_schema(&env);
    let children: Vec<Child> = (0..4)
        .map(|_| {
            env.command("hookfleet")
                .arg("migrate")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn migrate")
        })
        .collect();
    let runs: Vec<Run> = children
        .into_iter()
        .map(|c| Run::from(c.wait_with_output().expect("wait for migrate")))
        .collect();
    for run in &runs {
        assert_eq!(run.code, Some(0), "a concurrent migrate failed: {run}");
    }
    let applied = runs.iter().filter(|r| r.stdout.contains("applied")).count();
    assert_eq!(
        applied,
        1,
        "exactly one process applies the migrations: {}",
        runs.iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
    let up_to_date = runs
        .iter()
        .filter(|r| r.stdout.trim() == "schema is up to date")
        .count();
    assert_eq!(up_to_date, 3);
    env.add_quiet_webhook("after-migrate", "on_submit");
    assert_eq!(env.listed_webhooks().as_array().expect("list").len(), 1);
}

#[test]
fn every_binary_but_migrate_refuses_a_schema_older_than_itself() {
    let env = TestEnv::new();
    // The newest migration forgotten, as a database the last deploy did not
    // migrate would be.
    let forgotten: Vec<(String, String)> = env
        .store
        .run_sync(|c| {
            #[derive(diesel::QueryableByName)]
            struct Row {
                #[diesel(sql_type = diesel::sql_types::Text)]
                version: String,
                #[diesel(sql_type = diesel::sql_types::Text)]
                run_on: String,
            }
            let rows: Vec<Row> = diesel::sql_query(
                "DELETE FROM __diesel_schema_migrations WHERE version = \
                 (SELECT max(version) FROM __diesel_schema_migrations) \
                 RETURNING version, run_on::text",
            )
            .load(c)?;
            Ok(rows.into_iter().map(|r| (r.version, r.run_on)).collect())
        })
        .expect("forget a migration");
    assert_eq!(forgotten.len(), 1);
    let check = |bin: &str, args: &[&str]| {
        let mut cmd = env.command(bin);
        cmd.args(args);
        let out = hookfleet_testkit::run_within(cmd, std::time::Duration::from_secs(30), bin);
        assert_eq!(out.code, Some(1), "{bin} {args:?}: {out}");
        assert!(
            out.stderr.contains("run hookfleet migrate"),
            "{bin} {args:?}: {out}"
        );
    };
    check("hookfleet-worker", &[]);
    check("hookfleet-sweeper", &["--once"]);
    check(
        "hookfleet-producer",
        &["emit", "--entity-type", "T", "--event", "e", "--name", "n"],
    );
    check("hookfleet", &["webhook", "list"]);
    // Back as it was: they run.
    let (version, run_on) = forgotten[0].clone();
    env.store
        .run_sync(move |c| {
            diesel::sql_query(
                "INSERT INTO __diesel_schema_migrations (version, run_on) VALUES ($1, $2::timestamp)",
            )
            .bind::<diesel::sql_types::Text, _>(version)
            .bind::<diesel::sql_types::Text, _>(run_on)
            .execute(c)?;
            Ok(())
        })
        .expect("restore");
    env.cli(&["webhook", "list"]).ok("current schema");
}
