#!/usr/bin/env python3
"""hookfleet benchmarks, all in one run on one machine (scripts/bench.sh).

Everything runs against a Postgres and a Redis of the benchmark's own
(started on spare ports, with pg_stat_statements, so the counters see only
our load) and a fast counting receiver on loopback. In order:

  1. the machine's limits: the receiver alone under wrk; Redis under
     redis-benchmark (LPUSH, RPOP); Postgres under pgbench (write -N, read -S)
     and under a transaction shaped like a delivery (insert, claim, outcome);
  2. the baseline: Frappe's webhook job (requests + one log row) under RQ
     workers, no-fork with 1, 2 and 4 processes and Frappe's default forking
     worker;
  3. hookfleet: a worker draining a queued backlog (and the emit rate that
     built it); end to end (workers running, then emit) for 1 and 8 webhooks
     at concurrency 16, 64 and 256 with one and two worker processes; scaling
     over 1, 2 and 4 workers with Redis commands and Postgres statements per
     delivery; isolation: healthy webhooks' throughput with 10% of events
     going to a webhook that hangs until its 5 s timeout, against none.

Two more scenarios run only when asked for (bench/scale.py; one JSON document
on stdout, progress on stderr):

  --only fleet    fleet-wide limits, four workers at --concurrency 256: seven
                  healthy webhooks and one answering in 20 ms that gets 1/8
                  of 40,000 events; with no limit, with --max-concurrency 32
                  (the receiver's most requests in flight for it, and the
                  healthy deliveries/s kept against no limit), and with 1,000
                  of its events under --rate-limit 100/s (the most started in
                  any sliding second, and the healthy throughput kept);
  --only defaults what a user who never reads the flags gets: one worker with
                  no flags draining 50,000 deliveries to one fast webhook;
                  one worker at --concurrency 1024 draining to eight
                  webhooks that answer in 100 ms (against 1024 / 0.1 s);
                  isolation (10% of events to a hanging webhook) at the
                  default concurrency;
  --only console  page and API times of `hookfleet console` at 1,000,000
                  delivery rows (bench/console.py);
  --only cluster  a three-node Redis Cluster started on spare ports against
                  the single Redis: end to end, 8 webhooks, 1, 2, 4 and 8
                  workers at --concurrency 64, 30,000 events each, with
                  deliveries/s, Redis commands (summed over the nodes) and
                  Postgres statements per delivery.

The receiver counts requests to /tag/<name>/<ms>/... per name (GET /tags).

It prints the tables, saves JSON under bench/out/, draws deliveries/s against
concurrency (hookfleet beside the baseline) and writes docs/PERFORMANCE.md.
Figures depend on the machine: compare the ratios measured in the same run.
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

from services import Postgres, Redis, spare_port, wait_port

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/hookfleet/target"))
BIN = os.path.join(TARGET, "release")
VENV_PY = os.environ.get("HOOKFLEET_BENCH_PYTHON", sys.executable)
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# Bodies of about 342 bytes, like the reference measurements.
PAD = "x" * 180


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, file=sys.stderr, flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


class Bench:
    def __init__(self, workdir):
        self.workdir = workdir
        self.pg = Postgres(workdir, "-c shared_preload_libraries=pg_stat_statements -c max_wal_size=4GB")
        self.pg.start()
        # Every database created from here on can count its statements.
        self.psql("template1", "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.redis = Redis(workdir)
        self.redis.start()
        self.receiver_port = spare_port()
        self.receiver = subprocess.Popen([os.path.join(BIN, "hookfleet-bench-receiver"),
                                          f"127.0.0.1:{self.receiver_port}"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.receiver_port)
        self.runs = 0

    def close(self):
        self.receiver.terminate()
        self.pg.crash()
        self.redis.stop()

    def receiver_url(self, path):
        return f"http://127.0.0.1:{self.receiver_port}{path}"

    def receiver_stats(self):
        with urllib.request.urlopen(self.receiver_url("/stats")) as r:
            return json.load(r)

    def psql(self, db, sql):
        return sh(["psql", self.pg.url(db), "-Atqc", sql]).strip()

    def redis_cli(self, *args):
        return sh(["redis-cli", "-p", str(self.redis.port), *args])


# A Jinja body template as webhooks write them (it renders the same JSON in
# every version, so runs of different builds compare).
BODY_TEMPLATE = ('{"order": "{{ doc.name }}", "customer": "{{ doc.customer }}", "total": {{ doc.grand_total }}, '
                 '"items": [{% for i in doc["items"] %}{"sku": "{{ i.sku }}", "qty": {{ i.qty }}}'
                 '{% if not loop.last %},{% endif %}{% endfor %}]}')

# A fixed test key: secrets and header values sealed at rest (32 bytes, base64).
SECRET_KEY = "YmVuY2gtc2VjcmV0LWtleS0wMTIzNDU2Nzg5YWJjZGU="


class Fleet:
    """A database and webhooks for one hookfleet run. `template`: the
    webhooks render a Jinja body; `sealed`: a secret key seals their secret
    and a credential header."""

    def __init__(self, bench, webhooks, bad_webhook=False, template=False, sealed=False,
                 fleet_limits=False, redis=None):
        """`redis`: another Redis to use instead of the bench's (e.g.
        scale.Cluster): an object with `url`, `env` (more variables for the
        processes) and `flush()`."""
        bench.runs += 1
        self.bench = bench
        self.redis = redis
        self.db = f"hookfleet_run_{bench.runs}"
        bench.psql("postgres", f"CREATE DATABASE {self.db}")
        self.env = dict(os.environ, DATABASE_URL=bench.pg.url(self.db),
                        REDIS_URL=redis.url if redis else bench.redis.url,
                        HOOKFLEET_REDIS_PREFIX=f"run{bench.runs}:", HOOKFLEET_ALLOWED_NETWORKS="127.0.0.1/32",
                        RUST_LOG="warn")
        if redis:
            self.env.update(redis.env)
        if sealed:
            self.env["HOOKFLEET_SECRET_KEY"] = SECRET_KEY
        self.run("hookfleet", "migrate")
        # An experiment on the schema (an index considered, say), applied
        # after the migrations: HOOKFLEET_BENCH_EXTRA_SQL.
        if os.environ.get("HOOKFLEET_BENCH_EXTRA_SQL"):
            bench.psql(self.db, os.environ["HOOKFLEET_BENCH_EXTRA_SQL"])
        self.webhooks = webhooks
        extra = []
        if template:
            extra += ["--body-template", BODY_TEMPLATE]
        if sealed:
            extra += ["--header", "Authorization: Bearer bench-token"]
        if fleet_limits:
            # Limits that never bind: the run measures what taking a lease
            # and a rate token per request costs.
            extra += ["--max-concurrency", "10000", "--rate-limit", "100000/s"]
        for k in range(webhooks):
            self.run("hookfleet", "webhook", "add", f"bench-{k}", "--entity-type", f"Doc{k}", "--event", "on_submit",
                     "--url", bench.receiver_url(f"/ok/{k}"), "--secret", "bench-secret", "--timeout", "10s",
                     *extra)
        if bad_webhook:
            self.run("hookfleet", "webhook", "add", "hangs", "--entity-type", "Bad", "--event", "on_submit",
                     "--url", bench.receiver_url("/hang/x"), "--timeout", "5s", "--max-retries", "0")

    def run(self, binary, *args, stdin=None):
        return subprocess.run([os.path.join(BIN, binary), *args], env=self.env, check=True, capture_output=True,
                              text=True, input=stdin)

    def events_file(self, n, bad_share=0.0):
        f = tempfile.NamedTemporaryFile("w", suffix=".ndjson", delete=False, dir=self.bench.workdir)
        bad_every = round(1 / bad_share) if bad_share else 0
        for i in range(n):
            entity = "Bad" if bad_every and i % bad_every == 0 else f"Doc{i % self.webhooks}"
            doc = {"name": f"SO-{i:07d}", "customer": "ACME Corporation", "grand_total": 1234.5 + i,
                   "status": "Submitted", "items": [{"sku": "A-1", "qty": 2}], "note": PAD}
            f.write(json.dumps({"entity_type": entity, "event": "on_submit", "name": doc["name"], "doc": doc}) + "\n")
        f.close()
        return f.name

    def emit(self, path):
        t0 = time.monotonic()
        self.run("hookfleet-producer", "emit", "--batch", path, "--batch-size", "1000")
        return time.monotonic() - t0

    def delivered(self):
        return int(self.bench.psql(self.db, "SELECT count(*) FROM webhook_request_logs WHERE status = 'Delivered'"))

    def start_workers(self, count, concurrency, extra=()):
        """`concurrency` None: the worker's default (no flag)."""
        flags = [] if concurrency is None else ["--concurrency", str(concurrency)]
        return [subprocess.Popen([os.path.join(BIN, "hookfleet-worker"), *flags, *extra],
                                 env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for _ in range(count)]

    def drop(self):
        self.bench.psql("postgres", f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)")
        if self.redis:
            self.redis.flush()
        else:
            self.bench.redis_cli("FLUSHDB")


def proc_cpu_and_rss(pid):
    """CPU seconds (user+system) and peak RSS in MiB of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                rss = int(line.split()[1]) / 1024
    return cpu, rss


CPU_GROUPS = {"postgres": "postgres", "redis-server": "redis", "hookfleet-bench": "receiver",
              "hookfleet-worke": "worker", "hookfleet-produ": "producer"}


def cpu_snapshot():
    """CPU seconds used so far by each group of live processes (by name)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = dict.fromkeys(CPU_GROUPS.values(), 0.0)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        group = CPU_GROUPS.get(name)
        if group:
            fields = raw.rsplit(")", 1)[1].split()
            out[group] += (int(fields[11]) + int(fields[12])) / ticks
    children = os.times()
    out["producer"] += children.children_user + children.children_system  # the emit runs as our child
    return out


def wait_received(bench, target, prefix="ok", timeout=900):
    """Waits until the receiver answered `target` more requests under /prefix."""
    t0 = time.monotonic()
    while True:
        got = bench.receiver_stats()["by_path_prefix"].get(prefix, 0)
        if got >= target:
            return time.monotonic()
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"only {got} of {target} received after {timeout}s")
        time.sleep(0.02)


