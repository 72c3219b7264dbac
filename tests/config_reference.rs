//! docs/CONFIG.md, the configuration reference, is what the binaries say.
//!
//! The reference is generated from every binary's and subcommand's `--help`
//! by `scripts/gen-config.py`; this test runs the generator on the binaries
//! just built and fails when the file differs, and fails when a `HOOKFLEET_*`
//! variable the sources read is not named in it (an environment variable
//! added without a flag must join the generator's hand-kept list).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use hookfleet_testkit::bin_path;

const BINARIES: [&str; 4] = [
    "hookfleet",
    "hookfleet-worker",
    "hookfleet-sweeper",
    "hookfleet-producer",
];

const REGENERATE: &str = "scripts/gen-config.py";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn reference() -> String {
    let path = root().join("docs/CONFIG.md");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; run {REGENERATE}", path.display()))
}

/// What the generator prints for the binaries built for this test run.
/// Values planted in the environment must not reach the reference: the
/// generator runs the binaries with an empty environment.
fn generated() -> String {
    // bin_path insists that each binary has been built.
    let paths: Vec<PathBuf> = BINARIES.iter().map(|b| bin_path(b)).collect();
    let bin_dir = paths[0].parent().expect("binary directory");
    let python = std::env::var("HOOKFLEET_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .arg(root().join(REGENERATE))
        .arg("--bin-dir")
        .arg(bin_dir)
        .args(["--output", "-"])
        .env("DATABASE_URL", "postgres://canary:canary-password@db/x")
        .env("HOOKFLEET_INGEST_TOKEN", "canary-token")
        .env("HOOKFLEET_REDIS_PREFIX", "canary-prefix:")
        .env("HOOKFLEET_CONCURRENCY", "7777")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python} {REGENERATE}: {e}"));
    assert!(
        out.status.success(),
        "{REGENERATE} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("the reference is UTF-8");
    for planted in ["canary", "7777"] {
        assert!(
            !text.contains(planted),
            "the generator let this environment's {planted:?} into the reference"
        );
    }
    text
}

#[test]
fn config_reference_is_current() {
    let fresh = generated();
    let current = reference();
    if fresh == current {
        return;
    }
    let saved = std::env::temp_dir().join(format!("hookfleet-CONFIG.{}.md", std::process::id()));
    let _ = std::fs::write(&saved, &fresh);
    panic!(
        "docs/CONFIG.md is stale: it is not what the binaries' --help says.\n\
         Regenerate it with `{REGENERATE}` (builds the binaries; with CARGO_TARGET_DIR if you use one), \
         or `{REGENERATE} --bin-dir <target>/debug`.\n\
         What it should be: {}  (diff -u docs/CONFIG.md {})\n\
         Differences (- in docs/CONFIG.md, + generated):\n{}",
        saved.display(),
        saved.display(),
        diff_hint(&current, &fresh, 60)
    );
}

/// Every `HOOKFLEET_*` variable named in crates/*/src (test-only ones live
/// under tests/ and are not read here) is in the reference, and every one
/// the reference names still exists; so is every variable read by a literal
/// name (`env::var("X")`).
#[test]
fn config_reference_names_every_variable() {
    let doc = reference();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).expect("crates/") {
        let src = entry.expect("crates/ entry").path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(!files.is_empty(), "no sources under crates/*/src");

    let mut in_sources = BTreeSet::new();
    let mut missing = BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read source");
        let shown = file.strip_prefix(root()).unwrap_or(file).display();
        for name in hookfleet_names(&text) {
            if !doc.contains(&format!("`{name}`")) {
                missing.insert(format!("{name} ({shown})"));
            }
            in_sources.insert(name);
        }
        for name in literal_env_reads(&text) {
            if !doc.contains(&format!("`{name}`")) {
                missing.insert(format!("{name} ({shown}, read with env::var)"));
            }
        }
    }
    assert!(
        in_sources.contains("HOOKFLEET_REDIS_PREFIX"),
        "the scan of crates/*/src found no HOOKFLEET_ variables: {in_sources:?}"
    );
    assert!(
        missing.is_empty(),
        "environment variables the sources use but docs/CONFIG.md does not name:\n  {}\n\
         A flag's variable appears once the binaries are rebuilt and `{REGENERATE}` is run; \
         a variable that is not a flag goes in NON_FLAG_ENV in {REGENERATE}, with its meaning.",
        missing.into_iter().collect::<Vec<_>>().join("\n  ")
    );

    let stale: Vec<String> = hookfleet_names(&doc)
        .into_iter()
        .filter(|n| !in_sources.contains(n))
        .collect();
    assert!(
        stale.is_empty(),
        "docs/CONFIG.md names variables no source under crates/*/src uses: {stale:?} \
         (remove them from NON_FLAG_ENV in {REGENERATE} and regenerate)"
    );
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read source directory") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `HOOKFLEET_[A-Z0-9_]*` names in a text, trailing underscores dropped,
/// test-only ones (`HOOKFLEET_TEST_*`) left out.
fn hookfleet_names(text: &str) -> BTreeSet<String> {
    const PREFIX: &str = "HOOKFLEET_";
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find(PREFIX) {
        let before = rest[..i].chars().next_back();
        let tail = &rest[i + PREFIX.len()..];
        let len = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = format!("{PREFIX}{}", tail[..len].trim_end_matches('_'));
        let word_start = !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if word_start && name.len() > PREFIX.len() && !name.starts_with("HOOKFLEET_TEST_") {
            names.insert(name);
        }
        rest = &tail[len..];
    }
    names
}

/// Names read as string literals: `env::var("X")`, `env::var_os("X")`.
fn literal_env_reads(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for call in ["var(\"", "var_os(\""] {
        let mut rest = text;
        while let Some(i) = rest.find(call) {
            let tail = &rest[i + call.len()..];
            let is_env = rest[..i].ends_with("env::");
            if let Some(end) = tail.find('"') {
                if is_env && !tail[..end].starts_with("HOOKFLEET_TEST_") {
                    names.insert(tail[..end].to_string());
                }
            }
            rest = tail;
        }
    }
    names
}

/// The changed lines between two texts (a longest-common-subsequence diff),
/// at most `limit` of them.
fn diff_hint(old: &str, new: &str, limit: usize) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let mut lcs = vec![vec![0u32; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out, mut shown) = (0, 0, String::new(), 0);
    while (i < a.len() || j < b.len()) && shown < limit {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push_str(&format!("  -{:>4} {}\n", i + 1, a[i]));
            i += 1;
            shown += 1;
        } else {
            out.push_str(&format!("  +{:>4} {}\n", j + 1, b[j]));
            j += 1;
            shown += 1;
        }
    }
    if shown == limit {
        out.push_str("  … (more)\n");
    }
    out
}

