"""Throwaway Redis and Postgres servers on spare ports, for the benchmark
and chaos scripts: the machine's shared services are never touched, and
their counters (pg_stat_statements, INFO commandstats) see only our load."""
import os
import shutil
import socket
import subprocess
import time


def spare_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=30, host="127.0.0.1"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens on {port} after {timeout}s")


class Redis:
    def __init__(self, workdir, also_listen=()):
        """`also_listen`: addresses to listen on besides 127.0.0.1."""
        self.also_listen = list(also_listen)
        self.port = spare_port()
        self.dir = os.path.join(workdir, "redis")
        os.makedirs(self.dir)
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", *self.also_listen,
             "--save", "", "--appendonly", "no", "--dir", self.dir]
            # Clients on another address, no password: allowed on purpose.
            + (["--protected-mode", "no"] if self.also_listen else []),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)

    def stop(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"


class Postgres:
    def __init__(self, workdir, extra="", also_listen=(), trust_network=None):
        """`extra`: more server options, e.g. "-c fsync=off"; `also_listen`:
        addresses to listen on besides 127.0.0.1, and `trust_network` the
        network whose clients may log in there (as on loopback, without a
        password)."""
        self.extra = extra
        self.listen = ",".join(["127.0.0.1", *also_listen])
        self.port = spare_port()
        bins = sorted(p for p in os.listdir("/usr/lib/postgresql"))
        self.bin = f"/usr/lib/postgresql/{bins[-1]}/bin"
        self.base = os.path.join(workdir, "pg")
        self.data = os.path.join(self.base, "data")
        os.makedirs(self.base)
        self.root = os.geteuid() == 0
        if self.root:
            shutil.chown(self.base, "postgres", "postgres")
            os.chmod(workdir, 0o755)
        self.as_owner([f"{self.bin}/initdb", "-A", "trust", "-U", "postgres", "--no-sync", "-D", self.data])
        if trust_network:
            with open(os.path.join(self.data, "pg_hba.conf"), "a") as f:
                f.write(f"host all all {trust_network} trust\n")

    def as_owner(self, cmd, check=True):
        if self.root:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        return subprocess.run(cmd, check=check, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self):
        opts = (f"-p {self.port} -c listen_addresses={self.listen} -c unix_socket_directories={self.base} "
                f"-c max_connections=200 {self.extra}")
        self.as_owner([f"{self.bin}/pg_ctl", "-D", self.data, "-w", "-l", os.path.join(self.base, "log"),
                       "-o", opts, "start"])
        wait_port(self.port)

    def crash(self):
        self.as_owner([f"{self.bin}/pg_ctl", "-D", self.data, "-w", "-m", "immediate", "stop"], check=False)

    def url(self, db="postgres"):
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}"

    def query(self, sql, db="hookfleet"):
        return subprocess.run(["psql", self.url(db), "-Atqc", sql], check=True, capture_output=True,
                              text=True).stdout.strip()