def hookfleet_run(bench, kind, events, webhooks, workers, concurrency, count_statements=False, extra=(),
                  template=False, sealed=False, fleet_limits=False):
    fleet = Fleet(bench, webhooks, template=template, sealed=sealed, fleet_limits=fleet_limits)
    try:
        path = fleet.events_file(events)
        base = bench.receiver_stats()["by_path_prefix"].get("ok", 0)
        if count_statements:
            bench.psql(fleet.db, "SELECT pg_stat_statements_reset()")
            bench.redis_cli("CONFIG", "RESETSTAT")
        cpu0 = cpu_snapshot()
        if kind == "drain":
            emit_s = fleet.emit(path)
            cpu0 = cpu_snapshot()  # the drain alone
            t0 = time.monotonic()
            procs = fleet.start_workers(workers, concurrency, extra)
        else:
            procs = fleet.start_workers(workers, concurrency, extra)
            time.sleep(1.0)  # connected and waiting
            t0 = time.monotonic()
            emit_s = fleet.emit(path)
        wait_received(bench, base + events)
        # Received is not yet recorded: the run ends when the rows say Delivered.
        while fleet.delivered() < events:
            time.sleep(0.02)
        t1 = time.monotonic()
        usage = [proc_cpu_and_rss(p.pid) for p in procs]
        cpu1 = cpu_snapshot()
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)
        result = {
            "scenario": kind, "template": template, "sealed": sealed, "fleet_limits": fleet_limits,
            "events": events, "webhooks": webhooks, "workers": workers,
            "concurrency": concurrency, "seconds": round(t1 - t0, 3),
            "deliveries_per_s": round(events / (t1 - t0)),
            "emit_events_per_s": round(events / emit_s),
            "worker_cpu_s_per_1000": round(sum(u[0] for u in usage) / events * 1000, 3),
            "worker_peak_rss_mib": round(max(u[1] for u in usage), 1),
            "cpu_s_per_1000_by_process": {k: round((cpu1[k] - cpu0[k]) / events * 1000, 3) for k in cpu1},
        }
        if count_statements:
            result.update(statement_counts(bench, fleet.db, events))
        os.unlink(path)
        return result
    finally:
        fleet.drop()