#[test]
fn scanners_find_what_they_should() {
    let names = hookfleet_names(
        "env = \"HOOKFLEET_QUEUES\"; \"HOOKFLEET_SECRET_KEY_FILE\" HOOKFLEET_TEST_RUN \
         XHOOKFLEET_NOPE HOOKFLEET_ `HOOKFLEET_RETRY_SCHEDULE`",
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        [
            "HOOKFLEET_QUEUES",
            "HOOKFLEET_RETRY_SCHEDULE",
            "HOOKFLEET_SECRET_KEY_FILE"
        ]
    );
    let reads = literal_env_reads(
        "std::env::var(\"RUST_LOG\"); env::var_os(\"HOME\"); map.var(\"nope\"); \
         std::env::var(KEY_ENV)",
    );
    assert_eq!(reads.into_iter().collect::<Vec<_>>(), ["HOME", "RUST_LOG"]);
    let hint = diff_hint("a\nb\nc\n", "a\nB\nc\nd\n", 10);
    assert_eq!(hint, "  -   2 b\n  +   2 B\n  +   4 d\n");
}

/// `hookfleet ARGS` with an empty environment (no database, no Redis):
/// its standard output, after checking it succeeded quietly.
fn offline(args: &[&str]) -> String {
    let out = Command::new(bin_path("hookfleet"))
        .args(args)
        .env_clear()
        .output()
        .expect("run hookfleet");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.is_empty(),
        "{args:?}: {stderr}"
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn completions_and_the_man_page_come_from_the_cli_itself_with_no_database() {
    let bash = offline(&["completions", "bash"]);
    assert!(bash.contains("complete -F _hookfleet"), "{bash}");
    // Every command and a nested flag are completed.
    for word in [
        "webhook",
        "delivery",
        "secrets",
        "--event-id",
        "--sealing-key",
    ] {
        assert!(bash.contains(word), "bash completes {word}");
    }
    assert!(offline(&["completions", "zsh"]).starts_with("#compdef hookfleet"));
    assert!(offline(&["completions", "fish"]).contains("complete -c hookfleet"));
    let man = offline(&["man"]);
    assert!(man.contains(".TH hookfleet"), "{man}");
    assert!(
        man.contains("completions") && man.contains("webhook"),
        "{man}"
    );
    // An unknown shell is a usage error, named.
    let out = Command::new(bin_path("hookfleet"))
        .args(["completions", "tcsh"])
        .env_clear()
        .output()
        .expect("run hookfleet");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcsh"));
}

/// The commands whose `--help` ends with examples.
const WITH_EXAMPLES: [&[&str]; 8] = [
    &["webhook", "add"],
    &["webhook", "update"],
    &["webhook", "preview"],
    &["webhook", "import"],
    &["delivery", "list"],
    &["delivery", "retry"],
    &["prune"],
    &["stats"],
];

#[test]
fn every_example_in_a_help_parses() {
    // Examples are split as a shell splits them (Python's shlex), after
    // their line continuations, substitutions and pipes are settled; each
    // must get past the argument parser: against a database that is not
    // there it fails with 1 (could not connect), never 2 (usage).
    let splitter = r#"
import json, re, shlex, sys
lines = sys.stdin.read().split("Examples:", 1)[1].replace("\\\n", " ").splitlines()
out = []
for line in lines:
    line = line.strip()
    if not line.startswith("hookfleet "):
        continue
    line = re.sub(r'\$\(hookfleet secrets generate\)', 'whsec_QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=', line)
    words = shlex.split(line, comments=True)
    if "|" in words:
        words = words[:words.index("|")]
    out.append(words[1:])
print(json.dumps(out))
"#;
    let python = std::env::var("HOOKFLEET_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let nowhere = "postgres://nobody@127.0.0.1:9/none?connect_timeout=2";
    let mut tried = 0;
    for command in WITH_EXAMPLES {
        let help = Command::new(bin_path("hookfleet"))
            .args(command)
            .arg("--help")
            .env("DATABASE_URL", nowhere)
            .output()
            .expect("help");
        let help = String::from_utf8(help.stdout).expect("UTF-8");
        assert!(help.contains("Examples:"), "{command:?} --help:\n{help}");
        let mut split = Command::new(&python);
        split.args(["-c", splitter]);
        let out = hookfleet_testkit::run_with_stdin(split, Some(&help));
        let examples: Vec<Vec<String>> =
            serde_json::from_str(&out.stdout).expect("the examples, split");
        assert!(!examples.is_empty(), "{command:?}");
        for words in examples {
            let run = Command::new(bin_path("hookfleet"))
                .args(&words)
                .env_clear()
                .env("DATABASE_URL", nowhere)
                .stdin(std::process::Stdio::null())
                .output()
                .expect("run the example");
            assert_ne!(
                run.status.code(),
                Some(2),
                "the example `hookfleet {}` is a usage error: {}",
                words.join(" "),
                String::from_utf8_lossy(&run.stderr)
            );
            tried += 1;
        }
    }
    assert!(tried >= 15, "{tried} examples");
}
