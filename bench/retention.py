"""Retention benchmark: `hookfleet prune` against 10 million rows while a
worker delivers.

    CARGO_TARGET_DIR=$HOME/.cache/hookfleet/target scripts/bench.sh --only retention --no-report

prints one JSON document (progress goes to stderr): about 19 minutes on 2
cores when it seeds (3.5 of them), 17-18 once the seed exists. What it measures:

  1. seed: 10,000,000 terminal delivery rows (95% Delivered, 5% Exhausted,
     ~250-byte bodies, one webhook, one attempt row each) spread evenly over
     created_at = seed time - 60 days .. seed time - 1 hour, inserted with
     every production index in place, then VACUUM ANALYZE. The seed lives in
     a Postgres data directory of its own, $HOOKFLEET_BENCH_RETENTION_DIR
     (default /var/tmp/hookfleet-bench-retention, about 8 GB plus a copy
     while a run goes on), reused while its seed database holds the rows and
     was made by the same migrations (delete the directory to seed again);
  2. `hookfleet stats --json` wall time at that size (3 runs);
  3. prune alone (`hookfleet prune --json`, nothing else running): to its
     end, or until every row older than the cut is gone (the cut is
     now() - --older-than, so it moves on as the prune runs and the rows
     behind it keep crossing it); and one sweeper tick
     (`hookfleet-sweeper --once --retention ... --tick-budget 60s`): its
     log line's pruned= over ms=, and the time it took to reach the cut;
  4. delivery without and with a prune started at the same moment, in pairs
     (without, then with), twice: (a) one worker (default flags) draining
     --events queued deliveries to the bench receiver; (b) a producer fed
     5,000 events/s for 60 s with one worker delivering them (delivered/s,
     latency created_at -> updated_at);
  5. when one worker does not keep up with 5,000/s here, a pair of 30 s
     at 70% of the rate it delivered (latency without a growing backlog);
  6. when a slowdown is 10% or more: drain pairs with prune --batch-size
     1000, 5000 and 20000.

Every measured run starts from the same state: a fresh file copy of the seed
database (CREATE DATABASE ... TEMPLATE ... STRATEGY FILE_COPY), dropped
afterwards; in a pair both runs share one copy (the run without prune only
adds its own recent rows). The cut is 30 days before the seed time (the
--older-than passed is 30 days plus the seed's age), so the same half of the
seed is prunable however old the seed is. Rows pruned during a delivery run
are counted exactly: the prunable rows left when delivery ends (a snapshot
count) against those at the start; the prune is stopped then (Ctrl-C) if it
has not ended.

Knobs (environment): HOOKFLEET_BENCH_RETENTION_ROWS (10000000),
HOOKFLEET_BENCH_RETENTION_RATE (5000 events/s), _SECONDS (60 s of inflow),
_PAIRS (2), _SUSTAINED_SECONDS (30).
"""
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import time

import bench as B
from services import Postgres, spare_port

ROWS = int(os.environ.get("HOOKFLEET_BENCH_RETENTION_ROWS", 10_000_000))
RATE = int(os.environ.get("HOOKFLEET_BENCH_RETENTION_RATE", 5_000))
STEADY_S = int(os.environ.get("HOOKFLEET_BENCH_RETENTION_SECONDS", 60))
PAIRS = int(os.environ.get("HOOKFLEET_BENCH_RETENTION_PAIRS", 2))
SUSTAINED_S = int(os.environ.get("HOOKFLEET_BENCH_RETENTION_SUSTAINED_SECONDS", 30))
SEED_DIR = os.environ.get("HOOKFLEET_BENCH_RETENTION_DIR", "/var/tmp/hookfleet-bench-retention")
SEED_DB = "retention_seed"
CHUNK = 1_000_000
DAY = 86400.0
# The Bench's server options, and lock waits over deadlock_timeout (1 s) logged.
PG_EXTRA = "-c shared_preload_libraries=pg_stat_statements -c max_wal_size=4GB -c log_lock_waits=on"
log = B.log


