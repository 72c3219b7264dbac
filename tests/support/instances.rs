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
    tls: bool,
}

/// Runs `cmd` to its end; panics with what it printed if it fails.
fn run_ok(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs openssl with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    run_ok(
        Command::new("openssl").args(args).current_dir(dir),
        &format!("openssl {args:?} (install openssl)"),
    );
}

impl LocalRedis {
    pub fn start() -> LocalRedis {
        let mut r = LocalRedis {
            port: free_port(),
            dir: scratch_dir("redis"),
            child: None,
            tls: false,
        };
        r.launch();
        r
    }

    /// A redis-server speaking only TLS, with a certificate for `localhost`
    /// and 127.0.0.1 signed by a CA of its own ([`LocalRedis::ca_file`]),
    /// made here with openssl.
    pub fn start_tls() -> LocalRedis {
        let dir = scratch_dir("redis-tls");
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        let mut ca = vec!["req", "-x509", "-nodes", "-days", "2"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-subj",
            "/CN=hookfleet test CA",
        ]);
        openssl(&dir, &ca);
        let mut csr = vec!["req", "-nodes"];
        csr.extend(ec);
        csr.extend([
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ]);
        openssl(&dir, &csr);
        std::fs::write(
            dir.join("san.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        )
        .expect("write san.ext");
        openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "san.ext",
                "-out",
                "server.pem",
            ],
        );
        let mut r = LocalRedis {
            port: free_port(),
            dir,
            child: None,
            tls: true,
        };
        r.launch();
        r
    }

    /// The CA that signed a TLS server's certificate (PEM).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    fn launch(&mut self) {
        let port = self.port.to_string();
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        if self.tls {
            let file = |name: &str| self.dir.join(name).into_os_string();
            args.extend([
                "--port".into(),
                "0".into(),
                "--tls-port".into(),
                port.into(),
            ]);
            args.extend(["--tls-cert-file".into(), file("server.pem")]);
            args.extend(["--tls-key-file".into(), file("server.key")]);
            args.extend(["--tls-ca-cert-file".into(), file("ca.pem")]);
            args.extend(["--tls-auth-clients".into(), "no".into()]);
        } else {
            args.extend(["--port".into(), port.into()]);
        }
        let child = Command::new("redis-server")
            .args(args)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
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

    /// Its URL: `rediss://localhost:<port>` for a TLS server (the name its
    /// certificate carries).
    pub fn url(&self) -> String {
        if self.tls {
            format!("rediss://localhost:{}", self.port)
        } else {
            format!("redis://127.0.0.1:{}", self.port)
        }
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
        run_ok(
            pg.as_owner(pg.bin.join("initdb"))
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
                .arg(&pg.data),
            "initdb",
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
