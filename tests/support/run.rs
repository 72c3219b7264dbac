//! Running the fleet's command lines (`hookfleet`, `hookfleet-producer`) to
//! their end as real processes against the test's database and Redis
//! prefix, and reading what they printed and how they exited.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::fixtures::{ENTITY, NOWHERE};
use crate::TestEnv;

/// How much of each stream a failure message shows: a multi-megabyte
/// document echoed back would drown the message.
const SHOWN_CHARS: usize = 2000;

/// What a finished process printed, and how it ended.
pub struct Run {
    /// The exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(out: Output) -> Run {
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Both streams, for "never appears anywhere" checks.
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }

    /// Panics (with what the process said) unless it exited 0.
    pub fn ok(self, what: &str) -> Run {
        assert_eq!(self.code, Some(0), "{what} failed: {self}");
        self
    }

    /// The one JSON document a `--json` command printed.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self}"))
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let clip = |s: &str| -> String {
            let shown: String = s.chars().take(SHOWN_CHARS).collect();
            match s.len() - shown.len() {
                0 => shown,
                more => format!("{shown}… ({more} more bytes)"),
            }
        };
        write!(
            f,
            "exit {:?}\nstdout: {}\nstderr: {}",
            self.code,
            clip(&self.stdout),
            clip(&self.stderr)
        )
    }
}

/// Runs `cmd` to its end with `stdin` fed to it (nothing on stdin without).
pub fn run_with_stdin(mut cmd: Command, stdin: Option<&str>) -> Run {
    let Some(input) = stdin else {
        return Run::from(cmd.output().expect("run process"));
    };
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn process");
    let mut pipe = child.stdin.take().expect("stdin");
    pipe.write_all(input.as_bytes()).expect("write stdin");
    drop(pipe);
    Run::from(child.wait_with_output().expect("wait for process"))
}

/// Runs `cmd` to its end, or kills it and panics once `limit` has passed: a
/// limit that is not enforced must fail the test, not hang it.
pub fn run_within(mut cmd: Command, limit: Duration, what: &str) -> Run {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let pid = child.id().to_string();
    // A thread collects the output (so a full pipe never stalls the
    // process) while this one keeps the time.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match finished.recv_timeout(limit) {
        Ok(out) => Run::from(out.expect("collect output")),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            panic!("{what} was still running after {limit:?}; killed it");
        }
    }
}

/// Runs blocking process calls from an async test without stalling the
/// runtime that serves the test's receiver.
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// The ids of the rows an `emit --json` report lists.
pub fn delivery_ids(report: &Value) -> Vec<i64> {
    report["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .map(|d| d["id"].as_i64().expect("id"))
        .collect()
}

/// The arguments of `hookfleet webhook add NAME --entity-type T --event E
/// --url URL EXTRA…`, for tests that run it their own way (with other
/// environment, or a time limit).
pub fn webhook_add_args<'a>(
    name: &'a str,
    entity_type: &'a str,
    event: &'a str,
    url: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "webhook",
        "add",
        name,
        "--entity-type",
        entity_type,
        "--event",
        event,
        "--url",
        url,
    ];
    args.extend_from_slice(extra);
    args
}

/// The command lines, pointed at this test's database and Redis prefix.
impl TestEnv {
    /// `hookfleet ARGS` on a terminal of its own (a pseudo-terminal, as a
    /// person at a shell runs it): `answer` and Enter typed once `prompt`
    /// shows (a prompt that never shows types nothing); its exit code and
    /// everything the terminal showed, once it exits.
    pub fn at_a_terminal(&self, prompt: &str, answer: &str, args: &[&str]) -> (i32, String) {
        let python = std::env::var("HOOKFLEET_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/py/at_a_terminal.py"
        );
        let mut cmd = Command::new(python);
        cmd.args([script, prompt, answer, "--"])
            .arg(crate::bin_path("hookfleet"))
            .args(args);
        for (k, v) in self.envs() {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run on a terminal");
        let said: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (
            said["code"].as_i64().expect("code") as i32,
            said["output"].as_str().expect("output").to_string(),
        )
    }

    /// `hookfleet ARGS`, the operator's command line.
    pub fn cli(&self, args: &[&str]) -> Run {
        let mut cmd = self.command("hookfleet");
        cmd.args(args);
        run_with_stdin(cmd, None)
    }

    /// `hookfleet-producer ARGS`, with `stdin` fed to it when given.
    pub fn producer_cli(&self, args: &[&str], stdin: Option<&str>) -> Run {
        let mut cmd = self.command("hookfleet-producer");
        cmd.args(args);
        run_with_stdin(cmd, stdin)
    }

    /// `hookfleet-producer emit --json` of `event` on Sales Order `name`, as
    /// a command to add to (no document yet).
    pub fn emit_command(&self, event: &str, name: &str) -> Command {
        let mut cmd = self.command("hookfleet-producer");
        cmd.args([
            "emit",
            "--entity-type",
            ENTITY,
            "--event",
            event,
            "--name",
            name,
            "--json",
        ]);
        cmd
    }

    /// `hookfleet-producer emit --json` of `event` on Sales Order `name`,
    /// the document on stdin (`--doc -`).
    pub fn emit_by_cli(&self, event: &str, name: &str, doc: &Value) -> Run {
        let mut cmd = self.emit_command(event, name);
        cmd.args(["--doc", "-"]);
        run_with_stdin(cmd, Some(&doc.to_string()))
    }

    /// `hookfleet webhook add NAME --entity-type T --event E --url URL
    /// EXTRA…`.
    pub fn webhook_add(
        &self,
        name: &str,
        entity_type: &str,
        event: &str,
        url: &str,
        extra: &[&str],
    ) -> Run {
        self.cli(&webhook_add_args(name, entity_type, event, url, extra))
    }

    /// Adds, with `hookfleet webhook add`, a webhook on Sales Order `event`
    /// posting to an address nobody answers (for tests that run no worker).
    pub fn add_quiet_webhook(&self, name: &str, event: &str) {
        self.webhook_add(name, ENTITY, event, &format!("{NOWHERE}/{name}"), &[])
            .ok("webhook add");
    }

    /// `hookfleet webhook list --json`: the webhooks as the operator sees
    /// them.
    pub fn listed_webhooks(&self) -> Value {
        self.cli(&["webhook", "list", "--json"])
            .ok("webhook list")
            .json()
    }
}