def statement_counts(bench, db, deliveries):
    """Postgres statements and Redis commands per delivery (emit included)."""
    # The benchmark's own queries (counting rows, resetting) are left out.
    statements = int(bench.psql(db, "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements "
                                    "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                                    "AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%count(*)%'"))
    if os.environ.get("HOOKFLEET_BENCH_TOP_STATEMENTS"):
        # Where Postgres's time went, for comparing two builds.
        log(bench.psql(db, "SELECT round(total_exec_time)::text || ' ms  ' || calls || ' calls  ' || "
                           "left(regexp_replace(query, '\\s+', ' ', 'g'), 110) FROM pg_stat_statements "
                           "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                           "ORDER BY total_exec_time DESC LIMIT 8"))
    info = bench.redis_cli("INFO", "commandstats")
    commands = 0
    for m in re.finditer(r"cmdstat_(\w+):calls=(\d+)", info):
        if m.group(1) not in ("info", "config", "flushdb"):
            commands += int(m.group(2))
    return {"pg_statements_per_delivery": round(statements / deliveries, 3),
            "redis_commands_per_delivery": round(commands / deliveries, 3)}


def isolation(bench, events, concurrency):
    """Healthy throughput with 10% of events to a webhook that hangs (5 s
    timeout), against the same healthy load alone."""
    out = {}
    healthy = int(events * 0.9)
    for label, bad in (("without", False), ("with", True)):
        fleet = Fleet(bench, 8, bad_webhook=bad)
        try:
            path = fleet.events_file(events if bad else healthy, bad_share=0.1 if bad else 0.0)
            base = bench.receiver_stats()["by_path_prefix"].get("ok", 0)
            procs = fleet.start_workers(1, concurrency)
            time.sleep(1.0)
            t0 = time.monotonic()
            fleet.emit(path)
            t1 = wait_received(bench, base + healthy)
            for p in procs:
                p.kill()
                p.wait()
            out[f"healthy_per_s_{label}_bad_webhook"] = round(healthy / (t1 - t0))
            os.unlink(path)
        finally:
            fleet.drop()
    out["kept"] = round(out["healthy_per_s_with_bad_webhook"] / out["healthy_per_s_without_bad_webhook"], 3)
    out["concurrency"] = concurrency
    out["events"] = events
    return out


# The worst body templates we could write: work or memory no fuel counts.
BOMBS = [
    ("a sum over a trillion zeros", '{"a": {{ ([0]*1000000000000)|sum }}}'),
    ("indent by ten billion", '{"a": "{{ "x"|indent(10000000000) }}"}'),
    ("a join of ten 100 MB strings",
     '{% set s = "x" * 100000000 %}{"a": "{{ [s, s, s, s, s, s, s, s, s, s]|join }}"}'),
    ("concatenation of 100 MB strings",
     '{% set s = "x" * 100000000 %}{"a": "{{ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s }}"}'),
    ("nested loops", '{"a": "{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}'
                     '{% endfor %}{% endfor %}{% endfor %}"}'),
]


def bombs(bench):
    """`hookfleet webhook add` with each bomb: how long the refusal took, and
    the peak RSS and CPU of the command with the renderers it waited for
    (wait4 counts a child's waited-for descendants)."""
    fleet = Fleet(bench, 0)
    rows = []
    try:
        for name, template in BOMBS:
            t0 = time.monotonic()
            p = subprocess.Popen([os.path.join(BIN, "hookfleet"), "webhook", "add", "bomb", "--entity-type", "T",
                                  "--event", "on_submit", "--url", bench.receiver_url("/ok/bomb"),
                                  "--body-template", template],
                                 env=fleet.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            stderr = p.stderr.read()
            _, status, usage = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            rows.append({"template": name, "seconds": round(time.monotonic() - t0, 2),
                         "exit_code": p.returncode, "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
                         "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
                         "refusal": stderr.strip().splitlines()[-1] if stderr.strip() else ""})
    finally:
        fleet.drop()
    return rows


def machine_limits(bench, seconds):
    out = {}
    wrk = sh(["wrk", "-t2", "-c64", f"-d{seconds}s", bench.receiver_url("/ok/wrk")])
    out["receiver_requests_per_s"] = round(float(re.search(r"Requests/sec:\s+([\d.]+)", wrk).group(1)))
    rb = sh(["redis-benchmark", "-p", str(bench.redis.port), "-c", "32", "-n", "200000", "-t", "lpush,rpop", "-q"])
    for cmd in ("LPUSH", "RPOP"):
        m = re.search(cmd + r": ([\d.]+) requests per second", rb)
        out[f"redis_{cmd.lower()}_per_s"] = round(float(m.group(1))) if m else None
    bench.psql("postgres", "CREATE DATABASE pgbench")
    url = bench.pg.url("pgbench")
    sh(["pgbench", "-i", "-q", "-s", "10", url])
    for flag, key in (("-N", "pg_write_tps"), ("-S", "pg_read_tps")):
        r = sh(["pgbench", flag, "-c", "16", "-j", "2", "-T", str(seconds), url])
        out[key] = round(float(re.search(r"tps = ([\d.]+)", r).group(1)))
    # A delivery's statements, one transaction each, against a table like ours.
    fleet = Fleet(bench, 1)
    script = os.path.join(bench.workdir, "delivery.sql")
    with open(script, "w") as f:
        f.write("""\\set e random(1, 1000000000)
INSERT INTO webhook_request_logs (event_id, webhook_id, webhook_name, entity_type, entity_name, event, url, method,
  headers, body, queue, status, max_attempts, next_retry)
  VALUES ('p' || :e || '-' || :client_id, 1, 'bench-0', 'Doc0', 'SO', 'on_submit', 'http://x', 'POST', '[]',
  '{"note": "%s"}', 'default', 'Queued', 4, now() + interval '10 minutes') RETURNING id \\gset
UPDATE webhook_request_logs SET attempts = attempts + 1, lease_expires_at = now() + interval '35 s',
  next_retry = now() + interval '35 s' WHERE id = :id AND status IN ('Queued', 'Failed');
UPDATE webhook_request_logs SET status = 'Delivered', next_retry = NULL, lease_expires_at = NULL,
  response_code = 204 WHERE id = :id AND attempts = 1;
""" % PAD)
    r = sh(["pgbench", "-n", "-f", script, "-c", "16", "-j", "2", "-T", str(seconds), bench.pg.url(fleet.db)])
    out["pg_single_row_delivery_tps"] = round(float(re.search(r"tps = ([\d.]+)", r).group(1)))
    fleet.drop()
    return out


def baseline(bench, events, fork_events):
    db = "baseline"
    bench.psql("postgres", f"CREATE DATABASE {db}")
    env = dict(os.environ, BASELINE_DATABASE_URL=bench.pg.url(db), BASELINE_REDIS_URL=bench.redis.url)
    out = []
    for workers, fork, n in ((1, False, events), (2, False, events), (4, False, events), (2, True, fork_events)):
        args = [VENV_PY, os.path.join(HERE, "baseline", "run.py"), "--events", str(n), "--workers", str(workers),
                "--receiver", bench.receiver_url("/ok/baseline")]
        if fork:
            args.append("--fork")
        r = json.loads(sh(args, env=env).strip().splitlines()[-1])
        log(f"baseline {r}")
        out.append(r)
        bench.redis_cli("FLUSHDB")
    return out


def run_all(bench, a):
    n = a.events
    results = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(),
               "command": "scripts/bench.sh " + " ".join(sys.argv[1:])}
    log("machine limits")
    results["limits"] = machine_limits(bench, a.seconds)
    log(f"limits {results['limits']}")
    log("baseline")
    results["baseline"] = baseline(bench, a.baseline_events, a.fork_events)
    results["drain"] = []
    for c in (64, 256):
        r = hookfleet_run(bench, "drain", n, 1, 1, c, count_statements=True)
        log(f"drain {r}")
        results["drain"].append(r)
    results["e2e"] = []
    for webhooks in (1, 8):
        for workers in (1, 2):
            for c in (16, 64, 256):
                r = hookfleet_run(bench, "e2e", n, webhooks, workers, c)
                log(f"e2e {r}")
                results["e2e"].append(r)
    results["scaling"] = []
    for workers in (1, 2, 4):
        r = hookfleet_run(bench, "e2e", n, 8, workers, 64, count_statements=True)
        log(f"scaling {r}")
        results["scaling"].append(r)
    # What safety costs: the same run with webhooks that render a Jinja body
    # (in the template renderer), with credentials sealed at rest, and both.
    results["safety"] = []
    for template, sealed in ((False, False), (True, False), (False, True), (True, True)):
        r = hookfleet_run(bench, "e2e", n, 8, 1, 64, template=template, sealed=sealed)
        log(f"safety {r}")
        results["safety"].append(r)
    log("isolation")
    # Three times the events: a sustained rate, in which the first wave of
    # hanging requests (before the webhook is found slow) is one 5 s episode
    # rather than half the measurement.
    results["isolation"] = isolation(bench, 3 * n, 64)
    log(f"isolation {results['isolation']}")
    return results


TICK_SQL = """
INSERT INTO webhook_request_logs (event_id, webhook_id, webhook_name, entity_type, entity_name, event,
    url, method, headers, body, queue, status, attempts, max_attempts, next_retry, created_at, updated_at)
SELECT 'msg_' || g, 1, 'bench-0', 'Doc0', 'SO-' || g, 'on_submit', 'http://127.0.0.1:9/ok/0', 'POST',
    '[]', '{{"name": "SO-' || g || '", "note": "{pad}"}}', 'default',
    CASE WHEN g <= {due} THEN 'Failed' ELSE 'Delivered' END, 1, 4,
    CASE WHEN g <= {due} THEN now() - (g || ' milliseconds')::interval END, now(), now()
FROM generate_series(1, {rows}) g
"""


def tick_scenario(bench, rows_list=(10_000, 100_000, 1_000_000), batches=(100, 1000), ticks=15):
    """Sweeper batch time (median of `ticks` one-batch ticks) as the logs
    table grows, with up to 100k rows due. Redis is emptied between ticks so each does the same
    work: select a batch, take its keys, push its jobs."""
    import statistics
    results = []
    for rows in rows_list:
        due = min(rows, 100_000)
        fleet = Fleet(bench, 1)
        try:
            bench.psql(fleet.db, TICK_SQL.format(rows=rows, due=due, pad=PAD))
            bench.psql(fleet.db, "VACUUM ANALYZE webhook_request_logs")
            for batch in batches:
                times = []
                for _ in range(ticks):
                    bench.redis_cli("FLUSHDB")
                    # One batch (a zero budget): the table is the time of a
                    # batch; a whole tick takes as many as are due.
                    out = subprocess.run([os.path.join(BIN, "hookfleet-sweeper"), "--once", "--tick-budget", "0s",
                                          "--batch-size", str(batch)], env=dict(fleet.env, RUST_LOG="info"),
                                         capture_output=True,
                                         text=True, check=True).stderr
                    m = re.search(r"enqueued=(\d+).* ms=(\d+)", out)
                    assert m and int(m.group(1)) == batch, out
                    times.append(int(m.group(2)))
                r = {"rows": rows, "due": due, "batch": batch, "median_ms": statistics.median(times),
                     "max_ms": max(times)}
                log(f"tick {r}")
                results.append(r)
        finally:
            fleet.drop()
    return results


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Linux {platform.release()}"


def best_baseline(results):
    return max(r["deliveries_per_s"] for r in results["baseline"] if not r["fork"])


def tables(results):
    """The report as Markdown tables."""
    base = best_baseline(results)
    lim = results["limits"]
    recv = lim["receiver_requests_per_s"]
    lines = []
    add = lines.append
    add("### The machine alone\n")
    add("| what | figure |\n| --- | ---: |")
    add(f"| receiver alone (wrk, 64 connections) | {recv:,} requests/s |")
    add(f"| Redis LPUSH / RPOP (32 clients) | {lim['redis_lpush_per_s']:,} / {lim['redis_rpop_per_s']:,} per s |")
    add(f"| Postgres pgbench -N / -S (16 clients) | {lim['pg_write_tps']:,} / {lim['pg_read_tps']:,} tps |")
    add(f"| Postgres, one delivery's insert + claim + outcome, one row per transaction | "
        f"{lim['pg_single_row_delivery_tps']:,} tps |")
    add("\n### The baseline: Frappe's webhook job under RQ\n")
    add("| RQ workers | kind | events | deliveries/s |\n| ---: | --- | ---: | ---: |")
    for r in results["baseline"]:
        add(f"| {r['workers']} | {'forking (Frappe default)' if r['fork'] else 'no-fork'} | {r['events']:,} | "
            f"{r['deliveries_per_s']:,} |")
    add(f"\nBest baseline: **{base:,} deliveries/s**.\n")
    add("### hookfleet\n")
    add("| scenario | webhooks | workers | concurrency | deliveries/s | × baseline | % of receiver alone "
        "| emit events/s | worker CPU s / 1000 | worker peak RSS MiB |")
    add("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results["drain"] + results["e2e"]:
        add(f"| {'drain (queued first)' if r['scenario'] == 'drain' else 'end to end'} | {r['webhooks']} | "
            f"{r['workers']} | {r['concurrency']} | {r['deliveries_per_s']:,} | "
            f"{r['deliveries_per_s'] / base:.1f}× | {100 * r['deliveries_per_s'] / recv:.1f}% | "
            f"{r['emit_events_per_s']:,} | {r['worker_cpu_s_per_1000']} | {r['worker_peak_rss_mib']} |")
    add("\n### Scaling out (end to end, 8 webhooks, concurrency 64 per worker)\n")
    add("| workers | deliveries/s | vs 1 worker | Postgres statements / delivery | Redis commands / delivery |")
    add("| ---: | ---: | ---: | ---: | ---: |")
    one = results["scaling"][0]["deliveries_per_s"]
    for r in results["scaling"]:
        add(f"| {r['workers']} | {r['deliveries_per_s']:,} | {r['deliveries_per_s'] / one:.2f}× | "
            f"{r['pg_statements_per_delivery']} | {r['redis_commands_per_delivery']} |")
    d = results["drain"][0]
    add(f"\nDraining (concurrency 64): {d['pg_statements_per_delivery']} Postgres statements and "
        f"{d['redis_commands_per_delivery']} Redis commands per delivery, emit included.\n")
    if results.get("safety"):
        add("### What safety costs (end to end, 8 webhooks, 1 worker, concurrency 64)\n")
        add("| webhooks | emit events/s | deliveries/s | worker CPU s / 1000 |")
        add("| --- | ---: | ---: | ---: |")
        for r in results["safety"]:
            what = {(False, False): "whole document, credentials unsealed",
                    (True, False): "Jinja body template (rendered in the renderer process)",
                    (False, True): "secret and a header sealed at rest (AES-256-GCM)",
                    (True, True): "template and sealed credentials"}[(r["template"], r["sealed"])]
            add(f"| {what} | {r['emit_events_per_s']:,} | {r['deliveries_per_s']:,} | "
                f"{r['worker_cpu_s_per_1000']} |")
        add("")
    iso = results["isolation"]
    add("### Isolation (8 healthy webhooks; 10% of events to a webhook that hangs until its 5 s timeout)\n")
    add("| | healthy deliveries/s |\n| --- | ---: |")
    add(f"| no bad webhook | {iso['healthy_per_s_without_bad_webhook']:,} |")
    add(f"| with the hanging webhook | {iso['healthy_per_s_with_bad_webhook']:,} |")
    add(f"\nThe healthy webhooks kept **{100 * iso['kept']:.0f}%** of their throughput "
        f"(concurrency {iso['concurrency']}, default per-webhook limits, {iso['events']:,} events).")
    return "\n".join(lines)


def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no plot")
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    for webhooks in (1, 8):
        for workers in (1, 2):
            pts = [(r["concurrency"], r["deliveries_per_s"]) for r in results["e2e"]
                   if r["webhooks"] == webhooks and r["workers"] == workers]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                    label=f"hookfleet end to end, {webhooks} webhook{'s' if webhooks > 1 else ''}, "
                          f"{workers} worker{'s' if workers > 1 else ''}")
    drain = results["drain"]
    ax.plot([r["concurrency"] for r in drain], [r["deliveries_per_s"] for r in drain], marker="s", linestyle="--",
            label="hookfleet draining a backlog, 1 worker")
    best = max((r for r in results["baseline"] if not r["fork"]), key=lambda r: r["deliveries_per_s"])
    ax.axhline(best["deliveries_per_s"], color="grey", linestyle=":", linewidth=1.5)
    ax.text(17, best["deliveries_per_s"] + 80, f"baseline: Frappe's job under RQ, best ({best['workers']} workers, "
            f"{best['deliveries_per_s']}/s)", fontsize=8, color="dimgrey")
    ax.set_xscale("log", base=2)
    ax.set_xticks([16, 64, 256])
    ax.set_xticklabels(["16", "64", "256"])
    ax.set_xlabel("concurrency per worker")
    ax.set_ylabel("deliveries per second")
    ax.set_title(f"hookfleet vs Frappe's job under RQ ({results['when']})")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def write_report(results, md_path, png_path, have_plot):
    text = f"""# Performance

Latest run: {results['when']}, on {results['machine']}.
Command: `{results["command"]}` (about ten minutes; everything on this one
machine: receiver, Redis, Postgres, workers and producer share its cores).

Absolute figures move with the machine and its neighbours; the ratios within
one run are what to compare. Bodies are about 342 bytes and signed; "end to
end" means emit → worker → receiver 2xx → row Delivered.

{tables(results)}
"""
    if have_plot:
        text += f"\n![deliveries/s against concurrency](./{os.path.basename(png_path)})\n"
    text += """
## Where the time goes

See "Findings" below: kept by hand, from profiles, beside these generated
figures.
"""
    findings = os.path.join(os.path.dirname(md_path), "PERFORMANCE-findings.md")
    if os.path.exists(findings):
        with open(findings) as f:
            text += "\n" + f.read()
    with open(md_path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=50_000, help="events per hookfleet run")
    ap.add_argument("--baseline-events", type=int, default=10_000)
    ap.add_argument("--fork-events", type=int, default=300)
    ap.add_argument("--seconds", type=int, default=10, help="length of each machine-limit measurement")
    ap.add_argument("--only", choices=["drain", "e2e", "tick", "isolation", "bombs", "retention", "fleet",
                                       "cluster", "defaults", "console", "slow"],
                    help="one hookfleet run (or the sweeper tick table) instead of the whole benchmark")
    ap.add_argument("--webhooks", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--template", action="store_true", help="--only runs: webhooks render a Jinja body")
    ap.add_argument("--sealed", action="store_true", help="--only runs: credentials sealed at rest")
    ap.add_argument("--fleet-limits", action="store_true",
                    help="--only drain|e2e: webhooks with fleet-wide limits that never bind (their cost)")
    ap.add_argument("--scale-events", type=int,
                    help="--only fleet|cluster: events per run (default 40,000 and 30,000)")
    ap.add_argument("--console-repeats", type=int, default=10, help="--only console: requests per route")
    ap.add_argument("--no-report", action="store_true", help="do not rewrite docs/PERFORMANCE.md")
    ap.add_argument("--report-from", metavar="JSON", help="rewrite docs/PERFORMANCE.md and the plot from a saved run")
    a = ap.parse_args()
    if a.report_from:
        with open(a.report_from) as f:
            results = json.load(f)
        png = os.path.join(ROOT, "docs", "performance.png")
        write_report(results, os.path.join(ROOT, "docs", "PERFORMANCE.md"), png, plot(results, png))
        return
    workdir = tempfile.mkdtemp(prefix="hookfleet-bench-")
    bench = Bench(workdir)
    try:
        if a.only == "tick":
            print(f"{'rows':>10} {'due':>8} {'batch':>6} {'median ms':>10} {'max ms':>7}")
            for r in tick_scenario(bench):
                print(f"{r['rows']:>10} {r['due']:>8} {r['batch']:>6} {r['median_ms']:>10} {r['max_ms']:>7}")
            return
        if a.only == "retention":
            import retention  # prune at 10M rows beside delivery: see bench/retention.py
            print(json.dumps(retention.run(bench, a), indent=2))
            return
        if a.only == "bombs":
            print(json.dumps(bombs(bench), indent=2))
            return
        if a.only in ("fleet", "cluster", "defaults", "slow"):
            import scale  # fleet-wide limits over four workers; Redis Cluster; defaults: see bench/scale.py
            if a.only == "fleet":
                r = scale.fleet(bench, a.scale_events or 40_000)
            elif a.only == "defaults":
                r = scale.defaults(bench)
            elif a.only == "slow":
                r = scale.slow(bench, a.scale_events or 20_000, a.concurrency, a.webhooks)
            else:
                r = scale.cluster(bench, a.scale_events or 30_000)
            print(json.dumps(r, indent=2))
            return
        if a.only == "isolation":
            print(json.dumps(isolation(bench, a.events, a.concurrency), indent=2))
            return
        if a.only == "console":
            import console  # page and API times at 1M rows: see bench/console.py
            print(json.dumps(console.run(bench, a), indent=2))
            return
        if a.only:
            r = hookfleet_run(bench, a.only, a.events, a.webhooks, a.workers, a.concurrency, count_statements=True,
                              template=a.template, sealed=a.sealed, fleet_limits=a.fleet_limits)
            print(json.dumps(r, indent=2))
            return
        results = run_all(bench, a)
    finally:
        bench.close()
    os.makedirs(os.path.join(ROOT, "bench", "out"), exist_ok=True)
    out = os.path.join(ROOT, "bench", "out", time.strftime("bench-%Y%m%dT%H%M%S.json"))
    with open(out, "w") as f:
        json.dump(results, f, indent=2)
    print(tables(results))
    print(f"\n(saved to {out})")
    if not a.no_report:
        png = os.path.join(ROOT, "docs", "performance.png")
        have_plot = plot(results, png)
        write_report(results, os.path.join(ROOT, "docs", "PERFORMANCE.md"), png, have_plot)
        print("wrote docs/PERFORMANCE.md" + (" and docs/performance.png" if have_plot else ""))


if __name__ == "__main__":
    main()
