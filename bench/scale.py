"""Scale benchmarks: fleet-wide limits across several workers, and a Redis
Cluster against a single Redis, and the defaults (`scripts/bench.sh --only
fleet|cluster|defaults`).

fleet: four workers (--concurrency 256 each), seven healthy webhooks
(entity types Doc0..Doc6, answered at once at /tag/ok<k>/0/...) and one
"limited" webhook (entity type Lim, answered after 20 ms at /tag/lim/20/...).
Runs, each on a fresh database and Redis prefix, workers started, then emit:
  baseline               no limits, the limited webhook gets 1/8 of the events;
  max_concurrency_32     the same with `--max-concurrency 32` on it: the
                         receiver's most requests in flight for it, and the
                         healthy deliveries/s against the baseline (healthy_kept);
  rate_limit_baseline    as the baseline with 1,000 limited events;
  rate_limit_100_per_s   the same with `--rate-limit 100/s` on it: the most
                         requests started in any sliding second, and healthy_kept.
Healthy throughput is timed until every healthy delivery was answered by the
receiver; the limited webhook's time is reported apart.

defaults: one worker with no flags draining 50,000 deliveries to one fast
webhook; one worker at --concurrency 1024 draining 100,000 over eight
webhooks that answer in 100 ms (/tag/slow<k>/100/...), against the ceiling
1024 / 0.1 s = 10,240/s; and the isolation run (150,000 events, 10% to a
webhook that hangs until its 5 s timeout) at the default concurrency.

slow: one worker at --concurrency draining --scale-events (20,000) over
--webhooks webhooks that answer in 100 ms, against concurrency / 0.1 s, and
the slot's turnaround (concurrency / deliveries per second).

cluster: a three-node Redis Cluster (no replicas) on spare loopback ports,
against the benchmark's single Redis: end to end with 8 webhooks and 1, 2, 4
and 8 workers at --concurrency 64, same events, with deliveries/s, Redis
commands per delivery (INFO commandstats summed over the nodes after CONFIG
RESETSTAT on each; info/config/flush/cluster commands left out) and Postgres
statements per delivery.
"""
import json
import os
import random
import re
import socket
import subprocess
import tempfile
import time
import urllib.request

import bench as B
from services import wait_port

HEALTHY_WEBHOOKS = 7
LIMITED_MS = 20
# Redis commands the benchmark (or a cluster client's topology look-ups) sends.
NOT_COUNTED = ("info", "config", "flushdb", "flushall", "cluster")


def receiver_tags(bench):
    with urllib.request.urlopen(bench.receiver_url("/tags")) as r:
        return json.load(r)


def reset_tags(bench):
    urllib.request.urlopen(urllib.request.Request(bench.receiver_url("/tags/reset"), method="POST")).read()


def limited_events_file(bench, healthy, limited):
    """`healthy` events over Doc0..Doc6 and `limited` Lim events spread evenly among them."""
    total = healthy + limited
    f = tempfile.NamedTemporaryFile("w", suffix=".ndjson", delete=False, dir=bench.workdir)
    h = 0
    for i in range(total):
        if (i * limited) // total != ((i + 1) * limited) // total:
            entity = "Lim"
        else:
            entity = f"Doc{h % HEALTHY_WEBHOOKS}"
            h += 1
        doc = {"name": f"SO-{i:07d}", "customer": "ACME Corporation", "grand_total": 1234.5 + i,
               "status": "Submitted", "items": [{"sku": "A-1", "qty": 2}], "note": B.PAD}
        f.write(json.dumps({"entity_type": entity, "event": "on_submit", "name": doc["name"], "doc": doc}) + "\n")
    f.close()
    return f.name


