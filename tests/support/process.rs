//! The fleet's long-running binaries (a worker, the HTTP ingest) as real
//! child processes of a test: started, signalled, stopped, and never left
//! running after the test, whether it passes or fails.

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::env::TempFile;
use crate::wait::{holds_within, until_blocking, PATIENCE};
use crate::TestEnv;

/// How long a process may take to exit after SIGTERM: a drain of the few
/// deliveries a test has in flight.
pub const STOP_WAIT: Duration = Duration::from_secs(20);

/// How long a process still running when its test ends gets to exit on
/// SIGTERM before it is killed: enough to deregister, not enough to stall
/// the suite.
const DROP_WAIT: Duration = Duration::from_secs(5);

/// One of the fleet's binaries running as a child of the test. Dropping it
/// sends SIGTERM and, if that is not enough, SIGKILL: no process outlives
/// its test.
pub struct FleetProcess {
    child: Child,
    /// The binary's name, for messages.
    what: String,
    /// Everything it printed, when started with [`FleetProcess::spawn_logged`].
    log: Option<JoinHandle<String>>,
}

impl FleetProcess {
    /// Starts `cmd` with nothing on stdin and its output discarded.
    pub fn spawn(mut cmd: Command) -> FleetProcess {
        let what = program_name(&cmd);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        FleetProcess {
            child,
            what,
            log: None,
        }
    }

    /// Starts `cmd` with its stderr and stdout captured, for
    /// [`FleetProcess::log`].
    pub fn spawn_logged(mut cmd: Command) -> FleetProcess {
        let what = program_name(&cmd);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let mut stderr = child.stderr.take().expect("stderr");
        let mut stdout = child.stdout.take().expect("stdout");
        // Read while it runs, so a chatty debug log never fills the pipe.
        let log = std::thread::spawn(move || {
            let out = std::thread::spawn(move || {
                let mut text = String::new();
                let _ = stdout.read_to_string(&mut text);
                text
            });
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text.push_str(&out.join().unwrap_or_default());
            text
        });
        FleetProcess {
            child,
            what,
            log: Some(log),
        }
    }

    /// Is it still running?
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends `signal` (`-TERM`, `-KILL`, …) to the running process.
    pub fn signal(&self, signal: &str) {
        let sent = self.send(signal);
        assert!(sent, "kill {signal} {} failed", self.what);
    }

    /// Waits for the process to exit; panics after `limit`.
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let what = self.what.clone();
        self.exit_within(limit)
            .unwrap_or_else(|| panic!("{what} did not exit within {limit:?}"))
    }

    /// Stops the process with SIGTERM; panics if it does not exit within
    /// [`STOP_WAIT`].
    pub fn stop(&mut self) -> ExitStatus {
        if let Ok(Some(status)) = self.child.try_wait() {
            return status;
        }
        self.send("-TERM");
        let what = self.what.clone();
        self.exit_within(STOP_WAIT)
            .unwrap_or_else(|| panic!("{what} did not exit within {STOP_WAIT:?} of SIGTERM"))
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything a process started with [`FleetProcess::spawn_logged`]
    /// printed; call it once the process has exited.
    pub fn log(&mut self) -> String {
        self.log
            .take()
            .expect("started with spawn_logged, and its log not yet taken")
            .join()
            .expect("log reader thread")
    }

    /// `kill SIGNAL PID`: whether it was delivered.
    fn send(&self, signal: &str) -> bool {
        Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The exit status, if the process exits within `limit`.
    fn exit_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let mut status = None;
        holds_within(limit, || {
            status = self.child.try_wait().expect("try_wait");
            status.is_some()
        });
        status
    }
}

impl Drop for FleetProcess {
    fn drop(&mut self) {
        if self.running() {
            self.send("-TERM");
            if self.exit_within(DROP_WAIT).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// The file name of the program `cmd` runs.
fn program_name(cmd: &Command) -> String {
    Path::new(cmd.get_program())
        .file_name()
        .unwrap_or(cmd.get_program())
        .to_string_lossy()
        .into_owned()
}

/// `hookfleet-producer serve`, the HTTP ingest, as a real process on a port
/// of its own.
pub struct IngestProcess {
    process: FleetProcess,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

impl IngestProcess {
    /// Starts the ingest with `extra` flags and waits until `GET /healthz`
    /// answers 200.
    pub fn start(env: &TestEnv, extra: &[&str]) -> IngestProcess {
        IngestProcess::start_with_env(env, extra, &[])
    }

    /// Like [`IngestProcess::start`], with extra environment variables.
    pub fn start_with_env(env: &TestEnv, extra: &[&str], vars: &[(&str, &str)]) -> IngestProcess {
        let listen = format!("127.0.0.1:{}", free_port());
        let mut cmd = env.command("hookfleet-producer");
        cmd.args(["serve", "--listen", &listen]).args(extra);
        cmd.envs(vars.iter().copied());
        let mut ingest = IngestProcess {
            process: FleetProcess::spawn(cmd),
            base: format!("http://{listen}"),
        };
        let healthz = format!("{}/healthz", ingest.base);
        until_blocking(PATIENCE, "the ingest answers /healthz", || {
            let (code, _) = curl(&["-o", "/dev/null", &healthz]);
            assert!(
                code == 200 || ingest.process.running(),
                "the ingest exited before answering /healthz"
            );
            code == 200
        });
        ingest
    }

    /// The ingest process's id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        self.process.running()
    }

    /// POSTs `body` as JSON to `path` with the extra `headers`
    /// ("Name: value"); the answer's status and body.
    pub fn post(&self, path: &str, body: impl AsRef<[u8]>, headers: &[&str]) -> (u16, String) {
        let file = TempFile::new(body);
        let url = format!("{}{path}", self.base);
        let data = format!("@{}", file.path());
        let mut args = vec!["-X", "POST", "-H", "Content-Type: application/json"];
        for h in headers {
            args.extend(["-H", h]);
        }
        args.extend(["--data-binary", data.as_str(), url.as_str()]);
        curl(&args)
    }
}

/// `curl ARGS`: the HTTP status (0 when nothing answered) and the body. A
/// separate client, so the ingest is tested from outside the test's runtime.
pub fn curl(args: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "-S", "--max-time", "60", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("run curl (is it installed?)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// A free port on 127.0.0.1 (bound, then released for a server to take).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .expect("local addr")
        .port()
}