class SeedPostgres(Postgres):
    """The Bench's Postgres, in a directory that outlives the run."""

    def __init__(self, base, extra):
        self.extra = extra
        self.port = spare_port()
        version = sorted(os.listdir("/usr/lib/postgresql"))[-1]
        self.bin = f"/usr/lib/postgresql/{version}/bin"
        self.base = base
        self.data = os.path.join(base, "data")
        self.root = os.geteuid() == 0
        try:
            with open(os.path.join(self.data, "PG_VERSION")) as f:
                if f.read().strip() == version:
                    return
        except OSError:
            pass
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(base)
        if self.root:
            shutil.chown(base, "postgres", "postgres")
        self.as_owner([f"{self.bin}/initdb", "-A", "trust", "-U", "postgres", "--no-sync", "-D", self.data])

    def stop(self):
        self.as_owner([f"{self.bin}/pg_ctl", "-D", self.data, "-w", "-m", "fast", "stop"], check=False)

    def log_size(self):
        try:
            return os.path.getsize(os.path.join(self.base, "log"))
        except OSError:
            return 0

    def log_since(self, offset):
        """Lock waits, errors and autovacuum lines the server logged since `offset`."""
        with open(os.path.join(self.base, "log"), errors="replace") as f:
            f.seek(offset)
            lines = f.read().splitlines()
        return [l for l in lines if re.search(r"ERROR|FATAL|deadlock|still waiting|acquired|canceling autovacuum", l)
                and "terminating connection due to administrator command" not in l]


