//! Throwaway Redis and Postgres servers on spare ports, for tests that stop,
//! restart or cut them: the machine's shared services and the tests running
//! beside them are never touched.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::process::free_port;
use crate::wait::until_blocking;

/// How long a throwaway server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(30);

fn accepts(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

fn scratch_dir(kind: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "hookfleet-{kind}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// A redis-server of the test's own, keeping nothing on disk (like ours).
pub struct LocalRedis {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl LocalRedis {
    pub fn start() -> LocalRedis {
        let mut r = LocalRedis {
            port: free_port(),
            dir: scratch_dir("redis"),
            child: None,
        };
        r.launch();
        r
    }

    fn launch(&mut self) {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (install redis-server)");
        self.child = Some(child);
        let port = self.port;
        until_blocking(START_TIMEOUT, "redis-server accepts connections", || {
            accepts(port)
        });
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server (everything in it is lost).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let port = self.port;
        until_blocking(START_TIMEOUT, "redis-server stops", || !accepts(port));
    }

    /// Starts it again on the same port, empty.
    pub fn start_again(&mut self) {
        self.launch();
    }

    pub fn restart(&mut self) {
        self.kill();
        self.start_again();
    }
}

impl Drop for LocalRedis {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Postgres cluster of the test's own (initdb + pg_ctl), trust auth on
/// 127.0.0.1. As root, it runs as the `postgres` system user.
pub struct LocalPostgres {
    pub port: u16,
    data: PathBuf,
    bin: PathBuf,
}

fn pg_bin() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs.pop()
        .expect("PostgreSQL server binaries under /usr/lib/postgresql (install postgresql)")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false)
}

impl LocalPostgres {
    pub fn start() -> LocalPostgres {
        let bin = pg_bin();
        let base = scratch_dir("pg");
        let data = base.join("data");
        if is_root() {
            let _ = Command::new("chown")
                .arg("-R")
                .arg("postgres:postgres")
                .arg(&base)
                .status();
        }
        let pg = LocalPostgres {
            port: free_port(),
            data,
            bin,
        };
        let out = pg
            .as_owner(pg.bin.join("initdb"))
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
                "-D",
            ])
            .arg(&pg.data)
            .output()
            .expect("initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        pg.start_again();
        pg
    }

    fn as_owner(&self, program: PathBuf) -> Command {
        if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    fn pg_ctl(&self, args: &[&str]) -> bool {
        self.as_owner(self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(&self.data)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    }

    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts (again) on the same port with the same data.
    pub fn start_again(&self) {
        let opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=off -c max_connections=200",
            self.port,
            self.data.parent().unwrap_or(Path::new("/tmp")).display()
        );
        assert!(
            self.pg_ctl(&["-w", "-t", "30", "-l", "/dev/null", "-o", &opts, "start"]),
            "pg_ctl start failed"
        );
        let port = self.port;
        until_blocking(START_TIMEOUT, "postgres accepts connections", || {
            accepts(port)
        });
    }

    /// Stops at once, cutting every connection (like a crash).
    pub fn stop_immediately(&self) {
        self.pg_ctl(&["-w", "-m", "immediate", "stop"]);
    }

    /// A crash and a restart.
    pub fn restart(&self) {
        self.stop_immediately();
        self.start_again();
    }
}

impl Drop for LocalPostgres {
    fn drop(&mut self) {
        self.stop_immediately();
        if let Some(base) = self.data.parent() {
            let _ = std::fs::remove_dir_all(base);
        }
    }
}