def fleet_run(bench, label, healthy, limited, limit_args=(), workers=4, concurrency=256, timeout=300):
    fleet = B.Fleet(bench, 0)
    try:
        for k in range(HEALTHY_WEBHOOKS):
            fleet.run("hookfleet", "webhook", "add", f"ok-{k}", "--entity-type", f"Doc{k}", "--event", "on_submit",
                      "--url", bench.receiver_url(f"/tag/ok{k}/0/x"), "--secret", "bench-secret", "--timeout", "10s")
        fleet.run("hookfleet", "webhook", "add", "limited", "--entity-type", "Lim", "--event", "on_submit",
                  "--url", bench.receiver_url(f"/tag/lim/{LIMITED_MS}/x"), "--secret", "bench-secret",
                  "--timeout", "10s", *limit_args)
        path = limited_events_file(bench, healthy, limited)
        reset_tags(bench)
        procs = fleet.start_workers(workers, concurrency)
        time.sleep(1.0)  # connected and waiting
        t0 = time.monotonic()
        emit_s = fleet.emit(path)
        t_healthy = t_limited = None
        while t_healthy is None or t_limited is None:
            tags = receiver_tags(bench)
            now = time.monotonic()
            got_healthy = sum(v["done"] for k, v in tags.items() if k.startswith("ok"))
            got_limited = tags.get("lim", {}).get("done", 0)
            if t_healthy is None and got_healthy >= healthy:
                t_healthy = now
            if t_limited is None and got_limited >= limited:
                t_limited = now
            if now - t0 > timeout:
                raise SystemExit(f"{label}: {got_healthy}/{healthy} healthy, {got_limited}/{limited} limited "
                                 f"after {timeout}s")
            time.sleep(0.02)
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)
        tags = receiver_tags(bench)
        lim = tags.get("lim", {})
        os.unlink(path)
        r = {"run": label, "limits": " ".join(limit_args) or "none", "workers": workers,
             "concurrency": concurrency, "healthy_events": healthy, "limited_events": limited,
             "emit_s": round(emit_s, 3),
             "healthy_seconds": round(t_healthy - t0, 3), "healthy_per_s": round(healthy / (t_healthy - t0)),
             "limited_seconds": round(t_limited - t0, 3), "limited_per_s": round(limited / (t_limited - t0)),
             "lim_max_in_flight": lim.get("max_in_flight"), "lim_max_per_s": lim.get("max_per_s"),
             "lim_max_per_wall_s": lim.get("max_per_wall_s"), "lim_per_wall_s": lim.get("per_wall_s"),
             "lim_requests": lim.get("count"),
             "healthy_max_in_flight": max(v["max_in_flight"] for k, v in tags.items() if k.startswith("ok"))}
        B.log(f"fleet {r}")
        return r
    finally:
        fleet.drop()


def fleet(bench, events=40_000):
    """Fleet-wide limits across four workers: see the module docstring."""
    limited = events // 8
    healthy = events - limited
    out = {"events": events, "workers": 4, "concurrency": 256, "limited_ms": LIMITED_MS}
    out["baseline"] = fleet_run(bench, "baseline", healthy, limited)
    r = fleet_run(bench, "max_concurrency_32", healthy, limited, ("--max-concurrency", "32"))
    r["healthy_kept"] = round(r["healthy_per_s"] / out["baseline"]["healthy_per_s"], 3)
    r["limit_held"] = r["lim_max_in_flight"] <= 32
    out["max_concurrency_32"] = r
    out["rate_limit_baseline"] = fleet_run(bench, "rate_limit_baseline", healthy, 1_000)
    r = fleet_run(bench, "rate_limit_100_per_s", healthy, 1_000, ("--rate-limit", "100/s"))
    r["healthy_kept"] = round(r["healthy_per_s"] / out["rate_limit_baseline"]["healthy_per_s"], 3)
    r["limit_held"] = r["lim_max_per_s"] <= 105
    out["rate_limit_100_per_s"] = r
    return out


def free_cluster_port():
    """A loopback port free for a node and for its cluster bus (port + 10000)."""
    for _ in range(200):
        port = random.randint(20000, 50000)
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
    raise SystemExit("no spare port pair for a cluster node")