def _tree_cpu(roots):
    """CPU seconds (own and reaped children's) of the processes under `roots`."""
    procs = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        procs[int(pid)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    total = 0
    for pid, (ppid, cpu) in procs.items():
        p, hops = pid, 0
        while p in procs and hops < 64:
            if p in roots:
                total += cpu
                break
            p, hops = procs[p][0], hops + 1
    return total / os.sysconf("SC_CLK_TCK")


def _machine_cpu():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / ticks, v[7] / ticks  # busy, steal


class CpuWindow:
    """Cores busy on average during a run: the benchmark's processes (this
    Python and its children, the seed Postgres) and everything else on the
    machine (other builds and tests: the noise), and hypervisor steal."""

    def __init__(self, bench):
        with open(os.path.join(bench.pg.data, "postmaster.pid")) as f:
            self.roots = {os.getpid(), int(f.readline())}
        self.t, self.ours = time.monotonic(), _tree_cpu(self.roots)
        self.busy, self.steal = _machine_cpu()

    def stop(self):
        dt = time.monotonic() - self.t
        ours = _tree_cpu(self.roots) - self.ours
        busy, steal = _machine_cpu()
        return {"bench_cores": round(ours / dt, 2), "elsewhere_cores": round(max(0.0, busy - self.busy - ours) / dt, 2),
                "steal_cores": round((steal - self.steal) / dt, 2)}


class SeedCopy(B.Fleet):
    """A database copied from the seed: Fleet's helpers (run, emit, drop)
    over it."""

    def __init__(self, bench, label):
        bench.runs += 1
        self.bench = bench
        self.webhooks = 1
        self.db = f"retention_{label}_{bench.runs}"
        t0 = time.monotonic()
        bench.psql("postgres", f"CREATE DATABASE {self.db} TEMPLATE {SEED_DB} STRATEGY FILE_COPY")
        self.copy_s = round(time.monotonic() - t0, 1)
        self.env = dict(os.environ, DATABASE_URL=bench.pg.url(self.db), REDIS_URL=bench.redis.url,
                        HOOKFLEET_REDIS_PREFIX=f"run{bench.runs}:", HOOKFLEET_ALLOWED_NETWORKS="127.0.0.1/32",
                        RUST_LOG="warn")
        # The seed's webhook, pointed at this run's receiver.
        bench.psql(self.db, f"UPDATE webhooks SET request_url = '{bench.receiver_url('/ok/0')}'")
        log(f"copied the seed to {self.db} in {self.copy_s}s")

    def q(self, sql):
        return self.bench.psql(self.db, sql)

    def max_id(self):
        return int(self.q("SELECT coalesce(max(id), 0) FROM webhook_request_logs"))

    def delivered_since(self, max_id):
        return int(self.q(f"SELECT count(*) FROM webhook_request_logs WHERE id > {max_id} AND status = 'Delivered'"))

    def pending_since(self, max_id):
        return int(self.q(f"SELECT count(*) FROM webhook_request_logs WHERE id > {max_id} AND next_retry IS NOT NULL"))

    def start_worker(self, tag):
        err = open(os.path.join(self.bench.workdir, f"{self.db}-{tag}-worker.log"), "w")
        return subprocess.Popen([os.path.join(B.BIN, "hookfleet-worker")], env=self.env,
                                stdout=subprocess.DEVNULL, stderr=err), err.name


def seed_meta_path():
    return os.path.join(SEED_DIR, "seed.json")


SEED_SQL = """
SET synchronous_commit = off;
WITH ins AS (
  INSERT INTO webhook_request_logs (event_id, webhook_id, webhook_name, entity_type, entity_name, event, url, method,
      headers, body, queue, status, attempts, max_attempts, next_retry, response_code, error, claim_token,
      created_at, updated_at)
  SELECT 'msg_' || lpad(to_hex((extract(epoch FROM t) * 1000)::bigint), 12, '0') || substr(md5(g::text), 1, 20),
      {wid}, 'bench-0', 'Doc0', 'SO-' || lpad(g::text, 8, '0'), 'on_submit', 'http://127.0.0.1:9/ok/0', 'POST',
      '[]',
      '{{"doctype": "Doc0", "name": "SO-' || lpad(g::text, 8, '0') || '", "customer": "ACME Corporation", '
        || '"grand_total": ' || (g % 100000) || '.5, "status": "Submitted", "items": [{{"sku": "A-1", "qty": 2}}], '
        || '"note": "{note}"}}',
      'default',
      CASE WHEN g % 20 = 0 THEN 'Exhausted' ELSE 'Delivered' END::delivery_status,
      1, CASE WHEN g % 20 = 0 THEN 1 ELSE 4 END, NULL,
      CASE WHEN g % 20 = 0 THEN 500 ELSE 200 END,
      CASE WHEN g % 20 = 0 THEN 'HTTP 500' END,
      1, t, t + interval '150 milliseconds'
  FROM (SELECT g, to_timestamp({seed_at}) - interval '60 days'
                  + (g - 1) * ((interval '60 days' - interval '1 hour') / {rows}) AS t
        FROM generate_series({lo}, {hi}) g) s
  RETURNING id, created_at, response_code, error
)
INSERT INTO webhook_delivery_attempts (log_id, attempt, started_at, duration_ms, response_code, error, worker)
SELECT id, 1, created_at + interval '100 milliseconds', 35, response_code, error, 'bench-worker-1' FROM ins;
"""


def migrations_hash():
    """The schema the seed was made with: a seed made by other migrations is
    made again."""
    import hashlib
    h = hashlib.sha256()
    root = os.path.join(B.ROOT, "migrations")
    for d in sorted(os.listdir(root)):
        with open(os.path.join(root, d, "up.sql"), "rb") as f:
            h.update(d.encode() + f.read())
    return h.hexdigest()[:16]


def ensure_seed(bench):
    """The seed database with ROWS terminal rows: reused when it is there."""
    schema = migrations_hash()
    meta = None
    try:
        with open(seed_meta_path()) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        pass
    exists = bench.psql("postgres", f"SELECT 1 FROM pg_database WHERE datname = '{SEED_DB}'")
    if meta and meta.get("rows") == ROWS and meta.get("schema") == schema and exists:
        have = int(bench.psql(SEED_DB, "SELECT count(*) FROM webhook_request_logs"))
        if have >= ROWS:
            if "prunable_max_id" not in meta:
                meta["prunable_max_id"] = prunable_max_id(bench, meta["seeded_at"])
                with open(seed_meta_path(), "w") as f:
                    json.dump(meta, f, indent=2)
            log(f"reusing the seed: {have:,} rows, made {(time.time() - meta['seeded_at']) / 3600:.1f} h ago "
                f"in {meta['seconds']}s")
            return dict(meta, reused=True)
        log(f"the seed has {have:,} rows: seeding again")
    bench.psql("postgres", f"DROP DATABASE IF EXISTS {SEED_DB} WITH (FORCE)")
    bench.psql("postgres", f"CREATE DATABASE {SEED_DB}")
    env = dict(os.environ, DATABASE_URL=bench.pg.url(SEED_DB), REDIS_URL=bench.redis.url,
               HOOKFLEET_ALLOWED_NETWORKS="127.0.0.1/32", RUST_LOG="warn")

    def cli(*args):
        subprocess.run([os.path.join(B.BIN, "hookfleet"), *args], env=env, check=True, capture_output=True)

    cli("migrate")
    cli("webhook", "add", "bench-0", "--entity-type", "Doc0", "--event", "on_submit", "--url",
        "http://127.0.0.1:9/ok/0", "--secret", "bench-secret", "--timeout", "10s")
    wid = int(bench.psql(SEED_DB, "SELECT id FROM webhooks WHERE name = 'bench-0'"))
    seed_at = float(bench.psql(SEED_DB, "SELECT extract(epoch FROM now())"))
    t0 = time.monotonic()
    for lo in range(1, ROWS + 1, CHUNK):
        hi = min(lo + CHUNK - 1, ROWS)
        t = time.monotonic()
        bench.psql(SEED_DB, SEED_SQL.format(wid=wid, seed_at=seed_at, rows=ROWS, lo=lo, hi=hi, note="x" * 80))
        log(f"seeded rows {lo:,}..{hi:,} in {time.monotonic() - t:.1f}s")
    insert_s = time.monotonic() - t0
    t = time.monotonic()
    bench.psql(SEED_DB, "VACUUM ANALYZE")
    vacuum_s = time.monotonic() - t
    bench.psql(SEED_DB, "CHECKPOINT")
    seconds = time.monotonic() - t0
    prunable = int(bench.psql(SEED_DB, "SELECT count(*) FROM webhook_request_logs "
                                       f"WHERE created_at < to_timestamp({seed_at}) - interval '30 days'"))
    sizes = bench.psql(SEED_DB, "SELECT pg_size_pretty(pg_total_relation_size('webhook_request_logs')) || ' + ' || "
                                "pg_size_pretty(pg_total_relation_size('webhook_delivery_attempts'))")
    body = int(bench.psql(SEED_DB, "SELECT avg(octet_length(body))::int FROM webhook_request_logs WHERE id < 1000"))
    meta = {"rows": ROWS, "schema": schema, "prunable": prunable, "prunable_max_id": prunable_max_id(bench, seed_at),
            "seeded_at": seed_at,
            "seeded_at_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(seed_at)),
            "seconds": round(seconds, 1), "insert_seconds": round(insert_s, 1),
            "vacuum_analyze_seconds": round(vacuum_s, 1), "sizes_logs_plus_attempts": sizes, "body_bytes": body}
    with open(seed_meta_path(), "w") as f:
        json.dump(meta, f, indent=2)
    log(f"seeded {ROWS:,} rows in {seconds:.1f}s (insert {insert_s:.1f}s, VACUUM ANALYZE {vacuum_s:.1f}s); "
        f"{prunable:,} older than the cut; {sizes}")
    return dict(meta, reused=False)


def older_than(seed):
    """--older-than that puts the cut 30 days before the seed time."""
    return f"{30 * DAY + (time.time() - seed['seeded_at']):.3f}s"


def prunable_left(copy, seed):
    """Seed rows older than the cut still there (a snapshot at the statement's
    start). The seed's ids follow created_at, so they are the ids up to the
    last prunable one: counted on the primary key, whatever other index the
    schema has."""
    return int(copy.q(f"SELECT count(*) FROM webhook_request_logs WHERE id <= {seed['prunable_max_id']}"))


def prunable_max_id(bench, seed_at):
    return int(bench.psql(SEED_DB, "SELECT max(id) FROM webhook_request_logs "
                                   f"WHERE created_at < to_timestamp({seed_at}) - interval '30 days'"))


def start_prune(copy, seed, batch):
    args = [os.path.join(B.BIN, "hookfleet"), "prune", "--older-than", older_than(seed), "--json"]
    if batch:
        args += ["--batch-size", str(batch)]
    return subprocess.Popen(args, env=copy.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_prune(p, grace):
    """The prune's JSON if it ends within `grace` seconds; else it is
    stopped (Ctrl-C: what it deleted stays deleted) and None."""
    try:
        out, err = p.communicate(timeout=grace)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGINT)
        p.communicate()
        return None, "stopped"
    if p.returncode != 0:
        return None, f"exit {p.returncode}: {err.strip()[-300:]}"
    return json.loads(out), "finished"


def prune_summary(copy, seed, p, t_start, t_end, batch):
    """What a prune started at t_start did by t_end, delivery's end (then it
    is stopped if it has not ended)."""
    left = prunable_left(copy, seed)
    during = seed["prunable"] - left
    window = t_end - t_start
    report, how = finish_prune(p, 0.0001)
    finished_in_run = how == "finished" and report["seconds"] <= window + 0.5
    if finished_in_run:  # the rate while it ran, not over the whole delivery
        window = max(report["seconds"], 0.001)
    out = {"batch_size": batch or 5000, "rows_during_delivery": during,
           "rows_per_s_during_delivery": round(during / window),
           "finished_within_run": finished_in_run, "outcome": how}
    if report:
        out["json"] = report
        out["rows_per_s"] = round(report["rows"] / report["seconds"]) if report["seconds"] else None
    else:
        out["rows_total_before_stopped"] = seed["prunable"] - prunable_left(copy, seed)
    return out


def stats_runs(bench):
    env = dict(os.environ, DATABASE_URL=bench.pg.url(SEED_DB), REDIS_URL=bench.redis.url, RUST_LOG="warn")
    times, out = [], None
    for _ in range(3):
        t0 = time.monotonic()
        out = subprocess.run([os.path.join(B.BIN, "hookfleet"), "stats", "--json"], env=env, check=True,
                             capture_output=True, text=True).stdout
        times.append(round(time.monotonic() - t0, 3))
    log(f"stats --json: {times} s")
    return {"wall_seconds": times, "last": json.loads(out)}


def deleted_so_far(copy):
    """Rows deleted from the logs table in this copy (the server's counters:
    up to about a second behind)."""
    return int(copy.q("SELECT n_tup_del FROM pg_stat_user_tables WHERE relname = 'webhook_request_logs'"))


def prune_alone(bench, seed, timeout=900, watch_after=10):
    """Prune with nothing else running, to the end or, as the cut moves on
    with the clock (rows keep crossing it), until every row older than it at
    the start is gone; then `watch_after` seconds more to see whether it stops."""
    copy = SeedCopy(bench, "alone")
    try:
        off = bench.pg.log_size()
        cpu = CpuWindow(bench)
        t0 = time.monotonic()
        p = start_prune(copy, seed, None)
        caught_up = None
        while p.poll() is None and time.monotonic() - t0 < timeout:
            time.sleep(0.5)
            if caught_up is None and deleted_so_far(copy) >= seed["prunable"]:
                caught_up = time.monotonic() - t0
                cpu_prune = cpu.stop()
                at_catch_up = deleted_so_far(copy)
                log(f"prune alone: all {seed['prunable']:,} rows older than the cut gone after {caught_up:.1f}s")
                deadline = time.monotonic() + watch_after
                while p.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.5)
                break
        report, how = finish_prune(p, 0.0001)
        wall = time.monotonic() - t0
        r = {"outcome": how, "json": report, "copy_seconds": copy.copy_s, "wall_seconds": round(wall, 1)}
        if report:
            r["rows_per_s"] = round(report["rows"] / report["seconds"]) if report["seconds"] else None
            r["cpu"] = cpu.stop() if caught_up is None else cpu_prune
        if caught_up is not None:
            r["seconds_to_delete_every_row_older_than_the_cut"] = round(caught_up, 1)
            r["rows_per_s_to_the_cut"] = round(seed["prunable"] / caught_up)
            r.setdefault("rows_per_s", r["rows_per_s_to_the_cut"])
            r.setdefault("cpu", cpu_prune)
            if how != "finished":
                r["still_running_after_s"] = watch_after
                r["rows_deleted_after_catching_up"] = deleted_so_far(copy) - at_catch_up
        r["server_log"] = bench.pg.log_since(off)
        log(f"prune alone: {r}")
        return r
    finally:
        copy.drop()


