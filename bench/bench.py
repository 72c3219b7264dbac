#!/usr/bin/env python3
"""hookfleet benchmarks: drive the real binaries (release build) against the
local Postgres and Redis and a fast loopback receiver, and print figures.

Run through scripts/bench.sh, which starts the services and builds. Each
scenario uses a fresh database and Redis prefix. Figures depend on the
machine: compare ratios measured in the same run, not absolute numbers across
machines.

Scenarios:
  drain   emit N events first (queued), then start the workers: how fast the
          workers drain a backlog (deliveries/s), plus the emit rate.
  e2e     workers running, then emit N events: end to end, emit → Delivered.
  tick    sweeper tick time (median of 15 ticks) with 10k, 100k and 1M rows
          in the logs table of which up to 100k are due, at batch sizes 100
          and 1000. Redis is cleared between ticks so every tick does the same
          work (select a batch, take keys, push jobs).
"""
import re
import statistics
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/hookfleet/target"))
BIN = os.path.join(TARGET, "release")
PG_ADMIN = os.environ["HOOKFLEET_PG_ADMIN"]
REDIS = os.environ["HOOKFLEET_REDIS"]
RECEIVER_ADDR = "127.0.0.1:18090"
# Bodies of about 342 bytes, like the reference measurements.
PAD = "x" * 180


def psql(url, sql):
    return subprocess.run(["psql", url, "-Atqc", sql], check=True, capture_output=True, text=True).stdout.strip()


def db_url(name):
    return PG_ADMIN.rsplit("/", 1)[0] + "/" + name


class Fleet:
    """A database, a prefix and webhooks for one scenario."""

    def __init__(self, tag, webhooks):
        self.db = f"hookfleet_bench_{tag}"
        psql(PG_ADMIN, f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)")
        psql(PG_ADMIN, f"CREATE DATABASE {self.db}")
        self.prefix = f"hookfleet-bench:{tag}:{os.getpid()}:"
        self.env = dict(os.environ, DATABASE_URL=db_url(self.db), REDIS_URL=REDIS,
                        HOOKFLEET_REDIS_PREFIX=self.prefix, HOOKFLEET_ALLOWED_NETWORKS="127.0.0.1/32",
                        RUST_LOG="warn")
        self.run("hookfleet", "migrate")
        self.webhooks = webhooks
        for k in range(webhooks):
            self.run("hookfleet", "webhook", "add", f"bench-{k}", "--entity-type", f"Doc{k}",
                     "--event", "on_submit", "--url", f"http://{RECEIVER_ADDR}/ok/{k}",
                     "--secret", "bench-secret", "--timeout", "10s")

    def run(self, binary, *args, stdin=None):
        return subprocess.run([os.path.join(BIN, binary), *args], env=self.env, check=True,
                              capture_output=True, text=True, input=stdin)

    def events_file(self, n):
        f = tempfile.NamedTemporaryFile("w", suffix=".ndjson", delete=False)
        for i in range(n):
            k = i % self.webhooks
            doc = {"name": f"SO-{i:07d}", "customer": "ACME Corporation", "grand_total": 1234.5 + i,
                   "status": "Submitted", "items": [{"sku": "A-1", "qty": 2}], "note": PAD}
            f.write(json.dumps({"entity_type": f"Doc{k}", "event": "on_submit", "name": doc["name"], "doc": doc}) + "\n")
        f.close()
        return f.name

    def emit(self, path):
        t0 = time.monotonic()
        self.run("hookfleet-producer", "emit", "--batch", path, "--batch-size", "1000")
        return time.monotonic() - t0

    def delivered(self):
        return int(psql(db_url(self.db), "SELECT count(*) FROM webhook_request_logs WHERE status = 'Delivered'"))

    def start_workers(self, count, concurrency):
        return [subprocess.Popen([os.path.join(BIN, "hookfleet-worker"), "--concurrency", str(concurrency)],
                                 env=self.env, stderr=subprocess.DEVNULL) for _ in range(count)]

    def close(self):
        subprocess.run(["redis-cli", "-u", REDIS, "--scan", "--pattern", self.prefix + "*"],
                       capture_output=True)
        psql(PG_ADMIN, f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)")