class Cluster:
    """A Redis Cluster of `nodes` masters on loopback, for Fleet(redis=...)."""

    def __init__(self, workdir, nodes=3):
        self.ports = []
        while len(self.ports) < nodes:
            p = free_cluster_port()
            if all(abs(p - q) > 1 for q in self.ports):
                self.ports.append(p)
        self.dir = os.path.join(workdir, "redis-cluster")
        self.procs = []
        self.url = ",".join(f"redis://127.0.0.1:{p}" for p in self.ports)
        self.env = {"HOOKFLEET_REDIS_CLUSTER": "true"}

    def cli(self, port, *args):
        return B.sh(["redis-cli", "-p", str(port), *args])

    def start(self):
        for p in self.ports:
            d = os.path.join(self.dir, str(p))
            os.makedirs(d)
            self.procs.append(subprocess.Popen(
                ["redis-server", "--port", str(p), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                 "--cluster-config-file", os.path.join(d, "nodes.conf"), "--save", "", "--appendonly", "no",
                 "--dir", d], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for p in self.ports:
            wait_port(p)
        B.sh(["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
              "--cluster-replicas", "0", "--cluster-yes"])
        deadline = time.monotonic() + 30
        while not all("cluster_state:ok" in self.cli(p, "CLUSTER", "INFO") for p in self.ports):
            if time.monotonic() > deadline:
                raise SystemExit("the Redis Cluster did not reach cluster_state:ok in 30 s")
            time.sleep(0.2)

    def stop(self):
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()
        self.procs = []

    def flush(self):
        for p in self.ports:
            self.cli(p, "FLUSHALL")

    def resetstat(self):
        for p in self.ports:
            self.cli(p, "CONFIG", "RESETSTAT")

    def commandstats(self):
        return [self.cli(p, "INFO", "commandstats") for p in self.ports]


def count_commands(infos):
    """Redis calls by command over `INFO commandstats` outputs, the benchmark's own left out."""
    by = {}
    for info in infos:
        for m in re.finditer(r"cmdstat_([\w|]+):calls=(\d+)", info):
            name = m.group(1)
            if name.split("|")[0] not in NOT_COUNTED:
                by[name] = by.get(name, 0) + int(m.group(2))
    return by


def e2e_run(bench, target, cluster, events, workers, concurrency=64, webhooks=8):
    fleet = B.Fleet(bench, webhooks, redis=cluster)
    try:
        path = fleet.events_file(events)
        base = bench.receiver_stats()["by_path_prefix"].get("ok", 0)
        bench.psql(fleet.db, "SELECT pg_stat_statements_reset()")
        if cluster:
            cluster.resetstat()
        else:
            bench.redis_cli("CONFIG", "RESETSTAT")
        procs = fleet.start_workers(workers, concurrency)
        time.sleep(1.0)  # connected and waiting
        t0 = time.monotonic()
        emit_s = fleet.emit(path)
        B.wait_received(bench, base + events, timeout=300)
        while fleet.delivered() < events:
            time.sleep(0.02)
        t1 = time.monotonic()
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)
        counts = B.statement_counts(bench, fleet.db, events)  # Postgres, and the single Redis
        by = count_commands(cluster.commandstats() if cluster else [bench.redis_cli("INFO", "commandstats")])
        total = sum(by.values())
        os.unlink(path)
        r = {"redis": target, "workers": workers, "concurrency": concurrency, "webhooks": webhooks,
             "events": events, "seconds": round(t1 - t0, 3), "deliveries_per_s": round(events / (t1 - t0)),
             "emit_events_per_s": round(events / emit_s),
             "pg_statements_per_delivery": counts["pg_statements_per_delivery"],
             "redis_commands_per_delivery": round(total / events, 3),
             "redis_top_commands_per_delivery": {k: round(v / events, 3) for k, v in
                                                 sorted(by.items(), key=lambda kv: -kv[1])[:8]}}
        B.log(f"cluster {r}")
        return r
    finally:
        fleet.drop()


def cluster(bench, events=30_000, worker_counts=(1, 2, 4, 8)):
    """The same end-to-end runs against a three-node Redis Cluster and the single Redis."""
    c = Cluster(bench.workdir)
    c.start()
    B.log(f"redis cluster up on ports {c.ports}")
    try:
        runs = []
        for workers in worker_counts:
            for target in ("cluster", "single"):
                runs.append(e2e_run(bench, target, c if target == "cluster" else None, events, workers))
    finally:
        c.stop()
    single = {r["workers"]: r for r in runs if r["redis"] == "single"}
    for r in runs:
        if r["redis"] == "cluster":
            r["vs_single"] = round(r["deliveries_per_s"] / single[r["workers"]]["deliveries_per_s"], 3)
    return {"events": events, "webhooks": 8, "concurrency": 64, "cluster_nodes": 3, "runs": runs}


SLOW_MS = 100
SLOW_CONCURRENCY = 1024


def drain_run(bench, label, events, webhooks, concurrency, path_of, timeout=600):
    """One worker started on `events` queued deliveries over `webhooks`
    webhooks whose URLs `path_of(k)` gives; timed from its start until every
    row is Delivered."""
    fleet = B.Fleet(bench, 0)
    try:
        for k in range(webhooks):
            fleet.run("hookfleet", "webhook", "add", f"bench-{k}", "--entity-type", f"Doc{k}", "--event",
                      "on_submit", "--url", bench.receiver_url(path_of(k)), "--secret", "bench-secret",
                      "--timeout", "10s")
        fleet.webhooks = webhooks
        path = fleet.events_file(events)
        fleet.emit(path)
        prefix = path_of(0).split("/")[1]
        base = bench.receiver_stats()["by_path_prefix"].get(prefix, 0)
        reset_tags(bench)
        bench.psql(fleet.db, "SELECT pg_stat_statements_reset()")
        bench.redis_cli("CONFIG", "RESETSTAT")
        cpu0 = B.cpu_snapshot()
        t0 = time.monotonic()
        procs = fleet.start_workers(1, concurrency)
        # The receiver's counts first: counting rows every 20 ms would take
        # a good share of Postgres's time from the run it measures.
        B.wait_received(bench, base + events, prefix=prefix, timeout=timeout)
        while fleet.delivered() < events:
            time.sleep(0.02)
        t1 = time.monotonic()
        cpu, rss = B.proc_cpu_and_rss(procs[0].pid)
        cpu1 = B.cpu_snapshot()
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=60)
        tags = receiver_tags(bench)
        os.unlink(path)
        r = {"run": label, "events": events, "webhooks": webhooks,
             "concurrency": "default" if concurrency is None else concurrency,
             "seconds": round(t1 - t0, 3), "deliveries_per_s": round(events / (t1 - t0)),
             "worker_peak_rss_mib": round(rss, 1), "worker_cpu_s_per_1000": round(cpu / events * 1000, 3),
             "sum_of_max_in_flight": sum(v["max_in_flight"] for v in tags.values()) if tags else None,
             # Requests started in each clock second (the tags start within
             # the same second): the ramp, the steady rate and the tail.
             "started_per_wall_s": [sum(v["per_wall_s"][i] for v in tags.values() if i < len(v["per_wall_s"]))
                                    for i in range(max((len(v["per_wall_s"]) for v in tags.values()), default=0))],
             "cpu_s_per_1000_by_process": {k: round((cpu1[k] - cpu0[k]) / events * 1000, 3) for k in cpu1},
             **B.statement_counts(bench, fleet.db, events)}
        B.log(f"defaults {r}")
        return r
    finally:
        fleet.drop()


