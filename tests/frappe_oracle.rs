//! Frappe's own code as the oracle. `tests/fixtures/frappe-oracle/` holds a
//! corpus of Frappe webhooks written as Frappe's users write them, each with
//! a document, and what Frappe v15 itself did with it (its Webhook
//! controller's validation, its condition, the body bytes and signature it
//! would send), recorded by `scripts/frappe-oracle/oracle.py` running
//! Frappe's real code (see `FRAPPE_VERSION`; `regenerate.sh` records them
//! again from a checkout). Every case is imported with `hookfleet webhook
//! import` and previewed with `webhook preview` (`compare.py`), and must
//! agree with Frappe on every check but those the known-differences list
//! names, each with why: a new difference fails, and so does a listed one
//! that has gone (the list only shrinks with the code).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use hookfleet_testkit::{bin_path, run_within, TestEnv};

const ORACLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/frappe-oracle");
const COMPARE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/scripts/frappe-oracle/compare.py"
);

/// Two CLI runs a case, a few hundred cases.
const COMPARE_LIMIT: Duration = Duration::from_secs(900);

/// The corpus the issue asked for: at least this many (webhook, document)
/// pairs.
const MIN_CASES: usize = 150;

fn json_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    names
}

#[test]
fn every_case_has_frappes_answer_and_every_known_difference_says_why() {
    let root = Path::new(ORACLE);
    let cases = json_files(&root.join("cases"));
    assert!(cases.len() >= MIN_CASES, "{} cases", cases.len());
    assert_eq!(
        cases,
        json_files(&root.join("expected")),
        "a case without Frappe's answer, or an answer without its case: run regenerate.sh"
    );
    let version = std::fs::read_to_string(root.join("FRAPPE_VERSION")).expect("FRAPPE_VERSION");
    assert!(
        version.contains("tag: v15.") && version.contains("commit: "),
        "{version}"
    );
    let known: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("known-differences.json")).expect("the list"),
    )
    .expect("JSON");
    for (case, entry) in known.as_object().expect("an object") {
        assert!(
            cases.contains(&format!("{case}.json")),
            "{case} is listed but is no case"
        );
        let why = entry["why"].as_str().unwrap_or_default();
        assert!(
            why.starts_with("deliberate: ") || why.starts_with("open: "),
            "{case}: a difference says whether it is deliberate or still open: {why:?}"
        );
        assert!(
            !entry["checks"].as_array().expect("checks").is_empty(),
            "{case}"
        );
    }
}

#[test]
fn hookfleet_differs_from_frappe_only_where_the_list_says_why() {
    let env = TestEnv::new();
    let report = std::env::temp_dir().join(format!(
        "hookfleet-frappe-oracle-{}.json",
        std::process::id()
    ));
    let mut cmd = Command::new("python3");
    cmd.arg(COMPARE)
        .arg("--known")
        .arg(Path::new(ORACLE).join("known-differences.json"))
        .arg("--report")
        .arg(&report);
    for (k, v) in env.envs() {
        cmd.env(k, v);
    }
    cmd.env("HOOKFLEET_BIN", bin_path("hookfleet"));
    let run = run_within(cmd, COMPARE_LIMIT, "compare.py");
    let _ = std::fs::remove_file(&report);
    assert_eq!(run.code, Some(0), "{run}");
    assert!(
        run.stdout.contains("every difference is one of the"),
        "{run}"
    );
}
