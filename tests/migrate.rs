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