def proc_cpu_and_rss(pid):
    """CPU seconds (user+system) and peak RSS in MiB of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                rss = int(line.split()[1]) / 1024
    return cpu, rss


def wait_delivered(fleet, n, timeout):
    t0 = time.monotonic()
    while True:
        d = fleet.delivered()
        if d >= n:
            return time.monotonic()
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"only {d} of {n} delivered after {timeout}s")
        time.sleep(0.05)


def receiver_stats():
    with urllib.request.urlopen(f"http://{RECEIVER_ADDR}/stats") as r:
        return json.load(r)


def scenario(kind, events, webhooks, workers, concurrency, tag):
    fleet = Fleet(tag, webhooks)
    try:
        path = fleet.events_file(events)
        before = receiver_stats()
        if kind == "drain":
            emit_s = fleet.emit(path)
            t0 = time.monotonic()
            procs = fleet.start_workers(workers, concurrency)
        else:
            procs = fleet.start_workers(workers, concurrency)
            time.sleep(1.0)  # workers connected and waiting
            t0 = time.monotonic()
            emit_s = fleet.emit(path)
        t1 = wait_delivered(fleet, events, timeout=600)
        usage = [proc_cpu_and_rss(p.pid) for p in procs]
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
        after = receiver_stats()
        os.unlink(path)
        cpu = sum(u[0] for u in usage)
        return {
            "scenario": kind, "events": events, "webhooks": webhooks, "workers": workers,
            "concurrency": concurrency, "seconds": round(t1 - t0, 3),
            "deliveries_per_s": round(events / (t1 - t0)),
            "emit_events_per_s": round(events / emit_s),
            "worker_cpu_s_per_1000": round(cpu / events * 1000, 3),
            "worker_peak_rss_mib": round(max(u[1] for u in usage), 1),
            "received": after["requests"] - before["requests"],
            "duplicates": after["duplicates"] - before["duplicates"],
        }
    finally:
        fleet.close()


TICK_SQL = """
INSERT INTO webhook_request_logs (event_id, webhook_id, webhook_name, entity_type, entity_name, event,
    url, method, headers, body, queue, status, attempts, max_attempts, next_retry, created_at, updated_at)
SELECT 'msg_' || g, 1, 'bench-0', 'Doc0', 'SO-' || g, 'on_submit', 'http://127.0.0.1:18090/ok/0', 'POST',
    '[]', '{{"name": "SO-' || g || '", "note": "{pad}"}}', 'default',
    CASE WHEN g <= {due} THEN 'Failed' ELSE 'Delivered' END, 1, 4,
    CASE WHEN g <= {due} THEN now() - (g || ' milliseconds')::interval END, now(), now()
FROM generate_series(1, {rows}) g
"""


def tick_scenario(rows_list, batches, ticks=15):
    results = []
    for rows in rows_list:
        due = min(rows, 100_000)
        fleet = Fleet(f"tick_{rows}_{os.getpid()}", 1)
        try:
            psql(db_url(fleet.db), TICK_SQL.format(rows=rows, due=due, pad=PAD))
            psql(db_url(fleet.db), "VACUUM ANALYZE webhook_request_logs")
            for batch in batches:
                times = []
                for _ in range(ticks):
                    keys = subprocess.run(["redis-cli", "-u", REDIS, "--scan", "--pattern", fleet.prefix + "*"],
                                          capture_output=True, text=True).stdout.split()
                    for i in range(0, len(keys), 500):
                        subprocess.run(["redis-cli", "-u", REDIS, "del", *keys[i:i + 500]], capture_output=True)
                    out = subprocess.run([os.path.join(BIN, "hookfleet-sweeper"), "--once", "--batch-size", str(batch)],
                                         env=dict(fleet.env, RUST_LOG="info"), capture_output=True, text=True,
                                         check=True).stderr
                    m = re.search(r"enqueued=(\d+).* ms=(\d+)", out)
                    assert m and int(m.group(1)) == batch, out
                    times.append(int(m.group(2)))
                results.append({"rows": rows, "due": due, "batch": batch,
                                "median_ms": statistics.median(times), "max_ms": max(times)})
        finally:
            fleet.close()
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", choices=["drain", "e2e", "tick"], default="drain")
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--webhooks", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.scenario == "tick":
        results = tick_scenario([10_000, 100_000, 1_000_000], [100, 1000])
        if a.json:
            print(json.dumps(results))
        else:
            print(f"{'rows':>10} {'due':>8} {'batch':>6} {'median ms':>10} {'max ms':>7}")
            for r in results:
                print(f"{r['rows']:>10} {r['due']:>8} {r['batch']:>6} {r['median_ms']:>10} {r['max_ms']:>7}")
        return
    r = scenario(a.scenario, a.events, a.webhooks, a.workers, a.concurrency, f"{a.scenario}_{os.getpid()}")
    if a.json:
        print(json.dumps(r))
    else:
        for k, v in r.items():
            print(f"{k:>24}  {v}")


if __name__ == "__main__":
    sys.exit(main())