def sweeper_tick(bench, seed):
    copy = SeedCopy(bench, "sweeper")
    try:
        off = bench.pg.log_size()
        cpu = CpuWindow(bench)
        t0 = time.monotonic()
        res = subprocess.Popen([os.path.join(B.BIN, "hookfleet-sweeper"), "--once", "--retention", older_than(seed),
                                "--tick-budget", "60s"], env=dict(copy.env, RUST_LOG="info"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        caught_up = None
        while res.poll() is None:  # (its log is a line or two: the pipe never fills)
            time.sleep(0.5)
            if caught_up is None and deleted_so_far(copy) >= seed["prunable"]:
                caught_up = time.monotonic() - t0
        res.stderr = res.stderr.read()
        wall = time.monotonic() - t0
        line = re.sub(r"\x1b\[[0-9;]*m", "", res.stderr).strip().splitlines()
        tick = next((l for l in line if " tick" in l or "tick " in l), line[-1] if line else "")
        f = dict(re.findall(r"(\w+)=(\S+)", tick))
        pruned, ms = int(f.get("pruned", 0)), int(f.get("ms", 0))
        r = {"exit": res.returncode, "cpu": cpu.stop(), "log_line": tick.strip(), "pruned": pruned, "ms": ms,
             "rows_per_s": round(pruned / (ms / 1000)) if ms else None,
             "finished": pruned >= seed["prunable"] - 5, "wall_seconds": round(wall, 1),
             "seconds_to_delete_every_row_older_than_the_cut": caught_up and round(caught_up, 1),
             "rows_per_s_to_the_cut": caught_up and round(seed["prunable"] / caught_up),
             "server_log": bench.pg.log_since(off)}
        log(f"sweeper tick: {r}")
        return r
    finally:
        copy.drop()


def worker_problems(path):
    """The worker's warnings and errors but the one about no secret key."""
    with open(path, errors="replace") as f:
        lines = [l.strip() for l in f if l.strip() and "no HOOKFLEET_SECRET_KEY" not in l]
    return {"lines": len(lines), "first": lines[:3]}


def autovacuum(copy):
    """Autovacuums of the logs table finished so far and those running now."""
    done = copy.q("SELECT autovacuum_count || '/' || autoanalyze_count FROM pg_stat_user_tables "
                  "WHERE relname = 'webhook_request_logs'")
    running = copy.q("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker' "
                     "AND datname = current_database()")
    return {"vacuums_analyzes_done": done, "running_at_end": int(running)}


def drain_run(bench, copy, seed, events, prune_batch=None, with_prune=False):
    path = copy.events_file(events)
    max_id = copy.max_id()
    emit_s = copy.emit(path)
    os.unlink(path)
    base = bench.receiver_stats()["by_path_prefix"].get("ok", 0)
    off = bench.pg.log_size()
    cpu = CpuWindow(bench)
    t0 = time.monotonic()
    prune = start_prune(copy, seed, prune_batch) if with_prune else None
    worker, wlog = copy.start_worker("drain")
    B.wait_received(bench, base + events, timeout=600)
    while copy.delivered_since(max_id) < events:
        time.sleep(0.02)
    t1 = time.monotonic()
    cpu = cpu.stop()
    r = {"scenario": "drain", "with_prune": with_prune, "copy_seconds": copy.copy_s, "events": events,
         "seconds": round(t1 - t0, 3),
         "deliveries_per_s": round(events / (t1 - t0)), "emit_events_per_s": round(events / emit_s), "cpu": cpu}
    if with_prune:
        r["prune"] = prune_summary(copy, seed, prune, t0, t1, prune_batch)
    worker.terminate()
    worker.wait(timeout=60)
    r["worker_stderr"] = worker_problems(wlog)
    r["server_log"] = bench.pg.log_since(off)
    r["autovacuum"] = autovacuum(copy)
    log(f"drain {'with' if with_prune else 'without'} prune: {r}")
    return r


def steady_lines(n, rate, tag):
    """Events as bytes, one chunk per 0.1 s at `rate`."""
    per = max(1, rate // 10)
    chunks, buf = [], []
    for i in range(n):
        name = f"{tag}-{i:07d}"
        doc = {"name": name, "customer": "ACME Corporation", "grand_total": 1234.5 + i, "status": "Submitted",
               "items": [{"sku": "A-1", "qty": 2}], "note": B.PAD}
        buf.append(json.dumps({"entity_type": "Doc0", "event": "on_submit", "name": name, "doc": doc}))
        if len(buf) == per:
            chunks.append(("\n".join(buf) + "\n").encode())
            buf = []
    if buf:
        chunks.append(("\n".join(buf) + "\n").encode())
    return chunks, per


def steady_run(bench, copy, seed, rate, seconds, with_prune=False, prune_batch=None):
    chunks, per = steady_lines(rate * seconds, rate, f"{copy.db}-{'b' if with_prune else 'a'}")
    max_id = copy.max_id()
    worker, wlog = copy.start_worker("steady")
    time.sleep(1.0)  # connected and waiting
    off = bench.pg.log_size()
    producer = subprocess.Popen([os.path.join(B.BIN, "hookfleet-producer"), "emit", "--batch", "-",
                                 "--batch-size", str(per)], env=copy.env, stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    cpu = CpuWindow(bench)
    t0 = time.monotonic()
    prune = start_prune(copy, seed, prune_batch) if with_prune else None
    late = 0.0
    for k, chunk in enumerate(chunks):
        due = t0 + k * 0.1
        now = time.monotonic()
        if now < due:
            time.sleep(due - now)
        else:
            late = max(late, now - due)
        producer.stdin.write(chunk)
        producer.stdin.flush()
    producer.stdin.close()
    producer.wait(timeout=300)
    t_emit = time.monotonic()
    r = {"scenario": "steady", "with_prune": with_prune, "copy_seconds": copy.copy_s, "cpu": cpu.stop(),
         "target_events_per_s": rate, "seconds": seconds,
         "feeder_most_behind_s": round(late, 2), "producer_exit": producer.returncode}
    if with_prune:
        # The run is the inflow: what the prune did by its end.
        r["prune"] = prune_summary(copy, seed, prune, t0, t_emit, prune_batch)
    backlog = copy.pending_since(max_id)
    deadline = time.monotonic() + 180
    while copy.pending_since(max_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    worker.terminate()
    worker.wait(timeout=60)
    row = copy.q(f"""
        WITH r AS (SELECT status, created_at, updated_at,
                          extract(epoch FROM updated_at - created_at) * 1000 AS ms
                   FROM webhook_request_logs WHERE id > {max_id}),
             w AS (SELECT min(created_at) AS a, max(created_at) AS b FROM r)
        SELECT count(*), count(*) FILTER (WHERE status = 'Delivered'),
               extract(epoch FROM (SELECT b - a FROM w)),
               count(*) FILTER (WHERE status = 'Delivered' AND updated_at <= (SELECT b FROM w)),
               extract(epoch FROM max(updated_at) FILTER (WHERE status = 'Delivered') - (SELECT a FROM w)),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FILTER (WHERE status = 'Delivered'),
               percentile_cont(0.95) WITHIN GROUP (ORDER BY ms) FILTER (WHERE status = 'Delivered'),
               percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) FILTER (WHERE status = 'Delivered'),
               max(ms) FILTER (WHERE status = 'Delivered')
        FROM r""").split("|")
    n, delivered, window, in_window, last = int(row[0]), int(row[1]), float(row[2]), int(row[3]), float(row[4])
    r.update({"emitted": n, "emitted_per_s": round(n / window), "delivered": delivered,
              "delivered_per_s_during_inflow": round(in_window / window),
              "delivered_per_s_first_emit_to_last_delivery": round(delivered / last),
              "backlog_when_inflow_stopped": backlog,
              "latency_ms": {"p50": round(float(row[5])), "p95": round(float(row[6])), "p99": round(float(row[7])),
                             "max": round(float(row[8]))},
              "worker_stderr": worker_problems(wlog), "server_log": bench.pg.log_since(off),
              "autovacuum": autovacuum(copy)})
    log(f"steady {'with' if with_prune else 'without'} prune: {r}")
    return r


def pct(without, with_):
    """Slowdown in %: how much lower `with_` is than `without`."""
    return round(100 * (without - with_) / without, 1)


def run(bench, a):
    """The whole retention benchmark; returns the results."""
    t_start = time.monotonic()
    seed_pg = SeedPostgres(SEED_DIR, PG_EXTRA)
    seed_pg.start()
    bench.pg.crash()
    bench.pg = seed_pg
    try:
        results = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": B.machine(),
                   "command": "scripts/bench.sh --only retention --no-report"}
        for db in bench.psql("postgres", "SELECT datname FROM pg_database WHERE datname LIKE 'retention\\_%' "
                                         f"AND datname <> '{SEED_DB}'").split():
            bench.psql("postgres", f"DROP DATABASE {db} WITH (FORCE)")  # left by an interrupted run
        seed = ensure_seed(bench)
        results["seed"] = seed
        results["cut"] = "30 days before the seed time (prune --older-than 30d + the seed's age)"
        results["stats"] = stats_runs(bench)
        log("prune alone")
        results["prune_alone"] = prune_alone(bench, seed)
        log("sweeper tick")
        results["sweeper_tick"] = sweeper_tick(bench, seed)
        results["drain"] = []
        for i in range(PAIRS):
            copy = SeedCopy(bench, "drain")
            try:
                results["drain"].append(drain_run(bench, copy, seed, a.events))
                results["drain"].append(drain_run(bench, copy, seed, a.events, with_prune=True))
            finally:
                copy.drop()
        results["steady"] = []
        for i in range(PAIRS):
            copy = SeedCopy(bench, "steady")
            try:
                results["steady"].append(steady_run(bench, copy, seed, RATE, STEADY_S))
                results["steady"].append(steady_run(bench, copy, seed, RATE, STEADY_S, with_prune=True))
            finally:
                copy.drop()
        results["summary"] = summary(results)
        s = results["summary"]
        behind = [r for r in results["steady"] if not r["with_prune"]
                  and r["backlog_when_inflow_stopped"] > 0.05 * r["emitted"]]
        if behind:
            # One worker here cannot deliver RATE/s: a pair at a rate it
            # keeps up with, where latency is not queueing behind a backlog.
            rate = int(0.7 * statistics.mean(r["delivered_per_s_during_inflow"] for r in behind)) // 100 * 100
            log(f"one worker did not keep up with {RATE}/s: a pair at {rate}/s")
            copy = SeedCopy(bench, "sustained")
            try:
                results["steady_sustained"] = [steady_run(bench, copy, seed, rate, SUSTAINED_S),
                                               steady_run(bench, copy, seed, rate, SUSTAINED_S, with_prune=True)]
            finally:
                copy.drop()
            w, p = results["steady_sustained"]
            s["sustained_rate"] = rate
            s["sustained_delivered_per_s_without_with"] = [w["delivered_per_s_during_inflow"],
                                                           p["delivered_per_s_during_inflow"]]
            s["sustained_p50_ms_without_with"] = [w["latency_ms"]["p50"], p["latency_ms"]["p50"]]
            s["sustained_p95_ms_without_with"] = [w["latency_ms"]["p95"], p["latency_ms"]["p95"]]
            s["prune_rows_per_s_during_sustained"] = p["prune"]["rows_per_s_during_delivery"]
        if max(s["drain_slowdown_pct"], s["steady_delivered_slowdown_pct"]) >= 10:
            log("a slowdown of 10% or more: drain pairs with other prune batch sizes")
            results["batch_sizes"] = []
            for batch in (1000, 5000, 20000):
                copy = SeedCopy(bench, f"batch{batch}")
                try:
                    without = drain_run(bench, copy, seed, a.events)
                    with_ = drain_run(bench, copy, seed, a.events, prune_batch=batch, with_prune=True)
                    results["batch_sizes"].append({
                        "batch_size": batch, "without": without["deliveries_per_s"],
                        "with": with_["deliveries_per_s"],
                        "slowdown_pct": pct(without["deliveries_per_s"], with_["deliveries_per_s"]),
                        "prune_rows_per_s_during_delivery": with_["prune"]["rows_per_s_during_delivery"],
                        "runs": [without, with_]})
                finally:
                    copy.drop()
        results["bench_seconds"] = round(time.monotonic() - t_start)
        return results
    finally:
        seed_pg.stop()


def summary(res):
    d_without = [r["deliveries_per_s"] for r in res["drain"] if not r["with_prune"]]
    d_with = [r["deliveries_per_s"] for r in res["drain"] if r["with_prune"]]
    s_without = [r for r in res["steady"] if not r["with_prune"]]
    s_with = [r for r in res["steady"] if r["with_prune"]]
    rate = lambda rs: [r["delivered_per_s_during_inflow"] for r in rs]
    p = lambda rs, k: [r["latency_ms"][k] for r in rs]
    mean = lambda xs: round(statistics.mean(xs))
    return {
        "drain_per_s_without": d_without, "drain_per_s_with": d_with,
        "drain_slowdown_pct_per_pair": [pct(x, y) for x, y in zip(d_without, d_with)],
        "drain_slowdown_pct": pct(mean(d_without), mean(d_with)),
        "steady_delivered_per_s_without": rate(s_without), "steady_delivered_per_s_with": rate(s_with),
        "steady_delivered_slowdown_pct": pct(mean(rate(s_without)), mean(rate(s_with))),
        "steady_p50_ms_without": p(s_without, "p50"), "steady_p50_ms_with": p(s_with, "p50"),
        "steady_p95_ms_without": p(s_without, "p95"), "steady_p95_ms_with": p(s_with, "p95"),
        "prune_rows_per_s_during_drain": [r["prune"]["rows_per_s_during_delivery"] for r in res["drain"]
                                          if r["with_prune"]],
        "prune_rows_per_s_during_steady": [r["prune"]["rows_per_s_during_delivery"] for r in s_with],
        "prune_rows_per_s_alone": res["prune_alone"]["rows_per_s"],
        "prune_rows_per_s_sweeper_tick_pruned_over_ms": res["sweeper_tick"]["rows_per_s"],
        "prune_rows_per_s_sweeper_tick_to_the_cut": res["sweeper_tick"]["rows_per_s_to_the_cut"],
    }