def slow(bench, events, concurrency, webhooks):
    """`--only slow`: one worker at `concurrency` draining `events` over
    `webhooks` webhooks that answer in 100 ms, against the ceiling
    concurrency / 0.1 s: how long a slot takes to turn around."""
    r = drain_run(bench, f"{webhooks}_webhooks_100ms_concurrency_{concurrency}", events, webhooks,
                  concurrency, lambda k: f"/tag/slow{k}/{SLOW_MS}/x")
    r["ceiling_per_s"] = round(concurrency / (SLOW_MS / 1000))
    r["of_ceiling"] = round(r["deliveries_per_s"] / r["ceiling_per_s"], 3)
    r["slot_turnaround_ms"] = round(concurrency / r["deliveries_per_s"] * 1000, 1)
    return r


def defaults(bench, events=50_000, slow_events=100_000):
    """What the user who never reads the flags gets (see the module docstring)."""
    out = {"no_flags_one_fast_webhook": drain_run(bench, "no_flags_one_fast_webhook", events, 1, None,
                                                  lambda k: f"/ok/{k}")}
    r = drain_run(bench, "eight_webhooks_100ms_concurrency_1024", slow_events, 8, SLOW_CONCURRENCY,
                  lambda k: f"/tag/slow{k}/{SLOW_MS}/x")
    r["ceiling_per_s"] = round(SLOW_CONCURRENCY / (SLOW_MS / 1000))
    r["of_ceiling"] = round(r["deliveries_per_s"] / r["ceiling_per_s"], 3)
    out["eight_webhooks_100ms_concurrency_1024"] = r
    out["isolation_default_concurrency"] = B.isolation(bench, 150_000, None)
    return out
